// fresnel::VolumeClient: the VolumeRenderService calls (tetrahedral mesh upload, progressive
// renders, delete). Shares a Client's channel, options and deadlines; thread-safe like it (a
// turntable may keep several Render calls in flight from several threads). Every call blocks
// until its answer arrives or its deadline passes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/client/client.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/volume.grpc.pb.h"

namespace fresnel {

// A rendered image and what the server said about it.
struct VolumeRenderResult {
  std::string request_id;
  HostArray image;  // uint8 or float32 [height, width, 4], as requested
  v1::VolumeRenderStats stats;
  v1::ExecutionInfo info;
  int partial_frames = 0;  // PartialFrames received before the image
};

class VolumeClient {
 public:
  // `client` must outlive this object.
  explicit VolumeClient(Client* client);

  // Uploads a mesh: points float32 [n, 3] (mesh units), tets int32 [m, 4] (0-based point
  // indices), scalars float32 [n]. Sent as a header and chunks of at most the client's message
  // cap. The response names the mesh id (the existing one when the server already holds the
  // same mesh), its device, bounds and scalar range. Errors: the server's (INVALID_ARGUMENT
  // naming the field, RESOURCE_EXHAUSTED for the limits or the mesh cache).
  absl::StatusOr<v1::UploadMeshResponse> UploadMesh(const HostArray& points_xyz,
                                                    const HostArray& tets,
                                                    const HostArray& scalars,
                                                    v1::DeviceKind device = v1::DEVICE_KIND_ANY,
                                                    const CallOptions& call = {});

  // One render. With request.progressive, `on_partial` (when given) is called on this thread for
  // every completed hash block before the image arrives.
  absl::StatusOr<VolumeRenderResult> Render(
      const v1::VolumeRenderRequest& request,
      const std::function<void(const v1::VolumePartialFrame&)>& on_partial = nullptr,
      const CallOptions& call = {});

  absl::Status DeleteMesh(const std::string& mesh_id, const CallOptions& call = {});

 private:
  const Client* client_;  // whose SharedRegions a render's out_shm may name
  const ClientOptions options_;
  std::unique_ptr<v1::VolumeRenderService::Stub> stub_;
};

}  // namespace fresnel
