// Internal to the interp area: the one polyphase primitive that the one-shot calls, the streaming
// resampler, the CPU and CUDA back ends and the benchmark share. Not installed; no CUDA types.
//
// The primitive. For taps h[0..L) (zero beyond L), rates up/down and a signal s defined on all
// integers, output k >= 0 of the full upfirdn is
//
//   y[k] = sum_{m=0}^{P-1} h[t + m*up] * s[q - m],   q = floor(k*down / up),  t = k*down - q*up,
//
// with P = ceil(L / up) taps per phase. That is the convolution of h with s upsampled by `up`
// (s[i] sits at position i*up, zeros between) read at positions k*down: the inserted zeros are
// never multiplied. scipy.signal.upfirdn returns y[0 .. ((n-1)*up + L - 1) / down] for a signal
// x[0..n) extended by its `mode`.
//
// A "window" gives s as x[c][0..x_len) placed at s[x_first ..], with s = cval everywhere else.
// Every entry point computes y[out_first, out_first + out_count) for each channel. One-shot calls
// pass the whole signal (or, for the extension modes, the signal materialised with its extension
// on the host); the streaming resampler passes its delay line plus the new chunk. Each back end
// sums the P products of one output in a fixed order (m ascending) that does not depend on the
// window, so chunked and one-shot results are bit-identical on the same device.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/interp/interp.h"

namespace fresnel::interp::internal {

// The filter of a full upfirdn.
struct Polyphase {
  std::vector<double> taps;  // h, length >= 1
  int up = 1;
  int down = 1;
  int64_t TapsPerPhase() const {
    return (static_cast<int64_t>(taps.size()) + up - 1) / up;
  }
  // Taps regrouped by phase: result[t * P + m] = h[t + m*up] (0 past the end), the layout every
  // back end reads.
  std::vector<double> PhaseMajorTaps() const;
};

// A read-only view of `channels` rows of `len` samples, row c starting at data + c * stride
// elements. dtype is float32, float64, complex64 or complex128.
struct HostSignalView {
  DType dtype = DType::kFloat32;
  int64_t channels = 0;
  int64_t len = 0;
  int64_t stride = 0;
  const void* data = nullptr;
};

// A [channels, n] view of a validated 1-D or 2-D array.
HostSignalView ViewOf(const HostArray& x);

// y[c][k - out_first] for k in [out_first, out_first + out_count), as a [channels, out_count]
// array of x.dtype. out_first >= 0. Synchronous on every device.
absl::StatusOr<HostArray> UpfirdnWindow(const Device& device, const Polyphase& filter,
                                        const HostSignalView& x, int64_t x_first, double cval,
                                        int64_t out_first, int64_t out_count,
                                        StageTimes* times);
absl::StatusOr<HostArray> UpfirdnWindowCpu(const Polyphase& filter, const HostSignalView& x,
                                           int64_t x_first, double cval, int64_t out_first,
                                           int64_t out_count);

// SciPy's signal extension (_upfirdn_apply.pyx _extend_left/_extend_right) of x[0..n), n >= 1:
// returns s[lo .. hi) for every channel as a [channels, hi - lo] array of x.dtype, computed in
// double. For n == 1, where SciPy divides by zero (reflect, antireflect: a crash; line: NaN) or
// reads past the end (smooth), every mode but constant and antisymmetric repeats x[0].
HostArray ExtendSignal(const HostSignalView& x, PadMode mode, double cval, int64_t lo, int64_t hi);

// scipy.signal.resample_poly's filter after gcd reduction: `filter` is h * up with n_pre_pad
// leading zeros; outputs [skip, skip + ResamplePolyOutputLength(n)) of its full upfirdn are kept.
// copy: up == down == 1 after reduction (SciPy returns x.copy()); filter is then {1}.
struct ResamplePolyDesign {
  Polyphase filter;
  int64_t skip = 0;
  bool copy = false;
};
// Options must have passed ValidateResamplePoly's option checks. The default (firwin) filter is
// rounded to float32 for float32/complex64 signals, as SciPy's `.astype(x.dtype)` does.
absl::StatusOr<ResamplePolyDesign> DesignResamplePoly(const ResamplePolyOptions& options,
                                                      DType dtype);

// Checks shared by the one-shot validators and the streaming factories.
absl::Status ValidateRate(int rate, const char* field, const Limits& limits);
absl::Status ValidateTaps(const std::vector<double>& taps, const char* field,
                          const Limits& limits);
// The dtypes the back ends compute in: float32, float64, complex64, complex128.
absl::Status ValidateDType(DType dtype);
const char* PadModeName(PadMode mode);

// ---- Shapes and dtypes of the public entry points (interp.cc) ----

bool IsComplex(DType d);
bool IsInexact(DType d);     // float or complex
bool IsDoubleLevel(DType d);  // needs float64 precision (float64, complex128, int32)
DType RealOf(DType d);
DType ComplexOf(DType d);

// What the validators read of a signal: its dtype and shape (a HostArray converts implicitly;
// UpfirdnInto's caller-owned buffers give theirs without one).
struct SignalShape {
  SignalShape(const HostArray& x) : dtype_(x.dtype()), shape_(x.shape()) {}  // NOLINT: implicit
  SignalShape(DType dtype, const std::vector<int64_t>& shape) : dtype_(dtype), shape_(shape) {}
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }

