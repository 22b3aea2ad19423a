// The CPU back end of the window primitive (see interp_internal.h): polyphase, accumulating in
// double, parallel over (channel, block of outputs) with TBB. This is the test oracle. Real
// signals take RunCpuReal (vectorised across periods), complex ones RunCpu; both sum each
// output's products in the same order (m ascending), so they give the same values.
#include <algorithm>
#include <complex>
#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "interp/interp_internal.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

namespace fresnel::interp::internal {
namespace {

// Outputs per task: large enough to amortise scheduling, small enough to balance short signals.
constexpr int64_t kBlock = 2048;

template <class T, class Acc>
void RunCpu(const Polyphase& filter, const HostSignalView& x, int64_t x_first, double cval,
            int64_t out_first, int64_t out_count, T* y) {
  const std::vector<double> htf = filter.PhaseMajorTaps();
  const int64_t p = filter.TapsPerPhase();
  const int64_t up = filter.up, down = filter.down;
  const int64_t blocks = (out_count + kBlock - 1) / kBlock;
  const int64_t x_end = x_first + x.len;  // s[i] = x[i - x_first] for i in [x_first, x_end)
  const Acc fill = static_cast<Acc>(cval);

  tbb::parallel_for(tbb::blocked_range<int64_t>(0, x.channels * blocks),
                    [&](const tbb::blocked_range<int64_t>& range) {
    for (int64_t task = range.begin(); task != range.end(); ++task) {
      const int64_t c = task / blocks;
      const int64_t k0 = out_first + (task % blocks) * kBlock;
      const int64_t k1 = std::min(k0 + kBlock, out_first + out_count);
      const T* xc = static_cast<const T*>(x.data) + c * x.stride;
      T* yc = y + c * out_count - out_first;
      // q = floor(k*down/up) and t = k*down - q*up, advanced incrementally.
      int64_t q = k0 * down / up;
      int64_t t = k0 * down - q * up;
      for (int64_t k = k0; k < k1; ++k) {
        const double* h = htf.data() + t * p;
        // s[q - m] lies in the window for m in [m_lo, m_hi]; cval elsewhere. The three loops
        // keep m ascending, so the sum does not depend on where the window starts.
        const int64_t m_lo = std::clamp<int64_t>(q - x_end + 1, 0, p);
        const int64_t m_hi = std::clamp<int64_t>(q - x_first + 1, m_lo, p);
        Acc acc = 0;
        int64_t m = 0;
        for (; m < m_lo; ++m) acc += h[m] * fill;
        const int64_t xq = q - x_first;
        for (; m < m_hi; ++m) acc += h[m] * static_cast<Acc>(xc[xq - m]);
        for (; m < p; ++m) acc += h[m] * fill;
        yc[k] = static_cast<T>(acc);
        t += down;
        if (t >= up) {
          q += t / up;
          t %= up;
        }
      }
    }
  });
}

// Real signals (float32, float64): the same sums, vectorised across periods. With g0 =
// gcd(up, down), u = up/g0, d = down/g0, output k = n*u + j (period n, j < u) has
// q = n*d + q_j and phase t_j, with q_j = floor(j*down/up) < d and t_j = j*down mod up
// (phase_groups.h derives it). A task takes kPeriods consecutive periods n0 + nl of one channel:
// it copies the samples they read, s[n0*d - (P-1) + z] for z in [0, span), into a double buffer
// de-interleaved by z mod d (z at w[(z mod d)*ld + z/d]). Output (nl, j) then reads, for tap m,
// z = nl*d + c - m with c = q_j + P - 1, i.e. w[off(j, m) + nl]: for fixed (j, m) the periods
// are contiguous, so kLanes outputs of one phase accumulate side by side (independent sums the
// compiler vectorises), each in the scalar path's order (m ascending from 0, h[m] * s in
// double), giving the same bits.
constexpr int kLanes = 32;
constexpr int64_t kMaxPeriodInputs = 2048;

// acc[l] = sum_{m<p} h[m] * w[off[m] + l] for l < kLanes, m ascending from 0: kLanes
// independent sums in vector registers (GCC vector extension, 8 doubles a vector; the loop
// over m stays scalar). Compiled for AVX-512, AVX2 and the baseline, picked at load time
// (ifunc); the file is built with -ffp-contract=off (sources.cmake), so no version fuses the
// product into the sum and every one rounds exactly as the scalar path does.
typedef double Lanes8 __attribute__((vector_size(64)));
static_assert(kLanes == 32, "AccumulateLanes keeps four vectors of 8");

__attribute__((target_clones("avx512f", "avx2", "default"))) void AccumulateLanes(
    const double* h, const int64_t* off, const double* w, int64_t p, double* acc) {
  Lanes8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  for (int64_t m = 0; m < p; ++m) {
    const double hm = h[m];
    const double* wm = w + off[m];
    Lanes8 x0, x1, x2, x3;
    __builtin_memcpy(&x0, wm, sizeof x0);
    __builtin_memcpy(&x1, wm + 8, sizeof x1);
    __builtin_memcpy(&x2, wm + 16, sizeof x2);
    __builtin_memcpy(&x3, wm + 24, sizeof x3);
    a0 += hm * x0;
    a1 += hm * x1;
    a2 += hm * x2;
    a3 += hm * x3;
  }
  __builtin_memcpy(acc, &a0, sizeof a0);
  __builtin_memcpy(acc + 8, &a1, sizeof a1);
  __builtin_memcpy(acc + 16, &a2, sizeof a2);
  __builtin_memcpy(acc + 24, &a3, sizeof a3);
}

int64_t PeriodsPerTask(int64_t u, int64_t d) {
  const int64_t by_out = 4096 / u, by_in = 65536 / d;
  const int64_t n = std::max<int64_t>(1, std::min(by_out, by_in));
  return (n + kLanes - 1) / kLanes * kLanes;
}

template <class T>
void RunCpuReal(const Polyphase& filter, const HostSignalView& x, int64_t x_first, double cval,
                int64_t out_first, int64_t out_count, T* y) {
  const std::vector<double> htf = filter.PhaseMajorTaps();
  const int64_t p = filter.TapsPerPhase();
  const int64_t g0 = std::gcd(filter.up, filter.down);
  const int64_t u = filter.up / g0, d = filter.down / g0;
  if (d > kMaxPeriodInputs) {  // heavy decimation: the de-interleaved tile would be mostly unread
    RunCpu<T, double>(filter, x, x_first, cval, out_first, out_count, y);
    return;
  }
  const int64_t np = PeriodsPerTask(u, d);
  const int64_t span = np * d + p - 1 + d;
  const int64_t ld = (span + d - 1) / d;
  // off[j*P + m]: where w holds z = c_j - m for period 0.
  std::vector<int64_t> off(static_cast<size_t>(u * p));
  std::vector<int64_t> tj(static_cast<size_t>(u));
  for (int64_t j = 0; j < u; ++j) {
    const int64_t jd = j * filter.down;
    tj[j] = jd % filter.up;
    const int64_t c = jd / filter.up + p - 1;
    for (int64_t m = 0; m < p; ++m) off[j * p + m] = ((c - m) % d) * ld + (c - m) / d;
  }
  const int64_t n_first = out_first / u;
  const int64_t n_end = (out_first + out_count - 1) / u + 1;
  const int64_t blocks = (n_end - n_first + np - 1) / np;
  const int64_t x_len = x.len;

  tbb::parallel_for(tbb::blocked_range<int64_t>(0, x.channels * blocks),
                    [&](const tbb::blocked_range<int64_t>& range) {
    std::vector<double> w(static_cast<size_t>(ld * d));
    std::vector<double> st(static_cast<size_t>(np * u));  // the task's outputs, period-major
    for (int64_t task = range.begin(); task != range.end(); ++task) {
      const int64_t c = task / blocks;
      const int64_t n0 = n_first + (task % blocks) * np;
      const T* xc = static_cast<const T*>(x.data) + c * x.stride;
      T* yc = y + c * out_count - out_first;
      const int64_t rel0 = n0 * d - (p - 1) - x_first;  // x index of z = 0
      if (rel0 >= 0 && rel0 + ld * d <= x_len) {  // inside the signal: no edge tests
        for (int64_t r = 0; r < d; ++r) {
          double* wr = w.data() + r * ld;
          const T* xr = xc + rel0 + r;
          for (int64_t i = 0; i < ld; ++i) wr[i] = static_cast<double>(xr[i * d]);
        }
      } else {
        for (int64_t r = 0; r < d; ++r) {
          double* wr = w.data() + r * ld;
          for (int64_t i = 0; i < ld; ++i) {
            const int64_t rel = rel0 + i * d + r;
            wr[i] = rel >= 0 && rel < x_len ? static_cast<double>(xc[rel]) : cval;
          }
        }
      }
      const int64_t k_lo = std::max(out_first, n0 * u);
      const int64_t k_hi = std::min(out_first + out_count, (n0 + np) * u);
      const bool whole = k_lo == n0 * u && k_hi == (n0 + np) * u;  // every output requested
      for (int64_t j = 0; j < u; ++j) {
        const double* h = htf.data() + tj[j] * p;
        const int64_t* o = off.data() + j * p;
        for (int64_t nb = 0; nb < np; nb += kLanes) {
          if ((n0 + nb + kLanes - 1) * u + j < k_lo || (n0 + nb) * u + j >= k_hi) continue;
          double acc[kLanes];
          AccumulateLanes(h, o, w.data() + nb, p, acc);
          if (whole) {
            T* yl = yc + (n0 + nb) * u + j;
            for (int l = 0; l < kLanes; ++l) yl[l * u] = static_cast<T>(acc[l]);
          } else {
            for (int l = 0; l < kLanes; ++l) st[(nb + l) * u + j] = acc[l];
          }
        }
      }
      // Edge tasks: outputs [k_lo, k_hi) leave in order (staged outputs outside it are unused).
      if (!whole) {
        const double* sk = st.data() + (k_lo - n0 * u);
        for (int64_t k = k_lo; k < k_hi; ++k) yc[k] = static_cast<T>(sk[k - k_lo]);
      }
    }
  });
}

}  // namespace

absl::StatusOr<HostArray> UpfirdnWindowCpu(const Polyphase& filter, const HostSignalView& x,
                                           int64_t x_first, double cval, int64_t out_first,
                                           int64_t out_count) {
  HostArray y(x.dtype, {x.channels, out_count});
  if (y.size() == 0) return y;
  switch (x.dtype) {
    case DType::kFloat32:
      RunCpuReal<float>(filter, x, x_first, cval, out_first, out_count, y.data<float>());
      break;
    case DType::kFloat64:
      RunCpuReal<double>(filter, x, x_first, cval, out_first, out_count, y.data<double>());
      break;
    case DType::kComplex64:
      RunCpu<std::complex<float>, std::complex<double>>(filter, x, x_first, cval, out_first,
                                                        out_count,
                                                        y.data<std::complex<float>>());
      break;
    case DType::kComplex128:
      RunCpu<std::complex<double>, std::complex<double>>(filter, x, x_first, cval, out_first,
                                                         out_count,
                                                         y.data<std::complex<double>>());
      break;
    default:
      return ValidateDType(x.dtype);
  }
  return y;
}

}  // namespace fresnel::interp::internal
