#include "server/services/unwrap_params.h"

#include <cmath>
#include <functional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/array_convert.h"
#include "server/call.h"

namespace fresnel::server {
namespace {

std::string PixelName(const HostArray& a, int64_t index) {
  return absl::StrCat("[", index / a.dim(1), ",", index % a.dim(1), "]");
}

// The first unmasked element that is not finite (or, with `limit` > 0, exceeds it in magnitude)
// in raster order; -1 when there is none.
template <class T>
int64_t FirstBad(const T* values, const uint8_t* mask, int64_t n, double limit) {
  for (int64_t i = 0; i < n; ++i) {
    if (mask != nullptr && mask[i] != 0) continue;
    const double v = static_cast<double>(values[i]);
    if (!std::isfinite(v) || (limit > 0 && std::fabs(v) > limit)) return i;
  }
  return -1;
}

double At(const HostArray& a, int64_t i) {
  return a.dtype() == DType::kFloat32 ? static_cast<double>(a.data<float>()[i])
                                      : a.data<double>()[i];
}

// Same wording as fresnel::unwrap's own element checks.
absl::Status CheckValues(const UnwrapInput& in) {
  const uint8_t* mask = in.mask ? in.mask->data<uint8_t>() : nullptr;
  const HostArray& p = in.phase;
  const int64_t bad = p.dtype() == DType::kFloat32
                          ? FirstBad(p.data<float>(), mask, p.size(), unwrap::kPhaseLimit)
                          : FirstBad(p.data<double>(), mask, p.size(), unwrap::kPhaseLimit);
  if (bad >= 0) {
    const double v = At(p, bad);
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "phase%s = %g is not finite (mask the pixel to exclude it)", PixelName(p, bad), v));
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("phase%s = %.9g is outside the wrapped range |phase| <= %.4f",
                        PixelName(p, bad), v, unwrap::kPhaseLimit));
  }
  if (in.quality) {
    const HostArray& q = *in.quality;
    const int64_t bad_q = q.dtype() == DType::kFloat32
                              ? FirstBad(q.data<float>(), mask, q.size(), 0)
                              : FirstBad(q.data<double>(), mask, q.size(), 0);
    if (bad_q >= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("quality%s = %g is not finite", PixelName(q, bad_q), At(q, bad_q)));
    }
    if (in.method == v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES) {
      for (int64_t i = 0; i < q.size(); ++i) {
        if (mask != nullptr && mask[i] != 0) continue;
        if (At(q, i) < 0 || At(q, i) > 1) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "quality%s = %g is not in [0, 1] (the weights of WEIGHTED_LEAST_SQUARES)",
              PixelName(q, i), At(q, i)));
        }
      }
    }
  }
  return absl::OkStatus();
}

unwrap::GoldsteinOptions GoldsteinOptionsOf(const UnwrapInput& in) {
  unwrap::GoldsteinOptions o;
  o.mask = in.mask ? &*in.mask : nullptr;
  o.quality = in.quality ? &*in.quality : nullptr;
  o.seed = in.seed;
  o.iterations_per_radius = in.iterations_per_radius;
  o.return_maps = in.return_maps;
  o.limits = in.limits;
  return o;
}

unwrap::LeastSquaresOptions LeastSquaresOptionsOf(const UnwrapInput& in) {
  unwrap::LeastSquaresOptions o;
  o.mask = in.mask ? &*in.mask : nullptr;
  o.congruent = in.congruent;
  o.weighted = in.method == v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES;
  o.weights = o.weighted && in.quality ? &*in.quality : nullptr;
  o.limits = in.limits;
  return o;
}

uint64_t HashCombine(uint64_t seed, uint64_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2));
}

uint64_t HashArray(uint64_t seed, const HostArray* a) {
  if (a == nullptr) return HashCombine(seed, 0x6e6f6e65ull);
  seed = HashCombine(seed, static_cast<uint64_t>(a->dtype()) + 1);
  for (int64_t d : a->shape()) seed = HashCombine(seed, static_cast<uint64_t>(d));
  return HashCombine(seed, std::hash<std::string_view>()(std::string_view(a->bytes())));
}

}  // namespace

