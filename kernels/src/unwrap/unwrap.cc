// Validation and device dispatch for phase unwrapping.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fresnel/core/status.h"
#include "fresnel/core/uninitialized_array.h"
#include "fresnel/unwrap/unwrap.h"
#include "unwrap/unwrap_common.h"
#include "unwrap/unwrap_internal.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

namespace fresnel::unwrap {
namespace {

// Hard limits of the data layout, whatever Limits says: squared key distances need
// FinalRadius <= 16384, padded ids need (rows + 2) * (cols + 2) < 2^31.
constexpr int64_t kHardMaxSide = 32768;
constexpr int64_t kHardMaxPaddedPixels = (int64_t{1} << 31) - 1;

std::string Index2(const HostArray& a, int64_t index) {
  return absl::StrCat("[", index / a.dim(1), ",", index % a.dim(1), "]");
}

absl::Status ValidatePhaseShape(const HostArray& phase, const Limits& limits) {
  if (phase.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("phase.shape must be [rows, cols], got ",
                                                   ShapeString(phase.shape())));
  }
  if (phase.dtype() != DType::kFloat32 && phase.dtype() != DType::kFloat64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "phase.dtype must be float32 or float64, got ", DTypeName(phase.dtype())));
  }
  const int64_t rows = phase.dim(0), cols = phase.dim(1);
  if (rows < 2 || cols < 2) {
    return absl::InvalidArgumentError(absl::StrCat("phase.shape must be at least [2, 2], got ",
                                                   ShapeString(phase.shape())));
  }
  const int64_t max_side = std::min(limits.max_side, kHardMaxSide);
  if (rows > max_side || cols > max_side) {
    return absl::InvalidArgumentError(absl::StrCat("phase.shape ", ShapeString(phase.shape()),
                                                   " exceeds the limit of ", max_side,
                                                   " rows or columns"));
  }
  if (rows * cols > limits.max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat("phase.shape ", ShapeString(phase.shape()),
                                                   " has ", rows * cols,
                                                   " pixels, over the limit of ",
                                                   limits.max_pixels));
  }
  if ((rows + 2) * (cols + 2) > kHardMaxPaddedPixels) {
    return absl::InvalidArgumentError(absl::StrCat("phase.shape ", ShapeString(phase.shape()),
                                                   " exceeds the hard limit of 2^31 pixels"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCompanion(const HostArray& phase, const HostArray* a, const char* field,
                               bool real) {
  if (a == nullptr) return absl::OkStatus();
  if (a->shape() != phase.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".shape must equal phase.shape ",
                                                   ShapeString(phase.shape()), ", got ",
                                                   ShapeString(a->shape())));
  }
  if (real) {
    if (a->dtype() != DType::kFloat32 && a->dtype() != DType::kFloat64) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".dtype must be float32 or float64, got ", DTypeName(a->dtype())));
    }
  } else if (a->dtype() != DType::kUint8) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".dtype must be uint8, got ", DTypeName(a->dtype())));
  }
  return absl::OkStatus();
}

// The first index in [0, n) where bad(i) holds, or -1. Large arrays are scanned in blocks on
// all cores (TBB; a 4096^2 phase is checked before every unwrap is queued), each block in order
// and skipped once a lower index is known, so the answer is the sequential scan's.
template <class Bad>
int64_t FirstWhere(int64_t n, const Bad& bad) {
  constexpr int64_t kBlock = int64_t{1} << 16;
  const auto scan = [&bad](int64_t lo, int64_t hi) -> int64_t {
    for (int64_t i = lo; i < hi; ++i) {
      if (bad(i)) return i;
    }
    return -1;
  };
  if (n <= 4 * kBlock) return scan(0, n);
  std::atomic<int64_t> first{std::numeric_limits<int64_t>::max()};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, (n + kBlock - 1) / kBlock),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t b = r.begin(); b != r.end(); ++b) {
                        const int64_t lo = b * kBlock;
                        if (lo >= first.load(std::memory_order_relaxed)) return;
                        const int64_t i = scan(lo, std::min(n, lo + kBlock));
                        if (i < 0) continue;
                        int64_t seen = first.load(std::memory_order_relaxed);
                        while (i < seen && !first.compare_exchange_weak(seen, i)) {
                        }
                        return;  // the rest of this range lies above i
                      }
                    });
  const int64_t i = first.load();
  return i == std::numeric_limits<int64_t>::max() ? -1 : i;
}

