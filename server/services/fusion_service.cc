#include "server/services/fusion_service.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/fusion/fusion.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/wire_limits.h"
#include "server/rpc/ordered_stream.h"
#include "server/services/fusion_params.h"
#include "server/shm_arrays.h"
#include "server/sessions.h"
#include "server/status_util.h"

namespace fresnel::server {
namespace {

constexpr char kService[] = "fresnel.v1.FusionService";
using v1::kEnvelopeBytes;

// What a fusion session keeps: the config it was opened with and, once the session's first job
// ran, the volume (its destructor makes its device current and frees the device memory).
class FusionState : public SessionState {
 public:
  explicit FusionState(const fusion::FusionConfig& c) : config(c) {}
  const fusion::FusionConfig config;
  std::unique_ptr<fusion::Volume> volume;
};

v1::FusionResponse ErrorResponse(int64_t seq, const absl::Status& status) {
  v1::FusionResponse r;
  r.set_seq(seq);
  ToItemStatus(status, r.mutable_status());
  return r;
}

v1::FusionResponse OkResponse(int64_t seq) {
  v1::FusionResponse r;
  r.set_seq(seq);
  ToItemStatus(absl::OkStatus(), r.mutable_status());
  return r;
}

// Whether two configs describe the same volume (restore: the declared config against the one in
// the snapshot).
bool SameVolume(const fusion::FusionConfig& a, const fusion::FusionConfig& b) {
  return a.camera.width == b.camera.width && a.camera.height == b.camera.height &&
         a.voxel_size_m == b.voxel_size_m && a.brick_budget_bytes == b.brick_budget_bytes &&
         a.color == b.color && fusion::DeviceBytes(a) == fusion::DeviceBytes(b);
}

class SessionCall : public OrderedStream<v1::FusionRequest, v1::FusionResponse> {
 public:
  SessionCall(ServiceContext* ctx, const FusionServiceLimits& limits, std::string client)
      : OrderedStream(ctx->metrics, kService, "Session", limits.max_pending),
        ctx_(ctx),
        client_(std::move(client)),
        limits_(limits) {
    absl::Status open = absl::OkStatus();
    if (ctx->drain != nullptr) {
      open = ctx->drain->Register("fusion session", [this](const absl::Status& st) { End(st); },
                                  &ticket_);
    }
    if (!open.ok()) {
      End(open);  // nothing read: finishes at once
      return;
    }
    StartReading();
  }

 private:
  // The work of one job: what it computed, or the kernel's error for this message alone.
  using Run = std::function<absl::Status(fusion::Volume&, const Device&)>;
  using Respond = std::function<void(const JobReport&)>;

  void OnRequest(int64_t seq, v1::FusionRequest* request) override {
    if (!session_) {
      Open(seq, request);
      return;
    }
    switch (request->msg_case()) {
      case v1::FusionRequest::kFrame: Frame(seq, request->mutable_frame()); return;
      case v1::FusionRequest::kRender: Render(seq, request->render()); return;
      case v1::FusionRequest::kMesh: Mesh(seq, request->mesh().max_chunk_bytes()); return;
      case v1::FusionRequest::kSnapshot:
        Snapshot(seq, request->snapshot().max_chunk_bytes());
        return;
      case v1::FusionRequest::kClose: Close(seq); return;
      case v1::FusionRequest::kConfig:
      case v1::FusionRequest::kRestore:
        Answer(seq, ErrorResponse(seq, absl::InvalidArgumentError(
                                           "config: only the first message may configure or "
                                           "restore the session")));
        return;
      default:
        Answer(seq, ErrorResponse(seq, absl::InvalidArgumentError(
                                           "msg: the request carries no message")));
    }
  }

  void OnStreamDone() override {
    ticket_.Close();
    // Jobs already queued still run; the volume is freed after the last of them.
    if (session_) ctx_->sessions->Close(session_->id(), session_->client()).IgnoreError();
  }

  // ---- opening -------------------------------------------------------------------------------

  // A failure of the first message(s) ends the stream with it.
  void FailOpen(int64_t seq, const absl::Status& status) {
    End(status);
    Skip(seq);
  }

