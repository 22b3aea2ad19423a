// `fresnel hologram`: renders a point-cloud hologram on the server from a PLY mesh / point cloud
// (or an .npy [N, 4|5] cloud) or a grayscale image, and writes the phase-only hologram, the
// field, the amplitude and an ASM reconstruction to files.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "commands.h"
#include "fresnel/hologram/hologram.h"
#include "fresnel/v1/hologram.pb.h"

namespace CLI {
class App;
}

namespace fresnel::cli {

struct HologramCmdOptions {
  // Source: exactly one of points / image.
  std::string points;   // .ply (mesh or cloud) or .npy float [N, 4|5]
  int64_t count = 0;    // PLY: sample this many points (SampleMesh); 0 = the vertices
  std::string fit;      // "W,H,D" in metres: scale the cloud's bounding box to this
  std::string center;   // "X,Y,Z" in metres: move the bounding box's centre here
  std::string image;    // PNG (gray, RGB or RGBA; converted to 8-bit gray)
  double spacing_m = 0;  // image: distance between neighbouring pixels' points
  double depth_m = 0;    // image: z of the image plane
  // Hologram.
  std::string size;  // "WxH"
  double pitch_m = 0;
  double wavelength_m = 0;
  std::string algorithm = "auto";  // auto | reference | triangular | piecewise | tensor
  double min_snr_db = 35;  // the kernels' default: int8 tensor cores on a GPU
  bool no_clip = false;
  // Outputs (at least one).
  std::string phase_png;
  std::string field_npy;
  std::string amplitude_npy;
  double reconstruct_m = 0;  // > 0: reconstruct at this depth
  std::string reconstruct_png;
  std::string reconstruct_source = "field";  // field | phase
  std::string device = "any";
  bool json = false;
  bool shm = false;  // the source and the outputs through a POSIX shared-memory region
  // Holographic video: send this many frames over HologramService.Stream and report frames per
  // second; the files are the last frame's. With --points, frame i shows the cloud turned by
  // i * spin_deg about the vertical axis through its centre.
  int64_t frames = 1;
  double spin_deg = 0;

  // Filled in by ValidateHologramOptions.
  int64_t width = 0, height = 0;
  bool have_fit = false, have_center = false;
  std::array<double, 3> fit_m{}, center_m{};
};

// Checks the flags and fills the parsed fields; InvalidArgument names the offending flag.
absl::Status ValidateHologramOptions(HologramCmdOptions* options);

// The cloud of --points: a PLY file read, sampled (--count) and fitted (--fit/--center), or an
// .npy array of rows x_m, y_m, z_m, amplitude[, phase_rad].
absl::StatusOr<hologram::PointCloud> LoadPointCloud(const HologramCmdOptions& options);

// --algorithm's value (auto, reference, triangular, piecewise, tensor) as the proto's enum; also
// `fresnel bench --op hologram`'s.
v1::HologramAlgorithm AlgorithmFromFlag(const std::string& name);

// Registers the `hologram` subcommand on `app`, parsing into `options`.
CLI::App* AddHologramCommand(CLI::App* app, HologramCmdOptions* options);

int RunHologram(const GlobalOptions& global, HologramCmdOptions options, std::ostream& out,
                std::ostream& err);

}  // namespace fresnel::cli
