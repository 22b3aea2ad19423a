// CUDA IPC on the runtime (fresnel/core/gpu_ipc.h). The allocation's range comes from the driver's
// cuMemGetAddressRange, reached through cudaGetDriverEntryPointByVersion so that nothing links
// libcuda directly (binaries still start on machines without a driver).
#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/gpu.h"
#include "fresnel/core/gpu_ipc.h"

namespace fresnel {
namespace {

using MemGetAddressRange = int (*)(unsigned long long* base, size_t* size,
                                   unsigned long long ptr);

absl::StatusOr<int64_t> AllocationBytes(void* ptr) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return absl::InternalError("cuMemGetAddressRange is not available from the driver");
  }
  unsigned long long base = 0;
  size_t size = 0;
  const int rc = reinterpret_cast<MemGetAddressRange>(fn)(
      &base, &size, reinterpret_cast<unsigned long long>(ptr));
  if (rc != 0) return absl::InternalError(absl::StrCat("cuMemGetAddressRange failed (", rc, ")"));
  return static_cast<int64_t>(size - (reinterpret_cast<unsigned long long>(ptr) - base));
}

}  // namespace

absl::StatusOr<std::string> GpuUuid(int ordinal) {
  if (ordinal < 0 || ordinal >= GpuCount()) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", ordinal));
  }
  cudaDeviceProp prop{};
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  return std::string(prop.uuid.bytes, sizeof(prop.uuid.bytes));
}

absl::StatusOr<std::unique_ptr<GpuIpcMapping>> GpuIpcMapping::Open(int ordinal,
                                                                   const std::string& handle,
                                                                   absl::string_view field) {
  static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);
  if (handle.size() != static_cast<size_t>(kCudaIpcHandleBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": a CUDA IPC handle has ",
                                                   kCudaIpcHandleBytes, " bytes (got ",
                                                   handle.size(), ")"));
  }
  if (ordinal < 0 || ordinal >= GpuCount()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": this process has no CUDA device ", ordinal));
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* base = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: the context stays usable
    const std::string what =
        absl::StrCat(field, ": cudaIpcOpenMemHandle on cuda:", ordinal, " refuses the handle: ",
                     cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
    if (err == cudaErrorInvalidValue || err == cudaErrorInvalidResourceHandle ||
        err == cudaErrorMapBufferObjectFailed || err == cudaErrorInvalidDevice ||
        err == cudaErrorDeviceUninitialized) {
      return absl::InvalidArgumentError(what);
    }
    if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
    return absl::FailedPreconditionError(what);
  }
  absl::StatusOr<int64_t> bytes = AllocationBytes(base);
  if (!bytes.ok()) {
    cudaIpcCloseMemHandle(base);
    cudaGetLastError();
    return bytes.status();
  }
  return std::unique_ptr<GpuIpcMapping>(new GpuIpcMapping(ordinal, base, *bytes));
}

GpuIpcMapping::~GpuIpcMapping() {
  if (base_ == nullptr) return;
  cudaSetDevice(ordinal_);
  cudaIpcCloseMemHandle(base_);
  cudaGetLastError();
}

}  // namespace fresnel
