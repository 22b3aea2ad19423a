// An in-process fresneld on a free loopback port, with raw gRPC stubs for its services.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "fresnel/client/client.h"
#include "google/protobuf/message.h"
#include "grpcpp/generic/generic_stub.h"
#include "fresnel/v1/admin.grpc.pb.h"
#include "fresnel/v1/interpolation.grpc.pb.h"
#include "fresnel/v1/unwrap.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/config.h"
#include "server/server.h"

namespace fresnel::testing {

struct TestServer {
  // gpus: "none" for the CPU pool only, "all" for every visible GPU.
  explicit TestServer(server::ServerConfig config = {});
  ~TestServer();

  static server::ServerConfig CpuConfig();

  std::unique_ptr<server::FresnelServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::InterpolationService::Stub> interp;
  std::unique_ptr<v1::UnwrapService::Stub> unwrap;
  std::unique_ptr<v1::AdminService::Stub> admin;
  std::string address;
};

// A client library Client on `ts` (REQUIREs the connection). `timeout`: its default deadline
// (0: ClientOptions' default); `max_message_bytes`: its message cap.
std::unique_ptr<Client> ConnectClient(const TestServer& ts,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(120),
                                      int64_t max_message_bytes = 64 << 20);

// A bidi call that sends raw bytes per message, as a hostile or broken client does: for messages
// that do not parse. One operation at a time; every wait is bounded by a 30 s deadline.
class RawBidiCall {
 public:
  RawBidiCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method);
  ~RawBidiCall();
  bool Write(const std::string& bytes);
  bool Write(const google::protobuf::Message& message) {
    return Write(message.SerializeAsString());
  }
  void WritesDone();
  // Reads every response until the server ends the call, then its status.
  grpc::Status ReadAllAndFinish(int* responses = nullptr);

 private:
  bool Wait(intptr_t tag);
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  grpc::GenericStub stub_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

}  // namespace fresnel::testing
