// fresneld end to end over loopback gRPC: results equal the kernels' own, bad input gets the
// right status naming the field, streams equal one-shot calls, health, metrics and draining.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <malloc.h>

#include <algorithm>
#include <complex>
#include <iterator>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <future>
#include <thread>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fresnel/client/admin_client.h"
#include "fresnel/client/client.h"
#include "fresnel/core/gpu.h"
#include "fresnel/interp/interp.h"
#include "fresnel/io/npy.h"
#include "fresnel/v1/array_convert.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "server/budget.h"
#include "server/device_pool.h"
#include "server_fixture.h"
#include "support/cli_runner.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

v1::NdArray Wire(const HostArray& a) {
  v1::NdArray out;
  ToProto(a, &out);
  return out;
}

HostArray FromWire(const v1::NdArray& a) {
  auto h = FromProto(a, "y");
  REQUIRE(h.ok());
  return std::move(*h);
}

v1::UpfirdnRequest UpfirdnReq(const HostArray& x, const std::vector<double>& taps, int up,
                              int down) {
  v1::UpfirdnRequest req;
  *req.mutable_x() = Wire(x);
  HostArray h(DType::kFloat64, {static_cast<int64_t>(taps.size())});
  std::copy(taps.begin(), taps.end(), h.data<double>());
  *req.mutable_taps() = Wire(h);
  req.set_up(up);
  req.set_down(down);
  return req;
}

std::unique_ptr<grpc::ClientContext> Ctx(double timeout_s = 60) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  return ctx;
}

// A client library Client on the test server (30 s default timeout).
std::unique_ptr<Client> ConnectTo(const TestServer& ts) {
  return ConnectClient(ts, std::chrono::seconds(30));
}

TEST_CASE("a port another server listens on is refused, not shared", "[server]") {
  TestServer ts;
  server::ServerConfig config = TestServer::CpuConfig();
  config.listen = ts.address;
  absl::StatusOr<std::unique_ptr<server::FresnelServer>> second =
      server::FresnelServer::Start(config);
  REQUIRE(!second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(second.status().message()),
             Catch::Contains("cannot listen on " + ts.address));
  // The first server still answers every call.
  for (int i = 0; i < 8; ++i) {
    v1::ServerInfo info;
    auto ctx = Ctx(10);
    CHECK(ts.admin->GetServerInfo(ctx.get(), v1::GetServerInfoRequest(), &info).ok());
  }
}

TEST_CASE("server info lists the CPU pool, limits and services", "[server]") {
  TestServer ts;
  v1::ServerInfo info;
  auto ctx = Ctx();
  grpc::Status st = ts.admin->GetServerInfo(ctx.get(), v1::GetServerInfoRequest(), &info);
  REQUIRE(st.ok());
  CHECK_FALSE(info.version().empty());
  REQUIRE(info.devices_size() == 1);
  CHECK(info.devices(0).id() == "cpu");
  CHECK(info.cpu_workers() == 2);
  CHECK(info.limits().max_message_bytes() == 64 << 20);
  CHECK(info.limits().queue_capacity() == 16);
  CHECK(info.limits().hologram_max_width() == 16384);
  CHECK(info.limits().hologram_max_pixels() == int64_t{1} << 27);
  CHECK(info.limits().hologram_max_points() == int64_t{1} << 24);
  CHECK(info.limits().max_streams() == 1024);
  CHECK(info.limits().stream_state_bytes() == int64_t{4} << 30);
  CHECK(info.services_size() >= 2);
}

// 4 worker streams per GPU by default (session 9: one hologram Stream got ~10 % more frames/s
// than with 2, two at once ~20 % more); the flag and the pool's own default agree.
TEST_CASE("fresneld runs 4 worker streams per GPU by default", "[server]") {
  const char* argv[] = {"fresneld"};
  absl::StatusOr<server::ServerConfig> config = server::ParseConfig(1, const_cast<char**>(argv));
  REQUIRE(config.ok());
  CHECK(config->streams_per_gpu == 4);
  CHECK(server::DevicePoolOptions().streams_per_gpu == 4);
  const char* two[] = {"fresneld", "--streams-per-gpu=2"};
  absl::StatusOr<server::ServerConfig> flagged = server::ParseConfig(2, const_cast<char**>(two));
  REQUIRE(flagged.ok());
  CHECK(flagged->streams_per_gpu == 2);
}

TEST_CASE("--cpu-partitions outside 1..64 is refused naming the flag", "[server]") {
  for (const char* bad : {"--cpu-partitions=0", "--cpu-partitions=65", "--cpu-partitions=x"}) {
    const char* argv[] = {"fresneld", bad};
    absl::StatusOr<server::ServerConfig> config = server::ParseConfig(2, const_cast<char**>(argv));
    INFO(bad);
    REQUIRE_FALSE(config.ok());
    CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(config.status().message()), Catch::Contains("--cpu-partitions"));
  }
}

TEST_CASE("server info carries every limit flag's value, grouped and flat", "[server]") {
  // Every value differs from its default, so a limit read from the wrong place shows.
  const char* argv[] = {"fresneld",
                        "--listen=127.0.0.1:0",
                        "--metrics=off",
                        "--gpus=none",
                        "--cpu-workers=2",
                        "--queue-length=7",
                        "--max-message-bytes=33554431",
                        "--max-rate=1001",
                        "--max-taps=1002",
                        "--max-output-samples=1003",
                        "--unwrap-max-side=1004",
                        "--unwrap-max-pixels=1005",
                        "--job-ttl=1006.5",
                        "--job-memory-bytes=1048583",
                        "--max-jobs=1008",
                        "--hologram-max-pixels=1009",
                        "--hologram-max-points=1010",
                        "--volume-max-points=1011",
                        "--volume-max-tets=1012",
                        "--max-streams=1013",
                        "--stream-state-bytes=1048590",
                        "--shm-bytes=1015",
                        "--shm-ttl=1016.5",
                        "--session-ttl=1017.5",
                        "--max-sessions-per-device=1018",
                        "--max-sessions-per-client=1019",
                        "--gpu-memory-bytes=1020",
                        "--session-gpu-memory-bytes=1021",
                        "--session-cpu-memory-bytes=1048598",
                        "--max-streams-per-client=1023",
                        "--gpu-partitions=3",
                        "--cpu-partitions=2",
                        "--staging-cache-bytes=1024",
                        "--pin-regions=false",
                        "--small-job-bytes=1025",
                        "--overlap-chunk-bytes=1026",
                        "--fault-injection"};
  absl::StatusOr<server::ServerConfig> config =
      server::ParseConfig(static_cast<int>(std::size(argv)), const_cast<char**>(argv));
  INFO(config.status().message());
  REQUIRE(config.ok());
  TestServer ts(*config);
  v1::ServerInfo info;
  auto ctx = Ctx();
  REQUIRE(ts.admin->GetServerInfo(ctx.get(), v1::GetServerInfoRequest(), &info).ok());
  const v1::Limits& l = info.limits();
  // Transport and server-wide.
  CHECK(l.server().max_message_bytes() == 33554431);
  CHECK(l.server().queue_capacity() == 7);
  CHECK(l.server().max_streams() == 1013);
  CHECK(l.server().stream_state_bytes() == 1048590);
  CHECK(l.server().shm_bytes() == 1015);
  CHECK(l.server().shm_ttl_seconds() == 1016.5);
  CHECK(l.server().gpu_memory_bytes() == 1020);
  CHECK(l.server().max_streams_per_client() == 1023);
  CHECK(l.server().gpu_partitions() == 3);
  CHECK(l.server().cpu_partitions() == 2);
  CHECK(l.server().staging_cache_bytes() == 1024);
  CHECK_FALSE(l.server().pin_regions());
  CHECK(l.server().fault_injection());
  CHECK(l.server().small_job_bytes() == 1025);
  CHECK(l.server().overlap_chunk_bytes() == 1026);
  CHECK(l.jobs().max_jobs() == 1008);
  CHECK(l.jobs().ttl_seconds() == 1006.5);
  CHECK(l.jobs().memory_bytes() == 1048583);
  CHECK(l.sessions().gpu_cap_bytes() == 1021);
  CHECK(l.sessions().cpu_cap_bytes() == 1048598);
  CHECK(l.sessions().max_sessions_per_device() == 1018);
  CHECK(l.sessions().max_sessions_per_client() == 1019);
  CHECK(l.sessions().ttl_seconds() == 1017.5);
  // Per workload.
  CHECK(l.interpolation().max_rate() == 1001);
  CHECK(l.interpolation().max_taps() == 1002);
  CHECK(l.interpolation().max_output_samples() == 1003);
  CHECK(l.unwrap().max_side() == 1004);
  CHECK(l.unwrap().max_pixels() == 1005);
  CHECK(l.hologram().max_width() == 16384);
  CHECK(l.hologram().max_height() == 16384);
  CHECK(l.hologram().max_pixels() == 1009);
  CHECK(l.hologram().max_points() == 1010);
  CHECK(l.volume().max_points() == 1011);
  CHECK(l.volume().max_tets() == 1012);
  CHECK(l.volume().max_image_side() == 8192);
  CHECK(l.fusion().max_sessions_per_device() == 1018);
  CHECK(l.fusion().max_sessions_per_client() == 1019);
  CHECK(l.fusion().session_ttl_seconds() == 1017.5);
  CHECK(l.fusion().max_pending() == 8);
  // The deprecated flat fields (and ServerInfo.fusion) still say the same, for older clients.
  CHECK(l.max_message_bytes() == 33554431);
  CHECK(l.queue_capacity() == 7);
  CHECK(l.max_rate() == 1001);
  CHECK(l.max_taps() == 1002);
  CHECK(l.max_output_samples() == 1003);
  CHECK(l.unwrap_max_side() == 1004);
  CHECK(l.unwrap_max_pixels() == 1005);
  CHECK(l.max_jobs() == 1008);
  CHECK(l.job_ttl_seconds() == 1006.5);
  CHECK(l.job_memory_bytes() == 1048583);
  CHECK(l.hologram_max_width() == 16384);
  CHECK(l.hologram_max_height() == 16384);
  CHECK(l.hologram_max_pixels() == 1009);
  CHECK(l.hologram_max_points() == 1010);
  CHECK(l.volume_max_points() == 1011);
  CHECK(l.volume_max_tets() == 1012);
  CHECK(l.volume_max_image_side() == 8192);
  CHECK(l.session_gpu_cap_bytes() == 1021);
  CHECK(l.session_cpu_cap_bytes() == 1048598);
  CHECK(l.max_streams() == 1013);
  CHECK(l.stream_state_bytes() == 1048590);
  CHECK(info.fusion().SerializeAsString() == l.fusion().SerializeAsString());
  // Every registered workload's service is listed.
  for (const char* service :
       {"fresnel.v1.InterpolationService", "fresnel.v1.UnwrapService", "fresnel.v1.HologramService",
        "fresnel.v1.FusionService", "fresnel.v1.VolumeRenderService", "fresnel.v1.AdminService",
        "fresnel.v1.SharedMemoryService"}) {
    CHECK(std::count(info.services().begin(), info.services().end(), service) == 1);
  }
}