const char* UnwrapMethodName(v1::UnwrapMethod method) {
  switch (method) {
    case v1::UNWRAP_METHOD_GOLDSTEIN: return "goldstein";
    case v1::UNWRAP_METHOD_LEAST_SQUARES: return "least_squares";
    case v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES: return "weighted_least_squares";
    default: return "unknown";
  }
}

int64_t UnwrapInput::InputBytes() const {
  return static_cast<int64_t>(phase.nbytes() + (mask ? mask->nbytes() : 0) +
                              (quality ? quality->nbytes() : 0));
}

int64_t UnwrapInput::OutputBytes() const {
  const int64_t n = rows() * cols();
  int64_t bytes = n * static_cast<int64_t>(DTypeSize(phase.dtype()));
  if (method == v1::UNWRAP_METHOD_GOLDSTEIN && return_maps) {
    bytes += n * (2 + 1 + 4 + 1);  // residues int16, cuts uint8, regions int32, unreached uint8
  }
  return bytes;
}

int64_t UnwrapInput::DeviceBytes() const {
  if (method == v1::UNWRAP_METHOD_GOLDSTEIN) {
    return unwrap::GoldsteinDeviceBytes(rows(), cols(), phase.dtype(), mask.has_value(),
                                        quality.has_value());
  }
  // Least squares on CUDA: phase in and out, the mask, and about six float32 work arrays of the
  // image's size (gradients, divergence, DCT buffers), plus cuFFT's workspace.
  // Weighted: the weights and six more float32 arrays (edge weights, PCG's x, z, p, q).
  const int64_t n = rows() * cols();
  int64_t bytes = 2 * n * static_cast<int64_t>(DTypeSize(phase.dtype())) + n + 6 * 4 * n;
  if (method == v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES) bytes += 6 * 4 * n;
  return bytes + (64 << 20);
}

uint64_t UnwrapInput::Fingerprint() const {
  uint64_t h = static_cast<uint64_t>(method) + 1;
  h = HashCombine(h, seed ? static_cast<uint64_t>(seed->row) * 1000003u + seed->col + 1 : 0);
  h = HashCombine(h, static_cast<uint64_t>(iterations_per_radius));
  h = HashCombine(h, (return_maps ? 1 : 0) | (congruent ? 2 : 0));
  h = HashArray(h, &phase);
  h = HashArray(h, mask ? &*mask : nullptr);
  return HashArray(h, quality ? &*quality : nullptr);
}

