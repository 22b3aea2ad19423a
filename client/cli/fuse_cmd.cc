// `fresnel fuse` and `fresnel bench --op fuse` (fuse_cmd.h).
#include "fuse_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "format.h"
#include "fresnel/client/fusion_client.h"
#include "fresnel/io/png.h"
#include "fresnel/fusion/dataset.h"
#include "fresnel/fusion/fusion.h"

namespace fresnel::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

void SetPose(const fusion::RigidTransform& t, v1::FusionPose* out) {
  out->clear_m();
  for (double v : t.m) out->add_m(v);
}

fusion::RigidTransform PoseOf(const v1::FusionPose& p) {
  fusion::RigidTransform t;
  for (int i = 0; i < 12 && i < p.m_size(); ++i) t.m[i] = p.m(i);
  return t;
}

void SetCamera(const fusion::CameraIntrinsics& k, v1::FusionCamera* out) {
  out->set_fx(k.fx);
  out->set_fy(k.fy);
  out->set_cx(k.cx);
  out->set_cy(k.cy);
  out->set_width(k.width);
  out->set_height(k.height);
}

// Frames done of a total, on stderr: redrawn in place on a terminal, else one line per 10 %.
class FrameProgress {
 public:
  FrameProgress(std::ostream& err, int64_t total, bool quiet)
      : err_(err),
        total_(std::max<int64_t>(1, total)),
        quiet_(quiet),
        tty_(&err == &std::cerr && isatty(STDERR_FILENO) == 1) {}

  void Update(int64_t done, const std::string& note) {
    if (quiet_) return;
    const int percent = static_cast<int>(100 * done / total_);
    const int filled = percent / 4;
    const std::string bar = absl::StrFormat("[%s%s] %3d%% %lld/%lld frames  %s",
                                            std::string(filled, '#'),
                                            std::string(25 - filled, ' '), percent,
                                            static_cast<long long>(done),
                                            static_cast<long long>(total_), note);
    if (tty_) {
      err_ << "\r" << absl::StrFormat("%-78s", bar) << std::flush;
      open_ = true;
    } else if (percent / 10 != last_ / 10 || done == total_) {
      err_ << bar << "\n";
    }
    last_ = percent;
  }
  void End() {
    if (open_) err_ << "\n";
    open_ = false;
  }

 private:
  std::ostream& err_;
  const int64_t total_;
  const bool quiet_;
  const bool tty_;
  bool open_ = false;
  int last_ = -1;
};

absl::StatusOr<std::pair<int, int>> ParseSize(const std::string& s) {
  std::vector<std::string> parts = absl::StrSplit(s, 'x');
  int w = 0, h = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &w) || !absl::SimpleAtoi(parts[1], &h) ||
      w < 8 || h < 8 || w > 8192 || h > 8192) {
    return absl::InvalidArgumentError(
        absl::StrCat("--frame-size must be WxH with 8 <= W, H <= 8192, got '", s, "'"));
  }
  return std::make_pair(w, h);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// bench --op fuse --variant "OFF[+ON]" (each a number, 0x... for hex): {cuda_disable, cuda_enable}.
absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseVariant(const std::string& variant) {
  std::pair<uint32_t, uint32_t> bits{0, 0};
  if (variant.empty()) return bits;
  std::vector<std::string> parts = absl::StrSplit(variant, '+');
  uint32_t* out[2] = {&bits.first, &bits.second};
  for (size_t k = 0; k < parts.size(); ++k) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(parts[k].c_str(), &end, 0);
    if (k >= 2 || parts[k].empty() || *end != 0 || v > UINT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("--variant must be OFF or OFF+ON (numbers), got '", variant, "'"));
    }
    *out[k] = static_cast<uint32_t>(v);
  }
  return bits;
}

// bench --op fuse: where in the frame period session k sends its first frame, as a fraction of
// the period, for --phase even (k / n: the frames of the sessions take turns, the kernel bench's
// schedule) and random (uniform, fixed seed: independent cameras); empty for open (each session
// starts when its own open is answered: the sessions opened together start almost together).
std::vector<double> PhaseOffsets(const std::string& phase, int n) {
  std::vector<double> offsets;
  if (phase == "open") return offsets;
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int k = 0; k < n; ++k) offsets.push_back(phase == "even" ? double(k) / n : uniform(rng));
  return offsets;
}

// The sessions' common start: Arrive() blocks until every session has arrived (opened) or left
// (failed), then returns the same time for all, a little after the last arrival.
class StartGate {
 public:
  explicit StartGate(int n) : left_(n) {}
  Clock::time_point Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--left_ == 0) Open();
    cv_.wait(lock, [&] { return left_ == 0; });
    return start_;
  }
  void Leave() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--left_ == 0) Open();
  }

 private:
  void Open() {
    start_ = Clock::now() + std::chrono::milliseconds(20);
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
  Clock::time_point start_;
};

