// The arithmetic and the rules that the CPU reference and the CUDA kernels share, compiled by both
// the host compiler and nvcc. Everything that decides a bit of Goldstein's output lives here, so
// that the two implementations cannot drift apart: edge wrap counts, plaquette charges, candidate
// keys, the frame (image border) targets, Bresenham lines and the final `phase + 2*pi*k`.
//
// Coordinates: pixel (y, x), 0 <= y < rows, 0 <= x < cols, linear index y * cols + x. Plaquette
// (y, x) is the 2x2 cell whose top-left pixel is (y, x) (y < rows - 1, x < cols - 1); its centre is
// at (y + 0.5, x + 0.5). The image is surrounded by a one-pixel "frame" (rows -1 and `rows`,
// columns -1 and `cols`) that acts as the electrical ground of Goldstein's algorithm.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FRESNEL_HD __host__ __device__ __forceinline__
#else
#define FRESNEL_HD inline
#endif

namespace fresnel::unwrap::internal {

inline constexpr double kTwoPi = 6.283185307179586476925286766559;
inline constexpr double kInvTwoPi = 0.15915494309189533576888376337251;

// Side of the square bins of the spatial residue table (pixels). One CUDA block of 16 x 16 threads
// covers one bin in the residue kernel, so a bin's residues are appended contiguously.
inline constexpr int kBin = 16;
// Side of the integration tiles of the CUDA path.
inline constexpr int kTile = 32;

// "No candidate" key.
inline constexpr uint64_t kNoKey = ~uint64_t{0};
// Bit 31 of a key's low word: the target is a masked or frame pixel (absorbs any charge).
inline constexpr uint32_t kGroundBit = 0x80000000u;

template <class T>
struct Consts;
template <>
struct Consts<float> {
  static constexpr float kTwoPi = 6.28318530717958647692f;
  static constexpr float kInvTwoPi = 0.15915494309189533577f;
};
template <>
struct Consts<double> {
  static constexpr double kTwoPi = internal::kTwoPi;
  static constexpr double kInvTwoPi = internal::kInvTwoPi;
};

// The integer number of 2*pi turns in the step a -> b: the nearest integer to
// q = (b - a) * (1 / (2*pi)), computed in T with two correctly rounded operations (no contraction
// is possible), rounding halves towards zero. For validated input (|a|, |b| <= kPhaseLimit) |q| is
// at most 1.00001, so the result is -1, 0 or 1 and two comparisons decide it; other inputs (which
// validation rejects) still get a defined -1, 0 or 1, NaN gives 0. The wrapped gradient of the step
// is (b - a) - 2*pi*EdgeWrap(a, b); EdgeWrap(b, a) == -EdgeWrap(a, b) exactly.
template <class T>
FRESNEL_HD int EdgeWrap(T a, T b) {
  const T q = (b - a) * Consts<T>::kInvTwoPi;
  return static_cast<int>(q > T(0.5)) - static_cast<int>(q < T(-0.5));
}

// Charge of the plaquette with corners a=(y,x), b=(y,x+1), c=(y+1,x+1), d=(y+1,x): the circulation
// of the wrapped gradient around a->b->c->d->a divided by 2*pi. The raw differences telescope, so
// the circulation is -2*pi times the sum of the wrap counts; the charge is that sum negated. Values
// beyond +-1 (impossible for validated input) are clamped and counted by the caller.
FRESNEL_HD int ChargeFromWraps(int w_ab, int w_bc, int w_cd, int w_da) {
  return -(w_ab + w_bc + w_cd + w_da);
}
template <class T>
FRESNEL_HD int PlaquetteCharge(T a, T b, T c, T d) {
  return ChargeFromWraps(EdgeWrap(a, b), EdgeWrap(b, c), EdgeWrap(c, d), EdgeWrap(d, a));
}

// Index of pixel (y, x) in the frame-padded grid of (rows + 2) x (cols + 2); y in [-1, rows],
// x in [-1, cols]. Monotone in raster order, unique for image and frame pixels, < 2^31 by Limits.
FRESNEL_HD uint32_t PaddedId(int y, int x, int cols) {
  return static_cast<uint32_t>(y + 1) * static_cast<uint32_t>(cols + 2) +
         static_cast<uint32_t>(x + 1);
}
FRESNEL_HD int PaddedRow(uint32_t id, int cols) { return static_cast<int>(id / (cols + 2)) - 1; }
FRESNEL_HD int PaddedCol(uint32_t id, int cols) { return static_cast<int>(id % (cols + 2)) - 1; }

// Candidate keys compare as 64-bit unsigned integers; smaller is better.
//   high 32 bits: squared distance in half-pixel units (exact integers);
//   low 32 bits:  a residue's padded id (bit 31 clear), or kGroundBit | padded id of a masked or
//                 frame pixel. At equal distance a residue beats a ground pixel, and smaller ids
//                 win. For a fixed proposer this order equals the symmetric pair order
//                 (distance, min id, max id), which is what makes the globally smallest pair
//                 mutual (docs/unwrap.md).
// Residue q seen from residue p (plaquette centres): (2*dy)^2 + (2*dx)^2.
FRESNEL_HD uint64_t ResidueKey(int py, int px, int qy, int qx, int cols) {
  int64_t dy = 2 * static_cast<int64_t>(qy - py);
  int64_t dx = 2 * static_cast<int64_t>(qx - px);
  return (static_cast<uint64_t>(dy * dy + dx * dx) << 32) | PaddedId(qy, qx, cols);
}
// Ground pixel (y, x) (masked or frame) seen from plaquette p: centre (py+.5, px+.5) to (y, x).
FRESNEL_HD uint64_t GroundKey(int py, int px, int y, int x, int cols) {
  int64_t dy = 2 * static_cast<int64_t>(y - py) - 1;
  int64_t dx = 2 * static_cast<int64_t>(x - px) - 1;
  return (static_cast<uint64_t>(dy * dy + dx * dx) << 32) | kGroundBit | PaddedId(y, x, cols);
}
FRESNEL_HD bool KeyIsGround(uint64_t key) { return (key & kGroundBit) != 0; }
FRESNEL_HD uint32_t KeyId(uint64_t key) { return static_cast<uint32_t>(key) & ~kGroundBit; }

// The search box of radius r around plaquette (py, px) holds residues (plaquettes) with
// |qy - py| <= r and |qx - px| <= r, and ground pixels with y in [py - r, py + r + 1] and x in
// [px - r, px + r + 1] (the corners of those plaquettes), frame pixels included.
// The best frame pixel inside the box: on each side the nearest frame pixel is straight across
// (dx or dy = +-1 half pixels); kNoKey when the box does not reach the frame.
FRESNEL_HD uint64_t BestFrameKey(int py, int px, int r, int rows, int cols) {
  uint64_t best = kNoKey;
  auto take = [&best](uint64_t k) { best = k < best ? k : best; };
  if (py - r <= -1) take(GroundKey(py, px, -1, px, cols));
  if (px - r <= -1) take(GroundKey(py, px, py, -1, cols));
  if (px + r + 1 >= cols) take(GroundKey(py, px, py, cols, cols));
  if (py + r + 1 >= rows) take(GroundKey(py, px, rows, px, cols));
  return best;
}

// The radius at which every plaquette's box reaches the frame: min(rows / 2, cols / 2).
FRESNEL_HD int FinalRadius(int rows, int cols) {
  int a = rows / 2, b = cols / 2;
  return a < b ? a : b;
}

// The frame pixel a masked island with net charge is cut to, from its first pixel (y, x): the
// nearest of straight up, left, right, down; ties in that (padded id) order.
FRESNEL_HD void IslandFrameTarget(int y, int x, int rows, int cols, int* ty, int* tx) {
  int d_up = y + 1, d_left = x + 1, d_right = cols - x, d_down = rows - y;
  int best = d_up;
  *ty = -1;
  *tx = x;
  if (d_left < best) { best = d_left; *ty = y; *tx = -1; }
  if (d_right < best) { best = d_right; *ty = y; *tx = cols; }
  if (d_down < best) { *ty = rows; *tx = x; }
}

// Bresenham's line from (y0, x0) to (y1, x1), both ends included, 8-connected (so no 4-connected
// path crosses it). Calls plot(y, x) for the points inside the image only (targets on the frame lie
// outside). Returns the number of points plotted. The point sequence depends on the direction, so
// callers always draw a residue pair from the smaller padded id to the larger.
template <class Plot>
FRESNEL_HD int DrawLine(int y0, int x0, int y1, int x1, int rows, int cols, Plot&& plot) {
  int dx = x1 > x0 ? x1 - x0 : x0 - x1;
  int dy = y1 > y0 ? y0 - y1 : y1 - y0;  // -|dy|
  int sx = x0 < x1 ? 1 : -1;
  int sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  int n = 0;
  for (;;) {
    if (y0 >= 0 && y0 < rows && x0 >= 0 && x0 < cols) {
      plot(y0, x0);
      ++n;
    }
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
  return n;
}

// phase + 2*pi*k with two correctly rounded operations and no fused multiply-add, identical on the
// host and the device.
FRESNEL_HD float AddTurns(float phase, int k) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(phase, __fmul_rn(static_cast<float>(k), Consts<float>::kTwoPi));
#else
  volatile float turns = static_cast<float>(k) * Consts<float>::kTwoPi;
  return phase + turns;
#endif
}
FRESNEL_HD double AddTurns(double phase, int k) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(phase, __dmul_rn(static_cast<double>(k), Consts<double>::kTwoPi));
#else
  volatile double turns = static_cast<double>(k) * Consts<double>::kTwoPi;
  return phase + turns;
#endif
}

// A region's seed preference: larger wins. The high word orders the quality value (float32 bits
// made monotone; 0 without a quality map; 0xffffffff for the user's seed), the low word prefers the
// smaller raster index.
FRESNEL_HD uint32_t OrderedFloatBits(float f) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  __builtin_memcpy(&u, &f, sizeof u);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
FRESNEL_HD uint64_t SeedKey(uint32_t quality_bits, uint32_t index) {
  return (static_cast<uint64_t>(quality_bits) << 32) | (0xffffffffu - index);
}
FRESNEL_HD uint32_t SeedKeyIndex(uint64_t key) {
  return 0xffffffffu - static_cast<uint32_t>(key);
}

}  // namespace fresnel::unwrap::internal
