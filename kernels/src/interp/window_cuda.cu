// UpfirdnWindowCudaPlaced (window_internal.h): one window whose x and y may be device memory of
// any device, with the host legs pipelined in chunks. Host-side launch code only: the kernels
// are CudaPolyphase's (interp_cuda.cu), launched once per chunk.
//
// Pipeline (x and y on the host, n chunks, streams S0 = device.stream, S1, S2):
//
//   S(i mod 3):  H2D x window of chunk i -> kernel of chunk i -> D2H y of chunk i
//
// Chunk i's buffers are slot i mod 3 of a ring of device buffers, used only by stream i mod 3, so
// stream order alone keeps chunk i+3 from overwriting what chunk i still reads or sends. While
// chunk i's kernel runs, chunk i+1's H2D (one copy engine) and chunk i-1's D2H (the other) run on
// the other two streams. Chunk i's x window is InputsOf(its outputs): the samples it reads, a
// halo of taps-per-phase samples more than its share; outside it the kernel sees cval, which is
// what the whole call sees outside [0, n) — so every output is the same sum in the same order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "interp/window_internal.h"

namespace fresnel::interp::internal {
namespace {

constexpr int kStreams = 3;

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 256 == 0; }

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// The samples [first, end) of a window of `len` samples starting at signal index x_first that
// full outputs [k0, k1) read, as indices into the window.
void InputsOfFull(const Polyphase& f, int64_t x_first, int64_t len, int64_t k0, int64_t k1,
                  int64_t* first, int64_t* end) {
  const int64_t p = f.TapsPerPhase();
  *first = std::clamp<int64_t>(FloorDiv(k0 * f.down, f.up) - p + 1 - x_first, 0, len);
  *end = std::clamp<int64_t>(FloorDiv((k1 - 1) * f.down, f.up) + 1 - x_first, 0, len);
  if (*end < *first) *end = *first;
}

// Enqueues window samples [a, b) of every channel ([head | x] on the host, head `head_len` and x
// `len` samples per row) to dst as rows of b - a samples.
absl::Status UploadWindowAsync(const PlacedWindow& c, int64_t a, int64_t b, void* dst,
                               cudaStream_t st) {
  const int64_t es = static_cast<int64_t>(DTypeSize(c.dtype));
  const int64_t span = b - a;
  char* d = static_cast<char*>(dst);
  if (a < c.head_len) {  // the part in the head
    const int64_t e = std::min(b, c.head_len);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        d, span * es, static_cast<const char*>(c.head) + a * es, c.head_len * es, (e - a) * es,
        c.channels, cudaMemcpyHostToDevice, st));
  }
  if (b > c.head_len) {  // the part in x
    const int64_t s = std::max(a, c.head_len);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        d + (s - a) * es, span * es, static_cast<const char*>(c.x) + (s - c.head_len) * es,
        c.len * es, (b - s) * es, c.channels, cudaMemcpyHostToDevice, st));
  }
  return absl::OkStatus();
}

// The extra streams of one call and the join at its end: on every exit (errors included) S0
// waits for them before the device buffers, freed stream-ordered on S0, can be released.
class AuxStreams {
 public:
  AuxStreams(int ordinal, cudaStream_t s0) : ordinal_(ordinal), s0_(s0) {}
  ~AuxStreams() {
    cudaSetDevice(ordinal_);
    for (cudaStream_t s : streams_) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess) {
        cudaEventRecord(e, s);
        cudaStreamWaitEvent(s0_, e, 0);
        cudaEventDestroy(e);
      } else {
        cudaStreamSynchronize(s);
      }
      cudaStreamDestroy(s);
    }
    cudaGetLastError();
  }
  absl::Status Add(int count) {
    for (int i = 0; i < count; ++i) {
      cudaStream_t s = nullptr;
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams_.push_back(s);
    }
    return absl::OkStatus();
  }
  // Orders every aux stream after what S0 has enqueued so far.
  absl::Status AfterS0() {
    if (streams_.empty()) return absl::OkStatus();
    cudaEvent_t e = nullptr;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaError_t err = cudaEventRecord(e, s0_);
    for (cudaStream_t s : streams_) {
      if (err == cudaSuccess) err = cudaStreamWaitEvent(s, e, 0);
    }
    cudaEventDestroy(e);
    FRESNEL_CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }
  // S0 waits for every aux stream.
  absl::Status Join() {
    for (cudaStream_t s : streams_) {
      cudaEvent_t e = nullptr;
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      cudaError_t err = cudaEventRecord(e, s);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(s0_, e, 0);
      cudaEventDestroy(e);
      FRESNEL_CUDA_RETURN_IF_ERROR(err);
    }
    return absl::OkStatus();
  }
  cudaStream_t at(int i) const { return i == 0 ? s0_ : streams_[i - 1]; }

 private:
  int ordinal_;
  cudaStream_t s0_;
  std::vector<cudaStream_t> streams_;
};

