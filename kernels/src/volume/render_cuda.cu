// CUDA backend: cell projection with hash blocks, CUB radix sort and front-to-back compositing.
//
// Per frame:
//   1. ProjectKernel: every point to continuous pixel coordinates (NaN when behind the eye).
//   2. BoxKernel: every tetrahedron's box of covered pixel centres; boxes of more than
//      kSmallTetPixels pixels go to a list that is worked on by one warp per tetrahedron.
//   3. CountKernel (scan conversion, counting): every tetrahedron intersects the rays of the
//      pixels in its box (volume_math.h: the CPU's code) and counts the hits per
//      (x mod 8, y mod 8) bin, so the records of every hash block are known exactly.
//      RenderOptions::scan_conversion picks how (ScanConversion): kThread as just said;
//      kWarpList: the candidates of a small tetrahedron are the row spans of its projected
//      hull (scan_math.h) and a warp's lanes share one list of (tetrahedron, pixel) candidates
//      (CountListKernel / RecordListKernel; chunks: CountChunkListKernel /
//      RecordChunkListKernel); kWarpListOnePass (kAuto): the same lists, but the count pass
//      counts candidates without a ray test and every candidate gets a record, a miss a
//      transparent one — one exact test per candidate instead of two.
//   4. Passes: consecutive hash blocks (pixels with equal (x, y) mod 2^bits) whose records fit
//      max_pass_records. RecordKernel writes a pass's records into per-block regions: sort key
//      (local pixel, depth) and the segment's premultiplied RGBA (the transfer function
//      integrated along it), placed with per-thread-block prefix counts in shared memory.
//   5. Per hash block: cub::DeviceRadixSort::SortPairs over (key, record index), then
//      compositing front to back per pixel — kPairwise (a warp per pixel, order-preserving
//      shuffle reductions of "over") or kSegmentedScan (cub::DeviceScan::InclusiveScanByKey with
//      "over", the last record of each pixel) — and the partial frame to the host if asked.
//   6. The image (float, or RGBA8 converted on the device) to the host.
// Memory per frame: points × 8 B + tetrahedra × 12 B + image + a pass's records × 24 B (key,
// index, RGBA) + the largest block's × 8 B (the sort's second buffers) + CUB temporaries.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/transform_iterator.h>

#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "volume/scan_math.h"
#include "volume/volume_cuda.cuh"
#include "volume/volume_internal.h"
#include "volume/volume_math.h"
#include "volume/walk_math.h"

namespace fresnel::volume {

using cuda_volume::StageTimer;

// Build option FRESNEL_VOLUME_AUTO_METHOD (CMake: WALK = 1, the default; CELL = 0): whether
// CudaMethod::kAuto takes the ray walk (walk_cuda.cu) when every ray starts outside the mesh.
// H200, 1024², RGBA8 (docs/volume.md), one-pass cell projection vs walk, ms: Blunt Fin 6.56 /
// 3.29, grid 6 M 11.32 / 4.78, grid 35 M 24.31 / 8.49. The source's own default is CELL.
#ifndef FRESNEL_VOLUME_AUTO_WALK
#define FRESNEL_VOLUME_AUTO_WALK 0
#endif
constexpr bool kAutoWalk = FRESNEL_VOLUME_AUTO_WALK != 0;

void CudaMeshDeleter::operator()(CudaMesh* mesh) const {
  if (mesh == nullptr) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(mesh->ordinal);
  cudaFree(mesh->points);
  cudaFree(mesh->tets);
  cudaFree(mesh->neighbors);
  cudaFree(mesh->walk_tets);
  cudaFree(mesh->boundary_faces);
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
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int64_t i = 0; i < out->num_points; ++i) {
    points[i] = make_float4(mesh.points_xyz[3 * i], mesh.points_xyz[3 * i + 1],
                            mesh.points_xyz[3 * i + 2], mesh.scalars[i]);
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], mesh.points_xyz[3 * i + k]);
      hi[k] = std::max(hi[k], mesh.points_xyz[3 * i + k]);
    }
  }
  double r2 = 0;
  for (int k = 0; k < 3; ++k) {
    out->centre[k] = 0.5f * (lo[k] + hi[k]);
    r2 += 0.25 * (double{hi[k]} - lo[k]) * (double{hi[k]} - lo[k]);
  }
  out->radius = static_cast<float>(std::sqrt(r2) * 1.001 + 1e-6);
  for (int k = 0; k < 3; ++k) out->lo[k] = lo[k], out->hi[k] = hi[k];
  const std::vector<int32_t> neighbors = FaceNeighbors(mesh.tets);
  const std::vector<float> walk_tets = BuildWalkTets(mesh);
  // Face ids 4·tet + face are int32 (the walk takes at most 2^29 tetrahedra; bigger meshes
  // render by cell projection and keep no list).
  std::vector<int32_t> boundary;
  if (4 * out->num_tets <= INT32_MAX) {
    for (size_t f = 0; f < neighbors.size(); ++f)
      if (neighbors[f] < 0) boundary.push_back(static_cast<int32_t>(f));
  }
  out->num_boundary_faces = static_cast<int64_t>(boundary.size());
  // Persistent buffers live outside the stream-ordered pool: they outlast every stream's work.
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&out->points, std::max<size_t>(16, points.size() * sizeof(float4))));
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&out->tets, std::max<size_t>(16, out->num_tets * sizeof(int4))));
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&out->neighbors, std::max<size_t>(16, out->num_tets * sizeof(int4))));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->neighbors, neighbors.data(),
                                               out->num_tets * sizeof(int4),
                                               cudaMemcpyHostToDevice, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->points, points.data(),
                                               points.size() * sizeof(float4),
                                               cudaMemcpyHostToDevice, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->tets, mesh.tets.data(),
                                               out->num_tets * sizeof(int4),
                                               cudaMemcpyHostToDevice, stream));
  static_assert(math::kWalkTetFloats == 5 * 4, "WalkTet is five float4");
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMalloc(
      &out->walk_tets, std::max<size_t>(16, walk_tets.size() * sizeof(float))));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMalloc(
      &out->boundary_faces, std::max<size_t>(16, boundary.size() * sizeof(int32_t))));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->walk_tets, walk_tets.data(),
                                               walk_tets.size() * sizeof(float),
                                               cudaMemcpyHostToDevice, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->boundary_faces, boundary.data(),
                                               boundary.size() * sizeof(int32_t),
                                               cudaMemcpyHostToDevice, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  *device_bytes = CudaMeshBytes(out->num_points, out->num_tets);
  return out;
}

namespace {

using math::Rgba;
using math::V3;

constexpr int kThreads = 256;
// The count pass bins hits by (x mod 8, y mod 8); 16 blocks fold these bins by 2 × 2.
constexpr int kCountBits = 3;
constexpr int kBins = 1 << (2 * kCountBits);
// Tetrahedra whose box holds more pixels than this are cut into chunks of kChunkPixels, one
// warp each: Blunt Fin's largest cells cover 10^4-10^5 pixels at 1024², and one thread walking
// them held a frame behind a handful of threads (55 ms of 62 in the first measurement; a warp
// per tetrahedron still left 5 ms). Small ones keep the hits of the count pass as a 64-bit mask,
// so the record pass intersects only the hits again (at 35 M tetrahedra 1 candidate in 4 hits).
constexpr int kSmallTetPixels = 64;
constexpr int kChunkPixels = 512;
// Build option FRESNEL_VOLUME_SCAN_FILTER (CMake: OFF = 0, ALL = 1, CHUNKS = 2, the default):
//  ALL (1): the count pass skips box pixels outside the tetrahedron's projected hull
//    (HullCovers) before the exact ray test, for small tetrahedra and chunks alike; and the
//    lanes of chunks keep their hits as bits like small tetrahedra do (chunk_masks), so the
//    record pass intersects only the hits again (without them a chunk intersects every
//    candidate twice more in the record pass: once to count, once to write).
//  CHUNKS (2): the same, but the hull test only for chunks, and the count and record kernels
//    compiled apart for small tetrahedra and chunks (the small ones keep their registers).
// H200, 1024² (docs/volume.md): Blunt Fin's records stage 5.60 (OFF) → 3.90 (CHUNKS) / 4.13
// (ALL) ms; the generated meshes (a thread per small tetrahedron) as OFF with CHUNKS, 10–17 %
// slower with ALL. With the filter, 68 of Blunt Fin's 25.3 M hits (slivers accepted by the
// plane test's rounding more than the margin outside their projection) are dropped.
//  CANDIDATES (3): as CHUNKS, and small tetrahedra first mark the hull's candidates of their box
//    (cheap), then run the exact test on those alone: a lane's exact tests are its candidates,
//    not its box. Not run on a GPU yet.
// The source's own default (no definition) is OFF.
#ifndef FRESNEL_VOLUME_SCAN_FILTER
#define FRESNEL_VOLUME_SCAN_FILTER 0
#endif
constexpr int kScanFilterMode = FRESNEL_VOLUME_SCAN_FILTER;
static_assert(kScanFilterMode >= 0 && kScanFilterMode <= 3, "FRESNEL_VOLUME_SCAN_FILTER: 0 to 3");
constexpr bool kScanFilter = kScanFilterMode != 0;  // chunk hit masks
// Kernel paths: -1 = one kernel for both, `big` chosen at run time; 0 = small tetrahedra only;
// 1 = chunks only.
constexpr int kSmallPath = kScanFilterMode >= 2 ? 0 : -1;
constexpr int kBigPath = kScanFilterMode >= 2 ? 1 : -1;
// Whether the count pass's per-pixel loop tests the hull (CANDIDATES: small ones apart).
__host__ __device__ constexpr bool HullFilterOn(bool big) {
  return kScanFilterMode == 1 || (kScanFilterMode >= 2 && big);
}
// Hit bits per lane of a chunk's warp: one per step of 32 pixels (kChunkPixels / 32 = 16); a
// small tetrahedron keeps 64 (one per box pixel).
using ChunkMask = uint16_t;
static_assert(kChunkPixels / 32 <= 16, "a lane's chunk mask has 16 bits");
static_assert(kSmallTetPixels <= 64, "a small tetrahedron's mask has 64 bits");
// Screen-space pre-filter margin, pixels: far above the projection's rounding (~1e-4 pixel).
constexpr float kHullMarginPx = 0.05f;
// Projected coordinates past this (pixels) skip the pre-filter (edge functions lose precision).
constexpr float kHullMaxCoord = 32768.0f;

__device__ __forceinline__ V3 Xyz(float4 p) { return {p.x, p.y, p.z}; }
__device__ __forceinline__ Rgba ToRgba(float4 v) { return {v.x, v.y, v.z, v.w}; }
__device__ __forceinline__ float4 ToFloat4(Rgba v) { return make_float4(v.r, v.g, v.b, v.a); }

// Per-frame constants of the record pass.
struct FrameParams {
  math::CameraFrame cam;
  int bits;           // hash block bits: block of pixel (x, y) = (y & m)·2^bits + (x & m)
  int depth_bits;     // 32-bit keys: local pixel << depth_bits | quantised depth; 0: 64-bit keys
  float depth_near;   // t of depth 0 (bounding sphere of the mesh)
  float depth_scale;  // quantisation steps per unit of t
};

__global__ void ProjectKernel(const float4* __restrict__ points, int64_t n,
                              math::CameraFrame cam, float2* __restrict__ screen) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  float x, y;
  if (!math::ProjectPoint(cam, Xyz(points[i]), &x, &y)) x = y = NAN;
  screen[i] = make_float2(x, y);
}

