// CUDA ray walk (CudaMethod::kRayWalk): the CPU oracle's per-pixel walk (walk_math.h) with a
// thread per pixel.
//
// Why: cell projection makes a record per (tetrahedron, pixel) hit and sorts them; Blunt Fin's
// big cells give ~25 records per pixel at 1024², and scan conversion, sort and compositing of
// those took 5.1 of its 6.4 ms (H200, docs/volume.md). A walk does the same intersections (one
// per segment) but composites them in registers as it goes: no records, no sort, no second
// pass over memory. What it needs is face adjacency and each tetrahedron's walk geometry
// (CudaMesh::neighbors, walk_tets, built at upload) and the boundary faces of every screen tile,
// binned per frame from the mesh's boundary-face list (CudaMesh::boundary_faces, also built at
// upload).
//
// Per frame (one allocation from the device's pool holds every buffer, and the frame's one
// host synchronisation is at its end):
//   1. ProjectPointsKernel: every point to continuous pixel coordinates (NaN behind the eye).
//   2. BinFacesKernel<false>: a thread per boundary face that faces the rays (FaceFacesRays)
//      counts the 16×16 tiles of its projected box (math::FaceTileBox, the CPU's binning); a
//      scan gives each tile its range; BinFacesKernel<true> fills the ranges (face ids
//      4·tet + face and their projected boxes, in any order: the walk takes entries in (t,
//      grazed, tetrahedron) order; a ray runs the exact test only on faces whose box holds it)
//      into room learnt from the mesh's earlier frames (CudaMesh::tile_faces_room; a frame
//      whose lists outgrow it renders again; the first frame reads the total back first).
//   3. WalkKernel: 16×16 threads per tile (the threads of a tile share its face list, so their
//      loads of it coincide), block rows from the image's middle outwards (RowFromMiddle), each
//      thread math::WalkRay for its pixel, the colour over the background into the image
//      (float or RGBA8) and, with a callback, the partial frame. A step loads its
//      tetrahedron's 5 float4 of geometry and int4 of neighbours, all indexed by the
//      tetrahedron (one level of dependent loads, issued before the last segment's integral).
//      ptxas: 115 registers, 528-byte stack (the neighbourhood search's queue, the entry
//      batch), no spills.
//   4. The image to the caller's host memory (RenderInto: DMA at full speed when pinned).
// H200, Blunt Fin 1024² RGBA8 (docs/volume.md "Session 8"): RenderInto a reused pinned buffer
// 1.14 ms a frame (walk 0.96; main before session 8: 1.32 / 1.12), Render into a new pageable
// image 2.09 (its copy at the pageable rate and the image's allocation); grid 6 M and 35 M
// 2.5 and 4.6 ms (2.4e9 and 7.7e9 tets/s) in row order.
// With a callback the pixels go one hash block at a time (x ≡ bx, y ≡ by mod 2^bits), each
// reported when done, as the cell projection does.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <cub/device/device_scan.cuh>

#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "volume/volume_cuda.cuh"
#include "volume/volume_internal.h"
#include "volume/volume_math.h"
#include "volume/walk_math.h"

