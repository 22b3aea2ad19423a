// Per-frame time of the fusion pipeline (track with 3 ICP levels + integrate + raycast) on a
// synthetic room with sensor noise, 4 mm voxels, at 848x480 and 640x480.
//   fresnel_bench_fusion [--frames N] [--cpu] [--variants "OFF[+ON][:STOP] ..."]
//                        [--sessions N [--fps F]]
// Prints, per size: average and p99 of the GPU time per frame (CUDA events around the three
// stages), the host wall time per ProcessFrame call (upload, launches, synchronisation), the
// per-stage averages, bricks in use, device memory and the ATE against the true trajectory.
// --variants runs each size once per token on the same frames, with FusionConfig::cuda_disable =
// OFF (bits of the CUDA optimisations to turn off, fusion_cuda.cu), cuda_enable = ON (bits of the
// slower variants to turn on) and cuda_icp_stop_xi2 = STOP ("a,b,c": per level |xi|^2
// convergence thresholds): the A/B table.
// --sessions N runs N volumes at once at 848x480 (a stream and a host thread each, frames offered
// at F fps, default 90, staggered across the period; F = 0: back to back) and prints the latency
// from each frame's scheduled arrival to its result (p99 <= 1000/F ms keeps up) and the GPU time,
// once per --variants token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if FRESNEL_WITH_CUDA
#include <cuda_runtime.h>
#endif

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

// One size's configuration, trajectory and rendered frames (shared by every variant).
struct Input {
  FusionConfig c;
  std::vector<RigidTransform> gt;
  std::vector<testing::Frame> frames;
};
Input MakeInput(int width, int height, int frames, int64_t budget_bytes) {
  Input in;
  FusionConfig& c = in.c;
  c.camera = testing::Camera(width, height);
  c.depth_format = DepthFormat::kUint16;
  c.voxel_size_m = 0.004;
  c.truncation_m = 0.016;
  c.max_depth_m = 4.0;
  c.brick_budget_bytes = budget_bytes;
  SyntheticScene scene = SyntheticScene::Room();
  in.gt = SyntheticScene::Orbit(frames, 1.2);
  in.frames.reserve(frames);
  for (int i = 0; i < frames; ++i)
    in.frames.push_back(testing::RenderFrame(scene, c, in.gt[i], true, 99 + i));
  return in;
}

// Applies a --variants token "OFF[+ON][:a,b,c]" to the config.
FusionConfig WithVariant(FusionConfig c, const std::string& variant) {
  const size_t colon = variant.find(':');
  std::string off = variant.substr(0, colon);
  const size_t plus = off.find('+');
  c.cuda_enable = 0;
  if (plus != std::string::npos) {
    c.cuda_enable = static_cast<unsigned>(std::strtoul(off.c_str() + plus + 1, nullptr, 0));
    off.resize(plus);
  }
  c.cuda_disable = off.empty() ? 0u : static_cast<unsigned>(std::strtoul(off.c_str(), nullptr, 0));
  if (colon != std::string::npos) {
    const char* p = variant.c_str() + colon + 1;
    for (int l = 0; l < 3 && *p != 0; ++l) {
      char* end = nullptr;
      c.cuda_icp_stop_xi2[l] = std::strtod(p, &end);
      if (end == p) break;
      p = *end == ',' ? end + 1 : end;
    }
  }
  return c;
}

int Run(const Device& dev, const Input& input, const std::string& variant) {
  const FusionConfig c = WithVariant(input.c, variant);
  const int frames = static_cast<int>(input.frames.size());
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
    in.depth = input.frames[i].depth;
    if (i == 0) in.fixed_pose = input.gt[0];
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
  std::printf("| %dx%d | %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %lld | %.0f | %.2f | %d |\n",
              c.camera.width, c.camera.height, dev.Name().c_str(), variant.c_str(),
              static_cast<int>(gpu.size()), Mean(gpu), Percentile(gpu, 0.99), Mean(wall),
              Percentile(wall, 0.99), Mean(track), Mean(integ), Mean(ray), Mean(iters),
              static_cast<long long>(bricks), (*v)->allocated_bytes() / 1048576.0,
              AbsoluteTrajectoryRmse(est, input.gt) * 1e3, lost);
  std::fflush(stdout);
  return 0;
}

