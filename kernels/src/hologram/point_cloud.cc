// Mesh sampling, box fitting and image planes.
#include "fresnel/hologram/point_cloud.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"

namespace fresnel::hologram {

absl::StatusOr<PointCloud> SampleMesh(const PlyMesh& mesh, int64_t count, uint64_t seed) {
  const int64_t nv = static_cast<int64_t>(mesh.vertices.size());
  const int64_t nf = static_cast<int64_t>(mesh.faces.size());
  if (count < 1)
    return absl::InvalidArgumentError(absl::StrCat("count: must be >= 1, got ", count));
  if (nv == 0) return absl::InvalidArgumentError("mesh: no vertices");
  if (count > nv && nf == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: ", count, " points need faces, the mesh has ", nv, " vertices only"));
  }
  const bool values = !mesh.vertex_values.empty();
  auto vertex_point = [&](int64_t i) {
    return Point{mesh.vertices[i][0], mesh.vertices[i][1], mesh.vertices[i][2],
                 values ? mesh.vertex_values[i] : 1.0, 0.0};
  };
  auto face_point = [&](int64_t f, double b0, double b1) {
    const auto& t = mesh.faces[f];
    const double b2 = 1.0 - b0 - b1;
    Point p;
    p.x_m = b0 * mesh.vertices[t[0]][0] + b1 * mesh.vertices[t[1]][0] + b2 * mesh.vertices[t[2]][0];
    p.y_m = b0 * mesh.vertices[t[0]][1] + b1 * mesh.vertices[t[1]][1] + b2 * mesh.vertices[t[2]][1];
    p.z_m = b0 * mesh.vertices[t[0]][2] + b1 * mesh.vertices[t[1]][2] + b2 * mesh.vertices[t[2]][2];
    p.amplitude = values ? b0 * mesh.vertex_values[t[0]] + b1 * mesh.vertex_values[t[1]] +
                               b2 * mesh.vertex_values[t[2]]
                         : 1.0;
    return p;
  };
  PointCloud out;
  out.reserve(static_cast<size_t>(count));
  if (count <= nv) {
    for (int64_t i = 0; i < count; ++i) out.push_back(vertex_point(i * nv / count));
    return out;
  }
  for (int64_t i = 0; i < nv; ++i) out.push_back(vertex_point(i));
  const int64_t centroids = std::min(nf, count - nv);
  for (int64_t i = 0; i < centroids; ++i)
    out.push_back(face_point(i * nf / centroids, 1.0 / 3, 1.0 / 3));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  for (int64_t i = 0; static_cast<int64_t>(out.size()) < count; ++i) {
    double b0 = uni(rng), b1 = uni(rng);
    if (b0 + b1 > 1) {
      b0 = 1 - b0;
      b1 = 1 - b1;
    }
    out.push_back(face_point(i % nf, b0, b1));
  }
  return out;
}

absl::StatusOr<PointCloud> FitToBox(const PointCloud& points, std::array<double, 3> extent_m,
                                    std::array<double, 3> center_m) {
  if (points.empty()) return absl::InvalidArgumentError("points: the point cloud is empty");
  for (int a = 0; a < 3; ++a) {
    if (!(extent_m[a] >= 0) || !std::isfinite(extent_m[a])) {
      return absl::InvalidArgumentError(
          absl::StrCat("extent_m[", a, "]: must be finite and >= 0, got ", extent_m[a]));
    }
  }
  std::array<double, 3> lo, hi;
  lo.fill(std::numeric_limits<double>::infinity());
  hi.fill(-std::numeric_limits<double>::infinity());
  for (const Point& p : points) {
    const double c[3] = {p.x_m, p.y_m, p.z_m};
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], c[a]);
      hi[a] = std::max(hi[a], c[a]);
    }
  }
  PointCloud out = points;
  for (Point& p : out) {
    double* c[3] = {&p.x_m, &p.y_m, &p.z_m};
    for (int a = 0; a < 3; ++a) {
      const double span = hi[a] - lo[a];
      const double rel = span > 0 ? (*c[a] - lo[a]) / span - 0.5 : 0.0;
      *c[a] = center_m[a] + rel * extent_m[a];
    }
  }
  return out;
}

absl::StatusOr<PointCloud> ImageToPointCloud(const HostArray& gray8,
                                             const ImagePlaneOptions& options) {
  if (gray8.dtype() != DType::kUint8 || gray8.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("image: must be uint8 [rows, cols], got ",
                                                   DTypeName(gray8.dtype()), " ",
                                                   ShapeString(gray8.shape())));
  }
  if (!std::isfinite(options.spacing_m) || options.spacing_m <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spacing_m: must be positive and finite, got ", options.spacing_m));
  }
  if (!std::isfinite(options.depth_m) || options.depth_m <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("depth_m: must be positive and finite, got ", options.depth_m));
  }
  const int64_t rows = gray8.dim(0), cols = gray8.dim(1);
  PointCloud out;
  out.reserve(static_cast<size_t>(rows * cols));
  const uint8_t* px = gray8.data<uint8_t>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t g = px[i * cols + k];
      if (options.skip_zero && g == 0) continue;
      out.push_back(Point{static_cast<double>(k - cols / 2) * options.spacing_m,
                          static_cast<double>(i - rows / 2) * options.spacing_m, options.depth_m,
                          g / 255.0, 0.0});
    }
  }
  return out;
}

}  // namespace fresnel::hologram
