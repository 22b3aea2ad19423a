// GPU discovery and per-device resources on the CUDA runtime.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_util.cuh"
#include "fresnel/core/gpu.h"

namespace fresnel {

bool CudaCompiled() { return true; }

int GpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

absl::StatusOr<GpuProperties> GetGpuProperties(int ordinal) {
  cudaDeviceProp prop{};
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  GpuProperties p;
  p.ordinal = ordinal;
  p.name = prop.name;
  p.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  p.compute_major = prop.major;
  p.compute_minor = prop.minor;
  p.multiprocessors = prop.multiProcessorCount;
  p.shared_memory_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  return p;
}

absl::StatusOr<int64_t> GpuFreeMemoryBytes(int ordinal) {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  // Stream-ordered frees (cudaFreeAsync) land once the device is idle; the default pool then
  // gives back what it holds.
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  cudaMemPool_t pool = nullptr;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, ordinal));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemPoolTrimTo(pool, 0));
  size_t free_b = 0, total_b = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(free_b);
}

absl::Status PinHostMemory(void* data, int64_t bytes) {
  if (data == nullptr || bytes <= 0) {
    return absl::InvalidArgumentError("PinHostMemory: null pointer or non-positive size");
  }
  if (GpuCount() == 0) return absl::FailedPreconditionError("PinHostMemory: no CUDA device");
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaHostRegister(data, static_cast<size_t>(bytes), cudaHostRegisterPortable));
  return absl::OkStatus();
}

void UnpinHostMemory(void* data) {
  if (data == nullptr) return;
  if (cudaHostUnregister(data) != cudaSuccess) cudaGetLastError();  // was not pinned
}

absl::StatusOr<std::unique_ptr<GpuStream>> GpuStream::Create(int ordinal) {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaStream_t s = nullptr;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return std::unique_ptr<GpuStream>(new GpuStream(ordinal, s));
}

GpuStream::~GpuStream() {
  if (stream_ == nullptr) return;
  cudaSetDevice(ordinal_);
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaGetLastError();
}

absl::Status GpuContextStatus(int ordinal, void* stream) {
  cudaError_t err = cudaSetDevice(ordinal);
  if (err == cudaSuccess) err = cudaStreamQuery(static_cast<cudaStream_t>(stream));
  if (err == cudaSuccess || err == cudaErrorNotReady) return absl::OkStatus();
  return cuda::ToStatus(err, "the device's context");
}

namespace {
// Stores through an address no allocation can have (the top of the 64-bit space): the launch
// fails with an illegal address, which poisons the context.
__global__ void StoreThroughInvalidAddress(float* p) { *p = 1.0f; }
}  // namespace

absl::Status GpuInjectStickyError(int ordinal, void* stream) {
  if (stream == nullptr) {
    return absl::FailedPreconditionError("GpuInjectStickyError needs a stream (got null)");
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  auto* s = static_cast<cudaStream_t>(stream);
  StoreThroughInvalidAddress<<<1, 1, 0, s>>>(reinterpret_cast<float*>(~uintptr_t{0} - 63));
  cudaError_t err = cudaStreamSynchronize(s);
  if (err == cudaSuccess) {
    return absl::InternalError("the injected illegal store did not fault");
  }
  return cuda::ToStatus(err, "the injected sticky error");
}

absl::Status GpuStream::Synchronize() {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuMemPool>> GpuMemPool::Create(int ordinal,
                                                               int64_t release_threshold_bytes,
                                                               int64_t max_bytes) {
  if (max_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_bytes must be >= 0, got ", max_bytes));
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaMemPoolProps props{};
  props.maxSize = static_cast<size_t>(max_bytes);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  cudaMemPool_t pool = nullptr;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&pool, &props));
  uint64_t threshold = static_cast<uint64_t>(release_threshold_bytes);
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  return std::unique_ptr<GpuMemPool>(new GpuMemPool(ordinal, pool));
}

GpuMemPool::~GpuMemPool() {
  if (pool_ != nullptr) cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool_));
  cudaGetLastError();
}

namespace {
int64_t PoolAttr(void* pool, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  if (cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(pool), attr, &v) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(v);
}
}  // namespace

int64_t GpuMemPool::UsedBytes() const { return PoolAttr(pool_, cudaMemPoolAttrUsedMemCurrent); }
int64_t GpuMemPool::ReservedBytes() const {
  return PoolAttr(pool_, cudaMemPoolAttrReservedMemCurrent);
}

}  // namespace fresnel