  void Open(int64_t seq, v1::FusionRequest* request) {
    if (restore_.has_value()) {
      if (request->msg_case() != v1::FusionRequest::kRestore) {
        FailOpen(seq, absl::InvalidArgumentError(
                          "restore: the snapshot's messages must follow one another up to the one "
                          "marked last"));
        return;
      }
      TakeRestorePart(seq, request->mutable_restore());
      return;
    }
    switch (request->msg_case()) {
      case v1::FusionRequest::kConfig: {
        absl::StatusOr<fusion::FusionConfig> config = FusionConfigFromProto(request->config());
        absl::Status st = config.status();
        if (st.ok()) st = fusion::ValidateConfig(*config);
        if (!st.ok()) {
          FailOpen(seq, st);
          return;
        }
        if (request->config().max_queued_frames() < 0) {
          FailOpen(seq, absl::InvalidArgumentError(absl::StrCat(
                            "config.max_queued_frames: must be >= 0, got ",
                            request->config().max_queued_frames())));
          return;
        }
        absl::StatusOr<DevicePreference> preference =
            PreferenceOf(request->config().device(), "config.device");
        if (!preference.ok()) {
          FailOpen(seq, preference.status());
          return;
        }
        max_queued_frames_ = request->config().max_queued_frames();
        OpenSession(seq, *config, *preference, nullptr);
        return;
      }
      case v1::FusionRequest::kRestore: {
        const v1::FusionRestore& r = request->restore();
        if (!r.has_config()) {
          FailOpen(seq, absl::InvalidArgumentError(
                            "restore.config: required in the first restore message (the "
                            "config the snapshot's first chunk carried)"));
          return;
        }
        absl::StatusOr<fusion::FusionConfig> config = FusionConfigFromProto(r.config());
        absl::Status st = config.status();
        if (st.ok()) st = fusion::ValidateConfig(*config);
        if (!st.ok()) {
          FailOpen(seq, absl::InvalidArgumentError(absl::StrCat("restore.", st.message())));
          return;
        }
        if (r.config().max_queued_frames() < 0) {
          FailOpen(seq, absl::InvalidArgumentError(
                            "restore.config.max_queued_frames: must be >= 0"));
          return;
        }
        absl::StatusOr<DevicePreference> preference =
            PreferenceOf(r.config().device(), "restore.config.device");
        if (!preference.ok()) {
          FailOpen(seq, preference.status());
          return;
        }
        max_queued_frames_ = r.config().max_queued_frames();
        restore_.emplace();
        restore_config_ = *config;
        restore_preference_ = *preference;
        TakeRestorePart(seq, request->mutable_restore());
        return;
      }
      default:
        FailOpen(seq, absl::InvalidArgumentError(
                          "config: the first message must carry `config` or `restore`"));
    }
  }

  void TakeRestorePart(int64_t seq, v1::FusionRestore* part) {
    if (static_cast<int64_t>(restore_->size() + part->data().size()) >
        limits_.max_snapshot_bytes) {
      FailOpen(seq, absl::InvalidArgumentError(absl::StrCat(
                        "restore.data: the snapshot exceeds the limit of ",
                        limits_.max_snapshot_bytes, " bytes (ServerInfo.fusion)")));
      return;
    }
    restore_->append(part->data());
    part->clear_data();
    if (!part->last()) {
      Skip(seq);  // parts before the last are not answered
      return;
    }
    auto snapshot = std::make_shared<std::string>(std::move(*restore_));
    restore_.reset();
    OpenSession(seq, restore_config_, restore_preference_, std::move(snapshot));
  }

