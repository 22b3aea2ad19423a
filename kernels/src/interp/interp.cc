// Validation, SciPy's size and filter bookkeeping, signal extension, and device dispatch for
// Upfirdn and ResamplePoly. The arithmetic lives in interp_cpu.cc and interp_cuda.cu.
#include "fresnel/interp/interp.h"
#include "fresnel/interp/into.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
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
    case DType::kComplex128: return static_cast<const cdouble*>(row)[i];
    case DType::kUint8: return static_cast<const uint8_t*>(row)[i];
    case DType::kUint16: return static_cast<const uint16_t*>(row)[i];
    case DType::kInt16: return static_cast<const int16_t*>(row)[i];
    case DType::kInt32: return static_cast<const int32_t*>(row)[i];
  }
  return 0;
}

// Only the float and complex dtypes are ever stored (results and working copies).
void StoreFromComplex(DType dtype, void* row, int64_t i, cdouble v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(row)[i] = static_cast<float>(v.real()); break;
    case DType::kFloat64: static_cast<double*>(row)[i] = v.real(); break;
    case DType::kComplex64:
      static_cast<std::complex<float>*>(row)[i] = std::complex<float>(v);
      break;
    case DType::kComplex128: static_cast<cdouble*>(row)[i] = v; break;
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

}  // namespace

bool IsComplex(DType d) { return d == DType::kComplex64 || d == DType::kComplex128; }
bool IsInexact(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || IsComplex(d);
}
// float64-level precision (int32 does not fit in float32, as NumPy decides).
bool IsDoubleLevel(DType d) {
  return d == DType::kFloat64 || d == DType::kComplex128 || d == DType::kInt32;
}
DType RealOf(DType d) {
  if (d == DType::kComplex64) return DType::kFloat32;
  if (d == DType::kComplex128) return DType::kFloat64;
  return d;
}
DType ComplexOf(DType d) {
  if (d == DType::kFloat32) return DType::kComplex64;
  if (d == DType::kFloat64) return DType::kComplex128;
  return d;
}

bool IsKnownDType(DType d) {
  return static_cast<int>(d) >= static_cast<int>(DType::kFloat32) &&
         static_cast<int>(d) <= static_cast<int>(DType::kInt32);
}

// axis in [-ndim, ndim) -> [0, ndim). The array must have ndim >= 1.
int NormalizeAxis(const SignalShape& x, int axis) {
  return axis < 0 ? axis + static_cast<int>(x.ndim()) : axis;
}

absl::Status ValidateSignal(const SignalShape& x, int axis) {
  if (x.ndim() == 0) {
    return absl::InvalidArgumentError(
        "x.shape [] is 0-D: x needs at least one dimension (the filtered axis)");
  }
  const int nd = static_cast<int>(x.ndim());
  if (axis < -nd || axis >= nd) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", axis, " is out of range for x.shape ",
                                                   ShapeString(x.shape()), " (ndim ", nd, ")"));
  }
  if (!IsKnownDType(x.dtype())) return absl::InvalidArgumentError("x.dtype is not a known dtype");
  // The geometry multiplies the dimensions on either side of the axis: with a zero dimension
  // elsewhere the array is empty but those products can still overflow (found by fuzz_interp_params).
  int64_t product = 1;
  for (int d = 0; d < nd; ++d) {
    const int64_t n = x.dim(d);
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("x.shape ", ShapeString(x.shape()), " has a negative dimension"));
    }
    if (n == 0) continue;
    if (product > INT64_MAX / n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "x.shape ", ShapeString(x.shape()), ": its nonzero dimensions multiply past int64"));
    }
    product *= n;
  }
  return absl::OkStatus();
}

