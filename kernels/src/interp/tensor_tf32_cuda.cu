// kTensorTf32 (tensor_tf32.h has the GEMM): plan, kernel and launch.
//
// A block owns tiles of `periods` consecutive widened periods of one channel (persistent over
// tiles, 8 warps):
//   1. the tile's inputs s[n_tile*d - (P-1) + z], z in [0, periods*d + Kpad), are loaded, split
//      into (tf32 hi, tf32 lo) and stored as float2 de-interleaved by z mod d: z sits at
//      xin[(z mod d)*ld + z/d]. X[n][i] (z = n*d + i) is then xin[(i mod d)*ld + i/d + n];
//   2. warp w computes the D tile of periods [w*16*MT, (w+1)*16*MT) x all u phases: per k-step
//      (8 band taps) it loads the A fragments of its MT m16 tiles (mma.m16n8k8 tf32: lane (g, t)
//      = (lane/4, lane%4) holds rows g, g+8 and columns t, t+4), the B fragments of the NT n8
//      tiles (one 16-byte load per tile: hi and lo of b0, b1), and issues 3*MT*NT mma.sync.
//      Because d is a multiple of 4 and k-steps start at multiples of 8, columns 8ks + t and
//      8ks + 4 + t sit at rows (8ks mod d) + t and ((8ks + 4) mod d) + t: the lane's address is
//      its own t*ld + n plus a per-k-step offset that is the same for the whole warp (a table in
//      shared memory, one broadcast load per k-step). Rows g and g + 8 are 8 float2 apart, m16
//      tiles 16. With ld = 4 mod 16 (in float2) the 16 lanes of each half-warp hit distinct bank
//      pairs (words 8t + 2g + const), so the 64-bit A loads are conflict-free;
//   3. the accumulators go straight to y (lane: two consecutive outputs of one period; a warp's
//      store covers 8 periods x 32 bytes, whole sectors) — long filters are bound by the
//      arithmetic, not the stores.
// The B fragments (hi/lo split on the host) are copied to shared memory once per block when
// they fit beside the tile, else read through L1 from global memory (`smem_table`).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "interp/occupancy_cuda.cuh"
#include "interp/tensor_tf32.h"

namespace fresnel::interp::internal {
namespace {

constexpr int kTcThreads = 256;
constexpr int kTcWarps = kTcThreads / 32;
constexpr int kTcMaxU = 64;                  // NT <= 8 n8 tiles
constexpr int kTcSmemMax = 200 * 1024;       // hard cap per block
constexpr int kTcSmemTableMax = 120 * 1024;  // table + tile in shared memory up to this

struct TcArgs {
  int u, d, p, kpad, periods, ld, ksteps;
  int chunk;  // k-steps per tensor-core partial sum (>= 1)
  int copy_words;  // words of the table copied to shared memory (fragments and/or offsets)
  int frag_floats;   // fragments' floats (the offsets follow them in the table)
  int xin_off;       // float offset of the input tile in shared memory
  int64_t n_first, tiles, grid_step_c, grid_step_t;
};

__device__ __forceinline__ uint32_t ToTf32(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}

// D += A * B, m16n8k8, tf32 inputs, float32 accumulators.
__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int MT, int NT>
__device__ __forceinline__ void ZeroTiles(float (&c)[MT][NT][4]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) c[m][n][e] = 0.f;
    }
  }
}

