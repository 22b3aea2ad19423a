// Sequence reading (intrinsics, depth/colour PNG lists; the pose files through fresnel_io) and the
// synthetic scene.
#include "fresnel/fusion/dataset.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/io/pose.h"

namespace fresnel::fusion {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> ListPngs(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".png") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// The pose files are fresnel_io's (fresnel/io/pose.h); RigidTransform holds the same 3 x 4.
namespace {

absl::StatusOr<std::vector<RigidTransform>> Transforms(
    absl::StatusOr<std::vector<PoseMatrix>> matrices) {
  if (!matrices.ok()) return matrices.status();
  std::vector<RigidTransform> poses(matrices->size());
  for (size_t i = 0; i < poses.size(); ++i) poses[i].m = (*matrices)[i];
  return poses;
}

}  // namespace

absl::StatusOr<std::vector<RigidTransform>> ReadPosesTxt(const std::string& path) {
  return Transforms(::fresnel::ReadPosesTxt(path));
}

absl::StatusOr<std::vector<RigidTransform>> ReadTrajectoryLog(const std::string& path) {
  return Transforms(::fresnel::ReadTrajectoryLog(path));
}

absl::StatusOr<std::vector<RigidTransform>> ReadTumTrajectory(const std::string& path) {
  return Transforms(::fresnel::ReadTumTrajectory(path));
}

absl::Status WritePosesTxt(const std::string& path, const std::vector<RigidTransform>& poses) {
  std::vector<PoseMatrix> matrices(poses.size());
  for (size_t i = 0; i < poses.size(); ++i) matrices[i] = poses[i].m;
  return ::fresnel::WritePosesTxt(path, matrices);
}

absl::StatusOr<Sequence> OpenSequence(const std::string& dir) {
  Sequence seq;
  FRESNEL_ASSIGN_OR_RETURN(std::vector<std::string> lines, ReadDataLines((fs::path(dir) / "intrinsics.txt").string()));
  {
    std::istringstream s(lines.empty() ? std::string() : lines[0]);
    s >> seq.camera.fx >> seq.camera.fy >> seq.camera.cx >> seq.camera.cy >> seq.camera.width >>
        seq.camera.height >> seq.depth_scale;
    if (!s)
      return absl::InvalidArgumentError(absl::StrCat(
          dir, "/intrinsics.txt: expected 'fx fy cx cy width height depth_scale'"));
  }
  seq.depth_files = ListPngs(fs::path(dir) / "depth");
  if (seq.depth_files.empty())
    return absl::NotFoundError(absl::StrCat(dir, "/depth has no PNG files"));
  for (const char* sub : {"image", "color", "rgb"}) {
    auto c = ListPngs(fs::path(dir) / sub);
    if (c.size() == seq.depth_files.size()) {
      seq.color_files = std::move(c);
      break;
    }
  }
  const fs::path d(dir);
  absl::StatusOr<std::vector<RigidTransform>> poses = std::vector<RigidTransform>{};
  if (fs::exists(d / "poses.txt")) {
    poses = ReadPosesTxt((d / "poses.txt").string());
  } else if (fs::exists(d / "trajectory.log")) {
    poses = ReadTrajectoryLog((d / "trajectory.log").string());
  } else if (fs::exists(d / "groundtruth.txt")) {
    poses = ReadTumTrajectory((d / "groundtruth.txt").string());
  }
  if (!poses.ok()) return poses.status();
  seq.poses = std::move(*poses);
  if (!seq.poses.empty() && seq.poses.size() < seq.depth_files.size())
    return absl::InvalidArgumentError(absl::StrCat(dir, ": ", seq.poses.size(), " poses for ",
                                                   seq.depth_files.size(), " depth frames"));
  seq.poses.resize(std::min(seq.poses.size(), seq.depth_files.size()));
  return seq;
}

double AbsoluteTrajectoryRmse(const std::vector<RigidTransform>& est,
                              const std::vector<RigidTransform>& gt) {
  const size_t n = std::min(est.size(), gt.size());
  if (n == 0) return 0;
  RigidTransform align = gt[0] * est[0].Inverse();
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = TranslationDistance(align * est[i], gt[i]);
    s += d * d;
  }
  return std::sqrt(s / n);
}