namespace fresnel::volume {

bool MeshInFrontOfEye(const CudaMesh& mesh, const math::CameraFrame& cam) {
  for (int c = 0; c < 8; ++c) {
    const math::V3 p = {(c & 1) ? mesh.hi[0] : mesh.lo[0], (c & 2) ? mesh.hi[1] : mesh.lo[1],
                        (c & 4) ? mesh.hi[2] : mesh.lo[2]};
    if (!(math::Dot(p - cam.eye, cam.forward) > 0.0f)) return false;
  }
  return true;
}

namespace {

using cuda_volume::StageTimer;
using math::Rgba;
using math::V3;

constexpr int kTile = math::kWalkTile;

// The GPU's view of the mesh for math::WalkRay; `faces` are the thread's tile's. Device code
// only (the #if keeps nvcc's host pass of the __host__ __device__ walk compiling).
struct GpuView {
  const float4* walk_tets;  // 5 per tetrahedron (math::WalkTet)
  const int4* neighbors;
  const int32_t* faces;
  const float4* boxes;  // math::FaceBox of each face: x0, x1, y0, y1
  FRESNEL_VHD math::WalkTet Geom(int32_t t) const {
    math::WalkTet w{};
#if defined(__CUDA_ARCH__)
    const float4* g = walk_tets + 5 * int64_t{t};
    const float4 a = __ldg(g), b = __ldg(g + 1), c = __ldg(g + 2), e = __ldg(g + 3);
    const float4 f = __ldg(g + 4);
    w.m[0] = {a.x, a.y, a.z};
    w.m[1] = {b.x, b.y, b.z};
    w.m[2] = {c.x, c.y, c.z};
    w.m[3] = {e.x, e.y, e.z};
    w.s0 = a.w;
    w.p0 = {b.w, c.w, e.w};
    w.g = {f.x, f.y, f.z};
    w.reach = f.w;
#endif
    return w;
  }
  FRESNEL_VHD void Neighbors(int32_t t, int32_t nb[4]) const {
#if defined(__CUDA_ARCH__)
    const int4 q = __ldg(&neighbors[t]);
    nb[0] = q.x, nb[1] = q.y, nb[2] = q.z, nb[3] = q.w;
#endif
  }
  FRESNEL_VHD int32_t Neighbor(int32_t t, int f) const {
#if defined(__CUDA_ARCH__)
    return __ldg(reinterpret_cast<const int32_t*>(&neighbors[t]) + f);
#else
    return -1;
#endif
  }
  FRESNEL_VHD int64_t TileFace(int64_t i) const { return faces[i]; }
  FRESNEL_VHD math::FaceBox TileBox(int64_t i) const {
    const float4 b = boxes[i];
    return {b.x, b.y, b.z, b.w};
  }
};

__global__ void ProjectPointsKernel(const float4* __restrict__ points, int64_t n,
                                    math::CameraFrame cam, float2* __restrict__ screen) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float4 a = points[i];
  float x, y;
  if (!math::ProjectPoint(cam, V3{a.x, a.y, a.z}, &x, &y)) x = y = NAN;
  screen[i] = make_float2(x, y);
}

// Whether a ray of the camera can enter the tetrahedron through its face (pj, pk, pl) opposite
// p_opposite; false only for a face clearly turned away from every ray. The walk's entry test
// takes face i as entered where b_i = (n_i·d) / D_i > 0 (volume_math.h), i.e. where d points
// along the inward normal n_in = n_i·sign(D_i). Orthographic: d = forward. Perspective: a ray
// meets the face's plane at x with n_in·(x − eye) = n_in·(pj − eye), so the sign is the eye's
// side of the plane. The margin (1e-3 of |n|·(distance + face size), an angle of 0.06°) is far
// above the rounding of b_i, so no face that could pass the entry test is dropped; the walk
// then skips the exact test of the back faces of the mesh (about half the boundary).
__device__ __forceinline__ bool FaceFacesRays(const math::CameraFrame& cam, V3 pj, V3 pk, V3 pl,
                                              V3 p_opposite) {
  const V3 n = math::Cross(pk - pj, pl - pj);
  const float inner = math::Dot(n, p_opposite - pj);
  const float nn = sqrtf(math::Dot(n, n));
  if (!(nn > 0.0f) || inner == 0.0f) return true;
  const V3 n_in = (inner > 0.0f ? 1.0f : -1.0f) * n;
  if (cam.orthographic) return math::Dot(n_in, cam.forward) >= -1e-3f * nn;
  const V3 to_face = pj - cam.eye;
  const float size = fmaxf(sqrtf(math::Dot(pk - pj, pk - pj)), sqrtf(math::Dot(pl - pj, pl - pj)));
  return math::Dot(n_in, to_face) >= -1e-3f * nn * (sqrtf(math::Dot(to_face, to_face)) + size);
}

// A thread per boundary face (CudaMesh::boundary_faces, listed once at upload). kFill false:
// counts[tile] += 1 for each tile the face is binned into; true: the face id and its box into
// faces[cursor[tile]++], boxes[...], where that index is below `room` (the lists' allocation:
// when the total exceeds it the walk does not run, RenderWalkCuda). Faces turned away from
// every ray (FaceFacesRays) are left out.
template <bool kFill>
__global__ void BinFacesKernel(const int4* __restrict__ tets, const float4* __restrict__ points,
                               const int32_t* __restrict__ boundary, int64_t nb,
                               const float2* __restrict__ screen, math::CameraFrame cam,
                               int tiles_x, int tiles_y,
                               unsigned long long* __restrict__ counts,
                               int32_t* __restrict__ faces, float4* __restrict__ boxes,
                               unsigned long long room) {
  const int width = cam.width, height = cam.height;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= nb) return;
  const int32_t id = boundary[i];
  const int32_t t = id / 4;
  const int f = id % 4;
  const int4 q = tets[t];
  const int v[4] = {q.x, q.y, q.z, q.w};
  const float4 a = points[v[(f + 1) & 3]], b = points[v[(f + 2) & 3]];
  const float4 c = points[v[(f + 3) & 3]], o = points[v[f]];
  if (!FaceFacesRays(cam, V3{a.x, a.y, a.z}, V3{b.x, b.y, b.z}, V3{c.x, c.y, c.z},
                     V3{o.x, o.y, o.z})) {
    return;
  }
  float fx[3], fy[3];
  bool all = true;
  for (int k = 1; k < 4; ++k) {
    const float2 sc = screen[v[(f + k) & 3]];
    all = all && !isnan(sc.x);
    fx[k - 1] = sc.x;
    fy[k - 1] = sc.y;
  }
  const math::FaceBox fb = math::ScreenFaceBox(fx, fy, all);
  int box[4];
  if (!math::FaceTileBox(fb, width, height, tiles_x, tiles_y, box)) return;
  for (int ty = box[2]; ty <= box[3]; ++ty)
    for (int tx = box[0]; tx <= box[1]; ++tx) {
      unsigned long long* cnt = &counts[int64_t{ty} * tiles_x + tx];
      if (kFill) {
        const unsigned long long at = atomicAdd(cnt, 1ull);
        if (at < room) {
          faces[at] = id;
          boxes[at] = make_float4(fb.x0, fb.x1, fb.y0, fb.y1);
        }
      } else {
        atomicAdd(cnt, 1ull);
      }
    }
}

