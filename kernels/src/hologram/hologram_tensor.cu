// Tensor-core holograms: H = X · diag(a) · Yᵀ as three real batched GEMMs on cuBLASLt.
//
// With e^{iφx} = cx + i·sx (columns) and a·e^{iψ} = a·(cy + i·sy) (rows, ψ including the
// point phase θ), Gauss's three-multiplication form of the complex product is
//   S1 = Σ_j (cx + sx) · a·cy,   S2 = Σ_j cx · a·(sy − cy),   S3 = Σ_j sx · a·(cy + sy)
//   Re H = S1 − S3,              Im H = S1 + S2
// i.e. 6·M·N·K real multiply-adds instead of 8 for four GEMMs (or a stacked real/imag GEMM).
// Every operand is a sinusoid of amplitude ≤ 1 after scaling: cx + sx = √2·cos(φx − π/4),
// (sy − cy) = √2·sin(ψ − π/4), (cy + sy) = √2·cos(ψ − π/4); we store
//   X1 = qs·cos(φx − π/4), X2 = qs·cx, X3 = qs·sx
//   Y1 = qs·B·cy, Y2 = qs·B·sin(ψ − π/4), Y3 = qs·B·cos(ψ − π/4)   (B = a / bmax)
// with qs = 127 for int8 (the paper's 8-bit cos/sin bytes, int32 accumulation) and 1 for
// fp16 / bf16 / tf32, so H = σ·(S1 − S3, S1 + S2) with σ = √2 · amax · bmax / qs².
//
// Merging (tensor_grouping): points with equal (x, z) share the column function, so
// H = Σ_g X_g · (Σ_{j∈g} a_j Y_j)ᵀ and the inner dimension shrinks from points to groups. The
// group sums are formed in fp32 (TensorGroupSumKernel), their largest factor bmax measured on
// the device, and then quantised. Without merging, B = a/amax and bmax = 1.
//
// Layouts: X_f is [M][K] and Y_f is [N][K] (K contiguous), i.e. column-major K×M and K×N, so
// cuBLASLt computes C_f = op(A)·op(B) with A = X_f (transposed) and B = Y_f: the "TN" form that
// int8 IMMA requires; C_f is column-major M×N = row-major [N][M], pixel (u, v) at u + v·M. The
// three products are one strided batched call.
#include <cublasLt.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "hologram/hologram_cuda_util.cuh"

