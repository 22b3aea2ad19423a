// CUDA kernels of the hologram area (float reference, fixed-point TA / PA, outputs, ASM). The
// tensor-core path has its own kernels in hologram_tensor.cu.
//
// Index conventions (hologram.h): pixel (u, v) = (column, row), x_u = (u − W/2)·p; field arrays
// are row-major [H][W] so pixel (u, v) lives at v·W + u.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hologram/hologram_math.h"

namespace fresnel::hologram::cuda {

using internal::AxisOffset;

// ---------------------------------------------------------------------------------------------
// Float reference (Blinder & Schelkens' baseline: one thread per pixel, __sincosf per point).
//
// Phase 1 (RefTablesKernel) reduces every per-axis phase to fixed-point turns in float64:
//   X[j][u] = {round(frac((x_u − δ_j)² · inv2lz_j) · 2^32), mask}      mask = 1.0f or 0.0f
//   Y[j][v] = {round(frac((y_v − ε_j)² · inv2lz_j + θ_j/2π) · 2^32), a_j · mask}
// so that the per-pixel phase Φ = X + Y (mod 2^32, an exact 2π wrap) only needs an integer add
// and a conversion of a value in [−2^31, 2^31) before __sincosf: fp32 never sees a large angle.
// Tables are point-major ([j][u], u contiguous) so that phase 1 writes and phase 2 stages them
// with coalesced 128-byte rows.
// ---------------------------------------------------------------------------------------------

constexpr int kRefBlock = 16;   // 16×16 threads, one pixel each
constexpr int kRefStage = 64;   // points staged in shared memory per __syncthreads

struct RefPoints {
  const double* x;
  const double* y;
  const double* inv2lz;
  const double* phase_turns;
  const float* amplitude;
  const int32_t* ulo;
  const int32_t* uhi;
  const int32_t* vlo;
  const int32_t* vhi;
};

__device__ __forceinline__ uint32_t TurnsToFixed(double t) {
  // t in [0, 1): round(t · 2^32) mod 2^32.
  const double f = t - floor(t);
  return static_cast<uint32_t>(static_cast<uint64_t>(__double2ll_rn(f * 4294967296.0)));
}

// One thread per (pixel index i, point j) of an [n_points][stride] table; i < n_pix are real
// pixels, the rest padding (computed, never read into the output). axis: 0 = x/columns,
// 1 = y/rows.
__global__ void RefTablesKernel(RefPoints pts, int64_t point0, int64_t n_points, int64_t n_pix,
                                int64_t stride, int axis, double pitch, uint2* table) {
  const int64_t total = n_points * stride;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t jj = e / stride;
    const int64_t i = e - jj * stride;
    const int64_t j = point0 + jj;
    const double coord = static_cast<double>(AxisOffset(i, n_pix)) * pitch;
    const double d = coord - (axis == 0 ? pts.x[j] : pts.y[j]);
    double t = d * d * pts.inv2lz[j];
    const int32_t lo = axis == 0 ? pts.ulo[j] : pts.vlo[j];
    const int32_t hi = axis == 0 ? pts.uhi[j] : pts.vhi[j];
    const bool valid = i < n_pix && i >= lo && i <= hi;
    float weight = valid ? 1.0f : 0.0f;
    if (axis == 1) {
      t = (t - floor(t)) + pts.phase_turns[j];
      weight *= pts.amplitude[j];
    }
    table[e] = make_uint2(TurnsToFixed(t), __float_as_uint(weight));
  }
}

