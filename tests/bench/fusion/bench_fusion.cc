// Per-frame time of the fusion pipeline (track with 3 ICP levels + integrate + raycast) on a
// synthetic room with sensor noise, 4 mm voxels, at 848x480 and 640x480.
//   fresnel_bench_fusion [--frames N] [--cpu]
// Prints, per size: average and p99 of the GPU time per frame (CUDA events around the three
// stages), the host wall time per ProcessFrame call (upload, launches, synchronisation), the
// per-stage averages, bricks in use, device memory and the ATE against the true trajectory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fresnel/core/gpu.h"
#include "fresnel/fusion/dataset.h"
#include "fresnel/fusion/fusion.h"
#include "fusion_test_util.h"

using namespace fresnel;          // NOLINT
using namespace fresnel::fusion;  // NOLINT

namespace {

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}
double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

int Run(const Device& dev, int width, int height, int frames) {
  FusionConfig c;
  c.camera = testing::Camera(width, height);
  c.depth_format = DepthFormat::kUint16;
  c.voxel_size_m = 0.004;
  c.truncation_m = 0.016;
  c.max_depth_m = 4.0;
  c.brick_budget_bytes = int64_t{1} << 30;
  SyntheticScene scene = SyntheticScene::Room();
  auto gt = SyntheticScene::Orbit(frames, 1.2);
  std::vector<testing::Frame> input;
  input.reserve(frames);
  for (int i = 0; i < frames; ++i) input.push_back(testing::RenderFrame(scene, c, gt[i], true, 99 + i));
  auto v = Volume::Create(dev, c);
  if (!v.ok()) {
    std::fprintf(stderr, "create: %s\n", v.status().ToString().c_str());
    return 1;
  }
  const int warmup = std::min(10, frames / 10);
  std::vector<double> gpu, wall, track, integ, ray, iters;
  std::vector<RigidTransform> est;
  int lost = 0;
  int64_t bricks = 0;
  for (int i = 0; i < frames; ++i) {
    FrameInput in;
    in.depth = input[i].depth;
    if (i == 0) in.fixed_pose = gt[0];
    auto t0 = std::chrono::steady_clock::now();
    auto r = (*v)->ProcessFrame(dev, in);
    auto t1 = std::chrono::steady_clock::now();
    if (!r.ok()) {
      std::fprintf(stderr, "frame %d: %s\n", i, r.status().ToString().c_str());
      return 1;
    }
    est.push_back(r->T_world_camera);
    lost += r->state == TrackingState::kLost;
    bricks = r->bricks_in_use;
    if (i < warmup) continue;
    track.push_back(r->track_s * 1e3);
    integ.push_back(r->integrate_s * 1e3);
    ray.push_back(r->raycast_s * 1e3);
    iters.push_back(r->icp_iterations);
    gpu.push_back((r->track_s + r->integrate_s + r->raycast_s) * 1e3);
    wall.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::printf("| %dx%d | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %lld | %.0f | %.2f | %d |\n",
              width, height, dev.Name().c_str(), static_cast<int>(gpu.size()), Mean(gpu),
              Percentile(gpu, 0.99), Mean(wall), Percentile(wall, 0.99), Mean(track), Mean(integ),
              Mean(ray), Mean(iters), static_cast<long long>(bricks), (*v)->allocated_bytes() / 1048576.0,
              AbsoluteTrajectoryRmse(est, gt) * 1e3, lost);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int frames = 300;
  bool cpu = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--frames") == 0 && i + 1 < argc) frames = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--cpu") == 0) cpu = true;
  }
  std::unique_ptr<GpuStream> stream;
  Device dev = Device::Cpu();
  if (!cpu) {
    if (GpuCount() == 0) {
      std::fprintf(stderr, "no GPU visible (use --cpu)\n");
      return 1;
    }
    auto s = GpuStream::Create(0);
    if (!s.ok()) return 1;
    stream = std::move(*s);
    dev = Device::Cuda(0, stream->handle());
    auto p = GetGpuProperties(0);
    if (p.ok()) std::printf("device: %s, %d SMs\n", p->name.c_str(), p->multiprocessors);
  }
  std::printf("frames %d (first %d excluded), 4 mm voxels, mu 16 mm, uint16 depth with noise\n\n",
              frames, std::min(10, frames / 10));
  std::printf("| size | device | frames | gpu avg ms | gpu p99 ms | wall avg ms | wall p99 ms | track ms | integrate ms | raycast ms | ICP iterations | bricks | alloc MiB | ATE mm | lost |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  int rc = Run(dev, 848, 480, frames);
  rc |= Run(dev, 640, 480, frames);
  return rc;
}
