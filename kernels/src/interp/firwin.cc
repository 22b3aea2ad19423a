// scipy.signal.firwin for a single low-pass cutoff (pass_zero=True, scale=True) with the
// symmetric (fftbins=False) windows of scipy.signal.get_window.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/interp/interp.h"

namespace fresnel::interp {
namespace {

constexpr double kPi = 3.14159265358979323846;

double Sinc(double x) {
  if (x == 0) return 1.0;
  double px = kPi * x;
  return std::sin(px) / px;
}

// scipy.signal.windows.general_cosine(M, a, sym=True): sum_k a_k cos(k * fac), fac running
// linearly from -pi to pi over the M points.
std::vector<double> GeneralCosine(int m, std::initializer_list<double> a) {
  std::vector<double> w(static_cast<size_t>(m), 0.0);
  if (m == 1) {
    w[0] = 1.0;
    return w;
  }
  for (int i = 0; i < m; ++i) {
    double fac = -kPi + 2.0 * kPi * i / (m - 1);
    double v = 0;
    int k = 0;
    for (double ak : a) {
      v += ak * std::cos(k * fac);
      ++k;
    }
    w[i] = v;
  }
  return w;
}

// I0, the modified Bessel function of the first kind of order 0, by its power series
// sum_k ((x/2)^k / k!)^2: every term is positive, so it converges to full double precision for
// the |x| <= ~700 a Kaiser window can use without overflow.
double BesselI0(double x) {
  double q = 0.25 * x * x;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 1000; ++k) {
    term *= q / (static_cast<double>(k) * k);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

std::vector<double> KaiserWindow(int m, double beta) {
  std::vector<double> w(static_cast<size_t>(m), 1.0);
  if (m == 1) return w;
  double alpha = 0.5 * (m - 1);
  double denom = BesselI0(beta);
  for (int i = 0; i < m; ++i) {
    double r = (i - alpha) / alpha;
    double arg = 1.0 - r * r;
    w[i] = BesselI0(beta * std::sqrt(arg < 0 ? 0 : arg)) / denom;
  }
  return w;
}

double Param(const WindowSpec& spec, size_t i, double fallback) {
  return spec.params.size() > i ? spec.params[i] : fallback;
}

// scipy.signal.windows.chebwin(M, at, sym=True): the Dolph-Chebyshev window, as the real part of
// the DFT of the Chebyshev polynomial samples p[k]; only the ~M/2 outputs used are computed,
// directly, from a table of cos(2 pi r / 2M).
std::vector<double> Chebwin(int m, double at) {
  std::vector<double> w(static_cast<size_t>(m), 1.0);
  if (m == 1) return w;
  const double order = m - 1.0;
  const double beta = std::cosh(std::acosh(std::pow(10.0, std::fabs(at) / 20.0)) / order);
  std::vector<double> p(static_cast<size_t>(m));
  for (int k = 0; k < m; ++k) {
    const double x = beta * std::cos(kPi * k / m);
    if (x > 1) {
      p[k] = std::cosh(order * std::acosh(x));
    } else if (x < -1) {
      p[k] = (2 * (m % 2) - 1) * std::cosh(order * std::acosh(-x));
    } else {
      p[k] = std::cos(order * std::acos(x));
    }
  }
  const int64_t two_m = 2 * static_cast<int64_t>(m);
  std::vector<double> table(static_cast<size_t>(two_m));
  for (int64_t r = 0; r < two_m; ++r) table[r] = std::cos(kPi * static_cast<double>(r) / m);
  // Odd M: W[j] = sum_k p[k] cos(2 pi j k / M). Even M: p[k] is first multiplied by
  // exp(i pi k / M), so W[j] = sum_k p[k] cos(pi k (1 - 2j) / M) (real part).
  auto dft = [&](int64_t j) {
    const int64_t step = m % 2 ? 2 * j : ((1 - 2 * j) % two_m + two_m) % two_m;
    double acc = 0;
    int64_t r = 0;
    for (int k = 0; k < m; ++k) {
      acc += p[k] * table[r];
      r += step;
      if (r >= two_m) r -= two_m;
    }
    return acc;
  };
  if (m % 2) {
    const int n = (m + 1) / 2;
    std::vector<double> half(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) half[j] = dft(j);
    // w = concat(half[n-1 .. 1], half)
    for (int i = 0; i < n - 1; ++i) w[i] = half[n - 1 - i];
    for (int j = 0; j < n; ++j) w[n - 1 + j] = half[j];
  } else {
    const int n = m / 2 + 1;
    std::vector<double> half(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) half[j] = dft(j);
    // w = concat(half[n-1 .. 1], half[1 .. n-1])
    for (int i = 0; i < n - 1; ++i) w[i] = half[n - 1 - i];
    for (int j = 1; j < n; ++j) w[n - 2 + j] = half[j];
  }
  double mx = *std::max_element(w.begin(), w.end());
  for (double& v : w) v /= mx;
  return w;
}

std::vector<double> MakeWindow(int m, const WindowSpec& spec) {
  std::vector<double> w(static_cast<size_t>(m), 1.0);
  if (m == 1 && spec.type != Window::kKaiser) return w;  // SciPy's _len_guards
  const double half = (m - 1) / 2.0;
  switch (spec.type) {
    case Window::kBoxcar: return w;
    case Window::kHamming: return GeneralCosine(m, {0.54, 0.46});
    case Window::kHann: return GeneralCosine(m, {0.5, 0.5});
    case Window::kBlackman: return GeneralCosine(m, {0.42, 0.50, 0.08});
    case Window::kKaiser: return KaiserWindow(m, spec.kaiser_beta);
    case Window::kFlattop:
      return GeneralCosine(m, {0.21557895, 0.41663158, 0.277263158, 0.083578947, 0.006947368});
    case Window::kBlackmanHarris: return GeneralCosine(m, {0.35875, 0.48829, 0.14128, 0.01168});
    case Window::kNuttall: return GeneralCosine(m, {0.3635819, 0.4891775, 0.1365995, 0.0106411});
    case Window::kTriang:
      for (int i = 0; i < m; ++i) {
        // n = min(i, m - 1 - i) + 1 on each half: (2n - 1) / M (even M) or 2n / (M + 1) (odd M).
        const int n = std::min(i, m - 1 - i) + 1;
        w[i] = m % 2 == 0 ? (2.0 * n - 1.0) / m : 2.0 * n / (m + 1.0);
      }
      return w;
    case Window::kBartlett:
      for (int i = 0; i < m; ++i) {
        w[i] = i <= half ? 2.0 * i / (m - 1) : 2.0 - 2.0 * i / (m - 1);
      }
      return w;
    case Window::kParzen:
      for (int i = 0; i < m; ++i) {
        const double a = std::fabs(-half + i);
        const double r = a / (m / 2.0);
        w[i] = a <= (m - 1) / 4.0 ? 1 - 6 * r * r + 6 * r * r * r : 2 * std::pow(1 - r, 3);
      }
      return w;
    case Window::kBohman:
      w[0] = w[m - 1] = 0;
      for (int i = 1; i < m - 1; ++i) {
        const double fac = std::fabs(-1.0 + 2.0 * i / (m - 1));
        w[i] = (1 - fac) * std::cos(kPi * fac) + std::sin(kPi * fac) / kPi;
      }
      return w;
    case Window::kBartHann:
      for (int i = 0; i < m; ++i) {
        const double fac = std::fabs(static_cast<double>(i) / (m - 1) - 0.5);
        w[i] = 0.62 - 0.48 * fac + 0.38 * std::cos(2 * kPi * fac);
      }
      return w;
    case Window::kCosine:
      for (int i = 0; i < m; ++i) w[i] = std::sin(kPi / m * (i + 0.5));
      return w;
    case Window::kLanczos:
      for (int i = 0; i < m; ++i) {
        // sinc(2 i / (M - 1) - 1), mirrored so that the window is exactly symmetric.
        const int j = std::max(i, m - 1 - i);
        w[i] = Sinc(2.0 * j / (m - 1) - 1.0);
      }
      if (m % 2) w[m / 2] = 1.0;
      return w;
    case Window::kGaussian: {
      const double sd = Param(spec, 0, 1.0);
      for (int i = 0; i < m; ++i) {
        const double n = i - half;
        w[i] = std::exp(-n * n / (2 * sd * sd));
      }
      return w;
    }
    case Window::kGeneralGaussian: {
      const double p = Param(spec, 0, 1.0), sig = Param(spec, 1, 1.0);
      for (int i = 0; i < m; ++i) {
        w[i] = std::exp(-0.5 * std::pow(std::fabs((i - half) / sig), 2 * p));
      }
      return w;
    }
    case Window::kTukey: {
      const double alpha = Param(spec, 0, 0.5);
      if (alpha <= 0) return w;
      if (alpha >= 1) return GeneralCosine(m, {0.5, 0.5});
      const int width = static_cast<int>(std::floor(alpha * (m - 1) / 2.0));
      for (int i = 0; i < m; ++i) {
        if (i <= width) {
          w[i] = 0.5 * (1 + std::cos(kPi * (-1 + 2.0 * i / alpha / (m - 1))));
        } else if (i >= m - width - 1) {
          w[i] = 0.5 * (1 + std::cos(kPi * (-2.0 / alpha + 1 + 2.0 * i / alpha / (m - 1))));
        }
      }
      return w;
    }
    case Window::kExponential: {
      const double tau = Param(spec, 0, 1.0);
      for (int i = 0; i < m; ++i) w[i] = std::exp(-std::fabs(i - half) / tau);
      return w;
    }
    case Window::kChebwin: return Chebwin(m, Param(spec, 0, 100.0));
  }
  return {};
}

struct NamedWindow {
  const char* name;
  Window type;
  size_t min_params, max_params;
};
constexpr NamedWindow kWindowNames[] = {
    {"boxcar", Window::kBoxcar, 0, 0},
    {"hamming", Window::kHamming, 0, 0},
    {"hann", Window::kHann, 0, 0},
    {"blackman", Window::kBlackman, 0, 0},
    {"kaiser", Window::kKaiser, 1, 1},
    {"triang", Window::kTriang, 0, 0},
    {"bartlett", Window::kBartlett, 0, 0},
    {"flattop", Window::kFlattop, 0, 0},
    {"parzen", Window::kParzen, 0, 0},
    {"bohman", Window::kBohman, 0, 0},
    {"blackmanharris", Window::kBlackmanHarris, 0, 0},
    {"nuttall", Window::kNuttall, 0, 0},
    {"barthann", Window::kBartHann, 0, 0},
    {"cosine", Window::kCosine, 0, 0},
    {"lanczos", Window::kLanczos, 0, 0},
    {"gaussian", Window::kGaussian, 1, 1},
    {"general_gaussian", Window::kGeneralGaussian, 2, 2},
    {"tukey", Window::kTukey, 0, 1},
    {"exponential", Window::kExponential, 0, 0},
    {"chebwin", Window::kChebwin, 1, 1},
};

}  // namespace

absl::StatusOr<std::vector<double>> Firwin(int numtaps, double cutoff, WindowSpec window) {
  if (numtaps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("numtaps must be >= 1, got ", numtaps));
  }
  if (!(cutoff > 0 && cutoff < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cutoff must be in (0, 1) (relative to Nyquist), got ", cutoff));
  }
  if (absl::Status st = ValidateWindow(window, numtaps); !st.ok()) return st;
  // h[i] = c * sinc(c * (i - alpha)) * w[i], then scaled to unit gain at DC (scale=True with
  // pass_zero=True: the first passband starts at 0, so the scale frequency is 0).
  double alpha = 0.5 * (numtaps - 1);
  std::vector<double> w = MakeWindow(numtaps, window);
  std::vector<double> h(static_cast<size_t>(numtaps));
  double sum = 0;
  for (int i = 0; i < numtaps; ++i) {
    double m = i - alpha;
    h[i] = cutoff * Sinc(cutoff * m) * w[i];
    sum += h[i];
  }
  if (sum == 0 || !std::isfinite(sum)) {
    return absl::InvalidArgumentError("window: the windowed filter sums to zero; cannot scale");
  }
  for (double& v : h) v /= sum;
  return h;
}

absl::StatusOr<std::vector<double>> GetWindow(const WindowSpec& window, int64_t m,
                                              bool periodic) {
  constexpr int64_t kMaxLen = (int64_t{1} << 31) - 2;  // m + 1 points must fit an int
  if (m < 1 || m > kMaxLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("window: length must be in [1, ", kMaxLen, "], got ", m));
  }
  FRESNEL_RETURN_IF_ERROR(ValidateWindow(window, periodic ? m + 1 : m));
  // SciPy's _len_guards: one point is [1] whatever the window; else _extend / _truncate.
  if (m == 1) return std::vector<double>{1.0};
  std::vector<double> w = MakeWindow(static_cast<int>(periodic ? m + 1 : m), window);
  if (periodic) w.pop_back();
  return w;
}

absl::StatusOr<WindowSpec> WindowFromName(const std::string& name,
                                          const std::vector<double>& params,
                                          const std::string& field) {
  std::string names;
  for (const NamedWindow& w : kWindowNames) {
    if (name == w.name) {
      if (params.size() < w.min_params || params.size() > w.max_params) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": '", name, "' takes ", w.min_params,
                         w.max_params > w.min_params ? absl::StrCat(" to ", w.max_params) : "",
                         " parameter(s), got ", params.size()));
      }
      WindowSpec spec;
      spec.type = w.type;
      if (w.type == Window::kKaiser) {
        spec.kaiser_beta = params[0];
      } else {
        spec.params = params;
      }
      return spec;
    }
    absl::StrAppend(&names, names.empty() ? "" : ", ", w.name);
  }
  // Echo a bounded prefix: a long name would make the status too large for its trailer.
  constexpr size_t kEcho = 40;
  const std::string shown =
      name.size() <= kEcho ? name
                           : absl::StrCat(name.substr(0, kEcho), "... (", name.size(), " bytes)");
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown window '", shown, "' (", names, ")"));
}

