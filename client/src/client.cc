#include "fresnel/client/client.h"
#include "fresnel/client/admin_client.h"
#include "fresnel/client/hologram_client.h"
#include "fresnel/client/interp_client.h"
#include "fresnel/client/unwrap_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/wire_limits.h"
#include "fresnel/v1/array_convert.h"
#include "call_util.h"

namespace fresnel {

struct Client::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<AdminClient> admin;  // made once the Client exists, like `unwrap`
  std::unique_ptr<InterpClient> interp;      // made once the Client exists, like `unwrap`
  std::unique_ptr<HologramClient> hologram;  // the same
  // Job calls: pick_first over the same servers (the same channel for a single server).
  std::shared_ptr<grpc::Channel> job_channel;
  std::unique_ptr<UnwrapClient> unwrap;  // made once the Client exists (it holds its stubs)
  std::mutex cap_mu;
  int64_t server_cap = 0;  // the server's message cap; 0 = not asked yet
  // Chunked transfers (shm_client.cc): one channel, so one TCP connection, per parallel stream.
  std::string target;
  grpc::ChannelArguments args;
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // the main channel's (TLS, tokens)
  std::unique_ptr<v1::SharedMemoryService::Stub> shm;  // on `channel`
  std::mutex transfer_mu;
  std::vector<std::shared_ptr<grpc::Channel>> transfer_channels;
  std::vector<std::unique_ptr<v1::SharedMemoryService::Stub>> transfer_shm;  // one per channel
};

absl::Status FromGrpcStatus(int code, const std::string& message) {
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(absl::StrCat("(gRPC code ", code, ") ", message));
  }
  // grpc::StatusCode and absl::StatusCode share the google.rpc.Code numbering.
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

namespace {

using internal::ApplyDeadline;
using internal::FromGrpc;
using internal::Unary;

// gRPC takes an int; <= 0 means "no limit" here and -1 there.
int ChannelMessageCap(int64_t bytes) {
  if (bytes <= 0) return -1;
  return static_cast<int>(std::min<int64_t>(bytes, INT_MAX));
}

}  // namespace

Client::Client(ClientOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)), impl_(std::move(impl)) {}

Client::~Client() = default;

namespace {

// "scheme:rest" (dns:///name:port, ipv4:a:p,b:q, unix:/path): a letter, then letters, digits
// and + - . up to the first colon, and no port (digits up to a comma or the end) after it.
bool HasScheme(const std::string& address) {
  const size_t colon = address.find(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::ascii_isalpha(static_cast<unsigned char>(address[0]))) {
    return false;
  }
  for (size_t i = 0; i < colon; ++i) {
    const char c = address[i];
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  const std::string rest = address.substr(colon + 1, address.find(',') - colon - 1);
  return rest.empty() || !std::all_of(rest.begin(), rest.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

bool IsIpv4HostPort(const std::string& entry) {
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos || colon + 1 == entry.size()) return false;
  std::vector<std::string> octets = absl::StrSplit(entry.substr(0, colon), '.');
  if (octets.size() != 4) return false;
  for (const std::string& o : octets) {
    if (o.empty() || o.size() > 3 || !std::all_of(o.begin(), o.end(), absl::ascii_isdigit)) {
      return false;
    }
  }
  const std::string port = entry.substr(colon + 1);
  return std::all_of(port.begin(), port.end(), absl::ascii_isdigit);
}

// Several servers: a list, or a URI that can resolve to several addresses.
bool ManyServers(const std::string& target) {
  return absl::StrContains(target, ',') || absl::StartsWith(target, "dns:");
}

// The same list in a random order (a pick_first target), or the target itself.
std::string Shuffled(const std::string& target) {
  const size_t colon = target.find(':');
  if (!absl::StartsWith(target, "ipv4:") && !absl::StartsWith(target, "ipv6:")) return target;
  std::vector<std::string> entries = absl::StrSplit(target.substr(colon + 1), ',');
  std::shuffle(entries.begin(), entries.end(), std::mt19937(std::random_device()()));
  return absl::StrCat(target.substr(0, colon + 1), absl::StrJoin(entries, ","));
}

}  // namespace

absl::StatusOr<std::string> ChannelTarget(const std::string& address) {
  if (address.empty()) return absl::InvalidArgumentError("address is empty");
  if (HasScheme(address) || !absl::StrContains(address, ',')) return address;
  std::vector<std::string> v4, v6;
  for (absl::string_view part : absl::StrSplit(address, ',')) {
    std::string entry(absl::StripAsciiWhitespace(part));
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' has an empty entry"));
    }
    if (absl::StartsWith(entry, "localhost:")) entry = "127.0.0.1" + entry.substr(9);
    if (IsIpv4HostPort(entry)) {
      v4.push_back(entry);
    } else if (entry[0] == '[' && absl::StrContains(entry, "]:")) {
      v6.push_back(entry);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "address list entry '", entry, "' is not a numeric IP:PORT; for a DNS name with many "
          "addresses use dns:///NAME:PORT"));
    }
  }
  if (!v4.empty() && !v6.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address list '", address, "' mixes IPv4 and IPv6 addresses"));
  }
  return v4.empty() ? absl::StrCat("ipv6:", absl::StrJoin(v6, ","))
                    : absl::StrCat("ipv4:", absl::StrJoin(v4, ","));
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  FRESNEL_ASSIGN_OR_RETURN(const std::string target, ChannelTarget(options.address));
  FRESNEL_ASSIGN_OR_RETURN(const std::shared_ptr<grpc::ChannelCredentials> credentials,
                           ChannelCredentialsFor(options));
  grpc::ChannelArguments args;
  AddSecurityChannelArgs(options, &args);
  if (options.own_connection) {
    // As the transfer channels (ShmStub): a pool of its own and a distinct argument.
    static std::atomic<int> next_connection{1};
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("fresnel.own_connection", next_connection.fetch_add(1));
  }
  args.SetMaxSendMessageSize(ChannelMessageCap(options.max_message_bytes));
  args.SetMaxReceiveMessageSize(ChannelMessageCap(options.max_message_bytes));
  auto impl = std::make_unique<Impl>();
  impl->target = target;
  impl->args = args;
  impl->credentials = credentials;
  if (ManyServers(target)) {
    grpc::ChannelArguments spread = args;
    // round_robin over the servers whose grpc.health.v1 answers SERVING (client-side health
    // checking): a draining server leaves the rotation before it stops.
    spread.SetServiceConfigJSON(R"({"loadBalancingConfig": [{"round_robin": {}}],
                                     "healthCheckConfig": {"serviceName": ""}})");
    impl->channel = grpc::CreateCustomChannel(target, credentials, spread);
    impl->job_channel = grpc::CreateCustomChannel(Shuffled(target), credentials, args);
  } else {
    impl->channel = grpc::CreateCustomChannel(target, credentials, args);
    impl->job_channel = impl->channel;
  }
  if (options.connect_timeout_s > 0) {
    const auto deadline =
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::duration<double>(options.connect_timeout_s));
    if (!impl->channel->WaitForConnected(deadline)) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", options.address, " within ",
                                                 options.connect_timeout_s, " s"));
    }
  }
  impl->shm = v1::SharedMemoryService::NewStub(impl->channel);
  std::unique_ptr<Client> client(new Client(options, std::move(impl)));
  client->impl_->admin = std::make_unique<AdminClient>(client.get());
  client->impl_->unwrap = std::make_unique<UnwrapClient>(client.get());
  client->impl_->interp = std::make_unique<InterpClient>(client.get());
  client->impl_->hologram = std::make_unique<HologramClient>(client.get());
  return client;
}