 private:
  DType dtype_;
  const std::vector<int64_t>& shape_;
};

// x has ndim >= 1, axis in [-ndim, ndim) and a known dtype (else InvalidArgument naming the
// field).
absl::Status ValidateSignal(const SignalShape& x, int axis);
absl::Status ValidateTapsDType(DType d, const char* field);
absl::Status ValidateRule(DTypeRule rule);
// ResourceExhausted when channels * per_channel exceeds limits.max_output_samples.
absl::Status CheckOutputSize(int64_t channels, int64_t per_channel, const SignalShape& x,
                             const Limits& limits);

// x seen as [channels, len] along `axis`: channels are the other dimensions in row-major order.
struct AxisGeometry {
  int axis = 0;       // normalised
  int64_t outer = 1;  // product of shape[:axis]
  int64_t len = 0;    // shape[axis]
  int64_t inner = 1;  // product of shape[axis+1:]
  int64_t channels() const { return outer * inner; }
};
AxisGeometry GeometryOf(const SignalShape& x, int axis);  // x validated

// The working signal: x itself when already contiguous [channels, n] of `dtype` (no copy),
// otherwise a converted, axis-moved copy.
struct WorkSignal {
  HostArray owned;
  HostSignalView view;
};
WorkSignal ToWork(const HostArray& x, const AxisGeometry& g, DType dtype);
// A [channels, m] result back in x's shape with m samples along the axis.
absl::StatusOr<HostArray> FromWork(HostArray y, const HostArray& x, const AxisGeometry& g);
void AddTimes(StageTimes* total, const StageTimes& t);

// ---- CUDA device-pointer entry point (used by the host-level call and the benchmark) ----

// The kernel family that computes a window (see interp_cuda.cu for the selector and the measured
// reasons behind it).
enum class CudaKernel {
  kAuto,             // the selector's choice
  kRegisterBlocked,  // float32, down == 1, up in {1,2,3,4,8}, P <= 32
  kSmemTile,         // taps + input span in shared memory, 4 outputs per thread
  kWarpPerOutput,    // one warp per output, lanes split the taps (long filters)
  kPhaseGroups,      // float32, any up/down: groups of phases share one band (phase_groups.h)
  kTensorTf32,       // float32, long filters: the filter bank as a 3xTF32 GEMM (tensor_tf32.h)
};
const char* CudaKernelName(CudaKernel kernel);

