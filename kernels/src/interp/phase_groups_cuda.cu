// kPhaseGroups (phase_groups.h has the decomposition): plan, kernel and launch.
//
// A block owns tiles of `periods` consecutive periods of one channel, persistent over tiles:
//   1. the tile's inputs s[n_tile*d - (P-1) + z], z in [0, periods*d + K - 1), are copied into
//      shared memory with cp.async (all of them in flight at once, no registers held),
//      de-interleaved by z mod d: z sits at xin[(z mod d)*ld + z/d]. A lane owning period nl
//      reads z = nl*d + c (c = q_{gr*V} + i, the same for the whole warp), i.e.
//      xin[(c mod d)*ld + c/d + nl]: the 32 lanes of a warp read 32 consecutive words, free of
//      bank conflicts whatever d is (plain layout: stride d, 2-way conflicts for even d and
//      worse for multiples of 4). For odd d (160/147, the common case) the plain layout is
//      conflict-free already and cheaper (PhaseGroupsPlan::plain, CudaPlanOptions::pg_layout):
//      z sits at xin[shift + z], the tile is copied in 16-byte chunks (shift aligns them), and
//      the band loop reads xb[i] with xb fixed per task, so that after unrolling each step is
//      one tap load, R input loads with immediate offsets and R*V FMAs, with no offset update
//      (the de-interleaved loop's row/offset wrap costs about as much as its loads);
//   2. task (chunk, group) = 32*R periods x V outputs; warp w takes tasks w, w + 8, ...; lane
//      l owns periods chunk*32*R + l + 32*r (r < R) and accumulates R*V outputs over i =
//      K-1 .. 0: one broadcast load of V taps and R input loads per i, R*V FMAs;
//   3. the outputs go to a staging tile st[nl*sr + j] (sr/V odd: the lanes' V-wide stores fall
//      in distinct banks), then, after a barrier, to y with coalesced 4-byte stores (16-byte
//      ones for the plain tile where u % 4 == 0 and the tile's y row is 16-byte aligned) while
//      the next tile's copies (issued right after that barrier) are in flight. For the plain
//      tile with u % 4 == 0 the period is rotated (PhaseGroupsPlan::rotations): rotation s
//      makes a tile's outputs start at n_tile*u - s, and the launch picks the s that puts that
//      output on a 16-byte boundary of y, so resample_poly (whose first kept output, 11 for
//      160/147, is rarely a multiple of 4) takes the 16-byte path instead of 4-byte stores with
//      per-output index math. Every output still sums its own P products in m order: the
//      rotation changes which outputs share a band, not any bit of the result.
//   4. Staging in rounds (PhaseGroupsPlan::rounds; plain tile, V = 4, u % 4 == 0, more than 18
//      groups, where it saves shared memory; opt-in, measured 63% slower on 160/147): instead
//      of step 3's tile-sized staging, round rd runs task rd*8 + w on warp w, stages the warp's
//      32R periods x V outputs in slot w of one of two small buffers (period-major, 8 slots of
//      V floats plus V of padding per period: sr/V = 9 is odd, so the lanes' V-wide stores and
//      each quarter-warp's reads hit distinct banks), and after one barrier thread t copies slot
//      t % 8 of periods t/8 + 32i (i < R) to y with 16-byte stores: 8 consecutive threads write
//      the 8 slots' outputs of one period, i.e. the 8 tasks' 32 outputs, contiguous in y where
//      the round's groups are consecutive (160/147: 128 bytes a period). The two buffers
//      alternate, so one barrier per round suffices: a buffer is rewritten two rounds later,
//      after a barrier that every thread reaches only once it has copied that buffer out. The
//      next tile's copies are issued after the last round's barrier. For 160/147 (R = 2) the
//      block needs 72 KiB of shared memory instead of 95 (three blocks per SM instead of two),
//      and the global stores spread over the tile's compute instead of following it.
//   5. Bulk copy-out (PhaseGroupsPlan::bulk; plain tile, V = 4, u % 4 == 0, R = 2; opt-in:
//      H200 59.3% against 58.5% once, H100 within 0.5% of stage 1; with 7's bulk input copies
//      3% faster than the default on the H100, BENCHMARKS.md session 10): step 3's
//      staging, but an interior tile whose y row is 16-byte aligned leaves by one cp.async.bulk
//      per period (u floats from st + nl*sr to y), issued by thread nl right after the barrier;
//      the threads go straight on to wait for the next tile instead of copying 40 KiB (160/147)
//      through their registers. Before st is rewritten each issuing thread waits until its
//      copies have been read (cp.async.bulk.wait_group.read, before the tile's first barrier),
//      and every thread fences its st writes for the async proxy before the barrier that
//      precedes the copies. kRegisterBlocked's kBulk stores do the same (82% against 75% of the
//      copy bandwidth on case (a)).
//   6. Split tail (PhaseGroupsPlan::tail; plain tile, V = 4, R = 2, one input tile, staging 1
//      or 3; opt-in): the grid's blocks take tiles b, b + gridDim.x, ..., so when the tile count
//      is not a multiple of the grid the last wave is partial: 160/147 on 2^26 samples makes
//      7134 tiles on 264 blocks, 27 waves and 6 tiles that run alone while every other block has
//      finished. Instead those tiles are split by groups into parts (all of the tile's periods,
//      a range of groups: one task per warp with tail 2), one part per block, run after the
//      whole tiles (tail 2) or before them (tail 3, as many parts as there are blocks to take
//      them, which also starts those blocks out of step with their SM's other block). A part
//      loads the whole input tile, computes its groups' tasks only and copies its outputs out
//      with 4-byte stores (a period's part is contiguous in y). Same bits: every output still
//      sums its own P products in m order.
//   7. Bulk input copies (PhaseGroupsPlan::bulk_in; same conditions; opt-in): an interior tile
//      arrives by one cp.async.bulk issued by thread 0 (16-byte aligned: the plain tile's
//      shift), completing on an mbarrier that every thread waits on before the tile's first
//      barrier, instead of ~9 cp.async per thread; edge tiles keep the per-thread path.
// The table (taps, then the groups' first inputs) is copied to shared memory once per block.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "interp/bulk_copy_cuda.cuh"
#include "interp/occupancy_cuda.cuh"
#include "interp/phase_groups.h"

