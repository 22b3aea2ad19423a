// The CUDA back end of the window primitive: kernel selection, launch, and the host-level call
// (H2D, kernel, D2H on the Device's stream, memory from its pool, stages timed with events).
#include <cuda_runtime.h>

#include <algorithm>
#include <complex>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "interp/interp_internal.h"
#include "interp/interp_kernels.cuh"
#include "interp/occupancy_cuda.cuh"
#include "interp/phase_groups.h"
#include "interp/tensor_tf32.h"
#include "interp/transfer_cuda.cuh"

namespace fresnel::interp::internal {
namespace {

namespace k = ::fresnel::interp::kernels;

// ---- The kernel selector ----------------------------------------------------------------------
//
// It looks only at (up, down, taps per phase P, dtype), never at signal sizes: one filter always
// runs one kernel, so streamed chunks reproduce the one-shot result bit for bit. The measurements
// behind each rule are in docs/bench/interp.md (H200, 2026-11-30).
//
// 1. kRegisterBlocked when float32, down == 1, up in {1, 2, 3, 4, 8} and P <= 32: the
//    upsampling (and plain FIR) fast path. Taps are FFMA operands from the constant bank and
//    inputs slide through registers, so there is no shared-memory load per FMA; kSmemTile needs
//    two (tap and input) and is bound by shared-memory bandwidth. Measured on float32 with
//    P = 16: 1.9x, 3.0x, 4.2x, 5.0x and 8.0x faster than kSmemTile for up = 1, 2, 3, 4, 8.
//    Each (up, P bucket 8/16/32) pair is one instantiation per store variant; other up values,
//    down > 1 and float64/complex64 take kSmemTile. The default store variant is kBulk (per-warp
//    cp.async.bulk stores of the staged outputs): 82% of copy bandwidth on case (a) against 75%
//    for the block-wide synchronous stores (kBlock) in the same run.
// 2. kPhaseGroups for every other float32 filter whose band table and tile fit in shared memory
//    with all 8 warps of a block busy (phase_groups.h): rational resampling and long filters.
//    kSmemTile needs two shared-memory loads per FMA (tap and input, different per output);
//    kPhaseGroups one broadcast tap load per V = 4 FMAs and, per lane, one input load per V
//    FMAs (R = 2 or 8 periods per lane). Measured on the H200: docs/bench/interp.md, cases (b)
//    and the long-filter rows.
// 3. kSmemTile when P < kWarpMinTapsPerPhase and the U*P taps fit in shared memory (48 KiB with
//    the tile's input span, or alone when the span goes to global memory): the general path
//    (float64, complex64, complex128, and float32 filters kPhaseGroups cannot tile).
// 4. kWarpPerOutput otherwise. Measured with up/down = 3/2 on 2^22 float32 samples, one warp
//    per output lost to kSmemTile by 20x at P = 8, 4.3x at P = 64 and 1.6x at P = 256, tied at
//    P = 1024 (3.18 vs 3.20 ms) and won by 12% at P = 2048 (5.66 vs 6.42 ms): a thread that
//    loops over thousands of taps per output leaves too little independent work per SM, while
//    the warp splits them 32 ways. It also runs filters whose tap table does not fit in shared
//    memory.
// 1b. kTensorTf32 (the filter bank as a 3xTF32 tensor-core GEMM, tensor_tf32.h) ahead of
//    kPhaseGroups for float32 filters with P >= kTensorMinTapsPerPhase that it supports.
//    Session 7 measured it 1.06x to 1.8x faster than kPhaseGroups on long filters, but with
//    the whole band in the tensor cores' accumulators its error grew with the band (2.4e-6 at
//    P = 342, 1.4e-5 at P = 2048, against ~3e-7 for FFMA), so it was opt-in. Summed in chunks
//    of kTensorTf32DefaultChunk k-steps (FADD between chunks) it measured 2.1-2.8e-7 at every P
//    from 64 to 2048 (FFMA: 1.5-8.1e-7) and was faster than kPhaseGroups at each (H200,
//    2026-12-02: 1.08x at P = 64 and 128, 1.18x at 342, 1.75x at 1024, 1.56x at 2048); the
//    table by chunk size: docs/interp.md, kTensorTf32.
constexpr int64_t kTensorMinTapsPerPhase = 64;
constexpr int kRbMaxTapsPerPhase = 32;
constexpr int64_t kWarpMinTapsPerPhase = 1024;
// kSmemTile's dynamic shared memory stays within the default 48 KiB per block (taps first, then
// the input span when it fits; otherwise each output reads its inputs from global memory, as for
// heavy decimation where the span is ~1024*down/up samples).
constexpr int64_t kMaxSmemBytes = 48 * 1024;

bool RbSupportsUp(int up) { return up == 1 || up == 2 || up == 3 || up == 4 || up == 8; }

int64_t TileSpan(int up, int down, int64_t p) {
  return (static_cast<int64_t>(up) - 1 + static_cast<int64_t>(k::kTileOutputs - 1) * down) / up +
         p;
}

bool DoubleTaps(DType dtype) { return dtype == DType::kFloat64 || dtype == DType::kComplex128; }
size_t TapSize(DType dtype) { return DoubleTaps(dtype) ? sizeof(double) : sizeof(float); }

int64_t AlignUp16(int64_t v) { return (v + 15) / 16 * 16; }

template <class T>
T DeviceValue(double v);
template <>
float DeviceValue<float>(double v) { return static_cast<float>(v); }
template <>
double DeviceValue<double>(double v) { return v; }
template <>
float2 DeviceValue<float2>(double v) { return make_float2(static_cast<float>(v), 0.f); }
template <>
double2 DeviceValue<double2>(double v) { return make_double2(v, 0.0); }

// ---- kRegisterBlocked store variants ----------------------------------------------------------
//
// The default is kDefaultRbStore (docs/bench/interp.md has the measurements). For diagnosis and
// the benchmark, CudaPlanOptions::rb_store picks another store path and rb_max_blocks_per_sm
// caps the resident blocks per SM. Every variant computes the same bits (shared compute code;
// only the store path differs).
constexpr k::RbStore kDefaultRbStore = k::RbStore::kBulk;

constexpr struct {
  const char* name;
  k::RbStore store;
} kRbStoreNames[] = {
    {"block", k::RbStore::kBlock}, {"block_cs", k::RbStore::kBlockCs},
    {"warp", k::RbStore::kWarp},   {"warp_cs", k::RbStore::kWarpCs},
    {"bulk", k::RbStore::kBulk},   {"bulk_cs", k::RbStore::kBulkCs},
    {"direct", k::RbStore::kDirect},
};

struct RbConfig {
  k::RbStore store = kDefaultRbStore;
  int max_blocks_per_sm = 0;  // 0: as many as fit
};

absl::StatusOr<RbConfig> RbConfigFrom(const CudaPlanOptions& options) {
  RbConfig cfg;
  cfg.max_blocks_per_sm = options.rb_max_blocks_per_sm;
  bool found = options.rb_store.empty();
  for (const auto& e : kRbStoreNames) {
    if (options.rb_store == e.name) {
      cfg.store = e.store;
      found = true;
    }
  }
  if (!found || cfg.max_blocks_per_sm < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rb_store \"", options.rb_store, "\" / rb_max_blocks_per_sm ",
                     options.rb_max_blocks_per_sm,
                     ": expected block|block_cs|warp|warp_cs|bulk|bulk_cs|direct and a cap >= 0"));
  }
  return cfg;
}