// Phase 2. Block (bx, by) covers pixels [16bx, 16bx+16) × [16by, 16by+16); thread (tx, ty)
// owns pixel (16bx+tx, 16by+ty) and loops over the batch's points, kRefStage at a time. Shared
// memory holds sx[j][tx] and sy[j][ty]: a warp (16 columns × 2 rows) reads 16 consecutive
// uint2 of sx (conflict-free) and 2 broadcast words of sy. kMasked multiplies by the column
// mask (the row mask is folded into the amplitude); without clipping it is skipped.
template <bool kMasked>
__global__ void __launch_bounds__(kRefBlock * kRefBlock)
    RefPixelsKernel(const uint2* __restrict__ xtab, const uint2* __restrict__ ytab,
                    int64_t n_points, int64_t xstride, int64_t ystride, int width, int height,
                    bool accumulate, float2* __restrict__ field) {
  __shared__ uint2 sx[kRefStage][kRefBlock];
  __shared__ uint2 sy[kRefStage][kRefBlock];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kRefBlock + tx;
  const int u0 = blockIdx.x * kRefBlock, v0 = blockIdx.y * kRefBlock;
  float re = 0.f, im = 0.f;
  // 2π / 2^32: converts a signed fixed-point turn count to radians in [−π, π).
  const float kTurnToRad = 1.4629180792671596e-09f;
  for (int64_t j0 = 0; j0 < n_points; j0 += kRefStage) {
    const int nj = static_cast<int>(n_points - j0 < kRefStage ? n_points - j0 : kRefStage);
    __syncthreads();
    for (int e = tid; e < kRefStage * kRefBlock; e += kRefBlock * kRefBlock) {
      const int j = e / kRefBlock, c = e % kRefBlock;
      if (j < nj) {
        sx[j][c] = xtab[(j0 + j) * xstride + u0 + c];
        sy[j][c] = ytab[(j0 + j) * ystride + v0 + c];
      }
    }
    __syncthreads();
#pragma unroll 8
    for (int j = 0; j < nj; ++j) {
      const uint2 ex = sx[j][tx];
      const uint2 ey = sy[j][ty];
      const float angle = static_cast<float>(static_cast<int32_t>(ex.x + ey.x)) * kTurnToRad;
      float s, c;
      __sincosf(angle, &s, &c);
      float a = __uint_as_float(ey.y);
      if (kMasked) a *= __uint_as_float(ex.y);
      re = fmaf(a, c, re);
      im = fmaf(a, s, im);
    }
  }
  const int u = u0 + tx, v = v0 + ty;
  if (u < width && v < height) {
    float2* out = &field[static_cast<int64_t>(v) * width + u];
    if (accumulate) {
      const float2 old = *out;
      re += old.x;
      im += old.y;
    }
    *out = make_float2(re, im);
  }
}

// ---------------------------------------------------------------------------------------------
// Fixed-point TA / PA (hologram_math.h has the scheme).
//
// Phase 1 (FixedTablesKernel) writes, for every pixel index i (column or row) and point quad q
// (points 4q..4q+3), one 32-bit word of four phase bytes, byte e for point 4q+e:
//   X[i][q] = XPhaseByte(c·m²),  Y[i][q] = YPhaseByte(c·m² + θ),  m = (i − n/2)·K − δq
// and, when clipping, masks MX/MY (byte 0xFF inside the point's alias-free range, else 0).
// Layout [i][q] (quads contiguous, padded stride) so that phase 2 stages a tile's rows with
// 8-byte loads; (M + N)·Q words in all, 4 points per word as in the paper.
//
// Phase 2 (FixedPixelsKernel): 16×16 thread blocks; thread (tx, ty) owns the 4×2 pixels
// u = u0 + tx + 16i (i < 4), v = v0 + ty + 16k (k < 2) of a 64×32 tile, so a warp (16 tx × 2 ty)
// reads 16 consecutive column rows of the staged X tile and 2 broadcast Y rows. Per pixel and
// quad: phase sum with byte wrap (the 2π wrap), T = |b − 127| per byte, PA's clip, and
// __dp4a with the packed 8-bit amplitudes; the sine part uses Y − 64 (π/2). Unsigned dp4a sums
// run modulo 2^32; every kFlushQuads quads the DC (64 or 128 per unit amplitude, itself summed
// with dp4a) is subtracted, which leaves the exact signed partial sum (|sum| < 2^31 by the bound
// in the comment at kFlushQuads), and it is added to 64-bit totals: the result is exact and
// independent of batching, so the CPU emulation matches it bit for bit.
// ---------------------------------------------------------------------------------------------

constexpr int kFixBlock = 16;
constexpr int kFixRu = 4;                     // columns per thread
constexpr int kFixRv = 2;                     // rows per thread
constexpr int kFixTileU = kFixBlock * kFixRu;  // 64
constexpr int kFixTileV = kFixBlock * kFixRv;  // 32
constexpr int kFixStage = 16;                 // quads staged per __syncthreads
// Shared row stride in words: 18 makes the 8-byte reads of 16 consecutive rows hit 32
// distinct banks (18·tx mod 32 is distinct and even for tx < 16).
constexpr int kFixStride = kFixStage + 2;
// |Σ a8·(V − DC)| over F quads ≤ 4·F·255·94 (PA's largest |V − DC|) < 2^31 needs F < 22,397.
constexpr int kFlushQuads = 4096;

