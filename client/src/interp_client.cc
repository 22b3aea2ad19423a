// fresnel::InterpClient: InterpolationService's unary calls and ResampleStream; the shared-memory
// and *Array paths are fresnel::Client's (shm_client.cc), called from here.
#include "fresnel/client/interp_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "call_util.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel {
namespace {

using internal::ApplyDeadline;
using internal::FromGrpc;
using internal::ReadAll;
using internal::Unary;

// Folds one stream response's execution times into the stream's totals.
void Accumulate(const v1::ExecutionInfo& part, std::vector<std::string>* devices,
                v1::ExecutionInfo* sum) {
  if (!part.device().empty() &&
      std::find(devices->begin(), devices->end(), part.device()) == devices->end()) {
    devices->push_back(part.device());
  }
  sum->set_queue_wait_seconds(sum->queue_wait_seconds() + part.queue_wait_seconds());
  sum->set_h2d_seconds(sum->h2d_seconds() + part.h2d_seconds());
  sum->set_compute_seconds(sum->compute_seconds() + part.compute_seconds());
  sum->set_d2h_seconds(sum->d2h_seconds() + part.d2h_seconds());
  // Each stream response reports its own item's server time (arrival -> response).
  sum->set_total_seconds(sum->total_seconds() + part.total_seconds());
}

}  // namespace

InterpClient::InterpClient(Client* client)
    : client_(client), stub_(v1::InterpolationService::NewStub(client->channel())) {}

InterpClient::~InterpClient() = default;

absl::StatusOr<v1::InterpolationResponse> InterpClient::Upfirdn(const v1::UpfirdnRequest& request,
                                                          const CallOptions& call) {
  return Unary<v1::UpfirdnRequest, v1::InterpolationResponse>(
      client_->options(), call, request, [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return stub_->Upfirdn(c, req, resp);
      });
}

absl::StatusOr<v1::InterpolationResponse> InterpClient::ResamplePoly(
    const v1::ResamplePolyRequest& request, const CallOptions& call) {
  return Unary<v1::ResamplePolyRequest, v1::InterpolationResponse>(
      client_->options(), call, request, [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return stub_->ResamplePoly(c, req, resp);
      });
}

absl::StatusOr<v1::InterpolationResponse> InterpClient::Resample(const v1::ResampleRequest& request,
                                                           const CallOptions& call) {
  return Unary<v1::ResampleRequest, v1::InterpolationResponse>(
      client_->options(), call, request, [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return stub_->Resample(c, req, resp);
      });
}

absl::StatusOr<v1::InterpolationResponse> InterpClient::Decimate(const v1::DecimateRequest& request,
                                                           const CallOptions& call) {
  return Unary<v1::DecimateRequest, v1::InterpolationResponse>(
      client_->options(), call, request, [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return stub_->Decimate(c, req, resp);
      });
}

