// ChannelCredentialsFor: TLS, client certificates and bearer tokens for the client's channels
// (docs/security.md).
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "fresnel/client/client.h"
#include "grpcpp/security/credentials.h"

namespace fresnel {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": cannot read '", path, "'"));
  }
  return text.str();
}

// Sends `authorization: Bearer TOKEN` with every call. Used over plaintext-to-loopback, where
// gRPC's stock access-token credentials refuse to run (they ask for a privacy-and-integrity
// transport; local TCP connections report no security level).
class BearerPlugin : public grpc::MetadataCredentialsPlugin {
 public:
  explicit BearerPlugin(std::string token) : header_(absl::StrCat("Bearer ", token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
                           std::multimap<grpc::string, grpc::string>* metadata) override {
    metadata->insert({"authorization", header_});
    return grpc::Status::OK;
  }

 private:
  const std::string header_;
};

// Whether every address in `address` (ClientOptions::address forms) is a loopback one.
bool AllLoopback(absl::string_view address) {
  if (absl::ConsumePrefix(&address, "unix:")) return true;
  if (!absl::ConsumePrefix(&address, "ipv4:") && !absl::ConsumePrefix(&address, "ipv6:")) {
    absl::ConsumePrefix(&address, "dns:///");
  }
  for (absl::string_view entry : absl::StrSplit(address, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t colon = entry.rfind(':');
    absl::string_view host = colon == absl::string_view::npos ? entry : entry.substr(0, colon);
    if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
    if (host != "localhost" && host != "::1" && !absl::StartsWith(host, "127.")) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options) {
  const bool tls = options.tls || !options.tls_ca_file.empty() || !options.tls_cert_file.empty() ||
                   !options.tls_key_file.empty() || !options.tls_server_name.empty();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file go together (--tls-cert, --tls-key): give both or neither");
  }
  if (!tls) {
    if (options.token.empty()) return grpc::InsecureChannelCredentials();
    if (!AllLoopback(options.address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "refusing to send a bearer token in the clear to ", options.address,
          ": use TLS (--tls-ca) or a loopback address"));
    }
    return grpc::CompositeChannelCredentials(
        grpc::experimental::LocalCredentials(absl::StartsWith(options.address, "unix:") ? UDS
                                                                                         : LOCAL_TCP),
        grpc::experimental::MetadataCredentialsFromPlugin(
            std::make_unique<BearerPlugin>(options.token), GRPC_SECURITY_NONE));
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(options.tls_ca_file, "tls_ca_file (--tls-ca)");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "tls_cert_file (--tls-cert)");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "tls_key_file (--tls-key)");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(ssl);
  if (!options.token.empty()) {
    creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(options.token));
  }
  return creds;
}

void AddSecurityChannelArgs(const ClientOptions& options, grpc::ChannelArguments* args) {
  if (!options.tls_server_name.empty()) args->SetSslTargetNameOverride(options.tls_server_name);
}

}  // namespace fresnel