struct FixedPoints {
  const int64_t* xq;
  const int64_t* yq;
  const uint32_t* c;
  const uint32_t* phase0;
  const int32_t* ulo;
  const int32_t* uhi;
  const int32_t* vlo;
  const int32_t* vhi;
  int64_t count;  // points in the whole cloud (beyond: padding)
};

// One thread per (i, q). axis 0: columns (X), 1: rows (Y).
__global__ void FixedTablesKernel(FixedPoints pts, int64_t quad0, int64_t n_quads, int64_t n_pix,
                                  int64_t n_rows, int64_t stride, int subdivision, int axis,
                                  bool masks, uint32_t* __restrict__ table,
                                  uint32_t* __restrict__ mask) {
  const int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t i = blockIdx.y;
  if (q >= n_quads || i >= n_rows) return;
  uint32_t word = 0, mword = 0;
  const int64_t axis_offset = AxisOffset(i, n_pix) * subdivision;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t j = (quad0 + q) * 4 + e;
    if (j >= pts.count) continue;
    const int64_t m = axis_offset - (axis == 0 ? pts.xq[j] : pts.yq[j]);
    const uint32_t phi = internal::QuadraticPhase32(pts.c[j], m);
    const uint32_t b = axis == 0 ? internal::XPhaseByte(phi)
                                 : internal::YPhaseByte(phi + pts.phase0[j]);
    word |= b << (8 * e);
    const int32_t lo = axis == 0 ? pts.ulo[j] : pts.vlo[j];
    const int32_t hi = axis == 0 ? pts.uhi[j] : pts.vhi[j];
    if (i < n_pix && i >= lo && i <= hi) mword |= 0xFFu << (8 * e);
  }
  table[i * stride + q] = word;
  if (masks) mask[i * stride + q] = mword;
}

// The paper's instruction sequence (per pixel and quad). On sm_90 __vabsdiffu4 is one native
// VABSDIFF4; __vadd4 is emulated (3 ops: add the low 7 bits, fix the top bits), __vminu4 and
// __vmaxu4 are emulated with several ops each.
struct PaperOps {
  // Shared words: lo = the raw phase bytes; hi unused.
  __device__ static uint32_t Triangle(uint32_t x, uint32_t /*xh*/, uint32_t y, uint32_t /*yh*/) {
    return __vabsdiffu4(__vadd4(x, y), 0x7F7F7F7Fu);
  }
  __device__ static uint32_t AddClip(uint32_t t) {
    return __vadd4(t, __vminu4(__vmaxu4(t, 0x22222222u), 0x5E5E5E5Eu));
  }
};

// The same functions, bit for bit, in fewer instructions. The staged words are split once per
// tile into the low 7 bits of each byte (lo) and the top bits (hi), so the byte-wrapping sum is
//   b = (xlo + ylo) ^ xhi ^ yhi        (an add and one 3-input LOP3; no carry crosses a byte)
// and T = VABSDIFF4(b, 0x7F7F7F7F) as in the paper. PA's clip uses T ≤ 128 and
//   clip(T, 34, 94) = (|T − 34| − |T − 94| + 128) / 2,
// whose numerator lies in [68, 188] (one IADD3 without inter-byte carries) and is even (the
// shift needs no mask): two VABSDIFF4, IADD3, SHF and the final add instead of two emulated
// byte min/max.
struct FastOps {
  __device__ static uint32_t Triangle(uint32_t xlo, uint32_t xhi, uint32_t ylo, uint32_t yhi) {
    return __vabsdiffu4((xlo + ylo) ^ xhi ^ yhi, 0x7F7F7F7Fu);
  }
  __device__ static uint32_t AddClip(uint32_t t) {
    const uint32_t twice = __vabsdiffu4(t, 0x22222222u) + 0x80808080u - __vabsdiffu4(t, 0x5E5E5E5Eu);
    return t + (twice >> 1);
  }
};

