// Unweighted least-squares unwrapping on the CPU (Ghiglia & Romero 1994), in double precision:
//   rho = div(wrapped gradient)   (Neumann boundary: gradients leaving the image are 0)
//   phi = IDCT2( DCT2(rho) / (2 cos(pi m / rows) + 2 cos(pi n / cols) - 4) ),  phi(0,0 mode) = 0
// The type-II DCT and its inverse are computed with Makhoul's N-point FFT reordering, one
// dimension at a time, on kissfft's header-only double-precision FFT.
#include <cmath>
#include <complex>
#include <cstdint>
#include <vector>

#include <kissfft/kissfft.hh>

#include "fresnel/core/status.h"
#include "unwrap/unwrap_common.h"
#include "unwrap/unwrap_internal.h"

namespace fresnel::unwrap::internal {
namespace {

using cpx = std::complex<double>;

// Unnormalised DCT-II, X[k] = sum_n x[n] cos(pi k (2n + 1) / (2N)), and its exact inverse, over a
// strided vector of length N.
class Dct1d {
 public:
  explicit Dct1d(int n) : n_(n), fwd_(n, false), inv_(n, true), v_(n), w_(n), twiddle_(n) {
    for (int k = 0; k < n; ++k) twiddle_[k] = std::polar(1.0, -M_PI * k / (2.0 * n));
  }

  // Makhoul's permutation: v[m] = x[2m] for the first ceil(N/2) entries, then the odd samples
  // backwards.
  int Source(int m) const { return m < (n_ + 1) / 2 ? 2 * m : 2 * (n_ - 1 - m) + 1; }

  void Forward(double* x, int64_t stride) {
    for (int m = 0; m < n_; ++m) v_[m] = cpx(x[Source(m) * stride], 0.0);
    fwd_.transform(v_.data(), w_.data());
    for (int k = 0; k < n_; ++k) x[k * stride] = (w_[k] * twiddle_[k]).real();
  }

  // V[k] = e^{i pi k / 2N} (X[k] - i X[N - k]) (X[N] = 0), v = IFFT(V) / N, x[Source(m)] = v[m].
  void Inverse(double* x, int64_t stride) {
    v_[0] = cpx(x[0], 0.0);
    for (int k = 1; k < n_; ++k) {
      v_[k] = std::conj(twiddle_[k]) * cpx(x[k * stride], -x[(n_ - k) * stride]);
    }
    inv_.transform(v_.data(), w_.data());
    for (int m = 0; m < n_; ++m) x[Source(m) * stride] = w_[m].real() / n_;
  }

 private:
  int n_;
  kissfft<double> fwd_, inv_;
  std::vector<cpx> v_, w_;
  std::vector<cpx> twiddle_;
};

template <class T>
absl::StatusOr<LeastSquaresResult> Solve(const HostArray& phase,
                                         const LeastSquaresOptions& options) {
  const int rows = static_cast<int>(phase.dim(0)), cols = static_cast<int>(phase.dim(1));
  const int64_t n = phase.size();
  const T* psi = phase.data<T>();
  const uint8_t* mask = options.mask != nullptr ? options.mask->data<uint8_t>() : nullptr;
  auto masked = [mask](int64_t i) { return mask != nullptr && mask[i] != 0; };
  // Wrapped gradient of the step a -> b, 0 when either end is masked.
  auto grad = [&](int64_t a, int64_t b) {
    if (masked(a) || masked(b)) return 0.0;
    return (static_cast<double>(psi[b]) - static_cast<double>(psi[a])) -
           kTwoPi * EdgeWrap(psi[a], psi[b]);
  };

  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares, 0.0));
  std::vector<double> f(n);
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      const int64_t p = static_cast<int64_t>(y) * cols + x;
      double r = 0;
      if (x + 1 < cols) r += grad(p, p + 1);
      if (x > 0) r -= grad(p - 1, p);
      if (y + 1 < rows) r += grad(p, p + cols);
      if (y > 0) r -= grad(p - cols, p);
      f[p] = r;
    }
  }

  Dct1d row_dct(cols), col_dct(rows);
  for (int y = 0; y < rows; ++y) row_dct.Forward(&f[static_cast<int64_t>(y) * cols], 1);
  for (int x = 0; x < cols; ++x) col_dct.Forward(&f[x], cols);
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares, 0.4));
  std::vector<double> cy(rows), cx(cols);
  for (int m = 0; m < rows; ++m) cy[m] = 2.0 * std::cos(M_PI * m / rows);
  for (int k = 0; k < cols; ++k) cx[k] = 2.0 * std::cos(M_PI * k / cols);
  for (int m = 0; m < rows; ++m) {
    for (int k = 0; k < cols; ++k) {
      double& v = f[static_cast<int64_t>(m) * cols + k];
      v = (m == 0 && k == 0) ? 0.0 : v / (cy[m] + cx[k] - 4.0);
    }
  }
  for (int x = 0; x < cols; ++x) col_dct.Inverse(&f[x], cols);
  for (int y = 0; y < rows; ++y) row_dct.Inverse(&f[static_cast<int64_t>(y) * cols], 1);
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares, 0.9));

  LeastSquaresResult result;
  result.unwrapped = HostArray(phase.dtype(), phase.shape());
  T* out = result.unwrapped.data<T>();
  for (int64_t p = 0; p < n; ++p) {
    if (masked(p)) {
      out[p] = T(0);
    } else if (options.congruent) {
      double turns = std::nearbyint((f[p] - static_cast<double>(psi[p])) * kInvTwoPi);
      out[p] = AddTurns(psi[p], static_cast<int>(turns));
    } else {
      out[p] = static_cast<T>(f[p]);
    }
  }
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kDone, 1.0));
  return result;
}

}  // namespace

absl::StatusOr<LeastSquaresResult> UnwrapLeastSquaresCpu(const HostArray& phase,
                                                         const LeastSquaresOptions& options) {
  FRESNEL_RETURN_IF_ERROR(CheckPhaseValues(phase, options.mask));
  if (phase.dtype() == DType::kFloat32) return Solve<float>(phase, options);
  return Solve<double>(phase, options);
}

}  // namespace fresnel::unwrap::internal
