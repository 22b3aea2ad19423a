// Point-cloud computer-generated holography (CGH): the complex field that a cloud of point
// sources produces on a hologram plane, its phase-only and amplitude renderings, and numerical
// reconstruction by the angular spectrum method (ASM).
//
// Physics. Point j at (x_m, y_m, z_m) = (δ, ε, ζ) with amplitude a and phase θ contributes, at
// hologram pixel (x, y),
//     P_j(x, y) = a · exp(i·θ) · exp(iπ/(λζ) · [(x − δ)² + (y − ε)²])
// (the Fresnel approximation of a spherical wave diverging from a point ζ in front of the
// hologram), and the hologram is H = Σ_j P_j. The phase is separable, φ = φx(x) + φy(y), which
// every algorithm here exploits.
//
// Frame and units. Pixel (column u, row v) of a width × height hologram with pitch p sits at
//     x_u = (u − width/2) · p,   y_v = (v − height/2) · p      (integer division width/2)
// so the optical axis passes through pixel (width/2, height/2). Arrays are row-major
// [height, width] (row v, column u). Lengths are metres, phases radians; an 8-bit phase value
// k stands for 2π·k/256.
//
// Aliasing. A point's local fringe frequency |x − δ|/(λζ) exceeds the pixel Nyquist limit 1/(2p)
// beyond |x − δ| > λζ/(2p) (likewise in y). AliasPolicy::kClip (the default) limits each point's
// support to its alias-free rectangle |x − δ| ≤ λζ/(2p), |y − ε| ≤ λζ/(2p); kNone sums every
// point over the whole hologram. Every algorithm applies the same per-point pixel ranges.
//
// Algorithms (HologramOptions::algorithm):
//   kReference   exact phases. CPU: separable sum in float64 (the test oracle) or float32.
//                CUDA: one thread per pixel looping over points with __sincosf (Blinder &
//                Schelkens' float baseline); per-point phases are reduced to fixed-point turns
//                in float64 first, so float32 keeps its precision at large phase values.
//   kTriangular  the paper's fixed-point TA: 8-bit phases, triangle-wave cos/sin, __dp4a.
//   kPiecewise   the paper's PA: TA plus a clipped triangle (piecewise-linear cos/sin).
//                Both quantise lateral positions to s = p / lateral_subdivision and depths to
//                an integer depth factor (docs/hologram.md gives the exact scheme). The CPU runs
//                a bit-exact emulation of the GPU kernels.
//   kTensor      CUDA only: H = X·diag(a)·Yᵀ as real matrix products on tensor cores
//                (cuBLASLt; int8, fp16, bf16 or tf32 operands), with points that share a
//                hologram column function merged before the product.
//   kAuto        CUDA: kTensor at the precision that meets min_snr_db, or kReference when no
//                tensor precision does; CPU: kReference.
//
// Every entry point takes a Device: DeviceKind::kCpu runs on the calling thread plus a TBB pool;
// kCuda enqueues on device.stream (temporaries from device.mem_pool) and synchronises that
// stream before returning. Nothing is kept between calls except per-process caches of library
// handles, cuBLASLt algorithm choices and cuFFT plans.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"