template <bool kPiecewise, bool kMasked, class Ops, bool kSplit>
__global__ void __launch_bounds__(kFixBlock * kFixBlock)
    FixedPixelsKernel(const uint32_t* __restrict__ xtab, const uint32_t* __restrict__ ytab,
                      const uint32_t* __restrict__ xmask, const uint32_t* __restrict__ ymask,
                      const uint32_t* __restrict__ amp, int64_t n_quads, int64_t stride, int width,
                      int height, bool accumulate, long long* __restrict__ total_re,
                      long long* __restrict__ total_im) {
  // Columns: lo/hi split of X; rows: lo/hi of Y and of Y − 64 (sine). Paper ops keep raw words
  // in the lo arrays.
  __shared__ __align__(16) uint32_t sxl[kFixTileU][kFixStride];
  __shared__ __align__(16) uint32_t sxh[kSplit ? kFixTileU : 1][kFixStride];
  __shared__ __align__(16) uint32_t syl[kFixTileV][kFixStride];
  __shared__ __align__(16) uint32_t syh[kSplit ? kFixTileV : 1][kFixStride];
  __shared__ __align__(16) uint32_t ssl[kFixTileV][kFixStride];
  __shared__ __align__(16) uint32_t ssh[kSplit ? kFixTileV : 1][kFixStride];
  __shared__ __align__(16) uint32_t smx[kMasked ? kFixTileU : 1][kFixStride];
  __shared__ __align__(16) uint32_t smy[kMasked ? kFixTileV : 1][kFixStride];
  __shared__ __align__(16) uint32_t sa[kFixStage];

  constexpr uint32_t kDcWord = kPiecewise ? 0x80808080u : 0x40404040u;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * kFixBlock + tx;
  const int64_t u0 = static_cast<int64_t>(blockIdx.x) * kFixTileU;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * kFixTileV;

  uint32_t acc_c[kFixRv][kFixRu], acc_s[kFixRv][kFixRu];
  uint32_t dc[kMasked ? kFixRv : 1][kMasked ? kFixRu : 1];
  long long tot_c[kFixRv][kFixRu], tot_s[kFixRv][kFixRu];
#pragma unroll
  for (int k = 0; k < kFixRv; ++k) {
#pragma unroll
    for (int i = 0; i < kFixRu; ++i) {
      acc_c[k][i] = acc_s[k][i] = 0;
      tot_c[k][i] = tot_s[k][i] = 0;
    }
  }
#pragma unroll
  for (int k = 0; k < (kMasked ? kFixRv : 1); ++k) {
#pragma unroll
    for (int i = 0; i < (kMasked ? kFixRu : 1); ++i) dc[k][i] = 0;
  }

  auto flush = [&]() {
#pragma unroll
    for (int k = 0; k < kFixRv; ++k) {
#pragma unroll
      for (int i = 0; i < kFixRu; ++i) {
        const uint32_t d = kMasked ? dc[k][i] : dc[0][0];
        tot_c[k][i] += static_cast<int32_t>(acc_c[k][i] - d);
        tot_s[k][i] += static_cast<int32_t>(acc_s[k][i] - d);
        acc_c[k][i] = acc_s[k][i] = 0;
      }
    }
#pragma unroll
    for (int k = 0; k < (kMasked ? kFixRv : 1); ++k) {
#pragma unroll
      for (int i = 0; i < (kMasked ? kFixRu : 1); ++i) dc[k][i] = 0;
    }
  };

  int since_flush = 0;
  for (int64_t q0 = 0; q0 < n_quads; q0 += kFixStage) {
    __syncthreads();
    // Stage the tile: X rows (64 × 16 words = 512 uint2, two per thread), Y rows (32 × 16 =
    // 256 uint2, one per thread), masks likewise, amplitudes (8 uint2).
    for (int e = tid; e < kFixTileU * kFixStage / 2; e += kFixBlock * kFixBlock) {
      const int r = e / (kFixStage / 2), c = 2 * (e % (kFixStage / 2));
      const uint2 w = *reinterpret_cast<const uint2*>(&xtab[(u0 + r) * stride + q0 + c]);
      if (kSplit) {
        *reinterpret_cast<uint2*>(&sxl[r][c]) = make_uint2(w.x & 0x7F7F7F7Fu, w.y & 0x7F7F7F7Fu);
        *reinterpret_cast<uint2*>(&sxh[r][c]) = make_uint2(w.x & 0x80808080u, w.y & 0x80808080u);
      } else {
        *reinterpret_cast<uint2*>(&sxl[r][c]) = w;
      }
      if (kMasked) {
        *reinterpret_cast<uint2*>(&smx[r][c]) =
            *reinterpret_cast<const uint2*>(&xmask[(u0 + r) * stride + q0 + c]);
      }
    }
    for (int e = tid; e < kFixTileV * kFixStage / 2; e += kFixBlock * kFixBlock) {
      const int r = e / (kFixStage / 2), c = 2 * (e % (kFixStage / 2));
      const uint2 w = *reinterpret_cast<const uint2*>(&ytab[(v0 + r) * stride + q0 + c]);
      const uint2 ws = make_uint2(__vsub4(w.x, 0x40404040u), __vsub4(w.y, 0x40404040u));
      if (kSplit) {
        *reinterpret_cast<uint2*>(&syl[r][c]) = make_uint2(w.x & 0x7F7F7F7Fu, w.y & 0x7F7F7F7Fu);
        *reinterpret_cast<uint2*>(&syh[r][c]) = make_uint2(w.x & 0x80808080u, w.y & 0x80808080u);
        *reinterpret_cast<uint2*>(&ssl[r][c]) = make_uint2(ws.x & 0x7F7F7F7Fu, ws.y & 0x7F7F7F7Fu);
        *reinterpret_cast<uint2*>(&ssh[r][c]) = make_uint2(ws.x & 0x80808080u, ws.y & 0x80808080u);
      } else {
        *reinterpret_cast<uint2*>(&syl[r][c]) = w;
        *reinterpret_cast<uint2*>(&ssl[r][c]) = ws;
      }
      if (kMasked) {
        *reinterpret_cast<uint2*>(&smy[r][c]) =
            *reinterpret_cast<const uint2*>(&ymask[(v0 + r) * stride + q0 + c]);
      }
    }
    if (tid < kFixStage) sa[tid] = amp[q0 + tid];
    __syncthreads();

#pragma unroll 2
    for (int qq = 0; qq < kFixStage; ++qq) {
      const uint32_t a = sa[qq];
      uint32_t xl[kFixRu], xh[kFixRu], mx[kFixRu];
      uint32_t yl[kFixRv], yh[kFixRv], sl[kFixRv], sh[kFixRv], my[kFixRv];
#pragma unroll
      for (int i = 0; i < kFixRu; ++i) {
        xl[i] = sxl[tx + kFixBlock * i][qq];
        xh[i] = kSplit ? sxh[tx + kFixBlock * i][qq] : 0u;
        mx[i] = kMasked ? smx[tx + kFixBlock * i][qq] : 0u;
      }
#pragma unroll
      for (int k = 0; k < kFixRv; ++k) {
        yl[k] = syl[ty + kFixBlock * k][qq];
        sl[k] = ssl[ty + kFixBlock * k][qq];
        yh[k] = kSplit ? syh[ty + kFixBlock * k][qq] : 0u;
        sh[k] = kSplit ? ssh[ty + kFixBlock * k][qq] : 0u;
        my[k] = kMasked ? smy[ty + kFixBlock * k][qq] : 0u;
      }
      if (!kMasked) dc[0][0] = __dp4a(kDcWord, a, dc[0][0]);
#pragma unroll
      for (int k = 0; k < kFixRv; ++k) {
#pragma unroll
        for (int i = 0; i < kFixRu; ++i) {
          uint32_t aa = a;
          if (kMasked) {
            aa = a & mx[i] & my[k];
            dc[k][i] = __dp4a(kDcWord, aa, dc[k][i]);
          }
          uint32_t tc = Ops::Triangle(xl[i], xh[i], yl[k], yh[k]);
          uint32_t ts = Ops::Triangle(xl[i], xh[i], sl[k], sh[k]);
          if (kPiecewise) {
            tc = Ops::AddClip(tc);
            ts = Ops::AddClip(ts);
          }
          acc_c[k][i] = __dp4a(tc, aa, acc_c[k][i]);
          acc_s[k][i] = __dp4a(ts, aa, acc_s[k][i]);
        }
      }
    }
    since_flush += kFixStage;
    if (since_flush >= kFlushQuads) {
      flush();
      since_flush = 0;
    }
  }
  flush();

#pragma unroll
  for (int k = 0; k < kFixRv; ++k) {
#pragma unroll
    for (int i = 0; i < kFixRu; ++i) {
      const int64_t u = u0 + tx + kFixBlock * i, v = v0 + ty + kFixBlock * k;
      if (u < width && v < height) {
        const int64_t o = v * width + u;
        total_re[o] = (accumulate ? total_re[o] : 0) + tot_c[k][i];
        total_im[o] = (accumulate ? total_im[o] : 0) + tot_s[k][i];
      }
    }
  }
}

