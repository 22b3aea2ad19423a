// Workloads register: what the server knows of each workload it serves is one `Workload`
// descriptor, and the list of them (Workloads(), server/workloads.cc) is the one place a new
// workload is added. FresnelServer builds and registers each one's gRPC service and health
// entry from it; AdminService.GetServerInfo asks each one to fill its group of limits.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fresnel/v1/admin.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/call.h"
#include "server/config.h"

namespace fresnel::server {

struct Workload {
  // Its name in fresnel info and ServerInfo.limits ("interpolation", "unwrap", ...).
  std::string name;
  // The full gRPC name of the service it registers ("fresnel.v1.InterpolationService"): listed
  // in ServerInfo.services and given a grpc.health.v1 entry.
  std::string service;
  // Builds the service from the server's configuration (its limits come from `config`, shared
  // state from `ctx`, which outlives the service). Called once, before the server starts.
  std::function<std::unique_ptr<grpc::Service>(ServiceContext* ctx, const ServerConfig& config)>
      make_service;
  // Fills the workload's group of ServerInfo.limits from the same configuration (and the
  // deprecated flat fields it reported before the groups existed).
  std::function<void(const ServerConfig& config, v1::Limits* limits)> fill_limits;
  // Anything else the workload reports in ServerInfo (may be empty).
  std::function<void(const ServerConfig& config, v1::ServerInfo* info)> fill_info;
};

// Every workload fresneld serves, in registration order.
const std::vector<Workload>& Workloads();

// The server-wide groups of ServerInfo.limits (transport, queues, streams, shared memory, GPU
// memory, the job store, sessions) and their deprecated flat fields.
void FillServerLimits(const ServerConfig& config, v1::Limits* limits);

}  // namespace fresnel::server
