// 2-D images for `fresnel unwrap`: reading phase, mask and quality maps from .npy or TIFF files,
// and rendering the before/after preview PNG.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"

namespace fresnel::cli {

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

// The unwrap preview: the wrapped phase (gray, -pi..pi -> black..white) and the unwrapped phase
// (gray over its own range of unmasked pixels) side by side, separated by a white gap. Masked
// pixels are drawn blue, and, when `cuts` is given (uint8, 1 = on a branch cut), cut pixels red
// on the unwrapped half. Images whose longer side exceeds `max_side` are shown at a whole-number
// reduction (a reduced pixel is red when any pixel it covers is on a cut). Returns uint8
// [h, 2 w + gap, 3]; `mask` and `cuts` may be null.
absl::StatusOr<HostArray> RenderUnwrapPreview(const HostArray& wrapped, const HostArray& unwrapped,
                                              const HostArray* mask, const HostArray* cuts,
                                              int max_side = 1024);

}  // namespace fresnel::cli