// The most of `starts` that fall within one `window_s` of the period `period_s` (circular).
int CrowdedPhases(const std::vector<Clock::time_point>& starts, double period_s, double window_s) {
  std::vector<double> phase;
  for (const Clock::time_point& t : starts) {
    const double s = std::chrono::duration<double>(t - starts.front()).count();
    phase.push_back(s - std::floor(s / period_s) * period_s);
  }
  int most = 0;
  for (double a : phase) {
    int n = 0;
    for (double b : phase) {
      const double d = b - a < 0 ? b - a + period_s : b - a;
      n += d < window_s;
    }
    most = std::max(most, n);
  }
  return most;
}

// The parts of each frame's round trip (seconds), one column a part, and their summaries: the
// mean, and the mean over the slowest frames (round trip >= a threshold, the p99) to show what
// the tail is made of.
class RoundTripParts {
 public:
  enum Part {
    kLag, kTransit, kSendCall, kServer, kWaiting, kQueue, kRun, kGpu, kRoundTrip, kParts
  };
  static constexpr const char* kLabels[kParts] = {
      "writer wake lag (scheduled -> woke)",
      "transit (wire both ways, unread, parse)",
      "  of it, the SendFrame call",
      "server (arrival -> answer)",
      "  waiting (session order, pool queue)",
      "    of it, the pool queue",
      "  ProcessFrame (worker wall)",
      "    of it, GPU stages",
      "round trip"};
  static constexpr const char* kKeys[kParts] = {"lag",     "transit", "send_call",
                                                "server",  "waiting", "queue",
                                                "process", "gpu",     "round_trip"};
  void Add(const std::array<double, kParts>& row) {
    for (int k = 0; k < kParts; ++k) columns_[k].push_back(row[k]);
  }
  int64_t size() const { return static_cast<int64_t>(columns_[kRoundTrip].size()); }
  const std::vector<double>& column(int k) const { return columns_[k]; }
  double Mean(int k) const {
    double sum = 0;
    for (double v : columns_[k]) sum += v;
    return columns_[k].empty() ? 0 : sum / static_cast<double>(columns_[k].size());
  }
  double TailMean(int k, double threshold) const {
    double sum = 0;
    int64_t n = 0;
    for (size_t i = 0; i < columns_[k].size(); ++i) {
      if (columns_[kRoundTrip][i] < threshold) continue;
      sum += columns_[k][i];
      ++n;
    }
    return n == 0 ? 0 : sum / static_cast<double>(n);
  }

 private:
  std::array<std::vector<double>, kParts> columns_;
};

}  // namespace

absl::Status WriteSyntheticSequence(const std::string& dir, int64_t frames) {
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "depth", ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": ", ec.message()));
  fusion::CameraIntrinsics camera;
  camera.width = 320;
  camera.height = 240;
  camera.fx = camera.fy = 262.5;
  camera.cx = 159.5;
  camera.cy = 119.5;
  const fusion::SyntheticScene scene = fusion::SyntheticScene::Room();
  const std::vector<fusion::RigidTransform> poses =
      fusion::SyntheticScene::Orbit(static_cast<int>(frames), 0.8);
  for (int64_t i = 0; i < frames; ++i) {
    HostArray depth = scene.RenderDepth(camera, poses[i], 5.0);
    fusion::AddDepthNoise(&depth, static_cast<uint64_t>(i) + 1);
    const std::string path = (fs::path(dir) / "depth" / absl::StrFormat("%05d.png", i)).string();
    if (absl::Status s = WritePng(path, fusion::ToUint16Depth(depth, 1000.0)); !s.ok()) return s;
  }
  const std::string intrinsics = (fs::path(dir) / "intrinsics.txt").string();
  FILE* f = std::fopen(intrinsics.c_str(), "w");
  if (f == nullptr) return absl::PermissionDeniedError(intrinsics + ": cannot be written");
  std::fprintf(f, "%.17g %.17g %.17g %.17g %d %d 1000.0\n", camera.fx, camera.fy, camera.cx,
               camera.cy, camera.width, camera.height);
  std::fclose(f);
  return fusion::WritePosesTxt((fs::path(dir) / "poses.txt").string(), poses);
}

absl::Status ValidateFuseOptions(const FuseOptions& o) {
  if (o.dir.empty()) return absl::InvalidArgumentError("DIR: required");
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out-dir must not be empty");
  if (o.frames < 0) return absl::InvalidArgumentError("--frames must be >= 0");
  if (o.view_every < 0) return absl::InvalidArgumentError("--view-every must be >= 0");
  if (o.voxel_size_m < 0 || o.truncation_m < 0 || o.budget_mib < 0) {
    return absl::InvalidArgumentError("--voxel-size, --truncation and --budget-mib must be >= 0");
  }
  if (o.generate < 0 || o.generate > 100000) {
    return absl::InvalidArgumentError("--generate must be in [1, 100000]");
  }
  if (o.use_poses && o.no_tracking) {
    return absl::InvalidArgumentError("--use-poses already turns tracking off; give one of them");
  }
  return absl::OkStatus();
}

