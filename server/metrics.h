// Metrics: the one owner of every Prometheus family the server exports (prometheus-cpp), and of
// the HTTP exposer that serves them at /metrics.
//
// Names follow fresnel_<what>_<unit>; histograms are in seconds; labels are service, method,
// code, device and direction, never a session or job id.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace fresnel::server {

class Metrics {
 public:
  Metrics();
  ~Metrics();

  // HTTP basic auth check of /metrics: (user, password) -> allowed.
  using BasicAuth = std::function<bool(const std::string& user, const std::string& password)>;
  // Serves /metrics on HOST:PORT, behind `auth` when it is set (401 for other requests). Fails
  // (without throwing) when the port cannot be bound.
  absl::Status StartExposer(const std::string& address, BasicAuth auth = nullptr);

  // Accepted request -> response ready, by final gRPC status code name ("OK", "INVALID_ARGUMENT").
  void ObserveRequest(const std::string& service, const std::string& method,
                      const std::string& code, double seconds);
  void ObserveQueueWait(const std::string& service, const std::string& method,
                        const std::string& device, double seconds);
  // Device compute time (CUDA events on GPUs, wall time of the kernel call on the CPU).
  void ObserveCompute(const std::string& service, const std::string& method,
                      const std::string& device, double seconds);
  // Host<->device copy time.
  void ObserveTransfer(const std::string& device, const std::string& direction, double seconds);
  // Request ("in") and response ("out") payload bytes.
  void AddPayload(const std::string& service, const std::string& method,
                  const std::string& direction, double bytes);

  void InFlightAdd(const std::string& service, const std::string& method, double delta);
  // Answers on their way out: calls whose reactor issued its Finish and that gRPC has not let go
  // of yet (RpcCall). Not exported; Shutdown waits for them before closing connections.
  void AnswerSending(int delta) { answers_sending_.fetch_add(delta); }
  int64_t answers_sending() const { return answers_sending_.load(); }
  void SetQueueDepth(const std::string& device, double depth);
  void SetRunning(const std::string& device, double running);
  void SetDeviceMemory(const std::string& device, double bytes);
  // 1 while the device takes work, 0 once a sticky error (or an injected fault) took it out.
  void SetDeviceHealthy(const std::string& device, bool healthy);
  // Sessions (server/sessions.h): open sessions by kind and device, and the device memory they
  // have reserved; sessions dropped by reason ("expired", "evicted", "closed", "device_lost").
  void SetSessions(const std::string& kind, const std::string& device, double count);
  void SetSessionReservedBytes(const std::string& device, double bytes);
  void AddSessionsDropped(const std::string& kind, const std::string& reason);
  // Asynchronous jobs (server/jobs.h): how many are in each state ("queued", "running", "done",
  // "failed", "cancelled"), the bytes the job store holds, and finished jobs dropped because
  // their TTL passed ("expired") or to stay under the memory cap ("evicted").
  // Server-wide request budgets (--max-streams, --stream-state-bytes): in use and cap.
  void SetBudget(const std::string& flag, double used, double cap);

  void SetJobs(const std::string& state, double count);
  void SetJobStoreBytes(double bytes);
  void AddJobsDropped(const std::string& reason);

  // The text exposition format of everything registered (what /metrics serves).
  std::string Serialize() const;

 private:
  std::atomic<int64_t> answers_sending_{0};
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_wait_;
  prometheus::Family<prometheus::Histogram>& compute_;
  prometheus::Family<prometheus::Histogram>& transfer_;
  prometheus::Family<prometheus::Counter>& payload_bytes_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& running_;
  prometheus::Family<prometheus::Gauge>& device_memory_;
  prometheus::Family<prometheus::Gauge>& device_healthy_;
  prometheus::Family<prometheus::Gauge>& sessions_;
  prometheus::Family<prometheus::Gauge>& session_reserved_bytes_;
  prometheus::Family<prometheus::Counter>& sessions_dropped_;
  prometheus::Family<prometheus::Gauge>& budget_used_;
  prometheus::Family<prometheus::Gauge>& budget_cap_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& job_store_bytes_;
  prometheus::Family<prometheus::Counter>& jobs_dropped_;
};

}  // namespace fresnel::server
