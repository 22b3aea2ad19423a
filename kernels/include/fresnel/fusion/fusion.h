// Dense RGB-D reconstruction (KinectFusion-style) on a sparse voxel-hashed TSDF, CPU and CUDA.
//
// A `fusion::Volume` holds one reconstruction on one device (the CPU or one CUDA ordinal). Every
// method takes the `Device` it runs on; it must be the device the volume was created on (same kind
// and ordinal), but the stream may differ from call to call. CUDA methods enqueue on that stream
// and synchronise it before returning, so the next call (on any stream of that device) sees
// finished state. Methods are not thread-safe: call them one at a time.
//
// Frames: x right, y down, z forward (OpenCV). `T_world_camera` maps camera coordinates to world
// coordinates, in metres. Depth is z-depth (along the optical axis), not distance along the ray.
// Voxel v (integer coordinates) has its centre at world v * voxel_size_m.
//
// Errors: InvalidArgument names the field and the limit; ResourceExhausted when the brick budget is
// full (with the counts; the volume stays usable); FailedPrecondition for a device mismatch.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"

namespace fresnel::fusion {

// A rigid transform [R | t], row-major 3x4, double precision. T_a_b maps b coordinates to a.
struct RigidTransform {
  std::array<double, 12> m = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};

  static RigidTransform Identity() { return RigidTransform{}; }
  // From a row-major 4x4 (the last row is ignored).
  static RigidTransform FromMatrix4(const double* row_major_16);
  static RigidTransform FromTranslation(double x, double y, double z);
  RigidTransform operator*(const RigidTransform& b) const;
  RigidTransform Inverse() const;
  std::array<double, 3> Apply(double x, double y, double z) const;
  std::array<double, 3> Translation() const { return {m[3], m[7], m[11]}; }
  // True when all 12 entries are finite and R is orthonormal within `tol`.
  bool IsValid(double tol = 1e-3) const;
};

// Translation distance in metres and rotation angle in radians between two poses.
double TranslationDistance(const RigidTransform& a, const RigidTransform& b);
double RotationAngle(const RigidTransform& a, const RigidTransform& b);

// Pinhole camera; pixel (0, 0) is the centre of the top-left pixel: u = fx X/Z + cx.
struct CameraIntrinsics {
  double fx = 525.0, fy = 525.0, cx = 319.5, cy = 239.5;
  int width = 640, height = 480;
};

enum class DepthFormat { kUint16, kFloat32 };

// Session settings. Defaults suit a hand-held RGB-D camera in a room (0.1-5 m):
//  - voxel_size_m 4 mm: the depth noise of structured-light/stereo sensors at 1 m is 1-3 mm, so finer
//    voxels add memory (x8 per halving) without detail; 4 mm is the benchmark setting.
//  - truncation_m 2 cm (5 voxels): the band must exceed the noise at the working range (about 1 cm
//    at 2-3 m) and the per-frame motion error, yet stay thin enough that opposite sides of thin
//    objects do not overwrite each other; 4-5 voxels is the usual choice (nvblox uses 4).
//  - max_weight 64: the running average freezes after 64 observations, which still lets a changed
//    scene recover in under a second at 90 fps.
//  - brick budget 512 MiB: about 170k bricks of 8^3 voxels (4 mm: ~5.5 m^3 of surface band), a
//    furnished room at 4 mm.
struct FusionConfig {
  CameraIntrinsics camera;
  DepthFormat depth_format = DepthFormat::kUint16;
  // uint16 depth units per metre (1000 = millimetres, 5000 = TUM). Ignored for float32 depth.
  double depth_scale = 1000.0;
  double min_depth_m = 0.1;
  double max_depth_m = 5.0;
  double voxel_size_m = 0.004;
  double truncation_m = 0.02;
  int max_weight = 64;
  // Bytes for the volume structures (bricks, hash table, octree); reported back as bricks.
  int64_t brick_budget_bytes = int64_t{512} << 20;
  bool color = false;
  bool tracking = true;
  // Bricks whose centre is farther than this from the camera are evicted every
  // `clearing_interval_frames` frames; 0 disables eviction.
  double clearing_radius_m = 0.0;
  int clearing_interval_frames = 8;
  // ICP iterations per pyramid level, finest (full resolution) first.
  std::array<int, 3> icp_iterations = {10, 5, 4};
  // CUDA tuning for A/B measurements (`fresnel_bench_fusion --variants`); the defaults are what
  // the service runs. `cuda_disable`: bits of CUDA optimisations to turn off (kOff* / kRay* in
  // fusion_cuda.cu; results stay within the tests' tolerances). `cuda_enable`: bits of CUDA
  // variants that are off by default (kOn* in fusion_cuda.cu; same results, except kOnHalfModel,
  // bit 4, which changes tracking).
  // `cuda_icp_stop_xi2`: per-level |xi|^2 below which a CUDA ICP level counts as converged (0 =
  // the default 1e-7). Not saved in snapshots; the CPU backend ignores all three.
  unsigned cuda_disable = 0;
  unsigned cuda_enable = 0;
  std::array<double, 3> cuda_icp_stop_xi2 = {0, 0, 0};
};

