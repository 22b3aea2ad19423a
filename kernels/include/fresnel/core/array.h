// Host-resident n-dimensional arrays: the one data type every kernel entry point, the proto
// conversion and the CLI exchange. Row-major, little-endian (every supported host is).
#pragma once

#include <complex>
#include <cstdint>
#include <string>
#include <string_view>
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

// A row-major host array. It owns its bytes, in a std::string so that a result can be moved
// into a protobuf `bytes` field without a copy; or, made by Borrow, it is a view of bytes that
// somebody else owns (a shared-memory region a request holds), so that a kernel can read its
// input from there and write its result there without a copy in between.
class HostArray {
 public:
  HostArray() = default;
  // Zero-filled array. `shape` must be valid (non-negative dimensions).
  HostArray(DType dtype, std::vector<int64_t> shape);
  // A copy owns its bytes, also the copy of a borrowed array. A move keeps what it moves (a
  // view stays a view) and leaves `other` empty.
  HostArray(const HostArray& other);
  HostArray& operator=(const HostArray& other);
  HostArray(HostArray&& other) noexcept;
  HostArray& operator=(HostArray&& other) noexcept;
  ~HostArray() = default;

  // Adopts `bytes`; InvalidArgument (naming `field`) when the shape is invalid or the byte count
  // does not equal elements * DTypeSize(dtype).
  static absl::StatusOr<HostArray> FromBytes(DType dtype, std::vector<int64_t> shape,
                                             std::string bytes, absl::string_view field = "array");
  // A view of the `nbytes` bytes at `data`, neither copied nor owned: whoever calls this keeps
  // them mapped, and keeps other writers away from them, for as long as the array or anything
  // reading through it lives. The same checks as FromBytes.
  static absl::StatusOr<HostArray> Borrow(DType dtype, std::vector<int64_t> shape, void* data,
                                          size_t nbytes, absl::string_view field = "array");

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t size() const { return ShapeElements(shape_); }
  size_t nbytes() const { return view_ != nullptr ? view_bytes_ : bytes_.size(); }
  // True for an array made by Borrow (or moved from one).
  bool borrowed() const { return view_ != nullptr; }

  void* raw() { return view_ != nullptr ? view_ : bytes_.data(); }
  const void* raw() const { return view_ != nullptr ? view_ : bytes_.data(); }
  // Typed access; T must match dtype() (checked in debug builds).
  template <class T>
  T* data() { return reinterpret_cast<T*>(raw()); }
  template <class T>
  const T* data() const { return reinterpret_cast<const T*>(raw()); }

  // Reinterprets with a new shape of the same element count.
  absl::Status Reshape(std::vector<int64_t> shape);

  std::string_view bytes() const {
    return std::string_view(static_cast<const char*>(raw()), nbytes());
  }
  // The bytes as a string: moved out of an owning array, copied out of a borrowed one.
  std::string TakeBytes() &&;

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  std::string bytes_;
  char* view_ = nullptr;  // Borrow's bytes; bytes_ is then empty
  size_t view_bytes_ = 0;
};

}  // namespace fresnel
