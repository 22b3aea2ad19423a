// CPU renderer tests: absorption against independent float64 chords (a tetrahedron, a cube of
// tetrahedra, a non-convex mesh with a hole and a notch), invariance to tetrahedron and vertex
// order, the face-to-face walk against brute force, hash blocks and partial frames, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fresnel/volume/mesh.h"
#include "fresnel/volume/render.h"
#include "support/test_support.h"
#include "tbb/parallel_for.h"
#include "volume/scan_math.h"
#include "volume/volume_internal.h"
#include "volume/volume_math.h"
#include "volume/walk_math.h"
#include "volume_test_util.h"

namespace fresnel::volume {
namespace {

using testing::ChordBox;
using testing::ChordTet;
using testing::D3;
using testing::FreshSeed;
using testing::MaxAbsDiff;
using testing::OpticalDepth;
using testing::RandomCamera;
using testing::RayOf;

std::unique_ptr<DeviceMesh> CpuMesh(const TetMesh& m) {
  auto dm = DeviceMesh::Create(Device::Cpu(), m);
  REQUIRE(dm.ok());
  return std::move(*dm);
}

HostArray RenderImage(const DeviceMesh& dm, const TransferFunction& tf, const Camera& cam,
                      RenderOptions opt = {}, const PartialFrameCallback& cb = nullptr) {
  auto r = Render(Device::Cpu(), dm, tf, cam, opt, cb);
  REQUIRE(r.ok());
  return std::move(r->image);
}

// Checks −ln(1 − α) = τ · chord at every pixel; returns the number of pixels the mesh covers.
template <class ChordFn>
int CheckAbsorption(const HostArray& image, const Camera& cam, double tau, ChordFn chord) {
  int covered = 0;
  double worst = 0;
  for (int y = 0; y < cam.height; ++y)
    for (int x = 0; x < cam.width; ++x) {
      D3 o, d;
      RayOf(cam, x, y, &o, &d);
      const double want = tau * chord(o, d);
      const double got = OpticalDepth(image, x, y);
      // Where a ray grazes a face the chord changes fast with the ray, and the renderer's
      // float32 ray (~1e-7 off) may see a different one: allow what a shift of 1e-3 pixel
      // (~100 times the float error) changes.
      double sensitivity = 0;
      for (auto [dx, dy] : {std::pair<double, double>{1e-3, 0}, {-1e-3, 0}, {0, 1e-3}, {0, -1e-3}}) {
        D3 o2, d2;
        testing::RayAt(cam, x + dx, y + dy, &o2, &d2);
        sensitivity = std::max(sensitivity, std::fabs(tau * chord(o2, d2) - want));
      }
      // A ray through an internal edge of a cube of tetrahedra can lose a sliver of segment to
      // float32 rounding (seen: 0.18610 for 0.18642, about 1 run in 80 with random cameras), so
      // the floor is 5e-4 rather than 2e-4.
      const double tol = 5e-4 + 2e-4 * want + sensitivity;
      worst = std::max(worst, std::fabs(got - want) / tol);
      covered += want > 0;
      if (std::fabs(got - want) > tol) {
        FAIL_CHECK("pixel (" << x << ", " << y << "): optical depth " << got << ", want "
                             << want);
        return covered;
      }
    }
  INFO("worst error / tolerance " << worst);
  return covered;
}

TEST_CASE("ImageBytes: RGBA in float32 or uint8", "[volume]") {
  Camera cam;
  cam.width = 3;
  cam.height = 2;
  RenderOptions o;
  CHECK(ImageBytes(cam, o) == 3 * 2 * 4 * 4);
  o.rgba8 = true;
  CHECK(ImageBytes(cam, o) == 3 * 2 * 4);
  cam.width = cam.height = kMaxImageSide;  // no int overflow at the largest image
  CHECK(ImageBytes(cam, o) == int64_t{kMaxImageSide} * kMaxImageSide * 4);
}

TEST_CASE("absorption: one tetrahedron, every pixel", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  std::uniform_real_distribution<float> u(-1, 1);
  for (int rep = 0; rep < 4; ++rep) {
    // A regular tetrahedron with every coordinate moved by up to ±0.3: random, never thin.
    static const float kRegular[12] = {1, 1, 1, 1, -1, -1, -1, 1, -1, -1, -1, 1};
    TetMesh m;
    for (int i = 0; i < 12; ++i) m.points_xyz.push_back(0.8f * kRegular[i] + 0.3f * u(rng));
    m.tets = {0, 1, 2, 3};
    m.scalars = {u(rng), u(rng), u(rng), u(rng)};
    if (IsDegenerateTet(m, 0)) continue;
    auto dm = CpuMesh(m);
    const float tau = 0.5f + u(rng) * 0.4f;
    const TransferFunction tf = ConstantTransferFunction(tau, {0, 0, 0});
    Camera cam = RandomCamera(dm->report(), 72, 56, rng);
    if (rep % 2 == 1) cam.orthographic_height = 3.5f;
    const HostArray img = RenderImage(*dm, tf, cam);
    D3 p[4];
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 3; ++k) p[i][k] = m.points_xyz[3 * i + k];
    const int covered =
        CheckAbsorption(img, cam, tau, [&](const D3& o, const D3& d) { return ChordTet(p, o, d); });
    CHECK(covered > 300);
  }
}

TEST_CASE("FaceNeighbors pairs exactly the faces two tetrahedra share", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  auto grid = GenerateGridMesh({7, 6, 5, {-1, -1, -1}, {1, 1, 1}, GridShape::kHoleAndNotch});
  REQUIRE(grid.ok());
  std::vector<int32_t> tets = grid->tets;
  // Shuffle the tetrahedra and their vertex orders; add a face shared by three tetrahedra
  // (non-manifold: boundary for all three) and a tetrahedron on its own.
  const int64_t n = static_cast<int64_t>(tets.size() / 4);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> shuffled;
  for (int64_t t : order) {
    std::array<int32_t, 4> v = {tets[4 * t], tets[4 * t + 1], tets[4 * t + 2], tets[4 * t + 3]};
    std::shuffle(v.begin(), v.end(), rng);
    shuffled.insert(shuffled.end(), v.begin(), v.end());
  }
  const int32_t np = static_cast<int32_t>(grid->num_points());
  for (int32_t apex : {np, np + 1, np + 2}) shuffled.insert(shuffled.end(), {np + 3, np + 4, np + 5, apex});
  shuffled.insert(shuffled.end(), {np + 6, np + 7, np + 8, np + 9});
  const std::vector<int32_t> got = FaceNeighbors(shuffled);
  // Reference: faces grouped by their point triple.
  std::map<std::array<int32_t, 3>, std::vector<int64_t>> groups;
  const int64_t nt = static_cast<int64_t>(shuffled.size() / 4);
  for (int64_t f = 0; f < 4 * nt; ++f) {
    std::array<int32_t, 3> k;
    for (int i = 0; i < 3; ++i) k[i] = shuffled[4 * (f / 4) + ((f % 4 + 1 + i) & 3)];
    std::sort(k.begin(), k.end());
    groups[k].push_back(f);
  }
  REQUIRE(got.size() == static_cast<size_t>(4 * nt));
  int64_t paired = 0, three = 0;
  for (const auto& [key, faces] : groups) {
    for (int64_t f : faces) {
      const int32_t want = faces.size() == 2 ? static_cast<int32_t>((faces[0] == f ? faces[1] : faces[0]) / 4) : -1;
      if (got[f] != want) FAIL("face " << f << ": " << got[f] << ", want " << want);
    }
    paired += faces.size() == 2;
    three += faces.size() == 3;
  }
  CHECK(three == 1);
  CHECK(paired > 1000);
  CHECK(FaceNeighbors({}).empty());
}

TEST_CASE("absorption: rays entering the mesh more often than one batch of entries", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  std::uniform_real_distribution<float> u(-1, 1);
  const TetMesh m = testing::StackedBoxes(13);
  auto dm = CpuMesh(m);
  const float tau = 0.9f;
  for (int rep = 0; rep < 4; ++rep) {
    // Looking along −z from in front of the stack (slightly off axis): up to 13 entries a ray.
    Camera cam;
    cam.eye = {0.05f * u(rng), 0.05f * u(rng), 12.0f + u(rng)};
    cam.target = {0.05f * u(rng), 0.05f * u(rng), 0};
    cam.vertical_fov_deg = 8;
    cam.width = 64, cam.height = 48;
    if (rep % 2 == 1) cam.orthographic_height = 1.6f;
    INFO("orthographic " << cam.orthographic_height);
    auto r = Render(Device::Cpu(), *dm, ConstantTransferFunction(tau, {0, 0, 0}), cam);
    REQUIRE(r.ok());
    const int covered = CheckAbsorption(r->image, cam, tau, [&](const D3& o, const D3& d) {
      return testing::ChordMesh(m, o, d);
    });
    CHECK(covered > 500);
    // The centre pixel's ray crosses all 13 boxes (0.6 each).
    CHECK(OpticalDepth(r->image, 32, 24) > tau * 13 * 0.59);
  }
}

TEST_CASE("absorption: a cube of tetrahedra", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  std::vector<TetMesh> meshes;
  const std::string shared = fresnel::testing::DataPath("volume/cube_tets.vtk");
  if (!shared.empty()) {
    auto c = ReadVtk(shared);
    REQUIRE(c.ok());
    meshes.push_back(*c);
  }
  auto grid = GenerateGridMesh({4, 4, 4, {0, 0, 0}, {1, 1, 1}});
  REQUIRE(grid.ok());
  meshes.push_back(*grid);
  for (const TetMesh& m : meshes) {
    auto dm = CpuMesh(m);
    for (int rep = 0; rep < 3; ++rep) {
      const float tau = 1.3f;
      Camera cam = RandomCamera(dm->report(), 80, 80, rng);
      if (rep == 2) cam.orthographic_height = 2.0f;
      const HostArray img = RenderImage(*dm, ConstantTransferFunction(tau, {0, 0, 0}), cam);
      const int covered = CheckAbsorption(img, cam, tau, [](const D3& o, const D3& d) {
        return ChordBox({0, 0, 0}, {1, 1, 1}, o, d);
      });
      CHECK(covered > 500);
    }
  }
}

TEST_CASE("absorption: non-convex mesh with a hole and a notch", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  const int nx = 12, ny = 12, nz = 6;
  auto m = GenerateGridMesh({nx, ny, nz, {0, 0, 0}, {12, 12, 6}, GridShape::kHoleAndNotch});
  REQUIRE(m.ok());
  auto dm = CpuMesh(*m);
  // The kept cells, as GridShape::kHoleAndNotch documents them.
  std::vector<std::array<int, 3>> cells;
  for (int k = 0; k < nz; ++k)
    for (int j = 0; j < ny; ++j)
      for (int i = 0; i < nx; ++i) {
        const bool hole = i >= 4 && i < 6 && j >= 4 && j < 8;
        const bool notch = i >= 10 && j >= 4 && j < 8 && k >= 2 && k < 4;
        if (!hole && !notch) cells.push_back({i, j, k});
      }
  auto chord = [&](const D3& o, const D3& d) {
    double sum = 0;
    for (const auto& c : cells)
      sum += ChordBox({double(c[0]), double(c[1]), double(c[2])},
                      {c[0] + 1.0, c[1] + 1.0, c[2] + 1.0}, o, d);
    return sum;
  };
  const float tau = 0.15f;
  const TransferFunction tf = ConstantTransferFunction(tau, {0, 0, 0});
  std::vector<Camera> cams;
  Camera down;  // straight down z through the hole
  down.eye = {6, 6, 20};
  down.target = {6, 6, 3};
  down.orthographic_height = 14;
  down.width = down.height = 56;
  cams.push_back(down);
  Camera side;  // along y, looking into the notch from the +x side at an angle
  side.eye = {22, 6.3f, 3.1f};
  side.target = {6, 6, 3};
  side.vertical_fov_deg = 40;
  side.width = side.height = 64;
  cams.push_back(side);
  for (int i = 0; i < 2; ++i) cams.push_back(RandomCamera(dm->report(), 64, 64, rng));
  int multiple_entries = 0, holes = 0;
  for (const Camera& cam : cams) {
    const HostArray img = RenderImage(*dm, tf, cam);
    CheckAbsorption(img, cam, tau, chord);
    for (int y = 0; y < cam.height; ++y)
      for (int x = 0; x < cam.width; ++x) {
        D3 o, d;
        RayOf(cam, x, y, &o, &d);
        const double box = ChordBox({0, 0, 0}, {12, 12, 6}, o, d), c = chord(o, d);
        holes += box > 1 && c == 0;
        multiple_entries += c > 0 && c < box - 0.5;
      }
  }
  // The views do exercise the non-convex cases: rays through the hole, and rays that leave the
  // mesh and enter it again.
  CHECK(holes > 20);
  CHECK(multiple_entries > 100);
}

// Brute force with the renderer's own float32 math: every tetrahedron for every pixel, segments
// sorted by mid depth, composited front to back. Validates the walk (entries, neighbours,
// re-entry) independently of it.
// The pixels `only` (x, y pairs; all when empty) of the brute-force image; others stay zero.
HostArray BruteForce(const TetMesh& m, const TransferFunction& tf, const Camera& cam,
                     const std::vector<std::pair<int, int>>& only = {}) {
  HostArray img(DType::kFloat32, {cam.height, cam.width, 4});
  math::TfTable t{};
  t.n = static_cast<int>(tf.points.size());
  for (int i = 0; i < t.n; ++i) {
    t.x[i] = tf.points[i].scalar, t.r[i] = tf.points[i].r, t.g[i] = tf.points[i].g;
    t.b[i] = tf.points[i].b, t.tau[i] = tf.points[i].extinction_per_unit;
  }
  t.background = {tf.background[0], tf.background[1], tf.background[2], tf.background[3]};
  // The camera frame as render.cc builds it (double, rounded to float).
  const D3 eye = {cam.eye[0], cam.eye[1], cam.eye[2]};
  const D3 f = testing::Normalize(testing::Sub({cam.target[0], cam.target[1], cam.target[2]}, eye));
  const D3 r = testing::Normalize(testing::Cross(f, {cam.up[0], cam.up[1], cam.up[2]}));
  const D3 up = testing::Cross(r, f);
  math::CameraFrame c{};
  c.eye = {cam.eye[0], cam.eye[1], cam.eye[2]};
  c.forward = {float(f[0]), float(f[1]), float(f[2])};
  c.right = {float(r[0]), float(r[1]), float(r[2])};
  c.up = {float(up[0]), float(up[1]), float(up[2])};
  c.orthographic = cam.orthographic_height > 0;
  const double sy = c.orthographic ? 0.5 * cam.orthographic_height
                                   : std::tan(0.5 * cam.vertical_fov_deg * M_PI / 180.0);
  c.sy = float(sy);
  c.sx = float(sy * cam.width / cam.height);
  c.width = cam.width;
  c.height = cam.height;
  std::vector<std::pair<int, int>> pixels = only;
  if (pixels.empty()) {
    for (int y = 0; y < cam.height; ++y)
      for (int x = 0; x < cam.width; ++x) pixels.push_back({x, y});
  }
  std::vector<uint8_t> degenerate(m.num_tets());
  for (int64_t tt = 0; tt < m.num_tets(); ++tt) degenerate[tt] = IsDegenerateTet(m, tt);
  tbb::parallel_for(size_t{0}, pixels.size(), [&](size_t k) {
      const int x = pixels[k].first, y = pixels[k].second;
      math::V3 o, d;
      math::PixelRay(c, x, y, &o, &d);
      std::vector<std::pair<float, math::Rgba>> segs;
      for (int64_t tt = 0; tt < m.num_tets(); ++tt) {
        if (degenerate[tt]) continue;
        math::V3 p[4];
        float s[4];
        for (int i = 0; i < 4; ++i) {
          const int v = m.tets[4 * tt + i];
          p[i] = {m.points_xyz[3 * v], m.points_xyz[3 * v + 1], m.points_xyz[3 * v + 2]};
          s[i] = m.scalars[v];
        }
        math::TetHit h;
        if (math::IntersectRayTet(p, s, o, d, &h))
          segs.push_back({0.5f * (h.t_in + h.t_out),
                          math::IntegrateSegment(t, h.s_in, h.s_out, h.t_out - h.t_in)});
      }
      std::stable_sort(segs.begin(), segs.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      math::Rgba acc = {0, 0, 0, 0};
      for (const auto& sg : segs) acc = math::Over(acc, sg.second);
      acc = math::OverBackground(acc, t.background);
      float* out = &img.data<float>()[4 * (int64_t{y} * cam.width + x)];
      out[0] = acc.r, out[1] = acc.g, out[2] = acc.b, out[3] = acc.a;
  });
  return img;
}

TEST_CASE("the face-to-face walk equals brute force (emission, non-convex)", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  auto m = GenerateGridMesh({8, 8, 7, {-1, -1, -0.8f}, {1, 1, 0.8f}, GridShape::kHoleAndNotch});
  REQUIRE(m.ok());
  auto dm = CpuMesh(*m);
  const TransferFunction tf = DefaultTransferFunction(0, 1, 4.0f);
  for (int rep = 0; rep < 2; ++rep) {
    const Camera cam = RandomCamera(dm->report(), 40, 36, rng);
    const HostArray walk = RenderImage(*dm, tf, cam);
    const HostArray brute = BruteForce(*m, tf, cam);
    CHECK(MaxAbsDiff(walk, brute) < 2e-5);
    CHECK(ImagePsnrDb(walk, brute) > 80);
  }
}

// Blunt Fin's collapsed edge leaves boundary slivers whose intersection comes out empty by
// rounding; rays entering there found no entry and the CPU drew background where the mesh is
// (seen first as GPU-vs-CPU differences of 0.6 at a few pixels). The pixels around two such
// rays of this view must now match brute force.
TEST_CASE("the walk enters Blunt Fin through grazed boundary slivers", "[volume]") {
  std::optional<TetMesh> m = testing::LoadBluntFin();
  if (!m) return;
  auto dm = CpuMesh(*m);
  const MeshReport& r = dm->report();
  const Camera cam = OrbitCamera(r.bounds_min, r.bounds_max, 146.4f, 5.0f, 384, 256, 35);
  const TransferFunction tf = DefaultTransferFunction(r.scalar_min, r.scalar_max, 1.5f);
  std::vector<std::pair<int, int>> pixels;
  for (auto [cx, cy] : {std::pair<int, int>{183, 129}, {213, 150}})
    for (int dy = -2; dy <= 2; ++dy)
      for (int dx = -2; dx <= 2; ++dx) pixels.push_back({cx + dx, cy + dy});
  const HostArray walk = RenderImage(*dm, tf, cam);
  const HostArray brute = BruteForce(*m, tf, cam, pixels);
  double worst = 0;
  for (auto [x, y] : pixels)
    for (int c = 0; c < 4; ++c) {
      const int64_t i = 4 * (int64_t{y} * cam.width + x) + c;
      worst = std::max(worst, std::fabs(double{walk.data<float>()[i]} - brute.data<float>()[i]));
    }
  CHECK(worst < 0.02);
}

// The session-6 walk rebuilt every cell's planes from its float points at each step and lost
// boundary-layer cells where a ray runs along Blunt Fin's wall (at 512², 12,619 segments of 6.4 M
// on this view; 0.011 of colour at the worst pixel against brute force). The walk on the cached
// per-cell geometry (math::WalkTet) with joined segments must match brute force there.
TEST_CASE("the walk follows Blunt Fin's boundary layer (brute force at pixels once lost)",
          "[volume]") {
  std::optional<TetMesh> m = testing::LoadBluntFin();
  if (!m) return;
  auto dm = CpuMesh(*m);
  const MeshReport& r = dm->report();
  const float extent = std::max({r.bounds_max[0] - r.bounds_min[0],
                                 r.bounds_max[1] - r.bounds_min[1],
                                 r.bounds_max[2] - r.bounds_min[2]});
  const TransferFunction tf = DefaultTransferFunction(r.scalar_min, r.scalar_max, 8.0f / extent);
  struct View {
    float azimuth, elevation;
    int x, y;
  };
  for (const View& v : {View{146.4f, 5.0f, 128, 207}, View{200.0f, -10.0f, 316, 253}}) {
    const Camera cam = OrbitCamera(r.bounds_min, r.bounds_max, v.azimuth, v.elevation, 512, 512);
    std::vector<std::pair<int, int>> pixels;
    for (int dy = -2; dy <= 2; ++dy)
      for (int dx = -2; dx <= 2; ++dx) pixels.push_back({v.x + dx, v.y + dy});
    const HostArray walk = RenderImage(*dm, tf, cam);
    const HostArray brute = BruteForce(*m, tf, cam, pixels);
    double worst = 0;
    for (auto [x, y] : pixels)
      for (int c = 0; c < 4; ++c) {
        const int64_t i = 4 * (int64_t{y} * cam.width + x) + c;
        worst = std::max(worst, std::fabs(double{walk.data<float>()[i]} - brute.data<float>()[i]));
      }
    INFO("view " << v.azimuth << ", " << v.elevation << ": worst |walk - brute| " << worst);
    CHECK(worst < 1e-3);
  }
}

// math::TfUpperFrom (the segment integral's lookup from the last segment's interval) gives
// TfUpper's index from any hint, for scalars inside, outside, on the control points and NaN.
TEST_CASE("TfUpperFrom equals TfUpper from every hint", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  std::uniform_int_distribution<int> count(1, math::kTfMax);
  std::uniform_real_distribution<float> step(1e-3f, 2.0f), u(-0.5f, 1.5f);
  for (int rep = 0; rep < 200; ++rep) {
    math::TfTable tf{};
    tf.n = count(rng);
    float x = u(rng) - 3.0f;
    for (int i = 0; i < tf.n; ++i) tf.x[i] = x += step(rng);
    std::vector<float> probes = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < tf.n; ++i)
      probes.insert(probes.end(), {tf.x[i], std::nextafter(tf.x[i], -INFINITY),
                                   std::nextafter(tf.x[i], INFINITY)});
    for (int k = 0; k < 32; ++k) probes.push_back(tf.x[0] + (x - tf.x[0]) * u(rng));
    for (float s : probes) {
      const int want = math::TfUpper(tf, s);
      for (int hint = 0; hint <= tf.n; ++hint) {
        INFO("n " << tf.n << ", s " << s << ", hint " << hint);
        REQUIRE(math::TfUpperFrom(tf, s, hint) == want);
      }
    }
  }
}

// math::WalkTet (BuildWalkTets): the barycentric gradients and scalar gradient of each cell
// reproduce its corners, and its intersections agree with IntersectRayTet's from the points.
TEST_CASE("walk geometry: barycentric and scalar gradients of random cells", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  std::uniform_real_distribution<float> u(-1, 1), off(-20, 20), sc(0, 5);
  RenderMesh rm;
  const int n = 2000;
  for (int t = 0; t < n; ++t) {
    const float ox = off(rng), oy = off(rng), oz = off(rng);
    const float size = std::pow(10.0f, -3.0f * (u(rng) + 1) / 2);  // 1e-3 .. 1
    for (int i = 0; i < 4; ++i) {
      rm.points_xyz.insert(rm.points_xyz.end(),
                           {ox + size * u(rng), oy + size * u(rng), oz + size * u(rng)});
      rm.scalars.push_back(sc(rng));
      rm.tets.push_back(4 * t + i);
    }
  }
  const std::vector<float> geom = BuildWalkTets(rm);
  REQUIRE(geom.size() == size_t{math::kWalkTetFloats} * n);
  int checked = 0, rays = 0;
  for (int t = 0; t < n; ++t) {
    math::V3 p[4];
    float s[4];
    for (int i = 0; i < 4; ++i) {
      const float* q = &rm.points_xyz[3 * (4 * t + i)];
      p[i] = {q[0], q[1], q[2]};
      s[i] = rm.scalars[4 * t + i];
    }
    math::TetPlanes tp;
    if (!math::PrepareTet(p, s, &tp)) continue;
    // Skip slivers: their planes are ill-conditioned in either formulation.
    const double vol = std::fabs(math::Dot(math::Cross(p[1] - p[0], p[2] - p[0]), p[3] - p[0]));
    double longest = 0;
    for (int i = 0; i < 4; ++i)
      for (int j = i + 1; j < 4; ++j) {
        const math::V3 e = p[j] - p[i];
        longest = std::max(longest, std::sqrt(double{math::Dot(e, e)}));
      }
    if (vol < 1e-2 * longest * longest * longest) continue;
    ++checked;
    const math::WalkTet w = math::UnpackWalkTet(&geom[math::kWalkTetFloats * t]);
    for (int j = 0; j < 4; ++j) {
      const math::V3 r = p[j] - w.p0;
      INFO("cell " << t << ", corner " << j);
      for (int i = 0; i < 4; ++i) {
        const double lambda = math::Dot(w.m[i], r) + (i == 0 ? 1.0 : 0.0);
        CHECK(std::fabs(lambda - (i == j ? 1.0 : 0.0)) < 1e-4);
      }
      CHECK(std::fabs(w.s0 + math::Dot(w.g, r) - s[j]) < 1e-4 * 5);
      CHECK(std::sqrt(math::Dot(r, r)) <= w.reach);
    }
    // A ray from far away through a random interior point.
    const math::V3 inside = 0.25f * (p[0] + p[1] + p[2] + p[3]) +
                            (0.1f * static_cast<float>(longest)) * math::V3{u(rng), u(rng), u(rng)};
    math::V3 d = {u(rng), u(rng), u(rng)};
    d = (1.0f / std::sqrt(math::Dot(d, d))) * d;
    const math::V3 o = inside - 30.0f * d;
    math::TetHit a, b;
    const bool ha = math::IntersectPrepared(tp, o, d, &a);
    const bool hb = math::IntersectWalkTet(w, o, d, &b);
    if (!ha || !hb || a.t_out - a.t_in < 1e-3 * longest) continue;
    ++rays;
    INFO("cell " << t << ": [" << a.t_in << ", " << a.t_out << "] vs [" << b.t_in << ", "
                 << b.t_out << "]");
    // The same entry and exit faces, or (a ray near an edge) faces that both pass within
    // rounding of the point: its barycentric coordinate for either is ~0 there (to what a
    // shift of a few float32 steps 30 away changes: 1e-5 · 31 · |m_f|).
    const math::WalkRayTet q = math::RayAgainst(w, o, d);
    auto near_face = [&](int f, float t) {
      const double mf = std::sqrt(double{math::Dot(w.m[f], w.m[f])});
      return std::fabs(q.a[f] + t * q.b[f]) < 1e-5 * 31 * mf + 1e-4;
    };
    if (a.face_in != b.face_in && a.face_in >= 0) CHECK(near_face(a.face_in, b.t_in));
    if (a.face_out != b.face_out && a.face_out >= 0) CHECK(near_face(a.face_out, b.t_out));
    CHECK(std::fabs(a.t_in - b.t_in) < 1e-4 * 30);
    CHECK(std::fabs(a.t_out - b.t_out) < 1e-4 * 30);
    // s(t) cancels terms of |g|·30 (the ray's origin is 30 away), in either formulation: the
    // scalars agree to what a shift of a few float32 steps at that distance changes.
    const double g = std::sqrt(double{math::Dot(w.g, w.g)});
    const double tol_s = 1e-5 * 31 * g + 1e-5;
    CHECK(std::fabs(a.s_in - b.s_in) < tol_s);
    CHECK(std::fabs(a.s_out - b.s_out) < tol_s);
  }
  CHECK(checked > n / 2);
  CHECK(rays > n / 4);
}

// RenderInto: Render's image, bit for bit, in caller memory; a null or short buffer is refused.
TEST_CASE("RenderInto writes Render's image into caller memory", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  auto m = GenerateGridMesh({8, 8, 7, {-1, -1, -0.8f}, {1, 1, 0.8f}, GridShape::kHoleAndNotch});
  REQUIRE(m.ok());
  auto dm = CpuMesh(*m);
  const TransferFunction tf = DefaultTransferFunction(0, 1, 5.0f);
  const Camera cam = RandomCamera(dm->report(), 48, 40, rng);
  for (bool rgba8 : {false, true}) {
    RenderOptions opt;
    opt.rgba8 = rgba8;
    auto whole = Render(Device::Cpu(), *dm, tf, cam, opt);
    REQUIRE(whole.ok());
    const int64_t bytes = ImageBytes(cam, opt);
    REQUIRE(static_cast<int64_t>(whole->image.nbytes()) == bytes);
    std::vector<unsigned char> out(bytes + 16, 0xA5);  // poisoned, with a tail that must stay
    auto st = RenderInto(Device::Cpu(), *dm, tf, cam, opt, out.data(), bytes);
    REQUIRE(st.ok());
    CHECK(st->records == whole->stats.records);
    CHECK(std::equal(out.begin(), out.begin() + bytes,
                     static_cast<const unsigned char*>(whole->image.raw())));
    CHECK(std::all_of(out.begin() + bytes, out.end(), [](unsigned char c) { return c == 0xA5; }));
    auto short_buffer = RenderInto(Device::Cpu(), *dm, tf, cam, opt, out.data(), bytes - 1);
    CHECK(short_buffer.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(short_buffer.status().message()), Catch::Contains("image"));
    CHECK(RenderInto(Device::Cpu(), *dm, tf, cam, opt, nullptr, bytes).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("the image does not depend on tetrahedron or vertex order", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  auto m = GenerateGridMesh({7, 6, 5, {-1, -0.8f, -0.7f}, {1, 0.8f, 0.7f}});
  REQUIRE(m.ok());
  TetMesh shuffled = *m;
  std::vector<int> order(m->num_tets());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t t = 0; t < order.size(); ++t) {
    int v[4];
    std::copy_n(&m->tets[4 * order[t]], 4, v);
    std::shuffle(v, v + 4, rng);  // either orientation
    std::copy_n(v, 4, &shuffled.tets[4 * t]);
  }
  auto a = CpuMesh(*m);
  auto b = CpuMesh(shuffled);
  const TransferFunction tf = DefaultTransferFunction(0, 1, 6.0f);
  const Camera cam = RandomCamera(a->report(), 64, 48, rng);
  const HostArray ia = RenderImage(*a, tf, cam), ib = RenderImage(*b, tf, cam);
  // Vertex order changes the rounding of each intersection (faces are built from other corners),
  // so the images agree to float rounding (seen up to 3e-5), not bit for bit.
  CHECK(MaxAbsDiff(ia, ib) < 1e-4);
  CHECK(ImagePsnrDb(ia, ib) > 90);
  double alpha_sum = 0;
  for (int64_t i = 3; i < ia.size(); i += 4) alpha_sum += ia.data<float>()[i];
  CHECK(alpha_sum > 100);  // the view is not empty
}

TEST_CASE("CPU partial frames: 16 and 64 hash blocks, same image", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  auto m = GenerateGridMesh({6, 6, 6});
  REQUIRE(m.ok());
  auto dm = CpuMesh(*m);
  const TransferFunction tf = DefaultTransferFunction(0, 1, 5.0f);
  const Camera cam = RandomCamera(dm->report(), 45, 38, rng);
  const HostArray plain = RenderImage(*dm, tf, cam);
  for (int bits : {2, 3}) {
    RenderOptions opt;
    opt.hash_block_bits = bits;
    std::vector<PartialFrame> frames;
    std::vector<std::vector<float>> pixels;
    int64_t covered = 0;
    const HostArray img = RenderImage(*dm, tf, cam, opt, [&](const PartialFrame& f) {
      frames.push_back(f);
      pixels.emplace_back(f.rgba, f.rgba + 4 * int64_t{f.width} * f.height);
      covered += int64_t{f.width} * f.height;
      return absl::OkStatus();
    });
    CHECK(MaxAbsDiff(img, plain) == 0);
    REQUIRE(frames.size() == size_t{1} << (2 * bits));
    CHECK(covered == int64_t{cam.width} * cam.height);
    for (size_t k = 0; k < frames.size(); ++k) {
      const PartialFrame& f = frames[k];
      CHECK(f.block == static_cast<int>(k));
      CHECK(f.stride == 1 << bits);
      for (int j = 0; j < f.height; ++j)
        for (int i = 0; i < f.width; ++i)
          for (int c = 0; c < 4; ++c)
            REQUIRE(pixels[k][4 * (j * f.width + i) + c] ==
                    plain.data<float>()[4 * ((f.y0 + j * f.stride) * cam.width + f.x0 +
                                             i * f.stride) + c]);
    }
  }
  // A callback error stops the render and comes back.
  RenderOptions opt;
  int calls = 0;
  auto r = Render(Device::Cpu(), *dm, tf, cam, opt, [&](const PartialFrame&) {
    return ++calls == 3 ? absl::CancelledError("client left") : absl::OkStatus();
  });
  CHECK(r.status().code() == absl::StatusCode::kCancelled);
  CHECK(calls == 3);
}

TEST_CASE("Blunt Fin renders on the CPU", "[volume]") {
  std::optional<TetMesh> m = testing::LoadBluntFin();
  if (!m) return;
  auto dm = CpuMesh(*m);
  CHECK(dm->report().degenerate_tets >= 77);
  const auto& r = dm->report();
  const TransferFunction tf = DefaultTransferFunction(r.scalar_min, r.scalar_max, 2.0f);
  const Camera cam = OrbitCamera(r.bounds_min, r.bounds_max, 30, 25, 96, 64);
  auto res = Render(Device::Cpu(), *dm, tf, cam);
  REQUIRE(res.ok());
  CHECK(res->stats.records > 10000);
  int lit = 0;
  for (int64_t i = 0; i < res->image.size(); i += 4) {
    const float* p = &res->image.data<float>()[i];
    for (int c = 0; c < 4; ++c) REQUIRE((p[c] >= 0 && p[c] <= 1.0001f));
    lit += p[0] + p[1] + p[2] > 0.2f;
  }
  CHECK(lit > 500);
  auto rgba8 = ToRgba8(res->image);
  REQUIRE(rgba8.ok());
  CHECK(rgba8->dtype() == DType::kUint8);
  CHECK(rgba8->shape() == res->image.shape());
}

TEST_CASE("Render refuses bad input by name", "[volume]") {
  auto m = GenerateGridMesh({2, 2, 2});
  REQUIRE(m.ok());
  auto dm = CpuMesh(*m);
  const Camera cam = OrbitCamera(dm->report().bounds_min, dm->report().bounds_max, 0, 0, 8, 8);
  auto code_msg = [&](const TransferFunction& tf, const Camera& c, RenderOptions o = {}) {
    auto r = Render(Device::Cpu(), *dm, tf, c, o);
    return std::make_pair(r.status().code(), std::string(r.status().message()));
  };
  TransferFunction tf = ConstantTransferFunction(1, {1, 1, 1});
  CHECK(code_msg(tf, cam).first == absl::StatusCode::kOk);
  TransferFunction bad = tf;
  bad.points.clear();
  CHECK_THAT(code_msg(bad, cam).second, Catch::Contains("transfer_function.points"));
  bad = DefaultTransferFunction(0, 1, 1);
  bad.points[2].scalar = bad.points[1].scalar;
  CHECK_THAT(code_msg(bad, cam).second, Catch::Contains("strictly increasing"));
  bad = tf;
  bad.points[0].extinction_per_unit = -1;
  CHECK_THAT(code_msg(bad, cam).second, Catch::Contains("extinction_per_unit"));
  bad = tf;
  bad.points[0].g = 1.5f;
  CHECK_THAT(code_msg(bad, cam).second, Catch::Contains("colour"));
  Camera c = cam;
  c.target = c.eye;
  CHECK_THAT(code_msg(tf, c).second, Catch::Contains("camera.eye"));
  c = cam;
  c.up = {c.target[0] - c.eye[0], c.target[1] - c.eye[1], c.target[2] - c.eye[2]};
  CHECK_THAT(code_msg(tf, c).second, Catch::Contains("camera.up"));
  c = cam;
  c.width = 0;
  CHECK_THAT(code_msg(tf, c).second, Catch::Contains("camera.width"));
  c = cam;
  c.vertical_fov_deg = 180;
  CHECK_THAT(code_msg(tf, c).second, Catch::Contains("vertical_fov_deg"));
  RenderOptions o;
  o.hash_block_bits = 4;
  CHECK_THAT(code_msg(tf, cam, o).second, Catch::Contains("hash_block_bits"));
  // A CPU mesh on a CUDA device.
  auto r = Render(Device::Cuda(0, reinterpret_cast<void*>(1)), *dm, tf, cam);
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  // Bad meshes are refused at DeviceMesh::Create.
  TetMesh broken = *m;
  broken.tets[0] = 1000;
  CHECK(DeviceMesh::Create(Device::Cpu(), broken).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

// The CUDA warp-list scan (ScanConversion::kWarpList) runs the exact ray test only on the pixels
// math::SpanCandidates gives; every pixel the exact test accepts must be among them.
TEST_CASE("Scan spans hold every pixel the exact ray test accepts", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  std::uniform_real_distribution<double> u11(-1, 1), u01(0, 1);
  for (int ortho = 0; ortho < 2; ++ortho) {
    // A random orthonormal camera frame (the renderer's frames are orthonormal).
    auto norm = [](std::array<double, 3> v) {
      const double n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      return std::array<double, 3>{v[0] / n, v[1] / n, v[2] / n};
    };
    const std::array<double, 3> f = norm({u11(rng), u11(rng), u11(rng)});
    std::array<double, 3> r = {u11(rng), u11(rng), u11(rng)};
    const double rf = r[0] * f[0] + r[1] * f[1] + r[2] * f[2];
    r = norm({r[0] - rf * f[0], r[1] - rf * f[1], r[2] - rf * f[2]});
    const std::array<double, 3> up = {r[1] * f[2] - r[2] * f[1], r[2] * f[0] - r[0] * f[2],
                                      r[0] * f[1] - r[1] * f[0]};
    math::CameraFrame cam{};
    cam.eye = {0.3f, -0.2f, 0.1f};
    cam.forward = {float(f[0]), float(f[1]), float(f[2])};
    cam.right = {float(r[0]), float(r[1]), float(r[2])};
    cam.up = {float(up[0]), float(up[1]), float(up[2])};
    cam.width = 96;
    cam.height = 80;
    cam.orthographic = ortho;
    cam.sy = ortho ? 1.5f : 0.4f;
    cam.sx = cam.sy * cam.width / cam.height;
    int64_t tested = 0, hits = 0, candidates = 0, box_pixels = 0, lost = 0;
    for (int n = 0; n < 20000; ++n) {
      const double z = 2 + 4 * u01(rng), su = u11(rng), sv = u11(rng);
      const double px_size = 2.0 * cam.sy * (ortho ? 1 : z) / cam.height;  // mesh units per pixel
      const double size = px_size * (0.5 + 5.5 * u01(rng));
      math::V3 p[4];
      float s[4] = {0, 1, 2, 3};
      for (int i = 0; i < 4; ++i) {
        math::V3 c = cam.eye + float(z) * cam.forward;
        c = c + float(su * cam.sx * (ortho ? 1 : z)) * cam.right +
            float(sv * cam.sy * (ortho ? 1 : z)) * cam.up;
        p[i] = {c.x + float(size * u11(rng)), c.y + float(size * u11(rng)),
                c.z + float(size * u11(rng))};
      }
      // Proper tetrahedra only: slivers may pass the exact test by rounding outside the hull.
      const math::V3 e1 = p[1] - p[0], e2 = p[2] - p[0], e3 = p[3] - p[0];
      const double vol = std::fabs(math::Dot(math::Cross(e1, e2), e3)) / 6;
      double longest = 0;
      for (int i = 0; i < 4; ++i)
        for (int j = i + 1; j < 4; ++j) {
          const math::V3 d = p[j] - p[i];
          longest = std::max(longest, std::sqrt(double{math::Dot(d, d)}));
        }
      if (vol < 1e-3 * longest * longest * longest) continue;
      float sx[4], sy[4];
      bool projects = true;
      for (int i = 0; i < 4; ++i) projects = projects && math::ProjectPoint(cam, p[i], &sx[i], &sy[i]);
      if (!projects) continue;
      // The box of BoxKernel (render_cuda.cu).
      const float x0 = *std::min_element(sx, sx + 4), x1 = *std::max_element(sx, sx + 4);
      const float y0 = *std::min_element(sy, sy + 4), y1 = *std::max_element(sy, sy + 4);
      const int bx0 = int(std::max(std::ceil(x0 - 0.01f), 0.0f));
      const int bx1 = int(std::min(std::floor(x1 + 0.01f), cam.width - 1.0f));
      const int by0 = int(std::max(std::ceil(y0 - 0.01f), 0.0f));
      const int by1 = int(std::min(std::floor(y1 + 0.01f), cam.height - 1.0f));
      if (bx0 > bx1 || by0 > by1 || (bx1 - bx0 + 1) * (by1 - by0 + 1) > 64) continue;
      ++tested;
      const uint64_t cand = math::SpanCandidates(sx, sy, bx0, bx1, by0, by1, 0.05f);
      math::TetPlanes tp;
      REQUIRE(math::PrepareTet(p, s, &tp));
      int k = 0;
      for (int y = by0; y <= by1; ++y)
        for (int x = bx0; x <= bx1; ++x, ++k) {
          math::V3 o, d;
          math::PixelRay(cam, x, y, &o, &d);
          math::TetHit hit;
          const bool in = (cand >> k) & 1;
          candidates += in;
          ++box_pixels;
          if (math::IntersectPrepared(tp, o, d, &hit)) {
            ++hits;
            lost += !in;
          }
        }
    }
    INFO("orthographic " << ortho << ": " << tested << " tetrahedra, " << hits << " hits, "
                         << candidates << " candidates of " << box_pixels << " box pixels");
    CHECK(tested > 5000);
    CHECK(hits > 10000);
    CHECK(lost == 0);
    // The spans do filter: here ~1.1 candidates per hit, against ~2.3 box pixels per hit.
    CHECK(candidates < box_pixels * 3 / 5);
    CHECK(candidates >= hits);
  }
}

}  // namespace
}  // namespace fresnel::volume
