// kTensorTf32, the polyphase filter bank as a GEMM on the tensor cores (tensor_tf32_cuda.cu),
// with 3xTF32 products to keep float32 accuracy. Internal to the interp area; included by .cu
// files only.
//
// The GEMM. With g0 = gcd(up, down), the period (u outputs per d inputs, phase_groups.h) is
// taken M times longer, M = lcm(8/gcd(u, 8), 4/gcd(d, 4)), so that it holds u' = M*u outputs (a
// multiple of 8: whole n8 tiles) and d' = M*d inputs (a multiple of 4: see the kernel's A
// layout). Output j of period n (j < u', q_j = floor(j*down/up), t_j = j*down mod up) is
//
//   y[n*u' + j] = sum_{i<Kb} X[n][i] * B[i][j],   X[n][i] = s[n*d' - (P-1) + i],
//   B[i][j] = htf[t_j*P + m] with m = q_j + P - 1 - i when 0 <= m < P, else 0,
//
// Kb = P + q_{u'-1} (every output's P taps lie in one band of the period), padded to a multiple
// of 8. That is D[periods x u'] = X[periods x Kb] * B[Kb x u']: M = periods (m16 tiles), N = u'
// phases (n8 tiles), K = the band (k8 steps). X is a Hankel matrix (row n is the signal shifted
// by n*d'), read straight from the block's input tile in shared memory; B is the filter bank,
// fixed per plan, stored in mma fragment order. The padded band costs (Kb_pad - P)/P extra
// products (3/2 x 1024 taps: 360 for 342, 5%; up 2 x 256 taps: 136 for 128, 6%): the path is
// for long filters (P >= 64), where the band's padding is small; the short-filter 160/147
// (P = 21, d = 147) would compute 8x more products than it needs and stays on kPhaseGroups.
//
// 3xTF32: a = a_hi + a_lo with a_hi = tf32(a) (round to nearest, 10 mantissa bits), a_lo =
// tf32(a - a_hi); a*b ~ a_hi*b_hi + a_hi*b_lo + a_lo*b_hi (the a_lo*b_lo term is below float32's
// rounding), the small terms first. Accumulation is in float32 inside the tensor cores, so the
// result is float32-accurate but not the bit pattern of the FFMA kernels' sums; every window and
// tile of one plan sums the same products in the same order (k-steps ascending, then the three
// terms), so streamed chunks still reproduce the one-shot result bit for bit.
//
// Accumulation. mma.sync adds its products to the accumulator inside the tensor core, aligned
// to the larger exponent and truncated rather than rounded to nearest, so each of the 3 x
// (Kpad/8) accumulating mma of an output can lose up to an ulp of the running sum, always
// towards zero: the error grows with the band (session 7 on the H200, one accumulator over the
// whole band: relative L2 9.2e-7 at P = 128, 2.4e-6 at P = 342, 1.42e-5 at P = 2048, against
// 2-3e-7 for FFMA). The kernel therefore sums the band in chunks of `chunk_ksteps` k-steps: the
// tensor cores accumulate each chunk from zero, and the chunk's partial sums are added to the
// float32 totals with FADD (round to nearest). The truncation then acts on one chunk's partial
// sum, over 3 x chunk_ksteps mma, whatever P is. Cost: one FADD per accumulator per chunk
// (4 x MT x NT per lane, beside 3 x MT x NT mma per k-step and warp) and MT x NT x 4 registers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "interp/interp_internal.h"

namespace fresnel::interp::internal {

// k-steps (8 band taps each) per tensor-core partial sum, unless the plan is given another
// (CudaPlanOptions::tc_chunk_ksteps). Measured reason (H200, 2026-12-02, docs/interp.md): with 4,
// relative L2 2.1-2.8e-7 for P = 64 .. 2048 at 5-7% below the whole band's speed; 8 was 3-4%
// faster at 3.8-4.7e-7, 1 and 2 slower at 0.9-3e-7.
constexpr int kTensorTf32DefaultChunk = 4;
// Default of TensorTf32Plan::min_blocks (CudaPlanOptions::tc_min_blocks). Measured reason (H200,
// 2026-12-02): the 3-block build (80 registers, 20 bytes of spills) was 4-10% slower.
constexpr int kTensorTf32DefaultMinBlocks = 1;

struct TensorTf32Plan {
  int u = 8, d = 4;      // the widened period: u outputs (multiple of 8) per d inputs
  int p = 1;             // taps per phase
  int kpad = 8;          // band length, multiple of 8
  int nt = 1;            // n8 tiles: u / 8 (1 .. 8)
  int mt = 2;            // m16 tiles per warp (template: 2 or 4)
  int periods = 256;     // periods per tile: 8 warps x 16*mt
  int ld = 4;            // row length (in float2) of the de-interleaved input tile, 4 mod 16
  bool smem_table = true;  // B fragments in shared memory (else read through L1 from global)
  int chunk_ksteps = kTensorTf32DefaultChunk;  // k-steps per tensor-core partial sum (above)
  // NT = 3 (3/2 and other u' = 24 periods) only: 3 compiles the kernel for three resident
  // blocks per SM (at most 85 registers; the chunked sums need 128 otherwise, two blocks);
  // 1: the compiler's choice. Same bits.
  int min_blocks = kTensorTf32DefaultMinBlocks;
  int table_floats = 0;  // kpad/8 * nt * 32 lanes * 4 floats, then kpad/8 int2 band offsets
  int smem_bytes = 0;
  std::vector<float> table;  // the host copy, uploaded by the plan's owner
};

// Plans kTensorTf32 for up/down with P taps per phase (htf phase-major, P per phase; empty:
// geometry only). FailedPrecondition when the filter does not suit it (more than 64 outputs
// per widened period, a tile beyond shared memory, or P < kTensorTf32MinTaps).
constexpr int64_t kTensorTf32MinTaps = 16;
absl::StatusOr<TensorTf32Plan> PlanTensorTf32(int up, int down, int64_t p,
                                              const std::vector<float>& htf);

// Enqueues the kernel on `stream`; `table` is the plan's table on the device, x and y float32.
absl::Status LaunchTensorTf32(const TensorTf32Plan& plan, const float* table, int sm_count,
                              int blocks_per_sm, cudaStream_t stream, const DeviceSignal& s);
// Resident blocks per SM for the plan (opts the kernel into the shared memory it needs).
absl::StatusOr<int> TensorTf32Occupancy(const TensorTf32Plan& plan);

}  // namespace fresnel::interp::internal
