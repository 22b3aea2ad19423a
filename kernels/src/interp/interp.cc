// Validation, SciPy's size and filter bookkeeping, signal extension, and device dispatch for
// Upfirdn and ResamplePoly. The arithmetic lives in interp_cpu.cc and interp_cuda.cu.
#include "fresnel/interp/interp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "interp/interp_internal.h"

namespace fresnel::interp {
namespace internal {
namespace {

using cdouble = std::complex<double>;

cdouble LoadAsComplex(DType dtype, const void* row, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(row)[i];
    case DType::kFloat64: return static_cast<const double*>(row)[i];
    case DType::kComplex64:
      return cdouble(static_cast<const std::complex<float>*>(row)[i]);
    default: return 0;
  }
}

void StoreFromComplex(DType dtype, void* row, int64_t i, cdouble v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(row)[i] = static_cast<float>(v.real()); break;
    case DType::kFloat64: static_cast<double*>(row)[i] = v.real(); break;
    case DType::kComplex64:
      static_cast<std::complex<float>*>(row)[i] = std::complex<float>(v);
      break;
    default: break;
  }
}

const void* RowOf(const HostSignalView& x, int64_t c) {
  return static_cast<const char*>(x.data) + c * x.stride * static_cast<int64_t>(DTypeSize(x.dtype));
}

int64_t FloorMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return r < 0 ? r + b : r;
}
int64_t FloorDiv(int64_t a, int64_t b) { return (a - FloorMod(a, b)) / b; }

// s[i] of one channel for i outside [0, n), as _upfirdn_apply.pyx defines it; see ExtendSignal.
class Extender {
 public:
  Extender(const HostSignalView& x, int64_t c, PadMode mode, double cval)
      : dtype_(x.dtype), row_(RowOf(x, c)), n_(x.len), mode_(mode), cval_(cval) {
    if (n_ == 1 && mode_ != PadMode::kConstant && mode_ != PadMode::kAntisymmetric) {
      mode_ = PadMode::kEdge;
    }
  }

  cdouble At(int64_t i) const {
    if (i >= 0 && i < n_) return X(i);
    const int64_t n = n_;
    switch (mode_) {
      case PadMode::kConstant: return cval_;
      case PadMode::kEdge: return i < 0 ? X(0) : X(n - 1);
      case PadMode::kWrap: return X(FloorMod(i, n));
      case PadMode::kSymmetric: {
        // Period 2n: x[0..n) followed by its mirror image x[n-1], ..., x[0].
        int64_t r = FloorMod(i, 2 * n);
        return r < n ? X(r) : X(2 * n - 1 - r);
      }
      case PadMode::kAntisymmetric: {
        // As symmetric, with the mirrored half negated.
        int64_t r = FloorMod(i, 2 * n);
        return r < n ? X(r) : -X(2 * n - 1 - r);
      }
      case PadMode::kReflect: {
        // Period 2(n-1): mirrored about the end samples, which are not repeated.
        int64_t p = 2 * (n - 1);
        int64_t r = FloorMod(i, p);
        return r < n ? X(r) : X(p - r);
      }
      case PadMode::kAntireflect: {
        // Point reflection about each end sample: s[-k] = 2 s[0] - s[k] and
        // s[n-1+k] = 2 s[n-1] - s[n-1-k]. Iterated, that is the reflect pattern of period
        // p = 2(n-1) plus a drift of 2 (x[n-1] - x[0]) per period.
        int64_t p = 2 * (n - 1);
        int64_t q = FloorDiv(i, p);
        int64_t r = i - q * p;
        cdouble base = r < n ? X(r) : 2.0 * X(n - 1) - X(p - r);
        return base + static_cast<double>(q) * 2.0 * (X(n - 1) - X(0));
      }
      case PadMode::kSmooth:
        // Continues the slope of the two end samples.
        if (i < 0) return X(0) + static_cast<double>(i) * (X(1) - X(0));
        return X(n - 1) + static_cast<double>(i - (n - 1)) * (X(n - 1) - X(n - 2));
      case PadMode::kLine: {
        // Continues the line through the first and last samples.
        cdouble slope = (X(n - 1) - X(0)) / static_cast<double>(n - 1);
        if (i < 0) return X(0) + static_cast<double>(i) * slope;
        return X(n - 1) + static_cast<double>(i - (n - 1)) * slope;
      }
      default: return 0;
    }
  }

