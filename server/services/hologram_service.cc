#include "server/services/hologram_service.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/v1/array_convert.h"
#include "server/rpc/chunked.h"
#include "server/rpc/host_tasks.h"
#include "server/rpc/ordered_stream.h"
#include "server/rpc/upload_reader.h"
#include "server/services/hologram_params.h"
#include "server/shm_arrays.h"
#include "server/status_util.h"

namespace fresnel::server {
namespace {

constexpr char kService[] = "fresnel.v1.HologramService";
using v1::kEnvelopeBytes;

// Data bytes per chunk (and the budget of a header with inline arrays).
int64_t ChunkBytes(int64_t max_message_bytes, int64_t requested) {
  return v1::ChunkPayloadBytes(max_message_bytes, requested);
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A finished render as messages: the header with the outputs that fit inline, then the chunks
// of the others, cut one at a time by a ChunkedWriter (server/rpc/chunked.h) from the result so
// that a large output is never copied whole a second time. Each output is freed once its last
// chunk is made.
class ResultMessages {
 public:
  ResultMessages(hologram::HologramResult result, int64_t chunk_bytes)
      : result_(std::move(result)), chunked_(chunk_bytes) {}

  // Moves the outputs that fit into `header` (smallest first, while the header stays within the
  // chunk budget) and lists the rest in header.chunked_outputs. Returns the output bytes.
  int64_t BuildHeader(v1::HologramResultHeader* header) {
    std::vector<v1::HologramOutput> present;
    int64_t bytes = 0;
    for (v1::HologramOutput w : {v1::HOLOGRAM_OUTPUT_FIELD, v1::HOLOGRAM_OUTPUT_PHASE,
                                 v1::HOLOGRAM_OUTPUT_AMPLITUDE,
                                 v1::HOLOGRAM_OUTPUT_RECONSTRUCTION}) {
      const HostArray* a = OutputArray(&result_, w);
      if (a->ndim() > 0) {
        present.push_back(w);
        bytes += static_cast<int64_t>(a->nbytes());
      }
    }
    std::stable_sort(present.begin(), present.end(), [this](auto a, auto b) {
      return OutputArray(&result_, a)->nbytes() < OutputArray(&result_, b)->nbytes();
    });
    for (v1::HologramOutput w : present) {
      HostArray* a = OutputArray(&result_, w);
      const int64_t need = static_cast<int64_t>(header->ByteSizeLong() + a->nbytes()) + 64;
      if (chunked_.done() && need <= chunked_.chunk_bytes()) {
        ToProto(std::move(*a), HeaderArray(header, w));
      } else {
        chunked_.Add(w, std::move(*a));
        header->add_chunked_outputs(w);
      }
      *a = HostArray();
    }
    return bytes;
  }

  // The next chunk; false once every chunked output was sent.
  bool NextChunk(v1::HologramChunk* chunk) {
    return chunked_.Next([chunk](int output, v1::ArrayChunk&& piece) {
      chunk->set_output(static_cast<v1::HologramOutput>(output));
      *chunk->mutable_chunk() = std::move(piece);
    });
  }

 private:
  hologram::HologramResult result_;
  ChunkedWriter chunked_;
};

// What a render job works on: a cloud and options checked on the gRPC thread, which the job
// trusts. `error` holds the kernel's own failure when the caller wants it as data (a Stream
// frame's status) rather than as the job's status.
struct RenderWork {
  // The cloud's bytes under --stream-state-bytes while the frame waits and renders.
  Budget::Reservation held;
  hologram::PreparedCloud cloud;
  hologram::HologramOptions options;
  hologram::HologramResult result;
  absl::Status error;
  OutputRegion out;  // active: the outputs go to the client's region (out_shm)
};

// The result's messages: all outputs in the header, written to the client's region, when the
// request set out_shm; else the header with what fits inline and the chunks of the rest.
absl::StatusOr<std::shared_ptr<ResultMessages>> MakeResultMessages(
    RenderWork* work, int64_t chunk_bytes, v1::HologramResultHeader* header, int64_t* out_bytes) {
  const bool to_region = work->out.active();
  auto messages = std::make_shared<ResultMessages>(
      std::move(work->result), to_region ? std::numeric_limits<int64_t>::max() : chunk_bytes);
  const int64_t bytes = messages->BuildHeader(header);
  if (out_bytes != nullptr) *out_bytes = bytes;
  if (to_region) {
    FRESNEL_RETURN_IF_ERROR(work->out.Store(header));
    work->out.Release();
  }
  return messages;
}

std::shared_ptr<Job> MakeRenderJob(std::shared_ptr<RenderWork> work, const char* method,
                                   DevicePreference preference,
                                   std::optional<Clock::time_point> deadline,
                                   bool kernel_errors_as_data) {
  auto job = std::make_shared<Job>();
  job->service = kService;
  job->method = method;
  job->preference = preference;
  job->deadline = deadline;
  job->device_bytes = hologram::DeviceBytes(work->options, work->cloud.size());
  // The job outlives its run function, so the render may poll it: a cancelled (or timed-out)
  // request stops between rows / point batches and frees its worker.
  const Job* self = job.get();
  job->run = [work, kernel_errors_as_data, self](const Device& device,
                                                 StageTimes* times) -> absl::Status {
    hologram::HologramOptions options = OptionsForDevice(work->options, device);
    options.should_stop = [self] { return self->cancelled(); };
    absl::StatusOr<hologram::HologramResult> r =
        hologram::ComputeHologram(device, work->cloud, options, times);
    work->cloud = hologram::PreparedCloud();  // free the cloud before the reply is built
    if (!r.ok()) {
      if (!kernel_errors_as_data) return r.status();
      work->error = r.status();
      return absl::OkStatus();
    }
    work->result = *std::move(r);
    return absl::OkStatus();
  };
  return job;
}

// Appends the cloud of a request's `source` oneof to `cloud`, checked and converted once.
template <class Request>
absl::Status AppendSource(const Request& request, const hologram::Limits& limits,
                          hologram::CloudBuilder* cloud) {
  switch (request.source_case()) {
    case Request::kPoints: return AppendPointsFromProto(request.points(), limits, cloud);
    case Request::kImage: {
      FRESNEL_ASSIGN_OR_RETURN(hologram::PointCloud points,
                               PointsFromImage(request.image(), limits));
      return cloud->Append(points);
    }
    default: break;
  }
  return absl::InvalidArgumentError(
      "points: the request carries neither points ([N, 4|5] float array) nor an image");
}

// ---------------------------------------------------------------------------------------------
// Render: one request, a server stream of header + chunks.

class RenderCall : public RpcCall<grpc::ServerWriteReactor<v1::RenderResponse>> {
 public:
  RenderCall(ServiceContext* ctx, const hologram::Limits& limits,
             grpc::CallbackServerContext* context, const v1::RenderRequest& request)
      : RpcCall(ctx->metrics, kService, "Render"), ctx_(ctx), limits_(limits), context_(context) {
    absl::Status started = Start(request);
    if (!started.ok()) FinishWith(started);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      FinishWith(absl::CancelledError("the client stopped reading"));
      return;
    }
    response_.Clear();
    if (messages_->NextChunk(response_.mutable_chunk())) {
      StartWrite(&response_);
    } else {
      FinishWith(absl::OkStatus());
    }
  }

  void OnCancel() override { slot_.Cancel(); }

 private:
  absl::Status Start(const v1::RenderRequest& request) {
    request_id_ = RequestIdOr(request.request_id());
    auto work = std::make_shared<RenderWork>();
    // Points or an image in the client's region are copied out of it now (nothing reads the
    // request's arrays after this call).
    const ShmResolver regions = ClientRegions(ctx_, context_);
    FRESNEL_RETURN_IF_ERROR(
        InlineShmInputs(const_cast<v1::RenderRequest*>(&request), regions));
    FRESNEL_ASSIGN_OR_RETURN(work->options, ParseHologramConfig(request.config(), limits_));
    FRESNEL_ASSIGN_OR_RETURN(work->out,
                             OutputRegion::Reserve(request.has_out_shm(), request.out_shm(),
                                                   OutputArrayBytes(work->options), regions,
                                                   "out_shm"));
    FRESNEL_RETURN_IF_ERROR(
        CheckAlgorithmPlacement(work->options, request.config().device(), ctx_->pool->gpu_count()));
    hologram::CloudBuilder cloud(work->options, limits_);
    FRESNEL_RETURN_IF_ERROR(AppendSource(request, limits_, &cloud));
    FRESNEL_ASSIGN_OR_RETURN(work->cloud, cloud.Finish());
    // The cloud (an image source expanded to a point per pixel) is held while the render waits
    // and runs.
    FRESNEL_RETURN_IF_ERROR(ReserveIn(ctx_->stream_state_bytes, work->cloud.host_bytes(),
                                      "this Render's point cloud", &state_));
    chunk_bytes_ = ChunkBytes(ctx_->max_message_bytes, request.config().max_chunk_bytes());
    record().Payload("in", static_cast<double>(request.ByteSizeLong()));
    const int64_t points = work->cloud.size();
    FRESNEL_ASSIGN_OR_RETURN(DevicePreference preference,
                             PreferenceOf(request.config().device(), "config.device"));
    std::shared_ptr<Job> job = MakeRenderJob(work, "Render", preference, DeadlineOf(context_),
                                             /*kernel_errors_as_data=*/false);
    job->done = [this, work, points](const absl::Status& status, const JobReport& report) {
      slot_.Clear();
      if (!status.ok()) {
        FinishWith(status);
        return;
      }
      response_.Clear();
      v1::HologramResultHeader* header = response_.mutable_header();
      header->set_request_id(request_id_);
      FillResultHeader(work->result, points, work->options, header);
      FillExecutionInfo(report, record().Elapsed(), header->mutable_info());
      int64_t out_bytes = 0;
      absl::StatusOr<std::shared_ptr<ResultMessages>> messages =
          MakeResultMessages(work.get(), chunk_bytes_, header, &out_bytes);
      if (!messages.ok()) {
        FinishWith(messages.status());
        return;
      }
      messages_ = *std::move(messages);
      record().Payload("out", static_cast<double>(out_bytes));
      StartWrite(&response_);
    };
    absl::Status submitted = slot_.Submit(ctx_->pool, job);
    if (!submitted.ok()) return submitted;
    return absl::OkStatus();
  }

  ServiceContext* ctx_;
  hologram::Limits limits_;
  grpc::CallbackServerContext* context_;
  Budget::Reservation state_;  // the point cloud, while queued and running
  std::string request_id_;
  int64_t chunk_bytes_ = 0;
  v1::RenderResponse response_;
  std::shared_ptr<ResultMessages> messages_;
  JobSlot slot_;  // the job in flight, for OnCancel
};

// ---------------------------------------------------------------------------------------------
// Stream: frames in, each frame's header + chunks out, in frame order, on OrderedStream (the
// pipelining, ordering, backpressure and ending live there). Up to PipelineDepth frames are read
// ahead and rendered at once. A frame that fails its checks or in the kernel is answered with its
// status and the stream goes on; a failure of the server itself (cancel, deadline, drain) or a
// protocol error aborts the stream once no job of it is still running. A frame sent in parts is
// answered at the message of its last part (the earlier parts are absorbed into it).

class StreamCall : public OrderedStream<v1::HologramFrameRequest, v1::HologramFrameResponse> {
 public:
  StreamCall(ServiceContext* ctx, const hologram::Limits& limits,
             grpc::CallbackServerContext* context)
      : OrderedStream(ctx->metrics, kService, "Stream", PipelineDepth(*ctx->pool)),
        ctx_(ctx),
        limits_(limits),
        context_(context),
        regions_(ClientRegions(ctx, context)) {
    absl::Status open = ReserveStream(ctx, context, "a hologram Stream", &stream_slot_);
    if (open.ok() && ctx->drain != nullptr) {
      open = ctx->drain->Register("hologram Stream", [this](const absl::Status& st) { Abort(st); },
                                  &ticket_);
    }
    if (!open.ok()) {
      End(open);  // nothing read: finishes at once
      return;
    }
    StartReading();
  }

