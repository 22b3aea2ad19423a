// The per-ray face-to-face walk, shared by the CPU ray caster (render_cpu.cc, the oracle) and the
// CUDA ray walk (walk_cuda.cu, CudaMethod::kRayWalk): the same float32 operations in the same
// order on both, so their images agree to the rounding of exp/expm1 alone.
//
// Entry: the ray tests the boundary faces binned into its 16×16-pixel screen tile
// (FaceTileBox) whose projected box holds its pixel (FaceBoxHolds) and keeps those through which
// it enters their tetrahedron. Entries are taken in increasing (t, grazed, tetrahedron) order
// (EntryKey: grazed ones a rounding later), kWalkEntryBatch at a time: a scan of the tile's faces
// keeps the smallest entries beyond the last one taken (an insertion-sorted array), and only a
// ray with more entries than that (a non-convex mesh seen through several of its parts) scans
// again. That is the order a full sort gives, without a per-ray list of unbounded size.
// Walk: from an entry, intersect the tetrahedron (IntersectWalkTet), composite its segment, step
// to the neighbour across the exit face. The neighbour is entered through the shared face where
// the last segment ended, so a step (StepWalkTet) only finds which of its other three faces the
// ray leaves by, from the tetrahedron's cached geometry (WalkTet: barycentric and scalar
// gradients, built once per mesh; the session-6 walk rebuilt four planes from the points at every
// step, H200 1024² Blunt Fin 2.15 ms, docs/volume.md), and consecutive segments join exactly.
// Leaving the mesh (no neighbour: a hole, a concavity, or the gap of a dropped degenerate
// tetrahedron) the ray resumes at the next entry beyond what it has covered. Where the step is
// ambiguous (an edge, a vertex, a sliver, a ray along the boundary outside) the whole
// intersection decides, and where its exit leads back or nowhere the walk searches the
// tetrahedra around for the one the ray continues in (counted in *fallbacks).
//
// MeshView (one per backend) provides
//   WalkTet Geom(int32_t tet) const;                      the tetrahedron's walk geometry
//   void Neighbors(int32_t tet, int32_t nb[4]) const;     across each face, -1 on the boundary
//   int32_t Neighbor(int32_t tet, int face) const;        across face `face`
//   int64_t TileFace(int64_t i) const;                    i-th face (4·tet + face) of the tile
//   FaceBox TileBox(int64_t i) const;                     its ScreenFaceBox
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

// ---- per-tetrahedron walk geometry ---------------------------------------------------------
//
// What a step needs of a tetrahedron, independent of the camera, so it is built once per mesh
// (BuildWalkTets, on the host in double and rounded to float; the CPU and CUDA meshes hold the
// same floats) instead of from its four points at every step. With p0 its vertex 0:
//   λ_i(x) = δ_i0 + m_i·(x − p0)   barycentric coordinate i (face i lies opposite vertex i),
//                                  m_i = ∇λ_i = n_i / (n_i·(p_i − p_j)) with n_i the normal of
//                                  face i (through p_j, p_k, p_l), as PrepareTet's planes;
//   s(x)   = s0 + g·(x − p0)       the scalar, linear in the tetrahedron: g = Σ_i (s_i − s0) m_i;
//   |x − p0| <= reach              for every x in the tetrahedron (reach = longest edge at p0).
// Along the ray x = o + t·d, with r = o − p0: λ_i(t) = a_i + t·b_i, a_i = δ_i0 + m_i·r,
// b_i = m_i·d, so face i is crossed at t_i = −a_i/b_i, entered where b_i > 0 and left where
// b_i < 0; and s(t) = s0 + g·r + t·(g·d). Two dot products per face and no division but the
// crossings: PrepareTet's four cross products and reciprocals leave the step.
// Stored as five float4 (GPU) or 20 floats (CPU) per tetrahedron:
//   {m0, s0}, {m1, p0.x}, {m2, p0.y}, {m3, p0.z}, {g, reach}.
inline constexpr int kWalkTetFloats = 20;
struct WalkTet {
  V3 m[4];
  V3 p0;
  float s0;
  V3 g;
  float reach;
};
FRESNEL_VHD WalkTet UnpackWalkTet(const float* w) {
  WalkTet t;
  for (int i = 0; i < 4; ++i) t.m[i] = {w[4 * i], w[4 * i + 1], w[4 * i + 2]};
  t.s0 = w[3];
  t.p0 = {w[7], w[11], w[15]};
  t.g = {w[16], w[17], w[18]};
  t.reach = w[19];
  return t;
}

