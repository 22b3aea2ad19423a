// Per-point preparation shared by every algorithm: alias-free ranges, fixed-point quantities,
// point grouping, and the algorithm / precision choice.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <memory>
#include <vector>
#include <cmath>
#include <cstring>
#include <tuple>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
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

namespace {

// One point's prepared quantities into slot j of `p` (the geometry is p's).
inline void PrepareOne(PreparedPoints* p, size_t j, double x, double y, double z, double a,
                       double phase) {
  p->x[j] = x;
  p->y[j] = y;
  p->inv2lz[j] = 1.0 / (2.0 * p->wavelength_m * z);
  p->amplitude[j] = a;
  p->phase_turns[j] = phase / (2.0 * kPi);
  if (p->alias == AliasPolicy::kClip) {
    // Local frequency |x − δ|/(λζ) ≤ 1/(2p)  ⟺  |x − δ| ≤ λζ/(2p).
    const double half = p->wavelength_m * z / (2.0 * p->pitch_m);
    std::tie(p->ulo[j], p->uhi[j]) = AliasFreeRange(x, half, p->width, p->pitch_m);
    std::tie(p->vlo[j], p->vhi[j]) = AliasFreeRange(y, half, p->height, p->pitch_m);
  } else {
    p->ulo[j] = 0;
    p->uhi[j] = static_cast<int32_t>(p->width - 1);
    p->vlo[j] = 0;
    p->vhi[j] = static_cast<int32_t>(p->height - 1);
  }
}

void ResizePoints(PreparedPoints* p, size_t n) {
  for (auto* v : {&p->x, &p->y, &p->inv2lz, &p->amplitude, &p->phase_turns}) v->resize(n);
  for (auto* v : {&p->ulo, &p->uhi, &p->vlo, &p->vhi}) v->resize(n);
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// Appends `rows` points read by `read(i, &x, &y, &z, &a, &phase)`: checks and converts in one
// pass over blocks of kBlock points on all cores (video frames of 1e5-1e6 points), each block
// keeping its first bad point and its amplitude range, so the result (and the point an error
// names: the first bad one) does not depend on the scheduling.
template <class Read>
absl::Status AppendPoints(PreparedPoints* p, const Limits& limits, int64_t rows,
                          const Read& read) {
  const int64_t old = p->size();
  if (rows < 0 || old + rows > limits.max_points) {
    return Invalid("points", absl::StrCat(old + rows, " points exceed the limit of ",
                                          limits.max_points));
  }
  if (rows == 0) return absl::OkStatus();
  ResizePoints(p, static_cast<size_t>(old + rows));
  constexpr int64_t kBlock = 16384;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  struct BlockResult {
    int64_t first_bad = -1;
    double amax = 0;
    double amin = 0;
    bool clipped = false;
  };
  std::vector<BlockResult> results(static_cast<size_t>(blocks));
  const int32_t last_u = static_cast<int32_t>(p->width - 1);
  const int32_t last_v = static_cast<int32_t>(p->height - 1);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, blocks, 1),
                    [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t b = r.begin(); b < r.end(); ++b) {
      BlockResult& out = results[static_cast<size_t>(b)];
      double amax = 0, amin = INFINITY;
      bool clipped = false;
      const int64_t end = std::min(rows, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < end; ++i) {
        double x, y, z, a, phase;
        read(i, &x, &y, &z, &a, &phase);
        if (!PointOk(x, y, z, a, phase)) {
          out.first_bad = i;
          return;
        }
        const size_t j = static_cast<size_t>(old + i);
        PrepareOne(p, j, x, y, z, a, phase);
        amax = std::max(amax, a);
        amin = std::min(amin, a);
        clipped = clipped || p->ulo[j] != 0 || p->uhi[j] != last_u || p->vlo[j] != 0 ||
                  p->vhi[j] != last_v;
      }
      out.amax = amax;
      out.amin = amin;
      out.clipped = clipped;
    }
  });
  for (const BlockResult& b : results) {
    if (b.first_bad >= 0) {
      ResizePoints(p, static_cast<size_t>(old));
      Point pt;
      read(b.first_bad, &pt.x_m, &pt.y_m, &pt.z_m, &pt.amplitude, &pt.phase_rad);
      return CheckPoint(pt, old + b.first_bad);
    }
  }
  for (const BlockResult& b : results) {
    p->amin = old == 0 && &b == &results[0] ? b.amin : std::min(p->amin, b.amin);
    p->amax = std::max(p->amax, b.amax);
    p->clipped = p->clipped || b.clipped;
  }
  return absl::OkStatus();
}

