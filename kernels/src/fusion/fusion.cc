// Validation, sizes, dispatch to the CPU/CUDA backends, PLY and snapshot encoding.
#include "fresnel/fusion/fusion.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fusion/fusion_internal.h"

namespace fresnel::fusion {

using detail::PoseD;

// ---------------------------------------------------------------------------------------------
// RigidTransform

RigidTransform RigidTransform::FromMatrix4(const double* a) {
  RigidTransform t;
  for (int i = 0; i < 12; ++i) t.m[i] = a[i];
  return t;
}
RigidTransform RigidTransform::FromTranslation(double x, double y, double z) {
  RigidTransform t;
  t.m[3] = x;
  t.m[7] = y;
  t.m[11] = z;
  return t;
}
RigidTransform RigidTransform::operator*(const RigidTransform& b) const {
  return detail::FromPoseD(detail::Compose(detail::ToPoseD(*this), detail::ToPoseD(b)));
}
RigidTransform RigidTransform::Inverse() const {
  return detail::FromPoseD(detail::InversePose(detail::ToPoseD(*this)));
}
std::array<double, 3> RigidTransform::Apply(double x, double y, double z) const {
  return {m[0] * x + m[1] * y + m[2] * z + m[3], m[4] * x + m[5] * y + m[6] * z + m[7],
          m[8] * x + m[9] * y + m[10] * z + m[11]};
}
bool RigidTransform::IsValid(double tol) const {
  for (double v : m)
    if (!std::isfinite(v)) return false;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double d = 0;
      for (int k = 0; k < 3; ++k) d += m[i * 4 + k] * m[j * 4 + k];
      if (std::abs(d - (i == j ? 1.0 : 0.0)) > tol) return false;
    }
  return true;
}

double TranslationDistance(const RigidTransform& a, const RigidTransform& b) {
  double dx = a.m[3] - b.m[3], dy = a.m[7] - b.m[7], dz = a.m[11] - b.m[11];
  return std::sqrt(dx * dx + dy * dy + dz * dz);
}
double RotationAngle(const RigidTransform& a, const RigidTransform& b) {
  RigidTransform r = a.Inverse() * b;
  double c = (r.m[0] + r.m[5] + r.m[10] - 1) * 0.5;
  return std::acos(std::clamp(c, -1.0, 1.0));
}

namespace detail {

CameraF ToCameraF(const CameraIntrinsics& c) {
  return CameraF{static_cast<float>(c.fx), static_cast<float>(c.fy), static_cast<float>(c.cx),
                 static_cast<float>(c.cy), c.width, c.height};
}
PoseD ToPoseD(const RigidTransform& t) {
  PoseD p;
  for (int i = 0; i < 12; ++i) p.m[i] = t.m[i];
  return p;
}
RigidTransform FromPoseD(const PoseD& p) {
  RigidTransform t;
  for (int i = 0; i < 12; ++i) t.m[i] = p.m[i];
  return t;
}

namespace {
int64_t NextPow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}
int64_t NominalBytesPerBrick(const FusionConfig& c) {
  // Voxels (+ colour), pool key and free-list entry, up to 4 hash slots of 12 B (2x, rounded up
  // to a power of two), and up to 2/16 of a 528-byte octree top slot.
  return kBrickVoxels * (c.color ? 8 : 4) + 12 + 48 + 66;
}
}  // namespace

Sizes ComputeSizes(const FusionConfig& config) {
  Sizes s;
  s.capacity = std::max<int64_t>(1, config.brick_budget_bytes / NominalBytesPerBrick(config));
  s.slots = NextPow2(2 * s.capacity);
  s.top_slots = NextPow2(std::max<int64_t>(256, s.capacity / 16));
  s.pixels = static_cast<int64_t>(config.camera.width) * config.camera.height;
  return s;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Validation and sizes

namespace {
constexpr int kMaxSide = 8192;
constexpr double kMinVoxel = 1e-4, kMaxVoxel = 1.0;
// Brick coordinates have 21 bits: |coordinate| < 2^20 bricks.
constexpr double kMaxCoordinateBricks = (1 << 20) - 2;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}
}  // namespace

