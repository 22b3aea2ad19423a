#include "server_fixture.h"

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"

namespace fresnel::testing {

server::ServerConfig TestServer::CpuConfig() {
  server::ServerConfig c;
  c.listen = "127.0.0.1:0";
  c.metrics = "off";
  c.gpus = "none";
  c.cpu_workers = 2;
  c.queue_length = 16;
  c.drain_timeout_s = 10;
  return c;
}

TestServer::TestServer(server::ServerConfig config) {
  if (config.listen == server::ServerConfig{}.listen) config = CpuConfig();
  auto s = server::FresnelServer::Start(config);
  REQUIRE(s.ok());
  server = std::move(*s);
  address = absl::StrCat("127.0.0.1:", server->port());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  interp = v1::InterpolationService::NewStub(channel);
  unwrap = v1::UnwrapService::NewStub(channel);
  admin = v1::AdminService::NewStub(channel);
}

TestServer::~TestServer() {
  if (server) server->Shutdown();
}

}  // namespace fresnel::testing
