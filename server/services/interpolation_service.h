// fresnel.v1.InterpolationService: parses and validates requests, then runs them on the
// DevicePool through fresnel::interp. Never blocks a gRPC thread on compute.
#pragma once

#include "fresnel/interp/interp.h"
#include "fresnel/v1/interpolation.grpc.pb.h"
#include "server/call.h"

namespace fresnel::server {

// Upfirdn and ResamplePoly take and send raw buffers (fresnel/v1/region_wire.h): an inline x
// goes from the received slices straight into a pinned staging buffer, and an inline y is sent
// from the staging buffer the kernel wrote it into (no protobuf string, no zero-fill, no
// serialisation copy). The bytes on the wire are the protobuf messages of interpolation.proto.
using InterpolationServiceBase = v1::InterpolationService::WithRawCallbackMethod_Upfirdn<
    v1::InterpolationService::WithRawCallbackMethod_ResamplePoly<
        v1::InterpolationService::WithCallbackMethod_ResampleStream<
            v1::InterpolationService::WithCallbackMethod_Resample<
                v1::InterpolationService::WithCallbackMethod_Decimate<
                    v1::InterpolationService::Service>>>>>;

class InterpolationService final : public InterpolationServiceBase {
 public:
  // `limits` are the server's (--max-rate, --max-taps, --max-output-samples).
  InterpolationService(ServiceContext* ctx, const interp::Limits& limits)
      : ctx_(ctx), limits_(limits) {}

  // Raw: the wire messages are UpfirdnRequest / ResamplePolyRequest and InterpolationResponse.
  grpc::ServerUnaryReactor* Upfirdn(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ResamplePoly(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
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
