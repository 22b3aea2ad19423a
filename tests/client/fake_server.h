// A tiny in-process stand-in for fresneld, for the client library and CLI tests only (the real
// server is tested end to end in tests/server/). It serves:
//   AdminService      fixed ServerInfo (limits.max_message_bytes = kFakeMessageCap) and stats
//   Upfirdn           y = 2 x (same shape); request_id "slow" sleeps 300 ms; up == 99 fails
//                     with INVALID_ARGUMENT "up: 99 exceeds the limit of 64"
//   ResamplePoly      sample-and-hold to ceil(n up / down) samples per channel
//   ResampleStream    answers chunk i with 2 * chunk and the final flush with kFakeTail zeros per
//                     channel; checks the protocol (config first with x = [channels, 0], chunks of
//                     [channels, k], `end` on the last one) and fails with INVALID_ARGUMENT when it
//                     is broken; request_id "fail" makes chunk 2 report ItemStatus code 3
//   grpc.health.v1    gRPC's default health service ("" is SERVING)
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace fresnel::testing {

inline constexpr int64_t kFakeMessageCap = 1 << 20;
inline constexpr int64_t kFakeTail = 3;

class FakeServer {
 public:
  FakeServer();
  ~FakeServer();
  const std::string& address() const { return address_; }

 private:
  struct Services;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace fresnel::testing
