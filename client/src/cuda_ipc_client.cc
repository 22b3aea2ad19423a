// CudaIpcRegionOf / RegisterCudaRegion (fresnel/client/shm.h). The client library links no CUDA:
// the few driver calls needed come from libcuda.so.1, loaded when first asked (a process that
// holds device memory has it loaded already).
#include <dlfcn.h>

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "fresnel/client/shm.h"

namespace fresnel {
namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUdevice = int;
constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr int kPointerAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryTypeDevice = 2;          // CU_MEMORYTYPE_DEVICE

struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*pointer_get_attribute)(void*, int, CUdeviceptr) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*ipc_get_mem_handle)(void*, CUdeviceptr) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_uuid)(void*, CUdevice) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  bool ok = false;
};

const Driver& LoadDriver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto sym = [lib](auto** fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      return *fn != nullptr;
    };
    d.ok = sym(&d.init, "cuInit") && sym(&d.pointer_get_attribute, "cuPointerGetAttribute") &&
           sym(&d.mem_get_address_range, "cuMemGetAddressRange_v2") &&
           sym(&d.ipc_get_mem_handle, "cuIpcGetMemHandle") && sym(&d.device_get, "cuDeviceGet") &&
           sym(&d.device_get_uuid, "cuDeviceGetUuid_v2") &&
           sym(&d.get_error_name, "cuGetErrorName");
    if (d.ok) d.ok = d.init(0) == 0;
  });
  return d;
}

absl::Status DriverError(const Driver& d, CUresult rc, const char* what) {
  const char* name = "?";
  if (d.get_error_name != nullptr) d.get_error_name(rc, &name);
  return absl::FailedPreconditionError(absl::StrCat(what, " failed: ", name, " (", rc, ")"));
}

}  // namespace

absl::StatusOr<v1::CudaIpcRegion> CudaIpcRegionOf(const void* device_ptr, int64_t bytes) {
  if (device_ptr == nullptr || bytes <= 0) {
    return absl::InvalidArgumentError("CudaIpcRegionOf: null pointer or bytes <= 0");
  }
  const Driver& d = LoadDriver();
  if (!d.ok) {
    return absl::FailedPreconditionError(
        "CUDA IPC regions need the CUDA driver (libcuda.so.1), which this process cannot load");
  }
  const auto ptr = reinterpret_cast<CUdeviceptr>(device_ptr);
  unsigned memory_type = 0;
  if (d.pointer_get_attribute(&memory_type, kPointerAttributeMemoryType, ptr) != 0 ||
      memory_type != kMemoryTypeDevice) {
    return absl::FailedPreconditionError(
        "CudaIpcRegionOf: the pointer is not CUDA device memory of this process");
  }
  int ordinal = -1;
  if (CUresult rc = d.pointer_get_attribute(&ordinal, kPointerAttributeDeviceOrdinal, ptr);
      rc != 0) {
    return DriverError(d, rc, "cuPointerGetAttribute(DEVICE_ORDINAL)");
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CUresult rc = d.mem_get_address_range(&base, &size, ptr); rc != 0) {
    return DriverError(d, rc, "cuMemGetAddressRange");
  }
  const int64_t offset = static_cast<int64_t>(ptr - base);
  if (bytes > static_cast<int64_t>(size) - offset) {
    return absl::InvalidArgumentError(absl::StrCat("CudaIpcRegionOf: ", bytes, " bytes from ",
                                                   offset, " do not fit the allocation of ",
                                                   size, " bytes"));
  }
  char handle[64];
  if (CUresult rc = d.ipc_get_mem_handle(handle, base); rc != 0) {
    return DriverError(d, rc,
                       "cuIpcGetMemHandle (cudaMalloc memory only; not pool or managed memory)");
  }
  CUdevice dev = 0;
  char uuid[16];
  if (CUresult rc = d.device_get(&dev, ordinal); rc != 0) return DriverError(d, rc, "cuDeviceGet");
  if (CUresult rc = d.device_get_uuid(uuid, dev); rc != 0) {
    return DriverError(d, rc, "cuDeviceGetUuid");
  }
  v1::CudaIpcRegion region;
  region.set_handle(handle, sizeof(handle));
  region.set_device_uuid(uuid, sizeof(uuid));
  region.set_device_ordinal(ordinal);
  region.set_offset_bytes(offset);
  return region;
}

absl::StatusOr<v1::RegisterRegionResponse> RegisterCudaRegion(Client* client,
                                                              const std::string& name,
                                                              const void* device_ptr,
                                                              int64_t bytes,
                                                              const CallOptions& call) {
  absl::StatusOr<v1::CudaIpcRegion> ipc = CudaIpcRegionOf(device_ptr, bytes);
  if (!ipc.ok()) return ipc.status();
  v1::RegisterRegionRequest request;
  request.set_name(name);
  request.set_size_bytes(bytes);
  *request.mutable_cuda_ipc() = *std::move(ipc);
  return client->RegisterRegion(request, call);
}

}  // namespace fresnel