absl::StatusOr<UnwrapInput> ParseUnwrap(const v1::UnwrapRequest& request, HostArray phase,
                                        std::optional<HostArray> mask,
                                        std::optional<HostArray> quality,
                                        const unwrap::Limits& limits) {
  UnwrapInput in;
  in.limits = limits;
  in.request_id = request.request_id();
  switch (request.method()) {
    case v1::UNWRAP_METHOD_GOLDSTEIN:
    case v1::UNWRAP_METHOD_LEAST_SQUARES:
    case v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES: in.method = request.method(); break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("method: unknown unwrap method ", static_cast<int>(request.method()),
                       " (GOLDSTEIN, LEAST_SQUARES or WEIGHTED_LEAST_SQUARES)"));
  }
  const v1::UnwrapOptions& o = request.options();
  const bool goldstein = in.method == v1::UNWRAP_METHOD_GOLDSTEIN;
  if (goldstein) {
    if (o.has_congruent()) {
      return absl::InvalidArgumentError("options.congruent applies to LEAST_SQUARES only");
    }
    if (o.iterations_per_radius() < 0 || o.iterations_per_radius() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.iterations_per_radius must be in [1, 64] (0 means 8), got ",
                       o.iterations_per_radius()));
    }
    if (o.iterations_per_radius() != 0) in.iterations_per_radius = o.iterations_per_radius();
    if (o.has_seed()) in.seed = unwrap::Pixel{o.seed().row(), o.seed().col()};
    in.return_maps = !o.has_return_maps() || o.return_maps();
  } else {
    if (quality && in.method == v1::UNWRAP_METHOD_LEAST_SQUARES) {
      return absl::InvalidArgumentError(
          "quality: LEAST_SQUARES takes no quality map (it is unweighted); drop it or use "
          "WEIGHTED_LEAST_SQUARES or GOLDSTEIN");
    }
    if (o.has_seed()) return absl::InvalidArgumentError("options.seed applies to GOLDSTEIN only");
    if (o.iterations_per_radius() != 0) {
      return absl::InvalidArgumentError("options.iterations_per_radius applies to GOLDSTEIN only");
    }
    in.congruent = !o.has_congruent() || o.congruent();
    in.return_maps = false;
  }
  FRESNEL_ASSIGN_OR_RETURN(in.preference, PreferenceOf(request.device()));
  in.phase = std::move(phase);
  in.mask = std::move(mask);
  in.quality = std::move(quality);
  if (goldstein) {
    FRESNEL_RETURN_IF_ERROR(unwrap::ValidateGoldstein(in.phase, GoldsteinOptionsOf(in)));
  } else {
    FRESNEL_RETURN_IF_ERROR(unwrap::ValidateLeastSquares(in.phase, LeastSquaresOptionsOf(in)));
  }
  FRESNEL_RETURN_IF_ERROR(CheckValues(in));
  return in;
}

absl::StatusOr<UnwrapInput> ParseUnwrap(v1::UnwrapRequest* request, const unwrap::Limits& limits) {
  if (!request->has_phase()) return absl::InvalidArgumentError("phase: required");
  FRESNEL_ASSIGN_OR_RETURN(HostArray phase,
                           FromProto(std::move(*request->mutable_phase()), "phase"));
  std::optional<HostArray> mask, quality;
  if (request->has_mask()) {
    FRESNEL_ASSIGN_OR_RETURN(mask, FromProto(std::move(*request->mutable_mask()), "mask"));
  }
  if (request->has_quality()) {
    FRESNEL_ASSIGN_OR_RETURN(quality, FromProto(std::move(*request->mutable_quality()), "quality"));
  }
  return ParseUnwrap(*request, std::move(phase), std::move(mask), std::move(quality), limits);
}

int64_t UnwrapOutput::bytes() const {
  int64_t total = 0;
  for (const auto& a : Arrays()) total += static_cast<int64_t>(a.second->nbytes());
  return total;
}

