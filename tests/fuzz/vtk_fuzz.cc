// fresnel::volume::ParseVtk (kernels/src/volume/vtk_io.cc): any bytes as a legacy VTK file; a
// parsed mesh is validated (ValidateMesh) as the CLI does before uploading it.
#include <cstddef>
#include <cstdint>

#include "fresnel/volume/mesh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fresnel::volume;
  VtkReadOptions options;
  options.max_points = 1 << 14;
  options.max_cells = 1 << 14;
  VtkReadReport report;
  auto mesh = ParseVtk(absl::string_view(reinterpret_cast<const char*>(data), size), options,
                       &report);
  if (!mesh.ok()) return 0;
  (void)ValidateMesh(*mesh);
  return 0;
}
