#include "server/services/volume_service.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fresnel/core/gpu.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/wire_limits.h"
#include "server/rpc/queued_writer.h"
#include "server/rpc/chunked.h"
#include "server/rpc/upload_reader.h"
#include "server/sessions.h"
#include "server/shm_arrays.h"
#include "server/status_util.h"

namespace fresnel::server {
namespace {

constexpr char kService[] = "fresnel.v1.VolumeRenderService";
constexpr char kKind[] = "mesh";
using v1::kEnvelopeBytes;  // fresnel/v1/wire_limits.h
// Renders of one mesh that may wait behind the running one (a turntable client keeps a few in
// flight to hide the transfer of each image).
constexpr int kMaxPendingRenders = 16;

// What the store keeps per mesh. `report` is set before the session opens and never changes
// (gRPC threads read it); `mesh` is built and used only by the session's jobs.
struct MeshState : SessionState {
  volume::MeshReport report;
  std::string content_hash;
  std::unique_ptr<volume::DeviceMesh> mesh;  // its destructor frees on its own device
};

// ---------------------------------------------------------------------------------------------
// UploadMesh: header, then chunks; on half-close the arrays become a mesh, validated here. The
// hash runs as a CPU job; a mesh already stored answers with its id, otherwise a session is
// opened and a job on its device builds the DeviceMesh.

class UploadCall : public UploadReader<v1::UploadMeshRequest> {
 public:
  UploadCall(ServiceContext* ctx, const VolumeLimits& limits,
             grpc::CallbackServerContext* context, v1::UploadMeshResponse* response)
      : UploadReader(ctx->metrics, kService, "UploadMesh", context, ctx->stream_state_bytes),
        ctx_(ctx),
        client_(ClientOf(context)),
        limits_(limits),
        response_(response) {
    StartReading();
  }

 private:
  static constexpr v1::MeshArray kArrays[3] = {v1::MESH_ARRAY_POINTS, v1::MESH_ARRAY_TETS,
                                               v1::MESH_ARRAY_SCALARS};

  absl::Status Take(v1::UploadMeshRequest& request) override {
    if (!have_header_) {
      if (request.msg_case() != v1::UploadMeshRequest::kHeader) {
        return absl::InvalidArgumentError("header: the first message must carry the header");
      }
      header_ = request.header();
      // Counts over the limits and a bad device hint are refused before any array byte is
      // accepted.
      FRESNEL_ASSIGN_OR_RETURN(budget_, ParseMeshHeader(header_, limits_));
      FRESNEL_ASSIGN_OR_RETURN(preference_, PreferenceOf(header_.device(), "header.device"));
      const int64_t max_bytes[3] = {budget_.points_bytes(), budget_.tets_bytes(),
                                    budget_.scalars_bytes()};
      for (int i = 0; i < 3; ++i) {
        chunks_.Expect({kArrays[i], MeshArrayName(kArrays[i]), max_bytes[i]});
      }
      have_header_ = true;
      return absl::OkStatus();
    }
    if (request.msg_case() != v1::UploadMeshRequest::kChunk) {
      return absl::InvalidArgumentError("chunk: every message after the header must be a chunk");
    }
    v1::MeshChunk& c = *request.mutable_chunk();
    record().Payload("in", static_cast<double>(c.chunk().data().size()));
    // Each array's total is bounded by what the header's counts imply; the reader counts what
    // arrives against that total.
    return chunks_.Add(c.array(), std::move(*c.mutable_chunk()));
  }

  absl::Status Complete() override {
    if (!have_header_) return absl::InvalidArgumentError("header: the stream ended before it");
    std::array<HostArray, 3> arrays;
    for (int i = 0; i < 3; ++i) {
      FRESNEL_ASSIGN_OR_RETURN(std::optional<HostArray> a, chunks_.Take(kArrays[i]));
      if (!a) {
        return absl::InvalidArgumentError(
            absl::StrCat(MeshArrayName(kArrays[i]), ": missing (no chunk of it arrived)"));
      }
      arrays[i] = *std::move(a);
    }
    auto upload = std::make_shared<Upload>();
    FRESNEL_ASSIGN_OR_RETURN(upload->mesh, MeshFromArrays(budget_, std::move(arrays[0]),
                                                          std::move(arrays[1]),
                                                          std::move(arrays[2])));
    FRESNEL_ASSIGN_OR_RETURN(upload->report, volume::ValidateMesh(upload->mesh));
    upload_ = upload;

    // The content hash reads every byte: a CPU job, not this thread.
    auto job = std::make_shared<Job>();
    job->service = kService;
    job->method = "UploadMesh";
    job->preference = DevicePreference::kCpu;
    job->deadline = DeadlineOf(context());
    job->run = [upload](const Device&, StageTimes* times) {
      const auto t0 = Clock::now();
      upload->hash = volume::MeshContentHash(upload->mesh);
      times->compute_s = std::chrono::duration<double>(Clock::now() - t0).count();
      return absl::OkStatus();
    };
    job->done = [this](const absl::Status& status, const JobReport&) { Hashed(status); };
    return ctx_->pool->Submit(std::move(job));
  }

