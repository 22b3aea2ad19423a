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
#include <vector>

#include "tbb/blocked_range2d.h"
#include "tbb/parallel_for.h"
#include "tbb/parallel_sort.h"
#include "volume/volume_internal.h"
#include "volume/volume_math.h"
#include "volume/walk_math.h"

namespace fresnel::volume {
namespace {

using math::Rgba;
using math::V3;

struct FaceKey {
  int32_t v[3];
  int64_t id;  // 4·tet + face
  bool operator<(const FaceKey& o) const {
    if (v[0] != o.v[0]) return v[0] < o.v[0];
    if (v[1] != o.v[1]) return v[1] < o.v[1];
    return v[2] < o.v[2];
  }
  bool SameFace(const FaceKey& o) const {
    return v[0] == o.v[0] && v[1] == o.v[1] && v[2] == o.v[2];
  }
};

// The CPU's view of the mesh for math::WalkRay; `faces` are the ray's tile's.
struct CpuView {
  const RenderMesh* mesh;
  const int32_t* neighbors;
  const int64_t* faces;
  const math::FaceBox* boxes;
  void Load(int32_t t, V3 p[4], float s[4]) const {
    for (int i = 0; i < 4; ++i) {
      const int32_t v = mesh->tets[4 * int64_t{t} + i];
      const float* q = &mesh->points_xyz[3 * int64_t{v}];
      p[i] = {q[0], q[1], q[2]};
      s[i] = mesh->scalars[v];
    }
  }
  int32_t Neighbor(int32_t t, int f) const { return neighbors[4 * int64_t{t} + f]; }
  int64_t TileFace(int64_t i) const { return faces[i]; }
  math::FaceBox TileBox(int64_t i) const { return boxes[i]; }
};

constexpr int kTile = math::kWalkTile;

}  // namespace

std::vector<int32_t> FaceNeighbors(const std::vector<int32_t>& tets) {
  const int64_t nt = static_cast<int64_t>(tets.size() / 4);
  std::vector<FaceKey> faces(4 * nt);
  tbb::parallel_for(int64_t{0}, nt, [&](int64_t t) {
    for (int f = 0; f < 4; ++f) {
      FaceKey& k = faces[4 * t + f];
      for (int i = 0; i < 3; ++i) k.v[i] = tets[4 * t + ((f + 1 + i) & 3)];
      std::sort(k.v, k.v + 3);
      k.id = 4 * t + f;
    }
  });
  tbb::parallel_sort(faces.begin(), faces.end());
  std::vector<int32_t> neighbors(4 * nt, -1);
  for (size_t i = 0; i < faces.size();) {
    size_t j = i + 1;
    while (j < faces.size() && faces[j].SameFace(faces[i])) ++j;
    if (j - i == 2) {
      neighbors[faces[i].id] = static_cast<int32_t>(faces[i + 1].id / 4);
      neighbors[faces[i + 1].id] = static_cast<int32_t>(faces[i].id / 4);
    }
    // A face of one tetrahedron (or, in a non-manifold mesh, of three or more) is boundary.
    i = j;
  }
  return neighbors;
}

CpuMesh BuildCpuMesh(RenderMesh mesh) {
  CpuMesh out;
  out.neighbors = FaceNeighbors(mesh.tets);
  const int64_t nf = static_cast<int64_t>(out.neighbors.size());
  for (int64_t f = 0; f < nf; ++f)
    if (out.neighbors[f] < 0) out.boundary_faces.push_back(f);
  out.mesh = std::move(mesh);
  return out;
}

int64_t CpuMeshBytes(const CpuMesh& m) {
  return static_cast<int64_t>(m.mesh.points_xyz.size() * 4 + m.mesh.scalars.size() * 4 +
                              m.mesh.tets.size() * 4 + m.neighbors.size() * 4 +
                              m.boundary_faces.size() * 8);
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

  float* image = result->image.data<float>();
  const int64_t max_steps = mesh.num_tets() + 16;
  std::atomic<int64_t> records{0}, fallbacks{0};
  auto shade = [&](int x, int y, int64_t* segs, int64_t* fallbacks) {
    V3 o, d;
    math::PixelRay(cam, x, y, &o, &d);
    const int64_t tile = int64_t{y / kTile} * tiles_x + x / kTile;
    const CpuView view{&mesh, cm.neighbors.data(), tile_faces.data() + tile_start[tile],
                       tile_boxes.data() + tile_start[tile]};
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
