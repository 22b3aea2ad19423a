// CUDA IPC (issue 10): device memory that another process exported with cudaIpcGetMemHandle,
// opened in this one, and the device UUIDs that say which device it lies on (ordinals differ
// between processes with different CUDA_VISIBLE_DEVICES). Usable without CUDA headers; without
// CUDA every call answers FAILED_PRECONDITION.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fresnel {

inline constexpr int kCudaIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)
inline constexpr int kGpuUuidBytes = 16;         // sizeof(cudaUUID_t)

// The 16 raw bytes of device `ordinal`'s UUID (cudaDeviceProp::uuid).
absl::StatusOr<std::string> GpuUuid(int ordinal);

// One allocation opened from an IPC handle (cudaIpcOpenMemHandle, lazy peer access enabled);
// closed when destroyed (cudaIpcCloseMemHandle). The exporting process keeps the allocation
// alive; freeing it while this is open leaves the memory valid here until the close.
class GpuIpcMapping {
 public:
  // Opens `handle` (kCudaIpcHandleBytes raw bytes) on device `ordinal`. INVALID_ARGUMENT naming
  // `field` for a handle of the wrong length or one the driver refuses as invalid (also a handle
  // exported by this same process, which CUDA does not open); FAILED_PRECONDITION without CUDA
  // or for a bad ordinal; the CUDA error otherwise. Synchronous.
  static absl::StatusOr<std::unique_ptr<GpuIpcMapping>> Open(int ordinal,
                                                             const std::string& handle,
                                                             absl::string_view field);
  ~GpuIpcMapping();
  GpuIpcMapping(const GpuIpcMapping&) = delete;
  GpuIpcMapping& operator=(const GpuIpcMapping&) = delete;

  int ordinal() const { return ordinal_; }
  // The allocation's base in this process, and its length in bytes (cuMemGetAddressRange).
  void* base() const { return base_; }
  int64_t allocation_bytes() const { return bytes_; }

 private:
  GpuIpcMapping(int ordinal, void* base, int64_t bytes)
      : ordinal_(ordinal), base_(base), bytes_(bytes) {}
  int ordinal_;
  void* base_;
  int64_t bytes_;
};

}  // namespace fresnel
