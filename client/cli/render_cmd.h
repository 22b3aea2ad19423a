// `fresnel render`: direct volume rendering of a tetrahedral mesh on the server. Reads a legacy
// VTK unstructured grid (or generates a mesh with --generate), uploads it once
// (VolumeRenderService.UploadMesh; the server keeps it cached by content), renders it with a
// transfer function and camera, and writes PNGs; --orbit N renders a turntable of N frames and
// reports frames per second through the service.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "commands.h"
#include "fresnel/v1/volume.pb.h"
#include "fresnel/volume/mesh.h"
#include "fresnel/volume/render.h"

namespace CLI {
class App;
}

namespace fresnel::cli {

struct RenderCmdOptions {
  std::string input;     // .vtk (legacy, ASCII or binary)
  std::string generate;  // instead of input: "box:N", "hole:N" (N cubes a side) or "tets:COUNT"
  std::string write_vtk; // also write the mesh (generated or read) here, binary VTK 4.2
  std::string scalar;    // VTK POINT_DATA array; "" = the first
  // Transfer function: "default", "default:MAX_EXTINCTION", or control points
  // "S:R,G,B:EXT S:R,G,B:EXT ..." (scalar, linear colour in [0, 1], extinction per mesh unit).
  std::string tf = "default";
  std::string background;  // "R,G,B,A" in [0, 1]; "" = the transfer function's
  // Camera: "azimuth=DEG elevation=DEG [fov=DEG]" (orbit about the mesh) or
  // "eye=X,Y,Z target=X,Y,Z [up=X,Y,Z] [fov=DEG | ortho=HEIGHT]".
  std::string camera = "azimuth=30 elevation=20";
  std::string size = "1024x1024";
  std::string out;       // PNG; with --orbit frame i goes to OUT with "_%03d" before .png
  int64_t orbit = 0;     // > 0: turntable of this many frames (camera must be an orbit)
  int inflight = 2;      // renders in flight during --orbit (they run one at a time per mesh)
  bool progressive = false;
  int hash_bits = 0;     // 0 auto, 2, 3
  std::string device = "any";
  bool keep = false;     // leave the mesh cached on the server
  bool shm = false;      // images back through a shared-memory region (same host)
  bool json = false;

  // Filled in by ValidateRenderOptions.
  int width = 0, height = 0;
  v1::TransferFunction tf_proto;
  bool orbit_camera = false;
  v1::OrbitView orbit_view;
  v1::VolumeCamera explicit_camera;
};

// Checks the flags and parses --tf, --camera, --size, --background; InvalidArgument names the
// offending flag.
absl::Status ValidateRenderOptions(RenderCmdOptions* options);

// The mesh of --generate (or --input read as VTK; its cell types are checked there).
absl::StatusOr<volume::TetMesh> LoadRenderMesh(const RenderCmdOptions& options);

// OUT with "_%03d" inserted before the extension (frame files of --orbit).
std::string FramePath(const std::string& out, int64_t frame);

CLI::App* AddRenderCommand(CLI::App* app, RenderCmdOptions* options);

int RunRender(const GlobalOptions& global, RenderCmdOptions options, std::ostream& out,
              std::ostream& err);

}  // namespace fresnel::cli
