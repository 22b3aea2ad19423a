// fresnel.v1.FusionService: dense RGB-D reconstruction sessions (fresnel::fusion) over one
// bidirectional stream each (docs/fusion_service.md). The stream's first message opens a session
// in the SessionStore (kind "fusion", reserving fusion::DeviceBytes of the config on one device);
// the session's first job creates (or restores) the fusion::Volume there, and every later
// message is one job through Session::Submit, so they run one at a time, in order, on that
// device. Parsing and validation (the kernels' validators) happen on the gRPC thread; nothing
// waits on a gRPC thread. The session ends, and its device memory is freed, when the stream ends.
#pragma once

#include <cstdint>

#include "fresnel/v1/fusion.grpc.pb.h"
#include "server/call.h"

namespace fresnel::server {

// Per-stream limits (ServerInfo.fusion shows them).
struct FusionServiceLimits {
  // Messages of one stream read and not yet answered; the reactor stops reading at this many.
  int max_pending = 8;
  // Restore: bytes of one snapshot upload.
  int64_t max_snapshot_bytes = int64_t{4} << 30;
  // Render: width * height of a view (it must also fit in one message).
  int64_t max_render_pixels = int64_t{4096} * 4096;
};

class FusionService final : public v1::FusionService::CallbackService {
 public:
  // ctx->sessions must be set.
  FusionService(ServiceContext* ctx, const FusionServiceLimits& limits)
      : ctx_(ctx), limits_(limits) {}

  grpc::ServerBidiReactor<v1::FusionRequest, v1::FusionResponse>* Session(
      grpc::CallbackServerContext* context) override;

  const FusionServiceLimits& limits() const { return limits_; }

 private:
  ServiceContext* ctx_;
  const FusionServiceLimits limits_;
};

}  // namespace fresnel::server
