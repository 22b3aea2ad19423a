#include "server/services/unwrap_params.h"

#include <functional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/array_convert.h"
#include "server/call.h"
#include "server/shm_arrays.h"

namespace fresnel::server {
namespace {

unwrap::Method KernelMethod(v1::UnwrapMethod method) {
  switch (method) {
    case v1::UNWRAP_METHOD_LEAST_SQUARES: return unwrap::Method::kLeastSquares;
    case v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES: return unwrap::Method::kWeightedLeastSquares;
    default: return unwrap::Method::kGoldstein;
  }
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
    case v1::UNWRAP_METHOD_GOLDSTEIN:
    case v1::UNWRAP_METHOD_LEAST_SQUARES:
    case v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES: return unwrap::MethodName(KernelMethod(method));
    default: return "unknown";
  }
}

unwrap::UnwrapOptions UnwrapInput::Options() const {
  unwrap::UnwrapOptions o;
  o.method = KernelMethod(method);
  o.mask = mask ? &*mask : nullptr;
  o.quality = quality ? &*quality : nullptr;
  o.seed = seed;
  o.iterations_per_radius = iterations_per_radius;
  o.return_maps = return_maps;
  o.congruent = congruent;
  o.limits = limits;
  return o;
}

int64_t UnwrapInput::InputBytes() const {
  return static_cast<int64_t>(phase.nbytes() + (mask ? mask->nbytes() : 0) +
                              (quality ? quality->nbytes() : 0));
}

int64_t UnwrapInput::OutputBytes() const {
  int64_t bytes = 0;
  for (int64_t b : OutputArrayBytes()) bytes += b;
  return bytes;
}

std::vector<std::pair<DType, std::vector<int64_t>>> UnwrapInput::OutputArrays() const {
  std::vector<std::pair<DType, std::vector<int64_t>>> arrays = {{phase.dtype(), phase.shape()}};
  if (method == v1::UNWRAP_METHOD_GOLDSTEIN && return_maps) {
    for (DType d : {DType::kInt16, DType::kUint8, DType::kInt32, DType::kUint8}) {
      arrays.emplace_back(d, phase.shape());
    }
  }
  return arrays;
}

std::vector<int64_t> UnwrapInput::OutputArrayBytes() const {
  std::vector<int64_t> bytes;
  for (const auto& [dtype, shape] : OutputArrays()) {
    bytes.push_back(ShapeElements(shape) * static_cast<int64_t>(DTypeSize(dtype)));
  }
  return bytes;
}

int64_t UnwrapInput::DeviceBytes() const { return unwrap::UnwrapDeviceBytes(phase, Options()); }

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
    // 0 = the kernel's default; the range is unwrap::ValidateUnwrap's (below).
    if (o.iterations_per_radius() != 0) in.iterations_per_radius = o.iterations_per_radius();
    if (o.has_seed()) in.seed = unwrap::Pixel{o.seed().row(), o.seed().col()};
    in.return_maps = !o.has_return_maps() || o.return_maps();
  } else {
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
  FRESNEL_RETURN_IF_ERROR(unwrap::ValidateUnwrap(in.phase, in.Options()));
  return in;
}

absl::StatusOr<UnwrapInput> ParseUnwrap(v1::UnwrapRequest* request, const unwrap::Limits& limits,
                                        std::optional<HostArray> given_phase) {
  HostArray phase;
  if (given_phase) {
    phase = *std::move(given_phase);
  } else {
    if (!request->has_phase()) return absl::InvalidArgumentError("phase: required");
    FRESNEL_ASSIGN_OR_RETURN(phase, FromProto(std::move(*request->mutable_phase()), "phase"));
  }
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
                                                        const JobProgressFn& progress,
                                                        unwrap::ResultBuffers* into) {
  unwrap::UnwrapOptions o = input.Options();
  o.into = into;
  if (progress) {
    o.progress = [&progress](unwrap::Stage stage, double fraction, double overall) {
      return progress(unwrap::StageName(stage), fraction, overall);
    };
  }
  FRESNEL_ASSIGN_OR_RETURN(unwrap::UnwrapResult r, unwrap::Unwrap(device, input.phase, o, times));
  auto output = std::make_shared<UnwrapOutput>();
  output->method = input.method;
  output->unwrapped = std::move(r.unwrapped);
  output->residues = std::move(r.residues);
  output->cuts = std::move(r.cuts);
  output->regions = std::move(r.regions);
  output->unreached = std::move(r.unreached);
  output->stats = r.stats;
  output->stage_times = r.stage_times;
  output->pcg_iterations = r.pcg_iterations;
  output->pcg_residual = r.pcg_residual;
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

void StoreInRegion(const ShmResolver& regions, const v1::ShmRef& ref, UnwrapOutput* output) {
  const std::vector<std::pair<v1::UnwrapArray, const HostArray*>> arrays = output->Arrays();
  std::vector<int64_t> sizes;
  for (const auto& a : arrays) sizes.push_back(static_cast<int64_t>(a.second->nbytes()));
  std::vector<std::pair<v1::UnwrapArray, v1::NdArray>> placed(arrays.size());
  std::vector<std::pair<const HostArray*, v1::NdArray*>> targets;
  for (size_t i = 0; i < arrays.size(); ++i) {
    placed[i].first = arrays[i].first;
    targets.emplace_back(arrays[i].second, &placed[i].second);
  }
  absl::StatusOr<OutputRegion> region = OutputRegion::Reserve(true, ref, sizes, regions, "out_shm");
  absl::Status written = region.ok() ? region->Write(targets) : region.status();
  if (!written.ok()) {
    output->region_error = absl::StrCat(absl::StatusCodeToString(written.code()), ": ",
                                        written.message(), " (the result stays on the server)");
    return;
  }
  output->in_region = std::move(placed);
  for (HostArray* a : {&output->unwrapped, &output->residues, &output->cuts, &output->regions,
                       &output->unreached}) {
    *a = HostArray();
  }
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
