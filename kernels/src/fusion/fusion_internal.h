// Backend interface of fusion::Volume (CPU: fusion_cpu.cc, CUDA: fusion_cuda.cu) and the sizes
// both derive from the configuration.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "fresnel/fusion/fusion.h"
#include "fusion/fusion_math.h"

namespace fresnel::fusion {

namespace detail {

// Allocation counters (device memory on CUDA).
struct Counters {
  int32_t used;             // bricks handed out = next free-list position
  int32_t hwm;              // 1 + the highest pool index ever handed out
  int32_t new_count;        // keys inserted this frame, awaiting a brick
  int32_t dropped;          // bricks that did not fit this frame
  int32_t tombstones;       // hash slots holding kTombKey
  int32_t octree_overflow;  // top-cell table full: the raycast must not skip
  int32_t visible;          // bricks updated this frame
  int32_t scratch;          // per-call result (evicted bricks)
};

struct Sizes {
  int64_t capacity;     // bricks
  int64_t slots;        // hash slots, power of two >= 2 capacity
  int64_t top_slots;    // octree top-cell slots, power of two
  int64_t pixels;       // width * height
};
Sizes ComputeSizes(const FusionConfig& config);

// Everything that makes up a volume's persistent state, on the host: what Snapshot serialises.
struct VolumeState {
  Counters counters{};
  std::vector<uint64_t> keys;        // slots
  std::vector<int32_t> vals;         // slots
  std::vector<uint64_t> brick_keys;  // capacity
  std::vector<int32_t> free_list;    // capacity
  std::vector<int32_t> used_bricks;  // pool indices with a key, ascending
  std::vector<Voxel> voxels;         // used_bricks.size() * 729
  std::vector<Color4> colors;        // same, when colour is on
  PoseD prev_pose{};
  PoseF model_T_cw{};
  PoseF model_T_wc{};
  int32_t has_model = 0;
};

CameraF ToCameraF(const CameraIntrinsics& c);
PoseD ToPoseD(const RigidTransform& t);
RigidTransform FromPoseD(const PoseD& p);

// Host-side view of the frame parameters that BeginFrame consumes.
struct FrameParams {
  PoseD prior{};
  int has_prior = 0;
  int has_fixed = 0;
  double prior_weight = 0;
  int integrate = 1;
};

}  // namespace detail

class VolumeBackend {
 public:
  virtual ~VolumeBackend() = default;
  virtual absl::StatusOr<FrameResult> ProcessFrame(const Device& device, const FrameInput& frame,
                                                   const detail::FrameParams& params) = 0;
  virtual absl::StatusOr<HostArray> Render(const Device& device, const RigidTransform& T_wc,
                                           const CameraIntrinsics& camera, RenderMode mode) = 0;
  virtual absl::StatusOr<Mesh> ExtractMesh(const Device& device) = 0;
  virtual absl::StatusOr<detail::VolumeState> Export(const Device& device) = 0;
  // Replaces the state, rebuilds the octree and (with a model) the ICP model maps.
  virtual absl::Status Import(const Device& device, const detail::VolumeState& state) = 0;
  virtual absl::StatusOr<int64_t> Evict(const Device& device, const double center[3],
                                        double radius_m) = 0;
  virtual absl::StatusOr<std::vector<TsdfSample>> Sample(const Device& device,
                                                         const std::vector<float>& points) = 0;
  virtual int64_t bricks_in_use() const = 0;
  virtual int64_t allocated_bytes() const = 0;
};

absl::StatusOr<std::unique_ptr<VolumeBackend>> MakeCpuBackend(const FusionConfig& config);
absl::StatusOr<std::unique_ptr<VolumeBackend>> MakeCudaBackend(const Device& device,
                                                               const FusionConfig& config);

}  // namespace fresnel::fusion
