// CUDA kernels of Goldstein branch-cut unwrapping. Every decision (wrap counts, charges, keys,
// lines, the final phase + 2*pi*k) goes through unwrap_common.h, shared with the CPU reference;
// the kernels only organise the work. Results never depend on thread scheduling: atomics are used
// for appends whose order no result depends on, for min/max reductions and for sums.
//
// Device data (N = rows * cols pixels, all row-major):
//   charge   int16[N]  plaquette charge at its top-left pixel (the residue map output)
//   cut      uint8[N]  1 = pixel on a cut line
//   bins     per 16x16 bin: base and count of its residues in the residue list, masked pixels
//   residue list (capacity N/2 + 16): word = pixel index | bit 30 negative | bit 31 matched;
//            key = current proposal / final partner; prop = list position of the proposed residue;
//            step = pairing step (round) in which key/prop were written, -1 before the first
//   lab/lk   int32[N]  per pixel: the tile-local component's label (global index of its first
//            pixel in raster order, -1 = not open) and k relative to that pixel
//   uf       uint64[N] union-find over tile components, indexed by label pixel:
//            high word parent, low word int32 offset with K[x] = K[parent] + offset
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "fresnel/unwrap/unwrap.h"
#include "unwrap/unwrap_common.h"

namespace fresnel::unwrap::internal::cuda {

namespace cg = cooperative_groups;

constexpr uint32_t kMatchedBit = 0x80000000u;
constexpr uint32_t kNegativeBit = 0x40000000u;
constexpr uint32_t kIndexMask = 0x3fffffffu;
constexpr int kMaxRadii = 64;
constexpr uint32_t kStateBias = 0x80000000u;  // tile-local k is stored as k + 2^31

struct Counters {
  int res_count;       // residues appended (may exceed the list capacity: overflow)
  int active;          // residues not yet paired
  int bad_phase;       // first non-finite or out-of-range unmasked phase pixel, INT_MAX = none
  int bad_quality;     // first non-finite unmasked quality pixel, INT_MAX = none
  int pairing_radius;
  int inconsistent;    // tile graph found a loop with non-zero wrap sum (a bug if ever set)
  int overflow;
  int clamped;         // plaquettes with |charge| > 1 (impossible for validated input)
  int stale;           // accept reads of a proposal not written in the current round (a bug if set)
  unsigned long long positive, negative, residue_pairs, border_cuts, mask_cuts, island_cuts;
  unsigned long long cut_pixels, cut_length, regions, unreached, masked;
};

template <class T>
struct Params {
  int rows, cols;
  const T* phase;
  const uint8_t* mask;        // nullptr = no mask
  const void* quality;        // nullptr = none; float or double by quality_double
  bool quality_double;
  int16_t* charge;
  uint8_t* cut;
  int nby, nbx;
  int* bin_base;
  int* bin_count;
  int* bin_masked;
  uint32_t* res_word;
  unsigned long long* res_key;
  int* res_prop;
  int* res_step;              // per residue: step of its last proposal (tripwire, see AcceptOne)
  int res_capacity;
  Counters* counters;
  int* matches;               // per pairing iteration: pairs made
  int* island;                // masked pixel -> island root (mask only)
  int* island_charge;         // per island root
  uint8_t* island_border;     // per island root: touches the image edge
  int* lab;
  int* lk;
  unsigned long long* uf;
  bool seeded;                // quality map or user seed present
  int user_seed;              // pixel index or -1
  unsigned long long* node_key;    // per label pixel (seeded only)
  unsigned long long* region_key;  // per root (seeded only)
  int* seed_k;                     // per root (seeded only)
  int* row_count;
  int* row_offset;
  int* region_label;               // per root
  T* out;
  int* regions_out;
  uint8_t* unreached_out;
  bool return_maps;
  // FRESNEL_UNWRAP_DEBUG_DUMP only (nullptr otherwise): every proposal of every step,
  // [step * res_capacity + pos]; key 0 (impossible for a real key) = did not propose.
  unsigned long long* dbg_key;
  int* dbg_prop;
};

struct Schedule {
  int radii[kMaxRadii];
  int num_radii;
  int iterations;
  // Every thread executes __threadfence() before each grid barrier of the cooperative pairing
  // kernel (see there). 0 only for the cooperative_fences = false diagnostic.
  int fence;
};

__device__ __forceinline__ bool MaskedAt(const uint8_t* mask, int i) {
  return mask != nullptr && mask[i] != 0;
}

__device__ __forceinline__ unsigned long long PackUf(int parent, int offset) {
  return (static_cast<unsigned long long>(static_cast<uint32_t>(parent)) << 32) |
         static_cast<uint32_t>(offset);
}
__device__ __forceinline__ int UfParent(unsigned long long e) { return static_cast<int>(e >> 32); }
__device__ __forceinline__ int UfOffset(unsigned long long e) {
  return static_cast<int>(static_cast<uint32_t>(e));
}

template <class T>
__device__ __forceinline__ uint32_t QualityBits(const Params<T>& p, int i) {
  if (i == p.user_seed) return 0xffffffffu;
  if (p.quality == nullptr) return 0;
  float q = p.quality_double ? static_cast<float>(static_cast<const double*>(p.quality)[i])
                             : static_cast<const float*>(p.quality)[i];
  return OrderedFloatBits(q);
}

__device__ __forceinline__ unsigned WarpSum(unsigned v) { return __reduce_add_sync(~0u, v); }

// ---------------------------------------------------------------------------------------------
// Stage 1. One 16x16 block per bin, one thread per pixel (y, x) = (16*by + ty, 16*bx + tx).
// The thread checks its pixel, computes the charge of the plaquette whose top-left corner it is
// (reading the three other corners, which neighbouring threads also read: L1 serves them), and
// appends a residue. Appends are block-aggregated: the block reserves its bin's slots in the
// residue list with one atomicAdd, so a bin's residues are contiguous ([base, base + count)) and
// the bin table needs no second pass. Which list positions a bin gets depends on scheduling;
// nothing downstream depends on list positions, only on pixel indices.
template <class T>
__global__ void __launch_bounds__(256) ResidueKernel(Params<T> p) {
  const int x = blockIdx.x * kBin + threadIdx.x;
  const int y = blockIdx.y * kBin + threadIdx.y;
  const bool in = y < p.rows && x < p.cols;
  const int i = y * p.cols + x;
  const bool masked = in && MaskedAt(p.mask, i);
  if (in && !masked) {
    const double v = static_cast<double>(p.phase[i]);
    if (!(isfinite(v) && fabs(v) <= ::fresnel::unwrap::kPhaseLimit)) atomicMin(&p.counters->bad_phase, i);
    if (p.quality != nullptr) {
      double q = p.quality_double ? static_cast<const double*>(p.quality)[i]
                                  : static_cast<double>(static_cast<const float*>(p.quality)[i]);
      if (!isfinite(q)) atomicMin(&p.counters->bad_quality, i);
    }
  }
  int q = 0;
  if (in && y + 1 < p.rows && x + 1 < p.cols) {
    const int a = i, b = i + 1, c = i + p.cols + 1, d = i + p.cols;
    if (!(MaskedAt(p.mask, a) || MaskedAt(p.mask, b) || MaskedAt(p.mask, c) ||
          MaskedAt(p.mask, d))) {
      q = PlaquetteCharge(p.phase[a], p.phase[b], p.phase[c], p.phase[d]);
      if (q > 1 || q < -1) {
        atomicAdd(&p.counters->clamped, 1);
        q = q > 0 ? 1 : -1;
      }
    }
  }
  if (in) p.charge[i] = static_cast<int16_t>(q);

  __shared__ int s_count, s_base;
  const int tid = threadIdx.y * kBin + threadIdx.x;
  if (tid == 0) s_count = 0;
  const int masked_count = __syncthreads_count(masked);
  const int positives = __syncthreads_count(q > 0);
  int slot = -1;
  if (q != 0) slot = atomicAdd(&s_count, 1);
  __syncthreads();
  const int bin = blockIdx.y * p.nbx + blockIdx.x;
  if (tid == 0) {
    const int count = s_count;
    int base = 0;
    if (count > 0) {
      base = atomicAdd(&p.counters->res_count, count);
      atomicAdd(&p.counters->positive, static_cast<unsigned long long>(positives));
      atomicAdd(&p.counters->negative, static_cast<unsigned long long>(count - positives));
    }
    int kept = count;
    if (base + count > p.res_capacity) {
      atomicExch(&p.counters->overflow, 1);
      kept = base >= p.res_capacity ? 0 : p.res_capacity - base;
    }
    s_base = base;
    p.bin_base[bin] = base;
    p.bin_count[bin] = kept;
    p.bin_masked[bin] = masked_count;
    if (masked_count > 0) {
      atomicAdd(&p.counters->masked, static_cast<unsigned long long>(masked_count));
    }
  }
  __syncthreads();
  if (q != 0) {
    const int pos = s_base + slot;
    if (pos < p.res_capacity) {
      p.res_word[pos] = static_cast<uint32_t>(i) | (q < 0 ? kNegativeBit : 0u);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Masked islands: 8-connected components of masked pixels by union-find on the pixel grid
// (root = smallest pixel index, since the larger root is always linked under the smaller).

__device__ __forceinline__ int IslandFind(int* parent, int x) {
  for (;;) {
    const int px = __ldcg(&parent[x]);
    if (px == x) return x;
    const int gp = __ldcg(&parent[px]);
    if (gp != px) __stcg(&parent[x], gp);  // path halving: gp is an ancestor of x
    x = gp;
  }
}

__device__ __forceinline__ void IslandUnion(int* parent, int a, int b) {
  for (;;) {
    a = IslandFind(parent, a);
    b = IslandFind(parent, b);
    if (a == b) return;
    if (a > b) {
      const int t = a;
      a = b;
      b = t;
    }
    const int old = atomicCAS(&parent[b], b, a);  // link root b under root a
    if (old == b) return;
  }
}

template <class T>
__global__ void IslandInitKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p.island[i] = MaskedAt(p.mask, i) ? i : -1;
  }
}

// Links each masked pixel to its masked neighbours above-left, above, above-right and left.
template <class T>
__global__ void IslandUnionKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (!MaskedAt(p.mask, i)) continue;
    const int y = i / p.cols, x = i % p.cols;
    if (x > 0 && MaskedAt(p.mask, i - 1)) IslandUnion(p.island, i, i - 1);
    if (y > 0) {
      const int up = i - p.cols;
      if (x > 0 && MaskedAt(p.mask, up - 1)) IslandUnion(p.island, i, up - 1);
      if (MaskedAt(p.mask, up)) IslandUnion(p.island, i, up);
      if (x + 1 < p.cols && MaskedAt(p.mask, up + 1)) IslandUnion(p.island, i, up + 1);
    }
  }
}

