// GPU discovery for builds without CUDA: no devices, every resource request fails cleanly.
#include "fresnel/core/gpu.h"

namespace fresnel {
namespace {
absl::Status NoCuda() { return absl::FailedPreconditionError("this build has no CUDA support"); }
}  // namespace

bool CudaCompiled() { return false; }
int GpuCount() { return 0; }
absl::StatusOr<GpuProperties> GetGpuProperties(int) { return NoCuda(); }
absl::StatusOr<int64_t> GpuFreeMemoryBytes(int) { return NoCuda(); }

absl::StatusOr<std::unique_ptr<GpuStream>> GpuStream::Create(int) { return NoCuda(); }
GpuStream::~GpuStream() = default;
absl::Status GpuStream::Synchronize() { return NoCuda(); }
absl::Status GpuContextStatus(int, void*) { return absl::OkStatus(); }
absl::Status GpuInjectStickyError(int, void*) { return NoCuda(); }

absl::StatusOr<std::unique_ptr<GpuMemPool>> GpuMemPool::Create(int, int64_t, int64_t) {
  return NoCuda();
}
GpuMemPool::~GpuMemPool() = default;
int64_t GpuMemPool::UsedBytes() const { return 0; }
int64_t GpuMemPool::ReservedBytes() const { return 0; }

}  // namespace fresnel
