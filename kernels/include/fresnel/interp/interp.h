// Polyphase interpolation with SciPy semantics: scipy.signal.upfirdn, resample_poly and firwin.
//
// Signals are HostArrays of shape [n] or [channels, n] (row-major, one row per channel) in
// float32, float64 or complex64; the result has the same rank and dtype as the input. (SciPy would
// promote float32 input to float64 when the taps are float64; Fresnel keeps the input dtype and
// accumulates in at least float32 on the GPU and in double on the CPU.)
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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"

namespace fresnel::interp {

enum class Window { kBoxcar, kHamming, kHann, kBlackman, kKaiser };

struct WindowSpec {
  Window type = Window::kKaiser;
  double kaiser_beta = 5.0;  // used by kKaiser only
};

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
};

// SciPy's full output length: ((n - 1) * up + taps - 1) / down + 1 (0 for n == 0).
int64_t UpfirdnOutputLength(int64_t n, int64_t taps, int up, int down);

// Checks shapes, dtypes and limits. Messages name the request field ("x.shape", "taps", "up", ...).
absl::Status ValidateUpfirdn(const std::vector<double>& taps, const HostArray& x,
                             const UpfirdnOptions& options, const Limits& limits = {});

// y = downsample(filter(upsample(x, up), taps), down), SciPy's full length, per channel.
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
  WindowSpec window;  // default Kaiser, beta 5 (SciPy's default)
  PadMode padtype = PadMode::kConstant;
  double cval = 0;
};

// ceil(n * up / down) after reducing up/down by their gcd.
int64_t ResamplePolyOutputLength(int64_t n, int up, int down);

absl::Status ValidateResamplePoly(const HostArray& x, const ResamplePolyOptions& options,
                                  const Limits& limits = {});

// scipy.signal.resample_poly(x, up, down, window=..., padtype=..., cval=...), along the last axis.
absl::StatusOr<HostArray> ResamplePoly(const Device& device, const HostArray& x,
                                       const ResamplePolyOptions& options,
                                       StageTimes* times = nullptr);

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
  // Ends the signal and returns the remaining outputs. Push/Finish afterwards fail.
  absl::StatusOr<HostArray> Finish(const Device& device, StageTimes* times = nullptr);

  int64_t channels() const { return channels_; }
  DType dtype() const { return dtype_; }
  int64_t samples_in() const { return samples_in_; }
  int64_t samples_out() const { return samples_out_; }

 private:
  StreamingResampler() = default;

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