  // On a CPU worker, after the hash.
  void Hashed(const absl::Status& status) {
    if (!status.ok()) {
      FinishWith(status);
      return;
    }
    SessionStore* store = ctx_->sessions;
    if (std::shared_ptr<Session> existing = store->FindByKey(kKind, upload_->hash, client_)) {
      const auto* state = dynamic_cast<const MeshState*>(existing->state());
      if (state != nullptr) {
        response_->set_existing(true);
        Respond(*existing, state->report, JobReport{});
        return;
      }
    }
    SessionSpec spec;
    spec.kind = kKind;
    spec.client = client_;
    spec.preference = preference_;
    spec.device_bytes = volume::DeviceBytes(upload_->mesh);
    spec.evictable = true;
    spec.max_pending = kMaxPendingRenders;
    auto state = std::make_shared<MeshState>();
    state->report = upload_->report;
    state->content_hash = upload_->hash;
    absl::StatusOr<std::shared_ptr<Session>> opened = store->Open(spec, state);
    if (!opened.ok()) {
      FinishWith(absl::Status(opened.status().code(),
                              absl::StrCat("mesh cache: ", opened.status().message())));
      return;
    }
    std::shared_ptr<Session> session = *std::move(opened);
    auto job = std::make_shared<Job>();
    job->service = kService;
    job->method = "UploadMesh";
    job->device_bytes = spec.device_bytes;
    std::shared_ptr<Upload> upload = upload_;
    // The state lives as long as the session; the job runs before any render of it.
    MeshState* raw_state = state.get();
    job->run = [upload, raw_state](const Device& device, StageTimes* times) -> absl::Status {
      const auto t0 = Clock::now();
      FRESNEL_ASSIGN_OR_RETURN(raw_state->mesh, volume::DeviceMesh::Create(device, upload->mesh));
      times->h2d_s = std::chrono::duration<double>(Clock::now() - t0).count();
      upload->mesh = volume::TetMesh();  // the host copy is no longer needed
      return absl::OkStatus();
    };
    job->done = [this, session](const absl::Status& st, const JobReport& report) {
      if (!st.ok()) {
        ctx_->sessions->Close(session->id(), client_).IgnoreError();
        FinishWith(st);
        return;
      }
      ctx_->sessions->SetKey(session, upload_->hash);
      Respond(*session, upload_->report, report);
    };
    absl::Status submitted = session->Submit(std::move(job));
    if (!submitted.ok()) {
      store->Close(session->id(), client_).IgnoreError();
      FinishWith(submitted);
    }
  }

  void Respond(const Session& session, const volume::MeshReport& report, const JobReport& job) {
    response_->set_mesh_id(session.id());
    response_->set_device(session.device());
    response_->set_device_bytes(session.reserved_bytes());
    response_->set_content_hash(upload_->hash);
    response_->set_request_id(RequestIdOr(header_.request_id()));
    FillMeshReport(report, response_);
    FillExecutionInfo(job, record().Elapsed(), response_->mutable_info());
    if (response_->info().device().empty()) response_->mutable_info()->set_device(session.device());
    FinishWith(absl::OkStatus());
  }

  struct Upload {
    volume::TetMesh mesh;
    volume::MeshReport report;
    std::string hash;
  };