RigidTransform LookAt(const std::array<double, 3>& eye, const std::array<double, 3>& target) {
  auto norm = [](std::array<double, 3> v) {
    double n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    return std::array<double, 3>{v[0] / n, v[1] / n, v[2] / n};
  };
  auto cross = [](const std::array<double, 3>& a, const std::array<double, 3>& b) {
    return std::array<double, 3>{a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                                 a[0] * b[1] - a[1] * b[0]};
  };
  auto z = norm({target[0] - eye[0], target[1] - eye[1], target[2] - eye[2]});
  auto x = norm(cross({0, 1, 0}, z));
  auto y = cross(z, x);
  RigidTransform t;
  t.m = {x[0], y[0], z[0], eye[0], x[1], y[1], z[1], eye[1], x[2], y[2], z[2], eye[2]};
  return t;
}

// ---------------------------------------------------------------------------------------------
// Synthetic scene

SyntheticScene SyntheticScene::Room() {
  SyntheticScene s;
  s.AddRoom({0, 0, 0}, {2.0, 1.5, 2.0}, {200, 190, 170});
  s.AddSphere({0.0, 0.9, 0.0}, 0.4, {220, 60, 50});
  s.AddSphere({-0.6, 1.25, 0.8}, 0.25, {60, 160, 220});
  s.AddBox({0.8, 1.0, 0.5}, {0.3, 0.5, 0.3}, {80, 200, 90});
  s.AddBox({-0.7, 1.1, -0.5}, {0.25, 0.4, 0.35}, {230, 200, 60});
  return s;
}

void SyntheticScene::AddSphere(const std::array<double, 3>& c, double r, std::array<uint8_t, 3> rgb) {
  prims_.push_back(Primitive{0, {c[0], c[1], c[2]}, {r, r, r}, rgb});
}
void SyntheticScene::AddBox(const std::array<double, 3>& c, const std::array<double, 3>& h,
                            std::array<uint8_t, 3> rgb) {
  prims_.push_back(Primitive{1, {c[0], c[1], c[2]}, {h[0], h[1], h[2]}, rgb});
}
void SyntheticScene::AddRoom(const std::array<double, 3>& c, const std::array<double, 3>& h,
                             std::array<uint8_t, 3> rgb) {
  prims_.push_back(Primitive{2, {c[0], c[1], c[2]}, {h[0], h[1], h[2]}, rgb});
}

double SyntheticScene::PrimitiveSdf(const Primitive& p, double x, double y, double z) const {
  double dx = x - p.c[0], dy = y - p.c[1], dz = z - p.c[2];
  if (p.kind == 0) return std::sqrt(dx * dx + dy * dy + dz * dz) - p.h[0];
  double qx = std::abs(dx) - p.h[0], qy = std::abs(dy) - p.h[1], qz = std::abs(dz) - p.h[2];
  double ox = std::max(qx, 0.0), oy = std::max(qy, 0.0), oz = std::max(qz, 0.0);
  double box = std::sqrt(ox * ox + oy * oy + oz * oz) + std::min(std::max(qx, std::max(qy, qz)), 0.0);
  return p.kind == 1 ? box : -box;
}

double SyntheticScene::Sdf(double x, double y, double z) const {
  double d = 1e30;
  for (const Primitive& p : prims_) d = std::min(d, PrimitiveSdf(p, x, y, z));
  return d;
}