// Points every masked pixel at its root (read-only walks, so concurrent walkers only ever see
// valid ancestors) and flags roots of islands that touch the image edge.
template <class T>
__global__ void IslandFlattenKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (!MaskedAt(p.mask, i)) continue;
    int r = i;
    for (int q = __ldcg(&p.island[r]); q != r; q = __ldcg(&p.island[r])) r = q;
    __stcg(&p.island[i], r);
    const int y = i / p.cols, x = i % p.cols;
    if (y == 0 || x == 0 || y == p.rows - 1 || x == p.cols - 1) p.island_border[r] = 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Stage 2: pairing. A warp evaluates one residue's candidates: its lanes split the bins that the
// search box overlaps (bin t of the box's bins goes to lane t mod 32), each lane keeps its best
// key, and a warp min-reduction picks the winner. The minimum of a set does not depend on the
// order it is scanned in, so the proposal equals the CPU's.

template <class T>
__device__ void ProposeWarp(const Params<T>& p, int pos, int r, int lane, int step) {
  const uint32_t word = __ldcg(&p.res_word[pos]);
  if (word & kMatchedBit) return;  // warp-uniform
  const int idx = static_cast<int>(word & kIndexMask);
  const uint32_t neg = word & kNegativeBit;
  const int py = idx / p.cols, px = idx % p.cols;
  const int y0 = max(0, py - r), y1 = min(p.rows - 1, py + r + 1);
  const int x0 = max(0, px - r), x1 = min(p.cols - 1, px + r + 1);
  const int by0 = y0 / kBin, by1 = y1 / kBin, bx0 = x0 / kBin, bx1 = x1 / kBin;
  const int box_w = bx1 - bx0 + 1;
  const int box_bins = (by1 - by0 + 1) * box_w;
  unsigned long long best = lane == 0 ? BestFrameKey(py, px, r, p.rows, p.cols) : kNoKey;
  int best_pos = -1;
  for (int t = lane; t < box_bins; t += 32) {
    const int by = by0 + t / box_w, bx = bx0 + t % box_w;
    const int b = by * p.nbx + bx;
    const int base = p.bin_base[b], count = p.bin_count[b];
    for (int s = 0; s < count; ++s) {
      const int q = base + s;
      const uint32_t qw = __ldcg(&p.res_word[q]);
      if ((qw & kMatchedBit) || (qw & kNegativeBit) == neg) continue;
      const int qi = static_cast<int>(qw & kIndexMask);
      const int qy = qi / p.cols, qx = qi % p.cols;
      if (abs(qy - py) > r || abs(qx - px) > r) continue;
      const unsigned long long key = ResidueKey(py, px, qy, qx, p.cols);
      if (key < best) {
        best = key;
        best_pos = q;
      }
    }
    if (p.mask == nullptr) continue;
    const int masked = p.bin_masked[b];
    if (masked == 0) continue;
    const int ry0 = max(y0, by * kBin), ry1 = min(y1, by * kBin + kBin - 1);
    const int rx0 = max(x0, bx * kBin), rx1 = min(x1, bx * kBin + kBin - 1);
    const int area = (min(p.rows, by * kBin + kBin) - by * kBin) *
                     (min(p.cols, bx * kBin + kBin) - bx * kBin);
    if (masked == area) {
      // A fully masked bin: the nearest pixel of the rectangle, ties to the smaller index.
      const int gy = min(max(py, ry0), ry1), gx = min(max(px, rx0), rx1);
      const unsigned long long key = GroundKey(py, px, gy, gx, p.cols);
      if (key < best) {
        best = key;
        best_pos = -1;
      }
      continue;
    }
    for (int y = ry0; y <= ry1; ++y) {
      for (int x = rx0; x <= rx1; ++x) {
        if (p.mask[y * p.cols + x] == 0) continue;
        const unsigned long long key = GroundKey(py, px, y, x, p.cols);
        if (key < best) {
          best = key;
          best_pos = -1;
        }
      }
    }
  }
  unsigned long long m = best;
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned long long o = __shfl_xor_sync(~0u, m, off);
    m = o < m ? o : m;
  }
  // Each candidate is scanned by exactly one lane, so the minimum is held by one lane (or, for
  // kNoKey, by all, whose best_pos is -1).
  const unsigned holders = __ballot_sync(~0u, best == m);
  const int winner_pos = __shfl_sync(~0u, best_pos, __ffs(holders) - 1);
  if (lane == 0) {
    p.res_key[pos] = m;
    p.res_prop[pos] = winner_pos;
    p.res_step[pos] = step;  // read back by AcceptOne as a consistency check
    if (p.dbg_key != nullptr) {
      const size_t slot = static_cast<size_t>(step) * p.res_capacity + pos;
      p.dbg_key[slot] = m;
      p.dbg_prop[slot] = winner_pos;
    }
  }
}