  ServiceContext* ctx_;
  const std::string client_;  // ClientOf the call: the mesh's owner
  const VolumeLimits limits_;
  v1::UploadMeshResponse* response_;
  v1::MeshHeader header_;
  DevicePreference preference_ = DevicePreference::kAny;
  bool have_header_ = false;
  MeshUploadBudget budget_;
  ChunkedReader chunks_{"chunk.array"};  // points, tets, scalars (expected once the header came)
  std::shared_ptr<Upload> upload_;
};

// The pixels of one completed hash block as an array: the kernel hands them over compact,
// [height][width][4] float32 (PartialFrame's own width and height are the block's).
HostArray BlockPixels(const volume::PartialFrame& f) {
  HostArray out(DType::kFloat32, {f.height, f.width, 4});
  std::memcpy(out.raw(), f.rgba, out.nbytes());
  return out;
}

// A page-locked host image per worker thread, reused by its CUDA frames (volume::RenderInto):
// the image leaves the GPU by DMA into it and is then copied once into the reply's bytes.
// volume::Render would allocate and zero-fill a pageable HostArray per frame and copy into it at
// the driver's pageable rate (H200, Blunt Fin 1024² RGBA8: docs/volume.md "Session 8"). Up to
// kMaxStagedImageBytes; a larger image, or one the buffer cannot be had for, goes through
// Render. Not pinned (still correct, only slower) where page-locking fails.
constexpr int64_t kMaxStagedImageBytes = int64_t{64} << 20;
class ImageStaging {
 public:
  ImageStaging() = default;
  ImageStaging(const ImageStaging&) = delete;
  ImageStaging& operator=(const ImageStaging&) = delete;
  ~ImageStaging() { Release(); }
  // At least `bytes` bytes, or null.
  void* Get(int64_t bytes) {
    if (bytes <= bytes_) return data_;
    Release();
    constexpr int64_t kPage = 4096;
    const int64_t room = (bytes + kPage - 1) / kPage * kPage;
    data_ = std::aligned_alloc(kPage, static_cast<size_t>(room));
    if (data_ == nullptr) return nullptr;
    pinned_ = PinHostMemory(data_, room).ok();
    bytes_ = room;
    return data_;
  }

