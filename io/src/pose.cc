// Pose files (fresnel/io/pose.h).
#include "fresnel/io/pose.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"

namespace fresnel {
namespace {

// The top three rows of a row-major 4 x 4.
PoseMatrix TopRows(const double (&m)[16]) {
  PoseMatrix p;
  for (int i = 0; i < 12; ++i) p[i] = m[i];
  return p;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadDataLines(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.push_back(line);
  }
  return lines;
}

absl::StatusOr<std::vector<PoseMatrix>> ReadPosesTxt(const std::string& path) {
  FRESNEL_ASSIGN_OR_RETURN(std::vector<std::string> lines, ReadDataLines(path));
  std::vector<PoseMatrix> poses;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::istringstream s(lines[i]);
    double frame, m[16];
    s >> frame;
    for (double& v : m) s >> v;
    if (!s) return absl::InvalidArgumentError(absl::StrCat(path, ":", i + 1, ": expected 17 numbers"));
    poses.push_back(TopRows(m));
  }
  return poses;
}

absl::StatusOr<std::vector<PoseMatrix>> ReadTrajectoryLog(const std::string& path) {
  FRESNEL_ASSIGN_OR_RETURN(std::vector<std::string> lines, ReadDataLines(path));
  if (lines.size() % 5 != 0)
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected 5 lines per pose"));
  std::vector<PoseMatrix> poses;
  for (size_t k = 0; k < lines.size(); k += 5) {
    double m[16];
    for (int r = 0; r < 4; ++r) {
      std::istringstream s(lines[k + 1 + r]);
      for (int c = 0; c < 4; ++c) s >> m[r * 4 + c];
      if (!s) return absl::InvalidArgumentError(absl::StrCat(path, ":", k + 2 + r, ": expected 4 numbers"));
    }
    poses.push_back(TopRows(m));
  }
  return poses;
}

absl::StatusOr<std::vector<PoseMatrix>> ReadTumTrajectory(const std::string& path) {
  FRESNEL_ASSIGN_OR_RETURN(std::vector<std::string> lines, ReadDataLines(path));
  std::vector<PoseMatrix> poses;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::istringstream s(lines[i]);
    double t, x, y, z, qx, qy, qz, qw;
    s >> t >> x >> y >> z >> qx >> qy >> qz >> qw;
    if (!s) return absl::InvalidArgumentError(absl::StrCat(path, ":", i + 1, ": expected 8 numbers"));
    double n = std::sqrt(qx * qx + qy * qy + qz * qz + qw * qw);
    qx /= n, qy /= n, qz /= n, qw /= n;
    poses.push_back({1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw), x,
                     2 * (qx * qy + qz * qw), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw), y,
                     2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx * qx + qy * qy), z});
  }
  return poses;
}

absl::Status WritePosesTxt(const std::string& path, const std::vector<PoseMatrix>& poses) {
  std::ofstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path, " for writing"));
  f.precision(9);
  for (size_t i = 0; i < poses.size(); ++i) {
    f << i;
    for (double v : poses[i]) f << ' ' << v;
    f << " 0 0 0 1\n";
  }
  return f ? absl::OkStatus() : absl::InternalError(absl::StrCat("writing ", path, " failed"));
}

}  // namespace fresnel
