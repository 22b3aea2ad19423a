#include "server/call.h"

#include <algorithm>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fresnel/core/status.h"
#include "server/auth.h"
#include "server/status_util.h"

namespace fresnel::server {

std::optional<Clock::time_point> DeadlineOf(const grpc::CallbackServerContext* context) {
  auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  auto left = deadline - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return std::nullopt;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

absl::StatusOr<DevicePreference> PreferenceOf(const v1::DeviceHint& hint,
                                              absl::string_view field) {
  switch (hint.kind()) {
    case v1::DEVICE_KIND_ANY: return DevicePreference::kAny;
    case v1::DEVICE_KIND_GPU: return DevicePreference::kGpu;
    case v1::DEVICE_KIND_CPU: return DevicePreference::kCpu;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.kind: unknown device kind %d (use DEVICE_KIND_ANY, _GPU or _CPU)", field,
          static_cast<int>(hint.kind())));
  }
}

std::string ClientOf(const grpc::ServerContextBase* context) {
  if (context == nullptr) return "";
  const std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  if (auth == nullptr) return "";
  // A bearer token's name (server/auth.h), checked for this call by TokenAuthenticator.
  for (const grpc::string_ref& name : auth->FindPropertyValues(kClientProperty)) {
    return std::string(name.data(), name.size());
  }
  // Mutual TLS without tokens: the client certificate's common name (gRPC verified it against
  // --tls-client-ca; without that flag no client certificate is asked for).
  for (const grpc::string_ref& cn : auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    return absl::StrCat("x509:", absl::string_view(cn.data(), cn.size()));
  }
  // Without authentication there is one client.
  return "";
}

absl::Status ReserveIn(Budget* budget, int64_t amount, absl::string_view what,
                       Budget::Reservation* out) {
  if (budget == nullptr) return absl::OkStatus();
  absl::StatusOr<Budget::Reservation> r = budget->Reserve(amount, what);
  if (!r.ok()) return r.status();
  *out = *std::move(r);
  return absl::OkStatus();
}

std::string LimitKeyOf(const grpc::ServerContextBase* context) {
  std::string client = ClientOf(context);
  if (!client.empty() || context == nullptr) return client;
  // "ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "unix:/path" (no port), "unix-abstract:..."
  std::string peer = context->peer();
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    const size_t colon = peer.rfind(':');
    if (colon != std::string::npos && colon > 5) peer.resize(colon);
  }
  return absl::StrCat("peer:", peer);
}

absl::Status ReserveStream(const ServiceContext* ctx, const grpc::ServerContextBase* context,
                           absl::string_view what, StreamSlot* out) {
  FRESNEL_RETURN_IF_ERROR(ReserveIn(ctx->streams, 1, what, &out->server));
  if (ctx->client_streams == nullptr) return absl::OkStatus();
  absl::StatusOr<Budget::Reservation> r =
      ctx->client_streams->Reserve(LimitKeyOf(context), 1, what);
  if (!r.ok()) {
    out->server = Budget::Reservation();
    return r.status();
  }
  out->client = *std::move(r);
  return absl::OkStatus();
}

std::string RequestIdOr(const std::string& given) {
  // Echoed in the response only; a client's 24 MiB id is not worth echoing.
  constexpr size_t kMaxEchoed = 256;
  if (given.size() > kMaxEchoed) return given.substr(0, kMaxEchoed);
  if (!given.empty()) return given;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%016x", rng());
}

void FillExecutionInfo(const JobReport& report, double total_s, v1::ExecutionInfo* info) {
  info->set_device(report.device);
  info->set_queue_wait_seconds(report.queue_wait_s);
  info->set_h2d_seconds(report.stages.h2d_s);
  info->set_compute_seconds(report.stages.compute_s);
  info->set_d2h_seconds(report.stages.d2h_s);
  info->set_total_seconds(total_s);
}

grpc::ServerUnaryReactor* FinishUnary(RpcRecord& record, grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  record.Done(status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

UnaryJobCall::UnaryJobCall(ServiceContext* ctx, grpc::CallbackServerContext* context,
                           const char* service, const char* method)
    : RpcCall(ctx->metrics, service, method),
      ctx_(ctx),
      context_(context),
      service_(service),
      method_(method) {}

void UnaryJobCall::Reject(const absl::Status& status) { FinishWith(status); }

void UnaryJobCall::Start(std::shared_ptr<Job> job,
                         std::function<absl::Status(const JobReport&, double)> respond) {
  job->service = service_;
  job->method = method_;
  job->deadline = DeadlineOf(context_);
  job->done = [this, respond = std::move(respond)](const absl::Status& status,
                                                   const JobReport& report) {
    absl::Status final_status = status;
    if (final_status.ok()) final_status = respond(report, Elapsed());
    FinishWith(final_status);  // `this` may be deleted after this line
  };
  job_ = job;
  absl::Status submitted = ctx_->pool->Submit(std::move(job));
  if (!submitted.ok()) {
    job_.reset();
    FinishWith(submitted);
  }
}

void UnaryJobCall::OnCancel() {
  if (job_) job_->Cancel();
}

RpcRecord::RpcRecord(Metrics* metrics, const char* service, const char* method)
    : metrics_(metrics), service_(service), method_(method), accepted_(Clock::now()) {
  if (metrics_) metrics_->InFlightAdd(service_, method_, 1);
}

void RpcRecord::Done(const absl::Status& status) {
  if (done_ || !metrics_) return;
  done_ = true;
  metrics_->ObserveRequest(service_, method_, CodeName(status.code()), Elapsed());
  metrics_->InFlightAdd(service_, method_, -1);
}

void RpcRecord::Payload(const char* direction, double bytes) {
  if (metrics_) metrics_->AddPayload(service_, method_, direction, bytes);
}

double RpcRecord::Elapsed() const {
  return std::chrono::duration<double>(Clock::now() - accepted_).count();
}

absl::Status JobSlot::Submit(DevicePool* pool, std::shared_ptr<Job> job) {
  const Job* raw = job.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(job);
  }
  absl::Status submitted = pool->Submit(std::move(job));
  if (!submitted.ok()) Remove(raw);
  return submitted;
}

void JobSlot::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.clear();
}

void JobSlot::Remove(const Job* job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(),
                             [job](const std::shared_ptr<Job>& j) { return j.get() == job; }),
              jobs_.end());
}

void JobSlot::Cancel() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs = jobs_;
  }
  for (const std::shared_ptr<Job>& job : jobs) job->Cancel();
}

}  // namespace fresnel::server
