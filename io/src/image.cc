// 2-D images from .npy and TIFF files (fresnel/io/image.h).
#include "fresnel/io/image.h"

#include <cstdarg>
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "fresnel/io/npy.h"
#include "io_internal.h"

#ifndef FRESNEL_WITH_TIFF
#define FRESNEL_WITH_TIFF 0
#endif
#if FRESNEL_WITH_TIFF
#include <tiffio.h>
#endif

namespace fresnel {

std::string LowerExtension(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return absl::AsciiStrToLower(path.substr(dot));
}

namespace {

#if FRESNEL_WITH_TIFF

// libtiff reports problems through global handlers: keep the last error for the status message
// and drop warnings (unknown tags and the like).
thread_local std::string tiff_error;

void TiffError(const char* module, const char* format, va_list args) {
  char buffer[512];
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  tiff_error = module != nullptr ? absl::StrCat(module, ": ", buffer) : buffer;
}

void TiffWarning(const char*, const char*, va_list) {}

absl::StatusOr<HostArray> ReadTiff(const std::string& path, const ImageReadOptions& options) {
  TIFFSetErrorHandler(TiffError);
  TIFFSetWarningHandler(TiffWarning);
  tiff_error.clear();
  TIFF* tif = TIFFOpen(path.c_str(), "r");
  if (tif == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", path, "'", tiff_error.empty() ? "" : ": ", tiff_error));
  }
  struct Closer {
    TIFF* t;
    ~Closer() { TIFFClose(t); }
  } closer{tif};
  uint32_t width = 0, height = 0;
  uint16_t samples = 1, bits = 0, format = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &width);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &height);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &format);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  if (samples != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", samples, " samples per pixel; expected a single-channel image"));
  }
  DType dtype;
  if (format == SAMPLEFORMAT_IEEEFP && bits == 32) {
    dtype = DType::kFloat32;
  } else if (format == SAMPLEFORMAT_IEEEFP && bits == 64) {
    dtype = DType::kFloat64;
  } else if (format == SAMPLEFORMAT_UINT && bits == 8) {
    dtype = DType::kUint8;
  } else if (format == SAMPLEFORMAT_UINT && bits == 16) {
    dtype = DType::kUint16;
  } else if (format == SAMPLEFORMAT_INT && bits == 16) {
    dtype = DType::kInt16;
  } else if (format == SAMPLEFORMAT_INT && bits == 32) {
    dtype = DType::kInt32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unsupported TIFF sample type (", bits, "-bit, sample format ", format,
                     "); expected float32/float64, uint8/uint16 or int16/int32"));
  }
  if (width == 0 || height == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty TIFF image"));
  }
  // The header's size is checked before the image is allocated (a few bytes of TIFF can claim
  // 2^32 x 2^32 pixels).
  if (int64_t{width} * height > options.max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", height, " x ", width,
                                                   " pixels exceed the limit of ",
                                                   options.max_pixels));
  }
  const size_t item = DTypeSize(dtype);
  HostArray out(dtype, {static_cast<int64_t>(height), static_cast<int64_t>(width)});
  char* dst = static_cast<char*>(out.raw());
  const size_t row_bytes = static_cast<size_t>(width) * item;
  if (TIFFIsTiled(tif)) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    const tmsize_t tile_bytes = TIFFTileSize(tif);
    // A tile is at most the image rounded up to 16 (the spec's tile multiple) or 1024 on a side:
    // a header of a few bytes may claim 65536 x 65536 tiles (4 GB allocated for one tile of a
    // small image; found by fuzz_tiff).
    const auto side_ok = [](uint32_t t, uint32_t image) {
      return uint64_t{t} <= std::max<uint64_t>((uint64_t{image} + 15) / 16 * 16, 1024);
    };
    if (tw == 0 || th == 0 || tile_bytes <= 0 || !side_ok(tw, width) || !side_ok(th, height) ||
        static_cast<uint64_t>(tile_bytes) < uint64_t{tw} * th * item ||
        static_cast<uint64_t>(tile_bytes) > uint64_t{tw} * th * item * 2) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad TIFF tile size ", tw, " x ", th,
                                                     " for a ", width, " x ", height, " image"));
    }
    std::vector<char> tile(static_cast<size_t>(tile_bytes));
    for (uint32_t y = 0; y < height; y += th) {
      for (uint32_t x = 0; x < width; x += tw) {
        if (TIFFReadTile(tif, tile.data(), x, y, 0, 0) < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": cannot read the tile at (", y, ", ", x, "): ", tiff_error));
        }
        const uint32_t rows = std::min(th, height - y);
        const size_t bytes = static_cast<size_t>(std::min(tw, width - x)) * item;
        for (uint32_t r = 0; r < rows; ++r) {
          std::memcpy(dst + (y + r) * row_bytes + x * item,
                      tile.data() + static_cast<size_t>(r) * tw * item, bytes);
        }
      }
    }
  } else {
    if (static_cast<size_t>(TIFFScanlineSize(tif)) != row_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected TIFF scanline size"));
    }
    for (uint32_t r = 0; r < height; ++r) {
      if (TIFFReadScanline(tif, dst + r * row_bytes, r, 0) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": cannot read row ", r, ": ", tiff_error));
      }
    }
  }
  return out;
}

#endif  // FRESNEL_WITH_TIFF

}  // namespace

bool TiffSupported() { return FRESNEL_WITH_TIFF != 0; }

absl::StatusOr<HostArray> ReadImage(const std::string& path, const ImageReadOptions& options) {
  const std::string ext = LowerExtension(path);
  absl::StatusOr<HostArray> image;
  if (ext == ".tif" || ext == ".tiff") {
#if FRESNEL_WITH_TIFF
    image = ReadTiff(path, options);
#else
    return absl::UnimplementedError(
        absl::StrCat(path, ": this fresnel was built without libtiff; convert the image to .npy"));
#endif
  } else if (ext == ".npy") {
    image = ReadNpy(path);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unknown image format (expected .npy, .tif or .tiff)"));
  }
  if (!image.ok()) return image.status();
  if (image->ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected a 2-D image [rows, cols], got shape ", ShapeString(image->shape())));
  }
  return image;
}

}  // namespace fresnel