// Calls f(integral_constant<U>, integral_constant<kP>) for the instantiation serving (up, p).
template <class F>
absl::Status WithRb(int up, int64_t p, F&& f) {
  auto with_p = [&](auto u) -> absl::Status {
    if (p <= 8) return f(u, std::integral_constant<int, 8>{});
    if (p <= 16) return f(u, std::integral_constant<int, 16>{});
    return f(u, std::integral_constant<int, 32>{});
  };
  switch (up) {
    case 1: return with_p(std::integral_constant<int, 1>{});
    case 2: return with_p(std::integral_constant<int, 2>{});
    case 3: return with_p(std::integral_constant<int, 3>{});
    case 4: return with_p(std::integral_constant<int, 4>{});
    case 8: return with_p(std::integral_constant<int, 8>{});
    default: return absl::InternalError("register_blocked: unsupported up");
  }
}

template <int U, int kP>
using RbKernelFn = void (*)(const float*, int64_t, int64_t, int64_t, float, float*, int64_t,
                            int64_t, int64_t, int64_t, int64_t, int64_t, const k::RbTaps<U, kP>);

template <int U, int kP>
RbKernelFn<U, kP> RbKernelFor(k::RbStore m) {
  switch (k::RbEffective<U, kP>(m)) {
    case k::RbStore::kBlock: return k::RegisterBlockedKernel<U, kP, k::RbStore::kBlock>;
    case k::RbStore::kBlockCs: return k::RegisterBlockedKernel<U, kP, k::RbStore::kBlockCs>;
    case k::RbStore::kWarp: return k::RegisterBlockedKernel<U, kP, k::RbStore::kWarp>;
    case k::RbStore::kWarpCs: return k::RegisterBlockedKernel<U, kP, k::RbStore::kWarpCs>;
    case k::RbStore::kBulk:
      if constexpr (k::RbEffective<U, kP>(k::RbStore::kBulk) == k::RbStore::kBulk) {
        return k::RegisterBlockedKernel<U, kP, k::RbStore::kBulk>;
      }
      break;
    case k::RbStore::kBulkCs:
      if constexpr (k::RbEffective<U, kP>(k::RbStore::kBulkCs) == k::RbStore::kBulkCs) {
        return k::RegisterBlockedKernel<U, kP, k::RbStore::kBulkCs>;
      }
      break;
    case k::RbStore::kDirect: return k::RegisterBlockedKernel<U, kP, k::RbStore::kDirect>;
  }
  return k::RegisterBlockedKernel<U, kP, k::RbStore::kWarp>;
}