// How a CudaPolyphase plan is built: the kernel (kAuto: the selector's) and, for
// kRegisterBlocked, its store path and a cap on resident blocks per SM (diagnosis and the
// benchmark; every store path computes the same bits).
struct CudaPlanOptions {
  CudaKernel kernel = CudaKernel::kAuto;  // a forced kernel must support the filter
  // "" (the default, bulk), block, block_cs, warp, warp_cs, bulk, bulk_cs or direct.
  std::string rb_store;
  int rb_max_blocks_per_sm = 0;  // 0: as many as fit
  // kPhaseGroups (phase_groups.h, PhaseGroupsChoice): period widening, 1: never, 2: by the
  // cost model, 0: the default (2). Same bits either way.
  int pg_widen = 0;
  // kPhaseGroups input tile (phase_groups_cuda.cu): 1: de-interleaved by z mod d for every d
  // (round 1's kernel: 4-byte copies in, 4-byte stores out); 2: plain order where d is odd
  // (16-byte copies in and out), de-interleaved otherwise; 0: the default (2). Same bits.
  int pg_layout = 0;
  // kPhaseGroups periods per lane R: 1, 2, 4 (plain tile, V = 4) or 8; 0: the default (8 for
  // >= 48 taps per phase, else 2). Same bits. A forced R is FailedPrecondition where its tile
  // does not fit.
  int pg_periods_per_lane = 0;
  // kPhaseGroups period rotation (plain tile, u % 4 == 0; PhaseGroupsChoice::rotate): 1: off;
  // 2: the launch rotates the period so that tiles start 16-byte aligned in y (16-byte stores
  // out); 0: the default (2). Same bits.
  int pg_rotate = 0;
  // kPhaseGroups de-interleaved band loop for d in {2, 4, 8} (PhaseGroupsChoice::row_blocks):
  // 1: step by step with a row-wrap test; 2: blocks of d steps, one pointer per row; 0: the
  // default (2). Same bits.
  int pg_row_blocks = 0;
  // kPhaseGroups input tiles per block (PhaseGroupsChoice::prefetch): 1: one; 2: two, the next
  // tile's copies in flight while the block computes; 0: the default. Same bits.
  int pg_prefetch = 0;
  // kPhaseGroups output staging (PhaseGroupsChoice::stage): 1: the whole tile, one copy-out
  // per tile; 2: in rounds of one task per warp (a smaller footprint; plain tile, V = 4,
  // u % 4 == 0 with more than 18 groups, one input tile, R <= 2, else 1); 3: the whole tile,
  // copied out by cp.async.bulk (plain tile, V = 4, u % 4 == 0, one input tile, R = 2, else 1);
  // 0: the default (1). Same bits.
  int pg_stage = 0;
  // kPhaseGroups' last, partial wave of tiles (PhaseGroupsChoice::tail; plain tile, V = 4,
  // R = 2, one input tile, stage 1 or 3): 1: whole tiles; 2: its tiles split by groups over
  // as many blocks, after the whole tiles; 3: the same, before them; 0: the default (1).
  // Same bits.
  int pg_tail = 0;
  // kPhaseGroups input copies (PhaseGroupsChoice::bulk_in; same conditions): 1: cp.async by
  // every thread; 2: one cp.async.bulk per interior tile; 0: the default (1). Same bits.
  int pg_bulk_in = 0;
  // kPhaseGroups: at most this many blocks (0: as many as fit; a test hook). Same bits.
  int pg_max_blocks = 0;
  // kTensorTf32: k-steps per tensor-core partial sum (tensor_tf32.h, "Accumulation"); 0: the
  // default (kTensorTf32DefaultChunk). A value at least the band's k-steps sums the whole band
  // in the tensor cores' accumulators (session 7's kernel). Changes the bits, not the products.
  int tc_chunk_ksteps = 0;
  // kTensorTf32 with 3 n8 tiles (u' = 24): 3 compiles it for three blocks per SM, 1 leaves the
  // registers to the compiler; 0: the default (TensorTf32Plan::min_blocks). Same bits.
  int tc_min_blocks = 0;
};

// Test hooks of the host-level CUDA call.
struct CudaWindowOptions {
  CudaPlanOptions plan;        // force a kernel (must support the filter) and its variant
  bool poison_output = false;  // fill y with NaN first: unwritten outputs show
};