 private:
  void Release() {
    if (data_ != nullptr && pinned_) UnpinHostMemory(data_);
    std::free(data_);
    data_ = nullptr;
    bytes_ = 0;
    pinned_ = false;
  }
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  bool pinned_ = false;
};

// The frame as an array: on CUDA through this thread's ImageStaging, else volume::Render.
absl::StatusOr<HostArray> RenderFrame(const Device& device, const volume::DeviceMesh& mesh,
                                      const VolumeRenderInput& input,
                                      const volume::PartialFrameCallback& on_block,
                                      volume::RenderStats* stats) {
  const int64_t bytes = input.ImageBytes();
  if (device.kind == DeviceKind::kCuda && bytes <= kMaxStagedImageBytes) {
    thread_local ImageStaging staging;
    if (void* image = staging.Get(bytes)) {
      FRESNEL_ASSIGN_OR_RETURN(*stats, volume::RenderInto(device, mesh, input.tf, input.camera,
                                                          input.options, image, bytes, on_block));
      return HostArray::FromBytes(
          input.options.rgba8 ? DType::kUint8 : DType::kFloat32,
          {input.camera.height, input.camera.width, 4},
          std::string(static_cast<const char*>(image), static_cast<size_t>(bytes)));
    }
  }
  FRESNEL_ASSIGN_OR_RETURN(volume::RenderResult r, volume::Render(device, mesh, input.tf,
                                                                  input.camera, input.options,
                                                                  on_block));
  *stats = r.stats;
  return std::move(r.image);
}

// ---------------------------------------------------------------------------------------------
// Render: one job through the mesh's session; partial frames and the image are queued on the
// writer as they are produced.

using RenderWriter = QueuedWriter<v1::VolumeRenderResponse>;

absl::Status StartRender(ServiceContext* ctx, grpc::CallbackServerContext* context,
                         const v1::VolumeRenderRequest& request, RenderWriter* writer) {
  if (request.mesh_id().empty()) return absl::InvalidArgumentError("mesh_id: required");
  FRESNEL_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                           ctx->sessions->Find(request.mesh_id(), ClientOf(context)));
  auto* state = dynamic_cast<MeshState*>(session->state());
  if (session->kind() != kKind || state == nullptr) {
    return absl::NotFoundError(absl::StrCat("mesh_id ", request.mesh_id(), " is not a mesh"));
  }
  FRESNEL_ASSIGN_OR_RETURN(VolumeRenderInput parsed, ParseVolumeRender(request, state->report));
  // The final image into the client's region when the request names one (checked now).
  FRESNEL_ASSIGN_OR_RETURN(OutputRegion parsed_out,
                           OutputRegion::Reserve(request.has_out_shm(), request.out_shm(),
                                                 {parsed.ImageBytes()},
                                                 ClientRegions(ctx, context), "out_shm"));
  auto out = std::make_shared<OutputRegion>(std::move(parsed_out));
  if (!out->active() && parsed.ImageBytes() + kEnvelopeBytes > ctx->max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "camera: a ", parsed.camera.width, "x", parsed.camera.height, " image is ",
        parsed.ImageBytes(), " bytes in this format, over the server's max message size of ",
        ctx->max_message_bytes, " bytes"));
  }
  auto input = std::make_shared<const VolumeRenderInput>(std::move(parsed));
  auto result = std::make_shared<v1::VolumeImage>();
  result->set_request_id(RequestIdOr(request.request_id()));

  auto job = std::make_shared<Job>();
  job->service = kService;
  job->method = "Render";
  job->deadline = DeadlineOf(context);
  std::weak_ptr<Job> weak_job = job;
  job->run = [state, input, result, writer, weak_job, out](const Device& device,
                                                           StageTimes* times) -> absl::Status {
    if (!state->mesh) return absl::FailedPreconditionError("the mesh was not built");
    volume::PartialFrameCallback on_block;
    if (input->progressive) {
      on_block = [input, writer](const volume::PartialFrame& f) -> absl::Status {
        v1::VolumeRenderResponse msg;
        v1::VolumePartialFrame* p = msg.mutable_partial();
        p->set_block(f.block);
        p->set_num_blocks(f.num_blocks);
        p->set_x0(f.x0);
        p->set_y0(f.y0);
        p->set_stride(f.stride);
        FRESNEL_ASSIGN_OR_RETURN(HostArray pixels, ImageInFormat(BlockPixels(f), input->format));
        ToProto(std::move(pixels), p->mutable_pixels());
        if (!writer->Push(std::move(msg))) {
          return absl::CancelledError("the client went away");
        }
        return absl::OkStatus();
      };
    }
    volume::RenderStats stats;
    FRESNEL_ASSIGN_OR_RETURN(HostArray frame,
                             RenderFrame(device, *state->mesh, *input, on_block, &stats));
    times->compute_s = stats.project_s + stats.records_s + stats.sort_s + stats.composite_s;
    times->d2h_s = stats.d2h_s;
    StatsToProto(stats, result->mutable_stats());
    FRESNEL_ASSIGN_OR_RETURN(HostArray image, ImageInFormat(std::move(frame), input->format));
    ToProto(std::move(image), result->mutable_image());
    if (out->active()) {
      FRESNEL_RETURN_IF_ERROR(out->Store(result.get()));
      out->Release();
    }
    return absl::OkStatus();
  };
  job->done = [writer, result](const absl::Status& status, const JobReport& report) {
    if (status.ok()) {
      FillExecutionInfo(report, writer->record().Elapsed(), result->mutable_info());
      writer->record().Payload("out", static_cast<double>(result->image().data().size()));
      v1::VolumeRenderResponse msg;
      *msg.mutable_image() = std::move(*result);
      writer->Push(std::move(msg));
    }
    writer->Close(status);  // the writer may be gone after this line
  };
  writer->SetCancelHook([weak_job] {
    if (std::shared_ptr<Job> j = weak_job.lock()) j->Cancel();
  });
  return session->Submit(std::move(job));
}

}  // namespace

grpc::ServerReadReactor<v1::UploadMeshRequest>* VolumeService::UploadMesh(
    grpc::CallbackServerContext* context, v1::UploadMeshResponse* response) {
  return new UploadCall(ctx_, limits_, context, response);
}

grpc::ServerWriteReactor<v1::VolumeRenderResponse>* VolumeService::Render(
    grpc::CallbackServerContext* context, const v1::VolumeRenderRequest* request) {
  auto* writer = new RenderWriter(ctx_->metrics, kService, "Render");
  absl::Status st = StartRender(ctx_, context, *request, writer);
  if (!st.ok()) writer->Close(st);
  return writer;
}

grpc::ServerUnaryReactor* VolumeService::DeleteMesh(grpc::CallbackServerContext* context,
                                                    const v1::DeleteMeshRequest* request,
                                                    v1::DeleteMeshResponse*) {
  RpcRecord record(ctx_->metrics, kService, "DeleteMesh");
  absl::Status status = request->mesh_id().empty()
                            ? absl::InvalidArgumentError("mesh_id: required")
                            : ctx_->sessions->Close(request->mesh_id(), ClientOf(context));
  return FinishUnary(record, context, status);
}

}  // namespace fresnel::server
