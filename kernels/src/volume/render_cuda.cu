// CUDA backend: cell projection with hash blocks, CUB radix sort and front-to-back compositing.
//
// Per frame:
//   1. ProjectKernel: every point to continuous pixel coordinates (NaN when behind the eye).
//   2. BoxKernel: every tetrahedron's screen box of pixel centres, widened by one pixel (the
//      exact ray test below decides coverage, the box only has to contain it); boxes that cannot
//      be projected (a point behind the eye) cover the whole image.
//   3. For each hash block (bx, by) — the pixels x ≡ bx, y ≡ by (mod S), S = 2^bits:
//      a. RecordKernel, one thread per tetrahedron: walk the block's pixels in the box, intersect
//         each pixel's ray with the tetrahedron (volume_math.h, the CPU's code), count the hits,
//         place them with a block-wide exclusive prefix sum plus one global atomic per thread
//         block, and write per hit the sort key (local pixel index << 32 | float bits of the
//         segment's mid depth; depths are > 0 so their bits order like the floats) and the
//         segment's premultiplied RGBA (the transfer function integrated along the segment).
//         Records whose slot lies past the buffer are counted, not written: the host then grows
//         the buffers and runs the block again.
//      b. cub::DeviceRadixSort::SortPairs over (key, record index), bits [0, 32 + pixel bits).
//      c. Compositing, front to back per pixel: kPairwise (warp per pixel, order-preserving
//         shuffle reductions of "over" 32 records at a time) or kSegmentedScan
//         (cub::DeviceScan::InclusiveScanByKey with "over", the last record of each pixel).
//      d. Optionally the block's pixels to the host for the progress callback.
//   4. The image to the host.
// Memory per frame: points × 8 B + tetrahedra × 8 B + image + one block's records × 40 B (key,
// index, alternate key and index for the sort, RGBA) + CUB temporaries.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/transform_iterator.h>

#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "volume/volume_internal.h"
#include "volume/volume_math.h"

namespace fresnel::volume {

struct CudaMesh {
  int ordinal = 0;
  float4* points = nullptr;  // x, y, z, scalar
  int4* tets = nullptr;
  int64_t num_points = 0;
  int64_t num_tets = 0;
};

void CudaMeshDeleter::operator()(CudaMesh* mesh) const {
  if (mesh == nullptr) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(mesh->ordinal);
  cudaFree(mesh->points);
  cudaFree(mesh->tets);
  cudaSetDevice(previous);
  delete mesh;
}

absl::StatusOr<std::unique_ptr<CudaMesh, CudaMeshDeleter>> UploadMeshCuda(
    const Device& device, const RenderMesh& mesh, int64_t* device_bytes) {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  cudaStream_t stream = cuda::StreamOf(device);
  std::unique_ptr<CudaMesh, CudaMeshDeleter> out(new CudaMesh);
  out->ordinal = device.ordinal;
  out->num_points = static_cast<int64_t>(mesh.scalars.size());
  out->num_tets = mesh.num_tets();
  std::vector<float4> points(out->num_points);
  for (int64_t i = 0; i < out->num_points; ++i) {
    points[i] = make_float4(mesh.points_xyz[3 * i], mesh.points_xyz[3 * i + 1],
                            mesh.points_xyz[3 * i + 2], mesh.scalars[i]);
  }
  // Persistent buffers live outside the stream-ordered pool: they outlast every stream's work.
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&out->points, std::max<size_t>(16, points.size() * sizeof(float4))));
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&out->tets, std::max<size_t>(16, out->num_tets * sizeof(int4))));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->points, points.data(),
                                               points.size() * sizeof(float4),
                                               cudaMemcpyHostToDevice, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->tets, mesh.tets.data(),
                                               out->num_tets * sizeof(int4),
                                               cudaMemcpyHostToDevice, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  *device_bytes = CudaMeshBytes(out->num_points, out->num_tets);
  return out;
}