// kMinBlocks: resident blocks per SM the compiler must allow (its register cap); 0 leaves the
// choice to it (0: the compiler's choice; TensorTf32Plan::min_blocks).
template <int NT, int MT, bool kSmemTable, int kMinBlocks = 0>
__global__ void __launch_bounds__(kTcThreads, kMinBlocks)
    TensorTf32Kernel(const float* __restrict__ x, int64_t x_stride, int64_t x_first,
                     int64_t x_len, float cval, float* __restrict__ y, int64_t y_stride,
                     int64_t out_first, int64_t out_count, int64_t channels,
                     const float* __restrict__ table, const TcArgs a) {
  extern __shared__ float4 tc_smem4[];
  float* const smem = reinterpret_cast<float*>(tc_smem4);
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  {
    // Shared memory starts with what the kernel reads of the table: the fragments and the
    // offsets (kSmemTable) or the offsets alone.
    const unsigned* src =
        reinterpret_cast<const unsigned*>(table) + (kSmemTable ? 0 : a.frag_floats);
    unsigned* dst = reinterpret_cast<unsigned*>(smem);
    for (int i = tid; i < a.copy_words; i += kTcThreads) dst[i] = __ldg(src + i);
  }
  const float4* const btab = kSmemTable ? reinterpret_cast<const float4*>(smem)
                                        : reinterpret_cast<const float4*>(table);
  const int2* const offs = reinterpret_cast<const int2*>(smem + (kSmemTable ? a.frag_floats : 0));
  float2* const xin = reinterpret_cast<float2*>(smem + a.xin_off);
  const int64_t total = channels * a.tiles;
  const int span = a.periods * a.d + a.kpad;
  const int step_q = kTcThreads / a.d, step_r = kTcThreads % a.d;
  const int z_q0 = tid / a.d, z_r0 = tid % a.d;
  const int wbase = warp * 16 * MT;
  const int lane_off = t * a.ld + wbase + g;  // float2 units

  int64_t tc = blockIdx.x / a.tiles, tt = blockIdx.x % a.tiles;
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
    const int64_t c = tc;
    const int64_t n_tile = a.n_first + tt * a.periods;
    tc += a.grid_step_c;
    tt += a.grid_step_t;
    if (tt >= a.tiles) {
      tt -= a.tiles;
      ++tc;
    }
    __syncthreads();  // every warp is done with the previous tile's xin
    {
      const int64_t rel0 = n_tile * a.d - (a.p - 1) - x_first;  // x index of z = 0
      const float* xc = x + c * x_stride;
      int qq = z_q0, rr = z_r0;
      for (int z = tid; z < span; z += kTcThreads) {
        const int64_t rel = rel0 + z;
        const float v = rel >= 0 && rel < x_len ? __ldg(xc + rel) : cval;
        const uint32_t hi = ToTf32(v);
        const uint32_t lo = ToTf32(v - __uint_as_float(hi));
        xin[rr * a.ld + qq] = make_float2(__uint_as_float(hi), __uint_as_float(lo));
        qq += step_q;
        rr += step_r;
        if (rr >= a.d) {
          rr -= a.d;
          ++qq;
        }
      }
    }
    __syncthreads();  // xin (and the table, the first time) complete

    // The band in chunks of a.chunk k-steps: the tensor cores sum one chunk from zero (part),
    // which is then added to acc with a float32 FADD (round to nearest). The tensor cores'
    // accumulation truncates towards the larger operand's exponent, an error that grows with
    // the accumulated magnitude and the number of k-steps it is carried over; the chunks keep
    // that to short partial sums (tensor_tf32.h, "Accumulation").
    float acc[MT][NT][4];
    ZeroTiles(acc);
    const float2* const xl = xin + lane_off;
    const float4* bl = btab + lane;
    for (int ks0 = 0; ks0 < a.ksteps; ks0 += a.chunk) {
      const int ks1 = min(ks0 + a.chunk, a.ksteps);
      float part[MT][NT][4];
      ZeroTiles(part);
#pragma unroll 2
      for (int ks = ks0; ks < ks1; ++ks) {
        const int2 o = offs[ks];
        const float2* pa = xl + o.x;  // columns 8ks + t
        const float2* pb = xl + o.y;  // columns 8ks + 4 + t
        float4 bf[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          bf[n] = kSmemTable ? bl[n * 32] : __ldg(bl + n * 32);
        }
        bl += NT * 32;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const float2 a0 = pa[16 * m], a1 = pa[16 * m + 8];
          const float2 a2 = pb[16 * m], a3 = pb[16 * m + 8];
          const uint32_t h0 = __float_as_uint(a0.x), h1 = __float_as_uint(a1.x);
          const uint32_t h2 = __float_as_uint(a2.x), h3 = __float_as_uint(a3.x);
          const uint32_t l0 = __float_as_uint(a0.y), l1 = __float_as_uint(a1.y);
          const uint32_t l2 = __float_as_uint(a2.y), l3 = __float_as_uint(a3.y);
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            const uint32_t bh0 = __float_as_uint(bf[n].x), bh1 = __float_as_uint(bf[n].y);
            const uint32_t bl0 = __float_as_uint(bf[n].z), bl1 = __float_as_uint(bf[n].w);
            Mma(part[m][n], l0, l1, l2, l3, bh0, bh1);
            Mma(part[m][n], h0, h1, h2, h3, bl0, bl1);
            Mma(part[m][n], h0, h1, h2, h3, bh0, bh1);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[m][n][e] += part[m][n][e];
        }
      }
    }

    // Accumulator e of tile (m, n): period wbase + 16m + g + 8*(e/2), phase 8n + 2t + e%2.
    float* const yc = y + c * y_stride;
    const bool aligned2 = ((reinterpret_cast<uintptr_t>(yc) / 4 - out_first) & 1) == 0;
    const int64_t k_tile = n_tile * a.u;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t kr = k_tile + static_cast<int64_t>(wbase + 16 * m + g + 8 * h) * a.u +
                           2 * t - out_first;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const int64_t yi = kr + 8 * n;
          const float v0 = acc[m][n][2 * h], v1 = acc[m][n][2 * h + 1];
          if (aligned2 && yi >= 0 && yi + 1 < out_count) {
            *reinterpret_cast<float2*>(yc + yi) = make_float2(v0, v1);
          } else {
            if (yi >= 0 && yi < out_count) yc[yi] = v0;
            if (yi + 1 >= 0 && yi + 1 < out_count) yc[yi + 1] = v1;
          }
        }
      }
    }
  }
}

