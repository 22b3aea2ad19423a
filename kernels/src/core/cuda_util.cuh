// Internal CUDA helpers for the kernels library (.cu files only): status conversion, RAII device
// buffers from a stream-ordered pool, and event timing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fresnel/core/device.h"

namespace fresnel::cuda {

// Converts a CUDA error into an absl::Status. cudaGetLastError() resets the per-thread error of
// a non-sticky failure (a bad launch configuration, an allocation that failed) so that the next
// call on this thread does not report it again. A sticky error (illegal address, launch failure)
// cannot be cleared: it poisons the device's context until the process exits, and the server's
// DevicePool takes such a device out of service (GpuContextStatus in fresnel/core/gpu.h).
inline absl::Status ToStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (err == cudaErrorMemoryAllocation) code = absl::StatusCode::kResourceExhausted;
  if (err == cudaErrorInvalidValue || err == cudaErrorInvalidConfiguration)
    code = absl::StatusCode::kInvalidArgument;
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorName(err), " (",
                                         cudaGetErrorString(err), ")"));
}

}  // namespace fresnel::cuda

// Returns the CUDA error of `call` as an absl::Status from the enclosing function.
#define FRESNEL_CUDA_RETURN_IF_ERROR(call)                                          \
  do {                                                                              \
    cudaError_t fresnel_cuda_err_ = (call);                                         \
    if (fresnel_cuda_err_ != cudaSuccess)                                           \
      return ::fresnel::cuda::ToStatus(fresnel_cuda_err_, #call);                   \
  } while (0)

// Checks the launch that just happened (configuration errors surface here, not at the <<<>>>).
#define FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(kernel_name) \
  FRESNEL_CUDA_RETURN_IF_ERROR((static_cast<void>(kernel_name), cudaGetLastError()))

namespace fresnel::cuda {

inline cudaStream_t StreamOf(const Device& device) {
  return static_cast<cudaStream_t>(device.stream);
}

// A typed device allocation from the device's pool, freed stream-ordered on destruction.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
      stream_ = other.stream_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Allocates `count` elements on `device`'s stream from its pool (or the default pool).
  absl::Status Allocate(const Device& device, int64_t count) {
    Reset();
    stream_ = StreamOf(device);
    size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(T);
    void* p = nullptr;
    cudaError_t err =
        device.mem_pool != nullptr
            ? cudaMallocFromPoolAsync(&p, bytes, static_cast<cudaMemPool_t>(device.mem_pool),
                                      stream_)
            : cudaMallocAsync(&p, bytes, stream_);
    if (err != cudaSuccess) {
      return ToStatus(err, absl::StrCat("allocating ", bytes, " bytes on cuda:", device.ordinal)
                               .c_str());
    }
    ptr_ = static_cast<T*>(p);
    count_ = count;
    return absl::OkStatus();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  int64_t size() const { return count_; }
  size_t bytes() const { return static_cast<size_t>(count_) * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  int64_t count_ = 0;
  cudaStream_t stream_ = nullptr;
};

// Records events on a stream to time stages: Mark() after each stage, Seconds(i) afterwards
// (which synchronises on the last event).
class StageClock {
 public:
  explicit StageClock(cudaStream_t stream) : stream_(stream) {}
  ~StageClock() {
    for (int i = 0; i < n_; ++i) cudaEventDestroy(events_[i]);
  }
  StageClock(const StageClock&) = delete;
  StageClock& operator=(const StageClock&) = delete;

  absl::Status Mark() {
    if (n_ == kMax) return absl::InternalError("StageClock: too many marks");
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&events_[n_]));
    ++n_;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[n_ - 1], stream_));
    return absl::OkStatus();
  }
  // Seconds between mark i and mark i+1. Blocks until mark i+1 has completed.
  double Seconds(int i) const {
    if (i + 1 >= n_) return 0;
    if (cudaEventSynchronize(events_[i + 1]) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    float ms = 0;
    if (cudaEventElapsedTime(&ms, events_[i], events_[i + 1]) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return ms * 1e-3;
  }

 private:
  static constexpr int kMax = 16;
  cudaStream_t stream_;
  cudaEvent_t events_[kMax] = {};
  int n_ = 0;
};

// Blocks of `threads` covering `n` items, at least one.
inline unsigned BlocksFor(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

}  // namespace fresnel::cuda
