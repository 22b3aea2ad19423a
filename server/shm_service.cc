#include "server/shm_service.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "fresnel/v1/region_wire.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/core/status.h"
#include "server/status_util.h"

namespace fresnel::server {
namespace {

constexpr char kService[] = "fresnel.v1.SharedMemoryService";

absl::Status Unavailable() {
  return absl::UnimplementedError("this server has no shared-memory registry");
}

v1::ShmRef RefTo(const std::string& region, int64_t offset) {
  v1::ShmRef ref;
  ref.set_region(region);
  ref.set_offset_bytes(offset);
  return ref;
}

// One WriteRegion call: each chunk is parsed in place and its data copied once, from the
// received slices to its offset, as it arrives (the region is the preallocated buffer; nothing
// else is held), so parallel calls fill one region in place. The region is resolved again only
// when a chunk names another one.
class WriteRegionCall : public RpcCall<grpc::ServerReadReactor<grpc::ByteBuffer>> {
 public:
  WriteRegionCall(ServiceContext* ctx, grpc::CallbackServerContext* context,
                  grpc::ByteBuffer* response)
      : RpcCall(ctx->metrics, kService, "WriteRegion"),
        ctx_(ctx),
        client_(ClientOf(context)),
        response_(response) {
    absl::Status st = ctx->shm == nullptr ? Unavailable()
                                          : ReserveStream(ctx, context, "a WriteRegion", &slot_);
    if (!st.ok()) {
      FinishWith(st);
      return;
    }
    StartRead(&buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      v1::WriteRegionResponse response;
      response.set_bytes_written(written_);
      const std::string bytes = response.SerializeAsString();
      grpc::Slice slice(bytes);
      *response_ = grpc::ByteBuffer(&slice, 1);
      FinishWith(absl::OkStatus());
      return;
    }
    absl::Status parsed = chunk_.Parse(buffer_);
    buffer_.Clear();
    if (!parsed.ok()) {
      FinishWith(parsed);
      return;
    }
    const int64_t n = chunk_.data_bytes();
    // The whole region once per call (re-resolved when a chunk names another), each chunk's
    // range checked against it; Resolve marks the region used.
    if (region_.keepalive == nullptr || chunk_.region() != region_name_) {
      region_ = ShmSpan();
      absl::StatusOr<ShmSpan> whole = ctx_->shm->Resolve(client_, RefTo(chunk_.region(), 0), 0,
                                                         "chunk");
      if (!whole.ok()) {
        FinishWith(whole.status());
        return;
      }
      region_name_ = chunk_.region();
      region_ = *std::move(whole);
      region_size_ = ctx_->shm->RegionSize(region_);
    }
    const int64_t offset = chunk_.offset_bytes();
    if (offset < 0 || offset > region_size_ || n > region_size_ - offset) {
      FinishWith(absl::InvalidArgumentError(absl::StrCat(
          "chunk.offset_bytes: ", n, " bytes at offset ", offset, " are not inside region '",
          chunk_.region(), "' of ", region_size_, " bytes")));
      return;
    }
    if (n > 0) chunk_.CopyData(region_.data + offset);
    written_ += n;
    record().Payload("in", static_cast<double>(n));
    StartRead(&buffer_);
  }


 private:
  void FinishWith(const absl::Status& status) {
    region_ = ShmSpan();  // the mapping may go once the call is over
    RpcCall::FinishWith(status);
  }

  ServiceContext* ctx_;
  const std::string client_;
  grpc::ByteBuffer* response_;
  StreamSlot slot_;
  grpc::ByteBuffer buffer_;
  v1::RegionChunkView chunk_;
  std::string region_name_;
  ShmSpan region_;  // the region last written (its start and mapping)
  int64_t region_size_ = 0;
  int64_t written_ = 0;
};

// One ReadRegion call: the range is resolved once (its mapping held for the call) and sent in
// chunk_bytes messages whose data slice is the region itself (no copy; each slice holds the
// mapping until gRPC has sent it).
class ReadRegionCall : public RpcCall<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  ReadRegionCall(ServiceContext* ctx, grpc::CallbackServerContext* context,
                 const v1::ReadRegionRequest& request, const absl::Status& parsed)
      : RpcCall(ctx->metrics, kService, "ReadRegion"),
        region_(request.region()),
        offset_(request.offset_bytes()) {
    absl::Status st = parsed.ok() ? Start(ctx, context, request) : parsed;
    if (!st.ok()) {
      FinishWith(st);
      return;
    }
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      FinishWith(absl::CancelledError("the client stopped reading"));
      return;
    }
    WriteNext();
  }