// Accepts residue `pos`'s proposal if it is a ground pixel or mutual. Only writes pos's own word,
// and reads only proposals, which this phase does not change. Returns 1 on a match.
//
// Tripwire: every residue that is unmatched when a round starts proposes in that round, and a
// residue only proposes residues that were unmatched when the round started (the words do not
// change during the propose phase). So pos's own proposal and that of the residue it proposed were
// both written in this `step`; any other step tag means this thread read data that the propose
// phase had not yet made visible to it (or a matched flag that was stale when pos proposed), i.e.
// a memory-ordering fault that would silently change the pairing. It is counted (the host turns
// it into an Internal error, never into a different result) and the proposal is not accepted.
template <class T>
__device__ int AcceptOne(const Params<T>& p, int pos, int r, int step) {
  const uint32_t word = __ldcg(&p.res_word[pos]);
  if (word & kMatchedBit) return 0;
  if (__ldcg(&p.res_step[pos]) != step) {
    atomicAdd(&p.counters->stale, 1);
    return 0;
  }
  const unsigned long long key = __ldcg(&p.res_key[pos]);
  if (key == kNoKey) return 0;
  if (KeyIsGround(key)) {
    const uint32_t id = KeyId(key);
    const int ty = PaddedRow(id, p.cols), tx = PaddedCol(id, p.cols);
    const bool frame = ty < 0 || tx < 0 || ty >= p.rows || tx >= p.cols;
    atomicAdd(frame ? &p.counters->border_cuts : &p.counters->mask_cuts, 1ull);
  } else {
    const int q = __ldcg(&p.res_prop[pos]);
    if (__ldcg(&p.res_step[q]) != step) {
      atomicAdd(&p.counters->stale, 1);
      return 0;
    }
    const unsigned long long qkey = __ldcg(&p.res_key[q]);
    if (qkey == kNoKey || KeyIsGround(qkey) || __ldcg(&p.res_prop[q]) != pos) return 0;
    if (!(word & kNegativeBit)) atomicAdd(&p.counters->residue_pairs, 1ull);
  }
  __stcg(&p.res_word[pos], word | kMatchedBit);
  atomicMax(&p.counters->pairing_radius, r);
  return 1;
}

// Residues left after the last radius's iterations go to their nearest frame pixel.
template <class T>
__device__ void ForceToFrame(const Params<T>& p, int pos, int final_radius) {
  const uint32_t word = __ldcg(&p.res_word[pos]);
  if (word & kMatchedBit) return;
  const int idx = static_cast<int>(word & kIndexMask);
  const int py = idx / p.cols, px = idx % p.cols;
  p.res_key[pos] = BestFrameKey(py, px, final_radius, p.rows, p.cols);
  p.res_word[pos] = word | kMatchedBit;
  atomicAdd(&p.counters->border_cuts, 1ull);
  atomicMax(&p.counters->pairing_radius, final_radius);
}

template <class T>
__device__ __forceinline__ void AddMatches(const Params<T>& p, int step, int matched) {
  const unsigned total = WarpSum(static_cast<unsigned>(matched));
  if ((threadIdx.x & 31) == 0 && total > 0) {
    atomicAdd(&p.matches[step], static_cast<int>(total));
    atomicSub(&p.counters->active, static_cast<int>(total));
  }
}

template <class T>
__global__ void PairingInitKernel(Params<T> p) {
  p.counters->active = min(p.counters->res_count, p.res_capacity);
}