// Box of the pixel centres [x0, x1] × [y0, y1] under the tetrahedron's projection (int16: image
// sides <= 8192; x0 > x1 when empty). The box is widened by 0.01 pixel, far above the float
// rounding of the projection (~1e-4 pixel at 8192), so every pixel whose ray the exact test
// would accept is inside. Tetrahedra with a point behind the eye cover the whole image.
// Boxes over kSmallTetPixels are cut into (tetrahedron, first pixel) chunks, appended with one
// atomic per warp; past `chunk_capacity` they are only counted (the host grows the list).
__global__ void BoxKernel(const int4* __restrict__ tets, int64_t n, const float2* __restrict__ screen,
                          int width, int height, short4* __restrict__ boxes,
                          int2* __restrict__ chunks, unsigned int chunk_capacity,
                          unsigned int* __restrict__ chunk_count) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  int64_t area = 0;
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
    int bx0 = 1, bx1 = 0, by0 = 1, by1 = 0;
    if (!all) {
      bx0 = 0, bx1 = width - 1, by0 = 0, by1 = height - 1;
    } else {
      const float lx = fmaxf(ceilf(x0 - 0.01f), 0.0f), hx = fminf(floorf(x1 + 0.01f), width - 1.0f);
      const float ly = fmaxf(ceilf(y0 - 0.01f), 0.0f), hy = fminf(floorf(y1 + 0.01f), height - 1.0f);
      if (lx <= hx && ly <= hy) {
        bx0 = static_cast<int>(lx), bx1 = static_cast<int>(hx);
        by0 = static_cast<int>(ly), by1 = static_cast<int>(hy);
      }
    }
    boxes[t] = make_short4(bx0, bx1, by0, by1);
    if (bx0 <= bx1) area = int64_t{bx1 - bx0 + 1} * (by1 - by0 + 1);
  }
  const unsigned mine =
      area > kSmallTetPixels ? static_cast<unsigned>((area + kChunkPixels - 1) / kChunkPixels) : 0;
  // Warp-inclusive scan of the chunk counts, one atomic for the warp.
  const int lane = threadIdx.x & 31;
  unsigned incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  const unsigned total = __shfl_sync(0xffffffffu, incl, 31);
  if (total == 0) return;
  unsigned base = 0;
  if (lane == 31) base = atomicAdd(chunk_count, total);
  base = __shfl_sync(0xffffffffu, base, 31) + incl - mine;
  for (unsigned c = 0; c < mine; ++c)
    if (base + c < chunk_capacity)
      chunks[base + c] = make_int2(static_cast<int>(t), static_cast<int>(c * kChunkPixels));
}

// What one thread (small tetrahedra) or one warp (a chunk of a big one) works on.
struct Work {
  int64_t t;
  short4 box;
  int bw;            // box width
  int k, k_end, dk;  // pixels k, k + dk, ... < k_end of the box, row-major
  math::TetPlanes tp;
  float a[4];        // RayOffsets at the eye (perspective)
};

__device__ __forceinline__ bool LoadWork(const int4* __restrict__ tets, int64_t n,
                                         const float4* __restrict__ points,
                                         const short4* __restrict__ boxes,
                                         const int2* __restrict__ chunks, unsigned chunk_count,
                                         bool big, const math::CameraFrame& cam, bool planes,
                                         Work* w) {
  const int64_t gid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  int first = 0;
  if (big) {
    const int64_t c = gid >> 5;
    if (c >= chunk_count) return false;
    const int2 e = chunks[c];
    w->t = e.x;
    first = e.y;
  } else {
    w->t = gid;
    if (w->t >= n) return false;
  }
  w->box = boxes[w->t];
  if (w->box.x > w->box.y) return false;
  w->bw = w->box.y - w->box.x + 1;
  const int area = w->bw * (w->box.w - w->box.z + 1);
  if (big) {
    w->k = first + (threadIdx.x & 31);
    w->k_end = min(area, first + kChunkPixels);
    w->dk = 32;
  } else {
    if (area > kSmallTetPixels) return false;  // chunks of it go to warps
    w->k = 0;
    w->k_end = area;
    w->dk = 1;
  }
  if (!planes) return true;
  const int4 v = tets[w->t];
  const float4 q[4] = {__ldg(&points[v.x]), __ldg(&points[v.y]), __ldg(&points[v.z]),
                       __ldg(&points[v.w])};
  const V3 p[4] = {Xyz(q[0]), Xyz(q[1]), Xyz(q[2]), Xyz(q[3])};
  const float s[4] = {q[0].w, q[1].w, q[2].w, q[3].w};
  if (!math::PrepareTet(p, s, &w->tp)) return false;
  if (!cam.orthographic) math::RayOffsets(w->tp, cam.eye, w->a);
  return true;
}

// The exact ray test of pixel (x, y); `a_eye` = RayOffsets at the eye (perspective only).
__device__ __forceinline__ bool HitPixelPlanes(const math::TetPlanes& tp, const float a_eye[4],
                                               const math::CameraFrame& cam, int x, int y,
                                               math::TetHit* hit) {
  V3 o, d;
  math::PixelRay(cam, x, y, &o, &d);
  if (!cam.orthographic) return math::IntersectWithOffsets(tp, a_eye, o, d, hit);
  float a[4];
  math::RayOffsets(tp, o, a);
  return math::IntersectWithOffsets(tp, a, o, d, hit);
}

// Per pixel of the image (ScanConversion::kWarpList) what PixelRay gives that varies with the
// pixel: the direction (perspective; the origin is the eye) or the origin (orthographic; the
// direction is `forward`), computed once per frame with the same float operations, so a lookup
// equals the computation bit for bit and the exact tests skip its square root and division.
__global__ void RayKernel(math::CameraFrame cam, float4* __restrict__ rays) {
  const int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (p >= int64_t{cam.width} * cam.height) return;
  V3 o, d;
  math::PixelRay(cam, static_cast<int>(p % cam.width), static_cast<int>(p / cam.width), &o, &d);
  const V3 v = cam.orthographic ? o : d;
  rays[p] = make_float4(v.x, v.y, v.z, 0.0f);
}

__device__ __forceinline__ bool HitPixelRays(const math::TetPlanes& tp, const float a_eye[4],
                                             const math::CameraFrame& cam,
                                             const float4* __restrict__ rays, int x, int y,
                                             math::TetHit* hit) {
  const float4 r = __ldg(&rays[int64_t{y} * cam.width + x]);
  const V3 v = {r.x, r.y, r.z};
  if (!cam.orthographic) return math::IntersectWithOffsets(tp, a_eye, cam.eye, v, hit);
  float a[4];
  math::RayOffsets(tp, v, a);
  return math::IntersectWithOffsets(tp, a, v, cam.forward, hit);
}

__device__ __forceinline__ bool HitPixel(const Work& w, const math::CameraFrame& cam, int x, int y,
                                         math::TetHit* hit) {
  return HitPixelPlanes(w.tp, w.a, cam, x, y, hit);
}

// Screen-space test before the exact one (kScanFilter): the projection of a tetrahedron (every
// point in front of the eye) is the convex hull of its four projected points, the union of the
// four triangles of three of them. A pixel centre farther than kHullMarginPx outside every
// triangle is skipped: for a proper tetrahedron the exact ray test (whose rounding moves the ray
// ~1e-4 pixel) would reject it too; slivers can pass that test by rounding farther out (seen:
// 68 of Blunt Fin's 25.3 M hits), and those are dropped. Each triangle is taken in both
// orientations, so a (nearly) flat one accepts a band of the margin around it.
struct Hull {
  float x[4], y[4];
  float margin[6];  // kHullMarginPx · |edge| for edges 01 02 03 12 13 23
  bool valid;       // false: no filter (a point behind the eye or far off the image)
};