namespace fresnel::hologram::cuda {
namespace {

using internal::AxisOffset;
using internal::PreparedPoints;

// Inner-dimension chunk: int32 sums of ≤ 127² per term stay exact for K ≤ 131,072
// (127² · 2^17 < 2^31).
constexpr int64_t kMaxChunk = int64_t{1} << 17;
constexpr int64_t kKAlign = 256;
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
constexpr float kInvSqrt2 = 0.70710678118654752f;

// Phase of one point along one axis in fixed-point turns: T(m) = a·m² + b·m + c (mod 2^64,
// units of 2^-64 turn), m = i − n/2 the pixel offset from the axis, so that T(m)/2^64 =
// frac(((m·p − δ)² · inv2lz) + θ/2π) with a = p²·inv2lz, b = −2pδ·inv2lz, c = δ²·inv2lz (+ θ/2π
// on the row side) reduced mod 1 on the host in double. Along a run of pixels
//   T(m + 1) = T(m) + D(m),  D(m) = a(2m + 1) + b,  D(m + 1) = D(m) + 2a
// (exact modulo 2^64), so the build kernels need two 64-bit adds per element instead of
// float64 arithmetic.
struct AxisPoly {
  uint64_t a, b, c;
};

struct Members {
  const double* y;
  const double* inv2lz;
  const double* phase_turns;
  const float* amp;  // a / amax
  const int32_t* lo;
  const int32_t* hi;
  const int64_t* starts;  // group offsets
};

// sin/cos of 2π·t after reducing t to [−0.5, 0.5) in float64.
__device__ __forceinline__ void SinCosTurns(double t, float* s, float* c) {
  t -= floor(t);
  if (t >= 0.5) t -= 1.0;
  __sincosf(6.2831853071795865f * static_cast<float>(t), s, c);
}

// sin/cos of the fixed-point turn count T: its top 23 bits (centred by the xor) become the
// mantissa of a float in [1, 2), i.e. t ∈ [−0.5, 0.5) after subtracting 1.5 — no conversion
// instruction.
__device__ __forceinline__ void SinCosFixed(uint64_t t, float* s, float* c) {
  const uint32_t hi = static_cast<uint32_t>(t >> 32);
  const float f = __uint_as_float(0x3F800000u | ((hi ^ 0x80000000u) >> 9)) - 1.5f;
  __sincosf(6.2831853071795865f * f, s, c);
}

// round(v · qs) as a byte: adding 1.5·2^23 leaves the rounded integer (two's complement) in the
// low mantissa bits (|v · qs| ≤ 127.5 here).
__device__ __forceinline__ uint32_t QuantiseByte(float v, float qs) {
  return __float_as_uint(fmaf(v, qs, 12582912.0f));
}
__device__ __forceinline__ void StoreFour(int8_t* dst, const float (&v)[4], float qs) {
  const uint32_t lo = __byte_perm(QuantiseByte(v[0], qs), QuantiseByte(v[1], qs), 0x0040);
  const uint32_t hi = __byte_perm(QuantiseByte(v[2], qs), QuantiseByte(v[3], qs), 0x0040);
  *reinterpret_cast<uint32_t*>(dst) = __byte_perm(lo, hi, 0x5410);
}
__device__ __forceinline__ void StoreFour(__half* dst, const float (&v)[4], float qs) {
  __half2 h[2] = {__floats2half2_rn(v[0] * qs, v[1] * qs), __floats2half2_rn(v[2] * qs, v[3] * qs)};
  *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(h);
}
__device__ __forceinline__ void StoreFour(__nv_bfloat16* dst, const float (&v)[4], float qs) {
  __nv_bfloat162 h[2] = {__floats2bfloat162_rn(v[0] * qs, v[1] * qs),
                         __floats2bfloat162_rn(v[2] * qs, v[3] * qs)};
  *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(h);
}
// tf32 operands are rounded to nearest here (cvt.rna) rather than left to the tensor cores,
// which would drop the low mantissa bits.
__device__ __forceinline__ float RoundTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}
__device__ __forceinline__ void StoreFour(float* dst, const float (&v)[4], float qs) {
  *reinterpret_cast<float4*>(dst) = make_float4(RoundTf32(v[0] * qs), RoundTf32(v[1] * qs),
                                                RoundTf32(v[2] * qs), RoundTf32(v[3] * qs));
}

// frac(v) · 2^64 as an unsigned fixed-point turn count (host and device give the same bits:
// every step is one correctly rounded or exact operation).
__host__ __device__ __forceinline__ uint64_t TurnsFixed64(double v) {
  const double f = v - floor(v);
  const double r = f * 18446744073709551616.0;  // exact: a power of two
  return r >= 18446744073709551616.0 ? 0 : static_cast<uint64_t>(r);
}

// The AxisPoly of coordinate `coord` along an axis of pitch p (see AxisPoly). Double precision is
// ample: the largest term, c = δ²/(2λζ) + θ/2π, is at most a few thousand turns, so its fraction
// keeps ≥ 40 bits (1e-12 turn), and a = p²/(2λζ) < 1 is exact to 2^-53 relative, i.e. < 1e-12 turn
// after m² ≤ 2^24; the tables resolve 2^-12 turn (int8) or ~2^-23 (sincos). Built on the device
// (TensorPolyKernel); the explicit round-to-nearest products keep nvcc from contracting them into
// FMAs, so the bits are those of the same expression evaluated on the host.
__device__ __forceinline__ AxisPoly MakePoly(double coord, double inv2lz, double pitch,
                                             double phase_turns) {
  return AxisPoly{TurnsFixed64(__dmul_rn(__dmul_rn(pitch, pitch), inv2lz)),
                  TurnsFixed64(__dmul_rn(__dmul_rn(-2.0 * pitch, coord), inv2lz)),
                  TurnsFixed64(__dadd_rn(__dmul_rn(__dmul_rn(coord, coord), inv2lz), phase_turns))};
}

// The uploaded per-point arrays (PreparedPoints, cloud order).
struct PointArrays {
  const double* x;
  const double* y;
  const double* inv2lz;
  const double* phase_turns;
  const double* amplitude;
  const int32_t* ulo;
  const int32_t* uhi;
  const int32_t* vlo;
  const int32_t* vhi;
};

// Per-column tables from the point arrays, one thread per column i: point j = index[i] (index
// null: j = i). kRows: the row polynomial (with the point phase) and B = a / amax; else the
// column polynomial and, when lo_out is set, the point's column range gathered.
template <bool kRows>
__global__ void TensorPolyKernel(PointArrays pts, const int32_t* __restrict__ index, int64_t count,
                                 double pitch, double amax, AxisPoly* __restrict__ poly,
                                 int32_t* __restrict__ lo_out, int32_t* __restrict__ hi_out,
                                 float* __restrict__ amp_out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = index != nullptr ? index[i] : i;
    if (kRows) {
      poly[i] = MakePoly(pts.y[j], pts.inv2lz[j], pitch, pts.phase_turns[j]);
      amp_out[i] = amax > 0 ? __double2float_rn(__ddiv_rn(pts.amplitude[j], amax)) : 0.f;
    } else {
      poly[i] = MakePoly(pts.x[j], pts.inv2lz[j], pitch, 0.0);
      if (lo_out != nullptr) {
        lo_out[i] = pts.ulo[j];
        hi_out[i] = pts.uhi[j];
      }
    }
  }
}

// Merged mode: the members' data in group order (member i is point order[i]) for
// TensorGroupSumKernel.
__global__ void TensorGatherMembersKernel(PointArrays pts, const int32_t* __restrict__ order,
                                          int64_t n, double amax, double* __restrict__ y,
                                          double* __restrict__ inv2lz,
                                          double* __restrict__ phase_turns,
                                          float* __restrict__ amp, int32_t* __restrict__ lo,
                                          int32_t* __restrict__ hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t j = order[i];
    y[i] = pts.y[j];
    inv2lz[i] = pts.inv2lz[j];
    phase_turns[i] = pts.phase_turns[j];
    amp[i] = amax > 0 ? __double2float_rn(__ddiv_rn(pts.amplitude[j], amax)) : 0.f;
    lo[i] = pts.vlo[j];
    hi[i] = pts.vhi[j];
  }
}

