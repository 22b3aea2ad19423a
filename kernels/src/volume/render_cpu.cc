// CPU backend and test oracle: per-pixel ray casting with face-to-face traversal (TBB).
//
// Entry: the boundary faces (faces without a neighbour) are binned into 16×16-pixel screen tiles
// by the box of their projected vertices (1-pixel margin, math::FaceTileBox); each pixel's ray
// then runs math::WalkRay (walk_math.h: entries through its tile's faces in order of distance,
// face-to-face steps through the neighbours, resumption beyond a hole or concavity, the
// neighbourhood search at ambiguous exits), the same code the CUDA ray walk runs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "tbb/blocked_range2d.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"
#include "tbb/parallel_reduce.h"
#include "volume/volume_internal.h"
#include "volume/volume_math.h"
#include "volume/walk_math.h"

namespace fresnel::volume {
namespace {

using math::Rgba;
using math::V3;

// A face (4·tet + face) with the two larger of its sorted point indices; it sits in the bucket
// of the smallest.
struct FaceRest {
  int32_t b, c;
  int64_t id;
  bool operator<(const FaceRest& o) const {
    return b != o.b ? b < o.b : c != o.c ? c < o.c : id < o.id;
  }
};

// The CPU's view of the mesh for math::WalkRay; `faces` are the ray's tile's.
struct CpuView {
  const float* walk_tets;
  const int32_t* neighbors;
  const int64_t* faces;
  const math::FaceBox* boxes;
  math::WalkTet Geom(int32_t t) const {
    return math::UnpackWalkTet(&walk_tets[math::kWalkTetFloats * int64_t{t}]);
  }
  void Neighbors(int32_t t, int32_t nb[4]) const {
    for (int f = 0; f < 4; ++f) nb[f] = neighbors[4 * int64_t{t} + f];
  }
  int32_t Neighbor(int32_t t, int f) const { return neighbors[4 * int64_t{t} + f]; }
  int64_t TileFace(int64_t i) const { return faces[i]; }
  math::FaceBox TileBox(int64_t i) const { return boxes[i]; }
};

constexpr int kTile = math::kWalkTile;

}  // namespace

// Faces bucketed by their smallest point index (a counting sort: histogram, prefix, scatter),
// then each bucket sorted by the other two: equal triples are neighbours. Linear but for the
// buckets' sorts (~24 faces each in a grid), 16 B per face; a full sort of 24-byte face keys
// (what this replaced) took 5-6 s of the 35 M-tetrahedron grid's upload on 16 cores.
std::vector<int32_t> FaceNeighbors(const std::vector<int32_t>& tets) {
  const int64_t nt = static_cast<int64_t>(tets.size() / 4);
  const int64_t nf = 4 * nt;
  std::vector<int32_t> neighbors(nf, -1);
  if (nt == 0) return neighbors;
  const int32_t max_point = tbb::parallel_reduce(
      tbb::blocked_range<size_t>(0, tets.size()), int32_t{0},
      [&](const tbb::blocked_range<size_t>& r, int32_t m) {
        for (size_t i = r.begin(); i < r.end(); ++i) m = std::max(m, tets[i]);
        return m;
      },
      [](int32_t x, int32_t y) { return std::max(x, y); });
  auto sorted = [&](int64_t f, int32_t v[3]) {
    const int64_t t = f / 4, face = f % 4;
    for (int i = 0; i < 3; ++i) v[i] = tets[4 * t + ((face + 1 + i) & 3)];
    if (v[0] > v[1]) std::swap(v[0], v[1]);
    if (v[1] > v[2]) std::swap(v[1], v[2]);
    if (v[0] > v[1]) std::swap(v[0], v[1]);
  };
  const int64_t np = int64_t{max_point} + 1;
  std::vector<std::atomic<int64_t>> cursor(np + 1);
  tbb::parallel_for(int64_t{0}, np + 1, [&](int64_t i) { cursor[i].store(0, std::memory_order_relaxed); });
  tbb::parallel_for(int64_t{0}, nf, [&](int64_t f) {
    int32_t v[3];
    sorted(f, v);
    cursor[v[0] + 1].fetch_add(1, std::memory_order_relaxed);
  });
  std::vector<int64_t> start(np + 1, 0);
  for (int64_t i = 1; i <= np; ++i) {
    start[i] = start[i - 1] + cursor[i].load(std::memory_order_relaxed);
    cursor[i - 1].store(start[i - 1], std::memory_order_relaxed);
  }
  std::vector<FaceRest> rest(nf);
  tbb::parallel_for(int64_t{0}, nf, [&](int64_t f) {
    int32_t v[3];
    sorted(f, v);
    rest[cursor[v[0]].fetch_add(1, std::memory_order_relaxed)] = {v[1], v[2], f};
  });
  tbb::parallel_for(int64_t{0}, np, [&](int64_t a) {
    FaceRest* first = rest.data() + start[a];
    FaceRest* last = rest.data() + start[a + 1];
    std::sort(first, last);
    for (FaceRest* i = first; i < last;) {
      FaceRest* j = i + 1;
      while (j < last && j->b == i->b && j->c == i->c) ++j;
      if (j - i == 2) {
        neighbors[i[0].id] = static_cast<int32_t>(i[1].id / 4);
        neighbors[i[1].id] = static_cast<int32_t>(i[0].id / 4);
      }
      // A face of one tetrahedron (or, in a non-manifold mesh, of three or more) is boundary.
      i = j;
    }
  });
  return neighbors;
}

std::vector<float> BuildWalkTets(const RenderMesh& mesh) {
  const int64_t nt = mesh.num_tets();
  std::vector<float> out(math::kWalkTetFloats * nt);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, nt, 4096),
                    [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t t = r.begin(); t < r.end(); ++t) {
      double p[4][3], s[4];
      for (int i = 0; i < 4; ++i) {
        const int32_t v = mesh.tets[4 * t + i];
        for (int k = 0; k < 3; ++k) p[i][k] = mesh.points_xyz[3 * int64_t{v} + k];
        s[i] = mesh.scalars[v];
      }
      // m_i = n_i / (n_i·(p_i − p_j)): the gradient of barycentric coordinate i.
      double m[4][3], g[3] = {0, 0, 0}, reach2 = 0;
      for (int i = 0; i < 4; ++i) {
        const double* pj = p[(i + 1) & 3];
        const double* pk = p[(i + 2) & 3];
        const double* pl = p[(i + 3) & 3];
        const double u[3] = {pk[0] - pj[0], pk[1] - pj[1], pk[2] - pj[2]};
        const double w[3] = {pl[0] - pj[0], pl[1] - pj[1], pl[2] - pj[2]};
        const double n[3] = {u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2],
                             u[0] * w[1] - u[1] * w[0]};
        const double den = n[0] * (p[i][0] - pj[0]) + n[1] * (p[i][1] - pj[1]) +
                           n[2] * (p[i][2] - pj[2]);
        for (int k = 0; k < 3; ++k) m[i][k] = den != 0 ? n[k] / den : 0.0;
        if (i > 0) {
          for (int k = 0; k < 3; ++k) g[k] += (s[i] - s[0]) * m[i][k];
          const double e[3] = {p[i][0] - p[0][0], p[i][1] - p[0][1], p[i][2] - p[0][2]};
          reach2 = std::max(reach2, e[0] * e[0] + e[1] * e[1] + e[2] * e[2]);
        }
      }
      float* o = &out[math::kWalkTetFloats * t];
      for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 3; ++k) o[4 * i + k] = static_cast<float>(m[i][k]);
      o[3] = static_cast<float>(s[0]);
      o[7] = static_cast<float>(p[0][0]), o[11] = static_cast<float>(p[0][1]);
      o[15] = static_cast<float>(p[0][2]);
      for (int k = 0; k < 3; ++k) o[16 + k] = static_cast<float>(g[k]);
      // Rounded up: no point of the tetrahedron lies further from p0.
      o[19] = static_cast<float>(std::sqrt(reach2) * (1 + 1e-6));
    }
  });
  return out;
}

