// UploadReader<Req>: the client-streaming reactor of an upload (a header, then chunks). It reads
// one message at a time and hands each to Take; when the client half-closes it calls Complete,
// which either finishes the call itself or starts work whose completion calls FinishWith. Any
// error finishes the call with that status, and the client's cancellation with CANCELLED.
// Nothing blocks a gRPC thread.
//
// Subclasses call StartReading() as the last step of their constructor (a read may complete
// before the constructor returns, and Take is virtual). FinishWith may be called once from any
// thread; gRPC deletes the reactor afterwards, so it must be a caller's last touch of `this`.
//
// Used by UnwrapService.Submit and VolumeRenderService.UploadMesh.
#pragma once

#include <atomic>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/call.h"
#include "server/status_util.h"

namespace fresnel::server {

template <typename Req>
class UploadReader : public RpcCall<grpc::ServerReadReactor<Req>> {
 public:
  void OnReadDone(bool ok) final {
    if (!ok) {
      if (context_->IsCancelled()) {
        FinishWith(absl::CancelledError("the client cancelled the upload"));
        return;
      }
      absl::Status st = Guarded("completing the upload", [&] { return Complete(); });
      if (!st.ok()) FinishWith(st);  // on OK, `this` may already be gone
      return;
    }
    // What arrives is held until the upload completes: charged before it is taken, so uploads in
    // progress count against the server's state budget (not only their declared totals).
    absl::Status st = absl::OkStatus();
    if (budget_ != nullptr) {
      const int64_t bytes = static_cast<int64_t>(request_.ByteSizeLong());
      st = reserved_ ? held_.Grow(bytes, "this upload")
                     : ReserveIn(budget_, bytes, "this upload", &held_);
      reserved_ = reserved_ || st.ok();
    }
    if (st.ok()) st = Guarded("taking the upload's message", [&] { return Take(request_); });
    if (!st.ok()) {
      FinishWith(st);
      return;
    }
    this->StartRead(&request_);
  }

 protected:
  // `budget` (may be null) is charged with the bytes of every message as it arrives.
  UploadReader(Metrics* metrics, const char* service, const char* method,
               grpc::CallbackServerContext* context, Budget* budget = nullptr)
      : RpcCall<grpc::ServerReadReactor<Req>>(metrics, service, method),
        context_(context),
        budget_(budget) {}

  void StartReading() { this->StartRead(&request_); }

  // One message of the stream (it may be moved from).
  virtual absl::Status Take(Req& message) = 0;
  // After the last message. An error finishes the call; OK means the subclass finished it or
  // will (from a job's completion).
  virtual absl::Status Complete() = 0;

  // Finishes the call (only the first call counts). `this` may be deleted after it.
  using RpcCall<grpc::ServerReadReactor<Req>>::FinishWith;
  using RpcCall<grpc::ServerReadReactor<Req>>::record;

  grpc::CallbackServerContext* context() const { return context_; }

 private:
  grpc::CallbackServerContext* const context_;
  Budget* const budget_;
  Budget::Reservation held_;
  bool reserved_ = false;
  Req request_;
};

}  // namespace fresnel::server
