// 2-D images from files: .npy and TIFF (libtiff, when the build found it), for `fresnel unwrap`'s
// phase, mask and quality maps. Host-only; reads synchronously on the calling thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"

namespace fresnel {

// True when this build reads TIFF files (it was built with libtiff).
bool TiffSupported();

struct ImageReadOptions {
  // Largest rows * cols of a TIFF accepted (InvalidArgument beyond), checked before the image is
  // allocated; the default is unwrap::Limits' max_pixels. (.npy files are read whole: their size
  // bounds the array.)
  int64_t max_pixels = int64_t{1} << 30;
};

// Reads a 2-D array [rows, cols] from
//   .npy         any fresnel::DType, stored as 2-D
//   .tif .tiff   the first image of the file, one sample per pixel: float32/float64 (the usual
//                format of interferometry phase maps), uint8/uint16, int16/int32; strips or
//                tiles, any compression libtiff decodes
// NotFound when the file cannot be opened, InvalidArgument (naming the file) when it is not a
// single-channel 2-D image of a supported type, Unimplemented for TIFF without libtiff.
absl::StatusOr<HostArray> ReadImage(const std::string& path, const ImageReadOptions& options = {});

}  // namespace fresnel