// Timing events: four per chunk (before its H2D, after it, after the kernel, after its D2H).
class ChunkEvents {
 public:
  ~ChunkEvents() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  absl::Status Record(cudaStream_t s) {
    cudaEvent_t e = nullptr;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    events_.push_back(e);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(e, s));
    return absl::OkStatus();
  }
  // Sum over chunks of the time between event `from` and `from + 1` of each (after a sync).
  double Sum(int from) const {
    double s = 0;
    for (size_t i = from; i + 1 < events_.size(); i += 4) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, events_[i], events_[i + 1]) == cudaSuccess) s += ms * 1e-3;
    }
    cudaGetLastError();
    return s;
  }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace

absl::Status UpfirdnWindowCudaPlaced(const Device& device, const PlacedWindow& c,
                                     StageTimes* times) {
  if (times != nullptr) *times = StageTimes{};
  if (device.kind != DeviceKind::kCuda || device.stream == nullptr) {
    return absl::FailedPreconditionError("UpfirdnWindowCudaPlaced: needs a CUDA device stream");
  }
  if (c.channels * c.out_count == 0) return absl::OkStatus();
  if ((c.head_len > 0 || c.x_first != 0) && c.x_device >= 0) {
    return absl::InternalError("UpfirdnWindowCudaPlaced: a head or x_first needs host x");
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  cudaStream_t s0 = cuda::StreamOf(device);
  const int64_t es = static_cast<int64_t>(DTypeSize(c.dtype));
  const int64_t x_bytes = c.channels * c.len * es;
  const int64_t y_bytes = c.channels * c.out_count * es;

  FRESNEL_ASSIGN_OR_RETURN(CudaPolyphase plan, CudaPolyphase::Create(device, *c.filter, c.dtype));
  cuda::DeviceBuffer<unsigned char> x_copy, y_copy;
  const void* x_dev = nullptr;  // the whole x on this device, when x is device memory
  double peer_in_s = 0;
  // x and y in one device region may overlap: x is then copied first (the kernel reads x while
  // it writes y).
  const bool xy_overlap = c.x_device >= 0 && c.x_device == c.y_device &&
                          static_cast<const char*>(c.x) < static_cast<const char*>(c.y) + y_bytes &&
                          static_cast<const char*>(c.y) < static_cast<const char*>(c.x) + x_bytes;
  if (c.x_device >= 0) {
    if (c.x_device == device.ordinal && Aligned(c.x) && !xy_overlap) {
      x_dev = c.x;
    } else {
      FRESNEL_RETURN_IF_ERROR(x_copy.Allocate(device, x_bytes));
      cuda::StageClock clock(s0);
      FRESNEL_RETURN_IF_ERROR(clock.Mark());
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(x_copy.get(), device.ordinal, c.x,
                                                       c.x_device, x_bytes, s0));
      FRESNEL_RETURN_IF_ERROR(clock.Mark());
      peer_in_s = clock.Seconds(0);
      x_dev = x_copy.get();
    }
  }
  void* y_dev = nullptr;  // the whole y on this device, when y is device memory
  if (c.y_device >= 0) {
    if (c.y_device == device.ordinal && Aligned(c.y)) {
      y_dev = c.y;
    } else {
      FRESNEL_RETURN_IF_ERROR(y_copy.Allocate(device, y_bytes));
      y_dev = y_copy.get();
    }
  }

  // Chunks of whole 1024-output blocks (device y offsets stay 4 KiB aligned for float32).
  int64_t chunk = c.out_count;
  if (c.chunk_outputs > 0 && !(x_dev != nullptr && y_dev != nullptr)) {
    chunk = std::min(c.out_count, std::max<int64_t>(1024, c.chunk_outputs / 1024 * 1024));
  }
  const int64_t n_chunks = (c.out_count + chunk - 1) / chunk;
  const int n_streams = static_cast<int>(std::min<int64_t>(kStreams, n_chunks));
  int64_t max_span = 0;  // the longest chunk x window
  for (int64_t i = 0; i < n_chunks && x_dev == nullptr; ++i) {
    const int64_t k0 = c.out_first + i * chunk;
    const int64_t k1 = k0 + std::min(chunk, c.out_count - i * chunk);
    int64_t a = 0, b = 0;
    InputsOfFull(*c.filter, c.x_first, c.head_len + c.len, k0, k1, &a, &b);
    max_span = std::max(max_span, b - a);
  }
  std::vector<cuda::DeviceBuffer<unsigned char>> x_ring(n_streams), y_ring(n_streams);
  for (int i = 0; i < n_streams; ++i) {
    if (x_dev == nullptr) FRESNEL_RETURN_IF_ERROR(x_ring[i].Allocate(device, c.channels * max_span * es));
    if (y_dev == nullptr) FRESNEL_RETURN_IF_ERROR(y_ring[i].Allocate(device, c.channels * chunk * es));
  }
  // Declared after the buffers: destroyed first, so S0 waits for the aux streams before the
  // buffers' stream-ordered frees on S0.
  AuxStreams streams(device.ordinal, s0);
  FRESNEL_RETURN_IF_ERROR(streams.Add(n_streams - 1));
  FRESNEL_RETURN_IF_ERROR(streams.AfterS0());  // taps, buffers and x's peer copy are there

  // x filled by the caller ahead of its chunks (1-D: each chunk's window is a prefix of x).
  const bool prefix_hook = x_dev == nullptr && c.x_prefix_ready != nullptr;
  if (prefix_hook && c.channels > 1) c.x_prefix_ready(x_bytes);
  ChunkEvents events;
  for (int64_t i = 0; i < n_chunks; ++i) {
    const int slot = static_cast<int>(i % n_streams);
    cudaStream_t st = streams.at(slot);
    Device on = device;
    on.stream = st;
    const int64_t j = i * chunk;  // the chunk's first output, relative to c.out_first
    const int64_t count = std::min(chunk, c.out_count - j);
    DeviceSignal s;
    s.channels = c.channels;
    s.cval = c.cval;
    s.out_first = c.out_first + j;
    s.out_count = count;
    FRESNEL_RETURN_IF_ERROR(events.Record(st));
    if (x_dev != nullptr) {
      s.x = x_dev;
      s.x_stride = c.len;
      s.x_first = 0;
      s.x_len = c.len;
    } else {
      int64_t a = 0, b = 0;
      InputsOfFull(*c.filter, c.x_first, c.head_len + c.len, s.out_first, s.out_first + count,
                   &a, &b);
      const int64_t span = b - a;
      if (prefix_hook && c.channels == 1) {
        c.x_prefix_ready(std::max<int64_t>(b - c.head_len, 0) * es);
      }
      if (span > 0) FRESNEL_RETURN_IF_ERROR(UploadWindowAsync(c, a, b, x_ring[slot].get(), st));
      s.x = x_ring[slot].get();
      s.x_stride = span;
      s.x_first = c.x_first + a;
      s.x_len = span;
    }
    FRESNEL_RETURN_IF_ERROR(events.Record(st));
    if (y_dev != nullptr) {
      s.y = static_cast<char*>(y_dev) + j * es;
      s.y_stride = c.out_count;
    } else {
      s.y = y_ring[slot].get();
      s.y_stride = count;
    }
    FRESNEL_RETURN_IF_ERROR(plan.LaunchAsync(on, s));
    FRESNEL_RETURN_IF_ERROR(events.Record(st));
    if (y_dev == nullptr) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          static_cast<char*>(c.y) + j * es, c.out_count * es, y_ring[slot].get(), count * es,
          count * es, c.channels, cudaMemcpyDeviceToHost, st));
    }
    FRESNEL_RETURN_IF_ERROR(events.Record(st));
  }
  FRESNEL_RETURN_IF_ERROR(streams.Join());
  double peer_out_s = 0;
  if (y_copy.get() != nullptr) {
    cuda::StageClock clock(s0);
    FRESNEL_RETURN_IF_ERROR(clock.Mark());
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(c.y, c.y_device, y_copy.get(),
                                                     device.ordinal, y_bytes, s0));
    FRESNEL_RETURN_IF_ERROR(clock.Mark());
    peer_out_s = clock.Seconds(0);
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s0));
  if (times != nullptr) {
    times->h2d_s = events.Sum(0) + peer_in_s;
    times->compute_s = events.Sum(1);
    times->d2h_s = events.Sum(2) + peer_out_s;
  }
  return absl::OkStatus();
}

}  // namespace fresnel::interp::internal
