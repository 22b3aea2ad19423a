// fresnel::UnwrapClient: UnwrapService's calls (Unwrap, and the jobs: Submit with its chunked
// upload, Watch, Get with its chunked result, Cancel, List). fresnel::Client's Unwrap* methods
// forward to the one it holds.
#include "fresnel/client/unwrap_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "call_util.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/wire_limits.h"

namespace fresnel {

namespace {

using internal::ApplyDeadline;
using internal::FromGrpc;
using internal::ReadAll;
using internal::TakeRegionArrays;
using internal::Unary;

using v1::kEnvelopeBytes;

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_DONE || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

const char* ArrayName(v1::UnwrapArray array) {
  switch (array) {
    case v1::UNWRAP_ARRAY_PHASE: return "phase";
    case v1::UNWRAP_ARRAY_MASK: return "mask";
    case v1::UNWRAP_ARRAY_QUALITY: return "quality";
    case v1::UNWRAP_ARRAY_UNWRAPPED: return "unwrapped";
    case v1::UNWRAP_ARRAY_RESIDUES: return "residues";
    case v1::UNWRAP_ARRAY_CUTS: return "cuts";
    case v1::UNWRAP_ARRAY_REGIONS: return "regions";
    case v1::UNWRAP_ARRAY_UNREACHED: return "unreached";
    default: return "array";
  }
}

HostArray* OutputSlot(UnwrapResult* r, v1::UnwrapArray array) {
  switch (array) {
    case v1::UNWRAP_ARRAY_UNWRAPPED: return &r->unwrapped;
    case v1::UNWRAP_ARRAY_RESIDUES: return &r->residues;
    case v1::UNWRAP_ARRAY_CUTS: return &r->cuts;
    case v1::UNWRAP_ARRAY_REGIONS: return &r->regions;
    case v1::UNWRAP_ARRAY_UNREACHED: return &r->unreached;
    default: return nullptr;
  }
}

// Everything but the arrays.
void TakeHeader(v1::UnwrapResponse* response, UnwrapResult* r) {
  r->request_id = response->request_id();
  r->method = response->method();
  r->stats = response->stats();
  r->stage_seconds = response->stage_seconds();
  r->info = response->info();
  r->out_shm_error = response->out_shm_error();
}

absl::Status TakeInlineArray(v1::NdArray* array, const char* name, HostArray* out) {
  if (array->shape_size() == 0 && array->data().empty()) return absl::OkStatus();  // not sent
  absl::StatusOr<HostArray> a = FromProto(std::move(*array), name);
  if (!a.ok()) return a.status();
  *out = *std::move(a);
  return absl::OkStatus();
}

// An answer's header and its inline arrays into `r`; arrays written to a region (out_shm) are read
// back out of it first, or with `views` left there (CallOptions::results_in_region). Arrays that
// follow as chunks are left to the caller.
absl::Status TakeResponse(const Client* client, v1::UnwrapResponse* response, UnwrapResult* r,
                          bool views = false) {
  if (!views) FRESNEL_RETURN_IF_ERROR(TakeRegionArrays(client, response));
  TakeHeader(response, r);
  const std::pair<v1::NdArray*, v1::UnwrapArray> arrays[] = {
      {response->mutable_unwrapped(), v1::UNWRAP_ARRAY_UNWRAPPED},
      {response->mutable_residues(), v1::UNWRAP_ARRAY_RESIDUES},
      {response->mutable_cuts(), v1::UNWRAP_ARRAY_CUTS},
      {response->mutable_regions(), v1::UNWRAP_ARRAY_REGIONS},
      {response->mutable_unreached(), v1::UNWRAP_ARRAY_UNREACHED}};
  for (const auto& [array, which] : arrays) {
    if (array->has_shm()) {
      absl::StatusOr<HostArray> view = internal::ViewRegionArray(client, *array, ArrayName(which));
      if (!view.ok()) return view.status();
      *OutputSlot(r, which) = *std::move(view);
      continue;
    }
    FRESNEL_RETURN_IF_ERROR(TakeInlineArray(array, ArrayName(which), OutputSlot(r, which)));
  }
  return absl::OkStatus();
}

}  // namespace

UnwrapClient::UnwrapClient(Client* client)
    : client_(client),
      unwrap_(v1::UnwrapService::NewStub(client->channel())),
      jobs_(v1::UnwrapService::NewStub(client->job_channel())) {}

UnwrapClient::~UnwrapClient() = default;

absl::StatusOr<UnwrapResult> UnwrapClient::Unwrap(const v1::UnwrapRequest& request,
                                            const CallOptions& call) {
  absl::StatusOr<v1::UnwrapResponse> response = Unary<v1::UnwrapRequest, v1::UnwrapResponse>(
      client_->options(), call, request, [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return unwrap_->Unwrap(c, req, resp);
      });
  if (!response.ok()) return response.status();
  UnwrapResult r;
  FRESNEL_RETURN_IF_ERROR(TakeResponse(client_, &*response, &r, call.results_in_region));
  return r;
}

absl::StatusOr<v1::SubmitResponse> UnwrapClient::Submit(v1::UnwrapRequest request,
                                                        const SubmitOptions& options,
                                                        const CallOptions& call) {
  const int64_t cap =
      options.max_message_bytes > 0 ? options.max_message_bytes : client_->MessageCap(call);
  v1::SubmitRequest first;
  v1::SubmitHeader* header = first.mutable_header();
  header->set_idempotency_key(options.idempotency_key);
  // Arrays that do not fit in the header next to everything else travel as chunks, largest
  // first, until the header fits.
  std::vector<std::pair<v1::UnwrapArray, HostArray>> chunked;
  std::vector<std::pair<v1::NdArray*, v1::UnwrapArray>> order;
  if (request.has_phase()) order.emplace_back(request.mutable_phase(), v1::UNWRAP_ARRAY_PHASE);
  if (request.has_mask()) order.emplace_back(request.mutable_mask(), v1::UNWRAP_ARRAY_MASK);
  if (request.has_quality()) {
    order.emplace_back(request.mutable_quality(), v1::UNWRAP_ARRAY_QUALITY);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first->data().size() > b.first->data().size();
  });
  for (const auto& [array, which] : order) {
    if (static_cast<int64_t>(request.ByteSizeLong()) + kEnvelopeBytes <= cap) break;
    absl::StatusOr<HostArray> a = FromProto(std::move(*array), ArrayName(which));
    if (!a.ok()) return a.status();
    chunked.emplace_back(which, *std::move(a));
    switch (which) {
      case v1::UNWRAP_ARRAY_PHASE: request.clear_phase(); break;
      case v1::UNWRAP_ARRAY_MASK: request.clear_mask(); break;
      default: request.clear_quality(); break;
    }
  }
  *header->mutable_request() = std::move(request);

  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  v1::SubmitResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::SubmitRequest>> writer =
      jobs_->Submit(&context, &response);
  bool ok = writer->Write(first);
  const int64_t chunk_bytes = v1::ChunkPayloadBytes(cap);
  for (const auto& [which, array] : chunked) {
    if (!ok) break;
    ok = internal::WriteArrayChunks(
        writer.get(), array, chunk_bytes,
        [which = which](v1::ArrayChunk&& chunk, v1::SubmitRequest* message) {
          message->mutable_chunk()->set_array(which);
          *message->mutable_chunk()->mutable_chunk() = std::move(chunk);
        });
  }
  if (ok) writer->WritesDone();
  const grpc::Status status = writer->Finish();  // says why when a Write failed
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::StatusOr<v1::UnwrapJob> UnwrapClient::Watch(
    const std::string& job_id, const std::function<void(const v1::UnwrapJob&)>& on_state,
    const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  v1::WatchRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReader<v1::UnwrapJob>> reader =
      jobs_->Watch(&context, request);
  v1::UnwrapJob last;
  bool any = false;
  FRESNEL_RETURN_IF_ERROR(ReadAll<v1::UnwrapJob>(&context, reader.get(), [&](v1::UnwrapJob* job) {
    any = true;
    if (on_state) on_state(*job);
    last = std::move(*job);
    return absl::OkStatus();
  }));
  if (!any || !IsTerminal(last.state())) {
    return absl::UnavailableError(
        absl::StrCat("the Watch stream of job ", job_id, " ended before the job finished"));
  }
  return last;
}

absl::StatusOr<v1::UnwrapJob> UnwrapClient::GetJob(const std::string& job_id,
                                                   const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  v1::WatchRequest request;
  request.set_job_id(job_id);
  request.set_once(true);
  std::unique_ptr<grpc::ClientReader<v1::UnwrapJob>> reader =
      jobs_->Watch(&context, request);
  v1::UnwrapJob last;
  bool any = false;
  FRESNEL_RETURN_IF_ERROR(ReadAll<v1::UnwrapJob>(&context, reader.get(), [&](v1::UnwrapJob* job) {
    any = true;
    last = std::move(*job);
    return absl::OkStatus();
  }));
  if (!any) return absl::DataLossError(absl::StrCat("no state of job ", job_id, " was sent"));
  return last;
}

absl::StatusOr<UnwrapResult> UnwrapClient::GetResult(const std::string& job_id,
                                                     int64_t max_chunk_bytes,
                                                     const CallOptions& call,
                                                     const v1::ShmRef* out_shm) {
  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  v1::GetUnwrapResultRequest request;
  request.set_job_id(job_id);
  request.set_max_chunk_bytes(max_chunk_bytes);
  if (out_shm != nullptr) *request.mutable_out_shm() = *out_shm;
  std::unique_ptr<grpc::ClientReader<v1::GetUnwrapResultResponse>> reader =
      jobs_->Get(&context, request);
  UnwrapResult result;
  std::vector<v1::UnwrapArray> expected;
  std::map<int, ChunkAssembler> assemblers;
  std::map<int, bool> complete;
  bool have_header = false;
  auto on_message = [&](v1::GetUnwrapResultResponse* message) -> absl::Status {
    if (!have_header) {
      if (message->msg_case() != v1::GetUnwrapResultResponse::kResult) {
        return absl::DataLossError("the first Get message carries no result header");
      }
      have_header = true;
      // With out_shm the arrays are in the header, naming the region; else inline or chunks.
      FRESNEL_RETURN_IF_ERROR(TakeResponse(client_, message->mutable_result(), &result));
      for (int a : message->result().chunked_arrays()) {
        expected.push_back(static_cast<v1::UnwrapArray>(a));
      }
      return absl::OkStatus();
    }
    if (message->msg_case() != v1::GetUnwrapResultResponse::kChunk) {
      return absl::DataLossError("a Get message after the header carries no chunk");
    }
    v1::UnwrapArrayChunk* c = message->mutable_chunk();
    if (OutputSlot(&result, c->array()) == nullptr ||
        std::find(expected.begin(), expected.end(), c->array()) == expected.end()) {
      return absl::DataLossError(absl::StrCat("unexpected chunk of array ",
                                              static_cast<int>(c->array())));
    }
    FRESNEL_ASSIGN_OR_RETURN(const bool done,
                             assemblers[c->array()].Add(std::move(*c->mutable_chunk()),
                                                        ArrayName(c->array()), int64_t{1} << 50));
    if (done) complete[c->array()] = true;
    return absl::OkStatus();
  };
  FRESNEL_RETURN_IF_ERROR(
      ReadAll<v1::GetUnwrapResultResponse>(&context, reader.get(), on_message));
  if (!have_header) return absl::DataLossError("the Get stream ended without a result");
  for (v1::UnwrapArray a : expected) {
    if (!complete[a]) {
      return absl::DataLossError(
          absl::StrCat("the Get stream ended before array ", ArrayName(a), " was complete"));
    }
    absl::StatusOr<HostArray> array = assemblers[a].Take(ArrayName(a));
    if (!array.ok()) return array.status();
    *OutputSlot(&result, a) = *std::move(array);
  }
  return result;
}

absl::StatusOr<v1::UnwrapJob> UnwrapClient::Cancel(const std::string& job_id,
                                                   const CallOptions& call) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  return Unary<v1::CancelJobRequest, v1::UnwrapJob>(
      client_->options(), call, request, [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return jobs_->Cancel(c, req, resp);
      });
}

absl::StatusOr<v1::ListUnwrapJobsResponse> UnwrapClient::List(
    const v1::ListJobsRequest& request, const CallOptions& call) {
  return Unary<v1::ListJobsRequest, v1::ListUnwrapJobsResponse>(
      client_->options(), call, request, [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return jobs_->List(c, req, resp);
      });
}

}  // namespace fresnel