// N sessions at once, each on its own stream and host thread, frames offered at `fps`.
int RunSessions(const Input& input, int sessions, double fps, const std::string& variant) {
  const FusionConfig c = WithVariant(input.c, variant);
  const int frames = static_cast<int>(input.frames.size());
  const int warmup = std::min(10, frames / 10);
  std::vector<std::unique_ptr<GpuStream>> streams;
  std::vector<std::unique_ptr<Volume>> vols;
  for (int k = 0; k < sessions; ++k) {
    auto s = GpuStream::Create(0);
    if (!s.ok()) return 1;
    streams.push_back(std::move(*s));
    auto v = Volume::Create(Device::Cuda(0, streams.back()->handle()), c);
    if (!v.ok()) {
      std::fprintf(stderr, "session %d: %s\n", k, v.status().ToString().c_str());
      return 1;
    }
    vols.push_back(std::move(*v));
  }
  using Clock = std::chrono::steady_clock;
  const double period_s = fps > 0 ? 1.0 / fps : 0.0;
  std::vector<std::vector<double>> latency(sessions), gpu(sessions);
  std::vector<int> lost(sessions, 0), failed(sessions, 0);
  std::vector<double> ate(sessions, 0);
  const Clock::time_point t_start = Clock::now() + std::chrono::milliseconds(50);
  std::vector<std::thread> threads;
  for (int k = 0; k < sessions; ++k) {
    threads.emplace_back([&, k] {
      const Device dev = Device::Cuda(0, streams[k]->handle());
      std::vector<RigidTransform> est;
      for (int i = 0; i < frames; ++i) {
        const double at_s = period_s * (i + static_cast<double>(k) / sessions);
        const Clock::time_point sched =
            t_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at_s));
        if (period_s > 0) std::this_thread::sleep_until(sched);
        const Clock::time_point t0 = period_s > 0 ? sched : Clock::now();
        FrameInput in;
        in.depth = input.frames[i].depth;
        if (i == 0) in.fixed_pose = input.gt[0];
        auto r = vols[k]->ProcessFrame(dev, in);
        const Clock::time_point t1 = Clock::now();
        if (!r.ok()) {
          failed[k] = 1;
          return;
        }
        est.push_back(r->T_world_camera);
        lost[k] += r->state == TrackingState::kLost;
        if (i < warmup) continue;
        latency[k].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        gpu[k].push_back((r->track_s + r->integrate_s + r->raycast_s) * 1e3);
      }
      ate[k] = AbsoluteTrajectoryRmse(est, input.gt);
    });
  }
  for (auto& t : threads) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::vector<double> all_lat, all_gpu;
  int lost_total = 0, failures = 0;
  double worst_ate = 0;
  for (int k = 0; k < sessions; ++k) {
    all_lat.insert(all_lat.end(), latency[k].begin(), latency[k].end());
    all_gpu.insert(all_gpu.end(), gpu[k].begin(), gpu[k].end());
    lost_total += lost[k];
    failures += failed[k];
    worst_ate = std::max(worst_ate, ate[k]);
  }
  std::printf("| %d | %dx%d | %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f | %.2f | %d | %d |\n",
              sessions, c.camera.width, c.camera.height, variant.c_str(),
              fps > 0 ? std::to_string(static_cast<int>(fps)).c_str() : "max",
              static_cast<int>(all_lat.size()), Mean(all_lat), Percentile(all_lat, 0.99),
              all_lat.empty() ? 0.0 : *std::max_element(all_lat.begin(), all_lat.end()),
              Mean(all_gpu), Percentile(all_gpu, 0.99), sessions * frames / wall_s,
              worst_ate * 1e3, lost_total, failures);
  std::fflush(stdout);
  return failures > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int frames = 300;
  bool cpu = false;
  int sessions = 0;
  double fps = 90;
  std::vector<std::string> variants;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--frames") == 0 && i + 1 < argc) frames = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--cpu") == 0) cpu = true;
    if (std::strcmp(argv[i], "--sessions") == 0 && i + 1 < argc) sessions = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--fps") == 0 && i + 1 < argc) fps = std::atof(argv[++i]);
    if (std::strcmp(argv[i], "--variants") == 0 && i + 1 < argc) {
      std::string list = argv[++i];
      size_t p = 0;
      while (p < list.size()) {
        size_t q = list.find(' ', p);
        if (q == std::string::npos) q = list.size();
        if (q > p) variants.push_back(list.substr(p, q - p));
        p = q + 1;
      }
    }
  }
  if (variants.empty()) variants.push_back("0");
  std::unique_ptr<GpuStream> stream;
  Device dev = Device::Cpu();
  if (!cpu) {
    if (GpuCount() == 0) {
      std::fprintf(stderr, "no GPU visible (use --cpu)\n");
      return 1;
    }
#if FRESNEL_WITH_CUDA
    // Many host threads wait on their streams at once: block instead of spinning, so that a
    // finished session's thread is not queued behind spinning ones on the cores.
    if (sessions > 0) cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);
#endif
    auto s = GpuStream::Create(0);
    if (!s.ok()) return 1;
    stream = std::move(*s);
    dev = Device::Cuda(0, stream->handle());
    auto p = GetGpuProperties(0);
    if (p.ok()) std::printf("device: %s, %d SMs\n", p->name.c_str(), p->multiprocessors);
  }
  std::printf("frames %d (first %d excluded), 4 mm voxels, mu 16 mm, uint16 depth with noise\n\n",
              frames, std::min(10, frames / 10));
  if (sessions > 0) {
    if (cpu) return 1;
    Input input = MakeInput(848, 480, frames, int64_t{512} << 20);
    std::printf("| sessions | size | variant | fps offered | frames | latency avg ms | latency p99 ms | latency max ms | gpu avg ms | gpu p99 ms | frames/s | worst ATE mm | lost | failed |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    int rc = 0;
    for (const std::string& var : variants) rc |= RunSessions(input, sessions, fps, var);
    return rc;
  }
  std::printf("| size | device | variant | frames | gpu avg ms | gpu p99 ms | wall avg ms | wall p99 ms | track ms | integrate ms | raycast ms | ICP iterations | bricks | alloc MiB | ATE mm | lost |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  int rc = 0;
  for (int size = 0; size < 2; ++size) {
    Input input = MakeInput(size == 0 ? 848 : 640, 480, frames, int64_t{1} << 30);
    for (const std::string& var : variants) {
      rc |= Run(dev, input, var);
    }
  }
  return rc;
}
