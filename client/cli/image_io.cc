#include "image_io.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fresnel::cli {
namespace {

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

}  // namespace

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
