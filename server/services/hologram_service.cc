#include "server/services/hologram_service.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/v1/array_convert.h"
#include "server/services/hologram_params.h"
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
// of the others, made one at a time from the result so that a large output is never copied
// whole a second time. Each output is freed once its last chunk is made.
class ResultMessages {
 public:
  ResultMessages(hologram::HologramResult result, int64_t chunk_bytes)
      : result_(std::move(result)), chunk_bytes_(chunk_bytes) {}

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
      if (chunked_.empty() && need <= chunk_bytes_) {
        ToProto(std::move(*a), HeaderArray(header, w));
        *a = HostArray();
      } else {
        chunked_.push_back(w);
        header->add_chunked_outputs(w);
      }
    }
    return bytes;
  }

  // The next chunk; false once every chunked output was sent.
  bool NextChunk(v1::HologramChunk* chunk) {
    if (current_ >= chunked_.size()) return false;
    const v1::HologramOutput w = chunked_[current_];
    HostArray* a = OutputArray(&result_, w);
    chunk->set_output(w);
    *chunk->mutable_chunk() = ArrayChunkAt(*a, offset_, chunk_bytes_);
    if (chunk->chunk().last()) {
      *a = HostArray();
      ++current_;
      offset_ = 0;
    } else {
      offset_ += chunk_bytes_;
    }
    return true;
  }

 private:
  hologram::HologramResult result_;
  int64_t chunk_bytes_;
  std::vector<v1::HologramOutput> chunked_;
  size_t current_ = 0;
  int64_t offset_ = 0;
};

// What a render job works on. `error` holds the kernel's own failure when the caller wants it
// as data (a Stream frame's status) rather than as the job's status.
struct RenderWork {
  hologram::PointCloud points;
  hologram::HologramOptions options;
  hologram::HologramResult result;
  absl::Status error;
};

