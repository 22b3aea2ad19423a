// The per-ray face-to-face walk, shared by the CPU ray caster (render_cpu.cc, the oracle) and the
// CUDA ray walk (walk_cuda.cu, CudaMethod::kRayWalk): the same float32 operations in the same
// order on both, so their images agree to the rounding of exp/expm1 alone.
//
// Entry: the ray tests the boundary faces binned into its 16×16-pixel screen tile
// (FaceTileBox) whose projected box holds its pixel (FaceBoxHolds) and keeps those through which
// it enters their tetrahedron. Entries are taken in increasing (t, grazed, tetrahedron) order,
// kWalkEntryBatch at a time: a scan of the tile's faces keeps the smallest entries beyond the
// last one taken (an insertion-sorted array), and only a ray with more entries than that (a
// non-convex mesh seen through several of its parts) scans again. That is the order a full sort
// gives, without a per-ray list of unbounded size.
// Walk: from an entry, intersect the current tetrahedron, composite its segment, step to the
// neighbour across the exit face. Leaving the mesh (no neighbour: a hole, a concavity, or the gap
// of a dropped degenerate tetrahedron) the ray resumes at the next entry beyond what it has
// covered. Where the exit face is ambiguous (an edge, a vertex, a sliver) and the neighbour
// leads back, the walk searches the tetrahedra around for the one the ray continues in
// (FindContinuation; counted in *fallbacks).
//
// MeshView (one per backend) provides
//   void Load(int32_t tet, V3 p[4], float s[4]) const;   points and scalars of a tetrahedron
//   int32_t Neighbor(int32_t tet, int face) const;       across face `face`, -1 on the boundary
//   int64_t TileFace(int64_t i) const;                   i-th face (4·tet + face) of the tile
//   FaceBox TileBox(int64_t i) const;                    its ScreenFaceBox
#pragma once

#include <cmath>
#include <cstdint>

#include "volume/volume_math.h"

