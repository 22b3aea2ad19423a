// Shared set-up for the fusion tests and benchmark: a synthetic room, its trajectory, frames.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "fresnel/fusion/dataset.h"
#include "fresnel/fusion/fusion.h"

namespace fresnel::fusion::testing {

// A pinhole camera of the given size with a 60-degree horizontal field of view.
inline CameraIntrinsics Camera(int width, int height) {
  CameraIntrinsics c;
  c.width = width;
  c.height = height;
  c.fx = c.fy = 0.5 * width / std::tan(30.0 * M_PI / 180.0);
  c.cx = 0.5 * width - 0.5;
  c.cy = 0.5 * height - 0.5;
  return c;
}

inline FusionConfig SyntheticConfig(int width, int height, double voxel_m, bool tracking) {
  FusionConfig c;
  c.camera = Camera(width, height);
  c.depth_format = DepthFormat::kFloat32;
  c.voxel_size_m = voxel_m;
  c.truncation_m = 4 * voxel_m;
  c.max_depth_m = 4.0;
  c.tracking = tracking;
  c.brick_budget_bytes = int64_t{512} << 20;
  return c;
}

// One rendered frame: depth bytes in the config's format (float32 metres or uint16 units).
struct Frame {
  std::string depth;
  std::string rgb;
};
inline Frame RenderFrame(const SyntheticScene& scene, const FusionConfig& c, const RigidTransform& T,
                         bool noise, uint64_t seed, bool color = false) {
  HostArray rgb;
  HostArray d = scene.RenderDepth(c.camera, T, c.max_depth_m, color ? &rgb : nullptr);
  if (noise) AddDepthNoise(&d, seed);
  Frame f;
  if (c.depth_format == DepthFormat::kUint16) {
    f.depth = ToUint16Depth(d, c.depth_scale).bytes();
  } else {
    f.depth = d.bytes();
  }
  if (color) f.rgb = rgb.bytes();
  return f;
}

// Voxel centres within `band_m` of the scene surface, sampled on the voxel grid (deterministic).
inline std::vector<float> NearSurfaceVoxels(const SyntheticScene& scene, double voxel_m,
                                            double band_m, int want, uint64_t seed) {
  std::vector<float> pts;
  uint64_t s = seed;
  auto next = [&s]() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) / static_cast<double>(1ull << 53);
  };
  int guard = 0;
  while (static_cast<int>(pts.size() / 3) < want && ++guard < 50000000) {
    double p[3] = {-2.0 + 4.0 * next(), -1.5 + 3.0 * next(), -2.0 + 4.0 * next()};
    for (double& v : p) v = std::round(v / voxel_m) * voxel_m;
    if (std::abs(scene.Sdf(p[0], p[1], p[2])) > band_m) continue;
    for (double v : p) pts.push_back(static_cast<float>(v));
  }
  return pts;
}

// Feeds frames 0 .. n-1 of `gt` (rendered from the room, with colour when the config has it) to
// every volume: all at their true pose with `fixed`, else only frame 0 and the rest tracked.
inline void FuseSequence(const std::vector<Volume*>& vols, const std::vector<Device>& devs,
                         const FusionConfig& c, const std::vector<RigidTransform>& gt, int n,
                         bool fixed, bool noise) {
  SyntheticScene scene = SyntheticScene::Room();
  for (int i = 0; i < n; ++i) {
    Frame f = RenderFrame(scene, c, gt[i], noise, 50 + i, c.color);
    FrameInput in;
    in.depth = f.depth;
    in.rgb = f.rgb;
    if (fixed || i == 0) in.fixed_pose = gt[i];
    for (size_t k = 0; k < vols.size(); ++k) REQUIRE(vols[k]->ProcessFrame(devs[k], in).ok());
  }
}

// Snapshots `v`, restores it on the same device and checks that the copy is the same bit for bit:
// its own snapshot, a colour render from `view` and the mesh. Returns the copy.
inline std::unique_ptr<Volume> CheckRestoreBitExact(const Device& dev, Volume& v,
                                                    const RigidTransform& view,
                                                    std::string* snapshot_out = nullptr) {
  auto snap = v.Snapshot(dev);
  REQUIRE(snap.ok());
  auto w = Volume::Restore(dev, *snap);
  REQUIRE(w.ok());
  auto snap2 = (*w)->Snapshot(dev);
  REQUIRE(snap2.ok());
  CHECK((*snap == *snap2));
  auto ra = v.Render(dev, view, v.config().camera, RenderMode::kColor);
  auto rb = (*w)->Render(dev, view, v.config().camera, RenderMode::kColor);
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  CHECK((ra->bytes() == rb->bytes()));
  auto ma = v.ExtractMesh(dev);
  auto mb = (*w)->ExtractMesh(dev);
  REQUIRE(ma.ok());
  REQUIRE(mb.ok());
  CHECK((ma->vertices == mb->vertices));
  CHECK((ma->colors == mb->colors));
  if (snapshot_out != nullptr) *snapshot_out = std::move(*snap);
  return std::move(*w);
}

}  // namespace fresnel::fusion::testing
