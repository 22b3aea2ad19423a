// Host-side helpers shared by hologram_cuda.cu and hologram_tensor.cu: packed uploads, named
// stage events, the device workspace budget, and the tensor-core entry point.
#pragma once

#include <cuda_runtime.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
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

// The calling thread's host staging buffer for PackedUpload: pinned (page-locked) when the
// driver allows, reused by every call on the thread, so that per-frame tables cost neither page
// faults nor a pageable copy. `done` marks the end of the last upload from it.
struct HostStaging {
  char* data = nullptr;
  size_t capacity = 0;
  bool pinned = false;
  cudaEvent_t done = nullptr;
  int event_device = -1;
  bool pending = false;
  HostStaging() = default;
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  ~HostStaging() {
    if (done != nullptr) cudaEventDestroy(done);
    if (data != nullptr) pinned ? static_cast<void>(cudaFreeHost(data)) : std::free(data);
  }
};
inline HostStaging& ThreadStaging() {
  thread_local HostStaging staging;
  return staging;
}
// The calling thread's buffer for results on their way back (PackedDownload).
inline HostStaging& ThreadDownloadStaging() {
  thread_local HostStaging staging;
  return staging;
}

// Grows `s` to at least `bytes` (pinned when the driver allows). Nothing may be in flight from
// or to it.
inline absl::Status GrowStaging(HostStaging& s, size_t bytes) {
  if (s.capacity >= bytes) return absl::OkStatus();
  const size_t capacity = std::max({bytes, s.capacity * 3 / 2, size_t{1} << 20});
  if (s.data != nullptr) s.pinned ? static_cast<void>(cudaFreeHost(s.data)) : std::free(s.data);
  s.data = nullptr;
  s.capacity = 0;
  void* p = nullptr;
  s.pinned = cudaHostAlloc(&p, capacity, cudaHostAllocPortable) == cudaSuccess;
  if (!s.pinned) {
    cudaGetLastError();
    p = std::malloc(capacity);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host staging: cannot allocate ", capacity, " bytes"));
    }
  }
  s.data = static_cast<char*>(p);
  s.capacity = capacity;
  return absl::OkStatus();
}

// Several host tables copied to the device in one allocation and one transfer, through the
// thread's staging buffer. Two phases: the layout (Reserve / Add), then Stage() — after which
// tables are written in place with Host<T>() — and Upload(). Add(v) copies `v` at Upload(), so
// `v` must stay alive and unchanged until then.
class PackedUpload {
 public:
  // Offsets of several tables in one buffer, each 256-byte aligned (also for device-only tables).
  class Layout {
   public:
    template <class T>
    size_t Reserve(size_t count) {
      const size_t offset = static_cast<size_t>(RoundUp(static_cast<int64_t>(size_), 256));
      size_ = offset + count * sizeof(T);
      return offset;
    }
    size_t size() const { return size_; }

   private:
    size_t size_ = 0;
  };

