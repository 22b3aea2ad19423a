// fresnel.v1.HologramService messages <-> fresnel::hologram options, clouds and results. Pure
// conversion and validation (no gRPC calls, no device work); InvalidArgument names the field as
// fresnel::hologram::ValidateHologram does ("pitch_m", "points[17].z_m", "image", ...). Every
// check runs once, here, on the gRPC thread; the jobs trust what these functions let through.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/hologram/hologram.h"
#include "fresnel/v1/hologram.pb.h"

namespace fresnel::server {

// The kernel options of a config (outputs defaulted as hologram.proto says). Checks the enums
// and the config's own fields (sizes, pitch, wavelength, reconstruction depth) against `limits`
// with hologram::ValidateOptions, so that a bad config is reported before any points are looked
// at; the options are not checked again on the way to the kernel.
absl::StatusOr<hologram::HologramOptions> ParseHologramConfig(const v1::HologramConfig& config,
                                                              const hologram::Limits& limits);

// Applies a frame's overrides to a copy of the stream's options and re-checks the config part.
absl::StatusOr<hologram::HologramOptions> ApplyOverrides(const hologram::HologramOptions& base,
                                                         const v1::HologramFrameOverrides& o,
                                                         const hologram::Limits& limits);

// The layout of a float32/float64 [N, 4] or [N, 5] points array (x_m, y_m, z_m,
// amplitude[, phase_rad]): dtype, shape, N against limits.max_points, inline bytes of the right
// size. Looks at no value.
absl::Status CheckPointsShape(const v1::NdArray& points, const hologram::Limits& limits);
// Checks the layout, then appends the points to `cloud` straight from the message's bytes,
// converted into the kernels' prepared layout and checked value by value in the same pass
// (CloudBuilder::AppendRows). The one conversion and check a frame's points get.
absl::Status AppendPointsFromProto(const v1::NdArray& points, const hologram::Limits& limits,
                                   hologram::CloudBuilder* cloud);
// The same points as a PointCloud, values unchecked (ValidateHologram checks them): for callers
// that need the cloud itself (the fuzz target).
absl::StatusOr<hologram::PointCloud> PointsFromProto(const v1::NdArray& points,
                                                     const hologram::Limits& limits);
// One point per pixel of a uint8 [rows, cols] image (ImageToPointCloud); rows * cols counts
// against limits.max_points.
absl::StatusOr<hologram::PointCloud> PointsFromImage(const v1::ImageSource& image,
                                                     const hologram::Limits& limits);

// The algorithm a request may run with, given where it can run. TENSOR on a request that can
// only run on the CPU is INVALID_ARGUMENT ("algorithm"); `gpus` is the server's GPU count.
absl::Status CheckAlgorithmPlacement(const hologram::HologramOptions& options,
                                     const v1::DeviceHint& hint, int gpus);
// The options a job runs with on `device`: TENSOR falls back to REFERENCE on the CPU (a job
// that was too large for every GPU); everything else is unchanged.
hologram::HologramOptions OptionsForDevice(const hologram::HologramOptions& options,
                                           const Device& device);

v1::HologramAlgorithm AlgorithmToProto(hologram::Algorithm algorithm);
v1::HologramTensorPrecision PrecisionToProto(hologram::TensorPrecision precision);
absl::StatusOr<hologram::ReconstructionSource> SourceFromProto(
    v1::HologramReconstructionSource source, absl::string_view field);

// The header fields of a result (everything but the arrays and the execution info).
void FillResultHeader(const hologram::HologramResult& result, int64_t points,
                      const hologram::HologramOptions& options, v1::HologramResultHeader* header);

// The byte counts of the outputs a render with these options returns (field, phase,
// amplitude, reconstruction, those requested): what an output region must hold.
std::vector<int64_t> OutputArrayBytes(const hologram::HologramOptions& options);

// One output array of a result, by name; null when `which` is not an output.
HostArray* OutputArray(hologram::HologramResult* result, v1::HologramOutput which);
v1::NdArray* HeaderArray(v1::HologramResultHeader* header, v1::HologramOutput which);
const char* OutputName(v1::HologramOutput which);

}  // namespace fresnel::server
