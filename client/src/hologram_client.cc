// fresnel::HologramClient: HologramService's calls, Render (header + chunks reassembled),
// RenderStream (frames in, frame results out through a callback) and Reconstruct (field inline or
// chunked). fresnel::Client's methods of the same names forward to the one it holds.
#include "fresnel/client/hologram_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <climits>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "call_util.h"
#include "fresnel/client/client.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel {
namespace {

using v1::kEnvelopeBytes;

using internal::ApplyDeadline;
using internal::FromGrpc;
using internal::ReadAll;
using internal::TakeRegionArrays;

const char* OutputName(v1::HologramOutput which) {
  switch (which) {
    case v1::HOLOGRAM_OUTPUT_FIELD: return "field";
    case v1::HOLOGRAM_OUTPUT_PHASE: return "phase";
    case v1::HOLOGRAM_OUTPUT_AMPLITUDE: return "amplitude";
    case v1::HOLOGRAM_OUTPUT_RECONSTRUCTION: return "reconstruction";
    default: return "output";
  }
}

HostArray* Slot(HologramRender* r, v1::HologramOutput which) {
  switch (which) {
    case v1::HOLOGRAM_OUTPUT_FIELD: return &r->field;
    case v1::HOLOGRAM_OUTPUT_PHASE: return &r->phase;
    case v1::HOLOGRAM_OUTPUT_AMPLITUDE: return &r->amplitude;
    case v1::HOLOGRAM_OUTPUT_RECONSTRUCTION: return &r->reconstruction;
    default: return nullptr;
  }
}

// One result's messages back into a HologramRender: the header's inline arrays, then the
// chunks of header.chunked_outputs in that order.
class RenderAssembler {
 public:
  absl::Status Header(v1::HologramResultHeader* header, HologramRender* out) {
    const std::pair<v1::NdArray*, v1::HologramOutput> inline_arrays[] = {
        {header->mutable_field(), v1::HOLOGRAM_OUTPUT_FIELD},
        {header->mutable_phase(), v1::HOLOGRAM_OUTPUT_PHASE},
        {header->mutable_amplitude(), v1::HOLOGRAM_OUTPUT_AMPLITUDE},
        {header->mutable_reconstruction(), v1::HOLOGRAM_OUTPUT_RECONSTRUCTION}};
    for (const auto& [array, which] : inline_arrays) {
      if (array->shape_size() == 0 && array->data().empty()) continue;
      absl::StatusOr<HostArray> a = FromProto(std::move(*array), OutputName(which));
      if (!a.ok()) return a.status();
      *Slot(out, which) = *std::move(a);
    }
    header->clear_field();
    header->clear_phase();
    header->clear_amplitude();
    header->clear_reconstruction();
    expected_.clear();
    for (int w : header->chunked_outputs()) {
      const auto which = static_cast<v1::HologramOutput>(w);
      if (Slot(out, which) == nullptr) {
        return absl::DataLossError(absl::StrCat("the server announced unknown output ", w));
      }
      expected_.push_back(which);
    }
    next_ = 0;
    assembler_ = ChunkAssembler();
    out->header = std::move(*header);
    return absl::OkStatus();
  }

  absl::Status Chunk(v1::HologramChunk* chunk, HologramRender* out) {
    if (next_ >= expected_.size() || chunk->output() != expected_[next_]) {
      return absl::DataLossError(absl::StrCat("unexpected chunk of output ",
                                              OutputName(chunk->output())));
    }
    const char* name = OutputName(chunk->output());
    absl::StatusOr<bool> done =
        assembler_.Add(std::move(*chunk->mutable_chunk()), name, int64_t{1} << 50);
    if (!done.ok()) return done.status();
    if (*done) {
      absl::StatusOr<HostArray> a = assembler_.Take(name);
      if (!a.ok()) return a.status();
      *Slot(out, chunk->output()) = *std::move(a);
      assembler_ = ChunkAssembler();
      ++next_;
    }
    return absl::OkStatus();
  }

  bool complete() const { return next_ >= expected_.size(); }

 private:
  std::vector<v1::HologramOutput> expected_;
  size_t next_ = 0;
  ChunkAssembler assembler_;
};

// Chunks no larger than this client can receive.
int64_t ClientChunkBytes(const ClientOptions& options) {
  if (options.max_message_bytes <= 0 || options.max_message_bytes >= INT_MAX) return 0;
  return v1::ChunkPayloadBytes(options.max_message_bytes);
}

}  // namespace

HologramClient::HologramClient(Client* client)
    : client_(client), stub_(v1::HologramService::NewStub(client->channel())) {}

