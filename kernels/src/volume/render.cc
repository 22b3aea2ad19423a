// Volume rendering: validation, conversion of the transfer function and camera, DeviceMesh, and
// dispatch to the CPU ray caster or the CUDA cell projection.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/volume/render.h"
#include "tbb/parallel_for.h"
#include "volume/volume_internal.h"

namespace fresnel::volume {
namespace {

bool Finite3(const std::array<float, 3>& v) {
  return std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]);
}

std::array<double, 3> Sub(const std::array<float, 3>& a, const std::array<float, 3>& b) {
  return {double{a[0]} - b[0], double{a[1]} - b[1], double{a[2]} - b[2]};
}
std::array<double, 3> CrossD(const std::array<double, 3>& a, const std::array<double, 3>& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double NormD(const std::array<double, 3>& a) {
  return std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
}
math::V3 ToV3(const std::array<double, 3>& a, double scale = 1) {
  return {static_cast<float>(a[0] * scale), static_cast<float>(a[1] * scale),
          static_cast<float>(a[2] * scale)};
}

math::TfTable MakeTfTable(const TransferFunction& tf) {
  math::TfTable t{};
  t.n = static_cast<int>(tf.points.size());
  for (int i = 0; i < t.n; ++i) {
    t.x[i] = tf.points[i].scalar;
    t.r[i] = tf.points[i].r;
    t.g[i] = tf.points[i].g;
    t.b[i] = tf.points[i].b;
    t.tau[i] = tf.points[i].extinction_per_unit;
  }
  t.background = {tf.background[0], tf.background[1], tf.background[2], tf.background[3]};
  return t;
}

math::CameraFrame MakeCameraFrame(const Camera& c) {
  const auto view = Sub(c.target, c.eye);
  const auto fwd = view;
  const double fn = NormD(fwd);
  const std::array<double, 3> up = {c.up[0], c.up[1], c.up[2]};
  auto right = CrossD(fwd, up);
  const double rn = NormD(right);
  for (double& v : right) v /= rn;
  std::array<double, 3> f = {fwd[0] / fn, fwd[1] / fn, fwd[2] / fn};
  const auto true_up = CrossD(right, f);
  math::CameraFrame frame{};
  frame.eye = {c.eye[0], c.eye[1], c.eye[2]};
  frame.forward = ToV3(f);
  frame.right = ToV3(right);
  frame.up = ToV3(true_up);
  frame.orthographic = c.orthographic_height > 0;
  const double aspect = static_cast<double>(c.width) / c.height;
  const double sy = frame.orthographic ? 0.5 * c.orthographic_height
                                       : std::tan(0.5 * c.vertical_fov_deg * M_PI / 180.0);
  frame.sy = static_cast<float>(sy);
  frame.sx = static_cast<float>(sy * aspect);
  frame.width = c.width;
  frame.height = c.height;
  return frame;
}

}  // namespace

absl::Status ValidateTransferFunction(const TransferFunction& tf) {
  const int n = static_cast<int>(tf.points.size());
  if (n < 1 || n > kMaxTfPoints) {
    return absl::InvalidArgumentError(absl::StrCat("transfer_function.points has ", n,
                                                   " points; it must have 1 to ", kMaxTfPoints));
  }
  for (int i = 0; i < n; ++i) {
    const TfPoint& p = tf.points[i];
    if (!std::isfinite(p.scalar) || (i > 0 && !(p.scalar > tf.points[i - 1].scalar))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer_function.points[", i, "].scalar must be finite and strictly increasing"));
    }
    for (float c : {p.r, p.g, p.b}) {
      if (!(c >= 0 && c <= 1)) {
        return absl::InvalidArgumentError(absl::StrCat("transfer_function.points[", i,
                                                       "] colour must be in [0, 1]"));
      }
    }
    if (!(p.extinction_per_unit >= 0) || !std::isfinite(p.extinction_per_unit)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer_function.points[", i, "].extinction_per_unit must be finite and >= 0"));
    }
  }
  for (float c : tf.background) {
    if (!(c >= 0 && c <= 1)) {
      return absl::InvalidArgumentError("transfer_function.background must be in [0, 1]");
    }
  }
  return absl::OkStatus();
}

