#include "image_io.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "fresnel/core/npy.h"

#ifndef FRESNEL_WITH_TIFF
#define FRESNEL_WITH_TIFF 0
#endif
#if FRESNEL_WITH_TIFF
#include <tiffio.h>
#endif

namespace fresnel::cli {
namespace {

std::string LowerExtension(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return absl::AsciiStrToLower(path.substr(dot));
}

double ValueAt(const HostArray& a, int64_t i) {
  switch (a.dtype()) {
    case DType::kFloat32: return a.data<float>()[i];
    case DType::kFloat64: return a.data<double>()[i];
    case DType::kUint8: return a.data<uint8_t>()[i];
    case DType::kUint16: return a.data<uint16_t>()[i];
    case DType::kInt16: return a.data<int16_t>()[i];
    case DType::kInt32: return a.data<int32_t>()[i];
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

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
    if (tw == 0 || th == 0 || tile_bytes <= 0 ||
        static_cast<uint64_t>(tile_bytes) < uint64_t{tw} * th * item) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad TIFF tile size ", tw, " x ", th));
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

absl::StatusOr<HostArray> RenderUnwrapPreview(const HostArray& wrapped, const HostArray& unwrapped,
                                              const HostArray* mask, const HostArray* cuts,
                                              int max_side) {
  if (wrapped.ndim() != 2 || unwrapped.shape() != wrapped.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("preview: wrapped ", ShapeString(wrapped.shape()), " and unwrapped ",
                     ShapeString(unwrapped.shape()), " must be equal 2-D shapes"));
  }
  for (const HostArray* a : {mask, cuts}) {
    if (a != nullptr && (a->shape() != wrapped.shape() || a->dtype() != DType::kUint8)) {
      return absl::InvalidArgumentError(
          "preview: mask and cuts must be uint8 of the image's shape");
    }
  }
  const int64_t rows = wrapped.dim(0), cols = wrapped.dim(1);
  const int64_t step = std::max<int64_t>(1, (std::max(rows, cols) + max_side - 1) / max_side);
  const int64_t h = (rows + step - 1) / step, w = (cols + step - 1) / step;
  const int64_t gap = 8;
  auto masked = [&](int64_t i) { return mask != nullptr && mask->data<uint8_t>()[i] != 0; };

  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double v = ValueAt(unwrapped, i);
    if (masked(i) || !std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!(hi > lo)) {
    lo = std::isfinite(lo) ? lo : 0;
    hi = lo + 1;
  }
  const double kPi = 3.14159265358979323846;
  auto gray = [](double v, double a, double b) -> uint8_t {
    if (!std::isfinite(v)) return 0;
    return static_cast<uint8_t>(std::lround(std::clamp((v - a) / (b - a), 0.0, 1.0) * 255.0));
  };

  HostArray out(DType::kUint8, {h, 2 * w + gap, 3});
  uint8_t* px = out.data<uint8_t>();
  std::fill(px, px + out.size(), uint8_t{255});
  auto put = [&](int64_t y, int64_t x, uint8_t r, uint8_t g, uint8_t b) {
    uint8_t* p = px + (y * (2 * w + gap) + x) * 3;
    p[0] = r;
    p[1] = g;
    p[2] = b;
  };
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const int64_t i = y * step * cols + x * step;
      bool on_cut = false;
      if (cuts != nullptr) {
        for (int64_t dy = 0; dy < step && y * step + dy < rows && !on_cut; ++dy) {
          for (int64_t dx = 0; dx < step && x * step + dx < cols; ++dx) {
            if (cuts->data<uint8_t>()[(y * step + dy) * cols + x * step + dx] != 0) {
              on_cut = true;
              break;
            }
          }
        }
      }
      if (masked(i)) {
        put(y, x, 40, 60, 160);
        put(y, w + gap + x, 40, 60, 160);
        continue;
      }
      const uint8_t g1 = gray(ValueAt(wrapped, i), -kPi, kPi);
      put(y, x, g1, g1, g1);
      if (on_cut) {
        put(y, w + gap + x, 230, 30, 30);
      } else {
        const uint8_t g2 = gray(ValueAt(unwrapped, i), lo, hi);
        put(y, w + gap + x, g2, g2, g2);
      }
    }
  }
  return out;
}

}  // namespace fresnel::cli
