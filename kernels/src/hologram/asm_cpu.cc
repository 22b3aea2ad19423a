// CPU angular-spectrum reconstruction with kissfft (float64): 2-D FFT as row then column
// transforms, the transfer function, the inverse, and 8-bit magnitude.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include "hologram/hologram_internal.h"
#include <kissfft/kissfft.hh>  // header-only C++ template (BSD-3-Clause)

namespace fresnel::hologram::internal {
namespace {

using Complex = std::complex<double>;

// In-place 2-D DFT of a row-major [h, w] array (unnormalised in both directions). kissfft
// objects keep a mutable scratch buffer (radices other than 2-5), so each task builds its own.
void Fft2(std::vector<Complex>& a, int64_t h, int64_t w, bool inverse) {
  constexpr int64_t kGrain = 32;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, h, kGrain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      const kissfft<double> fft(static_cast<size_t>(w), inverse);
                      std::vector<Complex> out(static_cast<size_t>(w));
                      for (int64_t v = r.begin(); v < r.end(); ++v) {
                        fft.transform(&a[v * w], out.data());
                        std::copy(out.begin(), out.end(), a.begin() + v * w);
                      }
                    });
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, w, kGrain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      const kissfft<double> fft(static_cast<size_t>(h), inverse);
                      std::vector<Complex> out(static_cast<size_t>(h));
                      for (int64_t u = r.begin(); u < r.end(); ++u) {
                        fft.transform(&a[u], out.data(), 0, 1, static_cast<size_t>(w));
                        for (int64_t v = 0; v < h; ++v) a[v * w + u] = out[v];
                      }
                    });
}

}  // namespace

Reconstruction ReconstructAsmCpu(const std::vector<Complex>& field, int64_t height, int64_t width,
                                 const AsmOptions& options) {
  std::vector<Complex> a = field;
  Fft2(a, height, width, /*inverse=*/false);
  const double p = options.pitch_m;
  tbb::parallel_for(int64_t{0}, height, [&](int64_t v) {
    const double fy = static_cast<double>(FftIndex(v, height)) / (static_cast<double>(height) * p);
    for (int64_t u = 0; u < width; ++u) {
      const double fx = static_cast<double>(FftIndex(u, width)) / (static_cast<double>(width) * p);
      const double phase = AsmPhase(fx, fy, options.wavelength_m, options.depth_m);
      a[v * width + u] *= std::isnan(phase) ? Complex(0) : std::polar(1.0, phase);
    }
  });
  Fft2(a, height, width, /*inverse=*/true);
  const double norm = 1.0 / (static_cast<double>(width) * static_cast<double>(height));
  double scale = 0;
  for (const Complex& c : a) scale = std::max(scale, std::abs(c) * norm);
  Reconstruction r;
  r.scale = scale;
  r.image = HostArray(DType::kUint8, {height, width});
  uint8_t* out = r.image.data<uint8_t>();
  for (size_t i = 0; i < a.size(); ++i) {
    const double q = scale > 0 ? std::nearbyint(255.0 * std::abs(a[i]) * norm / scale) : 0.0;
    out[i] = static_cast<uint8_t>(std::clamp(q, 0.0, 255.0));
  }
  return r;
}

}  // namespace fresnel::hologram::internal
