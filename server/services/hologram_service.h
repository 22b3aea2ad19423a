// fresnel.v1.HologramService: point-cloud holograms (Render, Stream) and ASM reconstruction
// (Reconstruct) through fresnel::hologram, as DevicePool jobs. Handlers parse and validate on
// the gRPC thread, compute runs on a pool worker, and results larger than one message are sent
// as ArrayChunk pieces one write at a time (hologram.proto describes the message sequence).
#pragma once

#include "fresnel/hologram/hologram.h"
#include "fresnel/v1/hologram.grpc.pb.h"
#include "server/call.h"

namespace fresnel::server {

class HologramService final : public v1::HologramService::CallbackService {
 public:
  // `limits` are the server's (--hologram-max-pixels, --hologram-max-points).
  HologramService(ServiceContext* ctx, const hologram::Limits& limits)
      : ctx_(ctx), limits_(limits) {}

  grpc::ServerWriteReactor<v1::RenderResponse>* Render(grpc::CallbackServerContext* context,
                                                       const v1::RenderRequest* request) override;
  grpc::ServerBidiReactor<v1::HologramFrameRequest, v1::HologramFrameResponse>* Stream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerReadReactor<v1::ReconstructRequest>* Reconstruct(
      grpc::CallbackServerContext* context, v1::ReconstructResponse* response) override;

 private:
  ServiceContext* ctx_;
  hologram::Limits limits_;
};

}  // namespace fresnel::server