 private:
  // Frames in flight (read, not yet written): one per worker of the devices that run them, plus
  // one being read, one being converted (off the reader, see OnRequest), one waiting to be
  // written and one being written. On the H200 machine (4 worker streams, 1e5-point frames;
  // docs/BENCHMARKS.md, "Session 9") workers + 4 gave one client 217 frames/s against 208 with
  // workers + 1, two clients 254 against 243.
  static int PipelineDepth(const DevicePool& pool) {
    int gpu_workers = 0, cpu_workers = 0;
    for (const DeviceSnapshot& d : pool.Snapshot()) {
      (d.kind == DeviceKind::kCuda ? gpu_workers : cpu_workers) += d.workers;
    }
    return std::clamp((gpu_workers > 0 ? gpu_workers : cpu_workers) + 4, 2, 16);
  }

  // One frame as it arrives: the message that carried it, or its parts so far.
  struct FrameInput {
    // User-provided: clang 14 (the fuzz build) cannot default-construct a nested class with member
    // initialisers through std::optional::emplace before the enclosing class is complete.
    FrameInput() {}
    Clock::time_point received;
    bool had_config = false;
    std::optional<v1::HologramFrameOverrides> overrides;
    std::optional<hologram::CloudBuilder> cloud;  // the points, converted part by part
    absl::Status error;         // a bad part (layout): answered after the frame's last part
    absl::Status values_error;  // a bad value in a part: reported after the overrides' errors
    int64_t columns = -1;       // of the first part's points; every part must match
    // The parts' points under --stream-state-bytes, charged as they arrive.
    Budget::Reservation held;
    bool charged = false;
    std::optional<v1::ShmRef> out_shm;  // the frame's (its first part's) out_shm
  };

