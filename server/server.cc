#include "server/server.h"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fresnel/core/gpu.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/auth.h"
#include "server/call.h"
#include "server/device_pool.h"
#include "server/drain.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/sessions.h"
#include "fresnel/core/gpu_ipc.h"
#include "server/shm.h"
#include "server/shm_service.h"
#include "server/services/admin_service.h"
#include "server/workload.h"

namespace fresnel::server {

namespace {

// How long the connections stay open after the last answer was handed to the kernel, so that it
// can send the bytes before gRPC's shutdown closes them (FresnelServer::Shutdown).
constexpr std::chrono::milliseconds kCloseLinger(100);

// Leaves out the reflection plugin that InitProtoReflectionServerBuilderPlugin registers for
// every ServerBuilder of the process (--reflection=false).
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

}  // namespace

struct FresnelServer::Impl {
  ServerConfig config;
  std::shared_ptr<TokenAuthenticator> tokens;  // null without --token-file
  std::unique_ptr<Metrics> metrics;
  // Declared before the pool so that it is destroyed after it: the pool's last jobs complete
  // into the store.
  std::unique_ptr<JobStore> jobs;
  std::unique_ptr<SessionStore> sessions;
  std::unique_ptr<KeyedBudget> client_streams;
  std::unique_ptr<Budget> streams;
  std::unique_ptr<Budget> stream_state_bytes;
  std::unique_ptr<ShmRegistry> shm;
  DrainGate drain;  // outlives the gRPC server: reactors hold its tickets
  std::unique_ptr<DevicePool> pool;
  ServiceContext ctx;
  std::vector<std::unique_ptr<grpc::Service>> workloads;  // one per Workloads() entry
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<SharedMemoryService> shm_service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::vector<std::string> service_names;
  int port = 0;
  std::mutex shutdown_mu;
  bool shut_down = false;
  bool drained = true;
};

FresnelServer::FresnelServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FresnelServer::~FresnelServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<FresnelServer>> FresnelServer::Start(const ServerConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  absl::StatusOr<std::string> instance = ResolveInstance(config);
  if (!instance.ok()) return instance.status();
  impl->config.instance = *std::move(instance);
  if (!config.token_file.empty()) {
    absl::StatusOr<std::shared_ptr<TokenAuthenticator>> tokens =
        TokenAuthenticator::Load(config.token_file);
    if (!tokens.ok()) return tokens.status();
    impl->tokens = *std::move(tokens);
  }
  if (config.metrics_auth && impl->tokens == nullptr) {
    return absl::InvalidArgumentError("--metrics-auth needs --token-file (its admin tokens)");
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(config, impl->tokens);
  if (!credentials.ok()) return credentials.status();
  impl->metrics = std::make_unique<Metrics>();
  if (!config.metrics.empty() && config.metrics != "off") {
    Metrics::BasicAuth auth;
    if (config.metrics_auth) {
      auth = [tokens = impl->tokens](const std::string& user, const std::string& password) {
        std::shared_ptr<const TokenEntry> entry = tokens->Find(password);
        return entry != nullptr && entry->admin && entry->name == user;
      };
    }
    absl::Status st = impl->metrics->StartExposer(config.metrics, std::move(auth));
    if (!st.ok()) return st;
  }

  auto gpus = SelectGpus(config.gpus, GpuCount());
  if (!gpus.ok()) return gpus.status();
  DevicePoolOptions pool_options;
  pool_options.gpus = *gpus;
  pool_options.streams_per_gpu = config.streams_per_gpu;
  pool_options.cpu_workers = config.cpu_workers;
  pool_options.queue_capacity = config.queue_length;
  pool_options.gpu_memory_bytes = config.gpu_memory_bytes;
  pool_options.gpu_partitions = config.gpu_partitions;
  pool_options.cpu_partitions = config.cpu_partitions;
  pool_options.small_job_bytes = config.small_job_bytes;
  auto pool = DevicePool::Create(pool_options, impl->metrics.get());
  if (!pool.ok()) return pool.status();
  impl->pool = std::move(*pool);

  impl->ctx.pool = impl->pool.get();
  impl->ctx.metrics = impl->metrics.get();
  impl->ctx.max_message_bytes = config.max_message_bytes;
  JobStoreOptions job_options;
  job_options.ttl_s = config.job_ttl_s;
  job_options.memory_bytes = config.job_memory_bytes;
  job_options.max_jobs = config.max_jobs;
  job_options.instance = impl->config.instance;
  impl->jobs = std::make_unique<JobStore>(job_options, impl->pool.get(), impl->metrics.get());
  impl->ctx.jobs = impl->jobs.get();
  SessionStoreOptions session_options;
  session_options.instance = impl->config.instance;
  session_options.ttl_s = config.session_ttl_s;
  session_options.max_sessions_per_device = config.max_sessions_per_device;
  session_options.max_sessions_per_client = config.max_sessions_per_client;
  session_options.gpu_cap_bytes = config.session_gpu_memory_bytes;
  session_options.cpu_cap_bytes = config.session_cpu_memory_bytes;
  impl->sessions =
      std::make_unique<SessionStore>(session_options, impl->pool.get(), impl->metrics.get());
  impl->ctx.sessions = impl->sessions.get();
  auto observe = [metrics = impl->metrics.get()](const char* flag, int64_t cap) {
    return [metrics, flag, cap](int64_t used) {
      metrics->SetBudget(flag, static_cast<double>(used), static_cast<double>(cap));
    };
  };
  impl->streams = std::make_unique<Budget>("--max-streams", config.max_streams,
                                           observe("--max-streams", config.max_streams));
  impl->stream_state_bytes = std::make_unique<Budget>(
      "--stream-state-bytes", config.stream_state_bytes,
      observe("--stream-state-bytes", config.stream_state_bytes));
  impl->ctx.streams = impl->streams.get();
  impl->client_streams = std::make_unique<KeyedBudget>("--max-streams-per-client",
                                                       config.max_streams_per_client);
  impl->ctx.client_streams = impl->client_streams.get();
  impl->ctx.stream_state_bytes = impl->stream_state_bytes.get();
  ShmRegistryOptions shm_options;
  shm_options.cap_bytes = config.shm_bytes;
  shm_options.ttl_s = config.shm_ttl_s;
  shm_options.staging_cache_bytes = config.staging_cache_bytes;
  shm_options.pin = config.pin_regions && !gpus->empty();
  shm_options.overlap_chunk_bytes = config.overlap_chunk_bytes;
  for (int ordinal : *gpus) {
    absl::StatusOr<std::string> uuid = GpuUuid(ordinal);
    if (uuid.ok()) shm_options.cuda_devices.push_back({ordinal, *uuid});
  }
  impl->shm = std::make_unique<ShmRegistry>(shm_options, observe("--shm-bytes", config.shm_bytes));
  impl->ctx.shm = impl->shm.get();
  impl->ctx.drain = &impl->drain;
  impl->ctx.started = Clock::now();

  // The workloads (server/workloads.cc), then the server's own services.
  for (const Workload& w : Workloads()) {
    impl->workloads.push_back(w.make_service(&impl->ctx, impl->config));
    impl->service_names.push_back(w.service);
  }
  impl->service_names.push_back("fresnel.v1.AdminService");
  impl->service_names.push_back("fresnel.v1.SharedMemoryService");
  std::vector<std::string> listed = impl->service_names;
  listed.push_back("grpc.health.v1.Health");
  if (config.reflection) listed.push_back("grpc.reflection.v1alpha.ServerReflection");
  impl->shm_service = std::make_unique<SharedMemoryService>(&impl->ctx);
  impl->admin = std::make_unique<AdminService>(&impl->ctx, impl->config, listed);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!config.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  builder.AddListeningPort(config.listen, *credentials, &impl->port);
  // gRPC sets SO_REUSEPORT by default: a second fresneld on a taken port would then "listen" too
  // and the kernel would split connections between the two (jobs, sessions and regions of one
  // client landing on both), and two servers asking for port 0 may be given the same one
  // (grpc/grpc#10755). Off: a taken port is "cannot listen on", and port 0 is a port of our own.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  for (const std::unique_ptr<grpc::Service>& service : impl->workloads) {
    builder.RegisterService(service.get());
  }
  builder.RegisterService(impl->admin.get());
  builder.RegisterService(impl->shm_service.get());
  impl->grpc_server = builder.BuildAndStart();
  if (!impl->grpc_server || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config.listen));
  }
  grpc::HealthCheckServiceInterface* health = impl->grpc_server->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(true);
    for (const std::string& name : impl->service_names) health->SetServingStatus(name, true);
    // Each device also has a health entry, "fresnel.device.<id>" (e.g. fresnel.device.cuda:0),
    // that turns NOT_SERVING when a sticky error takes the device out of service.
    for (const DeviceSnapshot& d : impl->pool->Snapshot()) {
      health->SetServingStatus(absl::StrCat("fresnel.device.", d.id), d.healthy);
    }
    impl->pool->AddHealthListener(
        [health](const std::string& device, bool healthy, const std::string&) {
          health->SetServingStatus(absl::StrCat("fresnel.device.", device), healthy);
        });
  }
  return std::unique_ptr<FresnelServer>(new FresnelServer(std::move(impl)));
}