 private:
  cdouble X(int64_t i) const { return LoadAsComplex(dtype_, row_, i); }
  DType dtype_;
  const void* row_;
  int64_t n_;
  PadMode mode_;
  double cval_;
};

// Per-channel background of resample_poly's mean/median/maximum/minimum padtypes, as NumPy
// computes it (complex values order lexicographically, as np.sort/np.amax do).
cdouble Background(const HostSignalView& x, int64_t c, PadMode padtype) {
  const void* row = RowOf(x, c);
  const int64_t n = x.len;
  auto less = [](const cdouble& a, const cdouble& b) {
    return a.real() < b.real() || (a.real() == b.real() && a.imag() < b.imag());
  };
  std::vector<cdouble> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = LoadAsComplex(x.dtype, row, i);
  switch (padtype) {
    case PadMode::kMean: {
      cdouble s = 0;
      for (const cdouble& e : v) s += e;
      return s / static_cast<double>(n);
    }
    case PadMode::kMaximum: return *std::max_element(v.begin(), v.end(), less);
    case PadMode::kMinimum: return *std::min_element(v.begin(), v.end(), less);
    case PadMode::kMedian: {
      size_t mid = static_cast<size_t>(n / 2);
      std::nth_element(v.begin(), v.begin() + mid, v.end(), less);
      cdouble hi = v[mid];
      if (n % 2 == 1) return hi;
      cdouble lo = *std::max_element(v.begin(), v.begin() + mid, less);
      return 0.5 * (lo + hi);
    }
    default: return 0;
  }
}

bool IsUpfirdnMode(PadMode m) {
  switch (m) {
    case PadMode::kMean:
    case PadMode::kMedian:
    case PadMode::kMaximum:
    case PadMode::kMinimum:
      return false;
    default:
      return true;
  }
}

bool IsKnownPadMode(PadMode m) {
  return static_cast<int>(m) >= static_cast<int>(PadMode::kConstant) &&
         static_cast<int>(m) <= static_cast<int>(PadMode::kMinimum);
}

absl::Status ValidateSignal(const HostArray& x) {
  if (x.ndim() != 1 && x.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "x.shape ", ShapeString(x.shape()), " must be [n] or [channels, n]"));
  }
  return ValidateDType(x.dtype());
}

absl::Status CheckOutputSize(int64_t channels, int64_t per_channel, const HostArray& x,
                             const Limits& limits) {
  if (per_channel < 0 ||
      (channels > 0 && per_channel > limits.max_output_samples / channels)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "output of ", channels, " x ", per_channel, " samples (x.shape ",
        ShapeString(x.shape()), ") exceeds the limit of ", limits.max_output_samples,
        " samples per call (max_output_samples)"));
  }
  return absl::OkStatus();
}

// Reshapes a [channels, m] result to the rank of the input.
absl::StatusOr<HostArray> ToRankOf(HostArray y, const HostArray& x) {
  if (x.ndim() == 1) FRESNEL_RETURN_IF_ERROR(y.Reshape({y.dim(1)}));
  return y;
}

}  // namespace

std::vector<double> Polyphase::PhaseMajorTaps() const {
  const int64_t p = TapsPerPhase();
  std::vector<double> out(static_cast<size_t>(p * up), 0.0);
  const int64_t l = static_cast<int64_t>(taps.size());
  for (int64_t t = 0; t < up; ++t) {
    for (int64_t m = 0; m < p; ++m) {
      int64_t j = t + m * up;
      if (j < l) out[t * p + m] = taps[j];
    }
  }
  return out;
}