struct WalkParams {
  math::CameraFrame cam;
  int x0, y0, stride;  // the pixels x0 + i·stride, y0 + j·stride
  int gw, gh;          // i < gw, j < gh
  int tiles_x;
  int64_t ntiles;           // tile_start[ntiles] is the lists' total
  unsigned long long room;  // the lists' allocation: a larger total leaves the kernel at once
  int64_t max_steps;
};

// Build-time knobs for measuring (a -D on walk_cuda.cu, tests/bench/volume/
// build_walk_variants.sh; no CMake option). The defaults are the fastest measured on Blunt Fin,
// 1024², H200, 2026-12-02 (WalkKernel ms, median of 20 frames; docs/volume.md "Session 8"):
// FRESNEL_VOLUME_WALK_MIN_BLOCKS: 256-thread blocks per SM that ptxas fits WalkKernel's registers
//   for (__launch_bounds__'s second argument, scaled to the block size). 2 (default): 115
//   registers, no spills, 16 warps per SM: 1.07 ms; 3: 80 registers, 214 / 232 B of spill
//   stores / loads (the next cell's geometry held across the integral, walk_math.h): 1.17-1.20;
//   4: 64 registers: 1.52. Without that early load, 3 gave 1.13 and 2 gave 1.15.
// FRESNEL_VOLUME_WALK_ROWS: rows of 16 threads per block (16: a tile; 2: one warp). 16
//   (default): 0.96 ms with the middle-first order; 4: 1.00; 2: 1.06 (1.21 in row order).
// FRESNEL_VOLUME_WALK_ORDER: 0 = block rows in order, 1 (default) = from the middle row
//   outwards (RowFromMiddle). The walk's cost is its longest rays, which an orbit camera puts in
//   the middle of the image; blocks started there first no longer finish last while the rest
//   of the GPU idles (ncu, row order: SMs active 1.48 M of 2.16 M cycles). 1.07 → 0.96 ms (and
//   1.13 → 1.05 with session 7's walk).
#ifndef FRESNEL_VOLUME_WALK_MIN_BLOCKS
#define FRESNEL_VOLUME_WALK_MIN_BLOCKS 2
#endif
#ifndef FRESNEL_VOLUME_WALK_ROWS
#define FRESNEL_VOLUME_WALK_ROWS 16
#endif
#ifndef FRESNEL_VOLUME_WALK_ORDER
#define FRESNEL_VOLUME_WALK_ORDER 1
#endif
constexpr int kWalkRows = FRESNEL_VOLUME_WALK_ROWS;
constexpr int kWalkOrder = FRESNEL_VOLUME_WALK_ORDER;
static_assert(kWalkRows >= 2 && kWalkRows <= kTile && kTile % kWalkRows == 0,
              "FRESNEL_VOLUME_WALK_ROWS: 2, 4, 8 or 16");