// Checks every field (intrinsics, depth range, voxel and truncation sizes, weights, budget).
absl::Status ValidateConfig(const FusionConfig& config);
// Bricks that `brick_budget_bytes` buys (at least 1 when valid).
int64_t BrickCapacity(const FusionConfig& config);
// Bytes of one brick with its share of the hash table and octree.
int64_t BytesPerBrick(const FusionConfig& config);
// Device bytes a CUDA volume allocates at creation (structures + frame buffers); the server
// reserves this much before creating a session. Temporaries of ExtractMesh/Render come on top.
int64_t DeviceBytes(const FusionConfig& config);

// One depth frame (and optional colour). The views must stay valid during the call.
struct FrameInput {
  // height*width uint16 (depth units) or float32 (metres), row-major; 0 or non-finite = no depth.
  absl::string_view depth;
  // Optional height*width*3 RGB8, registered to depth; used when config.color.
  absl::string_view rgb;
  // External pose estimate (e.g. a VR tracker): initialises ICP, regularises it and relocalises
  // after a tracking loss.
  std::optional<RigidTransform> pose_prior;
  // Use this pose as is (no tracking for this frame); with tracking off, frames without a fixed
  // pose use the prior, else the previous pose.
  std::optional<RigidTransform> fixed_pose;
};

// Checks byte counts against the configuration and that poses are finite rigid transforms.
// Cheap; the service calls it once on the RPC thread.
absl::Status ValidateFrame(const FusionConfig& config, const FrameInput& frame);

struct FrameOptions {
  // Weight of the pose-prior penalty, relative to the ICP inlier count (lambda = weight * inliers,
  // added to the 6x6 normal equations as lambda * I). 0 = prior initialises only.
  double prior_weight = 1e-3;
  bool integrate = true;
};

enum class TrackingState { kOk, kLost };

struct FrameResult {
  int64_t frame_index = 0;
  RigidTransform T_world_camera;
  TrackingState state = TrackingState::kOk;
  // Tracking was lost and the pose prior was taken instead.
  bool relocalized = false;
  bool integrated = false;
  // ICP at full resolution, last iteration: associated points and RMS point-to-plane residual.
  int64_t inliers = 0;
  double residual_m = 0;
  int icp_iterations = 0;
  int64_t bricks_in_use = 0;
  int64_t brick_capacity = 0;
  // Bricks that could not be allocated this frame (budget full).
  int64_t bricks_dropped = 0;
  double track_s = 0, integrate_s = 0, raycast_s = 0;
};

enum class RenderMode {
  kDepth,    // float32 [h, w], metres (z), 0 = no surface
  kNormals,  // float32 [h, w, 3], world frame, 0 = no surface
  kShaded,   // uint8 [h, w], Lambertian with the light at the camera
  kColor,    // uint8 [h, w, 3]; needs config.color
};

