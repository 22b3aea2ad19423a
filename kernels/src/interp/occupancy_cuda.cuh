// Resident blocks per SM of one kernel instantiation, shared by the interp area's persistent
// kernels (kRegisterBlocked, kPhaseGroups, kTensorTf32), which launch as many blocks as fit on
// the device at once. .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/status/statusor.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"

namespace fresnel::interp::internal {

// Opts `kernel` into `smem_bytes` of dynamic shared memory where that exceeds the default
// 48 KiB, then returns how many blocks of `threads` threads are resident per SM (at least 1).
// Call once per plan on the plan's device (cudaFuncSetAttribute is per device).
template <class Kernel>
absl::StatusOr<int> ResidentBlocksPerSm(Kernel kernel, int threads, int smem_bytes) {
  if (smem_bytes > 48 * 1024) {
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  }
  int per_sm = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
  return std::max(per_sm, 1);
}

}  // namespace fresnel::interp::internal