HostSignalView ViewOf(const HostArray& x) {
  HostSignalView v;
  v.dtype = x.dtype();
  v.channels = x.ndim() == 2 ? x.dim(0) : 1;
  v.len = x.ndim() == 2 ? x.dim(1) : x.dim(0);
  v.stride = v.len;
  v.data = x.raw();
  return v;
}

HostArray ExtendSignal(const HostSignalView& x, PadMode mode, double cval, int64_t lo,
                       int64_t hi) {
  HostArray out(x.dtype, {x.channels, std::max<int64_t>(hi - lo, 0)});
  const size_t es = DTypeSize(x.dtype);
  for (int64_t c = 0; c < x.channels; ++c) {
    Extender ext(x, c, mode, cval);
    char* row = static_cast<char*>(out.raw()) + c * (hi - lo) * static_cast<int64_t>(es);
    const char* src = static_cast<const char*>(RowOf(x, c));
    int64_t i = lo;
    for (; i < std::min<int64_t>(hi, 0); ++i) StoreFromComplex(x.dtype, row, i - lo, ext.At(i));
    // The signal itself is copied bit for bit.
    int64_t a = std::max<int64_t>(lo, 0), b = std::min<int64_t>(hi, x.len);
    if (b > a) std::memcpy(row + (a - lo) * es, src + a * es, static_cast<size_t>(b - a) * es);
    for (i = std::max<int64_t>(lo, x.len); i < hi; ++i) {
      StoreFromComplex(x.dtype, row, i - lo, ext.At(i));
    }
  }
  return out;
}

absl::Status ValidateRate(int rate, const char* field, const Limits& limits) {
  if (rate < 1 || rate > limits.max_rate) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be in [1, ", limits.max_rate,
                                                   "], got ", rate));
  }
  return absl::OkStatus();
}

