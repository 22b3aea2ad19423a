// An in-process fresneld on a free loopback port, with raw gRPC stubs for its services.
#pragma once

#include <memory>
#include <string>

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

}  // namespace fresnel::testing
