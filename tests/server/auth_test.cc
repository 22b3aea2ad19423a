// Security (server/auth.h, docs/security.md): the token file's format, TLS and mutual TLS on the
// gRPC port (certificates made at test time with the openssl CLI), bearer tokens checked for
// every RPC (UNAUTHENTICATED / PERMISSION_DENIED, reload), ownership of jobs and meshes between
// two clients, and --reflection=false. The real binary's SIGHUP reload and /metrics behind basic
// auth: auth_test.sh.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "fresnel/client/client.h"
#include "fresnel/client/volume_client.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/volume/mesh.h"
#include "grpcpp/generic/generic_stub.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/server.h"
#include "server_fixture.h"

namespace fresnel {
namespace {

namespace fs = std::filesystem;
using server::FresnelServer;
using server::ServerConfig;

constexpr char kAliceToken[] = "alice-0123456789abcdef";
constexpr char kBobToken[] = "bob-0123456789abcdef00";
constexpr char kRootToken[] = "root-0123456789abcdef0";

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// A temporary directory holding a CA, a server certificate for localhost / 127.0.0.1, client
// certificates (CN alice, CN bob) the CA signed, one (CN mallory) that another CA signed, and a token
// file. Made once per test binary with the openssl CLI.
struct Pki {
  fs::path dir;
  Pki() {
    char pattern[] = "/tmp/fresnel-auth-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    dir = pattern;
    const std::string script = absl::StrCat(R"(set -e
cd ')", dir.string(), R"('
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
ca() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() {  # name CN ca ext
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2"
  printf '%s\n' "basicConstraints=CA:FALSE" "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 2 \
    -out "$1.pem" -extfile "$1.ext" 2>/dev/null
}
ca ca "fresnel test CA"
ca rogue "rogue CA"
leaf server localhost ca "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
leaf alice alice ca "extendedKeyUsage=clientAuth"
leaf bob bob ca "extendedKeyUsage=clientAuth"
leaf mallory mallory rogue "extendedKeyUsage=clientAuth"
)");
    const fs::path sh = dir / "make.sh";
    std::ofstream(sh) << script;
    REQUIRE(std::system(absl::StrCat("bash '", sh.string(), "' > '", (dir / "openssl.log").string(),
                                     "' 2>&1")
                            .c_str()) == 0);
    WriteTokens(absl::StrCat("# test clients\nalice ", kAliceToken, "\n\tbob   ", kBobToken,
                             "\nroot ", kRootToken, " admin\n"));
  }
  ~Pki() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string operator()(const std::string& name) const { return (dir / name).string(); }
  void WriteTokens(const std::string& text) const { std::ofstream(dir / "tokens") << text; }
};

const Pki& TestPki() {
  static Pki pki;
  return pki;
}

ServerConfig Config() {
  ServerConfig c = testing::TestServer::CpuConfig();
  c.cpu_workers = 1;
  return c;
}

// The test server with TLS (the Pki's server certificate), mutual with `client_ca`.
ServerConfig TlsConfig(const std::string& client_ca = "") {
  const Pki& pki = TestPki();
  ServerConfig c = Config();
  c.tls_cert = pki("server.pem");
  c.tls_key = pki("server.key");
  if (!client_ca.empty()) c.tls_client_ca = pki(client_ca);
  return c;
}

std::unique_ptr<FresnelServer> Start(const ServerConfig& c) {
  auto s = FresnelServer::Start(c);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return std::move(*s);
}

ClientOptions Options(const FresnelServer& s) {
  ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", s.port());
  o.default_timeout = std::chrono::seconds(20);
  return o;
}

std::unique_ptr<Client> Connect(const ClientOptions& o) {
  auto c = Client::Connect(o);
  REQUIRE(c.ok());
  return std::move(*c);
}

// The status of GetServerInfo through a client with `o`.
absl::Status Info(const ClientOptions& o) {
  auto c = Client::Connect(o);
  if (!c.ok()) return c.status();
  return (*c)->GetServerInfo().status();
}

ClientOptions WithToken(ClientOptions o, const char* token) {
  o.token = token;
  return o;
}

v1::UnwrapRequest SmallUnwrap(float offset) {
  v1::UnwrapRequest r;
  HostArray phase(DType::kFloat32, {16, 16});
  float* p = static_cast<float*>(phase.raw());
  for (int i = 0; i < 256; ++i) p[i] = offset + 0.01f * static_cast<float>(i % 16);
  ToProto(phase, r.mutable_phase());
  r.mutable_device()->set_kind(v1::DEVICE_KIND_CPU);
  return r;
}

TEST_CASE("the token file: NAME TOKEN [admin] per line, errors name the line",
          "[server][auth]") {
  auto ok = server::ParseTokenFile(
      "# comment\n\n  alice  aaaaaaaaaaaaaaaa \nbob\tbbbbbbbbbbbbbbbb\tadmin\r\n", "t");
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 2);
  CHECK((*ok)[0].name == "alice");
  CHECK((*ok)[0].token == "aaaaaaaaaaaaaaaa");
  CHECK_FALSE((*ok)[0].admin);
  CHECK((*ok)[1].name == "bob");
  CHECK((*ok)[1].admin);
  CHECK(server::ParseTokenFile("", "t")->empty());

  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : {Bad{"alice\n", "line 1: expected 2 or 3 fields"},
                       Bad{"# x\nalice short\n", "line 2: the token of 'alice' must be at least"},
                       Bad{"alice aaaaaaaaaaaaaaaa root\n", "third field must be 'admin'"},
                       Bad{"al/ice aaaaaaaaaaaaaaaa\n", "name 'al/ice'"},
                       Bad{"a aaaaaaaaaaaaaaaa\na bbbbbbbbbbbbbbbb\n", "line 2: name 'a' repeats"},
                       Bad{"a aaaaaaaaaaaaaaaa\nb aaaaaaaaaaaaaaaa\n", "also another name's"},
                       Bad{"a aaaaaaaaaaaaaaaa admin extra\n", "got 4"}}) {
    auto parsed = server::ParseTokenFile(b.text, "tokens.txt");
    INFO(b.text);
    REQUIRE(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(parsed.status().message(), "tokens.txt"));
    CHECK(Contains(parsed.status().message(), b.says));
    CHECK_FALSE(Contains(parsed.status().message(), "aaaaaaaaaaaaaaaa"));  // no secret in logs
  }
  CHECK(server::IsLoopbackAddress("127.0.0.1:0"));
  CHECK(server::IsLoopbackAddress("localhost:50051"));
  CHECK(server::IsLoopbackAddress("[::1]:50051"));
  CHECK(server::IsLoopbackAddress("unix:/tmp/fresnel.sock"));
  CHECK_FALSE(server::IsLoopbackAddress("0.0.0.0:50051"));
  CHECK_FALSE(server::IsLoopbackAddress("[::]:50051"));
  CHECK_FALSE(server::IsLoopbackAddress("10.0.0.1:50051"));
}

