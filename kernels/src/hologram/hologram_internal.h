// Internal interface of the hologram area: the per-point data every algorithm starts from, the
// fixed-point (TA / PA) preparation, point grouping, and the device-specific entry points that
// hologram.cc dispatches to.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/hologram/hologram.h"
#include "hologram/hologram_math.h"

namespace fresnel::hologram::internal {

// Per-point quantities in cloud order plus the hologram geometry.
struct PreparedPoints {
  int64_t width = 0;
  int64_t height = 0;
  double pitch_m = 0;
  double wavelength_m = 0;

  std::vector<double> x;            // metres
  std::vector<double> y;            // metres
  std::vector<double> inv2lz;       // 1 / (2 λ z) in turns per m²: phase = d² · inv2lz turns
  std::vector<double> amplitude;    // >= 0
  std::vector<double> phase_turns;  // θ / 2π
  // Alias-free pixel ranges, inclusive and clipped to the hologram; lo > hi = no pixel. With
  // AliasPolicy::kNone every range is the whole hologram.
  std::vector<int32_t> ulo, uhi, vlo, vhi;
  bool clipped = false;  // some range leaves out some pixel of the hologram
  double amax = 0;       // largest amplitude
  double amin = 0;       // smallest amplitude (0 for an empty cloud)
  AliasPolicy alias = AliasPolicy::kClip;

  int64_t size() const { return static_cast<int64_t>(x.size()); }
  // Pixel-centre coordinates (hologram.h): x_u = (u − width/2)·p.
  double PixelX(int64_t u) const { return static_cast<double>(AxisOffset(u, width)) * pitch_m; }
  double PixelY(int64_t v) const { return static_cast<double>(AxisOffset(v, height)) * pitch_m; }
};

// Whether `options` describe the geometry `prepared` was built for.
bool SameGeometry(const PreparedPoints& prepared, const HologramOptions& options);

// PreparedCloud's data, for the implementation.
struct CloudAccess {
  static const PreparedPoints& Points(const PreparedCloud& cloud) { return *cloud.p_; }
  static PreparedCloud Wrap(std::unique_ptr<PreparedPoints> p) {
    PreparedCloud c;
    c.p_ = std::move(p);
    return c;
  }
};

// The checks of one point (hologram.h's ValidateHologram), the message naming points[index].
absl::Status CheckPoint(const Point& p, int64_t index);
constexpr double kMaxCoordinateM = 1e3;
// Largest point amplitude: 2^24 points of it still sum far below float32's range (3.4e38).
constexpr double kMaxAmplitude = 1e12;
inline bool PointOk(double x, double y, double z, double a, double phase) {
  // Written so that NaN fails every comparison.
  return std::abs(x) <= kMaxCoordinateM && std::abs(y) <= kMaxCoordinateM && z > 0 &&
         z <= kMaxCoordinateM && a >= 0 && a <= kMaxAmplitude && std::isfinite(phase);
}

// frac(t) in [0, 1).
inline double FracTurns(double t) { return t - std::floor(t); }

// Fixed-point per-point data of TA / PA (hologram_math.h has the scheme).
struct FixedPointPoints {
  int subdivision = 1;          // K: s = pitch / K
  std::vector<int64_t> xq, yq;  // round(x / s), round(y / s)
  std::vector<uint32_t> c;      // depth factor
  std::vector<uint32_t> phase0; // θ in units of 2π / 2^32
  std::vector<uint8_t> a8;      // round(255 · a / amax)
  // field = Σ a8 · (V − DC) · scale, scale = amax / (255 · A1).
  double scale = 0;
};
FixedPointPoints PrepareFixedPoint(const PreparedPoints& prepared, int subdivision,
                                   bool piecewise);
// A1: the fundamental Fourier amplitude of TriangleValue − 64 (or PiecewiseValue − 128) against
// cos(2π(b + 1)/256).
double FundamentalAmplitude(bool piecewise);

// Points that share the column function exp(iπ(x − δ)²/(λζ)) (equal x and z, so equal ranges
// too): `order` lists point indices group by group (cloud order inside a group), `starts` the
// G + 1 offsets into it. Groups are numbered by first appearance. nullopt once there would be
// more than max_groups groups (the caller then does not merge).
struct PointGroups {
  std::vector<int32_t> order;
  std::vector<int64_t> starts;
  int64_t count() const { return static_cast<int64_t>(starts.size()) - 1; }
};
std::optional<PointGroups> GroupByColumn(const PreparedPoints& prepared,
                                         int64_t max_groups = INT64_MAX);
// Same for the row function (equal y and z).
std::optional<PointGroups> GroupByRow(const PreparedPoints& prepared,
                                      int64_t max_groups = INT64_MAX);

// round(arg(re + i·im) · 256 / 2π) mod 256.
inline uint8_t PhaseByte(double re, double im) {
  const double k = std::nearbyint(std::atan2(im, re) * (128.0 / kPi));
  return static_cast<uint8_t>(static_cast<int64_t>(k) & 0xFF);
}

// The tensor precision that options ask for (never kAuto) and the algorithm that runs on
// `device` (never kAuto).
TensorPrecision ResolvePrecision(const HologramOptions& options);
Algorithm ResolveAlgorithm(const Device& device, const HologramOptions& options);

// CPU hologram in complex128 (row-major [height, width]). `algorithm` is kReference,
// kTriangular or kPiecewise.
absl::StatusOr<std::vector<std::complex<double>>> HologramCpu(const PreparedPoints& prepared,
                                                              const HologramOptions& options,
                                                              Algorithm algorithm);

// CPU ASM reconstruction of a complex128 [height, width] field (already phase-only when that
// source was asked for).
Reconstruction ReconstructAsmCpu(const std::vector<std::complex<double>>& field, int64_t height,
                                 int64_t width, const AsmOptions& options);

// The ASM transfer function's phase in radians for frequency (fx, fy) in cycles per metre,
// after propagating by −depth_m, without the constant 2π·depth/λ; NaN marks evanescent
// frequencies.
inline double AsmPhase(double fx, double fy, double wavelength_m, double depth_m) {
  const double inv_l = 1.0 / wavelength_m;
  const double f2 = fx * fx + fy * fy;
  const double r = inv_l * inv_l - f2;
  if (r < 0) return NAN;
  // sqrt(1/λ² − f²) − 1/λ = −f² / (1/λ + sqrt(1/λ² − f²)), stable for small f.
  return 2.0 * kPi * (-depth_m) * (-f2 / (inv_l + std::sqrt(r)));
}
// Signed FFT frequency index of bin k of n (NumPy's fftfreq order).
inline int64_t FftIndex(int64_t k, int64_t n) { return k < (n + 1) / 2 ? k : k - n; }

#if FRESNEL_WITH_CUDA
// Everything on the GPU: the hologram, the requested outputs and the reconstruction.
absl::StatusOr<HologramResult> HologramCuda(const Device& device, const PreparedPoints& prepared,
                                            const HologramOptions& options, Algorithm algorithm,
                                            TensorPrecision precision, StageTimes* times);
absl::StatusOr<Reconstruction> ReconstructAsmCuda(const Device& device, const HostArray& field,
                                                  const AsmOptions& options, StageTimes* times);
#endif

}  // namespace fresnel::hologram::internal