namespace fresnel::interp::internal {
namespace {

constexpr int kPgThreads = 256;
constexpr int kPgWarps = kPgThreads / 32;
// Shared memory per block the planner aims below (two blocks per SM fit), and the hard cap.
constexpr int kPgSmemTarget = 100 * 1024;
constexpr int kPgSmemMax = 200 * 1024;
// Taps per phase from which a lane owns 8 periods rather than kPgShortPeriods (long bands
// amortise the wider tile; short ones need the tasks to balance across warps).
constexpr int kPgLongTaps = 48;
// Periods per lane below kPgLongTaps (PhaseGroupsChoice::periods_per_lane). Measured reason
// (H200, docs/bench/interp.md session 6): R = 1 halves the tile (160/147: 55 KiB a block, four
// blocks per SM instead of two) but costs one tap load per 4 FMAs instead of per 8, and lost:
// 160/147 0.291 against 0.266 ms, 3/2 with P = 8 0.033 against 0.026 ms.
constexpr int kPgShortPeriods = 2;
// Default of PhaseGroupsChoice::widen (docs/bench/interp.md has the measurements).
constexpr int kPgDefaultWiden = 2;
// Default of PhaseGroupsChoice::prefetch (1: one input tile, 2: two).
constexpr int kPgDefaultPrefetch = 1;
// Default of PhaseGroupsChoice::stage (1: the whole tile staged and copied out by the threads,
// 2: rounds, 3: the whole tile staged, bulk copies out; where they apply). Measured reason
// (H200, 2026-12-02, docs/interp.md): rounds 0.366 ms on 160/147 against 0.224 for the whole
// tile (63% slower, three blocks per SM and all). Stage 3 with bulk input copies (kPgDefaultBulkIn
// = 2) is the default since session 13; the choice changes no device code.
constexpr int kPgDefaultStage = 3;
// Defaults of PhaseGroupsChoice::tail and ::bulk_in (tail 1: whole tiles only; bulk_in 2: the
// input tile by bulk copies instead of per-thread cp.async). Measured reason: 160/147 on 2^26
// float32, stage 3 + bulk input against stage 1 + per-thread input (the default before), in the
// same runs: H200 (2026-12-07, session 13, four runs) 0.2180-0.2208 ms (60.9-61.9% of copy)
// against 0.2229-0.2305 ms (58.7-59.8%), faster in every run; H100 (sessions 10 and 12, ten
// runs) 2.5-3.0% faster in every run; stage 3 + tail 3 and tail 2 no better, stage 1 with bulk
// input copies 7% slower, so the default takes bulk input only where stage 3's bulk copy-out
// applies (BENCHMARKS.md).
constexpr int kPgDefaultTail = 1;
constexpr int kPgDefaultBulkIn = 2;

int AlignUp4(int v) { return (v + 3) / 4 * 4; }

// Kernel arguments derived from the plan and the launch.
struct PgArgs {
  int u, d, groups, k, p, periods, ld, sr, chunks;
  int table_words;  // groups*k*v floats + groups ints
  int xin_off;      // float offsets in shared memory
  int st_off;
  int wrap;  // (d-1)*ld - 1: offset change when c mod d wraps from 0 to d-1
  // The task cursor's step: task += kPgWarps is (chunk, group) += (task_step_chunk,
  // task_step_group) with a carry, so that no warp divides by `groups` per task.
  int task_step_chunk, task_step_group;
  int span;  // floats of the input tile (z in [0, span))
  int in_floats;  // shared floats per input tile (InputFloats)
  int prefetch;   // 1: two input tiles (PhaseGroupsPlan::prefetch)
  int st_round;   // floats per staging buffer of a round (PhaseGroupsPlan::rounds)
  int zoff;  // the rotation's input origin offset (PhaseGroupsPlan::zoff), <= 0
  int rot;   // the period rotation s: tile outputs start at n_tile*u - s
  int64_t n_first;  // first period of the requested range
  int64_t tiles;    // per channel
  // The tile cursor's step: b += gridDim.x is (channel, tile) += (grid_step_c, grid_step_t)
  // with a carry (no 64-bit division per tile).
  int64_t grid_step_c, grid_step_t;
};
// The kTail and kBulkIn arguments, a parameter of their own: PgArgs grown by these fields (120
// to 168 bytes) changed the code of every instantiation (the parameter struct then went through
// a generic address: 48 registers and spills became 64), and this kernel's speed follows its
// code generation closely (BENCHMARKS.md, session 8).
struct PgTailArgs {
  // The split last wave (PhaseGroupsPlan::tail): items [0, whole) but the n_parts items from
  // part_first are whole tiles in order; item part_first + i is part i % split (groups
  // [g*part_groups, +part_groups)) of tile tail_tile + i / split.
  int64_t whole, n_parts, part_first, tail_tile;
  int split, part_groups;
  int bar_off;  // float offset of the input tile's mbarrier (kBulkIn)
};

__device__ __forceinline__ void CpAsync4(float* dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
#else
  *dst = __ldg(src);
#endif
}
__device__ __forceinline__ void CpAsync16(float* dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
#else
  *reinterpret_cast<float4*>(dst) = __ldg(reinterpret_cast<const float4*>(src));
#endif
}
__device__ __forceinline__ void CpAsyncWaitAll() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// One mbarrier (kBulkIn): thread 0 arms it with the tile's bytes and hands the tile to the copy
// engine, whose completion flips the barrier's phase; every thread waits for that phase.
__device__ __forceinline__ unsigned SmemAddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void MbarInit(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SmemAddr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared
// memory, completing on `bar` (one thread).
__device__ __forceinline__ void BulkLoad(float* dst, const float* src, int bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The block's earlier generic reads of dst (ordered before this thread by a barrier) before
  // the async proxy's writes.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
#endif
}
__device__ __forceinline__ void MbarWait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
        "selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(SmemAddr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

template <int V>
__device__ __forceinline__ void LoadTaps(const float* p, float (&h)[V]) {
  if constexpr (V == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    h[0] = t.x;
    h[1] = t.y;
    h[2] = t.z;
    h[3] = t.w;
  } else if constexpr (V == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    h[0] = t.x;
    h[1] = t.y;
  } else {
    h[0] = *p;
  }
}
// p is V-float aligned (sr and the group offset are multiples of V).
template <int V>
__device__ __forceinline__ void StoreGroup(float* p, const float (&a)[V]) {
  if constexpr (V == 4) {
    *static_cast<float4*>(__builtin_assume_aligned(p, 16)) = make_float4(a[0], a[1], a[2], a[3]);
  } else if constexpr (V == 2) {
    *static_cast<float2*>(__builtin_assume_aligned(p, 8)) = make_float2(a[0], a[1]);
  } else {
    *p = a[0];
  }
}

// The plain tile's band loop for one task: acc[r][v] += sum over i = K-1 .. 0 of the group's
// taps tp[i*V + v] times the lane's inputs x0[r*32*d - (K-1-i)], x0 pointing at i = K-1 of
// period r = 0 (see the kernel). The loop walks pointers down (tp: V taps a step, xr[r]: one
// word a step), so that after unrolling every load has an immediate offset and a step costs one
// tap load, R input loads and R*V FMAs, with one pointer update per pointer every 4 steps.
template <int V, int R>
__device__ __forceinline__ void PlainBand(const float* x0, int d, const float* tg, int k,
                                          float (&acc)[R][V]) {
  const float* xr[R];
  xr[0] = x0;
#pragma unroll
  for (int r = 1; r < R; ++r) xr[r] = xr[r - 1] + 32 * d;
  const float* tp = tg + (k - 1) * V;
#pragma unroll 4
  for (int n = k; n > 0; --n) {
    float h[V];
    LoadTaps<V>(tp, h);
    tp -= V;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float sv = *xr[r];
      --xr[r];
#pragma unroll
      for (int v = 0; v < V; ++v) acc[r][v] = fmaf(h[v], sv, acc[r][v]);
    }
  }
}

// kPlain: the input tile in plain order (d odd, see the file comment), 16-byte copies in and,
// where u is a multiple of 4 and y is aligned, 16-byte copies out; otherwise round 1's
// de-interleaved tile with 4-byte copies.
// kD (de-interleaved tile only): 0, or d itself when d is 2, 4 or 8, for the band loop in
// blocks of d steps (one row pointer per row; PhaseGroupsPlan::row_blocks).
// kStage (PhaseGroupsChoice::stage): 1: the whole tile staged and copied out by the threads;
// 2 (plain tile, V = 4): staged in rounds (file comment, 4); 3 (plain tile, u % 4 == 0): the
// whole tile staged, interior tiles copied out by the copy engine (file comment, 5).
// kTail (plain tile, kStage 1 or 3; PhaseGroupsPlan::tail): the work items of PgArgs::whole and
// ::n_parts, i.e. the last wave's tiles split by groups (file comment, 6).
// kBulkIn (plain tile, one input tile; PhaseGroupsPlan::bulk_in): interior tiles arrive by one
// cp.async.bulk completing on an mbarrier (file comment, 7).
template <int V, int R, bool kPlain, int kD = 0, int kStage = 1, bool kTail = false,
          bool kBulkIn = false>
__global__ void __launch_bounds__(kPgThreads)
    PhaseGroupsKernel(const float* __restrict__ x, int64_t x_stride, int64_t x_first,
                      int64_t x_len, float cval, float* __restrict__ y, int64_t y_stride,
                      int64_t out_first, int64_t out_count, int64_t channels,
                      const float* __restrict__ table, const PgArgs a, const PgTailArgs ta) {
  extern __shared__ float4 pg_smem4[];
  float* const smem = reinterpret_cast<float*>(pg_smem4);
  const float* const taps = smem;
  const int* const qbase = reinterpret_cast<const int*>(smem + a.groups * a.k * V);
  // The input tile; with a.prefetch two of them, the next tile's copies landing in one while
  // the block computes from the other.
  float* xin = smem + a.xin_off;
  float* xin_next = a.prefetch ? xin + a.in_floats : xin;
  float* const st = smem + a.st_off;
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  {
    const unsigned* src = reinterpret_cast<const unsigned*>(table);
    unsigned* dst = reinterpret_cast<unsigned*>(smem);
    for (int i = tid; i < a.table_words; i += kPgThreads) dst[i] = __ldg(src + i);
  }
  const int64_t total = channels * a.tiles;
  const int span = a.span;
  // z = tid + 256 e, de-interleaved incrementally: 256 = step_q*d + step_r.
  const int step_q = kPgThreads / a.d, step_r = kPgThreads % a.d;
  const int z_q0 = tid / a.d, z_r0 = tid % a.d;

  // Plain tile: z sits at xin[shift + z], shift = the 16-byte misalignment (in floats) of
  // z = 0's global address, so that every 4-float chunk e (xin[4e, 4e+4)) is one aligned copy.
  int shift = 0, shift_next = 0;
  // kBulkIn: the mbarrier, its phase, and whether the tile in flight went by a bulk copy (the
  // same for every thread: it depends on the tile only).
  uint64_t* const bar = reinterpret_cast<uint64_t*>(smem + ta.bar_off);
  unsigned bar_phase = 0;
  bool bulk_pending = false;
  if constexpr (kBulkIn) {
    static_assert(kPlain, "bulk input copies: plain tile");
    if (tid == 0) MbarInit(bar);
    __syncthreads();  // the barrier is initialised before any thread waits on it
  }
  // Tile (channel c, tile t of the channel) into `buf` (with its plain-tile shift `sh`).
  auto issue = [&](int64_t c, int64_t t, float* buf, int& sh) {
    const int64_t n_tile = a.n_first + t * a.periods;
    const int64_t rel0 = n_tile * a.d - (a.p - 1) + a.zoff - x_first;  // x index of z = 0
    const float* xc = x + c * x_stride;
    if constexpr (kPlain) {
      sh = static_cast<int>((reinterpret_cast<uintptr_t>(xc) / 4 + rel0) & 3);
      const int chunks = (span + sh + 3) / 4;
      const int64_t rel_base = rel0 - sh;  // x index of buf[0], 16-byte aligned
      if (rel_base >= 0 && rel_base + 4 * chunks <= x_len) {
        // Interior tile (all but the first and last of a channel): no bounds checks.
        const float* src = xc + rel_base;
        if constexpr (kBulkIn) {
          if (tid == 0) BulkLoad(buf, src, 16 * chunks, bar);
          bulk_pending = true;
        } else {
          for (int e = tid; e < chunks; e += kPgThreads) CpAsync16(buf + 4 * e, src + 4 * e);
        }
        return;
      }
      for (int e = tid; e < chunks; e += kPgThreads) {
        const int64_t rel = rel0 + 4 * e - sh;  // x index of buf[4e]
        float* dst = buf + 4 * e;
        if (rel >= 0 && rel + 4 <= x_len) {
          CpAsync16(dst, xc + rel);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            dst[q] = rel + q >= 0 && rel + q < x_len ? __ldg(xc + rel + q) : cval;
          }
        }
      }
      return;
    }
    int qq = z_q0, rr = z_r0;
    for (int z = tid; z < span; z += kPgThreads) {
      float* dst = buf + rr * a.ld + qq;
      const int64_t rel = rel0 + z;
      if (rel >= 0 && rel < x_len) {
        CpAsync4(dst, xc + rel);
      } else {
        *dst = cval;
      }
      qq += step_q;
      rr += step_r;
      if (rr >= a.d) {
        rr -= a.d;
        ++qq;
      }
    }
  };
  // The tile cursor: block b's tile is (channel b / tiles, tile b % tiles); one division here,
  // then b += gridDim.x steps it with a carry.
  int64_t tc = blockIdx.x / a.tiles, tt = blockIdx.x % a.tiles;
  // kTail: the block's items are whole tiles (taken from the cursor) and at most one part;
  // take(item) puts the item's tile in (nc, nt) and its groups in [n_glo, n_ghi).
  int64_t items = total;
  int64_t nc = 0, nt = 0;
  int n_glo = 0, n_ghi = a.groups;
  // (Generic, so that it is compiled only where kTail calls it.)
  auto take = [&](auto item) {
    const int64_t pi = item - ta.part_first;
    if (pi >= 0 && pi < ta.n_parts) {
      const int64_t tile = ta.tail_tile + pi / ta.split;
      nc = tile / a.tiles;
      nt = tile % a.tiles;
      n_glo = static_cast<int>(pi % ta.split) * ta.part_groups;
      n_ghi = n_glo + ta.part_groups < a.groups ? n_glo + ta.part_groups : a.groups;
      return;
    }
    nc = tc;
    nt = tt;
    n_glo = 0;
    n_ghi = a.groups;
    tc += a.grid_step_c;
    tt += a.grid_step_t;
    if (tt >= a.tiles) {
      tt -= a.tiles;
      ++tc;
    }
  };
  if constexpr (kTail) {
    static_assert(kPlain && kStage != 2, "split tail: plain tile, whole-tile staging");
    items = ta.whole + ta.n_parts;
    // The block's first whole tile: with the parts first (part_first 0), blocks below n_parts
    // take part b first and then the tiles from b + gridDim.x - n_parts.
    const int64_t b0 = blockIdx.x;
    const int64_t t0 =
        ta.part_first == 0 ? (b0 < ta.n_parts ? b0 + gridDim.x - ta.n_parts : b0 - ta.n_parts) : b0;
    tc = t0 / a.tiles;
    tt = t0 % a.tiles;
    if (b0 < items) {
      take(b0);
      issue(nc, nt, xin, shift);
    }
  } else {
    if (blockIdx.x < total) issue(tc, tt, xin, shift);
  }