// First unmasked phase value that is not finite or lies outside |phase| <= kPhaseLimit; -1
// when none.
template <class T>
int64_t FirstBadPhase(const T* p, const uint8_t* mask, int64_t n) {
  return FirstWhere(n, [p, mask](int64_t i) {
    if (mask != nullptr && mask[i] != 0) return false;
    const double v = static_cast<double>(p[i]);
    return !std::isfinite(v) || std::fabs(v) > kPhaseLimit;
  });
}

// First unmasked weight that is not finite or lies outside [0, 1]; -1 when none.
template <class T>
int64_t FirstBadWeight(const T* p, const uint8_t* mask, int64_t n) {
  return FirstWhere(n, [p, mask](int64_t i) {
    if (mask != nullptr && mask[i] != 0) return false;
    const double v = static_cast<double>(p[i]);
    return !(v >= 0.0 && v <= 1.0);  // NaN fails both comparisons
  });
}

template <class T>
int64_t FirstNonFinite(const T* p, const uint8_t* mask, int64_t n) {
  return FirstWhere(n, [p, mask](int64_t i) {
    if (mask != nullptr && mask[i] != 0) return false;
    return !std::isfinite(static_cast<double>(p[i]));
  });
}

double ElementAsDouble(const HostArray& a, int64_t index) {
  return a.dtype() == DType::kFloat32 ? static_cast<double>(a.data<float>()[index])
                                      : a.data<double>()[index];
}

}  // namespace

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kValidate: return "validate";
    case Stage::kResidues: return "residues";
    case Stage::kBranchCuts: return "branch_cuts";
    case Stage::kIntegrate: return "integrate";
    case Stage::kLeastSquares: return "least_squares";
    case Stage::kDone: return "done";
  }
  return "unknown";
}

namespace internal {

std::vector<int> RadiusSchedule(int rows, int cols) {
  const int final_radius = FinalRadius(rows, cols);
  std::vector<int> radii;
  int r = 1;
  while (r < final_radius) {
    radii.push_back(r);
    r = r < 8 ? r + 1 : r + r / 2;
  }
  radii.push_back(final_radius);
  return radii;
}

absl::Status BadPhaseValue(const HostArray& phase, int64_t index) {
  double v = ElementAsDouble(phase, index);
  if (!std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "phase%s = %g is not finite (mask the pixel to exclude it)", Index2(phase, index), v));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("phase%s = %.9g is outside the wrapped range |phase| <= %.4f",
                      Index2(phase, index), v, kPhaseLimit));
}

absl::Status BadQualityValue(const HostArray& quality, int64_t index) {
  return absl::InvalidArgumentError(absl::StrFormat("quality%s = %g is not finite",
                                                    Index2(quality, index),
                                                    ElementAsDouble(quality, index)));
}

absl::Status CheckPhaseValues(const HostArray& phase, const HostArray* mask) {
  const uint8_t* m = mask != nullptr ? mask->data<uint8_t>() : nullptr;
  int64_t bad = phase.dtype() == DType::kFloat32
                    ? FirstBadPhase(phase.data<float>(), m, phase.size())
                    : FirstBadPhase(phase.data<double>(), m, phase.size());
  return bad < 0 ? absl::OkStatus() : BadPhaseValue(phase, bad);
}

absl::Status CheckQualityValues(const HostArray& quality, const HostArray* mask) {
  const uint8_t* m = mask != nullptr ? mask->data<uint8_t>() : nullptr;
  int64_t bad = quality.dtype() == DType::kFloat32
                    ? FirstNonFinite(quality.data<float>(), m, quality.size())
                    : FirstNonFinite(quality.data<double>(), m, quality.size());
  return bad < 0 ? absl::OkStatus() : BadQualityValue(quality, bad);
}

