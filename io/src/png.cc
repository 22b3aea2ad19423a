#include "fresnel/io/png.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fresnel {
namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

}  // namespace

absl::StatusOr<HostArray> ReadPng(const std::string& path, const PngReadOptions& options) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  unsigned char sig[8];
  if (std::fread(sig, 1, 8, f.get()) != 8 || png_sig_cmp(sig, 0, 8) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a PNG file"));
  }
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::ResourceExhaustedError("libpng: out of memory");
  }
  // libpng reports errors by longjmp back here: every object with a destructor must exist before
  // the setjmp (one constructed after it would be skipped, and leaked, by the jump).
  HostArray out;
  std::vector<png_bytep> rows;
  std::vector<int64_t> shape;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': corrupt PNG"));
  }
  png_init_io(png, f.get());
  png_set_sig_bytes(png, 8);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info);
  png_uint_32 h = png_get_image_height(png, info);
  int depth = png_get_bit_depth(png, info);
  int color = png_get_color_type(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_swap(png);  // PNG stores big-endian samples
  png_read_update_info(png, info);
  int channels = png_get_channels(png, info);
  int out_depth = png_get_bit_depth(png, info);
  // Checked before the image is allocated: a few bytes of PNG can claim 10^6 x 10^6 pixels.
  if (int64_t{w} * h > options.max_pixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", h, " x ", w,
                                                   " pixels exceed the limit of ",
                                                   options.max_pixels));
  }
  shape = {static_cast<int64_t>(h), static_cast<int64_t>(w)};
  if (channels > 1) shape.push_back(channels);
  out = HostArray(out_depth == 16 ? DType::kUint16 : DType::kUint8, shape);
  size_t row_bytes = png_get_rowbytes(png, info);
  if (row_bytes != static_cast<size_t>(w) * channels * (out_depth == 16 ? 2 : 1)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': unsupported PNG layout"));
  }
  rows.resize(h);
  auto* base = static_cast<unsigned char*>(out.raw());
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = base + y * row_bytes;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return out;
}

absl::Status WritePng(const std::string& path, const HostArray& image) {
  if (image.dtype() != DType::kUint8 && image.dtype() != DType::kUint16) {
    return absl::InvalidArgumentError(
        absl::StrCat("WritePng: dtype must be uint8 or uint16, got ", DTypeName(image.dtype())));
  }
  int channels = image.ndim() == 3 ? static_cast<int>(image.dim(2)) : 1;
  if (image.ndim() < 2 || image.ndim() > 3 ||
      (channels != 1 && channels != 3 && channels != 4) || image.dim(0) <= 0 ||
      image.dim(1) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WritePng: shape must be [h, w] or [h, w, 1|3|4], got ",
                     ShapeString(image.shape())));
  }
  FilePtr f(std::fopen(path.c_str(), "wb"));
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr) {
    png_destroy_write_struct(&png, &info);
    return absl::ResourceExhaustedError("libpng: out of memory");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return absl::DataLossError(absl::StrCat("libpng failed writing '", path, "'"));
  }
  png_init_io(png, f.get());
  int color = channels == 1 ? PNG_COLOR_TYPE_GRAY
              : channels == 3 ? PNG_COLOR_TYPE_RGB
                              : PNG_COLOR_TYPE_RGB_ALPHA;
  int depth = image.dtype() == DType::kUint16 ? 16 : 8;
  auto h = static_cast<png_uint_32>(image.dim(0));
  auto w = static_cast<png_uint_32>(image.dim(1));
  png_set_IHDR(png, info, w, h, depth, color, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  if (depth == 16) png_set_swap(png);
  size_t row_bytes = static_cast<size_t>(w) * channels * (depth / 8);
  std::vector<png_bytep> rows(h);
  auto* base = const_cast<unsigned char*>(static_cast<const unsigned char*>(image.raw()));
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = base + y * row_bytes;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return absl::OkStatus();
}

absl::StatusOr<HostArray> ToGray8(const HostArray& image, double lo, double hi) {
  if (image.ndim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ToGray8: need a 2-D array, got ", ShapeString(image.shape())));
  }
  int64_t n = image.size();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (image.dtype()) {
      case DType::kFloat32: v[i] = image.data<float>()[i]; break;
      case DType::kFloat64: v[i] = image.data<double>()[i]; break;
      case DType::kUint8: v[i] = image.data<uint8_t>()[i]; break;
      case DType::kUint16: v[i] = image.data<uint16_t>()[i]; break;
      case DType::kInt16: v[i] = image.data<int16_t>()[i]; break;
      case DType::kInt32: v[i] = image.data<int32_t>()[i]; break;
      case DType::kComplex64: v[i] = std::abs(image.data<std::complex<float>>()[i]); break;
      case DType::kComplex128: v[i] = std::abs(image.data<std::complex<double>>()[i]); break;
    }
  }
  if (lo == hi) {
    lo = std::numeric_limits<double>::infinity();
    hi = -lo;
    for (double x : v) {
      if (std::isfinite(x)) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
    }
    if (!(hi > lo)) hi = lo + 1;
  }
  HostArray out(DType::kUint8, image.shape());
  for (int64_t i = 0; i < n; ++i) {
    double t = std::isfinite(v[i]) ? (v[i] - lo) / (hi - lo) : 0.0;
    out.data<uint8_t>()[i] = static_cast<uint8_t>(std::lround(std::clamp(t, 0.0, 1.0) * 255.0));
  }
  return out;
}

}  // namespace fresnel