constexpr int kBuildThreads = 128;  // along k: 512 columns per block
constexpr int kBuildRun = 16;       // pixel rows (u for X, v for Y) per thread

// Operand planes for columns col0 + k of the chunk, [3][rows_pad][kc]. Thread (x, y) owns four
// consecutive columns k4..k4+3 and kBuildRun consecutive pixel indices i; per i it writes one
// 4-element vector per plane, so a warp stores 128 consecutive k (coalesced) of each plane.
//   kRows = false (X): X1 = cos(φ − π/4) = (c + s)/√2, X2 = c, X3 = s
//   kRows = true  (Y): Y1 = B·c, Y2 = B·(s − c)/√2, Y3 = B·(c + s)/√2, B = amp (a / amax)
// Pixels outside a column's alias-free range [lo, hi], padding pixels (i ≥ n_pix) and padding
// columns (k ≥ ncols) are 0.
template <class T, bool kRows>
__global__ void __launch_bounds__(kBuildThreads)
    TensorBuildKernel(const AxisPoly* __restrict__ poly, const int32_t* __restrict__ lo,
                      const int32_t* __restrict__ hi, const float* __restrict__ amp, int64_t col0,
                      int64_t ncols, int64_t kc, int64_t n_pix, int64_t rows_pad, float qs,
                      T* __restrict__ out) {
  const int64_t k4 = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 4;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kBuildRun;
  if (k4 >= kc) return;
  uint64_t t[4], d[4], a2[4];
  int32_t l[4], h[4];
  float w[4];
  const int64_t m0 = AxisOffset(i0, n_pix);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t k = k4 + e;
    if (k < ncols) {
      const AxisPoly q = poly[col0 + k];
      const uint64_t mm = static_cast<uint64_t>(m0);
      t[e] = q.a * (mm * mm) + q.b * mm + q.c;
      d[e] = q.a * (2 * mm + 1) + q.b;
      a2[e] = 2 * q.a;
      l[e] = lo[col0 + k];
      h[e] = hi[col0 + k];
      w[e] = kRows ? amp[col0 + k] : 1.f;
    } else {
      t[e] = d[e] = a2[e] = 0;
      l[e] = 1;
      h[e] = 0;
      w[e] = 0.f;
    }
  }
  const int64_t plane = rows_pad * kc;
  for (int r = 0; r < kBuildRun; ++r) {
    const int64_t i = i0 + r;
    if (i >= rows_pad) break;
    float v1[4], v2[4], v3[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool on = i < n_pix && i >= l[e] && i <= h[e];
      float s, c;
      SinCosFixed(t[e], &s, &c);
      t[e] += d[e];
      d[e] += a2[e];
      if (kRows) {
        const float b = on ? w[e] : 0.f;
        v1[e] = b * c;
        v2[e] = b * (s - c) * kInvSqrt2;
        v3[e] = b * (c + s) * kInvSqrt2;
      } else {
        v1[e] = on ? (c + s) * kInvSqrt2 : 0.f;
        v2[e] = on ? c : 0.f;
        v3[e] = on ? s : 0.f;
      }
    }
    const int64_t o = i * kc + k4;
    StoreFour(out + o, v1, qs);
    StoreFour(out + plane + o, v2, qs);
    StoreFour(out + 2 * plane + o, v3, qs);
  }
}

// int8 operands from a phase table: the paper's 8-bit phase bytes, with the cosines stored
// rather than approximated. Entry i holds the three plane bytes at the angle 2π·i/kLutSize
// (bytes 0, 1, 2 = planes 1, 2, 3 as in TensorBuildKernel; for rows, B = 1: every point has the
// same amplitude), built on the host in double precision. An element's phase T (64-bit turns,
// advanced exactly as in TensorBuildKernel) picks the entry of the nearest table angle, so the
// angle error is at most π/kLutSize (7.7e-4 rad, far below int8's quantisation step) and the
// element costs one shared-memory load instead of two special-function ops and three roundings.
// Blocks stay resident (grid = what fits on the device) and loop over tiles of 4·kLutThreads
// columns × kBuildRun pixel rows, so each block fills its table once.
constexpr int kLutBits = 12;
constexpr int kLutSize = 1 << kLutBits;
constexpr int kLutThreads = 256;

