// Host-side helpers shared by hologram_cuda.cu and hologram_tensor.cu: packed uploads, named
// stage events, the device workspace budget, and the tensor-core entry point.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "hologram/hologram_internal.h"

namespace fresnel::hologram::cuda {

using ::fresnel::cuda::DeviceBuffer;
using ::fresnel::cuda::StageClock;
using ::fresnel::cuda::StreamOf;

inline int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
inline int64_t CeilDiv(int64_t v, int64_t m) { return (v + m - 1) / m; }

// Several host vectors copied to the device in one allocation and one transfer.
class PackedUpload {
 public:
  template <class T>
  size_t Add(const std::vector<T>& v) {
    const size_t offset = RoundUp(static_cast<int64_t>(host_.size()), 256);
    host_.resize(offset + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(&host_[offset], v.data(), v.size() * sizeof(T));
    return offset;
  }
  absl::Status Upload(const Device& device) {
    FRESNEL_RETURN_IF_ERROR(dev_.Allocate(device, static_cast<int64_t>(host_.size())));
    if (!host_.empty()) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev_.get(), host_.data(), host_.size(),
                                                   cudaMemcpyHostToDevice, StreamOf(device)));
    }
    return absl::OkStatus();
  }
  template <class T>
  const T* Ptr(size_t offset) const {
    return reinterpret_cast<const T*>(dev_.get() + offset);
  }

 private:
  std::string host_;
  DeviceBuffer<char> dev_;
};

// Named device-time marks for HologramResult::profile: each mark's duration is the time since
// the previous mark. Inactive (no events) unless enabled.
class EventProfiler {
 public:
  EventProfiler(bool enabled, cudaStream_t stream) : enabled_(enabled), stream_(stream) {}
  ~EventProfiler() {
    for (auto& [name, e] : marks_) cudaEventDestroy(e);
  }
  EventProfiler(const EventProfiler&) = delete;
  EventProfiler& operator=(const EventProfiler&) = delete;

  void Mark(std::string name) {
    if (!enabled_) return;
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    cudaEventRecord(e, stream_);
    marks_.emplace_back(std::move(name), e);
  }
  // Durations in seconds (synchronises on the last mark).
  std::vector<std::pair<std::string, double>> Durations() const {
    std::vector<std::pair<std::string, double>> out;
    if (marks_.empty()) return out;
    cudaEventSynchronize(marks_.back().second);
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second) != cudaSuccess) {
        cudaGetLastError();
      }
      out.emplace_back(marks_[i].first, ms * 1e-3);
    }
    return out;
  }

 private:
  bool enabled_;
  cudaStream_t stream_;
  std::vector<std::pair<std::string, cudaEvent_t>> marks_;
};

// Bytes the per-point tables of one call may use: the caller's limit, else 60% of the free
// device memory beyond `reserved_bytes`, at most 8 GiB.
inline absl::StatusOr<int64_t> WorkspaceBudget(const HologramOptions& options,
                                               int64_t reserved_bytes) {
  if (options.max_device_workspace_bytes > 0) return options.max_device_workspace_bytes;
  size_t free_bytes = 0, total_bytes = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t budget =
      static_cast<int64_t>(static_cast<double>(free_bytes) * 0.6) - reserved_bytes;
  return std::min<int64_t>(budget, int64_t{8} << 30);
}

inline absl::Status TooLarge(int64_t need, int64_t budget) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "max_device_workspace_bytes: one batch of point tables needs ", need,
      " bytes of device memory, the budget is ", budget));
}

// Grid for a grid-stride loop over n items with 256 threads a block.
inline unsigned StrideGrid(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>(CeilDiv(n, 256), 1, 65535));
}

// kTensor (hologram_tensor.cu): accumulates the hologram into `field` (float2 [H][W]) and sets
// result->precision, point_batches and gemm_inner_dim. `clock` gets one mark after the upload.
absl::Status RunTensor(const Device& device, const internal::PreparedPoints& prepared,
                       const HologramOptions& options, TensorPrecision precision,
                       StageClock* clock, EventProfiler* profiler, float2* field,
                       HologramResult* result);

}  // namespace fresnel::hologram::cuda
