// scipy.signal.resample (FFT method) and scipy.signal.decimate (FIR): validation, the CPU FFT
// back end (kissfft, double) and device dispatch. The CUDA back end is resample_cuda.cu.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstring>
#include <type_traits>
#include <vector>

#include <kissfft/kissfft.hh>  // header-only C++ template (BSD-3-Clause)

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/interp/interp.h"
#include "interp/interp_internal.h"
#include "interp/resample_spectrum.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

namespace fresnel::interp {
namespace internal {
namespace {

using cdouble = std::complex<double>;

cdouble Apply(const SpectrumTerm& t, const cdouble* x) {
  cdouble v = 0;
  if (t.j1 >= 0) v += t.s1 * x[t.j1];
  if (t.j2 >= 0) v += t.s2 * x[t.j2];
  if (t.conj) v = std::conj(v);
  if (t.real_only) v = v.real();
  return v;
}

template <class T>
cdouble Load(const T* row, int64_t i) {
  return cdouble(row[i]);
}

template <class T>
void Store(T* row, int64_t i, cdouble v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    row[i] = static_cast<T>(v.real());
  } else {
    row[i] = T(v);
  }
}

template <class T>
void ResampleRows(const HostSignalView& x, int64_t num, bool real_input,
                  const ResampleSpectrum& spectrum, HostArray& y) {
  const int64_t nx = x.len;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, x.channels, 1),
                    [&](const tbb::blocked_range<int64_t>& r) {
    // kissfft keeps a mutable scratch buffer (radices other than 2-5): one pair per task.
    const kissfft<double> forward(static_cast<size_t>(nx), false);
    const kissfft<double> inverse(static_cast<size_t>(num), true);
    std::vector<cdouble> in(static_cast<size_t>(nx)), spec(static_cast<size_t>(nx));
    std::vector<cdouble> f(static_cast<size_t>(num)), out(static_cast<size_t>(num));
    for (int64_t c = r.begin(); c < r.end(); ++c) {
      const T* row = static_cast<const T*>(x.data) + c * x.stride;
      if (spectrum.freq_domain) {
        for (int64_t i = 0; i < nx; ++i) spec[i] = Load(row, i);
      } else {
        for (int64_t i = 0; i < nx; ++i) in[i] = Load(row, i);
        forward.transform(in.data(), spec.data());
      }
      if (!spectrum.weights.empty()) {
        for (int64_t i = 0; i < nx; ++i) spec[i] *= spectrum.weights[i];
      }
      for (int64_t k = 0; k < num; ++k) {
        f[k] = Apply(real_input ? RealBin(k, nx, num) : ComplexBin(k, nx, num), spec.data());
      }
      inverse.transform(f.data(), out.data());
      // SciPy: ifft (1 / num) then * num / nx.
      T* yr = y.data<T>() + c * num;
      for (int64_t k = 0; k < num; ++k) Store(yr, k, out[k] / static_cast<double>(nx));
    }
  });
}

absl::StatusOr<HostArray> ResampleCpu(const HostSignalView& x, int64_t num,
                                      const ResampleSpectrum& sp) {
  HostArray y(x.dtype, {x.channels, num});
  if (y.size() == 0) return y;
  switch (x.dtype) {
    case DType::kFloat32: ResampleRows<float>(x, num, true, sp, y); break;
    case DType::kFloat64: ResampleRows<double>(x, num, true, sp, y); break;
    case DType::kComplex64: ResampleRows<std::complex<float>>(x, num, false, sp, y); break;
    case DType::kComplex128: ResampleRows<std::complex<double>>(x, num, false, sp, y); break;
    default: return ValidateDType(x.dtype);
  }
  return y;
}

// SciPy's W (ifftshift of the periodic window, or the caller's values), folded for real x:
// W_real[0] = W[0], W_real[k] = (W[k] + W[n - k]) / 2.
absl::StatusOr<ResampleSpectrum> SpectrumOf(const ResampleOptions& options, int64_t nx,
                                            bool real_input) {
  ResampleSpectrum sp;
  sp.freq_domain = options.freq_domain;
  std::vector<double> w;
  if (options.window.has_value()) {
    FRESNEL_ASSIGN_OR_RETURN(std::vector<double> win, GetWindow(*options.window, nx, true));
    w.resize(static_cast<size_t>(nx));
    for (int64_t i = 0; i < nx; ++i) w[i] = win[(i + nx / 2) % nx];
  } else {
    w = options.window_values;
  }
  if (w.empty()) return sp;
  sp.weights = w;
  if (real_input) {
    for (int64_t k = 1; k < nx; ++k) sp.weights[k] = 0.5 * (w[k] + w[nx - k]);
  }
  return sp;
}

}  // namespace
}  // namespace internal

DType ResampleResultDType(DType x) { return internal::IsInexact(x) ? x : DType::kFloat64; }
DType DecimateResultDType(DType x) { return ResampleResultDType(x); }

