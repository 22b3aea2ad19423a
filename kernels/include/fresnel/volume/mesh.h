// Tetrahedral meshes for volume rendering: the host mesh, its validation and content hash, a
// legacy VTK reader and writer, and generators of meshes of any size.
//
// Units: point coordinates are in the mesh's own length unit ("mesh units"); the transfer
// function's extinction is per mesh unit (fresnel/volume/render.h). Everything here runs on the
// calling thread (the generators and the hash use TBB) and touches no GPU.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fresnel::volume {

// A tetrahedral mesh: float32 points, 4 point indices per tetrahedron (either orientation), one
// float32 scalar per point (linearly interpolated inside each tetrahedron).
struct TetMesh {
  std::vector<float> points_xyz;  // 3 per point, mesh units
  std::vector<int32_t> tets;      // 4 per tetrahedron, 0-based point indices
  std::vector<float> scalars;     // 1 per point
  int64_t num_points() const { return static_cast<int64_t>(points_xyz.size() / 3); }
  int64_t num_tets() const { return static_cast<int64_t>(tets.size() / 4); }
};

// Hard limits of the layout (int32 indices; records carry 32-bit tetrahedron ids).
inline constexpr int64_t kMaxPoints = (int64_t{1} << 31) - 1;
inline constexpr int64_t kMaxTets = (int64_t{1} << 31) - 1;

struct MeshReport {
  int64_t num_points = 0;
  int64_t num_tets = 0;
  // Tetrahedra with |volume| <= kDegenerateRelVolume * (longest edge)^3: skipped by the
  // renderers, counted here.
  int64_t degenerate_tets = 0;
  std::array<float, 3> bounds_min{};  // over the points used by tetrahedra
  std::array<float, 3> bounds_max{};
  float scalar_min = 0;
  float scalar_max = 0;
};
inline constexpr double kDegenerateRelVolume = 1e-9;

// Checks the counts (points_xyz a multiple of 3, tets of 4, one scalar per point, at least one
// tetrahedron, under kMaxPoints/kMaxTets), that every index is in [0, num_points), and that every
// coordinate and scalar is finite. InvalidArgument naming the field and the first bad element.
absl::StatusOr<MeshReport> ValidateMesh(const TetMesh& mesh);

// True for a tetrahedron that ValidateMesh counts as degenerate (indices must be valid).
bool IsDegenerateTet(const TetMesh& mesh, int64_t tet);

// SHA-256 of the counts, points, tetrahedra and scalars (little-endian), as 64 hex digits. Equal
// meshes (same arrays, same order) hash equal; the service keys its mesh cache by it.
std::string MeshContentHash(const TetMesh& mesh);

// ---- legacy VTK ----------------------------------------------------------------------------

struct VtkReadOptions {
  // POINT_DATA SCALARS array to use; empty = the first one.
  std::string scalar_name;
  // Largest POINTS and CELLS counts accepted (InvalidArgument beyond), checked before anything is
  // allocated. Every count is also bounded by the bytes left in the file.
  int64_t max_points = kMaxPoints;
  int64_t max_cells = kMaxTets;
};
struct VtkReadReport {
  int64_t cells_read = 0;
  int64_t tets = 0, hexahedra = 0, wedges = 0, pyramids = 0;
  // Points added at hexahedron centres (hexahedra whose face diagonals admit no split without one).
  int64_t steiner_points = 0;
  std::string scalar_name;
  std::string version;  // "4.2", "5.1", ...
};

// Parses a legacy VTK UNSTRUCTURED_GRID (ASCII or BINARY; CELLS + CELL_TYPES as in 4.2, or CELLS
// with OFFSETS/CONNECTIVITY as in 5.1; POINTS float or double; one POINT_DATA SCALARS array; other
// arrays are skipped). Tetrahedra (VTK type 10) are kept; hexahedra (12), wedges (13) and
// pyramids (14) are split into tetrahedra, each quadrilateral face along the diagonal through its
// smallest point id, so neighbouring cells agree on shared faces. Other cell types: InvalidArgument
// naming the type (e.g. "VTK_TRIANGLE (5)"). The result is not validated (call ValidateMesh).
absl::StatusOr<TetMesh> ParseVtk(absl::string_view bytes, const VtkReadOptions& options = {},
                                 VtkReadReport* report = nullptr);
absl::StatusOr<TetMesh> ReadVtk(const std::string& path, const VtkReadOptions& options = {},
                                VtkReadReport* report = nullptr);

enum class VtkFormat { kAscii42, kBinary42, kAscii51, kBinary51 };
// Writes `mesh` as a legacy VTK unstructured grid of tetrahedra with the point scalar "scalar".
std::string FormatVtk(const TetMesh& mesh, VtkFormat format);
absl::Status WriteVtk(const TetMesh& mesh, const std::string& path, VtkFormat format);

// ---- generators ----------------------------------------------------------------------------

enum class GridShape {
  kBox,             // the whole box
  kHoleAndNotch,    // a square hole through the box along z and a notch cut into the +x side:
                    // non-convex, rays leave and re-enter the mesh
};

// A structured grid of cells_x × cells_y × cells_z cubes spanning [box_min, box_max], each cube
// split into 6 tetrahedra sharing its main diagonal (the same split in every cube, so faces
// match). The scalar is the analytic field AnalyticScalar at each point.
struct GridMeshSpec {
  int cells_x = 16, cells_y = 16, cells_z = 16;
  std::array<float, 3> box_min{-1, -1, -1};
  std::array<float, 3> box_max{1, 1, 1};
  GridShape shape = GridShape::kBox;
};
absl::StatusOr<TetMesh> GenerateGridMesh(const GridMeshSpec& spec);

// The grid spec whose box mesh has about `target_tets` tetrahedra (cubic grid, 6 per cube):
// 1e6 → 55³ cubes (998,250 tets), 6e6 → 100³ (6,000,000), 35e6 → 180³ (34,992,000).
GridMeshSpec GridSpecForTets(int64_t target_tets);

// The generators' field in [0, 1]: two Gaussian blobs and a soft shell over the unit-normalised
// box coordinates.
float AnalyticScalar(float x, float y, float z);

}  // namespace fresnel::volume