  void OnRequest(int64_t seq, v1::HologramFrameRequest* request) override {
    if (saw_end_) {
      Protocol(seq, absl::InvalidArgumentError("end: a message came after the one that set end"));
      return;
    }
    saw_end_ = request->end();
    if (saw_end_ && !request->points_continue() &&
        request->source_case() == v1::HologramFrameRequest::SOURCE_NOT_SET &&
        !request->has_config()) {
      // Only ends the stream: a frame still in parts is answered (here) as cut short, then the
      // half-close is awaited.
      if (!AnswerUnfinishedFrame(seq)) Skip(seq);
      return;
    }
    if (saw_end_ && request->points_continue()) {
      Protocol(seq, absl::InvalidArgumentError(
                        "end: the last message cannot set points_continue (the frame has no last "
                        "part)"));
      return;
    }
    if (!configured_) {
      absl::Status st = request->has_config()
                            ? Configure(request->config())
                            : absl::InvalidArgumentError(
                                  "config: the first frame must carry the config");
      if (!st.ok()) {
        Protocol(seq, st);
        return;
      }
      request_id_ = RequestIdOr(request->request_id());
    }
    FrameInput input;
    if (partial_.has_value() || request->points_continue()) {
      AddPart(*request, InlineShmInputs(request, regions_));
      if (request->points_continue()) {
        Absorb(seq);  // the frame goes on in the next message, whose answer covers this one
        return;
      }
      input = *std::move(partial_);
      partial_.reset();
    } else {
      input.received = Clock::now();
      input.had_config = request->has_config();
      if (request->has_overrides()) input.overrides = request->overrides();
      if (request->has_out_shm()) input.out_shm = request->out_shm();
    }
    const int64_t index = next_frame_++;
    if (index > 0 && input.had_config) {
      Answer(seq, FrameError(index, absl::InvalidArgumentError(
                                        "config: only the first frame may carry the config (use "
                                        "overrides for per-frame changes)")));
      return;
    }
    auto work = std::make_shared<RenderWork>();
    if (!input.cloud.has_value() && request->source_case() == v1::HologramFrameRequest::kPoints) {
      // A whole frame of points is checked and converted on a host task, not here: this thread
      // reads the next frame meanwhile (the conversion took 2.6-3.0 ms of 1e5 points, which on
      // the reader capped a stream at ~220 frames/s). The frame's answer is outstanding until
      // the task gives it, which keeps the stream alive; answers still go out in frame order.
      auto frame = std::make_shared<v1::HologramFrameRequest>(std::move(*request));
      auto in = std::make_shared<FrameInput>(std::move(input));
      PostHostTask([this, seq, index, frame, in, work] {
        // An exception (out of memory) ends the stream with a status, as in OnRequest; the frame
        // is answered (a second answer would be dropped).
        absl::Status st = Guarded("converting the frame's points", [&] {
          absl::Status prepared = InlineShmInputs(frame.get(), regions_);
          if (prepared.ok()) prepared = PrepareFrame(*frame, in.get(), work.get());
          frame->Clear();  // the points' bytes are converted: free them before the render
          if (!prepared.ok()) {
            Answer(seq, FrameError(index, prepared));
          } else {
            SubmitFrame(seq, index, work, in->received);
          }
          return absl::OkStatus();
        });
        if (!st.ok()) {
          End(st);
          Skip(seq);
        }
      });
      return;
    }
    absl::Status prepared = InlineShmInputs(request, regions_);
    if (prepared.ok()) prepared = PrepareFrame(*request, &input, work.get());
    if (!prepared.ok()) {
      Answer(seq, FrameError(index, prepared));
      return;
    }
    SubmitFrame(seq, index, work, input.received);
  }