// field = (float)(total · scale).
__global__ void FixedFinishKernel(const long long* __restrict__ re, const long long* __restrict__ im,
                                  int64_t n, double scale, float2* __restrict__ field) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  field[i] = make_float2(static_cast<float>(static_cast<double>(re[i]) * scale),
                         static_cast<float>(static_cast<double>(im[i]) * scale));
}

// ---------------------------------------------------------------------------------------------
// Outputs and ASM.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint8_t PhaseByteDevice(float re, float im) {
  const double k = rint(atan2(static_cast<double>(im), static_cast<double>(re)) *
                        (128.0 / internal::kPi));
  return static_cast<uint8_t>(static_cast<long long>(k) & 0xFF);
}

__global__ void OutputsKernel(const float2* __restrict__ field, int64_t n,
                              uint8_t* __restrict__ phase, float* __restrict__ amplitude) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float2 f = field[i];
  if (phase != nullptr) phase[i] = PhaseByteDevice(f.x, f.y);
  if (amplitude != nullptr) amplitude[i] = hypotf(f.x, f.y);
}

// Source of the ASM: the field itself or exp(i·2π·k/256) of its phase byte.
__global__ void AsmSourceKernel(const float2* __restrict__ field, int64_t n, bool phase_only,
                                float2* __restrict__ out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float2 f = field[i];
  if (!phase_only) {
    out[i] = f;
    return;
  }
  const int k = PhaseByteDevice(f.x, f.y);
  double s, c;
  sincospi(k / 128.0, &s, &c);
  out[i] = make_float2(static_cast<float>(c), static_cast<float>(s));
}