// The k-th of n rows taken from the middle outwards: c = (n − 1)/2, then c + 1, c − 1, c + 2, …
// alternately while both sides last, then the rest of the longer side (the one above c).
__device__ __forceinline__ int RowFromMiddle(int k, int n) {
  const int c = (n - 1) / 2;
  if (k == 0) return c;
  const int m = k - 1;
  if (m < 2 * c) return (m & 1) == 0 ? c + 1 + m / 2 : c - 1 - m / 2;
  return c + 1 + (m - c);
}

// counters[0] += segments composited, counters[1] += neighbourhood searches.
__global__ void __launch_bounds__(kTile * kWalkRows,
                                  FRESNEL_VOLUME_WALK_MIN_BLOCKS * kTile / kWalkRows)
WalkKernel(GpuView mesh, const unsigned long long* __restrict__ tile_start, math::TfTable tf_param,
           WalkParams wp, float4* __restrict__ image, uchar4* __restrict__ image8,
           float4* __restrict__ partial, unsigned long long* __restrict__ counters) {
  if (tile_start[wp.ntiles] > wp.room) return;  // the face lists did not fit (uniform)
  __shared__ math::TfTable tf;
  const int rank = threadIdx.y * kTile + threadIdx.x;
  cuda_volume::CopyTfTable(tf_param, &tf, rank, kTile * blockDim.y);
  __syncthreads();
  const int block_row = kWalkOrder == 1 ? RowFromMiddle(blockIdx.y, gridDim.y) : blockIdx.y;
  const int i = blockIdx.x * kTile + threadIdx.x, j = block_row * blockDim.y + threadIdx.y;
  int64_t segments = 0, fallbacks = 0;
  if (i < wp.gw && j < wp.gh) {
    const int x = wp.x0 + i * wp.stride, y = wp.y0 + j * wp.stride;
    V3 o, d;
    math::PixelRay(wp.cam, x, y, &o, &d);
    const int64_t tile = int64_t{y / kTile} * wp.tiles_x + x / kTile;
    const unsigned long long begin = tile_start[tile], end = tile_start[tile + 1];
    GpuView view = mesh;
    view.faces = mesh.faces + begin;
    view.boxes = mesh.boxes + begin;
    const Rgba acc = math::WalkRay(view, tf, x, y, o, d, static_cast<int64_t>(end - begin),
                                   wp.max_steps, &segments, &fallbacks);
    const Rgba px = math::OverBackground(acc, tf.background);
    const float4 v = make_float4(px.r, px.g, px.b, px.a);
    const int64_t at = int64_t{y} * wp.cam.width + x;
    if (image8 != nullptr) {
      image8[at] = cuda_volume::Rgba8Of(v);
    } else {
      image[at] = v;
    }
    if (partial != nullptr) partial[int64_t{j} * wp.gw + i] = v;
  }
  for (int o = 16; o > 0; o >>= 1) {
    segments += __shfl_down_sync(0xffffffffu, segments, o);
    fallbacks += __shfl_down_sync(0xffffffffu, fallbacks, o);
  }
  if ((rank & 31) == 0 && (segments | fallbacks) != 0) {
    atomicAdd(&counters[0], static_cast<unsigned long long>(segments));
    atomicAdd(&counters[1], static_cast<unsigned long long>(fallbacks));
  }
}

