// Point-cloud inputs for holography: PLY meshes and point clouds (ASCII and binary
// little-endian), sampling a mesh to a chosen number of points, fitting a cloud into a box, and
// turning a grayscale image into one point per pixel on a plane. Host-only; nothing here
// touches a device.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/core/array.h"
#include "fresnel/hologram/hologram.h"

namespace fresnel::hologram {

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

// A cloud of `count` points from a mesh: its vertices first, then the centroids of evenly
// spaced faces, then (if still short) uniformly random points on faces chosen evenly in turn,
// drawn from a generator seeded with `seed`; fewer than the vertices → evenly spaced vertices.
// Amplitudes are 1 (or the vertex values when present; centroids and samples interpolate them).
absl::StatusOr<PointCloud> SampleMesh(const PlyMesh& mesh, int64_t count, uint64_t seed = 1);

// Scales each axis of `points` separately so that the bounding box becomes extent_m (a zero
// extent collapses that axis) and moves its centre to center_m. InvalidArgument for an empty
// cloud or a negative extent.
absl::StatusOr<PointCloud> FitToBox(const PointCloud& points, std::array<double, 3> extent_m,
                                    std::array<double, 3> center_m);

struct ImagePlaneOptions {
  double spacing_m = 0;  // distance between neighbouring pixels' points
  double depth_m = 0;    // z_m of the plane
  bool skip_zero = false;  // leave out black pixels
};

// One point per pixel of a uint8 [rows, cols] grayscale image: pixel (i, k) (row i from the
// top) sits at x = (k − cols/2)·spacing, y = (i − rows/2)·spacing, z = depth_m, with amplitude
// value/255 and phase 0, so that a reconstruction shows the image upright in array order.
absl::StatusOr<PointCloud> ImageToPointCloud(const HostArray& gray8,
                                             const ImagePlaneOptions& options);

}  // namespace fresnel::hologram
