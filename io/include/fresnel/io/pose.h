// Camera trajectories on disk (the formats of ../shared/data/fusion/*/README.md) as row-major
// 3 x 4 matrices [R | t]: the top three rows of T_world_camera (maps camera coordinates to
// world), translation in the file's unit (metres in the fusion datasets). Host-only; reads and
// writes synchronously on the calling thread.
//   poses.txt        one line per frame: "frame m00 m01 .. m33" (17 numbers; the last row of the
//                    4 x 4 is ignored)
//   trajectory.log   Redwood / Open3D: per pose a header line, then four rows of four numbers
//   groundtruth.txt  TUM: "time tx ty tz qx qy qz qw" (the quaternion is normalised)
// Blank lines and lines starting with '#' are skipped. NotFound when the file cannot be opened;
// InvalidArgument naming the file and line for a malformed one.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fresnel {

using PoseMatrix = std::array<double, 12>;  // row-major [R | t]

absl::StatusOr<std::vector<PoseMatrix>> ReadPosesTxt(const std::string& path);
absl::StatusOr<std::vector<PoseMatrix>> ReadTrajectoryLog(const std::string& path);
absl::StatusOr<std::vector<PoseMatrix>> ReadTumTrajectory(const std::string& path);
// Writes "frame m00 .. m23 0 0 0 1" lines (the poses.txt format), frames numbered from 0.
absl::Status WritePosesTxt(const std::string& path, const std::vector<PoseMatrix>& poses);

// The non-blank lines of a text file that do not start with '#' (NotFound when it cannot be
// opened); also the reader of the small text files beside the poses (intrinsics.txt).
absl::StatusOr<std::vector<std::string>> ReadDataLines(const std::string& path);

}  // namespace fresnel