__device__ __forceinline__ void LoadHull(const int4* __restrict__ tets, int64_t t,
                                         const float2* __restrict__ screen, Hull* h) {
  const int4 v = tets[t];
  const int ids[4] = {v.x, v.y, v.z, v.w};
  h->valid = true;
  for (int i = 0; i < 4; ++i) {
    const float2 s = screen[ids[i]];
    h->x[i] = s.x, h->y[i] = s.y;
    // NaN fails both comparisons.
    h->valid = h->valid && fabsf(s.x) < kHullMaxCoord && fabsf(s.y) < kHullMaxCoord;
  }
  const int ea[6] = {0, 0, 0, 1, 1, 2}, eb[6] = {1, 2, 3, 2, 3, 3};
  for (int e = 0; e < 6; ++e) {
    const float dx = h->x[eb[e]] - h->x[ea[e]], dy = h->y[eb[e]] - h->y[ea[e]];
    h->margin[e] = kHullMarginPx * sqrtf(dx * dx + dy * dy);
  }
}

__device__ __forceinline__ bool HullCovers(const Hull& h, float px, float py) {
  if (!h.valid) return true;
  // Edge function of a → b at p: (p − a) × (b − a); the margin is in the same units.
  auto edge = [&](int a, int b) {
    return (px - h.x[a]) * (h.y[b] - h.y[a]) - (py - h.y[a]) * (h.x[b] - h.x[a]);
  };
  const float e01 = edge(0, 1), e02 = edge(0, 2), e03 = edge(0, 3);
  const float e12 = edge(1, 2), e13 = edge(1, 3), e23 = edge(2, 3);
  // Triangle a b c from edges ab, bc and ca = −ac.
  auto tri = [](float ab, float bc, float ca, float mab, float mbc, float mca) {
    return (ab >= -mab && bc >= -mbc && ca >= -mca) || (ab <= mab && bc <= mbc && ca <= mca);
  };
  const float* m = h.margin;
  return tri(e01, e12, -e02, m[0], m[3], m[1]) || tri(e01, e13, -e03, m[0], m[4], m[2]) ||
         tri(e02, e23, -e03, m[1], m[5], m[2]) || tri(e12, e23, -e13, m[3], m[5], m[4]);
}

// The count passes' last step: the thread block's bins into the global ones.
__device__ __forceinline__ void FlushBins(const unsigned int* hist,
                                          unsigned long long* __restrict__ bins) {
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += blockDim.x)
    if (hist[i] > 0) atomicAdd(&bins[i], static_cast<unsigned long long>(hist[i]));
}

// The record passes' first step: the transfer function into shared memory, the thread block's
// per-hash-block counts and cursors zeroed.
__device__ __forceinline__ void StartRecordBlock(const math::TfTable& tf_param, math::TfTable* tf,
                                                 unsigned int* count, unsigned int* cursor) {
  cuda_volume::CopyTfTable(tf_param, tf, threadIdx.x, blockDim.x);
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) count[i] = cursor[i] = 0;
  __syncthreads();
}

// One range of slots per hash block of the pass for the thread block's `count` records
// (every thread calls it).
__device__ __forceinline__ void ReserveSlots(const unsigned int* count, int blocks,
                                             unsigned long long* __restrict__ cursors,
                                             unsigned long long* base) {
  __syncthreads();
  for (int i = threadIdx.x; i < blocks; i += blockDim.x)
    if (count[i] > 0) base[i] = atomicAdd(&cursors[i], static_cast<unsigned long long>(count[i]));
  __syncthreads();
}

// The pass's index of pixel (x, y)'s hash block, -1 when outside [begin, end).
struct PassBlocks {
  int bits, begin, end;
  __device__ __forceinline__ int operator()(int x, int y) const {
    const int m = (1 << bits) - 1;
    const int block = ((y & m) << bits) | (x & m);
    return block >= begin && block < end ? block - begin : -1;
  }
};

// Pass 1: hits per (x mod 8, y mod 8) bin, exact, for sizing the record buffers; small
// tetrahedra also keep which of their box's pixels they hit (`masks`), and with kScanFilter so
// do the lanes of chunks (`chunk_masks`).
template <int kPath>
__global__ void __launch_bounds__(kThreads)
CountKernel(const int4* __restrict__ tets, int64_t n, const float4* __restrict__ points,
            const float2* __restrict__ screen, const short4* __restrict__ boxes,
            const int2* __restrict__ chunks, unsigned chunk_count, bool big_arg,
            math::CameraFrame cam, unsigned long long* __restrict__ masks,
            ChunkMask* __restrict__ chunk_masks, unsigned long long* __restrict__ bins) {
  const bool big = kPath < 0 ? big_arg : kPath == 1;
  const bool filter = kPath < 0 ? HullFilterOn(big) : HullFilterOn(kPath == 1);
  __shared__ unsigned int hist[kBins];
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  Work w;
  unsigned long long mask = 0;
  if constexpr (kScanFilterMode == 3 && kPath == 0) {
    // Small tetrahedra: the box's pixels inside the hull first (bit k = box pixel k, row-major),
    // then the planes and the exact test for those alone.
    if (LoadWork(tets, n, points, boxes, chunks, chunk_count, false, cam, false, &w)) {
      Hull hull;
      LoadHull(tets, w.t, screen, &hull);
      unsigned long long candidates = 0;
      int k = 0;
      for (int y = w.box.z; y <= w.box.w; ++y)
        for (int x = w.box.x; x <= w.box.y; ++x, ++k)
          if (HullCovers(hull, static_cast<float>(x), static_cast<float>(y)))
            candidates |= 1ull << k;
      if (candidates != 0 &&
          LoadWork(tets, n, points, boxes, chunks, chunk_count, false, cam, true, &w)) {
        for (unsigned long long rest = candidates; rest != 0; rest &= rest - 1) {
          const int c = __ffsll(static_cast<long long>(rest)) - 1;
          const int x = w.box.x + c % w.bw, y = w.box.z + c / w.bw;
          math::TetHit hit;
          if (HitPixel(w, cam, x, y, &hit)) {
            atomicAdd(&hist[((y & 7) << kCountBits) | (x & 7)], 1u);
            mask |= 1ull << c;
          }
        }
      }
    }
  } else if (LoadWork(tets, n, points, boxes, chunks, chunk_count, big, cam, true, &w)) {
    Hull hull;
    if constexpr (kScanFilter) {
      if (filter) LoadHull(tets, w.t, screen, &hull);
    }
    for (int k = w.k, j = 0; k < w.k_end; k += w.dk, ++j) {
      const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
      if constexpr (kScanFilter) {
        if (filter && !HullCovers(hull, static_cast<float>(x), static_cast<float>(y))) continue;
      }
      math::TetHit hit;
      if (HitPixel(w, cam, x, y, &hit)) {
        atomicAdd(&hist[((y & 7) << kCountBits) | (x & 7)], 1u);
        mask |= 1ull << j;
      }
    }
  }
  const int64_t gid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (!big) {
    if (gid < n) masks[gid] = mask;
  } else if (kScanFilter && (gid >> 5) < chunk_count) {
    chunk_masks[gid] = static_cast<ChunkMask>(mask);
  }
  FlushBins(hist, bins);
}

template <class Key>
__device__ __forceinline__ Key MakeKey(const FrameParams& f, uint32_t local_pixel, float t_mid);
template <>
__device__ __forceinline__ uint32_t MakeKey<uint32_t>(const FrameParams& f, uint32_t local_pixel,
                                                      float t_mid) {
  const float max_q = static_cast<float>((1u << f.depth_bits) - 1);
  const float q = fminf(fmaxf((t_mid - f.depth_near) * f.depth_scale, 0.0f), max_q);
  return (local_pixel << f.depth_bits) | static_cast<uint32_t>(q);
}
template <>
__device__ __forceinline__ unsigned long long MakeKey<unsigned long long>(const FrameParams&,
                                                                          uint32_t local_pixel,
                                                                          float t_mid) {
  return (static_cast<unsigned long long>(local_pixel) << 32) | __float_as_uint(t_mid);
}

// Writes the record of pixel (x, y) into `slot`: key (local pixel of its hash block, depth of
// the segment's midpoint), its index, and the segment's premultiplied RGBA. `valid` false: a
// transparent record (the identity of "over") for a slot whose hit did not repeat.
template <class Key>
__device__ __forceinline__ void EmitRecord(const FrameParams& f, const math::TfTable& tf, int x,
                                           int y, unsigned long long slot,
                                           const math::TetHit& hit, bool valid,
                                           Key* __restrict__ keys,
                                           uint32_t* __restrict__ values,
                                           float4* __restrict__ rgba) {
  const int stride = 1 << f.bits, m = stride - 1;
  const int bx = x & m;
  const uint32_t lattice_w = static_cast<uint32_t>((f.cam.width - bx + stride - 1) >> f.bits);
  const uint32_t local = static_cast<uint32_t>(y >> f.bits) * lattice_w +
                         static_cast<uint32_t>(x >> f.bits);
  keys[slot] = MakeKey<Key>(f, local, valid ? 0.5f * (hit.t_in + hit.t_out) : 0.0f);
  values[slot] = static_cast<uint32_t>(slot);
  rgba[slot] = valid ? ToFloat4(math::IntegrateSegment(tf, hit.s_in, hit.s_out,
                                                       hit.t_out - hit.t_in))
                     : make_float4(0, 0, 0, 0);
}