  const int tasks = a.chunks * a.groups;
  const int tile_outputs = a.periods * a.u;
  const int out_step_n = kPgThreads / a.u, out_step_j = kPgThreads % a.u;
  const int gr0 = warp % a.groups, chunk0 = warp / a.groups;
  for (int64_t b = blockIdx.x; b < items; b += gridDim.x) {
    // The previous tile's bulk copies (kStage 3) have read st before any warp rewrites it.
    if constexpr (kStage == 3) kernels::BulkWaitRead();
    if constexpr (kBulkIn) {
      if (bulk_pending) {
        MbarWait(bar, bar_phase);
        bar_phase ^= 1;
        bulk_pending = false;
      }
    }
    CpAsyncWaitAll();
    __syncthreads();  // xin (and the table, the first time) complete; st and xin_next free
    // This tile's row and first output; then the cursor moves to the block's next tile.
    // kTail: the item's tile and groups, then the next item's.
    const int64_t c = kTail ? nc : tc;
    const int64_t k_tile = (a.n_first + (kTail ? nt : tt) * a.periods) * a.u - a.rot;
    const int glo = n_glo, ghi = n_ghi;
    if constexpr (!kTail) {
      tc += a.grid_step_c;
      tt += a.grid_step_t;
      if (tt >= a.tiles) {
        tt -= a.tiles;
        ++tc;
      }
    }
    const bool more = b + gridDim.x < items;
    if constexpr (kTail) {
      if (more) take(b + gridDim.x);
    }
    if constexpr (kStage == 2) {
      static_assert(kPlain && V == 4, "rounds: plain tile, V = 4");
      const int lo = out_first > k_tile ? static_cast<int>(out_first - k_tile) : 0;
      const int hi = out_first + out_count < k_tile + tile_outputs
                         ? static_cast<int>(out_first + out_count - k_tile)
                         : tile_outputs;
      float* const yt = y + c * y_stride + (k_tile - out_first);
      const bool vec = (reinterpret_cast<uintptr_t>(yt) & 15) == 0;
      const int rounds = (tasks + kPgWarps - 1) / kPgWarps;
      // This warp's task (gr, chunk) and this thread's copy-out slot (task rd*8 + slot), both
      // stepped by kPgWarps tasks a round with a carry. 16-byte copy-out: slot tid % 8 of
      // periods tid/8 + 32i; 4-byte (y not 16-byte aligned): float lane % 4 of slot lane / 4 of
      // periods warp + 8i, so that a warp's 32 stores are one period's 32 consecutive outputs.
      const int slot = vec ? tid & (kPgWarps - 1) : lane >> 2;
      int gr = gr0, chunk = chunk0;
      int sgr = slot % a.groups, schunk = slot / a.groups;
      for (int rd = 0; rd < rounds; ++rd) {
        float* const sb = st + (rd & 1) * a.st_round;
        if (rd * kPgWarps + warp < tasks) {
          float acc[R][V];
#pragma unroll
          for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int v = 0; v < V; ++v) acc[r][v] = 0.f;
          }
          PlainBand<V, R>(xin + shift + (chunk * 32 * R + lane) * a.d + qbase[gr] + a.k - 1,
                          a.d, taps + gr * a.k * V, a.k, acc);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            StoreGroup<V>(sb + (lane + 32 * r) * a.sr + warp * V, acc[r]);
          }
        }
        gr += a.task_step_group;
        chunk += a.task_step_chunk;
        if (gr >= a.groups) {
          gr -= a.groups;
          ++chunk;
        }
        __syncthreads();  // sb complete; in the last round, every warp is done reading xin
        if (rd == rounds - 1 && more) issue(tc, tt, xin, shift);
        if (rd * kPgWarps + slot < tasks && !vec) {
#pragma unroll
          for (int i = 0; i < 4 * R; ++i) {
            const int pl = warp + kPgWarps * i;
            const int k0 = (schunk * 32 * R + pl) * a.u + sgr * V + (lane & 3);
            if (k0 >= lo && k0 < hi) yt[k0] = sb[pl * a.sr + lane];
          }
        } else if (rd * kPgWarps + slot < tasks) {
#pragma unroll
          for (int i = 0; i < R; ++i) {
            const int pl = (tid >> 3) + 32 * i;  // period within the task
            const int k0 = (schunk * 32 * R + pl) * a.u + sgr * V;  // tile output
            const float4 val = *reinterpret_cast<const float4*>(sb + pl * a.sr + slot * V);
            if (k0 >= lo && k0 + 4 <= hi) {
              *reinterpret_cast<float4*>(yt + k0) = val;
            } else {
              const float vals[4] = {val.x, val.y, val.z, val.w};
#pragma unroll
              for (int q = 0; q < 4; ++q) {
                if (k0 + q >= lo && k0 + q < hi) yt[k0 + q] = vals[q];
              }
            }
          }
        }
        sgr += a.task_step_group;
        schunk += a.task_step_chunk;
        if (sgr >= a.groups) {
          sgr -= a.groups;
          ++schunk;
        }
      }
      continue;
    }
    if (a.prefetch && more) issue(tc, tt, xin_next, shift_next);  // not with kTail (PlanFor)
    int gr = gr0, chunk = chunk0;
    // kTail: the item's tasks, every (chunk, group) of a whole tile, a part's groups only.
    int item_tasks = tasks, g_end = a.groups, g_count = a.groups;
    int step_c = a.task_step_chunk, step_g = a.task_step_group;
    if constexpr (kTail) {
      if (ghi - glo != a.groups) {
        g_end = ghi;
        g_count = ghi - glo;
        item_tasks = a.chunks * g_count;
        gr = glo + warp % g_count;
        chunk = warp / g_count;
        step_c = kPgWarps / g_count;
        step_g = kPgWarps % g_count;
      }
    }
    for (int task = warp; task < (kTail ? item_tasks : tasks); task += kPgWarps) {
      const int nl0 = chunk * 32 * R + lane;
      const float* tg = taps + gr * a.k * V;
      const int gr_task = gr;
      if constexpr (kTail) {
        gr += step_g;
        chunk += step_c;
        if (gr >= g_end) {
          gr -= g_count;
          ++chunk;
        }
      } else {
        gr += a.task_step_group;
        chunk += a.task_step_chunk;
        if (gr >= a.groups) {
          gr -= a.groups;
          ++chunk;
        }
      }
      float acc[R][V];
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int v = 0; v < V; ++v) acc[r][v] = 0.f;
      }
      if constexpr (kPlain) {
        // Lane period nl reads z = nl*d + c, c = qbase + i: xr[r][i] with xr[r] = xin + shift +
        // (nl + 32r)*d + qbase; the 32 lanes' words are d apart, distinct banks for odd d.
        PlainBand<V, R>(xin + shift + nl0 * a.d + qbase[gr_task] + a.k - 1, a.d, tg, a.k, acc);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          StoreGroup<V>(st + (nl0 + 32 * r) * a.sr + gr_task * V, acc[r]);
        }
        continue;
      }
      const int c0 = qbase[gr_task] + a.k - 1;  // c of i = K-1
      if constexpr (kD > 0) {
        // c runs down from c0: rows c0 mod d .. 0 of column c0/d, then whole blocks of rows
        // d-1 .. 0 one column lower each, then a last partial block. rp[r] points at row r of
        // the current column (+ the lane's period), so a step is one tap load, R input loads
        // at immediate offsets and R*V FMAs, and a block of d steps updates the d pointers once:
        // no per-step wrap test. Same steps in the same order as the loop below.
        const float* rp[kD];
#pragma unroll
        for (int r = 0; r < kD; ++r) rp[r] = xin + r * a.ld + c0 / kD + nl0;
        const float* tp = tg + (a.k - 1) * V;
        int n = a.k;  // steps left
        auto step = [&](const float* p) {
          float h[V];
          LoadTaps<V>(tp, h);
          tp -= V;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float sv = p[32 * r];
#pragma unroll
            for (int v = 0; v < V; ++v) acc[r][v] = fmaf(h[v], sv, acc[r][v]);
          }
        };
        const int row0 = c0 % kD;
