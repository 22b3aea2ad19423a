// Wire encoding of the two grpc.health.v1 messages. Debian's libgrpc++-dev ships no
// health.proto, and generating our own copy of it would clash (same file and message names in
// the protobuf descriptor pool) with any program that also links a generated health.proto. The
// messages are tiny, so they are encoded by hand and sent through grpc::GenericStub:
//   HealthCheckRequest  { string service = 1; }
//   HealthCheckResponse { ServingStatus status = 1; }  // UNKNOWN 0, SERVING 1, NOT_SERVING 2,
//                                                       // SERVICE_UNKNOWN 3
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fresnel::internal {

inline constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

std::string EncodeHealthCheckRequest(const std::string& service);
// The raw `status` enum value (0 when absent); InvalidArgument for malformed bytes.
absl::StatusOr<int> DecodeHealthCheckResponse(const std::string& bytes);

}  // namespace fresnel::internal