TransferFunction ConstantTransferFunction(float extinction_per_unit, std::array<float, 3> rgb) {
  TransferFunction tf;
  tf.points.push_back({0.0f, rgb[0], rgb[1], rgb[2], extinction_per_unit});
  return tf;
}

TransferFunction DefaultTransferFunction(float scalar_min, float scalar_max,
                                         float max_extinction_per_unit) {
  const float span = scalar_max > scalar_min ? scalar_max - scalar_min : 1.0f;
  auto at = [&](float f) { return scalar_min + f * span; };
  const float k = max_extinction_per_unit;
  TransferFunction tf;
  tf.points = {{at(0.0f), 0.05f, 0.10f, 0.60f, 0.0f},    {at(0.25f), 0.10f, 0.45f, 0.95f, 0.08f * k},
               {at(0.5f), 0.95f, 0.95f, 0.90f, 0.25f * k}, {at(0.75f), 1.00f, 0.55f, 0.10f, 0.6f * k},
               {at(1.0f), 0.85f, 0.05f, 0.05f, k}};
  tf.background = {0.02f, 0.02f, 0.03f, 1.0f};
  return tf;
}

absl::Status ValidateCamera(const Camera& c) {
  if (!Finite3(c.eye) || !Finite3(c.target) || !Finite3(c.up)) {
    return absl::InvalidArgumentError("camera.eye, camera.target and camera.up must be finite");
  }
  const auto view = Sub(c.target, c.eye);
  const double vn = NormD(view);
  if (!(vn > 0)) return absl::InvalidArgumentError("camera.eye must differ from camera.target");
  const std::array<double, 3> up = {c.up[0], c.up[1], c.up[2]};
  const double un = NormD(up);
  if (!(un > 0) || NormD(CrossD(view, up)) <= 1e-6 * vn * un) {
    return absl::InvalidArgumentError("camera.up must be non-zero and not parallel to the view");
  }
  if (!(c.orthographic_height > 0)) {
    if (!(c.vertical_fov_deg > 0 && c.vertical_fov_deg < 180)) {
      return absl::InvalidArgumentError("camera.vertical_fov_deg must be in (0, 180)");
    }
  } else if (!std::isfinite(c.orthographic_height)) {
    return absl::InvalidArgumentError("camera.orthographic_height must be finite");
  }
  if (c.width < 1 || c.width > kMaxImageSide || c.height < 1 || c.height > kMaxImageSide) {
    return absl::InvalidArgumentError(absl::StrCat("camera.width and camera.height must be in [1, ",
                                                   kMaxImageSide, "], got ", c.width, " x ",
                                                   c.height));
  }
  return absl::OkStatus();
}

Camera OrbitCamera(const std::array<float, 3>& lo, const std::array<float, 3>& hi,
                   float azimuth_deg, float elevation_deg, int width, int height,
                   float vertical_fov_deg) {
  Camera cam;
  double centre[3], radius2 = 0;
  for (int k = 0; k < 3; ++k) {
    centre[k] = 0.5 * (double{lo[k]} + hi[k]);
    radius2 += 0.25 * (double{hi[k]} - lo[k]) * (double{hi[k]} - lo[k]);
  }
  const double radius = std::sqrt(radius2);
  const double el = std::clamp<double>(elevation_deg, -89, 89) * M_PI / 180;
  const double az = azimuth_deg * M_PI / 180;
  const double half = 0.5 * vertical_fov_deg * M_PI / 180;
  const double aspect = std::min(1.0, static_cast<double>(width) / height);
  const double dist = radius / std::sin(std::atan(std::tan(half) * aspect)) * 1.02;
  const double dir[3] = {std::sin(az) * std::cos(el), std::sin(el), std::cos(az) * std::cos(el)};
  for (int k = 0; k < 3; ++k) {
    cam.eye[k] = static_cast<float>(centre[k] + dist * dir[k]);
    cam.target[k] = static_cast<float>(centre[k]);
  }
  cam.up = {0, 1, 0};
  cam.vertical_fov_deg = vertical_fov_deg;
  cam.width = width;
  cam.height = height;
  return cam;
}

// ---- DeviceMesh ----------------------------------------------------------------------------

DeviceMesh::DeviceMesh(const Device& device, MeshReport report)
    : device_(device), report_(std::move(report)), impl_(std::make_unique<Impl>()) {}
