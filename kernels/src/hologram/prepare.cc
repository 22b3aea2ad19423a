// Per-point preparation shared by every algorithm: alias-free ranges, fixed-point quantities,
// point grouping, and the algorithm / precision choice.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "hologram/hologram_internal.h"

namespace fresnel::hologram::internal {
namespace {

// Inclusive pixel range [lo, hi] of the n pixels i with |(i − n/2)·p − c| ≤ half_width;
// lo > hi when none.
std::pair<int32_t, int32_t> AliasFreeRange(double c, double half_width, int64_t n, double p) {
  const double center = static_cast<double>(n / 2);
  double lo = std::ceil(center + (c - half_width) / p);
  double hi = std::floor(center + (c + half_width) / p);
  lo = std::max(lo, 0.0);
  hi = std::min(hi, static_cast<double>(n - 1));
  if (!(lo <= hi)) return {1, 0};
  return {static_cast<int32_t>(lo), static_cast<int32_t>(hi)};
}

uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

std::optional<PointGroups> GroupBy(const std::vector<double>& coord,
                                   const std::vector<double>& inv2lz, int64_t max_groups) {
  const int64_t n = static_cast<int64_t>(coord.size());
  // Merging only pays when it at least halves the columns. A point cloud of a surface rarely
  // repeats a coordinate, so look at a prefix first: when nearly all of it is distinct, give up
  // without hashing the whole cloud (a speed decision only; either result is exact).
  constexpr int64_t kSample = 4096;
  if (n > 4 * kSample && max_groups < n) {
    absl::flat_hash_set<std::pair<uint64_t, uint64_t>> seen;
    seen.reserve(kSample);
    for (int64_t j = 0; j < kSample; ++j) seen.emplace(Bits(coord[j]), Bits(inv2lz[j]));
    if (static_cast<int64_t>(seen.size()) > kSample * 9 / 10) return std::nullopt;
  }
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, int32_t> ids;
  ids.reserve(static_cast<size_t>(std::min(n, max_groups) + 1));
  std::vector<int32_t> group(static_cast<size_t>(n));
  std::vector<int64_t> counts;
  for (int64_t j = 0; j < n; ++j) {
    auto [it, inserted] = ids.try_emplace(std::make_pair(Bits(coord[j]), Bits(inv2lz[j])),
                                          static_cast<int32_t>(counts.size()));
    if (inserted) {
      if (static_cast<int64_t>(counts.size()) == max_groups) return std::nullopt;
      counts.push_back(0);
    }
    group[j] = it->second;
    ++counts[it->second];
  }
  PointGroups g;
  g.starts.assign(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) g.starts[i + 1] = g.starts[i] + counts[i];
  std::vector<int64_t> fill(g.starts.begin(), g.starts.end() - 1);
  g.order.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) g.order[fill[group[j]]++] = static_cast<int32_t>(j);
  return g;
}

}  // namespace

PreparedPoints PreparePoints(const PointCloud& points, const HologramOptions& options) {
  PreparedPoints p;
  p.width = options.width;
  p.height = options.height;
  p.pitch_m = options.pitch_m;
  p.wavelength_m = options.wavelength_m;
  const size_t n = points.size();
  p.x.resize(n);
  p.y.resize(n);
  p.inv2lz.resize(n);
  p.amplitude.resize(n);
  p.phase_turns.resize(n);
  p.ulo.resize(n);
  p.uhi.resize(n);
  p.vlo.resize(n);
  p.vhi.resize(n);
  const bool clip = options.alias == AliasPolicy::kClip;
  for (const Point& pt : points) p.amax = std::max(p.amax, pt.amplitude);
  auto one = [&](size_t j) {
    const Point& pt = points[j];
    p.x[j] = pt.x_m;
    p.y[j] = pt.y_m;
    p.inv2lz[j] = 1.0 / (2.0 * options.wavelength_m * pt.z_m);
    p.amplitude[j] = pt.amplitude;
    p.phase_turns[j] = pt.phase_rad / (2.0 * kPi);
    if (clip) {
      // Local frequency |x − δ|/(λζ) ≤ 1/(2p)  ⟺  |x − δ| ≤ λζ/(2p).
      const double half = options.wavelength_m * pt.z_m / (2.0 * options.pitch_m);
      std::tie(p.ulo[j], p.uhi[j]) = AliasFreeRange(pt.x_m, half, p.width, p.pitch_m);
      std::tie(p.vlo[j], p.vhi[j]) = AliasFreeRange(pt.y_m, half, p.height, p.pitch_m);
    } else {
      p.ulo[j] = 0;
      p.uhi[j] = static_cast<int32_t>(p.width - 1);
      p.vlo[j] = 0;
      p.vhi[j] = static_cast<int32_t>(p.height - 1);
    }
  };
  // Video frames of 1e5-1e6 points: the per-point work runs on all cores.
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, 16384),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t j = r.begin(); j < r.end(); ++j) one(j);
                    });
  for (size_t j = 0; j < n && !p.clipped; ++j) {
    p.clipped = p.ulo[j] != 0 || p.uhi[j] != p.width - 1 || p.vlo[j] != 0 ||
                p.vhi[j] != p.height - 1;
  }
  return p;
}