absl::Status ValidateConfig(const FusionConfig& c) {
  const CameraIntrinsics& k = c.camera;
  if (!(std::isfinite(k.fx) && k.fx > 0)) return Invalid("camera.fx", "must be finite and > 0");
  if (!(std::isfinite(k.fy) && k.fy > 0)) return Invalid("camera.fy", "must be finite and > 0");
  if (k.width < 8 || k.width > kMaxSide)
    return Invalid("camera.width", absl::StrCat("must be in [8, ", kMaxSide, "], got ", k.width));
  if (k.height < 8 || k.height > kMaxSide)
    return Invalid("camera.height",
                   absl::StrCat("must be in [8, ", kMaxSide, "], got ", k.height));
  if (!std::isfinite(k.cx) || k.cx < -k.width || k.cx > 2.0 * k.width)
    return Invalid("camera.cx", "must be finite and within [-width, 2 width]");
  if (!std::isfinite(k.cy) || k.cy < -k.height || k.cy > 2.0 * k.height)
    return Invalid("camera.cy", "must be finite and within [-height, 2 height]");
  if (c.depth_format == DepthFormat::kUint16 && !(std::isfinite(c.depth_scale) && c.depth_scale > 0))
    return Invalid("depth_scale", "must be finite and > 0 for uint16 depth");
  if (!(std::isfinite(c.min_depth_m) && c.min_depth_m > 0))
    return Invalid("min_depth_m", "must be finite and > 0");
  if (!(std::isfinite(c.max_depth_m) && c.max_depth_m > c.min_depth_m && c.max_depth_m <= 100))
    return Invalid("max_depth_m", "must be finite, > min_depth_m and <= 100");
  if (!(c.voxel_size_m >= kMinVoxel && c.voxel_size_m <= kMaxVoxel))
    return Invalid("voxel_size_m", absl::StrCat("must be in [", kMinVoxel, ", ", kMaxVoxel,
                                                "], got ", c.voxel_size_m));
  if (!(c.truncation_m >= c.voxel_size_m && c.truncation_m <= 16 * c.voxel_size_m))
    return Invalid("truncation_m", absl::StrCat("must be in [voxel_size_m, 16 voxel_size_m] = [",
                                                c.voxel_size_m, ", ", 16 * c.voxel_size_m,
                                                "], got ", c.truncation_m));
  if (c.max_weight < 1 || c.max_weight > 65535)
    return Invalid("max_weight", absl::StrCat("must be in [1, 65535], got ", c.max_weight));
  const int64_t per_brick = detail::NominalBytesPerBrick(c);
  if (c.brick_budget_bytes < per_brick)
    return Invalid("brick_budget_bytes",
                   absl::StrCat("must hold at least one brick (", per_brick, " bytes), got ",
                                c.brick_budget_bytes));
  if (c.brick_budget_bytes / per_brick > (int64_t{1} << 29))
    return Invalid("brick_budget_bytes", absl::StrCat("must be at most 2^29 bricks (",
                                                      (int64_t{1} << 29) * per_brick, " bytes)"));
  if (!(std::isfinite(c.clearing_radius_m) && c.clearing_radius_m >= 0))
    return Invalid("clearing_radius_m", "must be finite and >= 0");
  if (c.clearing_interval_frames < 1)
    return Invalid("clearing_interval_frames", "must be >= 1");
  for (int l = 0; l < 3; ++l)
    if (!(std::isfinite(c.cuda_icp_stop_xi2[l]) && c.cuda_icp_stop_xi2[l] >= 0 &&
          c.cuda_icp_stop_xi2[l] <= 1))
      return Invalid("cuda_icp_stop_xi2", "must be finite and in [0, 1]");
  for (int l = 0; l < 3; ++l)
    if (c.icp_iterations[l] < 0 || c.icp_iterations[l] > 100)
      return Invalid(absl::StrCat("icp_iterations[", l, "]"), "must be in [0, 100]");
  if (c.max_depth_m / c.voxel_size_m / 8 > kMaxCoordinateBricks / 2)
    return Invalid("max_depth_m", "is too far for voxel_size_m (brick coordinates overflow)");
  return absl::OkStatus();
}

int64_t BrickCapacity(const FusionConfig& config) { return detail::ComputeSizes(config).capacity; }
int64_t BytesPerBrick(const FusionConfig& config) { return detail::NominalBytesPerBrick(config); }

