// fresneld's configuration: command-line flags, each also settable by an environment variable
// (the flag wins). See ParseConfig's --help for the list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fresnel::server {

struct ServerConfig {
  // Loopback by default (docs/security.md): serving the network is a decision, made by flag (the
  // container image and deploy/ pass 0.0.0.0).
  std::string listen = "127.0.0.1:50051";   // FRESNEL_LISTEN
  std::string metrics = "127.0.0.1:9464";   // FRESNEL_METRICS; "off" disables
  std::string gpus = "all";               // FRESNEL_GPUS: "all", "none" or "0,2"
  // FRESNEL_INSTANCE: this server's name in job ids, ServerInfo and errors; "" = HOSTNAME:PORT
  // (gethostname() and --listen's port). Letters, digits and . _ : - only.
  std::string instance;
  // FRESNEL_STREAMS_PER_GPU. 4 (was 2): on the H200 machine one hologram Stream got 208-217
  // frames/s with 4 against 187 with 2, two at once 243-254 against 209 (docs/BENCHMARKS.md,
  // "Session 9"); the other services' [gpu] tests pass with it.
  int streams_per_gpu = 4;
  int cpu_workers = 2;                    // FRESNEL_CPU_WORKERS
  int queue_length = 64;                  // FRESNEL_QUEUE_LENGTH, per device
  int64_t max_message_bytes = 64 << 20;   // FRESNEL_MAX_MESSAGE_BYTES
  double drain_timeout_s = 30;            // FRESNEL_DRAIN_TIMEOUT
  // Interpolation limits.
  int max_rate = 1 << 16;                 // FRESNEL_MAX_RATE
  int64_t max_taps = 1 << 20;             // FRESNEL_MAX_TAPS
  int64_t max_output_samples = int64_t{1} << 31;  // FRESNEL_MAX_OUTPUT_SAMPLES
  // Phase unwrapping limits.
  int64_t unwrap_max_side = 32768;                 // FRESNEL_UNWRAP_MAX_SIDE, rows and cols each
  int64_t unwrap_max_pixels = int64_t{1} << 30;    // FRESNEL_UNWRAP_MAX_PIXELS, rows * cols
  // Asynchronous jobs (server/jobs.h).
  double job_ttl_s = 600;                          // FRESNEL_JOB_TTL: finished jobs kept this long
  int64_t job_memory_bytes = int64_t{4} << 30;     // FRESNEL_JOB_MEMORY_BYTES: bytes jobs hold
  int max_jobs = 64;                               // FRESNEL_MAX_JOBS: unfinished jobs accepted
  // Hologram limits (hologram::Limits; width and height stay <= 16384 each).
  int64_t hologram_max_pixels = int64_t{1} << 27;  // FRESNEL_HOLOGRAM_MAX_PIXELS, width * height
  int64_t hologram_max_points = int64_t{1} << 24;  // FRESNEL_HOLOGRAM_MAX_POINTS, per hologram
  // Server-wide caps on what live requests hold (server/budget.h).
  int max_streams = 1024;                          // FRESNEL_MAX_STREAMS: open streaming calls
  int64_t small_job_bytes = int64_t{64} << 10;   // FRESNEL_SMALL_JOB_BYTES: ANY jobs this small go to the CPU
  bool fault_injection = false;                   // FRESNEL_FAULT_INJECTION: AdminService.InjectFault
  int max_streams_per_client = 256;                // FRESNEL_MAX_STREAMS_PER_CLIENT: the same, each
  int64_t stream_state_bytes = int64_t{4} << 30;   // FRESNEL_STREAM_STATE_BYTES: derived state
  // Shared-memory regions of same-host clients (server/shm.h).
  int64_t shm_bytes = int64_t{8} << 30;            // FRESNEL_SHM_BYTES: all regions mapped; 0 = off
  double shm_ttl_s = 600;                          // FRESNEL_SHM_TTL: idle time before expiry
  int64_t staging_cache_bytes = int64_t{4} << 30;  // FRESNEL_STAGING_CACHE_BYTES: kept staging
  // FRESNEL_OVERLAP_CHUNK_BYTES: a CUDA Upfirdn / ResamplePoly on the direct path (x or y in a
  // region or a staging buffer) moves y in chunks of this many bytes on three streams, copies
  // overlapping the kernel (fresnel/interp/into.h IntoOptions); 0 = one H2D, kernel, D2H.
  int64_t overlap_chunk_bytes = int64_t{32} << 20;
  bool pin_regions = true;                         // FRESNEL_PIN_REGIONS: page-lock regions (GPUs)
  // Sessions (server/sessions.h): state kept on one device across calls.
  double session_ttl_s = 300;                      // FRESNEL_SESSION_TTL: idle time before expiry
  int max_sessions_per_device = 64;                // FRESNEL_MAX_SESSIONS_PER_DEVICE
  int max_sessions_per_client = 32;                // FRESNEL_MAX_SESSIONS_PER_CLIENT
  int64_t gpu_memory_bytes = 0;                    // FRESNEL_GPU_MEMORY_BYTES; 0 = the whole device
  int gpu_partitions = 1;                          // FRESNEL_GPU_PARTITIONS: pool devices per GPU
  int cpu_partitions = 1;                          // FRESNEL_CPU_PARTITIONS: pool devices of the CPU
  int64_t session_gpu_memory_bytes = 0;            // FRESNEL_SESSION_GPU_MEMORY_BYTES; 0 = 90 %
  int64_t session_cpu_memory_bytes = int64_t{8} << 30;  // FRESNEL_SESSION_CPU_MEMORY_BYTES
  // Volume render meshes (server/services/volume_service.h); the mesh cache is the sessions' cap.
  int64_t volume_max_points = int64_t{1} << 27;  // FRESNEL_VOLUME_MAX_POINTS, per mesh
  int64_t volume_max_tets = int64_t{1} << 28;    // FRESNEL_VOLUME_MAX_TETS, per mesh
  // Security (server/auth.h, docs/security.md). PEM files; TLS needs both cert and key, mutual
  // TLS adds the CA that signs client certificates.
  std::string tls_cert;       // FRESNEL_TLS_CERT
  std::string tls_key;        // FRESNEL_TLS_KEY
  std::string tls_client_ca;  // FRESNEL_TLS_CLIENT_CA
  // Bearer tokens, one client per line (`NAME TOKEN [admin]`), reloaded on SIGHUP; "" = no
  // authentication (every caller is the same client).
  std::string token_file;     // FRESNEL_TOKEN_FILE
  // /metrics asks for HTTP basic auth: user = an admin token's name, password = its token.
  bool metrics_auth = false;  // FRESNEL_METRICS_AUTH; needs token_file
  bool reflection = true;     // FRESNEL_REFLECTION: the grpc.reflection service
};

// Parses flags and environment. Returns the config, or a status whose message is the help text
// (code kCancelled, for --help/--version) or the parse error (kInvalidArgument).
absl::StatusOr<ServerConfig> ParseConfig(int argc, char** argv);

// `config.instance`, or HOSTNAME:PORT when it is empty; INVALID_ARGUMENT naming --instance for
// other characters than letters, digits and . _ : - or more than 253 of them.
absl::StatusOr<std::string> ResolveInstance(const ServerConfig& config);

// Resolves `gpus` against the visible device count.
absl::StatusOr<std::vector<int>> SelectGpus(const std::string& spec, int visible);

}  // namespace fresnel::server