// ---- Benchmark probes -------------------------------------------------------------------------
//
// Plain kernels that only move bytes, for the ceilings fresnel_bench_interp prints next to case
// (a) (declared again there: the benchmark is the only caller).
__global__ void __launch_bounds__(256) ProbeWriteKernel(float4* __restrict__ y, float v) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * 1024 + threadIdx.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) y[base + j * 256] = make_float4(v, v + 1.f, v + 2.f, v + 3.f);
}
// Reads one float4 and writes four per thread: case (a)'s 1 : 4 traffic without the arithmetic.
template <bool kCs>
__global__ void __launch_bounds__(256)
    ProbeUpKernel(const float4* __restrict__ x, float4* __restrict__ y) {
  const float4 a = x[static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * 1024 + threadIdx.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float s = static_cast<float>(j + 1);
    const float4 o = make_float4(a.x * s, a.y * s, a.z * s, a.w * s);
    if constexpr (kCs) {
      __stcs(y + base + j * 256, o);
    } else {
      y[base + j * 256] = o;
    }
  }
}


// Allocates `dev` from the device's pool and enqueues the copy of `host` into it on stream.
template <class T>
absl::Status UploadAsync(const Device& device, const std::vector<T>& host,
                         cuda::DeviceBuffer<T>& dev, cudaStream_t stream) {
  FRESNEL_RETURN_IF_ERROR(dev.Allocate(device, static_cast<int64_t>(host.size())));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.get(), host.data(), host.size() * sizeof(T),
                                               cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

// CudaPlanOptions' kPhaseGroups fields as the planner's choice (each 0, 1 or 2; R 0, 1, 2, 4 or
// 8).
absl::StatusOr<PhaseGroupsChoice> PhaseGroupsChoiceFrom(const CudaPlanOptions& options) {
  const struct {
    const char* name;
    int value;
  } switches[] = {{"pg_widen", options.pg_widen},       {"pg_layout", options.pg_layout},
                  {"pg_rotate", options.pg_rotate},     {"pg_row_blocks", options.pg_row_blocks},
                  {"pg_prefetch", options.pg_prefetch}};
  for (const auto& sw : switches) {
    if (sw.value < 0 || sw.value > 2) {
      return absl::InvalidArgumentError(absl::StrCat(sw.name, ": 0, 1 or 2"));
    }
  }
  if (options.pg_stage < 0 || options.pg_stage > 3) {
    return absl::InvalidArgumentError("pg_stage: 0, 1, 2 or 3");
  }
  if (options.pg_tail < 0 || options.pg_tail > 3) {
    return absl::InvalidArgumentError("pg_tail: 0, 1, 2 or 3");
  }
  if (options.pg_bulk_in < 0 || options.pg_bulk_in > 2) {
    return absl::InvalidArgumentError("pg_bulk_in: 0, 1 or 2");
  }
  if (options.pg_max_blocks < 0) {
    return absl::InvalidArgumentError("pg_max_blocks: 0 (as many as fit) or more");
  }
  const int r = options.pg_periods_per_lane;
  if (r != 0 && r != 1 && r != 2 && r != 4 && r != 8) {
    return absl::InvalidArgumentError("pg_periods_per_lane: 0, 1, 2, 4 or 8");
  }
  PhaseGroupsChoice choice;
  choice.widen = options.pg_widen;
  choice.layout = options.pg_layout;
  choice.periods_per_lane = r;
  choice.rotate = options.pg_rotate;
  choice.row_blocks = options.pg_row_blocks;
  choice.prefetch = options.pg_prefetch;
  choice.stage = options.pg_stage;
  choice.tail = options.pg_tail;
  choice.bulk_in = options.pg_bulk_in;
  choice.max_blocks = options.pg_max_blocks;
  return choice;
}

}  // namespace

