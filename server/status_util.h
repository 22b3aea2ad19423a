// The one place where absl::Status becomes grpc::Status (and code names become metric labels).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace fresnel::server {

grpc::Status ToGrpcStatus(const absl::Status& status);
// "OK", "INVALID_ARGUMENT", ...: the `code` label of the request metrics.
std::string CodeName(absl::StatusCode code);

}  // namespace fresnel::server
