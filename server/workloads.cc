// The workloads fresneld serves: the one place a workload is registered (server/workload.h). Each
// entry derives its limits from the configuration once (the *LimitsOf functions), and both its
// service and its ServerInfo group are built from that, so what GetServerInfo reports is what
// the service enforces.
#include "fresnel/hologram/hologram.h"
#include "fresnel/interp/interp.h"
#include "fresnel/unwrap/unwrap.h"
#include "fresnel/volume/render.h"
#include "server/services/fusion_service.h"
#include "server/services/hologram_service.h"
#include "server/services/interpolation_service.h"
#include "server/services/unwrap_service.h"
#include "server/services/volume_service.h"
#include "server/workload.h"

namespace fresnel::server {

namespace {

interp::Limits InterpLimitsOf(const ServerConfig& config) {
  interp::Limits limits;
  limits.max_rate = config.max_rate;
  limits.max_taps = config.max_taps;
  limits.max_output_samples = config.max_output_samples;
  return limits;
}

unwrap::Limits UnwrapLimitsOf(const ServerConfig& config) {
  unwrap::Limits limits;
  limits.max_side = config.unwrap_max_side;
  limits.max_pixels = config.unwrap_max_pixels;
  return limits;
}

hologram::Limits HologramLimitsOf(const ServerConfig& config) {
  hologram::Limits limits;  // width and height keep the kernel's bounds
  limits.max_pixels = config.hologram_max_pixels;
  limits.max_points = config.hologram_max_points;
  return limits;
}

VolumeLimits VolumeLimitsOf(const ServerConfig& config) {
  VolumeLimits limits;
  limits.max_points = config.volume_max_points;
  limits.max_tets = config.volume_max_tets;
  return limits;
}

// Fusion's per-stream limits are not flags; its session limits are the SessionStore's.
void FillFusion(const ServerConfig& config, v1::FusionLimits* f) {
  const FusionServiceLimits limits;
  f->set_max_sessions_per_device(config.max_sessions_per_device);
  f->set_max_sessions_per_client(config.max_sessions_per_client);
  f->set_session_ttl_seconds(config.session_ttl_s);
  f->set_max_pending(limits.max_pending);
  f->set_max_snapshot_bytes(limits.max_snapshot_bytes);
  f->set_max_render_pixels(limits.max_render_pixels);
}

std::vector<Workload> MakeWorkloads() {
  std::vector<Workload> w;
  w.push_back(Workload{
      "interpolation", "fresnel.v1.InterpolationService",
      [](ServiceContext* ctx, const ServerConfig& config) -> std::unique_ptr<grpc::Service> {
        return std::make_unique<InterpolationService>(ctx, InterpLimitsOf(config));
      },
      [](const ServerConfig& config, v1::Limits* limits) {
        const interp::Limits l = InterpLimitsOf(config);
        v1::InterpolationLimits* g = limits->mutable_interpolation();
        g->set_max_rate(l.max_rate);
        g->set_max_taps(l.max_taps);
        g->set_max_output_samples(l.max_output_samples);
        limits->set_max_rate(l.max_rate);
        limits->set_max_taps(l.max_taps);
        limits->set_max_output_samples(l.max_output_samples);
      },
      nullptr});
  w.push_back(Workload{
      "unwrap", "fresnel.v1.UnwrapService",
      [](ServiceContext* ctx, const ServerConfig& config) -> std::unique_ptr<grpc::Service> {
        return std::make_unique<UnwrapService>(ctx, UnwrapLimitsOf(config));
      },
      [](const ServerConfig& config, v1::Limits* limits) {
        const unwrap::Limits l = UnwrapLimitsOf(config);
        limits->mutable_unwrap()->set_max_side(l.max_side);
        limits->mutable_unwrap()->set_max_pixels(l.max_pixels);
        limits->set_unwrap_max_side(l.max_side);
        limits->set_unwrap_max_pixels(l.max_pixels);
      },
      nullptr});
  w.push_back(Workload{
      "hologram", "fresnel.v1.HologramService",
      [](ServiceContext* ctx, const ServerConfig& config) -> std::unique_ptr<grpc::Service> {
        return std::make_unique<HologramService>(ctx, HologramLimitsOf(config));
      },
      [](const ServerConfig& config, v1::Limits* limits) {
        const hologram::Limits l = HologramLimitsOf(config);
        v1::HologramLimits* g = limits->mutable_hologram();
        g->set_max_width(l.max_width);
        g->set_max_height(l.max_height);
        g->set_max_pixels(l.max_pixels);
        g->set_max_points(l.max_points);
        limits->set_hologram_max_width(l.max_width);
        limits->set_hologram_max_height(l.max_height);
        limits->set_hologram_max_pixels(l.max_pixels);
        limits->set_hologram_max_points(l.max_points);
      },
      nullptr});
  w.push_back(Workload{
      "fusion", "fresnel.v1.FusionService",
      [](ServiceContext* ctx, const ServerConfig&) -> std::unique_ptr<grpc::Service> {
        return std::make_unique<FusionService>(ctx, FusionServiceLimits{});
      },
      [](const ServerConfig& config, v1::Limits* limits) {
        FillFusion(config, limits->mutable_fusion());
      },
      // Deprecated: ServerInfo.fusion (field 8) predates ServerInfo.limits.fusion.
      [](const ServerConfig& config, v1::ServerInfo* info) {
        FillFusion(config, info->mutable_fusion());
      }});
  w.push_back(Workload{
      "volume", "fresnel.v1.VolumeRenderService",
      [](ServiceContext* ctx, const ServerConfig& config) -> std::unique_ptr<grpc::Service> {
        return std::make_unique<VolumeService>(ctx, VolumeLimitsOf(config));
      },
      [](const ServerConfig& config, v1::Limits* limits) {
        const VolumeLimits l = VolumeLimitsOf(config);
        v1::VolumeLimits* g = limits->mutable_volume();
        g->set_max_points(l.max_points);
        g->set_max_tets(l.max_tets);
        g->set_max_image_side(volume::kMaxImageSide);
        limits->set_volume_max_points(l.max_points);
        limits->set_volume_max_tets(l.max_tets);
        limits->set_volume_max_image_side(volume::kMaxImageSide);
      },
      nullptr});
  return w;
}

}  // namespace

const std::vector<Workload>& Workloads() {
  static const std::vector<Workload>* const workloads = new std::vector<Workload>(MakeWorkloads());
  return *workloads;
}

void FillServerLimits(const ServerConfig& config, v1::Limits* limits) {
  v1::ServerLimits* s = limits->mutable_server();
  s->set_max_message_bytes(config.max_message_bytes);
  s->set_queue_capacity(config.queue_length);
  s->set_max_streams(config.max_streams);
  s->set_stream_state_bytes(config.stream_state_bytes);
  s->set_shm_bytes(config.shm_bytes);
  s->set_shm_ttl_seconds(config.shm_ttl_s);
  s->set_gpu_memory_bytes(config.gpu_memory_bytes);
  s->set_max_streams_per_client(config.max_streams_per_client);
  s->set_gpu_partitions(config.gpu_partitions);
  s->set_cpu_partitions(config.cpu_partitions);
  s->set_staging_cache_bytes(config.staging_cache_bytes);
  s->set_pin_regions(config.pin_regions);
  s->set_fault_injection(config.fault_injection);
  s->set_small_job_bytes(config.small_job_bytes);
  s->set_overlap_chunk_bytes(config.overlap_chunk_bytes);
  limits->set_max_message_bytes(config.max_message_bytes);
  limits->set_queue_capacity(config.queue_length);
  limits->set_max_streams(config.max_streams);
  limits->set_stream_state_bytes(config.stream_state_bytes);

  v1::JobLimits* j = limits->mutable_jobs();
  j->set_max_jobs(config.max_jobs);
  j->set_ttl_seconds(config.job_ttl_s);
  j->set_memory_bytes(config.job_memory_bytes);
  limits->set_max_jobs(config.max_jobs);
  limits->set_job_ttl_seconds(config.job_ttl_s);
  limits->set_job_memory_bytes(config.job_memory_bytes);

  v1::SessionLimits* se = limits->mutable_sessions();
  se->set_gpu_cap_bytes(config.session_gpu_memory_bytes);
  se->set_cpu_cap_bytes(config.session_cpu_memory_bytes);
  se->set_max_sessions_per_device(config.max_sessions_per_device);
  se->set_max_sessions_per_client(config.max_sessions_per_client);
  se->set_ttl_seconds(config.session_ttl_s);
  limits->set_session_gpu_cap_bytes(config.session_gpu_memory_bytes);
  limits->set_session_cpu_cap_bytes(config.session_cpu_memory_bytes);
}

}  // namespace fresnel::server
