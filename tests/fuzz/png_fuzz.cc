// fresnel::ReadPng (io/src/png.cc, libpng): any bytes as a .png file, with a small
// PngReadOptions::max_pixels; the harness checks the array it returns has the bytes its shape says.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fresnel/io/png.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fresnel::fuzz::ScratchFile file(".png");
  if (!file.Write(data, size)) return 0;
  fresnel::PngReadOptions options;
  options.max_pixels = 1 << 20;
  auto image = fresnel::ReadPng(file.path(), options);
  if (!image.ok()) return 0;
  if (image->nbytes() != static_cast<size_t>(image->size()) * fresnel::DTypeSize(image->dtype())) {
    std::abort();
  }
  return 0;
}
