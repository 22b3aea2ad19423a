// CPU holograms: the separable exact sum (float64 oracle, or float32) and a bit-exact emulation
// of the GPU fixed-point kernels (TA / PA). Multi-threaded over rows with TBB.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <atomic>
#include <functional>

#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "hologram/hologram_internal.h"

namespace fresnel::hologram::internal {
namespace {

// Column groups processed together: bounds the B and X tables to kChunk · (W + H) values.
constexpr int64_t kChunk = 512;
// Rows that share one pass over a chunk's column functions.
constexpr int64_t kRowBlock = 8;

// Exact separable sum H[v][u] = Σ_g B_g[v] · X_g[u], with
//   X_g[u] = exp(2πi·frac((x_u − δ_g)²/(2λζ_g))) on the group's alias-free columns, else 0;
//   B_g[v] = Σ_{j∈g} a_j · exp(2πi·(frac((y_v − ε_j)²/(2λζ_j)) + θ_j/2π)) on j's rows.
// Phases are reduced to turns in float64 before sin/cos; T is the storage and accumulation type.
// Row functions shared by several points (equal y and z) are computed once when that saves at
// least half of them.
// Polls HologramOptions::should_stop from the worker threads; once it said stop, every later
// check says so without calling it again.
class StopCheck {
 public:
  explicit StopCheck(const std::function<bool()>& should_stop) : should_stop_(should_stop) {}
  bool operator()() {
    if (stopped_.load(std::memory_order_relaxed)) return true;
    if (should_stop_ && should_stop_()) stopped_.store(true, std::memory_order_relaxed);
    return stopped_.load(std::memory_order_relaxed);
  }
  absl::Status status() const {
    return stopped_.load() ? absl::CancelledError("the render was stopped (request cancelled or "
                                                  "past its deadline)")
                           : absl::OkStatus();
  }

 private:
  const std::function<bool()>& should_stop_;
  std::atomic<bool> stopped_{false};
};

template <class T>
absl::StatusOr<std::vector<std::complex<double>>> ExactCpu(const PreparedPoints& p,
                                                           StopCheck& stop) {
  const int64_t w = p.width, h = p.height;
  const PointGroups cols = *GroupByColumn(p);
  const std::optional<PointGroups> row_groups = GroupByRow(p, p.size() / 2);
  const bool share_rows = row_groups.has_value();
  const PointGroups& rows = share_rows ? *row_groups : cols;

  // Row functions of each row group (without amplitude and phase), when shared.
  std::vector<int32_t> row_group_of(static_cast<size_t>(p.size()));
  std::vector<std::complex<double>> row_fn;
  if (share_rows) {
    row_fn.assign(static_cast<size_t>(rows.count() * h), 0.0);
    for (int64_t r = 0; r < rows.count(); ++r) {
      for (int64_t k = rows.starts[r]; k < rows.starts[r + 1]; ++k) {
        row_group_of[rows.order[k]] = static_cast<int32_t>(r);
      }
    }
    tbb::parallel_for(int64_t{0}, rows.count(), [&](int64_t r) {
      const int32_t j = rows.order[rows.starts[r]];
      for (int64_t v = p.vlo[j]; v <= p.vhi[j]; ++v) {
        const double d = p.PixelY(v) - p.y[j];
        const double t = FracTurns(d * d * p.inv2lz[j]);
        row_fn[r * h + v] = std::polar(1.0, 2.0 * kPi * t);
      }
    });
  }

  std::vector<T> acc_re(static_cast<size_t>(w * h), T(0));
  std::vector<T> acc_im(static_cast<size_t>(w * h), T(0));
  std::vector<T> b_re, b_im, x_re, x_im;
  for (int64_t g0 = 0; g0 < cols.count() && !stop(); g0 += kChunk) {
    const int64_t ng = std::min(kChunk, cols.count() - g0);
    b_re.assign(static_cast<size_t>(ng * h), T(0));
    b_im.assign(static_cast<size_t>(ng * h), T(0));
    x_re.assign(static_cast<size_t>(ng * w), T(0));
    x_im.assign(static_cast<size_t>(ng * w), T(0));
    tbb::parallel_for(int64_t{0}, ng, [&](int64_t gi) {
      const int64_t g = g0 + gi;
      const int32_t rep = cols.order[cols.starts[g]];
      for (int64_t u = p.ulo[rep]; u <= p.uhi[rep]; ++u) {
        const double d = p.PixelX(u) - p.x[rep];
        const double t = FracTurns(d * d * p.inv2lz[rep]);
        x_re[gi * w + u] = static_cast<T>(std::cos(2.0 * kPi * t));
        x_im[gi * w + u] = static_cast<T>(std::sin(2.0 * kPi * t));
      }
      std::vector<std::complex<double>> b(static_cast<size_t>(h), 0.0);
      for (int64_t k = cols.starts[g]; k < cols.starts[g + 1]; ++k) {
        const int32_t j = cols.order[k];
        if (p.amplitude[j] == 0) continue;
        const std::complex<double> weight =
            std::polar(p.amplitude[j], 2.0 * kPi * FracTurns(p.phase_turns[j]));
        for (int64_t v = p.vlo[j]; v <= p.vhi[j]; ++v) {
          if (share_rows) {
            b[v] += weight * row_fn[row_group_of[j] * h + v];
          } else {
            const double d = p.PixelY(v) - p.y[j];
            const double t = FracTurns(d * d * p.inv2lz[j] + p.phase_turns[j]);
            b[v] += p.amplitude[j] * std::polar(1.0, 2.0 * kPi * t);
          }
        }
      }
      for (int64_t v = 0; v < h; ++v) {
        b_re[gi * h + v] = static_cast<T>(b[v].real());
        b_im[gi * h + v] = static_cast<T>(b[v].imag());
      }
    });
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, h, kRowBlock), [&](const tbb::blocked_range<int64_t>& r) {
          if (stop()) return;
          for (int64_t gi = 0; gi < ng; ++gi) {
            const T* xr = &x_re[gi * w];
            const T* xi = &x_im[gi * w];
            for (int64_t v = r.begin(); v < r.end(); ++v) {
              const T br = b_re[gi * h + v];
              const T bi = b_im[gi * h + v];
              if (br == T(0) && bi == T(0)) continue;
              T* hr = &acc_re[v * w];
              T* hi = &acc_im[v * w];
              for (int64_t u = 0; u < w; ++u) {
                hr[u] += br * xr[u] - bi * xi[u];
                hi[u] += br * xi[u] + bi * xr[u];
              }
            }
          }
        });
  }
  FRESNEL_RETURN_IF_ERROR(stop.status());
  std::vector<std::complex<double>> field(static_cast<size_t>(w * h));
  for (int64_t i = 0; i < w * h; ++i) field[i] = {double(acc_re[i]), double(acc_im[i])};
  return field;
}