DeviceMesh::~DeviceMesh() = default;

// Points as float4 (x, y, z, scalar), tetrahedra and their face neighbours as int4, the ray
// walk's geometry as 5 float4 per tetrahedron (math::WalkTet). The walk's boundary-face list
// (4 B per boundary face, a few % of 16 B per tetrahedron) is not counted.
int64_t CudaMeshBytes(int64_t num_points, int64_t num_tets) {
  return 16 * num_points + (32 + 80) * num_tets;
}

int64_t ImageBytes(const Camera& camera, const RenderOptions& options) {
  return int64_t{camera.width} * camera.height * 4 * (options.rgba8 ? 1 : 4);
}

int64_t DeviceBytes(const TetMesh& mesh) {
  return CudaMeshBytes(mesh.num_points(), mesh.num_tets());
}

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::Create(const Device& device,
                                                               const TetMesh& mesh) {
  FRESNEL_ASSIGN_OR_RETURN(MeshReport report, ValidateMesh(mesh));
  if (device.kind == DeviceKind::kCuda && device.stream == nullptr) {
    return absl::InvalidArgumentError("device.stream must be a CUDA stream, not null");
  }
  const int64_t nt = mesh.num_tets();
  std::vector<uint8_t> keep(nt);
  tbb::parallel_for(int64_t{0}, nt, [&](int64_t t) { keep[t] = !IsDegenerateTet(mesh, t); });
  RenderMesh rmesh;
  rmesh.points_xyz = mesh.points_xyz;
  rmesh.scalars = mesh.scalars;
  rmesh.tets.reserve(4 * (nt - report.degenerate_tets));
  for (int64_t t = 0; t < nt; ++t)
    if (keep[t]) rmesh.tets.insert(rmesh.tets.end(), &mesh.tets[4 * t], &mesh.tets[4 * t + 4]);
  std::unique_ptr<DeviceMesh> out(new DeviceMesh(device, report));
  if (device.kind == DeviceKind::kCpu) {
    out->impl_->cpu = std::make_unique<CpuMesh>(BuildCpuMesh(std::move(rmesh)));
    out->resident_bytes_ = CpuMeshBytes(*out->impl_->cpu);
  } else {
    FRESNEL_ASSIGN_OR_RETURN(out->impl_->cuda,
                             UploadMeshCuda(device, rmesh, &out->resident_bytes_));
  }
  return out;
}

// ---- Render --------------------------------------------------------------------------------