using TcKernelFn = void (*)(const float*, int64_t, int64_t, int64_t, float, float*, int64_t,
                            int64_t, int64_t, int64_t, const float*, const TcArgs);

template <bool kSmemTable>
TcKernelFn KernelFor(int nt) {
  switch (nt) {
    case 1: return TensorTf32Kernel<1, 4, kSmemTable>;
    case 2: return TensorTf32Kernel<2, 4, kSmemTable>;
    case 3: return TensorTf32Kernel<3, 2, kSmemTable>;
    case 4: return TensorTf32Kernel<4, 2, kSmemTable>;
    case 5: return TensorTf32Kernel<5, 2, kSmemTable>;
    case 6: return TensorTf32Kernel<6, 2, kSmemTable>;
    case 7: return TensorTf32Kernel<7, 2, kSmemTable>;
    default: return TensorTf32Kernel<8, 2, kSmemTable>;
  }
}
TcKernelFn KernelFor(const TensorTf32Plan& pl) {
  if (pl.nt == 3 && pl.min_blocks == 3) {
    return pl.smem_table ? TensorTf32Kernel<3, 2, true, 3> : TensorTf32Kernel<3, 2, false, 3>;
  }
  return pl.smem_table ? KernelFor<true>(pl.nt) : KernelFor<false>(pl.nt);
}
int MtFor(int nt) { return nt <= 2 ? 4 : 2; }

// float -> tf32 (10 mantissa bits), round to nearest with ties away from zero, as
// cvt.rna.tf32.f32: add half of the dropped range to the magnitude, then truncate.
float RoundTf32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7f800000u) != 0x7f800000u) {
    b += 0x1000u;
    b &= 0xffffe000u;
  }
  std::memcpy(&f, &b, 4);
  return f;
}

int FragFloats(const TensorTf32Plan& pl) { return pl.kpad / 8 * pl.nt * 32 * 4; }

}  // namespace

