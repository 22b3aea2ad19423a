// Direct volume rendering of tetrahedral meshes (emission-absorption model).
//
// Model. Along the ray of each pixel the scalar s(t) is piecewise linear (linear inside each
// tetrahedron). The transfer function maps s to a colour c(s) and an extinction τ(s) (per mesh
// unit of length), both piecewise linear in s. Every tetrahedron a ray crosses gives one segment
// [t_entry, t_exit] with scalars s_entry, s_exit; the segment is split where s crosses a control
// point of the transfer function, and every piece gets the exact opacity
//     α = 1 − exp(−∫τ dt) = 1 − exp(−length · (τ_a + τ_b) / 2)
// and the colour (c_a + c_b)/2 · α; pieces and segments are composited front to back
// (premultiplied "over"). So for a constant-extinction transfer function −ln(1 − α_pixel) equals
// τ times the ray's chord length through the mesh, exactly up to rounding.
//
// Backends (the Device passed to DeviceMesh::Create and Render):
//   CPU   per-pixel ray casting (TBB): enter the mesh through its boundary faces (binned in screen
//         tiles), walk face to face through the neighbour tetrahedra, and on leaving the mesh look
//         for the next boundary face further along the ray (non-convex meshes, holes). The test
//         oracle.
//   CUDA  RenderOptions::cuda_method: the CPU's ray walk (kRayWalk, kAuto's usual choice: the
//         same walk code, a thread per pixel, boundary faces binned into tiles on the GPU), or
//         cell projection (kCellProjection): vertices are projected on the GPU; every tetrahedron scan-converts
//         the pixels under its projection (exact ray tests, counted first so that every hash
//         block's records are known), and the records (pixel, depth, segment colour and opacity:
//         the transfer function is integrated as the record is made) are written for as many
//         hash blocks at once as RenderOptions::max_pass_records allows. A hash block is a
//         sub-sampling of the image by the low `hash_block_bits` bits of x and y (16 or 64
//         blocks); each is radix-sorted by (pixel, depth) with CUB and composited front to back
//         per pixel, and reported to the callback when done (docs/volume.md).
// Both backends compute rays, ray–tetrahedron intersections and segment integrals with the same
// float32 code (volume_math.h), so their images agree to rounding.
//
// Image frame: pixel (x, y) with x to the right and y down (row 0 is the top row); the ray of a
// pixel passes through its centre. The image is float32 RGBA [height, width, 4], colour
// premultiplied-composited over the background, alpha = 1 − transmittance·(1 − background alpha).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/volume/mesh.h"

