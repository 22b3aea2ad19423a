// sm_90 bulk copies (cp.async.bulk, shared -> global) for the interp area's persistent kernels
// (kRegisterBlocked's kBulk stores, kPhaseGroups' bulk copy-out): a thread hands a run of staged
// outputs to the copy engine and later waits until the engine has read it (before the run is
// rewritten) or until it is complete (before the block exits). .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fresnel::interp::kernels {

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from shared to global memory
// on the issuing thread's bulk group and commits the group.
template <bool kEvictFirst>
__device__ __forceinline__ void BulkStoreCommit(float* gdst, const float4* ssrc, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(ssrc));
  if constexpr (kEvictFirst) {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile(
        "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(
            gdst),
        "r"(s), "r"(bytes), "l"(policy)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gdst),
                 "r"(s), "r"(bytes)
                 : "memory");
  }
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
// The thread's earlier bulk copies have finished reading shared memory.
__device__ __forceinline__ void BulkWaitRead() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}
// The thread's earlier bulk copies are complete.
__device__ __forceinline__ void BulkWaitAll() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}
// Orders this thread's ordinary shared-memory writes before later async-proxy (copy engine) reads.
__device__ __forceinline__ void FenceProxyAsyncShared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

}  // namespace fresnel::interp::kernels
