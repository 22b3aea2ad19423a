// StagedUpload / StagedDownload (core/staged_copy.h): pageable host memory <-> device memory
// through a bounded pool of pinned chunks per device, two chunks per call, one on the bus while
// the other is filled or emptied on all cores.
#include "core/staged_copy.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <map>
#include <memory>
#include <mutex>

#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

namespace fresnel::cuda {
namespace {

// A pinned chunk and the event recorded after the last DMA that read or wrote it: whoever uses
// it next waits for that event before touching its bytes.
struct Chunk {
  void* host = nullptr;
  cudaEvent_t done = nullptr;
};

class Pool {
 public:
  // Two free chunks of `ordinal`'s pool (made on first use, at most kStagingChunks in all), or
  // false when fewer are free.
  bool TakePair(int ordinal, Chunk** a, Chunk** b) {
    std::lock_guard<std::mutex> lock(mu_);
    DevicePool& p = pools_[ordinal];
    while (p.free.size() < 2 && static_cast<int>(p.all.size()) < kStagingChunks) {
      auto c = std::make_unique<Chunk>();
      if (cudaSetDevice(ordinal) != cudaSuccess ||
          cudaHostAlloc(&c->host, kStagingChunkBytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        break;
      }
      if (cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming) != cudaSuccess) {
        cudaFreeHost(c->host);
        cudaGetLastError();
        break;
      }
      p.free.push_back(c.get());
      p.all.push_back(std::move(c));
      bytes_ += static_cast<int64_t>(kStagingChunkBytes);
    }
    if (p.free.size() < 2) {
      ++fallbacks_;
      return false;
    }
    *a = p.free.back();
    p.free.pop_back();
    *b = p.free.back();
    p.free.pop_back();
    return true;
  }
  void Give(int ordinal, Chunk* a, Chunk* b) {
    std::lock_guard<std::mutex> lock(mu_);
    pools_[ordinal].free.push_back(a);
    pools_[ordinal].free.push_back(b);
  }
  int64_t bytes() const { return bytes_.load(); }
  int64_t fallbacks() const { return fallbacks_.load(); }

 private:
  struct DevicePool {
    std::vector<std::unique_ptr<Chunk>> all;  // kept for the process's life
    std::vector<Chunk*> free;
  };
  std::mutex mu_;
  std::map<int, DevicePool> pools_;
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> fallbacks_{0};
};

// FRESNEL_HOST_STAGING=0 (read once): every call takes the pageable path, as before the pool
// existed (diagnosis, and the before/after of one binary in a benchmark).
bool StagingOff() {
  static const bool off = [] {
    const char* v = std::getenv("FRESNEL_HOST_STAGING");
    return v != nullptr && std::string(v) == "0";
  }();
  return off;
}

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: the chunks outlive every caller
  return *pool;
}

// A pair of chunks for one call, given back on every exit.
class Pair {
 public:
  explicit Pair(int ordinal) : ordinal_(ordinal) { ok_ = ThePool().TakePair(ordinal, &c_[0], &c_[1]); }
  ~Pair() {
    if (ok_) ThePool().Give(ordinal_, c_[0], c_[1]);
  }
  bool ok() const { return ok_; }
  Chunk* at(size_t i) const { return c_[i % 2]; }

 private:
  int ordinal_;
  bool ok_ = false;
  Chunk* c_[2] = {nullptr, nullptr};
};

// memcpy on all cores in 1 MiB blocks (one thread moves only ~6-14 GB/s on the H200 host, a
// 16 MiB chunk is 16 tasks).
void ParallelCopy(void* dst, const void* src, size_t n) {
  constexpr size_t kBlock = size_t{1} << 20;
  if (n <= 2 * kBlock) {
    std::memcpy(dst, src, n);
    return;
  }
  const size_t blocks = (n + kBlock - 1) / kBlock;
  tbb::parallel_for(tbb::blocked_range<size_t>(0, blocks),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t b = r.begin(); b != r.end(); ++b) {
                        const size_t lo = b * kBlock;
                        std::memcpy(static_cast<char*>(dst) + lo,
                                    static_cast<const char*>(src) + lo, std::min(kBlock, n - lo));
                      }
                    });
}

