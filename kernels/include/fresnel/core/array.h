// Host-resident n-dimensional arrays: the one data type every kernel entry point, the proto
// conversion and the CLI exchange. Row-major, little-endian (every supported host is).
#pragma once

#include <complex>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace fresnel {

enum class DType : int {
  kFloat32,
  kFloat64,
  kComplex64,
  kComplex128,
  kUint8,
  kUint16,
  kInt16,
  kInt32,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// NumPy's name: "float32", "complex64", ...
const char* DTypeName(DType dtype);
// Inverse of DTypeName; InvalidArgument for unknown names.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<std::complex<float>> { static constexpr DType value = DType::kComplex64; };
template <> struct DTypeOf<std::complex<double>> { static constexpr DType value = DType::kComplex128; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUint8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::kUint16; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };

// Product of the dimensions (1 for a scalar shape {}); -1 if a dimension is negative or the
// product overflows int64.
int64_t ShapeElements(const std::vector<int64_t>& shape);
// "[2, 3]"
std::string ShapeString(const std::vector<int64_t>& shape);

// An owning, row-major host array. The bytes live in a std::string so that a result can be moved
// into a protobuf `bytes` field without a copy.
class HostArray {
 public:
  HostArray() = default;
  // Zero-filled array. `shape` must be valid (non-negative dimensions).
  HostArray(DType dtype, std::vector<int64_t> shape);

  // Adopts `bytes`; InvalidArgument (naming `field`) when the shape is invalid or the byte count
  // does not equal elements * DTypeSize(dtype).
  static absl::StatusOr<HostArray> FromBytes(DType dtype, std::vector<int64_t> shape,
                                             std::string bytes, absl::string_view field = "array");

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t size() const { return ShapeElements(shape_); }
  size_t nbytes() const { return bytes_.size(); }

  void* raw() { return bytes_.data(); }
  const void* raw() const { return bytes_.data(); }
  // Typed access; T must match dtype() (checked in debug builds).
  template <class T>
  T* data() { return reinterpret_cast<T*>(bytes_.data()); }
  template <class T>
  const T* data() const { return reinterpret_cast<const T*>(bytes_.data()); }

  // Reinterprets with a new shape of the same element count.
  absl::Status Reshape(std::vector<int64_t> shape);

  const std::string& bytes() const { return bytes_; }
  std::string TakeBytes() && { return std::move(bytes_); }

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  std::string bytes_;
};

}  // namespace fresnel
