// fresnel.v1.AdminService: what the server is (devices, limits) and how busy it is.
#pragma once

#include <string>
#include <vector>

#include "fresnel/v1/admin.grpc.pb.h"
#include "server/call.h"
#include "server/config.h"

namespace fresnel::server {

class AdminService final : public v1::AdminService::CallbackService {
 public:
  AdminService(ServiceContext* ctx, const ServerConfig& config, std::vector<std::string> services)
      : ctx_(ctx), config_(config), services_(std::move(services)) {}

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::ServerStats* response) override;
  grpc::ServerUnaryReactor* InjectFault(grpc::CallbackServerContext* context,
                                        const v1::InjectFaultRequest* request,
                                        v1::InjectFaultResponse* response) override;

 private:
  ServiceContext* ctx_;
  ServerConfig config_;
  std::vector<std::string> services_;
};

}  // namespace fresnel::server
