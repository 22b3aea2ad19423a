// fresnel::Client: the C++ client library for a fresneld server.
//
// One method per RPC, each returning absl::StatusOr (the gRPC status code and message are kept),
// plus helpers that stream arrays too large for one message. Thread-safe: one Client may be used
// from many threads at once. Every call blocks until its response arrives or its deadline passes.
//
// Each service's calls are a class of their own on this client's channels, options and
// deadlines, and the methods here forward to them: AdminClient, InterpClient, HologramClient,
// UnwrapClient (fresnel/client/<x>_client.h); VolumeClient and FusionSession exist only as such.
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
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "fresnel/v1/admin.grpc.pb.h"
#include "fresnel/v1/interpolation.grpc.pb.h"
#include "fresnel/v1/unwrap.grpc.pb.h"
#include "fresnel/v1/hologram.grpc.pb.h"
#include "fresnel/v1/shm.grpc.pb.h"

namespace fresnel {

class SharedRegion;  // fresnel/client/shm.h
class UnwrapClient;    // fresnel/client/unwrap_client.h
class AdminClient;     // fresnel/client/admin_client.h
class InterpClient;    // fresnel/client/interp_client.h
class HologramClient;  // fresnel/client/hologram_client.h

struct ClientOptions {
  // HOST:PORT; a gRPC URI such as "dns:///fresnel.ns.svc:50051" (every address the name resolves
  // to) or "ipv4:10.0.0.1:50051,10.0.0.2:50051"; or a comma list of numeric addresses
  // ("127.0.0.1:50051,127.0.0.1:50052", "localhost" allowed, IPv6 in brackets). See ChannelTarget.
  std::string address = "localhost:50051";
  // Largest message either side may send; the server's own cap is in ServerInfo.limits.
  int64_t max_message_bytes = 64 << 20;
  // Deadline applied to calls whose CallOptions do not set one; zero = none.
  std::chrono::milliseconds default_timeout{0};
  // Seconds to wait for the channel to connect in Connect(); zero = do not wait.
  double connect_timeout_s = 0;