std::shared_ptr<Job> MakeRenderJob(std::shared_ptr<RenderWork> work, const hologram::Limits& limits,
                                   const char* method, DevicePreference preference,
                                   std::optional<Clock::time_point> deadline,
                                   bool kernel_errors_as_data) {
  auto job = std::make_shared<Job>();
  job->service = kService;
  job->method = method;
  job->preference = preference;
  job->deadline = deadline;
  job->device_bytes =
      HologramDeviceBytes(work->options, static_cast<int64_t>(work->points.size()));
  // The job outlives its run function, so the render may poll it: a cancelled (or timed-out)
  // request stops between rows / point batches and frees its worker.
  const Job* self = job.get();
  job->run = [work, limits, kernel_errors_as_data, self](const Device& device,
                                                         StageTimes* times) -> absl::Status {
    hologram::HologramOptions options = OptionsForDevice(work->options, device);
    options.should_stop = [self] { return self->cancelled(); };
    absl::StatusOr<hologram::HologramResult> r =
        hologram::ComputeHologram(device, work->points, options, times, limits);
    hologram::PointCloud().swap(work->points);  // free the cloud before the reply is built
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

// The cloud of a request's `source` oneof.
template <class Request>
absl::StatusOr<hologram::PointCloud> SourcePoints(const Request& request,
                                                  const hologram::Limits& limits) {
  switch (request.source_case()) {
    case Request::kPoints: return PointsFromProto(request.points(), limits);
    case Request::kImage: return PointsFromImage(request.image(), limits);
    default: break;
  }
  return absl::InvalidArgumentError(
      "points: the request carries neither points ([N, 4|5] float array) nor an image");
}

// ---------------------------------------------------------------------------------------------
// Render: one request, a server stream of header + chunks.

class RenderCall : public grpc::ServerWriteReactor<v1::RenderResponse> {
 public:
  RenderCall(ServiceContext* ctx, const hologram::Limits& limits,
             grpc::CallbackServerContext* context, const v1::RenderRequest& request)
      : ctx_(ctx), limits_(limits), context_(context), record_(ctx->metrics, kService, "Render") {
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

  void OnDone() override { delete this; }

 private:
  absl::Status Start(const v1::RenderRequest& request) {
    request_id_ = RequestIdOr(request.request_id());
    auto work = std::make_shared<RenderWork>();
    FRESNEL_ASSIGN_OR_RETURN(work->options, ParseHologramConfig(request.config(), limits_));
    FRESNEL_RETURN_IF_ERROR(
        CheckAlgorithmPlacement(work->options, request.config().device(), ctx_->pool->gpu_count()));
    FRESNEL_ASSIGN_OR_RETURN(work->points, SourcePoints(request, limits_));
    FRESNEL_RETURN_IF_ERROR(hologram::ValidateHologram(work->points, work->options, limits_));
    // The cloud (an image source expanded to a point per pixel) is held while the render waits
    // and runs.
    FRESNEL_RETURN_IF_ERROR(ReserveIn(
        ctx_->stream_state_bytes,
        static_cast<int64_t>(work->points.size() * sizeof(hologram::Point)),
        "this Render's point cloud", &state_));
    chunk_bytes_ = ChunkBytes(ctx_->max_message_bytes, request.config().max_chunk_bytes());
    record_.Payload("in", static_cast<double>(request.ByteSizeLong()));
    const int64_t points = static_cast<int64_t>(work->points.size());
    FRESNEL_ASSIGN_OR_RETURN(DevicePreference preference,
                             PreferenceOf(request.config().device(), "config.device"));
    std::shared_ptr<Job> job =
        MakeRenderJob(work, limits_, "Render", preference,
                      DeadlineOf(context_), /*kernel_errors_as_data=*/false);
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
      FillExecutionInfo(report, record_.Elapsed(), header->mutable_info());
      messages_.emplace(std::move(work->result), chunk_bytes_);
      record_.Payload("out", static_cast<double>(messages_->BuildHeader(header)));
      StartWrite(&response_);
    };
    absl::Status submitted = slot_.Submit(ctx_->pool, job);
    if (!submitted.ok()) return submitted;
    return absl::OkStatus();
  }

  void FinishWith(const absl::Status& status) {
    if (finished_.exchange(true)) return;
    record_.Done(status);
    Finish(ToGrpcStatus(status));
  }

  ServiceContext* ctx_;
  hologram::Limits limits_;
  grpc::CallbackServerContext* context_;
  RpcRecord record_;
  Budget::Reservation state_;  // the point cloud, while queued and running
  std::string request_id_;
  int64_t chunk_bytes_ = 0;
  v1::RenderResponse response_;
  std::optional<ResultMessages> messages_;
  std::atomic<bool> finished_{false};
  JobSlot slot_;  // the job in flight, for OnCancel
};

// ---------------------------------------------------------------------------------------------
// Stream: frames in, each frame's header + chunks out, in frame order. Pipelined: up to depth_
// frames are read ahead and rendered at once (on every worker stream of every GPU), while the
// answers go out strictly in order, one write at a time. A frame that fails validation or in the
// kernel is answered with its status and the stream goes on; a failure of the server itself
// (cancel, deadline, drain) ends the stream once no job of it is still running.

class StreamCall
    : public grpc::ServerBidiReactor<v1::HologramFrameRequest, v1::HologramFrameResponse> {
 public:
  StreamCall(ServiceContext* ctx, const hologram::Limits& limits,
             grpc::CallbackServerContext* context)
      : ctx_(ctx),
        limits_(limits),
        context_(context),
        record_(ctx->metrics, kService, "Stream"),
        depth_(PipelineDepth(*ctx->pool)) {
    absl::Status slot = ReserveStream(ctx, context, "a hologram Stream", &stream_slot_);
    if (slot.ok() && ctx->drain != nullptr) {
      slot = ctx->drain->Register("hologram Stream", [this](const absl::Status& st) { Fail(st); },
                                  &ticket_);
    }
    if (!slot.ok()) {
      FinishWith(slot);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    absl::Status st = Guarded("reading the stream's frame", [&] {
      HandleRead(ok);
      return absl::OkStatus();
    });
    if (!st.ok()) Fail(st);
  }

  void HandleRead(bool ok) {
    if (!ok) {  // the client half-closed: finish once every frame it sent is answered
      const bool answered = AnswerUnfinishedFrame();
      {
        std::lock_guard<std::mutex> lock(mu_);
        reads_done_ = true;
        if (!saw_end_) {
          end_status_ = absl::InvalidArgumentError(absl::StrCat(
              "end: the stream closed without a message that sets end, after ", next_frame_,
              " frame(s): it was cut short or a message could not be parsed; the frames "
              "before were answered"));
        }
      }
      if (answered) TryWrite();
      MaybeFinish();
      return;
    }
    record_.Payload("in", static_cast<double>(request_.ByteSizeLong()));
    if (saw_end_) {
      Fail(absl::InvalidArgumentError("end: a message came after the one that set end"));
      return;
    }
    saw_end_ = request_.end();
    if (saw_end_ && !request_.points_continue() &&
        request_.source_case() == v1::HologramFrameRequest::SOURCE_NOT_SET &&
        !request_.has_config()) {
      // Only ends the stream: a frame still in parts is answered as cut short, then the
      // half-close is awaited.
      if (AnswerUnfinishedFrame()) TryWrite();
      StartRead(&request_);
      return;
    }
    if (saw_end_ && request_.points_continue()) {
      Fail(absl::InvalidArgumentError(
          "end: the last message cannot set points_continue (the frame has no last part)"));
      return;
    }
    if (!configured_) {
      absl::Status st = request_.has_config()
                            ? Configure(request_.config())
                            : absl::InvalidArgumentError(
                                  "config: the first frame must carry the config");
      if (!st.ok()) {
        Fail(st);
        return;
      }
      request_id_ = RequestIdOr(request_.request_id());
    }
    // The frame's input: this message, or the parts of a frame sent with points_continue.
    FrameInput input;
    if (partial_.has_value() || request_.points_continue()) {
      AddPart();
      if (request_.points_continue()) {
        StartRead(&request_);  // the frame goes on in the next message
        return;
      }
      input = *std::move(partial_);
      partial_.reset();
    } else {
      input.received = Clock::now();
      input.had_config = request_.has_config();
      if (request_.has_overrides()) input.overrides = request_.overrides();
    }
    const int64_t index = next_frame_++;
    const Clock::time_point received = input.received;
    auto work = std::make_shared<RenderWork>();
    absl::Status prepared =
        index > 0 && input.had_config
            ? absl::InvalidArgumentError(
                  "config: only the first frame may carry the config (use overrides for "
                  "per-frame changes)")
            : PrepareFrame(&input, work.get());
    std::shared_ptr<Job> job;
    if (prepared.ok()) {
      const int64_t points = static_cast<int64_t>(work->points.size());
      job = MakeRenderJob(work, limits_, "Stream", preference_, DeadlineOf(context_),
                          /*kernel_errors_as_data=*/true);
      job->continues_call = true;  // a stream open when a drain began may go on
      const Job* raw = job.get();
      job->done = [this, raw, work, points, index, received](const absl::Status& status,
                                                             const JobReport& report) {
        jobs_.Remove(raw);
        OnFrameDone(index, work.get(), points, received, status, report);
      };
    }
    bool read_more = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fatal_.has_value()) return;  // ending: take no more frames
      ++in_flight_;
      if (job) {
        ++running_;
      } else {
        ready_.emplace(index, FrameError(index, prepared));
      }
      read_more = in_flight_ < depth_;
      read_paused_ = !read_more;
    }
    if (job) {
      absl::Status submitted = jobs_.Submit(ctx_->pool, job);
      if (!submitted.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          --running_;
        }
        Fail(submitted);
        return;
      }
    }
    if (read_more) StartRead(&request_);
    TryWrite();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        writing_ = false;
      }
      Fail(absl::CancelledError("the client stopped reading"));
      return;
    }
    bool stop = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop = fatal_.has_value();
      if (stop) writing_ = false;
    }
    if (stop) {  // ending: the rest of this frame is not sent
      MaybeFinish();
      return;
    }
    if (messages_) {
      const int64_t index = response_.frame_index();
      response_.Clear();
      response_.set_frame_index(index);
      if (messages_->NextChunk(response_.mutable_chunk())) {
        StartWrite(&response_);
        return;
      }
      messages_.reset();
    }
    bool resume = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      ++next_write_;
      --in_flight_;
      resume = read_paused_ && !reads_done_ && !fatal_.has_value();
      if (resume) read_paused_ = false;
    }
    if (resume) StartRead(&request_);  // a slot is free: take the next frame
    TryWrite();
    MaybeFinish();
  }

  void OnCancel() override { Fail(absl::CancelledError("the client cancelled the stream")); }

  void OnDone() override {
    ticket_.Close();
    delete this;
  }

 private:
  // A frame's answer, ready to go: the header message and the chunks still to come.
  struct Answer {
    v1::HologramFrameResponse header;
    std::optional<ResultMessages> messages;
  };

  // Frames rendered at once: one per worker of the devices that run them, plus one being read.
  static int PipelineDepth(const DevicePool& pool) {
    int gpu_workers = 0, cpu_workers = 0;
    for (const DeviceSnapshot& d : pool.Snapshot()) {
      (d.kind == DeviceKind::kCuda ? gpu_workers : cpu_workers) += d.workers;
    }
    return std::clamp((gpu_workers > 0 ? gpu_workers : cpu_workers) + 1, 2, 16);
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

  // What one frame was sent as: the message that carried it, or (`points` set) its parts.
  struct FrameInput {
    Clock::time_point received;
    bool had_config = false;
    std::optional<v1::HologramFrameOverrides> overrides;
    std::optional<hologram::PointCloud> points;
    absl::Status error;  // a bad part: the frame is answered with it after its last part
    int64_t columns = -1;  // of the first part's points; every part must match
  };

  // Adds request_ as the next part of partial_ (its first part when partial_ is empty).
  void AddPart() {
    if (!partial_.has_value()) {
      partial_.emplace(FrameInput{});  // (not emplace(): clang 14 rejects it for a nested struct
                                       // with default member initializers)
      partial_->received = Clock::now();
      partial_->had_config = request_.has_config();
      if (request_.has_overrides()) partial_->overrides = request_.overrides();
      partial_->points.emplace();
    } else if (partial_->error.ok() && (request_.has_config() || request_.has_overrides())) {
      partial_->error = absl::InvalidArgumentError(
          "points_continue: only the first part of a frame may carry config or overrides");
    }
    if (!partial_->error.ok()) return;  // read on to the frame's last part, then answer
    if (request_.source_case() != v1::HologramFrameRequest::kPoints) {
      partial_->error = absl::InvalidArgumentError(
          "points_continue: every part of a frame sent in parts carries `points`");
      return;
    }
    absl::StatusOr<hologram::PointCloud> part = PointsFromProto(request_.points(), limits_);
    if (!part.ok()) {
      partial_->error = part.status();
      return;
    }
    const int64_t columns = request_.points().shape_size() == 2 ? request_.points().shape(1) : -1;
    if (partial_->columns < 0) {
      partial_->columns = columns;
    } else if (columns != partial_->columns) {
      partial_->error = absl::InvalidArgumentError(absl::StrCat(
          "points: every part of a frame has the first part's ", partial_->columns,
          " columns; this part has ", columns));
      return;
    }
    hologram::PointCloud& all = *partial_->points;
    if (static_cast<int64_t>(all.size() + part->size()) > limits_.max_points) {
      partial_->error = absl::InvalidArgumentError(absl::StrCat(
          "points: the frame's parts hold more than the limit of ", limits_.max_points,
          " points"));
      return;
    }
    all.insert(all.end(), part->begin(), part->end());
  }

  absl::Status PrepareFrame(FrameInput* input, RenderWork* work) {
    FRESNEL_RETURN_IF_ERROR(input->error);
    if (input->overrides.has_value()) {
      FRESNEL_ASSIGN_OR_RETURN(work->options, ApplyOverrides(base_, *input->overrides, limits_));
      FRESNEL_RETURN_IF_ERROR(
          CheckAlgorithmPlacement(work->options, hint_, ctx_->pool->gpu_count()));
    } else {
      work->options = base_;
    }
    if (input->points.has_value()) {
      work->points = *std::move(input->points);
    } else {
      FRESNEL_ASSIGN_OR_RETURN(work->points, SourcePoints(request_, limits_));
    }
    return hologram::ValidateHologram(work->points, work->options, limits_);
  }

  // Frame `index`'s answer when it failed: a header carrying only the status.
  Answer FrameError(int64_t index, const absl::Status& status) const {
    Answer a;
    a.header.set_frame_index(index);
    a.header.mutable_header()->set_request_id(request_id_);
    ToItemStatus(status, a.header.mutable_status());
    return a;
  }

  // On a worker thread: turns the frame's result into its messages (the copy into the header
  // happens here, in parallel across frames) and hands them to the writer.
  void OnFrameDone(int64_t index, RenderWork* work, int64_t points, Clock::time_point received,
                   const absl::Status& status, const JobReport& report) {
    if (!status.ok()) {  // the server's own failure (cancelled, deadline, draining): fatal
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!fatal_.has_value()) fatal_ = status;
      }
      jobs_.Cancel();  // not under mu_: a cancelled job completes on this thread
      JobEnded(index, std::nullopt);
      return;
    }
    Answer answer;
    if (!work->error.ok()) {
      answer = FrameError(index, work->error);
    } else {
      answer.header.set_frame_index(index);
      ToItemStatus(absl::OkStatus(), answer.header.mutable_status());
      v1::HologramResultHeader* header = answer.header.mutable_header();
      header->set_request_id(request_id_);
      FillResultHeader(work->result, points, work->options, header);
      FillExecutionInfo(report, SecondsSince(received), header->mutable_info());
      answer.messages.emplace(std::move(work->result), chunk_bytes_);
      const int64_t out_bytes = answer.messages->BuildHeader(header);
      record_.Payload("out", static_cast<double>(out_bytes));
    }
    JobEnded(index, std::move(answer));
  }

  // A job's last touch of the reactor. While running_ counts the job the stream cannot finish,
  // so the decrement, the choice of what to do next and the hand-over happen in one critical
  // section, and after it this thread only starts the write or the finish it chose.
  void JobEnded(int64_t index, std::optional<Answer> answer) {
    bool write = false, finish = false;
    absl::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (answer.has_value()) ready_.emplace(index, *std::move(answer));
      --running_;
      write = TakeNextLocked();
      if (!write) finish = FinishDecisionLocked(&status);
    }
    if (write) {
      StartWrite(&response_);
    } else if (finish) {
      FinishWith(status);
    }
  }

  // With mu_ held: moves the next frame in order into response_ when it is ready and no write
  // is in flight.
  bool TakeNextLocked() {
    if (writing_ || fatal_.has_value()) return false;
    auto it = ready_.find(next_write_);
    if (it == ready_.end()) return false;
    writing_ = true;
    response_ = std::move(it->second.header);
    messages_ = std::move(it->second.messages);
    ready_.erase(it);
    return true;
  }

  // With mu_ held: whether the stream ends now (nothing runs or is being written, and it failed
  // or every frame was answered after the client half-closed), and with which status.
  bool FinishDecisionLocked(absl::Status* status) {
    if (finishing_ || running_ > 0 || writing_) return false;
    if (fatal_.has_value()) {
      *status = *fatal_;
    } else if (!reads_done_ || in_flight_ > 0) {
      return false;
    } else {
      *status = end_status_;
    }
    finishing_ = true;
    return true;
  }

  // From OnReadDone: when the client stopped inside a frame sent in parts, that frame is
  // answered with INVALID_ARGUMENT. Whether there was one.
  bool AnswerUnfinishedFrame() {
    if (!partial_.has_value()) return false;
    const int64_t index = next_frame_++;
    partial_.reset();
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;
    ready_.emplace(index, FrameError(index, absl::InvalidArgumentError(
                                                "points_continue: the stream ended before the "
                                                "frame's last part")));
    return true;
  }

  // From gRPC reactions (OnReadDone / OnWriteDone / OnCancel) only.
  void TryWrite() {
    bool write;
    {
      std::lock_guard<std::mutex> lock(mu_);
      write = TakeNextLocked();
    }
    if (write) StartWrite(&response_);
  }
  void MaybeFinish() {
    absl::Status status;
    bool finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      finish = FinishDecisionLocked(&status);
    }
    if (finish) FinishWith(status);
  }

  // Ends the stream with `status` once nothing of it runs or is being written; jobs still
  // queued are cancelled.
  void Fail(const absl::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fatal_.has_value()) fatal_ = status;
    }
    jobs_.Cancel();  // not under mu_: a cancelled job completes on this thread
    MaybeFinish();
  }

  void FinishWith(const absl::Status& status) {
    record_.Done(status);
    Finish(ToGrpcStatus(status));
  }

  ServiceContext* ctx_;
  hologram::Limits limits_;
  grpc::CallbackServerContext* context_;
  RpcRecord record_;
  StreamSlot stream_slot_;
  DrainGate::Ticket ticket_;  // while open: SIGTERM's drain may end it (server/drain.h)
  const int depth_;
  // Reader side (OnReadDone runs one at a time).
  v1::HologramFrameRequest request_;
  bool configured_ = false;
  hologram::HologramOptions base_;
  v1::DeviceHint hint_;
  DevicePreference preference_ = DevicePreference::kAny;
  int64_t chunk_bytes_ = 0;
  std::string request_id_;
  int64_t next_frame_ = 0;
  std::optional<FrameInput> partial_;  // a frame arriving in parts
  // Writer side (owned by the write in flight).
  v1::HologramFrameResponse response_;
  std::optional<ResultMessages> messages_;
  // Shared.
  std::mutex mu_;
  std::map<int64_t, Answer> ready_;  // answered frames not yet written
  int64_t next_write_ = 0;
  int in_flight_ = 0;  // frames read and not yet fully written
  int running_ = 0;    // frames whose job has not completed
  bool writing_ = false;
  bool read_paused_ = false;
  bool reads_done_ = false;
  bool saw_end_ = false;          // a message set `end` (reader side only)
  absl::Status end_status_;       // how a clean finish ends: INVALID_ARGUMENT without `end`
  bool finishing_ = false;
  std::optional<absl::Status> fatal_;
  JobSlot jobs_;  // the jobs in flight, for OnCancel
};