absl::Status Report(const ProgressFn& progress, Stage stage, double fraction) {
  if (progress && !progress(stage, fraction)) {
    return absl::CancelledError(absl::StrCat("unwrap cancelled during ", StageName(stage)));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status ValidateGoldstein(const HostArray& phase, const GoldsteinOptions& options) {
  FRESNEL_RETURN_IF_ERROR(ValidatePhaseShape(phase, options.limits));
  FRESNEL_RETURN_IF_ERROR(ValidateCompanion(phase, options.mask, "mask", /*real=*/false));
  FRESNEL_RETURN_IF_ERROR(ValidateCompanion(phase, options.quality, "quality", /*real=*/true));
  if (options.iterations_per_radius < 1 || options.iterations_per_radius > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.iterations_per_radius must be in [1, 64], got ", options.iterations_per_radius));
  }
  if (options.seed.has_value()) {
    const Pixel& s = *options.seed;
    if (s.row < 0 || s.row >= phase.dim(0) || s.col < 0 || s.col >= phase.dim(1)) {
      return absl::InvalidArgumentError(absl::StrCat("seed (", s.row, ", ", s.col,
                                                     ") is outside the image ",
                                                     ShapeString(phase.shape())));
    }
    if (options.mask != nullptr &&
        options.mask->data<uint8_t>()[s.row * phase.dim(1) + s.col] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("seed (", s.row, ", ", s.col, ") is a masked pixel"));
    }
  }
  return absl::OkStatus();
}

namespace internal {

absl::Status CheckResultBuffers(const HostArray& phase, const ResultBuffers* into, bool maps) {
  if (into == nullptr) return absl::OkStatus();
  const struct {
    const HostArray* buffer;
    const char* name;
    DType dtype;
    bool map;
  } arrays[] = {{&into->unwrapped, "unwrapped", phase.dtype(), false},
                {&into->residues, "residues", DType::kInt16, true},
                {&into->cuts, "cuts", DType::kUint8, true},
                {&into->regions, "regions", DType::kInt32, true},
                {&into->unreached, "unreached", DType::kUint8, true}};
  for (const auto& a : arrays) {
    if (a.buffer->ndim() == 0) continue;
    if (a.map && !maps) {
      return absl::InvalidArgumentError(
          absl::StrCat("into.", a.name, ": this call returns no maps"));
    }
    if (a.buffer->dtype() != a.dtype || a.buffer->shape() != phase.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "into.", a.name, ": ", DTypeName(a.buffer->dtype()), " ", ShapeString(a.buffer->shape()),
          ", the result is ", DTypeName(a.dtype), " ", ShapeString(phase.shape())));
    }
  }
  return absl::OkStatus();
}

HostArray ResultArray(HostArray* buffer, DType dtype, const std::vector<int64_t>& shape) {
  if (buffer != nullptr && buffer->ndim() > 0) return std::move(*buffer);
  return UninitializedArray(dtype, shape, FirstTouch::kOnWrite);
}

void DeliverInto(HostArray* buffer, HostArray* array) {
  if (buffer == nullptr || buffer->ndim() == 0 || array->ndim() == 0) return;
  if (buffer->raw() != array->raw() && array->nbytes() > 0) {
    std::copy_n(static_cast<const char*>(array->raw()), array->nbytes(),
                static_cast<char*>(buffer->raw()));
  }
  *array = std::move(*buffer);
}

}  // namespace internal

