#include "fresnel/core/array.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fresnel/core/device.h"

namespace fresnel {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kComplex64: return 8;
    case DType::kComplex128: return 16;
    case DType::kUint8: return 1;
    case DType::kUint16: return 2;
    case DType::kInt16: return 2;
    case DType::kInt32: return 4;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kComplex64: return "complex64";
    case DType::kComplex128: return "complex128";
    case DType::kUint8: return "uint8";
    case DType::kUint16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
  }
  return "unknown";
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kComplex64, DType::kComplex128,
                  DType::kUint8, DType::kUint16, DType::kInt16, DType::kInt32}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

int64_t ShapeElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

HostArray::HostArray(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  int64_t n = ShapeElements(shape_);
  bytes_.resize(static_cast<size_t>(n < 0 ? 0 : n) * DTypeSize(dtype_));
}

absl::StatusOr<HostArray> HostArray::FromBytes(DType dtype, std::vector<int64_t> shape,
                                               std::string bytes, absl::string_view field) {
  int64_t n = ShapeElements(shape);
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape ", ShapeString(shape), " is invalid (negative or overflowing)"));
  }
  size_t want = static_cast<size_t>(n) * DTypeSize(dtype);
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".data has ", bytes.size(), " bytes but shape ", ShapeString(shape), " of ",
        DTypeName(dtype), " needs ", want));
  }
  HostArray a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.bytes_ = std::move(bytes);
  return a;
}

absl::Status HostArray::Reshape(std::vector<int64_t> shape) {
  if (ShapeElements(shape) != size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeString(shape_), " to ",
                                                   ShapeString(shape)));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

std::string Device::Name() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : absl::StrCat("cuda:", ordinal);
}

}  // namespace fresnel
