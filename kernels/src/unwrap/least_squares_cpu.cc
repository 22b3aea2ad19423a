// Least-squares unwrapping on the CPU (Ghiglia & Romero 1994), in double precision, the oracle of
// the CUDA path. Unweighted:
//   rho = div(wrapped gradient)   (Neumann boundary: gradients leaving the image are 0)
//   phi = IDCT2( DCT2(rho) / (2 cos(pi m / rows) + 2 cos(pi n / cols) - 4) ),  phi(0,0 mode) = 0
// The type-II DCT and its inverse are computed with Makhoul's N-point FFT reordering, one
// dimension at a time, on kissfft's header-only double-precision FFT (rows and columns in parallel
// with TBB; each 1-D transform is serial, so the result does not depend on the thread count).
// Weighted (Ghiglia & Pritt 5.3): the normal equations Q(phi) = b, with
//   Q(phi)(p) = sum over the 4 neighbours q of p of w(p,q) (phi(q) - phi(p))
//   b(p)      = sum over the 4 neighbours q of p of w(p,q) g(p -> q)   (g the wrapped gradient)
// and edge weights w(p,q) = min(w(p), w(q))^2, are solved by preconditioned conjugate gradients
// with the unweighted Poisson solve above as the preconditioner. Q and that solve are both
// negative semidefinite, so CG runs on them unchanged (alpha and beta are ratios of two negative
// numbers). Dot products use TBB's deterministic reduction: the result is reproducible.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <vector>

#include <kissfft/kissfft.hh>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

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

// Solves lap(phi) = f in place (Neumann boundary, zero-mean phi). Rows and columns run in parallel,
// each chunk with its own transform objects.
void PoissonSolve(std::vector<double>& f, int rows, int cols) {
  constexpr int kGrain = 16;
  auto each_row = [&](bool forward) {
    tbb::parallel_for(tbb::blocked_range<int>(0, rows, kGrain), [&](const tbb::blocked_range<int>& r) {
      Dct1d dct(cols);
      for (int y = r.begin(); y < r.end(); ++y) {
        double* row = &f[static_cast<int64_t>(y) * cols];
        forward ? dct.Forward(row, 1) : dct.Inverse(row, 1);
      }
    });
  };
  auto each_col = [&](bool forward) {
    tbb::parallel_for(tbb::blocked_range<int>(0, cols, kGrain), [&](const tbb::blocked_range<int>& r) {
      Dct1d dct(rows);
      for (int x = r.begin(); x < r.end(); ++x) {
        forward ? dct.Forward(&f[x], cols) : dct.Inverse(&f[x], cols);
      }
    });
  };
  each_row(true);
  each_col(true);
  std::vector<double> cy(rows), cx(cols);
  for (int m = 0; m < rows; ++m) cy[m] = 2.0 * std::cos(M_PI * m / rows);
  for (int k = 0; k < cols; ++k) cx[k] = 2.0 * std::cos(M_PI * k / cols);
  tbb::parallel_for(tbb::blocked_range<int>(0, rows, kGrain), [&](const tbb::blocked_range<int>& r) {
    for (int m = r.begin(); m < r.end(); ++m) {
      for (int k = 0; k < cols; ++k) {
        double& v = f[static_cast<int64_t>(m) * cols + k];
        v = (m == 0 && k == 0) ? 0.0 : v / (cy[m] + cx[k] - 4.0);
      }
    }
  });
  each_col(false);
  each_row(false);
}

// Runs fn(begin, end) over [0, n) in parallel.
template <class Fn>
void ForPixels(int64_t n, Fn fn) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1 << 14),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
}

// Sum of a[i] * b[i], in a fixed order (deterministic reduction).
double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<int64_t>(0, static_cast<int64_t>(a.size()), 1 << 14), 0.0,
      [&](const tbb::blocked_range<int64_t>& r, double acc) {
        for (int64_t i = r.begin(); i < r.end(); ++i) acc += a[i] * b[i];
        return acc;
      },
      [](double x, double y) { return x + y; });
}