TEST_CASE("AdminClient: server info, stats and health on a Client's channel", "[server]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_rate = 777;
  TestServer ts(config);
  std::unique_ptr<Client> client = ConnectTo(ts);
  AdminClient admin(client.get());
  auto info = admin.GetServerInfo();
  REQUIRE(info.ok());
  CHECK(info->limits().interpolation().max_rate() == 777);
  CHECK(info->instance() == ts.server->instance());
  auto via_client = client->GetServerInfo();  // Client forwards to its own AdminClient
  REQUIRE(via_client.ok());
  CHECK(via_client->SerializeAsString() == info->SerializeAsString());
  auto stats = admin.GetStats();
  REQUIRE(stats.ok());
  CHECK(stats->serving());
  CHECK(admin.CheckHealth().value() == ServingStatus::kServing);
  CHECK(admin.CheckHealth("fresnel.v1.UnwrapService").value() == ServingStatus::kServing);
  CHECK(admin.CheckHealth("no.such.Service").value() == ServingStatus::kServiceUnknown);
}

TEST_CASE("health reports SERVING per service, and NOT_FOUND for unknown ones", "[server]") {
  TestServer ts;
  grpc::GenericStub generic(ts.channel);
  // grpc.health.v1.HealthCheckRequest { string service = 1; } encoded by hand: tag 0x0a, length.
  auto check = [&](const std::string& service, std::string* reply) {
    std::string payload = "\x0a" + std::string(1, static_cast<char>(service.size())) + service;
    grpc::Slice slice(payload);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) { done.set_value(s); });
    grpc::Status st = done.get_future().get();
    std::vector<grpc::Slice> slices;
    if (st.ok()) {
      response.Dump(&slices);
      reply->clear();
      for (auto& s : slices) reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return st;
  };
  std::string reply;
  REQUIRE(check("", &reply).ok());
  CHECK(reply == std::string("\x08\x01", 2));  // status: SERVING
  REQUIRE(check("fresnel.v1.InterpolationService", &reply).ok());
  CHECK(reply == std::string("\x08\x01", 2));
  CHECK(check("no.such.Service", &reply).error_code() == grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("Upfirdn over gRPC equals the CPU kernel", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat32, {3, 1000});
  std::vector<double> taps = {0.1, -0.2, 0.5, 1.0, 0.5, -0.2, 0.1};
  v1::InterpolationResponse resp;
  auto ctx = Ctx();
  grpc::Status st = ts.interp->Upfirdn(ctx.get(), UpfirdnReq(x, taps, 3, 2), &resp);
  REQUIRE(st.ok());
  interp::UpfirdnOptions o;
  o.up = 3;
  o.down = 2;
  auto want = interp::Upfirdn(Device::Cpu(), taps, x, o);
  REQUIRE(want.ok());
  HostArray got = FromWire(resp.y());
  CHECK(got.shape() == want->shape());
  CHECK(MaxAbsError(got, *want) == 0.0);
  CHECK(resp.info().device() == "cpu");
  CHECK(resp.info().total_seconds() > 0);
  CHECK_FALSE(resp.request_id().empty());
}

TEST_CASE("Upfirdn with a firwin design is the classic interpolation recipe", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat64, {500});
  v1::UpfirdnRequest req;
  *req.mutable_x() = Wire(x);
  req.mutable_design()->set_numtaps(12);
  req.mutable_design()->set_cutoff(1.0 / 4);
  req.mutable_design()->set_window(v1::HAMMING);
  req.mutable_design()->set_gain(4);
  req.set_up(4);
  req.set_request_id("abc");
  v1::InterpolationResponse resp;
  auto ctx = Ctx();
  REQUIRE(ts.interp->Upfirdn(ctx.get(), req, &resp).ok());
  auto taps = interp::Firwin(12, 0.25, {interp::Window::kHamming, 5});
  REQUIRE(taps.ok());
  for (double& t : *taps) t *= 4;
  interp::UpfirdnOptions o;
  o.up = 4;
  auto want = interp::Upfirdn(Device::Cpu(), *taps, x, o);
  REQUIRE(want.ok());
  CHECK(MaxAbsError(FromWire(resp.y()), *want) == 0.0);
  CHECK(resp.request_id() == "abc");
}

TEST_CASE("ResamplePoly over gRPC equals the CPU kernel", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kComplex64, {2, 777});
  v1::ResamplePolyRequest req;
  *req.mutable_x() = Wire(x);
  req.set_up(160);
  req.set_down(147);
  v1::InterpolationResponse resp;
  auto ctx = Ctx();
  REQUIRE(ts.interp->ResamplePoly(ctx.get(), req, &resp).ok());
  interp::ResamplePolyOptions o;
  o.up = 160;
  o.down = 147;
  auto want = interp::ResamplePoly(Device::Cpu(), x, o);
  REQUIRE(want.ok());
  HostArray got = FromWire(resp.y());
  REQUIRE(got.shape() == std::vector<int64_t>{2, 846});
  CHECK(MaxAbsError(got, *want) == 0.0);
}

TEST_CASE("Upfirdn over gRPC: complex taps, integer x, an axis and SciPy's dtype rule",
          "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kInt16, {40, 3});
  HostArray taps = RandomArray(DType::kComplex128, {9});
  v1::UpfirdnRequest req;
  *req.mutable_x() = Wire(x);
  *req.mutable_taps() = Wire(taps);
  req.set_up(3);
  req.set_down(2);
  req.set_axis(0);
  req.set_dtype_rule(v1::DTYPE_SCIPY);
  v1::InterpolationResponse resp;
  auto ctx = Ctx();
  grpc::Status st = ts.interp->Upfirdn(ctx.get(), req, &resp);
  INFO(st.error_message());
  REQUIRE(st.ok());
  interp::UpfirdnOptions o;
  o.up = 3;
  o.down = 2;
  o.axis = 0;
  o.dtype_rule = interp::DTypeRule::kSciPy;
  o.taps_dtype = DType::kComplex128;
  std::vector<double> re, im;
  for (int i = 0; i < 9; ++i) {
    re.push_back(taps.data<std::complex<double>>()[i].real());
    im.push_back(taps.data<std::complex<double>>()[i].imag());
  }
  o.taps_imag = im;
  auto want = interp::Upfirdn(Device::Cpu(), re, x, o);
  REQUIRE(want.ok());
  HostArray got = FromWire(resp.y());
  CHECK(got.dtype() == DType::kComplex128);
  CHECK(got.shape() == std::vector<int64_t>{63, 3});  // ((40 - 1) * 3 + 9 - 1) // 2 + 1
  CHECK(got.shape() == want->shape());
  CHECK(MaxAbsError(got, *want) == 0.0);
}

TEST_CASE("ResamplePoly over gRPC: float32 x with float64 taps, by rule", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat32, {2, 300});
  HostArray taps = RandomArray(DType::kFloat64, {21});
  for (v1::DTypeRule rule : {v1::DTYPE_KEEP_PRECISION, v1::DTYPE_SCIPY}) {
    v1::ResamplePolyRequest req;
    *req.mutable_x() = Wire(x);
    *req.mutable_taps() = Wire(taps);
    req.set_up(3);
    req.set_down(2);
    req.set_dtype_rule(rule);
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    REQUIRE(ts.interp->ResamplePoly(ctx.get(), req, &resp).ok());
    HostArray got = FromWire(resp.y());
    CHECK(got.dtype() == (rule == v1::DTYPE_SCIPY ? DType::kFloat64 : DType::kFloat32));
    CHECK(got.shape() == std::vector<int64_t>{2, 450});
  }
}

TEST_CASE("ResamplePoly over gRPC with a named window and parameters", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat64, {100});
  v1::ResamplePolyRequest req;
  *req.mutable_x() = Wire(x);
  req.set_up(3);
  req.set_down(2);
  req.set_window_name("chebwin");
  req.add_window_params(60.0);
  v1::InterpolationResponse resp;
  auto ctx = Ctx();
  REQUIRE(ts.interp->ResamplePoly(ctx.get(), req, &resp).ok());
  interp::ResamplePolyOptions o;
  o.up = 3;
  o.down = 2;
  o.window.type = interp::Window::kChebwin;
  o.window.params = {60.0};
  auto want = interp::ResamplePoly(Device::Cpu(), x, o);
  REQUIRE(want.ok());
  CHECK(MaxAbsError(FromWire(resp.y()), *want) == 0.0);
  req.set_window_name("gaussian");  // needs its std
  req.clear_window_params();
  auto ctx2 = Ctx();
  grpc::Status st = ts.interp->ResamplePoly(ctx2.get(), req, &resp);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("window_name"));
}

TEST_CASE("Resample (FFT) and Decimate over gRPC equal the CPU kernels", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat64, {3, 250});
  {
    v1::ResampleRequest req;
    *req.mutable_x() = Wire(x);
    req.set_num(101);
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    REQUIRE(ts.interp->Resample(ctx.get(), req, &resp).ok());
    interp::ResampleOptions o;
    o.num = 101;
    auto want = interp::Resample(Device::Cpu(), x, o);
    REQUIRE(want.ok());
    HostArray got = FromWire(resp.y());
    CHECK(got.shape() == std::vector<int64_t>{3, 101});
    CHECK(MaxAbsError(got, *want) == 0.0);
    req.set_num(0);
    auto ctx2 = Ctx();
    grpc::Status st = ts.interp->Resample(ctx2.get(), req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("num"));
  }
  {
    // The spectral window by name (with parameters) and by values, and domain='freq'.
    v1::ResampleRequest req;
    *req.mutable_x() = Wire(x);
    req.set_num(333);
    req.set_window_name("kaiser");
    req.add_window_params(8.0);
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    REQUIRE(ts.interp->Resample(ctx.get(), req, &resp).ok());
    interp::ResampleOptions o;
    o.num = 333;
    o.window = interp::WindowSpec{interp::Window::kKaiser, 8.0};
    auto want = interp::Resample(Device::Cpu(), x, o);
    REQUIRE(want.ok());
    CHECK(MaxAbsError(FromWire(resp.y()), *want) == 0.0);
    req.clear_window_name();
    auto ctx2 = Ctx();
    grpc::Status st = ts.interp->Resample(ctx2.get(), req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("window_name"));
    req.clear_window_params();
    for (int i = 0; i < 250; ++i) req.add_window_values(1.0 - i / 500.0);
    req.set_freq_domain(true);
    auto ctx3 = Ctx();
    REQUIRE(ts.interp->Resample(ctx3.get(), req, &resp).ok());
    o.window.reset();
    o.window_values.assign(req.window_values().begin(), req.window_values().end());
    o.freq_domain = true;
    auto want2 = interp::Resample(Device::Cpu(), x, o);
    REQUIRE(want2.ok());
    CHECK(MaxAbsError(FromWire(resp.y()), *want2) == 0.0);
    req.add_window_values(1.0);  // 251 values for 250 samples
    auto ctx4 = Ctx();
    st = ts.interp->Resample(ctx4.get(), req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("window_values"));
    req.clear_window_values();
    req.set_window_name(std::string(70000, 'w'));  // echoed as a bounded prefix
    auto ctx5 = Ctx();
    st = ts.interp->Resample(ctx5.get(), req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("window_name") && Catch::Contains("70000 bytes"));
    CHECK(st.error_message().size() < 1000);
  }
  {
    v1::DecimateRequest req;
    *req.mutable_x() = Wire(x);
    req.set_q(4);
    req.set_axis(1);
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    REQUIRE(ts.interp->Decimate(ctx.get(), req, &resp).ok());
    interp::DecimateOptions o;
    o.q = 4;
    auto want = interp::Decimate(Device::Cpu(), x, o);
    REQUIRE(want.ok());
    HostArray got = FromWire(resp.y());
    CHECK(got.shape() == std::vector<int64_t>{3, 63});
    CHECK(MaxAbsError(got, *want) == 0.0);
    req.set_zero_phase(false);
    auto ctx2 = Ctx();
    REQUIRE(ts.interp->Decimate(ctx2.get(), req, &resp).ok());
    o.zero_phase = false;
    auto want2 = interp::Decimate(Device::Cpu(), x, o);
    REQUIRE(want2.ok());
    CHECK(MaxAbsError(FromWire(resp.y()), *want2) == 0.0);
    req.set_q(1);
    auto ctx3 = Ctx();
    grpc::Status st = ts.interp->Decimate(ctx3.get(), req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("q"));
  }
}