int64_t DeviceBytes(const FusionConfig& config) {
  detail::Sizes s = detail::ComputeSizes(config);
  int64_t vox = s.capacity * detail::kBrickVoxels * 4 * (config.color ? 2 : 1);
  int64_t table = s.slots * 12 + s.capacity * (8 + 4) + s.top_slots * (8 + 8 + 64 * 8);
  // Lists (new-brick slots, visible bricks), raw depth + rgb staging, three depth levels, vertex and
  // normal maps per level (float4), model vertex/normal (float4), filtered depth, counters and
  // tracking state.
  // Plus the neighbour lists of visible bricks (8 int32 a brick).
  int64_t lists = s.capacity * (8 + 32);
  int64_t px = s.pixels;
  int64_t levels = px + px / 4 + px / 16 + 3;
  // Per-frame depth tiles of 8 x 8 pixels (largest depth, float), the update count and the
  // range of new bricks.
  int64_t tiles = ((config.camera.width + 7) / 8) * ((config.camera.height + 7) / 8);
  int64_t frame = px * 4 + px * 3 + levels * 4 + levels * 32 + px * 32 + px * 4 + tiles * 4 + 12;
  // ICP block partials (1024 x 29 doubles).
  return vox + table + lists + frame + 1024 * 29 * 8 + 4096;
}

