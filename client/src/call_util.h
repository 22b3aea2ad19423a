// Helpers shared by the client's source files (not installed): gRPC status to absl::Status, the
// per-call deadline, unary calls, the read loop of server streams and chunked writes.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <utility>

#include "fresnel/client/client.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel {
class SharedRegion;
}

namespace fresnel::internal {

// Every NdArray of `response` that names a region (shm set) is copied back out of the live
// SharedRegion of `client` of that name into its data (shm cleared): results written to a region
// (a request's out_shm) then parse as inline ones. FAILED_PRECONDITION naming the field for a
// region that is not a live SharedRegion of this client (shm_client.cc keeps the list).
absl::Status TakeRegionArrays(const Client* client, google::protobuf::Message* response);
// The array a response's NdArray names in a live SharedRegion of `client`, as a view of it
// (SharedRegion::View; CallOptions::results_in_region). Errors as TakeRegionArrays's.
absl::StatusOr<HostArray> ViewRegionArray(const Client* client, const v1::NdArray& array,
                                          const std::string& path);
void AddLiveRegion(const Client* client, const std::string& name, const SharedRegion* region);
void RemoveLiveRegion(const Client* client, const std::string& name, const SharedRegion* region);

inline absl::Status FromGrpc(const grpc::Status& status) {
  return FromGrpcStatus(static_cast<int>(status.error_code()), status.error_message());
}

// call.timeout < 0: no deadline; 0: the client's default_timeout (none when that is 0).
inline void ApplyDeadline(grpc::ClientContext* context, const ClientOptions& options,
                          const CallOptions& call) {
  if (call.timeout.count() < 0) return;
  const std::chrono::milliseconds timeout =
      call.timeout.count() > 0 ? call.timeout : options.default_timeout;
  if (timeout.count() > 0) context->set_deadline(std::chrono::system_clock::now() + timeout);
}

// One unary call: `method(context, request, &response)` under the call's deadline.
template <class Request, class Response, class Method>
absl::StatusOr<Response> Unary(const ClientOptions& options, const CallOptions& call,
                               const Request& request, Method method) {
  grpc::ClientContext context;
  ApplyDeadline(&context, options, call);
  Response response;
  grpc::Status status = method(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

// Reads every message of a server stream (a ClientReader, or the read side of a
// ClientReaderWriter) into `on_message(Message*)`, which may move out of it. When on_message
// returns an error, the call is cancelled, the messages still coming are drained and that error
// is returned; otherwise the stream's own status. `before_finish`, when given, runs after the last
// Read and before Finish (a writer thread is joined there).
template <typename Message, typename Stream, typename OnMessage>
absl::Status ReadAll(grpc::ClientContext* context, Stream* stream, const OnMessage& on_message,
                     const std::function<void()>& before_finish = nullptr) {
  absl::Status failure;
  Message message;
  while (failure.ok() && stream->Read(&message)) failure = on_message(&message);
  if (!failure.ok()) {
    context->TryCancel();
    while (stream->Read(&message)) {
    }
  }
  if (before_finish) before_finish();
  const grpc::Status status = stream->Finish();
  if (!failure.ok()) return failure;
  return FromGrpc(status);
}

// Writes `array` as chunks of at most `chunk_bytes` data bytes (one, for an empty array), each in
// the message `wrap(chunk, &message)` makes. False when a Write failed (Finish says why).
template <typename Req, typename Wrap>
bool WriteArrayChunks(grpc::ClientWriter<Req>* writer, const HostArray& array,
                      int64_t chunk_bytes, const Wrap& wrap) {
  const int64_t total = static_cast<int64_t>(array.nbytes());
  for (int64_t offset = 0; offset < total || offset == 0; offset += chunk_bytes) {
    v1::ArrayChunk chunk = ArrayChunkAt(array, offset, chunk_bytes);
    const bool last = chunk.last();
    Req message;
    wrap(std::move(chunk), &message);
    if (!writer->Write(message)) return false;
    if (last) break;
  }
  return true;
}

}  // namespace fresnel::internal