namespace {

// Render and RenderInto: validation, then the backend writes the image to `image` (ImageBytes
// at least) or, where `image` is null, into a new result->image.
absl::Status RenderTo(const Device& device, const DeviceMesh& mesh, const TransferFunction& tf,
                      const Camera& camera, const RenderOptions& options,
                      const PartialFrameCallback& on_block, void* image, RenderResult* result) {
  const auto start = std::chrono::steady_clock::now();
  FRESNEL_RETURN_IF_ERROR(ValidateTransferFunction(tf));
  FRESNEL_RETURN_IF_ERROR(ValidateCamera(camera));
  if (options.hash_block_bits < 0 || options.hash_block_bits > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.hash_block_bits must be 0 (auto), 1, 2 or 3, got ", options.hash_block_bits));
  }
  // Record indices and CUB item counts are 32-bit.
  constexpr int64_t kMaxRecords = (int64_t{1} << 31) - 1;
  if (options.max_block_records < 1 || options.max_block_records > kMaxRecords) {
    return absl::InvalidArgumentError("options.max_block_records must be in [1, 2^31 - 1]");
  }
  if (options.max_pass_records < 1 || options.max_pass_records > kMaxRecords) {
    return absl::InvalidArgumentError("options.max_pass_records must be in [1, 2^31 - 1]");
  }
  if (device.kind != mesh.device().kind ||
      (device.kind == DeviceKind::kCuda && device.ordinal != mesh.device().ordinal)) {
    return absl::FailedPreconditionError(absl::StrCat("the mesh lives on ", mesh.device().Name(),
                                                      ", not on ", device.Name()));
  }
  if (device.kind == DeviceKind::kCuda && device.stream == nullptr) {
    return absl::InvalidArgumentError("device.stream must be a CUDA stream, not null");
  }
  RenderJob job;
  job.tf = MakeTfTable(tf);
  job.camera = MakeCameraFrame(camera);
  job.hash_block_bits = options.hash_block_bits;
  job.compositing = options.compositing;
  job.scan_conversion = options.scan_conversion;
  job.cuda_method = options.cuda_method;
  job.max_block_records = options.max_block_records;
  job.max_pass_records = options.max_pass_records;
  job.rgba8 = options.rgba8 && device.kind == DeviceKind::kCuda;
  job.on_block = on_block ? &on_block : nullptr;
  const std::vector<int64_t> shape = {camera.height, camera.width, 4};
  if (device.kind == DeviceKind::kCpu) {
    // The CPU renders float RGBA; RGBA8 is converted afterwards.
    const bool direct = image != nullptr && !options.rgba8;
    HostArray f32;
    if (!direct) f32 = HostArray(DType::kFloat32, shape);
    job.image = direct ? image : f32.raw();
    FRESNEL_RETURN_IF_ERROR(RenderCpu(*mesh.impl().cpu, job, result));
    if (options.rgba8) {
      FRESNEL_ASSIGN_OR_RETURN(HostArray u8, ToRgba8(f32));
      if (image != nullptr) {
        std::memcpy(image, u8.raw(), u8.nbytes());
      } else {
        result->image = std::move(u8);
      }
    } else if (!direct) {
      result->image = std::move(f32);
    }
  } else {
    if (image == nullptr) {
      result->image = HostArray(job.rgba8 ? DType::kUint8 : DType::kFloat32, shape);
      image = result->image.raw();
    }
    job.image = image;
    FRESNEL_RETURN_IF_ERROR(
        RenderCuda(device, *mesh.impl().cuda, mesh.resident_bytes(), job, result));
  }
  result->stats.tets_rendered = mesh.report().num_tets - mesh.report().degenerate_tets;
  result->stats.total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RenderResult> Render(const Device& device, const DeviceMesh& mesh,
                                    const TransferFunction& tf, const Camera& camera,
                                    const RenderOptions& options,
                                    const PartialFrameCallback& on_block) {
  RenderResult result;
  FRESNEL_RETURN_IF_ERROR(
      RenderTo(device, mesh, tf, camera, options, on_block, nullptr, &result));
  return result;
}

absl::StatusOr<RenderStats> RenderInto(const Device& device, const DeviceMesh& mesh,
                                       const TransferFunction& tf, const Camera& camera,
                                       const RenderOptions& options, void* image,
                                       int64_t image_bytes,
                                       const PartialFrameCallback& on_block) {
  FRESNEL_RETURN_IF_ERROR(ValidateCamera(camera));
  if (image == nullptr || image_bytes < ImageBytes(camera, options)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image must hold ImageBytes = ", ImageBytes(camera, options), " bytes, got ",
        image == nullptr ? int64_t{0} : image_bytes, image == nullptr ? " (null)" : ""));
  }
  RenderResult result;
  FRESNEL_RETURN_IF_ERROR(
      RenderTo(device, mesh, tf, camera, options, on_block, image, &result));
  return result.stats;
}

absl::StatusOr<HostArray> ToRgba8(const HostArray& rgba) {
  if (rgba.dtype() != DType::kFloat32 || rgba.ndim() != 3 || rgba.dim(2) != 4) {
    return absl::InvalidArgumentError("image must be float32 [height, width, 4]");
  }
  HostArray out(DType::kUint8, rgba.shape());
  const float* in = rgba.data<float>();
  uint8_t* o = out.data<uint8_t>();
  for (int64_t i = 0; i < rgba.size(); ++i) {
    const float v = std::clamp(std::isfinite(in[i]) ? in[i] : 0.0f, 0.0f, 1.0f);
    o[i] = static_cast<uint8_t>(std::lround(v * 255.0f));
  }
  return out;
}

double ImagePsnrDb(const HostArray& a, const HostArray& b) {
  if (a.shape() != b.shape() || a.dtype() != DType::kFloat32 || b.dtype() != DType::kFloat32) {
    return -std::numeric_limits<double>::infinity();
  }
  double se = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double d = double{a.data<float>()[i]} - b.data<float>()[i];
    se += d * d;
  }
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(static_cast<double>(a.size()) / se);
}

}  // namespace fresnel::volume