absl::StatusOr<v1::InjectFaultResponse> Client::InjectFault(const std::string& device_id,
                                                            v1::FaultKind kind,
                                                            const CallOptions& call) {
  return impl_->admin->InjectFault(device_id, kind, call);
}

// ---------------------------------------------------------------------------------------------
// Interpolation: InterpClient (interp_client.cc) on this client's channel. The shared-memory and
// *Array paths of Client itself are in shm_client.cc.

absl::StatusOr<v1::InterpolationResponse> Client::Upfirdn(const v1::UpfirdnRequest& request,
                                                          const CallOptions& call) {
  return impl_->interp->Upfirdn(request, call);
}

absl::StatusOr<v1::InterpolationResponse> Client::ResamplePoly(
    const v1::ResamplePolyRequest& request, const CallOptions& call) {
  return impl_->interp->ResamplePoly(request, call);
}

absl::StatusOr<v1::InterpolationResponse> Client::Resample(const v1::ResampleRequest& request,
                                                           const CallOptions& call) {
  return impl_->interp->Resample(request, call);
}

absl::StatusOr<v1::InterpolationResponse> Client::Decimate(const v1::DecimateRequest& request,
                                                           const CallOptions& call) {
  return impl_->interp->Decimate(request, call);
}

absl::StatusOr<HostArray> Client::ResampleStream(
    const v1::ResampleStreamConfig& config, const HostArray& x, int64_t chunk_samples,
    const CallOptions& call, const std::function<void(int64_t, int64_t)>& on_progress,
    v1::ExecutionInfo* info) {
  return impl_->interp->ResampleStream(config, x, chunk_samples, call, on_progress, info);
}

// ---------------------------------------------------------------------------------------------
// Holograms: HologramClient (hologram_client.cc) on this client's channel.

absl::StatusOr<HologramRender> Client::Render(v1::RenderRequest request, const CallOptions& call) {
  return impl_->hologram->Render(std::move(request), call);
}

absl::Status Client::RenderStream(
    const std::function<bool(v1::HologramFrameRequest*)>& next_frame,
    const std::function<void(int64_t, const absl::Status&, HologramRender*)>& on_frame,
    const CallOptions& call) {
  return impl_->hologram->RenderStream(next_frame, on_frame, call);
}

