// Helpers shared by the client's source files (not installed): gRPC status to absl::Status and
// the per-call deadline.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "fresnel/client/client.h"

namespace fresnel::internal {

inline absl::Status FromGrpc(const grpc::Status& status) {
  return FromGrpcStatus(static_cast<int>(status.error_code()), status.error_message());
}

// call.timeout < 0: no deadline; 0: the client's default_timeout (none when that is 0).
inline void ApplyDeadline(grpc::ClientContext* context, const ClientOptions& options,
                          const CallOptions& call) {
  if (call.timeout.count() < 0) return;
  const std::chrono::milliseconds timeout =
      call.timeout.count() > 0 ? call.timeout : options.default_timeout;
  if (timeout.count() > 0) context->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace fresnel::internal