// `fresnel interp --mode fft` with a spectral window and --freq-domain, and `--taps` with complex
// taps, give the kernel's bits.
TEST_CASE("fresnel interp: fft window and domain; complex taps", "[server][interp][cli]") {
  TestServer ts;
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("fresnel_fft_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  HostArray x = RandomArray(DType::kComplex64, {2, 96});  // the CLI reads complex64
  REQUIRE(WriteNpy(dir + "/x.npy", x).ok());
  struct Case {
    std::vector<std::string> flags;
    std::optional<interp::WindowSpec> window;
    bool freq;
  };
  const std::vector<Case> cases = {
      {{}, std::nullopt, false},
      {{"--window", "tukey,0.3"}, interp::WindowSpec{interp::Window::kTukey, 5.0, {0.3}}, false},
      {{"--beta", "8"}, interp::WindowSpec{interp::Window::kKaiser, 8.0}, false},
      {{"--window", "hann", "--freq-domain"}, interp::WindowSpec{interp::Window::kHann}, true}};
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--server", ts.address, "interp", dir + "/x.npy",
                                     dir + "/y.npy", "--up", "5", "--down", "3", "--mode", "fft"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    CliResult r = RunCli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto y = ReadNpy(dir + "/y.npy");
    REQUIRE(y.ok());
    interp::ResampleOptions o;
    o.num = 160;
    o.window = c.window;
    o.freq_domain = c.freq;
    auto want = interp::Resample(Device::Cpu(), x, o);
    REQUIRE(want.ok());
    CHECK(y->shape() == want->shape());
    CHECK(y->bytes() == want->bytes());
  }
  // Complex taps from --taps: a complex result, through gRPC and through --shm alike.
  HostArray real = RandomArray(DType::kFloat32, {2, 300});
  HostArray taps = RandomArray(DType::kComplex64, {21});
  REQUIRE(WriteNpy(dir + "/r.npy", real).ok());
  REQUIRE(WriteNpy(dir + "/h.npy", taps).ok());
  interp::UpfirdnOptions u;
  u.up = 3;
  u.down = 2;
  u.taps_dtype = DType::kComplex64;
  std::vector<double> hr, hi;
  for (int i = 0; i < 21; ++i) {
    hr.push_back(taps.data<std::complex<float>>()[i].real());
    hi.push_back(taps.data<std::complex<float>>()[i].imag());
  }
  u.taps_imag = hi;
  auto want = interp::Upfirdn(Device::Cpu(), hr, real, u);
  REQUIRE(want.ok());
  REQUIRE(want->dtype() == DType::kComplex64);
  for (const char* shm : {"", "--shm"}) {
    std::vector<std::string> args = {"--server", ts.address, "interp", dir + "/r.npy",
                                     dir + "/c.npy", "--up", "3", "--down", "2", "--mode",
                                     "upfirdn", "--taps", dir + "/h.npy"};
    if (*shm) args.push_back(shm);
    CliResult r = RunCli(args);
    INFO(shm << " " << r.err);
    REQUIRE(r.code == 0);
    auto y = ReadNpy(dir + "/c.npy");
    REQUIRE(y.ok());
    CHECK(y->dtype() == DType::kComplex64);
    CHECK(y->shape() == want->shape());
    CHECK(y->bytes() == want->bytes());
  }
  CliResult chunked = RunCli({"--server", ts.address, "interp", dir + "/r.npy", dir + "/c.npy",
                              "--up", "3", "--down", "2", "--mode", "upfirdn", "--taps",
                              dir + "/h.npy", "--chunk", "100"});
  CHECK(chunked.code == 2);
  CHECK(chunked.err.find("complex --taps") != std::string::npos);
  std::filesystem::remove_all(dir);
}

// `fresnel interp --axis K` filters a 3-D array along K on the server: the kernels' bits for
// every mode, through gRPC and --shm, with the other axes as channels.
TEST_CASE("fresnel interp --axis filters an N-d array along that axis", "[server][interp][cli]") {
  TestServer ts;
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("fresnel_axis_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  HostArray x = RandomArray(DType::kFloat32, {3, 80, 4});
  HostArray taps = RandomArray(DType::kFloat64, {15});
  REQUIRE(WriteNpy(dir + "/x.npy", x).ok());
  REQUIRE(WriteNpy(dir + "/h.npy", taps).ok());
  const std::vector<double> h(taps.data<double>(), taps.data<double>() + 15);
  for (int axis : {0, 1, -1, -2}) {
    const int a = axis < 0 ? axis + 3 : axis;
    struct Case {
      std::string mode;
      absl::StatusOr<HostArray> want;
    };
    interp::ResamplePolyOptions rp;
    rp.up = 3;
    rp.down = 2;
    rp.axis = axis;
    interp::UpfirdnOptions uf;
    uf.up = 3;
    uf.down = 2;
    uf.axis = axis;
    interp::ResampleOptions fft;
    fft.num = (x.dim(a) * 3 + 1) / 2;
    fft.axis = axis;
    interp::DecimateOptions dec;
    dec.q = 2;
    dec.axis = axis;
    std::vector<Case> cases;
    cases.push_back({"resample", interp::ResamplePoly(Device::Cpu(), x, rp)});
    cases.push_back({"upfirdn", interp::Upfirdn(Device::Cpu(), h, x, uf)});
    cases.push_back({"fft", interp::Resample(Device::Cpu(), x, fft)});
    cases.push_back({"decimate", interp::Decimate(Device::Cpu(), x, dec)});
    for (const Case& c : cases) {
      REQUIRE(c.want.ok());
      for (const char* shm : {"", "--shm"}) {
        if (*shm && (c.mode == "fft" || c.mode == "decimate")) continue;  // unary only
        std::vector<std::string> args = {"--server", ts.address, "interp", dir + "/x.npy",
                                         dir + "/y.npy", "--mode", c.mode, "--axis",
                                         std::to_string(axis), "--json"};
        if (c.mode == "decimate") {
          args.insert(args.end(), {"--up", "1", "--down", "2"});
        } else {
          args.insert(args.end(), {"--up", "3", "--down", "2"});
        }
        if (c.mode == "upfirdn") args.insert(args.end(), {"--taps", dir + "/h.npy"});
        if (*shm) args.push_back(shm);
        CliResult r = RunCli(args);
        INFO(c.mode << " axis " << axis << " " << shm << " " << r.err);
        REQUIRE(r.code == 0);
        CHECK(r.out.find(absl::StrCat("\"axis\": ", a)) != std::string::npos);
        CHECK(r.out.find(absl::StrCat("\"samples_out\": ", c.want->dim(a))) !=
              std::string::npos);
        auto y = ReadNpy(dir + "/y.npy");
        REQUIRE(y.ok());
        CHECK(y->shape() == c.want->shape());
        CHECK(y->bytes() == c.want->bytes());
      }
    }
  }
  std::filesystem::remove_all(dir);
}

struct StreamResult {
  grpc::Status status;
  HostArray y;
  int responses = 0;
};

StreamResult RunStream(TestServer& ts, const v1::ResampleStreamConfig& config, const HostArray& x,
                       const std::vector<int64_t>& chunk_sizes) {
  StreamResult r;
  auto ctx = Ctx();
  auto stream = ts.interp->ResampleStream(ctx.get());
  v1::ResampleStreamRequest first;
  *first.mutable_config() = config;
  REQUIRE(stream->Write(first));
  int64_t channels = x.ndim() == 2 ? x.dim(0) : 1;
  int64_t n = x.shape().back();
  size_t es = DTypeSize(x.dtype());
  int64_t pos = 0;
  std::vector<HostArray> outs;
  for (size_t i = 0; pos < n || i < chunk_sizes.size(); ++i) {
    int64_t k = std::min(chunk_sizes[i % chunk_sizes.size()], n - pos);
    std::vector<int64_t> shape = x.ndim() == 2 ? std::vector<int64_t>{channels, k}
                                               : std::vector<int64_t>{k};
    HostArray chunk(x.dtype(), shape);
    for (int64_t c = 0; c < channels; ++c) {
      std::memcpy(static_cast<char*>(chunk.raw()) + c * k * es,
                  static_cast<const char*>(x.raw()) + (c * n + pos) * es, k * es);
    }
    pos += k;
    v1::ResampleStreamRequest req;
    *req.mutable_chunk() = Wire(chunk);
    bool last = pos >= n && i + 1 >= chunk_sizes.size();
    req.set_end(last);
    REQUIRE(stream->Write(req));
    v1::ResampleStreamResponse resp;
    if (!stream->Read(&resp)) break;
    ++r.responses;
    outs.push_back(FromWire(resp.y()));
    if (last) break;
  }
  stream->WritesDone();
  v1::ResampleStreamResponse extra;
  while (stream->Read(&extra)) outs.push_back(FromWire(extra.y()));
  r.status = stream->Finish();
  if (!r.status.ok()) return r;
  int64_t total = 0;
  for (auto& o : outs) total += o.shape().back();
  std::vector<int64_t> shape = x.ndim() == 2 ? std::vector<int64_t>{channels, total}
                                             : std::vector<int64_t>{total};
  r.y = HostArray(x.dtype(), shape);
  int64_t at = 0;
  for (auto& o : outs) {
    int64_t k = o.shape().back();
    for (int64_t c = 0; c < channels; ++c) {
      std::memcpy(static_cast<char*>(r.y.raw()) + (c * total + at) * es,
                  static_cast<const char*>(o.raw()) + c * k * es, k * es);
    }
    at += k;
  }
  return r;
}

TEST_CASE("ResampleStream in chunks equals the one-shot result", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat32, {2, 5000});
  SECTION("resample_poly 3/2 with uneven chunks") {
    v1::ResampleStreamConfig config;
    auto* rp = config.mutable_resample_poly();
    rp->set_up(3);
    rp->set_down(2);
    rp->mutable_x()->set_dtype(v1::FLOAT32);
    rp->mutable_x()->add_shape(2);
    rp->mutable_x()->add_shape(0);
    StreamResult r = RunStream(ts, config, x, {1, 700, 13, 0, 1999, 64});
    REQUIRE(r.status.ok());
    interp::ResamplePolyOptions o;
    o.up = 3;
    o.down = 2;
    auto want = interp::ResamplePoly(Device::Cpu(), x, o);
    REQUIRE(want.ok());
    CHECK(r.y.shape() == want->shape());
    CHECK(MaxAbsError(r.y, *want) == 0.0);
  }
  SECTION("upfirdn up=4 with a design") {
    v1::ResampleStreamConfig config;
    auto* u = config.mutable_upfirdn();
    u->set_up(4);
    u->mutable_design()->set_numtaps(33);
    u->mutable_design()->set_cutoff(0.25);
    u->mutable_x()->set_dtype(v1::FLOAT32);
    u->mutable_x()->add_shape(2);
    u->mutable_x()->add_shape(0);
    StreamResult r = RunStream(ts, config, x, {1024});
    REQUIRE(r.status.ok());
    auto taps = interp::Firwin(33, 0.25, {interp::Window::kHamming, 5});
    REQUIRE(taps.ok());
    interp::UpfirdnOptions o;
    o.up = 4;
    auto want = interp::Upfirdn(Device::Cpu(), *taps, x, o);
    REQUIRE(want.ok());
    CHECK(r.y.shape() == want->shape());
    CHECK(MaxAbsError(r.y, *want) == 0.0);
  }
}