const char* CudaKernelName(CudaKernel kernel) {
  switch (kernel) {
    case CudaKernel::kAuto: return "auto";
    case CudaKernel::kRegisterBlocked: return "register_blocked";
    case CudaKernel::kSmemTile: return "smem_tile";
    case CudaKernel::kWarpPerOutput: return "warp_per_output";
    case CudaKernel::kPhaseGroups: return "phase_groups";
    case CudaKernel::kTensorTf32: return "tensor_tf32";
  }
  return "unknown";
}

bool CudaPolyphase::Supports(CudaKernel kernel, int up, int down, int64_t p, DType dtype) {
  switch (kernel) {
    case CudaKernel::kAuto:
    case CudaKernel::kWarpPerOutput:
      return true;
    case CudaKernel::kRegisterBlocked:
      return dtype == DType::kFloat32 && down == 1 && RbSupportsUp(up) &&
             p <= kRbMaxTapsPerPhase;
    case CudaKernel::kSmemTile:
      return AlignUp16(static_cast<int64_t>(up) * p * static_cast<int64_t>(TapSize(dtype))) <=
             kMaxSmemBytes;
    case CudaKernel::kPhaseGroups:
      return dtype == DType::kFloat32 && PlanPhaseGroups(up, down, p, {}).ok();
    case CudaKernel::kTensorTf32:
      return dtype == DType::kFloat32 && PlanTensorTf32(up, down, p, {}).ok();
  }
  return false;
}

CudaKernel CudaPolyphase::Select(int up, int down, int64_t p, DType dtype) {
  if (Supports(CudaKernel::kRegisterBlocked, up, down, p, dtype)) {
    return CudaKernel::kRegisterBlocked;
  }
  if (p >= kTensorMinTapsPerPhase && Supports(CudaKernel::kTensorTf32, up, down, p, dtype)) {
    return CudaKernel::kTensorTf32;
  }
  if (Supports(CudaKernel::kPhaseGroups, up, down, p, dtype)) return CudaKernel::kPhaseGroups;
  if (p < kWarpMinTapsPerPhase && Supports(CudaKernel::kSmemTile, up, down, p, dtype)) {
    return CudaKernel::kSmemTile;
  }
  return CudaKernel::kWarpPerOutput;
}

struct CudaPolyphase::Impl {
  CudaKernel kernel = CudaKernel::kAuto;
  int up = 1, down = 1;
  int64_t p = 1;
  DType dtype = DType::kFloat32;
  int ordinal = 0;
  int sm_count = 1;
  std::vector<float> htf_f;   // phase-major taps as float (float32 and complex64 signals)
  std::vector<double> htf_d;  // as double (float64 and complex128 signals)
  cuda::DeviceBuffer<float> taps_f;
  cuda::DeviceBuffer<double> taps_d;
  RbConfig rb;              // kRegisterBlocked: store variant, blocks-per-SM cap
  int rb_blocks_per_sm = 1;  // resident blocks of the selected instantiation
  PhaseGroupsPlan pg;        // kPhaseGroups: geometry and band table (uploaded to pg_table)
  cuda::DeviceBuffer<float> pg_table;
  int pg_blocks_per_sm = 1;
  TensorTf32Plan tc;  // kTensorTf32: geometry and B fragments (uploaded to tc_table)
  cuda::DeviceBuffer<float> tc_table;
  int tc_blocks_per_sm = 1;