#pragma unroll
        for (int r = kD - 1; r >= 0; --r) {
          if (r <= row0 && n > 0) {
            step(rp[r]);
            --n;
          }
        }
#pragma unroll
        for (int r = 0; r < kD; ++r) --rp[r];
#pragma unroll 2
        for (; n >= kD; n -= kD) {
#pragma unroll
          for (int r = kD - 1; r >= 0; --r) step(rp[r]);
#pragma unroll
          for (int r = 0; r < kD; ++r) --rp[r];
        }
#pragma unroll
        for (int r = kD - 1; r >= 0; --r) {
          if (n > 0) {
            step(rp[r]);
            --n;
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          StoreGroup<V>(st + (nl0 + 32 * r) * a.sr + gr_task * V, acc[r]);
        }
        continue;
      }
      int row = c0 % a.d;
      int off = row * a.ld + c0 / a.d + nl0;
#pragma unroll 4
      for (int i = a.k - 1; i >= 0; --i) {
        float h[V];
        LoadTaps<V>(tg + i * V, h);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float sv = xin[off + 32 * r];
#pragma unroll
          for (int v = 0; v < V; ++v) acc[r][v] = fmaf(h[v], sv, acc[r][v]);
        }
        if (row == 0) {
          row = a.d - 1;
          off += a.wrap;
        } else {
          --row;
          off -= a.ld;
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        StoreGroup<V>(st + (nl0 + 32 * r) * a.sr + gr_task * V, acc[r]);
      }
    }
    // The copy engine (kStage 3) reads st through the async proxy: order this thread's st writes
    // before it (the barrier then orders them before the issuing threads' copies).
    if constexpr (kStage == 3) kernels::FenceProxyAsyncShared();
    __syncthreads();  // st complete; every warp is done reading xin
    if (a.prefetch) {
      float* const tmp = xin;
      xin = xin_next;
      xin_next = tmp;
      shift = shift_next;
    } else if (more) {
      if constexpr (kTail) {
        issue(nc, nt, xin, shift);
      } else {
        issue(tc, tt, xin, shift);
      }
    }

    // Staged output (nl, j) is tile output nl*u + j, i.e. y[c][k_tile + nl*u + j - out_first].
    const int lo = out_first > k_tile ? static_cast<int>(out_first - k_tile) : 0;
    const int hi = out_first + out_count < k_tile + tile_outputs
                       ? static_cast<int>(out_first + out_count - k_tile)
                       : tile_outputs;
    float* yt = y + c * y_stride + (k_tile - out_first);
    if constexpr (kTail) {
      if (ghi - glo != a.groups) {
        // A part: outputs j in [V*glo, min(u, V*ghi)) of every period, 4-byte stores (a
        // period's run is contiguous in y, so a warp's stores coalesce).
        const int j0 = V * glo, nj = min(a.u, V * ghi) - j0;
        for (int e = tid; e < a.periods * nj; e += kPgThreads) {
          const int nl = e / nj, j = j0 + e % nj;
          const int kl = nl * a.u + j;
          if (kl >= lo && kl < hi) yt[kl] = st[nl * a.sr + j];
        }
        continue;
      }
    }
    int scalar_hi = hi;
    if constexpr (kStage == 3) {
      // A whole, 16-byte aligned tile: each period's u outputs (a multiple of 4 floats, rows
      // sr floats apart in st) are one bulk copy, issued by one thread; the threads go on to the
      // next tile at once. Partial tiles (the first and last of a row) take the loops below.
      if (lo == 0 && hi == tile_outputs && (reinterpret_cast<uintptr_t>(yt) & 15) == 0) {
        for (int nl = tid; nl < a.periods; nl += kPgThreads) {
          kernels::BulkStoreCommit<false>(yt + nl * a.u,
                                          reinterpret_cast<const float4*>(st + nl * a.sr),
                                          4 * a.u);
        }
        continue;
      }
    }
    if (kPlain && a.u % 4 == 0 && (reinterpret_cast<uintptr_t>(yt) & 15) == 0) {
      // Four consecutive outputs 4e .. 4e+3 lie in one period (u % 4 == 0) and one aligned
      // staging chunk (sr and j multiples of 4): one 16-byte load and store.
      const int lo4 = (lo + 3) / 4, hi4 = hi / 4;
      if (lo4 < hi4) {
        const int step_n = 4 * kPgThreads / a.u, step_j = 4 * kPgThreads % a.u;
        int e = lo4 + tid;
        int n4 = 4 * e / a.u, j4 = 4 * e % a.u;
        for (; e < hi4; e += kPgThreads) {
          reinterpret_cast<float4*>(yt)[e] =
              *reinterpret_cast<const float4*>(st + n4 * a.sr + j4);
          n4 += step_n;
          j4 += step_j;
          if (j4 >= a.u) {
            j4 -= a.u;
            ++n4;
          }
        }
        // The ragged ends: [lo, 4*lo4) and [4*hi4, hi), at most 3 outputs each.
        const int t = tid < 3 ? lo + tid : 4 * hi4 + tid - 3;
        if ((tid < 3 && t < 4 * lo4) || (tid >= 3 && tid < 6 && t < hi)) {
          yt[t] = st[(t / a.u) * a.sr + t % a.u];
        }
        scalar_hi = lo;  // nothing left for the scalar loop
      }
    }
    int kl = lo + tid;
    int nl = kl / a.u, j = kl % a.u;
    for (; kl < scalar_hi; kl += kPgThreads) {
      yt[kl] = st[nl * a.sr + j];
      nl += out_step_n;
      j += out_step_j;
      if (j >= a.u) {
        j -= a.u;
        ++nl;
      }
    }
  }
  if constexpr (kStage == 3) kernels::BulkWaitAll();  // the block's bulk copies are complete
}