TEST_CASE("flags that do not fit together are refused before the server starts",
          "[server][auth]") {
  const Pki& pki = TestPki();
  struct Refused {
    std::function<void(ServerConfig*)> set;
    const char* says;
  };
  for (const Refused& r : std::vector<Refused>{
           {[&](ServerConfig* c) { c->tls_cert = pki("server.pem"); }, "--tls-key go together"},
           {[&](ServerConfig* c) { c->tls_client_ca = pki("ca.pem"); }, "--tls-client-ca"},
           {[&](ServerConfig* c) {
              c->tls_cert = pki("server.pem");
              c->tls_key = pki("missing.key");
            },
            "--tls-key: cannot read"},
           // Tokens over plaintext beyond loopback.
           {[&](ServerConfig* c) {
              c->listen = "0.0.0.0:0";
              c->token_file = pki("tokens");
            },
            "in the clear"},
           {[&](ServerConfig* c) { c->token_file = pki("no-such-file"); },
            "--token-file: cannot read"},
           {[&](ServerConfig* c) { c->metrics_auth = true; }, "--metrics-auth needs --token-file"},
       }) {
    ServerConfig c = Config();
    r.set(&c);
    absl::Status st = FresnelServer::Start(c).status();
    INFO(st.ToString());
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(st.message(), r.says));
  }

  // The client refuses to send a token in the clear to a non-loopback address.
  ClientOptions o;
  o.address = "10.1.2.3:50051";
  o.token = kAliceToken;
  CHECK(Client::Connect(o).status().code() == absl::StatusCode::kInvalidArgument);
  o.address = "127.0.0.1:50051,127.0.0.2:50051";
  CHECK(Client::Connect(o).ok());
  o = ClientOptions{};
  o.tls_cert_file = pki("alice.pem");
  CHECK(Contains(Client::Connect(o).status().message(), "tls_key_file"));
}