std::vector<std::pair<v1::UnwrapArray, const HostArray*>> UnwrapOutput::Arrays() const {
  std::vector<std::pair<v1::UnwrapArray, const HostArray*>> out;
  out.emplace_back(v1::UNWRAP_ARRAY_UNWRAPPED, &unwrapped);
  const std::pair<v1::UnwrapArray, const HostArray*> maps[] = {
      {v1::UNWRAP_ARRAY_RESIDUES, &residues},
      {v1::UNWRAP_ARRAY_CUTS, &cuts},
      {v1::UNWRAP_ARRAY_REGIONS, &regions},
      {v1::UNWRAP_ARRAY_UNREACHED, &unreached}};
  for (const auto& m : maps) {
    if (m.second->ndim() > 0) out.push_back(m);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<UnwrapOutput>> RunUnwrap(const Device& device,
                                                        const UnwrapInput& input, StageTimes* times,
                                                        const JobProgressFn& progress) {
  auto output = std::make_shared<UnwrapOutput>();
  output->method = input.method;
  const bool goldstein = input.method == v1::UNWRAP_METHOD_GOLDSTEIN;
  unwrap::ProgressFn hook;
  if (progress) {
    hook = [&progress](unwrap::Stage stage, double fraction) {
      // Each working stage of the method counts for an equal share of the whole.
      double overall = 0;
      switch (stage) {
        case unwrap::Stage::kValidate: overall = 0; break;
        case unwrap::Stage::kResidues: overall = fraction / 3; break;
        case unwrap::Stage::kBranchCuts: overall = (1 + fraction) / 3; break;
        case unwrap::Stage::kIntegrate: overall = (2 + fraction) / 3; break;
        case unwrap::Stage::kLeastSquares: overall = fraction; break;
        case unwrap::Stage::kDone: overall = 1; break;
      }
      return progress(unwrap::StageName(stage), fraction, overall);
    };
  }
  if (goldstein) {
    unwrap::GoldsteinOptions o = GoldsteinOptionsOf(input);
    o.progress = hook;
    FRESNEL_ASSIGN_OR_RETURN(unwrap::GoldsteinResult r,
                             unwrap::UnwrapGoldstein(device, input.phase, o, times));
    output->unwrapped = std::move(r.unwrapped);
    output->residues = std::move(r.residues);
    output->cuts = std::move(r.cuts);
    output->regions = std::move(r.regions);
    output->unreached = std::move(r.unreached);
    output->stats = r.stats;
    output->stage_times = r.stage_times;
  } else {
    unwrap::LeastSquaresOptions o = LeastSquaresOptionsOf(input);
    o.progress = hook;
    FRESNEL_ASSIGN_OR_RETURN(unwrap::LeastSquaresResult r,
                             unwrap::UnwrapLeastSquares(device, input.phase, o, times));
    output->unwrapped = std::move(r.unwrapped);
    output->pcg_iterations = r.iterations;
    output->pcg_residual = r.residual;
    if (input.mask) {
      const uint8_t* m = input.mask->data<uint8_t>();
      for (int64_t i = 0; i < input.mask->size(); ++i) output->stats.masked_pixels += m[i] != 0;
    }
  }
  return output;
}

void FillResultHeader(const UnwrapOutput& output, v1::UnwrapResponse* response) {
  response->set_method(output.method);
  const unwrap::GoldsteinStats& s = output.stats;
  v1::UnwrapStats* stats = response->mutable_stats();
  stats->set_positive_residues(s.positive_residues);
  stats->set_negative_residues(s.negative_residues);
  stats->set_residue_pairs(s.residue_pairs);
  stats->set_border_cuts(s.border_cuts);
  stats->set_mask_cuts(s.mask_cuts);
  stats->set_island_cuts(s.island_cuts);
  stats->set_cut_pixels(s.cut_pixels);
  stats->set_cut_length(s.cut_length);
  stats->set_regions(s.regions);
  stats->set_unreached_pixels(s.unreached_pixels);
  stats->set_masked_pixels(s.masked_pixels);
  stats->set_pairing_radius(s.pairing_radius);
  stats->set_pcg_iterations(output.pcg_iterations);
  stats->set_pcg_residual(output.pcg_residual);
  v1::UnwrapStageSeconds* t = response->mutable_stage_seconds();
  t->set_residues(output.stage_times.residues_s);
  t->set_branch_cuts(output.stage_times.branch_cuts_s);
  t->set_integrate(output.stage_times.integrate_s);
}

void MoveArraysInto(UnwrapOutput* output, v1::UnwrapResponse* response) {
  ToProto(std::move(output->unwrapped), response->mutable_unwrapped());
  if (output->residues.ndim() > 0)
    ToProto(std::move(output->residues), response->mutable_residues());
  if (output->cuts.ndim() > 0) ToProto(std::move(output->cuts), response->mutable_cuts());
  if (output->regions.ndim() > 0) ToProto(std::move(output->regions), response->mutable_regions());
  if (output->unreached.ndim() > 0) {
    ToProto(std::move(output->unreached), response->mutable_unreached());
  }
}

}  // namespace fresnel::server