absl::Status ValidateFrame(const FusionConfig& c, const FrameInput& f) {
  const int64_t px = static_cast<int64_t>(c.camera.width) * c.camera.height;
  const int64_t want = px * (c.depth_format == DepthFormat::kUint16 ? 2 : 4);
  if (static_cast<int64_t>(f.depth.size()) != want)
    return Invalid("depth", absl::StrCat("must hold ", want, " bytes (", c.camera.height, "x",
                                         c.camera.width, " ",
                                         c.depth_format == DepthFormat::kUint16 ? "uint16"
                                                                                : "float32",
                                         "), got ", f.depth.size()));
  if (!f.rgb.empty() && static_cast<int64_t>(f.rgb.size()) != px * 3)
    return Invalid("rgb", absl::StrCat("must hold ", px * 3, " bytes (height x width x 3), got ",
                                       f.rgb.size()));
  if (f.pose_prior && !f.pose_prior->IsValid())
    return Invalid("pose_prior", "must be finite with an orthonormal rotation");
  if (f.fixed_pose && !f.fixed_pose->IsValid())
    return Invalid("fixed_pose", "must be finite with an orthonormal rotation");
  const double limit = kMaxCoordinateBricks * 8 * c.voxel_size_m / 2;
  for (const auto* p : {&f.pose_prior, &f.fixed_pose}) {
    if (*p && ((*p)->Translation()[0] * (*p)->Translation()[0] +
               (*p)->Translation()[1] * (*p)->Translation()[1] +
               (*p)->Translation()[2] * (*p)->Translation()[2]) > limit * limit)
      return Invalid(p == &f.pose_prior ? "pose_prior" : "fixed_pose",
                     absl::StrCat("translation must be within ", limit, " m of the origin"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Volume

Volume::Volume(const Device& device, const FusionConfig& config)
    : device_(device), config_(config) {}
Volume::~Volume() = default;

absl::StatusOr<std::unique_ptr<Volume>> Volume::Create(const Device& device,
                                                       const FusionConfig& config) {
  FRESNEL_RETURN_IF_ERROR(ValidateConfig(config));
  std::unique_ptr<Volume> v(new Volume(device, config));
  if (device.kind == DeviceKind::kCpu) {
    FRESNEL_ASSIGN_OR_RETURN(v->backend_, MakeCpuBackend(config));
  } else {
    if (device.stream == nullptr)
      return absl::InvalidArgumentError("device.stream must not be null for CUDA");
    FRESNEL_ASSIGN_OR_RETURN(v->backend_, MakeCudaBackend(device, config));
  }
  return v;
}

absl::Status Volume::CheckDevice(const Device& device) const {
  if (device.kind != device_.kind || (device.kind == DeviceKind::kCuda &&
                                      device.ordinal != device_.ordinal))
    return absl::FailedPreconditionError(absl::StrCat("the volume lives on ", device_.Name(),
                                                      ", the call came for ", device.Name()));
  if (device.kind == DeviceKind::kCuda && device.stream == nullptr)
    return absl::InvalidArgumentError("device.stream must not be null for CUDA");
  return absl::OkStatus();
}

int64_t Volume::brick_capacity() const { return BrickCapacity(config_); }
int64_t Volume::bricks_in_use() const { return backend_->bricks_in_use(); }
int64_t Volume::allocated_bytes() const { return backend_->allocated_bytes(); }

absl::StatusOr<FrameResult> Volume::ProcessFrame(const Device& device, const FrameInput& frame,
                                                 const FrameOptions& options) {
  FRESNEL_RETURN_IF_ERROR(CheckDevice(device));
  FRESNEL_RETURN_IF_ERROR(ValidateFrame(config_, frame));
  if (!(std::isfinite(options.prior_weight) && options.prior_weight >= 0))
    return Invalid("options.prior_weight", "must be finite and >= 0");
  detail::FrameParams p;
  if (frame.fixed_pose) {
    p.has_fixed = 1;
    p.prior = detail::ToPoseD(*frame.fixed_pose);
  } else if (frame.pose_prior) {
    p.has_prior = 1;
    p.prior = detail::ToPoseD(*frame.pose_prior);
    // With tracking off a prior is all there is: use it as the pose.
    if (!config_.tracking) p.has_fixed = 1;
  }
  p.prior_weight = options.prior_weight;
  p.integrate = options.integrate ? 1 : 0;
  FRESNEL_ASSIGN_OR_RETURN(FrameResult r, backend_->ProcessFrame(device, frame, p));
  r.frame_index = frame_index_++;
  pose_ = r.T_world_camera;
  r.brick_capacity = brick_capacity();
  if (config_.clearing_radius_m > 0 && frame_index_ % config_.clearing_interval_frames == 0) {
    FRESNEL_ASSIGN_OR_RETURN(int64_t evicted,
                             backend_->Evict(device, pose_.Translation().data(),
                                             config_.clearing_radius_m));
    (void)evicted;
    r.bricks_in_use = backend_->bricks_in_use();
  }
  if (r.bricks_dropped > 0)
    return absl::ResourceExhaustedError(absl::StrCat(
        "brick budget full: ", r.bricks_dropped, " bricks could not be allocated in frame ",
        r.frame_index, " (", r.bricks_in_use, " of ", r.brick_capacity,
        " in use); raise brick_budget_bytes or set clearing_radius_m"));
  return r;
}

absl::StatusOr<HostArray> Volume::Render(const Device& device, const RigidTransform& T_wc,
                                         const CameraIntrinsics& camera, RenderMode mode) {
  FRESNEL_RETURN_IF_ERROR(CheckDevice(device));
  if (!T_wc.IsValid()) return Invalid("T_world_camera", "must be finite and rigid");
  FusionConfig probe = config_;
  probe.camera = camera;
  FRESNEL_RETURN_IF_ERROR(ValidateConfig(probe));
  if (mode == RenderMode::kColor && !config_.color)
    return absl::FailedPreconditionError("mode kColor needs a volume with config.color");
  return backend_->Render(device, T_wc, camera, mode);
}

absl::StatusOr<Mesh> Volume::ExtractMesh(const Device& device) {
  FRESNEL_RETURN_IF_ERROR(CheckDevice(device));
  return backend_->ExtractMesh(device);
}

absl::StatusOr<int64_t> Volume::Evict(const Device& device, const std::array<double, 3>& c,
                                      double radius_m) {
  FRESNEL_RETURN_IF_ERROR(CheckDevice(device));
  if (!(std::isfinite(radius_m) && radius_m >= 0)) return Invalid("radius_m", "must be >= 0");
  for (double v : c)
    if (!std::isfinite(v)) return Invalid("center_world", "must be finite");
  return backend_->Evict(device, c.data(), radius_m);
}

absl::StatusOr<std::vector<TsdfSample>> Volume::SampleTsdf(const Device& device,
                                                           const std::vector<float>& points) {
  FRESNEL_RETURN_IF_ERROR(CheckDevice(device));
  if (points.size() % 3 != 0) return Invalid("points_world_xyz", "size must be a multiple of 3");
  return backend_->Sample(device, points);
}

// ---------------------------------------------------------------------------------------------
// Snapshot: "FRFUSN01", then fixed-size fields and arrays, little-endian.

namespace {
constexpr char kMagic[8] = {'F', 'R', 'F', 'U', 'S', 'N', '0', '1'};

class Writer {
 public:
  template <class T>
  void Put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <class T>
  void PutVec(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  template <class T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  template <class T>
  bool GetVec(std::vector<T>* v, uint64_t max_elements) {
    uint64_t n;
    if (!Get(&n) || n > max_elements || in_.size() < n * sizeof(T)) return false;
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), in_.data(), n * sizeof(T));  // data() may be null at 0
    in_.remove_prefix(n * sizeof(T));
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  absl::string_view in_;
};

void PutConfig(Writer& w, const FusionConfig& c) {
  w.Put(c.camera.fx);
  w.Put(c.camera.fy);
  w.Put(c.camera.cx);
  w.Put(c.camera.cy);
  w.Put<int32_t>(c.camera.width);
  w.Put<int32_t>(c.camera.height);
  w.Put<int32_t>(c.depth_format == DepthFormat::kUint16 ? 0 : 1);
  w.Put(c.depth_scale);
  w.Put(c.min_depth_m);
  w.Put(c.max_depth_m);
  w.Put(c.voxel_size_m);
  w.Put(c.truncation_m);
  w.Put<int32_t>(c.max_weight);
  w.Put<int64_t>(c.brick_budget_bytes);
  w.Put<int32_t>(c.color);
  w.Put<int32_t>(c.tracking);
  w.Put(c.clearing_radius_m);
  w.Put<int32_t>(c.clearing_interval_frames);
  for (int l = 0; l < 3; ++l) w.Put<int32_t>(c.icp_iterations[l]);
}
bool GetConfig(Reader& r, FusionConfig* c) {
  int32_t width, height, fmt, mw, color, tracking, interval;
  int64_t budget;
  bool ok = r.Get(&c->camera.fx) && r.Get(&c->camera.fy) && r.Get(&c->camera.cx) &&
            r.Get(&c->camera.cy) && r.Get(&width) && r.Get(&height) && r.Get(&fmt) &&
            r.Get(&c->depth_scale) && r.Get(&c->min_depth_m) && r.Get(&c->max_depth_m) &&
            r.Get(&c->voxel_size_m) && r.Get(&c->truncation_m) && r.Get(&mw) && r.Get(&budget) &&
            r.Get(&color) && r.Get(&tracking) && r.Get(&c->clearing_radius_m) &&
            r.Get(&interval);
  for (int l = 0; l < 3 && ok; ++l) {
    int32_t it;
    ok = r.Get(&it);
    c->icp_iterations[l] = it;
  }
  c->camera.width = width;
  c->camera.height = height;
  c->depth_format = fmt == 0 ? DepthFormat::kUint16 : DepthFormat::kFloat32;
  c->max_weight = mw;
  c->brick_budget_bytes = budget;
  c->color = color != 0;
  c->tracking = tracking != 0;
  c->clearing_interval_frames = interval;
  return ok;
}
}  // namespace

absl::StatusOr<std::string> Volume::Snapshot(const Device& device) {
  FRESNEL_RETURN_IF_ERROR(CheckDevice(device));
  FRESNEL_ASSIGN_OR_RETURN(detail::VolumeState s, backend_->Export(device));
  Writer w;
  for (char ch : kMagic) w.Put(ch);
  PutConfig(w, config_);
  w.Put<int64_t>(frame_index_);
  w.Put(pose_.m);
  w.Put(s.counters);
  w.PutVec(s.keys);
  w.PutVec(s.vals);
  w.PutVec(s.brick_keys);
  w.PutVec(s.free_list);
  w.PutVec(s.used_bricks);
  w.PutVec(s.voxels);
  w.PutVec(s.colors);
  w.Put(s.prev_pose);
  w.Put(s.model_T_cw);
  w.Put(s.model_T_wc);
  w.Put(s.has_model);
  return w.Take();
}

absl::StatusOr<std::unique_ptr<Volume>> Volume::Restore(const Device& device,
                                                        absl::string_view bytes) {
  Reader r(bytes);
  char magic[8];
  for (char& ch : magic)
    if (!r.Get(&ch)) return Invalid("snapshot", "is truncated (header)");
  if (std::memcmp(magic, kMagic, 8) != 0) return Invalid("snapshot", "is not a fusion snapshot");
  FusionConfig config;
  if (!GetConfig(r, &config)) return Invalid("snapshot", "is truncated (config)");
  FRESNEL_RETURN_IF_ERROR(ValidateConfig(config));
  detail::Sizes sz = detail::ComputeSizes(config);
  int64_t frame_index;
  RigidTransform pose;
  detail::VolumeState s;
  const uint64_t cap = sz.capacity, slots = sz.slots;
  bool ok = r.Get(&frame_index) && r.Get(&pose.m) && r.Get(&s.counters) &&
            r.GetVec(&s.keys, slots) && r.GetVec(&s.vals, slots) &&
            r.GetVec(&s.brick_keys, cap) && r.GetVec(&s.free_list, cap) &&
            r.GetVec(&s.used_bricks, cap) && r.GetVec(&s.voxels, cap * detail::kBrickVoxels) &&
            r.GetVec(&s.colors, cap * detail::kBrickVoxels) && r.Get(&s.prev_pose) &&
            r.Get(&s.model_T_cw) && r.Get(&s.model_T_wc) && r.Get(&s.has_model);
  if (!ok || !r.done()) return Invalid("snapshot", "is truncated or has trailing bytes");
  if (s.keys.size() != slots || s.vals.size() != slots || s.brick_keys.size() != cap ||
      s.free_list.size() != cap ||
      s.voxels.size() != s.used_bricks.size() * detail::kBrickVoxels ||
      (config.color && s.colors.size() != s.voxels.size()) ||
      s.counters.used < 0 || s.counters.used > static_cast<int64_t>(cap) ||
      s.counters.hwm < 0 || s.counters.hwm > static_cast<int64_t>(cap))
    return Invalid("snapshot", "has inconsistent array sizes or counters");
  for (int32_t b : s.used_bricks)
    if (b < 0 || b >= static_cast<int64_t>(cap)) return Invalid("snapshot", "has a bad brick index");
  for (uint64_t i = 0; i < slots; ++i)
    if (s.keys[i] != detail::kEmptyKey && s.keys[i] != detail::kTombKey &&
        (s.vals[i] < 0 || s.vals[i] >= static_cast<int64_t>(cap)))
      return Invalid("snapshot", "has a bad hash value");
  FRESNEL_ASSIGN_OR_RETURN(std::unique_ptr<Volume> v, Create(device, config));
  FRESNEL_RETURN_IF_ERROR(v->backend_->Import(device, s));
  v->frame_index_ = frame_index;
  v->pose_ = pose;
  return v;
}

// ---------------------------------------------------------------------------------------------
// PLY

std::string EncodePly(const Mesh& mesh) {
  const bool color = !mesh.colors.empty();
  std::string out = absl::StrCat(
      "ply\nformat binary_little_endian 1.0\ncomment fresnel fusion mesh (metres)\nelement vertex ",
      mesh.num_vertices(),
      "\nproperty float x\nproperty float y\nproperty float z\nproperty float nx\n"
      "property float ny\nproperty float nz\n",
      color ? "property uchar red\nproperty uchar green\nproperty uchar blue\n" : "",
      "element face ", mesh.num_triangles(), "\nproperty list uchar int vertex_indices\nend_header\n");
  const int64_t nv = mesh.num_vertices();
  const size_t vbytes = 24 + (color ? 3 : 0);
  size_t base = out.size();
  out.resize(base + nv * vbytes + mesh.num_triangles() * 13);
  char* p = out.data() + base;
  for (int64_t i = 0; i < nv; ++i) {
    std::memcpy(p, &mesh.vertices[3 * i], 12);
    std::memcpy(p + 12, &mesh.normals[3 * i], 12);
    if (color) std::memcpy(p + 24, &mesh.colors[3 * i], 3);
    p += vbytes;
  }
  for (int64_t t = 0; t < mesh.num_triangles(); ++t) {
    *p++ = 3;
    std::memcpy(p, &mesh.triangles[3 * t], 12);
    p += 12;
  }
  return out;
}

absl::Status WritePly(const std::string& path, const Mesh& mesh) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path, " for writing"));
  std::string bytes = EncodePly(mesh);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) return absl::InternalError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

#ifndef FRESNEL_WITH_CUDA
absl::StatusOr<std::unique_ptr<VolumeBackend>> MakeCudaBackend(const Device&,
                                                               const FusionConfig&) {
  return absl::FailedPreconditionError("this build has no CUDA");
}
#endif

}  // namespace fresnel::fusion
