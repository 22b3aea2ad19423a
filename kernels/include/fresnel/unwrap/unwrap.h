// 2-D phase unwrapping: Goldstein branch cuts (bit-exact between the CPU reference and the GPU)
// and Ghiglia-Romero least squares (DCT Poisson solve, for noisy data).
//
// Inputs are row-major HostArrays of shape [rows, cols] (rows, cols >= 2):
//   phase    float32 or float64, radians, wrapped to [-pi, pi] (values up to kPhaseLimit in
//            magnitude are accepted so that float32 pi and atan2 outputs pass).
//   mask     optional uint8, nonzero = pixel EXCLUDED (NumPy/scikit-image masked-array
//            convention). Masked pixels may hold any value (NaN too) and are output as 0.
//   quality  optional float32/float64, larger = more trustworthy; Goldstein uses it to choose each
//            region's seed (the highest-quality pixel).
// Outputs have the input's shape; unwrapped phase has the input's dtype and every unmasked,
// unwrapped pixel equals `phase + 2*pi*k` for an integer k, computed as
// `phase + T(k) * T(2*pi)` with round-to-nearest and no fused multiply-add.
//
// Devices: DeviceKind::kCpu runs the serial reference implementation (the test oracle);
// kCuda enqueues on device.stream, allocates temporaries from device.mem_pool and synchronises
// that stream before returning. Without a progress hook a CUDA call makes no host round trip
// between its stages. Goldstein's CUDA path implements the CPU reference's rules so that the output
// is identical bit for bit (values, maps and statistics) in the default pairing modes (graph and
// launches), masks and dense residues included: every [gpu] case checks it on the H200. Only the
// opt-in cooperative pairing kernel (GoldsteinCudaOptions) diverges on masked inputs.
// Least squares agrees with the CPU to float32 rounding. docs/unwrap.md gives the exact rules.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"