namespace {

using math::Rgba;
using math::V3;

constexpr int kRecordThreads = 128;

__device__ __forceinline__ V3 Xyz(float4 p) { return {p.x, p.y, p.z}; }
__device__ __forceinline__ Rgba ToRgba(float4 v) { return {v.x, v.y, v.z, v.w}; }
__device__ __forceinline__ float4 ToFloat4(Rgba v) { return make_float4(v.r, v.g, v.b, v.a); }

__global__ void ProjectKernel(const float4* __restrict__ points, int64_t n,
                              math::CameraFrame cam, float2* __restrict__ screen) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  float x, y;
  if (!math::ProjectPoint(cam, Xyz(points[i]), &x, &y)) x = y = NAN;
  screen[i] = make_float2(x, y);
}

// Box of pixel indices [x0, x1] × [y0, y1] as int16 (image sides <= 8192); x0 > x1 when empty.
__global__ void BoxKernel(const int4* __restrict__ tets, int64_t n, const float2* __restrict__ screen,
                          int width, int height, short4* __restrict__ boxes,
                          unsigned long long* __restrict__ area_sum) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  unsigned long long area = 0;
  if (t < n) {
    const int4 v = tets[t];
    const int ids[4] = {v.x, v.y, v.z, v.w};
    float x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    bool all = true;
    for (int i = 0; i < 4; ++i) {
      const float2 s = screen[ids[i]];
      all = all && !isnan(s.x);
      x0 = fminf(x0, s.x), x1 = fmaxf(x1, s.x), y0 = fminf(y0, s.y), y1 = fmaxf(y1, s.y);
    }
    int bx0, bx1, by0, by1;
    if (!all) {
      bx0 = 0, bx1 = width - 1, by0 = 0, by1 = height - 1;
    } else {
      const float lx = fmaxf(ceilf(x0 - 1.0f), 0.0f), hx = fminf(floorf(x1 + 1.0f), width - 1.0f);
      const float ly = fmaxf(ceilf(y0 - 1.0f), 0.0f), hy = fminf(floorf(y1 + 1.0f), height - 1.0f);
      if (lx <= hx && ly <= hy) {
        bx0 = static_cast<int>(lx), bx1 = static_cast<int>(hx);
        by0 = static_cast<int>(ly), by1 = static_cast<int>(hy);
      } else {
        bx0 = 1, bx1 = 0, by0 = 1, by1 = 0;
      }
    }
    boxes[t] = make_short4(bx0, bx1, by0, by1);
    if (bx0 <= bx1) area = static_cast<unsigned long long>(bx1 - bx0 + 1) * (by1 - by0 + 1);
  }
  // One atomic per warp.
  for (int o = 16; o > 0; o >>= 1) area += __shfl_down_sync(0xffffffffu, area, o);
  if ((threadIdx.x & 31) == 0 && area > 0) atomicAdd(area_sum, area);
}

// First lattice coordinate c >= lo with c ≡ offset (mod stride), as a lattice index.
__device__ __forceinline__ int LatticeBegin(int lo, int offset, int stride) {
  return lo <= offset ? 0 : (lo - offset + stride - 1) / stride;
}

struct BlockGeometry {
  int bx, by, stride;   // pixel (bx + stride·i, by + stride·j)
  int width, height;    // lattice size of this block
};