absl::StatusOr<GoldsteinResult> UnwrapGoldstein(const Device& device, const HostArray& phase,
                                                const GoldsteinOptions& options,
                                                StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(internal::Report(options.progress, Stage::kValidate, 0.0));
  FRESNEL_RETURN_IF_ERROR(ValidateGoldstein(phase, options));
  FRESNEL_RETURN_IF_ERROR(internal::CheckResultBuffers(phase, options.into, options.return_maps));
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  if (device.kind == DeviceKind::kCuda) {
#if FRESNEL_WITH_CUDA
    return internal::UnwrapGoldsteinCuda(device, phase, options, times);
#else
    return absl::FailedPreconditionError("this build has no CUDA support");
#endif
  }
  auto start = std::chrono::steady_clock::now();
  auto result = internal::UnwrapGoldsteinCpu(phase, options);
  if (result.ok() && options.into != nullptr) {
    internal::DeliverInto(&options.into->unwrapped, &result->unwrapped);
    internal::DeliverInto(&options.into->residues, &result->residues);
    internal::DeliverInto(&options.into->cuts, &result->cuts);
    internal::DeliverInto(&options.into->regions, &result->regions);
    internal::DeliverInto(&options.into->unreached, &result->unreached);
  }
  if (times != nullptr) {
    *times = StageTimes{};
    times->compute_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return result;
}

int64_t GoldsteinDeviceBytes(int64_t rows, int64_t cols, DType dtype, bool has_mask,
                             bool has_quality) {
  const int64_t n = rows * cols;
  const int64_t t = static_cast<int64_t>(DTypeSize(dtype));
  int64_t bytes = 2 * n * t;       // phase in, unwrapped out
  bytes += 2 * n;                  // residue map (int16)
  bytes += 2 * n;                  // cut and unreached maps
  bytes += 4 * n * 3;              // tile labels, tile k, region labels
  bytes += 8 * n;                  // union-find entries (one per pixel index)
  bytes += 20 * (n / 2 + 16);      // residue list: word, key, proposal, proposal step
  if (has_mask) bytes += n + 4 * n;  // mask, island union-find
  if (has_quality) bytes += n * t + 8 * n + 4 * n;  // quality, node and region seed keys
  bytes += 4 * n;                  // seed k per region
  bytes += 64 << 20;               // bins, counters, rows, allocator slack
  return bytes;
}

absl::Status ValidateLeastSquares(const HostArray& phase, const LeastSquaresOptions& options) {
  FRESNEL_RETURN_IF_ERROR(ValidatePhaseShape(phase, options.limits));
  FRESNEL_RETURN_IF_ERROR(ValidateCompanion(phase, options.mask, "mask", /*real=*/false));
  FRESNEL_RETURN_IF_ERROR(ValidateCompanion(phase, options.weights, "weights", /*real=*/true));
  if (options.weights != nullptr && !options.weighted) {
    return absl::InvalidArgumentError("weights requires weighted = true");
  }
  if (!(options.tolerance > 0.0 && options.tolerance < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tolerance must be in (0, 1), got ", options.tolerance));
  }
  if (options.max_iterations < 1 || options.max_iterations > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_iterations must be in [1, 10000], got ", options.max_iterations));
  }
  return absl::OkStatus();
}

namespace internal {

absl::Status CheckWeightValues(const HostArray& weights, const HostArray* mask,
                               const char* field) {
  const uint8_t* m = mask != nullptr ? mask->data<uint8_t>() : nullptr;
  int64_t bad = weights.dtype() == DType::kFloat32
                    ? FirstBadWeight(weights.data<float>(), m, weights.size())
                    : FirstBadWeight(weights.data<double>(), m, weights.size());
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("%s%s = %g is not in [0, 1]", field,
                                                    Index2(weights, bad),
                                                    ElementAsDouble(weights, bad)));
}

bool RunsWeighted(const LeastSquaresOptions& options) {
  return options.weighted && (options.weights != nullptr || options.mask != nullptr);
}

}  // namespace internal

absl::StatusOr<LeastSquaresResult> UnwrapLeastSquares(const Device& device,
                                                      const HostArray& phase,
                                                      const LeastSquaresOptions& options,
                                                      StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(internal::Report(options.progress, Stage::kValidate, 0.0));
  FRESNEL_RETURN_IF_ERROR(ValidateLeastSquares(phase, options));
  FRESNEL_RETURN_IF_ERROR(internal::CheckResultBuffers(phase, options.into, false));
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  if (options.weights != nullptr) {
    FRESNEL_RETURN_IF_ERROR(internal::CheckWeightValues(*options.weights, options.mask));
  }
  if (device.kind == DeviceKind::kCuda) {
#if FRESNEL_WITH_CUDA
    return internal::UnwrapLeastSquaresCuda(device, phase, options, times);
#else
    return absl::FailedPreconditionError("this build has no CUDA support");
#endif
  }
  auto start = std::chrono::steady_clock::now();
  auto result = internal::UnwrapLeastSquaresCpu(phase, options);
  if (result.ok() && options.into != nullptr) {
    internal::DeliverInto(&options.into->unwrapped, &result->unwrapped);
  }
  if (times != nullptr) {
    *times = StageTimes{};
    times->compute_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return result;
}

int64_t LeastSquaresDeviceBytes(int64_t rows, int64_t cols, DType dtype, bool has_mask,
                                bool weighted) {
  const int64_t n = rows * cols;
  const int64_t t = static_cast<int64_t>(DTypeSize(dtype));
  int64_t bytes = 2 * n * t;  // phase in, unwrapped out
  if (has_mask) bytes += n;   // mask
  bytes += 6 * 4 * n;         // float32 gradients, divergence and DCT buffers
  // PCG: the weights and float32 edge weights and vectors (w_x, w_y, x, z, p, q).
  if (weighted) bytes += n * t + 6 * 4 * n;
  return bytes + (64 << 20);  // cuFFT's workspace and allocator slack
}

namespace {

GoldsteinOptions GoldsteinOptionsOf(const UnwrapOptions& in) {
  GoldsteinOptions o;
  o.mask = in.mask;
  o.quality = in.quality;
  o.seed = in.seed;
  o.iterations_per_radius = in.iterations_per_radius;
  o.return_maps = in.return_maps;
  o.limits = in.limits;
  o.into = in.into;
  return o;
}

LeastSquaresOptions LeastSquaresOptionsOf(const UnwrapOptions& in) {
  LeastSquaresOptions o;
  o.mask = in.mask;
  o.congruent = in.congruent;
  o.weighted = in.method == Method::kWeightedLeastSquares;
  o.weights = o.weighted ? in.quality : nullptr;
  o.limits = in.limits;
  o.into = in.into;
  return o;
}

// The fraction of the whole call at `fraction` of `stage`: each working stage counts equally.
double Overall(Stage stage, double fraction) {
  switch (stage) {
    case Stage::kValidate: return 0;
    case Stage::kResidues: return fraction / 3;
    case Stage::kBranchCuts: return (1 + fraction) / 3;
    case Stage::kIntegrate: return (2 + fraction) / 3;
    case Stage::kLeastSquares: return fraction;
    case Stage::kDone: return 1;
  }
  return 0;
}

ProgressFn StageHook(const OverallProgressFn& progress) {
  if (!progress) return nullptr;
  return [&progress](Stage stage, double fraction) {
    return progress(stage, fraction, Overall(stage, fraction));
  };
}

}  // namespace

const char* MethodName(Method method) {
  switch (method) {
    case Method::kGoldstein: return "goldstein";
    case Method::kLeastSquares: return "least_squares";
    case Method::kWeightedLeastSquares: return "weighted_least_squares";
  }
  return "unknown";
}

absl::Status ValidateUnwrap(const HostArray& phase, const UnwrapOptions& options) {
  if (options.method == Method::kGoldstein) {
    FRESNEL_RETURN_IF_ERROR(ValidateGoldstein(phase, GoldsteinOptionsOf(options)));
  } else {
    if (options.method == Method::kLeastSquares && options.quality != nullptr) {
      return absl::InvalidArgumentError(
          "quality: LEAST_SQUARES takes no quality map (it is unweighted); drop it or use "
          "WEIGHTED_LEAST_SQUARES or GOLDSTEIN");
    }
    FRESNEL_RETURN_IF_ERROR(ValidateLeastSquares(phase, LeastSquaresOptionsOf(options)));
  }
  FRESNEL_RETURN_IF_ERROR(internal::CheckPhaseValues(phase, options.mask));
  if (options.quality != nullptr) {
    FRESNEL_RETURN_IF_ERROR(internal::CheckQualityValues(*options.quality, options.mask));
    if (options.method == Method::kWeightedLeastSquares) {
      FRESNEL_RETURN_IF_ERROR(
          internal::CheckWeightValues(*options.quality, options.mask, "quality"));
    }
  }
  return absl::OkStatus();
}

int64_t UnwrapDeviceBytes(const HostArray& phase, const UnwrapOptions& options) {
  const int64_t rows = phase.ndim() == 2 ? phase.dim(0) : 0;
  const int64_t cols = phase.ndim() == 2 ? phase.dim(1) : 0;
  if (options.method == Method::kGoldstein) {
    return GoldsteinDeviceBytes(rows, cols, phase.dtype(), options.mask != nullptr,
                                options.quality != nullptr);
  }
  return LeastSquaresDeviceBytes(rows, cols, phase.dtype(), options.mask != nullptr,
                                 options.method == Method::kWeightedLeastSquares);
}

absl::StatusOr<UnwrapResult> Unwrap(const Device& device, const HostArray& phase,
                                    const UnwrapOptions& options, StageTimes* times) {
  UnwrapResult out;
  out.method = options.method;
  if (options.method == Method::kGoldstein) {
    GoldsteinOptions o = GoldsteinOptionsOf(options);
    o.progress = StageHook(options.progress);
    FRESNEL_ASSIGN_OR_RETURN(GoldsteinResult r, UnwrapGoldstein(device, phase, o, times));
    out.unwrapped = std::move(r.unwrapped);
    out.residues = std::move(r.residues);
    out.cuts = std::move(r.cuts);
    out.regions = std::move(r.regions);
    out.unreached = std::move(r.unreached);
    out.stats = r.stats;
    out.stage_times = r.stage_times;
    return out;
  }
  LeastSquaresOptions o = LeastSquaresOptionsOf(options);
  o.progress = StageHook(options.progress);
  FRESNEL_ASSIGN_OR_RETURN(LeastSquaresResult r, UnwrapLeastSquares(device, phase, o, times));
  out.unwrapped = std::move(r.unwrapped);
  out.pcg_iterations = r.iterations;
  out.pcg_residual = r.residual;
  if (options.mask != nullptr) {
    const uint8_t* m = options.mask->data<uint8_t>();
    for (int64_t i = 0; i < options.mask->size(); ++i) out.stats.masked_pixels += m[i] != 0;
  }
  return out;
}

}  // namespace fresnel::unwrap
