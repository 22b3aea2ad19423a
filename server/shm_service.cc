#include "server/shm_service.h"

#include "server/status_util.h"

namespace fresnel::server {
namespace {

constexpr char kService[] = "fresnel.v1.SharedMemoryService";

grpc::ServerUnaryReactor* Finish(RpcRecord& record, grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  record.Done(status);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status Unavailable() {
  return absl::UnimplementedError("this server has no shared-memory registry");
}

}  // namespace

grpc::ServerUnaryReactor* SharedMemoryService::RegisterRegion(
    grpc::CallbackServerContext* context, const v1::RegisterRegionRequest* request,
    v1::RegisterRegionResponse* response) {
  RpcRecord record(ctx_->metrics, kService, "RegisterRegion");
  if (ctx_->shm == nullptr) return Finish(record, context, Unavailable());
  absl::StatusOr<v1::SharedRegionInfo> info = ctx_->shm->Register(ClientOf(context), *request);
  if (info.ok()) {
    *response->mutable_region() = *std::move(info);
    response->set_ttl_seconds(ctx_->shm->ttl_s());
  }
  return Finish(record, context, info.status());
}

grpc::ServerUnaryReactor* SharedMemoryService::UnregisterRegion(
    grpc::CallbackServerContext* context, const v1::UnregisterRegionRequest* request,
    v1::UnregisterRegionResponse* /*response*/) {
  RpcRecord record(ctx_->metrics, kService, "UnregisterRegion");
  if (ctx_->shm == nullptr) return Finish(record, context, Unavailable());
  return Finish(record, context, ctx_->shm->Unregister(ClientOf(context), request->name()));
}

grpc::ServerUnaryReactor* SharedMemoryService::ListRegions(
    grpc::CallbackServerContext* context, const v1::ListRegionsRequest* /*request*/,
    v1::ListRegionsResponse* response) {
  RpcRecord record(ctx_->metrics, kService, "ListRegions");
  if (ctx_->shm == nullptr) return Finish(record, context, Unavailable());
  for (v1::SharedRegionInfo& info : ctx_->shm->List(ClientOf(context))) {
    *response->add_regions() = std::move(info);
  }
  response->set_ttl_seconds(ctx_->shm->ttl_s());
  return Finish(record, context, absl::OkStatus());
}

}  // namespace fresnel::server