__global__ void __launch_bounds__(kRecordThreads)
RecordKernel(const int4* __restrict__ tets, int64_t n, const float4* __restrict__ points,
             const short4* __restrict__ boxes, math::CameraFrame cam, math::TfTable tf_param,
             BlockGeometry g, unsigned long long* __restrict__ counter, int64_t capacity,
             unsigned long long* __restrict__ keys, uint32_t* __restrict__ values,
             float4* __restrict__ rgba) {
  __shared__ math::TfTable tf;
  {
    const int words = sizeof(math::TfTable) / 4;
    const uint32_t* src = reinterpret_cast<const uint32_t*>(&tf_param);
    uint32_t* dst = reinterpret_cast<uint32_t*>(&tf);
    for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
  }
  using Scan = cub::BlockScan<int, kRecordThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ unsigned long long cta_base;
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  V3 p[4];
  float s[4];
  int i0 = 0, i1 = -1, j0 = 0, j1 = -1;
  if (t < n) {
    const short4 b = boxes[t];
    i0 = LatticeBegin(b.x, g.bx, g.stride);
    i1 = b.y < g.bx ? -1 : (b.y - g.bx) / g.stride;
    j0 = LatticeBegin(b.z, g.by, g.stride);
    j1 = b.w < g.by ? -1 : (b.w - g.by) / g.stride;
    if (i0 <= i1 && j0 <= j1) {
      const int4 v = tets[t];
      const float4 q0 = __ldg(&points[v.x]), q1 = __ldg(&points[v.y]), q2 = __ldg(&points[v.z]),
                   q3 = __ldg(&points[v.w]);
      p[0] = Xyz(q0), p[1] = Xyz(q1), p[2] = Xyz(q2), p[3] = Xyz(q3);
      s[0] = q0.w, s[1] = q1.w, s[2] = q2.w, s[3] = q3.w;
    } else {
      i1 = -1;
    }
  }
  // Pass 1: count the hits.
  int count = 0;
  for (int j = j0; j <= j1; ++j)
    for (int i = i0; i <= i1; ++i) {
      V3 o, d;
      math::PixelRay(cam, g.bx + g.stride * i, g.by + g.stride * j, &o, &d);
      math::TetHit hit;
      count += math::IntersectRayTet(p, s, o, d, &hit) ? 1 : 0;
    }
  int offset = 0, total = 0;
  __syncthreads();  // tf is loaded
  Scan(scan_storage).ExclusiveSum(count, offset, total);
  if (threadIdx.x == 0) cta_base = total > 0 ? atomicAdd(counter, static_cast<unsigned long long>(total)) : 0;
  __syncthreads();
  if (count == 0) return;
  // Pass 2: write them.
  unsigned long long slot = cta_base + offset;
  for (int j = j0; j <= j1; ++j)
    for (int i = i0; i <= i1; ++i) {
      V3 o, d;
      math::PixelRay(cam, g.bx + g.stride * i, g.by + g.stride * j, &o, &d);
      math::TetHit hit;
      if (!math::IntersectRayTet(p, s, o, d, &hit)) continue;
      if (slot < static_cast<unsigned long long>(capacity)) {
        const float mid = 0.5f * (hit.t_in + hit.t_out);
        const unsigned long long pixel = static_cast<unsigned long long>(j) * g.width + i;
        keys[slot] = (pixel << 32) | __float_as_uint(mid);
        values[slot] = static_cast<uint32_t>(slot);
        rgba[slot] =
            ToFloat4(math::IntegrateSegment(tf, hit.s_in, hit.s_out, hit.t_out - hit.t_in));
      }
      ++slot;
    }
}

// start[p], end[p] of each local pixel's run of sorted records (both 0 when it has none).
__global__ void RangesKernel(const unsigned long long* __restrict__ keys, int64_t n,
                             uint32_t* __restrict__ start, uint32_t* __restrict__ end) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint32_t p = static_cast<uint32_t>(keys[i] >> 32);
  if (i == 0 || static_cast<uint32_t>(keys[i - 1] >> 32) != p) start[p] = static_cast<uint32_t>(i);
  if (i == n - 1 || static_cast<uint32_t>(keys[i + 1] >> 32) != p) end[p] = static_cast<uint32_t>(i + 1);
}

__device__ __forceinline__ void WritePixel(float4* image, int width, const BlockGeometry& g,
                                           int local, Rgba c, const Rgba& bg, float4* partial) {
  const int i = local % g.width, j = local / g.width;
  const float4 v = ToFloat4(math::OverBackground(c, bg));
  image[static_cast<int64_t>(g.by + g.stride * j) * width + g.bx + g.stride * i] = v;
  if (partial != nullptr) partial[local] = v;
}