namespace fresnel::hologram {

// One point source, in metres in the hologram frame above; z_m is the distance in front of the
// hologram plane and must be positive.
struct Point {
  double x_m = 0;
  double y_m = 0;
  double z_m = 0;
  double amplitude = 1;  // linear, >= 0
  double phase_rad = 0;  // initial phase θ
};
using PointCloud = std::vector<Point>;

enum class Algorithm { kAuto, kReference, kTriangular, kPiecewise, kTensor };
// "auto", "reference", "triangular", "piecewise", "tensor".
const char* AlgorithmName(Algorithm algorithm);
absl::StatusOr<Algorithm> AlgorithmFromName(absl::string_view name);

// Operand precision of the tensor-core product. kAuto picks the cheapest one whose expected
// hologram SNR meets HologramOptions::min_snr_db (ExpectedTensorSnrDb).
enum class TensorPrecision { kAuto, kInt8, kFp16, kBf16, kTf32 };
// "auto", "int8", "fp16", "bf16", "tf32".
const char* TensorPrecisionName(TensorPrecision precision);
absl::StatusOr<TensorPrecision> TensorPrecisionFromName(absl::string_view name);
// The hologram SNR (dB, against the exact field) that kTensor is designed to reach at each
// precision, measured on random clouds (docs/hologram.md); the basis of kAuto's choice.
double ExpectedTensorSnrDb(TensorPrecision precision);

enum class AliasPolicy { kClip, kNone };

// Which hologram a reconstruction propagates: the complex field, or the phase-only hologram
// exp(i·phase) that a phase SLM would display.
enum class ReconstructionSource { kField, kPhaseOnly };

// Outputs to return (each costs a device-to-host copy on CUDA).
struct HologramOutputs {
  bool field = true;       // complex64 [height, width]
  bool phase = false;      // uint8 [height, width]: round(arg(H) · 256/(2π)) mod 256
  bool amplitude = false;  // float32 [height, width]: |H|
};

struct ReconstructionOptions {
  bool enabled = false;
  // Distance of the object plane to refocus, in front of the hologram (the z_m of the points
  // to bring into focus); the field is propagated by −depth_m.
  double depth_m = 0;
  ReconstructionSource source = ReconstructionSource::kField;
};

struct HologramOptions {
  int64_t width = 0;    // pixels along x (columns)
  int64_t height = 0;   // pixels along y (rows)
  double pitch_m = 0;   // pixel pitch p
  double wavelength_m = 0;
  Algorithm algorithm = Algorithm::kAuto;
  AliasPolicy alias = AliasPolicy::kClip;
  // Requested quality for kAuto / kTensor with TensorPrecision::kAuto: the minimum hologram SNR
  // in dB against the exact field.
  double min_snr_db = 35;
  TensorPrecision tensor_precision = TensorPrecision::kAuto;
  // kTensor: merge points that share (x, z) into one matrix column (exact, not an
  // approximation); used only when it shrinks the product by at least half.
  bool tensor_grouping = true;
  // kTensor with int8 operands: build them from the 4096-entry phase byte table (default) or with
  // sincos per element (the slower build, kept for comparison: same values within π/4096).
  bool tensor_byte_table = true;
  // Polled between pieces of work (CPU: every 8 hologram rows of every 512-column chunk; CUDA:
  // between point batches); returning true stops the render with CancelledError. For a
  // cancelled or timed-out request, so that it frees its worker and memory. Empty = never stop.
  std::function<bool()> should_stop;
  // kTriangular / kPiecewise: lateral quantisation step s = pitch_m / lateral_subdivision.
  int lateral_subdivision = 1;
  // CPU kReference: accumulate in float32 instead of float64.
  bool cpu_float32 = false;
  // CUDA kTriangular / kPiecewise: use the paper's SIMD intrinsics (__vadd4, __vabsdiffu4,
  // __vmaxu4, __vminu4) instead of the default hand-scheduled byte arithmetic; the results are
  // bit-identical, only the speed differs.
  bool paper_intrinsics = false;
  HologramOutputs outputs;
  ReconstructionOptions reconstruction;
  // CUDA: bytes of device memory the per-point tables may take; larger clouds are processed in
  // point batches. 0 = automatic (a share of the free memory, at most 8 GiB).
  int64_t max_device_workspace_bytes = 0;
  // Record per-stage device times in HologramResult::profile (CUDA only; adds events).
  bool profile = false;
};

// Request limits; the server overrides them from its configuration.
struct Limits {
  int64_t max_width = 16384;
  int64_t max_height = 16384;
  int64_t max_pixels = int64_t{1} << 27;  // width * height
  int64_t max_points = int64_t{1} << 24;
};

struct HologramResult {
  HostArray field;           // complex64 [height, width] when requested
  HostArray phase;           // uint8 [height, width] when requested
  HostArray amplitude;       // float32 [height, width] when requested
  HostArray reconstruction;  // uint8 [height, width] when reconstruction.enabled
  // Amplitude that maps to 255 in `reconstruction` (its maximum), 0 without reconstruction.
  double reconstruction_scale = 0;

  // What ran.
  Algorithm algorithm = Algorithm::kReference;           // never kAuto
  TensorPrecision precision = TensorPrecision::kAuto;    // kTensor only
  int64_t point_batches = 0;   // passes over the point tables (1 unless memory forced batching)
  int64_t gemm_inner_dim = 0;  // kTensor: matrix columns after merging points
  // Named device stage durations in seconds when options.profile is set (CUDA).
  std::vector<std::pair<std::string, double>> profile;
};

// Checks options and points against the limits. InvalidArgument names the field: "width",
// "height", "pitch_m", "wavelength_m", "points", "points[17].z_m", "reconstruction.depth_m", ...
absl::Status ValidateHologram(const PointCloud& points, const HologramOptions& options,
                              const Limits& limits = {});
// The options part of ValidateHologram alone (everything it checks before the points).
absl::Status ValidateOptions(const HologramOptions& options, const Limits& limits = {});

namespace internal {
struct PreparedPoints;
struct CloudAccess;
}  // namespace internal

// A point cloud checked once and held in the layout every algorithm starts from: per-point
// arrays (x, y, 1/(2λz), amplitude, phase in turns) and each point's alias-free pixel ranges for
// the geometry it was built for (width, height, pitch_m, wavelength_m, alias of the options given
// to CloudBuilder). ComputeHologram on a PreparedCloud does not look at the values again. About
// 56 bytes per point. Move-only; not thread-safe to modify, safe to read from several threads.
class PreparedCloud {
 public:
  PreparedCloud();
  ~PreparedCloud();
  PreparedCloud(PreparedCloud&&) noexcept;
  PreparedCloud& operator=(PreparedCloud&&) noexcept;
  int64_t size() const;
  // Host memory held (bytes): kHostBytesPerPoint per point.
  int64_t host_bytes() const;
  // Five doubles and four pixel bounds per point (what a caller charges against a memory budget
  // for a cloud it is still receiving).
  static constexpr int64_t kHostBytesPerPoint = 5 * 8 + 4 * 4;