absl::Status ValidateTaps(const std::vector<double>& taps, const char* field,
                          const Limits& limits) {
  if (taps.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must not be empty"));
  }
  if (static_cast<int64_t>(taps.size()) > limits.max_taps) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", taps.size(),
                                                   " coefficients, more than the limit of ",
                                                   limits.max_taps, " (max_taps)"));
  }
  for (size_t i = 0; i < taps.size(); ++i) {
    if (!std::isfinite(taps[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] is not finite (", taps[i], ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kComplex64:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "x.dtype ", DTypeName(dtype), " is not supported (float32, float64, complex64)"));
  }
}

const char* PadModeName(PadMode mode) {
  switch (mode) {
    case PadMode::kConstant: return "constant";
    case PadMode::kSymmetric: return "symmetric";
    case PadMode::kReflect: return "reflect";
    case PadMode::kEdge: return "edge";
    case PadMode::kWrap: return "wrap";
    case PadMode::kSmooth: return "smooth";
    case PadMode::kAntisymmetric: return "antisymmetric";
    case PadMode::kAntireflect: return "antireflect";
    case PadMode::kLine: return "line";
    case PadMode::kMean: return "mean";
    case PadMode::kMedian: return "median";
    case PadMode::kMaximum: return "maximum";
    case PadMode::kMinimum: return "minimum";
  }
  return "unknown";
}

absl::StatusOr<ResamplePolyDesign> DesignResamplePoly(const ResamplePolyOptions& options,
                                                      DType dtype) {
  ResamplePolyDesign d;
  const int g = std::gcd(options.up, options.down);
  const int up = options.up / g, down = options.down / g;
  d.filter.up = up;
  d.filter.down = down;
  if (up == 1 && down == 1) {
    d.copy = true;
    d.filter.taps = {1.0};
    return d;
  }
  std::vector<double> h;
  int64_t half_len;
  const bool single = dtype == DType::kFloat32 || dtype == DType::kComplex64;
  if (!options.taps.empty()) {
    h = options.taps;
    half_len = (static_cast<int64_t>(h.size()) - 1) / 2;
    for (double& v : h) v *= up;
  } else {
    const int max_rate = std::max(up, down);
    half_len = 10 * static_cast<int64_t>(max_rate);
    FRESNEL_ASSIGN_OR_RETURN(h, Firwin(static_cast<int>(2 * half_len + 1), 1.0 / max_rate,
                                       options.window));
    // SciPy: firwin(...).astype(x.dtype), then h *= up in that dtype.
    for (double& v : h) {
      v = single ? static_cast<double>(static_cast<float>(v) * static_cast<float>(up))
                 : v * up;
    }
  }
  // Zero-pad the front so that output samples land on the filter's centre.
  const int64_t n_pre_pad = down - half_len % down;
  d.skip = (half_len + n_pre_pad) / down;
  // SciPy also appends zeros (n_post_pad) until the full output is long enough; zero taps at the
  // end change no output value, and the window primitive computes any output index, so they are
  // not needed here.
  d.filter.taps.assign(static_cast<size_t>(n_pre_pad), 0.0);
  d.filter.taps.insert(d.filter.taps.end(), h.begin(), h.end());
  return d;
}

absl::StatusOr<HostArray> UpfirdnWindow(const Device& device, const Polyphase& filter,
                                        const HostSignalView& x, int64_t x_first, double cval,
                                        int64_t out_first, int64_t out_count,
                                        StageTimes* times) {
  if (out_first < 0 || out_count < 0) {
    return absl::InternalError("UpfirdnWindow: negative output range");
  }
  if (device.kind == DeviceKind::kCpu) {
    StageTimes local;
    auto t0 = std::chrono::steady_clock::now();
    auto y = UpfirdnWindowCpu(filter, x, x_first, cval, out_first, out_count);
    local.compute_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (times != nullptr) *times = local;
    return y;
  }
#if defined(FRESNEL_WITH_CUDA)
  return UpfirdnWindowCuda(device, filter, x, x_first, cval, out_first, out_count, times);
#else
  return absl::FailedPreconditionError(
      absl::StrCat("device ", device.Name(), ": this build has no CUDA support"));
#endif
}

}  // namespace internal

using internal::HostSignalView;
using internal::Polyphase;

int64_t UpfirdnOutputLength(int64_t n, int64_t taps, int up, int down) {
  if (n <= 0 || taps <= 0 || up <= 0 || down <= 0) return 0;
  return ((n - 1) * up + taps - 1) / down + 1;
}

int64_t ResamplePolyOutputLength(int64_t n, int up, int down) {
  if (n <= 0 || up <= 0 || down <= 0) return 0;
  const int g = std::gcd(up, down);
  const int64_t u = up / g, d = down / g;
  return (n * u + d - 1) / d;
}

absl::Status ValidateUpfirdn(const std::vector<double>& taps, const HostArray& x,
                             const UpfirdnOptions& options, const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.up, "up", limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.down, "down", limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateTaps(taps, "taps", limits));
  if (!internal::IsKnownPadMode(options.mode)) {
    return absl::InvalidArgumentError("mode is not a known extension mode");
  }
  if (!internal::IsUpfirdnMode(options.mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode '", internal::PadModeName(options.mode),
        "' is a resample_poly padtype, not an upfirdn mode (constant, symmetric, reflect, edge, "
        "wrap, smooth, antisymmetric, antireflect, line)"));
  }
  if (!std::isfinite(options.cval)) {
    return absl::InvalidArgumentError(absl::StrCat("cval must be finite, got ", options.cval));
  }
  FRESNEL_RETURN_IF_ERROR(internal::ValidateSignal(x));
  HostSignalView v = internal::ViewOf(x);
  // Guard the length formula against int64 overflow: (n - 1) * up must fit.
  if (v.len > (int64_t{1} << 62) / options.up) {
    return absl::ResourceExhaustedError(
        absl::StrCat("x.shape ", ShapeString(x.shape()), " is too long"));
  }
  int64_t len = UpfirdnOutputLength(v.len, static_cast<int64_t>(taps.size()), options.up,
                                    options.down);
  return internal::CheckOutputSize(v.channels, len, x, limits);
}

