#include "hologram_cmd.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "format.h"
#include "fresnel/client/shm.h"
#include "fresnel/io/npy.h"
#include "fresnel/io/png.h"
#include "fresnel/core/status.h"
#include "fresnel/core/uninitialized_array.h"
#include "fresnel/hologram/point_cloud.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel::cli {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  std::string tail = s.substr(s.size() - suffix.size());
  std::transform(tail.begin(), tail.end(), tail.begin(), ::tolower);
  return tail == suffix;
}

// "a,b,c" -> three doubles.
absl::StatusOr<std::array<double, 3>> ParseTriple(const std::string& flag, const std::string& s) {
  std::vector<std::string> parts = absl::StrSplit(s, ',');
  std::array<double, 3> v{};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) {
    ok = absl::SimpleAtod(absl::StripAsciiWhitespace(parts[i]), &v[i]) && std::isfinite(v[i]);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be three numbers in metres like 0.01,0.01,0.005, got '", s, "'"));
  }
  return v;
}

const char* AlgorithmLabel(v1::HologramAlgorithm a) {
  switch (a) {
    case v1::HOLOGRAM_ALGORITHM_REFERENCE: return "reference";
    case v1::HOLOGRAM_ALGORITHM_TRIANGULAR: return "triangular";
    case v1::HOLOGRAM_ALGORITHM_PIECEWISE: return "piecewise";
    case v1::HOLOGRAM_ALGORITHM_TENSOR: return "tensor";
    default: return "auto";
  }
}

const char* PrecisionLabel(v1::HologramTensorPrecision p) {
  switch (p) {
    case v1::HOLOGRAM_TENSOR_PRECISION_INT8: return "int8";
    case v1::HOLOGRAM_TENSOR_PRECISION_FP16: return "fp16";
    case v1::HOLOGRAM_TENSOR_PRECISION_BF16: return "bf16";
    case v1::HOLOGRAM_TENSOR_PRECISION_TF32: return "tf32";
    default: return "";
  }
}

// A PNG as uint8 [rows, cols] gray: RGB(A) by Rec. 601 luma, 16-bit by its high byte.
absl::StatusOr<HostArray> ReadGrayPng(const std::string& path) {
  absl::StatusOr<HostArray> png = ReadPng(path);
  if (!png.ok()) return png.status();
  const int64_t rows = png->dim(0), cols = png->dim(1);
  const int64_t channels = png->ndim() == 3 ? png->dim(2) : 1;
  HostArray gray(DType::kUint8, {rows, cols});
  uint8_t* g = gray.data<uint8_t>();
  auto value = [&](int64_t i, int64_t c) -> double {
    return png->dtype() == DType::kUint16 ? png->data<uint16_t>()[i * channels + c] / 257.0
                                          : png->data<uint8_t>()[i * channels + c];
  };
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double v = channels >= 3
                         ? 0.299 * value(i, 0) + 0.587 * value(i, 1) + 0.114 * value(i, 2)
                         : value(i, 0);
    g[i] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
  }
  return gray;
}

// A cloud as float64 [N, 5] for the request, turned by `deg` degrees about the vertical (y) axis
// through its bounding box's centre (0: as it is). Written straight into the array (no turned
// copy of the cloud, no zero-fill first): 1.25 ms for 1e5 points on the 2-core box, where the
// turned copy and then a zero-filled array took 2.31.
HostArray CloudArray(const hologram::PointCloud& cloud, double deg = 0) {
  const int64_t n = static_cast<int64_t>(cloud.size());
  HostArray a = UninitializedArray(DType::kFloat64, {n, 5});
  double cx = 0, cz = 0, c = 1, s = 0;
  if (deg != 0 && n > 0) {
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
    for (const hologram::Point& p : cloud) {
      lo[0] = std::min(lo[0], p.x_m);
      hi[0] = std::max(hi[0], p.x_m);
      lo[1] = std::min(lo[1], p.z_m);
      hi[1] = std::max(hi[1], p.z_m);
    }
    cx = 0.5 * (lo[0] + hi[0]);
    cz = 0.5 * (lo[1] + hi[1]);
    const double rad = deg * 3.14159265358979323846 / 180.0;
    c = std::cos(rad);
    s = std::sin(rad);
  }
  double* v = a.data<double>();
  for (int64_t i = 0; i < n; ++i) {
    const hologram::Point& p = cloud[static_cast<size_t>(i)];
    if (deg != 0) {
      const double dx = p.x_m - cx, dz = p.z_m - cz;
      v[i * 5 + 0] = cx + c * dx + s * dz;
      v[i * 5 + 2] = cz - s * dx + c * dz;
    } else {
      v[i * 5 + 0] = p.x_m;
      v[i * 5 + 2] = p.z_m;
    }
    v[i * 5 + 1] = p.y_m;
    v[i * 5 + 3] = p.amplitude;
    v[i * 5 + 4] = p.phase_rad;
  }
  return a;
}

