#include "fake_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fresnel/v1/admin.grpc.pb.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/interpolation.grpc.pb.h"

namespace fresnel::testing {
namespace {

HostArray Doubled(const HostArray& x) {
  HostArray y(x.dtype(), x.shape());
  const int64_t n = x.size();
  switch (x.dtype()) {
    case DType::kFloat64:
      for (int64_t i = 0; i < n; ++i) y.data<double>()[i] = 2 * x.data<double>()[i];
      break;
    case DType::kComplex64:
      for (int64_t i = 0; i < n; ++i) {
        y.data<std::complex<float>>()[i] = 2.0f * x.data<std::complex<float>>()[i];
      }
      break;
    default:
      for (int64_t i = 0; i < n; ++i) y.data<float>()[i] = 2 * x.data<float>()[i];
  }
  return y;
}

void FillInfo(v1::ExecutionInfo* info) {
  info->set_device("fake:0");
  info->set_queue_wait_seconds(0.001);
  info->set_h2d_seconds(0.002);
  info->set_compute_seconds(0.003);
  info->set_d2h_seconds(0.004);
  info->set_total_seconds(0.010);
}

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

class FakeAdmin final : public v1::AdminService::Service {
  grpc::Status GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                             v1::ServerInfo* info) override {
    info->set_version("0.0.0-fake");
    info->set_cpu_workers(2);
    info->set_cuda_compiled(false);
    v1::DeviceInfo* cpu = info->add_devices();
    cpu->set_id("cpu");
    cpu->set_name("fake cpu");
    cpu->set_kind("cpu");
    cpu->set_streams(2);
    cpu->set_multiprocessors(2);
    info->mutable_limits()->set_max_message_bytes(kFakeMessageCap);
    info->mutable_limits()->set_queue_capacity(8);
    info->mutable_limits()->set_max_rate(64);
    info->mutable_limits()->set_max_taps(4096);
    info->mutable_limits()->set_max_output_samples(1 << 24);
    info->add_services("fresnel.v1.AdminService");
    info->add_services("fresnel.v1.InterpolationService");
    return grpc::Status::OK;
  }
  grpc::Status GetStats(grpc::ServerContext*, const v1::GetStatsRequest*,
                        v1::ServerStats* stats) override {
    stats->set_uptime_seconds(12.5);
    stats->set_requests_total(7);
    stats->set_serving(true);
    v1::DeviceStats* d = stats->add_devices();
    d->set_id("cpu");
    d->set_completed(7);
    d->set_busy_seconds(0.5);
    return grpc::Status::OK;
  }
};

class FakeInterpolation final : public v1::InterpolationService::Service {
  grpc::Status Upfirdn(grpc::ServerContext*, const v1::UpfirdnRequest* request,
                       v1::InterpolationResponse* response) override {
    if (request->request_id() == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (request->up() == 99) return Invalid("up: 99 exceeds the limit of 64");
    absl::StatusOr<HostArray> x = FromProto(request->x(), "x");
    if (!x.ok()) return Invalid(std::string(x.status().message()));
    ToProto(Doubled(*x), response->mutable_y());
    response->set_request_id(request->request_id());
    FillInfo(response->mutable_info());
    return grpc::Status::OK;
  }

  grpc::Status ResamplePoly(grpc::ServerContext*, const v1::ResamplePolyRequest* request,
                            v1::InterpolationResponse* response) override {
    absl::StatusOr<HostArray> x = FromProto(request->x(), "x");
    if (!x.ok()) return Invalid(std::string(x.status().message()));
    if (x->dtype() != DType::kFloat32 || (x->ndim() != 1 && x->ndim() != 2)) {
      return Invalid("x: the fake takes float32 [n] or [channels, n]");
    }
    const int up = std::max(1, request->up()), down = std::max(1, request->down());
    const int64_t channels = x->ndim() == 2 ? x->dim(0) : 1;
    const int64_t n = x->dim(x->ndim() - 1);
    const int64_t m = (n * up + down - 1) / down;
    std::vector<int64_t> shape = x->shape();
    shape.back() = m;
    HostArray y(DType::kFloat32, shape);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t j = 0; j < m; ++j) {
        y.data<float>()[c * m + j] = x->data<float>()[c * n + std::min(n - 1, j * down / up)];
      }
    }
    ToProto(y, response->mutable_y());
    FillInfo(response->mutable_info());
    return grpc::Status::OK;
  }

  grpc::Status ResampleStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::ResampleStreamResponse, v1::ResampleStreamRequest>* stream)
      override {
    v1::ResampleStreamRequest request;
    if (!stream->Read(&request) || !request.has_config()) {
      return Invalid("the first message must carry config");
    }
    const v1::ResampleStreamConfig config = request.config();  // `request` is reused below
    const v1::NdArray& cx =
        config.has_upfirdn() ? config.upfirdn().x() : config.resample_poly().x();
    if (config.op_case() == v1::ResampleStreamConfig::OP_NOT_SET) return Invalid("config: no op");
    if (cx.shape_size() != 2 || cx.shape(1) != 0 || cx.dtype() == v1::DTYPE_UNSPECIFIED ||
        !cx.data().empty()) {
      return Invalid("config.x must be an empty [channels, 0] array with a dtype");
    }
    const int64_t channels = cx.shape(0);
    const std::string request_id = config.request_id();
    int64_t index = 0;
    int64_t samples_out = 0;
    bool ended = false;
    while (stream->Read(&request)) {
      if (ended) return Invalid("message after end");
      if (!request.has_chunk()) return Invalid(absl::StrCat("message ", index, " has no chunk"));
      absl::StatusOr<HostArray> chunk = FromProto(request.chunk(), "chunk");
      if (!chunk.ok()) return Invalid(std::string(chunk.status().message()));
      if (chunk->ndim() != 2 || chunk->dim(0) != channels ||
          v1::DType(ToProto(chunk->dtype())) != cx.dtype()) {
        return Invalid(absl::StrCat("chunk ", index, ": wrong shape or dtype"));
      }
      ended = request.end();
      v1::ResampleStreamResponse response;
      response.set_request_id(request_id);
      response.set_chunk_index(index);
      if (request_id == "fail" && index == 2) {
        response.mutable_status()->set_code(3);
        response.mutable_status()->set_message("x: NaN in chunk");
      } else {
        samples_out += chunk->dim(1);
        ToProto(Doubled(*chunk), response.mutable_y());
        response.set_samples_out(samples_out);
        FillInfo(response.mutable_info());
      }
      if (!stream->Write(response)) return grpc::Status::CANCELLED;
      ++index;
    }
    if (!ended) return Invalid("the stream closed without end");
    v1::ResampleStreamResponse flush;
    flush.set_request_id(request_id);
    flush.set_chunk_index(-1);
    HostArray tail(*FromProto(cx.dtype(), "dtype"), {channels, kFakeTail});
    samples_out += kFakeTail;
    ToProto(tail, flush.mutable_y());
    flush.set_samples_out(samples_out);
    FillInfo(flush.mutable_info());
    stream->Write(flush);
    return grpc::Status::OK;
  }
};

}  // namespace

struct FakeServer::Services {
  FakeAdmin admin;
  FakeInterpolation interpolation;
};

FakeServer::FakeServer() : services_(std::make_unique<Services>()) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port of its own (server.cc)
  builder.SetMaxReceiveMessageSize(static_cast<int>(kFakeMessageCap));
  builder.SetMaxSendMessageSize(static_cast<int>(kFakeMessageCap));
  builder.RegisterService(&services_->admin);
  builder.RegisterService(&services_->interpolation);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeServer::~FakeServer() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace fresnel::testing