absl::Status ValidateResamplePoly(const HostArray& x, const ResamplePolyOptions& options,
                                  const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.up, "up", limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.down, "down", limits));
  if (!options.taps.empty()) {
    FRESNEL_RETURN_IF_ERROR(internal::ValidateTaps(options.taps, "taps", limits));
  } else {
    const int g = std::gcd(options.up, options.down);
    const int64_t max_rate = std::max(options.up, options.down) / g;
    const int64_t numtaps = ResamplePolyDefaultNumtaps(options.up, options.down);
    if (max_rate > 1 && numtaps > limits.max_taps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "up/down = ", options.up, "/", options.down, " needs a default filter of ", numtaps,
          " taps, more than the limit of ", limits.max_taps,
          " (max_taps); pass explicit taps or smaller rates"));
    }
    if (options.window.type == Window::kKaiser &&
        (!std::isfinite(options.window.kaiser_beta) ||
         std::fabs(options.window.kaiser_beta) > 700)) {
      return absl::InvalidArgumentError(
          absl::StrCat("window: kaiser_beta must be finite and at most 700 in magnitude, got ",
                       options.window.kaiser_beta));
    }
    switch (options.window.type) {
      case Window::kBoxcar:
      case Window::kHamming:
      case Window::kHann:
      case Window::kBlackman:
      case Window::kKaiser:
        break;
      default:
        return absl::InvalidArgumentError("window: unknown window type");
    }
  }
  if (!internal::IsKnownPadMode(options.padtype)) {
    return absl::InvalidArgumentError("padtype is not a known padtype");
  }
  if (!std::isfinite(options.cval)) {
    return absl::InvalidArgumentError(absl::StrCat("cval must be finite, got ", options.cval));
  }
  if (options.padtype != PadMode::kConstant && options.cval != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cval has no effect when padtype is '",
                     internal::PadModeName(options.padtype), "' (only with 'constant')"));
  }
  FRESNEL_RETURN_IF_ERROR(internal::ValidateSignal(x));
  HostSignalView v = internal::ViewOf(x);
  if (v.len > (int64_t{1} << 62) / options.up) {
    return absl::ResourceExhaustedError(
        absl::StrCat("x.shape ", ShapeString(x.shape()), " is too long"));
  }
  return internal::CheckOutputSize(
      v.channels, ResamplePolyOutputLength(v.len, options.up, options.down), x, limits);
}

absl::StatusOr<HostArray> Upfirdn(const Device& device, const std::vector<double>& taps,
                                  const HostArray& x, const UpfirdnOptions& options,
                                  StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(ValidateUpfirdn(taps, x, options));
  if (times != nullptr) *times = StageTimes{};
  Polyphase filter{taps, options.up, options.down};
  HostSignalView v = internal::ViewOf(x);
  const int64_t out_len =
      UpfirdnOutputLength(v.len, static_cast<int64_t>(taps.size()), options.up, options.down);
  if (out_len == 0 || v.channels == 0) {
    return internal::ToRankOf(HostArray(x.dtype(), {v.channels, out_len}), x);
  }
  if (options.mode == PadMode::kConstant) {
    FRESNEL_ASSIGN_OR_RETURN(HostArray y, internal::UpfirdnWindow(device, filter, v, 0,
                                                                  options.cval, 0, out_len,
                                                                  times));
    return internal::ToRankOf(std::move(y), x);
  }
  // Other modes: materialise s[lo, hi) — everything the outputs [0, out_len) read — on the host
  // and run the zero-extension primitive on it.
  const int64_t p = filter.TapsPerPhase();
  const int64_t lo = -(p - 1);
  const int64_t hi = (out_len - 1) * options.down / options.up + 1;
  HostArray ext = internal::ExtendSignal(v, options.mode, options.cval, lo, hi);
  FRESNEL_ASSIGN_OR_RETURN(HostArray y,
                           internal::UpfirdnWindow(device, filter, internal::ViewOf(ext), lo,
                                                   0.0, 0, out_len, times));
  return internal::ToRankOf(std::move(y), x);
}

