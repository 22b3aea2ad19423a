#include "server_fixture.h"

#include <catch2/catch.hpp>
#include <chrono>

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

RawBidiCall::RawBidiCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method)
    : stub_(channel) {
  ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  call_ = stub_.PrepareCall(&ctx_, method, &cq_);
  call_->StartCall(reinterpret_cast<void*>(1));
  Wait(1);
}

RawBidiCall::~RawBidiCall() {
  cq_.Shutdown();
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
  }
}

bool RawBidiCall::Wait(intptr_t tag) {
  void* got = nullptr;
  bool ok = false;
  if (!cq_.Next(&got, &ok)) return false;
  if (got != reinterpret_cast<void*>(tag)) return false;
  return ok;
}

bool RawBidiCall::Write(const std::string& bytes) {
  grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1);
  call_->Write(buffer, reinterpret_cast<void*>(2));
  return Wait(2);
}

void RawBidiCall::WritesDone() {
  call_->WritesDone(reinterpret_cast<void*>(3));
  Wait(3);
}

grpc::Status RawBidiCall::ReadAllAndFinish(int* responses) {
  int n = 0;
  for (;;) {
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, reinterpret_cast<void*>(4));
    if (!Wait(4)) break;
    ++n;
  }
  if (responses != nullptr) *responses = n;
  grpc::Status status;
  call_->Finish(&status, reinterpret_cast<void*>(5));
  Wait(5);
  return status;
}

std::unique_ptr<Client> ConnectClient(const TestServer& ts, std::chrono::milliseconds timeout,
                                      int64_t max_message_bytes) {
  ClientOptions options;
  options.address = ts.address;
  options.default_timeout = timeout;
  options.max_message_bytes = max_message_bytes;
  auto client = Client::Connect(options);
  REQUIRE(client.ok());
  return std::move(*client);
}

}  // namespace fresnel::testing