// Pass 2, for the hash blocks [block_begin, block_end): every hit becomes a record in its
// block's region of the pass buffers. Slots: the thread block counts its hits per hash block in
// shared memory, takes one range per hash block from the global cursors (set by the host to each
// block's offset), and hands out slots from it with shared atomics — per-thread-block prefix
// counts instead of a device-wide scan. Small tetrahedra (and with kScanFilter the lanes of
// chunks) walk the hit masks of the count pass and intersect only the hits again; otherwise
// chunks of big ones intersect twice (count, then write).
template <class Key, int kPath>
__global__ void __launch_bounds__(kThreads)
RecordKernel(const int4* __restrict__ tets, int64_t n, const float4* __restrict__ points,
             const short4* __restrict__ boxes, const int2* __restrict__ chunks,
             unsigned chunk_count, bool big_arg, const unsigned long long* __restrict__ masks,
             const ChunkMask* __restrict__ chunk_masks, FrameParams f, math::TfTable tf_param,
             int block_begin, int block_end,
             unsigned long long* __restrict__ cursors, Key* __restrict__ keys,
             uint32_t* __restrict__ values, float4* __restrict__ rgba) {
  const bool big = kPath < 0 ? big_arg : kPath == 1;
  __shared__ math::TfTable tf;
  __shared__ unsigned int count[kBins], cursor[kBins];
  __shared__ unsigned long long base[kBins];
  StartRecordBlock(tf_param, &tf, count, cursor);
  Work w;
  const int64_t gid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  // Chunks without masks intersect every candidate (count here, then write below).
  const bool walk_all = big && !kScanFilter;
  unsigned long long mask = 0;
  bool active = false;
  if (walk_all) {
    active = LoadWork(tets, n, points, boxes, chunks, chunk_count, true, f.cam, true, &w);
  } else {
    if (big) {
      mask = (gid >> 5) < chunk_count ? chunk_masks[gid] : 0;
    } else {
      mask = gid < n ? masks[gid] : 0;
    }
    // The box is needed for the pixel positions; the planes only if a hit is in this pass.
    active = mask != 0 && LoadWork(tets, n, points, boxes, chunks, chunk_count, big, f.cam,
                                   false, &w);
  }
  const PassBlocks in_pass{f.bits, block_begin, block_end};
  // Bit j of the mask is the box's pixel k = w.k + j·w.dk (the count pass's j-th step).
  bool planes_loaded = walk_all;
  if (active && walk_all) {
    for (int k = w.k; k < w.k_end; k += w.dk) {
      const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
      const int i = in_pass(x, y);
      math::TetHit hit;
      if (i >= 0 && HitPixel(w, f.cam, x, y, &hit)) atomicAdd(&count[i], 1u);
    }
  } else if (active) {
    for (unsigned long long rest = mask; rest != 0; rest &= rest - 1) {
      const int k = w.k + (__ffsll(static_cast<long long>(rest)) - 1) * w.dk;
      const int i = in_pass(w.box.x + k % w.bw, w.box.z + k / w.bw);
      if (i >= 0) atomicAdd(&count[i], 1u);
    }
  }
  ReserveSlots(count, block_end - block_begin, cursors, base);
  if (!active) return;
  auto emit = [&](int x, int y, int i, const math::TetHit& hit) {
    const unsigned long long slot = base[i] + atomicAdd(&cursor[i], 1u);
    EmitRecord(f, tf, x, y, slot, hit, true, keys, values, rgba);
  };
  if (walk_all) {
    for (int k = w.k; k < w.k_end; k += w.dk) {
      const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
      const int i = in_pass(x, y);
      math::TetHit hit;
      if (i >= 0 && HitPixel(w, f.cam, x, y, &hit)) emit(x, y, i, hit);
    }
    return;
  }
  for (unsigned long long rest = mask; rest != 0; rest &= rest - 1) {
    const int k = w.k + (__ffsll(static_cast<long long>(rest)) - 1) * w.dk;
    const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
    const int i = in_pass(x, y);
    if (i < 0) continue;
    if (!planes_loaded) {
      // Same inputs, same float operations as the count pass: the hit repeats exactly.
      LoadWork(tets, n, points, boxes, chunks, chunk_count, big, f.cam, true, &w);
      planes_loaded = true;
    }
    math::TetHit hit;
    if (HitPixel(w, f.cam, x, y, &hit)) emit(x, y, i, hit);
  }
}

// ---- ScanConversion::kWarpList: spans and a warp-shared candidate list -------------------------
//
// The thread-per-tetrahedron path runs the exact ray test on every pixel of a box (2-4 box
// pixels per hit), and a warp runs as long as its largest box. Here each lane (one small
// tetrahedron) first finds its candidate pixels from the projected hull, row by row (cheap, no
// division per pixel), writes its planes to shared memory and appends its candidates to the
// warp's list; the 32 lanes then take the list 32 items at a time, each item the exact test of
// one (tetrahedron, pixel). The count pass leaves the same per-box-pixel hit masks as the thread
// path; the record pass lists the hits of the pass the same way (the exact test again, then the
// segment's integration and the record).
// What ScanConversion::kAuto picks: the one-pass warp lists, the fastest frame on every mesh
// measured (H200, 1024², RGBA8, docs/volume.md; thread / list / one-pass, ms): Blunt Fin 7.37 /
// 6.81 / 6.38, grid 1 M 13.37 / 11.29 / 10.43, 6 M 13.51 / 13.04 / 11.24, 35 M (one record
// pass) 25.90 / 25.05 / 24.35.
constexpr ScanConversion kAutoScanConversion = ScanConversion::kWarpListOnePass;
constexpr int kListThreads = 128;  // 4 warps: the lists fit static shared memory with the TF
constexpr int kListWarps = kListThreads / 32;
// Per lane: normals n[4] (12 floats), face points q[4] (12), 1/D (4), scalars (4), eye offsets (4).
constexpr int kPlaneFloats = 36;

struct WarpList {
  float planes[kPlaneFloats][32];                 // field-major: lane l's field f at [f][l]
  short box_x[32], box_y[32], box_w[32];
  unsigned long long hits[32];                    // count pass: hits found per lane's box
  uint16_t items[32 * kSmallTetPixels];           // lane << 6 | box pixel, grouped by lane
};

__device__ __forceinline__ void StoreLane(WarpList& L, int lane, const Work& w) {
  for (int i = 0; i < 4; ++i) {
    L.planes[3 * i][lane] = w.tp.n[i].x;
    L.planes[3 * i + 1][lane] = w.tp.n[i].y;
    L.planes[3 * i + 2][lane] = w.tp.n[i].z;
    L.planes[12 + 3 * i][lane] = w.tp.q[i].x;
    L.planes[13 + 3 * i][lane] = w.tp.q[i].y;
    L.planes[14 + 3 * i][lane] = w.tp.q[i].z;
    L.planes[24 + i][lane] = w.tp.inv[i];
    L.planes[28 + i][lane] = w.tp.s[i];
    L.planes[32 + i][lane] = w.a[i];
  }
  L.box_x[lane] = w.box.x;
  L.box_y[lane] = w.box.z;
  L.box_w[lane] = static_cast<short>(w.bw);
}

__device__ __forceinline__ void LoadLane(const WarpList& L, int lane, math::TetPlanes* tp,
                                         float a[4]) {
  for (int i = 0; i < 4; ++i) {
    tp->n[i] = {L.planes[3 * i][lane], L.planes[3 * i + 1][lane], L.planes[3 * i + 2][lane]};
    tp->q[i] = {L.planes[12 + 3 * i][lane], L.planes[13 + 3 * i][lane],
                L.planes[14 + 3 * i][lane]};
    tp->inv[i] = L.planes[24 + i][lane];
    tp->s[i] = L.planes[28 + i][lane];
    a[i] = L.planes[32 + i][lane];
  }
}

// Candidate pixels of a small tetrahedron's box (bit k = box pixel k, row-major): the row spans
// of its projected hull widened by kHullMarginPx (scan_math.h), or every box pixel when a point
// projects past kHullMaxCoord.
__device__ __forceinline__ unsigned long long SpanCandidates(const int4* __restrict__ tets,
                                                             const float2* __restrict__ screen,
                                                             const Work& w) {
  const int4 v = tets[w.t];
  const int ids[4] = {v.x, v.y, v.z, v.w};
  float px[4], py[4];
  bool valid = true;
  for (int i = 0; i < 4; ++i) {
    const float2 p = screen[ids[i]];
    px[i] = p.x, py[i] = p.y;
    valid = valid && fabsf(p.x) < kHullMaxCoord && fabsf(p.y) < kHullMaxCoord;  // NaN: false
  }
  if (!valid) {
    const int area = w.bw * (w.box.w - w.box.z + 1);
    return area >= 64 ? ~0ull : (1ull << area) - 1;
  }
  return math::SpanCandidates(px, py, w.box.x, w.box.y, w.box.z, w.box.w, kHullMarginPx);
}

// Adds the warp's `hits` to *hit_count (one atomic per warp; every lane calls it).
__device__ __forceinline__ void AddHits(unsigned hits, int lane,
                                        unsigned long long* __restrict__ hit_count) {
  for (int o = 16; o > 0; o >>= 1) hits += __shfl_down_sync(0xffffffffu, hits, o);
  if (lane == 0 && hits > 0) atomicAdd(hit_count, static_cast<unsigned long long>(hits));
}

// The sum of `c` over the lanes below this one; *total: over the warp (every lane calls it).
__device__ __forceinline__ int WarpExclusiveSum(int c, int lane, int* total) {
  int incl = c;
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  *total = __shfl_sync(0xffffffffu, incl, 31);
  return incl - c;
}

// Appends each lane's bits of `mine` to the warp's list (grouped by lane); returns the total.
__device__ __forceinline__ int FillList(WarpList& L, int lane, unsigned long long mine) {
  int total;
  int pos = WarpExclusiveSum(__popcll(mine), lane, &total);
  for (unsigned long long rest = mine; rest != 0; rest &= rest - 1)
    L.items[pos++] = static_cast<uint16_t>((lane << 6) | (__ffsll(static_cast<long long>(rest)) - 1));
  __syncwarp();
  return total;
}

