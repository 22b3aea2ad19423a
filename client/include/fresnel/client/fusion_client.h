// fresnel::FusionSession: one FusionService.Session stream (docs/fusion_service.md) — a dense
// RGB-D reconstruction on one server device, alive until Close() or the object's destruction.
//
// Two ways to use it:
//  - one request at a time: ProcessFrame / Render / ExtractMesh / Snapshot each send one message
//    and block until its answer (no other answer may be outstanding);
//  - pipelined frames: one thread calls SendFrame (it blocks while the server's read limit, then
//    HTTP/2 flow control, hold it back), another calls ReadResponse for the answers, in order.
// Errors: a message the server refused (a bad frame, the budget full) is that call's status, and
// the session goes on; an ended stream is the stream's final status (NOT_FOUND "expired" after
// the TTL, UNAVAILABLE while the server drains, ...) and every later call fails with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/client/client.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/fusion.grpc.pb.h"

namespace fresnel {

struct FusionMesh {
  std::string ply;  // binary little-endian PLY
  int64_t vertices = 0;
  int64_t triangles = 0;
  v1::ExecutionInfo info;
};

struct FusionSnapshot {
  v1::FusionConfig config;  // what Restore needs next to the bytes
  std::string bytes;
  v1::ExecutionInfo info;
};

class FusionSession {
 public:
  // Opens a session with `config` and waits for the server's `opened` answer. `call.timeout`
  // bounds the whole stream (0 = the client's default; < 0 = none).
  static absl::StatusOr<std::unique_ptr<FusionSession>> Open(Client& client,
                                                             const v1::FusionConfig& config,
                                                             const CallOptions& call = {});
  // Opens a session from a snapshot (Snapshot()'s config and bytes), sent in chunks.
  static absl::StatusOr<std::unique_ptr<FusionSession>> Restore(Client& client,
                                                                const v1::FusionConfig& config,
                                                                absl::string_view snapshot,
                                                                const CallOptions& call = {});
  // Cancels the stream if it was not closed: the server frees the session.
  ~FusionSession();
  FusionSession(const FusionSession&) = delete;
  FusionSession& operator=(const FusionSession&) = delete;

  const v1::FusionOpened& opened() const { return opened_; }
  const std::string& session_id() const { return opened_.session_id(); }

  // One frame, blocking until its answer.
  absl::StatusOr<v1::FusionFrameResult> ProcessFrame(const v1::FusionFrame& frame);
  // A view; the image as the render mode says (fusion.proto).
  absl::StatusOr<HostArray> Render(const v1::FusionRenderRequest& request);
  absl::StatusOr<FusionMesh> ExtractMesh(int64_t max_chunk_bytes = 0);
  absl::StatusOr<FusionSnapshot> Snapshot(int64_t max_chunk_bytes = 0);
  // Sends close, waits for its answer and the stream's end; returns the frames processed.
  absl::StatusOr<int64_t> Close();

  // Pipelined frames: sends one and returns its sequence number (FusionResponse.seq).
  absl::StatusOr<int64_t> SendFrame(const v1::FusionFrame& frame);
  // The same, moving the frame's bytes into the request instead of copying them.
  absl::StatusOr<int64_t> SendFrame(v1::FusionFrame&& frame);
  // The next answer in order (its status may be an error for that message alone). Fails with
  // the stream's final status once it ended.
  absl::StatusOr<v1::FusionResponse> ReadResponse();

 private:
  FusionSession() = default;
  absl::StatusOr<int64_t> Send(const v1::FusionRequest& request);
  // The stream's final status (after a failed read or write).
  absl::Status Ended();
  // After a write failed (opening, closing): the status the server ended the stream with
  // (`send_status` if it answered instead).
  absl::Status RefusedStatus(const absl::Status& send_status);
  // ReadResponse for `seq`, with its item status turned into an error.
  absl::StatusOr<v1::FusionResponse> Expect(int64_t seq);
  // Reads the chunks of a mesh or snapshot answer into `bytes`; the first chunk is returned.
  absl::StatusOr<v1::FusionBytesChunk> ReadChunks(int64_t seq, bool mesh, std::string* bytes);
  // Sends a mesh or snapshot request and reads its answer (ReadChunks).
  absl::StatusOr<v1::FusionBytesChunk> Fetch(bool mesh, int64_t max_chunk_bytes,
                                             std::string* bytes);
  static absl::StatusOr<std::unique_ptr<FusionSession>> Start(Client& client,
                                                              const CallOptions& call);

  const Client* client_ = nullptr;  // whose SharedRegions a render's out_shm may name
  std::unique_ptr<v1::FusionService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::FusionRequest, v1::FusionResponse>> stream_;
  v1::FusionOpened opened_;
  int64_t next_seq_ = 0;
  int64_t chunk_bytes_ = 0;
  bool ended_ = false;
  absl::Status final_;
};

}  // namespace fresnel