// Bit-exact emulation of the CUDA TA / PA kernels: the same phase bytes, the same 8-bit
// amplitudes, integer sums (exact in int64), the same final scaling.
absl::StatusOr<std::vector<std::complex<double>>> FixedPointCpu(const PreparedPoints& p,
                                                                int subdivision, bool piecewise,
                                                                StopCheck& stop) {
  const int64_t w = p.width, h = p.height, n = p.size();
  const FixedPointPoints f = PrepareFixedPoint(p, subdivision, piecewise);
  const int dc = piecewise ? kPaDc : kTaDc;
  int value[256];
  for (int b = 0; b < 256; ++b) value[b] = (piecewise ? PiecewiseValue(b) : TriangleValue(b)) - dc;

  const int64_t k = f.subdivision;
  std::vector<int64_t> tot_re(static_cast<size_t>(w * h), 0), tot_im(static_cast<size_t>(w * h), 0);
  std::vector<uint8_t> bx, by;
  for (int64_t j0 = 0; j0 < n && !stop(); j0 += kChunk) {
    const int64_t nj = std::min(kChunk, n - j0);
    bx.assign(static_cast<size_t>(nj * w), 0);
    by.assign(static_cast<size_t>(nj * h), 0);
    tbb::parallel_for(int64_t{0}, nj, [&](int64_t jj) {
      const int64_t j = j0 + jj;
      for (int64_t u = 0; u < w; ++u) {
        const int64_t m = AxisOffset(u, w) * k - f.xq[j];
        bx[jj * w + u] = static_cast<uint8_t>(XPhaseByte(QuadraticPhase32(f.c[j], m)));
      }
      for (int64_t v = 0; v < h; ++v) {
        const int64_t m = AxisOffset(v, h) * k - f.yq[j];
        by[jj * h + v] =
            static_cast<uint8_t>(YPhaseByte(QuadraticPhase32(f.c[j], m) + f.phase0[j]));
      }
    });
    tbb::parallel_for(int64_t{0}, h, [&](int64_t v) {
      if (v % kRowBlock == 0 && stop()) return;
      int64_t* re = &tot_re[v * w];
      int64_t* im = &tot_im[v * w];
      for (int64_t jj = 0; jj < nj; ++jj) {
        const int64_t j = j0 + jj;
        const int64_t a = f.a8[j];
        if (a == 0 || v < p.vlo[j] || v > p.vhi[j]) continue;
        const uint32_t yc = by[jj * h + v];
        const uint32_t ys = (yc - 64u) & 0xFFu;
        const uint8_t* xb = &bx[jj * w];
        for (int64_t u = p.ulo[j]; u <= p.uhi[j]; ++u) {
          re[u] += a * value[(xb[u] + yc) & 0xFFu];
          im[u] += a * value[(xb[u] + ys) & 0xFFu];
        }
      }
    });
  }
  FRESNEL_RETURN_IF_ERROR(stop.status());
  std::vector<std::complex<double>> field(static_cast<size_t>(w * h));
  for (int64_t i = 0; i < w * h; ++i) {
    // Rounded to float32 exactly as the GPU finishes ((float)(double(total) * scale)).
    field[i] = {double(static_cast<float>(double(tot_re[i]) * f.scale)),
                double(static_cast<float>(double(tot_im[i]) * f.scale))};
  }
  return field;
}

}  // namespace

absl::StatusOr<std::vector<std::complex<double>>> HologramCpu(const PreparedPoints& prepared,
                                                              const HologramOptions& options,
                                                              Algorithm algorithm) {
  StopCheck stop(options.should_stop);
  switch (algorithm) {
    case Algorithm::kReference:
      return options.cpu_float32 ? ExactCpu<float>(prepared, stop)
                                 : ExactCpu<double>(prepared, stop);
    case Algorithm::kTriangular:
      return FixedPointCpu(prepared, options.lateral_subdivision, /*piecewise=*/false, stop);
    case Algorithm::kPiecewise:
      return FixedPointCpu(prepared, options.lateral_subdivision, /*piecewise=*/true, stop);
    default:
      return absl::InvalidArgumentError(absl::StrCat("algorithm: \"", AlgorithmName(algorithm),
                                                     "\" does not run on the CPU"));
  }
}

}  // namespace fresnel::hologram::internal
