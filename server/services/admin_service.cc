#include "server/services/admin_service.h"

#include "fresnel/core/gpu.h"
#include "server/workload.h"

#ifndef FRESNEL_VERSION
#define FRESNEL_VERSION "dev"
#endif

namespace fresnel::server {

namespace {
constexpr char kService[] = "fresnel.v1.AdminService";
}  // namespace

grpc::ServerUnaryReactor* AdminService::GetServerInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetServerInfoRequest*,
                                                      v1::ServerInfo* response) {
  RpcRecord record(ctx_->metrics, kService, "GetServerInfo");
  response->set_version(FRESNEL_VERSION);
  response->set_cuda_compiled(CudaCompiled());
  response->set_instance(config_.instance);
  for (const DeviceSnapshot& d : ctx_->pool->Snapshot()) {
    v1::DeviceInfo* info = response->add_devices();
    info->set_id(d.id);
    info->set_name(d.name);
    info->set_kind(d.kind == DeviceKind::kCuda ? "cuda" : "cpu");
    info->set_total_memory_bytes(d.total_memory_bytes);
    info->set_streams(d.workers);
    info->set_compute_capability_major(d.compute_major);
    info->set_compute_capability_minor(d.compute_minor);
    info->set_multiprocessors(d.multiprocessors);
    if (d.kind == DeviceKind::kCpu) response->set_cpu_workers(d.workers);
  }
  v1::Limits* limits = response->mutable_limits();
  FillServerLimits(config_, limits);
  for (const Workload& w : Workloads()) {
    if (w.fill_limits) w.fill_limits(config_, limits);
    if (w.fill_info) w.fill_info(config_, response);
  }
  for (const std::string& s : services_) response->add_services(s);
  return FinishUnary(record, context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminService::GetStats(grpc::CallbackServerContext* context,
                                                 const v1::GetStatsRequest*,
                                                 v1::ServerStats* response) {
  RpcRecord record(ctx_->metrics, kService, "GetStats");
  response->set_uptime_seconds(
      std::chrono::duration<double>(Clock::now() - ctx_->started).count());
  int64_t total = 0, failed = 0;
  for (const DeviceSnapshot& d : ctx_->pool->Snapshot()) {
    v1::DeviceStats* s = response->add_devices();
    s->set_id(d.id);
    s->set_queued(d.queued);
    s->set_running(d.running);
    s->set_completed(d.completed);
    s->set_failed(d.failed);
    s->set_rejected(d.rejected);
    s->set_memory_in_use_bytes(d.memory_in_use_bytes);
    s->set_busy_seconds(d.busy_seconds);
    total += d.completed + d.failed;
    failed += d.failed;
  }
  response->set_requests_total(total);
  response->set_requests_failed(failed);
  response->set_in_flight(ctx_->pool->InFlight());
  response->set_serving(!ctx_->pool->draining());
  return FinishUnary(record, context, absl::OkStatus());
}

}  // namespace fresnel::server
