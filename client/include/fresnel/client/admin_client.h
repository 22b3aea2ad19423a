// fresnel::AdminClient: what a server is and how busy it is (AdminService.GetServerInfo,
// GetStats; GetStats needs an admin token on a server with --token-file) and its grpc.health.v1
// answer. Shares a Client's channel, options and deadlines; thread-safe like it. Every call
// blocks until its answer arrives or its deadline passes.
//
// fresnel::Client's GetServerInfo, GetStats, InjectFault and CheckHealth are these calls.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fresnel/client/client.h"
#include "fresnel/v1/admin.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"

namespace fresnel {

class AdminClient {
 public:
  // `client` must outlive this object.
  explicit AdminClient(Client* client);
  ~AdminClient();

  absl::StatusOr<v1::ServerInfo> GetServerInfo(const CallOptions& call = {});
  absl::StatusOr<v1::ServerStats> GetStats(const CallOptions& call = {});
  // AdminService.InjectFault (a test switch: the server needs --fault-injection); client.h says
  // more.
  absl::StatusOr<v1::InjectFaultResponse> InjectFault(const std::string& device_id,
                                                      v1::FaultKind kind,
                                                      const CallOptions& call = {});
  // grpc.health.v1 Check of `service` ("" = the whole server); kServiceUnknown for a service
  // the server does not know.
  absl::StatusOr<ServingStatus> CheckHealth(const std::string& service = "",
                                            const CallOptions& call = {});

 private:
  Client* client_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<grpc::GenericStub> generic_;  // the health check (no generated stub: health_codec.h)
};

}  // namespace fresnel