// Pass 1 of kWarpList for the small tetrahedra: the same hit masks and bins as CountKernel<0>.
// kExact false (kWarpListOnePass): no ray test, the candidates stand for the hits (masks and
// bins count candidates; the record pass gives each a slot).
template <bool kExact>
__global__ void __launch_bounds__(kListThreads)
CountListKernel(const int4* __restrict__ tets, int64_t n, const float4* __restrict__ points,
                const float2* __restrict__ screen, const short4* __restrict__ boxes,
                math::CameraFrame cam, const float4* __restrict__ rays,
                unsigned long long* __restrict__ masks, unsigned long long* __restrict__ bins) {
  __shared__ unsigned int hist[kBins];
  __shared__ WarpList lists[kListWarps];
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) hist[i] = 0;
  const int lane = threadIdx.x & 31;
  WarpList& L = lists[threadIdx.x >> 5];
  L.hits[lane] = 0;
  __syncthreads();
  Work w;
  unsigned long long cand = 0;
  // The planes also without kExact: a tetrahedron whose planes fail gets no candidates, as in
  // the record pass.
  if (LoadWork(tets, n, points, boxes, nullptr, 0, false, cam, true, &w)) {
    cand = SpanCandidates(tets, screen, w);
    if (kExact && cand != 0) StoreLane(L, lane, w);
  }
  const int64_t gid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if constexpr (!kExact) {
    for (unsigned long long rest = cand; rest != 0; rest &= rest - 1) {
      const int k = __ffsll(static_cast<long long>(rest)) - 1;
      const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
      atomicAdd(&hist[((y & 7) << kCountBits) | (x & 7)], 1u);
    }
    if (gid < n) masks[gid] = cand;
    FlushBins(hist, bins);
    return;
  }
  const int total = FillList(L, lane, cand);
  for (int base = 0; base < total; base += 32) {
    const int item = base + lane;
    if (item >= total) break;
    const int e = L.items[item], o = e >> 6, k = e & 63;
    const int bw = L.box_w[o];
    const int x = L.box_x[o] + k % bw, y = L.box_y[o] + k / bw;
    math::TetPlanes tp;
    float a[4];
    LoadLane(L, o, &tp, a);
    math::TetHit hit;
    if (HitPixelRays(tp, a, cam, rays, x, y, &hit)) {
      atomicAdd(&hist[((y & 7) << kCountBits) | (x & 7)], 1u);
      atomicOr(&L.hits[o], 1ull << k);
    }
  }
  __syncwarp();
  if (gid < n) masks[gid] = L.hits[lane];
  FlushBins(hist, bins);
}

// Pass 2 of kWarpList for the small tetrahedra: the hits of the count pass that fall in the
// hash blocks [block_begin, block_end) become records, slots as in RecordKernel. kOnePass: the
// masks are candidates; a candidate whose ray misses gets a transparent record (the identity
// of "over", depth 0), and the real hits are added to *hit_count.
template <class Key, bool kOnePass>
__global__ void __launch_bounds__(kListThreads)
RecordListKernel(const int4* __restrict__ tets, int64_t n, const float4* __restrict__ points,
                 const short4* __restrict__ boxes, const unsigned long long* __restrict__ masks,
                 const float4* __restrict__ rays, FrameParams f, math::TfTable tf_param,
                 int block_begin, int block_end,
                 unsigned long long* __restrict__ cursors, Key* __restrict__ keys,
                 uint32_t* __restrict__ values, float4* __restrict__ rgba,
                 unsigned long long* __restrict__ hit_count) {
  __shared__ math::TfTable tf;
  __shared__ unsigned int count[kBins], cursor[kBins];
  __shared__ unsigned long long base[kBins];
  __shared__ WarpList lists[kListWarps];
  StartRecordBlock(tf_param, &tf, count, cursor);
  const PassBlocks in_pass{f.bits, block_begin, block_end};
  const int lane = threadIdx.x & 31;
  WarpList& L = lists[threadIdx.x >> 5];
  const int64_t gid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const unsigned long long mask = gid < n ? masks[gid] : 0;
  Work w;
  unsigned long long mine = 0;  // hits in this pass
  if (mask != 0 && LoadWork(tets, n, points, boxes, nullptr, 0, false, f.cam, false, &w)) {
    for (unsigned long long rest = mask; rest != 0; rest &= rest - 1) {
      const int k = __ffsll(static_cast<long long>(rest)) - 1;
      const int i = in_pass(w.box.x + k % w.bw, w.box.z + k / w.bw);
      if (i >= 0) {
        atomicAdd(&count[i], 1u);
        mine |= 1ull << k;
      }
    }
    // Same inputs and float operations as the count pass: the hits repeat exactly.
    if (mine != 0 && LoadWork(tets, n, points, boxes, nullptr, 0, false, f.cam, true, &w))
      StoreLane(L, lane, w);
  }
  ReserveSlots(count, block_end - block_begin, cursors, base);
  const int total = FillList(L, lane, mine);
  unsigned hits = 0;
  for (int b = 0; b < total; b += 32) {
    const int item = b + lane;
    if (item >= total) break;
    const int e = L.items[item], o = e >> 6, k = e & 63;
    const int bw = L.box_w[o];
    const int x = L.box_x[o] + k % bw, y = L.box_y[o] + k / bw;
    const int i = in_pass(x, y);
    math::TetPlanes tp;
    float a[4];
    LoadLane(L, o, &tp, a);
    math::TetHit hit;
    const bool ok = HitPixelRays(tp, a, f.cam, rays, x, y, &hit);
    const unsigned long long slot = base[i] + atomicAdd(&cursor[i], 1u);
    EmitRecord(f, tf, x, y, slot, hit, ok, keys, values, rgba);
    if (kOnePass) hits += ok;
  }
  if (kOnePass) AddHits(hits, lane, hit_count);
}

// Chunks under kWarpList (with kScanFilter): the lanes of a chunk's warp first mark its pixels
// inside the projected hull (HullCovers, 16 steps each as in CountKernel<1>), then take the
// warp's candidates 32 at a time, so the exact tests run on full warps. All lanes hold the same
// tetrahedron's planes, so any lane can test any pixel of the chunk. Hit masks as CountKernel<1>
// (bit j of lane l = chunk pixel l + 32·j).
// Appends (step j, lane) of each lane's bits of `mine` to the warp's list; returns the total.
__device__ __forceinline__ int FillChunkList(uint16_t* items, int lane, unsigned mine) {
  int total;
  int pos = WarpExclusiveSum(__popc(mine), lane, &total);
  for (unsigned rest = mine; rest != 0; rest &= rest - 1)
    items[pos++] = static_cast<uint16_t>(((__ffs(rest) - 1) << 5) | lane);
  __syncwarp();
  return total;
}

template <bool kExact>
__global__ void __launch_bounds__(kThreads)
CountChunkListKernel(const int4* __restrict__ tets, int64_t n, const float4* __restrict__ points,
                     const float2* __restrict__ screen, const short4* __restrict__ boxes,
                     const int2* __restrict__ chunks, unsigned chunk_count,
                     math::CameraFrame cam, const float4* __restrict__ rays,
                     ChunkMask* __restrict__ chunk_masks, unsigned long long* __restrict__ bins) {
  __shared__ unsigned int hist[kBins];
  __shared__ uint16_t items[kThreads / 32][kChunkPixels];
  __shared__ unsigned int hits[kThreads];
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) hist[i] = 0;
  hits[threadIdx.x] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  Work w;
  unsigned cand = 0;
  // Warp-uniform: every lane loads the same chunk.
  const bool active = LoadWork(tets, n, points, boxes, chunks, chunk_count, true, cam, true, &w);
  if (active) {
    Hull hull;
    LoadHull(tets, w.t, screen, &hull);
    for (int k = w.k, j = 0; k < w.k_end; k += w.dk, ++j)
      if (HullCovers(hull, static_cast<float>(w.box.x + k % w.bw),
                     static_cast<float>(w.box.z + k / w.bw)))
        cand |= 1u << j;
  }
  const int64_t gid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if constexpr (!kExact) {
    for (unsigned rest = cand; rest != 0; rest &= rest - 1) {
      const int k = w.k + (__ffs(rest) - 1) * w.dk;
      const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
      atomicAdd(&hist[((y & 7) << kCountBits) | (x & 7)], 1u);
    }
    if ((gid >> 5) < chunk_count) chunk_masks[gid] = static_cast<ChunkMask>(cand);
    FlushBins(hist, bins);
    return;
  }
  const int total = FillChunkList(items[warp], lane, cand);
  const int first = w.k - lane;  // the chunk's first box pixel (valid when active)
  for (int b = 0; b < total; b += 32) {
    const int item = b + lane;
    if (item >= total) break;
    const int e = items[warp][item], j = e >> 5, l = e & 31;
    const int k = first + l + 32 * j;
    const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
    math::TetHit hit;
    if (HitPixelRays(w.tp, w.a, cam, rays, x, y, &hit)) {
      atomicAdd(&hist[((y & 7) << kCountBits) | (x & 7)], 1u);
      atomicOr(&hits[(warp << 5) | l], 1u << j);
    }
  }
  __syncwarp();
  if ((gid >> 5) < chunk_count) chunk_masks[gid] = static_cast<ChunkMask>(hits[threadIdx.x]);
  FlushBins(hist, bins);
}