 private:
  friend struct internal::CloudAccess;
  std::unique_ptr<internal::PreparedPoints> p_;
};

// Builds a PreparedCloud from one or more batches of points (a frame sent in parts), checking
// and converting each value in one pass (TBB-parallel for large batches). `options` must have
// passed ValidateOptions; only its geometry is used. Not thread-safe.
class CloudBuilder {
 public:
  CloudBuilder(const HologramOptions& options, const Limits& limits = {});
  ~CloudBuilder();
  CloudBuilder(CloudBuilder&&) noexcept;
  CloudBuilder& operator=(CloudBuilder&&) noexcept;

  // Appends `rows` points given as row-major [rows, columns] values (columns 4: x_m, y_m, z_m,
  // amplitude; 5: + phase_rad) of `dtype` kFloat32 or kFloat64; `data` needs no alignment (a
  // protobuf bytes field). InvalidArgument, with nothing appended, for a bad value — naming the
  // point by its index in the whole cloud ("points[17].z_m", as ValidateHologram) — or when the
  // cloud would exceed limits.max_points ("points").
  absl::Status AppendRows(const void* data, DType dtype, int64_t rows, int columns);
  absl::Status Append(const PointCloud& points);
  int64_t size() const;
  // The cloud; InvalidArgument ("points: the point cloud is empty") when nothing was appended.
  // The builder is empty afterwards.
  absl::StatusOr<PreparedCloud> Finish();

 private:
  std::unique_ptr<internal::PreparedPoints> p_;
  Limits limits_;
};

// Checks and converts `points` for `options` (ValidateHologram's checks, once).
absl::StatusOr<PreparedCloud> PrepareCloud(const PointCloud& points, const HologramOptions& options,
                                           const Limits& limits = {});

// Computes the hologram of `points`. InvalidArgument for bad input (as ValidateHologram) or an
// algorithm the device cannot run (kTensor on the CPU); ResourceExhausted when even one point
// batch does not fit in device memory.
absl::StatusOr<HologramResult> ComputeHologram(const Device& device, const PointCloud& points,
                                               const HologramOptions& options,
                                               StageTimes* times = nullptr,
                                               const Limits& limits = {});
// The same for a cloud already checked and converted: the hot path of a stream. `options` must
// have passed ValidateOptions (they are not checked again) and have the geometry the cloud was
// built for (width, height, pitch_m, wavelength_m, alias; InvalidArgument "points" otherwise).
// The other errors are ComputeHologram's.
absl::StatusOr<HologramResult> ComputeHologram(const Device& device, const PreparedCloud& points,
                                               const HologramOptions& options,
                                               StageTimes* times = nullptr);

// Device memory a render of `points` points with `options` needs on a GPU (for placement: a
// named estimate, not a bound): the complex64 accumulator and the outputs, the reconstruction's
// spectrum, propagated field and cuFFT work area, the uploaded point arrays and the per-point
// tables built from them, and the batched matrix operands, counted up to 512 MiB because the
// kernels batch larger ones to fit the free memory (counting them whole would send every large
// cloud to the CPU). Pure arithmetic; overflow-free for options within Limits.
int64_t DeviceBytes(const HologramOptions& options, int64_t points);
// Bytes of the arrays a render returns.
int64_t OutputBytes(const HologramOptions& options);

struct AsmOptions {
  double pitch_m = 0;
  double wavelength_m = 0;
  double depth_m = 0;  // as ReconstructionOptions::depth_m
  ReconstructionSource source = ReconstructionSource::kField;
};

struct Reconstruction {
  HostArray image;   // uint8 [height, width]: round(255 · |U| / scale)
  double scale = 0;  // max |U| (0 for an all-zero field)
};

// Angular-spectrum reconstruction of a complex64 [height, width] hologram: U = F⁻¹{F{H} ·
// exp(i2π·(−depth_m)·(√(1/λ² − fx² − fy²) − 1/λ))}, evanescent frequencies dropped, then the
// magnitude scaled so that its maximum is 255 and rounded to 8 bits. The propagation is
// circular (no zero padding), as in the paper's quality experiment. CPU: kissfft in float64;
// CUDA: cuFFT in float32.
absl::StatusOr<Reconstruction> ReconstructAsm(const Device& device, const HostArray& field,
                                              const AsmOptions& options,
                                              StageTimes* times = nullptr,
                                              const Limits& limits = {});

// Bytes of the largest field ReconstructAsm accepts under `limits`: max_pixels samples of
// complex128, the widest dtype it takes (an upload cap for a field sent in chunks).
int64_t ReconstructMaxFieldBytes(const Limits& limits);

// PSNR of two uint8 images of equal shape in dB (peak 255; +inf when identical). -1 when the
// shapes or dtypes differ.
double Psnr8(const HostArray& image, const HostArray& reference);
// 10·log10(Σ|ref|² / Σ|x − ref|²) over two arrays of equal shape (any real or complex dtype);
// +inf when identical, -inf (or NaN) when shapes differ or values are not finite.
double SnrDb(const HostArray& x, const HostArray& reference);

}  // namespace fresnel::hologram