  // Submits frame `index` (message `seq`), checked and converted into `work`, for rendering. On
  // the reader or a host task.
  void SubmitFrame(int64_t seq, int64_t index, std::shared_ptr<RenderWork> work,
                   Clock::time_point received) {
    const int64_t points = work->cloud.size();
    std::shared_ptr<Job> job = MakeRenderJob(work, "Stream", preference_, DeadlineOf(context_),
                                             /*kernel_errors_as_data=*/true);
    job->continues_call = true;  // a stream open when a drain began may go on
    const Job* raw = job.get();
    job->done = [this, raw, seq, work, points, index, received](const absl::Status& status,
                                                                 const JobReport& report) {
      jobs_.Remove(raw);
      OnFrameDone(seq, index, work.get(), points, received, status, report);
    };
    absl::Status submitted = jobs_.Submit(ctx_->pool, job);
    if (!submitted.ok()) {
      Abort(submitted);
      Skip(seq);
    }
  }

  // The client half-closed: the frame it left in parts is answered as cut short; the stream ends
  // once every frame is answered, OK only after a message that set `end`.
  void OnHalfClose() override {
    if (partial_.has_value()) AnswerUnfinishedFrame(Reserve());
    if (saw_end_) {
      End(absl::OkStatus());
      return;
    }
    End(absl::InvalidArgumentError(absl::StrCat(
        "end: the stream closed without a message that sets end, after ", next_frame_,
        " frame(s): it was cut short or a message could not be parsed; the frames before were "
        "answered")));
  }

