#include "server/services/unwrap_service.h"

#include <array>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/v1/array_convert.h"
#include "server/jobs.h"
#include "server/rpc/chunked.h"
#include "server/rpc/upload_reader.h"
#include "server/services/unwrap_params.h"
#include "server/shm_arrays.h"
#include "server/status_util.h"

namespace fresnel::server {
namespace {

// The response's field for a result array.
v1::NdArray* ResponseArray(v1::UnwrapResponse* r, v1::UnwrapArray which) {
  switch (which) {
    case v1::UNWRAP_ARRAY_RESIDUES: return r->mutable_residues();
    case v1::UNWRAP_ARRAY_CUTS: return r->mutable_cuts();
    case v1::UNWRAP_ARRAY_REGIONS: return r->mutable_regions();
    case v1::UNWRAP_ARRAY_UNREACHED: return r->mutable_unreached();
    default: return r->mutable_unwrapped();
  }
}

constexpr char kService[] = "fresnel.v1.UnwrapService";
using v1::kEnvelopeBytes;

void SetTime(std::chrono::system_clock::time_point t, google::protobuf::Timestamp* out) {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

v1::JobState StateToProto(JobState state) {
  switch (state) {
    case JobState::kQueued: return v1::JOB_STATE_QUEUED;
    case JobState::kRunning: return v1::JOB_STATE_RUNNING;
    case JobState::kDone: return v1::JOB_STATE_DONE;
    case JobState::kFailed: return v1::JOB_STATE_FAILED;
    case JobState::kCancelled: return v1::JOB_STATE_CANCELLED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

bool TerminalProto(v1::JobState state) {
  return state == v1::JOB_STATE_DONE || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

void JobToProto(const JobSnapshot& s, v1::UnwrapJob* out) {
  out->set_job_id(s.id);
  out->set_state(StateToProto(s.state));
  out->set_method(static_cast<v1::UnwrapMethod>(s.method_code));
  out->set_dtype(ToProto(s.dtype));
  out->mutable_shape()->Assign(s.shape.begin(), s.shape.end());
  out->set_stage(s.stage);
  out->set_stage_fraction(s.stage_fraction);
  out->set_progress(s.progress);
  out->set_cancel_requested(s.cancel_requested);
  if (!s.status.ok()) {
    ToItemStatus(s.status, out->mutable_status());
  }
  const std::chrono::system_clock::time_point unset{};
  SetTime(s.created, out->mutable_created());
  if (s.started != unset) SetTime(s.started, out->mutable_started());
  if (IsTerminal(s.state)) {
    SetTime(s.finished, out->mutable_finished());
    SetTime(s.expires, out->mutable_expires());
  }
  out->set_device(s.report.device);
  out->set_result_bytes(s.result_bytes);
  out->set_request_id(s.request_id);
}

absl::Status RequireJobId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("job_id: required");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Submit: reads the header and the chunks of the arrays it left out; creates the job when the
// client half-closes.

class SubmitCall : public UploadReader<v1::SubmitRequest> {
 public:
  SubmitCall(ServiceContext* ctx, const unwrap::Limits& limits,
             grpc::CallbackServerContext* context, v1::SubmitResponse* response)
      : UploadReader(ctx->metrics, kService, "Submit", context, ctx->stream_state_bytes),
        ctx_(ctx),
        limits_(limits),
        owner_(ClientOf(context)),
        response_(response),
        chunks_("chunk.array", ExpectedArrays(limits_.max_pixels,
                                              ctx_->jobs->options().memory_bytes)) {
    StartReading();
  }

 private:
  static constexpr const char* kNames[3] = {"phase", "mask", "quality"};
  static constexpr v1::UnwrapArray kArrays[3] = {v1::UNWRAP_ARRAY_PHASE, v1::UNWRAP_ARRAY_MASK,
                                                 v1::UNWRAP_ARRAY_QUALITY};

  // No array can be larger than the limits allow (8 bytes a pixel for phase and quality, 1 for
  // the mask), nor than the job store could hold (`cap`).
  static std::vector<ChunkedReader::Expected> ExpectedArrays(int64_t pixels, int64_t cap) {
    const int64_t bytes_per_pixel[3] = {8, 1, 8};
    std::vector<ChunkedReader::Expected> out;
    for (int i = 0; i < 3; ++i) {
      out.push_back({kArrays[i], kNames[i], std::min(pixels * bytes_per_pixel[i], cap)});
    }
    return out;
  }

  bool Inline(int i) const {
    const v1::UnwrapRequest& r = header_.request();
    return i == 0 ? r.has_phase() : i == 1 ? r.has_mask() : r.has_quality();
  }

  absl::Status Take(v1::SubmitRequest& request) override {
    if (!have_header_) {
      if (request.msg_case() != v1::SubmitRequest::kHeader) {
        return absl::InvalidArgumentError("header: the first message must carry the header");
      }
      header_ = std::move(*request.mutable_header());
      have_header_ = true;
      return absl::OkStatus();
    }
    if (request.msg_case() != v1::SubmitRequest::kChunk) {
      return absl::InvalidArgumentError("chunk: every message after the header must carry a chunk");
    }
    v1::UnwrapArrayChunk& c = *request.mutable_chunk();
    for (int i = 0; i < 3; ++i) {
      if (c.array() == kArrays[i] && Inline(i)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kNames[i], ": sent both inline in the header and in chunks"));
      }
    }
    record().Payload("in", static_cast<double>(c.chunk().data().size()));
    return chunks_.Add(c.array(), std::move(*c.mutable_chunk()));
  }

  absl::StatusOr<std::optional<HostArray>> TakeArray(int i) {
    if (Inline(i)) {
      v1::UnwrapRequest& r = *header_.mutable_request();
      v1::NdArray* inline_array = i == 0   ? r.mutable_phase()
                                  : i == 1 ? r.mutable_mask()
                                           : r.mutable_quality();
      record().Payload("in", static_cast<double>(inline_array->data().size()));
      // An array in the client's region is copied out of it here, when the job is created.
      FRESNEL_ASSIGN_OR_RETURN(HostArray a, FromProto(std::move(*inline_array), kNames[i],
                                                      ClientRegions(ctx_, owner_)));
      return std::optional<HostArray>(std::move(a));
    }
    return chunks_.Take(kArrays[i]);
  }

  absl::Status Complete() override {
    if (!have_header_) {
      return absl::InvalidArgumentError("header: the stream ended before the header");
    }
    FRESNEL_RETURN_IF_ERROR(DoCreateJob());
    FinishWith(absl::OkStatus());
    return absl::OkStatus();
  }

  absl::Status DoCreateJob() {
    FRESNEL_ASSIGN_OR_RETURN(std::optional<HostArray> phase, TakeArray(0));
    FRESNEL_ASSIGN_OR_RETURN(std::optional<HostArray> mask, TakeArray(1));
    FRESNEL_ASSIGN_OR_RETURN(std::optional<HostArray> quality, TakeArray(2));
    const v1::UnwrapRequest& req = header_.request();
    if (!phase) {
      return absl::InvalidArgumentError("phase: required (inline in the header or in chunks)");
    }
    FRESNEL_ASSIGN_OR_RETURN(
        UnwrapInput input, ParseUnwrap(req, *std::move(phase), std::move(mask), std::move(quality),
                                       limits_));
    // out_shm: the result goes to the client's region when the job finishes. Checked now (an
    // unknown region or a range too small for the result is refused before anything runs),
    // resolved again at the finish (StoreInRegion).
    std::optional<v1::ShmRef> out_shm;
    if (req.has_out_shm()) {
      FRESNEL_ASSIGN_OR_RETURN(OutputRegion check,
                               OutputRegion::Reserve(true, req.out_shm(), input.OutputArrayBytes(),
                                                     ClientRegions(ctx_, owner_), "out_shm"));
      check.Release();
      out_shm = req.out_shm();
    }
    JobSpec spec;
    spec.owner = owner_;
    spec.method = UnwrapMethodName(input.method);
    spec.method_code = input.method;
    spec.dtype = input.phase.dtype();
    spec.shape = input.phase.shape();
    spec.request_id = RequestIdOr(input.request_id);
    spec.idempotency_key = header_.idempotency_key();
    if (!spec.idempotency_key.empty()) {
      spec.fingerprint = input.Fingerprint();
      // The same arrays into another region (or none) is another request.
      if (out_shm) spec.fingerprint ^= std::hash<std::string>{}(out_shm->SerializeAsString());
    }
    spec.input_bytes = input.InputBytes();
    spec.output_bytes = input.OutputBytes();
    spec.service = kService;
    spec.rpc_method = "Submit";
    spec.preference = input.preference;
    spec.device_bytes = input.DeviceBytes();
    auto shared = std::make_shared<const UnwrapInput>(std::move(input));
    spec.run = [shared, out_shm, ctx = ctx_, owner = owner_](
                   const Device& device, StageTimes* times, const JobProgressFn& progress)
        -> absl::StatusOr<std::shared_ptr<const JobOutput>> {
      FRESNEL_ASSIGN_OR_RETURN(std::shared_ptr<UnwrapOutput> out,
                               RunUnwrap(device, *shared, times, progress));
      if (out_shm) StoreInRegion(ClientRegions(ctx, owner), *out_shm, out.get());
      return std::shared_ptr<const JobOutput>(std::move(out));
    };
    FRESNEL_ASSIGN_OR_RETURN(JobStore::Submitted submitted, ctx_->jobs->Submit(std::move(spec)));
    JobToProto(submitted.job, response_->mutable_job());
    response_->set_existing(submitted.existing);
    return absl::OkStatus();
  }

  ServiceContext* ctx_;
  const unwrap::Limits limits_;
  const std::string owner_;  // ClientOf the call: the job's owner
  v1::SubmitResponse* response_;
  v1::SubmitHeader header_;
  bool have_header_ = false;
  ChunkedReader chunks_;  // the arrays the header left out
};

// ---------------------------------------------------------------------------------------------
// Watch: a JobStore listener feeding a write reactor. The store calls Push (under its lock) for
// the current state and every change; Push queues the state and starts a write when none is in
// flight, and OnWriteDone starts the next one. Nothing here waits: a slow client only makes
// progress updates merge in the queue.

class WatchCall : public RpcCall<grpc::ServerWriteReactor<v1::UnwrapJob>> {
 public:
  WatchCall(ServiceContext* ctx, const std::string& owner, const v1::WatchRequest* request)
      : RpcCall(ctx->metrics, kService, "Watch"), ctx_(ctx), job_id_(request->job_id()) {
    if (absl::Status st = RequireJobId(job_id_); !st.ok()) {
      FinishOnce(st);
      return;
    }
    if (request->once()) {
      absl::StatusOr<JobSnapshot> snap = ctx_->jobs->Get(job_id_, owner);
      if (!snap.ok()) {
        FinishOnce(snap.status());
        return;
      }
      JobToProto(*snap, &current_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        finished_ = true;
      }
      RecordFinish(absl::OkStatus());
      StartWriteAndFinish(&current_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    // Push queues the first state during Subscribe; writing starts once `ready_` is set, so that
    // OnDone cannot run before the subscription token is stored.
    absl::StatusOr<uint64_t> token =
        ctx_->jobs->Subscribe(job_id_, owner, [this](const JobSnapshot& s) { Push(s); });
    if (!token.ok()) {
      FinishOnce(token.status());
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    token_ = *token;
    subscribed_ = true;
    ready_ = true;
    Pump(lock);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(lock, absl::CancelledError("the client stopped reading"));
    } else if (wrote_terminal_) {
      FinishLocked(lock, absl::OkStatus());
    } else if (cancelled_) {
      FinishLocked(lock, absl::CancelledError("the client cancelled the call"));
    } else {
      Pump(lock);
    }
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(mu_);
    cancelled_ = true;
    if (!writing_) FinishLocked(lock, absl::CancelledError("the client cancelled the call"));
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    // Afterwards the store will not call Push again.
    if (subscribed_) ctx_->jobs->Unsubscribe(job_id_, token_);
    delete this;
  }

 private:
  void Push(const JobSnapshot& snap) {
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_) return;
    v1::UnwrapJob msg;
    JobToProto(snap, &msg);
    // Progress of a running job replaces progress the client has not been sent yet; every state
    // change is kept.
    if (!pending_.empty() && msg.state() == v1::JOB_STATE_RUNNING &&
        pending_.back().state() == v1::JOB_STATE_RUNNING &&
        pending_.back().cancel_requested() == msg.cancel_requested()) {
      pending_.back() = std::move(msg);
    } else {
      pending_.push_back(std::move(msg));
    }
    Pump(lock);
  }

  // Starts the next write if none is in flight. Releases the lock.
  void Pump(std::unique_lock<std::mutex>& lock) {
    if (!ready_ || writing_ || finished_ || pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    wrote_terminal_ = TerminalProto(current_.state());
    lock.unlock();
    StartWrite(&current_);
  }

  void FinishLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status) {
    if (finished_) return;
    finished_ = true;
    lock.unlock();
    FinishWith(status);
  }

  void FinishOnce(const absl::Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    FinishLocked(lock, status);
  }

  ServiceContext* ctx_;
  const std::string job_id_;
  std::mutex mu_;
  std::deque<v1::UnwrapJob> pending_;
  v1::UnwrapJob current_;  // the message being written
  bool ready_ = false;
  bool writing_ = false;
  bool wrote_terminal_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  bool subscribed_ = false;
  uint64_t token_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Get: the result header, then each array in chunks, one message in flight at a time. Chunks are
// cut from the stored result as they are sent (no copy of the whole result).

class GetCall : public RpcCall<grpc::ServerWriteReactor<v1::GetUnwrapResultResponse>> {
 public:
  GetCall(ServiceContext* ctx, const std::string& owner, const v1::GetUnwrapResultRequest* request)
      : RpcCall(ctx->metrics, kService, "Get"), ctx_(ctx) {
    absl::Status st = Start(*request, owner);
    if (!st.ok()) FinishWith(st);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      FinishWith(absl::CancelledError("the client stopped reading"));
      return;
    }
    response_.Clear();
    const bool more = chunks_->Next([this](int which, v1::ArrayChunk&& chunk) {
      v1::UnwrapArrayChunk* c = response_.mutable_chunk();
      c->set_array(static_cast<v1::UnwrapArray>(which));
      record().Payload("out", static_cast<double>(chunk.data().size()));
      *c->mutable_chunk() = std::move(chunk);
    });
    if (!more) {
      FinishWith(absl::OkStatus());
      return;
    }
    StartWrite(&response_);
  }

 private:
  absl::Status Start(const v1::GetUnwrapResultRequest& request, const std::string& owner) {
    FRESNEL_RETURN_IF_ERROR(RequireJobId(request.job_id()));
    if (request.max_chunk_bytes() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_chunk_bytes must be >= 0, got ", request.max_chunk_bytes()));
    }
    FRESNEL_ASSIGN_OR_RETURN(JobStore::Result result, ctx_->jobs->GetResult(request.job_id(), owner));
    output_ = std::dynamic_pointer_cast<const UnwrapOutput>(result.output);
    if (!output_) return absl::InternalError("job output is not an unwrap result");
    chunks_.emplace(v1::ChunkPayloadBytes(ctx_->max_message_bytes, request.max_chunk_bytes()));
    v1::UnwrapResponse* header = response_.mutable_result();
    if (!output_->in_region.empty()) {
      // Written into the region the Submit named when the job finished: the header says where.
      if (request.has_out_shm()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "out_shm: this job's result was written to region '",
            output_->in_region.front().second.shm().region(),
            "' when it finished (its Submit set out_shm); call Get without out_shm"));
      }
      for (const auto& [which, array] : output_->in_region) *ResponseArray(header, which) = array;
    } else if (request.has_out_shm()) {
      // The arrays go to the client's region, resolved now (an unregistered region is NOT_FOUND
      // and the result stays fetchable); the stream is the header alone.
      std::vector<int64_t> sizes;
      std::vector<std::pair<const HostArray*, v1::NdArray*>> arrays;
      for (const auto& [which, array] : output_->Arrays()) {
        sizes.push_back(static_cast<int64_t>(array->nbytes()));
        arrays.emplace_back(array, ResponseArray(header, which));
      }
      FRESNEL_ASSIGN_OR_RETURN(OutputRegion out,
                               OutputRegion::Reserve(true, request.out_shm(), sizes,
                                                     ClientRegions(ctx_, owner), "out_shm"));
      FRESNEL_RETURN_IF_ERROR(out.Write(arrays));
    } else {
      for (const auto& [which, array] : output_->Arrays()) chunks_->AddBorrowed(which, array);
    }
    header->set_request_id(result.job.request_id);
    header->set_out_shm_error(output_->region_error);
    FillResultHeader(*output_, header);
    FillExecutionInfo(result.job.report, result.job.total_s, header->mutable_info());
    for (int which : chunks_->names()) header->add_chunked_arrays(static_cast<v1::UnwrapArray>(which));
    StartWrite(&response_);
    return absl::OkStatus();
  }

  ServiceContext* ctx_;
  std::shared_ptr<const UnwrapOutput> output_;  // kept even if the job is dropped meanwhile
  std::optional<ChunkedWriter> chunks_;  // the result's arrays, borrowed from output_
  v1::GetUnwrapResultResponse response_;
};

}  // namespace

grpc::ServerUnaryReactor* UnwrapService::Unwrap(grpc::CallbackServerContext* context,
                                                const v1::UnwrapRequest* request,
                                                v1::UnwrapResponse* response) {
  auto* call = new UnaryJobCall(ctx_, context, kService, "Unwrap");
  // The request lives until the call finishes and nothing reads its arrays again: take their
  // bytes instead of copying them. A phase in the client's region is read where it lies (the
  // call holds the mapping; a CUDA run copies it to the device before using it, a CPU run into
  // memory of its own first), and with out_shm the result is written straight into the region
  // (the CUDA downloads go there): no host copies of either. Mask and quality, small beside
  // them, are copied out of the region.
  auto* mutable_request = const_cast<v1::UnwrapRequest*>(request);
  const ShmResolver regions = ClientRegions(ctx_, context);
  std::optional<RegionArray> region_phase;
  if (request->phase().has_shm()) {
    absl::StatusOr<RegionArray> borrowed = BorrowShmInput(request->phase(), regions, "phase");
    if (!borrowed.ok()) {
      call->Reject(borrowed.status());
      return call;
    }
    region_phase = *std::move(borrowed);
    mutable_request->clear_phase();
  }
  if (absl::Status st = InlineShmInputs(mutable_request, regions); !st.ok()) {
    call->Reject(st);
    return call;
  }
  const int64_t in_bytes =
      static_cast<int64_t>(request->phase().data().size() + request->mask().data().size() +
                           request->quality().data().size()) +
      (region_phase ? static_cast<int64_t>(region_phase->array.nbytes()) : 0);
  absl::StatusOr<UnwrapInput> input =
      region_phase ? ParseUnwrap(mutable_request, limits_, std::move(region_phase->array))
                   : ParseUnwrap(mutable_request, limits_);
  if (!input.ok()) {
    call->Reject(input.status());
    return call;
  }
  absl::StatusOr<OutputRegion> out_region = OutputRegion::Reserve(
      request->has_out_shm(), request->out_shm(), input->OutputArrayBytes(), regions, "out_shm");
  if (!out_region.ok()) {
    call->Reject(out_region.status());
    return call;
  }
  const int64_t out_bytes = input->OutputBytes();
  if (!out_region->active() && out_bytes + kEnvelopeBytes > ctx_->max_message_bytes) {
    call->Reject(absl::ResourceExhaustedError(
        absl::StrCat("unwrapped: the result would be ", out_bytes,
                     " bytes, over the server's max message "
                     "size of ",
                     ctx_->max_message_bytes, " bytes; use Submit and Get, which send it in chunks",
                     input->return_maps ? " (or set options.return_maps = false)" : "")));
    return call;
  }
  Metrics* metrics = ctx_->metrics;
  if (metrics) metrics->AddPayload(kService, "Unwrap", "in", static_cast<double>(in_bytes));
  response->set_request_id(RequestIdOr(input->request_id));

  struct State {
    UnwrapInput input;
    ShmSpan phase_span;  // keeps a phase read in the client's region mapped
    std::shared_ptr<UnwrapOutput> output;
    OutputRegion out;  // active: the arrays go to the client's region
    // With out: the result arrays' dtypes and shapes, in the response's order.
    std::vector<std::pair<DType, std::vector<int64_t>>> layout;
  };
  auto state = std::make_shared<State>();
  state->out = *std::move(out_region);
  if (region_phase) state->phase_span = std::move(region_phase->span);
  if (state->out.active()) state->layout = input->OutputArrays();
  auto job = std::make_shared<Job>();
  job->preference = input->preference;
  job->device_bytes = input->DeviceBytes();
  state->input = *std::move(input);
  std::weak_ptr<Job> weak_job = job;
  job->run = [state, weak_job](const Device& device, StageTimes* times) -> absl::Status {
    // The hook only stops the kernel once the client has cancelled the call.
    JobProgressFn until_cancelled = [weak_job](const std::string&, double, double) {
      std::shared_ptr<Job> j = weak_job.lock();
      return !(j && j->cancelled());
    };
    // The CPU kernels read the phase more than once: from memory of their own, so that a client
    // rewriting its region meanwhile changes nothing after the validation.
    if (device.kind == DeviceKind::kCpu && state->input.phase.borrowed()) {
      state->input.phase = HostArray(state->input.phase);
    }
    // With out_shm, views of the result's slots in the region (made for each run: a run retried
    // on another device gets them again).
    unwrap::ResultBuffers into;
    if (state->out.active()) {
      FRESNEL_ASSIGN_OR_RETURN(std::vector<HostArray> views, state->out.Views(state->layout));
      HostArray* slots[] = {&into.unwrapped, &into.residues, &into.cuts, &into.regions,
                            &into.unreached};
      for (size_t i = 0; i < views.size(); ++i) *slots[i] = std::move(views[i]);
    }
    FRESNEL_ASSIGN_OR_RETURN(
        state->output, RunUnwrap(device, state->input, times, until_cancelled,
                                 state->out.active() ? &into : nullptr));
    state->input = UnwrapInput();  // free the input before the reply
    state->phase_span = ShmSpan();
    return absl::OkStatus();
  };
  call->Start(std::move(job), [state, response, metrics](const JobReport& report, double total) {
    FillResultHeader(*state->output, response);
    if (metrics) {
      metrics->AddPayload(kService, "Unwrap", "out", static_cast<double>(state->output->bytes()));
    }
    if (state->out.active()) {
      // Written into the region by the run: the response names where.
      for (const auto& [which, array] : state->output->Arrays()) {
        FRESNEL_ASSIGN_OR_RETURN(*ResponseArray(response, which), state->out.RefOf(*array));
      }
      state->output.reset();
      state->out.Release();
    } else {
      MoveArraysInto(state->output.get(), response);
    }
    FillExecutionInfo(report, total, response->mutable_info());
    return absl::OkStatus();
  });
  return call;
}

grpc::ServerReadReactor<v1::SubmitRequest>* UnwrapService::Submit(
    grpc::CallbackServerContext* context, v1::SubmitResponse* response) {
  return new SubmitCall(ctx_, limits_, context, response);
}

grpc::ServerWriteReactor<v1::UnwrapJob>* UnwrapService::Watch(grpc::CallbackServerContext* context,
                                                              const v1::WatchRequest* request) {
  return new WatchCall(ctx_, ClientOf(context), request);
}

grpc::ServerWriteReactor<v1::GetUnwrapResultResponse>* UnwrapService::Get(
    grpc::CallbackServerContext* context, const v1::GetUnwrapResultRequest* request) {
  return new GetCall(ctx_, ClientOf(context), request);
}

grpc::ServerUnaryReactor* UnwrapService::Cancel(grpc::CallbackServerContext* context,
                                                const v1::CancelJobRequest* request,
                                                v1::UnwrapJob* response) {
  RpcRecord record(ctx_->metrics, kService, "Cancel");
  absl::Status status = RequireJobId(request->job_id());
  if (status.ok()) {
    absl::StatusOr<JobSnapshot> snap = ctx_->jobs->Cancel(request->job_id(), ClientOf(context));
    status = snap.status();
    if (snap.ok()) JobToProto(*snap, response);
  }
  return FinishUnary(record, context, status);
}

grpc::ServerUnaryReactor* UnwrapService::List(grpc::CallbackServerContext* context,
                                              const v1::ListJobsRequest* request,
                                              v1::ListUnwrapJobsResponse* response) {
  RpcRecord record(ctx_->metrics, kService, "List");
  // Pages end by bytes as well as by count: each job as it will be written (plus its field
  // tag), within half the message cap so the response always fits.
  auto wire_bytes = [](const JobSnapshot& s) {
    v1::UnwrapJob job;
    JobToProto(s, &job);
    return static_cast<int64_t>(job.ByteSizeLong()) + 8;
  };
  absl::StatusOr<JobStore::Page> page =
      ctx_->jobs->List(request->page_size(), request->page_token(), ClientOf(context),
                       wire_bytes, ctx_->max_message_bytes / 2);
  if (page.ok()) {
    for (const JobSnapshot& s : page->jobs) JobToProto(s, response->add_jobs());
    response->set_next_page_token(page->next_page_token);
  }
  return FinishUnary(record, context, page.status());
}

}  // namespace fresnel::server
