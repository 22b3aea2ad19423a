// Output lengths and device-memory bounds of the interp calls (fresnel/interp/interp.h), the one
// place the server takes them from.
#include <algorithm>
#include <cstdint>

#include "fresnel/interp/interp.h"
#include "interp/interp_internal.h"

namespace fresnel::interp {
namespace {

constexpr int64_t kTapBytes = sizeof(double);  // filters are designed and held as float64

int64_t Bytes(int64_t channels, int64_t samples, DType dtype) {
  return channels * samples * static_cast<int64_t>(DTypeSize(dtype));
}

// Taps per polyphase branch: the delay line keeps one fewer input samples than this.
int64_t TapsPerPhase(int64_t taps, int up) { return (taps + up - 1) / std::max(1, up); }

}  // namespace

int64_t DecimateOutputLength(int64_t n, int q) {
  if (n <= 0 || q <= 0) return 0;
  return (n + q - 1) / q;
}

int64_t DecimateNumtaps(const DecimateOptions& options) {
  return (options.n == 0 ? 20 * int64_t{options.q} : int64_t{options.n}) + 1;
}

int64_t UpfirdnDeviceBytes(DType x, int64_t channels, int64_t samples, int64_t num_taps,
                           const UpfirdnOptions& options) {
  const int64_t y = UpfirdnOutputLength(samples, num_taps, options.up, options.down);
  return Bytes(channels, samples, x) + Bytes(channels, y, UpfirdnResultDType(x, options)) +
         (num_taps + static_cast<int64_t>(options.taps_imag.size())) * kTapBytes;
}

int64_t ResamplePolyDeviceBytes(DType x, int64_t channels, int64_t samples,
                                const ResamplePolyOptions& options) {
  const int64_t taps =
      options.taps.empty()
          ? ResamplePolyDefaultNumtaps(options.up, options.down)
          : static_cast<int64_t>(options.taps.size() + options.taps_imag.size());
  const int64_t y = ResamplePolyOutputLength(samples, options.up, options.down);
  return Bytes(channels, samples, x) + Bytes(channels, y, ResamplePolyResultDType(x, options)) +
         taps * kTapBytes;
}

int64_t ResampleDeviceBytes(DType x, int64_t channels, int64_t samples,
                            const ResampleOptions& options) {
  const DType work = ResampleResultDType(x);
  const DType spectrum = internal::IsComplex(work) ? work : internal::ComplexOf(work);
  const int64_t signal = Bytes(channels, samples, work) + Bytes(channels, options.num, work);
  const int64_t spectra =
      Bytes(channels, samples, spectrum) + Bytes(channels, options.num, spectrum);
  const bool windowed = options.window.has_value() || !options.window_values.empty();
  const int64_t weights = windowed ? samples * static_cast<int64_t>(sizeof(double)) : 0;
  return signal + 2 * spectra + weights;  // the spectra, cuFFT's work areas, the window
}

int64_t DecimateDeviceBytes(DType x, int64_t channels, int64_t samples,
                            const DecimateOptions& options) {
  const int64_t taps = DecimateNumtaps(options);
  const int64_t y = options.zero_phase ? DecimateOutputLength(samples, options.q)
                                       : UpfirdnOutputLength(samples, taps, 1, options.q);
  return Bytes(channels, samples, x) + Bytes(channels, y, DecimateResultDType(x)) +
         taps * kTapBytes;
}

int64_t StreamingResampler::MaxPushOutputSamples(int64_t chunk_samples) const {
  // Every input sample releases at most up/down outputs (rounded up), and the delay line at most
  // one filter length's worth more.
  return (chunk_samples * up_ + down_ - 1) / down_ +
         TapsPerPhase(static_cast<int64_t>(taps_.size()), up_) + 1;
}

int64_t StreamingResampler::PushDeviceBytes(int64_t chunk_samples) const {
  const int64_t taps = static_cast<int64_t>(taps_.size());
  const int64_t window = TapsPerPhase(taps, up_) - 1 + chunk_samples;
  const int64_t y = UpfirdnOutputLength(window, taps, up_, down_);
  return Bytes(channels_, window, dtype_) + Bytes(channels_, y, dtype_) + taps * kTapBytes;
}

int64_t StreamingResampler::StateBytes() const {
  const int64_t taps = static_cast<int64_t>(taps_.size());
  return 2 * taps * kTapBytes + Bytes(channels_, TapsPerPhase(taps, up_), dtype_);
}

}  // namespace fresnel::interp