using PgKernelFn = void (*)(const float*, int64_t, int64_t, int64_t, float, float*, int64_t,
                            int64_t, int64_t, int64_t, const float*, const PgArgs,
                            const PgTailArgs);

template <bool kPlain>
PgKernelFn KernelFor(int v, int r) {
  if constexpr (kPlain) {
    if (r == 4) return PhaseGroupsKernel<4, 4, true>;  // plain tile, V = 4 only (PlanFor)
  }
  if (r == 1) {
    if (v == 1) return PhaseGroupsKernel<1, 1, kPlain>;
    if (v == 2) return PhaseGroupsKernel<2, 1, kPlain>;
    return PhaseGroupsKernel<4, 1, kPlain>;
  }
  if (r == 8) {
    if (v == 1) return PhaseGroupsKernel<1, 8, kPlain>;
    if (v == 2) return PhaseGroupsKernel<2, 8, kPlain>;
    return PhaseGroupsKernel<4, 8, kPlain>;
  }
  if (v == 1) return PhaseGroupsKernel<1, 2, kPlain>;
  if (v == 2) return PhaseGroupsKernel<2, 2, kPlain>;
  return PhaseGroupsKernel<4, 2, kPlain>;
}
template <int kD>
PgKernelFn RowBlockKernelFor(int r) {
  if (r == 1) return PhaseGroupsKernel<4, 1, false, kD>;
  if (r == 8) return PhaseGroupsKernel<4, 8, false, kD>;
  return PhaseGroupsKernel<4, 2, false, kD>;
}
// The whole-tile staging (kStage 1 or 3) of the plain tile with V = 4, R = 2, with or without
// the split tail and the bulk input copies (PlanFor).
template <int kStage>
PgKernelFn StagedKernelFor(bool tail, bool bulk_in) {
  if (tail) {
    return bulk_in ? PhaseGroupsKernel<4, 2, true, 0, kStage, true, true>
                   : PhaseGroupsKernel<4, 2, true, 0, kStage, true, false>;
  }
  return bulk_in ? PhaseGroupsKernel<4, 2, true, 0, kStage, false, true>
                 : PhaseGroupsKernel<4, 2, true, 0, kStage>;
}
PgKernelFn KernelFor(const PhaseGroupsPlan& pl) {
  if (pl.rounds) {  // plain tile, V = 4, R = 1 or 2 (PlanFor)
    return pl.r == 1 ? PhaseGroupsKernel<4, 1, true, 0, 2> : PhaseGroupsKernel<4, 2, true, 0, 2>;
  }
  if (pl.bulk || pl.tail != 0 || pl.bulk_in) {  // plain tile, V = 4, R = 2
    return pl.bulk ? StagedKernelFor<3>(pl.tail != 0, pl.bulk_in)
                   : StagedKernelFor<1>(pl.tail != 0, pl.bulk_in);
  }
  if (pl.row_blocks) {
    if (pl.d == 2) return RowBlockKernelFor<2>(pl.r);
    if (pl.d == 4) return RowBlockKernelFor<4>(pl.r);
    return RowBlockKernelFor<8>(pl.r);
  }
  return pl.plain ? KernelFor<true>(pl.v, pl.r) : KernelFor<false>(pl.v, pl.r);
}

