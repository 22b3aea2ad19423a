#include "fresnel/core/array.h"
#include "fresnel/core/uninitialized_array.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <cstdint>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fresnel/core/device.h"
#include "fresnel/core/status.h"

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

namespace {

// Large arrays (device results, request payloads) are the service's biggest host cost: a fresh
// 256 MiB buffer takes 140-190 ms to zero-fill on the H200 host, almost all of it 4 KiB page
// faults, and the copy from the device into it takes 20 ms (docs/architecture.md). So for
// buffers of 16 MiB and more the storage is backed by huge pages where the kernel allows it
// (transparent huge pages in "madvise" mode) and prefaulted by a few threads before the
// zero-fill: 7-10 ms for 256 MiB there. Both calls are advice: on failure nothing changes.
// The zero-fill itself (std::string's resize, one thread: ~100 ms per GiB there, as long as
// the faults took before the prefault) is what UninitializedArray leaves out.
constexpr size_t kLargeBytes = size_t{16} << 20;
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

// Huge-page advice for [p, p + n), then (populate) its pages faulted in by up to 8 threads.
void PrepareLargeBuffer(char* p, size_t n, bool populate) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t hi = (a + n) & ~(kHugePage - 1);
  if (hi <= lo) return;
  madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#if defined(MADV_POPULATE_WRITE)
  if (!populate) return;
  const uintptr_t span = hi - lo;
  const uintptr_t parts = std::clamp<uintptr_t>(span / (uintptr_t{32} << 20), 1, 8);
  const uintptr_t part = (span / parts + kHugePage - 1) & ~(kHugePage - 1);
  std::vector<std::thread> threads;
  for (uintptr_t off = part; off < span; off += part) {
    threads.emplace_back([lo, off, len = std::min(part, span - off)] {
      madvise(reinterpret_cast<void*>(lo + off), len, MADV_POPULATE_WRITE);
    });
  }
  madvise(reinterpret_cast<void*>(lo), std::min(part, span), MADV_POPULATE_WRITE);
  for (std::thread& t : threads) t.join();
#else
  (void)populate;
#endif
#else
  (void)p;
  (void)n;
  (void)populate;
#endif
}

#if defined(__GLIBCXX__) && _GLIBCXX_USE_CXX11_ABI
// Before C++23's resize_and_overwrite a std::string cannot grow without writing every new byte:
// libc++ has __resize_default_init, libstdc++ only its private _M_set_length. An explicit
// instantiation may name a private member (access is not checked there, [temp.explicit]), so
// this one hands a pointer to _M_set_length out through a friend function, as folly's
// UninitializedMemoryHacks.h does for the same reason.
struct StringSetLength {
  using type = void (std::string::*)(std::string::size_type);
  friend type Get(StringSetLength);
};
template <class Tag, typename Tag::type kMember>
struct Expose {
  friend typename Tag::type Get(Tag) { return kMember; }
};
template struct Expose<StringSetLength, &std::string::_M_set_length>;
#endif

// s's size becomes n (> its size, <= its capacity) without the new bytes being written.
void GrowUninitialized(std::string* s, size_t n) {
#if defined(__cpp_lib_string_resize_and_overwrite)
  s->resize_and_overwrite(n, [](char*, size_t m) { return m; });
#elif defined(_LIBCPP_VERSION)
  s->__resize_default_init(n);
#elif defined(__GLIBCXX__) && _GLIBCXX_USE_CXX11_ABI
  (s->*Get(StringSetLength{}))(n);
#else
  s->resize(n);
#endif
}

// `bytes` of storage for an array: large ones prepared (PrepareLargeBuffer), zero-filled or not.
std::string ArrayStorage(size_t bytes, bool zero, bool populate) {
  std::string s;
  if (bytes >= kLargeBytes) {
    s.reserve(bytes);
    PrepareLargeBuffer(s.data(), bytes, populate);
  }
  if (zero) {
    s.resize(bytes);
  } else {
    s.reserve(bytes);
    GrowUninitialized(&s, bytes);
  }
  return s;
}

