#include "server/shm_service.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/core/status.h"
#include "server/status_util.h"

namespace fresnel::server {
namespace {

constexpr char kService[] = "fresnel.v1.SharedMemoryService";

grpc::ServerUnaryReactor* Finish(RpcRecord& record, grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  record.Done(status);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status Unavailable() {
  return absl::UnimplementedError("this server has no shared-memory registry");
}

v1::ShmRef RefTo(const std::string& region, int64_t offset) {
  v1::ShmRef ref;
  ref.set_region(region);
  ref.set_offset_bytes(offset);
  return ref;
}

// One WriteRegion call: each chunk is copied to its offset as it arrives (the region is the
// preallocated buffer; nothing else is held), so parallel calls fill one region in place.
class WriteRegionCall : public grpc::ServerReadReactor<v1::RegionChunk> {
 public:
  WriteRegionCall(ServiceContext* ctx, grpc::CallbackServerContext* context,
                  v1::WriteRegionResponse* response)
      : ctx_(ctx),
        client_(ClientOf(context)),
        response_(response),
        record_(ctx->metrics, kService, "WriteRegion") {
    absl::Status st = ctx->shm == nullptr ? Unavailable()
                                          : ReserveStream(ctx, context, "a WriteRegion", &slot_);
    if (!st.ok()) {
      FinishWith(st);
      return;
    }
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      response_->set_bytes_written(written_);
      FinishWith(absl::OkStatus());
      return;
    }
    const int64_t n = static_cast<int64_t>(chunk_.data().size());
    absl::StatusOr<ShmSpan> span =
        ctx_->shm->Resolve(client_, RefTo(chunk_.region(), chunk_.offset_bytes()), n, "chunk");
    if (!span.ok()) {
      FinishWith(span.status());
      return;
    }
    if (n > 0) std::memcpy(span->data, chunk_.data().data(), static_cast<size_t>(n));
    written_ += n;
    record_.Payload("in", static_cast<double>(n));
    StartRead(&chunk_);
  }

  void OnDone() override { delete this; }

 private:
  void FinishWith(const absl::Status& status) {
    record_.Done(status);
    Finish(ToGrpcStatus(status));
  }

  ServiceContext* ctx_;
  const std::string client_;
  v1::WriteRegionResponse* response_;
  RpcRecord record_;
  StreamSlot slot_;
  v1::RegionChunk chunk_;
  int64_t written_ = 0;
};

// One ReadRegion call: the range is resolved once (its mapping held for the call) and sent in
// chunk_bytes messages, one copy each from the region into the message.
class ReadRegionCall : public grpc::ServerWriteReactor<v1::RegionChunk> {
 public:
  ReadRegionCall(ServiceContext* ctx, grpc::CallbackServerContext* context,
                 const v1::ReadRegionRequest& request)
      : record_(ctx->metrics, kService, "ReadRegion"),
        region_(request.region()),
        offset_(request.offset_bytes()) {
    absl::Status st = Start(ctx, context, request);
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

  void OnDone() override { delete this; }

 private:
  absl::Status Start(ServiceContext* ctx, grpc::CallbackServerContext* context,
                     const v1::ReadRegionRequest& request) {
    if (ctx->shm == nullptr) return Unavailable();
    const int64_t max_chunk = ctx->max_message_bytes - v1::kEnvelopeBytes;
    chunk_ = request.chunk_bytes() == 0 ? std::min<int64_t>(4 << 20, max_chunk)
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
    out_.set_region(region_);
    out_.set_offset_bytes(offset_ + pos_);
    out_.set_data(span_.data + pos_, static_cast<size_t>(n));
    pos_ += n;
    record_.Payload("out", static_cast<double>(n));
    StartWrite(&out_);
  }

  void FinishWith(const absl::Status& status) {
    span_ = ShmSpan();  // the mapping may go once the call is over
    record_.Done(status);
    Finish(ToGrpcStatus(status));
  }

  RpcRecord record_;
  const std::string region_;
  const int64_t offset_;
  StreamSlot slot_;
  ShmSpan span_;
  int64_t chunk_ = 0;
  int64_t pos_ = 0;
  v1::RegionChunk out_;
};

}  // namespace

grpc::ServerReadReactor<v1::RegionChunk>* SharedMemoryService::WriteRegion(
    grpc::CallbackServerContext* context, v1::WriteRegionResponse* response) {
  return new WriteRegionCall(ctx_, context, response);
}

grpc::ServerWriteReactor<v1::RegionChunk>* SharedMemoryService::ReadRegion(
    grpc::CallbackServerContext* context, const v1::ReadRegionRequest* request) {
  return new ReadRegionCall(ctx_, context, *request);
}

grpc::ServerUnaryReactor* SharedMemoryService::RegisterRegion(
    grpc::CallbackServerContext* context, const v1::RegisterRegionRequest* request,
    v1::RegisterRegionResponse* response) {
  RpcRecord record(ctx_->metrics, kService, "RegisterRegion");
  if (ctx_->shm == nullptr) return Finish(record, context, Unavailable());
  absl::StatusOr<v1::SharedRegionInfo> info = ctx_->shm->Register(ClientOf(context), *request);
  if (info.ok()) {
    *response->mutable_region() = *std::move(info);
    response->set_ttl_seconds(ctx_->shm->ttl_s());
  }
  return Finish(record, context, info.status());
}

grpc::ServerUnaryReactor* SharedMemoryService::UnregisterRegion(
    grpc::CallbackServerContext* context, const v1::UnregisterRegionRequest* request,
    v1::UnregisterRegionResponse* /*response*/) {
  RpcRecord record(ctx_->metrics, kService, "UnregisterRegion");
  if (ctx_->shm == nullptr) return Finish(record, context, Unavailable());
  return Finish(record, context, ctx_->shm->Unregister(ClientOf(context), request->name()));
}

grpc::ServerUnaryReactor* SharedMemoryService::ListRegions(
    grpc::CallbackServerContext* context, const v1::ListRegionsRequest* /*request*/,
    v1::ListRegionsResponse* response) {
  RpcRecord record(ctx_->metrics, kService, "ListRegions");
  if (ctx_->shm == nullptr) return Finish(record, context, Unavailable());
  for (v1::SharedRegionInfo& info : ctx_->shm->List(ClientOf(context))) {
    *response->add_regions() = std::move(info);
  }
  response->set_ttl_seconds(ctx_->shm->ttl_s());
  return Finish(record, context, absl::OkStatus());
}

}  // namespace fresnel::server