std::array<uint8_t, 3> SyntheticScene::Color(double x, double y, double z) const {
  double best = 1e30;
  std::array<uint8_t, 3> c = {0, 0, 0};
  for (const Primitive& p : prims_) {
    double d = std::abs(PrimitiveSdf(p, x, y, z));
    if (d < best) {
      best = d;
      c = p.rgb;
    }
  }
  // A checker texture (10 cm) so that colour carries detail.
  int k = (static_cast<int>(std::floor(x * 10)) + static_cast<int>(std::floor(y * 10)) +
           static_cast<int>(std::floor(z * 10))) & 1;
  if (k) {
    for (auto& v : c) v = static_cast<uint8_t>(v * 3 / 4);
  }
  return c;
}

HostArray SyntheticScene::RenderDepth(const CameraIntrinsics& cam, const RigidTransform& T,
                                      double max_depth_m, HostArray* rgb) const {
  HostArray depth(DType::kFloat32, {cam.height, cam.width});
  if (rgb != nullptr) *rgb = HostArray(DType::kUint8, {cam.height, cam.width, 3});
  tbb::parallel_for(tbb::blocked_range<int>(0, cam.height), [&](const tbb::blocked_range<int>& rows) {
    for (int v = rows.begin(); v < rows.end(); ++v)
      for (int u = 0; u < cam.width; ++u) {
        double rc[3] = {(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy, 1.0};
        double n = std::sqrt(rc[0] * rc[0] + rc[1] * rc[1] + 1.0);
        double d[3];
        for (int i = 0; i < 3; ++i)
          d[i] = (T.m[i * 4] * rc[0] + T.m[i * 4 + 1] * rc[1] + T.m[i * 4 + 2] * rc[2]) / n;
        const double o[3] = {T.m[3], T.m[7], T.m[11]};
        double t = 0.01;
        bool hit = false;
        for (int it = 0; it < 400 && t * (1.0 / n) < max_depth_m; ++it) {
          double s = Sdf(o[0] + t * d[0], o[1] + t * d[1], o[2] + t * d[2]);
          if (s < 1e-6) {
            hit = true;
            break;
          }
          t += s;
        }
        const int64_t i = static_cast<int64_t>(v) * cam.width + u;
        const double z = t / n;
        depth.data<float>()[i] = hit && z <= max_depth_m ? static_cast<float>(z) : 0.0f;
        if (rgb != nullptr) {
          auto c = hit ? Color(o[0] + t * d[0], o[1] + t * d[1], o[2] + t * d[2])
                       : std::array<uint8_t, 3>{0, 0, 0};
          for (int k = 0; k < 3; ++k) rgb->data<uint8_t>()[3 * i + k] = c[k];
        }
      }
  });
  return depth;
}

std::vector<RigidTransform> SyntheticScene::Orbit(int frames, double arc_rad) {
  std::vector<RigidTransform> poses;
  for (int i = 0; i < frames; ++i) {
    double a = arc_rad * i / std::max(1, frames - 1);
    double h = -0.1 + 0.15 * std::sin(2 * a);
    poses.push_back(LookAt({1.4 * std::sin(a), h, -1.4 * std::cos(a)}, {0.0, 0.8, 0.0}));
  }
  return poses;
}

void AddDepthNoise(HostArray* depth, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  float* d = depth->data<float>();
  for (int64_t i = 0; i < depth->size(); ++i) {
    if (d[i] <= 0) continue;
    double z = d[i];
    double sigma = 0.0012 + 0.0019 * (z - 0.4) * (z - 0.4);
    d[i] = static_cast<float>(z + sigma * g(rng));
  }
}

HostArray ToUint16Depth(const HostArray& depth_m, double scale) {
  HostArray out(DType::kUint16, depth_m.shape());
  const float* s = depth_m.data<float>();
  uint16_t* o = out.data<uint16_t>();
  for (int64_t i = 0; i < depth_m.size(); ++i) {
    double v = std::round(static_cast<double>(s[i]) * scale);
    o[i] = static_cast<uint16_t>(std::clamp(v, 0.0, 65535.0));
  }
  return out;
}

}  // namespace fresnel::fusion