namespace fresnel::volume {

// ---- transfer function ---------------------------------------------------------------------

struct TfPoint {
  float scalar = 0;              // in the mesh's scalar units
  float r = 0, g = 0, b = 0;     // emitted colour, linear [0, 1]
  float extinction_per_unit = 0; // τ, per mesh unit of length, >= 0
};
inline constexpr int kMaxTfPoints = 64;

// Piecewise linear in the scalar between control points sorted by scalar (strictly increasing);
// constant beyond the first and last point. Changing it needs no new DeviceMesh.
struct TransferFunction {
  std::vector<TfPoint> points;
  std::array<float, 4> background{0, 0, 0, 0};  // RGBA behind the mesh, [0, 1]
};
// InvalidArgument naming the field: 1..kMaxTfPoints points, strictly increasing finite scalars,
// finite colours in [0, 1], finite extinction >= 0, background in [0, 1].
absl::Status ValidateTransferFunction(const TransferFunction& tf);
// A constant colour and extinction (absorption-only when the colour is black).
TransferFunction ConstantTransferFunction(float extinction_per_unit, std::array<float, 3> rgb);
// A ready-made colour map over [scalar_min, scalar_max]: blue → white → red with extinction
// rising to `max_extinction_per_unit`, dark background.
TransferFunction DefaultTransferFunction(float scalar_min, float scalar_max,
                                         float max_extinction_per_unit);

// ---- camera --------------------------------------------------------------------------------

struct Camera {
  std::array<float, 3> eye{0, 0, 5};     // mesh units
  std::array<float, 3> target{0, 0, 0};
  std::array<float, 3> up{0, 1, 0};      // need not be orthogonal to the view direction
  float vertical_fov_deg = 40;           // perspective, used when orthographic_height <= 0
  float orthographic_height = 0;         // > 0: orthographic, the view's height in mesh units
  int width = 512;
  int height = 512;
};
inline constexpr int kMaxImageSide = 8192;
// InvalidArgument naming the field: finite vectors, eye != target, up not parallel to the view
// direction, 0 < fov < 180, 1 <= width, height <= kMaxImageSide.
absl::Status ValidateCamera(const Camera& camera);
// A perspective camera looking at the centre of [bounds_min, bounds_max] from azimuth/elevation
// (degrees; azimuth 0 looks along −z from +z... measured about +y), far enough that the bounding
// sphere fits the vertical field of view. For turntables and benches.
Camera OrbitCamera(const std::array<float, 3>& bounds_min, const std::array<float, 3>& bounds_max,
                   float azimuth_deg, float elevation_deg, int width, int height,
                   float vertical_fov_deg = 30);

// ---- rendering -----------------------------------------------------------------------------

enum class Compositing {
  kAuto,           // the measured faster one (kPairwise on the H200, docs/volume.md)
  kPairwise,       // per pixel: warp-wide pairwise "over" reductions of 32 records at a time
  kSegmentedScan,  // CUB inclusive scan by pixel key with "over", last element per pixel
};

// CUDA scan conversion (which pixels' rays each tetrahedron is tested against). Tetrahedra whose
// screen box holds at most 64 pixels are "small"; bigger ones are cut into 512-pixel chunks, a
// warp each. Both give the same records for proper tetrahedra and images equal to rounding
// (docs/volume.md says what differs and what was measured).
enum class ScanConversion {
  kAuto,      // the measured fastest (kWarpListOnePass on the H200, docs/volume.md)
  kThread,    // a thread per small tetrahedron runs the exact ray test on every pixel of its
              // box; a chunk's lanes test its pixels inside the projected hull, 16 steps each
  kWarpList,  // the lanes of a warp share one list of candidate (tetrahedron, pixel) pairs:
              // for small tetrahedra the per-row spans of the projected hulls of its 32
              // tetrahedra, for a chunk its pixels inside the projected hull
  kWarpListOnePass,  // as kWarpList with one exact ray test per candidate instead of two: the
                     // count pass counts candidates, the record pass gives each a slot and a
                     // candidate whose ray misses a transparent record (the identity of "over"),
                     // so the sort sees 2-12 % more records (RenderStats::records: the hits)
};

// How the CUDA backend renders.
enum class CudaMethod {
  kAuto,            // kRayWalk when the mesh's bounding box lies in front of the eye and
                    // scan_conversion and compositing are kAuto, else kCellProjection (builds
                    // with FRESNEL_VOLUME_AUTO_METHOD=CELL: always kCellProjection)
  kCellProjection,  // scan conversion, records, per-block radix sort and compositing (above)
  kRayWalk,         // per pixel the CPU's walk (render.h's CPU backend, the same code): the
                    // camera must be outside the mesh, as for the CPU; no records, no sort, so
                    // max_block_records / max_pass_records / scan_conversion / compositing do
                    // not apply; with a callback it renders and reports one hash block at a time
};

struct RenderOptions {
  // Hash blocks are the pixels with equal (x mod 2^bits, y mod 2^bits): 2 → 16 blocks,
  // 3 → 64 blocks; each is sorted and composited on its own and reported to the callback.
  // 0 = 16, or 64 when one of 16 blocks would exceed max_block_records.
  int hash_block_bits = 0;
  Compositing compositing = Compositing::kAuto;
  ScanConversion scan_conversion = ScanConversion::kAuto;
  CudaMethod cuda_method = CudaMethod::kAuto;
  // CUDA: the records of consecutive blocks are made together while they fit this many (about
  // 24 bytes each); a block never splits. This bounds the frame's device memory (2^28: up to
  // 6 GiB of records; every further pass repeats the scan conversion's per-tetrahedron work:
  // the 35 M-tetrahedron grid at 1024² took 29.1 ms in 2 passes, 24.8 ms in 1, docs/volume.md).
  int64_t max_pass_records = int64_t{1} << 28;
  // CUDA: a block needing more records fails with ResourceExhausted (use more hash blocks).
  int64_t max_block_records = int64_t{1} << 30;  // at most 2^31 - 1
  // The image as uint8 RGBA [h, w, 4] (CUDA converts on the device: a quarter of the copy).
  bool rgba8 = false;
};

// One completed hash block: its pixels (x = x0 + i·stride, y = y0 + j·stride) in their final
// colours, float32 RGBA, row-major [height][width][4]. Valid only during the callback.
struct PartialFrame {
  int block = 0;          // 0-based, in completion order
  int num_blocks = 0;
  int x0 = 0, y0 = 0, stride = 1;
  int width = 0, height = 0;
  const float* rgba = nullptr;
};
// Called on the rendering thread after each block; a non-OK status stops the render and is
// returned by Render (e.g. Cancelled when the client went away).
using PartialFrameCallback = std::function<absl::Status(const PartialFrame&)>;

// Seconds per stage of one Render, summed over blocks. CUDA stages are timed with events on the
// call's stream; the CPU and the CUDA ray walk set project_s (projection, boundary tiling),
// records_s (the walk) and (CUDA) d2h_s; `records` is then the segments composited.
struct RenderStats {
  double project_s = 0;    // vertex projection + per-tetrahedron screen boxes
  double records_s = 0;    // scan conversion: counting and writing the records (segment
                           // integration included)
  double sort_s = 0;       // CUB radix sort by (pixel, depth)
  double composite_s = 0;  // front-to-back compositing
  double d2h_s = 0;        // image (and partial frames) to the host
  double total_s = 0;      // wall time of Render
  int64_t records = 0;     // intersection records (= ray segments) over all blocks
  int64_t max_block_records = 0;
  int64_t tets_rendered = 0;  // non-degenerate tetrahedra
  int64_t warp_chunks = 0;    // CUDA: 512-pixel chunks of large tetrahedra, a warp each
  int num_blocks = 0;
  int passes = 0;             // CUDA: record passes (RenderOptions::max_pass_records); kRayWalk:
                              // walks of the frame, 2 where its tiles' face lists outgrew the
                              // room learnt from the mesh's earlier frames
  int64_t walk_fallbacks = 0; // CPU and CUDA kRayWalk: walks continued by a neighbourhood search
  // CUDA: bytes of per-frame device buffers at their peak, plus the mesh's persistent buffers.
  int64_t peak_device_bytes = 0;
  Compositing compositing = Compositing::kAuto;  // the one used
  ScanConversion scan_conversion = ScanConversion::kAuto;  // CUDA: the one used
  CudaMethod cuda_method = CudaMethod::kAuto;              // CUDA: the one used
};

struct RenderResult {
  HostArray image;  // float32 [height, width, 4], or uint8 with RenderOptions::rgba8
  RenderStats stats;
};

// A mesh prepared for one device: CUDA keeps its points, scalars, (non-degenerate) tetrahedra and
// their face neighbours in persistent device buffers until destruction; CPU keeps face adjacency
// and boundary faces. Both find the face neighbours on the host (TBB sort of 4 faces per
// tetrahedron).
// Thread-safe for concurrent Render calls (it is read-only after Create but for the CUDA ray
// walk's room for its face lists, an atomic learnt from the frames rendered).
class DeviceMesh {
 public:
  // Validates `mesh` (InvalidArgument as ValidateMesh) and uploads it. CUDA: synchronous on
  // device.stream; ResourceExhausted when the device is out of memory.
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> Create(const Device& device,
                                                            const TetMesh& mesh);
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const Device& device() const { return device_; }
  const MeshReport& report() const { return report_; }
  // Bytes of the persistent buffers (device memory for CUDA, host memory for the CPU).
  int64_t resident_bytes() const { return resident_bytes_; }

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  DeviceMesh(const Device& device, MeshReport report);
  Device device_;
  MeshReport report_;
  int64_t resident_bytes_ = 0;
  std::unique_ptr<Impl> impl_;
};

// Bytes of the image Render returns for `camera` and `options`: RGBA, float32 or (options.rgba8)
// uint8 per channel.
int64_t ImageBytes(const Camera& camera, const RenderOptions& options);

// Persistent device bytes a CUDA DeviceMesh of `mesh` takes (for a cache cap), without uploading.
int64_t DeviceBytes(const TetMesh& mesh);

// Renders `mesh` on `device` (same kind and ordinal as the mesh's; for CUDA any stream of that
// device: all work goes on device.stream, temporaries come from device.mem_pool, and the stream
// is synchronised before returning). InvalidArgument for a bad transfer function, camera or
// options; FailedPrecondition when the device does not match the mesh; the callback's status
// when it stops the render.
absl::StatusOr<RenderResult> Render(const Device& device, const DeviceMesh& mesh,
                                    const TransferFunction& tf, const Camera& camera,
                                    const RenderOptions& options = {},
                                    const PartialFrameCallback& on_block = nullptr);

// Render into caller-owned host memory: `image` (room for `image_bytes`, at least
// ImageBytes(camera, options)) receives the image Render would return, in the same layout and
// with the same bits; nothing is allocated or zero-filled for it, and on CUDA the image's copy
// to the host is DMA at full bus speed when `image` is page-locked (fresnel::PinHostMemory,
// fresnel/core/gpu.h; pageable memory works too, at the driver's pageable speed), so a turntable
// or a server can reuse one pinned buffer for every frame. Same validation, errors, callback and
// synchronisation as Render (the image is complete when it returns); InvalidArgument naming
// `image` when it is null or too small. Returns the stats (total_s: the call's wall time).
absl::StatusOr<RenderStats> RenderInto(const Device& device, const DeviceMesh& mesh,
                                       const TransferFunction& tf, const Camera& camera,
                                       const RenderOptions& options, void* image,
                                       int64_t image_bytes,
                                       const PartialFrameCallback& on_block = nullptr);

// float32 RGBA [h, w, 4] → uint8 RGBA [h, w, 4] (clamped to [0, 1], ×255, rounded).
absl::StatusOr<HostArray> ToRgba8(const HostArray& rgba);

// Peak signal-to-noise ratio (dB, peak 1) between two float32 RGBA images of equal shape, over
// all four channels; +inf when equal.
double ImagePsnrDb(const HostArray& a, const HostArray& b);

}  // namespace fresnel::volume
