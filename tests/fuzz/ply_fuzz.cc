// fresnel::ParsePly (io/src/ply.cc): any bytes as a PLY file,
// with small vertex/face limits (PlyOptions) so that a header claiming huge counts must be refused
// rather than allocated; a parsed mesh is then sampled to a small cloud.
#include <cstddef>
#include <cstdint>

#include "fresnel/hologram/point_cloud.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fresnel::hologram;
  PlyOptions options;
  options.max_vertices = 1 << 12;
  options.max_faces = 1 << 13;
  // Odd-sized inputs also read a per-vertex "intensity" (the property must then exist).
  if (size % 2 == 1) options.amplitude_property = "intensity";
  auto mesh = ParsePly(absl::string_view(reinterpret_cast<const char*>(data), size), options);
  if (!mesh.ok() || mesh->vertices.empty()) return 0;
  (void)SampleMesh(*mesh, 64, 1);
  return 0;
}
