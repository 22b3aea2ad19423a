// Screen-space candidate pixels of a projected tetrahedron for the CUDA scan conversion
// (render_cuda.cu, SmallTetScan::kWarpList), device-agnostic so that the CPU tests check it
// against the exact ray test (tests/kernels/volume/test_volume_render.cc).
#pragma once

#include <cmath>
#include <cstdint>

#include "volume/volume_math.h"

namespace fresnel::volume::math {

// Pixels [x0, x1] × [y0, y1] (pixel centres at integers, area <= 64) of a box under the
// projection of points (px[i], py[i]), i < 4 (continuous pixel coordinates, ProjectPoint), as a
// mask: bit r·(x1 − x0 + 1) + (x − x0) for pixel (x, y0 + r). Per box row y the x extent of the
// projected hull inside the band [y − m, y + m] is the extent of the six point-to-point segments
// clipped to the band (the hull's edges are among them and every segment lies in the hull);
// widened by m, it holds every pixel centre within m of the hull in x and y. Float rounding of
// the extents is ~1e-4 pixel for coordinates below 4096 (2e-3 at 32768), far below a margin of
// 0.05 pixel. Callers pass all box pixels instead when a point does not project or lies far off.
FRESNEL_VHD uint64_t SpanCandidates(const float px[4], const float py[4], int x0, int x1, int y0,
                                    int y1, float m) {
  const int bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  if (bw <= 0 || bh <= 0) return 0;
  const int area = bw * bh;
  const uint64_t all = area >= 64 ? ~uint64_t{0} : (uint64_t{1} << area) - 1;
  const int ea[6] = {0, 0, 0, 1, 1, 2}, eb[6] = {1, 2, 3, 2, 3, 3};
  float inv_dy[6];
  for (int e = 0; e < 6; ++e) {
    const float dy = py[eb[e]] - py[ea[e]];
    inv_dy[e] = dy != 0.0f ? 1.0f / dy : 0.0f;
  }
  uint64_t cand = 0;
  for (int r = 0; r < bh; ++r) {
    const float lo_y = static_cast<float>(y0 + r) - m, hi_y = static_cast<float>(y0 + r) + m;
    float xl = INFINITY, xr = -INFINITY;
    for (int e = 0; e < 6; ++e) {
      const float xa = px[ea[e]], ya = py[ea[e]], xb = px[eb[e]], yb = py[eb[e]];
      if (fmaxf(ya, yb) < lo_y || fminf(ya, yb) > hi_y) continue;
      // Parameters of the segment inside the band; a horizontal one lies in it whole.
      float t0 = 0.0f, t1 = 1.0f;
      if (inv_dy[e] != 0.0f) {
        const float u0 = (lo_y - ya) * inv_dy[e], u1 = (hi_y - ya) * inv_dy[e];
        t0 = fmaxf(fminf(u0, u1), 0.0f);
        t1 = fminf(fmaxf(u0, u1), 1.0f);
      }
      const float xs0 = xa + t0 * (xb - xa), xs1 = xa + t1 * (xb - xa);
      xl = fminf(xl, fminf(xs0, xs1));
      xr = fmaxf(xr, fmaxf(xs0, xs1));
    }
    if (!(xl <= xr)) continue;
    const float fl = ceilf(xl - m), fr = floorf(xr + m);
    const int ix0 = fl > static_cast<float>(x0) ? static_cast<int>(fl) : x0;
    const int ix1 = fr < static_cast<float>(x1) ? static_cast<int>(fr) : x1;
    if (ix0 > ix1) continue;
    const int len = ix1 - ix0 + 1;
    cand |= (len >= 64 ? ~uint64_t{0} : (uint64_t{1} << len) - 1) << (r * bw + ix0 - x0);
  }
  return cand & all;
}

}  // namespace fresnel::volume::math