  template <class T>
  absl::Status LaunchTyped(cudaStream_t stream, const DeviceSignal& s) const;
  template <int U, int kP>
  absl::Status PrepareRb();
  template <int U, int kP>
  absl::Status LaunchRb(cudaStream_t stream, const DeviceSignal& s) const;
};

CudaPolyphase::CudaPolyphase(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaPolyphase::CudaPolyphase(CudaPolyphase&&) noexcept = default;
CudaPolyphase& CudaPolyphase::operator=(CudaPolyphase&&) noexcept = default;
CudaPolyphase::~CudaPolyphase() = default;
CudaKernel CudaPolyphase::kernel() const { return impl_->kernel; }

absl::StatusOr<CudaPolyphase> CudaPolyphase::Create(const Device& device, const Polyphase& filter,
                                                    DType dtype, CudaKernel kernel) {
  CudaPlanOptions options;
  options.kernel = kernel;
  return Create(device, filter, dtype, options);
}

absl::StatusOr<CudaPolyphase> CudaPolyphase::Create(const Device& device, const Polyphase& filter,
                                                    DType dtype, const CudaPlanOptions& options) {
  CudaKernel kernel = options.kernel;
  if (device.kind != DeviceKind::kCuda) {
    return absl::InvalidArgumentError("CudaPolyphase needs a CUDA device");
  }
  if (device.stream == nullptr) {
    return absl::InvalidArgumentError(
        "device.stream is null: interp never enqueues on the legacy default stream");
  }
  FRESNEL_RETURN_IF_ERROR(ValidateDType(dtype));
  auto impl = std::make_unique<Impl>();
  impl->up = filter.up;
  impl->down = filter.down;
  impl->p = filter.TapsPerPhase();
  impl->dtype = dtype;
  impl->ordinal = device.ordinal;
  if (impl->p > (int64_t{1} << 30) || static_cast<int64_t>(filter.up) * impl->p > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError("taps: filter too long for the CUDA kernels");
  }
  if (kernel == CudaKernel::kAuto) {
    kernel = Select(filter.up, filter.down, impl->p, dtype);
  } else if (!Supports(kernel, filter.up, filter.down, impl->p, dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("kernel ", CudaKernelName(kernel),
                                                   " cannot run up=", filter.up,
                                                   " down=", filter.down, " P=", impl->p, " ",
                                                   DTypeName(dtype)));
  }
  impl->kernel = kernel;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, device.ordinal));
  if (kernel == CudaKernel::kRegisterBlocked) {
    FRESNEL_ASSIGN_OR_RETURN(impl->rb, RbConfigFrom(options));
    Impl* im = impl.get();
    FRESNEL_RETURN_IF_ERROR(WithRb(filter.up, impl->p, [im](auto u, auto kp) {
      return im->PrepareRb<decltype(u)::value, decltype(kp)::value>();
    }));
  }
  std::vector<double> htf = filter.PhaseMajorTaps();
  cudaStream_t stream = cuda::StreamOf(device);
  if (DoubleTaps(dtype)) {
    impl->htf_d = std::move(htf);
    if (kernel != CudaKernel::kRegisterBlocked) {
      FRESNEL_RETURN_IF_ERROR(UploadAsync(device, impl->htf_d, impl->taps_d, stream));
    }
  } else {
    impl->htf_f.assign(htf.begin(), htf.end());
    if (kernel == CudaKernel::kPhaseGroups) {
      FRESNEL_ASSIGN_OR_RETURN(const PhaseGroupsChoice choice, PhaseGroupsChoiceFrom(options));
      FRESNEL_ASSIGN_OR_RETURN(
          impl->pg, PlanPhaseGroups(filter.up, filter.down, impl->p, impl->htf_f, choice));
      FRESNEL_ASSIGN_OR_RETURN(impl->pg_blocks_per_sm, PhaseGroupsOccupancy(impl->pg));
      FRESNEL_RETURN_IF_ERROR(UploadAsync(device, impl->pg.table, impl->pg_table, stream));
    } else if (kernel == CudaKernel::kTensorTf32) {
      if (options.tc_chunk_ksteps < 0) {
        return absl::InvalidArgumentError("tc_chunk_ksteps: 0 (default) or >= 1");
      }
      if (options.tc_min_blocks != 0 && options.tc_min_blocks != 1 &&
          options.tc_min_blocks != 3) {
        return absl::InvalidArgumentError("tc_min_blocks: 0, 1 or 3");
      }
      FRESNEL_ASSIGN_OR_RETURN(impl->tc,
                               PlanTensorTf32(filter.up, filter.down, impl->p, impl->htf_f));
      if (options.tc_chunk_ksteps > 0) impl->tc.chunk_ksteps = options.tc_chunk_ksteps;
      if (options.tc_min_blocks > 0) impl->tc.min_blocks = options.tc_min_blocks;
      FRESNEL_ASSIGN_OR_RETURN(impl->tc_blocks_per_sm, TensorTf32Occupancy(impl->tc));
      FRESNEL_RETURN_IF_ERROR(UploadAsync(device, impl->tc.table, impl->tc_table, stream));
    } else if (kernel != CudaKernel::kRegisterBlocked) {
      FRESNEL_RETURN_IF_ERROR(UploadAsync(device, impl->htf_f, impl->taps_f, stream));
    }
  }
  return CudaPolyphase(std::move(impl));
}

