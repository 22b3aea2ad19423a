#include "server/services/admin_service.h"

#include "fresnel/core/gpu.h"
#include "fresnel/hologram/hologram.h"
#include "server/services/fusion_service.h"
#include "server/sessions.h"
#include "fresnel/volume/render.h"

#ifndef FRESNEL_VERSION
#define FRESNEL_VERSION "dev"
#endif

namespace fresnel::server {

grpc::ServerUnaryReactor* AdminService::GetServerInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetServerInfoRequest*,
                                                      v1::ServerInfo* response) {
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
  limits->set_max_message_bytes(ctx_->max_message_bytes);
  limits->set_queue_capacity(config_.queue_length);
  limits->set_max_rate(ctx_->interp_limits.max_rate);
  limits->set_max_taps(ctx_->interp_limits.max_taps);
  limits->set_max_output_samples(ctx_->interp_limits.max_output_samples);
  limits->set_unwrap_max_side(ctx_->unwrap_limits.max_side);
  limits->set_unwrap_max_pixels(ctx_->unwrap_limits.max_pixels);
  limits->set_max_jobs(config_.max_jobs);
  limits->set_job_ttl_seconds(config_.job_ttl_s);
  const hologram::Limits hologram_defaults;
  limits->set_hologram_max_width(hologram_defaults.max_width);
  limits->set_hologram_max_height(hologram_defaults.max_height);
  limits->set_hologram_max_pixels(config_.hologram_max_pixels);
  limits->set_hologram_max_points(config_.hologram_max_points);
  limits->set_job_memory_bytes(config_.job_memory_bytes);
  if (ctx_->sessions != nullptr) {
    const FusionServiceLimits fusion_limits;
    v1::FusionLimits* fusion = response->mutable_fusion();
    fusion->set_max_sessions_per_device(ctx_->sessions->options().max_sessions_per_device);
    fusion->set_max_sessions_per_client(ctx_->sessions->options().max_sessions_per_client);
    fusion->set_session_ttl_seconds(ctx_->sessions->options().ttl_s);
    fusion->set_max_pending(fusion_limits.max_pending);
    fusion->set_max_snapshot_bytes(fusion_limits.max_snapshot_bytes);
    fusion->set_max_render_pixels(fusion_limits.max_render_pixels);
  }
  limits->set_volume_max_points(config_.volume_max_points);
  limits->set_volume_max_tets(config_.volume_max_tets);
  limits->set_volume_max_image_side(volume::kMaxImageSide);
  limits->set_session_gpu_cap_bytes(config_.session_gpu_memory_bytes);
  limits->set_session_cpu_cap_bytes(config_.session_cpu_memory_bytes);
  limits->set_max_streams(config_.max_streams);
  limits->set_stream_state_bytes(config_.stream_state_bytes);
  for (const std::string& s : services_) response->add_services(s);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetStats(grpc::CallbackServerContext* context,
                                                 const v1::GetStatsRequest*,
                                                 v1::ServerStats* response) {
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
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace fresnel::server
