// Proto <-> kernel conversion for fresnel.v1.VolumeRenderService: mesh upload headers and arrays
// to a volume::TetMesh, render requests to a transfer function, camera and options, and the
// kernel's reports and stats back to proto. Validation uses the kernel's own validators; errors
// are InvalidArgument naming the request field. No gRPC, no devices.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/volume.pb.h"
#include "fresnel/volume/mesh.h"
#include "fresnel/volume/render.h"

namespace fresnel::server {

// What one uploaded mesh may hold (ServerInfo.limits.volume_*).
struct VolumeLimits {
  int64_t max_points = int64_t{1} << 27;
  int64_t max_tets = int64_t{1} << 28;
};

// Byte budget of each array of a mesh whose header declared these counts.
struct MeshUploadBudget {
  int64_t num_points = 0;
  int64_t num_tets = 0;
  int64_t points_bytes() const { return num_points * 3 * 4; }
  int64_t tets_bytes() const { return num_tets * 4 * 4; }
  int64_t scalars_bytes() const { return num_points * 4; }
};

// Checks the declared counts before any array byte is accepted: INVALID_ARGUMENT for counts
// below the minimum (4 points, 1 tetrahedron), RESOURCE_EXHAUSTED above the limits.
absl::StatusOr<MeshUploadBudget> ParseMeshHeader(const v1::MeshHeader& header,
                                                 const VolumeLimits& limits);

// "points", "tets" or "scalars"; "array" for anything else.
const char* MeshArrayName(v1::MeshArray which);

// The three assembled arrays as a mesh: each must have the dtype and shape the header's counts
// imply (INVALID_ARGUMENT naming the array otherwise). The arrays' bytes are moved, not copied
// twice. The mesh is not validated here (volume::ValidateMesh).
absl::StatusOr<volume::TetMesh> MeshFromArrays(const MeshUploadBudget& budget, HostArray points,
                                               HostArray tets, HostArray scalars);

// The report of a validated mesh into the response.
void FillMeshReport(const volume::MeshReport& report, v1::UploadMeshResponse* out);

struct VolumeRenderInput {
  volume::TransferFunction tf;
  volume::Camera camera;
  volume::RenderOptions options;
  v1::VolumeImageFormat format = v1::VOLUME_IMAGE_RGBA8;
  bool progressive = false;
  // Bytes of the final image in `format`.
  int64_t ImageBytes() const;
};

// The request against the mesh's report (the default transfer function and orbit cameras need
// its scalar range and bounds). INVALID_ARGUMENT naming the field (tf.points[2].scalar,
// camera.width, ...), with the kernel's validators.
absl::StatusOr<VolumeRenderInput> ParseVolumeRender(const v1::VolumeRenderRequest& request,
                                                    const volume::MeshReport& report);

void StatsToProto(const volume::RenderStats& stats, v1::VolumeRenderStats* out);

// A float32 RGBA [h, w, 4] image (or block) in the requested format (uint8 images pass as they
// are: the kernel converted them already).
absl::StatusOr<HostArray> ImageInFormat(HostArray rgba, v1::VolumeImageFormat format);

}  // namespace fresnel::server