CpuMesh BuildCpuMesh(RenderMesh mesh) {
  CpuMesh out;
  out.neighbors = FaceNeighbors(mesh.tets);
  out.walk_tets = BuildWalkTets(mesh);
  const int64_t nf = static_cast<int64_t>(out.neighbors.size());
  for (int64_t f = 0; f < nf; ++f)
    if (out.neighbors[f] < 0) out.boundary_faces.push_back(f);
  out.mesh = std::move(mesh);
  return out;
}

int64_t CpuMeshBytes(const CpuMesh& m) {
  return static_cast<int64_t>(m.mesh.points_xyz.size() * 4 + m.mesh.scalars.size() * 4 +
                              m.mesh.tets.size() * 4 + m.neighbors.size() * 4 +
                              m.boundary_faces.size() * 8 + m.walk_tets.size() * 4);
}

absl::Status RenderCpu(const CpuMesh& cm, const RenderJob& job, RenderResult* result) {
  const auto t0 = std::chrono::steady_clock::now();
  const math::CameraFrame& cam = job.camera;
  const int w = cam.width, h = cam.height;
  const RenderMesh& mesh = cm.mesh;
  const int64_t np = static_cast<int64_t>(mesh.scalars.size());
  std::vector<float> sx(np), sy(np);
  std::vector<uint8_t> projects(np);
  tbb::parallel_for(int64_t{0}, np, [&](int64_t i) {
    const float* p = &mesh.points_xyz[3 * i];
    projects[i] = math::ProjectPoint(cam, V3{p[0], p[1], p[2]}, &sx[i], &sy[i]);
  });
  // Bin the boundary faces into tiles: count, prefix, fill.
  const int tiles_x = (w + kTile - 1) / kTile, tiles_y = (h + kTile - 1) / kTile;
  const int64_t nb = static_cast<int64_t>(cm.boundary_faces.size());
  std::vector<int32_t> box(4 * nb);
  std::vector<math::FaceBox> face_box(nb);
  std::vector<int64_t> tile_start(int64_t{tiles_x} * tiles_y + 1, 0);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t f = cm.boundary_faces[b], t = f / 4, face = f % 4;
    float fx[3], fy[3];
    bool all = true;
    for (int i = 1; i < 4; ++i) {
      const int32_t v = mesh.tets[4 * t + ((face + i) & 3)];
      all = all && projects[v];
      fx[i - 1] = sx[v];
      fy[i - 1] = sy[v];
    }
    int* bx = &box[4 * b];
    face_box[b] = math::ScreenFaceBox(fx, fy, all);
    if (!math::FaceTileBox(face_box[b], w, h, tiles_x, tiles_y, bx)) {
      bx[0] = 1, bx[1] = 0, bx[2] = 1, bx[3] = 0;  // off screen
      continue;
    }
    for (int ty = bx[2]; ty <= bx[3]; ++ty)
      for (int tx = bx[0]; tx <= bx[1]; ++tx) ++tile_start[int64_t{ty} * tiles_x + tx + 1];
  }
  for (size_t i = 1; i < tile_start.size(); ++i) tile_start[i] += tile_start[i - 1];
  std::vector<int64_t> tile_faces(tile_start.back());
  std::vector<math::FaceBox> tile_boxes(tile_start.back());
  {
    std::vector<int64_t> fill(tile_start.begin(), tile_start.end() - 1);
    for (int64_t b = 0; b < nb; ++b) {
      const int* bx = &box[4 * b];
      for (int ty = bx[2]; ty <= bx[3]; ++ty)
        for (int tx = bx[0]; tx <= bx[1]; ++tx) {
          const int64_t at = fill[int64_t{ty} * tiles_x + tx]++;
          tile_faces[at] = cm.boundary_faces[b];
          tile_boxes[at] = face_box[b];
        }
    }
  }
  const auto t1 = std::chrono::steady_clock::now();

  float* image = static_cast<float*>(job.image);
  const int64_t max_steps = mesh.num_tets() + 16;
  std::atomic<int64_t> records{0}, fallbacks{0};
  auto shade = [&](int x, int y, int64_t* segs, int64_t* fallbacks) {
    V3 o, d;
    math::PixelRay(cam, x, y, &o, &d);
    const int64_t tile = int64_t{y / kTile} * tiles_x + x / kTile;
    const CpuView view{cm.walk_tets.data(), cm.neighbors.data(),
                       tile_faces.data() + tile_start[tile], tile_boxes.data() + tile_start[tile]};
    const Rgba acc = math::WalkRay(view, job.tf, x, y, o, d,
                                   tile_start[tile + 1] - tile_start[tile], max_steps, segs,
                                   fallbacks);
    const Rgba px = math::OverBackground(acc, job.tf.background);
    float* out = &image[4 * (int64_t{y} * w + x)];
    out[0] = px.r, out[1] = px.g, out[2] = px.b, out[3] = px.a;
  };

  const int bits = job.hash_block_bits == 0 ? 2 : job.hash_block_bits;
  // Without a callback the blocks only reorder work: render every pixel in one pass.
  const int stride = job.on_block != nullptr ? 1 << bits : 1;
  const int num_blocks = stride * stride;
  std::vector<float> partial;
  for (int block = 0; block < num_blocks; ++block) {
    const int bx = block % stride, by = block / stride;
    tbb::parallel_for(tbb::blocked_range2d<int>(0, tiles_y, 1, 0, tiles_x, 1),
                      [&](const tbb::blocked_range2d<int>& r) {
      int64_t segs = 0, fb = 0;
      for (int ty = r.rows().begin(); ty < r.rows().end(); ++ty)
        for (int tx = r.cols().begin(); tx < r.cols().end(); ++tx)
          for (int y = ty * kTile; y < std::min(h, (ty + 1) * kTile); ++y) {
            if (y % stride != by) continue;
            for (int x = tx * kTile; x < std::min(w, (tx + 1) * kTile); ++x)
              if (x % stride == bx) shade(x, y, &segs, &fb);
          }
      records += segs;
      fallbacks += fb;
    });
    if (job.on_block != nullptr) {
      PartialFrame frame;
      frame.block = block;
      frame.num_blocks = num_blocks;
      frame.x0 = bx, frame.y0 = by, frame.stride = stride;
      frame.width = (w - bx + stride - 1) / stride;
      frame.height = (h - by + stride - 1) / stride;
      partial.resize(4 * int64_t{frame.width} * frame.height);
      for (int j = 0; j < frame.height; ++j)
        for (int i = 0; i < frame.width; ++i)
          std::copy_n(&image[4 * ((int64_t{by} + j * stride) * w + bx + i * stride)], 4,
                      &partial[4 * (int64_t{j} * frame.width + i)]);
      frame.rgba = partial.data();
      absl::Status st = (*job.on_block)(frame);
      if (!st.ok()) return st;
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  RenderStats& stats = result->stats;
  stats.project_s = std::chrono::duration<double>(t1 - t0).count();
  stats.records_s = std::chrono::duration<double>(t2 - t1).count();
  stats.records = records.load();
  stats.walk_fallbacks = fallbacks.load();
  stats.num_blocks = num_blocks;
  stats.compositing = Compositing::kAuto;
  return absl::OkStatus();
}

}  // namespace fresnel::volume