TEST_CASE("TLS: a plaintext client cannot talk to a TLS server; one that trusts the CA can",
          "[server][auth]") {
  const Pki& pki = TestPki();
  auto s = Start(TlsConfig());
  ClientOptions plain = Options(*s);
  plain.default_timeout = std::chrono::seconds(5);
  CHECK(Info(plain).code() == absl::StatusCode::kUnavailable);

  ClientOptions tls = Options(*s);
  tls.tls_ca_file = pki("ca.pem");
  CHECK(Info(tls).ok());
  ClientOptions by_name = tls;
  by_name.address = absl::StrCat("localhost:", s->port());
  CHECK(Info(by_name).ok());
  // The server's certificate does not name "fresnel.example".
  ClientOptions wrong_name = tls;
  wrong_name.tls_server_name = "fresnel.example";
  wrong_name.default_timeout = std::chrono::seconds(5);
  CHECK(Info(wrong_name).code() == absl::StatusCode::kUnavailable);
  // Signed by a CA the client does not trust.
  ClientOptions rogue = tls;
  rogue.tls_ca_file = pki("rogue.pem");
  rogue.default_timeout = std::chrono::seconds(5);
  CHECK(Info(rogue).code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("mutual TLS: clients must present a certificate the client CA signed",
          "[server][auth]") {
  const Pki& pki = TestPki();
  auto s = Start(TlsConfig("ca.pem"));
  ClientOptions no_cert = Options(*s);
  no_cert.tls_ca_file = pki("ca.pem");
  no_cert.default_timeout = std::chrono::seconds(5);
  CHECK(Info(no_cert).code() == absl::StatusCode::kUnavailable);

  ClientOptions mallory = no_cert;
  mallory.tls_cert_file = pki("mallory.pem");
  mallory.tls_key_file = pki("mallory.key");
  CHECK(Info(mallory).code() == absl::StatusCode::kUnavailable);

  ClientOptions alice = no_cert;
  alice.tls_cert_file = pki("alice.pem");
  alice.tls_key_file = pki("alice.key");
  alice.default_timeout = std::chrono::seconds(20);
  CHECK(Info(alice).ok());

  // Without a token file the certificate's name is the owner ("x509:alice"): bob's certificate
  // is another client.
  ClientOptions bob = alice;
  bob.tls_cert_file = pki("bob.pem");
  bob.tls_key_file = pki("bob.key");
  auto alice_client = Connect(alice);
  auto bob_client = Connect(bob);
  auto submitted = alice_client->SubmitUnwrap(SmallUnwrap(0));
  REQUIRE(submitted.ok());
  auto listed = alice_client->ListUnwrapJobs();
  REQUIRE(listed.ok());
  REQUIRE(listed->jobs_size() == 1);
  CHECK(listed->jobs(0).job_id() == submitted->job().job_id());
  auto bob_listed = bob_client->ListUnwrapJobs();
  REQUIRE(bob_listed.ok());
  CHECK(bob_listed->jobs_size() == 0);
  CHECK(bob_client->GetUnwrapJob(submitted->job().job_id()).status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("bearer tokens: every RPC needs one; admin RPCs need an admin one; SIGHUP reloads",
          "[server][auth]") {
  const Pki& pki = TestPki();
  pki.WriteTokens(absl::StrCat("alice ", kAliceToken, "\nbob ", kBobToken, "\nroot ", kRootToken,
                               " admin\n"));
  ServerConfig c = Config();
  c.token_file = pki("tokens");
  auto s = Start(c);
  const ClientOptions base = Options(*s);

  absl::Status none = Info(base);
  CHECK(none.code() == absl::StatusCode::kUnauthenticated);
  CHECK(Contains(none.message(), "bearer token"));
  CHECK(Info(WithToken(base, "not-a-token-of-this-server")).code() ==
        absl::StatusCode::kUnauthenticated);
  CHECK(Info(WithToken(base, kAliceToken)).ok());
  // Health needs no token (probes carry none).
  CHECK(Connect(base)->CheckHealth().value_or(ServingStatus::kUnknown) == ServingStatus::kServing);
  // Every service, streaming ones included.
  {
    auto anonymous = Connect(base);
    CHECK(anonymous->ListUnwrapJobs().status().code() == absl::StatusCode::kUnauthenticated);
    VolumeClient vc(anonymous.get());
    CHECK(vc.DeleteMesh("x").code() == absl::StatusCode::kUnauthenticated);
  }
  // GetStats (the whole server's load) is an admin RPC.
  absl::Status stats = Connect(WithToken(base, kAliceToken))->GetStats().status();
  CHECK(stats.code() == absl::StatusCode::kPermissionDenied);
  CHECK(Contains(stats.message(), "GetStats needs an admin token"));
  CHECK(Connect(WithToken(base, kRootToken))->GetStats().ok());
  // So is the fault switch (refused by the switch itself here: no --fault-injection).
  absl::Status fault =
      Connect(WithToken(base, kAliceToken))->InjectFault("cpu", v1::FAULT_KIND_UNHEALTHY).status();
  CHECK(fault.code() == absl::StatusCode::kPermissionDenied);
  CHECK(Contains(fault.message(), "InjectFault needs an admin token"));
  CHECK(Connect(WithToken(base, kRootToken))->InjectFault("cpu", v1::FAULT_KIND_UNHEALTHY)
            .status()
            .code() == absl::StatusCode::kFailedPrecondition);

  // A raw token in the metadata of an insecure channel (what grpcurl -plaintext -H sends) is
  // checked the same way.
  {
    auto channel = grpc::CreateChannel(base.address, grpc::InsecureChannelCredentials());
    auto stub = v1::AdminService::NewStub(channel);
    for (const auto& [header, code] :
         {std::pair<std::string, grpc::StatusCode>{absl::StrCat("Bearer ", kBobToken),
                                                   grpc::StatusCode::OK},
          {kBobToken, grpc::StatusCode::UNAUTHENTICATED},
          {"Bearer ", grpc::StatusCode::UNAUTHENTICATED}}) {
      grpc::ClientContext context;
      context.AddMetadata("authorization", header);
      v1::ServerInfo info;
      CHECK(stub->GetServerInfo(&context, v1::GetServerInfoRequest{}, &info).error_code() == code);
    }
  }

  // Reload: bob's token goes, carol's comes; a broken file keeps the tokens in force.
  pki.WriteTokens(absl::StrCat("alice ", kAliceToken, "\ncarol carol-0123456789abcdef\n"));
  REQUIRE(s->ReloadTokens().ok());
  CHECK(Info(WithToken(base, kBobToken)).code() == absl::StatusCode::kUnauthenticated);
  CHECK(Info(WithToken(base, "carol-0123456789abcdef")).ok());
  pki.WriteTokens("carol short\n");
  absl::Status broken = s->ReloadTokens();
  CHECK(broken.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(broken.message(), "line 1"));
  CHECK(Info(WithToken(base, "carol-0123456789abcdef")).ok());

  // Without a token file there is nothing to reload.
  auto open = Start(Config());
  CHECK(open->ReloadTokens().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Connect(Options(*open))->GetStats().ok());
}

TEST_CASE("bearer tokens over a unix socket", "[server][auth]") {
  const Pki& pki = TestPki();
  pki.WriteTokens(absl::StrCat("alice ", kAliceToken, "\n"));
  ServerConfig c = Config();
  c.listen = absl::StrCat("unix:", pki("fresneld.sock"));
  c.instance = "unix-test";  // the default HOSTNAME:PORT does not fit a socket path
  c.token_file = pki("tokens");
  auto s = Start(c);
  ClientOptions o;
  o.address = c.listen;
  o.default_timeout = std::chrono::seconds(20);
  CHECK(Info(o).code() == absl::StatusCode::kUnauthenticated);
  CHECK(Info(WithToken(o, kAliceToken)).ok());
}

TEST_CASE("bearer tokens over TLS", "[server][auth]") {
  const Pki& pki = TestPki();
  pki.WriteTokens(absl::StrCat("alice ", kAliceToken, "\n"));
  ServerConfig c = TlsConfig();
  c.listen = "0.0.0.0:0";  // allowed: TLS protects the tokens
  c.token_file = pki("tokens");
  auto s = Start(c);
  ClientOptions o = Options(*s);
  o.tls_ca_file = pki("ca.pem");
  CHECK(Info(o).code() == absl::StatusCode::kUnauthenticated);
  CHECK(Info(WithToken(o, kAliceToken)).ok());
}


TEST_CASE("with tokens, a client sees and touches only its own jobs and meshes",
          "[server][auth]") {
  const Pki& pki = TestPki();
  pki.WriteTokens(absl::StrCat("alice ", kAliceToken, "\nbob ", kBobToken, "\n"));
  ServerConfig c = Config();
  c.token_file = pki("tokens");
  auto s = Start(c);
  auto alice = Connect(WithToken(Options(*s), kAliceToken));
  auto bob = Connect(WithToken(Options(*s), kBobToken));

  SubmitOptions key;
  key.idempotency_key = "nightly-1";
  auto job = alice->SubmitUnwrap(SmallUnwrap(0), key);
  REQUIRE(job.ok());
  const std::string id = job->job().job_id();
  REQUIRE(alice->WatchUnwrap(id).ok());

  // Bob: NOT_FOUND everywhere, worded as for an id that never existed.
  const std::string never = "0123456789abcdef0123456789abcdef@" + s->instance();
  const absl::Status unknown = bob->GetUnwrapJob(never).status();
  REQUIRE(unknown.code() == absl::StatusCode::kNotFound);
  for (const absl::Status& st :
       {bob->GetUnwrapJob(id).status(), bob->WatchUnwrap(id).status(),
        bob->GetUnwrapResult(id).status(), bob->CancelUnwrap(id).status()}) {
    CHECK(st.code() == absl::StatusCode::kNotFound);
    CHECK(Contains(st.message(), "unknown job id"));
  }
  auto bob_list = bob->ListUnwrapJobs();
  REQUIRE(bob_list.ok());
  CHECK(bob_list->jobs_size() == 0);
  // Bob's job under the same idempotency key (and another request) is his own new job; alice's
  // retry still finds hers.
  auto bob_job = bob->SubmitUnwrap(SmallUnwrap(1), key);
  REQUIRE(bob_job.ok());
  CHECK_FALSE(bob_job->existing());
  CHECK(bob_job->job().job_id() != id);
  auto again = alice->SubmitUnwrap(SmallUnwrap(0), key);
  REQUIRE(again.ok());
  CHECK(again->existing());
  CHECK(again->job().job_id() == id);

  auto alice_list = alice->ListUnwrapJobs();
  REQUIRE(alice_list.ok());
  REQUIRE(alice_list->jobs_size() == 1);
  CHECK(alice_list->jobs(0).job_id() == id);
  CHECK(alice->GetUnwrapResult(id).ok());

  // Meshes: bob cannot render or delete alice's mesh; the same mesh uploaded by bob is his own.
  volume::GridMeshSpec spec;
  spec.cells_x = spec.cells_y = spec.cells_z = 2;
  auto mesh = volume::GenerateGridMesh(spec);
  REQUIRE(mesh.ok());
  HostArray points(DType::kFloat32, {mesh->num_points(), 3});
  HostArray tets(DType::kInt32, {mesh->num_tets(), 4});
  HostArray scalars(DType::kFloat32, {mesh->num_points()});
  std::memcpy(points.raw(), mesh->points_xyz.data(), points.nbytes());
  std::memcpy(tets.raw(), mesh->tets.data(), tets.nbytes());
  std::memcpy(scalars.raw(), mesh->scalars.data(), scalars.nbytes());
  VolumeClient alice_volume(alice.get()), bob_volume(bob.get());
  auto uploaded = alice_volume.UploadMesh(points, tets, scalars, v1::DEVICE_KIND_CPU);
  REQUIRE(uploaded.ok());
  const std::string mesh_id = uploaded->mesh_id();
  v1::VolumeRenderRequest render;
  render.set_mesh_id(mesh_id);
  CHECK(bob_volume.Render(render).status().code() == absl::StatusCode::kNotFound);
  CHECK(bob_volume.DeleteMesh(mesh_id).code() == absl::StatusCode::kNotFound);
  auto bob_mesh = bob_volume.UploadMesh(points, tets, scalars, v1::DEVICE_KIND_CPU);
  REQUIRE(bob_mesh.ok());
  CHECK_FALSE(bob_mesh->existing());
  CHECK(bob_mesh->mesh_id() != mesh_id);
  auto alice_again = alice_volume.UploadMesh(points, tets, scalars, v1::DEVICE_KIND_CPU);
  REQUIRE(alice_again.ok());
  CHECK(alice_again->existing());
  CHECK(alice_again->mesh_id() == mesh_id);
  CHECK(alice_volume.DeleteMesh(mesh_id).ok());
  CHECK(bob_volume.DeleteMesh(bob_mesh->mesh_id()).ok());
}

// The status of one message to the reflection service.
grpc::StatusCode ReflectionCall(const FresnelServer& s) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", s.port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(3)) {
  }
  return status.error_code();
}

TEST_CASE("--reflection=false takes the reflection service off the port", "[server][auth]") {
  ServerConfig c = Config();
  auto with = Start(c);
  CHECK(ReflectionCall(*with) == grpc::StatusCode::OK);
  c.reflection = false;
  auto without = Start(c);
  CHECK(ReflectionCall(*without) == grpc::StatusCode::UNIMPLEMENTED);
  auto info = Connect(Options(*without))->GetServerInfo();
  REQUIRE(info.ok());
  for (const std::string& name : info->services()) CHECK(!Contains(name, "reflection"));
}

TEST_CASE("fresneld listens on loopback unless told otherwise", "[server][auth]") {
  ServerConfig defaults;
  CHECK(defaults.listen == "127.0.0.1:50051");
  CHECK(defaults.metrics == "127.0.0.1:9464");
  const char* argv[] = {"fresneld", "--reflection=false", "--metrics-auth", "--token-file", "t"};
  auto parsed = server::ParseConfig(5, const_cast<char**>(argv));
  REQUIRE(parsed.ok());
  CHECK_FALSE(parsed->reflection);
  CHECK(parsed->metrics_auth);
  const char* bad[] = {"fresneld", "--metrics-auth"};
  CHECK(server::ParseConfig(2, const_cast<char**>(bad)).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fresnel