absl::Status ValidateResample(const HostArray& x, const ResampleOptions& options,
                              const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(internal::ValidateSignal(x, options.axis));
  const internal::AxisGeometry g = internal::GeometryOf(x, options.axis);
  constexpr int64_t kMaxLen = (int64_t{1} << 31) - 1;
  if (options.num < 1 || options.num > kMaxLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("num must be in [1, ", kMaxLen, "], got ", options.num));
  }
  if (g.len < 1 || g.len > kMaxLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("x.shape ", ShapeString(x.shape()), " must have 1 to ", kMaxLen,
                     " samples along axis ", options.axis, " (SciPy divides by zero for 0)"));
  }
  if (options.window.has_value() && !options.window_values.empty()) {
    return absl::InvalidArgumentError("window: give a window name or its values, not both");
  }
  if (options.window.has_value()) {
    if (g.len + 1 > kMaxLen) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window: a named window needs at most ", kMaxLen - 1, " samples along axis, got ",
          g.len));
    }
    FRESNEL_RETURN_IF_ERROR(ValidateWindow(*options.window, g.len + 1));
  }
  if (!options.window_values.empty()) {
    if (static_cast<int64_t>(options.window_values.size()) != g.len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window_values: ", options.window_values.size(),
          " values, but the window must have one per sample along axis (", g.len, ")"));
    }
    for (size_t i = 0; i < options.window_values.size(); ++i) {
      if (!std::isfinite(options.window_values[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("window_values[", i, "] is not finite (", options.window_values[i], ")"));
      }
    }
  }
  return internal::CheckOutputSize(g.channels(), std::max(options.num, g.len), x, limits);
}

absl::StatusOr<HostArray> Resample(const Device& device, const HostArray& x,
                                   const ResampleOptions& options, StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(ValidateResample(x, options));
  if (times != nullptr) *times = StageTimes{};
  const internal::AxisGeometry g = internal::GeometryOf(x, options.axis);
  internal::WorkSignal w = internal::ToWork(x, g, ResampleResultDType(x.dtype()));
  FRESNEL_ASSIGN_OR_RETURN(
      const internal::ResampleSpectrum spectrum,
      internal::SpectrumOf(options, g.len, !internal::IsComplex(w.view.dtype)));
  HostArray y;
  if (device.kind == DeviceKind::kCpu) {
    auto t0 = std::chrono::steady_clock::now();
    FRESNEL_ASSIGN_OR_RETURN(y, internal::ResampleCpu(w.view, options.num, spectrum));
    if (times != nullptr) {
      times->compute_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } else {
#if defined(FRESNEL_WITH_CUDA)
    FRESNEL_ASSIGN_OR_RETURN(y, internal::ResampleCuda(device, w.view, options.num, spectrum, times));
#else
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device.Name(), ": this build has no CUDA support"));
#endif
  }
  return internal::FromWork(std::move(y), x, g);
}

absl::Status ValidateDecimate(const HostArray& x, const DecimateOptions& options,
                              const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(internal::ValidateRate(options.q, "q", limits));
  if (options.q < 2) {
    // firwin(n + 1, 1 / q) needs a cutoff below Nyquist (SciPy raises too).
    return absl::InvalidArgumentError(absl::StrCat("q must be >= 2, got ", options.q));
  }
  if (options.n < 0 || options.n + int64_t{1} > limits.max_taps) {
    return absl::InvalidArgumentError(absl::StrCat("n must be in [0, ", limits.max_taps - 1,
                                                   "] (0: 20 * q), got ", options.n));
  }
  if (options.n == 0 && 20 * int64_t{options.q} + 1 > limits.max_taps) {
    return absl::InvalidArgumentError(absl::StrCat("q = ", options.q, " needs a filter of ",
                                                   20 * int64_t{options.q} + 1,
                                                   " taps, more than max_taps ", limits.max_taps));
  }
  ResamplePolyOptions r;
  r.up = 1;
  r.down = options.q;
  r.axis = options.axis;
  r.taps = {1.0};
  return ValidateResamplePoly(x, r, limits);
}

absl::StatusOr<HostArray> Decimate(const Device& device, const HostArray& x,
                                   const DecimateOptions& options, StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(ValidateDecimate(x, options));
  const DType out = DecimateResultDType(x.dtype());
  const DType tap_dtype = internal::RealOf(out);
  FRESNEL_ASSIGN_OR_RETURN(std::vector<double> h,
                           Firwin(static_cast<int>(DecimateNumtaps(options)), 1.0 / options.q,
                                  WindowSpec{Window::kHamming}));
  // SciPy: b = np.asarray(b, dtype=result_type).
  if (tap_dtype == DType::kFloat32) {
    for (double& v : h) v = static_cast<double>(static_cast<float>(v));
  }
  if (options.zero_phase) {
    ResamplePolyOptions r;
    r.up = 1;
    r.down = options.q;
    r.taps = std::move(h);
    r.taps_dtype = tap_dtype;
    r.axis = options.axis;
    return ResamplePoly(device, x, r, times);
  }
  UpfirdnOptions u;
  u.up = 1;
  u.down = options.q;
  u.taps_dtype = tap_dtype;
  u.axis = options.axis;
  FRESNEL_ASSIGN_OR_RETURN(HostArray full, Upfirdn(device, h, x, u, times));
  // Keep the first ceil(n_in / q) samples along the axis.
  const internal::AxisGeometry g = internal::GeometryOf(x, options.axis);
  const int64_t n_out = DecimateOutputLength(g.len, options.q);
  const internal::AxisGeometry gf = internal::GeometryOf(full, options.axis);
  internal::WorkSignal w = internal::ToWork(full, gf, full.dtype());
  HostArray y(full.dtype(), {gf.channels(), n_out});
  const size_t es = DTypeSize(full.dtype());
  for (int64_t c = 0; c < gf.channels(); ++c) {
    std::memcpy(static_cast<char*>(y.raw()) + c * n_out * static_cast<int64_t>(es),
                static_cast<const char*>(w.view.data) + c * gf.len * static_cast<int64_t>(es),
                static_cast<size_t>(n_out) * es);
  }
  return internal::FromWork(std::move(y), x, g);
}

}  // namespace fresnel::interp