// The pieces cut into chunk-sized parts, in order.
struct Part {
  char* dst;
  const char* src;
  size_t n;
};
std::vector<Part> PartsOf(const std::vector<StagedPiece>& pieces, size_t* total) {
  std::vector<Part> parts;
  *total = 0;
  for (const StagedPiece& p : pieces) {
    for (size_t off = 0; off < p.bytes; off += kStagingChunkBytes) {
      parts.push_back({static_cast<char*>(p.dst) + off, static_cast<const char*>(p.src) + off,
                       std::min(kStagingChunkBytes, p.bytes - off)});
    }
    *total += p.bytes;
  }
  return parts;
}

// Page-locked host memory (a pinned shared-memory region, a cudaHostAlloc buffer) needs no
// staging: the DMA reads or writes it where it is. Pageable memory is cudaMemoryTypeUnregistered.
bool PageLocked(const void* host) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

// Enqueues the pieces whose host side is page-locked as plain copies on `stream` and moves the
// others into `*pageable` (downloads: the stream is synchronised after those, in every path).
absl::Status CopyPageLocked(const std::vector<StagedPiece>& pieces, cudaMemcpyKind kind,
                            cudaStream_t stream, std::vector<StagedPiece>* pageable) {
  for (const StagedPiece& p : pieces) {
    const void* host = kind == cudaMemcpyHostToDevice ? p.src : p.dst;
    if (p.bytes == 0 || !PageLocked(host)) {
      pageable->push_back(p);
      continue;
    }
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.dst, p.src, p.bytes, kind, stream));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StagedUpload(int ordinal, const std::vector<StagedPiece>& all_pieces,
                          void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  std::vector<StagedPiece> pieces;
  FRESNEL_RETURN_IF_ERROR(CopyPageLocked(all_pieces, cudaMemcpyHostToDevice, stream, &pieces));
  size_t total = 0;
  const std::vector<Part> parts = PartsOf(pieces, &total);
  if (total < kStagingMinBytes || StagingOff()) {
    for (const Part& p : parts) {
      FRESNEL_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(p.dst, p.src, p.n, cudaMemcpyHostToDevice, stream));
    }
    return absl::OkStatus();
  }
  Pair pair(ordinal);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!pair.ok()) {  // no free pair: the driver's pageable copy
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(parts[i].dst, parts[i].src, parts[i].n,
                                                   cudaMemcpyHostToDevice, stream));
      continue;
    }
    Chunk* c = pair.at(i);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(c->done));  // its last DMA is over
    ParallelCopy(c->host, parts[i].src, parts[i].n);
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(parts[i].dst, c->host, parts[i].n, cudaMemcpyHostToDevice, stream));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(c->done, stream));
  }
  return absl::OkStatus();
}

absl::Status StagedDownload(int ordinal, const std::vector<StagedPiece>& all_pieces,
                            void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  std::vector<StagedPiece> pieces;
  FRESNEL_RETURN_IF_ERROR(CopyPageLocked(all_pieces, cudaMemcpyDeviceToHost, stream, &pieces));
  size_t total = 0;
  const std::vector<Part> parts = PartsOf(pieces, &total);
  std::unique_ptr<Pair> pair;
  if (total >= kStagingMinBytes && !StagingOff()) pair = std::make_unique<Pair>(ordinal);
  if (pair == nullptr || !pair->ok()) {  // small, or no free pair: the driver's pageable copy
    for (const Part& p : parts) {
      FRESNEL_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(p.dst, p.src, p.n, cudaMemcpyDeviceToHost, stream));
    }
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  }
  // A previous user's DMA (on another stream) may still read or write the chunks.
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(pair->at(0)->done));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(pair->at(1)->done));
  auto enqueue = [&](size_t i) -> absl::Status {
    Chunk* c = pair->at(i);
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(c->host, parts[i].src, parts[i].n, cudaMemcpyDeviceToHost, stream));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(c->done, stream));
    return absl::OkStatus();
  };
  // Part i + 1 goes into the other chunk (emptied in the step before) while part i is copied
  // out of its own.
  FRESNEL_RETURN_IF_ERROR(enqueue(0));
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i + 1 < parts.size()) FRESNEL_RETURN_IF_ERROR(enqueue(i + 1));
    Chunk* c = pair->at(i);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(c->done));
    ParallelCopy(parts[i].dst, c->host, parts[i].n);
  }
  return absl::OkStatus();
}

int64_t StagingPoolBytes() { return ThePool().bytes(); }
int64_t StagingPoolFallbacks() { return ThePool().fallbacks(); }

}  // namespace fresnel::cuda
