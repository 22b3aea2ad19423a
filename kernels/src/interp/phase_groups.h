// kPhaseGroups, the float32 polyphase kernel for rational resampling and long filters
// (phase_groups_cuda.cu). Internal to the interp area; included by .cu files only.
//
// The idea, for y[k] = sum_{m<P} htf[t*P + m] * s[q - m] (interp_internal.h). With
// g0 = gcd(up, down), u = up/g0 and d = down/g0, output k = n*u + j (period n, j in [0, u)) has
// q = n*d + q_j and t = t_j, where q_j = floor(j*down/up) < d and t_j = j*down mod up: the
// pattern repeats every u outputs and d inputs. Consecutive outputs j of one period read nearly
// the same inputs, so they are grouped V at a time (group gr: j = gr*V + v, v < V; the last
// group padded with zero taps) and, relative to the group's first input q_{gr*V} - (P-1), output
// v reads inputs [D_v, D_v + P) with D_v = q_{gr*V+v} - q_{gr*V}. One band of K = P + Dmax
// taps per group covers every v:
//
//   y[n*u + gr*V + v] = sum_{i<K} A[gr][i][v] * s[n*d + q_{gr*V} - (P-1) + i],
//   A[gr][i][v] = htf[t_j*P + m] with m = D_v + P - 1 - i when 0 <= m < P, else 0.
//
// The kernel runs i from K-1 down to 0, i.e. m ascending from acc = 0 (the zero taps before
// m = 0 leave acc at +0, those after m = P-1 add +0): the same sum in the same order as the
// other kernels, independent of tiles and windows. Per i a warp loads one A[gr][i][0..V) (one
// broadcast shared-memory load) and one input per lane and period it owns, and does V FMAs per
// input: for 160/147 (P = 21, V = 4, R = 2 periods per lane) that is 24 FMAs per output (21
// useful) for 9 shared loads (24 * (1/4 input + 1/8 tap)), against kSmemTile's 42 (a tap and an
// input per FMA), which bound it at 23% of the copy bandwidth. (R = 1, an option, trades 3 more
// loads per output for a half-size tile and more blocks per SM; it measured slower.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "interp/interp_internal.h"

