// HologramService request parsing (server/services/hologram_params.cc) and its Stream state
// machine (server/services/hologram_service.cc, StreamCall): the bytes are a sequence of
// HologramFrameRequest messages (fuzz_util.h SplitMessages). The first carries the config
// (ParseHologramConfig); each frame's overrides go through ApplyOverrides, its points through
// PointsFromProto / PointsFromImage, parts sent with points_continue are joined under the point
// limit as StreamCall::AddPart does, and every assembled frame is checked with ValidateHologram
// and sized with HologramDeviceBytes / HologramOutputBytes (the numbers placement uses). The
// reactor itself is bound to gRPC; the harness repeats its transitions. A first message that
// parses as a RenderRequest-shaped frame covers Render's parsing too (same fields).
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fresnel/hologram/hologram.h"
#include "fresnel/v1/hologram.pb.h"
#include "server/services/hologram_params.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace fresnel;

void CheckFrame(const hologram::HologramOptions& options, const hologram::PointCloud& points,
                const hologram::Limits& limits) {
  if (!hologram::ValidateHologram(points, options, limits).ok()) return;
  // Placement arithmetic must not overflow for any valid request.
  (void)server::HologramDeviceBytes(options, static_cast<int64_t>(points.size()));
  (void)server::HologramOutputBytes(options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hologram::Limits limits;
  limits.max_width = 4096;
  limits.max_height = 4096;
  limits.max_pixels = 1 << 22;
  limits.max_points = 1 << 14;
  std::optional<hologram::HologramOptions> base;
  std::optional<hologram::PointCloud> partial;
  for (absl::string_view bytes : fuzz::SplitMessages(data, size, 16)) {
    v1::HologramFrameRequest request;
    if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 0;
    if (!base) {
      if (!request.has_config()) return 0;
      auto parsed = server::ParseHologramConfig(request.config(), limits);
      if (!parsed.ok()) return 0;
      base = *parsed;
    }
    hologram::HologramOptions options = *base;
    if (request.has_overrides()) {
      auto o = server::ApplyOverrides(*base, request.overrides(), limits);
      if (!o.ok()) continue;  // the frame fails, the stream goes on
      options = *o;
    }
    absl::StatusOr<hologram::PointCloud> points =
        absl::InvalidArgumentError("points: no source");
    if (request.source_case() == v1::HologramFrameRequest::kPoints) {
      points = server::PointsFromProto(request.points(), limits);
    } else if (request.source_case() == v1::HologramFrameRequest::kImage) {
      points = server::PointsFromImage(request.image(), limits);
    }
    if (partial.has_value() || request.points_continue()) {
      if (!partial) partial.emplace();
      if (points.ok()) {
        if (static_cast<int64_t>(partial->size() + points->size()) > limits.max_points) {
          partial.reset();
          continue;
        }
        partial->insert(partial->end(), points->begin(), points->end());
      }
      if (request.points_continue()) continue;
      CheckFrame(options, *partial, limits);
      partial.reset();
      continue;
    }
    if (points.ok()) CheckFrame(options, *points, limits);
  }
  return 0;
}