// Floats of the input tile: the plain one has up to 3 leading floats of misalignment and a
// last chunk rounded up to 4.
int InputFloats(const PhaseGroupsPlan& pl) {
  return pl.plain ? AlignUp4(pl.periods * pl.d + pl.k - 1 + pl.extra + 6)
                  : AlignUp4(pl.d * pl.ld);
}

// Floats of the output staging: the tile, or two round buffers of 32R periods.
int StagingFloats(const PhaseGroupsPlan& pl) {
  return pl.rounds ? 2 * 32 * pl.r * pl.sr : pl.periods * pl.sr;
}

// The mbarrier of the bulk input copies (16 bytes after the staging).
int BarrierFloats(const PhaseGroupsPlan& pl) { return pl.bulk_in ? 4 : 0; }

int SmemBytes(const PhaseGroupsPlan& pl) {
  return 4 * (AlignUp4(pl.table_floats) + InputFloats(pl) * (pl.prefetch ? 2 : 1) +
              StagingFloats(pl) + BarrierFloats(pl));
}

// The plan for period multiple m (u = m*up/g0 outputs per d = m*down/g0 inputs) with the table
// filled from htf when it is not empty.
// with v outputs per group and r periods per lane (the rest of `choice` as given).
absl::StatusOr<PhaseGroupsPlan> PlanFor(int up, int down, int64_t p, const std::vector<float>& htf,
                                        int m, int v, int r, const PhaseGroupsChoice& choice) {
  const int layout = choice.layout, rotate = choice.rotate, row_blocks = choice.row_blocks;
  PhaseGroupsPlan pl;
  pl.prefetch = (choice.prefetch == 0 ? kPgDefaultPrefetch : choice.prefetch) == 2;
  const int g0 = std::gcd(up, down);
  pl.u = m * (up / g0);
  pl.d = m * (down / g0);
  pl.plain = layout != 1 && pl.d % 2 == 1;
  pl.v = v;
  pl.r = r;
  if (r == 4 && (!pl.plain || v != 4)) {
    return absl::FailedPreconditionError("phase_groups: R = 4 needs the plain tile and V = 4");
  }
  pl.groups = (pl.u + pl.v - 1) / pl.v;
  pl.p = static_cast<int>(p);
  pl.rotations = pl.plain && pl.u % 4 == 0 && rotate != 1 ? 4 : 1;
  pl.row_blocks = !pl.plain && pl.v == 4 && (pl.d == 2 || pl.d == 4 || pl.d == 8) &&
                  row_blocks != 1;
  // Rotation s: phase j of the rotated period is output n*u - s + j, i.e. the original phase
  // j - s (of the previous period when negative): q_j = floor((j - s)*down/up) (>= -d, the
  // group bases may be negative), t_j = (j - s)*down - q_j*up in [0, up).
  std::vector<std::vector<int>> q(pl.rotations, std::vector<int>(pl.u));
  std::vector<std::vector<int>> t(pl.rotations, std::vector<int>(pl.u));
  int dmax = 0;
  pl.zoff.assign(pl.rotations, 0);
  for (int rs = 0; rs < pl.rotations; ++rs) {
    for (int j = 0; j < pl.u; ++j) {
      const int64_t jd = static_cast<int64_t>(j - rs) * down;
      const int64_t qq = jd >= 0 ? jd / up : -((-jd + up - 1) / up);
      q[rs][j] = static_cast<int>(qq);
      t[rs][j] = static_cast<int>(jd - qq * up);
    }
    for (int gr = 0; gr < pl.groups; ++gr) {
      const int last = std::min(gr * pl.v + pl.v - 1, pl.u - 1);
      dmax = std::max(dmax, q[rs][last] - q[rs][gr * pl.v]);
      pl.zoff[rs] = std::min(pl.zoff[rs], q[rs][gr * pl.v]);
    }
    pl.extra = std::max(pl.extra, -pl.zoff[rs]);
  }
  pl.k = pl.p + dmax;
  const int64_t tap_floats = static_cast<int64_t>(pl.groups) * pl.k * pl.v;
  if (tap_floats + pl.groups > kPgSmemMax / 4) {
    return absl::FailedPreconditionError("phase_groups: tap table exceeds shared memory");
  }
  pl.table_floats = static_cast<int>(tap_floats) + pl.groups;
  pl.table.assign(htf.empty() ? 0 : static_cast<size_t>(pl.table_floats) * pl.rotations, 0.f);
  for (int rs = 0; rs < pl.rotations && !htf.empty(); ++rs) {
    float* tab = pl.table.data() + static_cast<size_t>(pl.table_floats) * rs;
    for (int gr = 0; gr < pl.groups; ++gr) {
      for (int vv = 0; vv < pl.v; ++vv) {
        const int j = gr * pl.v + vv;
        if (j >= pl.u) continue;  // padding: zero taps
        const int dv = q[rs][j] - q[rs][gr * pl.v];
        for (int i = 0; i < pl.k; ++i) {
          const int mm = dv + pl.p - 1 - i;
          if (mm >= 0 && mm < pl.p) {
            tab[(static_cast<size_t>(gr) * pl.k + i) * pl.v + vv] =
                htf[static_cast<size_t>(t[rs][j]) * pl.p + mm];
          }
        }
      }
      // The group's first input relative to the tile's origin, which the rotation moves by
      // zoff (the lowest group base) so that every base is >= 0.
      const int base = q[rs][gr * pl.v] - pl.zoff[rs];
      std::memcpy(&tab[static_cast<size_t>(tap_floats) + gr], &base, sizeof(int));
    }
  }
  // Rounds stage 2 x (kPgWarps + 1) V-wide chunks per period (two buffers), the whole tile at
  // least `groups` per period: they save shared memory only for more groups than that.
  const int stage = choice.stage == 0 ? kPgDefaultStage : choice.stage;
  pl.rounds = stage == 2 && pl.plain && pl.v == 4 && pl.u % 4 == 0 && !pl.prefetch &&
              (pl.r == 1 || pl.r == 2) && pl.groups > 2 * (kPgWarps + 1);
  // Bulk copy-out: rows of u floats (a multiple of 16 bytes) from the plain tile, R = 2.
  pl.bulk = stage == 3 && pl.plain && pl.v == 4 && pl.u % 4 == 0 && !pl.prefetch && pl.r == 2;
  // The split tail and the bulk input copies: the whole-tile staging of the plain tile, V = 4,
  // R = 2 (StagedKernelFor's instantiations).
  const bool staged = pl.plain && pl.v == 4 && pl.r == 2 && !pl.prefetch && !pl.rounds;
  const int tail = choice.tail == 0 ? kPgDefaultTail : choice.tail;
  pl.tail = staged && tail >= 2 ? tail : 0;
  // The default takes bulk input copies only together with the bulk copy-out: with the
  // threads' copy-out (stage 1) they were 7% slower on 160/147.
  const int bulk_in = choice.bulk_in != 0 ? choice.bulk_in : pl.bulk ? kPgDefaultBulkIn : 1;
  pl.bulk_in = staged && bulk_in == 2;
  pl.max_blocks = choice.max_blocks;
  // Staging rows with an odd number of V-wide chunks (conflict-free V-wide stores): a period's
  // groups, or a round's kPgWarps slots plus one.
  pl.sr = pl.rounds ? pl.v * (kPgWarps + 1)
                    : pl.v * (pl.groups % 2 == 1 ? pl.groups : pl.groups + 1);
  // Tasks per tile = chunks * groups: a multiple of the 8 warps when the tile allows.
  int chunks = kPgWarps / std::gcd(pl.groups, kPgWarps);
  for (;;) {
    pl.periods = chunks * 32 * pl.r;
    const int64_t span = static_cast<int64_t>(pl.periods) * pl.d + pl.k - 1 + pl.extra;
    if (span > (int64_t{1} << 24) || static_cast<int64_t>(pl.periods) * pl.u > (1 << 24)) {
      return absl::FailedPreconditionError("phase_groups: tile too large");
    }
    pl.ld = static_cast<int>((span + pl.d - 1) / pl.d);
    pl.smem_bytes = SmemBytes(pl);
    if (pl.smem_bytes <= kPgSmemTarget || chunks == 1) break;
    chunks /= 2;
  }
  if (pl.smem_bytes > kPgSmemMax) {
    return absl::FailedPreconditionError("phase_groups: tile exceeds shared memory");
  }
  if (chunks * pl.groups < kPgWarps) {
    return absl::FailedPreconditionError("phase_groups: too few tasks per tile");
  }
  return pl;
}