size_t StorageBytes(DType dtype, const std::vector<int64_t>& shape) {
  const int64_t n = ShapeElements(shape);
  return static_cast<size_t>(n < 0 ? 0 : n) * DTypeSize(dtype);
}

}  // namespace

HostArray::HostArray(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  bytes_ = ArrayStorage(StorageBytes(dtype_, shape_), /*zero=*/true, /*populate=*/true);
}

HostArray::HostArray(const HostArray& other)
    : dtype_(other.dtype_), shape_(other.shape_), bytes_(other.bytes()) {}

HostArray& HostArray::operator=(const HostArray& other) {
  if (this != &other) {
    dtype_ = other.dtype_;
    shape_ = other.shape_;
    bytes_.assign(other.bytes().data(), other.nbytes());  // before the view goes: other may be it
    view_ = nullptr;
    view_bytes_ = 0;
  }
  return *this;
}

HostArray::HostArray(HostArray&& other) noexcept
    : dtype_(other.dtype_),
      shape_(std::move(other.shape_)),
      bytes_(std::move(other.bytes_)),
      view_(std::exchange(other.view_, nullptr)),
      view_bytes_(std::exchange(other.view_bytes_, 0)) {
  other.shape_.clear();
  other.bytes_.clear();
}

HostArray& HostArray::operator=(HostArray&& other) noexcept {
  if (this != &other) {
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
    bytes_ = std::move(other.bytes_);
    view_ = std::exchange(other.view_, nullptr);
    view_bytes_ = std::exchange(other.view_bytes_, 0);
    other.shape_.clear();
    other.bytes_.clear();
  }
  return *this;
}

std::string HostArray::TakeBytes() && {
  if (view_ != nullptr) return std::string(view_, view_bytes_);
  return std::move(bytes_);
}

HostArray UninitializedArray(DType dtype, std::vector<int64_t> shape, FirstTouch touch) {
  std::string bytes = ArrayStorage(StorageBytes(dtype, shape), /*zero=*/false,
                                   /*populate=*/touch == FirstTouch::kPrefault);
  absl::StatusOr<HostArray> a = HostArray::FromBytes(dtype, std::move(shape), std::move(bytes));
  return a.ok() ? *std::move(a) : HostArray();  // not ok only for an invalid shape
}

namespace {

// FromBytes' and Borrow's checks: a valid shape whose byte count is `nbytes`.
absl::Status CheckBytes(DType dtype, const std::vector<int64_t>& shape, size_t nbytes,
                        absl::string_view field) {
  int64_t n = ShapeElements(shape);
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape ", ShapeString(shape), " is invalid (negative or overflowing)"));
  }
  const int64_t item = static_cast<int64_t>(DTypeSize(dtype));
  if (n > std::numeric_limits<int64_t>::max() / item) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".shape ", ShapeString(shape), " of ",
                                                   DTypeName(dtype),
                                                   " needs more than 2^63 bytes"));
  }
  const size_t want = static_cast<size_t>(n * item);
  if (nbytes != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".data has ", nbytes, " bytes but shape ", ShapeString(shape), " of ",
        DTypeName(dtype), " needs ", want));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostArray> HostArray::FromBytes(DType dtype, std::vector<int64_t> shape,
                                               std::string bytes, absl::string_view field) {
  FRESNEL_RETURN_IF_ERROR(CheckBytes(dtype, shape, bytes.size(), field));
  HostArray a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  a.bytes_ = std::move(bytes);
  return a;
}

absl::StatusOr<HostArray> HostArray::Borrow(DType dtype, std::vector<int64_t> shape, void* data,
                                            size_t nbytes, absl::string_view field) {
  FRESNEL_RETURN_IF_ERROR(CheckBytes(dtype, shape, nbytes, field));
  if (data == nullptr && nbytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": no bytes to borrow"));
  }
  HostArray a;
  a.dtype_ = dtype;
  a.shape_ = std::move(shape);
  if (nbytes > 0) {
    a.view_ = static_cast<char*>(data);
    a.view_bytes_ = nbytes;
  }
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