// Triangle soup from marching tetrahedra (6 per cube) over all allocated bricks; vertices are not
// shared between triangles. Deterministic: bricks in key order, cells in voxel order.
struct Mesh {
  std::vector<float> vertices;      // xyz, metres, world frame
  std::vector<float> normals;       // xyz, unit, pointing out of the surface (towards free space)
  std::vector<uint8_t> colors;      // rgb per vertex; empty without colour
  std::vector<int32_t> triangles;   // 3 vertex indices per triangle
  int64_t num_vertices() const { return static_cast<int64_t>(vertices.size() / 3); }
  int64_t num_triangles() const { return static_cast<int64_t>(triangles.size() / 3); }
};

// Binary little-endian PLY (float xyz, float nx ny nz, uchar rgb when present, int triangles).
std::string EncodePly(const Mesh& mesh);
absl::Status WritePly(const std::string& path, const Mesh& mesh);

// Voxel values at world points (for tests and tools): tsdf in [-1, 1] (units of truncation_m),
// trilinearly interpolated; valid = all 8 neighbours observed.
struct TsdfSample {
  float tsdf = 0;
  bool valid = false;
};

class VolumeBackend;

class Volume {
 public:
  // Allocates every persistent buffer on `device` (synchronises). FailedPrecondition when the
  // device is CUDA and no GPU is present or the stream is null.
  static absl::StatusOr<std::unique_ptr<Volume>> Create(const Device& device,
                                                        const FusionConfig& config);
  // A volume equal bit for bit to the one `Snapshot` saved (config, voxels, hash table, pose).
  static absl::StatusOr<std::unique_ptr<Volume>> Restore(const Device& device,
                                                         absl::string_view snapshot);
  ~Volume();
  Volume(const Volume&) = delete;
  Volume& operator=(const Volume&) = delete;

  // Tracks (when enabled), integrates and raycasts one frame. Synchronises. The volume stays
  // consistent on every error; ResourceExhausted when bricks were dropped (the result is lost, but
  // the frame was integrated into the bricks that fit).
  absl::StatusOr<FrameResult> ProcessFrame(const Device& device, const FrameInput& frame,
                                           const FrameOptions& options = {});
  // Raycasts a view from any pose and camera. Synchronises.
  absl::StatusOr<HostArray> Render(const Device& device, const RigidTransform& T_world_camera,
                                   const CameraIntrinsics& camera, RenderMode mode);
  // Marching tetrahedra over every allocated brick. Synchronises; temporaries are freed.
  absl::StatusOr<Mesh> ExtractMesh(const Device& device);
  // Serialises config, pose, counters, hash table, free list and the voxels of used bricks.
  absl::StatusOr<std::string> Snapshot(const Device& device);
  // Evicts bricks whose centre is farther than radius_m from `center_world`; returns their count.
  absl::StatusOr<int64_t> Evict(const Device& device, const std::array<double, 3>& center_world,
                                double radius_m);
  absl::StatusOr<std::vector<TsdfSample>> SampleTsdf(const Device& device,
                                                     const std::vector<float>& points_world_xyz);

  const FusionConfig& config() const { return config_; }
  int64_t brick_capacity() const;
  // As of the last synchronising call.
  int64_t bricks_in_use() const;
  int64_t frame_index() const { return frame_index_; }
  const RigidTransform& pose() const { return pose_; }
  // Bytes allocated at creation on the device (host bytes for the CPU).
  int64_t allocated_bytes() const;

 private:
  Volume(const Device& device, const FusionConfig& config);
  absl::Status CheckDevice(const Device& device) const;

  Device device_;
  FusionConfig config_;
  std::unique_ptr<VolumeBackend> backend_;
  int64_t frame_index_ = 0;
  RigidTransform pose_;
};

}  // namespace fresnel::fusion
