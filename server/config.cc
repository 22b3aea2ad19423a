#include "server/config.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#ifndef FRESNEL_VERSION
#define FRESNEL_VERSION "dev"
#endif

namespace fresnel::server {

absl::StatusOr<ServerConfig> ParseConfig(int argc, char** argv) {
  ServerConfig c;
  CLI::App app{"fresneld: the Fresnel GPU compute server"};
  app.set_version_flag("--version", FRESNEL_VERSION);
  app.add_option("--listen", c.listen, "gRPC address HOST:PORT")->envname("FRESNEL_LISTEN")
      ->capture_default_str();
  app.add_option("--metrics", c.metrics, "Prometheus /metrics address HOST:PORT, or 'off'")
      ->envname("FRESNEL_METRICS")->capture_default_str();
  app.add_option("--gpus", c.gpus, "GPUs to use: all, none, or ordinals like 0,2")
      ->envname("FRESNEL_GPUS")->capture_default_str();
  app.add_option("--instance", c.instance,
                 "name of this server in job ids and errors (default: HOSTNAME:PORT)")
      ->envname("FRESNEL_INSTANCE");
  app.add_option("--streams-per-gpu", c.streams_per_gpu, "worker streams per GPU")
      ->envname("FRESNEL_STREAMS_PER_GPU")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--cpu-workers", c.cpu_workers, "CPU pool workers (each job is multi-threaded)")
      ->envname("FRESNEL_CPU_WORKERS")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--queue-length", c.queue_length, "queued jobs per device before RESOURCE_EXHAUSTED")
      ->envname("FRESNEL_QUEUE_LENGTH")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--max-message-bytes", c.max_message_bytes, "largest gRPC message in either direction")
      ->envname("FRESNEL_MAX_MESSAGE_BYTES")->check(CLI::Range(int64_t{1} << 16, int64_t{2047} << 20))
      ->capture_default_str();
  app.add_option("--drain-timeout", c.drain_timeout_s, "seconds to finish accepted work on SIGTERM")
      ->envname("FRESNEL_DRAIN_TIMEOUT")->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--max-rate", c.max_rate, "largest interpolation up/down factor")
      ->envname("FRESNEL_MAX_RATE")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--max-taps", c.max_taps, "longest interpolation filter")
      ->envname("FRESNEL_MAX_TAPS")->check(CLI::Range(int64_t{1}, int64_t{1} << 28))
      ->capture_default_str();
  app.add_option("--max-output-samples", c.max_output_samples, "largest interpolation output per call")
      ->envname("FRESNEL_MAX_OUTPUT_SAMPLES")->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--unwrap-max-side", c.unwrap_max_side, "largest unwrap image side (rows or cols)")
      ->envname("FRESNEL_UNWRAP_MAX_SIDE")->check(CLI::Range(int64_t{2}, int64_t{32768}))
      ->capture_default_str();
  app.add_option("--unwrap-max-pixels", c.unwrap_max_pixels, "largest unwrap image (rows * cols)")
      ->envname("FRESNEL_UNWRAP_MAX_PIXELS")->check(CLI::Range(int64_t{4}, int64_t{1} << 31))
      ->capture_default_str();
  app.add_option("--job-ttl", c.job_ttl_s, "seconds a finished job and its result are kept")
      ->envname("FRESNEL_JOB_TTL")->check(CLI::Range(0.0, 30.0 * 86400))->capture_default_str();
  app.add_option("--job-memory-bytes", c.job_memory_bytes,
                 "cap on the bytes jobs hold (inputs of unfinished jobs + finished results); "
                 "the oldest finished results are evicted first")
      ->envname("FRESNEL_JOB_MEMORY_BYTES")->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--max-jobs", c.max_jobs,
                 "unfinished (queued + running) jobs before RESOURCE_EXHAUSTED")
      ->envname("FRESNEL_MAX_JOBS")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--hologram-max-pixels", c.hologram_max_pixels,
                 "largest hologram (width * height pixels) per Render/Stream frame/Reconstruct")
      ->envname("FRESNEL_HOLOGRAM_MAX_PIXELS")->check(CLI::Range(int64_t{1}, int64_t{1} << 28))
      ->capture_default_str();
  app.add_option("--hologram-max-points", c.hologram_max_points,
                 "most points per hologram (an image source counts one point per pixel)")
      ->envname("FRESNEL_HOLOGRAM_MAX_POINTS")->check(CLI::Range(int64_t{1}, int64_t{1} << 28))
      ->capture_default_str();
  app.add_option("--volume-max-points", c.volume_max_points, "most points per uploaded mesh")
      ->envname("FRESNEL_VOLUME_MAX_POINTS")->check(CLI::Range(int64_t{4}, (int64_t{1} << 31) - 1))
      ->capture_default_str();
  app.add_option("--volume-max-tets", c.volume_max_tets, "most tetrahedra per uploaded mesh")
      ->envname("FRESNEL_VOLUME_MAX_TETS")->check(CLI::Range(int64_t{1}, (int64_t{1} << 31) - 1))
      ->capture_default_str();
  app.add_option("--max-streams", c.max_streams,
                 "streaming calls (ResampleStream, hologram Stream) open at once")
      ->envname("FRESNEL_MAX_STREAMS")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_flag("--fault-injection", c.fault_injection,
               "accept AdminService.InjectFault (a test switch that makes devices unhealthy or "
               "poisons a GPU's context; never on a production server)")
      ->envname("FRESNEL_FAULT_INJECTION");
  app.add_option("--small-job-bytes", c.small_job_bytes,
                 "a request of device kind ANY whose device-memory estimate is at most this many "
                 "bytes runs on the CPU while the CPU has room (a few microseconds of work cost "
                 "more as a GPU launch); 0 = every ANY request goes to a GPU when there is one")
      ->envname("FRESNEL_SMALL_JOB_BYTES")->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-streams-per-client", c.max_streams_per_client,
                 "streaming calls one client may hold open at once (the client named by its token "
                 "or certificate; without authentication, its host address)")
      ->envname("FRESNEL_MAX_STREAMS_PER_CLIENT")->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--stream-state-bytes", c.stream_state_bytes,
                 "bytes of state live requests may derive from their messages (stream filters "
                 "and delay lines, queued point clouds)")
      ->envname("FRESNEL_STREAM_STATE_BYTES")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 50))->capture_default_str();
  app.add_option("--shm-bytes", c.shm_bytes,
                 "bytes all clients' shared-memory regions may map together (0: no regions)")
      ->envname("FRESNEL_SHM_BYTES")->check(CLI::Range(int64_t{0}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--shm-ttl", c.shm_ttl_s,
                 "seconds a shared-memory region stays registered without a request naming it")
      ->envname("FRESNEL_SHM_TTL")->check(CLI::Range(0.01, 1e7))->capture_default_str();
  app.add_option("--staging-cache-bytes", c.staging_cache_bytes,
                 "bytes of unregistered staging-region buffers kept (mapped, faulted in, pinned) "
                 "for the next chunked transfer; counted in --shm-bytes (0: keep none)")
      ->envname("FRESNEL_STAGING_CACHE_BYTES")->check(CLI::Range(int64_t{0}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--overlap-chunk-bytes", c.overlap_chunk_bytes,
                 "CUDA Upfirdn / ResamplePoly with x or y in a region or staging buffer: bytes of "
                 "y per chunk, chunk i+1's upload, chunk i's kernel and chunk i-1's download "
                 "overlapping on three streams (0: one upload, kernel, download)")
      ->envname("FRESNEL_OVERLAP_CHUNK_BYTES")->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--pin-regions", c.pin_regions,
                 "page-lock shared-memory and staging regions for DMA when the server has GPUs "
                 "(costs a one-time fault-in of each region)")
      ->envname("FRESNEL_PIN_REGIONS")->capture_default_str();
  app.add_option("--session-ttl", c.session_ttl_s,
                 "seconds a session (fusion volume, cached mesh) lives without a call")
      ->envname("FRESNEL_SESSION_TTL")->check(CLI::Range(0.01, 1e7))->capture_default_str();
  app.add_option("--max-sessions-per-device", c.max_sessions_per_device,
                 "open sessions each device holds before RESOURCE_EXHAUSTED")
      ->envname("FRESNEL_MAX_SESSIONS_PER_DEVICE")->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--max-sessions-per-client", c.max_sessions_per_client,
                 "open sessions one client may hold")
      ->envname("FRESNEL_MAX_SESSIONS_PER_CLIENT")->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--gpu-memory-bytes", c.gpu_memory_bytes,
                 "device memory fresneld may use on each GPU (0: all of it); allocations past it "
                 "are RESOURCE_EXHAUSTED, so several servers or other programs can share a GPU")
      ->envname("FRESNEL_GPU_MEMORY_BYTES")->check(CLI::Range(int64_t{0}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--gpu-partitions", c.gpu_partitions,
                 "present each GPU as this many pool devices (cuda:0.0, cuda:0.1, ...), each with "
                 "its own streams, queue and 1/N of the GPU's memory: multi-device placement on "
                 "one GPU, or hard memory shares")
      ->envname("FRESNEL_GPU_PARTITIONS")->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--cpu-partitions", c.cpu_partitions,
                 "present the CPU as this many pool devices (cpu.0, cpu.1, ...), --cpu-workers "
                 "and --session-cpu-memory-bytes split between them, each with its own queue, "
                 "health and metrics: multi-device placement without a GPU, or separate CPU "
                 "queues")
      ->envname("FRESNEL_CPU_PARTITIONS")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--session-gpu-memory-bytes", c.session_gpu_memory_bytes,
                 "device memory sessions may reserve on each GPU (0: 90% of its memory)")
      ->envname("FRESNEL_SESSION_GPU_MEMORY_BYTES")->check(CLI::Range(int64_t{0}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--session-cpu-memory-bytes", c.session_cpu_memory_bytes,
                 "host memory sessions on the CPU may reserve")
      ->envname("FRESNEL_SESSION_CPU_MEMORY_BYTES")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 50))->capture_default_str();
  app.add_option("--tls-cert", c.tls_cert, "PEM certificate (chain) of the gRPC port: serve TLS")
      ->envname("FRESNEL_TLS_CERT");
  app.add_option("--tls-key", c.tls_key, "PEM private key of --tls-cert")->envname("FRESNEL_TLS_KEY");
  app.add_option("--tls-client-ca", c.tls_client_ca,
                 "PEM CA bundle: mutual TLS, clients must present a certificate it signed")
      ->envname("FRESNEL_TLS_CLIENT_CA");
  app.add_option("--token-file", c.token_file,
                 "bearer tokens, lines 'NAME TOKEN [admin]'; every RPC needs one; reloaded on "
                 "SIGHUP (docs/security.md)")
      ->envname("FRESNEL_TOKEN_FILE");
  app.add_flag("--metrics-auth", c.metrics_auth,
               "/metrics needs HTTP basic auth with an admin token (user NAME, password TOKEN)")
      ->envname("FRESNEL_METRICS_AUTH")->capture_default_str();
  app.add_flag("--reflection", c.reflection,
               "serve grpc.reflection (grpcurl, grpc_cli); --reflection=false turns it off")
      ->envname("FRESNEL_REFLECTION")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    std::ostringstream out;
    app.exit(CLI::Success(), out, out);
    std::string text = out.str();
    if (text.empty()) text = app.help();
    return absl::CancelledError(text);
  } catch (const CLI::CallForVersion&) {
    return absl::CancelledError(absl::StrCat("fresneld ", FRESNEL_VERSION, "\n"));
  } catch (const CLI::CallForHelp&) {
    return absl::CancelledError(app.help());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (c.metrics_auth && c.token_file.empty()) {
    return absl::InvalidArgumentError("--metrics-auth needs --token-file (its admin tokens)");
  }
  if (!c.instance.empty()) {
    absl::StatusOr<std::string> instance = ResolveInstance(c);
    if (!instance.ok()) return instance.status();
  }
  return c;
}

