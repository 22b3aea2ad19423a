// fresnel.v1.HologramService messages <-> fresnel::hologram options, clouds and results. Pure
// conversion and validation (no gRPC calls, no device work); InvalidArgument names the field as
// fresnel::hologram::ValidateHologram does ("pitch_m", "points[17].z_m", "image", ...).
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
// with ValidateHologram, so that a bad config is reported before any points are looked at.
absl::StatusOr<hologram::HologramOptions> ParseHologramConfig(const v1::HologramConfig& config,
                                                              const hologram::Limits& limits);

// Applies a frame's overrides to a copy of the stream's options and re-checks the config part.
absl::StatusOr<hologram::HologramOptions> ApplyOverrides(const hologram::HologramOptions& base,
                                                         const v1::HologramFrameOverrides& o,
                                                         const hologram::Limits& limits);

// A point cloud from float32/float64 [N, 4] or [N, 5] (x_m, y_m, z_m, amplitude[, phase_rad]).
// The shape is checked against limits.max_points before anything is converted. The values are
// checked later by ValidateHologram.
absl::StatusOr<hologram::PointCloud> PointsFromProto(const v1::NdArray& points,
                                                     const hologram::Limits& limits);
// One point per pixel of a uint8 [rows, cols] image (ImageToPointCloud); rows * cols counts
// against limits.max_points.
absl::StatusOr<hologram::PointCloud> PointsFromImage(const v1::ImageSource& image,
                                                     const hologram::Limits& limits);

// Device memory a render needs (Job::device_bytes). A named heuristic, not a bound: the
// field accumulator and the outputs, the reconstruction's FFT buffers, the point records, and
// the per-point phase tables, which the kernels batch to fit the free memory and so count here
// only up to kTableBudgetBytes.
int64_t HologramDeviceBytes(const hologram::HologramOptions& options, int64_t points);
// Bytes of the arrays a render returns.
int64_t HologramOutputBytes(const hologram::HologramOptions& options);

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

// One output array of a result, by name; null when `which` is not an output.
HostArray* OutputArray(hologram::HologramResult* result, v1::HologramOutput which);
v1::NdArray* HeaderArray(v1::HologramResultHeader* header, v1::HologramOutput which);
const char* OutputName(v1::HologramOutput which);

}  // namespace fresnel::server