// All pairing rounds in one cooperative launch: propose, grid barrier, accept, grid barrier. The
// loop exits are decided on values read right after a barrier and not written again before the
// next one (`active`, the iteration's match count), so every thread takes the same exits and
// meets the same barriers. Block size must be a multiple of 32.
//
// Cross-phase data (proposals written by lane 0 of another warp, matched flags written by another
// thread, in another block) is handed over only through the grid barriers. grid.sync() makes the
// stores of the block's master thread visible through its release, and those of the block's other
// threads only through the cumulativity of bar.sync + that release. Proposals are written by lane 0
// of *every* warp, and the warps that scan masked bins pixel by pixel finish last, right before
// the barrier; so every thread first makes its own stores visible at device scope
// (__threadfence()) and only then arrives. This costs two fences per round and makes the hand-over
// independent of that cumulativity. The step tags checked in AcceptOne detect a proposal that was
// not visible at all, or a stale matched flag behind a proposal (best effort: the tag is written
// after key and prop by the same thread, but without a release of its own).
template <class T>
__global__ void __launch_bounds__(256) PairingCooperativeKernel(Params<T> p, Schedule sched) {
  cg::grid_group grid = cg::this_grid();
  const int count = min(__ldcg(&p.counters->res_count), p.res_capacity);
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  const int threads = gridDim.x * blockDim.x;
  const int lane = threadIdx.x & 31;
  for (int ri = 0; ri < sched.num_radii; ++ri) {
    const int r = sched.radii[ri];
    for (int it = 0; it < sched.iterations; ++it) {
      const int step = ri * sched.iterations + it;
      if (__ldcg(&p.counters->active) == 0) return;
      for (int pos = thread >> 5; pos < count; pos += threads >> 5) {
        ProposeWarp(p, pos, r, lane, step);
      }
      if (sched.fence) __threadfence();  // proposals (key, prop, step) visible before arriving
      grid.sync();
      int matched = 0;
      for (int pos = thread; pos < count; pos += threads) matched += AcceptOne(p, pos, r, step);
      AddMatches(p, step, matched);
      if (sched.fence) __threadfence();  // matched flags visible before arriving
      grid.sync();
      if (__ldcg(&p.matches[step]) == 0) break;
    }
  }
  const int final_radius = sched.radii[sched.num_radii - 1];
  for (int pos = thread; pos < count; pos += threads) ForceToFrame(p, pos, final_radius);
}

// The same rounds as separate launches (devices without cooperative launch). `prev_step` is the
// previous iteration at the same radius (-1 for the first): when it made no pair, or nothing is
// left, the launch does nothing, exactly like the loop exits of the cooperative kernel.
template <class T>
__global__ void __launch_bounds__(256) ProposeKernel(Params<T> p, int r, int step, int prev_step) {
  if (p.counters->active == 0 || (prev_step >= 0 && p.matches[prev_step] == 0)) return;
  const int count = min(p.counters->res_count, p.res_capacity);
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  const int threads = gridDim.x * blockDim.x;
  for (int pos = thread >> 5; pos < count; pos += threads >> 5) {
    ProposeWarp(p, pos, r, threadIdx.x & 31, step);
  }
}
// Unlike ProposeKernel, this one must not test `active`: its own warps decrement it (AddMatches),
// so lanes of one warp could read different values, take different exits and leave the full-mask
// __reduce_add_sync with missing lanes (undefined behaviour). matches[prev_step] is not written by
// this launch, so that test is uniform; when ProposeKernel skipped because `active` was 0, every
// residue is matched and AcceptOne returns before reading any proposal.
template <class T>
__global__ void __launch_bounds__(256) AcceptKernel(Params<T> p, int r, int step, int prev_step) {
  if (prev_step >= 0 && p.matches[prev_step] == 0) return;
  const int count = min(p.counters->res_count, p.res_capacity);
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  const int threads = gridDim.x * blockDim.x;
  // Round the loop up to whole warps so that the warp reduction sees every lane.
  const int limit = (count + 31) & ~31;
  for (int base = thread; base < limit; base += threads) {
    const int matched = base < count ? AcceptOne(p, base, r, step) : 0;
    AddMatches(p, step, matched);
  }
}
template <class T>
__global__ void ForceToFrameKernel(Params<T> p, int final_radius) {
  const int count = min(p.counters->res_count, p.res_capacity);
  for (int pos = blockIdx.x * blockDim.x + threadIdx.x; pos < count;
       pos += gridDim.x * blockDim.x) {
    ForceToFrame(p, pos, final_radius);
  }
}

// ---------------------------------------------------------------------------------------------
// Stage 2b: cut lines. One thread per residue draws its line (pairs once, from the smaller
// padded id). Writes of 1 are idempotent, so overlapping lines need no ordering.

template <class T>
__device__ __forceinline__ int DrawCut(const Params<T>& p, int y0, int x0, int y1, int x1) {
  uint8_t* cut = p.cut;
  const int cols = p.cols;
  return DrawLine(y0, x0, y1, x1, p.rows, p.cols,
                  [cut, cols](int y, int x) { cut[y * cols + x] = 1; });
}

template <class T>
__global__ void DrawResidueCutsKernel(Params<T> p) {
  const int count = min(p.counters->res_count, p.res_capacity);
  for (int pos = blockIdx.x * blockDim.x + threadIdx.x; pos < count;
       pos += gridDim.x * blockDim.x) {
    const uint32_t word = p.res_word[pos];
    const int idx = static_cast<int>(word & kIndexMask);
    const int py = idx / p.cols, px = idx % p.cols;
    const unsigned long long key = p.res_key[pos];
    const uint32_t id = KeyId(key);
    const int ty = PaddedRow(id, p.cols), tx = PaddedCol(id, p.cols);
    int drawn = 0;
    if (KeyIsGround(key)) {
      drawn = DrawCut(p, py, px, ty, tx);
      if (p.mask != nullptr && ty >= 0 && tx >= 0 && ty < p.rows && tx < p.cols) {
        atomicAdd(&p.island_charge[p.island[ty * p.cols + tx]], (word & kNegativeBit) ? -1 : 1);
      }
    } else if (PaddedId(py, px, p.cols) < id) {
      drawn = DrawCut(p, py, px, ty, tx);
    }
    if (drawn > 0) atomicAdd(&p.counters->cut_length, static_cast<unsigned long long>(drawn));
  }
}

