// Goldstein branch-cut unwrapping on CUDA: uploads, the kernel sequence of goldstein_kernels.cuh
// on the caller's stream, downloads. Without a progress hook nothing between the uploads and the
// downloads waits for the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda_util.cuh"
#include "core/staged_copy.h"
#include "fresnel/core/uninitialized_array.h"
#include "fresnel/core/status.h"
#include "unwrap/goldstein_kernels.cuh"
#include "unwrap/unwrap_internal.h"

namespace fresnel::unwrap::internal {
namespace {

using fresnel::cuda::BlocksFor;
using fresnel::cuda::DeviceBuffer;
using fresnel::cuda::StageClock;
using fresnel::cuda::StagedDownload;
using fresnel::cuda::StagedPiece;
using fresnel::cuda::StagedUpload;
using fresnel::cuda::StreamOf;
using namespace fresnel::unwrap::internal::cuda;  // NOLINT: the kernels of this area

__global__ void InitCountersKernel(Counters* c) {
  c->bad_phase = INT_MAX;
  c->bad_quality = INT_MAX;
}

// Blocks for a grid-stride kernel over n items: enough to fill the device, no more than needed.
unsigned StrideBlocks(int64_t n, int sms) {
  return std::min<unsigned>(BlocksFor(n, 256), static_cast<unsigned>(sms) * 16);
}

// Kernel choices (GoldsteinCudaOptions; docs/unwrap.md, "Switches").
//
// `pairing` picks how the pairing rounds run:
//  - graph (default): one CUDA graph per (device, stream, dtype) whose WHILE node repeats
//    propose + accept; the last accept block advances the round on the device and sets the
//    condition, so the host launches the whole schedule once (no per-round launch latency).
//  - launches: two launches per scheduled round (~20 radii x iterations), the rounds after the
//    last useful one return at once. ~4 us each: about 1.2 ms per call on the H200 whatever the
//    image. Also the fallback whenever a graph API call fails.
//  - cooperative: all rounds in one cooperative kernel. On the H200 (2026-11-30) it diverged from
//    the CPU on masked and on noisy 1000x1000 inputs (37 failed [gpu] assertions; cause unknown),
//    so it is opt-in only.
//
// `tile_scan` picks the segmented-scan tile kernel (TileIntegrateScanKernel, default) or the
// propagation kernel (TileIntegrateKernel) for the integration. Both compute the same fixed point.
// The scan kernel is the default since the H200 run of 2026-11-30 (third): every [gpu] case
// bit-exact with it, integration 0.23 vs 0.42 ms at 1024^2 and 3.2 vs 11.9 ms at 8192^2
// (docs/bench/unwrap.md). `cooperative_fences = false` drops the per-thread fences before the
// grid barriers of the cooperative pairing kernel (to test whether they matter).
//
// Diagnostics only (not a kernel choice): FRESNEL_UNWRAP_DEBUG_DUMP=file records every proposal
// of every pairing step and writes them with the pairing state (residue list, keys, proposals,
// bin table, device mask, match counts per step) to `file` after pairing;
// tests/kernels/unwrap/pairing_replay.h reads it.
using PairingMode = GoldsteinCudaOptions::Pairing;

const char* DumpPath() {
  const char* path = std::getenv("FRESNEL_UNWRAP_DEBUG_DUMP");
  return path != nullptr && path[0] != '\0' ? path : nullptr;
}

template <class T>
absl::Status DumpPairing(const Params<T>& p, int64_t bins, const Schedule& sched,
                         cudaStream_t stream) {
  const char* path = DumpPath();
  if (path == nullptr) return absl::OkStatus();
  Counters c{};
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&c, p.counters, sizeof(Counters), cudaMemcpyDeviceToHost, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const int count = std::min(c.res_count, p.res_capacity);
  const int64_t n = static_cast<int64_t>(p.rows) * p.cols;
  std::vector<uint32_t> word(count);
  std::vector<unsigned long long> key(count);
  std::vector<int> prop(count), base(bins), cnt(bins), masked(bins);
  std::vector<uint8_t> mask(p.mask != nullptr ? n : 0);
  const int steps = sched.num_radii * sched.iterations;
  std::vector<int> matches(steps);
  const bool rounds = p.dbg_key != nullptr;
  std::vector<unsigned long long> dbg_key(rounds ? static_cast<size_t>(steps) * count : 0);
  std::vector<int> dbg_prop(dbg_key.size());
  auto get = [stream](void* dst, const void* src, size_t bytes) {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  };
  FRESNEL_CUDA_RETURN_IF_ERROR(get(word.data(), p.res_word, count * sizeof(uint32_t)));
  FRESNEL_CUDA_RETURN_IF_ERROR(get(key.data(), p.res_key, count * sizeof(unsigned long long)));
  FRESNEL_CUDA_RETURN_IF_ERROR(get(prop.data(), p.res_prop, count * sizeof(int)));
  FRESNEL_CUDA_RETURN_IF_ERROR(get(base.data(), p.bin_base, bins * sizeof(int)));
  FRESNEL_CUDA_RETURN_IF_ERROR(get(cnt.data(), p.bin_count, bins * sizeof(int)));
  FRESNEL_CUDA_RETURN_IF_ERROR(get(masked.data(), p.bin_masked, bins * sizeof(int)));
  if (p.mask != nullptr) FRESNEL_CUDA_RETURN_IF_ERROR(get(mask.data(), p.mask, n));
  FRESNEL_CUDA_RETURN_IF_ERROR(get(matches.data(), p.matches, steps * sizeof(int)));
  for (int s = 0; rounds && s < steps && count > 0; ++s) {  // the first `count` of each step
    const size_t off = static_cast<size_t>(s) * p.res_capacity;
    FRESNEL_CUDA_RETURN_IF_ERROR(get(dbg_key.data() + static_cast<size_t>(s) * count,
                                     p.dbg_key + off, count * sizeof(unsigned long long)));
    FRESNEL_CUDA_RETURN_IF_ERROR(get(dbg_prop.data() + static_cast<size_t>(s) * count,
                                     p.dbg_prop + off, count * sizeof(int)));
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", path));
  // Layout (version 2): this line, then word[count] (u32), key[count] (u64), prop[count] (i32),
  // bin base/count/masked[bins] (i32), mask[rows*cols] (u8, if mask), matches[steps] (i32), and if
  // rounds, for each step: n (i32), then n records of pos (i32), key (u64), prop (i32) for the
  // residues that proposed in that step.
  std::fprintf(f,
               "fresnel-unwrap-dump 2 rows %d cols %d count %d bins %lld mask %d active %d "
               "steps %d iterations %d rounds %d stale %d\n",
               p.rows, p.cols, count, static_cast<long long>(bins), p.mask != nullptr ? 1 : 0,
               c.active, steps, sched.iterations, rounds ? 1 : 0, c.stale);
  std::fwrite(word.data(), sizeof(uint32_t), word.size(), f);
  std::fwrite(key.data(), sizeof(unsigned long long), key.size(), f);
  std::fwrite(prop.data(), sizeof(int), prop.size(), f);
  std::fwrite(base.data(), sizeof(int), base.size(), f);
  std::fwrite(cnt.data(), sizeof(int), cnt.size(), f);
  std::fwrite(masked.data(), sizeof(int), masked.size(), f);
  std::fwrite(mask.data(), 1, mask.size(), f);
  std::fwrite(matches.data(), sizeof(int), matches.size(), f);
  for (int s = 0; rounds && s < steps; ++s) {
    const size_t off = static_cast<size_t>(s) * count;
    int made = 0;
    for (int i = 0; i < count; ++i) made += dbg_key[off + i] != 0;
    std::fwrite(&made, sizeof(int), 1, f);
    for (int i = 0; i < count; ++i) {
      if (dbg_key[off + i] == 0) continue;
      std::fwrite(&i, sizeof(int), 1, f);
      std::fwrite(&dbg_key[off + i], sizeof(unsigned long long), 1, f);
      std::fwrite(&dbg_prop[off + i], sizeof(int), 1, f);
    }
  }
  std::fclose(f);
  return absl::OkStatus();
}

absl::Status SyncAndReport(const GoldsteinOptions& options, cudaStream_t stream, Stage stage,
                           double fraction) {
  if (!options.progress) return absl::OkStatus();
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Report(options.progress, stage, fraction);
}

// ---------------------------------------------------------------------------------------------
// Pairing rounds as a CUDA graph (GoldsteinCudaOptions::Pairing::kGraph, the default).
//
//   start --> WHILE(cond) { propose --> accept } --> force-to-frame
//
// The kernels' arguments must stay constant for the instantiated graph to be reused, so every
// kernel gets one pointer to a PairingGraphArgs block in device memory (one per cached graph);
// the per-call Params and Schedule are written into it by an ordinary launch of
// PairingGraphSetupKernel (kernel arguments are copied at launch: no host synchronisation, unlike
// a pageable memcpy) right before the graph is launched on the same stream.
//
// The round state (radius index, iteration, step) lives in the block too. The body runs exactly
// the rounds of PairResidues in goldstein_cpu.cc:
//   for ri in radii, while active > 0:  for it < iterations, while active > 0:
//     round(ri, it); if it matched nothing: next radius
// `start` sets the condition to (active > 0); after each round the last accept block (fence +
// block counter, the counter reset for the next round) reads the round's match count and
// `active`, moves to the next iteration, or to the next radius when the round matched nothing or
// the iterations are used up, and sets the condition to (active > 0 && radii left). The per-round
// work is ProposeWarp / AcceptOne, unchanged, with the same step numbers (ri * iterations + it)
// as the other two modes, so the step tags and the debug dump mean the same.
template <class T>
struct PairingGraphArgs {
  Params<T> p;
  Schedule sched;
  int ri, it, step;       // the round the body runs next
  unsigned blocks_done;   // accept blocks finished in this round (reset by the last one)
};

template <class T>
__global__ void PairingGraphSetupKernel(Params<T> p, Schedule sched, PairingGraphArgs<T>* a) {
  a->p = p;
  a->sched = sched;
  a->ri = 0;
  a->it = 0;
  a->step = 0;
  a->blocks_done = 0;
}

template <class T>
__global__ void PairingGraphStartKernel(PairingGraphArgs<T>* a, cudaGraphConditionalHandle h) {
  cudaGraphSetConditional(h, a->p.counters->active > 0 && a->sched.num_radii > 0 ? 1u : 0u);
}

template <class T>
__global__ void __launch_bounds__(256) PairingGraphProposeKernel(PairingGraphArgs<T>* a) {
  const Params<T> p = a->p;
  const int step = a->step, r = a->sched.radii[a->ri];
  const int count = min(p.counters->res_count, p.res_capacity);
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  const int threads = gridDim.x * blockDim.x;
  for (int pos = thread >> 5; pos < count; pos += threads >> 5) {
    ProposeWarp(p, pos, r, threadIdx.x & 31, step);
  }
}

template <class T>
__global__ void __launch_bounds__(256) PairingGraphAcceptKernel(PairingGraphArgs<T>* a,
                                                                cudaGraphConditionalHandle h) {
  const Params<T> p = a->p;
  const int step = a->step, ri = a->ri, it = a->it;
  const int r = a->sched.radii[ri];
  const int count = min(p.counters->res_count, p.res_capacity);
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  const int threads = gridDim.x * blockDim.x;
  const int limit = (count + 31) & ~31;  // whole warps for the reduction in AddMatches
  for (int base = thread; base < limit; base += threads) {
    const int matched = base < count ? AcceptOne(p, base, r, step) : 0;
    AddMatches(p, step, matched);
  }
  // Last block to finish advances the round. Every thread's atomics (matches, active) are
  // device-scope; the fence orders them before this block's arrival on the counter.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&a->blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  const int matched = __ldcg(&p.matches[step]);
  const int active = __ldcg(&p.counters->active);
  int next_ri = ri, next_it = it + 1;
  if (matched == 0 || next_it >= a->sched.iterations) {
    ++next_ri;
    next_it = 0;
  }
  const bool more = active > 0 && next_ri < a->sched.num_radii;
  a->ri = more ? next_ri : ri;  // stays a valid radius index for the force-to-frame node
  a->it = next_it;
  a->step = next_ri * a->sched.iterations + next_it;
  a->blocks_done = 0;
  cudaGraphSetConditional(h, more ? 1u : 0u);
}

template <class T>
__global__ void PairingGraphForceKernel(PairingGraphArgs<T>* a) {
  const Params<T> p = a->p;
  const int final_radius = a->sched.radii[a->sched.num_radii - 1];
  const int count = min(p.counters->res_count, p.res_capacity);
  for (int pos = blockIdx.x * blockDim.x + threadIdx.x; pos < count;
       pos += gridDim.x * blockDim.x) {
    ForceToFrame(p, pos, final_radius);
  }
}

// One instantiated graph and its argument block per (device, stream, dtype). A graph exec may
// only run once at a time and its argument block is shared by its launches, so streams do not
// share one; `mu` makes "write the arguments, launch the graph" one unit in stream order when
// several host threads use the same stream. Entries live until the process ends (a few hundred
// bytes of device memory and one small graph per stream that ever ran Goldstein).
struct PairingGraph {
  std::mutex mu;
  bool failed = false;  // a graph API call failed once: use separate launches from then on
  cudaGraphExec_t exec = nullptr;
  void* args = nullptr;
};

PairingGraph* PairingGraphFor(int device, cudaStream_t stream, bool is_double) {
  static std::mutex cache_mu;
  static auto* cache =
      new std::map<std::tuple<int, uintptr_t, bool>, std::unique_ptr<PairingGraph>>();
  std::lock_guard<std::mutex> lock(cache_mu);
  auto& slot = (*cache)[{device, reinterpret_cast<uintptr_t>(stream), is_double}];
  if (slot == nullptr) slot = std::make_unique<PairingGraph>();
  return slot.get();
}

template <class T>
absl::Status BuildPairingGraph(PairingGraph* g, unsigned blocks) {
  PairingGraphArgs<T>* args = nullptr;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMalloc(&args, sizeof(PairingGraphArgs<T>)));
  cudaGraph_t graph = nullptr;
  auto fail = [&](cudaError_t e, const char* what) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaFree(args);
    return fresnel::cuda::ToStatus(e, what);
  };
  cudaError_t e = cudaGraphCreate(&graph, 0);
  if (e != cudaSuccess) return fail(e, "cudaGraphCreate");
  cudaGraphConditionalHandle handle{};
  e = cudaGraphConditionalHandleCreate(&handle, graph, 0, 0);
  if (e != cudaSuccess) return fail(e, "cudaGraphConditionalHandleCreate");

