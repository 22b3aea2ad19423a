// Shared helpers of the hologram tests: random clouds, an independent brute-force oracle, and
// the data directory.
#pragma once

#include <cmath>
#include <complex>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fresnel/core/array.h"
#include "fresnel/hologram/hologram.h"
#include "support/test_support.h"

namespace fresnel::hologram::testing {

constexpr double kPitch = 8e-6;
constexpr double kWavelength = 532e-9;

inline HologramOptions SmallOptions(int64_t width, int64_t height, Algorithm algorithm) {
  HologramOptions o;
  o.width = width;
  o.height = height;
  o.pitch_m = kPitch;
  o.wavelength_m = kWavelength;
  o.algorithm = algorithm;
  return o;
}

inline std::mt19937_64 Rng() {
  static std::random_device rd;
  return std::mt19937_64((static_cast<uint64_t>(rd()) << 32) ^ rd());
}

// n points over (and a little beyond) the hologram, at depths [z_lo, z_hi], random amplitudes
// in [0.1, 1] and phases when `phases`.
inline PointCloud RandomCloud(int64_t n, const HologramOptions& o, double z_lo, double z_hi,
                              bool phases, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> ux(-0.6 * o.width * o.pitch_m, 0.6 * o.width * o.pitch_m);
  std::uniform_real_distribution<double> uy(-0.6 * o.height * o.pitch_m, 0.6 * o.height * o.pitch_m);
  std::uniform_real_distribution<double> uz(z_lo, z_hi);
  std::uniform_real_distribution<double> ua(0.1, 1.0);
  std::uniform_real_distribution<double> uph(-10.0, 10.0);
  PointCloud pts(static_cast<size_t>(n));
  for (Point& p : pts) p = Point{ux(rng), uy(rng), uz(rng), ua(rng), phases ? uph(rng) : 0.0};
  return pts;
}

// Independent oracle: the direct double sum of hologram.h's formula, pixel by pixel.
inline std::vector<std::complex<double>> BruteForce(const PointCloud& pts, const HologramOptions& o) {
  const double pi = 3.14159265358979323846;
  std::vector<std::complex<double>> h(static_cast<size_t>(o.width * o.height), 0.0);
  for (const Point& p : pts) {
    const double half = o.wavelength_m * p.z_m / (2 * o.pitch_m);
    for (int64_t v = 0; v < o.height; ++v) {
      const double y = static_cast<double>(v - o.height / 2) * o.pitch_m;
      if (o.alias == AliasPolicy::kClip && std::abs(y - p.y_m) > half) continue;
      for (int64_t u = 0; u < o.width; ++u) {
        const double x = static_cast<double>(u - o.width / 2) * o.pitch_m;
        if (o.alias == AliasPolicy::kClip && std::abs(x - p.x_m) > half) continue;
        const double r2 = (x - p.x_m) * (x - p.x_m) + (y - p.y_m) * (y - p.y_m);
        h[v * o.width + u] += std::polar(p.amplitude, p.phase_rad + pi * r2 / (o.wavelength_m * p.z_m));
      }
    }
  }
  return h;
}

inline HostArray ToArray(const std::vector<std::complex<double>>& v, int64_t height, int64_t width) {
  HostArray a(DType::kComplex128, {height, width});
  for (size_t i = 0; i < v.size(); ++i) a.data<std::complex<double>>()[i] = v[i];
  return a;
}

// Path of a file of the CGH data set: $FRESNEL_DATA_DIR/cgh/<name> when that variable is set
// (the GPU machine has no ../shared), else the shared data folder; "" when absent.
inline std::string CghDataPath(const std::string& name) {
  if (const char* dir = std::getenv("FRESNEL_DATA_DIR"); dir != nullptr && *dir != '\0') {
    const std::string p = std::string(dir) + "/cgh/" + name;
    if (FILE* f = std::fopen(p.c_str(), "rb")) {
      std::fclose(f);
      return p;
    }
    return "";
  }
  return fresnel::testing::DataPath("cgh/" + name);
}

}  // namespace fresnel::hologram::testing
