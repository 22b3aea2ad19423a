#include "server/services/admin_service.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "fresnel/core/gpu.h"
#include "server/status_util.h"
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
    // CPU partitions (--cpu-partitions): the CPU's workers in all.
    if (d.kind == DeviceKind::kCpu) response->set_cpu_workers(response->cpu_workers() + d.workers);
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

grpc::ServerUnaryReactor* AdminService::InjectFault(grpc::CallbackServerContext* context,
                                                    const v1::InjectFaultRequest* request,
                                                    v1::InjectFaultResponse* response) {
  auto* reactor = context->DefaultReactor();
  auto record = std::make_shared<RpcRecord>(ctx_->metrics, "fresnel.v1.AdminService",
                                            "InjectFault");
  auto finish = [reactor, record, response, pool = ctx_->pool,
                 id = request->device_id()](absl::Status status) {
    if (status.ok()) {
      for (const DeviceSnapshot& d : pool->Snapshot()) {
        if (d.id != id) continue;
        response->set_device_id(d.id);
        response->set_healthy(d.healthy);
        response->set_reason(d.health_reason);
      }
    }
    record->Done(status);
    reactor->Finish(ToGrpcStatus(status));
  };
  if (!config_.fault_injection) {
    finish(absl::FailedPreconditionError(
        "InjectFault is a test switch: start fresneld with --fault-injection to use it"));
    return reactor;
  }
  std::optional<DeviceSnapshot> target;
  std::string ids;
  for (const DeviceSnapshot& d : ctx_->pool->Snapshot()) {
    absl::StrAppend(&ids, ids.empty() ? "" : ", ", d.id);
    if (d.id == request->device_id()) target = d;
  }
  if (!target) {
    finish(absl::NotFoundError(absl::StrCat("device_id: no device '",
                                            request->device_id().substr(0, 64),
                                            "' in this server (it has ", ids, ")")));
    return reactor;
  }
  switch (request->kind()) {
    case v1::FAULT_KIND_UNHEALTHY:
      ctx_->pool->MarkUnhealthy(target->id, "made unhealthy by AdminService.InjectFault");
      finish(absl::OkStatus());
      return reactor;
    case v1::FAULT_KIND_STICKY_ERROR: {
      if (target->kind != DeviceKind::kCuda) {
        finish(absl::InvalidArgumentError(absl::StrCat(
            "kind: FAULT_KIND_STICKY_ERROR needs a CUDA device; ", target->id,
            " is not one (FAULT_KIND_UNHEALTHY works on any device)")));
        return reactor;
      }
      // A job like any other, on that device: the worker sees the context poisoned after it and
      // takes the device out, exactly as for a kernel that faults on its own.
      auto job = std::make_shared<Job>();
      job->service = "fresnel.v1.AdminService";
      job->method = "InjectFault";
      job->affinity = target->id;
      job->run = [](const Device& device, StageTimes*) {
        return GpuInjectStickyError(device.ordinal, device.stream);
      };
      job->done = [finish, pool = ctx_->pool, id = target->id](const absl::Status& status,
                                                               const JobReport&) {
        // The worker has checked the context before completing the job: the device being
        // unhealthy now is the expected outcome; otherwise the job's status says what went wrong.
        for (const DeviceSnapshot& d : pool->Snapshot()) {
          if (d.id == id && !d.healthy) return finish(absl::OkStatus());
        }
        finish(status.ok() ? absl::InternalError("the injected fault left the device healthy")
                           : status);
      };
      if (absl::Status st = ctx_->pool->Submit(job); !st.ok()) finish(st);
      return reactor;
    }
    default:
      finish(absl::InvalidArgumentError(
          absl::StrCat("kind: must be FAULT_KIND_UNHEALTHY or FAULT_KIND_STICKY_ERROR (got ",
                       static_cast<int>(request->kind()), ")")));
      return reactor;
  }
}

}  // namespace fresnel::server