// Chunks of a MiB and more on a GPU server go through the stream's pinned staging ring
// (StreamingResampler::PushInto, windows of 4 MiB of y overlapped): the bytes are those of a GPU
// server without staging (--shm-bytes 0: Push, pageable), float32 and complex128 (the kernels'
// test covers every dtype), one and two channels, uneven chunk sizes; the ring's buffers are
// reused chunk after chunk.
TEST_CASE("GPU server: ResampleStream through pinned staging = the pageable Push path",
          "[server][interp][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig staged_cfg = TestServer::CpuConfig();
  staged_cfg.gpus = "all";
  server::ServerConfig plain_cfg = staged_cfg;
  plain_cfg.shm_bytes = 0;
  TestServer staged(staged_cfg), plain(plain_cfg);
  for (DType dtype : {DType::kFloat32, DType::kComplex128}) {
    for (int64_t channels : {1, 2}) {
      CAPTURE(DTypeName(dtype), channels);
      const int64_t n = 1200000 / channels;
      HostArray x = RandomArray(dtype, channels == 1 ? std::vector<int64_t>{n}
                                                    : std::vector<int64_t>{channels, n}, 31);
      for (bool poly : {false, true}) {
        v1::ResampleStreamConfig config;
        v1::NdArray* cx = nullptr;
        if (poly) {
          auto* rp = config.mutable_resample_poly();
          rp->set_up(160);
          rp->set_down(147);
          rp->mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
          cx = rp->mutable_x();
        } else {
          auto* u = config.mutable_upfirdn();
          u->set_up(4);
          u->mutable_design()->set_numtaps(65);
          u->mutable_design()->set_cutoff(0.25);
          u->mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
          cx = u->mutable_x();
        }
        cx->set_dtype(ToProto(dtype));
        if (channels == 2) cx->add_shape(channels);
        cx->add_shape(0);
        const std::vector<int64_t> sizes = {300001 / channels, 7, 250000 / channels, 1};
        StreamResult want = RunStream(plain, config, x, sizes);
        REQUIRE(want.status.ok());
        StreamResult got = RunStream(staged, config, x, sizes);
        REQUIRE(got.status.ok());
        CHECK(got.y.shape() == want.y.shape());
        CHECK(got.y.bytes() == want.y.bytes());
      }
    }
  }
}

// The server reads up to three messages ahead of the chunk it filters (OrderedStream): a client
// that writes every chunk before reading an answer gets the same bytes, in order, and a chunk
// that fails with others queued behind it ends the stream after the answers before it.
TEST_CASE("ResampleStream read ahead: chunks written ahead, a failing chunk, cancellation",
          "[server][interp]") {
  TestServer ts;
  const int64_t channels = 2, n = 60000, k = 997;
  HostArray x = RandomArray(DType::kFloat32, {channels, n}, 77);
  v1::ResampleStreamConfig config;
  auto* rp = config.mutable_resample_poly();
  rp->set_up(3);
  rp->set_down(2);
  rp->mutable_x()->set_dtype(v1::FLOAT32);
  rp->mutable_x()->add_shape(channels);
  rp->mutable_x()->add_shape(0);
  auto chunk_message = [&](int64_t begin, int64_t len, bool end) {
    HostArray chunk(DType::kFloat32, {channels, len});
    for (int64_t c = 0; c < channels; ++c) {
      std::memcpy(chunk.data<float>() + c * len, x.data<float>() + c * n + begin,
                  static_cast<size_t>(len) * sizeof(float));
    }
    v1::ResampleStreamRequest req;
    *req.mutable_chunk() = Wire(chunk);
    req.set_end(end);
    return req;
  };
  const int64_t chunks = (n + k - 1) / k;

  SECTION("every chunk written before the first answer is read") {
    auto ctx = Ctx();
    auto stream = ts.interp->ResampleStream(ctx.get());
    std::thread writer([&] {
      v1::ResampleStreamRequest first;
      *first.mutable_config() = config;
      if (!stream->Write(first)) return;
      for (int64_t i = 0; i < chunks; ++i) {
        const int64_t begin = i * k;
        if (!stream->Write(chunk_message(begin, std::min(k, n - begin), i + 1 == chunks))) return;
      }
      stream->WritesDone();
    });
    std::vector<HostArray> outs;
    v1::ResampleStreamResponse resp;
    int64_t expect_index = 0;
    bool in_order = true;
    while (stream->Read(&resp)) {
      in_order = in_order && resp.chunk_index() == expect_index++;
      outs.push_back(FromWire(resp.y()));
    }
    writer.join();
    REQUIRE(stream->Finish().ok());
    CHECK(in_order);
    CHECK(static_cast<int64_t>(outs.size()) == chunks);
    interp::ResamplePolyOptions o;
    o.up = 3;
    o.down = 2;
    auto want = interp::ResamplePoly(Device::Cpu(), x, o);
    REQUIRE(want.ok());
    int64_t total = 0;
    for (const HostArray& a : outs) total += a.shape().back();
    REQUIRE(total == want->shape().back());
    HostArray y(DType::kFloat32, {channels, total});
    int64_t at = 0;
    for (const HostArray& a : outs) {
      const int64_t m = a.shape().back();
      for (int64_t c = 0; c < channels; ++c) {
        std::memcpy(y.data<float>() + c * total + at, a.data<float>() + c * m,
                    static_cast<size_t>(m) * sizeof(float));
      }
      at += m;
    }
    CHECK(y.bytes() == want->bytes());
  }
  SECTION("a chunk the resampler refuses, with chunks queued behind it") {
    RawBidiCall call(ts.channel, "/fresnel.v1.InterpolationService/ResampleStream");
    v1::ResampleStreamRequest first;
    *first.mutable_config() = config;
    REQUIRE(call.Write(first));
    for (int64_t i = 0; i < 6; ++i) REQUIRE(call.Write(chunk_message(i * k, k, false)));
    v1::ResampleStreamRequest bad;  // one channel where the stream has two
    *bad.mutable_chunk() = Wire(RandomArray(DType::kFloat32, {1, k}, 5));
    call.Write(bad);
    for (int64_t i = 7; i < 12; ++i) call.Write(chunk_message(i * k, k, false));
    call.Write(chunk_message(12 * k, k, true));
    call.WritesDone();
    int responses = 0;
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(responses == 6);  // the answers before the bad chunk, none after it
  }
  SECTION("streams cancelled with chunks in flight; the server goes on") {
    for (int round = 0; round < 10; ++round) {
      auto ctx = Ctx();
      auto stream = ts.interp->ResampleStream(ctx.get());
      std::thread writer([&] {
        v1::ResampleStreamRequest first;
        *first.mutable_config() = config;
        if (!stream->Write(first)) return;
        for (int64_t i = 0; i < chunks; ++i) {
          if (!stream->Write(chunk_message(i * k, std::min(k, n - i * k), false))) return;
        }
      });
      v1::ResampleStreamResponse resp;
      for (int i = 0; i < round % 4 && stream->Read(&resp); ++i) {
      }
      ctx->TryCancel();
      while (stream->Read(&resp)) {
      }
      writer.join();
      CHECK(stream->Finish().error_code() == grpc::StatusCode::CANCELLED);
    }
    StreamResult r = RunStream(ts, config, x, {5000});
    CHECK(r.status.ok());
  }
}

TEST_CASE("ResampleStream rejects a stream without config", "[server][interp]") {
  TestServer ts;
  auto ctx = Ctx();
  auto stream = ts.interp->ResampleStream(ctx.get());
  v1::ResampleStreamRequest req;
  *req.mutable_chunk() = Wire(RandomArray(DType::kFloat32, {10}));
  stream->Write(req);
  stream->WritesDone();
  v1::ResampleStreamResponse resp;
  while (stream->Read(&resp)) {
  }
  grpc::Status st = stream->Finish();
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("config"));
}

// gRPC reports a message it cannot parse like the client's half-close: the stream used to end OK
// with half the samples.
TEST_CASE("ResampleStream: an unparsable message or a missing end is an error", "[server][interp]") {
  TestServer ts;
  const std::string method = "/fresnel.v1.InterpolationService/ResampleStream";
  v1::ResampleStreamRequest config;
  auto* rp = config.mutable_config()->mutable_resample_poly();
  rp->set_up(3);
  rp->set_down(2);
  rp->mutable_x()->set_dtype(v1::FLOAT32);
  rp->mutable_x()->add_shape(0);
  v1::ResampleStreamRequest chunk;
  *chunk.mutable_chunk() = Wire(RandomArray(DType::kFloat32, {1000}));
  v1::ResampleStreamRequest end;
  end.set_end(true);
  int responses = 0;
  SECTION("config, chunk, garbage, chunk, end") {
    RawBidiCall call(ts.channel, method);
    REQUIRE(call.Write(config));
    REQUIRE(call.Write(chunk));
    call.Write(std::string("\x12\xff\xff\xff\xff\x0f", 6));
    call.Write(chunk);
    call.Write(end);
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("end: the stream closed after 1 chunk(s)"));
  }
  SECTION("chunks and a half-close without end") {
    RawBidiCall call(ts.channel, method);
    REQUIRE(call.Write(config));
    REQUIRE(call.Write(chunk));
    call.WritesDone();
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("without a message that sets end"));
    CHECK(responses == 1);
  }
  SECTION("garbage instead of the config") {
    RawBidiCall call(ts.channel, method);
    call.Write(std::string("\xff\xff\xff", 3));
    call.WritesDone();
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("config"));
  }
  SECTION("the same stream with end is OK") {
    RawBidiCall call(ts.channel, method);
    REQUIRE(call.Write(config));
    REQUIRE(call.Write(chunk));
    REQUIRE(call.Write(end));
    call.WritesDone();
    CHECK(call.ReadAllAndFinish(&responses).ok());
    CHECK(responses == 2);
  }
}

