// fresnel.v1.SharedMemoryService: registers, lists and forgets the calling client's POSIX
// shared-memory regions (server/shm.h holds them).
#pragma once

#include "fresnel/v1/shm.grpc.pb.h"
#include "server/call.h"
#include "server/shm.h"

namespace fresnel::server {

// WriteRegion and ReadRegion take and send raw RegionChunk buffers (fresnel/v1/region_wire.h):
// chunk data goes from the received slices straight into the region, and out of the region
// into the sent message without a copy.
using SharedMemoryServiceBase = v1::SharedMemoryService::WithCallbackMethod_RegisterRegion<
    v1::SharedMemoryService::WithCallbackMethod_UnregisterRegion<
        v1::SharedMemoryService::WithCallbackMethod_ListRegions<
            v1::SharedMemoryService::WithRawCallbackMethod_WriteRegion<
                v1::SharedMemoryService::WithRawCallbackMethod_ReadRegion<
                    v1::SharedMemoryService::Service>>>>>;

class SharedMemoryService final : public SharedMemoryServiceBase {
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
  grpc::ServerReadReactor<grpc::ByteBuffer>* WriteRegion(grpc::CallbackServerContext* context,
                                                        grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadRegion(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request) override;

 private:
  ServiceContext* ctx_;
};

}  // namespace fresnel::server
