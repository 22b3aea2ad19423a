// Shared plumbing of the services: what every handler needs (ServiceContext) and UnaryJobCall,
// the reactor that runs one unary RPC as a DevicePool job without blocking a gRPC thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <atomic>
#include <mutex>
#include <new>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fresnel/v1/common.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/budget.h"
#include "server/device_pool.h"
#include "server/drain.h"
#include "server/metrics.h"
#include "server/status_util.h"

namespace fresnel::server {

class JobStore;
class SessionStore;
class ShmRegistry;

struct ServiceContext {
  DevicePool* pool = nullptr;
  Metrics* metrics = nullptr;
  int64_t max_message_bytes = 64 << 20;
  JobStore* jobs = nullptr;  // asynchronous jobs (server/jobs.h)
  SessionStore* sessions = nullptr;  // state kept on one device (server/sessions.h)
  // Server-wide caps on what live requests hold (server/budget.h): open streams, and the bytes of
  // state derived from small messages (designed filters, expanded sources, queued point clouds).
  Budget* streams = nullptr;
  KeyedBudget* client_streams = nullptr;  // the same per client (--max-streams-per-client)
  Budget* stream_state_bytes = nullptr;
  // Shared-memory regions of same-host clients (server/shm.h); null = none accepted.
  ShmRegistry* shm = nullptr;
  DrainGate* drain = nullptr;  // open streams and sessions during SIGTERM's drain (server/drain.h)
  Clock::time_point started = Clock::now();
};

// Runs `f` (returning absl::Status) and turns an exception into a status: std::bad_alloc (an
// address-space limit, a huge allocation) into RESOURCE_EXHAUSTED naming `what`, anything else into
// INTERNAL. For work done on gRPC threads, where an escaping exception would take the server down
// or leave the call unanswered.
template <typename F>
absl::Status Guarded(absl::string_view what, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory while ", what, "; retry later or send less"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, " failed: ", e.what()));
  }
}

// The client a call comes from, as jobs, sessions, meshes and shared-memory regions record their
// owner: the name authentication gave it (the bearer token's name from --token-file; with mutual
// TLS and no token file, "x509:" + the client certificate's common name), or "" when the server
// runs without authentication (then every client is the same one, as docs/security.md says).
std::string ClientOf(const grpc::ServerContextBase* context);

// The request's deadline on the steady clock, if the client set one.
std::optional<Clock::time_point> DeadlineOf(const grpc::CallbackServerContext* context);
// The placement a DeviceHint asks for; INVALID_ARGUMENT naming `field` for an unknown kind (every
// service answers an unknown DeviceKind the same way).
absl::StatusOr<DevicePreference> PreferenceOf(const v1::DeviceHint& hint,
                                              absl::string_view field = "device");
// Reserves `amount` of `budget` into `*out` (OK and nothing reserved when the budget is null).
absl::Status ReserveIn(Budget* budget, int64_t amount, absl::string_view what,
                       Budget::Reservation* out);

// The key per-client limits count under: ClientOf(context) when authentication names the
// client; without authentication the peer's address without its port ("ipv4:10.0.0.7"), so one
// host cannot take every slot by opening many connections.
std::string LimitKeyOf(const grpc::ServerContextBase* context);

// A streaming call's slot: one of the server's --max-streams and one of its client's
// --max-streams-per-client. Both are given back when the slot is destroyed.
struct StreamSlot {
  Budget::Reservation server;
  Budget::Reservation client;
};
// Takes a stream slot for `what` ("a ResampleStream") into `*out`, or RESOURCE_EXHAUSTED naming
// the flag that is full.
absl::Status ReserveStream(const ServiceContext* ctx, const grpc::ServerContextBase* context,
                           absl::string_view what, StreamSlot* out);

// The request id to echo: the client's, or a fresh random one.
std::string RequestIdOr(const std::string& given);
void FillExecutionInfo(const JobReport& report, double total_s, v1::ExecutionInfo* info);

// One RPC's request metrics: in flight from construction, then, on the first Done(), its
// duration and status code. Not thread-safe: callers that can finish from two threads guard
// Done() themselves.
class RpcRecord {
 public:
  RpcRecord(Metrics* metrics, const char* service, const char* method);
  void Done(const absl::Status& status);
  void Payload(const char* direction, double bytes);
  Clock::time_point accepted() const { return accepted_; }
  // Seconds since the RPC was accepted.
  double Elapsed() const;