  void OnAbort() override { jobs_.Cancel(); }  // a cancelled job completes on this thread

  void OnStreamDone() override { ticket_.Close(); }

  // A protocol error (or a bad config) of message `seq`: the stream ends with it.
  void Protocol(int64_t seq, const absl::Status& status) {
    Abort(status);
    Skip(seq);
  }

  absl::Status Configure(const v1::HologramConfig& config) {
    FRESNEL_ASSIGN_OR_RETURN(base_, ParseHologramConfig(config, limits_));
    FRESNEL_RETURN_IF_ERROR(
        CheckAlgorithmPlacement(base_, config.device(), ctx_->pool->gpu_count()));
    hint_ = config.device();
    FRESNEL_ASSIGN_OR_RETURN(preference_, PreferenceOf(hint_, "config.device"));
    chunk_bytes_ = ChunkBytes(ctx_->max_message_bytes, config.max_chunk_bytes());
    configured_ = true;
    return absl::OkStatus();
  }

  // Adds `request` as the next part of partial_ (its first part when partial_ is empty).
  // `resolved`: whether its arrays in the client's region could be copied out (InlineShmInputs).
  void AddPart(const v1::HologramFrameRequest& request, const absl::Status& resolved) {
    if (!partial_.has_value()) {
      partial_.emplace();
      partial_->received = Clock::now();
      partial_->had_config = request.has_config();
      if (request.has_overrides()) partial_->overrides = request.overrides();
      if (request.has_out_shm()) partial_->out_shm = request.out_shm();
      partial_->cloud.emplace(base_, limits_);
    } else if (partial_->error.ok() &&
               (request.has_config() || request.has_overrides() || request.has_out_shm())) {
      partial_->error = absl::InvalidArgumentError(
          "points_continue: only the first part of a frame may carry config, overrides or "
          "out_shm");
    }
    if (partial_->error.ok() && !resolved.ok()) partial_->error = resolved;
    if (!partial_->error.ok()) return;  // read on to the frame's last part, then answer
    if (request.source_case() != v1::HologramFrameRequest::kPoints) {
      partial_->error = absl::InvalidArgumentError(
          "points_continue: every part of a frame sent in parts carries `points`");
      return;
    }
    const v1::NdArray& part = request.points();
    partial_->error = CheckPointsShape(part, limits_);
    if (!partial_->error.ok()) return;
    const int64_t columns = part.shape(1);
    if (partial_->columns < 0) {
      partial_->columns = columns;
    } else if (columns != partial_->columns) {
      partial_->error = absl::InvalidArgumentError(absl::StrCat(
          "points: every part of a frame has the first part's ", partial_->columns,
          " columns; this part has ", columns));
      return;
    }
    hologram::CloudBuilder& cloud = *partial_->cloud;
    if (cloud.size() + part.shape(0) > limits_.max_points) {
      partial_->error = absl::InvalidArgumentError(absl::StrCat(
          "points: the frame's parts hold more than the limit of ", limits_.max_points,
          " points"));
      return;
    }
    // After a bad value the frame's cloud is not needed; the parts' layout is still checked.
    if (partial_->values_error.ok()) {
      // What a frame in parts holds until it is rendered counts as it arrives, so a frame sent
      // in a thousand parts cannot grow past the server's budget unseen.
      const int64_t bytes = part.shape(0) * hologram::PreparedCloud::kHostBytesPerPoint;
      absl::Status held =
          partial_->charged
              ? partial_->held.Grow(bytes, "this frame's points")
              : ReserveIn(ctx_->stream_state_bytes, bytes, "this frame's points", &partial_->held);
      partial_->charged = partial_->charged || held.ok();
      partial_->values_error =
          held.ok() ? AppendPointsFromProto(part, limits_, &cloud) : held;
    }
  }

