// Math shared bit-for-bit by the CPU emulation and the CUDA kernels of the fixed-point
// algorithms (TA / PA), plus the common pixel-coordinate convention. Compiles as host code and,
// under nvcc, as __host__ __device__ code.
//
// Fixed-point phase scheme (Blinder & Schelkens 2021, n = 32, k = 8):
//   s   = pitch / K                      lateral quantisation step (K = lateral_subdivision)
//   δq  = round(δ / s), εq = round(ε / s)
//   c   = round(2^32 · s² / (2λζ)) mod 2^32   depth factor, in units of π·2^(1−n) = 2π/2^32
//   m   = (u − W/2)·K − δq               column offset in units of s (likewise rows)
//   Φx  = c · m²  (mod 2^32)             φx = 2π·Φx / 2^32 exactly represents π(x−δ)²/(λζ)
//   bx  = round(Φx / 2^24) − 1 (mod 256) 8-bit phase, 2π/256 per unit (the −1: see Triangle)
//   by  = round((Φy + θ·2^32/2π) / 2^24)  (mod 256), the point phase θ folded in before rounding
//   b   = bx + by (mod 256)               per-pixel phase: byte overflow is the 2π wrap
//
// TA (triangle) : T(b) = |b − 127| ∈ [0, 128], mean 64. T − 64 is a triangle wave that is
//                 symmetric about b = 255 ≡ −1, i.e. T(b) − 64 ≈ A1·cos(2π(b + 1)/256); the −1
//                 stored in bx cancels that half-step (b + 1 ≈ the exact phase, since round()
//                 errors of bx and by are zero-mean) so T approximates cos φ without a phase
//                 bias. Sine: T(b − 64) − 64 ≈ A1·cos(φ − π/2) = A1·sin φ.
// PA (piecewise): P(b) = T + clip(T, 34, 94) ∈ [34, 222], mean 128 (the paper's d = 30 around
//                 64): slope 2 near the zero crossings, 1 near the extrema, a closer cos shape.
// The field is Σ_j a8_j · (V(b) − DC) · amax / (255 · A1), V = T or P, DC = 64 or 128, with
// A1 the fundamental Fourier amplitude of V (FundamentalAmplitude) and a8 = round(255·a/amax).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FRESNEL_HD __host__ __device__ __forceinline__
#else
#define FRESNEL_HD inline
#endif

namespace fresnel::hologram::internal {

// PA clip bounds and the DC offsets of the byte functions.
constexpr double kPi = 3.14159265358979323846;

constexpr int kPaClipLo = 34;
constexpr int kPaClipHi = 94;
constexpr int kTaDc = 64;
constexpr int kPaDc = 128;

// Offset of pixel index i from the optical axis, in pixels: i − n/2.
FRESNEL_HD int64_t AxisOffset(int64_t i, int64_t n) { return i - n / 2; }

// c · m² mod 2^32 (m may be negative or exceed 2^16; all arithmetic is modulo 2^32).
FRESNEL_HD uint32_t QuadraticPhase32(uint32_t c, int64_t m) {
  const uint32_t mm = static_cast<uint32_t>(static_cast<uint64_t>(m));
  return c * (mm * mm);
}

// round(phi / 2^24) mod 256.
FRESNEL_HD uint32_t RoundToPhaseByte(uint32_t phi) { return ((phi + (1u << 23)) >> 24) & 0xFFu; }
FRESNEL_HD uint32_t XPhaseByte(uint32_t phi) { return (RoundToPhaseByte(phi) - 1u) & 0xFFu; }
FRESNEL_HD uint32_t YPhaseByte(uint32_t phi) { return RoundToPhaseByte(phi); }

// The byte functions of TA and PA for phase byte b (0..255).
FRESNEL_HD int TriangleValue(uint32_t b) {
  const int t = static_cast<int>(b & 0xFFu) - 127;
  return t < 0 ? -t : t;
}
FRESNEL_HD int PiecewiseValue(uint32_t b) {
  const int t = TriangleValue(b);
  const int c = t < kPaClipLo ? kPaClipLo : (t > kPaClipHi ? kPaClipHi : t);
  return t + c;
}

}  // namespace fresnel::hologram::internal
