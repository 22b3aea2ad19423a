// Point-cloud inputs for holography: sampling a PLY mesh (read by fresnel/io/ply.h) to a chosen
// number of points, fitting a cloud into a box, and turning a grayscale image into one point per
// pixel on a plane. Host-only; nothing here touches a device.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/core/array.h"
#include "fresnel/hologram/hologram.h"
#include "fresnel/io/ply.h"

namespace fresnel::hologram {

// PLY files are read by fresnel_io (fresnel/io/ply.h); the names stay available here.
using fresnel::ParsePly;
using fresnel::PlyMesh;
using fresnel::PlyOptions;
using fresnel::ReadPly;

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