// Shared-memory opt-in and occupancy of the selected instantiation, once per plan.
template <int U, int kP>
absl::Status CudaPolyphase::Impl::PrepareRb() {
  const k::RbStore store = k::RbEffective<U, kP>(rb.store);
  auto kernel_fn = RbKernelFor<U, kP>(store);
  FRESNEL_ASSIGN_OR_RETURN(
      int per_sm, ResidentBlocksPerSm(kernel_fn, k::kRbThreads, k::RbSmemBytes<U, kP>(store)));
  if (rb.max_blocks_per_sm > 0) per_sm = std::min(per_sm, rb.max_blocks_per_sm);
  rb_blocks_per_sm = per_sm;
  return absl::OkStatus();
}

template <int U, int kP>
absl::Status CudaPolyphase::Impl::LaunchRb(cudaStream_t stream, const DeviceSignal& s) const {
  using S = k::RbShape<U, kP>;
  k::RbTaps<U, kP> taps{};
  for (int t = 0; t < U; ++t) {
    for (int m = 0; m < p; ++m) taps.h[t * kP + m] = htf_f[t * p + m];
  }
  // Tiles are aligned to multiples of kTile in absolute output index.
  const int64_t tile_first = s.out_first / S::kTile;
  const int64_t tile_last = (s.out_first + s.out_count - 1) / S::kTile;
  const int64_t tiles = tile_last - tile_first + 1;
  // Persistent blocks: as many as are resident at once, each looping over tiles.
  const k::RbStore store = k::RbEffective<U, kP>(rb.store);
  auto kernel_fn = RbKernelFor<U, kP>(store);
  const int smem = k::RbSmemBytes<U, kP>(store);
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(s.channels * tiles, static_cast<int64_t>(sm_count) * rb_blocks_per_sm));
  kernel_fn<<<static_cast<unsigned>(blocks), k::kRbThreads, static_cast<size_t>(smem), stream>>>(
      static_cast<const float*>(s.x), s.x_stride, s.x_first, s.x_len,
      static_cast<float>(s.cval), static_cast<float*>(s.y), s.y_stride, s.out_first,
      s.out_count, s.channels, tile_first, tiles, taps);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(kernel_fn);
  return absl::OkStatus();
}