TEST_CASE("bad interpolation input gets INVALID_ARGUMENT naming the field", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat32, {100});
  auto call = [&](v1::UpfirdnRequest req) {
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    return ts.interp->Upfirdn(ctx.get(), req, &resp);
  };
  SECTION("negative up") {
    auto req = UpfirdnReq(x, {1, 2, 3}, -2, 1);
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("up"));
  }
  SECTION("down over the limit") {
    auto req = UpfirdnReq(x, {1, 2, 3}, 1, 1 << 20);
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("down"));
  }
  SECTION("empty taps") {
    auto req = UpfirdnReq(x, {}, 2, 1);
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("taps"));
  }
  SECTION("no filter at all") {
    auto req = UpfirdnReq(x, {1}, 2, 1);
    req.clear_taps();
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("taps"));
  }
  SECTION("shape and bytes disagree") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    req.mutable_x()->set_shape(0, 101);
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("x.data"));
  }
  SECTION("unknown dtype") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    req.mutable_x()->set_dtype(static_cast<v1::DType>(99));
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("x.dtype"));
  }
  SECTION("integer taps") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    *req.mutable_taps() = Wire(RandomArray(DType::kInt32, {4}));
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("taps.dtype"));
  }
  SECTION("unknown dtype rule") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    req.set_dtype_rule(static_cast<v1::DTypeRule>(9));
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("dtype_rule"));
  }
  SECTION("empty x with a mode that needs samples") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    *req.mutable_x() = Wire(HostArray(DType::kFloat64, {2, 0}));
    req.set_mode(v1::PAD_REFLECT);
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("mode"));
  }
  SECTION("unknown device kind") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    req.mutable_device()->set_kind(static_cast<v1::DeviceKind>(7));
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("device.kind"));
  }
  SECTION("axis out of range") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    *req.mutable_x() = Wire(RandomArray(DType::kFloat32, {2, 2, 25}));
    req.set_axis(3);
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("axis"));
  }
  SECTION("zero-dimensional x") {
    auto req = UpfirdnReq(x, {1, 2}, 2, 1);
    *req.mutable_x() = Wire(HostArray(DType::kFloat32, {}));
    grpc::Status st = call(req);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("x.shape"));
  }
}