__global__ void __launch_bounds__(kLutThreads)
    TensorLutBuildKernel(const AxisPoly* __restrict__ poly, const int32_t* __restrict__ lo,
                         const int32_t* __restrict__ hi, const uint32_t* __restrict__ table,
                         int64_t col0, int64_t ncols, int64_t kc, int64_t n_pix, int64_t rows_pad,
                         int8_t* __restrict__ out) {
  __shared__ uint32_t lut[kLutSize];
  for (int i = threadIdx.x; i < kLutSize; i += blockDim.x) lut[i] = table[i];
  __syncthreads();
  const int64_t col_tiles = (kc + 4 * kLutThreads - 1) / (4 * kLutThreads);
  const int64_t tiles = col_tiles * ((rows_pad + kBuildRun - 1) / kBuildRun);
  const int64_t plane = rows_pad * kc;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t k4 = ((tile % col_tiles) * kLutThreads + threadIdx.x) * 4;
    const int64_t i0 = (tile / col_tiles) * kBuildRun;
    if (k4 >= kc) continue;
    uint64_t t[4], d[4], a2[4];
    int32_t l[4], h[4];
    const uint64_t mm = static_cast<uint64_t>(AxisOffset(i0, n_pix));
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t k = k4 + e;
      if (k < ncols) {
        const AxisPoly q = poly[col0 + k];
        t[e] = q.a * (mm * mm) + q.b * mm + q.c;
        d[e] = q.a * (2 * mm + 1) + q.b;
        a2[e] = 2 * q.a;
        l[e] = lo[col0 + k];
        h[e] = min(hi[col0 + k], static_cast<int32_t>(n_pix - 1));
      } else {
        t[e] = d[e] = a2[e] = 0;
        l[e] = 1;
        h[e] = 0;
      }
    }
    const int rows = static_cast<int>(min(static_cast<int64_t>(kBuildRun), rows_pad - i0));
    for (int r = 0; r < rows; ++r) {
      const int32_t i = static_cast<int32_t>(i0 + r);
      uint32_t w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t turn = static_cast<uint32_t>(t[e] >> 32) + (1u << (31 - kLutBits));
        const uint32_t word = lut[turn >> (32 - kLutBits)];
        w[e] = (i >= l[e] && i <= h[e]) ? word : 0u;
        t[e] += d[e];
        d[e] += a2[e];
      }
      const int64_t o = (i0 + r) * kc + k4;
      *reinterpret_cast<uint32_t*>(out + o) =
          __byte_perm(__byte_perm(w[0], w[1], 0x0040), __byte_perm(w[2], w[3], 0x0040), 0x5410);
      *reinterpret_cast<uint32_t*>(out + plane + o) =
          __byte_perm(__byte_perm(w[0], w[1], 0x0051), __byte_perm(w[2], w[3], 0x0051), 0x5410);
      *reinterpret_cast<uint32_t*>(out + 2 * plane + o) =
          __byte_perm(__byte_perm(w[0], w[1], 0x0062), __byte_perm(w[2], w[3], 0x0062), 0x5410);
    }
  }
}

// Merged mode, step 1: B_g[v] = Σ_{j∈g} (a_j/amax)·e^{iψ_j(v)} in fp32 for groups g0 + k. Block
// (32, 8): the 32 lanes of a warp take consecutive rows v of one group, so each member's data is
// one broadcast load. Also the largest |factor| of the chunk (|Re B|, |Im B − Re B|/√2,
// |Re B + Im B|/√2) into *max_bits.
__global__ void __launch_bounds__(256)
    TensorGroupSumKernel(Members m, int64_t g0, int64_t ngroups, int64_t kc, int64_t height,
                         int64_t npad, double pitch, float* __restrict__ bre,
                         float* __restrict__ bim, unsigned int* __restrict__ max_bits) {
  __shared__ float block_max[256];
  const int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t k = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  float re = 0.f, im = 0.f;
  if (k < ngroups && v < height) {
    const double yv = static_cast<double>(AxisOffset(v, height)) * pitch;
    const int64_t g = g0 + k;
    for (int64_t j = m.starts[g]; j < m.starts[g + 1]; ++j) {
      if (v < m.lo[j] || v > m.hi[j]) continue;
      const double d = yv - m.y[j];
      float s, c;
      SinCosTurns(d * d * m.inv2lz[j] + m.phase_turns[j], &s, &c);
      re = fmaf(m.amp[j], c, re);
      im = fmaf(m.amp[j], s, im);
    }
  }
  if (k < kc && v < npad) {
    bre[v * kc + k] = re;
    bim[v * kc + k] = im;
  }
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  block_max[tid] = fmaxf(fabsf(re), fmaxf(fabsf(im - re) * kInvSqrt2, fabsf(re + im) * kInvSqrt2));
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (tid < s) block_max[tid] = fmaxf(block_max[tid], block_max[tid + s]);
    __syncthreads();
  }
  if (tid == 0) atomicMax(max_bits, __float_as_uint(block_max[0]));
}

// Merged mode, step 2: the three Y factors of B / bmax.
template <class T>
__global__ void TensorGroupQuantiseKernel(const float* __restrict__ bre, const float* __restrict__ bim,
                                          int64_t elements, const unsigned int* __restrict__ max_bits,
                                          float qs, T* __restrict__ out) {
  const int64_t i4 = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 4;
  if (i4 >= elements) return;
  const float bmax = __uint_as_float(*max_bits);
  const float inv = bmax > 0.f ? 1.f / bmax : 0.f;
  float v1[4], v2[4], v3[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float re = bre[i4 + e] * inv, im = bim[i4 + e] * inv;
    v1[e] = re;
    v2[e] = (im - re) * kInvSqrt2;
    v3[e] = (re + im) * kInvSqrt2;
  }
  StoreFour(out + i4, v1, qs);
  StoreFour(out + elements + i4, v2, qs);
  StoreFour(out + 2 * elements + i4, v3, qs);
}

