// Builds without CUDA: CUDA devices are refused.
#include "volume/volume_internal.h"

namespace fresnel::volume {

void CudaMeshDeleter::operator()(CudaMesh*) const {}

absl::StatusOr<std::unique_ptr<CudaMesh, CudaMeshDeleter>> UploadMeshCuda(const Device&,
                                                                          const RenderMesh&,
                                                                          int64_t*) {
  return absl::FailedPreconditionError("this build of fresnel has no CUDA support");
}

absl::Status RenderCuda(const Device&, const CudaMesh&, int64_t, const RenderJob&,
                        RenderResult*) {
  return absl::FailedPreconditionError("this build of fresnel has no CUDA support");
}

}  // namespace fresnel::volume
