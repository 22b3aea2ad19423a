// fresnel.v1.UnwrapService: phase unwrapping as a synchronous call (Unwrap) and as asynchronous
// jobs held by the JobStore (Submit, Watch, Get, Cancel, List). Parses and validates on the gRPC
// thread, computes on the DevicePool; the streaming calls are reactors that never block a gRPC
// thread (Watch writes the next state when the store reports one).
#pragma once

#include "fresnel/unwrap/unwrap.h"
#include "fresnel/v1/unwrap.grpc.pb.h"
#include "server/call.h"

namespace fresnel::server {

class UnwrapService final : public v1::UnwrapService::CallbackService {
 public:
  // ctx->jobs must be set; `limits` are the server's (--unwrap-max-side, --unwrap-max-pixels).
  UnwrapService(ServiceContext* ctx, const unwrap::Limits& limits) : ctx_(ctx), limits_(limits) {}

  grpc::ServerUnaryReactor* Unwrap(grpc::CallbackServerContext* context,
                                   const v1::UnwrapRequest* request,
                                   v1::UnwrapResponse* response) override;
  grpc::ServerReadReactor<v1::SubmitRequest>* Submit(grpc::CallbackServerContext* context,
                                                     v1::SubmitResponse* response) override;
  grpc::ServerWriteReactor<v1::UnwrapJob>* Watch(grpc::CallbackServerContext* context,
                                                 const v1::WatchRequest* request) override;
  grpc::ServerWriteReactor<v1::GetUnwrapResultResponse>* Get(
      grpc::CallbackServerContext* context, const v1::GetUnwrapResultRequest* request) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const v1::CancelJobRequest* request,
                                   v1::UnwrapJob* response) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const v1::ListJobsRequest* request,
                                 v1::ListUnwrapJobsResponse* response) override;

 private:
  ServiceContext* ctx_;
  unwrap::Limits limits_;
};

}  // namespace fresnel::server