// One warp per local pixel: 32 records at a time, lane k holding the k-th; shuffle-down steps
// 1, 2, 4, 8, 16 leave lane 0 with r0 over r1 over ... over r31 (lane l combines its range
// [l, l + o) with lane l + o's [l + o, l + 2o): the order is kept, "over" needs no
// commutativity). Lanes past the run hold transparent black, the identity of "over".
__global__ void CompositePairwiseKernel(const uint32_t* __restrict__ values,
                                        const float4* __restrict__ rgba,
                                        const uint32_t* __restrict__ start,
                                        const uint32_t* __restrict__ end, BlockGeometry g,
                                        Rgba bg, float4* __restrict__ image, int width,
                                        float4* __restrict__ partial) {
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t pixels = int64_t{g.width} * g.height;
  if (warp >= pixels) return;
  const uint32_t b = start[warp], e = end[warp];
  Rgba acc = {0, 0, 0, 0};
  for (uint32_t base = b; base < e; base += 32) {
    Rgba v = {0, 0, 0, 0};
    if (base + lane < e) v = ToRgba(rgba[values[base + lane]]);
    for (int o = 1; o < 32; o <<= 1) {
      Rgba w;
      w.r = __shfl_down_sync(0xffffffffu, v.r, o);
      w.g = __shfl_down_sync(0xffffffffu, v.g, o);
      w.b = __shfl_down_sync(0xffffffffu, v.b, o);
      w.a = __shfl_down_sync(0xffffffffu, v.a, o);
      if (lane + o < 32) v = math::Over(v, w);
    }
    acc = math::Over(acc, v);  // lane 0's v is the tile's; other lanes' acc is unused
  }
  if (lane == 0) WritePixel(image, width, g, static_cast<int>(warp), acc, bg, partial);
}

struct OverOp {
  __device__ float4 operator()(const float4& f, const float4& b) const {
    return ToFloat4(math::Over(ToRgba(f), ToRgba(b)));
  }
};
struct PixelOfKey {
  __device__ uint32_t operator()(unsigned long long k) const { return static_cast<uint32_t>(k >> 32); }
};
struct GatherRgba {
  const float4* rgba;
  __device__ float4 operator()(uint32_t i) const { return rgba[i]; }
};

__global__ void FillBackgroundKernel(BlockGeometry g, Rgba bg, float4* __restrict__ image,
                                     int width, float4* __restrict__ partial) {
  const int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (p >= int64_t{g.width} * g.height) return;
  WritePixel(image, width, g, static_cast<int>(p), {0, 0, 0, 0}, bg, partial);
}

// The last record of each pixel's run holds the pixel's scan: write it.
__global__ void ScanLastKernel(const unsigned long long* __restrict__ keys, int64_t n,
                               const float4* __restrict__ scanned, BlockGeometry g, Rgba bg,
                               float4* __restrict__ image, int width, float4* __restrict__ partial) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint32_t p = static_cast<uint32_t>(keys[i] >> 32);
  if (i != n - 1 && static_cast<uint32_t>(keys[i + 1] >> 32) == p) return;
  WritePixel(image, width, g, static_cast<int>(p), ToRgba(scanned[i]), bg, partial);
}

// Accumulates event-timed stages.
class StageTimer {
 public:
  explicit StageTimer(cudaStream_t s) : stream_(s) {}
  ~StageTimer() {
    for (auto& e : events_) cudaEventDestroy(e.first), cudaEventDestroy(e.second);
  }
  // Starts timing into *sink; Stop() ends it. Elapsed times are summed in Collect().
  absl::Status Start(double* sink) {
    std::pair<cudaEvent_t, cudaEvent_t> ev;
    if (free_.empty()) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev.first));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev.second));
      events_.push_back(ev);
    } else {
      ev = free_.back();
      free_.pop_back();
    }
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.first, stream_));
    open_ = {ev, sink};
    return absl::OkStatus();
  }
  absl::Status Stop() {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(open_.ev.second, stream_));
    pending_.push_back(open_);
    return absl::OkStatus();
  }
  // Adds up the intervals whose end event has completed (all, when `wait`).
  absl::Status Collect(bool wait) {
    std::vector<Interval> still;
    for (const Interval& iv : pending_) {
      if (wait) FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(iv.ev.second));
      cudaError_t q = cudaEventQuery(iv.ev.second);
      if (q == cudaErrorNotReady) {
        still.push_back(iv);
        continue;
      }
      FRESNEL_CUDA_RETURN_IF_ERROR(q);
      float ms = 0;
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, iv.ev.first, iv.ev.second));
      *iv.sink += ms * 1e-3;
      free_.push_back(iv.ev);
    }
    pending_ = std::move(still);
    return absl::OkStatus();
  }

 private:
  struct Interval {
    std::pair<cudaEvent_t, cudaEvent_t> ev;
    double* sink;
  };
  cudaStream_t stream_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_, free_;
  std::vector<Interval> pending_;
  Interval open_{};
};