// The q-quantile (0..1) of `v` by nearest rank; v must not be empty.
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::string Um(double m) { return absl::StrFormat("%g um", m * 1e6); }
std::string Nm(double m) { return absl::StrFormat("%g nm", m * 1e9); }

struct StreamStats {
  double latency_p50_s = 0, latency_p99_s = 0;  // frame handed to gRPC -> its answer complete
  double compute_mean_s = 0, server_mean_s = 0;  // ExecutionInfo compute / total, mean
  double queue_mean_s = 0, h2d_mean_s = 0, d2h_mean_s = 0;  // ExecutionInfo's other stages
  int64_t failed = 0;
};

// --frames: the request's config and source as o.frames frames of one Stream call (a --points
// cloud turned by --spin per frame). Returns the last frame that rendered; a failed frame does
// not end the stream, but if every frame failed the first failure is returned.
absl::StatusOr<HologramRender> StreamFrames(Client& client, const HologramCmdOptions& o,
                                            const v1::RenderRequest& request,
                                            const hologram::PointCloud& cloud,
                                            StreamStats* stats) {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> sent(static_cast<size_t>(o.frames));
  std::vector<double> latency, compute, server, queue, h2d, d2h;
  std::optional<HologramRender> last;
  absl::Status first_failure;
  int64_t next = 0;
  // A turning cloud's next frame is built on a thread of its own while this one is written (the
  // writer thread then only serialises it), joined by the future's destructor on every return.
  auto turned = [&](int64_t k) { return CloudArray(cloud, o.spin_deg * static_cast<double>(k)); };
  std::future<HostArray> ahead;
  auto next_frame = [&](v1::HologramFrameRequest* frame) {
    if (next == o.frames) return false;
    if (next == 0) *frame->mutable_config() = request.config();
    if (request.has_points()) {
      if (next == 0 || o.spin_deg == 0) {
        *frame->mutable_points() = request.points();
      } else {
        HostArray points = ahead.valid() ? ahead.get() : turned(next);
        ToProto(std::move(points), frame->mutable_points());
      }
      if (o.spin_deg != 0 && next + 1 < o.frames) {
        ahead = std::async(std::launch::async, turned, next + 1);
      }
    } else {
      *frame->mutable_image() = request.image();
    }
    sent[static_cast<size_t>(next++)] = Clock::now();
    return true;
  };
  auto on_frame = [&](int64_t index, const absl::Status& status, HologramRender* result) {
    if (!status.ok()) {
      ++stats->failed;
      if (first_failure.ok()) first_failure = status;
      return;
    }
    latency.push_back(
        std::chrono::duration<double>(Clock::now() - sent[static_cast<size_t>(index)]).count());
    compute.push_back(result->header.info().compute_seconds());
    server.push_back(result->header.info().total_seconds());
    queue.push_back(result->header.info().queue_wait_seconds());
    h2d.push_back(result->header.info().h2d_seconds());
    d2h.push_back(result->header.info().d2h_seconds());
    last = std::move(*result);
  };
  FRESNEL_RETURN_IF_ERROR(client.RenderStream(next_frame, on_frame));
  if (!last.has_value()) {
    return first_failure.ok() ? absl::InternalError("the stream answered no frame") : first_failure;
  }
  stats->latency_p50_s = Quantile(latency, 0.5);
  stats->latency_p99_s = Quantile(latency, 0.99);
  auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return sum / static_cast<double>(v.size());
  };
  stats->compute_mean_s = mean(compute);
  stats->server_mean_s = mean(server);
  stats->queue_mean_s = mean(queue);
  stats->h2d_mean_s = mean(h2d);
  stats->d2h_mean_s = mean(d2h);
  return *std::move(last);
}

}  // namespace