template <class T>
absl::Status CudaPolyphase::Impl::LaunchTyped(cudaStream_t stream, const DeviceSignal& s) const {
  using Tap = typename k::Traits<T>::Tap;
  const Tap* taps;
  if constexpr (std::is_same_v<Tap, double>) {
    taps = taps_d.get();
  } else {
    taps = taps_f.get();
  }
  const T* x = static_cast<const T*>(s.x);
  T* y = static_cast<T*>(s.y);
  const T cval = DeviceValue<T>(s.cval);
  const int ip = static_cast<int>(p);

  if (kernel == CudaKernel::kWarpPerOutput) {
    const int64_t groups = s.channels * ((s.out_count + 31) / 32);
    const int64_t warps_per_block = k::kWarpThreads / 32;
    const int64_t blocks = std::min<int64_t>((groups + warps_per_block - 1) / warps_per_block,
                                             static_cast<int64_t>(sm_count) * 16);
    auto kernel_fn = k::WarpPerOutputKernel<T>;
    kernel_fn<<<static_cast<unsigned>(blocks), k::kWarpThreads, 0, stream>>>(
        x, s.x_stride, s.x_first, s.x_len, cval, y, s.y_stride, s.out_first, s.out_count,
        s.channels, taps, up, down, ip);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(kernel_fn);
    return absl::OkStatus();
  }

  // kSmemTile: persistent blocks, as many as fit on the device at once.
  const int64_t taps_bytes = AlignUp16(static_cast<int64_t>(up) * p * sizeof(Tap));
  const int64_t span_bytes = TileSpan(up, down, p) * static_cast<int64_t>(sizeof(T));
  const bool smem_x = taps_bytes + span_bytes <= kMaxSmemBytes;
  const int64_t smem = taps_bytes + (smem_x ? span_bytes : 0);
  auto kernel_fn = smem_x ? k::SmemTileKernel<T, true> : k::SmemTileKernel<T, false>;
  int per_sm = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, kernel_fn, k::kTileThreads, static_cast<size_t>(smem)));
  const int64_t tiles = s.channels * ((s.out_count + k::kTileOutputs - 1) / k::kTileOutputs);
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>(tiles, static_cast<int64_t>(sm_count) *
                                                        std::max(per_sm, 1)));
  kernel_fn<<<static_cast<unsigned>(blocks), k::kTileThreads, static_cast<size_t>(smem),
              stream>>>(x, s.x_stride, s.x_first, s.x_len, cval, y, s.y_stride, s.out_first,
                        s.out_count, s.channels, taps, up, down, ip,
                        static_cast<int>(taps_bytes));
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(kernel_fn);
  return absl::OkStatus();
}

absl::Status CudaPolyphase::LaunchAsync(const Device& device, const DeviceSignal& s) const {
  if (device.kind != DeviceKind::kCuda || device.ordinal != impl_->ordinal) {
    return absl::InvalidArgumentError("CudaPolyphase launched on another device");
  }
  if (device.stream == nullptr) {
    return absl::InvalidArgumentError(
        "device.stream is null: interp never enqueues on the legacy default stream");
  }
  if (s.out_first < 0 || s.out_count < 0 || s.channels < 0 || s.x_len < 0) {
    return absl::InvalidArgumentError("DeviceSignal: negative range");
  }
  if (s.out_count == 0 || s.channels == 0) return absl::OkStatus();
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  cudaStream_t stream = cuda::StreamOf(device);
  const Impl& im = *impl_;
  if (im.kernel == CudaKernel::kPhaseGroups) {
    return LaunchPhaseGroups(im.pg, im.pg_table.get(), im.sm_count, im.pg_blocks_per_sm, stream,
                             s);
  }
  if (im.kernel == CudaKernel::kTensorTf32) {
    return LaunchTensorTf32(im.tc, im.tc_table.get(), im.sm_count, im.tc_blocks_per_sm, stream,
                            s);
  }
  if (im.kernel == CudaKernel::kRegisterBlocked) {
    return WithRb(im.up, im.p, [&](auto u, auto kp) {
      return im.LaunchRb<decltype(u)::value, decltype(kp)::value>(stream, s);
    });
  }
  switch (im.dtype) {
    case DType::kFloat32: return im.LaunchTyped<float>(stream, s);
    case DType::kFloat64: return im.LaunchTyped<double>(stream, s);
    case DType::kComplex64: return im.LaunchTyped<float2>(stream, s);
    case DType::kComplex128: return im.LaunchTyped<double2>(stream, s);
    default: return ValidateDType(im.dtype);
  }
}