int CeilLog2(int64_t v) {
  int b = 0;
  while ((int64_t{1} << b) < v) ++b;
  return b;
}

}  // namespace

absl::Status RenderCuda(const Device& device, const CudaMesh& mesh, int64_t mesh_bytes,
                        const RenderJob& job, RenderResult* result) {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  cudaStream_t stream = cuda::StreamOf(device);
  RenderStats& stats = result->stats;
  const math::CameraFrame& cam = job.camera;
  const int w = cam.width, h = cam.height;
  const int64_t np = mesh.num_points, nt = mesh.num_tets;
  int64_t frame_bytes = 0, peak_bytes = 0;
  auto track = [&](int64_t delta) {
    frame_bytes += delta;
    peak_bytes = std::max(peak_bytes, frame_bytes);
  };
  StageTimer timer(stream);

  cuda::DeviceBuffer<float2> screen;
  cuda::DeviceBuffer<short4> boxes;
  cuda::DeviceBuffer<float4> image;
  cuda::DeviceBuffer<unsigned long long> counters;  // [0] records of the block, [1] box area
  FRESNEL_RETURN_IF_ERROR(screen.Allocate(device, np));
  FRESNEL_RETURN_IF_ERROR(boxes.Allocate(device, nt));
  FRESNEL_RETURN_IF_ERROR(image.Allocate(device, int64_t{w} * h));
  FRESNEL_RETURN_IF_ERROR(counters.Allocate(device, 2));
  track(screen.bytes() + boxes.bytes() + image.bytes() + counters.bytes());

  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.project_s));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(counters.get(), 0, counters.bytes(), stream));
  ProjectKernel<<<cuda::BlocksFor(np, 256), 256, 0, stream>>>(mesh.points, np, cam, screen.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ProjectKernel);
  BoxKernel<<<cuda::BlocksFor(nt, 256), 256, 0, stream>>>(mesh.tets, nt, screen.get(), w, h,
                                                          boxes.get(), counters.get() + 1);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(BoxKernel);
  FRESNEL_RETURN_IF_ERROR(timer.Stop());
  unsigned long long area = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&area, counters.get() + 1, sizeof(area),
                                               cudaMemcpyDeviceToHost, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  // Hash blocks. Auto: 16, or 64 when 16 would need record buffers over 2 GiB by the box-area
  // estimate (boxes overestimate coverage, so this leans to fewer, larger blocks).
  constexpr int64_t kRecordBytes = 8 + 4 + 8 + 4 + 16;
  int bits = job.hash_block_bits;
  if (bits == 0) bits = static_cast<double>(area) / 16 * kRecordBytes > 2.0 * (1 << 30) ? 3 : 2;
  const int stride = 1 << bits, num_blocks = stride * stride;
  stats.num_blocks = num_blocks;
  const Compositing mode =
      job.compositing == Compositing::kAuto ? Compositing::kPairwise : job.compositing;
  stats.compositing = mode;
  const math::Rgba bg = job.tf.background;

  int64_t capacity = std::min<int64_t>(
      job.max_block_records, static_cast<int64_t>(area / num_blocks) + (int64_t{1} << 16));
  cuda::DeviceBuffer<unsigned long long> keys, keys_alt;
  cuda::DeviceBuffer<uint32_t> values, values_alt;
  cuda::DeviceBuffer<float4> rgba, scanned;
  cuda::DeviceBuffer<uint32_t> range_start, range_end;
  cuda::DeviceBuffer<float4> partial_dev;
  cuda::DeviceBuffer<uint8_t> temp;
  const int lattice_w = (w + stride - 1) / stride, lattice_h = (h + stride - 1) / stride;
  const int64_t lattice_pixels = int64_t{lattice_w} * lattice_h;
  const int pixel_bits = CeilLog2(lattice_pixels);
  auto allocate_records = [&](int64_t cap) -> absl::Status {
    track(-static_cast<int64_t>(keys.bytes() + keys_alt.bytes() + values.bytes() +
                                values_alt.bytes() + rgba.bytes() + scanned.bytes()));
    FRESNEL_RETURN_IF_ERROR(keys.Allocate(device, cap));
    FRESNEL_RETURN_IF_ERROR(keys_alt.Allocate(device, cap));
    FRESNEL_RETURN_IF_ERROR(values.Allocate(device, cap));
    FRESNEL_RETURN_IF_ERROR(values_alt.Allocate(device, cap));
    FRESNEL_RETURN_IF_ERROR(rgba.Allocate(device, cap));
    if (mode == Compositing::kSegmentedScan) FRESNEL_RETURN_IF_ERROR(scanned.Allocate(device, cap));
    track(keys.bytes() + keys_alt.bytes() + values.bytes() + values_alt.bytes() + rgba.bytes() +
          scanned.bytes());
    capacity = cap;
    return absl::OkStatus();
  };
  FRESNEL_RETURN_IF_ERROR(allocate_records(capacity));
  FRESNEL_RETURN_IF_ERROR(range_start.Allocate(device, lattice_pixels));
  FRESNEL_RETURN_IF_ERROR(range_end.Allocate(device, lattice_pixels));
  track(range_start.bytes() + range_end.bytes());
  std::vector<float> partial_host;
  if (job.on_block != nullptr) {
    FRESNEL_RETURN_IF_ERROR(partial_dev.Allocate(device, lattice_pixels));
    track(partial_dev.bytes());
  }

  for (int block = 0; block < num_blocks; ++block) {
    BlockGeometry g;
    g.bx = block % stride;
    g.by = block / stride;
    g.stride = stride;
    g.width = (w - g.bx + stride - 1) / stride;
    g.height = (h - g.by + stride - 1) / stride;
    const int64_t pixels = int64_t{g.width} * g.height;
    float4* partial = job.on_block != nullptr ? partial_dev.get() : nullptr;
    unsigned long long n = 0;
    for (;;) {
      FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.records_s));
      FRESNEL_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(counters.get(), 0, sizeof(unsigned long long), stream));
      RecordKernel<<<cuda::BlocksFor(nt, kRecordThreads), kRecordThreads, 0, stream>>>(
          mesh.tets, nt, mesh.points, boxes.get(), cam, job.tf, g, counters.get(), capacity,
          keys.get(), values.get(), rgba.get());
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RecordKernel);
      FRESNEL_RETURN_IF_ERROR(timer.Stop());
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&n, counters.get(), sizeof(n),
                                                   cudaMemcpyDeviceToHost, stream));
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
      if (static_cast<int64_t>(n) <= capacity) break;
      if (static_cast<int64_t>(n) > job.max_block_records) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "hash block ", block, " needs ", n, " intersection records, over max_block_records (",
            job.max_block_records, "); use more hash blocks"));
      }
      FRESNEL_RETURN_IF_ERROR(allocate_records(
          std::min<int64_t>(job.max_block_records, static_cast<int64_t>(n + n / 4))));
    }
    FRESNEL_RETURN_IF_ERROR(timer.Collect(false));
    stats.records += static_cast<int64_t>(n);
    stats.max_block_records = std::max<int64_t>(stats.max_block_records, n);
    const int count = static_cast<int>(n);
    if (count == 0) {
      FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.composite_s));
      FillBackgroundKernel<<<cuda::BlocksFor(pixels, 256), 256, 0, stream>>>(g, bg, image.get(), w,
                                                                             partial);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FillBackgroundKernel);
      FRESNEL_RETURN_IF_ERROR(timer.Stop());
    } else {
      // Sort.
      FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.sort_s));
      cub::DoubleBuffer<unsigned long long> dkeys(keys.get(), keys_alt.get());
      cub::DoubleBuffer<uint32_t> dvals(values.get(), values_alt.get());
      size_t temp_bytes = 0;
      FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
          nullptr, temp_bytes, dkeys, dvals, count, 0, 32 + pixel_bits, stream));
      if (mode == Compositing::kSegmentedScan) {
        size_t scan_bytes = 0;
        auto pix = thrust::make_transform_iterator(dkeys.Current(), PixelOfKey{});
        auto val = thrust::make_transform_iterator(dvals.Current(), GatherRgba{rgba.get()});
        FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveScanByKey(
            nullptr, scan_bytes, pix, val, scanned.get(), OverOp{}, count,
            ::cuda::std::equal_to<uint32_t>{}, stream));
        temp_bytes = std::max(temp_bytes, scan_bytes);
      }
      if (temp.bytes() < temp_bytes) {
        track(-static_cast<int64_t>(temp.bytes()));
        FRESNEL_RETURN_IF_ERROR(temp.Allocate(device, static_cast<int64_t>(temp_bytes * 5 / 4)));
        track(temp.bytes());
      }
      size_t have = temp.bytes();
      FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
          temp.get(), have, dkeys, dvals, count, 0, 32 + pixel_bits, stream));
      FRESNEL_RETURN_IF_ERROR(timer.Stop());
      // Composite.
      FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.composite_s));
      if (mode == Compositing::kPairwise) {
        FRESNEL_CUDA_RETURN_IF_ERROR(
            cudaMemsetAsync(range_start.get(), 0, pixels * sizeof(uint32_t), stream));
        FRESNEL_CUDA_RETURN_IF_ERROR(
            cudaMemsetAsync(range_end.get(), 0, pixels * sizeof(uint32_t), stream));
        RangesKernel<<<cuda::BlocksFor(count, 256), 256, 0, stream>>>(
            dkeys.Current(), count, range_start.get(), range_end.get());
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RangesKernel);
        CompositePairwiseKernel<<<cuda::BlocksFor(pixels * 32, 256), 256, 0, stream>>>(
            dvals.Current(), rgba.get(), range_start.get(), range_end.get(), g, bg, image.get(), w,
            partial);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CompositePairwiseKernel);
      } else {
        FillBackgroundKernel<<<cuda::BlocksFor(pixels, 256), 256, 0, stream>>>(g, bg, image.get(),
                                                                               w, partial);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FillBackgroundKernel);
        auto pix = thrust::make_transform_iterator(dkeys.Current(), PixelOfKey{});
        auto val = thrust::make_transform_iterator(dvals.Current(), GatherRgba{rgba.get()});
        size_t scan_bytes = temp.bytes();
        FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveScanByKey(
            temp.get(), scan_bytes, pix, val, scanned.get(), OverOp{}, count,
            ::cuda::std::equal_to<uint32_t>{}, stream));
        ScanLastKernel<<<cuda::BlocksFor(count, 256), 256, 0, stream>>>(
            dkeys.Current(), count, scanned.get(), g, bg, image.get(), w, partial);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ScanLastKernel);
      }
      FRESNEL_RETURN_IF_ERROR(timer.Stop());
    }
    if (job.on_block != nullptr) {
      FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.d2h_s));
      partial_host.resize(4 * pixels);
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(partial_host.data(), partial_dev.get(),
                                                   pixels * sizeof(float4),
                                                   cudaMemcpyDeviceToHost, stream));
      FRESNEL_RETURN_IF_ERROR(timer.Stop());
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
      PartialFrame frame;
      frame.block = block;
      frame.num_blocks = num_blocks;
      frame.x0 = g.bx, frame.y0 = g.by, frame.stride = stride;
      frame.width = g.width, frame.height = g.height;
      frame.rgba = partial_host.data();
      FRESNEL_RETURN_IF_ERROR((*job.on_block)(frame));
    }
  }
  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.d2h_s));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(result->image.raw(), image.get(), image.bytes(),
                                               cudaMemcpyDeviceToHost, stream));
  FRESNEL_RETURN_IF_ERROR(timer.Stop());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  FRESNEL_RETURN_IF_ERROR(timer.Collect(true));
  stats.peak_device_bytes = peak_bytes + mesh_bytes;
  return absl::OkStatus();
}

}  // namespace fresnel::volume