// field[v][u] (+)= σ·(S1 − S3, S1 + S2); σ = sigma · bmax (bmax = 1 without max_bits).
template <class Acc>
__global__ void TensorEpilogueKernel(const Acc* __restrict__ c, int64_t mpad, int64_t npad,
                                     int64_t width, int64_t height, double sigma,
                                     const unsigned int* __restrict__ max_bits, bool accumulate,
                                     float2* __restrict__ field) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= width * height) return;
  const int64_t v = i / width, u = i - v * width;
  const int64_t o = u + v * mpad, plane = mpad * npad;
  const double s = max_bits != nullptr ? sigma * __uint_as_float(*max_bits) : sigma;
  double re, im;
  if constexpr (std::is_same_v<Acc, int32_t>) {
    const int64_t s1 = c[o], s2 = c[plane + o], s3 = c[2 * plane + o];
    re = static_cast<double>(s1 - s3) * s;
    im = static_cast<double>(s1 + s2) * s;
  } else {
    const double s1 = c[o], s2 = c[plane + o], s3 = c[2 * plane + o];
    re = (s1 - s3) * s;
    im = (s1 + s2) * s;
  }
  float2 out = make_float2(static_cast<float>(re), static_cast<float>(im));
  if (accumulate) {
    const float2 old = field[i];
    out.x += old.x;
    out.y += old.y;
  }
  field[i] = out;
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt: one handle per device, algorithms chosen once per problem by timing the heuristic's
// candidates on the first call (cuBLASLt's recommended "autotuning"), then cached.
// ---------------------------------------------------------------------------------------------

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (s == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": cuBLASLt allocation failed"));
  }
  return absl::InternalError(absl::StrCat(what, ": cuBLASLt status ", static_cast<int>(s)));
}

std::mutex& LtMutex() {
  static std::mutex mu;
  return mu;
}

absl::StatusOr<cublasLtHandle_t> LtHandle(int ordinal) {
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(LtMutex());
  auto it = handles.find(ordinal);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h;
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtCreate(&h), "cublasLtCreate"));
  handles.emplace(ordinal, h);
  return h;
}

using AlgoKey = std::tuple<int, int, int64_t, int64_t, int64_t>;
std::map<AlgoKey, cublasLtMatmulAlgo_t>& AlgoCache() {
  static std::map<AlgoKey, cublasLtMatmulAlgo_t> cache;
  return cache;
}

struct LtTypes {
  cudaDataType_t ab, c, scale;
  cublasComputeType_t compute;
};

LtTypes TypesFor(TensorPrecision p) {
  switch (p) {
    case TensorPrecision::kInt8: return {CUDA_R_8I, CUDA_R_32I, CUDA_R_32I, CUBLAS_COMPUTE_32I};
    case TensorPrecision::kBf16: return {CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case TensorPrecision::kTf32:
      return {CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
    default: return {CUDA_R_16F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
  }
}

// Owns the descriptors of one batched product.
struct LtProblem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtProblem() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

absl::Status SetBatch(cublasLtMatrixLayout_t layout, int64_t stride) {
  const int32_t batch = 3;
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), "batch count"));
  return LtStatus(cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), "batch stride");
}

