// CPU backend and test oracle: per-pixel ray casting with face-to-face traversal (TBB).
//
// Entry: the boundary faces (faces without a neighbour) are binned into 16×16-pixel screen tiles
// by the box of their projected vertices (1-pixel margin); a pixel's ray tests the faces of its
// tile and keeps those through which it enters their tetrahedron, sorted by distance.
// Walk: from an entry, intersect the current tetrahedron, composite its segment, and step to the
// neighbour across the exit face. Leaving the mesh (no neighbour: a hole, a concavity, or the
// gap of a degenerate tetrahedron that was dropped), the ray resumes at the next entry beyond
// what it has covered — the fallback that makes non-convex meshes render correctly. Where the
// exit face is ambiguous (an edge, a vertex, a sliver) and the neighbour leads back, the walk
// searches the tetrahedra around for the one the ray continues in (RenderStats::walk_fallbacks).
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

struct Entry {
  float t;
  int32_t tet;
  bool operator<(const Entry& o) const { return t < o.t || (t == o.t && tet < o.tet); }
};

constexpr int kTile = 16;

}  // namespace

CpuMesh BuildCpuMesh(RenderMesh mesh) {
  CpuMesh out;
  const int64_t nt = mesh.num_tets();
  std::vector<FaceKey> faces(4 * nt);
  tbb::parallel_for(int64_t{0}, nt, [&](int64_t t) {
    for (int f = 0; f < 4; ++f) {
      FaceKey& k = faces[4 * t + f];
      for (int i = 0; i < 3; ++i) k.v[i] = mesh.tets[4 * t + ((f + 1 + i) & 3)];
      std::sort(k.v, k.v + 3);
      k.id = 4 * t + f;
    }
  });
  tbb::parallel_sort(faces.begin(), faces.end());
  out.neighbors.assign(4 * nt, -1);
  for (size_t i = 0; i < faces.size();) {
    size_t j = i + 1;
    while (j < faces.size() && faces[j].SameFace(faces[i])) ++j;
    if (j - i == 2) {
      out.neighbors[faces[i].id] = static_cast<int32_t>(faces[i + 1].id / 4);
      out.neighbors[faces[i + 1].id] = static_cast<int32_t>(faces[i].id / 4);
    }
    // A face of one tetrahedron (or, in a non-manifold mesh, of three or more) is boundary.
    i = j;
  }
  for (int64_t f = 0; f < 4 * nt; ++f)
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
  std::vector<int64_t> tile_start(int64_t{tiles_x} * tiles_y + 1, 0);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t f = cm.boundary_faces[b], t = f / 4, face = f % 4;
    float x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    bool all = true;
    for (int i = 1; i < 4; ++i) {
      const int32_t v = mesh.tets[4 * t + ((face + i) & 3)];
      all = all && projects[v];
      x0 = std::min(x0, sx[v]);
      x1 = std::max(x1, sx[v]);
      y0 = std::min(y0, sy[v]);
      y1 = std::max(y1, sy[v]);
    }
    int* bx = &box[4 * b];
    if (!all) {
      bx[0] = 0, bx[1] = tiles_x - 1, bx[2] = 0, bx[3] = tiles_y - 1;
    } else {
      const float lx = std::max(x0 - 1.0f, 0.0f), hx = std::min(x1 + 1.0f, w - 1.0f);
      const float ly = std::max(y0 - 1.0f, 0.0f), hy = std::min(y1 + 1.0f, h - 1.0f);
      if (!(lx <= hx && ly <= hy)) {
        bx[0] = 1, bx[1] = 0, bx[2] = 1, bx[3] = 0;  // off screen
        continue;
      }
      bx[0] = static_cast<int>(lx) / kTile, bx[1] = static_cast<int>(hx) / kTile;
      bx[2] = static_cast<int>(ly) / kTile, bx[3] = static_cast<int>(hy) / kTile;
    }
    for (int ty = bx[2]; ty <= bx[3]; ++ty)
      for (int tx = bx[0]; tx <= bx[1]; ++tx) ++tile_start[int64_t{ty} * tiles_x + tx + 1];
  }
  for (size_t i = 1; i < tile_start.size(); ++i) tile_start[i] += tile_start[i - 1];
  std::vector<int64_t> tile_faces(tile_start.back());
  {
    std::vector<int64_t> fill(tile_start.begin(), tile_start.end() - 1);
    for (int64_t b = 0; b < nb; ++b) {
      const int* bx = &box[4 * b];
      for (int ty = bx[2]; ty <= bx[3]; ++ty)
        for (int tx = bx[0]; tx <= bx[1]; ++tx)
          tile_faces[fill[int64_t{ty} * tiles_x + tx]++] = cm.boundary_faces[b];
    }
  }
  const auto t1 = std::chrono::steady_clock::now();

  float* image = result->image.data<float>();
  const int64_t max_steps = mesh.num_tets() + 16;
  std::atomic<int64_t> records{0}, fallbacks{0};
  auto load = [&](int32_t t, V3 p[4], float s[4]) {
    for (int i = 0; i < 4; ++i) {
      const int32_t v = mesh.tets[4 * int64_t{t} + i];
      const float* q = &mesh.points_xyz[3 * int64_t{v}];
      p[i] = {q[0], q[1], q[2]};
      s[i] = mesh.scalars[v];
    }
  };
  auto shade = [&](int x, int y, std::vector<Entry>* entries, int64_t* segs,
                   int64_t* fallbacks) {
    V3 o, d;
    math::PixelRay(cam, x, y, &o, &d);
    entries->clear();
    const int64_t tile = int64_t{y / kTile} * tiles_x + x / kTile;
    for (int64_t i = tile_start[tile]; i < tile_start[tile + 1]; ++i) {
      const int64_t f = tile_faces[i];
      const int32_t t = static_cast<int32_t>(f / 4);
      V3 p[4];
      float s[4];
      load(t, p, s);
      math::TetHit hit;
      const bool ok = math::IntersectRayTet(p, s, o, d, &hit);
      // A sliver on the boundary (Blunt Fin's collapsed edge) can come out empty by rounding
      // where the ray does cross it: keep it as an entry while its interval misses by no more
      // than rounding, so the walk goes on through its exit face into the tetrahedra behind.
      const bool grazed = !ok && hit.face_out >= 0 &&
                          hit.t_in - hit.t_out <= 1e-5f * std::max(1.0f, std::fabs(hit.t_in));
      if ((ok || grazed) && hit.face_in == f % 4) entries->push_back({hit.t_in, t});
    }
    std::sort(entries->begin(), entries->end());
    Rgba acc = {0, 0, 0, 0};
    float t_done = -INFINITY;
    int32_t recent[8];
    int n_recent = 0;
    auto seen = [&](int32_t t) {
      for (int i = 0; i < std::min(n_recent, 8); ++i)
        if (recent[i] == t) return true;
      return false;
    };
    // Breadth-first over face neighbours (up to 3 steps, 96 tetrahedra): the one whose segment
    // runs on past t_done and starts nearest it.
    auto FindContinuation = [&](int32_t from, float t_now) -> int32_t {
      int32_t queue[96];
      int head = 0, tail = 0;
      queue[tail++] = from;
      int32_t best = -1;
      float best_in = INFINITY;
      const float eps = 1e-5f * std::max(1.0f, std::fabs(t_now));
      for (int depth = 0; depth < 3 && head < tail; ++depth) {
        const int level_end = tail;
        for (; head < level_end; ++head) {
          for (int f = 0; f < 4; ++f) {
            const int32_t nb = cm.neighbors[4 * int64_t{queue[head]} + f];
            if (nb < 0 || tail >= 96 || std::find(queue, queue + tail, nb) != queue + tail) continue;
            queue[tail++] = nb;
            V3 p[4];
            float s[4];
            load(nb, p, s);
            math::TetHit h;
            if (math::IntersectRayTet(p, s, o, d, &h) && h.t_out > t_now + eps &&
                h.t_in <= t_now + 1e3f * eps && h.t_in < best_in) {
              best = nb;
              best_in = h.t_in;
            }
          }
        }
        if (best >= 0) return best;
      }
      return best;
    };
    for (const Entry& e : *entries) {
      if (e.t < t_done - 1e-5f * std::max(1.0f, std::fabs(t_done))) continue;
      if (seen(e.tet)) continue;
      int32_t cur = e.tet, prev = -1;
      for (int64_t step = 0; step < max_steps; ++step) {
        V3 p[4];
        float s[4];
        load(cur, p, s);
        math::TetHit hit;
        if (math::IntersectRayTet(p, s, o, d, &hit)) {
          acc = math::Over(acc, math::IntegrateSegment(job.tf, hit.s_in, hit.s_out,
                                                       hit.t_out - hit.t_in));
          t_done = std::max(t_done, hit.t_out);
          ++*segs;
        }
        recent[n_recent++ & 7] = cur;
        int32_t next = hit.face_out < 0 ? -1 : cm.neighbors[4 * int64_t{cur} + hit.face_out];
        if (hit.face_out >= 0 && next < 0) break;  // left the mesh: resume at the next entry
        if (next < 0 || next == prev) {
          // The exit face is ambiguous (the ray passes through an edge or a vertex, or a sliver's
          // planes nearly coincide) and leads back or nowhere: look for the tetrahedron the ray
          // continues in among the tetrahedra around this one.
          next = FindContinuation(cur, t_done);
          ++*fallbacks;
          if (next < 0) break;
        }
        prev = cur;
        cur = next;
      }
    }
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
      std::vector<Entry> entries;
      int64_t segs = 0, fb = 0;
      for (int ty = r.rows().begin(); ty < r.rows().end(); ++ty)
        for (int tx = r.cols().begin(); tx < r.cols().end(); ++tx)
          for (int y = ty * kTile; y < std::min(h, (ty + 1) * kTile); ++y) {
            if (y % stride != by) continue;
            for (int x = tx * kTile; x < std::min(w, (tx + 1) * kTile); ++x)
              if (x % stride == bx) shade(x, y, &entries, &segs, &fb);
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