// Rows of 16 threads per thread block of WalkKernel (kWalkRows; session 6 measured 16, 8, 4 and
// 2 rows with the walk of then and saw no difference, session 8 the numbers above).
constexpr int WalkBlockRows() { return kWalkRows; }

}  // namespace

namespace {

// Carves one frame allocation into aligned pieces (one cudaMallocFromPoolAsync per frame
// instead of one per buffer).
class FrameArena {
 public:
  template <class T>
  size_t Reserve(int64_t count) {
    const size_t at = (size_ + 255) / 256 * 256;
    size_ = at + static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T);
    return at;
  }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

}  // namespace

namespace {

// One frame of the walk with room for `room` (face, tile) entries in the tiles' face lists, or,
// with room 0, exactly as many as the frame's tiles hold, read back after the count (one host
// synchronisation mid-frame). *needed: the entries the tiles hold. With room > 0 and
// *needed > room the lists did not fit: the walk kernels returned at once, the image is not
// written, and the caller renders again with room = *needed. Stage times add into
// result->stats; *frame_bytes is the frame's device memory.
absl::Status WalkFrame(const Device& device, const CudaMesh& mesh, const RenderJob& job,
                       int64_t room, RenderResult* result, int64_t* needed,
                       int64_t* frame_bytes) {
  cudaStream_t stream = cuda::StreamOf(device);
  RenderStats& stats = result->stats;
  const math::CameraFrame& cam = job.camera;
  const int w = cam.width, h = cam.height;
  const int64_t np = mesh.num_points, nt = mesh.num_tets, nb = mesh.num_boundary_faces;
  StageTimer timer(stream);
  const int tiles_x = (w + kTile - 1) / kTile, tiles_y = (h + kTile - 1) / kTile;
  const int64_t ntiles = int64_t{tiles_x} * tiles_y;

  // The frame's buffers in one allocation; with room > 0 the face lists too. The 64-bit words
  // are laid out [tile_start: ntiles + 1][counters: 2][counts: ntiles + 1], so that one memset
  // clears counters and counts and one copy reads back the lists' total (tile_start[ntiles])
  // with the counters (segments, neighbourhood searches).
  size_t scan_bytes = 0;
  FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(
      nullptr, scan_bytes, static_cast<unsigned long long*>(nullptr),
      static_cast<unsigned long long*>(nullptr), ntiles + 1, stream));
  FrameArena arena;
  const size_t at_screen = arena.Reserve<float2>(np);
  const size_t at_words = arena.Reserve<unsigned long long>(2 * (ntiles + 1) + 2);
  const size_t at_image = job.rgba8 ? arena.Reserve<uchar4>(int64_t{w} * h)
                                    : arena.Reserve<float4>(int64_t{w} * h);
  const size_t at_scan = arena.Reserve<unsigned char>(static_cast<int64_t>(scan_bytes));
  const size_t at_faces = room > 0 ? arena.Reserve<int32_t>(room) : 0;
  const size_t at_boxes = room > 0 ? arena.Reserve<float4>(room) : 0;
  cuda::DeviceBuffer<unsigned char> frame;
  FRESNEL_RETURN_IF_ERROR(frame.Allocate(device, static_cast<int64_t>(arena.size())));
  unsigned char* base = frame.get();
  float2* screen = reinterpret_cast<float2*>(base + at_screen);
  unsigned long long* tile_start = reinterpret_cast<unsigned long long*>(base + at_words);
  unsigned long long* counters = tile_start + ntiles + 1;
  unsigned long long* counts = counters + 2;
  float4* image = job.rgba8 ? nullptr : reinterpret_cast<float4*>(base + at_image);
  uchar4* image8 = job.rgba8 ? reinterpret_cast<uchar4*>(base + at_image) : nullptr;
  const size_t image_bytes = int64_t{w} * h * (job.rgba8 ? sizeof(uchar4) : sizeof(float4));
  *frame_bytes = static_cast<int64_t>(arena.size());