  // Security (docs/security.md). TLS when `tls` is true or any tls_* file is set: the server's
  // certificate is verified against tls_ca_file (PEM; empty = the system's roots) and must name
  // the address's host, or tls_server_name when set. tls_cert_file + tls_key_file (PEM): this
  // client's certificate, for servers with mutual TLS (--tls-client-ca).
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  // Bearer token sent with every call (servers with --token-file); "" = none. Without TLS it is
  // only sent to loopback servers (Connect refuses other addresses; gRPC's local credentials
  // check the peer), never in the clear across a network.
  std::string token;
  // True: this client's channels never share a TCP connection with another Client of the
  // process (a subchannel pool of their own). gRPC otherwise gives channels to the same address
  // with the same arguments one connection, whose HTTP/2 stream and I/O thread carry ~1-2 GB/s
  // (docs/transport.md): what `fresnel bench --op fuse` does to stand for one client per session.
  bool own_connection = false;
};

struct CallOptions {
  // Overrides ClientOptions::default_timeout when positive; negative = no deadline at all.
  std::chrono::milliseconds timeout{0};
  // A result the server wrote into a SharedRegion of this Client (the request's out_shm) is
  // returned as views of the region (SharedRegion::View: no copy; valid while the region lives,
  // and showing what a later call writes to that range) instead of copies read out of it.
  // Honoured by Unwrap; the other calls copy.
  bool results_in_region = false;
};

// How UpfirdnArray / ResamplePolyArray move a big array (docs/transport.md).
struct TransferOptions {
  // x + y up to this many bytes (and within the message cap): one unary call.
  int64_t unary_max_bytes = 16 << 20;
  // x + y from this many bytes: `streams` parallel streams; between the two: one stream.
  int64_t parallel_min_bytes = 64 << 20;
  int streams = 4;                 // 1..16, each on its own connection
  int64_t chunk_bytes = 4 << 20;   // data bytes per message
  // Through a staging region the call is cut into at most `segments` (1..16) independent
  // sub-calls, pipelined: x of segment k+1 is uploaded while segment k computes on the server and
  // segment k-1 comes back, so upload, compute and download overlap instead of following each
  // other. Segments are channel rows when x has at least `segments` of them, else windows of the
  // filtered axis (each sub-call reads the filter's halo of x and its edge outputs are dropped).
  // About `segment_bytes` of x + y each, at least; 1 = one call. Taken only where the result is
  // the same bits as one call: mode / padtype constant, real taps, the result in x's dtype
  // (float32/64, complex64/128), the filtered axis the last non-trivial one.
  int segments = 8;
  int64_t segment_bytes = 32 << 20;
  // A new y (not the caller's, reused) is never zero-filled. true: its pages are faulted in on a
  // thread of its own while x is uploaded (fresnel/core/uninitialized_array.h, kPrefault); false
  // (the default since session 9): by the download threads as they write each segment's y
  // (kOnWrite). On the H200 machine the download threads' faults cost less than the prefault
  // during the upload: 1 GiB 6.04 GB/s against 5.68, 64 MiB 4.27 against 3.55 (docs/transport.md).
  bool prefault_y = false;
};

namespace internal {
// How an Upfirdn / ResamplePoly call may be cut into independent sub-calls along the filtered
// axis (shm_client.cc). Output sample j of the whole call reads x samples within
// [j * down / up - halo, j * down / up + halo] and is the same bits as output j - shift of a
// sub-call on x[s, e) for any s that is a multiple of down / gcd(up, down) (shift = s * up / down),
// when all of those samples inside the signal lie in [s, e).
struct FilterSplit {
  bool ok = false;       // false: one call only
  int axis = -1;         // the filtered axis, normalised
  int64_t up = 1, down = 1;  // ResamplePoly: reduced by their gcd
  int64_t halo = 0;      // x samples, each side
  int64_t taps = 0;      // Upfirdn: the filter's length
  bool resample_poly = false;
  int64_t OutputLength(int64_t n) const;  // the call's output samples for n input samples
};
}  // namespace internal

// What a transfer did, for benchmarks and logs.
struct TransferReport {
  const char* path = "unary";  // "unary", "stream" (one) or "parallel"
  int streams = 0;
  int segments = 0;  // sub-calls through the staging region (0: unary)
  // Wall seconds from the start to the last byte of x uploaded, from there to the last call's
  // answer, and from there to the last byte of y received: their sum is the transfer's time
  // (with segments the stages overlap, and each part is what the one before did not hide).
  double upload_s = 0, call_s = 0, download_s = 0;
  // The server's stages: one call's, or with segments the sum over them (device: the first's).
  v1::ExecutionInfo info;
};

// An unwrapped image with everything the server said about it (Unwrap, or GetUnwrapResult for a
// job).
struct UnwrapResult {
  std::string request_id;
  v1::UnwrapMethod method = v1::UNWRAP_METHOD_GOLDSTEIN;
  HostArray unwrapped;  // [rows, cols], the phase's dtype
  // GOLDSTEIN with options.return_maps (the default); empty (ndim() == 0) otherwise.
  HostArray residues;   // int16
  HostArray cuts;       // uint8
  HostArray regions;    // int32
  HostArray unreached;  // uint8
  v1::UnwrapStats stats;
  v1::UnwrapStageSeconds stage_seconds;
  v1::ExecutionInfo info;
  // A job submitted with out_shm whose result could not be written to that region when it
  // finished (the result then came in chunks): the server's reason. Empty otherwise.
  std::string out_shm_error;
};

struct SubmitOptions {
  // Same key, same job: a retried Submit returns the job the first one created.
  std::string idempotency_key;
  // Requests larger than this travel as a header plus array chunks. 0 = the smaller of
  // ClientOptions::max_message_bytes and the server's cap (asked once with GetServerInfo).
  int64_t max_message_bytes = 0;
};

// A rendered hologram (HologramService.Render, or one frame of RenderStream), its chunks
// reassembled. Outputs that were not requested are empty (ndim() == 0).
struct HologramRender {
  int64_t frame_index = 0;  // RenderStream: the frame's 0-based index
  // What ran: algorithm, precision, gemm_inner_dim, point_batches, points, width, height,
  // reconstruction_scale, info (ExecutionInfo), request_id. Its array fields are left empty.
  v1::HologramResultHeader header;
  HostArray field;           // complex64 [height, width]
  HostArray phase;           // uint8 [height, width]
  HostArray amplitude;       // float32 [height, width]
  HostArray reconstruction;  // uint8 [height, width]
};

// An ASM reconstruction (HologramService.Reconstruct).
struct HologramReconstruction {
  std::string request_id;
  HostArray image;  // uint8 [height, width]
  double scale = 0;  // max |U|: the amplitude shown as 255
  v1::ExecutionInfo info;
};

// The channel credentials `options` ask for: TLS (optionally with a client certificate) and/or a
// bearer token, or plaintext. INVALID_ARGUMENT naming the option for an unreadable file, a
// certificate without its key, or a token without TLS to an address that is not loopback.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options);
// The channel arguments besides credentials that security adds (tls_server_name).
void AddSecurityChannelArgs(const ClientOptions& options, grpc::ChannelArguments* args);

// Health of one service (grpc.health.v1); "" is the whole server.
enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

// The gRPC target for ClientOptions::address. A single HOST:PORT and any URI (a "scheme:" prefix:
// dns:, ipv4:, ipv6:, unix:) pass through; a comma list of numeric addresses becomes "ipv4:a,b"
// or "ipv6:[a]:p,[b]:q" ("localhost" counts as 127.0.0.1). INVALID_ARGUMENT for a list that
// names a host (use dns:///NAME:PORT) or mixes IPv4 and IPv6, or an empty entry.
absl::StatusOr<std::string> ChannelTarget(const std::string& address);

// Many servers behind one address (a list, or a name with several addresses): stateless calls
// (interpolation, Unwrap, hologram, admin, health) are spread by gRPC's round_robin over the
// servers that pass grpc.health.v1 (a draining server drops out); a stream stays on the server it
// started on. Job calls (SubmitUnwrap, WatchUnwrap, GetUnwrapJob, GetUnwrapResult, CancelUnwrap,
// ListUnwrapJobs) go through a second, pick_first channel so that a job's calls reach the server
// that owns it; each Client shuffles a list once, so that many clients spread their jobs. Job ids
// end in "@instance"; a server asked for another instance's job answers NOT_FOUND naming both.
class Client {
 public:
  // Creates the channel. With connect_timeout_s > 0, fails with Unavailable when the server
  // cannot be reached in that time.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();

