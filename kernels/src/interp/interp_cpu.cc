// The CPU back end of the window primitive (see interp_internal.h): polyphase, accumulating in
// double, parallel over (channel, block of outputs) with TBB. This is the test oracle.
#include <algorithm>
#include <complex>
#include <cstdint>
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

}  // namespace

absl::StatusOr<HostArray> UpfirdnWindowCpu(const Polyphase& filter, const HostSignalView& x,
                                           int64_t x_first, double cval, int64_t out_first,
                                           int64_t out_count) {
  HostArray y(x.dtype, {x.channels, out_count});
  if (y.size() == 0) return y;
  switch (x.dtype) {
    case DType::kFloat32:
      RunCpu<float, double>(filter, x, x_first, cval, out_first, out_count, y.data<float>());
      break;
    case DType::kFloat64:
      RunCpu<double, double>(filter, x, x_first, cval, out_first, out_count, y.data<double>());
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