absl::StatusOr<HostArray> ResamplePoly(const Device& device, const HostArray& x,
                                       const ResamplePolyOptions& options, StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(ValidateResamplePoly(x, options));
  if (times != nullptr) *times = StageTimes{};
  FRESNEL_ASSIGN_OR_RETURN(internal::ResamplePolyDesign design,
                           internal::DesignResamplePoly(options, x.dtype()));
  if (design.copy) return x;
  HostSignalView v = internal::ViewOf(x);
  const int64_t n_out = ResamplePolyOutputLength(v.len, options.up, options.down);
  if (n_out == 0 || v.channels == 0) {
    return internal::ToRankOf(HostArray(x.dtype(), {v.channels, n_out}), x);
  }
  const Polyphase& f = design.filter;
  const PadMode pad = options.padtype;

  if (pad == PadMode::kConstant) {
    FRESNEL_ASSIGN_OR_RETURN(HostArray y, internal::UpfirdnWindow(device, f, v, 0, options.cval,
                                                                  design.skip, n_out, times));
    return internal::ToRankOf(std::move(y), x);
  }
  if (!internal::IsUpfirdnMode(pad)) {
    // Subtract the per-channel background, filter with zero padding, add it back.
    HostArray shifted(x.dtype(), {v.channels, v.len});
    std::vector<std::complex<double>> bg(static_cast<size_t>(v.channels));
    for (int64_t c = 0; c < v.channels; ++c) {
      bg[c] = internal::Background(v, c, pad);
      const void* src = internal::RowOf(v, c);
      void* dst = static_cast<char*>(shifted.raw()) +
                  c * v.len * static_cast<int64_t>(DTypeSize(x.dtype()));
      for (int64_t i = 0; i < v.len; ++i) {
        internal::StoreFromComplex(x.dtype(), dst, i,
                                   internal::LoadAsComplex(x.dtype(), src, i) - bg[c]);
      }
    }
    FRESNEL_ASSIGN_OR_RETURN(HostArray y,
                             internal::UpfirdnWindow(device, f, internal::ViewOf(shifted), 0,
                                                     0.0, design.skip, n_out, times));
    for (int64_t c = 0; c < v.channels; ++c) {
      void* row = static_cast<char*>(y.raw()) +
                  c * n_out * static_cast<int64_t>(DTypeSize(x.dtype()));
      for (int64_t i = 0; i < n_out; ++i) {
        internal::StoreFromComplex(x.dtype(), row, i,
                                   internal::LoadAsComplex(x.dtype(), row, i) + bg[c]);
      }
    }
    return internal::ToRankOf(std::move(y), x);
  }
  // An upfirdn mode: materialise the input span the kept outputs read.
  const int64_t p = f.TapsPerPhase();
  const int64_t q_first = design.skip * f.down / f.up;
  const int64_t q_last = (design.skip + n_out - 1) * f.down / f.up;
  const int64_t lo = q_first - (p - 1);
  const int64_t hi = q_last + 1;
  HostArray ext = internal::ExtendSignal(v, pad, 0.0, lo, hi);
  FRESNEL_ASSIGN_OR_RETURN(HostArray y,
                           internal::UpfirdnWindow(device, f, internal::ViewOf(ext), lo, 0.0,
                                                   design.skip, n_out, times));
  return internal::ToRankOf(std::move(y), x);
}

}  // namespace fresnel::interp
