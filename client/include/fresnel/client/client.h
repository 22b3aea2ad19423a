// fresnel::Client: the C++ client library for a fresneld server.
//
// One method per RPC, each returning absl::StatusOr (the gRPC status code and message are kept),
// plus helpers that stream arrays too large for one message. Thread-safe: one Client may be used
// from many threads at once. Every call blocks until its response arrives or its deadline passes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/admin.grpc.pb.h"
#include "fresnel/v1/interpolation.grpc.pb.h"

namespace fresnel {

struct ClientOptions {
  std::string address = "localhost:50051";  // HOST:PORT
  // Largest message either side may send; the server's own cap is in ServerInfo.limits.
  int64_t max_message_bytes = 64 << 20;
  // Deadline applied to calls whose CallOptions do not set one; zero = none.
  std::chrono::milliseconds default_timeout{0};
  // Seconds to wait for the channel to connect in Connect(); zero = do not wait.
  double connect_timeout_s = 0;
};

struct CallOptions {
  // Overrides ClientOptions::default_timeout when non-zero.
  std::chrono::milliseconds timeout{0};
};

// Health of one service (grpc.health.v1); "" is the whole server.
enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

class Client {
 public:
  // Creates the channel. With connect_timeout_s > 0, fails with Unavailable when the server
  // cannot be reached in that time.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();

  absl::StatusOr<v1::ServerInfo> GetServerInfo(const CallOptions& call = {});
  absl::StatusOr<v1::ServerStats> GetStats(const CallOptions& call = {});
  absl::StatusOr<ServingStatus> CheckHealth(const std::string& service = "",
                                            const CallOptions& call = {});

  absl::StatusOr<v1::InterpolationResponse> Upfirdn(const v1::UpfirdnRequest& request,
                                                    const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> ResamplePoly(const v1::ResamplePolyRequest& request,
                                                         const CallOptions& call = {});

  // Streams `x` ([n] or [channels, n]) through ResampleStream in chunks of `chunk_samples` per
  // channel and returns the concatenated output (same rank as x). `config` names the operation;
  // its x field is filled in here. `on_progress(samples_in, samples_out)` is called after every
  // response when given. `info`, when non-null, receives the stream's execution times: queue
  // wait, h2d, compute, d2h and total (each chunk's arrival -> response on the server) summed
  // over the responses, device the distinct devices used,
  // comma-separated. Chunks travel as [channels, k] (also for 1-D x); a response whose
  // ItemStatus is not OK ends the call with that status ("chunk N: message").
  absl::StatusOr<HostArray> ResampleStream(
      const v1::ResampleStreamConfig& config, const HostArray& x, int64_t chunk_samples,
      const CallOptions& call = {},
      const std::function<void(int64_t, int64_t)>& on_progress = nullptr,
      v1::ExecutionInfo* info = nullptr);

  const ClientOptions& options() const { return options_; }

 private:
  struct Impl;
  Client(ClientOptions options, std::unique_ptr<Impl> impl);
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

// Converts a grpc::Status-like pair to absl::Status (same code, same message). Exposed for tests.
absl::Status FromGrpcStatus(int code, const std::string& message);

// The sample-axis helpers behind ResampleStream, for callers that stream on their own.
// A signal is [n] (one channel) or [channels, n]; "samples" always counts per channel.

// Columns [begin, begin + count) of `x` as a new [channels, count] array (always 2-D, a copy).
// InvalidArgument when x is not 1-D or 2-D or the range lies outside [0, n].
absl::StatusOr<HostArray> SliceSamples(const HostArray& x, int64_t begin, int64_t count);

// Concatenates pieces of shape [channels, k_i] (or [k_i] when channels == 1) along the sample
// axis into [channels, sum k_i]. Every piece must have `dtype` and `channels` rows.
absl::StatusOr<HostArray> ConcatSamples(const std::vector<HostArray>& pieces, int64_t channels,
                                        DType dtype);

// Samples per channel for one ResampleStream chunk such that both the request (the chunk) and
// the response (about up/down times as many outputs) stay below a quarter of
// `max_message_bytes`; at least 1.
int64_t StreamChunkSamples(int64_t max_message_bytes, int64_t channels, DType dtype, int up,
                           int down);

}  // namespace fresnel