  auto kernel_node = [&](cudaGraphNode_t* node, cudaGraph_t in, const cudaGraphNode_t* dep,
                         void* func, unsigned grid, unsigned block, void** kargs) {
    cudaKernelNodeParams kp{};
    kp.func = func;
    kp.gridDim = dim3(grid);
    kp.blockDim = dim3(block);
    kp.kernelParams = kargs;
    return cudaGraphAddKernelNode(node, in, dep, dep != nullptr ? 1 : 0, &kp);
  };
  void* args_only[] = {&args};
  void* args_handle[] = {&args, &handle};
  cudaGraphNode_t start, loop, propose, accept, force;
  e = kernel_node(&start, graph, nullptr, reinterpret_cast<void*>(PairingGraphStartKernel<T>), 1,
                  1, args_handle);
  if (e != cudaSuccess) return fail(e, "start node");
  cudaGraphNodeParams cp{};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = handle;
  cp.conditional.type = cudaGraphCondTypeWhile;
  cp.conditional.size = 1;
  e = cudaGraphAddNode(&loop, graph, &start, nullptr, 1, &cp);
  if (e != cudaSuccess) return fail(e, "while node");
  cudaGraph_t body = cp.conditional.phGraph_out[0];
  e = kernel_node(&propose, body, nullptr,
                  reinterpret_cast<void*>(PairingGraphProposeKernel<T>), blocks, 256, args_only);
  if (e != cudaSuccess) return fail(e, "propose node");
  e = kernel_node(&accept, body, &propose,
                  reinterpret_cast<void*>(PairingGraphAcceptKernel<T>), blocks, 256, args_handle);
  if (e != cudaSuccess) return fail(e, "accept node");
  e = kernel_node(&force, graph, &loop, reinterpret_cast<void*>(PairingGraphForceKernel<T>),
                  blocks, 256, args_only);
  if (e != cudaSuccess) return fail(e, "force node");
  e = cudaGraphInstantiate(&g->exec, graph, 0);
  if (e != cudaSuccess) return fail(e, "cudaGraphInstantiate");
  cudaGraphDestroy(graph);  // the exec keeps its own copy
  g->args = args;
  return absl::OkStatus();
}

// Enqueues the whole pairing on `stream` as the cached graph. An error means nothing of the
// pairing was enqueued (the caller falls back to separate launches); later calls on this stream
// then skip the graph.
template <class T>
absl::Status LaunchPairingGraph(const Params<T>& p, const Schedule& sched, int device,
                                cudaStream_t stream, unsigned blocks) {
  PairingGraph* g = PairingGraphFor(device, stream, sizeof(T) == sizeof(double));
  std::lock_guard<std::mutex> lock(g->mu);
  if (g->failed) return absl::UnavailableError("pairing graph failed earlier on this stream");
  if (g->exec == nullptr) {
    absl::Status s = BuildPairingGraph<T>(g, blocks);
    if (!s.ok()) {
      g->failed = true;
      cudaGetLastError();  // clear a non-sticky error for the fallback
      std::fprintf(stderr, "fresnel unwrap: no pairing graph (%s); using separate launches\n",
                   s.ToString().c_str());
      return s;
    }
  }
  auto* args = static_cast<PairingGraphArgs<T>*>(g->args);
  PairingGraphSetupKernel<T><<<1, 1, 0, stream>>>(p, sched, args);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(PairingGraphSetupKernel<T>);
  const cudaError_t e = cudaGraphLaunch(g->exec, stream);
  if (e != cudaSuccess) {
    g->failed = true;
    cudaGetLastError();
    std::fprintf(stderr, "fresnel unwrap: cudaGraphLaunch failed (%s); using separate launches\n",
                 cudaGetErrorString(e));
    return fresnel::cuda::ToStatus(e, "cudaGraphLaunch");
  }
  return absl::OkStatus();
}

template <class T>
absl::Status LaunchPairingRounds(const Params<T>& p, const Schedule& sched, cudaStream_t stream,
                                 unsigned blocks) {
  for (int ri = 0; ri < sched.num_radii; ++ri) {
    for (int it = 0; it < sched.iterations; ++it) {
      const int step = ri * sched.iterations + it;
      const int prev = it > 0 ? step - 1 : -1;
      ProposeKernel<T><<<blocks, 256, 0, stream>>>(p, sched.radii[ri], step, prev);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ProposeKernel<T>);
      AcceptKernel<T><<<blocks, 256, 0, stream>>>(p, sched.radii[ri], step, prev);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(AcceptKernel<T>);
    }
  }
  ForceToFrameKernel<T><<<blocks, 256, 0, stream>>>(p, sched.radii[sched.num_radii - 1]);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ForceToFrameKernel<T>);
  return absl::OkStatus();
}