// The records of a chunk's hits in the hash blocks [block_begin, block_end), from the warp's
// list of them; slots as in RecordKernel; kOnePass as in RecordListKernel.
template <class Key, bool kOnePass>
__global__ void __launch_bounds__(kThreads)
RecordChunkListKernel(const int4* __restrict__ tets, int64_t n, const float4* __restrict__ points,
                      const short4* __restrict__ boxes, const int2* __restrict__ chunks,
                      unsigned chunk_count, const ChunkMask* __restrict__ chunk_masks,
                      const float4* __restrict__ rays, FrameParams f, math::TfTable tf_param,
                      int block_begin, int block_end,
                      unsigned long long* __restrict__ cursors, Key* __restrict__ keys,
                      uint32_t* __restrict__ values, float4* __restrict__ rgba,
                      unsigned long long* __restrict__ hit_count) {
  __shared__ math::TfTable tf;
  __shared__ unsigned int count[kBins], cursor[kBins];
  __shared__ unsigned long long base[kBins];
  __shared__ uint16_t items[kThreads / 32][kChunkPixels];
  StartRecordBlock(tf_param, &tf, count, cursor);
  const PassBlocks in_pass{f.bits, block_begin, block_end};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t gid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const unsigned mask = (gid >> 5) < chunk_count ? chunk_masks[gid] : 0u;
  Work w;
  unsigned mine = 0;  // hits in this pass
  // Warp-uniform: the planes when any lane of the chunk has a hit.
  if (__any_sync(0xffffffffu, mask != 0) &&
      LoadWork(tets, n, points, boxes, chunks, chunk_count, true, f.cam, true, &w)) {
    for (unsigned rest = mask; rest != 0; rest &= rest - 1) {
      const int k = w.k + (__ffs(rest) - 1) * w.dk;
      const int i = in_pass(w.box.x + k % w.bw, w.box.z + k / w.bw);
      if (i >= 0) {
        atomicAdd(&count[i], 1u);
        mine |= rest & (~rest + 1);
      }
    }
  }
  ReserveSlots(count, block_end - block_begin, cursors, base);
  const int total = FillChunkList(items[warp], lane, mine);
  const int first = w.k - lane;
  unsigned hits = 0;
  for (int b = 0; b < total; b += 32) {
    const int item = b + lane;
    if (item >= total) break;
    const int e = items[warp][item], j = e >> 5, l = e & 31;
    const int k = first + l + 32 * j;
    const int x = w.box.x + k % w.bw, y = w.box.z + k / w.bw;
    const int i = in_pass(x, y);
    math::TetHit hit;
    const bool ok = HitPixelRays(w.tp, w.a, f.cam, rays, x, y, &hit);
    const unsigned long long slot = base[i] + atomicAdd(&cursor[i], 1u);
    EmitRecord(f, tf, x, y, slot, hit, ok, keys, values, rgba);
    if (kOnePass) hits += ok;
  }
  if (kOnePass) AddHits(hits, lane, hit_count);
}

struct BlockGeometry {
  int bx, by, stride;  // pixel (bx + stride·i, by + stride·j)
  int width, height;   // lattice size of this block
};

// start[p], end[p] of each local pixel's run of sorted records (both 0 when it has none).
template <class Key>
__global__ void RangesKernel(const Key* __restrict__ keys, int64_t n, int shift,
                             uint32_t* __restrict__ start, uint32_t* __restrict__ end) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint32_t p = static_cast<uint32_t>(keys[i] >> shift);
  if (i == 0 || static_cast<uint32_t>(keys[i - 1] >> shift) != p) start[p] = static_cast<uint32_t>(i);
  if (i == n - 1 || static_cast<uint32_t>(keys[i + 1] >> shift) != p)
    end[p] = static_cast<uint32_t>(i + 1);
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
template <class Key>
struct PixelOfKey {
  int shift;
  __device__ uint32_t operator()(Key k) const { return static_cast<uint32_t>(k >> shift); }
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
template <class Key>
__global__ void ScanLastKernel(const Key* __restrict__ keys, int64_t n, int shift,
                               const float4* __restrict__ scanned, BlockGeometry g, Rgba bg,
                               float4* __restrict__ image, int width, float4* __restrict__ partial) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint32_t p = static_cast<uint32_t>(keys[i] >> shift);
  if (i != n - 1 && static_cast<uint32_t>(keys[i + 1] >> shift) == p) return;
  WritePixel(image, width, g, static_cast<int>(p), ToRgba(scanned[i]), bg, partial);
}

__global__ void ToRgba8Kernel(const float4* __restrict__ image, int64_t n, uchar4* __restrict__ out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  out[i] = cuda_volume::Rgba8Of(image[i]);
}

int CeilLog2(int64_t v) {
  int b = 0;
  while ((int64_t{1} << b) < v) ++b;
  return b;
}

}  // namespace