absl::StatusOr<HostArray> UpfirdnWindowCuda(const Device& device, const Polyphase& filter,
                                            const HostSignalView& x, int64_t x_first,
                                            double cval, int64_t out_first, int64_t out_count,
                                            StageTimes* times, const CudaWindowOptions& options) {
  if (device.stream == nullptr) {
    return absl::InvalidArgumentError(
        "device.stream is null: interp never enqueues on the legacy default stream");
  }
  HostArray y(x.dtype, {x.channels, out_count});
  if (y.size() == 0) return y;
  FRESNEL_RETURN_IF_ERROR(UpfirdnWindowCudaInto(device, filter, x, x_first, cval, out_first,
                                                out_count, y.raw(), times, options));
  return y;
}

absl::Status UpfirdnWindowCudaInto(const Device& device, const Polyphase& filter,
                                   const HostSignalView& x, int64_t x_first, double cval,
                                   int64_t out_first, int64_t out_count, void* y_host,
                                   StageTimes* times, const CudaWindowOptions& options) {
  if (device.stream == nullptr) {
    return absl::InvalidArgumentError(
        "device.stream is null: interp never enqueues on the legacy default stream");
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  const size_t es = DTypeSize(x.dtype);
  const size_t y_bytes = static_cast<size_t>(x.channels * out_count) * es;
  if (y_bytes == 0) return absl::OkStatus();
  cudaStream_t stream = cuda::StreamOf(device);

  cuda::StageClock clock(stream);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_ASSIGN_OR_RETURN(CudaPolyphase plan,
                           CudaPolyphase::Create(device, filter, x.dtype, options.plan));
  cuda::DeviceBuffer<unsigned char> xd, yd;
  FRESNEL_RETURN_IF_ERROR(xd.Allocate(device, x.channels * x.len * static_cast<int64_t>(es)));
  FRESNEL_RETURN_IF_ERROR(yd.Allocate(device, x.channels * out_count * static_cast<int64_t>(es)));
  FRESNEL_RETURN_IF_ERROR(UploadRowsAsync(x, xd.get(), stream));
  if (options.poison_output) {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(yd.get(), 0xff, y_bytes, stream));  // NaN
  }
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  DeviceSignal s;
  s.channels = x.channels;
  s.x = xd.get();
  s.x_stride = x.len;
  s.x_first = x_first;
  s.x_len = x.len;
  s.cval = cval;
  s.y = yd.get();
  s.y_stride = out_count;
  s.out_first = out_first;
  s.out_count = out_count;
  FRESNEL_RETURN_IF_ERROR(plan.LaunchAsync(device, s));
  return FinishCall(clock, yd.get(), y_host, y_bytes, stream, times);
}

// Benchmark probe (see ProbeWriteKernel): kind 0 writes n_out floats to y; kind 1 reads n_out/4
// floats of x and writes n_out floats to y; kind 2 is kind 1 with streaming stores. n_out is a
// multiple of 4096.
absl::Status LaunchBandwidthProbe(const Device& device, int kind, const float* x, float* y,
                                  int64_t n_out) {
  if (n_out % 4096 != 0 || kind < 0 || kind > 2) {
    return absl::InvalidArgumentError("LaunchBandwidthProbe: bad kind or size");
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  cudaStream_t stream = cuda::StreamOf(device);
  const unsigned blocks = static_cast<unsigned>(n_out / 4096);
  float4* y4 = reinterpret_cast<float4*>(y);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  if (kind == 0) {
    ProbeWriteKernel<<<blocks, 256, 0, stream>>>(y4, 1.5f);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ProbeWriteKernel);
  } else if (kind == 1) {
    ProbeUpKernel<false><<<blocks, 256, 0, stream>>>(x4, y4);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ProbeUpKernel<false>);
  } else {
    ProbeUpKernel<true><<<blocks, 256, 0, stream>>>(x4, y4);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ProbeUpKernel<true>);
  }
  return absl::OkStatus();
}

}  // namespace fresnel::interp::internal
