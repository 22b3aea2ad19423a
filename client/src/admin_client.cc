// fresnel::AdminClient: AdminService (GetServerInfo, GetStats) and the grpc.health.v1 check.
// fresnel::Client's methods of the same names forward to the one it holds.
#include "fresnel/client/admin_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <future>
#include <string>
#include <vector>

#include "call_util.h"
#include "health_codec.h"

namespace fresnel {

using internal::ApplyDeadline;
using internal::FromGrpc;
using internal::Unary;

AdminClient::AdminClient(Client* client)
    : client_(client),
      admin_(v1::AdminService::NewStub(client->channel())),
      generic_(std::make_unique<grpc::GenericStub>(client->channel())) {}

AdminClient::~AdminClient() = default;

absl::StatusOr<v1::ServerInfo> AdminClient::GetServerInfo(const CallOptions& call) {
  return Unary<v1::GetServerInfoRequest, v1::ServerInfo>(
      client_->options(), call, v1::GetServerInfoRequest(),
      [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return admin_->GetServerInfo(c, req, resp);
      });
}

absl::StatusOr<v1::ServerStats> AdminClient::GetStats(const CallOptions& call) {
  return Unary<v1::GetStatsRequest, v1::ServerStats>(
      client_->options(), call, v1::GetStatsRequest(),
      [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return admin_->GetStats(c, req, resp);
      });
}

absl::StatusOr<v1::InjectFaultResponse> AdminClient::InjectFault(const std::string& device_id,
                                                                 v1::FaultKind kind,
                                                                 const CallOptions& call) {
  v1::InjectFaultRequest request;
  request.set_device_id(device_id);
  request.set_kind(kind);
  return Unary<v1::InjectFaultRequest, v1::InjectFaultResponse>(
      client_->options(), call, request,
      [this](grpc::ClientContext* c, const auto& req, auto* resp) {
        return admin_->InjectFault(c, req, resp);
      });
}

absl::StatusOr<ServingStatus> AdminClient::CheckHealth(const std::string& service,
                                                  const CallOptions& call) {
  grpc::ClientContext context;
  ApplyDeadline(&context, client_->options(), call);
  const std::string request_bytes = internal::EncodeHealthCheckRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  generic_->UnaryCall(&context, internal::kHealthCheckMethod, grpc::StubOptions(), &request,
                            &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    return ServingStatus::kServiceUnknown;  // the standard reply for an unregistered service
  }
  if (!status.ok()) return FromGrpc(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("cannot read the health response");
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  absl::StatusOr<int> value = internal::DecodeHealthCheckResponse(bytes);
  if (!value.ok()) return value.status();
  switch (*value) {
    case 1: return ServingStatus::kServing;
    case 2: return ServingStatus::kNotServing;
    case 3: return ServingStatus::kServiceUnknown;
    default: return ServingStatus::kUnknown;
  }
}

}  // namespace fresnel