CLI::App* AddFuseCommand(CLI::App* app, FuseOptions* o) {
  CLI::App* cmd = app->add_subcommand(
      "fuse",
      "Fuse an RGB-D sequence folder (depth/*.png 16-bit, intrinsics.txt, optional poses.txt / "
      "trajectory.log / groundtruth.txt) into a TSDF volume on the server: writes the "
      "trajectory, the mesh and rendered views");
  cmd->add_option("dir", o->dir, "Sequence folder")->required();
  cmd->add_option("--out-dir,-o", o->out_dir,
                  "Output folder: trajectory.txt, mesh.ply, view.png (and view_NNNNN.png)")
      ->capture_default_str();
  cmd->add_option("--frames", o->frames, "Fuse only the first N frames (default: all)");
  cmd->add_option("--view-every", o->view_every,
                  "Also render a shaded view from the current pose every N frames");
  cmd->add_option("--voxel-size", o->voxel_size_m, "Voxel size in metres (default 0.004)");
  cmd->add_option("--truncation", o->truncation_m, "TSDF truncation in metres (default 0.02)");
  cmd->add_option("--budget-mib", o->budget_mib, "Brick budget in MiB (default 512)");
  cmd->add_flag("--no-tracking", o->no_tracking,
                "No ICP: frames with poses use them (fixed), others keep the previous pose");
  cmd->add_flag("--use-poses", o->use_poses,
                "Integrate at the sequence's poses (no tracking); needs poses in DIR");
  cmd->add_option("--device", o->device, "Where the server may run the session")
      ->check(CLI::IsMember({"any", "gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--generate", o->generate,
                  "First write a synthetic sequence of N frames (a room with spheres and boxes, "
                  "320x240, noisy depth, known poses) into DIR, then fuse it");
  cmd->add_flag("--json", o->json, "Print the summary as JSON (and no progress)");
  cmd->footer(kExitCodeHelp);
  return cmd;
}

int RunFuse(const GlobalOptions& global, const FuseOptions& o, std::ostream& out,
            std::ostream& err) {
  if (absl::Status s = ValidateFuseOptions(o); !s.ok()) {
    return ReportUsageError(err, std::string(s.message()), "fuse");
  }
  if (o.generate > 0) {
    if (absl::Status s = WriteSyntheticSequence(o.dir, o.generate); !s.ok()) {
      return ReportError(err, kExitIo, s);
    }
  }
  absl::StatusOr<fusion::Sequence> seq = fusion::OpenSequence(o.dir);
  if (!seq.ok()) return ReportError(err, kExitIo, seq.status());
  if (o.use_poses && seq->poses.empty()) {
    return ReportError(err, kExitIo,
                       absl::NotFoundError(absl::StrCat(o.dir, ": --use-poses, but no poses")));
  }
  const int64_t n = o.frames > 0 ? std::min<int64_t>(o.frames, seq->depth_files.size())
                                 : static_cast<int64_t>(seq->depth_files.size());
  if (n == 0) return ReportError(err, kExitIo, absl::NotFoundError(o.dir + ": no depth frames"));
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) {
    return ReportError(err, kExitIo,
                       absl::PermissionDeniedError(absl::StrCat(o.out_dir, ": ", ec.message())));
  }

  v1::FusionConfig config;
  SetCamera(seq->camera, config.mutable_camera());
  config.set_depth_scale(seq->depth_scale);
  if (o.voxel_size_m > 0) config.set_voxel_size_m(o.voxel_size_m);
  if (o.truncation_m > 0) config.set_truncation_m(o.truncation_m);
  if (o.budget_mib > 0) config.set_brick_budget_bytes(o.budget_mib << 20);
  if (o.no_tracking || o.use_poses) config.set_tracking(false);
  config.mutable_device()->set_kind(DeviceKindFromFlag(o.device));

  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);
  CallOptions no_deadline;
  no_deadline.timeout = std::chrono::milliseconds(-1);  // a session lasts as long as it needs
  absl::StatusOr<std::unique_ptr<FusionSession>> session =
      FusionSession::Open(**client, config, no_deadline);
  if (!session.ok()) return ReportError(err, kExitRpc, session.status(), global.server);
  const v1::FusionOpened& opened = (*session)->opened();
  if (!o.json) {
    out << "fresnel fuse: " << n << " frames " << seq->camera.width << "x" << seq->camera.height
        << " on " << opened.device() << ", voxel " << opened.config().voxel_size_m() * 1e3
        << " mm, " << opened.brick_capacity() << " bricks (" << FormatBytes(opened.reserved_bytes())
        << " reserved), tracking " << (opened.config().tracking() ? "on" : "off") << "\n"
        << std::flush;
  }

  FrameProgress progress(err, n, o.json);
  std::vector<fusion::RigidTransform> trajectory;
  std::vector<std::string> files;
  double track_s = 0, integrate_s = 0, raycast_s = 0, round_trip_s = 0;
  int64_t lost = 0, failed = 0, bricks = 0;
  auto write_view = [&](const std::string& path, const fusion::RigidTransform* pose) -> int {
    v1::FusionRenderRequest view;
    if (pose != nullptr) SetPose(*pose, view.mutable_t_world_camera());
    view.set_mode(v1::FUSION_RENDER_SHADED);
    absl::StatusOr<HostArray> image = (*session)->Render(view);
    if (!image.ok()) return ReportError(err, kExitRpc, image.status(), global.server);
    if (absl::Status s = WritePng(path, *image); !s.ok()) return ReportError(err, kExitIo, s);
    files.push_back(path);
    return kExitOk;
  };
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<HostArray> depth = ReadPng(seq->depth_files[i]);
    if (!depth.ok()) return ReportError(err, kExitIo, depth.status());
    if (depth->dtype() != DType::kUint16 || depth->ndim() != 2) {
      return ReportError(err, kExitIo,
                         absl::InvalidArgumentError(absl::StrCat(
                             seq->depth_files[i], ": depth must be a 16-bit grayscale PNG")));
    }
    v1::FusionFrame frame;
    frame.set_depth(depth->bytes().data(), depth->nbytes());
    frame.set_timestamp_s(static_cast<double>(i));
    const bool have_pose = i < static_cast<int64_t>(seq->poses.size());
    // The first frame sits at the sequence's first pose (so that the trajectory is in its
    // frame); later ones are tracked, or fixed with --use-poses / --no-tracking.
    if (have_pose && (i == 0 || o.use_poses || o.no_tracking)) {
      SetPose(seq->poses[i], frame.mutable_fixed_pose());
    }
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<v1::FusionFrameResult> r = (*session)->ProcessFrame(frame);
    round_trip_s += std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r.ok()) {
      // A frame the server refused (e.g. the brick budget full) is reported, and fusion goes on;
      // an ended session is fatal.
      if (absl::IsInvalidArgument(r.status()) || absl::IsResourceExhausted(r.status())) {
        progress.End();
        err << "fresnel: frame " << i << ": " << r.status().message() << "\n";
        ++failed;
        trajectory.push_back(trajectory.empty() ? fusion::RigidTransform() : trajectory.back());
        continue;
      }
      progress.End();
      return ReportError(err, kExitRpc, r.status(), global.server);
    }
    trajectory.push_back(PoseOf(r->t_world_camera()));
    track_s += r->stage_seconds().track();
    integrate_s += r->stage_seconds().integrate();
    raycast_s += r->stage_seconds().raycast();
    lost += r->tracking() == v1::FUSION_TRACKING_LOST;
    bricks = r->bricks_in_use();
    progress.Update(i + 1, absl::StrCat(r->tracking() == v1::FUSION_TRACKING_OK ? "tracking ok"
                                                                                : "LOST",
                                        ", ", bricks, " bricks"));
    if (o.view_every > 0 && (i + 1) % o.view_every == 0) {
      const std::string path =
          (fs::path(o.out_dir) / absl::StrFormat("view_%05d.png", i + 1)).string();
      if (int rc = write_view(path, nullptr); rc != kExitOk) return rc;
    }
  }
  progress.End();

  const std::string view_path = (fs::path(o.out_dir) / "view.png").string();
  if (int rc = write_view(view_path, nullptr); rc != kExitOk) return rc;
  absl::StatusOr<FusionMesh> mesh = (*session)->ExtractMesh();
  if (!mesh.ok()) return ReportError(err, kExitRpc, mesh.status(), global.server);
  const std::string mesh_path = (fs::path(o.out_dir) / "mesh.ply").string();
  {
    FILE* f = std::fopen(mesh_path.c_str(), "wb");
    const bool ok = f != nullptr && std::fwrite(mesh->ply.data(), 1, mesh->ply.size(), f) ==
                                        mesh->ply.size();
    if (f != nullptr) std::fclose(f);
    if (!ok) {
      return ReportError(err, kExitIo,
                         absl::PermissionDeniedError(mesh_path + ": cannot be written"));
    }
    files.push_back(mesh_path);
  }
  const std::string traj_path = (fs::path(o.out_dir) / "trajectory.txt").string();
  if (absl::Status s = fusion::WritePosesTxt(traj_path, trajectory); !s.ok()) {
    return ReportError(err, kExitIo, s);
  }
  files.push_back(traj_path);
  absl::StatusOr<int64_t> closed = (*session)->Close();
  if (!closed.ok()) return ReportError(err, kExitRpc, closed.status(), global.server);

  double ate = -1;
  if (seq->poses.size() >= trajectory.size()) {
    std::vector<fusion::RigidTransform> gt(seq->poses.begin(),
                                           seq->poses.begin() + trajectory.size());
    ate = fusion::AbsoluteTrajectoryRmse(trajectory, gt);
  }
  const double fn = static_cast<double>(std::max<int64_t>(1, n - failed));
  if (o.json) {
    JsonObject stages, json;
    stages.Add("track", track_s / fn * 1e3)
        .Add("integrate", integrate_s / fn * 1e3)
        .Add("raycast", raycast_s / fn * 1e3);
    json.Add("device", opened.device())
        .Add("frames", n)
        .Add("frames_failed", failed)
        .Add("frames_lost", lost)
        .Add("bricks_in_use", bricks)
        .Add("brick_capacity", opened.brick_capacity())
        .Add("mesh_vertices", mesh->vertices)
        .Add("mesh_triangles", mesh->triangles)
        .Add("stage_mean_ms", stages)
        .Add("round_trip_mean_ms", round_trip_s / static_cast<double>(n) * 1e3)
        .AddRaw("files", absl::StrCat("[", absl::StrJoin(files, ", ", [](std::string* o, const std::string& f) { o->append(JsonQuote(f)); }), "]"));
    if (ate >= 0) json.Add("ate_rmse_m", ate);
    out << json.Str() << "\n";
    return kExitOk;
  }
  Table t;
  t.AddRow({"frames", absl::StrCat(n, " (", failed, " refused, ", lost, " tracking lost)")});
  t.AddRow({"volume", absl::StrCat(bricks, " of ", opened.brick_capacity(), " bricks in use")});
  t.AddRow({"server (ms/frame)",
            absl::StrFormat("track %.3f + integrate %.3f + raycast %.3f", track_s / fn * 1e3,
                            integrate_s / fn * 1e3, raycast_s / fn * 1e3)});
  t.AddRow({"round trip (ms)", absl::StrFormat("%.3f mean (PNG decode not included)",
                                               round_trip_s / static_cast<double>(n) * 1e3)});
  if (ate >= 0) {
    t.AddRow({"ATE RMSE", absl::StrFormat("%.2f cm against the sequence's poses", ate * 100)});
  }
  t.AddRow({"mesh", absl::StrCat(mesh->vertices, " vertices, ", mesh->triangles, " triangles")});
  t.AddRow({"wrote", absl::StrJoin(files, ", ")});
  t.Print(out);
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// bench --op fuse

