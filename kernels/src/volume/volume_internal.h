// Internal interfaces of the volume renderer between render.cc (validation, dispatch),
// render_cpu.cc and render_cuda.cu.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/device.h"
#include "fresnel/volume/render.h"
#include "volume/volume_math.h"

namespace fresnel::volume {

// The renderable part of a mesh: points, scalars and the non-degenerate tetrahedra.
struct RenderMesh {
  std::vector<float> points_xyz;
  std::vector<float> scalars;
  std::vector<int32_t> tets;
  int64_t num_tets() const { return static_cast<int64_t>(tets.size() / 4); }
};

// CPU acceleration data: the neighbour across each face (face i is opposite vertex i; -1 on the
// boundary) and the boundary faces as 4·tet + face.
struct CpuMesh {
  RenderMesh mesh;
  std::vector<int32_t> neighbors;
  std::vector<int64_t> boundary_faces;
  std::vector<float> walk_tets;  // math::kWalkTetFloats per tetrahedron (BuildWalkTets)
};
CpuMesh BuildCpuMesh(RenderMesh mesh);
// Per face (4·tet + face, face i opposite vertex i) the tetrahedron across it, -1 on the
// boundary (a face of one tetrahedron, or of three or more in a non-manifold mesh). TBB, on the
// host: a counting sort of the 4n faces by their smallest point, 16 B per face.
std::vector<int32_t> FaceNeighbors(const std::vector<int32_t>& tets);
int64_t CpuMeshBytes(const CpuMesh& mesh);
// The walk geometry of every tetrahedron (walk_math.h, math::WalkTet), packed as
// math::kWalkTetFloats floats each: computed in double from the float points and scalars and
// rounded, TBB, on the host; both backends walk with these same floats.
std::vector<float> BuildWalkTets(const RenderMesh& mesh);

// Persistent device buffers of a mesh (defined in render_cuda.cu).
struct CudaMesh;
struct CudaMeshDeleter {
  void operator()(CudaMesh* mesh) const;
};
absl::StatusOr<std::unique_ptr<CudaMesh, CudaMeshDeleter>> UploadMeshCuda(
    const Device& device, const RenderMesh& mesh, int64_t* device_bytes);
int64_t CudaMeshBytes(int64_t num_points, int64_t num_tets);

// Everything Render validated and converted.
struct RenderJob {
  math::TfTable tf;
  math::CameraFrame camera;
  int hash_block_bits = 2;
  Compositing compositing = Compositing::kAuto;
  ScanConversion scan_conversion = ScanConversion::kAuto;
  CudaMethod cuda_method = CudaMethod::kAuto;
  int64_t max_block_records = 0;
  int64_t max_pass_records = 0;
  bool rgba8 = false;
  const PartialFrameCallback* on_block = nullptr;
  // Where the image goes (host memory of ImageBytes: float RGBA, or RGBA8 on CUDA with rgba8).
  void* image = nullptr;
};

absl::Status RenderCpu(const CpuMesh& mesh, const RenderJob& job, RenderResult* result);
absl::Status RenderCuda(const Device& device, const CudaMesh& mesh, int64_t mesh_bytes,
                        const RenderJob& job, RenderResult* result);

}  // namespace fresnel::volume

struct fresnel::volume::DeviceMesh::Impl {
  std::unique_ptr<CpuMesh> cpu;
  std::unique_ptr<CudaMesh, CudaMeshDeleter> cuda;
};
