// PLY meshes and point clouds (ASCII and binary little-endian) as plain vertex and face arrays.
// Host-only; reading a file synchronises with nothing but the file system.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fresnel {

// The vertex positions (and optionally one per-vertex scalar) and the faces of a PLY file.
// Coordinates are as stored in the file (PLY has no unit).
struct PlyMesh {
  std::vector<std::array<double, 3>> vertices;
  // Values of PlyOptions::amplitude_property per vertex; empty when that option is empty.
  std::vector<double> vertex_values;
  // Triangles (polygons are split into fans), as vertex indices. Empty without a face element.
  std::vector<std::array<int32_t, 3>> faces;
};

struct PlyOptions {
  // A vertex property to read into PlyMesh::vertex_values (e.g. "intensity"); "" = none.
  std::string amplitude_property;
  // Maximum vertices / faces accepted (InvalidArgument beyond).
  int64_t max_vertices = int64_t{1} << 26;
  int64_t max_faces = int64_t{1} << 27;
};

// Parses a whole PLY file ("format ascii 1.0" or "format binary_little_endian 1.0") with an
// element "vertex" holding float or integer properties x, y, z. Other elements and properties
// are skipped; "face" lists (any integer count and index types) become triangles.
// InvalidArgument for malformed files, naming the header line or element.
absl::StatusOr<PlyMesh> ParsePly(absl::string_view file_bytes, const PlyOptions& options = {});
absl::StatusOr<PlyMesh> ReadPly(const std::string& path, const PlyOptions& options = {});

}  // namespace fresnel