HologramClient::~HologramClient() = default;

absl::StatusOr<HologramRender> HologramClient::Render(v1::RenderRequest request,
                                                      const CallOptions& call) {
  if (request.config().max_chunk_bytes() == 0) {
    request.mutable_config()->set_max_chunk_bytes(ClientChunkBytes(client_->options()));
  }
  // A cloud larger than one message goes as one Stream frame in parts (points_continue). The
  // server's cap is asked for only when the request could exceed the smallest cap it may have.
  const int64_t request_bytes = static_cast<int64_t>(request.ByteSizeLong());
  if (request.has_points() && request_bytes + kEnvelopeBytes > (int64_t{64} << 10)) {
    const int64_t cap = client_->MessageCap(call);
    if (request_bytes + kEnvelopeBytes > cap) return RenderInParts(std::move(request), cap, call);
  }
  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  std::unique_ptr<grpc::ClientReader<v1::RenderResponse>> reader = stub_->Render(&context, request);
  HologramRender result;
  RenderAssembler assembler;
  bool have_header = false;
  FRESNEL_RETURN_IF_ERROR(ReadAll<v1::RenderResponse>(
      &context, reader.get(), [&](v1::RenderResponse* message) -> absl::Status {
        if (!have_header) {
          if (message->msg_case() != v1::RenderResponse::kHeader) {
            return absl::DataLossError("the first Render message carries no header");
          }
          have_header = true;
          // Outputs written to a region (out_shm) are read back out of it first.
          FRESNEL_RETURN_IF_ERROR(TakeRegionArrays(client_, message->mutable_header()));
          return assembler.Header(message->mutable_header(), &result);
        }
        if (message->msg_case() != v1::RenderResponse::kChunk) {
          return absl::DataLossError("a Render message after the header carries no chunk");
        }
        return assembler.Chunk(message->mutable_chunk(), &result);
      }));
  if (!have_header) return absl::DataLossError("the Render stream ended without a header");
  if (!assembler.complete()) {
    return absl::DataLossError("the Render stream ended before every output was complete");
  }
  return result;
}

absl::StatusOr<HologramRender> HologramClient::RenderInParts(v1::RenderRequest request,
                                                             int64_t cap,
                                                             const CallOptions& call) {
  const v1::NdArray& points = request.points();
  if (points.shape_size() != 2 || points.shape(0) < 1 || points.shape(1) < 1) {
    return absl::InvalidArgumentError("points: must be [N, 4] or [N, 5]");
  }
  const int64_t rows = points.shape(0), cols = points.shape(1);
  const int64_t row_bytes = static_cast<int64_t>(points.data().size()) / rows;
  if (row_bytes <= 0 || row_bytes * rows != static_cast<int64_t>(points.data().size())) {
    return absl::InvalidArgumentError("points: data size does not match the shape");
  }
  const int64_t room = cap - kEnvelopeBytes - static_cast<int64_t>(request.config().ByteSizeLong());
  const int64_t rows_per_part = std::max<int64_t>(1, room / row_bytes);
  int64_t next_row = 0;
  auto next_part = [&](v1::HologramFrameRequest* part) {
    if (next_row >= rows) return false;
    if (next_row == 0) {
      *part->mutable_config() = request.config();
      part->set_request_id(request.request_id());
    }
    const int64_t k = std::min(rows_per_part, rows - next_row);
    v1::NdArray* p = part->mutable_points();
    p->set_dtype(points.dtype());
    p->add_shape(k);
    p->add_shape(cols);
    p->set_data(points.data().substr(static_cast<size_t>(next_row * row_bytes),
                                     static_cast<size_t>(k * row_bytes)));
    next_row += k;
    part->set_points_continue(next_row < rows);
    return true;
  };
  absl::StatusOr<HologramRender> result = absl::DataLossError("the server answered no frame");
  FRESNEL_RETURN_IF_ERROR(RenderStream(
      next_part,
      [&result](int64_t, const absl::Status& status, HologramRender* r) {
        if (status.ok()) {
          result = std::move(*r);
        } else {
          result = status;
        }
      },
      call));
  return result;
}

