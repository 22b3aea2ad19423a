// CUDA internals shared by the cell projection (render_cuda.cu) and the ray walk
// (walk_cuda.cu): the persistent mesh buffers and the event timer of the stages.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "volume/volume_internal.h"
#include "volume/volume_math.h"

namespace fresnel::volume {

struct CudaMesh {
  int ordinal = 0;
  float4* points = nullptr;  // x, y, z, scalar
  int4* tets = nullptr;
  int4* neighbors = nullptr;  // per face (face i opposite vertex i) the tetrahedron across, -1
  // The ray walk's: 5 float4 per tetrahedron (math::WalkTet, BuildWalkTets), and the boundary
  // faces (4·tet + face, neighbour -1) in increasing order.
  float4* walk_tets = nullptr;
  int32_t* boundary_faces = nullptr;
  int64_t num_points = 0;
  int64_t num_tets = 0;
  int64_t num_boundary_faces = 0;
  float centre[3] = {0, 0, 0};  // bounding sphere of the points (depth quantisation range)
  float radius = 0;
  float lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};  // bounding box of the points
  // The ray walk's room for the tiles' boundary-face lists (entries), learnt from the frames
  // rendered so far (walk_cuda.cu): with it a frame needs no read-back of the list's length
  // before the walk. Shared by every stream that renders the mesh; 0 until the first frame.
  mutable std::atomic<int64_t> tile_faces_room{0};
};

// CudaMethod::kRayWalk (walk_cuda.cu): the whole frame, image to the host included.
absl::Status RenderWalkCuda(const Device& device, const CudaMesh& mesh, int64_t mesh_bytes,
                            const RenderJob& job, RenderResult* result);

// Whether every point of the mesh's bounding box lies strictly in front of the camera's eye
// plane, so every ray enters the mesh through a boundary face (what the walk needs).
bool MeshInFrontOfEye(const CudaMesh& mesh, const math::CameraFrame& cam);

namespace cuda_volume {

// The transfer function into shared memory by the threads `rank` of `count` (word by word);
// the caller synchronises.
__device__ __forceinline__ void CopyTfTable(const math::TfTable& from, math::TfTable* to,
                                            int rank, int count) {
  const int words = sizeof(math::TfTable) / 4;
  const uint32_t* src = reinterpret_cast<const uint32_t*>(&from);
  uint32_t* dst = reinterpret_cast<uint32_t*>(to);
  for (int i = rank; i < words; i += count) dst[i] = src[i];
}

// float RGBA → uint8 RGBA: clamped to [0, 1], ×255, rounded to nearest (as ToRgba8).
__device__ __forceinline__ uchar4 Rgba8Of(float4 v) {
  auto q = [](float c) {
    return static_cast<unsigned char>(__float2int_rn(fminf(fmaxf(c, 0.0f), 1.0f) * 255.0f));
  };
  return make_uchar4(q(v.x), q(v.y), q(v.z), q(v.w));
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

// A finished hash block to the callback: its `pixels` float RGBA from `partial_dev` to *host
// (timed into *d2h_s), the stream synchronised, then `frame` (its geometry) with rgba = *host.
inline absl::Status DeliverPartialFrame(cudaStream_t stream, StageTimer* timer, double* d2h_s,
                                        const float4* partial_dev, int64_t pixels,
                                        std::vector<float>* host, PartialFrame frame,
                                        const PartialFrameCallback& on_block) {
  FRESNEL_RETURN_IF_ERROR(timer->Start(d2h_s));
  host->resize(4 * pixels);
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host->data(), partial_dev,
                                               pixels * sizeof(float4), cudaMemcpyDeviceToHost,
                                               stream));
  FRESNEL_RETURN_IF_ERROR(timer->Stop());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  frame.rgba = host->data();
  return on_block(frame);
}

}  // namespace cuda_volume
}  // namespace fresnel::volume
