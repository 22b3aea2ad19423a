// FresnelServer: assembles fresneld (device pool, metrics, services, health, reflection) so that
// main() and the tests start the very same server.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace fresnel::server {

class FresnelServer {
 public:
  // Builds the device pool and starts serving on config.listen (port 0 picks a free port).
  static absl::StatusOr<std::unique_ptr<FresnelServer>> Start(const ServerConfig& config);
  ~FresnelServer();

  // The bound gRPC port.
  int port() const;
  // This server's name (ServerConfig::instance, resolved): the suffix of its job ids.
  const std::string& instance() const;
  // The Prometheus text of all metrics (what /metrics serves).
  std::string MetricsText() const;

  // Reads --token-file again (SIGHUP): later calls are checked against the new tokens. On error
  // the old tokens stay in force. FAILED_PRECONDITION when the server has no token file.
  absl::Status ReloadTokens();

  // Graceful stop: health turns NOT_SERVING, new work is refused with UNAVAILABLE, accepted work
  // finishes (up to config.drain_timeout_s), then the gRPC server stops. Returns whether all
  // accepted work finished in time. Idempotent.
  bool Shutdown();

 private:
  struct Impl;
  explicit FresnelServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fresnel::server