// Charges of plaquettes with one to three masked corners (wrap counts of steps with a masked end
// taken as 0), added to the island of their first masked corner (all of a plaquette's masked
// corners are 8-connected, hence in one island).
template <class T>
__global__ void IslandPlaquetteChargeKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int y = i / p.cols, x = i % p.cols;
    if (y + 1 >= p.rows || x + 1 >= p.cols) continue;
    const int c[4] = {i, i + 1, i + p.cols + 1, i + p.cols};
    bool m[4];
    int masked = 0, first = -1;
    for (int k = 0; k < 4; ++k) {
      m[k] = MaskedAt(p.mask, c[k]);
      if (m[k]) {
        ++masked;
        if (first < 0) first = k;
      }
    }
    if (masked == 0 || masked == 4) continue;
    int w[4];
    for (int k = 0; k < 4; ++k) {
      const int a = c[k], b = c[(k + 1) & 3];
      w[k] = (m[k] || m[(k + 1) & 3]) ? 0 : EdgeWrap(p.phase[a], p.phase[b]);
    }
    const int charge = ChargeFromWraps(w[0], w[1], w[2], w[3]);
    if (charge != 0) atomicAdd(&p.island_charge[p.island[c[first]]], charge);
  }
}

// Islands with net charge that do not touch the image edge get a straight cut to the frame.
template <class T>
__global__ void IslandCutsKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (!MaskedAt(p.mask, i) || p.island[i] != i) continue;
    if (p.island_charge[i] == 0 || p.island_border[i] != 0) continue;
    const int y = i / p.cols, x = i % p.cols;
    int ty, tx;
    IslandFrameTarget(y, x, p.rows, p.cols, &ty, &tx);
    const int drawn = DrawCut(p, y, x, ty, tx);
    atomicAdd(&p.counters->cut_length, static_cast<unsigned long long>(drawn));
    atomicAdd(&p.counters->island_cuts, 1ull);
  }
}

// ---------------------------------------------------------------------------------------------
// Stage 3a: tile-local integration. One 32x8 block per 32x32 tile; thread (tx, ty) owns the tile
// pixels (ty + 8j, tx), j = 0..3, so each row of the tile is read by one warp (coalesced). The
// state of an open pixel is (label << 32) | (k + 2^31): label = global index of a pixel of its
// component, k = its wrap count relative to that pixel. Every open pixel starts as its own label
// with k = 0 and repeatedly takes the smallest state offered by its open 4-neighbours inside the
// tile (a neighbour n offers (label_n, k_n - wrap(n -> p))). States only decrease and the tile is
// finite, so the loop ends; it ends when an iteration changes nothing, at which point every pixel
// holds the smallest label of its component (its first pixel in raster order) and k relative to
// it. Path independence (docs/unwrap.md) makes k unique for a label, so the outcome does not
// depend on the order updates land in.

template <class T>
__global__ void __launch_bounds__(256) TileIntegrateKernel(Params<T> p) {
  __shared__ T s_phase[kTile][kTile];
  __shared__ uint8_t s_open[kTile][kTile];
  __shared__ int8_t s_wr[kTile][kTile];  // wrap count of (ly, lx) -> (ly, lx + 1)
  __shared__ int8_t s_wd[kTile][kTile];  // wrap count of (ly, lx) -> (ly + 1, lx)
  __shared__ unsigned long long s_state[kTile][kTile];
  __shared__ unsigned long long s_seed[kTile * kTile];
  const int tx0 = blockIdx.x * kTile, ty0 = blockIdx.y * kTile;
  const int lx = threadIdx.x;
  for (int j = 0; j < 4; ++j) {
    const int ly = threadIdx.y + 8 * j;
    const int y = ty0 + ly, x = tx0 + lx;
    const bool in = y < p.rows && x < p.cols;
    const int i = y * p.cols + x;
    const bool open = in && !MaskedAt(p.mask, i) && p.cut[i] == 0;
    s_open[ly][lx] = open ? 1 : 0;
    s_phase[ly][lx] = in ? p.phase[i] : T(0);
    s_state[ly][lx] = open ? ((static_cast<unsigned long long>(i) << 32) | kStateBias) : kNoKey;
    s_seed[ly * kTile + lx] = 0;
  }
  __syncthreads();
  for (int j = 0; j < 4; ++j) {
    const int ly = threadIdx.y + 8 * j;
    const bool open = s_open[ly][lx] != 0;
    s_wr[ly][lx] = (open && lx + 1 < kTile && s_open[ly][lx + 1])
                       ? static_cast<int8_t>(EdgeWrap(s_phase[ly][lx], s_phase[ly][lx + 1]))
                       : 0;
    s_wd[ly][lx] = (open && ly + 1 < kTile && s_open[ly + 1][lx])
                       ? static_cast<int8_t>(EdgeWrap(s_phase[ly][lx], s_phase[ly + 1][lx]))
                       : 0;
  }
  __syncthreads();
  // Each iteration reads every neighbour's state, then (after a barrier) writes its own pixels'
  // new states, so no read races with a write (compute-sanitizer racecheck clean).
  for (;;) {
    unsigned long long next[4];
    for (int j = 0; j < 4; ++j) {
      const int ly = threadIdx.y + 8 * j;
      next[j] = kNoKey;
      if (!s_open[ly][lx]) continue;
      unsigned long long best = s_state[ly][lx];
      // k(p) = k(n) - wrap(n -> p); the state's low word holds k + 2^31, so adding a small
      // signed number to the 64-bit state adds it to k without touching the label.
      if (lx > 0 && s_open[ly][lx - 1]) {
        const unsigned long long c = s_state[ly][lx - 1] - static_cast<long long>(s_wr[ly][lx - 1]);
        best = c < best ? c : best;
      }
      if (lx + 1 < kTile && s_open[ly][lx + 1]) {
        const unsigned long long c = s_state[ly][lx + 1] + static_cast<long long>(s_wr[ly][lx]);
        best = c < best ? c : best;
      }
      if (ly > 0 && s_open[ly - 1][lx]) {
        const unsigned long long c = s_state[ly - 1][lx] - static_cast<long long>(s_wd[ly - 1][lx]);
        best = c < best ? c : best;
      }
      if (ly + 1 < kTile && s_open[ly + 1][lx]) {
        const unsigned long long c = s_state[ly + 1][lx] + static_cast<long long>(s_wd[ly][lx]);
        best = c < best ? c : best;
      }
      next[j] = best;
    }
    __syncthreads();
    int changed = 0;
    for (int j = 0; j < 4; ++j) {
      const int ly = threadIdx.y + 8 * j;
      if (s_open[ly][lx] && next[j] < s_state[ly][lx]) {  // only this thread writes (ly, lx)
        s_state[ly][lx] = next[j];
        changed = 1;
      }
    }
    if (!__syncthreads_or(changed)) break;
  }
  for (int j = 0; j < 4; ++j) {
    const int ly = threadIdx.y + 8 * j;
    const int y = ty0 + ly, x = tx0 + lx;
    if (y >= p.rows || x >= p.cols) continue;
    const int i = y * p.cols + x;
    if (!s_open[ly][lx]) {
      p.lab[i] = -1;
      p.lk[i] = 0;
      continue;
    }
    const unsigned long long s = s_state[ly][lx];
    const int label = static_cast<int>(s >> 32);
    p.lab[i] = label;
    p.lk[i] = static_cast<int>(static_cast<uint32_t>(s) - kStateBias);
    if (label == i) p.uf[i] = PackUf(i, 0);
    if (p.seeded) {
      const int local = (label / p.cols - ty0) * kTile + (label % p.cols - tx0);
      atomicMax(&s_seed[local], SeedKey(QualityBits(p, i), static_cast<uint32_t>(i)));
    }
  }
  if (!p.seeded) return;  // block-uniform
  __syncthreads();
  for (int j = 0; j < 4; ++j) {
    const int ly = threadIdx.y + 8 * j;
    const int y = ty0 + ly, x = tx0 + lx;
    if (y >= p.rows || x >= p.cols || !s_open[ly][lx]) continue;
    const int i = y * p.cols + x;
    if (static_cast<int>(s_state[ly][lx] >> 32) == i) p.node_key[i] = s_seed[ly * kTile + lx];
  }
}