// Multiplies the spectrum (cuFFT order) by the transfer function (internal::AsmPhase) and by
// 1/(W·H) for the unnormalised inverse transform.
__global__ void AsmTransferKernel(float2* __restrict__ spectrum, int64_t width, int64_t height,
                                  double pitch, double wavelength, double depth) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= width * height) return;
  const int64_t v = i / width, u = i - v * width;
  const int64_t ku = u < (width + 1) / 2 ? u : u - width;
  const int64_t kv = v < (height + 1) / 2 ? v : v - height;
  const double fx = static_cast<double>(ku) / (static_cast<double>(width) * pitch);
  const double fy = static_cast<double>(kv) / (static_cast<double>(height) * pitch);
  const double inv_l = 1.0 / wavelength;
  const double f2 = fx * fx + fy * fy;
  const double r = inv_l * inv_l - f2;
  const double norm = 1.0 / (static_cast<double>(width) * static_cast<double>(height));
  if (r < 0) {
    spectrum[i] = make_float2(0.f, 0.f);
    return;
  }
  const double phase = 2.0 * internal::kPi * (-depth) * (-f2 / (inv_l + sqrt(r)));
  double s, c;
  sincos(phase, &s, &c);
  const float2 a = spectrum[i];
  spectrum[i] = make_float2(static_cast<float>((a.x * c - a.y * s) * norm),
                            static_cast<float>((a.x * s + a.y * c) * norm));
}

// |U| into `magnitude` and its maximum (as float bits; non-negative floats order like their
// bits) into *max_bits.
__global__ void MagnitudeMaxKernel(const float2* __restrict__ u, int64_t n,
                                   float* __restrict__ magnitude, unsigned int* __restrict__ max_bits) {
  __shared__ float block_max[256];
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  float m = 0.f;
  if (i < n) {
    const float2 a = u[i];
    m = hypotf(a.x, a.y);
    magnitude[i] = m;
  }
  block_max[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) block_max[threadIdx.x] = fmaxf(block_max[threadIdx.x], block_max[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicMax(max_bits, __float_as_uint(block_max[0]));
}

__global__ void QuantiseKernel(const float* __restrict__ magnitude, int64_t n,
                               const unsigned int* __restrict__ max_bits, uint8_t* __restrict__ out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float scale = __uint_as_float(*max_bits);
  const float q = scale > 0.f ? rintf(255.f * magnitude[i] / scale) : 0.f;
  out[i] = static_cast<uint8_t>(fminf(fmaxf(q, 0.f), 255.f));
}

}  // namespace fresnel::hologram::cuda
