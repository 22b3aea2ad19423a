// CUDA kernels of the window primitive (interp_internal.h):
//
//   y[k] = sum_{m=0}^{P-1} h[t + m*up] * s[q - m],   q = floor(k*down/up),  t = k*down - q*up,
//
// for k in [out_first, out_first + out_count) of each channel, where s[x_first + i] = x[c][i] for
// i in [0, x_len) and s = cval elsewhere. `htf` holds the taps phase-major: htf[t*P + m] =
// h[t + m*up] (zero past the end of h), so the P taps of one phase are contiguous.
//
// Every kernel accumulates one output as acc = fma(htf[t*P + m], s[q - m], acc) for m ascending
// from acc = 0 (kWarpPerOutput: per lane over m = lane + 32i, then a fixed butterfly). The order
// does not depend on the tile or window an output falls in, which is what makes streamed and
// one-shot results bit-identical for one kernel choice.
//
// Included by interp_cuda.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "interp/bulk_copy_cuda.cuh"

namespace fresnel::interp::kernels {

// ---- element types: float, double, complex64 (float2) and complex128 (double2) signals, real
// taps ----

template <class T>
struct Traits;
template <>
struct Traits<float> {
  using Tap = float;
  using Acc = float;
};
template <>
struct Traits<double> {
  using Tap = double;
  using Acc = double;
};
template <>
struct Traits<float2> {
  using Tap = float;
  using Acc = float2;
};
template <>
struct Traits<double2> {
  using Tap = double;
  using Acc = double2;
};

__device__ __forceinline__ float Fma(float h, float x, float acc) { return fmaf(h, x, acc); }
__device__ __forceinline__ double Fma(double h, double x, double acc) { return fma(h, x, acc); }
__device__ __forceinline__ float2 Fma(float h, float2 x, float2 acc) {
  return make_float2(fmaf(h, x.x, acc.x), fmaf(h, x.y, acc.y));
}
__device__ __forceinline__ double2 Fma(double h, double2 x, double2 acc) {
  return make_double2(fma(h, x.x, acc.x), fma(h, x.y, acc.y));
}

template <class T>
__device__ __forceinline__ T Zero();
template <>
__device__ __forceinline__ float Zero<float>() { return 0.f; }
template <>
__device__ __forceinline__ double Zero<double>() { return 0.0; }
template <>
__device__ __forceinline__ float2 Zero<float2>() { return make_float2(0.f, 0.f); }
template <>
__device__ __forceinline__ double2 Zero<double2>() { return make_double2(0.0, 0.0); }

__device__ __forceinline__ float ShflXor(float v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
__device__ __forceinline__ double ShflXor(double v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
__device__ __forceinline__ float2 ShflXor(float2 v, int lane_mask) {
  return make_float2(__shfl_xor_sync(0xffffffffu, v.x, lane_mask),
                     __shfl_xor_sync(0xffffffffu, v.y, lane_mask));
}
__device__ __forceinline__ double2 ShflXor(double2 v, int lane_mask) {
  return make_double2(__shfl_xor_sync(0xffffffffu, v.x, lane_mask),
                      __shfl_xor_sync(0xffffffffu, v.y, lane_mask));
}
__device__ __forceinline__ double2 Add(double2 a, double2 b) {
  return make_double2(a.x + b.x, a.y + b.y);
}
__device__ __forceinline__ float Add(float a, float b) { return a + b; }
__device__ __forceinline__ double Add(double a, double b) { return a + b; }
__device__ __forceinline__ float2 Add(float2 a, float2 b) {
  return make_float2(a.x + b.x, a.y + b.y);
}

// s[i] of channel row xc: the window sample or cval.
template <class T>
__device__ __forceinline__ T Sample(const T* __restrict__ xc, int64_t rel, int64_t x_len, T cval) {
  return (rel >= 0 && rel < x_len) ? __ldg(xc + rel) : cval;
}

// ================================================================================================
// kRegisterBlocked: float32, down == 1, up = U in {1, 2, 3, 4, 8}, P <= kP in {8, 16, 32}.
//
// With down == 1, output k = q*U + t (q = floor(k/U), t = k mod U): each input position q yields
// U consecutive outputs, one per phase, all reading the same P inputs s[q-P+1 .. q]. A thread
// owns V consecutive input positions q0 .. q0+V-1 and so the V*U consecutive outputs
// [q0*U, (q0+V)*U). It keeps the V + P - 1 inputs they read in registers (w[j] = s[q0-P+1+j])
// and, for each phase and tap, does V FMAs whose tap operand is a kernel parameter at a
// compile-time offset: the taps reach the FFMAs from the constant bank (through uniform
// registers), so the inner loop has no loads at all. Per output that is P FMAs and
// (V+P-1)/(4*V*U) 16-byte shared-memory loads.
//
// A block handles tiles of kQ = 256*V input positions, i.e. kTile = kQ*U outputs aligned to a
// multiple of kTile in absolute output index (the first and last tiles are clipped to the
// requested range). Blocks are persistent and software-pipelined:
//   1. publish the tile's inputs s[q_tile - (P-1), q_tile + kQ), loaded into registers during
//      the previous tile, to shared memory (xs);
//   2. issue the global loads of the next tile's inputs (they land while 3 and 4 run);
//   3. each thread computes its V*U outputs and writes them to the staging tile (st) as 16-byte
//      chunks;
//   4. the staged outputs go to y; RbStore below lists the variants. The default (kBulk): each
//      warp's 32 thread runs are one contiguous stretch of y, which one lane hands to the copy
//      engine (cp.async.bulk) so that the stores drain while the warp computes the next tile;
//      stretches clipped by the requested range, or with y not 16-byte aligned, are written with
//      coalesced 16-byte (or 4-byte) stores.
// Without step 2 every tile waits a full DRAM round trip for its inputs while the SM's memory
// pipe idles: on the benchmark's case (a) (H200) that version reached 49% of the copy bandwidth;
// with it and block-wide synchronous stores (kBlock) 71-75%, with bulk stores (kBulk) 82%.
//
// Shared memory (the input tile; the staging tile of kBlock* and kWarp*) is addressed in 16-byte
// chunks, chunk ch stored at ch ^ ((ch >> 3) & 7): a quarter-warp's 16-byte accesses at a
// per-thread stride of 2, 4 or 8 chunks (thread-owned runs) and at stride 1 (the block-wide
// copies) then fall in 8 distinct bank groups; stride 6 (U = 3) is 2-way. kBulk's staging must be
// linear for the copy engine; it rotates each thread's chunks instead (see RbStore).
// taps.h zero-pads each phase to kP taps; the extra fma(0, s, acc) leave acc unchanged.
// ================================================================================================

constexpr int kRbThreads = 256;
constexpr int kRbWarps = kRbThreads / 32;

// How the staged outputs leave for y (step 4). All variants compute every output with the same
// FMAs in the same order, so they produce the same bits; they differ only in the store path.
//   kBlock    block-wide swizzled staging tile; after a block barrier, the block stores it with
//             coalesced 16-byte stores (two barriers per tile). The first pipelined version.
//   kBlockCs  kBlock with streaming (evict-first) stores, st.global.cs.
//   kWarp     each warp stages its own 32 thread runs (a contiguous 1/8 of the tile) and stores
//             them itself right away; the input tile is double-buffered so one block barrier
//             per tile remains, and warps drift freely between barriers.
//   kWarpCs   kWarp with streaming stores.
//   kBulk     kWarp, but the warp's staging run is linear (unswizzled) and, when it lies whole
//             inside the requested range with y 16-byte aligned, one lane hands it to the copy
//             engine with cp.async.bulk (sm_90): the stores leave asynchronously while the warp
//             computes the next tile. Clipped or misaligned runs take kWarp's store loop. Thread
//             runs are written conflict-free by rotating each thread's chunks in registers (an
//             XOR butterfly of selects). Runs of 6 chunks (up = 3) use kWarp.
//   kBulkCs   kBulk with an L2 evict-first cache policy on the bulk copies.
//   kDirect   no staging: each thread stores its own V*U outputs from registers (16-byte
//             stores, 128-byte stride across the warp).
enum class RbStore : int { kBlock = 0, kBlockCs, kWarp, kWarpCs, kBulk, kDirect, kBulkCs };

template <int U>
constexpr int RbInputsPerThread() {
  return U == 8 ? 4 : 8;
}

__host__ __device__ constexpr int Swizzle(int chunk) { return chunk ^ ((chunk >> 3) & 7); }
// Float index of element i of a swizzled chunk array.
__device__ __forceinline__ int SwizzledWord(int i) { return (Swizzle(i >> 2) << 2) | (i & 3); }

template <int U, int kP>
struct RbTaps {
  float h[U * kP];  // h[t*kP + m] = htf[t*P + m] for m < P, else 0
};

template <int U, int kP>
struct RbShape {
  static constexpr int kV = RbInputsPerThread<U>();
  static constexpr int kQ = kRbThreads * kV;  // input positions per tile
  static constexpr int kTile = kQ * U;        // outputs per tile
  static constexpr int kWarpWords = kTile / kRbWarps;  // outputs per warp (contiguous)
  static constexpr int kXs = kQ + kP - 1;     // inputs one tile reads
  static constexpr int kLoads = (kXs + kRbThreads - 1) / kRbThreads;  // per thread
  static constexpr int kWinChunks = (kV + kP - 1 + 3) / 4;            // window, in chunks
  // xs chunks: the last thread's window reads up to chunk (kQ - kV)/4 + kWinChunks - 1;
  // rounded up to whole groups of 8 so that the swizzle stays inside the array.
  static constexpr int kXsChunks = ((kQ - kV) / 4 + kWinChunks + 7) / 8 * 8;
  static constexpr int kOutChunks = kV * U / 4;  // per thread
  static_assert(kV % 4 == 0 && (kV * U) % 4 == 0, "thread runs must be whole chunks");
};

// The store variant an instantiation really runs (kBulk needs power-of-two thread runs).
template <int U, int kP>
constexpr RbStore RbEffective(RbStore m) {
  constexpr int n = RbShape<U, kP>::kOutChunks;
  return (m == RbStore::kBulk || m == RbStore::kBulkCs) && (n & (n - 1)) != 0 ? RbStore::kWarp
                                                                                : m;
}

// Dynamic shared memory of one block: the staging tile (none for kDirect), then one input tile
// (kBlock*) or two (the warp variants, which keep one block barrier per tile).
template <int U, int kP>
constexpr int RbSmemBytes(RbStore m) {
  using S = RbShape<U, kP>;
  const bool block = m == RbStore::kBlock || m == RbStore::kBlockCs;
  const int st = m == RbStore::kDirect ? 0 : S::kTile / 4;
  return 16 * (st + (block ? 1 : 2) * S::kXsChunks);
}

template <bool kCs>
__device__ __forceinline__ void Put(float* p, float v) {
  if constexpr (kCs) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}
template <bool kCs>
__device__ __forceinline__ void Put(float4* p, float4 v) {
  if constexpr (kCs) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// Stores staging words [lo, hi) (lo < hi) to yt[lo, hi) with `nt` threads, this one `t`:
// coalesced 16-byte stores of the whole chunks when yt is 16-byte aligned, single words at the
// ends; otherwise single words throughout. kSwz: the staging chunks are swizzled.
template <bool kSwz, bool kCs>
__device__ __forceinline__ void StoreSpan(float* yt, const float4* st4, int lo, int hi, int t,
                                          int nt, bool aligned) {
  const float* st = reinterpret_cast<const float*>(st4);
  auto word = [&](int s) { return st[kSwz ? SwizzledWord(s) : s]; };
  if (aligned) {
    const int c_lo = (lo + 3) >> 2, c_hi = hi >> 2;  // whole chunks inside [lo, hi)
    for (int ch = c_lo + t; ch < c_hi; ch += nt) {
      Put<kCs>(reinterpret_cast<float4*>(yt) + ch, st4[kSwz ? Swizzle(ch) : ch]);
    }
    if (c_lo <= c_hi) {
      if (t < 4 * c_lo - lo) Put<kCs>(yt + lo + t, word(lo + t));
      if (t < hi - 4 * c_hi) Put<kCs>(yt + 4 * c_hi + t, word(4 * c_hi + t));
    } else if (t < hi - lo) {  // the range lies inside one chunk
      Put<kCs>(yt + lo + t, word(lo + t));
    }
  } else {
    for (int s = lo + t; s < hi; s += nt) Put<kCs>(yt + s, word(s));
  }
}

template <int U, int kP, RbStore kMode>
__global__ void __launch_bounds__(kRbThreads)
    RegisterBlockedKernel(const float* __restrict__ x, int64_t x_stride, int64_t x_first,
                          int64_t x_len, float cval, float* __restrict__ y, int64_t y_stride,
                          int64_t out_first, int64_t out_count, int64_t channels,
                          int64_t tile_first, int64_t tiles, const RbTaps<U, kP> taps) {
  using S = RbShape<U, kP>;
  constexpr int kV = S::kV;
  constexpr bool kBlockStore = kMode == RbStore::kBlock || kMode == RbStore::kBlockCs;
  constexpr bool kWarpStore = kMode == RbStore::kWarp || kMode == RbStore::kWarpCs;
  constexpr bool kBulk = kMode == RbStore::kBulk || kMode == RbStore::kBulkCs;
  constexpr bool kCs = kMode == RbStore::kBlockCs || kMode == RbStore::kWarpCs;
  constexpr int kStChunks = kMode == RbStore::kDirect ? 0 : S::kTile / 4;
  static_assert(!kBulk || (S::kOutChunks & (S::kOutChunks - 1)) == 0, "see RbEffective");
  extern __shared__ float4 rb_smem[];
  float4* const st4 = rb_smem;
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t total = channels * tiles;

  // Prefetch registers: pre[r] = s[q_tile - (kP-1) + tid + 256 r] of tile bb.
  float pre[S::kLoads];
  auto load_tile = [&](int64_t bb) {
    const int64_t c = bb / tiles;
    const int64_t q_tile = (tile_first + bb % tiles) * S::kQ;
    const float* xc = x + c * x_stride;
    const int64_t rel0 = q_tile - (kP - 1) - x_first;
#pragma unroll
    for (int r = 0; r < S::kLoads; ++r) {
      const int i = tid + r * kRbThreads;
      pre[r] = i < S::kXs ? Sample(xc, rel0 + i, x_len, cval) : 0.f;
    }
  };
  if (blockIdx.x < total) load_tile(blockIdx.x);

  int parity = 0;
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
    float4* const xs4 = rb_smem + kStChunks + (kBlockStore ? 0 : parity * S::kXsChunks);
    float* const xs = reinterpret_cast<float*>(xs4);
    parity ^= 1;
    // 1. Publish this tile's inputs. (kBlock*: the barrier also says every thread is done with
    //    the previous tile's st. The warp variants write the other xs buffer, last read two
    //    tiles ago, i.e. before every thread passed the previous tile's barrier.)
#pragma unroll
    for (int r = 0; r < S::kLoads; ++r) {
      const int i = tid + r * kRbThreads;
      if (i < S::kXs) xs[SwizzledWord(i)] = pre[r];
    }
    __syncthreads();  // xs complete
    // 2. Start the next tile's loads.
    if (b + gridDim.x < total) load_tile(b + gridDim.x);

    // 3. Thread tid: inputs q0 = q_tile + tid*kV + [0, kV); w[j] = s[q0 - (kP-1) + j], so output
    //    (q0 + v)*U + t = sum_m h[t*kP + m] * w[v + kP - 1 - m].
    float w[S::kWinChunks * 4];
#pragma unroll
    for (int j = 0; j < S::kWinChunks; ++j) {
      const float4 v = xs4[Swizzle(tid * (kV / 4) + j)];
      w[4 * j] = v.x;
      w[4 * j + 1] = v.y;
      w[4 * j + 2] = v.z;
      w[4 * j + 3] = v.w;
    }
    float acc[kV][U];
#pragma unroll
    for (int t = 0; t < U; ++t) {
#pragma unroll
      for (int v = 0; v < kV; ++v) acc[v][t] = 0.f;
#pragma unroll
      for (int m = 0; m < kP; ++m) {
        const float h = taps.h[t * kP + m];
#pragma unroll
        for (int v = 0; v < kV; ++v) acc[v][t] = fmaf(h, w[v + kP - 1 - m], acc[v][t]);
      }
    }
    // The thread's outputs o = v*U + t are staging words tid*kV*U + o, i.e. chunks
    // tid*kOutChunks + j holding outputs 4j .. 4j+3.
    float4 q[S::kOutChunks];
#pragma unroll
    for (int j = 0; j < S::kOutChunks; ++j) {
      q[j].x = acc[(4 * j) / U][(4 * j) % U];
      q[j].y = acc[(4 * j + 1) / U][(4 * j + 1) % U];
      q[j].z = acc[(4 * j + 2) / U][(4 * j + 2) % U];
      q[j].w = acc[(4 * j + 3) / U][(4 * j + 3) % U];
    }

    // 4. Staging word s is output k_tile + s, i.e. yt[s] with yt = &y[c][k_tile - out_first];
    //    only s in [lo, hi) lies inside the requested range.
    const int64_t c = b / tiles;
    const int64_t k_tile = (tile_first + b % tiles) * S::kTile;
    const int lo = out_first > k_tile ? static_cast<int>(out_first - k_tile) : 0;
    const int hi = out_first + out_count < k_tile + S::kTile
                       ? static_cast<int>(out_first + out_count - k_tile)
                       : S::kTile;
    float* yt = y + c * y_stride + (k_tile - out_first);
    const bool aligned = (reinterpret_cast<uintptr_t>(yt) & 15u) == 0;
    if constexpr (kBlockStore) {
#pragma unroll
      for (int j = 0; j < S::kOutChunks; ++j) st4[Swizzle(tid * S::kOutChunks + j)] = q[j];
      __syncthreads();  // st complete; every thread is done reading xs
      StoreSpan<true, kCs>(yt, st4, lo, hi, tid, kRbThreads, aligned);
    } else if constexpr (kWarpStore) {
      // The warp's runs are staging words [w0, w0 + kWarpWords), closed under the swizzle.
#pragma unroll
      for (int j = 0; j < S::kOutChunks; ++j) st4[Swizzle(tid * S::kOutChunks + j)] = q[j];
      __syncwarp();
      const int w0 = warp * S::kWarpWords;
      const int wlo = lo > w0 ? lo : w0;
      const int whi = hi < w0 + S::kWarpWords ? hi : w0 + S::kWarpWords;
      if (wlo < whi) StoreSpan<true, kCs>(yt, st4, wlo, whi, lane, 32, aligned);
      // (the next tile's barrier orders these reads before the run is rewritten)
    } else if constexpr (kBulk) {
      // Linear staging: thread chunk j at tid*n + j. A quarter-warp writes step j at chunk
      // tid*n + (j ^ r) with r = (tid / (8/n)) mod n, i.e. 8 distinct bank groups; q is
      // permuted so that q[j] holds chunk j ^ r.
      constexpr int n = S::kOutChunks;
      const int r = (tid / (8 / n)) & (n - 1);
#pragma unroll
      for (int bit = 1; bit < n; bit <<= 1) {
        const bool swap = (r & bit) != 0;
#pragma unroll
        for (int j = 0; j < n; ++j) {
          if ((j & bit) == 0) {
            const float4 a = q[j], o = q[j | bit];
            q[j] = swap ? o : a;
            q[j | bit] = swap ? a : o;
          }
        }
      }
      if (lane == 0) BulkWaitRead();  // the copy engine is done with this warp's last run
      __syncwarp();
#pragma unroll
      for (int j = 0; j < n; ++j) st4[tid * n + (j ^ r)] = q[j];
      FenceProxyAsyncShared();
      __syncwarp();
      const int w0 = warp * S::kWarpWords;
      if (aligned && lo <= w0 && w0 + S::kWarpWords <= hi) {
        if (lane == 0) {
          BulkStoreCommit<kMode == RbStore::kBulkCs>(yt + w0, st4 + w0 / 4, S::kWarpWords * 4);
        }
      } else {
        const int wlo = lo > w0 ? lo : w0;
        const int whi = hi < w0 + S::kWarpWords ? hi : w0 + S::kWarpWords;
        if (wlo < whi) StoreSpan<false, false>(yt, st4, wlo, whi, lane, 32, aligned);
      }
    } else {  // kDirect
      const int s0 = tid * kV * U;
      if (aligned && lo <= s0 && s0 + kV * U <= hi) {
#pragma unroll
        for (int j = 0; j < S::kOutChunks; ++j) reinterpret_cast<float4*>(yt + s0)[j] = q[j];
      } else {
#pragma unroll
        for (int o = 0; o < kV * U; ++o) {
          if (lo <= s0 + o && s0 + o < hi) yt[s0 + o] = acc[o / U][o % U];
        }
      }
    }
  }
  if constexpr (kBulk) {
    if (lane == 0) BulkWaitAll();  // shared memory stays allocated until the copies are done
  }
}

// ================================================================================================
// kSmemTile: any dtype, up, down; P moderate. A block computes tiles of kTileOutputs = 1024
// consecutive outputs of one channel, 4 per thread (outputs j = tid + 256 r, so each store is
// coalesced across the warp). Blocks are persistent (grid-stride over tiles): the U*P taps are
// copied into shared memory once per block.
//
// Index math for a tile starting at output kb: write kb*down = xb*up + rb (0 <= rb < up). Output
// kb + j then has k*down = xb*up + rb + j*down, so q = xb + (rb + j*down) / up and
// t = (rb + j*down) % up: one 32-bit division per output (rb + j*down < up + 1024*down <= 2^27).
// The tile reads s[xlo, xlo + span) with xlo = xb - (P-1) and
// span = (rb + (n_here-1)*down)/up + P; when that fits (kSmemX) it is staged in shared memory
// with coalesced loads and output j reads xs[(q - xb) + P - 1 - m]. Otherwise (heavy
// decimation: span ~ 1024*down/up) each output reads its P inputs from global memory through
// the read-only cache.
// ================================================================================================

constexpr int kTileThreads = 256;
constexpr int kTilePerThread = 4;
constexpr int kTileOutputs = kTileThreads * kTilePerThread;

template <class T, bool kSmemX>
__global__ void __launch_bounds__(kTileThreads)
    SmemTileKernel(const T* __restrict__ x, int64_t x_stride, int64_t x_first, int64_t x_len,
                   T cval, T* __restrict__ y, int64_t y_stride, int64_t out_first,
                   int64_t out_count, int64_t channels,
                   const typename Traits<T>::Tap* __restrict__ htf, int up, int down, int P,
                   int taps_bytes_aligned) {
  using Tap = typename Traits<T>::Tap;
  using Acc = typename Traits<T>::Acc;
  extern __shared__ __align__(16) unsigned char smem[];
  Tap* ts = reinterpret_cast<Tap*>(smem);
  T* xs = reinterpret_cast<T*>(smem + taps_bytes_aligned);
  const int tid = threadIdx.x;
  for (int i = tid; i < up * P; i += kTileThreads) ts[i] = htf[i];
  // (the __syncthreads after staging x publishes ts too)

  const int64_t tiles = (out_count + kTileOutputs - 1) / kTileOutputs;
  for (int64_t b = blockIdx.x; b < channels * tiles; b += gridDim.x) {
    const int64_t c = b / tiles;
    const int64_t tile = b % tiles;
    const int64_t kb = out_first + tile * kTileOutputs;
    const int n_here = static_cast<int>(
        out_count - tile * kTileOutputs < kTileOutputs ? out_count - tile * kTileOutputs
                                                       : kTileOutputs);
    const int64_t kbd = kb * down;
    const int64_t xb = kbd / up;
    const int rb = static_cast<int>(kbd - xb * up);
    const int64_t xlo = xb - (P - 1);  // xs[i] = s[xlo + i]
    const T* xc = x + c * x_stride;
    if (kSmemX) {
      const int span = (rb + (n_here - 1) * down) / up + P;
      for (int i = tid; i < span; i += kTileThreads) {
        xs[i] = Sample(xc, xlo + i - x_first, x_len, cval);
      }
    }
    __syncthreads();

    int base[kTilePerThread];  // index into xs of s[q] for output j
    const Tap* hp[kTilePerThread];
#pragma unroll
    for (int r = 0; r < kTilePerThread; ++r) {
      int j = tid + r * kTileThreads;
      if (j >= n_here) j = n_here - 1;  // computed but not stored
      const int jd = rb + j * down;
      const int qo = jd / up;
      base[r] = qo + P - 1;
      hp[r] = ts + (jd - qo * up) * P;
    }
    Acc acc[kTilePerThread];
#pragma unroll
    for (int r = 0; r < kTilePerThread; ++r) acc[r] = Zero<Acc>();
    if (kSmemX) {
#pragma unroll 4
      for (int m = 0; m < P; ++m) {
#pragma unroll
        for (int r = 0; r < kTilePerThread; ++r) acc[r] = Fma(hp[r][m], xs[base[r] - m], acc[r]);
      }
    } else {
      const int64_t rel0 = xlo - x_first;
#pragma unroll 4
      for (int m = 0; m < P; ++m) {
#pragma unroll
        for (int r = 0; r < kTilePerThread; ++r) {
          acc[r] = Fma(hp[r][m], Sample(xc, rel0 + base[r] - m, x_len, cval), acc[r]);
        }
      }
    }
    T* yc = y + c * y_stride + (kb - out_first);
#pragma unroll
    for (int r = 0; r < kTilePerThread; ++r) {
      const int j = tid + r * kTileThreads;
      if (j < n_here) yc[j] = acc[r];
    }
    __syncthreads();  // xs is reused by the next tile
  }
}

// ================================================================================================
// kWarpPerOutput: long filters (P in the hundreds or more, or taps too large for shared memory).
// A warp computes 32 consecutive outputs of one channel, one after another: for each, lane l
// accumulates m = l, l+32, ... (taps and inputs contiguous across the warp, so both loads are
// coalesced), a butterfly of shuffles sums the lanes (every lane ends with the same, commutative
// sums), and lane j keeps output j; the 32 results leave in one coalesced store.
// ================================================================================================

constexpr int kWarpThreads = 256;

template <class T>
__global__ void __launch_bounds__(kWarpThreads)
    WarpPerOutputKernel(const T* __restrict__ x, int64_t x_stride, int64_t x_first,
                        int64_t x_len, T cval, T* __restrict__ y, int64_t y_stride,
                        int64_t out_first, int64_t out_count, int64_t channels,
                        const typename Traits<T>::Tap* __restrict__ htf, int up, int down,
                        int P) {
  using Acc = typename Traits<T>::Acc;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kWarpThreads + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * kWarpThreads) >> 5;
  const int64_t groups = (out_count + 31) / 32;
  for (int64_t g = warp; g < channels * groups; g += nwarps) {
    const int64_t c = g / groups;
    const int64_t k0 = out_first + (g % groups) * 32;
    const int n_here = static_cast<int>(out_first + out_count - k0 < 32
                                            ? out_first + out_count - k0
                                            : 32);
    const T* xc = x + c * x_stride;
    // k0*down = q0*up + r0; output k0 + j then has q = q0 + (r0 + j*down) / up (32-bit).
    const int64_t q0 = k0 * down / up;
    const int r0 = static_cast<int>(k0 * down - q0 * up);
    Acc mine = Zero<Acc>();
    for (int j = 0; j < n_here; ++j) {
      const int jd = r0 + j * down;
      const int qo = jd / up;
      const int t = jd - qo * up;
      const auto* h = htf + static_cast<int64_t>(t) * P;
      const int64_t rel = q0 + qo - x_first;
      Acc acc = Zero<Acc>();
      for (int m = lane; m < P; m += 32) acc = Fma(__ldg(h + m), Sample(xc, rel - m, x_len, cval), acc);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc = Add(acc, ShflXor(acc, off));
      if (lane == j) mine = acc;
    }
    if (lane < n_here) y[c * y_stride + (k0 - out_first) + lane] = mine;
  }
}

}  // namespace fresnel::interp::kernels
