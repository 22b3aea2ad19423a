// fresnel::UnwrapClient: the UnwrapService calls. Unwrap is synchronous (request and result each
// in one message); larger images go through jobs: Submit (arrays that do not fit next to the rest
// of the request are sent in chunks), Watch, GetJob, GetResult (the result reassembled from its
// chunks), Cancel, List. Job calls use the client's pick_first job channel, so that a job's calls
// reach the server that owns it. Shares a Client's channels, options and deadlines; thread-safe
// like it. Every call blocks until its answer arrives or its deadline passes.
//
// fresnel::Client's Unwrap, SubmitUnwrap, WatchUnwrap, GetUnwrapJob, GetUnwrapResult,
// CancelUnwrap and ListUnwrapJobs are these calls (client.h documents each).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fresnel/client/client.h"
#include "fresnel/v1/unwrap.grpc.pb.h"

namespace fresnel {

class UnwrapClient {
 public:
  // `client` must outlive this object.
  explicit UnwrapClient(Client* client);
  ~UnwrapClient();

  absl::StatusOr<UnwrapResult> Unwrap(const v1::UnwrapRequest& request,
                                      const CallOptions& call = {});
  // Takes the request by value: pass it with std::move to avoid copying the arrays.
  absl::StatusOr<v1::SubmitResponse> Submit(v1::UnwrapRequest request,
                                            const SubmitOptions& options = {},
                                            const CallOptions& call = {});
  // Blocks until the job is terminal, calling `on_state` for every state (the current one
  // first); a FAILED or CANCELLED job is an OK return (its status is in the UnwrapJob).
  absl::StatusOr<v1::UnwrapJob> Watch(
      const std::string& job_id,
      const std::function<void(const v1::UnwrapJob&)>& on_state = nullptr,
      const CallOptions& call = {});
  absl::StatusOr<v1::UnwrapJob> GetJob(const std::string& job_id, const CallOptions& call = {});
  // `max_chunk_bytes` 0 = the server's choice (just under its message cap).
  // `out_shm`: the arrays are written to that region of this client (a live SharedRegion, read
  // back into the result) instead of sent in chunks.
  absl::StatusOr<UnwrapResult> GetResult(const std::string& job_id, int64_t max_chunk_bytes = 0,
                                         const CallOptions& call = {},
                                         const v1::ShmRef* out_shm = nullptr);
  absl::StatusOr<v1::UnwrapJob> Cancel(const std::string& job_id, const CallOptions& call = {});
  absl::StatusOr<v1::ListUnwrapJobsResponse> List(const v1::ListJobsRequest& request = {},
                                                  const CallOptions& call = {});

 private:
  Client* client_;
  std::unique_ptr<v1::UnwrapService::Stub> unwrap_;  // the main channel (Unwrap)
  std::unique_ptr<v1::UnwrapService::Stub> jobs_;    // the job channel
};

}  // namespace fresnel
