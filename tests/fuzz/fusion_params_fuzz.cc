// FusionService.Session parsing (server/services/fusion_params.cc) and the session's message
// sequence (server/services/fusion_service.cc, the Session reactor): a sequence of FusionRequest
// messages (fuzz_util.h SplitMessages). The first must be a config (FusionConfigFromProto,
// fusion::ValidateConfig and the brick budget arithmetic); frames go through PoseFromProto and
// fusion::ValidateFrame, render requests through PoseFromProto, CameraFromProto,
// RenderModeFromProto. Integration itself is not run (one frame is far too slow for a fuzzer);
// the reactor is bound to gRPC, so the harness repeats its transitions.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fresnel/fusion/fusion.h"
#include "fresnel/v1/fusion.pb.h"
#include "server/services/fusion_params.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fresnel;
  std::optional<fusion::FusionConfig> config;
  for (absl::string_view bytes : fuzz::SplitMessages(data, size, 16)) {
    v1::FusionRequest request;
    if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 0;
    if (!config) {
      if (request.msg_case() != v1::FusionRequest::kConfig) return 0;
      auto c = server::FusionConfigFromProto(request.config());
      if (!c.ok() || !fusion::ValidateConfig(*c).ok()) return 0;
      (void)fusion::BrickCapacity(*c);
      (void)fusion::BytesPerBrick(*c);
      v1::FusionConfig round_trip;
      server::FusionConfigToProto(*c, &round_trip);
      config = *c;
      continue;
    }
    switch (request.msg_case()) {
      case v1::FusionRequest::kFrame: {
        const v1::FusionFrame& f = request.frame();
        fusion::FrameInput input;
        input.depth = f.depth();
        input.rgb = f.rgb();
        if (f.has_pose_prior()) {
          auto p = server::PoseFromProto(f.pose_prior(), "pose_prior");
          if (!p.ok()) break;
          input.pose_prior = *p;
        }
        if (f.has_fixed_pose()) {
          auto p = server::PoseFromProto(f.fixed_pose(), "fixed_pose");
          if (!p.ok()) break;
          input.fixed_pose = *p;
        }
        (void)fusion::ValidateFrame(*config, input);
        break;
      }
      case v1::FusionRequest::kRender: {
        const v1::FusionRenderRequest& r = request.render();
        if (r.has_t_world_camera()) (void)server::PoseFromProto(r.t_world_camera(), "pose");
        if (r.has_camera()) (void)server::CameraFromProto(r.camera());
        (void)server::RenderModeFromProto(r.mode());
        break;
      }
      case v1::FusionRequest::kClose: return 0;
      default: break;  // mesh, snapshot: no parsing beyond the chunk size
    }
  }
  return 0;
}
