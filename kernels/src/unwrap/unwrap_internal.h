// Declarations shared by the dispatch (unwrap.cc), the CPU reference and the CUDA implementation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/unwrap/unwrap.h"

namespace fresnel::unwrap::internal {

// The search radii of the pairing rounds: 1..8, then growing by half, ending exactly at
// FinalRadius(rows, cols) (docs/unwrap.md). At most 64 entries.
std::vector<int> RadiusSchedule(int rows, int cols);

// Element checks, CPU side: the first offending pixel in raster order becomes
// InvalidArgument("phase[r,c] ..."). `mask` may be null. Used by the CPU paths; the CUDA paths
// compute the same first index on the device and format it with the functions below.
absl::Status CheckPhaseValues(const HostArray& phase, const HostArray* mask);
absl::Status CheckQualityValues(const HostArray& quality, const HostArray* mask);
// Weights must be finite and in [0, 1] on unmasked pixels: InvalidArgument("<field>[r,c] ...").
absl::Status CheckWeightValues(const HostArray& weights, const HostArray* mask,
                               const char* field = "weights");
// Whether UnwrapLeastSquares takes the weighted (PCG) path for these options.
bool RunsWeighted(const LeastSquaresOptions& options);
absl::Status BadPhaseValue(const HostArray& phase, int64_t index);
absl::Status BadQualityValue(const HostArray& quality, int64_t index);

// options.into against the result it will hold (ResultBuffers): InvalidArgument naming the array
// ("into.cuts") when one is set with another dtype or shape, or is a map without `maps`.
absl::Status CheckResultBuffers(const HostArray& phase, const ResultBuffers* into, bool maps);
// A result array of `dtype` and the phase's shape: `*buffer` (moved out) when the caller set it,
// else a new uninitialised array (faulted in by whoever writes it first). `buffer` may be null.
HostArray ResultArray(HostArray* buffer, DType dtype, const std::vector<int64_t>& shape);
// CPU paths, at the end: a result array into the caller's buffer when it set one (a copy, then
// `*array` is that buffer). `buffer` may be null.
void DeliverInto(HostArray* buffer, HostArray* array);

// Reports progress; CancelledError when the hook asks to stop.
absl::Status Report(const ProgressFn& progress, Stage stage, double fraction);

absl::StatusOr<GoldsteinResult> UnwrapGoldsteinCpu(const HostArray& phase,
                                                   const GoldsteinOptions& options);
absl::StatusOr<LeastSquaresResult> UnwrapLeastSquaresCpu(const HostArray& phase,
                                                         const LeastSquaresOptions& options);

#if FRESNEL_WITH_CUDA
absl::StatusOr<GoldsteinResult> UnwrapGoldsteinCuda(const Device& device, const HostArray& phase,
                                                    const GoldsteinOptions& options,
                                                    StageTimes* times);
absl::StatusOr<LeastSquaresResult> UnwrapLeastSquaresCuda(const Device& device,
                                                          const HostArray& phase,
                                                          const LeastSquaresOptions& options,
                                                          StageTimes* times);
#endif

}  // namespace fresnel::unwrap::internal