  absl::StatusOr<v1::ServerInfo> GetServerInfo(const CallOptions& call = {});
  absl::StatusOr<v1::ServerStats> GetStats(const CallOptions& call = {});
  // The server's fault switch (fresneld --fault-injection; an admin RPC under --token-file):
  // takes `device_id` out of placement, or poisons a GPU's context for real.
  absl::StatusOr<v1::InjectFaultResponse> InjectFault(const std::string& device_id,
                                                      v1::FaultKind kind,
                                                      const CallOptions& call = {});
  absl::StatusOr<ServingStatus> CheckHealth(const std::string& service = "",
                                            const CallOptions& call = {});

  absl::StatusOr<v1::InterpolationResponse> Upfirdn(const v1::UpfirdnRequest& request,
                                                    const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> ResamplePoly(const v1::ResamplePolyRequest& request,
                                                         const CallOptions& call = {});
  // scipy.signal.resample (FFT method) and scipy.signal.decimate (FIR) on the server.
  absl::StatusOr<v1::InterpolationResponse> Resample(const v1::ResampleRequest& request,
                                                     const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> Decimate(const v1::DecimateRequest& request,
                                                     const CallOptions& call = {});

  // The same calls with x and y in a shared-memory region (same-host clients; see
  // fresnel/client/shm.h and docs/transport.md). `request.x` carries dtype and shape only (its
  // data must be empty): its bytes are read from `region` at `x_offset`; the server writes y into
  // `region` at `y_offset` (the region must hold it: channels * output samples * itemsize bytes
  // from there) and the response's y carries dtype, shape and the ShmRef, no bytes (read it with
  // SharedRegion::Read, or in place at region.data() + y_offset). Neither array counts against
  // the message cap. x and y may overlap: the server copies x out of the region before the
  // call runs and writes y after it.
  absl::StatusOr<v1::InterpolationResponse> Upfirdn(v1::UpfirdnRequest request,
                                                    const SharedRegion& region, int64_t x_offset,
                                                    int64_t y_offset, const CallOptions& call = {});
  absl::StatusOr<v1::InterpolationResponse> ResamplePoly(v1::ResamplePolyRequest request,
                                                         const SharedRegion& region,
                                                         int64_t x_offset, int64_t y_offset,
                                                         const CallOptions& call = {});

  // Upfirdn / ResamplePoly of an x of any size, returning y. `request.x` is ignored (x is sent
  // here; leave it empty: the request is taken by value, so an inline x would be copied). Small payloads (TransferOptions) go in one unary call; larger ones through a staging
  // region the server allocates (SharedMemoryService with an empty shm_name, counted against its
  // --shm-bytes): x is written in chunk_bytes messages over one or `streams` parallel
  // WriteRegion streams on separate connections, the call names the region for x and y, and y
  // comes back over ReadRegion streams the same way; the region is unregistered at the end
  // (also on failure). Errors: the server's; x of any rank, filtered along request.axis. Works against a remote
  // server (no shared memory involved). `report`, when non-null, says which path ran.
  absl::StatusOr<HostArray> UpfirdnArray(v1::UpfirdnRequest request, const HostArray& x,
                                         const TransferOptions& transfer = {},
                                         const CallOptions& call = {},
                                         TransferReport* report = nullptr);
  absl::StatusOr<HostArray> ResamplePolyArray(v1::ResamplePolyRequest request, const HostArray& x,
                                              const TransferOptions& transfer = {},
                                              const CallOptions& call = {},
                                              TransferReport* report = nullptr);
  // The same into `*y`: when *y already holds the result's dtype and byte count (a caller that
  // filters signals of one size in a loop), its buffer is reused — no allocation, no zero-fill —
  // and only its shape is set; otherwise it is replaced. On error *y is unspecified.
  absl::Status UpfirdnArrayInto(v1::UpfirdnRequest request, const HostArray& x, HostArray* y,
                                const TransferOptions& transfer = {}, const CallOptions& call = {},
                                TransferReport* report = nullptr);
  absl::Status ResamplePolyArrayInto(v1::ResamplePolyRequest request, const HostArray& x,
                                     HostArray* y, const TransferOptions& transfer = {},
                                     const CallOptions& call = {},
                                     TransferReport* report = nullptr);

  // SharedMemoryService (shm.proto). SharedRegion (fresnel/client/shm.h) wraps these.
  absl::StatusOr<v1::RegisterRegionResponse> RegisterRegion(
      const v1::RegisterRegionRequest& request, const CallOptions& call = {});
  absl::Status UnregisterRegion(const std::string& name, const CallOptions& call = {});
  absl::StatusOr<v1::ListRegionsResponse> ListRegions(const CallOptions& call = {});

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

  // Phase unwrapping (UnwrapService). Unwrap is synchronous: the request and the result must
  // each fit in one message. Larger images go through jobs: SubmitUnwrap (arrays that do not fit
  // next to the rest of the request are sent in chunks), WatchUnwrap, GetUnwrapResult.
  absl::StatusOr<UnwrapResult> Unwrap(const v1::UnwrapRequest& request,
                                      const CallOptions& call = {});
  // Takes the request by value: pass it with std::move to avoid copying the arrays.
  absl::StatusOr<v1::SubmitResponse> SubmitUnwrap(v1::UnwrapRequest request,
                                                  const SubmitOptions& options = {},
                                                  const CallOptions& call = {});
  // Blocks until the job is terminal, calling `on_state` for every state the server sends (the
  // current one first). Returns the terminal state; a job that FAILED or was CANCELLED is still
  // an OK return (its status is in the UnwrapJob).
  absl::StatusOr<v1::UnwrapJob> WatchUnwrap(
      const std::string& job_id,
      const std::function<void(const v1::UnwrapJob&)>& on_state = nullptr,
      const CallOptions& call = {});
  // The job's current state (a Watch that ends after one message).
  absl::StatusOr<v1::UnwrapJob> GetUnwrapJob(const std::string& job_id,
                                             const CallOptions& call = {});
  // The result of a DONE job, reassembled from its chunks. `max_chunk_bytes` 0 = the server's
  // choice (just under its message cap; the client's cap must be at least that large).
  // `out_shm` (optional): the arrays go to that region (a live SharedRegion of this Client, read
  // back into the result; docs/transport.md, "Outputs to a region") instead of in chunks. A job
  // whose Submit set request.out_shm wrote its arrays there when it finished: leave `out_shm`
  // unset, they are read back from the region the answer names.
  absl::StatusOr<UnwrapResult> GetUnwrapResult(const std::string& job_id,
                                               int64_t max_chunk_bytes = 0,
                                               const CallOptions& call = {},
                                               const v1::ShmRef* out_shm = nullptr);
  absl::StatusOr<v1::UnwrapJob> CancelUnwrap(const std::string& job_id,
                                             const CallOptions& call = {});
  absl::StatusOr<v1::ListUnwrapJobsResponse> ListUnwrapJobs(
      const v1::ListJobsRequest& request = {}, const CallOptions& call = {});

  // Holograms (HologramService). Render sends one request (pass it with std::move to avoid
  // copying the points) and reassembles the outputs, however many chunks they came in. When
  // config.max_chunk_bytes is 0 it is set to fit this client's max_message_bytes. A cloud too
  // large for one message (the smaller of this client's and the server's cap) is sent as one
  // Stream frame in parts instead; the result is the same.
  absl::StatusOr<HologramRender> Render(v1::RenderRequest request, const CallOptions& call = {});
  // Holographic video over one Stream call. `next_frame` fills the next frame and returns false
  // after the last; the first frame must carry the config. It is called from a second thread
  // while this one reads. `on_frame` is called on this thread, in frame order, with each frame's
  // status (a bad frame is a non-OK status with a null result, and the stream goes on) and
  // result. Returns the call's status once every frame was answered.
  absl::Status RenderStream(
      const std::function<bool(v1::HologramFrameRequest*)>& next_frame,
      const std::function<void(int64_t frame_index, const absl::Status& status,
                               HologramRender* result)>& on_frame,
      const CallOptions& call = {});
  // ASM reconstruction of a complex64/complex128 [height, width] field; `config.field` is
  // ignored (the field goes inline when it fits in one message, else as chunks).
  absl::StatusOr<HologramReconstruction> Reconstruct(const v1::ReconstructConfig& config,
                                                     const HostArray& field,
                                                     const CallOptions& call = {});

  const ClientOptions& options() const { return options_; }

 private:
  friend class FusionSession;  // fusion_client.h: its stream runs on this channel
  friend class UnwrapClient;   // unwrap_client.h: its calls, on channel() and job_channel()
  friend class AdminClient;    // admin_client.h: its calls, on channel()
  friend class InterpClient;   // interp_client.h: its calls, on channel()
  friend class HologramClient; // hologram_client.h: its calls, on channel(), and MessageCap
  struct Impl;
  Client(ClientOptions options, std::unique_ptr<Impl> impl);
  // min(options_.max_message_bytes, the server's cap); asks the server once.
  int64_t MessageCap(const CallOptions& call);
  // The channel of the per-service clients (AdminClient, InterpClient, HologramClient, ...).
  std::shared_ptr<grpc::Channel> channel() const;
  // The pick_first channel of job calls (channel() for a single server).
  std::shared_ptr<grpc::Channel> job_channel() const;
  // The SharedMemoryService stub of chunked-transfer channel `index`: 0 is channel()'s, 1.. each
  // on its own connection (made on first use, kept for the client's life, like the stubs).
  v1::SharedMemoryService::Stub* ShmStub(int index);
  // The channel of that stub (the chunked transfer writes and reads raw RegionChunk buffers on
  // it, fresnel/v1/region_wire.h).
  std::shared_ptr<grpc::Channel> TransferChannel(int index);
  // The path choice behind UpfirdnArray / ResamplePolyArray: `call_fn` runs the request with x
  // (inline, or naming the staging region) and y_shm (null: y inline).
  // y is `channels` x `y_samples` elements of at most `item` bytes; `split` says whether and
  // how the call may be cut into segments (TransferOptions::segments). The result goes to *y
  // (reused when it has the right dtype and size).
  absl::Status TransferThroughRegion(
      const HostArray& x, int64_t channels, int64_t y_samples, int64_t item,
      const internal::FilterSplit& split, const TransferOptions& transfer,
      const CallOptions& call, TransferReport* report, HostArray* y,
      const std::function<absl::StatusOr<v1::InterpolationResponse>(v1::NdArray x,
                                                                    const v1::ShmRef* y_shm)>&
          call_fn);
  friend class VolumeClient;  // shares the channel (volume_client.h)
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