double FundamentalAmplitude(bool piecewise) {
  double a1 = 0;
  for (int b = 0; b < 256; ++b) {
    const double v = piecewise ? PiecewiseValue(b) - kPaDc : TriangleValue(b) - kTaDc;
    a1 += v * std::cos(2.0 * kPi * (b + 1) / 256.0);
  }
  return a1 * 2.0 / 256.0;
}

FixedPointPoints PrepareFixedPoint(const PreparedPoints& prepared, int subdivision,
                                   bool piecewise) {
  FixedPointPoints f;
  f.subdivision = subdivision;
  const int64_t n = prepared.size();
  f.xq.resize(n);
  f.yq.resize(n);
  f.c.resize(n);
  f.phase0.resize(n);
  f.a8.resize(n);
  const double s = prepared.pitch_m / subdivision;
  const double two32 = 4294967296.0;
  for (int64_t j = 0; j < n; ++j) {
    f.xq[j] = std::llround(prepared.x[j] / s);
    f.yq[j] = std::llround(prepared.y[j] / s);
    // c = round(2^32 · s² / (2λζ)) mod 2^32; s²·inv2lz = s²/(2λζ).
    const double c = std::nearbyint(s * s * prepared.inv2lz[j] * two32);
    f.c[j] = static_cast<uint32_t>(static_cast<uint64_t>(std::fmod(c, two32)));
    const double t0 = std::nearbyint(FracTurns(prepared.phase_turns[j]) * two32);
    f.phase0[j] = static_cast<uint32_t>(static_cast<uint64_t>(std::fmod(t0, two32)));
    f.a8[j] = prepared.amax > 0
                  ? static_cast<uint8_t>(std::lround(255.0 * prepared.amplitude[j] / prepared.amax))
                  : 0;
  }
  f.scale = prepared.amax / (255.0 * FundamentalAmplitude(piecewise));
  return f;
}

std::optional<PointGroups> GroupByColumn(const PreparedPoints& prepared, int64_t max_groups) {
  return GroupBy(prepared.x, prepared.inv2lz, max_groups);
}
std::optional<PointGroups> GroupByRow(const PreparedPoints& prepared, int64_t max_groups) {
  return GroupBy(prepared.y, prepared.inv2lz, max_groups);
}

TensorPrecision ResolvePrecision(const HologramOptions& options) {
  if (options.tensor_precision != TensorPrecision::kAuto) return options.tensor_precision;
  return options.min_snr_db <= ExpectedTensorSnrDb(TensorPrecision::kInt8)
             ? TensorPrecision::kInt8
             : TensorPrecision::kFp16;
}

Algorithm ResolveAlgorithm(const Device& device, const HologramOptions& options) {
  if (options.algorithm != Algorithm::kAuto) return options.algorithm;
  if (device.kind != DeviceKind::kCuda) return Algorithm::kReference;
  return options.min_snr_db <= ExpectedTensorSnrDb(TensorPrecision::kFp16) ? Algorithm::kTensor
                                                                            : Algorithm::kReference;
}

}  // namespace fresnel::hologram::internal