// The ray's a_i and b_i of every face, s(t) = s_at0 + t·s_rate, and the depth of p0 along the
// ray (the tetrahedron spans at most [base − reach, base + reach]).
struct WalkRayTet {
  float a[4], b[4];
  float s_at0, s_rate;
  float base;
};
FRESNEL_VHD WalkRayTet RayAgainst(const WalkTet& w, V3 o, V3 d) {
  WalkRayTet q;
  const V3 r = o - w.p0;
  for (int i = 0; i < 4; ++i) {
    q.a[i] = Dot(w.m[i], r) + (i == 0 ? 1.0f : 0.0f);
    q.b[i] = Dot(w.m[i], d);
  }
  q.s_at0 = w.s0 + Dot(w.g, r);
  q.s_rate = Dot(w.g, d);
  q.base = -Dot(r, d);
  return q;
}

// The whole intersection, as IntersectRayTet (same conventions and clamps: t_in >= 0, the span
// of the tetrahedron along the ray; filled on a miss too) from the walk geometry. True for a
// segment of positive length.
FRESNEL_VHD bool IntersectWalkTet(const WalkTet& w, V3 o, V3 d, TetHit* hit) {
  const WalkRayTet q = RayAgainst(w, o, d);
  float t_in = -INFINITY, t_out = INFINITY;
  int f_in = -1, f_out = -1;
  for (int i = 0; i < 4; ++i) {
    if (q.b[i] > 0.0f) {
      const float t = -q.a[i] / q.b[i];
      if (t > t_in) {
        t_in = t;
        f_in = i;
      }
    } else if (q.b[i] < 0.0f) {
      const float t = -q.a[i] / q.b[i];
      if (t < t_out) {
        t_out = t;
        f_out = i;
      }
    } else if (q.a[i] < 0.0f) {
      hit->face_out = -1;
      return false;  // parallel to face i and outside it
    }
  }
  if (t_in < 0.0f) {
    t_in = 0.0f;
    f_in = -1;
  }
  t_in = fmaxf(t_in, q.base - w.reach);
  t_out = fminf(t_out, q.base + w.reach);
  hit->t_in = t_in;
  hit->t_out = t_out;
  hit->face_in = f_in;
  hit->face_out = f_out;
  hit->s_in = q.s_at0 + t_in * q.s_rate;
  hit->s_out = q.s_at0 + t_out * q.s_rate;
  return t_out > t_in;
}

// The step into a tetrahedron through its face `face_in` at depth t_in where the scalar is s_in
// (the previous tetrahedron's exit: the walk's segments join without gap or overlap): only the
// other three faces can be left through, the first crossed is the exit. False (ambiguous) when
// none is left through, the ray runs parallel outside one, the exit lies before t_in or another
// face is entered after it by more than rounding (the ray passes by an edge or vertex, or runs
// along the boundary outside the mesh: not through the tetrahedron); the caller then takes the
// whole intersection and, where that leads nowhere, the neighbourhood search, as for a
// tetrahedron entered any other way. Else *hit is the segment [t_in, max(t_in, t_out)] (length
// 0 where the exit rounds before t_in).
FRESNEL_VHD bool StepWalkTet(const WalkTet& w, V3 o, V3 d, int face_in, float t_in, float s_in,
                             TetHit* hit) {
  const WalkRayTet q = RayAgainst(w, o, d);
  const float tol = 1e-5f * fmaxf(1.0f, fabsf(t_in));
  // Face i is crossed at t_i = −a_i/b_i. One division, for the exit alone: leaving faces
  // (b_i < 0) are ordered by a_i/|b_i| through cross products (both |b| positive), and an
  // entering face (b_i > 0) is entered after t_in + tol where −a_i > (t_in + tol)·b_i.
  float exit_a = 0.0f, exit_nb = 1.0f;  // the exit's a and −b
  int f_out = -1;
  bool through = true;
  for (int i = 0; i < 4; ++i) {
    if (i == face_in) continue;
    const float a = q.a[i], b = q.b[i];
    if (b < 0.0f) {
      if (f_out < 0 || a * exit_nb < exit_a * -b) {
        exit_a = a;
        exit_nb = -b;
        f_out = i;
      }
    } else if (b > 0.0f) {
      through = through && !(-a > (t_in + tol) * b);
    } else {
      through = through && !(a < 0.0f);  // parallel to face i and outside it
    }
  }
  if (!through || f_out < 0) return false;
  const float t_out = fminf(exit_a / exit_nb, q.base + w.reach);
  if (t_out < t_in - tol) return false;
  hit->t_in = t_in;
  hit->t_out = fmaxf(t_out, t_in);
  hit->face_in = face_in;
  hit->face_out = f_out;
  hit->s_in = s_in;
  hit->s_out = q.s_at0 + hit->t_out * q.s_rate;
  return true;
}

