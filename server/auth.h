// Authentication of fresneld's callers (docs/security.md): the transport (plaintext, TLS or mutual
// TLS, ServerCredentialsFor) and bearer tokens from a token file, checked for every RPC in one
// place, TokenAuthenticator, a grpc::AuthMetadataProcessor.
//
// Why an AuthMetadataProcessor and not a server interceptor: gRPC C++ 1.51's server interceptors
// cannot end a call with a status of their own choosing (TryCancel answers CANCELLED, after the
// handler has already been created), whereas a processor runs before any handler exists and its
// status (UNAUTHENTICATED, PERMISSION_DENIED) is what the client receives. It also records the
// caller's name in the call's AuthContext, where ClientOf (server/call.h) reads it. A processor
// only runs on secure server credentials: TLS, or gRPC's local credentials, which accept loopback
// connections only — so tokens over plaintext are possible on loopback and refused elsewhere.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/config.h"

namespace fresnel::server {

// The AuthContext property that names the authenticated client (ClientOf reads it).
inline constexpr char kClientProperty[] = "fresnel.client";
// Shortest token the token file accepts.
inline constexpr size_t kMinTokenBytes = 16;

struct TokenEntry {
  std::string name;   // the client: owner of its jobs, sessions and meshes
  std::string token;  // the bearer secret
  bool admin = false;
};

// Parses a token file's text. One client per line: `NAME TOKEN [admin]`, separated by spaces or
// tabs; blank lines and lines starting with '#' are skipped. NAME: letters, digits and . _ - @
// (at most 128); TOKEN: at least kMinTokenBytes printable characters without spaces. Names and
// tokens must be unique. INVALID_ARGUMENT naming `source` and the line for anything else.
absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(absl::string_view text,
                                                       absl::string_view source);

// Whether `full_method` ("/package.Service/Method") needs an admin token: the AdminService
// methods that report on the whole server rather than the caller (GetStats: every device's
// load, every client's job counts). GetServerInfo (limits, devices) stays open to every client.
bool IsAdminMethod(absl::string_view full_method);
// Methods answered without a token: grpc.health.v1.Health (load balancers and kubelet probes
// carry no credentials; it tells nothing but SERVING / NOT_SERVING).
bool IsOpenMethod(absl::string_view full_method);

// Checks the `authorization: Bearer TOKEN` metadata of every call against the token file.
// Missing or unknown token: UNAUTHENTICATED; a non-admin token on an admin method:
// PERMISSION_DENIED; otherwise the call proceeds with kClientProperty set to the token's name.
// Thread-safe; Reload() swaps the table atomically for the calls that start after it.
class TokenAuthenticator : public grpc::AuthMetadataProcessor {
 public:
  // Reads and parses `path` (errors name the file).
  static absl::StatusOr<std::shared_ptr<TokenAuthenticator>> Load(const std::string& path);

  // Reads the file again. On error the previous table stays in force and the error is returned.
  absl::Status Reload();
  // The entry whose token is `token` (constant-time comparison), or null.
  std::shared_ptr<const TokenEntry> Find(absl::string_view token) const;
  size_t size() const;

  bool IsBlocking() const override { return false; }  // a table lookup: no I/O
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  explicit TokenAuthenticator(std::string path) : path_(std::move(path)) {}
  using Table = std::vector<std::shared_ptr<const TokenEntry>>;

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const Table> table_;
};

// The credentials of the gRPC port for `config`: TLS when --tls-cert/--tls-key are set (mutual
// TLS with --tls-client-ca: clients must present a certificate it signed), else gRPC's local
// credentials when `tokens` is set (loopback or unix: --listen only; INVALID_ARGUMENT otherwise,
// since the tokens would cross the network in the clear), else plaintext. `tokens`, when set,
// becomes the credentials' AuthMetadataProcessor. INVALID_ARGUMENT naming the flag for a flag
// without its partner or an unreadable file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const ServerConfig& config, std::shared_ptr<TokenAuthenticator> tokens);

// Whether HOST:PORT (or unix:PATH) names a loopback address: 127.0.0.0/8, ::1, localhost.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace fresnel::server