 private:
  Metrics* metrics_;
  const char* service_;
  const char* method_;
  Clock::time_point accepted_;
  bool done_ = false;
};

// The base of every reactor: the call's request record (in flight from construction; duration
// and code at the finish) and FinishWith, which finishes the call with an absl::Status turned into
// the gRPC status (server/status_util.h, the one translation) the first time only: later calls
// return false and do nothing. Thread-safe. gRPC deletes the reactor after OnDone (the default
// here deletes it), so a FinishWith that returned true must be its caller's last touch of `this`.
// `service` and `method` must outlive the call (string literals).
template <typename Reactor>
class RpcCall : public Reactor {
 public:
  ~RpcCall() override {
    if (finished_.load() && metrics_ != nullptr) metrics_->AnswerSending(-1);
  }
  void OnDone() override { delete this; }
  RpcRecord& record() { return record_; }
  // Seconds since the call was accepted.
  double Elapsed() const { return record_.Elapsed(); }

 protected:
  RpcCall(Metrics* metrics, const char* service, const char* method)
      : metrics_(metrics), record_(metrics, service, method) {}

  bool FinishWith(const absl::Status& status) {
    if (!RecordFinish(status)) return false;
    this->Finish(ToGrpcStatus(status));
    return true;
  }
  // Records the finish (once, like FinishWith) for a caller that finishes through another gRPC
  // call (StartWriteAndFinish); false when the call had already finished.
  bool RecordFinish(const absl::Status& status) {
    if (finished_.exchange(true)) return false;
    if (metrics_ != nullptr) metrics_->AnswerSending(1);  // until gRPC lets go (the destructor)
    record_.Done(status);
    return true;
  }
  bool finished() const { return finished_.load(); }

 private:
  Metrics* const metrics_;
  RpcRecord record_;
  std::atomic<bool> finished_{false};
};

// A unary handler that answers on the gRPC thread: records the finish in `record` and finishes
// the default reactor with `status`; returns the reactor for the handler to return.
grpc::ServerUnaryReactor* FinishUnary(RpcRecord& record, grpc::CallbackServerContext* context,
                                      const absl::Status& status);

// The jobs a streaming reactor has in flight (one, or several for a pipelined stream), so that
// OnCancel can cancel them. Thread-safe. Cancel() must not hold the lock while cancelling: a
// queued job completes on the cancelling thread, and its completion calls Clear() / Remove().
class JobSlot {
 public:
  // Remembers `job` and submits it to `pool`; forgets it again when the pool refuses it.
  absl::Status Submit(DevicePool* pool, std::shared_ptr<Job> job);
  // From a job's completion: forgets every job (one-job reactors) or just `job`.
  void Clear();
  void Remove(const Job* job);
  // From OnCancel.
  void Cancel();

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Job>> jobs_;
};

// One unary RPC: Start() either submits the job or finishes at once with the error; the job's
// completion calls `respond` (on success) and finishes the RPC. Cancellation by the client
// removes a queued job. Deletes itself when gRPC is done with it.
class UnaryJobCall : public RpcCall<grpc::ServerUnaryReactor> {
 public:
  // `service` and `method` are string literals (they outlive the call).
  UnaryJobCall(ServiceContext* ctx, grpc::CallbackServerContext* context, const char* service,
               const char* method);

  // Finishes at once with `status` (validation errors).
  void Reject(const absl::Status& status);
  // Submits `job` (its done callback is set here). `respond` runs on success, before Finish;
  // it may fail, e.g. when the result is too large to send.
  void Start(std::shared_ptr<Job> job,
             std::function<absl::Status(const JobReport& report, double total_s)> respond);

  void OnCancel() override;

  const char* service() const { return service_; }
  const char* method() const { return method_; }

 private:
  ServiceContext* ctx_;
  grpc::CallbackServerContext* context_;
  const char* const service_;
  const char* const method_;
  std::shared_ptr<Job> job_;
};

}  // namespace fresnel::server
