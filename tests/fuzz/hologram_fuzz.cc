// HologramService request parsing (server/services/hologram_params.cc) and its Stream state
// machine (server/services/hologram_service.cc, StreamCall): the bytes are a sequence of
// HologramFrameRequest messages (fuzz_util.h SplitMessages). The first carries the config
// (ParseHologramConfig); each frame's overrides go through ApplyOverrides, its points through the
// server's one check and conversion (CheckPointsShape, then AppendPointsFromProto into a
// hologram::CloudBuilder, part by part under the point limit as StreamCall::AddPart does) and, as
// an independent oracle, through PointsFromProto + ValidateHologram on the joined cloud: the two
// must give the same status for every frame (a difference traps). Accepted frames are sized with
// hologram::DeviceBytes / OutputBytes (the numbers placement uses). The reactor itself is bound
// to gRPC; the harness repeats its transitions. A first message that parses as a
// RenderRequest-shaped frame covers Render's parsing too (same fields).
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fresnel/hologram/hologram.h"
#include "fresnel/v1/hologram.pb.h"
#include "server/services/hologram_params.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace fresnel;

// One frame as it arrives, both ways.
struct Frame {
  hologram::PointCloud points;          // the oracle's cloud (values unchecked)
  std::optional<hologram::CloudBuilder> cloud;  // the server's
  absl::Status values;                  // the first bad value the builder found
  bool layout_error = false;            // a part the server answers with a layout error
};

void CheckFrame(const hologram::HologramOptions& options, Frame* frame,
                const hologram::Limits& limits) {
  if (frame->layout_error) return;
  if (static_cast<int64_t>(frame->points.size()) > limits.max_points) return;  // a parts error
  const absl::Status oracle = hologram::ValidateHologram(frame->points, options, limits);
  absl::Status built = frame->values;
  std::optional<hologram::PreparedCloud> prepared;
  if (built.ok()) {
    absl::StatusOr<hologram::PreparedCloud> c = frame->cloud->Finish();
    built = c.status();
    if (c.ok()) prepared = *std::move(c);
  }
  if (oracle != built) __builtin_trap();
  if (!prepared.has_value()) return;
  if (prepared->size() != static_cast<int64_t>(frame->points.size())) __builtin_trap();
  // Placement arithmetic must not overflow for any valid request.
  (void)hologram::DeviceBytes(options, prepared->size());
  (void)hologram::OutputBytes(options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hologram::Limits limits;
  limits.max_width = 4096;
  limits.max_height = 4096;
  limits.max_pixels = 1 << 22;
  limits.max_points = 1 << 14;
  std::optional<hologram::HologramOptions> base;
  std::optional<Frame> partial;
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
    Frame single;
    Frame& frame = partial.has_value() || request.points_continue()
                       ? (partial.has_value() ? *partial : partial.emplace())
                       : single;
    if (!frame.cloud) frame.cloud.emplace(*base, limits);
    if (request.source_case() == v1::HologramFrameRequest::kPoints) {
      absl::StatusOr<hologram::PointCloud> points =
          server::PointsFromProto(request.points(), limits);
      if (points.ok()) {
        frame.points.insert(frame.points.end(), points->begin(), points->end());
        if (frame.values.ok()) {
          frame.values = server::AppendPointsFromProto(request.points(), limits, &*frame.cloud);
        }
      } else {
        frame.layout_error = true;
      }
    } else if (request.source_case() == v1::HologramFrameRequest::kImage) {
      absl::StatusOr<hologram::PointCloud> points =
          server::PointsFromImage(request.image(), limits);
      if (points.ok()) {
        frame.points.insert(frame.points.end(), points->begin(), points->end());
        if (frame.values.ok()) frame.values = frame.cloud->Append(*points);
      } else {
        frame.layout_error = true;
      }
    } else {
      frame.layout_error = true;
    }
    if (request.points_continue()) continue;
    CheckFrame(options, &frame, limits);
    partial.reset();
  }
  return 0;
}
