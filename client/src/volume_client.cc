// fresnel::VolumeClient: UploadMesh (header + chunks), Render (partial frames, then the image)
// and DeleteMesh.
#include "fresnel/client/volume_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "call_util.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/wire_limits.h"

namespace fresnel {
namespace {

using internal::ApplyDeadline;
using internal::FromGrpc;

// Chunks stay small enough to pipeline well even when the cap is large.
constexpr int64_t kMaxChunkBytes = 4 << 20;

}  // namespace

VolumeClient::VolumeClient(Client* client)
    : client_(client),
      options_(client->options()), stub_(v1::VolumeRenderService::NewStub(client->channel())) {}

absl::StatusOr<v1::UploadMeshResponse> VolumeClient::UploadMesh(const HostArray& points_xyz,
                                                                const HostArray& tets,
                                                                const HostArray& scalars,
                                                                v1::DeviceKind device,
                                                                const CallOptions& call) {
  if (points_xyz.ndim() != 2 || points_xyz.dim(1) != 3) {
    return absl::InvalidArgumentError(absl::StrCat("points_xyz must be [n, 3], got ",
                                                   ShapeString(points_xyz.shape())));
  }
  if (tets.ndim() != 2 || tets.dim(1) != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tets must be [m, 4], got ", ShapeString(tets.shape())));
  }
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  v1::UploadMeshResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadMeshRequest>> writer =
      stub_->UploadMesh(&context, &response);
  v1::UploadMeshRequest first;
  v1::MeshHeader* header = first.mutable_header();
  header->set_num_points(points_xyz.dim(0));
  header->set_num_tets(tets.dim(0));
  header->mutable_device()->set_kind(device);
  bool ok = writer->Write(first);
  const int64_t chunk_bytes =
      std::min(v1::ChunkPayloadBytes(options_.max_message_bytes), kMaxChunkBytes);
  const std::pair<v1::MeshArray, const HostArray*> arrays[] = {
      {v1::MESH_ARRAY_POINTS, &points_xyz},
      {v1::MESH_ARRAY_TETS, &tets},
      {v1::MESH_ARRAY_SCALARS, &scalars}};
  for (const auto& [which, array] : arrays) {
    if (!ok) break;
    ok = internal::WriteArrayChunks(
        writer.get(), *array, chunk_bytes,
        [which = which](v1::ArrayChunk&& chunk, v1::UploadMeshRequest* message) {
          message->mutable_chunk()->set_array(which);
          *message->mutable_chunk()->mutable_chunk() = std::move(chunk);
        });
  }
  if (ok) writer->WritesDone();
  const grpc::Status status = writer->Finish();  // says why when a Write failed
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::StatusOr<VolumeRenderResult> VolumeClient::Render(
    const v1::VolumeRenderRequest& request,
    const std::function<void(const v1::VolumePartialFrame&)>& on_partial,
    const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  std::unique_ptr<grpc::ClientReader<v1::VolumeRenderResponse>> reader =
      stub_->Render(&context, request);
  VolumeRenderResult result;
  bool have_image = false;
  FRESNEL_RETURN_IF_ERROR(internal::ReadAll<v1::VolumeRenderResponse>(
      &context, reader.get(), [&](v1::VolumeRenderResponse* message) -> absl::Status {
        if (message->has_partial()) {
          ++result.partial_frames;
          if (on_partial) on_partial(message->partial());
        } else if (message->has_image()) {
          v1::VolumeImage* image = message->mutable_image();
          // An image written to a region (out_shm) is read back out of it.
          FRESNEL_RETURN_IF_ERROR(internal::TakeRegionArrays(client_, image));
          FRESNEL_ASSIGN_OR_RETURN(result.image,
                                   FromProto(std::move(*image->mutable_image()), "image"));
          result.stats = image->stats();
          result.info = image->info();
          result.request_id = image->request_id();
          have_image = true;
        }
        return absl::OkStatus();
      }));
  if (!have_image) return absl::DataLossError("the render stream ended without an image");
  return result;
}

absl::Status VolumeClient::DeleteMesh(const std::string& mesh_id, const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options_, call);
  v1::DeleteMeshRequest request;
  request.set_mesh_id(mesh_id);
  v1::DeleteMeshResponse response;
  return FromGrpc(stub_->DeleteMesh(&context, request, &response));
}

}  // namespace fresnel