namespace {

// Everything the passes share, set up by RenderCuda.
struct Setup {
  const Device* device;
  cudaStream_t stream;
  const CudaMesh* mesh;
  const RenderJob* job;
  RenderResult* result;
  StageTimer* timer;
  FrameParams frame;
  const short4* boxes;
  const int2* chunks;
  unsigned chunk_count;
  const unsigned long long* masks;
  const ChunkMask* chunk_masks;
  const float4* rays;  // kWarpList, kWarpListOnePass: RayKernel's table
  unsigned long long* hit_count;  // kWarpListOnePass: the records that are hits
  ScanConversion scan_conversion;
  std::vector<int64_t> block_records;  // per hash block
  float4* image;
  std::function<void(int64_t)> track;  // per-frame device bytes allocated (+) or freed (-)
};

template <class Key>
absl::Status RenderBlocks(Setup& s) {
  const Device& device = *s.device;
  cudaStream_t stream = s.stream;
  const RenderJob& job = *s.job;
  RenderStats& stats = s.result->stats;
  const int w = job.camera.width, h = job.camera.height;
  const int bits = s.frame.bits, stride = 1 << bits, num_blocks = stride * stride;
  const int shift = s.frame.depth_bits > 0 ? s.frame.depth_bits : 32;
  const int end_bit = shift + CeilLog2(int64_t{(w + stride - 1) / stride} * ((h + stride - 1) / stride));
  const Compositing mode = stats.compositing;
  const math::Rgba bg = job.tf.background;
  const int64_t nt = s.mesh->num_tets;

  // Passes: consecutive hash blocks whose records fit max_pass_records together (a block over
  // it gets a pass of its own).
  std::vector<int> pass_begin = {0};
  int64_t in_pass = 0, max_pass = 0, max_block = 0;
  for (int b = 0; b < num_blocks; ++b) {
    const int64_t r = s.block_records[b];
    if (in_pass > 0 && in_pass + r > job.max_pass_records) {
      pass_begin.push_back(b);
      in_pass = 0;
    }
    in_pass += r;
    max_pass = std::max(max_pass, in_pass);
    max_block = std::max(max_block, r);
  }
  pass_begin.push_back(num_blocks);
  stats.passes = static_cast<int>(pass_begin.size()) - 1;

  cuda::DeviceBuffer<Key> keys, keys_alt;
  cuda::DeviceBuffer<uint32_t> values, values_alt;
  cuda::DeviceBuffer<float4> rgba, scanned, partial_dev;
  cuda::DeviceBuffer<uint32_t> range_start, range_end;
  cuda::DeviceBuffer<unsigned long long> cursors;
  cuda::DeviceBuffer<uint8_t> temp;
  const int64_t lattice = int64_t{(w + stride - 1) / stride} * ((h + stride - 1) / stride);
  FRESNEL_RETURN_IF_ERROR(keys.Allocate(device, max_pass));
  FRESNEL_RETURN_IF_ERROR(values.Allocate(device, max_pass));
  FRESNEL_RETURN_IF_ERROR(rgba.Allocate(device, max_pass));
  FRESNEL_RETURN_IF_ERROR(keys_alt.Allocate(device, max_block));
  FRESNEL_RETURN_IF_ERROR(values_alt.Allocate(device, max_block));
  if (mode == Compositing::kSegmentedScan) {
    FRESNEL_RETURN_IF_ERROR(scanned.Allocate(device, max_block));
  } else {
    FRESNEL_RETURN_IF_ERROR(range_start.Allocate(device, lattice));
    FRESNEL_RETURN_IF_ERROR(range_end.Allocate(device, lattice));
  }
  if (job.on_block != nullptr) FRESNEL_RETURN_IF_ERROR(partial_dev.Allocate(device, lattice));
  FRESNEL_RETURN_IF_ERROR(cursors.Allocate(device, num_blocks));
  // CUB temporaries for the largest block.
  size_t temp_bytes = 0;
  {
    cub::DoubleBuffer<Key> dk(keys.get(), keys_alt.get());
    cub::DoubleBuffer<uint32_t> dv(values.get(), values_alt.get());
    FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bytes, dk, dv, static_cast<int>(std::max<int64_t>(max_block, 1)), 0, end_bit,
        stream));
    if (mode == Compositing::kSegmentedScan) {
      size_t scan_bytes = 0;
      auto pix = thrust::make_transform_iterator(keys.get(), PixelOfKey<Key>{shift});
      auto val = thrust::make_transform_iterator(values.get(), GatherRgba{rgba.get()});
      FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveScanByKey(
          nullptr, scan_bytes, pix, val, scanned.get(), OverOp{},
          static_cast<int>(std::max<int64_t>(max_block, 1)), ::cuda::std::equal_to<uint32_t>{},
          stream));
      temp_bytes = std::max(temp_bytes, scan_bytes);
    }
  }
  FRESNEL_RETURN_IF_ERROR(temp.Allocate(device, static_cast<int64_t>(temp_bytes)));
  const int64_t buffer_bytes = keys.bytes() + values.bytes() + rgba.bytes() + keys_alt.bytes() +
                               values_alt.bytes() + scanned.bytes() + range_start.bytes() +
                               range_end.bytes() + partial_dev.bytes() + cursors.bytes() +
                               temp.bytes();
  s.track(buffer_bytes);

  std::vector<float> partial_host;
  std::vector<unsigned long long> offsets(num_blocks);
  int done = 0;
  for (size_t p = 0; p + 1 < pass_begin.size(); ++p) {
    const int b0 = pass_begin[p], b1 = pass_begin[p + 1];
    int64_t off = 0;
    for (int b = b0; b < b1; ++b) {
      offsets[b - b0] = static_cast<unsigned long long>(off);
      off += s.block_records[b];
    }
    FRESNEL_RETURN_IF_ERROR(s.timer->Start(&stats.records_s));
    if (off > 0) {
      FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(cursors.get(), offsets.data(),
                                                   (b1 - b0) * sizeof(unsigned long long),
                                                   cudaMemcpyHostToDevice, stream));
      if (s.scan_conversion == ScanConversion::kWarpList) {
        RecordListKernel<Key, false><<<cuda::BlocksFor(nt, kListThreads), kListThreads, 0, stream>>>(
            s.mesh->tets, nt, s.mesh->points, s.boxes, s.masks, s.rays, s.frame, job.tf, b0, b1,
            cursors.get(), keys.get(), values.get(), rgba.get(), nullptr);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((RecordListKernel<Key, false>));
      } else if (s.scan_conversion == ScanConversion::kWarpListOnePass) {
        RecordListKernel<Key, true><<<cuda::BlocksFor(nt, kListThreads), kListThreads, 0, stream>>>(
            s.mesh->tets, nt, s.mesh->points, s.boxes, s.masks, s.rays, s.frame, job.tf, b0, b1,
            cursors.get(), keys.get(), values.get(), rgba.get(), s.hit_count);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((RecordListKernel<Key, true>));
      } else {
        RecordKernel<Key, kSmallPath><<<cuda::BlocksFor(nt, kThreads), kThreads, 0, stream>>>(
            s.mesh->tets, nt, s.mesh->points, s.boxes, s.chunks, s.chunk_count, false, s.masks,
            s.chunk_masks, s.frame, job.tf, b0, b1, cursors.get(), keys.get(), values.get(),
            rgba.get());
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((RecordKernel<Key, kSmallPath>));
      }
      if (s.chunk_count > 0 && kScanFilter && s.scan_conversion == ScanConversion::kWarpList) {
        RecordChunkListKernel<Key, false>
            <<<cuda::BlocksFor(int64_t{s.chunk_count} * 32, kThreads), kThreads, 0, stream>>>(
                s.mesh->tets, nt, s.mesh->points, s.boxes, s.chunks, s.chunk_count,
                s.chunk_masks, s.rays, s.frame, job.tf, b0, b1, cursors.get(), keys.get(),
                values.get(), rgba.get(), nullptr);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((RecordChunkListKernel<Key, false>));
      } else if (s.chunk_count > 0 && s.scan_conversion == ScanConversion::kWarpListOnePass) {
        RecordChunkListKernel<Key, true>
            <<<cuda::BlocksFor(int64_t{s.chunk_count} * 32, kThreads), kThreads, 0, stream>>>(
                s.mesh->tets, nt, s.mesh->points, s.boxes, s.chunks, s.chunk_count,
                s.chunk_masks, s.rays, s.frame, job.tf, b0, b1, cursors.get(), keys.get(),
                values.get(), rgba.get(), s.hit_count);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((RecordChunkListKernel<Key, true>));
      } else if (s.chunk_count > 0) {
        RecordKernel<Key, kBigPath>
            <<<cuda::BlocksFor(int64_t{s.chunk_count} * 32, kThreads), kThreads, 0, stream>>>(
                s.mesh->tets, nt, s.mesh->points, s.boxes, s.chunks, s.chunk_count, true,
                s.masks, s.chunk_masks, s.frame, job.tf, b0, b1, cursors.get(), keys.get(),
                values.get(), rgba.get());
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((RecordKernel<Key, kBigPath>));
      }
    }
    FRESNEL_RETURN_IF_ERROR(s.timer->Stop());
    for (int b = b0; b < b1; ++b) {
      BlockGeometry g;
      g.bx = b % stride;
      g.by = b / stride;
      g.stride = stride;
      g.width = (w - g.bx + stride - 1) / stride;
      g.height = (h - g.by + stride - 1) / stride;
      const int64_t pixels = int64_t{g.width} * g.height;
      float4* partial = job.on_block != nullptr ? partial_dev.get() : nullptr;
      const int count = static_cast<int>(s.block_records[b]);
      const int64_t region = static_cast<int64_t>(offsets[b - b0]);
      if (count == 0) {
        FRESNEL_RETURN_IF_ERROR(s.timer->Start(&stats.composite_s));
        FillBackgroundKernel<<<cuda::BlocksFor(pixels, 256), 256, 0, stream>>>(g, bg, s.image, w,
                                                                               partial);
        FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FillBackgroundKernel);
        FRESNEL_RETURN_IF_ERROR(s.timer->Stop());
      } else {
        FRESNEL_RETURN_IF_ERROR(s.timer->Start(&stats.sort_s));
        cub::DoubleBuffer<Key> dk(keys.get() + region, keys_alt.get());
        cub::DoubleBuffer<uint32_t> dv(values.get() + region, values_alt.get());
        size_t have = temp.bytes();
        FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(temp.get(), have, dk, dv,
                                                                     count, 0, end_bit, stream));
        FRESNEL_RETURN_IF_ERROR(s.timer->Stop());
        FRESNEL_RETURN_IF_ERROR(s.timer->Start(&stats.composite_s));
        if (mode == Compositing::kPairwise) {
          FRESNEL_CUDA_RETURN_IF_ERROR(
              cudaMemsetAsync(range_start.get(), 0, pixels * sizeof(uint32_t), stream));
          FRESNEL_CUDA_RETURN_IF_ERROR(
              cudaMemsetAsync(range_end.get(), 0, pixels * sizeof(uint32_t), stream));
          RangesKernel<Key><<<cuda::BlocksFor(count, 256), 256, 0, stream>>>(
              dk.Current(), count, shift, range_start.get(), range_end.get());
          FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RangesKernel<Key>);
          CompositePairwiseKernel<<<cuda::BlocksFor(pixels * 32, 256), 256, 0, stream>>>(
              dv.Current(), rgba.get(), range_start.get(), range_end.get(), g, bg, s.image, w,
              partial);
          FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CompositePairwiseKernel);
        } else {
          FillBackgroundKernel<<<cuda::BlocksFor(pixels, 256), 256, 0, stream>>>(g, bg, s.image,
                                                                                 w, partial);
          FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FillBackgroundKernel);
          auto pix = thrust::make_transform_iterator(dk.Current(), PixelOfKey<Key>{shift});
          auto val = thrust::make_transform_iterator(dv.Current(), GatherRgba{rgba.get()});
          size_t scan_have = temp.bytes();
          FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveScanByKey(
              temp.get(), scan_have, pix, val, scanned.get(), OverOp{}, count,
              ::cuda::std::equal_to<uint32_t>{}, stream));
          ScanLastKernel<Key><<<cuda::BlocksFor(count, 256), 256, 0, stream>>>(
              dk.Current(), count, shift, scanned.get(), g, bg, s.image, w, partial);
          FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ScanLastKernel<Key>);
        }
        FRESNEL_RETURN_IF_ERROR(s.timer->Stop());
      }
      if (job.on_block != nullptr) {
        PartialFrame frame;
        frame.block = done;
        frame.num_blocks = num_blocks;
        frame.x0 = g.bx, frame.y0 = g.by, frame.stride = stride;
        frame.width = g.width, frame.height = g.height;
        FRESNEL_RETURN_IF_ERROR(cuda_volume::DeliverPartialFrame(
            stream, s.timer, &stats.d2h_s, partial_dev.get(), pixels, &partial_host, frame,
            *job.on_block));
      }
      ++done;
    }
  }
  // The buffers are freed (stream-ordered) when this returns.
  s.track(-buffer_bytes);
  return absl::OkStatus();
}

}  // namespace