// Edge weights min(w(p), w(q))^2 of the step to the right (wx) and down (wy) from each pixel; 0 on
// steps that leave the image.
template <class W>
void EdgeWeights(const W* weights, const uint8_t* mask, int rows, int cols,
                 std::vector<double>& wx, std::vector<double>& wy) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  auto w = [&](int64_t i) {
    if (mask != nullptr && mask[i] != 0) return 0.0;
    return weights != nullptr ? static_cast<double>(weights[i]) : 1.0;
  };
  wx.assign(n, 0.0);
  wy.assign(n, 0.0);
  ForPixels(n, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int x = static_cast<int>(p % cols);
      const int y = static_cast<int>(p / cols);
      const double wp = w(p);
      if (x + 1 < cols) wx[p] = std::pow(std::min(wp, w(p + 1)), 2);
      if (y + 1 < rows) wy[p] = std::pow(std::min(wp, w(p + cols)), 2);
    }
  });
}

// out = Q(v): the weighted Laplacian.
void ApplyQ(const std::vector<double>& v, const std::vector<double>& wx,
            const std::vector<double>& wy, int cols, std::vector<double>& out) {
  const int64_t n = static_cast<int64_t>(v.size());
  ForPixels(n, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int x = static_cast<int>(p % cols);
      double q = 0;
      if (x + 1 < cols) q += wx[p] * (v[p + 1] - v[p]);
      if (x > 0) q -= wx[p - 1] * (v[p] - v[p - 1]);
      if (p + cols < n) q += wy[p] * (v[p + cols] - v[p]);
      if (p >= cols) q -= wy[p - cols] * (v[p] - v[p - cols]);
      out[p] = q;
    }
  });
}

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
  const bool weighted = RunsWeighted(options);
  std::vector<double> wx, wy;
  if (weighted) {
    if (options.weights == nullptr) {
      EdgeWeights<float>(nullptr, mask, rows, cols, wx, wy);
    } else if (options.weights->dtype() == DType::kFloat32) {
      EdgeWeights(options.weights->data<float>(), mask, rows, cols, wx, wy);
    } else {
      EdgeWeights(options.weights->data<double>(), mask, rows, cols, wx, wy);
    }
  }
  // Weight of the step right (dir 0) or down (dir 1) from p; 1 when unweighted.
  auto ew = [&](int64_t p, int dir) { return weighted ? (dir == 0 ? wx[p] : wy[p]) : 1.0; };

  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares, 0.0));
  std::vector<double> f(n);
  ForPixels(n, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int x = static_cast<int>(p % cols), y = static_cast<int>(p / cols);
      double r = 0;
      if (x + 1 < cols) r += ew(p, 0) * grad(p, p + 1);
      if (x > 0) r -= ew(p - 1, 0) * grad(p - 1, p);
      if (y + 1 < rows) r += ew(p, 1) * grad(p, p + cols);
      if (y > 0) r -= ew(p - cols, 1) * grad(p - cols, p);
      f[p] = r;
    }
  });

  LeastSquaresResult result;
  if (!weighted) {
    PoissonSolve(f, rows, cols);
  } else {
    // PCG (Ghiglia & Pritt, algorithm 5.3): x = 0, r = b, z = P^-1 r, p = z.
    std::vector<double> x(n, 0.0), r = f, z = f, p(n), q(n);
    const double b_norm = std::sqrt(Dot(r, r));
    double res = b_norm > 0 ? 1.0 : 0.0;
    int k = 0;
    if (b_norm > 0) {
      PoissonSolve(z, rows, cols);
      p = z;
      double rz = Dot(r, z);
      while (k < options.max_iterations) {
        ApplyQ(p, wx, wy, cols, q);
        const double pq = Dot(p, q);
        if (pq == 0.0 || rz == 0.0) break;
        const double alpha = rz / pq;
        ForPixels(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
          }
        });
        ++k;
        res = std::sqrt(Dot(r, r)) / b_norm;
        FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares,
                                       0.9 * k / options.max_iterations));
        if (res <= options.tolerance) break;
        z = r;
        PoissonSolve(z, rows, cols);
        const double rz_next = Dot(r, z);
        const double beta = rz_next / rz;
        rz = rz_next;
        ForPixels(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) p[i] = z[i] + beta * p[i];
        });
      }
    }
    f = std::move(x);
    result.iterations = k;
    result.residual = res;
  }
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares, 0.9));

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
