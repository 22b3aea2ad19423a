// PNG images as HostArrays: uint8 [h, w] (gray), [h, w, 3] (RGB), [h, w, 4] (RGBA), or uint16
// [h, w] / [h, w, c] for 16-bit files (raw values, e.g. depth in millimetres). Palette and
// low-bit-depth files are expanded to 8 bits.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "fresnel/core/array.h"

namespace fresnel {

struct PngReadOptions {
  // Largest width * height accepted (InvalidArgument beyond), checked before the image is
  // allocated (16384 x 16384 by default).
  int64_t max_pixels = int64_t{1} << 28;
};
// NotFound when the file cannot be opened; InvalidArgument for a file that is not a PNG, is
// corrupt, or exceeds options.max_pixels.
absl::StatusOr<HostArray> ReadPng(const std::string& path, const PngReadOptions& options = {});
// Writes uint8 or uint16 arrays of shape [h, w], [h, w, 1], [h, w, 3] or [h, w, 4].
absl::Status WritePng(const std::string& path, const HostArray& image);

// Converts a 2-D real array to an 8-bit image by mapping [lo, hi] linearly to [0, 255]
// (lo/hi = the array's min/max when equal). Handy for previews of phase maps and fields.
absl::StatusOr<HostArray> ToGray8(const HostArray& image, double lo = 0, double hi = 0);

}  // namespace fresnel