namespace fresnel::volume::math {

inline constexpr int kWalkTile = 16;        // screen tile side of the boundary-face bins, pixels
inline constexpr int kWalkEntryBatch = 8;   // entries kept per scan of a tile's faces

// A boundary triangle's projected box widened by kFaceMarginPx, in continuous pixel coordinates
// (pixel centres at integers); infinite when a point does not project (behind the eye).
inline constexpr float kFaceMarginPx = 1.0f;
struct FaceBox {
  float x0, x1, y0, y1;
};
FRESNEL_VHD FaceBox ScreenFaceBox(const float sx[3], const float sy[3], bool all_project) {
  if (!all_project) return {-INFINITY, INFINITY, -INFINITY, INFINITY};
  float x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (int i = 0; i < 3; ++i) {
    x0 = fminf(x0, sx[i]);
    x1 = fmaxf(x1, sx[i]);
    y0 = fminf(y0, sy[i]);
    y1 = fmaxf(y1, sy[i]);
  }
  return {x0 - kFaceMarginPx, x1 + kFaceMarginPx, y0 - kFaceMarginPx, y1 + kFaceMarginPx};
}
// Whether the ray of pixel (x, y) can enter through the face: the pixel centre inside its box.
// The margin is ~10^4 times the projection's rounding, so no entry the exact test accepts is
// lost; the test saves the rays of a tile the exact test of most of its faces.
FRESNEL_VHD bool FaceBoxHolds(const FaceBox& b, float x, float y) {
  return x >= b.x0 && x <= b.x1 && y >= b.y0 && y <= b.y1;
}

// The tiles [box[0], box[1]] × [box[2], box[3]] a boundary triangle with ScreenFaceBox `fb` is
// binned into: the box clamped to the image; every tile when a point does not project. False
// when the box misses the image.
FRESNEL_VHD bool FaceTileBox(const FaceBox& fb, int width, int height, int tiles_x, int tiles_y,
                             int box[4]) {
  if (!(fb.x0 > -INFINITY && fb.x1 < INFINITY && fb.y0 > -INFINITY && fb.y1 < INFINITY)) {
    box[0] = 0, box[1] = tiles_x - 1, box[2] = 0, box[3] = tiles_y - 1;
    return true;
  }
  const float lx = fmaxf(fb.x0, 0.0f), hx = fminf(fb.x1, static_cast<float>(width) - 1.0f);
  const float ly = fmaxf(fb.y0, 0.0f), hy = fminf(fb.y1, static_cast<float>(height) - 1.0f);
  if (!(lx <= hx && ly <= hy)) return false;
  box[0] = static_cast<int>(lx) / kWalkTile, box[1] = static_cast<int>(hx) / kWalkTile;
  box[2] = static_cast<int>(ly) / kWalkTile, box[3] = static_cast<int>(hy) / kWalkTile;
  return true;
}

// At equal t a proper entry goes before a grazed one (below): two boundary triangles meeting at
// an edge the ray passes through give the same t, and a walk from the grazed one follows its
// exit face past the other's segment (seen on a stack of boxes viewed along its axis: a segment
// of 0.03 lost), which the walk from the proper one would not.
struct WalkEntry {
  float t;
  int32_t grazed;  // 0 or 1
  int32_t tet;
};
FRESNEL_VHD bool EntryBefore(WalkEntry a, WalkEntry b) {
  return a.t < b.t || (a.t == b.t && (a.grazed < b.grazed ||
                                      (a.grazed == b.grazed && a.tet < b.tet)));
}

// The premultiplied colour of the ray (o, d) of pixel (px, py) through the mesh (before the
// background); `num_faces` faces in the ray's tile; at most `max_steps` steps per entry. Adds
// the segments composited to *segments and the neighbourhood searches to *fallbacks.
template <class MeshView>
FRESNEL_VHD Rgba WalkRay(const MeshView& m, const TfTable& tf, int px, int py, V3 o, V3 d,
                         int64_t num_faces, int64_t max_steps, int64_t* segments,
                         int64_t* fallbacks) {
  const float fx = static_cast<float>(px), fy = static_cast<float>(py);
  Rgba acc = {0, 0, 0, 0};
  float t_done = -INFINITY;
  int32_t recent[8];
  int n_recent = 0;
  WalkEntry batch[kWalkEntryBatch];
  WalkEntry last = {-INFINITY, 0, 0};
  bool have_last = false;
  for (;;) {
    // The kWalkEntryBatch smallest entries after `last`, sorted; `more`: some did not fit.
    int n = 0;
    bool more = false;
    for (int64_t i = 0; i < num_faces; ++i) {
      if (!FaceBoxHolds(m.TileBox(i), fx, fy)) continue;
      const int64_t f = m.TileFace(i);
      const int32_t t = static_cast<int32_t>(f / 4);
      V3 p[4];
      float s[4];
      m.Load(t, p, s);
      TetHit hit;
      const bool ok = IntersectRayTet(p, s, o, d, &hit);
      // A sliver on the boundary (Blunt Fin's collapsed edge) can come out empty by rounding
      // where the ray does cross it: keep it as an entry while its interval misses by no more
      // than rounding, so the walk goes on through its exit face into the tetrahedra behind.
      const bool grazed = !ok && hit.face_out >= 0 &&
                          hit.t_in - hit.t_out <= 1e-5f * fmaxf(1.0f, fabsf(hit.t_in));
      if (!((ok || grazed) && hit.face_in == static_cast<int>(f % 4))) continue;
      const WalkEntry e = {hit.t_in, ok ? 0 : 1, t};
      if (have_last && !EntryBefore(last, e)) continue;
      if (n == kWalkEntryBatch) {
        more = true;
        if (!EntryBefore(e, batch[n - 1])) continue;
        --n;  // the largest makes room
      }
      int k = n++;
      for (; k > 0 && EntryBefore(e, batch[k - 1]); --k) batch[k] = batch[k - 1];
      batch[k] = e;
    }
    for (int b = 0; b < n; ++b) {
      const WalkEntry e = batch[b];
      if (e.t < t_done - 1e-5f * fmaxf(1.0f, fabsf(t_done))) continue;
      bool seen = false;
      for (int i = 0; i < (n_recent < 8 ? n_recent : 8); ++i) seen = seen || recent[i] == e.tet;
      if (seen) continue;
      int32_t cur = e.tet, prev = -1;
      for (int64_t step = 0; step < max_steps; ++step) {
        V3 p[4];
        float s[4];
        m.Load(cur, p, s);
        TetHit hit;
        if (IntersectRayTet(p, s, o, d, &hit)) {
          acc = Over(acc, IntegrateSegment(tf, hit.s_in, hit.s_out, hit.t_out - hit.t_in));
          t_done = fmaxf(t_done, hit.t_out);
          ++*segments;
        }
        recent[n_recent++ & 7] = cur;
        int32_t next = hit.face_out < 0 ? -1 : m.Neighbor(cur, hit.face_out);
        if (hit.face_out >= 0 && next < 0) break;  // left the mesh: resume at the next entry
        if (next < 0 || next == prev) {
          // The exit face is ambiguous (the ray passes through an edge or a vertex, or a
          // sliver's planes nearly coincide) and leads back or nowhere: breadth-first over face
          // neighbours (up to 3 steps, 96 tetrahedra), the one whose segment runs on past
          // t_done and starts nearest it.
          next = -1;
          {
            int32_t queue[96];
            int head = 0, tail = 0;
            queue[tail++] = cur;
            float best_in = INFINITY;
            const float eps = 1e-5f * fmaxf(1.0f, fabsf(t_done));
            for (int depth = 0; depth < 3 && head < tail && next < 0; ++depth) {
              const int level_end = tail;
              for (; head < level_end; ++head) {
                for (int f = 0; f < 4; ++f) {
                  const int32_t nb = m.Neighbor(queue[head], f);
                  if (nb < 0 || tail >= 96) continue;
                  bool queued = false;
                  for (int q = 0; q < tail; ++q) queued = queued || queue[q] == nb;
                  if (queued) continue;
                  queue[tail++] = nb;
                  V3 pn[4];
                  float sn[4];
                  m.Load(nb, pn, sn);
                  TetHit h;
                  if (IntersectRayTet(pn, sn, o, d, &h) && h.t_out > t_done + eps &&
                      h.t_in <= t_done + 1e3f * eps && h.t_in < best_in) {
                    next = nb;
                    best_in = h.t_in;
                  }
                }
              }
            }
          }
          ++*fallbacks;
          if (next < 0) break;
        }
        prev = cur;
        cur = next;
      }
    }
    if (!more) break;
    last = batch[n - 1];
    have_last = true;
  }
  return acc;
}

}  // namespace fresnel::volume::math
