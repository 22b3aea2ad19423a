// fresnel.v1.InterpolationService: parses and validates requests, then runs them on the
// DevicePool through fresnel::interp. Never blocks a gRPC thread on compute.
#pragma once

#include "fresnel/interp/interp.h"
#include "fresnel/v1/interpolation.grpc.pb.h"
#include "server/call.h"

namespace fresnel::server {

class InterpolationService final : public v1::InterpolationService::CallbackService {
 public:
  // `limits` are the server's (--max-rate, --max-taps, --max-output-samples).
  InterpolationService(ServiceContext* ctx, const interp::Limits& limits)
      : ctx_(ctx), limits_(limits) {}

  grpc::ServerUnaryReactor* Upfirdn(grpc::CallbackServerContext* context,
                                    const v1::UpfirdnRequest* request,
                                    v1::InterpolationResponse* response) override;
  grpc::ServerUnaryReactor* ResamplePoly(grpc::CallbackServerContext* context,
                                         const v1::ResamplePolyRequest* request,
                                         v1::InterpolationResponse* response) override;
  grpc::ServerBidiReactor<v1::ResampleStreamRequest, v1::ResampleStreamResponse>* ResampleStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Resample(grpc::CallbackServerContext* context,
                                     const v1::ResampleRequest* request,
                                     v1::InterpolationResponse* response) override;
  grpc::ServerUnaryReactor* Decimate(grpc::CallbackServerContext* context,
                                     const v1::DecimateRequest* request,
                                     v1::InterpolationResponse* response) override;

 private:
  ServiceContext* ctx_;
  interp::Limits limits_;
};

}  // namespace fresnel::server