absl::Status RenderCuda(const Device& device, const CudaMesh& mesh, int64_t mesh_bytes,
                        const RenderJob& job, RenderResult* result) {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  // kAuto: the walk only where it renders right (every ray starts outside the mesh) and the
  // caller asked for nothing of the cell projection's (a scan conversion, a compositing method).
  const bool auto_walk = job.cuda_method == CudaMethod::kAuto && kAutoWalk &&
                         job.scan_conversion == ScanConversion::kAuto &&
                         job.compositing == Compositing::kAuto &&
                         MeshInFrontOfEye(mesh, job.camera);
  if (job.cuda_method == CudaMethod::kRayWalk || auto_walk) {
    return RenderWalkCuda(device, mesh, mesh_bytes, job, result);
  }
  cudaStream_t stream = cuda::StreamOf(device);
  RenderStats& stats = result->stats;
  stats.cuda_method = CudaMethod::kCellProjection;
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
  cuda::DeviceBuffer<int2> chunks;
  cuda::DeviceBuffer<unsigned long long> masks;
  cuda::DeviceBuffer<float4> image;
  cuda::DeviceBuffer<uchar4> image8;
  // [0, 64) hits per (x mod 8, y mod 8) bin; [64] chunks of big tetrahedra (as unsigned int).
  cuda::DeviceBuffer<unsigned long long> counters;
  FRESNEL_RETURN_IF_ERROR(screen.Allocate(device, np));
  FRESNEL_RETURN_IF_ERROR(boxes.Allocate(device, nt));
  FRESNEL_RETURN_IF_ERROR(masks.Allocate(device, nt));
  FRESNEL_RETURN_IF_ERROR(image.Allocate(device, int64_t{w} * h));
  if (job.rgba8) FRESNEL_RETURN_IF_ERROR(image8.Allocate(device, int64_t{w} * h));
  FRESNEL_RETURN_IF_ERROR(counters.Allocate(device, kBins + 1));
  track(screen.bytes() + boxes.bytes() + masks.bytes() + image.bytes() + image8.bytes() +
        counters.bytes());
  unsigned int* chunk_counter = reinterpret_cast<unsigned int*>(counters.get() + kBins);

  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.project_s));
  ProjectKernel<<<cuda::BlocksFor(np, 256), 256, 0, stream>>>(mesh.points, np, cam, screen.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ProjectKernel);
  FRESNEL_RETURN_IF_ERROR(timer.Stop());
  // Boxes and chunks; a chunk list that overflowed is grown and made again.
  int64_t chunk_capacity = std::max<int64_t>(1024, nt / 4);
  unsigned long long host_counters[kBins + 1];
  for (;;) {
    FRESNEL_RETURN_IF_ERROR(chunks.Allocate(device, chunk_capacity));
    FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.project_s));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(counters.get(), 0, counters.bytes(), stream));
    BoxKernel<<<cuda::BlocksFor(nt, 256), 256, 0, stream>>>(
        mesh.tets, nt, screen.get(), w, h, boxes.get(), chunks.get(),
        static_cast<unsigned>(chunk_capacity), chunk_counter);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(BoxKernel);
    FRESNEL_RETURN_IF_ERROR(timer.Stop());
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_counters + kBins, counters.get() + kBins,
                                                 sizeof(unsigned long long),
                                                 cudaMemcpyDeviceToHost, stream));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const int64_t needed = static_cast<int64_t>(host_counters[kBins] & 0xffffffffu);
    if (needed <= chunk_capacity) break;
    chunk_capacity = needed + needed / 8;
  }
  track(chunks.bytes());
  const unsigned nchunks = static_cast<unsigned>(host_counters[kBins] & 0xffffffffu);
  stats.warp_chunks = nchunks;
  cuda::DeviceBuffer<ChunkMask> chunk_masks;
  stats.scan_conversion =
      job.scan_conversion == ScanConversion::kAuto ? kAutoScanConversion : job.scan_conversion;
  if (kScanFilter || stats.scan_conversion == ScanConversion::kWarpListOnePass) {
    FRESNEL_RETURN_IF_ERROR(
        chunk_masks.Allocate(device, std::max<int64_t>(1, int64_t{nchunks} * 32)));
    track(chunk_masks.bytes());
  }

  // Exact hit counts per (x mod 8, y mod 8) (kWarpListOnePass: candidate counts).
  const bool one_pass = stats.scan_conversion == ScanConversion::kWarpListOnePass;
  const bool lists = stats.scan_conversion == ScanConversion::kWarpList || one_pass;
  cuda::DeviceBuffer<float4> rays;
  cuda::DeviceBuffer<unsigned long long> hit_count;
  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.records_s));
  if (lists) {
    FRESNEL_RETURN_IF_ERROR(rays.Allocate(device, int64_t{w} * h));
    FRESNEL_RETURN_IF_ERROR(hit_count.Allocate(device, 1));
    track(rays.bytes() + hit_count.bytes());
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(hit_count.get(), 0, hit_count.bytes(), stream));
    RayKernel<<<cuda::BlocksFor(int64_t{w} * h, 256), 256, 0, stream>>>(cam, rays.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RayKernel);
  }
  if (one_pass) {
    CountListKernel<false><<<cuda::BlocksFor(nt, kListThreads), kListThreads, 0, stream>>>(
        mesh.tets, nt, mesh.points, screen.get(), boxes.get(), cam, rays.get(), masks.get(),
        counters.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CountListKernel<false>);
  } else if (lists) {
    CountListKernel<true><<<cuda::BlocksFor(nt, kListThreads), kListThreads, 0, stream>>>(
        mesh.tets, nt, mesh.points, screen.get(), boxes.get(), cam, rays.get(), masks.get(),
        counters.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CountListKernel<true>);
  } else {
    CountKernel<kSmallPath><<<cuda::BlocksFor(nt, kThreads), kThreads, 0, stream>>>(
        mesh.tets, nt, mesh.points, screen.get(), boxes.get(), chunks.get(), nchunks, false, cam,
        masks.get(), chunk_masks.get(), counters.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CountKernel<kSmallPath>);
  }
  if (nchunks > 0 && one_pass) {
    CountChunkListKernel<false><<<cuda::BlocksFor(int64_t{nchunks} * 32, kThreads), kThreads, 0,
                                  stream>>>(mesh.tets, nt, mesh.points, screen.get(),
                                            boxes.get(), chunks.get(), nchunks, cam, rays.get(),
                                            chunk_masks.get(), counters.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CountChunkListKernel<false>);
  } else if (nchunks > 0 && kScanFilter && lists) {
    CountChunkListKernel<true><<<cuda::BlocksFor(int64_t{nchunks} * 32, kThreads), kThreads, 0,
                                 stream>>>(mesh.tets, nt, mesh.points, screen.get(), boxes.get(),
                                           chunks.get(), nchunks, cam, rays.get(),
                                           chunk_masks.get(), counters.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CountChunkListKernel<true>);
  } else if (nchunks > 0) {
    CountKernel<kBigPath>
        <<<cuda::BlocksFor(int64_t{nchunks} * 32, kThreads), kThreads, 0, stream>>>(
        mesh.tets, nt, mesh.points, screen.get(), boxes.get(), chunks.get(), nchunks, true, cam,
        masks.get(), chunk_masks.get(), counters.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(CountKernel<kBigPath>);
  }
  FRESNEL_RETURN_IF_ERROR(timer.Stop());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_counters, counters.get(),
                                               kBins * sizeof(unsigned long long),
                                               cudaMemcpyDeviceToHost, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  // Hash blocks: the asked-for bits, or 16 blocks unless one of them would exceed
  // max_block_records (then 64).
  auto fold = [&](int bits) {
    std::vector<int64_t> per(size_t{1} << (2 * bits), 0);
    const int m = (1 << bits) - 1;
    for (int by = 0; by < 8; ++by)
      for (int bx = 0; bx < 8; ++bx)
        per[((by & m) << bits) | (bx & m)] += static_cast<int64_t>(host_counters[by * 8 + bx]);
    return per;
  };
  int bits = job.hash_block_bits;
  if (bits == 0) {
    auto per = fold(2);
    bits = *std::max_element(per.begin(), per.end()) > job.max_block_records ? 3 : 2;
  }
  Setup s;
  s.block_records = fold(bits);
  for (int64_t r : s.block_records) {
    stats.records += r;
    stats.max_block_records = std::max(stats.max_block_records, r);
  }
  if (stats.max_block_records > job.max_block_records) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a hash block needs ", stats.max_block_records,
        " intersection records, over max_block_records (", job.max_block_records,
        "); use more hash blocks"));
  }
  stats.num_blocks = 1 << (2 * bits);
  stats.compositing =
      job.compositing == Compositing::kAuto ? Compositing::kPairwise : job.compositing;

  s.device = &device;
  s.stream = stream;
  s.mesh = &mesh;
  s.job = &job;
  s.result = result;
  s.timer = &timer;
  s.boxes = boxes.get();
  s.chunks = chunks.get();
  s.chunk_count = nchunks;
  s.masks = masks.get();
  s.chunk_masks = chunk_masks.get();
  s.scan_conversion = stats.scan_conversion;
  s.rays = rays.get();
  s.hit_count = hit_count.get();
  s.image = image.get();
  s.track = track;
  s.frame.cam = cam;
  s.frame.bits = bits;
  const int stride = 1 << bits;
  const int pixel_bits = CeilLog2(int64_t{(w + stride - 1) / stride} * ((h + stride - 1) / stride));
  // 32-bit keys while they leave >= 16 bits of depth (1024² with 16 blocks: 16 + 16), quantised
  // over the depth range of the mesh's bounding sphere: midpoints closer than that range / 65536
  // may composite in either order, which only two slivers thinner than the step can notice.
  s.frame.depth_bits = pixel_bits <= 16 ? 32 - pixel_bits : 0;
  {
    const V3 rel = {mesh.centre[0] - cam.eye.x, mesh.centre[1] - cam.eye.y,
                    mesh.centre[2] - cam.eye.z};
    const float dist = cam.orthographic ? math::Dot(rel, cam.forward) : std::sqrt(math::Dot(rel, rel));
    const float near = std::max(0.0f, dist - mesh.radius), far = dist + mesh.radius;
    s.frame.depth_near = near;
    s.frame.depth_scale =
        s.frame.depth_bits > 0
            ? static_cast<float>((1u << s.frame.depth_bits) - 1) / std::max(far - near, 1e-30f)
            : 0.0f;
  }
  if (s.frame.depth_bits > 0) {
    FRESNEL_RETURN_IF_ERROR(RenderBlocks<uint32_t>(s));
  } else {
    FRESNEL_RETURN_IF_ERROR(RenderBlocks<unsigned long long>(s));
  }

  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.d2h_s));
  if (job.rgba8) {
    ToRgba8Kernel<<<cuda::BlocksFor(int64_t{w} * h, 256), 256, 0, stream>>>(
        image.get(), int64_t{w} * h, image8.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ToRgba8Kernel);
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(job.image, image8.get(),
                                                 image8.bytes(), cudaMemcpyDeviceToHost, stream));
  } else {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(job.image, image.get(), image.bytes(),
                                                 cudaMemcpyDeviceToHost, stream));
  }
  FRESNEL_RETURN_IF_ERROR(timer.Stop());
  unsigned long long hits = 0;
  if (one_pass) {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&hits, hit_count.get(), sizeof(hits),
                                                 cudaMemcpyDeviceToHost, stream));
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  // kWarpListOnePass: the blocks held a record per candidate; the hits among them.
  if (one_pass) stats.records = static_cast<int64_t>(hits);
  FRESNEL_RETURN_IF_ERROR(timer.Collect(true));
  stats.peak_device_bytes = peak_bytes + mesh_bytes;
  return absl::OkStatus();
}

}  // namespace fresnel::volume