  // 1-2: projection and the boundary faces of every tile.
  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.project_s));
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(counters, 0, (2 + ntiles + 1) * sizeof(unsigned long long), stream));
  ProjectPointsKernel<<<cuda::BlocksFor(np, 256), 256, 0, stream>>>(mesh.points, np, cam, screen);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ProjectPointsKernel);
  if (nb > 0) {
    BinFacesKernel<false><<<cuda::BlocksFor(nb, 256), 256, 0, stream>>>(
        mesh.tets, mesh.points, mesh.boundary_faces, nb, screen, cam, tiles_x, tiles_y, counts,
        nullptr, nullptr, 0);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(BinFacesKernel<false>);
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(
      base + at_scan, scan_bytes, counts, tile_start, ntiles + 1, stream));
  FRESNEL_RETURN_IF_ERROR(timer.Stop());
  cuda::DeviceBuffer<int32_t> faces_exact;
  cuda::DeviceBuffer<float4> boxes_exact;
  int32_t* faces = reinterpret_cast<int32_t*>(base + at_faces);
  float4* boxes = reinterpret_cast<float4*>(base + at_boxes);
  if (room <= 0) {
    unsigned long long total = 0;
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&total, tile_start + ntiles, sizeof(total),
                                                 cudaMemcpyDeviceToHost, stream));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    room = static_cast<int64_t>(total);
    FRESNEL_RETURN_IF_ERROR(faces_exact.Allocate(device, room));
    FRESNEL_RETURN_IF_ERROR(boxes_exact.Allocate(device, room));
    *frame_bytes += faces_exact.bytes() + boxes_exact.bytes();
    faces = faces_exact.get();
    boxes = boxes_exact.get();
  }
  const auto fits = static_cast<unsigned long long>(room);
  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.project_s));
  if (nb > 0) {
    // counts becomes the fill cursor of each tile: its start.
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counts, tile_start,
                                                 (ntiles + 1) * sizeof(unsigned long long),
                                                 cudaMemcpyDeviceToDevice, stream));
    BinFacesKernel<true><<<cuda::BlocksFor(nb, 256), 256, 0, stream>>>(
        mesh.tets, mesh.points, mesh.boundary_faces, nb, screen, cam, tiles_x, tiles_y, counts,
        faces, boxes, fits);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(BinFacesKernel<true>);
  }
  FRESNEL_RETURN_IF_ERROR(timer.Stop());

  // 3: the walk, the whole image at once or (with a callback) one hash block at a time.
  const int bits = job.on_block == nullptr ? 0 : job.hash_block_bits == 0 ? 2 : job.hash_block_bits;
  const int stride = 1 << bits, num_blocks = stride * stride;
  cuda::DeviceBuffer<float4> partial_dev;
  std::vector<float> partial_host;
  if (job.on_block != nullptr) {
    const int64_t most = int64_t{(w + stride - 1) / stride} * ((h + stride - 1) / stride);
    FRESNEL_RETURN_IF_ERROR(partial_dev.Allocate(device, most));
    *frame_bytes += partial_dev.bytes();
  }
  const GpuView view{mesh.walk_tets, mesh.neighbors, faces, boxes};
  for (int block = 0; block < num_blocks; ++block) {
    WalkParams wp;
    wp.cam = cam;
    wp.x0 = block % stride, wp.y0 = block / stride, wp.stride = stride;
    wp.gw = (w - wp.x0 + stride - 1) / stride, wp.gh = (h - wp.y0 + stride - 1) / stride;
    wp.tiles_x = tiles_x;
    wp.ntiles = ntiles;
    wp.room = fits;
    wp.max_steps = nt + 16;
    if (wp.gw > 0 && wp.gh > 0) {
      FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.records_s));
      const int rows = WalkBlockRows();
      const dim3 threads(kTile, rows);
      const dim3 grid((wp.gw + kTile - 1) / kTile, (wp.gh + rows - 1) / rows);
      WalkKernel<<<grid, threads, 0, stream>>>(view, tile_start, job.tf, wp, image, image8,
                                               partial_dev.get(), counters);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(WalkKernel);
      FRESNEL_RETURN_IF_ERROR(timer.Stop());
    }
    if (job.on_block != nullptr) {
      PartialFrame pf;
      pf.block = block;
      pf.num_blocks = num_blocks;
      pf.x0 = wp.x0, pf.y0 = wp.y0, pf.stride = stride;
      pf.width = wp.gw, pf.height = wp.gh;
      FRESNEL_RETURN_IF_ERROR(cuda_volume::DeliverPartialFrame(
          stream, &timer, &stats.d2h_s, partial_dev.get(), int64_t{wp.gw} * wp.gh,
          &partial_host, pf, *job.on_block));
    }
  }

  // The image into the caller's host memory (DMA at full speed where it is page-locked), then
  // the lists' total and the counters.
  FRESNEL_RETURN_IF_ERROR(timer.Start(&stats.d2h_s));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(job.image, job.rgba8 ? static_cast<void*>(image8)
                                                                    : static_cast<void*>(image),
                                               image_bytes, cudaMemcpyDeviceToHost, stream));
  FRESNEL_RETURN_IF_ERROR(timer.Stop());
  unsigned long long words[3] = {0, 0, 0};  // total, segments, neighbourhood searches
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(words, tile_start + ntiles, sizeof(words),
                                               cudaMemcpyDeviceToHost, stream));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  FRESNEL_RETURN_IF_ERROR(timer.Collect(true));
  *needed = static_cast<int64_t>(words[0]);
  stats.records = static_cast<int64_t>(words[1]);
  stats.walk_fallbacks = static_cast<int64_t>(words[2]);
  stats.num_blocks = num_blocks;
  return absl::OkStatus();
}

}  // namespace