// Stage 3a, second version (GoldsteinCudaOptions::tile_scan, the default since it ran on the H200):
// the same fixed point reached faster, by alternating passes along rows and columns in which a
// whole run of open pixels agrees at once. In a pass every warp owns whole lines of the tile (rows in the
// row pass, columns in the column pass; lane = position along the line), so no two warps touch
// the same state and the pass is race-free. Along a line, maximal runs of open pixels are
// segments. With d(j) = -wrap(j-1 -> j) and P(x) the segmented prefix sum of d (P = 0 at the
// segment start), a consistent state satisfies k(x) = k(start) + P(x), so every pixel's state,
// shifted by -P(x), is a candidate for the segment start's state: the segment takes the minimum
// candidate and each pixel adds its P back. Both scans are Hillis-Steele over the warp, limited
// to the segment by its start lane. A mostly open tile converges in two rounds (row pass, column
// pass), a tile cut into spirals in as many rounds as its runs need.
__device__ __forceinline__ int ScanLine(unsigned long long* state, int step_in, int lane) {
  const unsigned long long s = *state;
  const bool open = s != kNoKey;
  const bool prev_open = __shfl_up_sync(~0u, open ? 1 : 0, 1) != 0 && lane > 0;
  const unsigned starts = __ballot_sync(~0u, !open || !prev_open);
  const unsigned upto = lane == 31 ? ~0u : ((2u << lane) - 1);  // lanes 0..lane
  const int seg_lo = 31 - __clz(starts & upto);
  const unsigned above = starts & ~upto;
  const int seg_hi = above != 0 ? __ffs(above) - 2 : 31;
  int prefix = lane == seg_lo ? 0 : step_in;
  for (int off = 1; off < 32; off <<= 1) {
    const int v = __shfl_up_sync(~0u, prefix, off);
    if (lane - off >= seg_lo) prefix += v;
  }
  const unsigned long long shift = static_cast<unsigned long long>(static_cast<long long>(prefix));
  unsigned long long m = open ? s - shift : kNoKey;
  for (int off = 1; off < 32; off <<= 1) {
    const unsigned long long v = __shfl_up_sync(~0u, m, off);
    if (lane - off >= seg_lo && v < m) m = v;
  }
  const unsigned long long seg_min = __shfl_sync(~0u, m, seg_hi);
  if (!open) return 0;
  const unsigned long long next = seg_min + shift;
  if (next < s) {
    *state = next;
    return 1;
  }
  return 0;
}

