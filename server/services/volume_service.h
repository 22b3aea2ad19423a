// fresnel.v1.VolumeRenderService: tetrahedral meshes uploaded once and rendered many times.
//
// A mesh is a SessionStore session of kind "mesh", opened evictable with device_bytes =
// volume::DeviceBytes(mesh): the store's per-device cap is the mesh cache's cap, and the least
// recently used idle meshes are evicted to make room (a mesh larger than the cap is
// RESOURCE_EXHAUSTED). The session's key is the mesh's content hash (volume::MeshContentHash),
// so the same mesh uploaded twice is stored once. The DeviceMesh is built by a job on the
// session's device and every Render is a job through Session::Submit: renders of one mesh run
// one at a time, in arrival order (different meshes render concurrently on the device's
// streams).
//
// Threads: uploads are assembled and validated (volume::ValidateMesh) on the gRPC thread; the
// content hash runs as a CPU job, the upload and the renders on the session's device; nothing
// blocks a gRPC thread.
#pragma once

#include "fresnel/v1/volume.grpc.pb.h"
#include "server/call.h"
#include "server/services/volume_params.h"

namespace fresnel::server {

class VolumeService final : public v1::VolumeRenderService::CallbackService {
 public:
  // ctx->sessions must be set.
  VolumeService(ServiceContext* ctx, VolumeLimits limits) : ctx_(ctx), limits_(limits) {}

  grpc::ServerReadReactor<v1::UploadMeshRequest>* UploadMesh(
      grpc::CallbackServerContext* context, v1::UploadMeshResponse* response) override;
  grpc::ServerWriteReactor<v1::VolumeRenderResponse>* Render(
      grpc::CallbackServerContext* context, const v1::VolumeRenderRequest* request) override;
  grpc::ServerUnaryReactor* DeleteMesh(grpc::CallbackServerContext* context,
                                       const v1::DeleteMeshRequest* request,
                                       v1::DeleteMeshResponse* response) override;

 private:
  ServiceContext* ctx_;
  VolumeLimits limits_;
};

}  // namespace fresnel::server