// Issued instructions per output (the model in phase_groups.h).
double IssueCost(const PhaseGroupsPlan& pl) {
  return static_cast<double>(pl.groups) * pl.k * (pl.r * (1 + pl.v) + 6) / (pl.r * pl.u);
}

}  // namespace

absl::StatusOr<PhaseGroupsPlan> PlanPhaseGroups(int up, int down, int64_t p,
                                                const std::vector<float>& htf,
                                                PhaseGroupsChoice choice) {
  if (p > (1 << 16) ||
      (!htf.empty() && static_cast<int64_t>(htf.size()) != static_cast<int64_t>(up) * p)) {
    return absl::FailedPreconditionError("phase_groups: filter too long");
  }
  const int widen = choice.widen == 0 ? kPgDefaultWiden : choice.widen;
  const int r = choice.periods_per_lane != 0 ? choice.periods_per_lane
                : p >= kPgLongTaps             ? 8
                                               : kPgShortPeriods;
  const int u = up / std::gcd(up, down);
  const int v1 = u == 1 ? 1 : u == 2 ? 2 : 4;
  absl::StatusOr<PhaseGroupsPlan> plain =
      PlanFor(up, down, p, htf, 1, v1, r, choice);
  const int m = 4 / std::gcd(u, 4);
  if (widen == 1 || m == 1 || u > (1 << 14)) return plain;
  absl::StatusOr<PhaseGroupsPlan> wide =
      PlanFor(up, down, p, htf, m, 4, r, choice);
  if (!wide.ok()) return plain;
  if (!plain.ok() || IssueCost(*wide) < IssueCost(*plain)) return wide;
  return plain;
}