 private:
  absl::Status Start(ServiceContext* ctx, grpc::CallbackServerContext* context,
                     const v1::ReadRegionRequest& request) {
    if (ctx->shm == nullptr) return Unavailable();
    // Any size up to the cap's payload may be asked for (shm.proto); 0 takes the default.
    const int64_t max_chunk = v1::ChunkPayloadBytes(ctx->max_message_bytes);
    chunk_ = request.chunk_bytes() == 0 ? std::min(v1::kDefaultRegionChunkBytes, max_chunk)
                                        : request.chunk_bytes();
    if (chunk_ <= 0 || chunk_ > max_chunk) {
      return absl::InvalidArgumentError(absl::StrCat("chunk_bytes: must lie in 1..", max_chunk,
                                                     " (got ", request.chunk_bytes(), ")"));
    }
    if (request.length_bytes() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("length_bytes: must be >= 0 (got ", request.length_bytes(), ")"));
    }
    FRESNEL_RETURN_IF_ERROR(ReserveStream(ctx, context, "a ReadRegion", &slot_));
    FRESNEL_ASSIGN_OR_RETURN(span_, ctx->shm->Resolve(ClientOf(context),
                                                      RefTo(region_, offset_),
                                                      request.length_bytes(), "request"));
    return absl::OkStatus();
  }

  void WriteNext() {
    if (pos_ >= span_.size) {
      FinishWith(absl::OkStatus());
      return;
    }
    const int64_t n = std::min(chunk_, span_.size - pos_);
    out_ = v1::RegionChunkBuffer(region_, offset_ + pos_, span_.data + pos_,
                                 static_cast<size_t>(n), span_.keepalive);
    pos_ += n;
    record().Payload("out", static_cast<double>(n));
    StartWrite(&out_);
  }

  void FinishWith(const absl::Status& status) {
    span_ = ShmSpan();  // the mapping may go once the call is over
    RpcCall::FinishWith(status);
  }

  const std::string region_;
  const int64_t offset_;
  StreamSlot slot_;
  ShmSpan span_;
  int64_t chunk_ = 0;
  int64_t pos_ = 0;
  grpc::ByteBuffer out_;
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* SharedMemoryService::WriteRegion(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new WriteRegionCall(ctx_, context, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* SharedMemoryService::ReadRegion(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  v1::ReadRegionRequest parsed;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (request->Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  if (!parsed.ParseFromString(bytes)) {
    return new ReadRegionCall(ctx_, context, parsed,
                              absl::InvalidArgumentError("request: not a ReadRegionRequest"));
  }
  return new ReadRegionCall(ctx_, context, parsed, absl::OkStatus());
}

grpc::ServerUnaryReactor* SharedMemoryService::RegisterRegion(
    grpc::CallbackServerContext* context, const v1::RegisterRegionRequest* request,
    v1::RegisterRegionResponse* response) {
  RpcRecord record(ctx_->metrics, kService, "RegisterRegion");
  if (ctx_->shm == nullptr) return FinishUnary(record, context, Unavailable());
  absl::StatusOr<v1::SharedRegionInfo> info = ctx_->shm->Register(ClientOf(context), *request);
  if (info.ok()) {
    *response->mutable_region() = *std::move(info);
    response->set_ttl_seconds(ctx_->shm->ttl_s());
  }
  return FinishUnary(record, context, info.status());
}

grpc::ServerUnaryReactor* SharedMemoryService::UnregisterRegion(
    grpc::CallbackServerContext* context, const v1::UnregisterRegionRequest* request,
    v1::UnregisterRegionResponse* /*response*/) {
  RpcRecord record(ctx_->metrics, kService, "UnregisterRegion");
  if (ctx_->shm == nullptr) return FinishUnary(record, context, Unavailable());
  return FinishUnary(record, context, ctx_->shm->Unregister(ClientOf(context), request->name()));
}

grpc::ServerUnaryReactor* SharedMemoryService::ListRegions(
    grpc::CallbackServerContext* context, const v1::ListRegionsRequest* /*request*/,
    v1::ListRegionsResponse* response) {
  RpcRecord record(ctx_->metrics, kService, "ListRegions");
  if (ctx_->shm == nullptr) return FinishUnary(record, context, Unavailable());
  for (v1::SharedRegionInfo& info : ctx_->shm->List(ClientOf(context))) {
    *response->add_regions() = std::move(info);
  }
  response->set_ttl_seconds(ctx_->shm->ttl_s());
  return FinishUnary(record, context, absl::OkStatus());
}

}  // namespace fresnel::server