// C_f = X_fᵀ·Y_f for f = 0, 1, 2 (see the file comment): m = M (padded columns), n = N (padded
// rows), k = the chunk's inner dimension.
absl::Status BatchedGemm(const Device& device, TensorPrecision precision, const void* x,
                         const void* y, void* c, int64_t m, int64_t n, int64_t k, void* workspace) {
  const cudaStream_t stream = StreamOf(device);
  FRESNEL_ASSIGN_OR_RETURN(cublasLtHandle_t handle, LtHandle(device.ordinal));
  const LtTypes t = TypesFor(precision);
  LtProblem p;
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescCreate(&p.op, t.compute, t.scale), "desc"));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(
      p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a), "transa"));
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(
      p.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b), "transb"));
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&p.a, t.ab, k, m, k), "layout a"));
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&p.b, t.ab, k, n, k), "layout b"));
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&p.c, t.c, m, n, m), "layout c"));
  FRESNEL_RETURN_IF_ERROR(SetBatch(p.a, m * k));
  FRESNEL_RETURN_IF_ERROR(SetBatch(p.b, n * k));
  FRESNEL_RETURN_IF_ERROR(SetBatch(p.c, m * n));

  const int32_t one_i = 1, zero_i = 0;
  const float one_f = 1.f, zero_f = 0.f;
  const void* alpha = precision == TensorPrecision::kInt8 ? static_cast<const void*>(&one_i)
                                                          : static_cast<const void*>(&one_f);
  const void* beta = precision == TensorPrecision::kInt8 ? static_cast<const void*>(&zero_i)
                                                         : static_cast<const void*>(&zero_f);
  auto run = [&](const cublasLtMatmulAlgo_t* algo) {
    return cublasLtMatmul(handle, p.op, alpha, x, p.a, y, p.b, beta, c, p.c, c, p.c, algo,
                          workspace, kGemmWorkspaceBytes, stream);
  };

  const AlgoKey key{device.ordinal, static_cast<int>(precision), m, n, k};
  {
    std::lock_guard<std::mutex> lock(LtMutex());
    auto it = AlgoCache().find(key);
    if (it != AlgoCache().end()) {
      const cublasLtMatmulAlgo_t algo = it->second;
      return LtStatus(run(&algo), "cublasLtMatmul");
    }
  }

  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&p.pref), "preference"));
  const uint64_t ws = kGemmWorkspaceBytes;
  FRESNEL_RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceSetAttribute(
      p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace"));
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int returned = 0;
  FRESNEL_RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, p.pref, kCandidates,
                                     results, &returned),
      "cublasLtMatmulAlgoGetHeuristic"));
  if (returned == 0) {
    return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for the ",
                                            TensorPrecisionName(precision), " product ", m, "x",
                                            n, "x", k));
  }
  cudaEvent_t start, stop;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  int best = -1;
  float best_ms = 0;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (run(&results[i].algo) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
    cudaEventRecord(start, stream);
    bool ok = true;
    for (int r = 0; r < 3 && ok; ++r) ok = run(&results[i].algo) == CUBLAS_STATUS_SUCCESS;
    cudaEventRecord(stop, stream);
    float ms = 0;
    if (!ok || cudaEventSynchronize(stop) != cudaSuccess ||
        cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (best < 0 || ms < best_ms) {
      best = i;
      best_ms = ms;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (best < 0) {
    return absl::InternalError(absl::StrCat("no cuBLASLt algorithm ran the ",
                                            TensorPrecisionName(precision), " product"));
  }
  {
    std::lock_guard<std::mutex> lock(LtMutex());
    AlgoCache().emplace(key, results[best].algo);
  }
  return LtStatus(run(&results[best].algo), "cublasLtMatmul");
}

// ---------------------------------------------------------------------------------------------

// TensorLutBuildKernel's table: plane bytes round(127·v) at the angles 2π·i/kLutSize, X's
// planes (cos(φ − π/4), cos φ, sin φ) or Y's with B = 1 (cos ψ, sin(ψ − π/4), cos(ψ − π/4)).
std::vector<uint32_t> MakeByteTable(bool rows) {
  std::vector<uint32_t> table(kLutSize);
  const double r = 0.70710678118654752440;
  for (int i = 0; i < kLutSize; ++i) {
    const double angle = 6.283185307179586477 * i / kLutSize;
    const double c = std::cos(angle), s = std::sin(angle);
    const double v[3] = {rows ? c : (c + s) * r, rows ? (s - c) * r : c, rows ? (c + s) * r : s};
    uint32_t word = 0;
    for (int f = 0; f < 3; ++f) {
      const auto byte = static_cast<int8_t>(std::nearbyint(127.0 * v[f]));
      word |= static_cast<uint32_t>(static_cast<uint8_t>(byte)) << (8 * f);
    }
    table[i] = word;
  }
  return table;
}
const std::vector<uint32_t>& ByteTable(bool rows) {
  static const std::vector<uint32_t> x = MakeByteTable(false), y = MakeByteTable(true);
  return rows ? y : x;
}

// Resident blocks of TensorLutBuildKernel on the device.
absl::StatusOr<unsigned> LutBuildBlocks(const Device& device) {
  int sms = 0, per_sm = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.ordinal));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, TensorLutBuildKernel, kLutThreads, 0));
  return static_cast<unsigned>(std::max(1, sms * std::max(1, per_sm)));
}

