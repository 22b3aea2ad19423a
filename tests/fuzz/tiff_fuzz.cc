// fresnel::ReadImage for .tif files (io/src/image.cc, libtiff): any bytes as a TIFF
// phase map.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fresnel/io/image.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fresnel::fuzz::ScratchFile file(".tif");
  if (!file.Write(data, size)) return 0;
  fresnel::ImageReadOptions options;
  options.max_pixels = 1 << 20;
  auto image = fresnel::ReadImage(file.path(), options);
  if (!image.ok()) return 0;
  if (image->ndim() != 2 ||
      image->nbytes() != static_cast<size_t>(image->size()) * fresnel::DTypeSize(image->dtype())) {
    std::abort();
  }
  return 0;
}