template <class T>
__global__ void __launch_bounds__(256) TileIntegrateScanKernel(Params<T> p) {
  __shared__ unsigned long long s_state[kTile][kTile + 1];  // +1: column passes hit 2-way banks
  __shared__ int s_wr[kTile][kTile + 1];  // wrap count of (ly, lx) -> (ly, lx + 1), both open
  __shared__ int s_wd[kTile][kTile + 1];  // wrap count of (ly, lx) -> (ly + 1, lx), both open
  __shared__ unsigned long long s_seed[kTile * kTile];
  const int tx0 = blockIdx.x * kTile, ty0 = blockIdx.y * kTile;
  const int lane = threadIdx.x, warp = threadIdx.y;
  for (int j = 0; j < 4; ++j) {
    const int ly = warp + 8 * j;
    const int y = ty0 + ly, x = tx0 + lane;
    const bool in = y < p.rows && x < p.cols;
    const int i = y * p.cols + x;
    const bool open = in && !MaskedAt(p.mask, i) && p.cut[i] == 0;
    s_state[ly][lane] = open ? ((static_cast<unsigned long long>(i) << 32) | kStateBias) : kNoKey;
    s_seed[ly * kTile + lane] = 0;
  }
  __syncthreads();
  for (int j = 0; j < 4; ++j) {
    const int ly = warp + 8 * j;
    const int y = ty0 + ly, x = tx0 + lane;
    const int i = y * p.cols + x;
    const bool open = s_state[ly][lane] != kNoKey;
    s_wr[ly][lane] = (open && lane + 1 < kTile && s_state[ly][lane + 1] != kNoKey)
                         ? EdgeWrap(p.phase[i], p.phase[i + 1])
                         : 0;
    s_wd[ly][lane] = (open && ly + 1 < kTile && s_state[ly + 1][lane] != kNoKey)
                         ? EdgeWrap(p.phase[i], p.phase[i + p.cols])
                         : 0;
  }
  __syncthreads();
  for (;;) {
    int changed = 0;
    for (int j = 0; j < 4; ++j) {
      const int ly = warp + 8 * j;
      changed |= ScanLine(&s_state[ly][lane], lane > 0 ? -s_wr[ly][lane - 1] : 0, lane);
    }
    __syncthreads();
    for (int j = 0; j < 4; ++j) {
      const int lx = warp + 8 * j;
      changed |= ScanLine(&s_state[lane][lx], lane > 0 ? -s_wd[lane - 1][lx] : 0, lane);
    }
    if (!__syncthreads_or(changed)) break;
  }
  for (int j = 0; j < 4; ++j) {
    const int ly = warp + 8 * j;
    const int y = ty0 + ly, x = tx0 + lane;
    if (y >= p.rows || x >= p.cols) continue;
    const int i = y * p.cols + x;
    const unsigned long long s = s_state[ly][lane];
    if (s == kNoKey) {
      p.lab[i] = -1;
      p.lk[i] = 0;
      continue;
    }
    const int label = static_cast<int>(s >> 32);
    p.lab[i] = label;
    p.lk[i] = static_cast<int>(static_cast<uint32_t>(s) - kStateBias);
    if (label == i) p.uf[i] = PackUf(i, 0);
    if (p.seeded) {
      const int local = (label / p.cols - ty0) * kTile + (label % p.cols - tx0);
      atomicMax(&s_seed[local], SeedKey(QualityBits(p, i), static_cast<uint32_t>(i)));
    }
  }
  if (!p.seeded) return;  // block-uniform
  __syncthreads();
  for (int j = 0; j < 4; ++j) {
    const int ly = warp + 8 * j;
    const int y = ty0 + ly, x = tx0 + lane;
    if (y >= p.rows || x >= p.cols) continue;
    const int i = y * p.cols + x;
    const unsigned long long s = s_state[ly][lane];
    if (s != kNoKey && static_cast<int>(s >> 32) == i) p.node_key[i] = s_seed[ly * kTile + lane];
  }
}

// ---------------------------------------------------------------------------------------------
// Stage 3b: the tile graph. Nodes are tile components (identified by their label pixel); K[x] is
// the wrap count of node x's label pixel relative to its region's root. Union-find with offsets:
// entry (parent, off) means K[x] = K[parent] + off; a root is (x, 0). Linking always puts the
// larger root under the smaller one with a CAS on the root's entry, so the final root of a region
// is its smallest label, i.e. its first pixel in raster order. Path halving rewrites an entry to
// skip one ancestor with the summed offset; every entry ever written states a true relation, so
// racing walkers and writers cannot make it wrong. This replaces a BFS over the tile graph: no
// level-by-level launches, and the result is the same because path independence makes every
// spanning tree give the same offsets.

__device__ __forceinline__ int UfFind(unsigned long long* uf, int x, int* offset) {
  int off = 0;
  for (;;) {
    const unsigned long long e = __ldcg(&uf[x]);
    const int px = UfParent(e);
    if (px == x) break;
    const unsigned long long pe = __ldcg(&uf[px]);
    const int gp = UfParent(pe);
    if (gp == px) {
      off += UfOffset(e);
      x = px;
      break;
    }
    const int skip = UfOffset(e) + UfOffset(pe);
    __stcg(&uf[x], PackUf(gp, skip));
    off += skip;
    x = gp;
  }
  *offset = off;
  return x;
}

// Records K[b] - K[a] = d.
__device__ void UfUnion(unsigned long long* uf, int a, int b, int d, int* inconsistent) {
  for (;;) {
    int oa, ob;
    const int ra = UfFind(uf, a, &oa);  // K[a] = K[ra] + oa
    const int rb = UfFind(uf, b, &ob);  // K[b] = K[rb] + ob
    if (ra == rb) {
      if (oa + d != ob) atomicExch(inconsistent, 1);
      return;
    }
    const int rel = oa + d - ob;  // K[rb] - K[ra]
    if (ra < rb) {
      if (atomicCAS(&uf[rb], PackUf(rb, 0), PackUf(ra, rel)) == PackUf(rb, 0)) return;
    } else {
      if (atomicCAS(&uf[ra], PackUf(ra, 0), PackUf(rb, -rel)) == PackUf(ra, 0)) return;
    }
  }
}

__device__ __forceinline__ bool OpenAt(const uint8_t* mask, const uint8_t* cut, int i) {
  return !MaskedAt(mask, i) && cut[i] == 0;
}

// One thread per tile edge segment (up to 32 pixel pairs across a tile boundary): vertical
// boundaries first (tile row tr, boundary left of tile column tc >= 1), then horizontal ones.
// Consecutive pairs usually relate the same two nodes by the same offset; those repeats are
// skipped before touching the union-find.
template <class T>
__global__ void TileUnionKernel(Params<T> p, int tiles_y, int tiles_x) {
  const int vertical = tiles_y * (tiles_x - 1);
  const int total = vertical + (tiles_y - 1) * tiles_x;
  for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < total; s += gridDim.x * blockDim.x) {
    int y0, x0, dy, dx, step_y, step_x, len;
    if (s < vertical) {
      const int tr = s / (tiles_x - 1), tc = s % (tiles_x - 1) + 1;
      y0 = tr * kTile;
      x0 = tc * kTile - 1;
      dy = 0, dx = 1;          // pair (y, x0) -> (y, x0 + 1)
      step_y = 1, step_x = 0;  // along the boundary
      len = min(kTile, p.rows - y0);
    } else {
      const int h = s - vertical;
      const int tr = h / tiles_x + 1, tc = h % tiles_x;
      y0 = tr * kTile - 1;
      x0 = tc * kTile;
      dy = 1, dx = 0;
      step_y = 0, step_x = 1;
      len = min(kTile, p.cols - x0);
    }
    int prev_a = -1, prev_b = -1, prev_d = 0;
    for (int t = 0; t < len; ++t) {
      const int y = y0 + t * step_y, x = x0 + t * step_x;
      const int i = y * p.cols + x, n = (y + dy) * p.cols + (x + dx);
      if (!OpenAt(p.mask, p.cut, i) || !OpenAt(p.mask, p.cut, n)) continue;
      const int a = p.lab[i], b = p.lab[n];
      // k(n) = k(i) - wrap(i -> n):  K[b] + lk[n] = K[a] + lk[i] - wrap.
      const int d = p.lk[i] - EdgeWrap(p.phase[i], p.phase[n]) - p.lk[n];
      if (a == prev_a && b == prev_b && d == prev_d) continue;
      prev_a = a, prev_b = b, prev_d = d;
      UfUnion(p.uf, a, b, d, &p.counters->inconsistent);
    }
  }
}