// A proper entry goes before a grazed one (below) at equal t, and before one up to the grazing
// tolerance (1e-5 of t) earlier: grazed entries sort by t + that tolerance. Two boundary
// triangles meeting at an edge the ray passes through give the same t, and a walk from the
// grazed one follows its exit face past the other's segment (seen on a stack of boxes viewed
// along its axis: a segment of 0.03 lost); and on Blunt Fin a ray that enters where the wall's
// boundary layer meets another boundary found a grazed entry 4e-6 before the proper one, whose
// walk ran outside the mesh along the wall (no segments) into cells 0.06 further on, so the
// proper entry behind it was skipped (0.015 of colour lost at one pixel of 1024²).
struct WalkEntry {
  float t;
  int32_t grazed;  // 0 or 1
  int32_t tet;
};
FRESNEL_VHD float EntryKey(WalkEntry e) {
  return e.grazed ? e.t + 1e-5f * fmaxf(1.0f, fabsf(e.t)) : e.t;
}
FRESNEL_VHD bool EntryBefore(WalkEntry a, WalkEntry b) {
  const float ka = EntryKey(a), kb = EntryKey(b);
  return ka < kb || (ka == kb && (a.grazed < b.grazed ||
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
      TetHit hit;
      const bool ok = IntersectWalkTet(m.Geom(t), o, d, &hit);
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
      // Per step: the segment of `cur` in *hit (ok: of positive length), its neighbours in nb.
      int32_t cur = e.tet, prev = -1;
      int32_t nb[4];
      TetHit hit;
      bool ok = IntersectWalkTet(m.Geom(cur), o, d, &hit);
      m.Neighbors(cur, nb);
      // The transfer function at the last segment's end: a joined step starts there.
      TfAt at_end = {NAN, 0, {0, 0, 0, 0}};
      for (int64_t step = 0; step < max_steps; ++step) {
        // The next tetrahedron across the exit face, its geometry and neighbours loaded before
        // this segment's integration, which hides their latency (the loads' one level of
        // dependence is the whole step's). Where the step does not go on (the walk leaves the
        // mesh or searches the neighbourhood) the current tetrahedron's are loaded instead:
        // a load is never of an invalid index and needs no branch. H200, Blunt Fin 1024²:
        // WalkKernel 1.15 → 1.07 ms at 16 warps per SM (with 24 the 24 registers it holds
        // spill and it is slower: walk_cuda.cu, FRESNEL_VOLUME_WALK_MIN_BLOCKS); the
        // integral is about half of the walk (0.55 ms without it).
        int32_t next = hit.face_out < 0 ? -1 : nb[hit.face_out];
        const bool stepping = next >= 0 && next != prev;
        int32_t nb_next[4];
        m.Neighbors(stepping ? next : cur, nb_next);
        const WalkTet w_next = m.Geom(stepping ? next : cur);
        if (ok) {
          const TfAt from = hit.s_in == at_end.s ? at_end : TfAtScalar(tf, hit.s_in);
          acc = Over(acc, IntegrateSegmentFrom(tf, from, hit.s_out, hit.t_out - hit.t_in,
                                               &at_end));
          t_done = fmaxf(t_done, hit.t_out);
          ++*segments;
        }
        recent[n_recent++ & 7] = cur;
        if (hit.face_out >= 0 && next < 0) break;  // left the mesh: resume at the next entry
        if (!stepping) {
          // The exit face is ambiguous (the ray passes through an edge or a vertex, or a
          // sliver's planes nearly coincide) and leads back or nowhere: breadth-first over face
          // neighbours (up to 3 steps, 96 tetrahedra), the one whose segment runs on past
          // t_done and starts nearest it.
          next = -1;
          TetHit best;
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
                  const int32_t nbf = m.Neighbor(queue[head], f);
                  if (nbf < 0 || tail >= 96) continue;
                  bool queued = false;
                  for (int q = 0; q < tail; ++q) queued = queued || queue[q] == nbf;
                  if (queued) continue;
                  queue[tail++] = nbf;
                  TetHit h;
                  if (IntersectWalkTet(m.Geom(nbf), o, d, &h) && h.t_out > t_done + eps &&
                      h.t_in <= t_done + 1e3f * eps && h.t_in < best_in) {
                    next = nbf;
                    best_in = h.t_in;
                    best = h;
                  }
                }
              }
            }
          }
          ++*fallbacks;
          if (next < 0) break;
          prev = cur;
          cur = next;
          hit = best;
          ok = true;
          m.Neighbors(cur, nb);
          continue;
        }
        // Into `next` through the face shared with `cur`: the segment starts where the last
        // one ended.
        const float t_in = hit.t_out, s_in = hit.s_out;
        prev = cur;
        cur = next;
        for (int f = 0; f < 4; ++f) nb[f] = nb_next[f];
        const int face_in = nb[0] == prev ? 0 : nb[1] == prev ? 1 : nb[2] == prev ? 2
                            : nb[3] == prev ? 3 : -1;
        if (face_in >= 0 && StepWalkTet(w_next, o, d, face_in, t_in, s_in, &hit)) {
          ok = hit.t_out > hit.t_in;
        } else {
          ok = IntersectWalkTet(w_next, o, d, &hit);
        }
      }
    }
    if (!more) break;
    last = batch[n - 1];
    have_last = true;
  }
  return acc;
}

}  // namespace fresnel::volume::math
