// Proto <-> fresnel::unwrap for the unwrap service: the request's fields as unwrap::UnwrapOptions
// (validated by the kernel's ValidateUnwrap), the run function shared by the synchronous Unwrap
// call and the jobs (unwrap::Unwrap), and the result's proto form.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/unwrap/unwrap.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/unwrap.pb.h"
#include "server/device_pool.h"
#include "server/jobs.h"

namespace fresnel::server {

// "goldstein" / "least_squares" / "weighted_least_squares": the job store's method label.
const char* UnwrapMethodName(v1::UnwrapMethod method);

// A parsed and validated request.
struct UnwrapInput {
  v1::UnwrapMethod method = v1::UNWRAP_METHOD_GOLDSTEIN;
  HostArray phase;
  std::optional<HostArray> mask;
  std::optional<HostArray> quality;
  std::optional<unwrap::Pixel> seed;
  int iterations_per_radius = 8;
  bool return_maps = true;  // Goldstein
  bool congruent = true;    // least squares
  DevicePreference preference = DevicePreference::kAny;
  std::string request_id;
  unwrap::Limits limits;

  int64_t rows() const { return phase.dim(0); }
  int64_t cols() const { return phase.dim(1); }
  int64_t InputBytes() const;
  // Bytes of the arrays the result holds (exact: what Unwrap and Get send).
  int64_t OutputBytes() const;
  // The result's arrays (dtype, shape) in the response's order: unwrapped, then the maps when
  // returned (residues int16, cuts uint8, regions int32, unreached uint8).
  std::vector<std::pair<DType, std::vector<int64_t>>> OutputArrays() const;
  // The same as byte counts.
  std::vector<int64_t> OutputArrayBytes() const;
  // Upper bound of the device memory a CUDA run takes, for placement (unwrap::UnwrapDeviceBytes).
  int64_t DeviceBytes() const;
  // The kernel's options, borrowing this input's arrays.
  unwrap::UnwrapOptions Options() const;
  // Identifies the request (method, options, dtypes, shapes and the arrays' bytes) for the
  // idempotency check.
  uint64_t Fingerprint() const;
};

// Parses `request` (everything but its arrays) together with the arrays, which are passed
// separately because Submit may receive them in chunks. Checks what only the proto can get wrong
// (an unknown method, options of another method, the device hint) here, and everything else with
// unwrap::ValidateUnwrap (dtypes, shapes, limits, values): bad input is INVALID_ARGUMENT at once
// instead of an accepted job that fails. Messages name the field.
absl::StatusOr<UnwrapInput> ParseUnwrap(const v1::UnwrapRequest& request, HostArray phase,
                                        std::optional<HostArray> mask,
                                        std::optional<HostArray> quality,
                                        const unwrap::Limits& limits);

// The same for a request carrying its arrays inline; their bytes are moved out of `request`.
// `phase`, when given, is the phase instead of the request's (one read where it lies in the
// client's region: BorrowShmInput).
absl::StatusOr<UnwrapInput> ParseUnwrap(v1::UnwrapRequest* request, const unwrap::Limits& limits,
                                        std::optional<HostArray> phase = std::nullopt);

// A finished unwrap: what the job store keeps and what Unwrap/Get send.
class UnwrapOutput : public JobOutput {
 public:
  v1::UnwrapMethod method = v1::UNWRAP_METHOD_GOLDSTEIN;
  HostArray unwrapped;
  HostArray residues, cuts, regions, unreached;  // empty without maps
  unwrap::GoldsteinStats stats;                  // least squares: masked_pixels only
  unwrap::GoldsteinStageTimes stage_times;
  int pcg_iterations = 0;    // weighted least squares
  double pcg_residual = 0;
  // A job submitted with out_shm, once its result was written into that region (StoreInRegion):
  // each array's dtype, shape and ShmRef, in Get's order; the HostArrays above are then empty.
  std::vector<std::pair<v1::UnwrapArray, v1::NdArray>> in_region;
  // Or why that write failed (the arrays stay above and Get sends them as chunks).
  std::string region_error;

  int64_t bytes() const override;
  // The non-empty arrays, in the order Get sends them.
  std::vector<std::pair<v1::UnwrapArray, const HostArray*>> Arrays() const;
};

// Runs the input on `device` (unwrap::Unwrap). `progress` (may be empty) gets the stage name, the
// fraction of the stage done and of the whole job (the kernel's weighting); returning false
// cancels the run (CancelledError). `into` (may be null): where the result's arrays are written
// (unwrap::ResultBuffers, e.g. views of the client's out_shm); the output then holds those views.
absl::StatusOr<std::shared_ptr<UnwrapOutput>> RunUnwrap(const Device& device,
                                                        const UnwrapInput& input, StageTimes* times,
                                                        const JobProgressFn& progress,
                                                        unwrap::ResultBuffers* into = nullptr);

// Fills method, stats and stage times (not the arrays, not the ExecutionInfo).
void FillResultHeader(const UnwrapOutput& output, v1::UnwrapResponse* response);
// A finished job's result into the client's region `ref` (its Submit's out_shm, resolved again
// through `regions` now: it may have been unregistered meanwhile). Then `output` keeps only the
// arrays' ShmRefs (in_region) and none of their bytes; when the region is gone or too small the
// arrays stay and region_error says why (the job is DONE either way: its work is not lost).
void StoreInRegion(const ShmResolver& regions, const v1::ShmRef& ref, UnwrapOutput* output);
// Moves the arrays into the response's inline NdArray fields.
void MoveArraysInto(UnwrapOutput* output, v1::UnwrapResponse* response);

}  // namespace fresnel::server