absl::Status ValidateTapsDType(DType d, const char* field) {
  if (!IsInexact(d)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", DTypeName(d),
                     " is not a taps dtype (float32, float64, complex64, complex128)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRule(DTypeRule rule) {
  if (rule != DTypeRule::kKeepPrecision && rule != DTypeRule::kSciPy) {
    return absl::InvalidArgumentError("dtype_rule is not a known rule");
  }
  return absl::OkStatus();
}

AxisGeometry GeometryOf(const SignalShape& x, int axis) {
  AxisGeometry g;
  g.axis = NormalizeAxis(x, axis);
  for (int d = 0; d < static_cast<int>(x.ndim()); ++d) {
    if (d < g.axis) g.outer *= x.dim(d);
    if (d > g.axis) g.inner *= x.dim(d);
  }
  g.len = x.dim(g.axis);
  return g;
}

WorkSignal ToWork(const HostArray& x, const AxisGeometry& g, DType dtype) {
  WorkSignal w;
  w.view.dtype = dtype;
  w.view.channels = g.channels();
  w.view.len = g.len;
  w.view.stride = g.len;
  if (x.dtype() == dtype && g.inner == 1) {
    w.view.data = x.raw();
    return w;
  }
  w.owned = HostArray(dtype, {g.channels(), g.len});
  const size_t es = DTypeSize(dtype);
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t in = 0; in < g.inner; ++in) {
      char* row = static_cast<char*>(w.owned.raw()) +
                  (o * g.inner + in) * g.len * static_cast<int64_t>(es);
      for (int64_t i = 0; i < g.len; ++i) {
        StoreFromComplex(dtype, row, i, LoadAsComplex(x.dtype(), x.raw(), (o * g.len + i) * g.inner + in));
      }
    }
  }
  w.view.data = w.owned.raw();
  return w;
}

// The [channels, m] result back in x's shape with m samples along the axis.
absl::StatusOr<HostArray> FromWork(HostArray y, const HostArray& x, const AxisGeometry& g) {
  std::vector<int64_t> shape = x.shape();
  const int64_t m = y.dim(1);
  shape[g.axis] = m;
  if (g.inner == 1) {
    FRESNEL_RETURN_IF_ERROR(y.Reshape(shape));
    return y;
  }
  HostArray out(y.dtype(), shape);
  const size_t es = DTypeSize(y.dtype());
  const char* src = static_cast<const char*>(y.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t in = 0; in < g.inner; ++in) {
      const char* row = src + (o * g.inner + in) * m * static_cast<int64_t>(es);
      for (int64_t k = 0; k < m; ++k) {
        std::memcpy(dst + ((o * m + k) * g.inner + in) * static_cast<int64_t>(es),
                    row + k * static_cast<int64_t>(es), es);
      }
    }
  }
  return out;
}

// y = yr + i * yi (yi may be null: y = yr) in dtype `out`; returns yr itself when nothing changes.
HostArray Combine(HostArray yr, const HostArray* yi, DType out) {
  if (yi == nullptr && yr.dtype() == out) return yr;
  HostArray y(out, yr.shape());
  const int64_t n = static_cast<int64_t>(yr.size());
  for (int64_t i = 0; i < n; ++i) {
    cdouble v = LoadAsComplex(yr.dtype(), yr.raw(), i);
    if (yi != nullptr) v += cdouble(0, 1) * LoadAsComplex(yi->dtype(), yi->raw(), i);
    StoreFromComplex(out, y.raw(), i, v);
  }
  return y;
}

void AddTimes(StageTimes* total, const StageTimes& t) {
  if (total == nullptr) return;
  total->h2d_s += t.h2d_s;
  total->compute_s += t.compute_s;
  total->d2h_s += t.d2h_s;
}

absl::Status CheckOutputSize(int64_t channels, int64_t per_channel, const SignalShape& x,
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
    case DType::kComplex128:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("x.dtype ", DTypeName(dtype),
                       " is not supported here (float32, float64, complex64, complex128)"));
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
    // SciPy scales the taps in their own dtype (h *= up).
    const bool taps_single =
        options.taps_dtype == DType::kFloat32 || options.taps_dtype == DType::kComplex64;
    for (double& v : h) {
      v = taps_single ? static_cast<double>(static_cast<float>(v) * static_cast<float>(up))
                      : v * up;
    }
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

DType ResultDType(DType x, DType taps, DTypeRule rule) {
  const bool complex = internal::IsComplex(x) || internal::IsComplex(taps);
  bool dbl;
  if (rule == DTypeRule::kKeepPrecision && internal::IsInexact(x)) {
    dbl = internal::IsDoubleLevel(x);
  } else {
    // numpy.result_type(taps, x, float32): float32 unless either needs float64.
    dbl = internal::IsDoubleLevel(x) || internal::IsDoubleLevel(taps);
  }
  const DType real = dbl ? DType::kFloat64 : DType::kFloat32;
  return complex ? internal::ComplexOf(real) : real;
}

int64_t UpfirdnOutputLength(int64_t n, int64_t taps, int up, int down) {
  if (n < 0 || taps <= 0 || up <= 0 || down <= 0) return 0;
  // floor(((n - 1) * up + taps - 1) / down) + 1 with Python's floor division (n == 0 can make
  // the numerator negative).
  const int64_t num = (n - 1) * up + taps - 1;
  const int64_t q = num >= 0 ? num / down : -((-num + down - 1) / down);
  return std::max<int64_t>(q + 1, 0);
}

