// Polyphase interpolation with SciPy semantics: scipy.signal.upfirdn, resample_poly and firwin.
//
// Signals are row-major HostArrays of any rank >= 1, filtered along `axis` (default the last);
// 0-D arrays are refused. Every DType is accepted: float32, float64, complex64, complex128, and
// the integer types (uint8, uint16, int16, int32), which are promoted as SciPy promotes them.
// Taps are real or complex (`taps_imag`). The result has the input's shape except along `axis`,
// and the dtype ResultDType gives:
//   DTypeRule::kKeepPrecision (the default): a float or complex signal keeps its precision, and
//     complex taps make the result complex of that precision (float32 x with float64 taps stays
//     float32: the GPU path's speed depends on it); integer signals follow SciPy's rule.
//   DTypeRule::kSciPy: numpy.result_type(taps, x, float32), exactly what SciPy returns (float32 x
//     with float64 taps gives float64).
// The arithmetic accumulates in at least the result's precision on the GPU and in double on the
// CPU. Complex taps are applied as two real-tap passes (y = h_re * x + i h_im * x).
//
// Every entry point takes a Device: DeviceKind::kCpu runs a multi-threaded polyphase
// implementation (accumulating in double: the test oracle), kCuda enqueues on device.stream and
// synchronises that stream before returning. None of them keeps state between calls except
// StreamingResampler.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"