absl::StatusOr<int> PhaseGroupsOccupancy(const PhaseGroupsPlan& plan) {
  return ResidentBlocksPerSm(KernelFor(plan), kPgThreads, plan.smem_bytes);
}

absl::Status LaunchPhaseGroups(const PhaseGroupsPlan& pl, const float* table, int sm_count,
                               int blocks_per_sm, cudaStream_t stream, const DeviceSignal& s) {
  PgArgs a{};
  a.u = pl.u;
  a.d = pl.d;
  a.groups = pl.groups;
  a.k = pl.k;
  a.p = pl.p;
  a.periods = pl.periods;
  a.ld = pl.ld;
  a.sr = pl.sr;
  a.chunks = pl.periods / (32 * pl.r);
  a.table_words = pl.table_floats;
  a.xin_off = AlignUp4(pl.table_floats);
  a.in_floats = InputFloats(pl);
  a.prefetch = pl.prefetch ? 1 : 0;
  a.st_off = a.xin_off + a.in_floats * (pl.prefetch ? 2 : 1);
  a.st_round = 32 * pl.r * pl.sr;
  a.wrap = (pl.d - 1) * pl.ld - 1;
  // Periods n_first .. n_last hold outputs out_first .. out_first + out_count - 1.
  // The rotation that makes every tile's first output 16-byte aligned in y (the same for all
  // rows when they are a multiple of 4 floats apart); 0 without rotated tables.
  a.rot = 0;
  if (pl.rotations == 4 && (s.channels == 1 || s.y_stride % 4 == 0)) {
    a.rot = static_cast<int>(((reinterpret_cast<uintptr_t>(s.y) / 4) - s.out_first) & 3);
  }
  a.zoff = pl.zoff[a.rot];
  a.span = pl.periods * pl.d + pl.k - 1 + pl.extra;
  // Rotated periods n_first .. n_last hold outputs out_first .. out_first + out_count - 1.
  a.n_first = (s.out_first + a.rot) / pl.u;
  const int64_t n_last = (s.out_first + s.out_count - 1 + a.rot) / pl.u;
  a.tiles = (n_last - a.n_first + pl.periods) / pl.periods;
  table += static_cast<size_t>(pl.table_floats) * a.rot;
  int64_t slots = static_cast<int64_t>(sm_count) * blocks_per_sm;
  if (pl.max_blocks > 0) slots = std::min<int64_t>(slots, pl.max_blocks);
  const int64_t total = s.channels * a.tiles;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(total, slots));
  // The split tail (pl.tail): the last wave's tiles (total mod blocks of them, after `waves`
  // whole waves) in `split` parts each, at most one per block: 8 groups a part (one task per
  // warp) at the end (tail 2), as many parts as blocks allow at the start (tail 3), so that the
  // blocks that take them start out of step with the others.
  PgTailArgs ta{};
  ta.whole = total;
  ta.n_parts = 0;
  ta.part_first = total;
  ta.tail_tile = total;
  ta.split = 1;
  ta.part_groups = pl.groups;
  const int64_t waves = total / blocks, rest = total % blocks;
  if (pl.tail != 0 && waves >= 1 && rest > 0) {
    const int64_t most = blocks / rest;  // parts per tile with at most one part per block
    int64_t split = pl.tail == 2 ? (pl.groups + kPgWarps - 1) / kPgWarps : pl.groups;
    split = std::min(split, most);
    if (split >= 2) {
      ta.part_groups = static_cast<int>((pl.groups + split - 1) / split);
      ta.split = (pl.groups + ta.part_groups - 1) / ta.part_groups;
      ta.whole = waves * blocks;
      ta.tail_tile = ta.whole;
      ta.n_parts = rest * ta.split;
      ta.part_first = pl.tail == 3 ? 0 : ta.whole;
    }
  }
  ta.bar_off = a.st_off + StagingFloats(pl);
  a.task_step_chunk = kPgWarps / pl.groups;
  a.task_step_group = kPgWarps % pl.groups;
  a.grid_step_c = blocks / a.tiles;
  a.grid_step_t = blocks % a.tiles;
  PgKernelFn fn = KernelFor(pl);
  fn<<<static_cast<unsigned>(blocks), kPgThreads, static_cast<size_t>(pl.smem_bytes), stream>>>(
      static_cast<const float*>(s.x), s.x_stride, s.x_first, s.x_len,
      static_cast<float>(s.cval), static_cast<float*>(s.y), s.y_stride, s.out_first,
      s.out_count, s.channels, table, a, ta);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(fn);
  return absl::OkStatus();
}

}  // namespace fresnel::interp::internal