int64_t ResamplePolyOutputLength(int64_t n, int up, int down) {
  if (n <= 0 || up <= 0 || down <= 0) return 0;
  const int g = std::gcd(up, down);
  const int64_t u = up / g, d = down / g;
  return (n * u + d - 1) / d;
}

namespace {

// The dtype of the taps as SciPy sees them.
DType TapsDTypeOf(DType declared, const std::vector<double>& imag) {
  return imag.empty() ? declared : internal::ComplexOf(declared);
}

absl::Status ValidateTapsImag(const std::vector<double>& taps, const std::vector<double>& imag,
                              DType taps_dtype, const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(internal::ValidateTapsDType(taps_dtype, "taps.dtype"));
  if (imag.empty()) return absl::OkStatus();
  if (imag.size() != taps.size()) {
    return absl::InvalidArgumentError(absl::StrCat("taps_imag has ", imag.size(),
                                                   " coefficients, taps has ", taps.size()));
  }
  return internal::ValidateTaps(imag, "taps_imag", limits);
}

// Shape checks shared by Upfirdn and ResamplePoly; returns the geometry along the axis.
absl::StatusOr<internal::AxisGeometry> ValidateSignalAlong(const internal::SignalShape& x, int axis,
                                                           int up) {
  FRESNEL_RETURN_IF_ERROR(internal::ValidateSignal(x, axis));
  internal::AxisGeometry g = internal::GeometryOf(x, axis);
  // Guard the length formulas against int64 overflow: (n - 1) * up must fit.
  if (g.len > (int64_t{1} << 62) / up) {
    return absl::ResourceExhaustedError(
        absl::StrCat("x.shape ", ShapeString(x.shape()), " is too long"));
  }
  return g;
}

// One real-taps upfirdn of the [channels, n] working signal: [channels, out_len].
absl::StatusOr<HostArray> UpfirdnPass(const Device& device, const std::vector<double>& taps,
                                      const HostSignalView& v, const UpfirdnOptions& options,
                                      int64_t out_len, StageTimes* times) {
  Polyphase filter{taps, options.up, options.down};
  if (out_len == 0 || v.channels == 0) return HostArray(v.dtype, {v.channels, out_len});
  if (options.mode == PadMode::kConstant) {
    return internal::UpfirdnWindow(device, filter, v, 0, options.cval, 0, out_len, times);
  }
  // Other modes: materialise s[lo, hi) — everything the outputs [0, out_len) read — on the host
  // and run the zero-extension primitive on it.
  const int64_t p = filter.TapsPerPhase();
  const int64_t lo = -(p - 1);
  const int64_t hi = (out_len - 1) * options.down / options.up + 1;
  HostArray ext = internal::ExtendSignal(v, options.mode, options.cval, lo, hi);
  return internal::UpfirdnWindow(device, filter, internal::ViewOf(ext), lo, 0.0, 0, out_len,
                                 times);
}

// One real-taps resample_poly pass (the filter designed, any background already removed).
absl::StatusOr<HostArray> ResamplePass(const Device& device,
                                       const internal::ResamplePolyDesign& design,
                                       const HostSignalView& v, PadMode pad, double cval,
                                       int64_t n_out, StageTimes* times) {
  const Polyphase& f = design.filter;
  if (pad == PadMode::kConstant) {
    return internal::UpfirdnWindow(device, f, v, 0, cval, design.skip, n_out, times);
  }
  // An upfirdn mode: materialise the input span the kept outputs read.
  const int64_t p = f.TapsPerPhase();
  const int64_t q_first = design.skip * f.down / f.up;
  const int64_t q_last = (design.skip + n_out - 1) * f.down / f.up;
  const int64_t lo = q_first - (p - 1);
  const int64_t hi = q_last + 1;
  HostArray ext = internal::ExtendSignal(v, pad, 0.0, lo, hi);
  return internal::UpfirdnWindow(device, f, internal::ViewOf(ext), lo, 0.0, design.skip, n_out,
                                 times);
}

}  // namespace

DType UpfirdnResultDType(DType x, const UpfirdnOptions& options) {
  return ResultDType(x, TapsDTypeOf(options.taps_dtype, options.taps_imag), options.dtype_rule);
}