  void OpenSession(int64_t seq, const fusion::FusionConfig& config, DevicePreference preference,
                   std::shared_ptr<std::string> snapshot) {
    SessionSpec spec;
    spec.kind = "fusion";
    spec.client = client_;
    spec.preference = preference;
    spec.device_bytes = fusion::DeviceBytes(config);
    spec.max_pending = limits_.max_pending;
    auto state = std::make_shared<FusionState>(config);
    absl::StatusOr<std::shared_ptr<Session>> session = ctx_->sessions->Open(spec, state);
    if (!session.ok()) {
      FailOpen(seq, session.status());
      return;
    }
    session_ = *session;
    state_ = state.get();
    config_ = config;
    auto job = std::make_shared<Job>();
    job->service = kService;
    job->method = snapshot ? "Restore" : "Create";
    job->device_bytes = spec.device_bytes;
    FusionState* st = state_;
    job->run = [st, snapshot](const Device& device, StageTimes*) -> absl::Status {
      if (!snapshot) {
        FRESNEL_ASSIGN_OR_RETURN(st->volume, fusion::Volume::Create(device, st->config));
        return absl::OkStatus();
      }
      FRESNEL_ASSIGN_OR_RETURN(std::unique_ptr<fusion::Volume> v,
                               fusion::Volume::Restore(device, *snapshot));
      snapshot->clear();
      snapshot->shrink_to_fit();
      if (!SameVolume(v->config(), st->config)) {
        return absl::InvalidArgumentError(
            "restore.config: does not match the config stored in the snapshot");
      }
      st->volume = std::move(v);
      return absl::OkStatus();
    };
    job->done = [this, seq, st](const absl::Status& status, const JobReport&) {
      if (!status.ok()) {
        FailOpen(seq, status);
        return;
      }
      v1::FusionResponse r = OkResponse(seq);
      v1::FusionOpened* o = r.mutable_opened();
      o->set_session_id(session_->id());
      o->set_device(session_->device());
      o->set_reserved_bytes(session_->reserved_bytes());
      o->set_brick_capacity(st->volume->brick_capacity());
      o->set_frame_index(st->volume->frame_index());
      FusionConfigToProto(st->volume->config(), o->mutable_config());
      Answer(seq, std::move(r));
    };
    job->continues_call = true;  // the session was open when a drain began: it may go on
    absl::Status submitted = session_->Submit(job);
    if (!submitted.ok()) FailOpen(seq, submitted);
  }

  // ---- the session's messages ----------------------------------------------------------------

  // Runs `run` as the session's next job. A kernel error answers this message alone; the job
  // failing (cancelled, device lost, server draining) or the session having ended ends the stream.
  // A full session queue (which the read limit keeps from happening) answers RESOURCE_EXHAUSTED.
  // Returns whether the job was accepted.
  bool Submit(int64_t seq, const char* method, int64_t device_bytes, Run run, Respond respond) {
    auto item = std::make_shared<absl::Status>();
    auto job = std::make_shared<Job>();
    job->service = kService;
    job->method = method;
    job->device_bytes = device_bytes;
    FusionState* st = state_;
    job->run = [st, item, run = std::move(run)](const Device& device, StageTimes*) {
      if (!st->volume) {
        *item = absl::FailedPreconditionError("session: the volume was not created");
      } else {
        *item = run(*st->volume, device);
      }
      return absl::OkStatus();
    };
    job->done = [this, seq, item, respond = std::move(respond)](const absl::Status& status,
                                                                const JobReport& report) {
      if (!status.ok()) {
        End(status);
        Skip(seq);
      } else if (!item->ok()) {
        Answer(seq, ErrorResponse(seq, *item));
      } else {
        respond(report);
      }
    };
    job->continues_call = true;  // the session was open when a drain began: it may go on
    absl::Status submitted = session_->Submit(job);
    if (submitted.ok()) return true;
    if (absl::IsResourceExhausted(submitted)) {
      Answer(seq, ErrorResponse(seq, submitted));
    } else {
      End(submitted);
      Skip(seq);
    }
    return false;
  }