absl::StatusOr<TensorTf32Plan> PlanTensorTf32(int up, int down, int64_t p,
                                              const std::vector<float>& htf) {
  if (p < kTensorTf32MinTaps || p > (1 << 16) ||
      (!htf.empty() && static_cast<int64_t>(htf.size()) != static_cast<int64_t>(up) * p)) {
    return absl::FailedPreconditionError("tensor_tf32: taps per phase outside [16, 65536]");
  }
  TensorTf32Plan pl;
  const int g0 = std::gcd(up, down);
  const int u0 = up / g0, d0 = down / g0;
  const int m = std::lcm(8 / std::gcd(u0, 8), 4 / std::gcd(d0, 4));
  if (static_cast<int64_t>(m) * u0 > kTcMaxU || static_cast<int64_t>(m) * d0 > 4096) {
    return absl::FailedPreconditionError("tensor_tf32: more than 64 outputs per period");
  }
  pl.u = m * u0;
  pl.d = m * d0;
  pl.p = static_cast<int>(p);
  pl.nt = pl.u / 8;
  pl.mt = MtFor(pl.nt);
  pl.periods = kTcWarps * 16 * pl.mt;
  // q_j = floor(j*down/up), t_j = j*down mod up for j in [0, u) (the widened period).
  std::vector<int> q(pl.u), tj(pl.u);
  for (int j = 0; j < pl.u; ++j) {
    const int64_t jd = static_cast<int64_t>(j) * down;
    q[j] = static_cast<int>(jd / up);
    tj[j] = static_cast<int>(jd % up);
  }
  const int kb = pl.p + q[pl.u - 1];
  pl.kpad = (kb + 7) / 8 * 8;
  const int ksteps = pl.kpad / 8;
  // Input tile: columns up to periods - 1 + (kpad - 1)/d; ld = 4 mod 16 (float2 units).
  const int cols = pl.periods + (pl.kpad + pl.d - 1) / pl.d + 1;
  pl.ld = (cols + 11) / 16 * 16 + 4;
  const int64_t frag_bytes = static_cast<int64_t>(FragFloats(pl)) * 4;
  const int64_t offs_bytes = static_cast<int64_t>(ksteps) * 8;
  const int64_t xin_bytes = static_cast<int64_t>(pl.d) * pl.ld * 8;
  pl.smem_table = frag_bytes + offs_bytes + xin_bytes <= kTcSmemTableMax;
  const int64_t head = (pl.smem_table ? frag_bytes : 0) + offs_bytes;
  const int64_t smem = (head + 15) / 16 * 16 + xin_bytes;
  if (smem > kTcSmemMax) {
    return absl::FailedPreconditionError("tensor_tf32: tile exceeds shared memory");
  }
  pl.smem_bytes = static_cast<int>(smem);
  pl.table_floats = FragFloats(pl) + 2 * ksteps;
  if (htf.empty()) return pl;
  pl.table.assign(static_cast<size_t>(pl.table_floats), 0.f);
  auto bank = [&](int i, int j) -> float {
    const int mm = q[j] + pl.p - 1 - i;
    return mm >= 0 && mm < pl.p ? htf[static_cast<size_t>(tj[j]) * pl.p + mm] : 0.f;
  };
  for (int ks = 0; ks < ksteps; ++ks) {
    for (int n = 0; n < pl.nt; ++n) {
      for (int lane = 0; lane < 32; ++lane) {
        const int j = 8 * n + lane / 4, i0 = 8 * ks + lane % 4;
        const float b0 = bank(i0, j), b1 = bank(i0 + 4, j);
        const float h0 = RoundTf32(b0), h1 = RoundTf32(b1);
        float* f = &pl.table[((static_cast<size_t>(ks) * pl.nt + n) * 32 + lane) * 4];
        f[0] = h0;
        f[1] = h1;
        f[2] = RoundTf32(b0 - h0);
        f[3] = RoundTf32(b1 - h1);
      }
    }
    // The warp-uniform part of the A addresses: row (i mod d), column i / d for i = 8ks and
    // 8ks + 4, as row*ld + column (float2 units).
    const int i0 = 8 * ks, i1 = 8 * ks + 4;
    const int o[2] = {(i0 % pl.d) * pl.ld + i0 / pl.d, (i1 % pl.d) * pl.ld + i1 / pl.d};
    std::memcpy(&pl.table[static_cast<size_t>(FragFloats(pl)) + 2 * ks], o, sizeof(o));
  }
  return pl;
}

absl::StatusOr<int> TensorTf32Occupancy(const TensorTf32Plan& plan) {
  return ResidentBlocksPerSm(KernelFor(plan), kTcThreads, plan.smem_bytes);
}

absl::Status LaunchTensorTf32(const TensorTf32Plan& pl, const float* table, int sm_count,
                              int blocks_per_sm, cudaStream_t stream, const DeviceSignal& s) {
  TcArgs a{};
  a.u = pl.u;
  a.d = pl.d;
  a.p = pl.p;
  a.kpad = pl.kpad;
  a.periods = pl.periods;
  a.ld = pl.ld;
  a.ksteps = pl.kpad / 8;
  a.chunk = std::max(1, std::min(pl.chunk_ksteps, a.ksteps));
  a.frag_floats = FragFloats(pl);
  a.copy_words = (pl.smem_table ? a.frag_floats : 0) + 2 * a.ksteps;
  a.xin_off = (a.copy_words + 3) / 4 * 4;
  a.n_first = s.out_first / pl.u;
  const int64_t n_last = (s.out_first + s.out_count - 1) / pl.u;
  a.tiles = (n_last - a.n_first + pl.periods) / pl.periods;
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(s.channels * a.tiles, static_cast<int64_t>(sm_count) * blocks_per_sm));
  a.grid_step_c = blocks / a.tiles;
  a.grid_step_t = blocks % a.tiles;
  TcKernelFn fn = KernelFor(pl);
  fn<<<static_cast<unsigned>(blocks), kTcThreads, static_cast<size_t>(pl.smem_bytes), stream>>>(
      static_cast<const float*>(s.x), s.x_stride, s.x_first, s.x_len,
      static_cast<float>(s.cval), static_cast<float*>(s.y), s.y_stride, s.out_first,
      s.out_count, s.channels, table, a);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(fn);
  return absl::OkStatus();
}

}  // namespace fresnel::interp::internal