DType ResamplePolyResultDType(DType x, const ResamplePolyOptions& options) {
  const int gcd = std::gcd(options.up, options.down);
  if (gcd > 0 && options.up / gcd == 1 && options.down / gcd == 1) return x;
  // A designed filter has x's dtype (float64 for integer x); explicit taps their own.
  const DType taps_dtype =
      !options.taps.empty() ? TapsDTypeOf(options.taps_dtype, options.taps_imag)
      : internal::IsInexact(x) ? x
                               : DType::kFloat64;
  return ResultDType(x, taps_dtype, options.dtype_rule);
}

absl::Status ValidateUpfirdn(const std::vector<double>& taps, const HostArray& x,
                             const UpfirdnOptions& options, const Limits& limits) {
  return ValidateUpfirdnShape(taps, x.dtype(), x.shape(), options, limits);
}

absl::Status ValidateUpfirdnShape(const std::vector<double>& taps, DType dtype,
                                  const std::vector<int64_t>& shape,
                                  const UpfirdnOptions& options, const Limits& limits) {
  const internal::SignalShape x(dtype, shape);
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.up, "up", limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.down, "down", limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateTaps(taps, "taps", limits));
  FRESNEL_RETURN_IF_ERROR(ValidateTapsImag(taps, options.taps_imag, options.taps_dtype, limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRule(options.dtype_rule));
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
  FRESNEL_ASSIGN_OR_RETURN(internal::AxisGeometry g,
                           ValidateSignalAlong(x, options.axis, options.up));
  if (g.len == 0 && options.mode != PadMode::kConstant) {
    return absl::InvalidArgumentError(
        absl::StrCat("x.shape ", ShapeString(x.shape()), " has no samples along axis ",
                     options.axis, ": mode '", internal::PadModeName(options.mode),
                     "' needs at least one (only 'constant' extends an empty signal)"));
  }
  const int64_t len =
      UpfirdnOutputLength(g.len, static_cast<int64_t>(taps.size()), options.up, options.down);
  return internal::CheckOutputSize(g.channels(), len, x, limits);
}

absl::Status ValidateResamplePoly(const HostArray& x, const ResamplePolyOptions& options,
                                  const Limits& limits) {
  return ValidateResamplePolyShape(x.dtype(), x.shape(), options, limits);
}

absl::Status ValidateResamplePolyShape(DType dtype, const std::vector<int64_t>& shape,
                                       const ResamplePolyOptions& options,
                                       const Limits& limits) {
  const internal::SignalShape x(dtype, shape);
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.up, "up", limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.down, "down", limits));
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRule(options.dtype_rule));
  if (!options.taps.empty()) {
    FRESNEL_RETURN_IF_ERROR(internal::ValidateTaps(options.taps, "taps", limits));
    FRESNEL_RETURN_IF_ERROR(
        ValidateTapsImag(options.taps, options.taps_imag, options.taps_dtype, limits));
  } else {
    if (!options.taps_imag.empty()) {
      return absl::InvalidArgumentError("taps_imag is set but taps is empty");
    }
    const int g = std::gcd(options.up, options.down);
    const int64_t max_rate = std::max(options.up, options.down) / g;
    const int64_t numtaps = ResamplePolyDefaultNumtaps(options.up, options.down);
    if (max_rate > 1 && numtaps > limits.max_taps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "up/down = ", options.up, "/", options.down, " needs a default filter of ", numtaps,
          " taps, more than the limit of ", limits.max_taps,
          " (max_taps); pass explicit taps or smaller rates"));
    }
    FRESNEL_RETURN_IF_ERROR(ValidateWindow(options.window, max_rate > 1 ? numtaps : 1));
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
  FRESNEL_ASSIGN_OR_RETURN(internal::AxisGeometry g,
                           ValidateSignalAlong(x, options.axis, options.up));
  return internal::CheckOutputSize(
      g.channels(), ResamplePolyOutputLength(g.len, options.up, options.down), x, limits);
}

