// The one place where absl::Status becomes grpc::Status (and code names become metric labels).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "fresnel/v1/common.pb.h"
#include "grpcpp/support/status.h"

namespace fresnel::server {

grpc::Status ToGrpcStatus(const absl::Status& status);
// The per-item status of a stream's answers (a frame, a chunk, a job): the same code and message.
void ToItemStatus(const absl::Status& status, v1::ItemStatus* out);
// "OK", "INVALID_ARGUMENT", ...: the `code` label of the request metrics.
std::string CodeName(absl::StatusCode code);

}  // namespace fresnel::server