namespace fresnel::unwrap {

// Largest accepted |phase| (radians): pi plus float32 rounding slack.
inline constexpr double kPhaseLimit = 3.1416;

// Limits applied by validation; the server overrides them from its configuration.
struct Limits {
  int64_t max_side = 32768;                  // rows and cols each
  int64_t max_pixels = int64_t{1} << 30;     // rows * cols (keys need (rows+2)*(cols+2) < 2^31)
};

// The stages a call reports to its progress hook, in this order (least squares: kValidate,
// kLeastSquares, kDone).
enum class Stage { kValidate, kResidues, kBranchCuts, kIntegrate, kLeastSquares, kDone };
const char* StageName(Stage stage);

// Progress and cancellation hook, called on the calling thread between (and on the CPU also
// within) stages with the fraction of that stage done, in [0, 1]. Returning false cancels the
// call, which then returns CancelledError. On CUDA a hook makes the call synchronise its stream at
// every stage boundary, so that the reported stage has really finished.
using ProgressFn = std::function<bool(Stage stage, double fraction)>;

struct Pixel {
  int64_t row = 0;
  int64_t col = 0;
};

// How the CUDA backend runs Goldstein (the CPU ignores it): kernel choices that compute the same
// result, for measurement and diagnosis. docs/unwrap.md ("Switches") has the measurements.
struct GoldsteinCudaOptions {
  enum class Pairing {
    kGraph,        // one CUDA graph whose WHILE node repeats the rounds on the device (default)
    kLaunches,     // two launches per scheduled round (the fallback when a graph call fails)
    kCooperative,  // one cooperative kernel; diverged from the CPU on masked inputs: opt-in only
  };
  Pairing pairing = Pairing::kGraph;
  // Segmented-scan tile integration (default) or the propagation kernel; same fixed point.
  bool tile_scan = true;
  // kCooperative only: thread fences before its grid barriers (false to test whether they matter).
  bool cooperative_fences = true;
};

// Memory the caller provides for a result's arrays, e.g. HostArray::Borrow views of a client's
// shared-memory region, so that the result is written where it is wanted instead of into new
// arrays that are then copied there. Each array that is not empty must have the phase's shape
// and the dtype of that result array (unwrapped: the phase's; residues int16, cuts uint8,
// regions int32, unreached uint8; the maps only with return_maps), else the call is
// INVALID_ARGUMENT naming it. The CUDA paths download straight into them; the CPU paths copy
// their result in at the end. The result then holds these arrays (moved out of here); an empty
// one is allocated as usual.
struct ResultBuffers {
  HostArray unwrapped, residues, cuts, regions, unreached;
};

struct GoldsteinOptions {
  // Borrowed, must outlive the call; nullptr = none. See the file comment for dtypes.
  const HostArray* mask = nullptr;
  const HostArray* quality = nullptr;
  // The seed (k = 0) of the region that contains it, when that pixel is neither masked nor on a
  // cut. Other regions use their highest-quality pixel (with `quality`) or else their first pixel
  // in raster order. Ties go to the smaller raster index.
  std::optional<Pixel> seed;
  // Pairing iterations per search radius before the radius grows (docs/unwrap.md). Part of the
  // algorithm's definition: the CPU and the GPU give identical results for the same value.
  int iterations_per_radius = 8;
  // When false, only `unwrapped` and the statistics are returned (saves device-to-host copies).
  bool return_maps = true;
  ProgressFn progress;
  Limits limits;
  GoldsteinCudaOptions cuda;
  ResultBuffers* into = nullptr;  // borrowed; nullptr = new arrays
};

struct GoldsteinStats {
  int64_t positive_residues = 0;
  int64_t negative_residues = 0;
  int64_t residue_pairs = 0;     // cuts joining a +1 and a -1 residue
  int64_t border_cuts = 0;       // residues cut to the image border
  int64_t mask_cuts = 0;         // residues cut to a masked pixel
  int64_t island_cuts = 0;       // masked islands with net charge cut to the border
  int64_t cut_pixels = 0;        // unmasked pixels on cuts
  int64_t cut_length = 0;        // pixels drawn on all cut lines, counting overlaps
  int64_t regions = 0;           // 4-connected regions of unmasked, uncut pixels
  int64_t unreached_pixels = 0;  // unmasked pixels left wrapped (cut pixels with no region neighbour)
  int64_t masked_pixels = 0;
  int pairing_radius = 0;        // the largest search radius that made a pair (pixels)
};

// Seconds per stage (CUDA: device events; CPU: wall clock).
struct GoldsteinStageTimes {
  double residues_s = 0;
  double branch_cuts_s = 0;
  double integrate_s = 0;
};

struct GoldsteinResult {
  HostArray unwrapped;  // phase dtype; masked pixels 0, unreached pixels keep their wrapped value
  // The maps below are empty when options.return_maps is false.
  HostArray residues;   // int16: charge (-1, 0, +1) of the 2x2 plaquette whose top-left pixel this is
  HostArray cuts;       // uint8: 1 on unmasked pixels that lie on a branch cut
  HostArray regions;    // int32: region label 1..R numbered in raster order of the region's first
                        // pixel; cut pixels carry the label of the neighbour they were unwrapped
                        // from; 0 = masked or unreached
  HostArray unreached;  // uint8: 1 = unmasked pixel that could not be unwrapped
  GoldsteinStats stats;
  GoldsteinStageTimes stage_times;
};

// Checks dtypes, shapes, limits and options (not the element values: those are checked by the
// call itself, on the device that runs it, and reported as "phase[r,c]" / "quality[r,c]").
// Messages name the field: "phase.shape", "phase.dtype", "mask.shape", "seed", ...
absl::Status ValidateGoldstein(const HostArray& phase, const GoldsteinOptions& options);

// Goldstein branch-cut unwrapping: residues, deterministic branch cuts, per-region integration.
absl::StatusOr<GoldsteinResult> UnwrapGoldstein(const Device& device, const HostArray& phase,
                                                const GoldsteinOptions& options = {},
                                                StageTimes* times = nullptr);

// Upper bound of the device memory one UnwrapGoldstein call on CUDA takes (inputs, outputs and
// temporaries), for admission control.
int64_t GoldsteinDeviceBytes(int64_t rows, int64_t cols, DType dtype, bool has_mask,
                             bool has_quality);

struct LeastSquaresOptions {
  // Borrowed. Unweighted: gradients touching a masked pixel are set to zero (an approximation of
  // the 0/1-weighted problem). Weighted: masked pixels have weight 0. Masked pixels are output as 0.
  const HostArray* mask = nullptr;
  // Weighted least squares (Ghiglia & Romero 1994; Ghiglia & Pritt 5.3): minimise
  // sum w (grad phi - wrapped grad psi)^2 with edge weights w_x(r,c) = min(w(r,c), w(r,c+1))^2
  // (w_y likewise), w = weights (1 where absent) and 0 on masked pixels, by preconditioned
  // conjugate gradients with the unweighted DCT Poisson solve as the preconditioner. Runs only
  // when `weighted` is true and `weights` or `mask` is given; otherwise the unweighted direct
  // solve runs (which is that problem's exact solution), with iterations = 0.
  bool weighted = false;
  // Borrowed, float32/float64 of the phase's shape, finite and in [0, 1] on unmasked pixels
  // (checked on the host before dispatch); requires weighted = true.
  const HostArray* weights = nullptr;
  // PCG stops when |r| / |b| <= tolerance (r the residual of the weighted normal equations, b
  // their right-hand side) or after max_iterations iterations.
  double tolerance = 1e-6;
  int max_iterations = 100;
  // true: return phase + 2*pi*round((phi - phase) / 2*pi), congruent with the input;
  // false: the least-squares solution phi itself (zero mean over the image).
  bool congruent = true;
  ProgressFn progress;
  Limits limits;
  ResultBuffers* into = nullptr;  // borrowed; only `unwrapped` is used
};

struct LeastSquaresResult {
  HostArray unwrapped;  // phase dtype
  // Weighted path: PCG iterations run and the final relative residual |r| / |b|; 0 otherwise.
  int iterations = 0;
  double residual = 0;
};

absl::Status ValidateLeastSquares(const HostArray& phase, const LeastSquaresOptions& options);

// Least-squares unwrapping (Ghiglia & Romero 1994): unweighted, solves the Neumann Poisson
// equation lap(phi) = div(wrapped gradient) with a type-II DCT (kissfft in double on the CPU, cuFFT
// in float32 on CUDA); weighted (options.weighted), PCG on the weighted Laplacian (double on the
// CPU with TBB, float32 vectors with double dot products on CUDA, one host round trip per
// reduction).
absl::StatusOr<LeastSquaresResult> UnwrapLeastSquares(const Device& device,
                                                      const HostArray& phase,
                                                      const LeastSquaresOptions& options = {},
                                                      StageTimes* times = nullptr);

// Upper bound of the device memory one UnwrapLeastSquares call on CUDA takes, for admission
// control. `weighted`: the call takes the PCG path (weights or a mask with weighted = true).
int64_t LeastSquaresDeviceBytes(int64_t rows, int64_t cols, DType dtype, bool has_mask,
                                bool weighted);

// ---------------------------------------------------------------------------------------------
// One entry point for the three methods, as a service or a job runs them: the options of each
// method from one struct, the host-side checks of everything the call would refuse (so that bad
// input is refused before it is queued), the device memory to reserve, and a progress hook that
// also gets the fraction of the whole call.

enum class Method { kGoldstein, kLeastSquares, kWeightedLeastSquares };
// "goldstein", "least_squares", "weighted_least_squares".
const char* MethodName(Method method);

// Progress of a whole call: the stage, the fraction of it done and of the whole call done (in
// [0, 1]; each working stage of the method counts equally: Goldstein's residues, branch cuts and
// integration a third each, least squares its one stage). Returning false cancels the call.
using OverallProgressFn = std::function<bool(Stage stage, double fraction, double overall)>;

struct UnwrapOptions {
  Method method = Method::kGoldstein;
  // Borrowed, must outlive the call; nullptr = none.
  const HostArray* mask = nullptr;
  // Goldstein: the quality map that chooses region seeds. Weighted least squares: the weights
  // (finite, in [0, 1] on unmasked pixels). Unweighted least squares takes none.
  const HostArray* quality = nullptr;
  std::optional<Pixel> seed;      // Goldstein only
  int iterations_per_radius = 8;  // Goldstein only, in [1, 64]
  bool return_maps = true;        // Goldstein only
  bool congruent = true;          // least squares only (LeastSquaresOptions::congruent)
  OverallProgressFn progress;
  Limits limits;
  ResultBuffers* into = nullptr;  // borrowed; where the result's arrays go (ResultBuffers)
};

struct UnwrapResult {
  Method method = Method::kGoldstein;
  HostArray unwrapped;
  HostArray residues, cuts, regions, unreached;  // Goldstein with return_maps; empty otherwise
  GoldsteinStats stats;                          // least squares: masked_pixels only
  GoldsteinStageTimes stage_times;               // Goldstein only
  int pcg_iterations = 0;                        // weighted least squares
  double pcg_residual = 0;
};

// Everything Unwrap would refuse, checked on the host: dtypes, shapes, limits and options (as
// ValidateGoldstein / ValidateLeastSquares), quality with unweighted least squares, and the
// element values: unmasked phase finite and |phase| <= kPhaseLimit, unmasked quality finite and,
// for weighted least squares, in [0, 1]. Messages name the field and the first bad pixel in
// raster order ("phase[3,4] = nan is not finite ...", "quality[0,5] ..."). Reads every element:
// call it once, before queueing (Unwrap checks again on the device that runs it).
absl::Status ValidateUnwrap(const HostArray& phase, const UnwrapOptions& options);

// Upper bound of the device memory one Unwrap call on CUDA takes (GoldsteinDeviceBytes or
// LeastSquaresDeviceBytes for these options).
int64_t UnwrapDeviceBytes(const HostArray& phase, const UnwrapOptions& options);

// Runs the method on `device` (UnwrapGoldstein or UnwrapLeastSquares, same sync behaviour).
// Least squares also counts the masked pixels into stats.masked_pixels.
absl::StatusOr<UnwrapResult> Unwrap(const Device& device, const HostArray& phase,
                                    const UnwrapOptions& options, StageTimes* times = nullptr);

}  // namespace fresnel::unwrap