namespace fresnel::interp {

// scipy.signal.get_window's names, symmetric (as firwin uses them). The parametrised ones take
// their parameters from WindowSpec, in get_window's tuple order.
enum class Window {
  kBoxcar,
  kHamming,
  kHann,
  kBlackman,
  kKaiser,           // kaiser_beta
  kTriang,
  kBartlett,
  kFlattop,
  kParzen,
  kBohman,
  kBlackmanHarris,
  kNuttall,
  kBartHann,
  kCosine,
  kLanczos,
  kGaussian,         // params[0] = std (> 0)
  kGeneralGaussian,  // params[0] = p, params[1] = sig (> 0)
  kTukey,            // params[0] = alpha (SciPy's default 0.5 when params is empty)
  kExponential,      // tau 1, centred (get_window allows no parameters for a symmetric one)
  kChebwin,          // params[0] = at, attenuation in dB; numtaps <= kMaxChebwinTaps
};

struct WindowSpec {
  Window type = Window::kKaiser;
  double kaiser_beta = 5.0;     // used by kKaiser only
  std::vector<double> params;  // the other parametrised windows (see Window)
};

// chebwin is a DFT of M points computed directly (O(M^2)); longer ones are refused.
constexpr int kMaxChebwinTaps = 1 << 15;

// ("kaiser", 8.0), ("gaussian", 3.0), "hann", ...: get_window's name and tuple parameters.
// InvalidArgument naming `field` for unknown names or a wrong number of parameters.
absl::StatusOr<WindowSpec> WindowFromName(const std::string& name,
                                          const std::vector<double>& params,
                                          const std::string& field = "window");

// Checks the window's parameters (and that chebwin's length is within kMaxChebwinTaps).
absl::Status ValidateWindow(const WindowSpec& window, int64_t numtaps);

// How the result's dtype is chosen (see the top of this file).
enum class DTypeRule {
  kKeepPrecision,  // default
  kSciPy,          // numpy.result_type(taps, x, float32)
};

// The result dtype of filtering a signal of dtype `x` with taps of dtype `taps` (float32,
// float64, complex64 or complex128) under `rule`.
DType ResultDType(DType x, DType taps, DTypeRule rule);

// scipy.signal.firwin(numtaps, cutoff, window=..., pass_zero=True, scale=True): a linear-phase
// low-pass filter; `cutoff` is relative to the Nyquist frequency, in (0, 1).
absl::StatusOr<std::vector<double>> Firwin(int numtaps, double cutoff, WindowSpec window);

// Signal extension beyond the edges. The first nine are scipy.signal.upfirdn's `mode`; the last
// four are resample_poly's `padtype` values that subtract a per-channel background before
// filtering (with zero padding) and add it back afterwards.
enum class PadMode {
  kConstant,
  kSymmetric,
  kReflect,
  kEdge,
  kWrap,
  kSmooth,
  kAntisymmetric,
  kAntireflect,
  kLine,
  kMean,
  kMedian,
  kMaximum,
  kMinimum,
};

// Limits applied by Validate*; the server overrides them from its configuration.
struct Limits {
  int max_rate = 1 << 16;                // up and down
  int64_t max_taps = 1 << 20;            // filter length
  int64_t max_output_samples = int64_t{1} << 31;  // per call, all channels together
};

struct UpfirdnOptions {
  int up = 1;
  int down = 1;
  PadMode mode = PadMode::kConstant;  // kMean..kMinimum are not valid here
  double cval = 0;                    // value beyond the edges for kConstant
  // Imaginary parts of complex taps, as long as `taps`; empty: real taps.
  std::vector<double> taps_imag;
  // The dtype the taps came in (float32, float64, complex64, complex128): only DTypeRule::kSciPy
  // reads it. Taps are complex when this is complex or taps_imag is non-empty.
  DType taps_dtype = DType::kFloat64;
  DTypeRule dtype_rule = DTypeRule::kKeepPrecision;
  int axis = -1;  // the axis filtered; negative counts from the end
};

// SciPy's full output length: floor(((n - 1) * up + taps - 1) / down) + 1, also for n == 0
// (where SciPy returns that many samples of the filtered constant cval; a negative count, where
// SciPy raises, is 0 here).
int64_t UpfirdnOutputLength(int64_t n, int64_t taps, int up, int down);

// The dtype Upfirdn returns for a signal of dtype x (servers size replies with it).
DType UpfirdnResultDType(DType x, const UpfirdnOptions& options);

// Checks shapes, dtypes and limits. Messages name the request field ("x.shape", "taps", "up",
// "axis", ...). A zero-length signal is valid with mode kConstant only (SciPy crashes on the
// others).
absl::Status ValidateUpfirdn(const std::vector<double>& taps, const HostArray& x,
                             const UpfirdnOptions& options, const Limits& limits = {});

// y = downsample(filter(upsample(x, up), taps), down), SciPy's full length, along options.axis.
absl::StatusOr<HostArray> Upfirdn(const Device& device, const std::vector<double>& taps,
                                  const HostArray& x, const UpfirdnOptions& options,
                                  StageTimes* times = nullptr);

// SciPy's default filter length for resample_poly(up, down): 20 * max(up, down) + 1 after
// reducing up/down by their gcd (1 when max(up, down) / gcd is 1: no filter is needed then, but
// the length is still what SciPy designs). The one copy of the rule: server and CLI use it.
inline int64_t ResamplePolyDefaultNumtaps(int up, int down) {
  const int g = std::gcd(up > 0 ? up : 1, down > 0 ? down : 1);
  return 20 * int64_t{std::max(up, down) / g} + 1;
}

struct ResamplePolyOptions {
  int up = 1;
  int down = 1;
  // The filter: explicit taps when non-empty (SciPy's `window=array`), otherwise
  // firwin(20 * max(up, down) + 1, 1 / max(up, down), window) after reducing up/down by their gcd.
  std::vector<double> taps;
  std::vector<double> taps_imag;       // imaginary parts of complex explicit taps; empty: real
  DType taps_dtype = DType::kFloat64;  // of explicit taps, read by DTypeRule::kSciPy (see
                                       // UpfirdnOptions); a designed filter has x's dtype, as in
                                       // SciPy (float64 for integer x)
  WindowSpec window;  // default Kaiser, beta 5 (SciPy's default)
  PadMode padtype = PadMode::kConstant;
  double cval = 0;
  DTypeRule dtype_rule = DTypeRule::kKeepPrecision;
  int axis = -1;
};

// ceil(n * up / down) after reducing up/down by their gcd.
int64_t ResamplePolyOutputLength(int64_t n, int up, int down);

// The dtype ResamplePoly returns for a signal of dtype x (x itself when up/down reduce to 1/1).
DType ResamplePolyResultDType(DType x, const ResamplePolyOptions& options);

absl::Status ValidateResamplePoly(const HostArray& x, const ResamplePolyOptions& options,
                                  const Limits& limits = {});

// scipy.signal.resample_poly(x, up, down, window=..., padtype=..., cval=..., axis=...). When up
// and down reduce to 1/1 the result is x itself, as SciPy's x.copy(). Integer x with a designed
// filter: the filter stays float64 and so does the result (SciPy 1.10 casts the filter to x's
// integer dtype, truncating it).
absl::StatusOr<HostArray> ResamplePoly(const Device& device, const HostArray& x,
                                       const ResamplePolyOptions& options,
                                       StageTimes* times = nullptr);

// ---- scipy.signal.resample (FFT method) and scipy.signal.decimate (FIR) ----

struct ResampleOptions {
  int64_t num = 0;  // output samples along axis, >= 1
  int axis = -1;
  // scipy.signal.resample's `window`, applied to x's spectrum before its bins are cut or padded.
  // `window`: a get_window name and parameters (SciPy applies ifftshift(get_window(window, n)),
  // the periodic window centred on bin 0). `window_values`: the n values themselves in FFT bin
  // order (SciPy's window=ndarray). At most one of the two; neither means no window. For real x
  // SciPy folds W onto the rfft bins (W[k] and W[n - k] averaged); so does Fresnel.
  std::optional<WindowSpec> window;
  std::vector<double> window_values;
  // domain='freq': x already holds the spectrum, no forward transform. Complex x: the fft's n
  // bins; real x: read as SciPy reads a real array there, as rfft bins (the result is real).
  bool freq_domain = false;
};

// scipy.signal.get_window(window, m, fftbins=periodic): the symmetric window (firwin's), or the
// periodic one (the symmetric window of m + 1 points without its last). InvalidArgument for
// m < 1 or bad parameters (ValidateWindow).
absl::StatusOr<std::vector<double>> GetWindow(const WindowSpec& window, int64_t m, bool periodic);

// The dtype Resample returns, as SciPy's: float and complex dtypes stay, integers give float64.
DType ResampleResultDType(DType x);

absl::Status ValidateResample(const HostArray& x, const ResampleOptions& options,
                              const Limits& limits = {});

// scipy.signal.resample(x, num, axis=axis, window=..., domain=...): the DFT of each channel
// (or x itself for domain='freq'), times the window, truncated or zero-padded to num bins
// (SciPy's Nyquist-bin rules) and inverted, scaled by num / n. x needs n >= 1 samples along axis. CPU: kissfft in double (any length; prime
// lengths cost O(n^2)); CUDA: cuFFT C2C (float32/complex64) or Z2Z (float64/complex128, and
// integers), batched over channels, work area from the device's pool.
absl::StatusOr<HostArray> Resample(const Device& device, const HostArray& x,
                                   const ResampleOptions& options, StageTimes* times = nullptr);

struct DecimateOptions {
  int q = 2;               // downsampling factor, >= 1
  int n = 0;               // filter order (n + 1 taps); 0 means SciPy's default 20 * q
  bool zero_phase = true;  // resample_poly(x, 1, q, window=h); false: upfirdn(h, x, 1, q)[:ceil(n/q)]
  int axis = -1;
};

// The dtype Decimate returns: float and complex dtypes stay, integers give float64 (SciPy's).
DType DecimateResultDType(DType x);

absl::Status ValidateDecimate(const HostArray& x, const DecimateOptions& options,
                              const Limits& limits = {});

// scipy.signal.decimate(x, q, n, ftype='fir', axis=axis, zero_phase=...): the filter is
// firwin(n + 1, 1 / q, window='hamming') in the result dtype's precision.
absl::StatusOr<HostArray> Decimate(const Device& device, const HostArray& x,
                                   const DecimateOptions& options, StageTimes* times = nullptr);

// Decimate's output length along the axis, ceil(n / q), and its filter length: n + 1 taps, with
// SciPy's default order n = 20 * q when options.n is 0.
int64_t DecimateOutputLength(int64_t n, int q);
int64_t DecimateNumtaps(const DecimateOptions& options);

// ---- device memory: what a server reserves to place a call on a GPU ----
//
// Upper bounds (bytes) of the device memory one call takes on CUDA, for a signal of dtype `x`
// with `channels` rows of `samples` along the filtered axis and the options the call will get
// (valid ones: call the Validate* function first). The CPU path takes none. Each counts what the
// CUDA path allocates from the device's memory pool:
//   Upfirdn, ResamplePoly, Decimate: the signal and the result, each in its dtype, and the
//     filter as float64 (its phase-major float32/float64 copy on the device is no larger); a
//     causal Decimate (zero_phase false) holds the full upfirdn output before it is cut.
//   Resample: the signal and the result in the working dtype (float64 for integer signals), the
//     two spectra (complex of that dtype) and cuFFT's work areas, counted as one more copy of
//     each spectrum (cuFFT's plans for these sizes stay within that; Bluestein sizes may need
//     more).
// `num_taps` of Upfirdn counts the real taps (options.taps_imag is added).
int64_t UpfirdnDeviceBytes(DType x, int64_t channels, int64_t samples, int64_t num_taps,
                           const UpfirdnOptions& options);
int64_t ResamplePolyDeviceBytes(DType x, int64_t channels, int64_t samples,
                                const ResamplePolyOptions& options);
int64_t ResampleDeviceBytes(DType x, int64_t channels, int64_t samples,
                            const ResampleOptions& options);
int64_t DecimateDeviceBytes(DType x, int64_t channels, int64_t samples,
                            const DecimateOptions& options);

struct HostSignalRef;  // fresnel/interp/into.h

// Chunked filtering whose concatenated outputs equal the one-shot Upfirdn (kConstant mode) or
// ResamplePoly (kConstant padtype) result exactly as the same Device computes it. It keeps each
// channel's last taps_per_phase - 1 input samples (the delay line) and the global output index.
// Not thread-safe; successive calls may use different Devices.
class StreamingResampler {
 public:
  // The filter is fixed at creation; `channels` and `dtype` are the shape every chunk must have.
  static absl::StatusOr<StreamingResampler> ForUpfirdn(std::vector<double> taps,
                                                       const UpfirdnOptions& options,
                                                       int64_t channels, DType dtype,
                                                       const Limits& limits = {});
  static absl::StatusOr<StreamingResampler> ForResamplePoly(const ResamplePolyOptions& options,
                                                            int64_t channels, DType dtype,
                                                            const Limits& limits = {});

