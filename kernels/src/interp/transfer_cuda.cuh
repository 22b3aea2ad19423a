// The host <-> device legs shared by the interp area's host-level CUDA calls (UpfirdnWindowCuda,
// ResampleCuda): the rows of a [channels, len] host view uploaded contiguously, and the end of a
// call (D2H of the result, synchronisation, stage times). .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/array.h"
#include "fresnel/core/status.h"
#include "interp/interp_internal.h"

namespace fresnel::interp::internal {

// Enqueues the copy of x's rows to dst (channels * len elements, rows len apart) on stream.
inline absl::Status UploadRowsAsync(const HostSignalView& x, void* dst, cudaStream_t stream) {
  if (x.channels * x.len == 0) return absl::OkStatus();
  const size_t es = DTypeSize(x.dtype);
  if (x.stride == x.len) {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, x.data,
                                                 static_cast<size_t>(x.channels * x.len) * es,
                                                 cudaMemcpyHostToDevice, stream));
    return absl::OkStatus();
  }
  for (int64_t c = 0; c < x.channels; ++c) {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        static_cast<char*>(dst) + static_cast<size_t>(c * x.len) * es,
        static_cast<const char*>(x.data) + static_cast<size_t>(c * x.stride) * es,
        static_cast<size_t>(x.len) * es, cudaMemcpyHostToDevice, stream));
  }
  return absl::OkStatus();
}

// After the compute stage's kernels are enqueued: marks the end of compute, copies yd (y.nbytes()
// bytes) into y, synchronises the stream and reports the three stages of a clock marked before
// H2D and after it (marks 0, 1; this adds 2 and 3).
inline absl::Status FinishCall(cuda::StageClock& clock, const void* yd, HostArray& y,
                               cudaStream_t stream, StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(y.raw(), yd, y.nbytes(), cudaMemcpyDeviceToHost, stream));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  if (times != nullptr) {
    times->h2d_s = clock.Seconds(0);
    times->compute_s = clock.Seconds(1);
    times->d2h_s = clock.Seconds(2);
  }
  return absl::OkStatus();
}

}  // namespace fresnel::interp::internal