// Flattens every node to (root, K) with read-only walks, counts regions per image row, and seeds
// the region's seed key with the root's own.
template <class T>
__global__ void ResolveKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (p.lab[i] != i) continue;
    int x = i, off = 0;
    for (;;) {
      const unsigned long long e = __ldcg(&p.uf[x]);
      if (UfParent(e) == x) break;
      off += UfOffset(e);
      x = UfParent(e);
    }
    __stcg(&p.uf[i], PackUf(x, off));
    if (x == i) {
      atomicAdd(&p.row_count[i / p.cols], 1);
      atomicAdd(&p.counters->regions, 1ull);
      if (p.seeded) p.region_key[i] = p.node_key[i];
    }
  }
}

// Seeded runs: each region's seed key is the maximum over its nodes.
template <class T>
__global__ void SeedReduceKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (p.lab[i] != i) continue;
    const int root = UfParent(p.uf[i]);
    if (root != i) atomicMax(&p.region_key[root], p.node_key[i]);
  }
}

// Seeded runs: K of each region's seed pixel.
template <class T>
__global__ void SeedOffsetKernel(Params<T> p) {
  const int n = p.rows * p.cols;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (p.lab[i] != i || UfParent(p.uf[i]) != i) continue;
    const int s = static_cast<int>(SeedKeyIndex(p.region_key[i]));
    p.seed_k[i] = UfOffset(p.uf[p.lab[s]]) + p.lk[s];
  }
}

// Exclusive scan of the per-row region counts (rows <= 32768) in one block of 1024 threads: each
// thread sums a contiguous chunk, the block scans the 1024 sums, each thread writes its chunk.
__global__ void __launch_bounds__(1024) RowScanKernel(const int* row_count, int* row_offset,
                                                       int rows) {
  __shared__ int s_sum[1024];
  const int chunk = (rows + 1023) / 1024;
  const int begin = threadIdx.x * chunk, end = min(rows, begin + chunk);
  int sum = 0;
  for (int y = begin; y < end; ++y) sum += row_count[y];
  s_sum[threadIdx.x] = sum;
  __syncthreads();
  for (int off = 1; off < 1024; off <<= 1) {
    const int v = threadIdx.x >= off ? s_sum[threadIdx.x - off] : 0;
    __syncthreads();
    s_sum[threadIdx.x] += v;
    __syncthreads();
  }
  int run = s_sum[threadIdx.x] - sum;  // exclusive prefix of this chunk
  for (int y = begin; y < end; ++y) {
    row_offset[y] = run;
    run += row_count[y];
  }
}

// Region labels 1..R in raster order of the roots: one warp per image row that holds a root,
// ranking the row's roots with ballots.
template <class T>
__global__ void LabelRootsKernel(Params<T> p) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= p.rows || p.row_count[warp] == 0) return;  // warp-uniform
  int next = p.row_offset[warp] + 1;
  const int row = warp * p.cols;
  for (int x0 = 0; x0 < p.cols; x0 += 32) {
    const int x = x0 + lane;
    const int i = row + x;
    const bool root = x < p.cols && p.lab[i] == i && UfParent(p.uf[i]) == i;
    const unsigned ballot = __ballot_sync(~0u, root);
    if (root) p.region_label[i] = next + __popc(ballot & ((1u << lane) - 1));
    next += __popc(ballot);
  }
}

// k of an open pixel: its node's K plus its tile-local k, minus the region seed's.
template <class T>
__device__ __forceinline__ int OpenK(const Params<T>& p, int i, int* root) {
  const unsigned long long e = p.uf[p.lab[i]];
  *root = UfParent(e);
  return UfOffset(e) + p.lk[i] - (p.seeded ? p.seed_k[*root] : 0);
}

// Stage 3c: one thread per pixel writes the unwrapped value and the maps. Cut pixels take k from
// their first open neighbour in the order up, left, right, down.
template <class T>
__global__ void __launch_bounds__(256) FinalKernel(Params<T> p) {
  const int x = blockIdx.x * 32 + threadIdx.x;
  const int y = blockIdx.y * 8 + threadIdx.y;
  const bool in = y < p.rows && x < p.cols;
  const int i = y * p.cols + x;
  bool on_cut = false, unreached = false;
  if (in) {
    const bool masked = MaskedAt(p.mask, i);
    const bool cut = p.cut[i] != 0;
    int k = 0, label = 0, root = 0;
    if (!masked && !cut) {
      k = OpenK(p, i, &root);
      label = p.region_label[root];
    } else if (!masked) {
      on_cut = true;
      const int nb[4] = {y > 0 ? i - p.cols : -1, x > 0 ? i - 1 : -1,
                         x + 1 < p.cols ? i + 1 : -1, y + 1 < p.rows ? i + p.cols : -1};
      unreached = true;
      for (int t = 0; t < 4; ++t) {
        const int q = nb[t];
        if (q < 0 || !OpenAt(p.mask, p.cut, q)) continue;
        k = OpenK(p, q, &root) - EdgeWrap(p.phase[q], p.phase[i]);
        label = p.region_label[root];
        unreached = false;
        break;
      }
    }
    p.out[i] = masked ? T(0) : AddTurns(p.phase[i], k);
    if (p.return_maps) {
      p.regions_out[i] = label;
      p.unreached_out[i] = unreached ? 1 : 0;
      // Only masked pixels change (1 -> 0), and neighbours test masked pixels as not open
      // whatever their cut byte says, so rewriting in place is safe.
      if (masked && cut) p.cut[i] = 0;
    }
  }
  const unsigned cuts = WarpSum(on_cut ? 1u : 0u);
  const unsigned lost = WarpSum(unreached ? 1u : 0u);
  if ((threadIdx.x & 31) == 0) {
    if (cuts) atomicAdd(&p.counters->cut_pixels, static_cast<unsigned long long>(cuts));
    if (lost) atomicAdd(&p.counters->unreached, static_cast<unsigned long long>(lost));
  }
}

}  // namespace fresnel::unwrap::internal::cuda