template <class T>
absl::StatusOr<GoldsteinResult> Run(const Device& device, const HostArray& phase,
                                    const GoldsteinOptions& options, StageTimes* times) {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  cudaStream_t stream = StreamOf(device);
  const int rows = static_cast<int>(phase.dim(0)), cols = static_cast<int>(phase.dim(1));
  const int64_t n = phase.size();
  int sms = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.ordinal));
  const bool seeded = options.quality != nullptr || options.seed.has_value();

  StageClock clock(stream);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());

  Params<T> p{};
  p.rows = rows;
  p.cols = cols;
  p.nby = (rows + kBin - 1) / kBin;
  p.nbx = (cols + kBin - 1) / kBin;
  const int64_t bins = static_cast<int64_t>(p.nby) * p.nbx;
  p.res_capacity = static_cast<int>(n / 2 + 16);
  p.seeded = seeded;
  p.user_seed = options.seed.has_value()
                    ? static_cast<int>(options.seed->row * cols + options.seed->col)
                    : -1;
  p.return_maps = options.return_maps;

  DeviceBuffer<T> d_phase, d_out;
  DeviceBuffer<uint8_t> d_mask, d_quality, d_cut, d_island_border, d_unreached;
  DeviceBuffer<int16_t> d_charge;
  DeviceBuffer<int> d_bin_base, d_bin_count, d_bin_masked, d_res_prop, d_res_step, d_matches,
      d_island, d_island_charge, d_lab, d_lk, d_seed_k, d_row_count, d_row_offset, d_region_label,
      d_regions, d_dbg_prop;
  DeviceBuffer<uint32_t> d_res_word;
  DeviceBuffer<unsigned long long> d_res_key, d_uf, d_node_key, d_region_key, d_dbg_key;
  DeviceBuffer<Counters> d_counters;

  FRESNEL_RETURN_IF_ERROR(d_phase.Allocate(device, n));
  // Up through the pinned staging chunks (core/staged_copy.h): phase, mask and quality in one
  // pass, one chunk on the bus while the next is filled.
  std::vector<StagedPiece> up = {{d_phase.get(), phase.raw(), phase.nbytes()}};
  p.phase = d_phase.get();
  if (options.mask != nullptr) {
    FRESNEL_RETURN_IF_ERROR(d_mask.Allocate(device, n));
    up.push_back({d_mask.get(), options.mask->raw(), static_cast<size_t>(n)});
    p.mask = d_mask.get();
  }
  if (options.quality != nullptr) {
    FRESNEL_RETURN_IF_ERROR(d_quality.Allocate(device, options.quality->nbytes()));
    up.push_back({d_quality.get(), options.quality->raw(), options.quality->nbytes()});
    p.quality = d_quality.get();
    p.quality_double = options.quality->dtype() == DType::kFloat64;
  }
  FRESNEL_RETURN_IF_ERROR(StagedUpload(device.ordinal, up, stream));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());

  // Everything the kernels need, allocated up front from the stream-ordered pool.
  FRESNEL_RETURN_IF_ERROR(d_charge.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_cut.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_bin_base.Allocate(device, bins));
  FRESNEL_RETURN_IF_ERROR(d_bin_count.Allocate(device, bins));
  FRESNEL_RETURN_IF_ERROR(d_bin_masked.Allocate(device, bins));
  FRESNEL_RETURN_IF_ERROR(d_res_word.Allocate(device, p.res_capacity));
  FRESNEL_RETURN_IF_ERROR(d_res_key.Allocate(device, p.res_capacity));
  FRESNEL_RETURN_IF_ERROR(d_res_prop.Allocate(device, p.res_capacity));
  FRESNEL_RETURN_IF_ERROR(d_res_step.Allocate(device, p.res_capacity));
  FRESNEL_RETURN_IF_ERROR(d_counters.Allocate(device, 1));
  FRESNEL_RETURN_IF_ERROR(d_matches.Allocate(device, kMaxRadii * 64));
  FRESNEL_RETURN_IF_ERROR(d_lab.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_lk.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_uf.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_row_count.Allocate(device, rows));
  FRESNEL_RETURN_IF_ERROR(d_row_offset.Allocate(device, rows));
  FRESNEL_RETURN_IF_ERROR(d_region_label.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_out.Allocate(device, n));
  if (options.mask != nullptr) {
    FRESNEL_RETURN_IF_ERROR(d_island.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(d_island_charge.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(d_island_border.Allocate(device, n));
    p.island = d_island.get();
    p.island_charge = d_island_charge.get();
    p.island_border = d_island_border.get();
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(p.island_charge, 0, n * sizeof(int), stream));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.island_border, 0, n, stream));
  }
  if (seeded) {
    FRESNEL_RETURN_IF_ERROR(d_node_key.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(d_region_key.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(d_seed_k.Allocate(device, n));
    p.node_key = d_node_key.get();
    p.region_key = d_region_key.get();
    p.seed_k = d_seed_k.get();
  }
  if (options.return_maps) {
    FRESNEL_RETURN_IF_ERROR(d_regions.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(d_unreached.Allocate(device, n));
    p.regions_out = d_regions.get();
    p.unreached_out = d_unreached.get();
  }
  p.charge = d_charge.get();
  p.cut = d_cut.get();
  p.bin_base = d_bin_base.get();
  p.bin_count = d_bin_count.get();
  p.bin_masked = d_bin_masked.get();
  p.res_word = d_res_word.get();
  p.res_key = d_res_key.get();
  p.res_prop = d_res_prop.get();
  p.res_step = d_res_step.get();
  p.counters = d_counters.get();
  p.matches = d_matches.get();
  p.lab = d_lab.get();
  p.lk = d_lk.get();
  p.uf = d_uf.get();
  p.row_count = d_row_count.get();
  p.row_offset = d_row_offset.get();
  p.region_label = d_region_label.get();
  p.out = d_out.get();

  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.counters, 0, sizeof(Counters), stream));
  InitCountersKernel<<<1, 1, 0, stream>>>(p.counters);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(InitCountersKernel);
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(p.matches, 0, kMaxRadii * 64 * sizeof(int), stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.cut, 0, n, stream));
  // Step tags start at -1 (no proposal yet), so that pool memory left over from an earlier call
  // can never pass the check in AcceptOne.
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(p.res_step, 0xff, static_cast<size_t>(p.res_capacity) * sizeof(int), stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.row_count, 0, rows * sizeof(int), stream));

  // Stage 1: residues.
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kResidues, 0.0));
  ResidueKernel<T><<<dim3(p.nbx, p.nby), dim3(kBin, kBin), 0, stream>>>(p);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ResidueKernel<T>);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_RETURN_IF_ERROR(SyncAndReport(options, stream, Stage::kBranchCuts, 0.0));

  // Stage 2: masked islands, pairing rounds, cut lines.
  const unsigned pixel_blocks = StrideBlocks(n, sms);
  if (options.mask != nullptr) {
    IslandInitKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(IslandInitKernel<T>);
    IslandUnionKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(IslandUnionKernel<T>);
    IslandFlattenKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(IslandFlattenKernel<T>);
  }
  const std::vector<int> radii = RadiusSchedule(rows, cols);
  Schedule sched{};
  sched.num_radii = static_cast<int>(radii.size());
  sched.iterations = options.iterations_per_radius;
  sched.fence = options.cuda.cooperative_fences ? 1 : 0;
  if (sched.num_radii > kMaxRadii) return absl::InternalError("radius schedule too long");
  std::copy(radii.begin(), radii.end(), sched.radii);
  const int64_t slots = static_cast<int64_t>(sched.num_radii) * sched.iterations * p.res_capacity;
  if (DumpPath() != nullptr && slots * 12 <= (int64_t{2} << 30)) {
    // Diagnostics only (small images): every proposal of every step, 0 = none.
    FRESNEL_RETURN_IF_ERROR(d_dbg_key.Allocate(device, slots));
    FRESNEL_RETURN_IF_ERROR(d_dbg_prop.Allocate(device, slots));
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(d_dbg_key.get(), 0, slots * sizeof(unsigned long long), stream));
    p.dbg_key = d_dbg_key.get();
    p.dbg_prop = d_dbg_prop.get();
  }
  PairingInitKernel<T><<<1, 1, 0, stream>>>(p);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(PairingInitKernel<T>);
  PairingMode mode = options.cuda.pairing;
  if (mode == PairingMode::kCooperative) {
    int cooperative = 0;
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device.ordinal));
    int per_sm = 0;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, PairingCooperativeKernel<T>, 256, 0));
    if (cooperative != 0 && per_sm > 0) {
      // Four resident blocks per SM: enough warps for the proposals, and a cheaper grid barrier
      // than a full device.
      const unsigned blocks = static_cast<unsigned>(sms) * std::min(per_sm, 4);
      void* args[] = {&p, &sched};
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaLaunchCooperativeKernel(
          reinterpret_cast<void*>(PairingCooperativeKernel<T>), dim3(blocks), dim3(256), args, 0,
          stream));
    } else {
      mode = PairingMode::kLaunches;
    }
  }
  const unsigned pairing_blocks = static_cast<unsigned>(sms) * 4;
  if (mode == PairingMode::kGraph &&
      !LaunchPairingGraph(p, sched, device.ordinal, stream, pairing_blocks).ok()) {
    mode = PairingMode::kLaunches;  // graph API unavailable or failed: nothing was enqueued
  }
  if (mode == PairingMode::kLaunches) {
    FRESNEL_RETURN_IF_ERROR(LaunchPairingRounds(p, sched, stream, pairing_blocks));
  }
  FRESNEL_RETURN_IF_ERROR(DumpPairing(p, bins, sched, stream));
  DrawResidueCutsKernel<T><<<static_cast<unsigned>(sms) * 8, 256, 0, stream>>>(p);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(DrawResidueCutsKernel<T>);
  if (options.mask != nullptr) {
    IslandPlaquetteChargeKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(IslandPlaquetteChargeKernel<T>);
    IslandCutsKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(IslandCutsKernel<T>);
  }
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_RETURN_IF_ERROR(SyncAndReport(options, stream, Stage::kIntegrate, 0.0));

  // Stage 3: tiles, tile graph, labels, output.
  const int tiles_y = (rows + kTile - 1) / kTile, tiles_x = (cols + kTile - 1) / kTile;
  if (options.cuda.tile_scan) {
    TileIntegrateScanKernel<T><<<dim3(tiles_x, tiles_y), dim3(32, 8), 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TileIntegrateScanKernel<T>);
  } else {
    TileIntegrateKernel<T><<<dim3(tiles_x, tiles_y), dim3(32, 8), 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TileIntegrateKernel<T>);
  }
  const int64_t segments =
      static_cast<int64_t>(tiles_y) * (tiles_x - 1) + static_cast<int64_t>(tiles_y - 1) * tiles_x;
  if (segments > 0) {
    TileUnionKernel<T><<<StrideBlocks(segments, sms), 256, 0, stream>>>(p, tiles_y, tiles_x);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TileUnionKernel<T>);
  }
  ResolveKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ResolveKernel<T>);
  if (seeded) {
    SeedReduceKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(SeedReduceKernel<T>);
    SeedOffsetKernel<T><<<pixel_blocks, 256, 0, stream>>>(p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(SeedOffsetKernel<T>);
  }
  RowScanKernel<<<1, 1024, 0, stream>>>(p.row_count, p.row_offset, rows);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RowScanKernel);
  LabelRootsKernel<T><<<BlocksFor(static_cast<int64_t>(rows) * 32, 256), 256, 0, stream>>>(p);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(LabelRootsKernel<T>);
  FinalKernel<T><<<dim3((cols + 31) / 32, (rows + 7) / 8), dim3(32, 8), 0, stream>>>(p);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FinalKernel<T>);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());

  // Downloads.
  GoldsteinResult result;
  Counters c{};
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&c, p.counters, sizeof(Counters), cudaMemcpyDeviceToHost, stream));
  // The results are written in full by the download: no zero fill first (their pages are
  // faulted in by the copy-out threads). All of them go down through one pair of pinned chunks,
  // one chunk's DMA overlapping the previous one's copy-out, across arrays too.
  // The caller's buffers (options.into, e.g. its shared-memory region) take the downloads
  // directly.
  ResultBuffers* into = options.into;
  const auto fresh = [&](HostArray ResultBuffers::*buffer, DType dtype) {
    return internal::ResultArray(into != nullptr ? &(into->*buffer) : nullptr, dtype,
                                 phase.shape());
  };
  result.unwrapped = fresh(&ResultBuffers::unwrapped, phase.dtype());
  std::vector<StagedPiece> down = {{result.unwrapped.raw(), p.out, n * sizeof(T)}};
  if (options.return_maps) {
    result.residues = fresh(&ResultBuffers::residues, DType::kInt16);
    result.cuts = fresh(&ResultBuffers::cuts, DType::kUint8);
    result.regions = fresh(&ResultBuffers::regions, DType::kInt32);
    result.unreached = fresh(&ResultBuffers::unreached, DType::kUint8);
    down.push_back({result.residues.raw(), p.charge, n * sizeof(int16_t)});
    down.push_back({result.cuts.raw(), p.cut, static_cast<size_t>(n)});
    down.push_back({result.regions.raw(), p.regions_out, n * sizeof(int)});
    down.push_back({result.unreached.raw(), p.unreached_out, static_cast<size_t>(n)});
  }
  // Synchronises the stream (the counters above included).
  FRESNEL_RETURN_IF_ERROR(StagedDownload(device.ordinal, down, stream));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  if (c.overflow != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("phase has more than ", p.res_capacity,
                     " residues (half the pixels): use least-squares unwrapping"));
  }
  if (c.bad_phase != INT_MAX) return BadPhaseValue(phase, c.bad_phase);
  if (c.bad_quality != INT_MAX) return BadQualityValue(*options.quality, c.bad_quality);
  if (c.stale != 0) {
    return absl::InternalError(absl::StrCat(
        "unwrap: pairing read ", c.stale,
        " proposals that were not written in the current round (GPU memory-ordering fault; the "
        "pairing would differ from the CPU reference)"));
  }
  if (c.inconsistent != 0) {
    return absl::InternalError("unwrap: tile graph found an inconsistent loop (clamped charges: " +
                               std::to_string(c.clamped) + ")");
  }
  GoldsteinStats& s = result.stats;
  s.positive_residues = static_cast<int64_t>(c.positive);
  s.negative_residues = static_cast<int64_t>(c.negative);
  s.residue_pairs = static_cast<int64_t>(c.residue_pairs);
  s.border_cuts = static_cast<int64_t>(c.border_cuts);
  s.mask_cuts = static_cast<int64_t>(c.mask_cuts);
  s.island_cuts = static_cast<int64_t>(c.island_cuts);
  s.cut_pixels = static_cast<int64_t>(c.cut_pixels);
  s.cut_length = static_cast<int64_t>(c.cut_length);
  s.regions = static_cast<int64_t>(c.regions);
  s.unreached_pixels = static_cast<int64_t>(c.unreached);
  s.masked_pixels = static_cast<int64_t>(c.masked);
  s.pairing_radius = c.pairing_radius;
  result.stage_times.residues_s = clock.Seconds(1);
  result.stage_times.branch_cuts_s = clock.Seconds(2);
  result.stage_times.integrate_s = clock.Seconds(3);
  if (times != nullptr) {
    times->h2d_s = clock.Seconds(0);
    times->compute_s = clock.Seconds(1) + clock.Seconds(2) + clock.Seconds(3);
    times->d2h_s = clock.Seconds(4);
  }
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kDone, 1.0));
  return result;
}

}  // namespace

absl::StatusOr<GoldsteinResult> UnwrapGoldsteinCuda(const Device& device, const HostArray& phase,
                                                    const GoldsteinOptions& options,
                                                    StageTimes* times) {
  if (phase.dtype() == DType::kFloat32) return Run<float>(device, phase, options, times);
  return Run<double>(device, phase, options, times);
}

}  // namespace fresnel::unwrap::internal
