// scipy.signal.firwin for a single low-pass cutoff (pass_zero=True, scale=True) with the
// symmetric (fftbins=False) windows of scipy.signal.get_window.
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

std::vector<double> MakeWindow(int m, const WindowSpec& spec) {
  switch (spec.type) {
    case Window::kBoxcar: return std::vector<double>(static_cast<size_t>(m), 1.0);
    case Window::kHamming: return GeneralCosine(m, {0.54, 0.46});
    case Window::kHann: return GeneralCosine(m, {0.5, 0.5});
    case Window::kBlackman: return GeneralCosine(m, {0.42, 0.50, 0.08});
    case Window::kKaiser: return KaiserWindow(m, spec.kaiser_beta);
  }
  return {};
}

}  // namespace

absl::StatusOr<std::vector<double>> Firwin(int numtaps, double cutoff, WindowSpec window) {
  if (numtaps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("numtaps must be >= 1, got ", numtaps));
  }
  if (!(cutoff > 0 && cutoff < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cutoff must be in (0, 1) (relative to Nyquist), got ", cutoff));
  }
  switch (window.type) {
    case Window::kBoxcar:
    case Window::kHamming:
    case Window::kHann:
    case Window::kBlackman:
      break;
    case Window::kKaiser:
      if (!std::isfinite(window.kaiser_beta) || std::fabs(window.kaiser_beta) > 700) {
        return absl::InvalidArgumentError(absl::StrCat(
            "window: kaiser_beta must be finite and at most 700 in magnitude, got ",
            window.kaiser_beta));
      }
      break;
    default:
      return absl::InvalidArgumentError("window: unknown window type");
  }
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

}  // namespace fresnel::interp
