// fresnel.v1.SharedMemoryService: registers, lists and forgets the calling client's POSIX
// shared-memory regions (server/shm.h holds them).
#pragma once

#include "fresnel/v1/shm.grpc.pb.h"
#include "server/call.h"
#include "server/shm.h"

namespace fresnel::server {

class SharedMemoryService final : public v1::SharedMemoryService::CallbackService {
 public:
  explicit SharedMemoryService(ServiceContext* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* context,
                                           const v1::RegisterRegionRequest* request,
                                           v1::RegisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* context,
                                             const v1::UnregisterRegionRequest* request,
                                             v1::UnregisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* context,
                                        const v1::ListRegionsRequest* request,
                                        v1::ListRegionsResponse* response) override;
  grpc::ServerReadReactor<v1::RegionChunk>* WriteRegion(
      grpc::CallbackServerContext* context, v1::WriteRegionResponse* response) override;
  grpc::ServerWriteReactor<v1::RegionChunk>* ReadRegion(
      grpc::CallbackServerContext* context, const v1::ReadRegionRequest* request) override;

 private:
  ServiceContext* ctx_;
};

}  // namespace fresnel::server