template <class T>
absl::Status AppendRowsTyped(PreparedPoints* p, const Limits& limits, const char* data,
                             int64_t rows, int columns) {
  return AppendPoints(p, limits, rows,
                      [data, columns](int64_t i, double* x, double* y, double* z, double* a,
                                      double* phase) {
                        T v[5] = {0, 0, 0, 0, 0};
                        std::memcpy(v, data + i * columns * sizeof(T), columns * sizeof(T));
                        *x = v[0];
                        *y = v[1];
                        *z = v[2];
                        *a = v[3];
                        *phase = v[4];
                      });
}

}  // namespace

bool SameGeometry(const PreparedPoints& p, const HologramOptions& o) {
  return p.width == o.width && p.height == o.height && p.pitch_m == o.pitch_m &&
         p.wavelength_m == o.wavelength_m && p.alias == o.alias;
}

}  // namespace fresnel::hologram::internal

namespace fresnel::hologram {

using internal::PreparedPoints;

PreparedCloud::PreparedCloud() = default;
PreparedCloud::~PreparedCloud() = default;
PreparedCloud::PreparedCloud(PreparedCloud&&) noexcept = default;
PreparedCloud& PreparedCloud::operator=(PreparedCloud&&) noexcept = default;
int64_t PreparedCloud::size() const { return p_ == nullptr ? 0 : p_->size(); }
int64_t PreparedCloud::host_bytes() const {
  // Five doubles and four pixel bounds per point.
  return size() * static_cast<int64_t>(5 * sizeof(double) + 4 * sizeof(int32_t));
}

namespace {
std::unique_ptr<PreparedPoints> EmptyPoints(const HologramOptions& o) {
  auto p = std::make_unique<PreparedPoints>();
  p->width = o.width;
  p->height = o.height;
  p->pitch_m = o.pitch_m;
  p->wavelength_m = o.wavelength_m;
  p->alias = o.alias;
  return p;
}
}  // namespace

CloudBuilder::CloudBuilder(const HologramOptions& options, const Limits& limits)
    : p_(EmptyPoints(options)), limits_(limits) {}
CloudBuilder::~CloudBuilder() = default;
CloudBuilder::CloudBuilder(CloudBuilder&&) noexcept = default;
CloudBuilder& CloudBuilder::operator=(CloudBuilder&&) noexcept = default;

int64_t CloudBuilder::size() const { return p_->size(); }

absl::Status CloudBuilder::AppendRows(const void* data, DType dtype, int64_t rows, int columns) {
  if (columns != 4 && columns != 5) {
    return internal::Invalid("points", absl::StrCat("must have 4 (x_m, y_m, z_m, amplitude) or "
                                                    "5 (+ phase_rad) columns, got ", columns));
  }
  const char* bytes = static_cast<const char*>(data);
  switch (dtype) {
    case DType::kFloat32:
      return internal::AppendRowsTyped<float>(p_.get(), limits_, bytes, rows, columns);
    case DType::kFloat64:
      return internal::AppendRowsTyped<double>(p_.get(), limits_, bytes, rows, columns);
    default: break;
  }
  return internal::Invalid("points", absl::StrCat("must be float32 or float64, got ",
                                                  DTypeName(dtype)));
}

absl::Status CloudBuilder::Append(const PointCloud& points) {
  const Point* v = points.data();
  return internal::AppendPoints(
      p_.get(), limits_, static_cast<int64_t>(points.size()),
      [v](int64_t i, double* x, double* y, double* z, double* a, double* phase) {
        *x = v[i].x_m;
        *y = v[i].y_m;
        *z = v[i].z_m;
        *a = v[i].amplitude;
        *phase = v[i].phase_rad;
      });
}

absl::StatusOr<PreparedCloud> CloudBuilder::Finish() {
  if (p_->size() == 0) return internal::Invalid("points", "the point cloud is empty");
  HologramOptions geometry;
  geometry.width = p_->width;
  geometry.height = p_->height;
  geometry.pitch_m = p_->pitch_m;
  geometry.wavelength_m = p_->wavelength_m;
  geometry.alias = p_->alias;
  std::unique_ptr<PreparedPoints> done = std::move(p_);
  p_ = EmptyPoints(geometry);
  return internal::CloudAccess::Wrap(std::move(done));
}

absl::StatusOr<PreparedCloud> PrepareCloud(const PointCloud& points, const HologramOptions& options,
                                           const Limits& limits) {
  CloudBuilder builder(options, limits);
  FRESNEL_RETURN_IF_ERROR(builder.Append(points));
  return builder.Finish();
}

}  // namespace fresnel::hologram

namespace fresnel::hologram::internal {

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