  // The frame's options and cloud, each checked once, in the order a whole-frame check would
  // report them: the parts' layout, the overrides, then the points.
  absl::Status PrepareFrame(const v1::HologramFrameRequest& request, FrameInput* input,
                            RenderWork* work) {
    FRESNEL_RETURN_IF_ERROR(input->error);
    if (input->overrides.has_value()) {
      FRESNEL_ASSIGN_OR_RETURN(work->options, ApplyOverrides(base_, *input->overrides, limits_));
      FRESNEL_RETURN_IF_ERROR(
          CheckAlgorithmPlacement(work->options, hint_, ctx_->pool->gpu_count()));
    } else {
      work->options = base_;
    }
    if (input->out_shm.has_value()) {
      FRESNEL_ASSIGN_OR_RETURN(work->out,
                               OutputRegion::Reserve(true, *input->out_shm,
                                                     OutputArrayBytes(work->options), regions_,
                                                     "out_shm"));
    }
    if (input->cloud.has_value()) {
      FRESNEL_RETURN_IF_ERROR(input->values_error);
      FRESNEL_ASSIGN_OR_RETURN(work->cloud, input->cloud->Finish());
      work->held = std::move(input->held);
      return absl::OkStatus();
    }
    hologram::CloudBuilder cloud(base_, limits_);
    FRESNEL_RETURN_IF_ERROR(AppendSource(request, limits_, &cloud));
    FRESNEL_ASSIGN_OR_RETURN(work->cloud, cloud.Finish());
    // Up to the pipeline depth of frames wait or render at once: each holds its cloud.
    return ReserveIn(ctx_->stream_state_bytes, work->cloud.host_bytes(), "this frame's points",
                     &work->held);
  }

  // Frame `index`'s answer when it failed: a header carrying only the status.
  v1::HologramFrameResponse FrameError(int64_t index, const absl::Status& status) const {
    v1::HologramFrameResponse r;
    r.set_frame_index(index);
    r.mutable_header()->set_request_id(request_id_);
    ToItemStatus(status, r.mutable_status());
    return r;
  }

  // When the client stopped inside a frame sent in parts, that frame is answered at `seq` with
  // INVALID_ARGUMENT. Whether there was one.
  bool AnswerUnfinishedFrame(int64_t seq) {
    if (!partial_.has_value()) return false;
    const int64_t index = next_frame_++;
    partial_.reset();
    Answer(seq, FrameError(index, absl::InvalidArgumentError(
                                      "points_continue: the stream ended before the frame's "
                                      "last part")));
    return true;
  }

