#include "server/auth.h"

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fresnel::server {
namespace {

constexpr size_t kMaxNameBytes = 128;

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  return text.str();
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-' &&
        ch != '@') {
      return false;
    }
  }
  return true;
}

bool ValidToken(absl::string_view token) {
  if (token.size() < kMinTokenBytes) return false;
  for (char ch : token) {
    if (!std::isgraph(static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

// Compares without an early exit, so that the time taken does not tell how much of a guessed
// token was right (the length may leak; tokens are long and random).
bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::string_view Value(const grpc::AuthMetadataProcessor::InputMetadata& md,
                        absl::string_view key) {
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  if (it == md.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

}  // namespace

absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(absl::string_view text,
                                                       absl::string_view source) {
  std::vector<TokenEntry> entries;
  std::set<std::string> names, tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " line ", line_number, ": ", why,
                       " (each line is NAME TOKEN or NAME TOKEN admin)"));
    };
    if (fields.size() < 2 || fields.size() > 3) {
      return bad(absl::StrCat("expected 2 or 3 fields, got ", fields.size()));
    }
    TokenEntry e;
    e.name = std::string(fields[0]);
    e.token = std::string(fields[1]);
    if (!ValidName(e.name)) {
      return bad(absl::StrCat("name '", e.name.substr(0, kMaxNameBytes),
                              "' must be 1 to 128 letters, digits or . _ - @"));
    }
    if (!ValidToken(e.token)) {
      // The token itself is not echoed: error messages end up in logs.
      return bad(absl::StrCat("the token of '", e.name, "' must be at least ", kMinTokenBytes,
                              " printable characters"));
    }
    if (fields.size() == 3) {
      if (fields[2] != "admin") {
        return bad(absl::StrCat("third field must be 'admin', got '", fields[2], "'"));
      }
      e.admin = true;
    }
    if (!names.insert(e.name).second) return bad(absl::StrCat("name '", e.name, "' repeats"));
    if (!tokens.insert(e.token).second) {
      return bad(absl::StrCat("the token of '", e.name, "' is also another name's token"));
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

bool IsAdminMethod(absl::string_view full_method) {
  return full_method == "/fresnel.v1.AdminService/GetStats" ||
         full_method == "/fresnel.v1.AdminService/InjectFault";
}

bool IsOpenMethod(absl::string_view full_method) {
  return absl::StartsWith(full_method, "/grpc.health.v1.Health/");
}

absl::StatusOr<std::shared_ptr<TokenAuthenticator>> TokenAuthenticator::Load(
    const std::string& path) {
  std::shared_ptr<TokenAuthenticator> auth(new TokenAuthenticator(path));
  absl::Status loaded = auth->Reload();
  if (!loaded.ok()) return loaded;
  return auth;
}

absl::Status TokenAuthenticator::Reload() {
  absl::StatusOr<std::string> text = ReadFile(path_, "--token-file");
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<TokenEntry>> entries =
      ParseTokenFile(*text, absl::StrCat("--token-file ", path_));
  if (!entries.ok()) return entries.status();
  auto table = std::make_shared<Table>();
  for (TokenEntry& e : *entries) table->push_back(std::make_shared<const TokenEntry>(std::move(e)));
  std::lock_guard<std::mutex> lock(mu_);
  table_ = std::move(table);
  return absl::OkStatus();
}

std::shared_ptr<const TokenEntry> TokenAuthenticator::Find(absl::string_view token) const {
  std::shared_ptr<const Table> table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table = table_;
  }
  std::shared_ptr<const TokenEntry> found;
  if (table == nullptr) return found;
  // Every entry is compared (no early exit), like each comparison.
  for (const auto& e : *table) {
    if (ConstantTimeEqual(e->token, token)) found = e;
  }
  return found;
}

size_t TokenAuthenticator::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_ == nullptr ? 0 : table_->size();
}

grpc::Status TokenAuthenticator::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* consumed_auth_metadata,
                                         OutputMetadata* /*response_metadata*/) {
  const absl::string_view method = Value(auth_metadata, ":path");
  const absl::string_view header = Value(auth_metadata, "authorization");
  if (IsOpenMethod(method)) return grpc::Status::OK;
  if (header.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this server requires a bearer token (metadata 'authorization: Bearer "
                        "TOKEN'; fresnel CLI: --token-file or FRESNEL_TOKEN)");
  }
  absl::string_view token = header;
  if (!absl::ConsumePrefix(&token, "Bearer ") && !absl::ConsumePrefix(&token, "bearer ")) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the authorization metadata must be 'Bearer TOKEN'");
  }
  std::shared_ptr<const TokenEntry> entry = Find(absl::StripAsciiWhitespace(token));
  if (entry == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "unknown bearer token");
  }
  if (IsAdminMethod(method) && !entry->admin) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(std::string(method), " needs an admin token; '", entry->name, "' is not one"));
  }
  // The token goes no further than this check (handlers never see it).
  consumed_auth_metadata->insert({"authorization", std::string(header)});
  context->AddProperty(kClientProperty, entry->name);
  return grpc::Status::OK;
}

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:")) return true;
  const size_t colon = address.rfind(':');
  absl::string_view host = colon == absl::string_view::npos ? address : address.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const ServerConfig& config, std::shared_ptr<TokenAuthenticator> tokens) {
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (!config.tls_client_ca.empty() && config.tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key as well");
  }
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!config.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadFile(config.tls_cert, "--tls-cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(config.tls_key, "--tls-key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions options(
        config.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!config.tls_client_ca.empty()) {
      absl::StatusOr<std::string> ca = ReadFile(config.tls_client_ca, "--tls-client-ca");
      if (!ca.ok()) return ca.status();
      options.pem_root_certs = *std::move(ca);
    }
    options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
    creds = grpc::SslServerCredentials(options);
  } else if (tokens != nullptr) {
    if (!IsLoopbackAddress(config.listen)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--token-file without --tls-cert: bearer tokens would cross the network in the clear "
          "to --listen ", config.listen,
          "; listen on loopback (127.0.0.1:PORT, [::1]:PORT, unix:PATH) or add --tls-cert and "
          "--tls-key"));
    }
    creds = grpc::experimental::LocalServerCredentials(
        absl::StartsWith(config.listen, "unix:") ? UDS : LOCAL_TCP);
  } else {
    return grpc::InsecureServerCredentials();
  }
  if (tokens != nullptr) creds->SetAuthMetadataProcessor(std::move(tokens));
  return creds;
}

}  // namespace fresnel::server