  void Frame(int64_t seq, v1::FusionFrame* frame) {
    const Clock::time_point received = Clock::now();
    struct Work {
      std::string depth, rgb;
      fusion::FrameInput input;
      fusion::FrameOptions options;
      fusion::FrameResult result;
    };
    auto work = std::make_shared<Work>();
    work->depth = std::move(*frame->mutable_depth());
    work->rgb = std::move(*frame->mutable_rgb());
    work->input.depth = work->depth;
    work->input.rgb = work->rgb;
    absl::Status st;
    if (frame->has_pose_prior()) {
      absl::StatusOr<fusion::RigidTransform> p = PoseFromProto(frame->pose_prior(), "pose_prior");
      if (p.ok()) work->input.pose_prior = *p;
      st.Update(p.status());
    }
    if (frame->has_fixed_pose()) {
      absl::StatusOr<fusion::RigidTransform> p = PoseFromProto(frame->fixed_pose(), "fixed_pose");
      if (p.ok()) work->input.fixed_pose = *p;
      st.Update(p.status());
    }
    if (frame->has_prior_weight()) {
      work->options.prior_weight = frame->prior_weight();
      if (!(work->options.prior_weight >= 0 && work->options.prior_weight < 1e6)) {
        st.Update(absl::InvalidArgumentError("prior_weight: must be finite, in [0, 1e6)"));
      }
    }
    if (frame->has_integrate()) work->options.integrate = frame->integrate();
    if (st.ok()) st = fusion::ValidateFrame(config_, work->input);
    if (!st.ok()) {
      Answer(seq, ErrorResponse(seq, st));
      return;
    }
    if (max_queued_frames_ > 0 && queued_frames_->load() >= max_queued_frames_) {
      Answer(seq, ErrorResponse(seq, absl::ResourceExhaustedError(absl::StrCat(
                                         "frame dropped: ", queued_frames_->load(),
                                         " frames of the session are queued or running "
                                         "(config.max_queued_frames = ",
                                         max_queued_frames_, ")"))));
      return;
    }
    queued_frames_->fetch_add(1);
    const double timestamp = frame->timestamp_s();
    const bool submitted = Submit(
        seq, "Frame", 0,
        [work, queued = queued_frames_](fusion::Volume& volume,
                                        const Device& device) -> absl::Status {
          absl::StatusOr<fusion::FrameResult> r =
              volume.ProcessFrame(device, work->input, work->options);
          queued->fetch_sub(1);
          if (!r.ok()) return r.status();
          work->result = *std::move(r);
          return absl::OkStatus();
        },
        [this, seq, work, timestamp, received](const JobReport& report) {
          v1::FusionResponse r = OkResponse(seq);
          v1::FusionFrameResult* f = r.mutable_frame();
          FrameResultToProto(work->result, f);
          f->set_timestamp_s(timestamp);
          FillExecutionInfo(report, SecondsSince(received), f->mutable_info());
          Answer(seq, std::move(r));
        });
    if (!submitted) queued_frames_->fetch_sub(1);
  }