int FresnelServer::port() const { return impl_->port; }

const std::string& FresnelServer::instance() const { return impl_->config.instance; }

std::string FresnelServer::MetricsText() const { return impl_->metrics->Serialize(); }

absl::Status FresnelServer::ReloadTokens() {
  if (impl_->tokens == nullptr) {
    return absl::FailedPreconditionError("no --token-file to reload: authentication is off");
  }
  return impl_->tokens->Reload();
}

bool FresnelServer::Shutdown() {
  std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
  if (impl_->shut_down) return impl_->drained;
  impl_->shut_down = true;
  if (grpc::HealthCheckServiceInterface* health = impl_->grpc_server->GetHealthCheckService()) {
    health->Shutdown();  // every service NOT_SERVING from now on
  }
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(impl_->config.drain_timeout_s * 1000));
  const Clock::time_point until = Clock::now() + timeout;
  // Streams and sessions open now go on (their next chunks and frames are accepted) until they
  // end or the timeout passes; new calls and other new work are refused with UNAVAILABLE.
  impl_->pool->BeginDrain();
  const int stopped = impl_->drain.Drain(
      until, absl::UnavailableError(absl::StrCat(
                 "the server's drain timeout (", impl_->config.drain_timeout_s,
                 " s) passed while this call was open; it was ended: resend the rest to another "
                 "instance")));
  if (stopped > 0) {
    std::cerr << "fresneld: drain timeout: ended " << stopped << " open stream(s)\n";
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  impl_->drained = impl_->pool->Drain(std::max(left, std::chrono::milliseconds(0))) && stopped == 0;
  // Answers still being written (a call finished, gRPC not done with it) get the rest of the
  // drain timeout, then a moment for the kernel to send their last bytes, before gRPC's shutdown
  // closes the connections: a connection closed with the client's frames unread is reset, and
  // what was not sent yet is lost with it (seen as UNAVAILABLE "Connection reset by peer" on a
  // 6 MB answer, 1 in ~40 runs of the drain test, until session 11).
  while (impl_->metrics->answers_sending() > 0 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(kCloseLinger);
  // Answers of finished work may still be on their way to slow clients: they get what is left
  // of the drain timeout (at least 2 s) before gRPC cancels the calls still open. Shutdown
  // returns as soon as the last one is sent, so a drain that ended early costs nothing here.
  const auto grace = std::max<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()),
      std::chrono::seconds(2));
  impl_->grpc_server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->grpc_server->Wait();
  return impl_->drained;
}

}  // namespace fresnel::server