template <class T, class Acc>
absl::Status RunTensorTyped(const Device& device, const PreparedPoints& p,
                            const HologramOptions& options, TensorPrecision precision,
                            StageClock* clock, EventProfiler* profiler, float2* field,
                            HologramResult* result) {
  const cudaStream_t stream = StreamOf(device);
  const int64_t n = p.size();
  const float qs = precision == TensorPrecision::kInt8 ? 127.f : 1.f;
  const double amax = p.amax;

  // Columns: groups of points sharing (x, z) when that at least halves the inner dimension.
  std::optional<internal::PointGroups> groups;
  if (options.tensor_grouping) groups = internal::GroupByColumn(p, n / 2);
  const bool merged = groups.has_value();
  const int64_t ncols = merged ? groups->count() : n;
  std::vector<int32_t> representative;  // merged: the first point of each group
  if (merged) {
    representative.resize(static_cast<size_t>(ncols));
    for (int64_t g = 0; g < ncols; ++g) representative[g] = groups->order[groups->starts[g]];
  }
  profiler->Mark("host_grouping");
  // int8: X from the phase table always, Y too when every point has the same amplitude (then
  // every B = a / amax rounds to 1 in float). The table build is the default for int8;
  // options.tensor_byte_table = false selects the sincos build (TensorBuildKernel) for comparison.
  const bool table_build = std::is_same_v<T, int8_t> && options.tensor_byte_table;
  const bool uniform_amplitude = amax > 0 && static_cast<float>(p.amin / amax) == 1.f;
  // The point arrays go up as they are; the per-column tables are built from them on the device
  // (TensorPolyKernel, TensorGatherMembersKernel), so the host does no per-point work here.
  PackedUpload up;
  const size_t ox = up.Add(p.x), oy = up.Add(p.y), oi = up.Add(p.inv2lz),
               ot = up.Add(p.phase_turns), oa = up.Add(p.amplitude), oul = up.Add(p.ulo),
               ouh = up.Add(p.uhi), ovl = up.Add(p.vlo), ovh = up.Add(p.vhi);
  size_t orep = 0, oord = 0, ost = 0;
  if (merged) {
    orep = up.Add(representative);
    oord = up.Add(groups->order);
    ost = up.Add(groups->starts);
  }
  size_t otx = 0, oty = 0;
  unsigned lut_blocks = 0;
  if (table_build) {
    otx = up.Add(ByteTable(false));
    oty = up.Add(ByteTable(true));
    FRESNEL_ASSIGN_OR_RETURN(lut_blocks, LutBuildBlocks(device));
  }
  // Device tables: X polynomials (+ gathered ranges when merged); unmerged Y polynomials and
  // amplitudes, or the merged members in group order.
  PackedUpload::Layout tables;
  const size_t txp = tables.Reserve<AxisPoly>(ncols);
  const size_t txl = merged ? tables.Reserve<int32_t>(ncols) : 0;
  const size_t txh = merged ? tables.Reserve<int32_t>(ncols) : 0;
  const size_t typ = merged ? 0 : tables.Reserve<AxisPoly>(n);
  const size_t tya = tables.Reserve<float>(n);
  size_t tmy = 0, tmi = 0, tmp = 0, tml = 0, tmh = 0;
  if (merged) {
    tmy = tables.Reserve<double>(n);
    tmi = tables.Reserve<double>(n);
    tmp = tables.Reserve<double>(n);
    tml = tables.Reserve<int32_t>(n);
    tmh = tables.Reserve<int32_t>(n);
  }
  profiler->Mark("host_tables");
  // Sizes, budget and buffers before the upload: cudaMemGetInfo and pool growth are host work
  // that must not leave the device idle between the upload and the first kernel.
  const int64_t mpad = RoundUp(p.width, 16), npad = RoundUp(p.height, 16);
  const int64_t c_bytes = 3 * mpad * npad * static_cast<int64_t>(sizeof(Acc));
  const int64_t per_col = 3 * (mpad + npad) * static_cast<int64_t>(sizeof(T)) +
                          (merged ? 2 * npad * static_cast<int64_t>(sizeof(float)) : 0);
  FRESNEL_ASSIGN_OR_RETURN(const int64_t budget,
                           WorkspaceBudget(options, c_bytes + static_cast<int64_t>(kGemmWorkspaceBytes)));
  int64_t chunk = std::min(budget / per_col / kKAlign * kKAlign, kMaxChunk);
  if (chunk < kKAlign) return TooLarge(per_col * kKAlign, budget);
  chunk = std::min(chunk, RoundUp(ncols, kKAlign));

  DeviceBuffer<T> xbuf, ybuf;
  DeviceBuffer<Acc> cbuf;
  DeviceBuffer<float> bre, bim;
  DeviceBuffer<unsigned int> max_bits;
  DeviceBuffer<char> workspace;
  FRESNEL_RETURN_IF_ERROR(xbuf.Allocate(device, 3 * mpad * chunk));
  FRESNEL_RETURN_IF_ERROR(ybuf.Allocate(device, 3 * npad * chunk));
  FRESNEL_RETURN_IF_ERROR(cbuf.Allocate(device, 3 * mpad * npad));
  FRESNEL_RETURN_IF_ERROR(workspace.Allocate(device, kGemmWorkspaceBytes));
  if (merged) {
    FRESNEL_RETURN_IF_ERROR(bre.Allocate(device, npad * chunk));
    FRESNEL_RETURN_IF_ERROR(bim.Allocate(device, npad * chunk));
    FRESNEL_RETURN_IF_ERROR(max_bits.Allocate(device, 1));
  }
  DeviceBuffer<char> table_buf;
  FRESNEL_RETURN_IF_ERROR(table_buf.Allocate(device, static_cast<int64_t>(tables.size())));
  auto table = [&](size_t offset) { return table_buf.get() + offset; };
  profiler->Mark("host_buffers");
  FRESNEL_RETURN_IF_ERROR(up.Upload(device));
  FRESNEL_RETURN_IF_ERROR(clock->Mark());
  profiler->Mark("upload");
  const PointArrays pts{up.Ptr<double>(ox),   up.Ptr<double>(oy),   up.Ptr<double>(oi),
                        up.Ptr<double>(ot),   up.Ptr<double>(oa),   up.Ptr<int32_t>(oul),
                        up.Ptr<int32_t>(ouh), up.Ptr<int32_t>(ovl), up.Ptr<int32_t>(ovh)};
  AxisPoly* const xpoly = reinterpret_cast<AxisPoly*>(table(txp));
  const int32_t* const xlo = merged ? reinterpret_cast<int32_t*>(table(txl)) : pts.ulo;
  const int32_t* const xhi = merged ? reinterpret_cast<int32_t*>(table(txh)) : pts.uhi;
  AxisPoly* const ypoly = merged ? nullptr : reinterpret_cast<AxisPoly*>(table(typ));
  float* const yamp = reinterpret_cast<float*>(table(tya));
  TensorPolyKernel<false><<<StrideGrid(ncols), 256, 0, stream>>>(
      pts, merged ? up.Ptr<int32_t>(orep) : nullptr, ncols, p.pitch_m, amax, xpoly,
      merged ? reinterpret_cast<int32_t*>(table(txl)) : nullptr,
      merged ? reinterpret_cast<int32_t*>(table(txh)) : nullptr, nullptr);
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // TensorPolyKernel (X)
  if (merged) {
    TensorGatherMembersKernel<<<StrideGrid(n), 256, 0, stream>>>(
        pts, up.Ptr<int32_t>(oord), n, amax, reinterpret_cast<double*>(table(tmy)),
        reinterpret_cast<double*>(table(tmi)), reinterpret_cast<double*>(table(tmp)), yamp,
        reinterpret_cast<int32_t*>(table(tml)), reinterpret_cast<int32_t*>(table(tmh)));
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TensorGatherMembersKernel);
  } else {
    TensorPolyKernel<true><<<StrideGrid(n), 256, 0, stream>>>(pts, nullptr, n, p.pitch_m, amax,
                                                              ypoly, nullptr, nullptr, yamp);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // TensorPolyKernel (Y)
  }
  profiler->Mark("tables");
  const Members mem{reinterpret_cast<const double*>(table(tmy)),
                    reinterpret_cast<const double*>(table(tmi)),
                    reinterpret_cast<const double*>(table(tmp)),
                    yamp,
                    reinterpret_cast<const int32_t*>(table(tml)),
                    reinterpret_cast<const int32_t*>(table(tmh)),
                    up.Ptr<int64_t>(ost)};

  const double sigma = std::sqrt(2.0) * amax / (static_cast<double>(qs) * qs);

  int64_t chunks = 0;
  for (int64_t c0 = 0; c0 < ncols; c0 += chunk, ++chunks) {
    const int64_t nc = std::min(chunk, ncols - c0);
    const int64_t kc = RoundUp(nc, kKAlign);
    const unsigned kblocks = static_cast<unsigned>(CeilDiv(kc, 4 * kBuildThreads));
    if constexpr (std::is_same_v<T, int8_t>) {
      if (table_build) {
        TensorLutBuildKernel<<<lut_blocks, kLutThreads, 0, stream>>>(
            xpoly, xlo, xhi, up.Ptr<uint32_t>(otx), c0, nc, kc, p.width, mpad, xbuf.get());
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TensorLutBuildKernel);
      }
    }
    if (!table_build) {
      TensorBuildKernel<T, false>
          <<<dim3(kblocks, static_cast<unsigned>(CeilDiv(mpad, kBuildRun))), kBuildThreads, 0,
             stream>>>(xpoly, xlo, xhi, nullptr, c0, nc, kc, p.width, mpad, qs, xbuf.get());
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // TensorBuildKernel (X)
    }
    profiler->Mark("build_x");
    if (merged) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(max_bits.get(), 0, sizeof(unsigned int), stream));
      TensorGroupSumKernel<<<dim3(static_cast<unsigned>(CeilDiv(npad, 32)), static_cast<unsigned>(kc / 8)),
                             dim3(32, 8), 0, stream>>>(mem, c0, nc, kc, p.height, npad, p.pitch_m,
                                                       bre.get(), bim.get(), max_bits.get());
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TensorGroupSumKernel);
      const int64_t elements = npad * kc;
      TensorGroupQuantiseKernel<T><<<::fresnel::cuda::BlocksFor(elements / 4, 256), 256, 0,
                                     stream>>>(bre.get(), bim.get(), elements, max_bits.get(),
                                               qs, ybuf.get());
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // TensorGroupQuantiseKernel
    } else if (table_build && uniform_amplitude) {
      if constexpr (std::is_same_v<T, int8_t>) {
        TensorLutBuildKernel<<<lut_blocks, kLutThreads, 0, stream>>>(
            ypoly, pts.vlo, pts.vhi, up.Ptr<uint32_t>(oty), c0, nc, kc, p.height, npad,
            ybuf.get());
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TensorLutBuildKernel);
      }
    } else {
      TensorBuildKernel<T, true>
          <<<dim3(kblocks, static_cast<unsigned>(CeilDiv(npad, kBuildRun))), kBuildThreads, 0,
             stream>>>(ypoly, pts.vlo, pts.vhi, yamp, c0, nc, kc, p.height, npad, qs,
                       ybuf.get());
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // TensorBuildKernel (Y)
    }
    profiler->Mark("build_y");
    FRESNEL_RETURN_IF_ERROR(BatchedGemm(device, precision, xbuf.get(), ybuf.get(), cbuf.get(),
                                        mpad, npad, kc, workspace.get()));
    profiler->Mark("gemm");
    const int64_t pixels = p.width * p.height;
    TensorEpilogueKernel<Acc><<<::fresnel::cuda::BlocksFor(pixels, 256), 256, 0, stream>>>(
        cbuf.get(), mpad, npad, p.width, p.height, sigma, merged ? max_bits.get() : nullptr,
        c0 > 0, field);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // TensorEpilogueKernel
    profiler->Mark("epilogue");
  }
  result->precision = precision;
  result->point_batches = chunks;
  result->gemm_inner_dim = ncols;
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTensor(const Device& device, const internal::PreparedPoints& prepared,
                       const HologramOptions& options, TensorPrecision precision,
                       StageClock* clock, EventProfiler* profiler, float2* field,
                       HologramResult* result) {
  switch (precision) {
    case TensorPrecision::kInt8:
      return RunTensorTyped<int8_t, int32_t>(device, prepared, options, precision, clock,
                                             profiler, field, result);
    case TensorPrecision::kBf16:
      return RunTensorTyped<__nv_bfloat16, float>(device, prepared, options, precision, clock,
                                                  profiler, field, result);
    case TensorPrecision::kTf32:
      return RunTensorTyped<float, float>(device, prepared, options, precision, clock, profiler,
                                          field, result);
    case TensorPrecision::kFp16:
    case TensorPrecision::kAuto:
      return RunTensorTyped<__half, float>(device, prepared, options, TensorPrecision::kFp16,
                                           clock, profiler, field, result);
  }
  return absl::InternalError("unknown tensor precision");
}

}  // namespace fresnel::hologram::cuda
