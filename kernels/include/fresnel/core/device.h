// Where a kernel call runs, and what it reports back about its stages. CUDA types appear only as
// opaque pointers so that this header (and everything above the kernels) compiles without CUDA.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace fresnel {

enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  // CUDA device ordinal (kCuda only).
  int ordinal = 0;
  // cudaStream_t that the call enqueues on (kCuda only). Never the legacy default stream.
  void* stream = nullptr;
  // cudaMemPool_t that temporaries come from (kCuda only); nullptr = the device's default pool.
  void* mem_pool = nullptr;

  static Device Cpu() { return Device{}; }
  static Device Cuda(int ordinal, void* stream, void* mem_pool = nullptr) {
    return Device{DeviceKind::kCuda, ordinal, stream, mem_pool};
  }
  // "cpu" or "cuda:N": the `device` label used in metrics and server info.
  std::string Name() const;
};

// OK for the CPU and for a CUDA device with a stream; FailedPrecondition for a CUDA device
// without one: no kernel entry point enqueues on the legacy default stream, which would
// serialise against every other stream of the device.
inline absl::Status RequireStream(const Device& device) {
  if (device.kind == DeviceKind::kCuda && device.stream == nullptr) {
    return absl::FailedPreconditionError(
        "device.stream is null: CUDA work is never enqueued on the legacy default stream");
  }
  return absl::OkStatus();
}

// Seconds spent in each stage of one host-level call. On CUDA these are measured with events on
// the call's stream; on the CPU only compute_s is set.
struct StageTimes {
  double h2d_s = 0;
  double compute_s = 0;
  double d2h_s = 0;
};

}  // namespace fresnel