  void Render(int64_t seq, const v1::FusionRenderRequest& request) {
    const Clock::time_point received = Clock::now();
    absl::Status st;
    std::optional<fusion::RigidTransform> pose;
    if (request.has_t_world_camera()) {
      absl::StatusOr<fusion::RigidTransform> p =
          PoseFromProto(request.t_world_camera(), "render.t_world_camera");
      st = p.status();
      if (p.ok() && !p->IsValid()) {
        st = absl::InvalidArgumentError(
            "render.t_world_camera: must be finite with an orthonormal rotation");
      }
      if (p.ok()) pose = *p;
    }
    fusion::FusionConfig view = config_;
    if (request.has_camera()) view.camera = CameraFromProto(request.camera());
    if (st.ok() && request.has_camera()) {
      if (absl::Status c = fusion::ValidateConfig(view); !c.ok()) {
        st = absl::InvalidArgumentError(absl::StrCat("render.", c.message()));
      }
    }
    absl::StatusOr<fusion::RenderMode> mode = RenderModeFromProto(request.mode());
    if (st.ok()) st = mode.status();
    const int64_t pixels = static_cast<int64_t>(view.camera.width) * view.camera.height;
    if (st.ok() && pixels > limits_.max_render_pixels) {
      st = absl::InvalidArgumentError(
          absl::StrCat("render.camera: ", view.camera.width, "x", view.camera.height,
                       " exceeds the limit of ", limits_.max_render_pixels, " pixels"));
    }
    auto out = std::make_shared<OutputRegion>();
    if (st.ok()) {
      const int64_t per_pixel = *mode == fusion::RenderMode::kNormals ? 12
                                : *mode == fusion::RenderMode::kDepth ? 4
                                : *mode == fusion::RenderMode::kColor ? 3
                                                                      : 1;
      // The image into the client's region when the request names one (checked now).
      absl::StatusOr<OutputRegion> reserved =
          OutputRegion::Reserve(request.has_out_shm(), request.out_shm(), {pixels * per_pixel},
                                ClientRegions(ctx_, client_), "render.out_shm");
      if (reserved.ok()) {
        *out = *std::move(reserved);
      } else {
        st = reserved.status();
      }
      if (st.ok() && !out->active() &&
          pixels * per_pixel + kEnvelopeBytes > ctx_->max_message_bytes) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "render.camera: the image (", pixels * per_pixel,
            " bytes) does not fit in one message (ServerInfo.limits.max_message_bytes = ",
            ctx_->max_message_bytes, ")"));
      }
    }
    if (st.ok() && *mode == fusion::RenderMode::kColor && !config_.color) {
      st = absl::InvalidArgumentError("render.mode: COLOR needs a session with config.color");
    }
    if (!st.ok()) {
      Answer(seq, ErrorResponse(seq, st));
      return;
    }
    auto image = std::make_shared<HostArray>();
    const fusion::CameraIntrinsics camera = view.camera;
    const fusion::RenderMode m = *mode;
    const v1::FusionRenderMode proto_mode = request.mode();
    Submit(
        seq, "Render", pixels * 16,
        [image, pose, camera, m](fusion::Volume& volume, const Device& device) -> absl::Status {
          FRESNEL_ASSIGN_OR_RETURN(
              *image, volume.Render(device, pose ? *pose : volume.pose(), camera, m));
          return absl::OkStatus();
        },
        [this, seq, image, proto_mode, received, out](const JobReport& report) {
          v1::FusionResponse r = OkResponse(seq);
          v1::FusionRenderResult* result = r.mutable_render();
          ToProto(std::move(*image), result->mutable_image());
          if (out->active()) {
            absl::Status stored = out->Store(result);
            out->Release();
            if (!stored.ok()) {
              Answer(seq, ErrorResponse(seq, stored));
              return;
            }
          }
          result->set_mode(proto_mode);
          FillExecutionInfo(report, SecondsSince(received), result->mutable_info());
          Answer(seq, std::move(r));
        });
  }

  // The chunk size of a mesh or snapshot answer: `requested` (0 = the message cap) within the
  // message cap. INVALID_ARGUMENT naming `field` for a negative request.
  absl::StatusOr<int64_t> ChunkBytes(int64_t requested, absl::string_view field) const {
    if (requested < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".max_chunk_bytes: must be >= 0, got ", requested));
    }
    return v1::ChunkPayloadBytes(ctx_->max_message_bytes, requested);
  }

  // The answer of a mesh or snapshot: `bytes` in chunks, the first filled by `first`, the
  // others cut while they are sent.
  static Reply ChunkedReply(int64_t seq, std::shared_ptr<std::string> bytes, int64_t chunk,
                            bool mesh, const std::function<void(v1::FusionBytesChunk*)>& first) {
    auto fill = [seq, bytes, chunk, mesh](int64_t offset, v1::FusionResponse* r) {
      r->set_seq(seq);
      ToItemStatus(absl::OkStatus(), r->mutable_status());
      v1::FusionBytesChunk* c = mesh ? r->mutable_mesh() : r->mutable_snapshot();
      const int64_t total = static_cast<int64_t>(bytes->size());
      const int64_t n = std::min(chunk, total - offset);
      c->set_offset_bytes(offset);
      c->set_total_bytes(total);
      c->set_data(bytes->data() + offset, static_cast<size_t>(n));
      c->set_last(offset + n >= total);
      return c;
    };
    Reply reply;
    first(fill(0, &reply.first));
    auto offset = std::make_shared<int64_t>(std::min<int64_t>(chunk, bytes->size()));
    reply.more = [fill, bytes, offset, chunk](v1::FusionResponse* r) {
      if (*offset >= static_cast<int64_t>(bytes->size())) return false;
      fill(*offset, r);
      *offset += chunk;
      return true;
    };
    return reply;
  }

  void Mesh(int64_t seq, int64_t max_chunk_bytes) {
    absl::StatusOr<int64_t> chunk_or = ChunkBytes(max_chunk_bytes, "mesh");
    if (!chunk_or.ok()) {
      Answer(seq, ErrorResponse(seq, chunk_or.status()));
      return;
    }
    const int64_t chunk = *chunk_or;
    const Clock::time_point received = Clock::now();
    struct Work {
      std::shared_ptr<std::string> ply;
      int64_t vertices = 0, triangles = 0;
    };
    auto work = std::make_shared<Work>();
    Submit(
        seq, "Mesh", 0,
        [work](fusion::Volume& volume, const Device& device) -> absl::Status {
          FRESNEL_ASSIGN_OR_RETURN(fusion::Mesh mesh, volume.ExtractMesh(device));
          work->vertices = mesh.num_vertices();
          work->triangles = mesh.num_triangles();
          work->ply = std::make_shared<std::string>(fusion::EncodePly(mesh));
          return absl::OkStatus();
        },
        [this, seq, work, chunk, received](const JobReport& report) {
          const double total = SecondsSince(received);
          Answer(seq, ChunkedReply(seq, work->ply, chunk, true,
                                   [&](v1::FusionBytesChunk* c) {
                                     c->set_vertices(work->vertices);
                                     c->set_triangles(work->triangles);
                                     FillExecutionInfo(report, total, c->mutable_info());
                                   }));
        });
  }

  void Snapshot(int64_t seq, int64_t max_chunk_bytes) {
    absl::StatusOr<int64_t> chunk_or = ChunkBytes(max_chunk_bytes, "snapshot");
    if (!chunk_or.ok()) {
      Answer(seq, ErrorResponse(seq, chunk_or.status()));
      return;
    }
    const int64_t chunk = *chunk_or;
    const Clock::time_point received = Clock::now();
    auto bytes = std::make_shared<std::string>();
    Submit(
        seq, "Snapshot", 0,
        [bytes](fusion::Volume& volume, const Device& device) -> absl::Status {
          FRESNEL_ASSIGN_OR_RETURN(*bytes, volume.Snapshot(device));
          return absl::OkStatus();
        },
        [this, seq, bytes, chunk, received](const JobReport& report) {
          const double total = SecondsSince(received);
          Answer(seq, ChunkedReply(seq, bytes, chunk, false, [&](v1::FusionBytesChunk* c) {
                   FusionConfigToProto(config_, c->mutable_config());
                   FillExecutionInfo(report, total, c->mutable_info());
                 }));
        });
  }

  void Close(int64_t seq) {
    auto frames = std::make_shared<int64_t>(0);
    Submit(
        seq, "Close", 0,
        [frames](fusion::Volume& volume, const Device&) {
          *frames = volume.frame_index();
          return absl::OkStatus();
        },
        [this, seq, frames](const JobReport&) {
          v1::FusionResponse r = OkResponse(seq);
          r.mutable_closed()->set_frames(*frames);
          Answer(seq, std::move(r));
        });
    End(absl::OkStatus());  // read no more; finish once this is answered
  }

  static double SecondsSince(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

  ServiceContext* const ctx_;
  const std::string client_;  // ClientOf the call: the session's owner
  const FusionServiceLimits limits_;
  // Set by the first message (gRPC thread), read by later ones and by job completions.
  std::shared_ptr<Session> session_;
  FusionState* state_ = nullptr;  // owned by the session
  fusion::FusionConfig config_;
  // Frames submitted whose job has not finished its ProcessFrame (shared with the jobs, which
  // may outlive the reactor when the session was closed under them).
  int max_queued_frames_ = 0;
  std::shared_ptr<std::atomic<int>> queued_frames_ = std::make_shared<std::atomic<int>>(0);
  // Restore in progress: the bytes so far, the config the first part declared.
  std::optional<std::string> restore_;
  fusion::FusionConfig restore_config_;
  DevicePreference restore_preference_ = DevicePreference::kAny;
  DrainGate::Ticket ticket_;  // while open: SIGTERM's drain may end it (server/drain.h)
};

}  // namespace

grpc::ServerBidiReactor<v1::FusionRequest, v1::FusionResponse>* FusionService::Session(
    grpc::CallbackServerContext* context) {
  return new SessionCall(ctx_, limits_, ClientOf(context));
}

}  // namespace fresnel::server