#if defined(FRESNEL_WITH_CUDA)
absl::StatusOr<HostArray> UpfirdnWindowCuda(const Device& device, const Polyphase& filter,
                                            const HostSignalView& x, int64_t x_first,
                                            double cval, int64_t out_first, int64_t out_count,
                                            StageTimes* times,
                                            const CudaWindowOptions& options = {});
// The same, writing the [channels, out_count] result to host memory at y (nothing zero-filled;
// a DMA when y is page-locked) instead of a new array. x is read completely before y is written.
absl::Status UpfirdnWindowCudaInto(const Device& device, const Polyphase& filter,
                                   const HostSignalView& x, int64_t x_first, double cval,
                                   int64_t out_first, int64_t out_count, void* y,
                                   StageTimes* times, const CudaWindowOptions& options = {});
#endif

// Device-resident signal: x and y are device pointers of the filter's dtype; rows are x_stride /
// y_stride elements apart.
struct DeviceSignal {
  int64_t channels = 1;
  const void* x = nullptr;
  int64_t x_stride = 0;
  int64_t x_first = 0;
  int64_t x_len = 0;
  double cval = 0;
  void* y = nullptr;
  int64_t y_stride = 0;
  int64_t out_first = 0;
  int64_t out_count = 0;
};

// A filter prepared for one device: the phase-major taps uploaded on device.stream (from the
// device's pool) and the kernel chosen for it. The choice depends only on (up, down, P, dtype),
// never on signal sizes, so every window of one filter runs the same arithmetic.
class CudaPolyphase {
 public:
  // Enqueues the taps upload on device.stream; does not synchronise.
  static absl::StatusOr<CudaPolyphase> Create(const Device& device, const Polyphase& filter,
                                              DType dtype, CudaKernel kernel = CudaKernel::kAuto);
  // InvalidArgument for an unknown options.rb_store or a negative block cap.
  static absl::StatusOr<CudaPolyphase> Create(const Device& device, const Polyphase& filter,
                                              DType dtype, const CudaPlanOptions& options);
  CudaPolyphase(CudaPolyphase&&) noexcept;
  CudaPolyphase& operator=(CudaPolyphase&&) noexcept;
  ~CudaPolyphase();

  // Enqueues the kernel on device.stream (same device as Create); does not synchronise.
  absl::Status LaunchAsync(const Device& device, const DeviceSignal& signal) const;
  CudaKernel kernel() const;

  // The selector, exposed for tests and the benchmark. Returns kAuto never.
  static CudaKernel Select(int up, int down, int64_t taps_per_phase, DType dtype);
  // Whether `kernel` can run this filter (kRegisterBlocked, kSmemTile and kPhaseGroups have
  // limits).
  static bool Supports(CudaKernel kernel, int up, int down, int64_t taps_per_phase, DType dtype);

 private:
  struct Impl;
  explicit CudaPolyphase(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// How one resample call treats the spectrum (both back ends): the weight of each of x's n
// spectrum bins (empty: no window; real x: SciPy's folded W_real), and whether x is the spectrum.
struct ResampleSpectrum {
  std::vector<double> weights;
  bool freq_domain = false;
};

#if defined(FRESNEL_WITH_CUDA)
// scipy.signal.resample of a validated [channels, n] view (float32, float64, complex64,
// complex128) to num samples per channel, on device.stream with cuFFT (work area and buffers from
// the device's pool); synchronises the stream before returning.
absl::StatusOr<HostArray> ResampleCuda(const Device& device, const HostSignalView& x, int64_t num,
                                       const ResampleSpectrum& spectrum, StageTimes* times);
#endif

#if FRESNEL_WITH_CUDA
// Benchmark ceiling probe (interp_cuda.cu): kind 0 writes n_out floats to y; kind 1 reads
// n_out/4 floats of x and writes n_out floats (case (a)'s traffic without arithmetic); kind 2 is
// kind 1 with streaming stores. n_out must be a multiple of 4096. Enqueues on device.stream.
absl::Status LaunchBandwidthProbe(const Device& device, int kind, const float* x, float* y,
                                  int64_t n_out);
#endif

}  // namespace fresnel::interp::internal