  // On a worker thread: turns the frame's result into its messages (the copy into the header
  // happens here, in parallel across frames) and hands them to the stream.
  void OnFrameDone(int64_t seq, int64_t index, RenderWork* work, int64_t points,
                   Clock::time_point received, const absl::Status& status,
                   const JobReport& report) {
    if (!status.ok()) {  // the server's own failure (cancelled, deadline, draining): fatal
      Abort(status);
      Skip(seq);
      return;
    }
    if (!work->error.ok()) {
      Answer(seq, FrameError(index, work->error));
      return;
    }
    Reply reply;
    reply.first.set_frame_index(index);
    ToItemStatus(absl::OkStatus(), reply.first.mutable_status());
    v1::HologramResultHeader* header = reply.first.mutable_header();
    header->set_request_id(request_id_);
    FillResultHeader(work->result, points, work->options, header);
    FillExecutionInfo(report, SecondsSince(received), header->mutable_info());
    absl::StatusOr<std::shared_ptr<ResultMessages>> made =
        MakeResultMessages(work, chunk_bytes_, header, nullptr);
    if (!made.ok()) {
      Answer(seq, FrameError(index, made.status()));
      return;
    }
    std::shared_ptr<ResultMessages> messages = *std::move(made);
    reply.more = [messages, index](v1::HologramFrameResponse* next) {
      next->set_frame_index(index);
      return messages->NextChunk(next->mutable_chunk());
    };
    // Answered from a host task: when the writer is idle, Answer starts the write, and gRPC
    // serialises the 4 MiB of phase on the calling thread (1.6-2.3 ms a frame on the H200
    // machine), which this device worker would otherwise spend instead of starting the next job.
    auto answer = std::make_shared<Reply>(std::move(reply));
    PostHostTask([this, seq, answer] {
      absl::Status st = Guarded("answering the frame", [&] {
        Answer(seq, std::move(*answer));
        return absl::OkStatus();
      });
      if (!st.ok()) {
        Abort(st);
        Skip(seq);
      }
    });
  }

  ServiceContext* ctx_;
  hologram::Limits limits_;
  grpc::CallbackServerContext* context_;
  const ShmResolver regions_;  // the client's shared-memory regions
  StreamSlot stream_slot_;
  DrainGate::Ticket ticket_;  // while open: SIGTERM's drain may end it (server/drain.h)
  // Reader side (OnRequest and OnHalfClose run one at a time).
  bool configured_ = false;
  hologram::HologramOptions base_;
  v1::DeviceHint hint_;
  DevicePreference preference_ = DevicePreference::kAny;
  int64_t chunk_bytes_ = 0;
  std::string request_id_;
  int64_t next_frame_ = 0;
  bool saw_end_ = false;               // a message set `end`
  std::optional<FrameInput> partial_;  // a frame arriving in parts
  JobSlot jobs_;                       // the jobs in flight, for OnAbort
};

// ---------------------------------------------------------------------------------------------
// Reconstruct: config (+ inline field) or config + field chunks in, one image out.

class ReconstructCall : public UploadReader<v1::ReconstructRequest> {
 public:
  // What arrives (the config with an inline field, or field chunks) is charged against
  // --stream-state-bytes as it arrives, and held until the reconstruction is answered.
  ReconstructCall(ServiceContext* ctx, const hologram::Limits& limits,
                  grpc::CallbackServerContext* context, v1::ReconstructResponse* response)
      : UploadReader(ctx->metrics, kService, "Reconstruct", context, ctx->stream_state_bytes),
        ctx_(ctx),
        limits_(limits),
        response_(response) {
    StartReading();
  }

  void OnCancel() override { slot_.Cancel(); }

 private:
  // One incoming message.
  absl::Status Take(v1::ReconstructRequest& request) override {
    if (!have_config_) {
      if (request.msg_case() != v1::ReconstructRequest::kConfig) {
        return absl::InvalidArgumentError("config: the first message must carry the config");
      }
      config_ = std::move(*request.mutable_config());
      have_config_ = true;
      inline_field_ = config_.field().shape_size() > 0 || !config_.field().data().empty();
      return absl::OkStatus();
    }
    if (request.msg_case() != v1::ReconstructRequest::kFieldChunk) {
      return absl::InvalidArgumentError(
          "config: only the first message may carry the config; the rest are field_chunk");
    }
    if (inline_field_) {
      return absl::InvalidArgumentError(
          "field_chunk: the field was already sent inline in config.field");
    }
    if (field_complete_) {
      return absl::InvalidArgumentError("field_chunk: a chunk after the one marked last");
    }
    const int64_t max_bytes = hologram::ReconstructMaxFieldBytes(limits_);
    FRESNEL_ASSIGN_OR_RETURN(field_complete_,
                             assembler_.Add(std::move(*request.mutable_field_chunk()), "field",
                                            max_bytes));
    any_chunk_ = true;
    return absl::OkStatus();
  }