// ---------------------------------------------------------------------------------------------
// Reconstruct: config (+ inline field) or config + field chunks in, one image out.

class ReconstructCall : public grpc::ServerReadReactor<v1::ReconstructRequest> {
 public:
  ReconstructCall(ServiceContext* ctx, const hologram::Limits& limits,
                  grpc::CallbackServerContext* context, v1::ReconstructResponse* response)
      : ctx_(ctx),
        limits_(limits),
        context_(context),
        response_(response),
        record_(ctx->metrics, kService, "Reconstruct") {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::Status st = Run();
      if (!st.ok()) FinishWith(st);
      return;
    }
    absl::Status st = Take();
    if (!st.ok()) {
      FinishWith(st);
      return;
    }
    StartRead(&request_);
  }

  void OnCancel() override { slot_.Cancel(); }

  void OnDone() override { delete this; }

 private:
  // One incoming message.
  absl::Status Take() {
    if (!have_config_) {
      if (request_.msg_case() != v1::ReconstructRequest::kConfig) {
        return absl::InvalidArgumentError("config: the first message must carry the config");
      }
      config_ = std::move(*request_.mutable_config());
      have_config_ = true;
      inline_field_ = config_.field().shape_size() > 0 || !config_.field().data().empty();
      return absl::OkStatus();
    }
    if (request_.msg_case() != v1::ReconstructRequest::kFieldChunk) {
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
    // complex128 is the widest dtype the kernel takes.
    const int64_t max_bytes = limits_.max_pixels * 16;
    FRESNEL_ASSIGN_OR_RETURN(field_complete_,
                             assembler_.Add(std::move(*request_.mutable_field_chunk()), "field",
                                            max_bytes));
    any_chunk_ = true;
    return absl::OkStatus();
  }

  absl::Status Run() {
    if (!have_config_) {
      return absl::InvalidArgumentError("config: the stream ended before a config message");
    }
    auto field = std::make_shared<HostArray>();
    if (inline_field_) {
      FRESNEL_ASSIGN_OR_RETURN(*field, FromProto(std::move(*config_.mutable_field()), "field"));
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
    if (image_bytes + kEnvelopeBytes > ctx_->max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "image: the reconstruction would be ", image_bytes,
          " bytes, over the server's max message size of ", ctx_->max_message_bytes, " bytes"));
    }
    hologram::AsmOptions options;
    options.pitch_m = config_.pitch_m();
    options.wavelength_m = config_.wavelength_m();
    options.depth_m = config_.depth_m();
    FRESNEL_ASSIGN_OR_RETURN(options.source, SourceFromProto(config_.source(), "source"));
    record_.Payload("in", static_cast<double>(field->nbytes()));
    auto result = std::make_shared<hologram::Reconstruction>();
    auto job = std::make_shared<Job>();
    job->service = kService;
    job->method = "Reconstruct";
    FRESNEL_ASSIGN_OR_RETURN(job->preference, PreferenceOf(config_.device(), "config.device"));
    job->deadline = DeadlineOf(context_);
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
      if (status.ok()) {
        response_->set_request_id(request_id);
        response_->set_scale(result->scale);
        record_.Payload("out", static_cast<double>(result->image.nbytes()));
        ToProto(std::move(result->image), response_->mutable_image());
        FillExecutionInfo(report, record_.Elapsed(), response_->mutable_info());
      }
      FinishWith(status);
    };
    absl::Status submitted = slot_.Submit(ctx_->pool, job);
    if (!submitted.ok()) return submitted;
    return absl::OkStatus();
  }

  void FinishWith(const absl::Status& status) {
    if (finished_.exchange(true)) return;
    record_.Done(status);
    Finish(ToGrpcStatus(status));
  }

  ServiceContext* ctx_;
  hologram::Limits limits_;
  grpc::CallbackServerContext* context_;
  v1::ReconstructResponse* response_;
  RpcRecord record_;
  v1::ReconstructRequest request_;
  v1::ReconstructConfig config_;
  bool have_config_ = false;
  bool inline_field_ = false;
  bool any_chunk_ = false;
  bool field_complete_ = false;
  ChunkAssembler assembler_;
  std::atomic<bool> finished_{false};
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