absl::StatusOr<std::string> ResolveInstance(const ServerConfig& config) {
  std::string name = config.instance;
  if (name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
      std::snprintf(host, sizeof(host), "localhost");
    }
    const size_t colon = config.listen.rfind(':');
    const std::string port =
        colon == std::string::npos ? config.listen : config.listen.substr(colon + 1);
    name = absl::StrCat(host, ":", port);
  }
  constexpr size_t kMaxInstance = 253;
  if (name.size() > kMaxInstance) {
    return absl::InvalidArgumentError(absl::StrCat("--instance: at most ", kMaxInstance,
                                                   " characters, got ", name.size()));
  }
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != ':' &&
        ch != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("--instance: '", name,
                       "' may hold only letters, digits and . _ : - (it is part of job ids)"));
    }
  }
  return name;
}

absl::StatusOr<std::vector<int>> SelectGpus(const std::string& spec, int visible) {
  std::vector<int> out;
  if (spec == "none" || spec.empty()) return out;
  if (spec == "all") {
    for (int i = 0; i < visible; ++i) out.push_back(i);
    return out;
  }
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    int ordinal;
    if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--gpus: '", part, "' is not a GPU ordinal"));
    }
    if (ordinal >= visible) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: GPU ", ordinal, " requested but ", visible, " visible"));
    }
    out.push_back(ordinal);
  }
  return out;
}

}  // namespace fresnel::server