  // Consumes a chunk of shape [channels, k] (or [k] for one channel) and returns the outputs that
  // no later input can change, same rank as the chunk (possibly zero-length).
  absl::StatusOr<HostArray> Push(const Device& device, const HostArray& chunk,
                                 StageTimes* times = nullptr);
  // Push between caller-owned host buffers (issue 10; include fresnel/interp/into.h for
  // HostSignalRef): the chunk is read where it lies and the outputs are written to y as
  // [channels, count] row-major in the stream's dtype; returns count, the outputs per channel,
  // at most MaxPushOutputSamples(k). y_bytes is the room at y (INVALID_ARGUMENT naming y when
  // the outputs would not fit; nothing is consumed then). Nothing is zero-filled; y must not
  // overlap the chunk. On CUDA the chunk goes up and y comes down by DMA when they are
  // page-locked (fresnel::PinHostMemory; pageable memory works at the driver's pageable speed),
  // on device.stream, synchronised before returning; with overlap_chunk_bytes > 0 and at least
  // two such chunks of y, the call is cut into windows of that many bytes of y on three streams
  // so their H2D, kernels and D2H overlap (IntoOptions::overlap_chunk_bytes). The same bits as
  // Push on the same device; the state advances exactly as Push's.
  absl::StatusOr<int64_t> PushInto(const Device& device, const HostSignalRef& chunk, void* y,
                                   int64_t y_bytes, StageTimes* times = nullptr,
                                   int64_t overlap_chunk_bytes = 0);
  // Ends the signal and returns the remaining outputs. Push/Finish afterwards fail.
  absl::StatusOr<HostArray> Finish(const Device& device, StageTimes* times = nullptr);