absl::StatusOr<HologramReconstruction> Client::Reconstruct(const v1::ReconstructConfig& config,
                                                           const HostArray& field,
                                                           const CallOptions& call) {
  return impl_->hologram->Reconstruct(config, field, call);
}

// ---------------------------------------------------------------------------------------------
// Channels.

std::shared_ptr<grpc::Channel> Client::channel() const { return impl_->channel; }

std::shared_ptr<grpc::Channel> Client::TransferChannel(int index) {
  if (index <= 0) return impl_->channel;
  ShmStub(index);  // makes the channel
  std::lock_guard<std::mutex> lock(impl_->transfer_mu);
  return impl_->transfer_channels[index - 1];
}

v1::SharedMemoryService::Stub* Client::ShmStub(int index) {
  if (index <= 0) return impl_->shm.get();
  std::lock_guard<std::mutex> lock(impl_->transfer_mu);
  while (static_cast<int>(impl_->transfer_channels.size()) < index) {
    grpc::ChannelArguments args = impl_->args;
    // A channel of its own subchannel pool and a distinct argument never shares a connection
    // with the main channel or another transfer channel: each stream gets its own TCP
    // connection (and its own HTTP/2 flow control and I/O thread).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("fresnel.transfer_channel", static_cast<int>(impl_->transfer_channels.size()) + 1);
    impl_->transfer_channels.push_back(
        grpc::CreateCustomChannel(impl_->target, impl_->credentials, args));
    impl_->transfer_shm.push_back(
        v1::SharedMemoryService::NewStub(impl_->transfer_channels.back()));
  }
  return impl_->transfer_shm[index - 1].get();
}

int64_t Client::MessageCap(const CallOptions& call) {
  const int64_t own = options_.max_message_bytes > 0 ? options_.max_message_bytes : INT_MAX;
  {
    std::lock_guard<std::mutex> lock(impl_->cap_mu);
    if (impl_->server_cap > 0) return std::min(own, impl_->server_cap);
  }
  absl::StatusOr<v1::ServerInfo> info = GetServerInfo(call);
  if (!info.ok() || info->limits().max_message_bytes() <= 0) return own;
  std::lock_guard<std::mutex> lock(impl_->cap_mu);
  impl_->server_cap = info->limits().max_message_bytes();
  return std::min(own, impl_->server_cap);
}

// ---------------------------------------------------------------------------------------------
// Admin and health: AdminClient (admin_client.cc) on this client's channel.

absl::StatusOr<v1::ServerInfo> Client::GetServerInfo(const CallOptions& call) {
  return impl_->admin->GetServerInfo(call);
}

absl::StatusOr<v1::ServerStats> Client::GetStats(const CallOptions& call) {
  return impl_->admin->GetStats(call);
}

absl::StatusOr<ServingStatus> Client::CheckHealth(const std::string& service,
                                                  const CallOptions& call) {
  return impl_->admin->CheckHealth(service, call);
}

// ---------------------------------------------------------------------------------------------
// Phase unwrapping: UnwrapClient (unwrap_client.cc) on this client's channels.

std::shared_ptr<grpc::Channel> Client::job_channel() const { return impl_->job_channel; }

absl::StatusOr<UnwrapResult> Client::Unwrap(const v1::UnwrapRequest& request,
                                            const CallOptions& call) {
  return impl_->unwrap->Unwrap(request, call);
}

absl::StatusOr<v1::SubmitResponse> Client::SubmitUnwrap(v1::UnwrapRequest request,
                                                        const SubmitOptions& options,
                                                        const CallOptions& call) {
  return impl_->unwrap->Submit(std::move(request), options, call);
}

absl::StatusOr<v1::UnwrapJob> Client::WatchUnwrap(
    const std::string& job_id, const std::function<void(const v1::UnwrapJob&)>& on_state,
    const CallOptions& call) {
  return impl_->unwrap->Watch(job_id, on_state, call);
}

absl::StatusOr<v1::UnwrapJob> Client::GetUnwrapJob(const std::string& job_id,
                                                   const CallOptions& call) {
  return impl_->unwrap->GetJob(job_id, call);
}

absl::StatusOr<UnwrapResult> Client::GetUnwrapResult(const std::string& job_id,
                                                     int64_t max_chunk_bytes,
                                                     const CallOptions& call,
                                                     const v1::ShmRef* out_shm) {
  return impl_->unwrap->GetResult(job_id, max_chunk_bytes, call, out_shm);
}

absl::StatusOr<v1::UnwrapJob> Client::CancelUnwrap(const std::string& job_id,
                                                   const CallOptions& call) {
  return impl_->unwrap->Cancel(job_id, call);
}

absl::StatusOr<v1::ListUnwrapJobsResponse> Client::ListUnwrapJobs(
    const v1::ListJobsRequest& request, const CallOptions& call) {
  return impl_->unwrap->List(request, call);
}

}  // namespace fresnel
