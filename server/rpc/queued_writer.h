// QueuedWriter<Msg>: a server-streaming reactor fed from any thread. Producers (a job on a
// device worker, a store listener) Push messages and finally Close with the call's status; the
// reactor writes them one at a time, in order, and finishes once the queue is empty. Nothing
// blocks: Push only queues, so a slow client makes the queue grow by what the producer sends
// (producers bound that themselves, e.g. a render's partial frames are at most one image).
//
// Lifetime: gRPC deletes the reactor after Finish, and Finish happens only after Close, so a
// producer may use the reactor until (and including) its Close call, never after. OnCancel runs
// the hook given to SetCancelHook (cancel the job); the producer still Closes, as always.
//
// Used by the session services (volume renders; fusion may stream the same way).
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/call.h"
#include "server/status_util.h"

namespace fresnel::server {

template <typename Msg>
class QueuedWriter : public RpcCall<grpc::ServerWriteReactor<Msg>> {
 public:
  QueuedWriter(Metrics* metrics, const char* service, const char* method)
      : RpcCall<grpc::ServerWriteReactor<Msg>>(metrics, service, method) {}

  // Called (once, on a gRPC thread) when the client cancels or the deadline passes.
  void SetCancelHook(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_hook_ = std::move(hook);
  }

  // Queues `msg`; false once the client is gone (the producer may stop early).
  bool Push(Msg msg) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_ || client_gone_) return false;
    pending_.push_back(std::move(msg));
    Pump(lock);
    return true;
  }

  // True once the client cancelled or stopped reading.
  bool client_gone() const {
    std::lock_guard<std::mutex> lock(mu_);
    return client_gone_;
  }

  // The last call of a producer: finishes with `status` after the queued messages were written
  // (an error status drops them).
  void Close(const absl::Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    status_ = status;
    if (!status.ok()) pending_.clear();
    Pump(lock);
  }

  using RpcCall<grpc::ServerWriteReactor<Msg>>::record;

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      client_gone_ = true;
      pending_.clear();
    }
    Pump(lock);
  }

  void OnCancel() override {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      client_gone_ = true;
      pending_.clear();
      hook = cancel_hook_;
    }
    if (hook) hook();
  }

 private:
  // Starts the next write, or finishes once closed and drained. Releases the lock.
  void Pump(std::unique_lock<std::mutex>& lock) {
    if (writing_ || finished_) return;
    if (!pending_.empty()) {
      current_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
      lock.unlock();
      this->StartWrite(&current_);
      return;
    }
    if (!closed_) return;
    finished_ = true;
    absl::Status status = status_;
    if (status.ok() && client_gone_) status = absl::CancelledError("the client went away");
    lock.unlock();
    this->FinishWith(status);
  }

  mutable std::mutex mu_;
  std::deque<Msg> pending_;
  Msg current_;  // the message being written
  std::function<void()> cancel_hook_;
  absl::Status status_;
  bool writing_ = false;
  bool closed_ = false;
  bool finished_ = false;
  bool client_gone_ = false;
};

}  // namespace fresnel::server
