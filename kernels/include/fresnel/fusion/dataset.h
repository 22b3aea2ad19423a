// RGB-D sequences on disk (the formats of ../shared/data/fusion/*/README.md) and a synthetic scene
// with an analytic signed distance, for tests, the benchmark and the CLI.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/fusion/fusion.h"

namespace fresnel::fusion {

// A sequence folder: intrinsics.txt ("fx fy cx cy width height depth_scale"), depth/*.png (16-bit),
// optional colour PNGs in image/ or color/ (JPEG is not read), and poses from poses.txt
// ("frame m00 .. m33", T_world_camera), trajectory.log (Redwood/Open3D) or groundtruth.txt (TUM:
// "time tx ty tz qx qy qz qw"), whichever exists first.
struct Sequence {
  CameraIntrinsics camera;
  double depth_scale = 1000.0;
  std::vector<std::string> depth_files;  // sorted by name
  std::vector<std::string> color_files;  // empty, or one per depth file
  std::vector<RigidTransform> poses;     // empty, or one per depth file
};
absl::StatusOr<Sequence> OpenSequence(const std::string& dir);

absl::StatusOr<std::vector<RigidTransform>> ReadPosesTxt(const std::string& path);
absl::StatusOr<std::vector<RigidTransform>> ReadTrajectoryLog(const std::string& path);
absl::StatusOr<std::vector<RigidTransform>> ReadTumTrajectory(const std::string& path);
// Writes "frame m00 .. m33" lines (the poses.txt format).
absl::Status WritePosesTxt(const std::string& path, const std::vector<RigidTransform>& poses);

// RMS of the translation error after aligning the first poses (est' = gt_0 est_0^-1 est), metres.
double AbsoluteTrajectoryRmse(const std::vector<RigidTransform>& estimate,
                              const std::vector<RigidTransform>& ground_truth);

// A pose at `eye` looking at `target` (OpenCV axes; world "down" is +y).
RigidTransform LookAt(const std::array<double, 3>& eye, const std::array<double, 3>& target);

// Union of solid primitives; the signed distance is positive in free space (metres).
class SyntheticScene {
 public:
  // Inside of a 4 x 3 x 4 m room centred at the origin (+y down, floor at y = 1.5) with two
  // spheres and two boxes.
  static SyntheticScene Room();

  void AddSphere(const std::array<double, 3>& center, double radius, std::array<uint8_t, 3> rgb);
  void AddBox(const std::array<double, 3>& center, const std::array<double, 3>& half,
              std::array<uint8_t, 3> rgb);
  // Free space inside the box, solid outside (walls of a room).
  void AddRoom(const std::array<double, 3>& center, const std::array<double, 3>& half,
               std::array<uint8_t, 3> rgb);

  double Sdf(double x, double y, double z) const;
  std::array<uint8_t, 3> Color(double x, double y, double z) const;

  // z-depth in metres (float32 [h, w], 0 where nothing is hit within max_depth_m), by sphere
  // tracing. With rgb != nullptr also uint8 [h, w, 3] colours. Multi-threaded.
  HostArray RenderDepth(const CameraIntrinsics& camera, const RigidTransform& T_world_camera,
                        double max_depth_m, HostArray* rgb = nullptr) const;

  // The camera path used by tests and the benchmark: `frames` poses on an arc of `arc_rad` around
  // the room's vertical axis at radius 1.4 m, looking at the centre, with a slow vertical bob.
  static std::vector<RigidTransform> Orbit(int frames, double arc_rad);

 private:
  struct Primitive {
    int kind;  // 0 sphere, 1 box, 2 room
    double c[3];
    double h[3];
    std::array<uint8_t, 3> rgb;
  };
  double PrimitiveSdf(const Primitive& p, double x, double y, double z) const;
  std::vector<Primitive> prims_;
};

// Axial noise of a structured-light sensor (Nguyen et al. 2012): sigma(z) = 1.2 mm +
// 1.9 mm (z - 0.4 m)^2 / m^2, Gaussian, on every valid pixel of a float32 depth image.
void AddDepthNoise(HostArray* depth_m, uint64_t seed);
// float32 metres -> uint16 units (rounded; 0 stays 0).
HostArray ToUint16Depth(const HostArray& depth_m, double depth_scale);

}  // namespace fresnel::fusion