absl::Status ValidateWindow(const WindowSpec& window, int64_t numtaps) {
  bool known = false;
  for (const NamedWindow& w : kWindowNames) known = known || w.type == window.type;
  if (!known) return absl::InvalidArgumentError("window: unknown window type");
  if (window.type == Window::kKaiser &&
      (!std::isfinite(window.kaiser_beta) || std::fabs(window.kaiser_beta) > 700)) {
    return absl::InvalidArgumentError(
        absl::StrCat("window: kaiser_beta must be finite and at most 700 in magnitude, got ",
                     window.kaiser_beta));
  }
  for (size_t i = 0; i < window.params.size(); ++i) {
    if (!std::isfinite(window.params[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("window.params[", i, "] is not finite (", window.params[i], ")"));
    }
  }
  const auto positive = [&](size_t i, const char* what) -> absl::Status {
    if (window.params.size() > i && !(window.params[i] > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("window.params[", i, "] (", what,
                                                     ") must be > 0, got ", window.params[i]));
    }
    return absl::OkStatus();
  };
  switch (window.type) {
    case Window::kGaussian: return positive(0, "std");
    case Window::kGeneralGaussian: {
      if (absl::Status st = positive(0, "p"); !st.ok()) return st;
      return positive(1, "sig");
    }
    case Window::kExponential: return positive(0, "tau");
    case Window::kChebwin:
      if (numtaps > kMaxChebwinTaps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "window: chebwin is limited to ", kMaxChebwinTaps, " taps, the filter needs ",
            numtaps));
      }
      return absl::OkStatus();
    default: return absl::OkStatus();
  }
}

}  // namespace fresnel::interp
