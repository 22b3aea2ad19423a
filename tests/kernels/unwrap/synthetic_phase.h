// Synthetic wrapped-phase images for the unwrap tests and benchmark: a smooth surface (tilt plus
// two Gaussian bumps) with optional Gaussian phase noise, wrapped to [-pi, pi). The "truth" is the
// noisy unwrapped phase, so a pixel is correctly unwrapped when output - truth is the image's common
// multiple of 2*pi. Rows are generated independently (seeded by row), so callers may fill them in
// parallel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "fresnel/core/array.h"

namespace fresnel::unwrap::testing {

inline constexpr double kPi = 3.14159265358979323846;

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in (0, 1).
inline double Uniform01(uint64_t& state) {
  return (static_cast<double>(SplitMix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// x wrapped to [-pi, pi).
inline double Wrap(double x) { return x - 2 * kPi * std::floor((x + kPi) / (2 * kPi)); }

struct SyntheticSpec {
  int rows = 256;
  int cols = 256;
  double turns = 6;    // the smooth surface spans about this many multiples of 2*pi
  double sigma = 0;    // Gaussian phase noise, radians
  uint64_t seed = 1;
};

inline double SmoothPhase(const SyntheticSpec& s, int y, int x) {
  const double u = (x + 0.5) / s.cols, v = (y + 0.5) / s.rows;
  const double bump1 = std::exp(-((u - 0.35) * (u - 0.35) + (v - 0.4) * (v - 0.4)) / 0.03);
  const double bump2 = std::exp(-((u - 0.7) * (u - 0.7) + (v - 0.65) * (v - 0.65)) / 0.05);
  return 2 * kPi * s.turns * (0.6 * u + 0.3 * v + 0.5 * bump1 - 0.4 * bump2);
}

// Fills rows [y0, y1) of truth (double) and wrapped (float32 or float64 HostArray data); row y
// goes to row y - first_row of the buffers.
template <class T>
void FillRows(const SyntheticSpec& s, int y0, int y1, double* truth, T* wrapped,
              int first_row = 0) {
  for (int y = y0; y < y1; ++y) {
    // Hash (seed, row) into the row's stream: plain offsets of one SplitMix64 sequence would make
    // neighbouring rows shifted copies of each other.
    uint64_t mix = s.seed ^ (static_cast<uint64_t>(y) * 0xd1b54a32d192ed03ull);
    uint64_t state = SplitMix64(mix);
    state ^= SplitMix64(mix);
    for (int x = 0; x < s.cols; ++x) {
      double t = SmoothPhase(s, y, x);
      if (s.sigma > 0) {
        // Box-Muller, one normal per pixel.
        const double u1 = Uniform01(state), u2 = Uniform01(state);
        t += s.sigma * std::sqrt(-2 * std::log(u1)) * std::cos(2 * kPi * u2);
      }
      const int64_t i = static_cast<int64_t>(y - first_row) * s.cols + x;
      truth[i] = t;
      T w = static_cast<T>(Wrap(t));
      // Rounding to float32 can land just above pi; keep the value inside [-pi, pi].
      if (static_cast<double>(w) > kPi) w = static_cast<T>(-kPi);
      wrapped[i] = w;
    }
  }
}

struct Synthetic {
  std::vector<double> truth;
  HostArray wrapped;
};

inline Synthetic MakeSynthetic(const SyntheticSpec& s, DType dtype = DType::kFloat32) {
  Synthetic out;
  out.truth.resize(static_cast<size_t>(s.rows) * s.cols);
  out.wrapped = HostArray(dtype, {s.rows, s.cols});
  if (dtype == DType::kFloat32) {
    FillRows(s, 0, s.rows, out.truth.data(), out.wrapped.data<float>());
  } else {
    FillRows(s, 0, s.rows, out.truth.data(), out.wrapped.data<double>());
  }
  return out;
}

inline double At(const HostArray& a, int64_t i) {
  return a.dtype() == DType::kFloat32 ? static_cast<double>(a.data<float>()[i])
                                      : a.data<double>()[i];
}

// Fraction of the considered pixels (unmasked, and with `skip` == 0 if given) whose multiple of
// 2*pi relative to the truth differs from the most common one.
inline double WrongFraction(const HostArray& unwrapped, const std::vector<double>& truth,
                            const uint8_t* mask = nullptr, const uint8_t* skip = nullptr) {
  // Histogram of the per-pixel multiple of 2*pi; multiples beyond +-kSpan share the end bins.
  constexpr int64_t kSpan = 4096;
  std::vector<int64_t> hist(2 * kSpan + 1, 0);
  int64_t considered = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    if ((mask != nullptr && mask[i]) || (skip != nullptr && skip[i])) continue;
    const int64_t k = std::llround((At(unwrapped, i) - truth[i]) / (2 * kPi));
    hist[std::clamp<int64_t>(k, -kSpan, kSpan) + kSpan]++;
    ++considered;
  }
  if (considered == 0) return 0;
  const int64_t mode_count = *std::max_element(hist.begin(), hist.end());
  return static_cast<double>(considered - mode_count) / considered;
}

// Residues (nonzero plaquette circulations) of a wrapped image, computed independently of the
// library: wrapped differences by floor in double, circulation rounded.
inline int64_t CountResidues(const HostArray& wrapped, const uint8_t* mask = nullptr,
                             std::vector<int>* charges = nullptr) {
  const int rows = static_cast<int>(wrapped.dim(0)), cols = static_cast<int>(wrapped.dim(1));
  auto w = [&](int64_t a, int64_t b) { return Wrap(At(wrapped, b) - At(wrapped, a)); };
  int64_t count = 0;
  if (charges != nullptr) charges->assign(static_cast<size_t>(rows) * cols, 0);
  for (int y = 0; y + 1 < rows; ++y) {
    for (int x = 0; x + 1 < cols; ++x) {
      const int64_t a = static_cast<int64_t>(y) * cols + x, b = a + 1, c = a + cols + 1,
                    d = a + cols;
      if (mask != nullptr && (mask[a] || mask[b] || mask[c] || mask[d])) continue;
      const double circ = w(a, b) + w(b, c) + w(c, d) + w(d, a);
      const int q = static_cast<int>(std::lround(circ / (2 * kPi)));
      if (q != 0) ++count;
      if (charges != nullptr) (*charges)[a] = q;
    }
  }
  return count;
}

// A synthetic surface with strong noise (sigma `noise`, radians) inside a disc of radius
// rows / 5 around (0.55 rows, 0.45 cols), and weights (float32) that are `low` there and 1
// elsewhere: weighted least squares should keep the disc's residues from spreading.
struct NoisyPatch {
  Synthetic data;
  HostArray weights;
  std::vector<uint8_t> in_patch;
};

inline NoisyPatch MakeNoisyPatch(const SyntheticSpec& spec, double noise, float low) {
  NoisyPatch out;
  out.data = MakeSynthetic(spec, DType::kFloat32);
  out.weights = HostArray(DType::kFloat32, {spec.rows, spec.cols});
  out.in_patch.assign(static_cast<size_t>(spec.rows) * spec.cols, 0);
  uint64_t state = spec.seed ^ 0x9e3779b97f4a7c15ull;
  const double cy = 0.55 * spec.rows, cx = 0.45 * spec.cols, radius = spec.rows / 5.0;
  for (int y = 0; y < spec.rows; ++y) {
    for (int x = 0; x < spec.cols; ++x) {
      const int64_t i = static_cast<int64_t>(y) * spec.cols + x;
      const bool inside = (y - cy) * (y - cy) + (x - cx) * (x - cx) < radius * radius;
      out.in_patch[i] = inside;
      out.weights.data<float>()[i] = inside ? low : 1.f;
      if (!inside) continue;
      const double u1 = Uniform01(state), u2 = Uniform01(state);
      const double t = out.data.truth[i] + noise * std::sqrt(-2 * std::log(u1)) *
                                               std::cos(2 * kPi * u2);
      float w = static_cast<float>(Wrap(t));
      if (static_cast<double>(w) > kPi) w = static_cast<float>(-kPi);
      out.data.wrapped.data<float>()[i] = w;
    }
  }
  return out;
}

}  // namespace fresnel::unwrap::testing