TEST_CASE("payloads over the limits get RESOURCE_EXHAUSTED", "[server][interp]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 20;
  TestServer ts(config);
  SECTION("request larger than the message cap") {
    HostArray x = RandomArray(DType::kFloat32, {300000});
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    grpc::Status st = ts.interp->Upfirdn(ctx.get(), UpfirdnReq(x, {1, 2}, 1, 1), &resp);
    CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  SECTION("response that would exceed the cap names y and suggests streaming") {
    HostArray x = RandomArray(DType::kFloat32, {100000});
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    grpc::Status st = ts.interp->Upfirdn(ctx.get(), UpfirdnReq(x, {1, 2}, 8, 1), &resp);
    CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK_THAT(st.error_message(), Catch::Contains("y:") && Catch::Contains("ResampleStream"));
  }
}

TEST_CASE("an expired deadline is honoured", "[server][interp]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat32, {1000});
  v1::InterpolationResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() - std::chrono::milliseconds(1));
  grpc::Status st = ts.interp->Upfirdn(&ctx, UpfirdnReq(x, {1, 2}, 2, 1), &resp);
  CHECK(st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_CASE("metrics record requests and pass promtool", "[server][metrics]") {
  TestServer ts;
  HostArray x = RandomArray(DType::kFloat32, {1000});
  for (int i = 0; i < 3; ++i) {
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    REQUIRE(ts.interp->Upfirdn(ctx.get(), UpfirdnReq(x, {1, 2, 1}, 2, 1), &resp).ok());
  }
  {
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    ts.interp->Upfirdn(ctx.get(), UpfirdnReq(x, {1}, 0 - 1, 1), &resp);
  }
  std::string text = ts.server->MetricsText();
  CHECK_THAT(text, Catch::Contains(
      "fresnel_request_duration_seconds_count{code=\"OK\",method=\"Upfirdn\","
      "service=\"fresnel.v1.InterpolationService\"} 3"));
  CHECK_THAT(text, Catch::Contains("code=\"INVALID_ARGUMENT\""));
  CHECK_THAT(text, Catch::Contains("fresnel_queue_wait_seconds_bucket"));
  CHECK_THAT(text, Catch::Contains("fresnel_compute_seconds_sum{device=\"cpu\""));
  CHECK_THAT(text, Catch::Contains("fresnel_payload_bytes_total{direction=\"in\""));
  CHECK_THAT(text, Catch::Contains("fresnel_in_flight_requests"));
  CHECK_THAT(text, Catch::Contains("fresnel_queue_depth{device=\"cpu\"}"));

  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    WARN("promtool not installed: skipping `promtool check metrics`");
    return;
  }
  std::string path = "/tmp/fresnel_metrics_" + std::to_string(::getpid()) + ".txt";
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int rc = pclose(p);
  std::remove(path.c_str());
  INFO(out);
  CHECK(rc == 0);
}

// `fresnel bench --op mix` (issue 13, Load): every workload of the mix is answered, none fails,
// and the server's memory is read when its pid is given (here: this process).
TEST_CASE("fresnel bench --op mix runs every workload without errors", "[server][cli]") {
  TestServer ts;
  CliResult r = RunCli({"--server", ts.address, "bench", "--op", "mix", "--concurrency", "4",
                        "--duration", "1", "--device", "cpu", "--server-pid",
                        std::to_string(getpid()), "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"requests_failed\": 0"));
  CHECK_THAT(r.out, Catch::Contains("hologram render"));
  CHECK_THAT(r.out, Catch::Contains("unwrap"));
  CHECK_THAT(r.out, Catch::Contains("server_rss_end_bytes"));
  r = RunCli({"--server", ts.address, "bench", "--op", "mix", "--count", "5"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--duration"));
}

TEST_CASE("shutdown drains accepted work and refuses new work", "[server]") {
  TestServer ts;
  // A request heavy enough to still be running when the shutdown starts.
  HostArray x = RandomArray(DType::kFloat64, {4, 200000});
  v1::ResamplePolyRequest req;
  *req.mutable_x() = Wire(x);
  req.set_up(97);
  req.set_down(101);
  auto inflight = std::async(std::launch::async, [&] {
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    return ts.interp->ResamplePoly(ctx.get(), req, &resp);
  });
  for (int i = 0; i < 500 && ts.server->MetricsText().find("fresnel_running_jobs{device=\"cpu\"} 1") ==
                                 std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // The request must be running when the shutdown begins, or the test proves nothing.
  REQUIRE(ts.server->MetricsText().find("fresnel_running_jobs{device=\"cpu\"} 1") !=
          std::string::npos);
  auto stopping = std::async(std::launch::async, [&] { return ts.server->Shutdown(); });
  const grpc::Status answered = inflight.get();
  INFO("in-flight call: " << answered.error_code() << " " << answered.error_message());
  CHECK(answered.ok());
  CHECK(stopping.get());
  v1::InterpolationResponse late;
  auto ctx = Ctx(5);
  CHECK(ts.interp->ResamplePoly(ctx.get(), req, &late).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
}

// A ResampleStream that sends its config and then waits.
std::unique_ptr<grpc::ClientReaderWriter<v1::ResampleStreamRequest, v1::ResampleStreamResponse>>
OpenStream(TestServer& ts, grpc::ClientContext* ctx, int up) {
  // A test that goes wrong fails in seconds instead of waiting for ctest's timeout.
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = ts.interp->ResampleStream(ctx);
  v1::ResampleStreamRequest first;
  auto* rp = first.mutable_config()->mutable_resample_poly();
  rp->set_up(up);
  rp->set_down(1);
  rp->mutable_x()->set_dtype(v1::FLOAT32);
  rp->mutable_x()->add_shape(1);
  rp->mutable_x()->add_shape(0);
  stream->Write(first);
  return stream;
}

// Reads whatever the server still sends, then the call's status.
grpc::Status ReadToEnd(
    grpc::ClientReaderWriter<v1::ResampleStreamRequest, v1::ResampleStreamResponse>* s) {
  v1::ResampleStreamResponse resp;
  while (s->Read(&resp)) {
  }
  return s->Finish();
}

// Waits (up to 2 s) until the server holds `n` of its --max-streams slots. The server may
// construct stream reactors in any order, so a test that counts slots waits for this gauge
// instead of assuming that streams opened earlier hold theirs.
bool WaitForOpenStreams(TestServer& ts, int n) {
  const std::string want = absl::StrCat("fresnel_budget_used{budget=\"--max-streams\"} ", n, "\n");
  for (int i = 0; i < 1000; ++i) {
    if (ts.server->MetricsText().find(want) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

void EndStream(grpc::ClientReaderWriter<v1::ResampleStreamRequest, v1::ResampleStreamResponse>* s) {
  v1::ResampleStreamRequest end;
  end.set_end(true);
  s->Write(end);
  s->WritesDone();
}

v1::ResampleStreamRequest ChunkMessage(int64_t samples) {
  v1::ResampleStreamRequest m;
  *m.mutable_chunk() = Wire(RandomArray(DType::kFloat32, {1, samples}));
  return m;
}

// Issue 13 item 9: streams open at SIGTERM used to be cut off with UNAVAILABLE at their next
// chunk, and calls still open at the end of the drain got a bare CANCELLED.
TEST_CASE("a drain serves open streams to their end and refuses new calls", "[server][interp]") {
  server::ServerConfig config = TestServer::CpuConfig();
  SECTION("the open stream finishes within the drain timeout") {
    TestServer ts(config);
    grpc::ClientContext c;
    auto s = OpenStream(ts, &c, 3);
    v1::ResampleStreamResponse resp;
    REQUIRE(s->Write(ChunkMessage(1000)));
    REQUIRE(s->Read(&resp));
    auto stopping = std::async(std::launch::async, [&] { return ts.server->Shutdown(); });
    // Wait for the drain: a new stream is then refused.
    grpc::Status probe;
    for (int i = 0; i < 500; ++i) {
      grpc::ClientContext pc;
      auto p = OpenStream(ts, &pc, 3);
      EndStream(p.get());
      while (p->Read(&resp)) {
      }
      probe = p->Finish();
      if (!probe.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(probe.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK_THAT(probe.error_message(), Catch::Contains("draining"));
    // New unary work is refused too.
    v1::InterpolationResponse late;
    auto ctx = Ctx(5);
    HostArray x = RandomArray(DType::kFloat32, {100});
    CHECK(ts.interp->Upfirdn(ctx.get(), UpfirdnReq(x, {1.0}, 2, 1), &late).error_code() ==
          grpc::StatusCode::UNAVAILABLE);
    // The stream open before the drain goes on to its end.
    REQUIRE(s->Write(ChunkMessage(1000)));
    REQUIRE(s->Read(&resp));
    CHECK(resp.status().code() == 0);
    EndStream(s.get());
    while (s->Read(&resp)) {
    }
    CHECK(s->Finish().ok());
    CHECK(stopping.get());  // drained: nothing had to be stopped
  }
  SECTION("a stream still open at the drain timeout ends UNAVAILABLE saying so") {
    config.drain_timeout_s = 0.3;
    TestServer ts(config);
    grpc::ClientContext c;
    auto s = OpenStream(ts, &c, 3);
    v1::ResampleStreamResponse resp;
    REQUIRE(s->Write(ChunkMessage(1000)));
    REQUIRE(s->Read(&resp));
    CHECK_FALSE(ts.server->Shutdown());  // one stream had to be ended
    while (s->Read(&resp)) {
    }
    grpc::Status st = s->Finish();
    CHECK(st.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK_THAT(st.error_message(), Catch::Contains("drain timeout"));
  }
}

TEST_CASE("open streams and the state they derive are capped server-wide", "[server][interp]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_streams = 2;
  config.stream_state_bytes = 8 << 20;
  TestServer ts(config);
  SECTION("a third stream is RESOURCE_EXHAUSTED naming --max-streams; a closed one frees its slot") {
    grpc::ClientContext c1, c2, c3, c4;
    auto s1 = OpenStream(ts, &c1, 3);
    auto s2 = OpenStream(ts, &c2, 3);
    // The server may construct the reactors in any order: only once both first streams hold
    // their slots is the third the one refused (it used to be s1 or s2 now and then, and s3 then
    // waited for its next message forever).
    REQUIRE(WaitForOpenStreams(ts, 2));
    auto s3 = OpenStream(ts, &c3, 3);
    v1::ResampleStreamResponse resp;
    while (s3->Read(&resp)) {
    }
    grpc::Status st = s3->Finish();
    CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK_THAT(st.error_message(), Catch::Contains("--max-streams"));
    EndStream(s1.get());
    while (s1->Read(&resp)) {
    }
    CHECK(s1->Finish().ok());
    // The slot comes back when the first stream's reactor is gone: retry briefly.
    grpc::Status fourth;
    for (int i = 0; i < 200; ++i) {
      grpc::ClientContext c;
      auto s = OpenStream(ts, &c, 3);
      EndStream(s.get());
      while (s->Read(&resp)) {
      }
      fourth = s->Finish();
      if (fourth.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(fourth.ok());
    EndStream(s2.get());
    while (s2->Read(&resp)) {
    }
    CHECK(s2->Finish().ok());
  }
  SECTION("an 18-byte config asking for a million-tap filter is refused and not kept") {
    grpc::ClientContext c;
    auto s = OpenStream(ts, &c, 52428);  // resample_poly designs 20 * 52428 + 1 taps
    v1::ResampleStreamResponse resp;
    while (s->Read(&resp)) {
    }
    grpc::Status st = s->Finish();
    CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK_THAT(st.error_message(), Catch::Contains("--stream-state-bytes"));
  }
}

TEST_CASE("one client's open streams are capped by --max-streams-per-client", "[server][interp]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_streams = 16;
  config.max_streams_per_client = 2;  // without authentication: per host address (loopback here)
  TestServer ts(config);
  grpc::ClientContext c1, c2, c3;
  auto s1 = OpenStream(ts, &c1, 3);
  auto s2 = OpenStream(ts, &c2, 3);
  REQUIRE(WaitForOpenStreams(ts, 2));
  auto s3 = OpenStream(ts, &c3, 3);
  grpc::Status st = ReadToEnd(s3.get());
  CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(st.error_message(), Catch::Contains("--max-streams-per-client"));
  CHECK_THAT(st.error_message(), Catch::Contains("peer:ipv"));
  // The refused stream gave its server-wide slot back: 2 of --max-streams stay in use.
  CHECK_THAT(ts.server->MetricsText(),
             Catch::Contains("fresnel_budget_used{budget=\"--max-streams\"} 2"));
  for (auto* s : {s1.get(), s2.get()}) {
    EndStream(s);
    CHECK(ReadToEnd(s).ok());
  }
}

// Issue 13, Faults: a client that disconnects mid-stream gives back what its stream held. The
// gauges must return to zero and the process's resident memory to its level after a warm-up
// (glibc keeps freed arenas: malloc_trim before each reading). Not under ASan, whose quarantine
// holds freed memory on purpose.
TEST_CASE("clients that disconnect mid-stream give their memory back", "[server][interp]") {
#if defined(__SANITIZE_ADDRESS__)
  SUCCEED("RSS is not meaningful under AddressSanitizer");
  return;
#endif
  TestServer ts(TestServer::CpuConfig());
  auto resident_bytes = [] {
    malloc_trim(0);
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0, resident = 0;
    statm >> pages >> resident;
    return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  };
  HostArray chunk = RandomArray(DType::kFloat32, {1, 1 << 20});  // 4 MiB per chunk, 12 MiB out
  v1::ResampleStreamRequest chunk_msg;
  ToProto(chunk, chunk_msg.mutable_chunk());
  // Sends the config and five chunks, reading the answers of the first four, then either ends the
  // stream or drops it with the fifth in flight (the client cancels: what a crashing client does).
  auto one_stream = [&](bool drop) {
    grpc::ClientContext ctx;
    auto s = OpenStream(ts, &ctx, 3);
    v1::ResampleStreamResponse resp;
    for (int i = 0; i < 4; ++i) {  // one at a time: a client that does not read stalls its writes
      s->Write(chunk_msg);
      s->Read(&resp);
    }
    s->Write(chunk_msg);  // in flight when the client goes
    if (drop) {
      ctx.TryCancel();
    } else {
      EndStream(s.get());
    }
    return ReadToEnd(s.get());
  };
  grpc::Status warm = one_stream(false);  // warm-up: thread stacks, arenas, gRPC buffers
  INFO(warm.error_message());
  REQUIRE(warm.ok());
  auto gauges_at_zero = [&] {
    const std::string m = ts.server->MetricsText();
    return m.find("fresnel_budget_used{budget=\"--max-streams\"} 0") != std::string::npos &&
           m.find("fresnel_budget_used{budget=\"--stream-state-bytes\"} 0") != std::string::npos;
  };
  auto wait_for_zero = [&] {
    for (int i = 0; i < 2000 && !gauges_at_zero(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return gauges_at_zero();
  };
  REQUIRE(wait_for_zero());
  const int64_t base = resident_bytes();
  for (int i = 0; i < 20; ++i) {
    grpc::Status st = one_stream(true);
    CHECK(st.error_code() == grpc::StatusCode::CANCELLED);
  }
  REQUIRE(wait_for_zero());
  // 20 streams held 16 MiB of chunks and up to 48 MiB of outputs each: a leak of what one stream
  // held shows as a GiB; allow what allocator fragmentation and gRPC buffers leave (34 MiB seen).
  const int64_t grown = resident_bytes() - base;
  INFO("resident growth after 20 dropped streams: " << grown / (1 << 20) << " MiB");
  CHECK(grown < (int64_t{160} << 20));
}

TEST_CASE("a keyed budget caps each key alone and forgets idle keys", "[server]") {
  server::KeyedBudget budget("--max-streams-per-client", 2);
  auto a1 = budget.Reserve("alice", 1, "a stream");
  auto a2 = budget.Reserve("alice", 1, "a stream");
  REQUIRE(a1.ok());
  REQUIRE(a2.ok());
  auto a3 = budget.Reserve("alice", 1, "a stream");
  REQUIRE(a3.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(a3.status().message()), Catch::Contains("client 'alice'"));
  CHECK_THAT(std::string(a3.status().message()), Catch::Contains("--max-streams-per-client (2)"));
  auto b1 = budget.Reserve("bob", 1, "a stream");  // another client is not affected
  REQUIRE(b1.ok());
  CHECK(budget.keys() == 2);
  *a1 = server::Budget::Reservation();
  CHECK(budget.Reserve("alice", 1, "a stream").ok());  // freed slot is taken (and given back)
  *a2 = server::Budget::Reservation();
  *b1 = server::Budget::Reservation();
  CHECK(budget.keys() == 0);
  CHECK(budget.Reserve("carol", 1, "a stream").ok());  // idle keys are dropped meanwhile
}

// The fault switch (AdminService.InjectFault, --fault-injection): refused unless the flag is set;
// UNHEALTHY takes a device out as a sticky error would; health, metrics and placement see it.
TEST_CASE("InjectFault: a test switch, off by default, that takes a device out", "[server]") {
  SECTION("without --fault-injection it is FAILED_PRECONDITION naming the flag") {
    TestServer ts;
    v1::InjectFaultRequest req;
    req.set_device_id("cpu");
    req.set_kind(v1::FAULT_KIND_UNHEALTHY);
    v1::InjectFaultResponse resp;
    auto ctx = Ctx();
    grpc::Status st = ts.admin->InjectFault(ctx.get(), req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(st.error_message(), Catch::Contains("--fault-injection"));
  }
  SECTION("with it: bad requests name the field; UNHEALTHY takes the CPU pool out") {
    server::ServerConfig config = TestServer::CpuConfig();
    config.fault_injection = true;
    TestServer ts(config);
    auto inject = [&](const std::string& device, v1::FaultKind kind, v1::InjectFaultResponse* r) {
      v1::InjectFaultRequest req;
      req.set_device_id(device);
      req.set_kind(kind);
      auto ctx = Ctx();
      return ts.admin->InjectFault(ctx.get(), req, r);
    };
    v1::InjectFaultResponse resp;
    grpc::Status unknown = inject("cuda:7", v1::FAULT_KIND_UNHEALTHY, &resp);
    CHECK(unknown.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK_THAT(unknown.error_message(), Catch::Contains("device_id") && Catch::Contains("cpu"));
    grpc::Status no_kind = inject("cpu", v1::FAULT_KIND_UNSPECIFIED, &resp);
    CHECK(no_kind.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(no_kind.error_message(), Catch::StartsWith("kind:"));
    grpc::Status cpu_sticky = inject("cpu", v1::FAULT_KIND_STICKY_ERROR, &resp);
    CHECK(cpu_sticky.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(cpu_sticky.error_message(), Catch::Contains("needs a CUDA device"));
    // Work runs before the fault...
    HostArray x = RandomArray(DType::kFloat32, {1, 1000});
    std::vector<double> taps = {0.5, 0.25};
    v1::InterpolationResponse out;
    auto c1 = Ctx();
    REQUIRE(ts.interp->Upfirdn(c1.get(), UpfirdnReq(x, taps, 2, 1), &out).ok());
    REQUIRE(inject("cpu", v1::FAULT_KIND_UNHEALTHY, &resp).ok());
    CHECK(resp.device_id() == "cpu");
    CHECK_FALSE(resp.healthy());
    CHECK_THAT(resp.reason(), Catch::Contains("InjectFault"));
    CHECK_THAT(ts.server->MetricsText(), Catch::Contains("fresnel_device_healthy{device=\"cpu\"} 0"));
    // ... and none after: the only device is out, so new work is refused, not run.
    auto c2 = Ctx();
    grpc::Status refused = ts.interp->Upfirdn(c2.get(), UpfirdnReq(x, taps, 2, 1), &out);
    CHECK_FALSE(refused.ok());
    CHECK(refused.error_code() != grpc::StatusCode::INTERNAL);
    v1::ServerInfo info;
    auto c3 = Ctx();
    REQUIRE(ts.admin->GetServerInfo(c3.get(), v1::GetServerInfoRequest(), &info).ok());
  }
}

// A real sticky CUDA error through the switch: the device leaves placement, health and metrics
// say so, and work that may run anywhere goes to the CPU pool.
// A poisoned context stays poisoned for the whole process, so this case is hidden from the
// "[gpu]" run and has a ctest entry (test_server_gpu_sticky) of its own.
TEST_CASE("InjectFault STICKY_ERROR poisons a GPU; new work avoids it", "[server][gpu][.sticky]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "0";
  config.fault_injection = true;
  TestServer ts(config);
  HostArray x = RandomArray(DType::kFloat32, {1, 100000});
  std::vector<double> taps = {0.5, 0.25, 0.125};
  v1::InterpolationResponse out;
  v1::UpfirdnRequest on_gpu = UpfirdnReq(x, taps, 2, 1);
  on_gpu.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  auto c1 = Ctx();
  REQUIRE(ts.interp->Upfirdn(c1.get(), on_gpu, &out).ok());
  CHECK(out.info().device() == "cuda:0");
  v1::InjectFaultRequest req;
  req.set_device_id("cuda:0");
  req.set_kind(v1::FAULT_KIND_STICKY_ERROR);
  v1::InjectFaultResponse resp;
  auto c2 = Ctx();
  grpc::Status st = ts.admin->InjectFault(c2.get(), req, &resp);
  REQUIRE(st.ok());
  CHECK_FALSE(resp.healthy());
  CHECK_THAT(resp.reason(), Catch::Contains("illegal") || Catch::Contains("Illegal"));
  CHECK_THAT(ts.server->MetricsText(),
             Catch::Contains("fresnel_device_healthy{device=\"cuda:0\"} 0"));
  auto c3 = Ctx();
  grpc::Status gpu_only = ts.interp->Upfirdn(c3.get(), on_gpu, &out);
  CHECK_FALSE(gpu_only.ok());
  v1::UpfirdnRequest anywhere = UpfirdnReq(x, taps, 2, 1);
  auto c4 = Ctx();
  REQUIRE(ts.interp->Upfirdn(c4.get(), anywhere, &out).ok());
  CHECK(out.info().device() == "cpu");
}

// Issue 13, Faults: device out-of-memory is RESOURCE_EXHAUSTED, not a sticky error, and the device
// goes on serving. A pool capped by cudaMemPoolProps::maxSize (--gpu-memory-bytes) makes the
// failure real and repeatable.
TEST_CASE("GPU out of memory is RESOURCE_EXHAUSTED and the device serves on", "[server][gpu]") {
  if (SkipWithoutGpu()) return;
  HostArray big = RandomArray(DType::kFloat32, {1, int64_t{16} << 20});  // 64 MiB
  HostArray small = RandomArray(DType::kFloat32, {1, 1000});
  std::vector<double> taps = {0.5, 0.25, 0.125};
  interp::UpfirdnOptions o;
  o.up = 2;
  SECTION("the kernel, on a pool capped at 32 MiB") {
    auto pool = GpuMemPool::Create(0, 0, int64_t{32} << 20);
    REQUIRE(pool.ok());
    auto stream = GpuStream::Create(0);
    REQUIRE(stream.ok());
    const Device gpu = Device::Cuda(0, (*stream)->handle(), (*pool)->handle());
    auto failed = interp::Upfirdn(gpu, taps, big, o);
    REQUIRE(failed.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(std::string(failed.status().message()), Catch::Contains("cudaErrorMemoryAllocation"));
    CHECK(GpuContextStatus(0, (*stream)->handle()).ok());  // not sticky
    auto fine = interp::Upfirdn(gpu, taps, small, o);
    REQUIRE(fine.ok());
    auto want = interp::Upfirdn(Device::Cpu(), taps, small, o);
    REQUIRE(want.ok());
    CHECK(RelativeError(*fine, *want) < 1e-6);
  }
  SECTION("the server with --gpu-memory-bytes 64 MiB") {
    server::ServerConfig config = TestServer::CpuConfig();
    config.gpus = "all";
    config.gpu_memory_bytes = int64_t{64} << 20;
    config.max_message_bytes = int64_t{512} << 20;
    TestServer ts(config);
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    v1::UpfirdnRequest req = UpfirdnReq(big, taps, 2, 1);
    req.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
    grpc::Status st = ts.interp->Upfirdn(ctx.get(), req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    v1::UpfirdnRequest ok_req = UpfirdnReq(small, taps, 2, 1);
    ok_req.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
    auto ctx2 = Ctx();
    REQUIRE(ts.interp->Upfirdn(ctx2.get(), ok_req, &resp).ok());
    CHECK(resp.info().device() == "cuda:0");
    CHECK_THAT(ts.server->MetricsText(), Catch::Contains("fresnel_device_healthy{device=\"cuda:0\"} 1"));
  }
}

TEST_CASE("GPU pool: results over gRPC equal the CPU oracle", "[server][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  v1::ServerInfo info;
  auto ictx = Ctx();
  REQUIRE(ts.admin->GetServerInfo(ictx.get(), v1::GetServerInfoRequest(), &info).ok());
  REQUIRE(info.devices_size() == GpuCount() + 1);
  HostArray x = RandomArray(DType::kFloat32, {4, 100000});
  std::vector<double> taps(64);
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = std::sin(0.3 * i) / (1.0 + i);
  // Enough concurrent requests to land on every GPU.
  std::vector<std::future<std::pair<grpc::Status, v1::InterpolationResponse>>> calls;
  for (int i = 0; i < 4 * GpuCount(); ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      v1::InterpolationResponse resp;
      auto ctx = Ctx();
      grpc::Status st = ts.interp->Upfirdn(ctx.get(), UpfirdnReq(x, taps, 4, 1), &resp);
      return std::make_pair(st, resp);
    }));
  }
  interp::UpfirdnOptions o;
  o.up = 4;
  auto want = interp::Upfirdn(Device::Cpu(), taps, x, o);
  REQUIRE(want.ok());
  std::set<std::string> devices;
  for (auto& c : calls) {
    auto [st, resp] = c.get();
    REQUIRE(st.ok());
    devices.insert(resp.info().device());
    CHECK(RelativeError(FromWire(resp.y()), *want) < 1e-5);
  }
  CHECK(devices.count("cpu") == 0);
  INFO("devices used: " << devices.size());
  CHECK(static_cast<int>(devices.size()) == GpuCount());
}

// Issue 13, Load: a request of a few microseconds of work costs more as a GPU launch than it
// does on the CPU, so kind ANY requests under --small-job-bytes run on the CPU while it has room
// (fewer than kSmallJobCpuLoadPerWorker jobs per worker); a busy CPU spills them to the GPU.
TEST_CASE("small ANY requests run on the CPU while it has room, then spill to the GPU", "[server][gpu]") {
  if (SkipWithoutGpu()) return;
  HostArray tiny = RandomArray(DType::kFloat32, {1, 256});
  HostArray large = RandomArray(DType::kFloat32, {4, 100000});  // 1.6 MB in: over 64 KiB
  std::vector<double> taps = {0.5, 0.25, 0.125};
  auto device_of = [](TestServer& ts, const HostArray& x, const std::vector<double>& h,
                      v1::DeviceKind kind) {
    v1::UpfirdnRequest req = UpfirdnReq(x, h, 2, 1);
    req.mutable_device()->set_kind(kind);
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    grpc::Status st = ts.interp->Upfirdn(ctx.get(), req, &resp);
    INFO(st.error_message());
    CHECK(st.ok());
    return resp.info().device();
  };
  SECTION("default --small-job-bytes (64 KiB)") {
    server::ServerConfig config = TestServer::CpuConfig();
    config.gpus = "0";
    config.cpu_workers = 1;
    REQUIRE(config.small_job_bytes == int64_t{64} << 10);
    TestServer ts(config);
    CHECK(device_of(ts, tiny, taps, v1::DEVICE_KIND_ANY) == "cpu");
    CHECK(device_of(ts, tiny, taps, v1::DEVICE_KIND_GPU) == "cuda:0");
    CHECK(device_of(ts, large, taps, v1::DEVICE_KIND_ANY) == "cuda:0");
    // Four long CPU jobs (one running, three queued on the one worker) fill the CPU's room.
    HostArray block_x = RandomArray(DType::kFloat32, {1, 1 << 21});
    std::vector<double> block_taps(8192, 1.0 / 8192);
    std::vector<std::future<grpc::Status>> blockers;
    for (int i = 0; i < server::kSmallJobCpuLoadPerWorker; ++i) {
      blockers.push_back(std::async(std::launch::async, [&] {
        v1::UpfirdnRequest req = UpfirdnReq(block_x, block_taps, 1, 1);
        req.mutable_device()->set_kind(v1::DEVICE_KIND_CPU);
        v1::InterpolationResponse resp;
        auto ctx = Ctx();
        return ts.interp->Upfirdn(ctx.get(), req, &resp);
      }));
    }
    const std::string full = absl::StrCat("fresnel_queue_depth{device=\"cpu\"} ",
                                          server::kSmallJobCpuLoadPerWorker - 1, "\n");
    bool filled = false;
    for (int i = 0; i < 2000 && !filled; ++i) {
      filled = ts.server->MetricsText().find(full) != std::string::npos;
      if (!filled) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(filled);
    CHECK(device_of(ts, tiny, taps, v1::DEVICE_KIND_ANY) == "cuda:0");
    for (auto& b : blockers) CHECK(b.get().ok());
    CHECK(device_of(ts, tiny, taps, v1::DEVICE_KIND_ANY) == "cpu");
  }
  SECTION("--small-job-bytes 0: every ANY request goes to the GPU") {
    server::ServerConfig config = TestServer::CpuConfig();
    config.gpus = "0";
    config.small_job_bytes = 0;
    TestServer ts(config);
    CHECK(device_of(ts, tiny, taps, v1::DEVICE_KIND_ANY) == "cuda:0");
  }
}

// InjectFault UNHEALTHY on `device` of a server started with --fault-injection; its answer.
v1::InjectFaultResponse MakeUnhealthy(const TestServer& ts, const std::string& device) {
  v1::InjectFaultRequest req;
  req.set_device_id(device);
  req.set_kind(v1::FAULT_KIND_UNHEALTHY);
  v1::InjectFaultResponse resp;
  auto ctx = Ctx();
  REQUIRE(ts.admin->InjectFault(ctx.get(), req, &resp).ok());
  return resp;
}

// Issue 14 without a GPU: --cpu-partitions 2 makes two CPU pool devices. One made unhealthy
// through the fault switch shows in ServerInfo's neighbours (health, metrics) and gets no more
// work; the other serves on. (The pool test checks that work spreads over both.)
TEST_CASE("CPU partitions: per-device health and metrics; an unhealthy one is avoided",
          "[server]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.cpu_partitions = 2;
  config.cpu_workers = 2;
  config.fault_injection = true;
  TestServer ts(config);
  std::unique_ptr<Client> client = ConnectTo(ts);
  AdminClient admin(client.get());
  auto info = admin.GetServerInfo();
  REQUIRE(info.ok());
  REQUIRE(info->devices_size() == 2);
  CHECK(info->devices(0).id() == "cpu.0");
  CHECK(info->devices(1).id() == "cpu.1");
  CHECK(info->cpu_workers() == 2);
  CHECK(info->limits().server().cpu_partitions() == 2);
  CHECK(admin.CheckHealth("fresnel.device.cpu.1").value() == ServingStatus::kServing);
  CliResult cli = RunCli({"--server", ts.address, "info"});
  INFO(cli.err);
  REQUIRE(cli.code == 0);
  CHECK_THAT(cli.out, Catch::Contains("the CPU as 2 pool devices") && Catch::Contains("cpu.1"));

  CHECK_FALSE(MakeUnhealthy(ts, "cpu.1").healthy());
  const std::string metrics = ts.server->MetricsText();
  CHECK_THAT(metrics, Catch::Contains("fresnel_device_healthy{device=\"cpu.1\"} 0"));
  CHECK_THAT(metrics, Catch::Contains("fresnel_device_healthy{device=\"cpu.0\"} 1"));
  CHECK(admin.CheckHealth("fresnel.device.cpu.1").value() == ServingStatus::kNotServing);
  CHECK(admin.CheckHealth("fresnel.device.cpu.0").value() == ServingStatus::kServing);
  CHECK(admin.CheckHealth().value() == ServingStatus::kServing);  // the server serves on

  HostArray x = RandomArray(DType::kFloat32, {2, 4096});
  std::vector<double> taps(32, 1.0 / 32);
  for (int i = 0; i < 8; ++i) {
    v1::InterpolationResponse out;
    auto c = Ctx();
    REQUIRE(ts.interp->Upfirdn(c.get(), UpfirdnReq(x, taps, 2, 1), &out).ok());
    CHECK(out.info().device() == "cpu.0");
  }
}

// Issue 14's scaling bench (`fresnel bench --op hologram|unwrap|volume`, and upfirdn /
// resample_poly with --shm): on two CPU partitions every op runs without errors, through a
// region per worker where asked, and the work lands on both devices (volume: the meshes are
// placed on both, each worker rendering its own).
TEST_CASE("fresnel bench's device ops run on every pool device", "[server][cli]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.cpu_partitions = 2;
  config.cpu_workers = 2;
  TestServer ts(config);
  const std::vector<std::vector<std::string>> runs = {
      {"--op", "hologram", "--image-size", "96x64", "--points", "200"},
      {"--op", "hologram", "--image-size", "96x64", "--points", "200", "--shm",
       "--connections", "1"},
      {"--op", "unwrap", "--image-size", "128x96", "--shm"},
      {"--op", "unwrap", "--image-size", "128x96", "--method", "lsq"},
      {"--op", "volume", "--mesh", "box:6", "--image-size", "64x48", "--shm"},
      {"--op", "volume", "--mesh", "box:6", "--image-size", "64x48", "--meshes", "2"},
      {"--op", "upfirdn", "--up", "2", "--down", "1", "--samples", "5000", "--shm",
       "--connections", "2"},
      {"--op", "resample_poly", "--samples", "5000", "--shm"},
  };
  for (const std::vector<std::string>& run : runs) {
    std::vector<std::string> args = {"--server", ts.address, "bench", "--concurrency", "4",
                                     "--count", "24", "--device", "cpu", "--json"};
    args.insert(args.end(), run.begin(), run.end());
    CliResult r = RunCli(args);
    INFO(absl::StrJoin(run, " ") << "\n" << r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("\"requests_ok\": 24"));
    CHECK_THAT(r.out, Catch::Contains("\"requests_failed\": 0"));
    // Four workers, two devices each with one worker: both get work.
    CHECK_THAT(r.out, Catch::Contains("\"cpu.0\": ") && Catch::Contains("\"cpu.1\": "));
    const bool shm = std::find(run.begin(), run.end(), "--shm") != run.end();
    CHECK_THAT(r.out, Catch::Contains(shm ? "\"shm\": true" : "\"shm\": false"));
    if (run[1] == "volume") {
      CHECK_THAT(r.out, Catch::Contains("\"meshes_per_device\": {\"cpu.0\": ") &&
                            Catch::Contains(", \"cpu.1\": "));
    }
  }
  // The bench deleted its meshes at the end: no session is left open on either device.
  std::istringstream metrics(ts.server->MetricsText());
  int session_lines = 0;
  for (std::string line; std::getline(metrics, line);) {
    if (line.rfind("fresnel_sessions{", 0) != 0) continue;
    ++session_lines;
    INFO(line);
    CHECK(line.substr(line.rfind(' ') + 1) == "0");
  }
  CHECK(session_lines >= 2);
}

// Issue 14: concurrent GPU work lands on both of two pool devices `a` and `b`; `b` made
// unhealthy through the fault switch shows in the metrics and gets no more work.
void CheckWorkSpreadsAndAvoidsUnhealthy(server::ServerConfig config, const std::string& a,
                                        const std::string& b) {
  config.fault_injection = true;
  TestServer ts(config);
  HostArray x = RandomArray(DType::kFloat32, {4, 1 << 16});  // 4 MiB out: under the message cap
  std::vector<double> taps(64, 1.0 / 64);
  auto run_many = [&](int n) {
    std::vector<std::future<std::pair<grpc::Status, std::string>>> calls;
    for (int i = 0; i < n; ++i) {
      calls.push_back(std::async(std::launch::async, [&] {
        v1::InterpolationResponse resp;
        auto ctx = Ctx();
        v1::UpfirdnRequest req = UpfirdnReq(x, taps, 4, 1);
        req.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
        grpc::Status st = ts.interp->Upfirdn(ctx.get(), req, &resp);
        return std::make_pair(st, resp.info().device());
      }));
    }
    std::map<std::string, int> used;
    for (auto& c : calls) {
      auto [st, device] = c.get();
      INFO(st.error_message());
      CHECK(st.ok());
      used[device] += 1;
    }
    return used;
  };
  std::map<std::string, int> before = run_many(16);
  CHECK(before[a] > 0);
  CHECK(before[b] > 0);
  MakeUnhealthy(ts, b);
  const std::string metrics = ts.server->MetricsText();
  CHECK_THAT(metrics, Catch::Contains(absl::StrCat("fresnel_device_healthy{device=\"", b, "\"} 0")));
  CHECK_THAT(metrics, Catch::Contains(absl::StrCat("fresnel_device_healthy{device=\"", a, "\"} 1")));
  std::unique_ptr<Client> client = ConnectTo(ts);
  AdminClient admin(client.get());
  CHECK(admin.CheckHealth("fresnel.device." + b).value() == ServingStatus::kNotServing);
  CHECK(admin.CheckHealth("fresnel.device." + a).value() == ServingStatus::kServing);
  CHECK(admin.CheckHealth().value() == ServingStatus::kServing);  // the server serves on
  std::map<std::string, int> after = run_many(8);
  CHECK(after[a] == 8);
  CHECK(after.count(b) == 0);
}

// Issue 14 on one GPU: two partitions of cuda:0 are two pool devices.
TEST_CASE("GPU partitions: work spreads over both; an unhealthy one is avoided", "[server][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "0";
  config.gpu_partitions = 2;
  CheckWorkSpreadsAndAvoidsUnhealthy(config, "cuda:0.0", "cuda:0.1");
}

// Issue 14 on two GPUs (nvidia-h200-x2): the same with cuda:0 and cuda:1.
TEST_CASE("two GPUs: work spreads over both; an unhealthy one is avoided", "[server][gpu]") {
  if (SkipWithFewerGpus(2)) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "0,1";
  CheckWorkSpreadsAndAvoidsUnhealthy(config, "cuda:0", "cuda:1");
}

}  // namespace
}  // namespace fresnel::testing

namespace fresnel::testing {
namespace {

// Regression: cancelling a stream whose chunk is still queued completes the job on the cancelling
// thread; the reactor used to take its own lock twice there and hang, which then also hung
// Shutdown (this test would never finish).
TEST_CASE("cancelling a ResampleStream while its chunk is queued does not hang", "[server]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.cpu_workers = 1;
  TestServer ts(config);
  // Occupy the only CPU worker.
  HostArray big = RandomArray(DType::kFloat64, {4, 200000});
  v1::ResamplePolyRequest slow;
  *slow.mutable_x() = Wire(big);
  slow.set_up(97);
  slow.set_down(101);
  auto busy = std::async(std::launch::async, [&] {
    v1::InterpolationResponse resp;
    auto ctx = Ctx();
    return ts.interp->ResamplePoly(ctx.get(), slow, &resp);
  });
  for (int i = 0; i < 500 && ts.server->MetricsText().find(
                                 "fresnel_running_jobs{device=\"cpu\"} 1") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  grpc::ClientContext ctx;
  auto stream = ts.interp->ResampleStream(&ctx);
  v1::ResampleStreamRequest first;
  auto* rp = first.mutable_config()->mutable_resample_poly();
  rp->set_up(3);
  rp->set_down(2);
  rp->mutable_x()->set_dtype(v1::FLOAT32);
  rp->mutable_x()->add_shape(1);
  rp->mutable_x()->add_shape(0);
  REQUIRE(stream->Write(first));
  v1::ResampleStreamRequest chunk;
  *chunk.mutable_chunk() = Wire(RandomArray(DType::kFloat32, {1, 1000}));
  REQUIRE(stream->Write(chunk));
  // Cancel only once the chunk's job is queued behind the busy worker (the case under test).
  bool queued = false;
  for (int i = 0; i < 1000 && !queued; ++i) {
    queued = ts.server->MetricsText().find("fresnel_queue_depth{device=\"cpu\"} 1") !=
             std::string::npos;
    if (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(queued);
  ctx.TryCancel();
  v1::ResampleStreamResponse resp;
  while (stream->Read(&resp)) {
  }
  CHECK(stream->Finish().error_code() == grpc::StatusCode::CANCELLED);
  CHECK(busy.get().ok());
  CHECK(ts.server->Shutdown());
}

}  // namespace
}  // namespace fresnel::testing
