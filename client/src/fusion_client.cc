// fresnel::FusionSession over the synchronous gRPC bidi stream: one writer and one reader may
// work at once (pipelined frames), or one thread alternates them (the blocking calls).
#include "fresnel/client/fusion_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "call_util.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/wire_limits.h"

namespace fresnel {
namespace {

absl::Status ItemStatus(const v1::FusionResponse& r) {
  if (r.status().code() == 0) return absl::OkStatus();
  return FromGrpcStatus(r.status().code(), r.status().message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<FusionSession>> FusionSession::Start(Client& client,
                                                                     const CallOptions& call) {
  std::unique_ptr<FusionSession> s(new FusionSession());
  s->client_ = &client;
  s->stub_ = v1::FusionService::NewStub(client.channel());
  internal::ApplyDeadline(&s->context_, client.options(), call);
  s->stream_ = s->stub_->Session(&s->context_);
  const int64_t cap = client.options().max_message_bytes;
  s->chunk_bytes_ = v1::ChunkPayloadBytes(cap > 0 && cap < INT_MAX ? cap : int64_t{64} << 20);
  return s;
}

absl::StatusOr<std::unique_ptr<FusionSession>> FusionSession::Open(Client& client,
                                                                   const v1::FusionConfig& config,
                                                                   const CallOptions& call) {
  absl::StatusOr<std::unique_ptr<FusionSession>> s = Start(client, call);
  if (!s.ok()) return s.status();
  v1::FusionRequest request;
  *request.mutable_config() = config;
  absl::StatusOr<int64_t> seq = (*s)->Send(request);
  if (!seq.ok()) return (*s)->RefusedStatus(seq.status());
  absl::StatusOr<v1::FusionResponse> r = (*s)->Expect(*seq);
  if (!r.ok()) return r.status();
  if (!r->has_opened()) return absl::DataLossError("the server's answer to config is not `opened`");
  (*s)->opened_ = std::move(*r->mutable_opened());
  return s;
}

absl::StatusOr<std::unique_ptr<FusionSession>> FusionSession::Restore(
    Client& client, const v1::FusionConfig& config, absl::string_view snapshot,
    const CallOptions& call) {
  absl::StatusOr<std::unique_ptr<FusionSession>> s = Start(client, call);
  if (!s.ok()) return s.status();
  const int64_t chunk = (*s)->chunk_bytes_;
  int64_t offset = 0, seq = -1;
  do {
    v1::FusionRequest request;
    v1::FusionRestore* part = request.mutable_restore();
    if (offset == 0) *part->mutable_config() = config;
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(snapshot.size()) - offset);
    part->set_data(snapshot.data() + offset, static_cast<size_t>(n));
    offset += n;
    part->set_last(offset >= static_cast<int64_t>(snapshot.size()));
    absl::StatusOr<int64_t> sent = (*s)->Send(request);
    if (!sent.ok()) return (*s)->RefusedStatus(sent.status());
    seq = *sent;
  } while (offset < static_cast<int64_t>(snapshot.size()));
  absl::StatusOr<v1::FusionResponse> r = (*s)->Expect(seq);
  if (!r.ok()) return r.status();
  if (!r->has_opened()) return absl::DataLossError("the server's answer to restore is not `opened`");
  (*s)->opened_ = std::move(*r->mutable_opened());
  return s;
}

FusionSession::~FusionSession() {
  if (stream_ && !ended_) {
    context_.TryCancel();
    stream_->Finish().ok();
  }
}

absl::Status FusionSession::Ended() {
  if (!ended_) {
    ended_ = true;
    final_ = internal::FromGrpc(stream_->Finish());
    if (final_.ok()) final_ = absl::CancelledError("the session's stream ended");
  }
  return final_;
}

absl::StatusOr<int64_t> FusionSession::Send(const v1::FusionRequest& request) {
  if (ended_) return final_;
  if (!stream_->Write(request)) {
    // The server ended the stream; its status comes with the reads (the other thread may be
    // reading), so this only reports it.
    return absl::UnavailableError("the session's stream is closed (read for its status)");
  }
  return next_seq_++;
}

absl::Status FusionSession::RefusedStatus(const absl::Status& send_status) {
  // The server ended the stream at its first message (no room, a bad config): its status, not
  // the write's.
  absl::Status st = ReadResponse().status();
  return st.ok() ? send_status : st;
}

absl::StatusOr<v1::FusionResponse> FusionSession::ReadResponse() {
  if (ended_) return final_;
  v1::FusionResponse r;
  if (!stream_->Read(&r)) return Ended();
  return r;
}

absl::StatusOr<v1::FusionResponse> FusionSession::Expect(int64_t seq) {
  absl::StatusOr<v1::FusionResponse> r = ReadResponse();
  if (!r.ok()) return r.status();
  if (r->seq() != seq) {
    return absl::DataLossError(
        absl::StrCat("expected the answer to message ", seq, ", got one to ", r->seq()));
  }
  if (absl::Status st = ItemStatus(*r); !st.ok()) return st;
  return r;
}

absl::StatusOr<v1::FusionFrameResult> FusionSession::ProcessFrame(const v1::FusionFrame& frame) {
  absl::StatusOr<int64_t> seq = SendFrame(frame);
  if (!seq.ok()) {
    if (!ended_) return ReadResponse().status();  // the stream's final status
    return seq.status();
  }
  absl::StatusOr<v1::FusionResponse> r = Expect(*seq);
  if (!r.ok()) return r.status();
  return std::move(*r->mutable_frame());
}

absl::StatusOr<int64_t> FusionSession::SendFrame(const v1::FusionFrame& frame) {
  v1::FusionRequest request;
  *request.mutable_frame() = frame;
  return Send(request);
}

absl::StatusOr<int64_t> FusionSession::SendFrame(v1::FusionFrame&& frame) {
  v1::FusionRequest request;
  *request.mutable_frame() = std::move(frame);
  return Send(request);
}

absl::StatusOr<HostArray> FusionSession::Render(const v1::FusionRenderRequest& render) {
  v1::FusionRequest request;
  *request.mutable_render() = render;
  absl::StatusOr<int64_t> seq = Send(request);
  if (!seq.ok()) return seq.status();
  absl::StatusOr<v1::FusionResponse> r = Expect(*seq);
  if (!r.ok()) return r.status();
  // An image written to a region (render.out_shm) is read back out of it.
  FRESNEL_RETURN_IF_ERROR(internal::TakeRegionArrays(client_, &*r));
  return FromProto(std::move(*r->mutable_render()->mutable_image()), "render.image");
}

absl::StatusOr<v1::FusionBytesChunk> FusionSession::ReadChunks(int64_t seq, bool mesh,
                                                               std::string* bytes) {
  v1::FusionBytesChunk first;
  bool have_first = false;
  for (;;) {
    absl::StatusOr<v1::FusionResponse> r = Expect(seq);
    if (!r.ok()) return r.status();
    v1::FusionBytesChunk* c = mesh ? r->mutable_mesh() : r->mutable_snapshot();
    if ((mesh && !r->has_mesh()) || (!mesh && !r->has_snapshot()) ||
        c->offset_bytes() != static_cast<int64_t>(bytes->size())) {
      return absl::DataLossError(absl::StrCat("unexpected chunk at offset ", c->offset_bytes()));
    }
    if (!have_first) bytes->reserve(static_cast<size_t>(std::max<int64_t>(0, c->total_bytes())));
    bytes->append(c->data());
    c->clear_data();
    const bool last = c->last();
    if (!have_first) {
      first = std::move(*c);
      have_first = true;
    }
    if (last) break;
  }
  if (static_cast<int64_t>(bytes->size()) != first.total_bytes()) {
    return absl::DataLossError(absl::StrCat("received ", bytes->size(), " bytes of ",
                                            first.total_bytes()));
  }
  return first;
}

absl::StatusOr<v1::FusionBytesChunk> FusionSession::Fetch(bool mesh, int64_t max_chunk_bytes,
                                                          std::string* bytes) {
  v1::FusionRequest request;
  const int64_t chunk = max_chunk_bytes > 0 ? max_chunk_bytes : chunk_bytes_;
  if (mesh) {
    request.mutable_mesh()->set_max_chunk_bytes(chunk);
  } else {
    request.mutable_snapshot()->set_max_chunk_bytes(chunk);
  }
  absl::StatusOr<int64_t> seq = Send(request);
  if (!seq.ok()) return seq.status();
  return ReadChunks(*seq, mesh, bytes);
}

absl::StatusOr<FusionMesh> FusionSession::ExtractMesh(int64_t max_chunk_bytes) {
  FusionMesh mesh;
  absl::StatusOr<v1::FusionBytesChunk> first = Fetch(true, max_chunk_bytes, &mesh.ply);
  if (!first.ok()) return first.status();
  mesh.vertices = first->vertices();
  mesh.triangles = first->triangles();
  mesh.info = first->info();
  return mesh;
}

absl::StatusOr<FusionSnapshot> FusionSession::Snapshot(int64_t max_chunk_bytes) {
  FusionSnapshot snap;
  absl::StatusOr<v1::FusionBytesChunk> first = Fetch(false, max_chunk_bytes, &snap.bytes);
  if (!first.ok()) return first.status();
  snap.config = first->config();
  snap.info = first->info();
  return snap;
}

absl::StatusOr<int64_t> FusionSession::Close() {
  v1::FusionRequest request;
  request.mutable_close();
  absl::StatusOr<int64_t> seq = Send(request);
  if (!seq.ok()) return RefusedStatus(seq.status());
  stream_->WritesDone();
  absl::StatusOr<v1::FusionResponse> r = Expect(*seq);
  if (!r.ok()) return r.status();
  const int64_t frames = r->closed().frames();
  v1::FusionResponse extra;
  while (stream_->Read(&extra)) {
  }
  ended_ = true;
  final_ = internal::FromGrpc(stream_->Finish());
  if (!final_.ok()) return final_;
  final_ = absl::FailedPreconditionError("the session was closed");
  return frames;
}

}  // namespace fresnel