  // Upper bound of the outputs per channel one Push of `chunk_samples` samples returns.
  int64_t MaxPushOutputSamples(int64_t chunk_samples) const;
  // Upper bound of the device memory one Push of `chunk_samples` samples per channel takes on
  // CUDA (bytes): the delay line and the chunk, the outputs they produce, the filter as float64.
  int64_t PushDeviceBytes(int64_t chunk_samples) const;
  // Host bytes this object holds between calls: the filter (float64, and the phase-major copy a
  // call makes of it) and the delay line of every channel.
  int64_t StateBytes() const;

  int64_t channels() const { return channels_; }
  DType dtype() const { return dtype_; }
  int64_t samples_in() const { return samples_in_; }
  int64_t samples_out() const { return samples_out_; }

 private:
  StreamingResampler() = default;

  // One chunk's outputs: full-upfirdn outputs [start, start + count) of every channel, and the
  // delay line's length after it.
  struct Step {
    int64_t start = 0;
    int64_t end = 0;  // full outputs computed after the chunk
    int64_t count = 0;
    int64_t keep = 0;
  };
  absl::Status CheckChunk(DType dtype, const std::vector<int64_t>& shape) const;
  Step StepFor(int64_t k) const;
  // The state after a chunk of k samples per channel ([channels, k] contiguous at `chunk`) whose
  // outputs `step` were computed: the new delay line is the last step.keep samples of the delay
  // line followed by the chunk.
  void Advance(const Step& step, const void* chunk, int64_t k, int chunk_ndim);

  std::vector<double> taps_;  // padded as the one-shot call pads them
  int up_ = 1, down_ = 1;
  double cval_ = 0;
  int64_t channels_ = 1;
  DType dtype_ = DType::kFloat32;
  bool one_dim_ = false;     // chunks are [k] rather than [1, k]
  bool finished_ = false;
  // resample_poly: outputs [skip_, skip_ + ceil(n*up/down)) of the full upfirdn are kept.
  bool resample_poly_ = false;
  int64_t skip_ = 0;
  int64_t samples_in_ = 0;    // per channel
  int64_t samples_out_ = 0;   // per channel, already returned
  int64_t full_emitted_ = 0;  // full-upfirdn outputs computed so far, per channel
  HostArray history_;         // [channels, <= taps_per_phase - 1], the delay line
};

}  // namespace fresnel::interp