int RunFuseBench(const GlobalOptions& global, const FuseBenchOptions& o, std::ostream& out,
                 std::ostream& err) {
  absl::StatusOr<std::pair<int, int>> size = ParseSize(o.frame_size);
  if (!size.ok()) return ReportUsageError(err, std::string(size.status().message()), "bench");
  if (!(o.fps > 0 && o.fps <= 10000)) {
    return ReportUsageError(err, "--fps must be in (0, 10000]", "bench");
  }
  absl::StatusOr<std::pair<uint32_t, uint32_t>> variant = ParseVariant(o.variant);
  if (!variant.ok()) return ReportUsageError(err, std::string(variant.status().message()), "bench");
  fusion::CameraIntrinsics camera;
  camera.width = size->first;
  camera.height = size->second;
  camera.fx = camera.fy = 0.72 * camera.width;  // about 70 degrees across, like a RealSense D4xx
  camera.cx = (camera.width - 1) / 2.0;
  camera.cy = (camera.height - 1) / 2.0;
  // 30 frames of the synthetic room along the test orbit, played forwards and backwards.
  constexpr int kFrames = 30;
  const fusion::SyntheticScene scene = fusion::SyntheticScene::Room();
  const std::vector<fusion::RigidTransform> poses = fusion::SyntheticScene::Orbit(kFrames, 0.3);
  std::vector<std::string> depth;
  for (const fusion::RigidTransform& pose : poses) {
    depth.push_back(
        fusion::ToUint16Depth(scene.RenderDepth(camera, pose, 5.0), 1000.0).TakeBytes());
  }
  auto frame_of = [&](int64_t i) {
    const int64_t k = i % (2 * kFrames - 2);
    return static_cast<int>(k < kFrames ? k : 2 * kFrames - 2 - k);
  };
  v1::FusionConfig config;
  SetCamera(camera, config.mutable_camera());
  if (o.budget_mib > 0) config.set_brick_budget_bytes(o.budget_mib << 20);
  config.mutable_device()->set_kind(DeviceKindFromFlag(o.device));
  config.set_cuda_disable(variant->first);
  config.set_cuda_enable(variant->second);

  // One client (TCP connection) per session unless --connections says fewer: 32 sessions of
  // 848x480 at 90 fps are 2.3 GB/s, more than one connection carries.
  const int connections =
      o.connections > 0 ? std::min(o.connections, std::max(1, o.sessions)) : std::max(1, o.sessions);
  std::vector<std::unique_ptr<Client>> clients;
  for (int k = 0; k < connections; ++k) {
    absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global, connections > 1);
    if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);
    clients.push_back(std::move(*client));
  }
  const int64_t measured = std::max<int64_t>(1, std::llround(o.duration_s * o.fps));
  const int64_t total = o.warmup_frames + measured;
  if (!o.json) {
    out << "fresnel bench: fuse " << camera.width << "x" << camera.height << " uint16, "
        << o.sessions << " session(s) at " << o.fps << " fps for " << o.duration_s << " s after "
        << o.warmup_frames << " warm-up frame(s), device " << o.device << ", " << connections
        << " connection(s)\n"
        << std::flush;
  }

  // What one frame's round trip was made of, all on this host's steady clock (the server's
  // parts from its answer): scheduled send -> the writer woke -> SendFrame returned; the answer
  // read; the server's arrival-to-answer time, its pool queue wait, the job's run (ProcessFrame's
  // host wall on a device worker) and the GPU stage times.
  struct FrameTimes {
    Clock::time_point due, woke, sent, answered;
    double server_s = 0, queue_s = 0, run_s = 0, gpu_s = 0;
    bool ok = false;
  };
  struct Tally {
    std::vector<FrameTimes> frames;  // by frame index (seq - 1)
    double track_s = 0, integrate_s = 0, raycast_s = 0;
    int64_t lost = 0, failed = 0, late_sends = 0;
    // The session's memory: reserved on its device, bricks its budget buys, most bricks in use.
    int64_t reserved_bytes = 0, brick_capacity = 0, bricks_in_use = 0;
    std::map<std::string, int64_t> errors, devices;
    absl::Status fatal;
    double elapsed_s = 0;
    // Its open answered; its first frame due; its close sent (after its last answer).
    Clock::time_point opened, start, closing = Clock::time_point::max();
  };
  std::vector<Tally> tallies(static_cast<size_t>(o.sessions));
  CallOptions no_deadline;
  no_deadline.timeout = std::chrono::milliseconds(-1);
  const auto period = std::chrono::duration<double>(1.0 / o.fps);
  // Where in the frame period each session starts (PhaseOffsets: --phase even / random); with
  // --phase open each starts when its own open is answered.
  const std::vector<double> offsets = PhaseOffsets(o.phase, o.sessions);
  StartGate gate(o.sessions);
  std::vector<std::thread> threads;
  for (int s = 0; s < o.sessions; ++s) {
    threads.emplace_back([&, s] {
      Tally& t = tallies[s];
      absl::StatusOr<std::unique_ptr<FusionSession>> session =
          FusionSession::Open(*clients[s % connections], config, no_deadline);
      if (!session.ok()) {
        t.fatal = session.status();
        gate.Leave();
        return;
      }
      t.opened = Clock::now();
      t.frames.resize(static_cast<size_t>(total));
      t.reserved_bytes = (*session)->opened().reserved_bytes();
      t.brick_capacity = (*session)->opened().brick_capacity();
      const Clock::time_point start =
          offsets.empty() ? Clock::now()
                          : gate.Arrive() + std::chrono::duration_cast<Clock::duration>(
                                                period * offsets[static_cast<size_t>(s)]);
      t.start = start;
      std::thread writer([&] {
        for (int64_t i = 0; i < total; ++i) {
          FrameTimes& ft = t.frames[static_cast<size_t>(i)];
          ft.due = start + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(i));
          std::this_thread::sleep_until(ft.due);
          ft.woke = Clock::now();
          if (ft.woke - ft.due > period) ++t.late_sends;
          v1::FusionFrame frame;
          frame.set_depth(depth[frame_of(i)]);
          if (i == 0) SetPose(poses[0], frame.mutable_fixed_pose());
          const bool sent = (*session)->SendFrame(std::move(frame)).ok();
          ft.sent = Clock::now();
          if (!sent) return;
        }
      });
      for (int64_t i = 0; i < total; ++i) {
        absl::StatusOr<v1::FusionResponse> r = (*session)->ReadResponse();
        if (!r.ok()) {
          t.fatal = r.status();
          break;
        }
        const Clock::time_point now = Clock::now();
        if (i < o.warmup_frames) continue;
        if (r->status().code() != 0) {
          ++t.failed;
          ++t.errors[absl::StatusCodeToString(static_cast<absl::StatusCode>(r->status().code()))];
          continue;
        }
        const int64_t index = r->seq() - 1;  // frames start at seq 1
        if (index < 0 || index >= total) continue;
        FrameTimes& ft = t.frames[static_cast<size_t>(index)];
        const v1::FusionFrameResult& f = r->frame();
        ft.answered = now;
        ft.ok = true;
        ft.server_s = f.info().total_seconds();
        ft.queue_s = f.info().queue_wait_seconds();
        ft.run_s = f.info().compute_seconds();
        ft.gpu_s = f.stage_seconds().track() + f.stage_seconds().integrate() +
                   f.stage_seconds().raycast();
        t.track_s += f.stage_seconds().track();
        t.integrate_s += f.stage_seconds().integrate();
        t.raycast_s += f.stage_seconds().raycast();
        t.lost += f.tracking() == v1::FUSION_TRACKING_LOST;
        t.bricks_in_use = std::max(t.bricks_in_use, f.bricks_in_use());
        ++t.devices[f.info().device()];
      }
      t.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count() -
                    static_cast<double>(o.warmup_frames) / o.fps;
      writer.join();
      if (t.fatal.ok()) {
        t.closing = Clock::now();
        absl::StatusOr<int64_t> closed = (*session)->Close();
        if (!closed.ok()) t.fatal = closed.status();
      }
    });
  }
  for (std::thread& th : threads) th.join();

  // Frames that overlapped another session's opening (due before every session had opened and
  // sent its warm-up frames: volume creation, first frames) or closing (answered after the first
  // session began to close: volume teardown). Sessions that start apart (--phase open) end apart,
  // so their first and last measured frames overlap the others' opening and closing.
  Clock::time_point all_warm{}, first_close = Clock::time_point::max();
  for (const Tally& t : tallies) {
    all_warm = std::max(all_warm, t.opened);
    first_close = std::min(first_close, t.closing);
  }
  all_warm += std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(o.warmup_frames));
  std::vector<bool> while_opening, while_closing;  // by frame, in parts' order
  Tally all;
  RoundTripParts parts;
  std::vector<Clock::time_point> starts;
  double max_elapsed = 0;
  int sessions_failed = 0;
  for (const Tally& t : tallies) {
    for (const FrameTimes& ft : t.frames) {
      if (!ft.ok) continue;
      auto sec = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
      const double round_trip = sec(ft.answered - ft.due), lag = sec(ft.woke - ft.due);
      parts.Add({lag, round_trip - lag - ft.server_s, sec(ft.sent - ft.woke), ft.server_s,
                 ft.server_s - ft.run_s, ft.queue_s, ft.run_s, ft.gpu_s, round_trip});
      while_opening.push_back(ft.due < all_warm);
      while_closing.push_back(ft.answered >= first_close);
    }
    all.track_s += t.track_s;
    all.integrate_s += t.integrate_s;
    all.raycast_s += t.raycast_s;
    all.lost += t.lost;
    all.failed += t.failed;
    all.late_sends += t.late_sends;
    all.reserved_bytes = std::max(all.reserved_bytes, t.reserved_bytes);
    all.brick_capacity = std::max(all.brick_capacity, t.brick_capacity);
    all.bricks_in_use = std::max(all.bricks_in_use, t.bricks_in_use);
    for (const auto& [k, v] : t.errors) all.errors[k] += v;
    for (const auto& [k, v] : t.devices) all.devices[k] += v;
    if (!t.fatal.ok()) {
      ++sessions_failed;
      if (all.fatal.ok()) all.fatal = t.fatal;
    } else {
      starts.push_back(t.start);
    }
    max_elapsed = std::max(max_elapsed, t.elapsed_s);
  }
  const int64_t ok = parts.size();
  if (ok == 0) {
    err << "fresnel: no frame was answered\n";
    return ReportError(err, kExitRpc, all.fatal.ok() ? absl::UnknownError("no frames") : all.fatal,
                       global.server);
  }
  const double fn = static_cast<double>(ok);
  const std::vector<double>& round_trips = parts.column(RoundTripParts::kRoundTrip);
  const double p50 = Percentile(round_trips, 0.50), p99 = Percentile(round_trips, 0.99),
               pmax = Percentile(round_trips, 1.0);
  const double fps_all = max_elapsed > 0 ? fn / max_elapsed : 0;
  // Phases: the most sessions whose first frame falls in one 1 ms window of the period.
  const int crowded = CrowdedPhases(starts, period.count(), 1e-3);
  // Frames (all, and of the slowest 1 %) in all, while sessions opened, while they closed.
  std::array<int64_t, 3> frames_in{0, 0, 0}, slowest_in{0, 0, 0};
  for (size_t i = 0; i < while_opening.size(); ++i) {
    const bool in[3] = {true, while_opening[i], while_closing[i]};
    for (int w = 0; w < 3; ++w) {
      frames_in[w] += in[w];
      slowest_in[w] += in[w] && round_trips[i] >= p99;
    }
  }
  std::vector<std::string> errors, devices;
  for (const auto& [k, v] : all.errors) errors.push_back(absl::StrCat(k, " ", v));
  for (const auto& [k, v] : all.devices) devices.push_back(absl::StrCat(k, " ", v));
  if (o.json) {
    JsonObject latency, stages, breakdown, json;
    latency.Add("p50", p50 * 1e3).Add("p99", p99 * 1e3).Add("max", pmax * 1e3);
    stages.Add("track", all.track_s / fn * 1e3)
        .Add("integrate", all.integrate_s / fn * 1e3)
        .Add("raycast", all.raycast_s / fn * 1e3)
        .Add("queue_wait", parts.Mean(RoundTripParts::kQueue) * 1e3);
    for (int k = 0; k < RoundTripParts::kParts; ++k) {
      JsonObject part;
      part.Add("mean", parts.Mean(k) * 1e3)
          .Add("p99", Percentile(parts.column(k), 0.99) * 1e3)
          .Add("slowest_1pct_mean", parts.TailMean(k, p99) * 1e3);
      breakdown.Add(RoundTripParts::kKeys[k], part);
    }
    json.Add("op", std::string("fuse"))
        .Add("frame_size", std::vector<int64_t>{camera.width, camera.height})
        .Add("sessions", o.sessions)
        .Add("connections", connections)
        .Add("phase", o.phase)
        .Add("variant", o.variant)
        .Add("sessions_in_busiest_1ms_of_period", crowded)
        .Add("frames_while_sessions_opened", frames_in[1])
        .Add("slowest_1pct_while_sessions_opened", slowest_in[1])
        .Add("frames_while_sessions_closed", frames_in[2])
        .Add("slowest_1pct_while_sessions_closed", slowest_in[2])
        .Add("sessions_failed", sessions_failed)
        .Add("target_fps", o.fps)
        .Add("frames_ok", ok)
        .Add("frames_failed", all.failed)
        .Add("frames_lost", all.lost)
        .Add("late_sends", all.late_sends)
        .Add("reserved_bytes_per_session", all.reserved_bytes)
        .Add("brick_capacity", all.brick_capacity)
        .Add("bricks_in_use_max", all.bricks_in_use)
        .Add("frames_per_second", fps_all)
        .Add("round_trip_ms", latency)
        .Add("server_mean_ms", stages)
        .Add("breakdown_ms", breakdown);
    out << json.Str() << "\n";
  } else {
    Table t;
    t.AddRow({"frames", absl::StrCat(ok, " ok, ", all.failed, " refused",
                                     errors.empty() ? ""
                                                    : absl::StrCat(" (", absl::StrJoin(errors, ", "), ")"),
                                     ", ", all.lost, " tracking lost; ", sessions_failed,
                                     " session(s) failed")});
    t.AddRow({"throughput", absl::StrFormat("%.1f frames/s in all (%.1f per session; target %g)",
                                            fps_all, fps_all / o.sessions, o.fps)});
    t.AddRow({"round trip (ms)",
              absl::StrCat("p50 ", FormatMs(p50), "  p99 ", FormatMs(p99), "  max ",
                           FormatMs(pmax), " (scheduled send -> answer)")});
    t.AddRow({"server (ms)",
              absl::StrCat("queue ", FormatMs(parts.Mean(RoundTripParts::kQueue)), "; track ",
                           FormatMs(all.track_s / fn), " + integrate ",
                           FormatMs(all.integrate_s / fn), " + raycast ",
                           FormatMs(all.raycast_s / fn), " (mean)")});
    t.AddRow({"late sends", absl::StrCat(all.late_sends, " (held back more than a frame period)")});
    t.AddRow({"phases", absl::StrCat(o.phase, ": ", crowded, " of ", starts.size(),
                                     " sessions start within the busiest 1 ms of the period")});
    t.AddRow({"others opening", absl::StrCat(frames_in[1], " frames due before every session had "
                                             "opened and warmed up, ", slowest_in[1], " of the slowest ",
                                             slowest_in[0])});
    t.AddRow({"others closing", absl::StrCat(frames_in[2], " frames answered after the first close, ",
                                             slowest_in[2], " of the slowest ", slowest_in[0])});
    t.AddRow({"devices", absl::StrJoin(devices, ", ")});
    t.AddRow({"memory", absl::StrCat(FormatBytes(all.reserved_bytes), " reserved a session; ",
                                     all.bricks_in_use, " of ", all.brick_capacity,
                                     " bricks in use at most")});
    out << "\n";
    t.Print(out);
    Table b;
    b.AddRow({"round trip, in parts (ms)", "mean", "p99", "slowest 1 % (mean)"});
    for (int k = 0; k < RoundTripParts::kParts; ++k) {
      b.AddRow({RoundTripParts::kLabels[k], FormatMs(parts.Mean(k)),
                FormatMs(Percentile(parts.column(k), 0.99)), FormatMs(parts.TailMean(k, p99))});
    }
    out << "\n";
    b.Print(out);
  }
  if (!all.fatal.ok()) {
    err << "fresnel: " << sessions_failed << " session(s) ended early: " << all.fatal.message()
        << "\n";
    return kExitRpc;
  }
  return kExitOk;
}

}  // namespace fresnel::cli