v1::HologramAlgorithm AlgorithmFromFlag(const std::string& name) {
  if (name == "reference") return v1::HOLOGRAM_ALGORITHM_REFERENCE;
  if (name == "triangular") return v1::HOLOGRAM_ALGORITHM_TRIANGULAR;
  if (name == "piecewise") return v1::HOLOGRAM_ALGORITHM_PIECEWISE;
  if (name == "tensor") return v1::HOLOGRAM_ALGORITHM_TENSOR;
  return v1::HOLOGRAM_ALGORITHM_AUTO;
}

absl::Status ValidateHologramOptions(HologramCmdOptions* o) {
  if (o->points.empty() == o->image.empty()) {
    return absl::InvalidArgumentError("give exactly one source: --points FILE or --image PNG");
  }
  if (!o->points.empty()) {
    if (!EndsWith(o->points, ".ply") && !EndsWith(o->points, ".npy")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--points ", o->points, ": must be .ply or .npy ([N, 4|5] float)"));
    }
    if (o->spacing_m != 0 || o->depth_m != 0) {
      return absl::InvalidArgumentError("--spacing and --depth go with --image, not --points");
    }
    if (o->count < 0) return absl::InvalidArgumentError("--count must be >= 1");
    if (o->count > 0 && !EndsWith(o->points, ".ply")) {
      return absl::InvalidArgumentError("--count samples a PLY mesh; it needs a .ply --points");
    }
    if (!o->fit.empty()) {
      absl::StatusOr<std::array<double, 3>> f = ParseTriple("--fit", o->fit);
      if (!f.ok()) return f.status();
      for (double v : *f) {
        if (v < 0) return absl::InvalidArgumentError("--fit extents must be >= 0");
      }
      o->fit_m = *f;
      o->have_fit = true;
    }
    if (!o->center.empty()) {
      absl::StatusOr<std::array<double, 3>> c = ParseTriple("--center", o->center);
      if (!c.ok()) return c.status();
      o->center_m = *c;
      o->have_center = true;
    }
    if (o->have_fit && !o->have_center) {
      return absl::InvalidArgumentError(
          "--fit needs --center X,Y,Z (where the box goes; Z > 0 is in front of the hologram)");
    }
  } else {
    if (o->count != 0 || !o->fit.empty() || !o->center.empty()) {
      return absl::InvalidArgumentError("--count, --fit and --center go with --points, not --image");
    }
    if (!(o->spacing_m > 0)) return absl::InvalidArgumentError("--image needs --spacing > 0 (metres)");
    if (!(o->depth_m > 0)) return absl::InvalidArgumentError("--image needs --depth > 0 (metres)");
  }
  std::vector<std::string> wh = absl::StrSplit(o->size, absl::ByAnyChar("xX"));
  if (wh.size() != 2 || !absl::SimpleAtoi(wh[0], &o->width) ||
      !absl::SimpleAtoi(wh[1], &o->height) || o->width < 1 || o->height < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--size must be WIDTHxHEIGHT in pixels like 1024x768, got '", o->size, "'"));
  }
  if (!(o->pitch_m > 0)) return absl::InvalidArgumentError("--pitch must be > 0 (metres)");
  if (!(o->wavelength_m > 0)) return absl::InvalidArgumentError("--wavelength must be > 0 (metres)");
  if (!std::isfinite(o->min_snr_db)) return absl::InvalidArgumentError("--min-snr must be finite");
  if (o->frames < 1) return absl::InvalidArgumentError("--frames must be >= 1");
  if (o->shm && o->frames > 1) {
    return absl::InvalidArgumentError("--shm goes with one Render, not with --frames");
  }
  if (!std::isfinite(o->spin_deg)) return absl::InvalidArgumentError("--spin must be finite");
  if (o->spin_deg != 0 && o->points.empty()) {
    return absl::InvalidArgumentError("--spin turns a --points cloud; an --image plane cannot turn");
  }
  if (o->reconstruct_m < 0) return absl::InvalidArgumentError("--reconstruct must be > 0 (metres)");
  if ((o->reconstruct_m > 0) != !o->reconstruct_png.empty()) {
    return absl::InvalidArgumentError("--reconstruct DEPTH and --reconstruct-png FILE go together");
  }
  if (o->phase_png.empty() && o->field_npy.empty() && o->amplitude_npy.empty() &&
      o->reconstruct_png.empty()) {
    return absl::InvalidArgumentError(
        "nothing to write: give --phase-png, --field-npy, --amplitude-npy or --reconstruct-png");
  }
  const std::pair<const std::string*, const char*> files[] = {
      {&o->phase_png, ".png"}, {&o->reconstruct_png, ".png"},
      {&o->field_npy, ".npy"}, {&o->amplitude_npy, ".npy"}};
  for (const auto& [file, ext] : files) {
    if (!file->empty() && !EndsWith(*file, ext)) {
      return absl::InvalidArgumentError(absl::StrCat(*file, ": must end in ", ext));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<hologram::PointCloud> LoadPointCloud(const HologramCmdOptions& o) {
  hologram::PointCloud cloud;
  if (EndsWith(o.points, ".npy")) {
    absl::StatusOr<HostArray> a = ReadNpy(o.points);
    if (!a.ok()) return a.status();
    if (a->ndim() != 2 || (a->dim(1) != 4 && a->dim(1) != 5) ||
        (a->dtype() != DType::kFloat32 && a->dtype() != DType::kFloat64)) {
      return absl::InvalidArgumentError(absl::StrCat(
          o.points, ": must be float32/float64 [N, 4] or [N, 5] (x_m, y_m, z_m, amplitude"
          "[, phase_rad]), got ", DTypeName(a->dtype()), " ", ShapeString(a->shape())));
    }
    const int64_t n = a->dim(0), cols = a->dim(1);
    cloud.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double v[5] = {0, 0, 0, 0, 0};
      for (int64_t c = 0; c < cols; ++c) {
        v[c] = a->dtype() == DType::kFloat32 ? a->data<float>()[i * cols + c]
                                             : a->data<double>()[i * cols + c];
      }
      cloud[static_cast<size_t>(i)] = hologram::Point{v[0], v[1], v[2], v[3], v[4]};
    }
  } else {
    absl::StatusOr<hologram::PlyMesh> mesh = hologram::ReadPly(o.points);
    if (!mesh.ok()) {
      return absl::Status(mesh.status().code(),
                          absl::StrCat(o.points, ": ", mesh.status().message()));
    }
    const int64_t count =
        o.count > 0 ? o.count : static_cast<int64_t>(mesh->vertices.size());
    absl::StatusOr<hologram::PointCloud> sampled =
        hologram::SampleMesh(*mesh, std::max<int64_t>(1, count));
    if (!sampled.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(o.points, ": ", sampled.status().message()));
    }
    cloud = *std::move(sampled);
  }
  if (o.have_fit || o.have_center) {
    std::array<double, 3> extent = o.fit_m;
    if (!o.have_fit && !cloud.empty()) {  // --center alone: move without scaling
      std::array<double, 3> lo, hi;
      lo.fill(INFINITY);
      hi.fill(-INFINITY);
      for (const hologram::Point& p : cloud) {
        const double xyz[3] = {p.x_m, p.y_m, p.z_m};
        for (int a = 0; a < 3; ++a) {
          lo[a] = std::min(lo[a], xyz[a]);
          hi[a] = std::max(hi[a], xyz[a]);
        }
      }
      for (int a = 0; a < 3; ++a) extent[a] = hi[a] - lo[a];
    }
    absl::StatusOr<hologram::PointCloud> fitted = hologram::FitToBox(cloud, extent, o.center_m);
    if (!fitted.ok()) return fitted.status();
    cloud = *std::move(fitted);
  }
  return cloud;
}

CLI::App* AddHologramCommand(CLI::App* app, HologramCmdOptions* o) {
  CLI::App* cmd = app->add_subcommand(
      "hologram",
      "Render a point-cloud hologram on the server (phase PNG, field/amplitude NPY, "
      "reconstruction)");
  CLI::Option* points = cmd->add_option(
      "--points", o->points,
      "Point source: a PLY mesh or cloud (.ply), or an .npy float array [N, 4|5] of x_m, y_m, "
      "z_m, amplitude[, phase_rad]");
  cmd->add_option("--count", o->count,
                  "PLY: sample this many points (vertices, face centroids, then random points "
                  "on faces; default: the vertices)");
  cmd->add_option("--fit", o->fit, "Scale the cloud's bounding box to W,H,D metres (per axis)");
  cmd->add_option("--center", o->center, "Move the bounding box's centre to X,Y,Z metres");
  CLI::Option* image =
      cmd->add_option("--image", o->image, "Image source: a PNG, one point per pixel (gray)");
  points->excludes(image);
  cmd->add_option("--spacing", o->spacing_m, "Image: metres between neighbouring pixels' points");
  cmd->add_option("--depth", o->depth_m, "Image: distance of the image plane (metres)");
  cmd->add_option("--size", o->size, "Hologram size WIDTHxHEIGHT in pixels")->required();
  cmd->add_option("--pitch", o->pitch_m, "Pixel pitch in metres (e.g. 8e-6)")->required();
  cmd->add_option("--wavelength", o->wavelength_m, "Wavelength in metres (e.g. 532e-9)")
      ->required();
  cmd->add_option("--algorithm", o->algorithm,
                  "auto (GPU: tensor cores at the precision --min-snr needs; CPU: reference), "
                  "reference (exact), triangular / piecewise (8-bit TA / PA), tensor (GPU)")
      ->check(CLI::IsMember({"auto", "reference", "triangular", "piecewise", "tensor"}))
      ->capture_default_str();
  cmd->add_option("--min-snr", o->min_snr_db,
                  "Quality auto/tensor must reach: hologram SNR in dB against the exact field")
      ->capture_default_str();
  cmd->add_flag("--no-clip", o->no_clip,
                "Sum every point over the whole hologram (default: only where its fringes are "
                "not aliased)");
  cmd->add_option("--phase-png", o->phase_png, "Write the 8-bit phase-only hologram (PNG)");
  cmd->add_option("--field-npy", o->field_npy, "Write the complex64 field (NPY)");
  cmd->add_option("--amplitude-npy", o->amplitude_npy, "Write the float32 amplitude |field| (NPY)");
  cmd->add_option("--reconstruct", o->reconstruct_m,
                  "Reconstruct (angular spectrum) focused at this distance in metres");
  cmd->add_option("--reconstruct-png", o->reconstruct_png, "Write the reconstruction (PNG)");
  cmd->add_option("--reconstruct-source", o->reconstruct_source,
                  "Propagate the complex field, or the phase-only hologram as an SLM shows it")
      ->check(CLI::IsMember({"field", "phase"}))
      ->capture_default_str();
  cmd->add_option("--device", o->device, "Where the server may run the request")
      ->check(CLI::IsMember({"any", "gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--frames", o->frames,
                  "Holographic video: send N frames over one Stream call and report frames/s "
                  "(files are written from the last frame)")
      ->capture_default_str();
  cmd->add_option("--spin", o->spin_deg,
                  "With --frames and --points: turn the cloud by this many degrees per frame "
                  "about the vertical axis through its centre");
  cmd->add_flag("--shm", o->shm,
                "Pass the points (or image) and the outputs through a POSIX shared-memory "
                "region instead of gRPC messages (the server must run on this host as this "
                "user); no message cap applies");
  cmd->add_flag("--json", o->json, "Print the summary as JSON");
  cmd->footer(kExitCodeHelp);
  return cmd;
}

int RunHologram(const GlobalOptions& global, HologramCmdOptions o, std::ostream& out,
                std::ostream& err) {
  if (absl::Status s = ValidateHologramOptions(&o); !s.ok()) {
    return ReportUsageError(err, std::string(s.message()), "hologram");
  }

  v1::RenderRequest request;
  std::string source_text;
  hologram::PointCloud cloud;  // --points, kept for the frames of --frames
  if (!o.points.empty()) {
    absl::StatusOr<hologram::PointCloud> loaded = LoadPointCloud(o);
    if (!loaded.ok()) return ReportError(err, kExitIo, loaded.status());
    cloud = *std::move(loaded);
    ToProto(CloudArray(cloud), request.mutable_points());
    source_text = absl::StrCat(o.points, " -> ", cloud.size(), " points");
  } else {
    absl::StatusOr<HostArray> gray = ReadGrayPng(o.image);
    if (!gray.ok()) return ReportError(err, kExitIo, gray.status());
    source_text = absl::StrCat(o.image, " ", gray->dim(1), " x ", gray->dim(0), " image at ",
                               absl::StrFormat("%g", o.depth_m), " m");
    v1::ImageSource* src = request.mutable_image();
    ToProto(*std::move(gray), src->mutable_image());
    src->set_spacing_m(o.spacing_m);
    src->set_depth_m(o.depth_m);
  }
  v1::HologramConfig* config = request.mutable_config();
  config->set_width(o.width);
  config->set_height(o.height);
  config->set_pitch_m(o.pitch_m);
  config->set_wavelength_m(o.wavelength_m);
  config->set_algorithm(AlgorithmFromFlag(o.algorithm));
  config->set_alias(o.no_clip ? v1::HOLOGRAM_ALIAS_NONE : v1::HOLOGRAM_ALIAS_CLIP);
  config->set_min_snr_db(o.min_snr_db);
  config->mutable_outputs()->set_field(!o.field_npy.empty());
  config->mutable_outputs()->set_phase(!o.phase_png.empty());
  config->mutable_outputs()->set_amplitude(!o.amplitude_npy.empty());
  if (o.reconstruct_m > 0) {
    config->mutable_reconstruction()->set_depth_m(o.reconstruct_m);
    config->mutable_reconstruction()->set_source(
        o.reconstruct_source == "phase" ? v1::HOLOGRAM_RECONSTRUCTION_SOURCE_PHASE_ONLY
                                        : v1::HOLOGRAM_RECONSTRUCTION_SOURCE_FIELD);
  }
  config->mutable_device()->set_kind(DeviceKindFromFlag(o.device));

  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<HologramRender> r;
  StreamStats stream;
  // --shm: the source, then the outputs, in a region made for the command (removed at the end).
  std::unique_ptr<SharedRegion> region;
  if (o.shm) {
    const int64_t pixels = o.width * o.height;
    const bool recon = o.reconstruct_m > 0;
    // As the server defaults them: the field when nothing else is asked for.
    const bool field = !o.field_npy.empty() ||
                       (o.phase_png.empty() && o.amplitude_npy.empty() && !recon);
    std::vector<int64_t> outputs;
    if (field) outputs.push_back(pixels * 8);
    if (!o.phase_png.empty()) outputs.push_back(pixels);
    if (!o.amplitude_npy.empty()) outputs.push_back(pixels * 4);
    if (recon) outputs.push_back(pixels);
    const int64_t source_bytes = static_cast<int64_t>(
        request.has_points() ? request.points().data().size()
                             : request.image().image().data().size());
    absl::StatusOr<std::unique_ptr<SharedRegion>> made =
        SharedRegion::Create(client->get(), absl::StrCat("fresnel-cli-", getpid()),
                             RegionSlotBytes(source_bytes) + OutputRegionBytes(outputs));
    if (!made.ok()) return ReportError(err, kExitRpc, made.status(), global.server);
    region = *std::move(made);
    absl::StatusOr<int64_t> end = region->PutArrays(&request, 0);
    if (!end.ok()) return ReportError(err, kExitIo, end.status());
    *request.mutable_out_shm() = region->OutRef(*end);
  }
  if (o.frames == 1) {
    r = (*client)->Render(std::move(request));
  } else {
    r = StreamFrames(**client, o, request, cloud, &stream);
  }
  if (!r.ok()) return ReportError(err, kExitRpc, r.status(), global.server);
  const double round_trip_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::vector<std::string> written;
  if (!o.phase_png.empty()) {
    if (absl::Status s = WritePng(o.phase_png, r->phase); !s.ok()) return ReportError(err, kExitIo, s);
    written.push_back(o.phase_png);
  }
  if (!o.field_npy.empty()) {
    if (absl::Status s = WriteNpy(o.field_npy, r->field); !s.ok()) return ReportError(err, kExitIo, s);
    written.push_back(o.field_npy);
  }
  if (!o.amplitude_npy.empty()) {
    if (absl::Status s = WriteNpy(o.amplitude_npy, r->amplitude); !s.ok()) {
      return ReportError(err, kExitIo, s);
    }
    written.push_back(o.amplitude_npy);
  }
  if (!o.reconstruct_png.empty()) {
    if (absl::Status s = WritePng(o.reconstruct_png, r->reconstruction); !s.ok()) {
      return ReportError(err, kExitIo, s);
    }
    written.push_back(o.reconstruct_png);
  }

  const v1::HologramResultHeader& h = r->header;
  const v1::ExecutionInfo& exec = h.info();
  std::string ran = AlgorithmLabel(h.algorithm());
  if (h.algorithm() == v1::HOLOGRAM_ALGORITHM_TENSOR) {
    absl::StrAppend(&ran, " (", PrecisionLabel(h.precision()), ", K = ", h.gemm_inner_dim(), ")");
  }
  if (o.json) {
    JsonObject json;
    json.Add("source", o.points.empty() ? o.image : o.points)
        .Add("points", static_cast<int64_t>(h.points()))
        .Add("width", static_cast<int64_t>(h.width()))
        .Add("height", static_cast<int64_t>(h.height()))
        .Add("pitch_m", o.pitch_m)
        .Add("wavelength_m", o.wavelength_m)
        .Add("algorithm_requested", o.algorithm)
        .Add("algorithm", AlgorithmLabel(h.algorithm()))
        .Add("precision", PrecisionLabel(h.precision()))
        .Add("gemm_inner_dim", static_cast<int64_t>(h.gemm_inner_dim()))
        .Add("point_batches", static_cast<int64_t>(h.point_batches()))
        .Add("reconstruction_depth_m", o.reconstruct_m)
        .Add("reconstruction_scale", h.reconstruction_scale())
        .Add("shm", o.shm);
    AddExecutionJson(exec, round_trip_s, &json);
    if (o.frames > 1) {
      json.Add("frames", o.frames)
          .Add("frames_per_second", static_cast<double>(o.frames) / round_trip_s)
          .Add("frame_latency_p50_seconds", stream.latency_p50_s)
          .Add("frame_latency_p99_seconds", stream.latency_p99_s)
          .Add("frame_compute_mean_seconds", stream.compute_mean_s)
          .Add("frame_server_mean_seconds", stream.server_mean_s)
          .Add("frame_queue_mean_seconds", stream.queue_mean_s)
          .Add("frame_h2d_mean_seconds", stream.h2d_mean_s)
          .Add("frame_d2h_mean_seconds", stream.d2h_mean_s)
          .Add("frames_failed", stream.failed);
    }
    JsonObject files;
    if (!o.phase_png.empty()) files.Add("phase_png", o.phase_png);
    if (!o.field_npy.empty()) files.Add("field_npy", o.field_npy);
    if (!o.amplitude_npy.empty()) files.Add("amplitude_npy", o.amplitude_npy);
    if (!o.reconstruct_png.empty()) files.Add("reconstruct_png", o.reconstruct_png);
    json.Add("files", files);
    out << json.Str() << "\n";
    return kExitOk;
  }
  out << source_text << " | hologram " << h.width() << " x " << h.height() << ", pitch "
      << Um(o.pitch_m) << ", " << Nm(o.wavelength_m) << " | " << ran << " on "
      << (exec.device().empty() ? std::string("?") : exec.device()) << " | server "
      << FormatSeconds(exec.total_seconds()) << " (queue " << FormatSeconds(exec.queue_wait_seconds())
      << ", compute " << FormatSeconds(exec.compute_seconds()) << ") | round trip "
      << FormatSeconds(round_trip_s) << (o.shm ? " | through shared memory" : "") << "\n";
  if (o.frames > 1) {
    out << o.frames << " frames over one Stream call in " << FormatSeconds(round_trip_s) << ": "
        << absl::StrFormat("%.1f", static_cast<double>(o.frames) / round_trip_s)
        << " frames/s | frame latency p50 " << FormatSeconds(stream.latency_p50_s) << ", p99 "
        << FormatSeconds(stream.latency_p99_s) << " | per frame on the server "
        << FormatSeconds(stream.server_mean_s) << " (queue " << FormatSeconds(stream.queue_mean_s)
        << ", h2d " << FormatSeconds(stream.h2d_mean_s) << ", compute "
        << FormatSeconds(stream.compute_mean_s) << ", d2h " << FormatSeconds(stream.d2h_mean_s)
        << ")" << (stream.failed > 0 ? absl::StrCat(" | ", stream.failed, " frame(s) failed") : "")
        << " | files from the last frame\n";
  }
  if (o.reconstruct_m > 0) {
    out << "reconstruction at " << absl::StrFormat("%g", o.reconstruct_m) << " m ("
        << o.reconstruct_source << "), peak amplitude "
        << absl::StrFormat("%.4g", h.reconstruction_scale()) << " = 255\n";
  }
  for (const std::string& f : written) out << "wrote " << f << "\n";
  return kExitOk;
}

}  // namespace fresnel::cli
