// fresneld's configuration: command-line flags, each also settable by an environment variable
// (the flag wins). See ParseConfig's --help for the list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fresnel::server {

struct ServerConfig {
  std::string listen = "0.0.0.0:50051";   // FRESNEL_LISTEN
  std::string metrics = "0.0.0.0:9464";   // FRESNEL_METRICS; "off" disables
  std::string gpus = "all";               // FRESNEL_GPUS: "all", "none" or "0,2"
  int streams_per_gpu = 2;                // FRESNEL_STREAMS_PER_GPU
  int cpu_workers = 2;                    // FRESNEL_CPU_WORKERS
  int queue_length = 64;                  // FRESNEL_QUEUE_LENGTH, per device
  int64_t max_message_bytes = 64 << 20;   // FRESNEL_MAX_MESSAGE_BYTES
  double drain_timeout_s = 30;            // FRESNEL_DRAIN_TIMEOUT
  // Interpolation limits.
  int max_rate = 1 << 16;                 // FRESNEL_MAX_RATE
  int64_t max_taps = 1 << 20;             // FRESNEL_MAX_TAPS
  int64_t max_output_samples = int64_t{1} << 31;  // FRESNEL_MAX_OUTPUT_SAMPLES
};

// Parses flags and environment. Returns the config, or a status whose message is the help text
// (code kCancelled, for --help/--version) or the parse error (kInvalidArgument).
absl::StatusOr<ServerConfig> ParseConfig(int argc, char** argv);

// Resolves `gpus` against the visible device count.
absl::StatusOr<std::vector<int>> SelectGpus(const std::string& spec, int visible);

}  // namespace fresnel::server
