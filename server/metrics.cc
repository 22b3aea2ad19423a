#include "server/metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"

namespace fresnel::server {
namespace {

// 50 us .. ~100 s: kernels of tens of microseconds up to long CPU jobs.
prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
          0.1,  0.25, 0.5,    1,    2.5,  5,      10,   30,   60,     120};
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      request_duration_(prometheus::BuildHistogram()
                            .Name("fresnel_request_duration_seconds")
                            .Help("Time from accepting a request to its response being ready.")
                            .Register(*registry_)),
      queue_wait_(prometheus::BuildHistogram()
                      .Name("fresnel_queue_wait_seconds")
                      .Help("Time a job waited in a device queue before it ran.")
                      .Register(*registry_)),
      compute_(prometheus::BuildHistogram()
                   .Name("fresnel_compute_seconds")
                   .Help("Device compute time of a job (CUDA events on GPUs, wall time on CPU).")
                   .Register(*registry_)),
      transfer_(prometheus::BuildHistogram()
                    .Name("fresnel_transfer_seconds")
                    .Help("Host-device copy time of a job (CUDA events).")
                    .Register(*registry_)),
      payload_bytes_(prometheus::BuildCounter()
                         .Name("fresnel_payload_bytes_total")
                         .Help("Array payload bytes received (in) and sent (out).")
                         .Register(*registry_)),
      in_flight_(prometheus::BuildGauge()
                     .Name("fresnel_in_flight_requests")
                     .Help("Requests accepted and not yet answered.")
                     .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("fresnel_queue_depth")
                       .Help("Jobs waiting in a device queue.")
                       .Register(*registry_)),
      running_(prometheus::BuildGauge()
                   .Name("fresnel_running_jobs")
                   .Help("Jobs running on a device.")
                   .Register(*registry_)),
      device_memory_(prometheus::BuildGauge()
                         .Name("fresnel_device_memory_used_bytes")
                         .Help("Device memory handed out by the device's memory pool.")
                         .Register(*registry_)),
      device_healthy_(prometheus::BuildGauge()
                          .Name("fresnel_device_healthy")
                          .Help("1 while the device takes work; 0 after a sticky CUDA error or "
                                "an injected fault took it out of service.")
                          .Register(*registry_)),
      sessions_(prometheus::BuildGauge()
                    .Name("fresnel_sessions")
                    .Help("Open sessions (state kept on one device), by kind and device.")
                    .Register(*registry_)),
      session_reserved_bytes_(prometheus::BuildGauge()
                                  .Name("fresnel_session_reserved_bytes")
                                  .Help("Device memory reserved by open sessions.")
                                  .Register(*registry_)),
      sessions_dropped_(prometheus::BuildCounter()
                            .Name("fresnel_sessions_dropped_total")
                            .Help("Sessions ended other than by their client: idle TTL passed "
                                  "(expired), memory wanted by another (evicted), device lost.")
                            .Register(*registry_)),
      budget_used_(prometheus::BuildGauge()
                       .Name("fresnel_budget_used")
                       .Help("Server-wide request budgets in use, by the flag that caps them: "
                             "open streams (--max-streams), bytes of stream and upload state "
                             "(--stream-state-bytes).")
                       .Register(*registry_)),
      budget_cap_(prometheus::BuildGauge()
                      .Name("fresnel_budget_cap")
                      .Help("The cap of each server-wide request budget.")
                      .Register(*registry_)),
      jobs_(prometheus::BuildGauge()
                .Name("fresnel_jobs")
                .Help("Asynchronous jobs the job store holds, by state.")
                .Register(*registry_)),
      job_store_bytes_(prometheus::BuildGauge()
                           .Name("fresnel_job_store_bytes")
                           .Help("Bytes the job store holds: inputs and reserved outputs of "
                                 "unfinished jobs plus finished results.")
                           .Register(*registry_)),
      jobs_dropped_(prometheus::BuildCounter()
                        .Name("fresnel_jobs_dropped_total")
                        .Help("Finished jobs dropped: TTL passed (expired) or memory cap "
                              "(evicted).")
                        .Register(*registry_)) {}

Metrics::~Metrics() = default;

absl::Status Metrics::StartExposer(const std::string& address, BasicAuth auth) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
    if (auth) exposer_->RegisterAuth(std::move(auth), "fresneld");
    exposer_->RegisterCollectable(registry_);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  return absl::OkStatus();
}

void Metrics::ObserveRequest(const std::string& service, const std::string& method,
                             const std::string& code, double seconds) {
  request_duration_.Add({{"service", service}, {"method", method}, {"code", code}},
                        SecondsBuckets())
      .Observe(seconds);
}

void Metrics::ObserveQueueWait(const std::string& service, const std::string& method,
                               const std::string& device, double seconds) {
  queue_wait_.Add({{"service", service}, {"method", method}, {"device", device}}, SecondsBuckets())
      .Observe(seconds);
}

void Metrics::ObserveCompute(const std::string& service, const std::string& method,
                             const std::string& device, double seconds) {
  compute_.Add({{"service", service}, {"method", method}, {"device", device}}, SecondsBuckets())
      .Observe(seconds);
}

void Metrics::ObserveTransfer(const std::string& device, const std::string& direction,
                              double seconds) {
  transfer_.Add({{"device", device}, {"direction", direction}}, SecondsBuckets())
      .Observe(seconds);
}

void Metrics::AddPayload(const std::string& service, const std::string& method,
                         const std::string& direction, double bytes) {
  payload_bytes_.Add({{"service", service}, {"method", method}, {"direction", direction}})
      .Increment(bytes);
}

void Metrics::InFlightAdd(const std::string& service, const std::string& method, double delta) {
  in_flight_.Add({{"service", service}, {"method", method}}).Increment(delta);
}

void Metrics::SetQueueDepth(const std::string& device, double depth) {
  queue_depth_.Add({{"device", device}}).Set(depth);
}

void Metrics::SetRunning(const std::string& device, double running) {
  running_.Add({{"device", device}}).Set(running);
}

void Metrics::SetDeviceMemory(const std::string& device, double bytes) {
  device_memory_.Add({{"device", device}}).Set(bytes);
}

void Metrics::SetDeviceHealthy(const std::string& device, bool healthy) {
  device_healthy_.Add({{"device", device}}).Set(healthy ? 1 : 0);
}

void Metrics::SetSessions(const std::string& kind, const std::string& device, double count) {
  sessions_.Add({{"kind", kind}, {"device", device}}).Set(count);
}

void Metrics::SetSessionReservedBytes(const std::string& device, double bytes) {
  session_reserved_bytes_.Add({{"device", device}}).Set(bytes);
}

void Metrics::AddSessionsDropped(const std::string& kind, const std::string& reason) {
  sessions_dropped_.Add({{"kind", kind}, {"reason", reason}}).Increment();
}

void Metrics::SetJobs(const std::string& state, double count) {
  jobs_.Add({{"state", state}}).Set(count);
}

void Metrics::SetBudget(const std::string& flag, double used, double cap) {
  budget_used_.Add({{"budget", flag}}).Set(used);
  budget_cap_.Add({{"budget", flag}}).Set(cap);
}

void Metrics::SetJobStoreBytes(double bytes) { job_store_bytes_.Add({}).Set(bytes); }

void Metrics::AddJobsDropped(const std::string& reason) {
  jobs_dropped_.Add({{"reason", reason}}).Increment();
}

std::string Metrics::Serialize() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry_->Collect());
}

}  // namespace fresnel::server