absl::Status RenderWalkCuda(const Device& device, const CudaMesh& mesh, int64_t mesh_bytes,
                            const RenderJob& job, RenderResult* result) {
  result->stats.cuda_method = CudaMethod::kRayWalk;
  if (4 * mesh.num_tets > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.cuda_method kRayWalk takes at most 2^29 tetrahedra, the mesh has ",
        mesh.num_tets));
  }
  // The face lists' room: what earlier frames of this mesh needed, with a quarter more for a
  // moving camera, so that the frame runs through without a host synchronisation; the first
  // frame, and every frame with partial frames (delivered while the walk runs, so the lists
  // must fit before it starts), read the count back instead. A frame whose lists outgrow the
  // room renders once more with exactly the room it needs.
  int64_t room = job.on_block == nullptr ? mesh.tile_faces_room.load(std::memory_order_relaxed)
                                         : 0;
  int64_t needed = 0, frame_bytes = 0;
  int walks = 1;
  FRESNEL_RETURN_IF_ERROR(WalkFrame(device, mesh, job, room, result, &needed, &frame_bytes));
  if (room > 0 && needed > room) {
    ++walks;
    FRESNEL_RETURN_IF_ERROR(WalkFrame(device, mesh, job, needed, result, &needed, &frame_bytes));
  }
  const int64_t want = needed + needed / 4 + 256;
  int64_t have = mesh.tile_faces_room.load(std::memory_order_relaxed);
  while (have < want && !mesh.tile_faces_room.compare_exchange_weak(have, want)) {
  }
  result->stats.passes = walks;
  result->stats.peak_device_bytes = frame_bytes + mesh_bytes;
  return absl::OkStatus();
}

}  // namespace fresnel::volume