  absl::Status Complete() override {
    if (!have_config_) {
      return absl::InvalidArgumentError("config: the stream ended before a config message");
    }
    auto field = std::make_shared<HostArray>();
    const ShmResolver regions = ClientRegions(ctx_, context());
    if (inline_field_) {
      // A field in the client's region is copied out of it here.
      FRESNEL_ASSIGN_OR_RETURN(*field,
                               FromProto(std::move(*config_.mutable_field()), "field", regions));
    } else if (!any_chunk_) {
      return absl::InvalidArgumentError(
          "field: no field was sent (config.field, or field_chunk messages)");
    } else if (!field_complete_) {
      return absl::InvalidArgumentError(
          "field: the stream ended before the chunk marked last");
    } else {
      FRESNEL_ASSIGN_OR_RETURN(*field, assembler_.Take("field"));
    }
    if (field->ndim() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field: must be 2-D [height, width], got shape ", ShapeString(field->shape())));
    }
    const int64_t image_bytes = field->size();
    FRESNEL_ASSIGN_OR_RETURN(out_, OutputRegion::Reserve(config_.has_out_shm(), config_.out_shm(),
                                                         {image_bytes}, regions, "out_shm"));
    if (!out_.active() && image_bytes + kEnvelopeBytes > ctx_->max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "image: the reconstruction would be ", image_bytes,
          " bytes, over the server's max message size of ", ctx_->max_message_bytes, " bytes"));
    }
    hologram::AsmOptions options;
    options.pitch_m = config_.pitch_m();
    options.wavelength_m = config_.wavelength_m();
    options.depth_m = config_.depth_m();
    FRESNEL_ASSIGN_OR_RETURN(options.source, SourceFromProto(config_.source(), "source"));
    record().Payload("in", static_cast<double>(field->nbytes()));
    auto result = std::make_shared<hologram::Reconstruction>();
    auto job = std::make_shared<Job>();
    job->service = kService;
    job->method = "Reconstruct";
    FRESNEL_ASSIGN_OR_RETURN(job->preference, PreferenceOf(config_.device(), "config.device"));
    job->deadline = DeadlineOf(context());
    // The field, its spectrum and the propagated field (complex64 on the device) and the image.
    job->device_bytes = field->size() * (8 * 3 + 1);
    const hologram::Limits limits = limits_;
    job->run = [field, result, options, limits](const Device& device,
                                                StageTimes* times) -> absl::Status {
      FRESNEL_ASSIGN_OR_RETURN(*result,
                               hologram::ReconstructAsm(device, *field, options, times, limits));
      *field = HostArray();
      return absl::OkStatus();
    };
    const std::string request_id = RequestIdOr(config_.request_id());
    job->done = [this, result, request_id](const absl::Status& status, const JobReport& report) {
      slot_.Clear();
      absl::Status st = status;
      if (st.ok()) {
        response_->set_request_id(request_id);
        response_->set_scale(result->scale);
        record().Payload("out", static_cast<double>(result->image.nbytes()));
        ToProto(std::move(result->image), response_->mutable_image());
        if (out_.active()) st = out_.Store(response_);
        out_.Release();
        FillExecutionInfo(report, record().Elapsed(), response_->mutable_info());
      }
      FinishWith(st);
    };
    absl::Status submitted = slot_.Submit(ctx_->pool, job);
    if (!submitted.ok()) return submitted;
    return absl::OkStatus();
  }

  ServiceContext* ctx_;
  hologram::Limits limits_;
  v1::ReconstructResponse* response_;
  v1::ReconstructConfig config_;
  bool have_config_ = false;
  bool inline_field_ = false;
  bool any_chunk_ = false;
  bool field_complete_ = false;
  ChunkAssembler assembler_;
  OutputRegion out_;  // active: the image goes to the client's region (config.out_shm)
  JobSlot slot_;  // the job in flight, for OnCancel
};

}  // namespace

grpc::ServerWriteReactor<v1::RenderResponse>* HologramService::Render(
    grpc::CallbackServerContext* context, const v1::RenderRequest* request) {
  return new RenderCall(ctx_, limits_, context, *request);
}

grpc::ServerBidiReactor<v1::HologramFrameRequest, v1::HologramFrameResponse>*
HologramService::Stream(grpc::CallbackServerContext* context) {
  return new StreamCall(ctx_, limits_, context);
}

grpc::ServerReadReactor<v1::ReconstructRequest>* HologramService::Reconstruct(
    grpc::CallbackServerContext* context, v1::ReconstructResponse* response) {
  return new ReconstructCall(ctx_, limits_, context, response);
}

}  // namespace fresnel::server