absl::Status HologramClient::RenderStream(
    const std::function<bool(v1::HologramFrameRequest*)>& next_frame,
    const std::function<void(int64_t, const absl::Status&, HologramRender*)>& on_frame,
    const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  std::unique_ptr<grpc::ClientReaderWriter<v1::HologramFrameRequest, v1::HologramFrameResponse>>
      stream = stub_->Stream(&context);
  const int64_t chunk_bytes = ClientChunkBytes(client_->options());

  // Frames are written from a second thread while this one reads, so that the server's answers
  // never wait behind our writes (gRPC allows one reader and one writer at a time).
  std::thread writer([&] {
    bool first = true;
    v1::HologramFrameRequest frame;
    while (true) {
      frame.Clear();
      if (!next_frame(&frame)) break;
      if (first && frame.has_config() && frame.config().max_chunk_bytes() == 0) {
        frame.mutable_config()->set_max_chunk_bytes(chunk_bytes);
      }
      first = false;
      if (!stream->Write(frame)) return;  // the call is over; Finish() says why
    }
    v1::HologramFrameRequest end;
    end.set_end(true);  // the server then knows the stream was not cut short
    if (!stream->Write(end)) return;
    stream->WritesDone();
  });

  RenderAssembler assembler;
  HologramRender current;
  bool in_frame = false;  // a header arrived and chunks are pending
  auto on_message = [&](v1::HologramFrameResponse* message) -> absl::Status {
    if (message->msg_case() == v1::HologramFrameResponse::kHeader) {
      if (in_frame) {
        return absl::DataLossError(absl::StrCat("frame ", current.frame_index,
                                                ": a new header before its outputs ended"));
      }
      const int64_t index = message->frame_index();
      if (message->status().code() != 0) {
        on_frame(index, FromGrpcStatus(message->status().code(), message->status().message()),
                 nullptr);
        return absl::OkStatus();
      }
      current = HologramRender();
      current.frame_index = index;
      FRESNEL_RETURN_IF_ERROR(TakeRegionArrays(client_, message->mutable_header()));
      FRESNEL_RETURN_IF_ERROR(assembler.Header(message->mutable_header(), &current));
    } else if (message->msg_case() == v1::HologramFrameResponse::kChunk && in_frame &&
               message->frame_index() == current.frame_index) {
      FRESNEL_RETURN_IF_ERROR(assembler.Chunk(message->mutable_chunk(), &current));
    } else {
      return absl::DataLossError(
          absl::StrCat("frame ", message->frame_index(), ": a chunk without its header"));
    }
    in_frame = !assembler.complete();
    if (!in_frame) on_frame(current.frame_index, absl::OkStatus(), &current);
    return absl::OkStatus();
  };
  FRESNEL_RETURN_IF_ERROR(ReadAll<v1::HologramFrameResponse>(&context, stream.get(), on_message,
                                                             [&writer] { writer.join(); }));
  if (in_frame) {
    return absl::DataLossError(absl::StrCat("frame ", current.frame_index,
                                            ": the stream ended before its outputs were complete"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HologramReconstruction> HologramClient::Reconstruct(
    const v1::ReconstructConfig& config, const HostArray& field, const CallOptions& call) {
  const int64_t cap = client_->MessageCap(call);
  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  v1::ReconstructResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ReconstructRequest>> writer =
      stub_->Reconstruct(&context, &response);
  v1::ReconstructRequest first;
  *first.mutable_config() = config;
  // config.field naming a region (field.shm): sent as it is, `field` is not read.
  const bool field_in_region = config.field().has_shm();
  if (!field_in_region) first.mutable_config()->clear_field();
  const bool inline_field =
      field_in_region ||
      static_cast<int64_t>(field.nbytes() + first.ByteSizeLong()) + kEnvelopeBytes <= cap;
  if (inline_field && !field_in_region) ToProto(field, first.mutable_config()->mutable_field());
  bool ok = writer->Write(first);
  if (!inline_field) {
    const int64_t chunk_bytes = v1::ChunkPayloadBytes(cap);
    const int64_t total = static_cast<int64_t>(field.nbytes());
    for (int64_t offset = 0; ok; offset += chunk_bytes) {
      v1::ReconstructRequest message;
      *message.mutable_field_chunk() = ArrayChunkAt(field, offset, chunk_bytes);
      ok = writer->Write(message);
      if (message.field_chunk().last() || offset + chunk_bytes >= total) break;
    }
  }
  if (ok) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpc(status);
  HologramReconstruction r;
  r.request_id = response.request_id();
  r.scale = response.scale();
  r.info = response.info();
  FRESNEL_RETURN_IF_ERROR(TakeRegionArrays(client_, &response));
  absl::StatusOr<HostArray> image = FromProto(std::move(*response.mutable_image()), "image");
  if (!image.ok()) return image.status();
  r.image = *std::move(image);
  return r;
}

}  // namespace fresnel