absl::StatusOr<HostArray> InterpClient::ResampleStream(
    const v1::ResampleStreamConfig& config, const HostArray& x, int64_t chunk_samples,
    const CallOptions& call, const std::function<void(int64_t, int64_t)>& on_progress,
    v1::ExecutionInfo* info) {
  if (x.ndim() != 1 && x.ndim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: expected shape [n] or [channels, n], got ", ShapeString(x.shape())));
  }
  if (chunk_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_samples must be >= 1, got ", chunk_samples));
  }
  const int64_t channels = x.ndim() == 2 ? x.dim(0) : 1;
  const int64_t n = x.dim(x.ndim() - 1);

  // The config describes x as [channels, 0]; every chunk is [channels, k] (even for 1-D x, whose
  // result is reshaped back to 1-D at the end).
  v1::ResampleStreamRequest first;
  *first.mutable_config() = config;
  v1::NdArray* config_x = nullptr;
  switch (config.op_case()) {
    case v1::ResampleStreamConfig::kUpfirdn:
      config_x = first.mutable_config()->mutable_upfirdn()->mutable_x();
      break;
    case v1::ResampleStreamConfig::kResamplePoly:
      config_x = first.mutable_config()->mutable_resample_poly()->mutable_x();
      break;
    default:
      return absl::InvalidArgumentError("config: set either upfirdn or resample_poly");
  }
  config_x->Clear();
  config_x->set_dtype(ToProto(x.dtype()));
  config_x->add_shape(channels);
  config_x->add_shape(0);

  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  std::unique_ptr<grpc::ClientReaderWriter<v1::ResampleStreamRequest, v1::ResampleStreamResponse>>
      stream = stub_->ResampleStream(&context);

  // Requests are written from a second thread while this one reads, so the server's responses
  // never back up behind our writes (gRPC allows one concurrent reader and one writer).
  const int64_t num_chunks = std::max<int64_t>(1, (n + chunk_samples - 1) / chunk_samples);
  std::thread writer([&] {
    if (!stream->Write(first)) return;  // the call is over; Finish() says why
    for (int64_t i = 0; i < num_chunks; ++i) {
      const int64_t begin = i * chunk_samples;
      absl::StatusOr<HostArray> chunk = SliceSamples(x, begin, std::min(chunk_samples, n - begin));
      v1::ResampleStreamRequest request;
      ToProto(std::move(*chunk), request.mutable_chunk());  // SliceSamples cannot fail here
      request.set_end(i + 1 == num_chunks);
      if (!stream->Write(request)) return;
    }
    stream->WritesDone();
  });

  std::vector<HostArray> pieces;
  std::vector<std::string> devices;
  v1::ExecutionInfo sum;
  int64_t samples_out = 0;
  int64_t last_reported_total = -1;
  auto on_response = [&](v1::ResampleStreamResponse* response) -> absl::Status {
    if (response->status().code() != 0) {
      return FromGrpcStatus(response->status().code(),
                            absl::StrCat("chunk ", response->chunk_index(), ": ",
                                         response->status().message()));
    }
    if (response->has_y()) {
      absl::StatusOr<HostArray> y = FromProto(std::move(*response->mutable_y()), "y");
      if (!y.ok()) return y.status();
      const int64_t rows = y->ndim() == 2 ? y->dim(0) : 1;
      if ((y->ndim() != 1 && y->ndim() != 2) || rows != channels || y->dtype() != x.dtype()) {
        return absl::InternalError(absl::StrCat(
            "chunk ", response->chunk_index(), ": the server returned ", DTypeName(y->dtype()),
            " ", ShapeString(y->shape()), " for ", DTypeName(x.dtype()), " input with ",
            channels, " channel(s)"));
      }
      samples_out += y->dim(y->ndim() - 1);
      pieces.push_back(*std::move(y));
    }
    last_reported_total = response->samples_out();
    Accumulate(response->info(), &devices, &sum);
    if (on_progress) {
      const int64_t index = response->chunk_index();
      const int64_t samples_in = index < 0 ? n : std::min(n, (index + 1) * chunk_samples);
      on_progress(samples_in, samples_out);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = ReadAll<v1::ResampleStreamResponse>(&context, stream.get(), on_response,
                                                           [&writer] { writer.join(); });
      !s.ok()) {
    return s;
  }
  if (last_reported_total > 0 && last_reported_total != samples_out) {
    return absl::DataLossError(absl::StrCat("the server reported ", last_reported_total,
                                            " output samples but sent ", samples_out));
  }

  absl::StatusOr<HostArray> y = ConcatSamples(pieces, channels, x.dtype());
  if (!y.ok()) return y.status();
  if (x.ndim() == 1) {
    if (absl::Status s = y->Reshape({samples_out}); !s.ok()) return s;
  }
  if (info != nullptr) {
    sum.set_device(absl::StrJoin(devices, ","));
    *info = sum;
  }
  return y;
}

absl::StatusOr<v1::InterpolationResponse> InterpClient::Upfirdn(v1::UpfirdnRequest request,
                                                                const SharedRegion& region,
                                                                int64_t x_offset, int64_t y_offset,
                                                                const CallOptions& call) {
  return client_->Upfirdn(std::move(request), region, x_offset, y_offset, call);
}

absl::StatusOr<v1::InterpolationResponse> InterpClient::ResamplePoly(
    v1::ResamplePolyRequest request, const SharedRegion& region, int64_t x_offset,
    int64_t y_offset, const CallOptions& call) {
  return client_->ResamplePoly(std::move(request), region, x_offset, y_offset, call);
}

absl::StatusOr<HostArray> InterpClient::UpfirdnArray(v1::UpfirdnRequest request,
                                                     const HostArray& x,
                                                     const TransferOptions& transfer,
                                                     const CallOptions& call,
                                                     TransferReport* report) {
  return client_->UpfirdnArray(std::move(request), x, transfer, call, report);
}

absl::StatusOr<HostArray> InterpClient::ResamplePolyArray(v1::ResamplePolyRequest request,
                                                          const HostArray& x,
                                                          const TransferOptions& transfer,
                                                          const CallOptions& call,
                                                          TransferReport* report) {
  return client_->ResamplePolyArray(std::move(request), x, transfer, call, report);
}

}  // namespace fresnel
