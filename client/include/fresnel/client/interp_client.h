// fresnel::InterpClient: InterpolationService's calls. Upfirdn, ResamplePoly, Resample and
// Decimate (unary: request and answer each in one message, or x and y in a shared-memory region),
// UpfirdnArray / ResamplePolyArray (an x of any size: unary, or through a staging region over
// WriteRegion/ReadRegion streams, the transfer of client/src/shm_client.cc) and ResampleStream
// (a long signal in chunks over one bidirectional stream). Shares a Client's channel, options and
// deadlines; thread-safe like it. Every call blocks until its answer arrives or its deadline
// passes.
//
// fresnel::Client's methods of the same names are these calls (client.h documents each).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "fresnel/client/client.h"
#include "fresnel/v1/interpolation.grpc.pb.h"

namespace fresnel {

class InterpClient {
 public:
  // `client` must outlive this object.
  explicit InterpClient(Client* client);
  ~InterpClient();

  absl::StatusOr<v1::InterpolationResponse> Upfirdn(const v1::UpfirdnRequest& request,
                                                    const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> ResamplePoly(const v1::ResamplePolyRequest& request,
                                                         const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> Resample(const v1::ResampleRequest& request,
                                                     const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> Decimate(const v1::DecimateRequest& request,
                                                     const CallOptions& call = {});

  // x and y in a shared-memory region (same-host clients; fresnel/client/shm.h).
  absl::StatusOr<v1::InterpolationResponse> Upfirdn(v1::UpfirdnRequest request,
                                                    const SharedRegion& region, int64_t x_offset,
                                                    int64_t y_offset, const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> ResamplePoly(v1::ResamplePolyRequest request,
                                                         const SharedRegion& region,
                                                         int64_t x_offset, int64_t y_offset,
                                                         const CallOptions& call = {});

  // An x of any size; the path (unary, one stream, parallel streams) follows `transfer`.
  absl::StatusOr<HostArray> UpfirdnArray(v1::UpfirdnRequest request, const HostArray& x,
                                         const TransferOptions& transfer = {},
                                         const CallOptions& call = {},
                                         TransferReport* report = nullptr);
  absl::StatusOr<HostArray> ResamplePolyArray(v1::ResamplePolyRequest request, const HostArray& x,
                                              const TransferOptions& transfer = {},
                                              const CallOptions& call = {},
                                              TransferReport* report = nullptr);

  // `x` ([n] or [channels, n]) in chunks of `chunk_samples` per channel; returns the
  // concatenated output (same rank as x).
  absl::StatusOr<HostArray> ResampleStream(
      const v1::ResampleStreamConfig& config, const HostArray& x, int64_t chunk_samples,
      const CallOptions& call = {},
      const std::function<void(int64_t, int64_t)>& on_progress = nullptr,
      v1::ExecutionInfo* info = nullptr);

 private:
  Client* client_;
  std::unique_ptr<v1::InterpolationService::Stub> stub_;
};

}  // namespace fresnel