namespace fresnel::interp::internal {

// Planner choice (CudaPlanOptions::pg_widen, pg_layout): 0 means the default.
struct PhaseGroupsChoice {
  int widen = 0;   // 1: never widen the period; 2 (default): widen when the cost model says so
  int layout = 0;  // 1: always the de-interleaved tile; 2 (default): plain where d is odd
  // Periods per lane R (1, 2, 4 or 8; 4 only for the plain tile with V = 4); 0: 8 for P >= 48
  // taps per phase, else 2.
  int periods_per_lane = 0;
  // Period rotation (plain tile, u % 4 == 0): 1: never; 0 or 2 (default): four tables, one per
  // rotation s, and the launch picks the s that makes the tiles' outputs 16-byte aligned in y.
  int rotate = 0;
  // De-interleaved band loop for d in {2, 4, 8} (V = 4): 1: step by step with a row-wrap test
  // (round 1); 0 or 2 (default): blocks of d steps with one pointer per row. Same bits.
  int row_blocks = 0;
  // Input tiles per block: 1: one, refilled after the block has computed from it (the copies
  // overlap the copy-out only); 2: two, the next tile's copies issued before the block computes
  // from the current one (they overlap the compute too; the tile's shared memory doubles).
  // 0: the default (kPgDefaultPrefetch, phase_groups_cuda.cu). Same bits.
  int prefetch = 0;
  // Output staging (plain tile, V = 4, u % 4 == 0 with more than 18 groups, one input tile,
  // R <= 2): 1: the whole
  // tile's outputs staged, one copy-out per tile; 2: staged in rounds of one task per warp
  // through two small buffers, each round copied out after a barrier (a third of the shared
  // memory: three blocks per SM for 160/147); 3 (plain tile, V = 4, u % 4 == 0, one input
  // tile, R = 2): the whole tile staged, interior tiles copied out by cp.async.bulk, one copy
  // per period. 0: the default (kPgDefaultStage). Same bits.
  int stage = 0;
  // The last, partial wave of tiles (plain tile, V = 4, R = 2, one input tile, stage 1 or 3):
  // 1: each of its tiles runs whole on one block while the other blocks idle; 2: each of its
  // tiles is split by groups into parts (a group range over all the tile's periods) that run
  // on as many blocks, after their whole tiles; 3: the same, but the parts run first, on the
  // first blocks. 0: the default (kPgDefaultTail). Same bits.
  int tail = 0;
  // Input tile copies (same conditions as tail): 1: cp.async by every thread; 2: interior tiles
  // by one cp.async.bulk (the copy engine), completing on an mbarrier. 0: the default (1).
  // Same bits.
  int bulk_in = 0;
  // At most this many blocks in the grid (0: as many as fit); a test hook that makes short
  // signals run several waves of tiles and a partial last one. Same bits.
  int max_blocks = 0;
};

// The geometry of one filter's kPhaseGroups launch, fixed at plan creation.
//
// Widening: the period may be taken M times longer (u' = M*u outputs per d' = M*d inputs,
// M = 4/gcd(u, 4)) so that groups of V = 4 outputs are full: 3/2 then runs 12 outputs per 8
// inputs in 3 full groups instead of 3 outputs per 2 inputs in one group with a zero fourth
// column (25% of the FMAs wasted), up 2 runs 4 outputs per 2 inputs with V = 4 instead of V = 2
// (half the loads per FMA). The price is a band longer by up to 3*d' (Dmax grows); the planner
// takes the candidate with fewer issued instructions per output, counted as
// groups * K * (R*(1 + V) + 6) / (R*u') (per band step: R input loads, one tap load, R*V FMAs and
// about 6 index and loop instructions).
struct PhaseGroupsPlan {
  int v = 4;           // outputs per group (template: 1, 2 or 4)
  int r = 2;           // periods per lane (template: 1, 2, 8; 4 for the plain tile, V = 4)
  int u = 1, d = 1;    // the period: u outputs per d inputs
  int groups = 1;      // ceil(u / v)
  int k = 1;           // band length (taps per group and output)
  int p = 1;           // taps per phase
  int periods = 64;    // periods per tile: chunks * 32 * r
  int ld = 1;          // row length of the de-interleaved input tile
  int sr = 1;          // staging row stride (floats per period; per period of a round)
  bool plain = false;  // input tile in plain order (d odd), else de-interleaved by z mod d
  int table_floats = 0;  // groups * k * v taps, then `groups` ints (first inputs q_{gr*V})
  // Rotated tables (1 or 4, `table` holds them one after the other): with rotation s a tile's
  // outputs start at n_tile*u - s, so that a launch can align them to 16 bytes in y whatever
  // out_first is (resample_poly's first kept output is rarely a multiple of 4: 160/147 keeps
  // outputs from 11). zoff[s] (<= 0) moves the tile's input origin so that the group bases are
  // >= 0; extra = max(-zoff) more inputs per tile.
  bool row_blocks = false;  // PhaseGroupsChoice::row_blocks, where it applies
  bool prefetch = false;    // two input tiles (PhaseGroupsChoice::prefetch)
  bool rounds = false;      // outputs staged in rounds (PhaseGroupsChoice::stage = 2)
  bool bulk = false;        // bulk copies out of the staged tile (PhaseGroupsChoice::stage = 3)
  int tail = 0;             // PhaseGroupsChoice::tail where it applies: 0 (whole tiles), 2 or 3
  bool bulk_in = false;     // PhaseGroupsChoice::bulk_in = 2 where it applies
  int max_blocks = 0;       // PhaseGroupsChoice::max_blocks
  int rotations = 1;
  std::vector<int> zoff = {0};
  int extra = 0;
  int smem_bytes = 0;
  std::vector<float> table;  // the host copy, uploaded by the plan's owner
};

// Plans kPhaseGroups for up/down with P taps per phase, htf phase-major (P per phase). Not OK
// (FailedPrecondition) when the filter does not suit it: its tap table and tile must fit in
// shared memory with every warp of a block busy. An empty htf plans the geometry only (no table).
absl::StatusOr<PhaseGroupsPlan> PlanPhaseGroups(int up, int down, int64_t p,
                                                const std::vector<float>& htf,
                                                PhaseGroupsChoice choice = {});

// Enqueues the kernel on `stream`; `table` is the plan's table on the device, x and y float32.
// blocks_per_sm is the occupancy measured at plan creation (PhaseGroupsOccupancy).
absl::Status LaunchPhaseGroups(const PhaseGroupsPlan& plan, const float* table, int sm_count,
                               int blocks_per_sm, cudaStream_t stream, const DeviceSignal& s);
// Resident blocks per SM for the plan (opts the kernel into the shared memory it needs).
absl::StatusOr<int> PhaseGroupsOccupancy(const PhaseGroupsPlan& plan);

}  // namespace fresnel::interp::internal
