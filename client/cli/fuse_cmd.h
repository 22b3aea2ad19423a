// `fresnel fuse DIR`: fuses an RGB-D sequence folder (../shared/data/fusion/*/README.md formats,
// read by fusion::OpenSequence) in one FusionService session, with a progress bar, and writes the
// estimated trajectory (poses.txt format), the mesh (binary PLY) and rendered views (PNG).
// `fresnel bench --op fuse`: N concurrent sessions fed synthetic frames at a target frame rate.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "commands.h"

namespace CLI {
class App;
}

namespace fresnel::cli {

struct FuseOptions {
  std::string dir;
  std::string out_dir = "fuse-out";
  int64_t frames = 0;       // 0 = all
  int64_t view_every = 0;   // > 0: also render a view every this many frames
  double voxel_size_m = 0;  // 0 = the service's default
  double truncation_m = 0;
  int64_t budget_mib = 0;
  bool no_tracking = false;
  // Use the sequence's poses as fixed poses (pure integration) instead of tracking.
  bool use_poses = false;
  std::string device = "any";
  bool json = false;
  // > 0: first write a synthetic sequence of this many frames into DIR (the kernels' synthetic
  // room along its test orbit, 320x240, with sensor noise), then fuse it.
  int64_t generate = 0;
};

// Writes `frames` frames of fusion::SyntheticScene::Room() seen along its Orbit into `dir`:
// depth/NNNNN.png (uint16 mm, with AddDepthNoise), intrinsics.txt and poses.txt.
absl::Status WriteSyntheticSequence(const std::string& dir, int64_t frames);

absl::Status ValidateFuseOptions(const FuseOptions& options);
CLI::App* AddFuseCommand(CLI::App* app, FuseOptions* options);
int RunFuse(const GlobalOptions& global, const FuseOptions& options, std::ostream& out,
            std::ostream& err);

// bench --op fuse: `concurrency` sessions, each sending frames of `frame_size` ("WxH") at `fps`
// for `duration_s` (after `warmup_frames` unmeasured frames).
struct FuseBenchOptions {
  int sessions = 1;
  double fps = 90;
  double duration_s = 5;
  int64_t warmup_frames = 30;
  std::string frame_size = "848x480";
  int64_t budget_mib = 0;
  // TCP connections (clients) that the sessions share, session s on connection s % connections;
  // 0 = one per session, as separate clients would have. One connection for all (1) carries
  // ~1.9 GB/s, i.e. ~2,300 frames/s of 848x480 uint16 (docs/fusion_service.md).
  int connections = 0;
  // Where in the frame period each session sends: "random" (uniform, fixed seed: independent
  // cameras) or "even" (k / N of the period: the frames take turns), both once every session
  // has opened; or "open" (each from when its own open is answered, the bench before 2026-12-02:
  // its first measured frames then share the GPU with the later sessions' opening, volume
  // creation and first frames, which made its p99; docs/fusion_service.md).
  std::string phase = "random";
  // "OFF[+ON]": FusionConfig.cuda_disable / cuda_enable bits for A/B runs (fusion.proto); empty
  // = the defaults.
  std::string variant;
  std::string device = "any";
  bool json = false;
};

int RunFuseBench(const GlobalOptions& global, const FuseBenchOptions& options, std::ostream& out,
                 std::ostream& err);

}  // namespace fresnel::cli
