// CUDA device discovery and per-device resources (streams, memory pools), usable without CUDA
// headers. In a build without CUDA, or on a machine where cudaGetDeviceCount fails, GpuCount()
// is 0 and everything else returns FailedPrecondition.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fresnel {

// True when this build contains CUDA code.
bool CudaCompiled();

// Visible CUDA devices; 0 when none, when the driver is missing, or without CUDA.
int GpuCount();

struct GpuProperties {
  int ordinal = 0;
  std::string name;
  int64_t total_memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  int64_t shared_memory_per_block_optin = 0;
};
absl::StatusOr<GpuProperties> GetGpuProperties(int ordinal);

// Free device memory in bytes, as cudaMemGetInfo reports it once the device is idle
// (synchronises it) and the default stream-ordered pool is trimmed (what cudaFreeAsync gave back
// is counted as free). For tests and diagnostics.
absl::StatusOr<int64_t> GpuFreeMemoryBytes(int ordinal);

// OK while the device's context is usable; otherwise the sticky error that poisoned it (an
// illegal address or a failed launch: every later CUDA call on the device fails the same way, and
// only a new process recovers). Checks `stream` (a cudaStream_t of that device) without
// waiting for it. Always OK in a build without CUDA.
absl::Status GpuContextStatus(int ordinal, void* stream);

// Page-locks [data, data + bytes) of host memory for every device (cudaHostRegister, portable)
// so that cudaMemcpyAsync to and from it is DMA at full bus speed instead of going through the
// driver's pageable bounce buffers. `data` must be the start of a mapping the caller owns and
// keeps mapped until UnpinHostMemory(data); the pages are faulted in by this call (cost: about
// a memset of the range). FailedPrecondition without CUDA or without a device; the CUDA error
// (RESOURCE_EXHAUSTED when the driver cannot lock that much) otherwise. Synchronous.
absl::Status PinHostMemory(void* data, int64_t bytes);
// Undoes PinHostMemory(data); a no-op for memory that was not pinned. Synchronous.
void UnpinHostMemory(void* data);
// Fault injection (fresneld --fault-injection, tests): launches on `stream` a kernel that stores
// through an invalid device address and waits for it, so the context is left in a genuine sticky
// error (cudaErrorIllegalAddress) that only a new process clears. Returns that error (as
// GpuContextStatus does afterwards). FAILED_PRECONDITION in a build without CUDA or for a null
// stream.
absl::Status GpuInjectStickyError(int ordinal, void* stream);

// A non-blocking CUDA stream on one device. Destroying it synchronises the stream first.
class GpuStream {
 public:
  static absl::StatusOr<std::unique_ptr<GpuStream>> Create(int ordinal);
  ~GpuStream();
  GpuStream(const GpuStream&) = delete;
  GpuStream& operator=(const GpuStream&) = delete;

  int ordinal() const { return ordinal_; }
  // cudaStream_t
  void* handle() const { return stream_; }
  // Blocks until all work enqueued so far has finished.
  absl::Status Synchronize();

 private:
  GpuStream(int ordinal, void* stream) : ordinal_(ordinal), stream_(stream) {}
  int ordinal_;
  void* stream_;
};

// A stream-ordered memory pool (cudaMemPool_t) owned by one device. Freed memory is kept up to
// `release_threshold_bytes` for reuse instead of being returned to the driver. `max_bytes` > 0
// caps what the pool may hold (cudaMemPoolProps::maxSize): allocations past it fail with
// cudaErrorMemoryAllocation, which the kernels answer RESOURCE_EXHAUSTED (not a sticky error).
class GpuMemPool {
 public:
  static absl::StatusOr<std::unique_ptr<GpuMemPool>> Create(int ordinal,
                                                            int64_t release_threshold_bytes,
                                                            int64_t max_bytes = 0);
  ~GpuMemPool();
  GpuMemPool(const GpuMemPool&) = delete;
  GpuMemPool& operator=(const GpuMemPool&) = delete;

  int ordinal() const { return ordinal_; }
  // cudaMemPool_t
  void* handle() const { return pool_; }
  // Bytes currently handed out to callers (cudaMemPoolAttrUsedMemCurrent).
  int64_t UsedBytes() const;
  // Bytes the pool holds from the driver (cudaMemPoolAttrReservedMemCurrent).
  int64_t ReservedBytes() const;

 private:
  GpuMemPool(int ordinal, void* pool) : ordinal_(ordinal), pool_(pool) {}
  int ordinal_;
  void* pool_;
};

}  // namespace fresnel