  template <class T>
  size_t Reserve(size_t count) {
    return layout_.Reserve<T>(count);
  }
  template <class T>
  size_t Add(const std::vector<T>& v) {
    const size_t offset = Reserve<T>(v.size());
    if (!v.empty()) copies_.push_back({offset, v.data(), v.size() * sizeof(T)});
    return offset;
  }
  // Makes Host<T>() valid for the layout so far; waits until this thread's previous upload has
  // left the staging buffer. Layouts over kMaxRetainedBytes (clouds of millions of points) use a
  // pageable buffer of their own instead, so that no worker keeps gigabytes pinned.
  absl::Status Stage() {
    const size_t total = layout_.size();
    if (total > kMaxRetainedBytes) {
      own_.reset(new (std::nothrow) char[total]);
      if (own_ == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("host staging: cannot allocate ", total, " bytes"));
      }
      host_ = own_.get();
      return absl::OkStatus();
    }
    HostStaging& s = ThreadStaging();
    if (s.pending) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.done));
      s.pending = false;
    }
    FRESNEL_RETURN_IF_ERROR(GrowStaging(s, total));
    host_ = s.data;
    return absl::OkStatus();
  }
  template <class T>
  T* Host(size_t offset) {
    return reinterpret_cast<T*>(host_ + offset);
  }
  absl::Status Upload(const Device& device) {
    if (host_ == nullptr) FRESNEL_RETURN_IF_ERROR(Stage());
    const size_t total = layout_.size();
    CopySlices(copies_, host_);
    FRESNEL_RETURN_IF_ERROR(dev_.Allocate(device, static_cast<int64_t>(total)));
    if (total == 0) return absl::OkStatus();
    const cudaStream_t stream = StreamOf(device);
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dev_.get(), host_, total, cudaMemcpyHostToDevice, stream));
    // From pageable memory the call returns once the source has been read; our own buffer is
    // then free to go with this object.
    if (own_ != nullptr) return absl::OkStatus();
    HostStaging& s = ThreadStaging();
    if (s.done != nullptr && s.event_device != device.ordinal) {
      cudaEventDestroy(s.done);
      s.done = nullptr;
    }
    if (s.done == nullptr) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
      s.event_device = device.ordinal;
    }
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.done, stream));
    s.pending = true;
    return absl::OkStatus();
  }
  template <class T>
  const T* Ptr(size_t offset) const {
    return reinterpret_cast<const T*>(dev_.get() + offset);
  }

  struct Copy {
    size_t offset;       // in the staging buffer
    const void* source;  // host memory (upload) or the destination (download)
    size_t bytes;
  };
  // Copies each table to staging + offset (or, with `back`, from there to its source). A few
  // megabytes a frame: one thread below kParallelBytes — on a host shared by many streams and
  // clients a parallel copy waits for its slowest slice — and all cores in slices above.
  static void CopySlices(const std::vector<Copy>& copies, char* staging, bool back = false) {
    constexpr size_t kParallelBytes = size_t{16} << 20;
    constexpr size_t kSlice = size_t{1} << 20;
    size_t total = 0;
    for (const Copy& c : copies) total += c.bytes;
    auto one = [&](const Copy& c) {
      char* s = staging + c.offset;
      void* d = const_cast<void*>(c.source);
      back ? std::memcpy(d, s, c.bytes) : std::memcpy(s, c.source, c.bytes);
    };
    if (total < kParallelBytes) {
      for (const Copy& c : copies) one(c);
      return;
    }
    std::vector<Copy> slices;
    for (const Copy& c : copies) {
      for (size_t o = 0; o < c.bytes; o += kSlice) {
        slices.push_back({c.offset + o, static_cast<const char*>(c.source) + o,
                          std::min(kSlice, c.bytes - o)});
      }
    }
    tbb::parallel_for(size_t{0}, slices.size(), [&](size_t i) { one(slices[i]); });
  }

 private:
  static constexpr size_t kMaxRetainedBytes = size_t{256} << 20;
  Layout layout_;
  std::vector<Copy> copies_;
  char* host_ = nullptr;
  std::unique_ptr<char[]> own_;
  DeviceBuffer<char> dev_;
};

// Results copied back in one pass through the thread's pinned download buffer: Add() each
// device array with its HostArray, Enqueue() the device-to-host copies on the stream, and after
// synchronising the stream Finish() moves the bytes into the arrays. A pageable destination
// would make each copy a synchronous driver-staged transfer; results over kMaxRetainedBytes
// still go that way, straight into the arrays.
class PackedDownload {
 public:
  void Add(const void* device_src, HostArray* dst) {
    if (dst->nbytes() == 0) return;
    const size_t offset = layout_.Reserve<char>(dst->nbytes());
    items_.push_back({device_src, dst, offset});
  }
  absl::Status Enqueue(const Device& device) {
    const cudaStream_t stream = StreamOf(device);
    staged_ = layout_.size() <= kMaxRetainedBytes;
    if (staged_) FRESNEL_RETURN_IF_ERROR(GrowStaging(ThreadDownloadStaging(), layout_.size()));
    for (const Item& it : items_) {
      void* dst = staged_ ? ThreadDownloadStaging().data + it.offset : it.dst->raw();
      FRESNEL_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dst, it.src, it.dst->nbytes(), cudaMemcpyDeviceToHost, stream));
    }
    return absl::OkStatus();
  }
  // After the stream was synchronised.
  void Finish() {
    if (!staged_) return;
    std::vector<PackedUpload::Copy> copies;
    for (const Item& it : items_) copies.push_back({it.offset, it.dst->raw(), it.dst->nbytes()});
    PackedUpload::CopySlices(copies, ThreadDownloadStaging().data, /*back=*/true);
  }

 private:
  struct Item {
    const void* src;
    HostArray* dst;
    size_t offset;
  };
  static constexpr size_t kMaxRetainedBytes = size_t{256} << 20;
  PackedUpload::Layout layout_;
  std::vector<Item> items_;
  bool staged_ = false;
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
