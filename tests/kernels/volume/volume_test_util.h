// Independent references for the volume tests: ray chords through tetrahedra and axis-aligned
// boxes in float64, and random cameras around a mesh.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fresnel/volume/mesh.h"
#include "fresnel/volume/render.h"
#include "support/test_support.h"

namespace fresnel::volume::testing {

using D3 = std::array<double, 3>;

inline D3 Sub(const D3& a, const D3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
inline double Dot(const D3& a, const D3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline D3 Cross(const D3& a, const D3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
inline D3 Normalize(const D3& a) {
  const double n = std::sqrt(Dot(a, a));
  return {a[0] / n, a[1] / n, a[2] / n};
}

// The pixel ray of render.h's camera model, in float64, written out independently.
inline void RayAt(const Camera& c, double x, double y, D3* o, D3* d);
inline void RayOf(const Camera& c, int x, int y, D3* o, D3* d) { RayAt(c, x, y, o, d); }
// The ray through continuous pixel coordinates (pixel centre (x, y) at x, y).
inline void RayAt(const Camera& c, double x, double y, D3* o, D3* d) {
  const D3 eye = {c.eye[0], c.eye[1], c.eye[2]};
  const D3 f = Normalize(Sub({c.target[0], c.target[1], c.target[2]}, eye));
  const D3 r = Normalize(Cross(f, {c.up[0], c.up[1], c.up[2]}));
  const D3 u = Cross(r, f);
  const double px = (x + 0.5) * 2.0 / c.width - 1.0, py = 1.0 - (y + 0.5) * 2.0 / c.height;
  const bool ortho = c.orthographic_height > 0;
  const double sy = ortho ? 0.5 * c.orthographic_height
                          : std::tan(0.5 * c.vertical_fov_deg * M_PI / 180.0);
  const double sx = sy * c.width / c.height;
  D3 off;
  for (int k = 0; k < 3; ++k) off[k] = px * sx * r[k] + py * sy * u[k];
  if (ortho) {
    for (int k = 0; k < 3; ++k) (*o)[k] = eye[k] + off[k];
    *d = f;
  } else {
    *o = eye;
    *d = Normalize({f[0] + off[0], f[1] + off[1], f[2] + off[2]});
  }
}

// Length of the ray (t >= 0) inside the tetrahedron: clip by its four half-spaces.
inline double ChordTet(const D3 p[4], const D3& o, const D3& d) {
  double t0 = 0, t1 = INFINITY;
  for (int i = 0; i < 4; ++i) {
    const D3 &a = p[(i + 1) % 4], &b = p[(i + 2) % 4], &c = p[(i + 3) % 4];
    D3 n = Cross(Sub(b, a), Sub(c, a));
    if (Dot(n, Sub(p[i], a)) < 0) n = {-n[0], -n[1], -n[2]};  // inward
    const double num = Dot(n, Sub(o, a)), den = Dot(n, d);  // inside: num + t·den >= 0
    if (den == 0) {
      if (num < 0) return 0;
    } else if (den > 0) {
      t0 = std::max(t0, -num / den);
    } else {
      t1 = std::min(t1, -num / den);
    }
  }
  return std::max(0.0, t1 - t0);
}

// Length of the ray (t >= 0) inside the box [lo, hi].
inline double ChordBox(const D3& lo, const D3& hi, const D3& o, const D3& d) {
  double t0 = 0, t1 = INFINITY;
  for (int k = 0; k < 3; ++k) {
    if (d[k] == 0) {
      if (o[k] < lo[k] || o[k] > hi[k]) return 0;
      continue;
    }
    double a = (lo[k] - o[k]) / d[k], b = (hi[k] - o[k]) / d[k];
    if (a > b) std::swap(a, b);
    t0 = std::max(t0, a);
    t1 = std::min(t1, b);
  }
  return std::max(0.0, t1 - t0);
}

// −ln(1 − α) of a pixel of a float32 RGBA image rendered over a transparent background.
inline double OpticalDepth(const HostArray& image, int x, int y) {
  const double a = image.data<float>()[4 * (int64_t{y} * image.dim(1) + x) + 3];
  return -std::log1p(-std::min(a, 1.0 - 1e-12));
}

// A random perspective camera looking at the centre of the bounds from outside.
inline Camera RandomCamera(const MeshReport& r, int width, int height, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> az(0, 360), el(-60, 60);
  return OrbitCamera(r.bounds_min, r.bounds_max, az(rng), el(rng), width, height, 35);
}

// max |a − b| over two float32 images of equal shape.
inline double MaxAbsDiff(const HostArray& a, const HostArray& b) {
  double m = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(double{a.data<float>()[i]} - b.data<float>()[i]));
  return m;
}

// Blunt Fin from ../shared/data, or nullopt after a WARN when the data is absent (the caller
// then skips).
inline std::optional<TetMesh> LoadBluntFin() {
  const std::string path = fresnel::testing::DataPath("volume/bluntfin_tets.vtk");
  if (path.empty()) {
    WARN("shared data missing: skipping");
    return std::nullopt;
  }
  auto m = ReadVtk(path);
  REQUIRE(m.ok());
  return std::move(*m);
}

inline uint64_t FreshSeed() { return std::random_device{}(); }

// The chord through every tetrahedron summed, for absorption-only references on small meshes.
inline double ChordMesh(const TetMesh& m, const D3& o, const D3& d) {
  double sum = 0;
  for (int64_t t = 0; t < m.num_tets(); ++t) {
    if (IsDegenerateTet(m, t)) continue;  // the renderers skip them (and their chord is 0)
    D3 p[4];
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 3; ++k) p[i][k] = m.points_xyz[3 * int64_t{m.tets[4 * t + i]} + k];
    sum += ChordTet(p, o, d);
  }
  return sum;
}

// `n` disjoint boxes [-0.5, 0.5]² × [z, z + 0.6] (2×2×2 cubes of 6 tetrahedra each), one behind
// the other along z with gaps of 0.4: a ray along z enters the mesh n times, more than the walk
// keeps per scan of its tile's faces (math::kWalkEntryBatch = 8).
inline TetMesh StackedBoxes(int n) {
  TetMesh out;
  for (int i = 0; i < n; ++i) {
    const float z = -0.5f * n + static_cast<float>(i);
    auto m = GenerateGridMesh({2, 2, 2, {-0.5f, -0.5f, z}, {0.5f, 0.5f, z + 0.6f}});
    const int32_t base = static_cast<int32_t>(out.num_points());
    out.points_xyz.insert(out.points_xyz.end(), m->points_xyz.begin(), m->points_xyz.end());
    out.scalars.insert(out.scalars.end(), m->scalars.begin(), m->scalars.end());
    for (int32_t v : m->tets) out.tets.push_back(base + v);
  }
  return out;
}

}  // namespace fresnel::volume::testing
