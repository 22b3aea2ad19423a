// fresnel::HologramClient: HologramService's calls. Render (one request; the outputs reassembled
// however many chunks they came in; a cloud too large for one message goes as one Stream frame
// in parts), RenderStream (holographic video over one Stream call) and Reconstruct (ASM, the
// field inline or in chunks). Shares a Client's channel, options and deadlines; thread-safe like
// it. Every call blocks until its answer arrives or its deadline passes.
//
// fresnel::Client's Render, RenderStream and Reconstruct are these calls (client.h documents
// each).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/client/client.h"
#include "fresnel/v1/hologram.grpc.pb.h"

namespace fresnel {

class HologramClient {
 public:
  // `client` must outlive this object.
  explicit HologramClient(Client* client);
  ~HologramClient();

  // config.max_chunk_bytes 0 = chunks that fit this client's max_message_bytes.
  absl::StatusOr<HologramRender> Render(v1::RenderRequest request, const CallOptions& call = {});
  // `next_frame` runs on a second thread; `on_frame` on this one, in frame order.
  absl::Status RenderStream(
      const std::function<bool(v1::HologramFrameRequest*)>& next_frame,
      const std::function<void(int64_t frame_index, const absl::Status& status,
                               HologramRender* result)>& on_frame,
      const CallOptions& call = {});
  absl::StatusOr<HologramReconstruction> Reconstruct(const v1::ReconstructConfig& config,
                                                     const HostArray& field,
                                                     const CallOptions& call = {});

 private:
  // Render's path for clouds larger than `cap`: one Stream frame sent in parts.
  absl::StatusOr<HologramRender> RenderInParts(v1::RenderRequest request, int64_t cap,
                                               const CallOptions& call);

  Client* client_;
  std::unique_ptr<v1::HologramService::Stub> stub_;
};

}  // namespace fresnel