absl::StatusOr<HostArray> Upfirdn(const Device& device, const std::vector<double>& taps,
                                  const HostArray& x, const UpfirdnOptions& options,
                                  StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(ValidateUpfirdn(taps, x, options));
  if (times != nullptr) *times = StageTimes{};
  const internal::AxisGeometry g = internal::GeometryOf(x, options.axis);
  const DType out = UpfirdnResultDType(x.dtype(), options);
  // Real signals with complex taps are filtered as real signals, twice.
  const DType work = internal::IsComplex(x.dtype()) ? out : internal::RealOf(out);
  internal::WorkSignal w = internal::ToWork(x, g, work);
  const int64_t out_len =
      UpfirdnOutputLength(g.len, static_cast<int64_t>(taps.size()), options.up, options.down);
  StageTimes t;
  FRESNEL_ASSIGN_OR_RETURN(HostArray yr, UpfirdnPass(device, taps, w.view, options, out_len, &t));
  internal::AddTimes(times, t);
  HostArray yi;
  if (!options.taps_imag.empty()) {
    FRESNEL_ASSIGN_OR_RETURN(
        yi, UpfirdnPass(device, options.taps_imag, w.view, options, out_len, &t));
    internal::AddTimes(times, t);
  }
  HostArray y =
      internal::Combine(std::move(yr), options.taps_imag.empty() ? nullptr : &yi, out);
  return internal::FromWork(std::move(y), x, g);
}

absl::StatusOr<HostArray> ResamplePoly(const Device& device, const HostArray& x,
                                       const ResamplePolyOptions& options, StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(ValidateResamplePoly(x, options));
  if (times != nullptr) *times = StageTimes{};
  const int gcd = std::gcd(options.up, options.down);
  if (options.up / gcd == 1 && options.down / gcd == 1) return x;  // SciPy: x.copy()
  const internal::AxisGeometry g = internal::GeometryOf(x, options.axis);
  const DType out = ResamplePolyResultDType(x.dtype(), options);
  const DType work = internal::IsComplex(x.dtype()) ? out : internal::RealOf(out);
  const int64_t n_out = ResamplePolyOutputLength(g.len, options.up, options.down);
  if (n_out == 0 || g.channels() == 0) {
    return internal::FromWork(HostArray(out, {g.channels(), n_out}), x, g);
  }
  FRESNEL_ASSIGN_OR_RETURN(internal::ResamplePolyDesign design,
                           internal::DesignResamplePoly(options, work));
  internal::ResamplePolyDesign design_imag;
  const bool complex_taps = !options.taps_imag.empty();
  if (complex_taps) {
    ResamplePolyOptions imag = options;
    imag.taps = options.taps_imag;
    FRESNEL_ASSIGN_OR_RETURN(design_imag, internal::DesignResamplePoly(imag, work));
  }
  internal::WorkSignal w = internal::ToWork(x, g, work);
  HostSignalView v = w.view;
  PadMode pad = options.padtype;
  double cval = options.cval;
  // mean/median/maximum/minimum: subtract the per-channel background, filter with zero padding,
  // add it back.
  const bool background = !internal::IsUpfirdnMode(pad);
  std::vector<std::complex<double>> bg;
  HostArray shifted;
  if (background) {
    shifted = HostArray(work, {v.channels, v.len});
    bg.resize(static_cast<size_t>(v.channels));
    for (int64_t c = 0; c < v.channels; ++c) {
      bg[c] = internal::Background(v, c, pad);
      const void* src = internal::RowOf(v, c);
      void* dst = static_cast<char*>(shifted.raw()) +
                  c * v.len * static_cast<int64_t>(DTypeSize(work));
      for (int64_t i = 0; i < v.len; ++i) {
        internal::StoreFromComplex(work, dst, i, internal::LoadAsComplex(work, src, i) - bg[c]);
      }
    }
    v = internal::ViewOf(shifted);
    pad = PadMode::kConstant;
    cval = 0.0;
  }
  StageTimes t;
  FRESNEL_ASSIGN_OR_RETURN(HostArray yr, ResamplePass(device, design, v, pad, cval, n_out, &t));
  internal::AddTimes(times, t);
  HostArray yi;
  if (complex_taps) {
    FRESNEL_ASSIGN_OR_RETURN(yi, ResamplePass(device, design_imag, v, pad, cval, n_out, &t));
    internal::AddTimes(times, t);
  }
  HostArray y = internal::Combine(std::move(yr), complex_taps ? &yi : nullptr, out);
  if (background) {
    for (int64_t c = 0; c < v.channels; ++c) {
      void* row = static_cast<char*>(y.raw()) + c * n_out * static_cast<int64_t>(DTypeSize(out));
      for (int64_t i = 0; i < n_out; ++i) {
        internal::StoreFromComplex(out, row, i, internal::LoadAsComplex(out, row, i) + bg[c]);
      }
    }
  }
  return internal::FromWork(std::move(y), x, g);
}

}  // namespace fresnel::interp
