// fresnel::Client against the in-process fake server: status mapping, deadlines, channel caps,
// health, and ResampleStream's protocol and reassembly.
#include <catch2/catch.hpp>

#include "fake_server.h"
#include "fresnel/client/client.h"
#include "fresnel/v1/array_convert.h"
#include "support/test_support.h"

namespace fresnel {
namespace {

using testing::FakeServer;
using testing::RandomArray;

FakeServer& Fake() {
  static FakeServer* server = new FakeServer();  // shared by the test cases, never torn down
  return *server;
}

std::unique_ptr<Client> ConnectToFake(int64_t max_message_bytes = 64 << 20) {
  ClientOptions options;
  options.address = Fake().address();
  options.max_message_bytes = max_message_bytes;
  options.default_timeout = std::chrono::seconds(10);
  options.connect_timeout_s = 5;
  auto client = Client::Connect(options);
  REQUIRE(client.ok());
  return *std::move(client);
}

TEST_CASE("FromGrpcStatus keeps code and message", "[client]") {
  absl::Status s = FromGrpcStatus(5, "session 7 not found");
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() == "session 7 not found");
  CHECK(FromGrpcStatus(0, "").ok());
  CHECK(FromGrpcStatus(99, "weird").code() == absl::StatusCode::kUnknown);
}

TEST_CASE("Client calls the admin service and checks health", "[client]") {
  auto client = ConnectToFake();
  auto info = client->GetServerInfo();
  REQUIRE(info.ok());
  CHECK(info->version() == "0.0.0-fake");
  CHECK(info->limits().max_message_bytes() == testing::kFakeMessageCap);
  auto stats = client->GetStats();
  REQUIRE(stats.ok());
  CHECK(stats->requests_total() == 7);
  auto health = client->CheckHealth("");
  REQUIRE(health.ok());
  CHECK(*health == ServingStatus::kServing);
  auto unknown = client->CheckHealth("no.such.Service");
  REQUIRE(unknown.ok());
  CHECK(*unknown == ServingStatus::kServiceUnknown);
}

TEST_CASE("Client maps server errors, deadlines and message caps", "[client]") {
  auto client = ConnectToFake();
  v1::UpfirdnRequest request;
  ToProto(RandomArray(DType::kFloat32, {2, 100}), request.mutable_x());

  auto ok = client->Upfirdn(request);
  REQUIRE(ok.ok());
  CHECK(ok->info().device() == "fake:0");

  request.set_up(99);
  auto invalid = client->Upfirdn(request);
  CHECK(invalid.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(invalid.status().message() == "up: 99 exceeds the limit of 64");

  request.set_up(1);
  request.set_request_id("slow");
  CallOptions short_deadline;
  short_deadline.timeout = std::chrono::milliseconds(50);
  CHECK(client->Upfirdn(request, short_deadline).status().code() ==
        absl::StatusCode::kDeadlineExceeded);

  // The client's own send cap.
  auto small = ConnectToFake(/*max_message_bytes=*/1024);  // x below is 8000 bytes
  request.set_request_id("");
  ToProto(RandomArray(DType::kFloat32, {2, 1000}), request.mutable_x());
  CHECK(small->Upfirdn(request).status().code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("Client::Connect with a connect timeout fails fast on a dead address", "[client]") {
  ClientOptions options;
  options.address = "127.0.0.1:1";  // nothing listens on port 1
  options.connect_timeout_s = 0.2;
  auto client = Client::Connect(options);
  CHECK(client.status().code() == absl::StatusCode::kUnavailable);
  options.address = "";
  CHECK(Client::Connect(options).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ResampleStream sends config and chunks and concatenates the outputs", "[client]") {
  auto client = ConnectToFake();
  for (int64_t chunk : {1000, 128, 7}) {
    for (int64_t channels : {1, 3}) {
      const int64_t n = 1000;
      HostArray x = RandomArray(DType::kFloat32, {channels, n});
      v1::ResampleStreamConfig config;
      config.mutable_resample_poly()->set_up(1);
      int progress_calls = 0;
      int64_t last_in = 0, last_out = 0;
      v1::ExecutionInfo info;
      auto y = client->ResampleStream(
          config, x, chunk, {},
          [&](int64_t in, int64_t out) {
            ++progress_calls;
            CHECK(in >= last_in);
            last_in = in;
            last_out = out;
          },
          &info);
      INFO(y.status().ToString());
      REQUIRE(y.ok());
      const int64_t chunks = (n + chunk - 1) / chunk;
      REQUIRE(y->shape() == std::vector<int64_t>{channels, n + testing::kFakeTail});
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t i = 0; i < n; ++i) {
          REQUIRE(y->data<float>()[c * (n + testing::kFakeTail) + i] ==
                  2 * x.data<float>()[c * n + i]);
        }
      }
      CHECK(progress_calls == chunks + 1);
      CHECK(last_in == n);
      CHECK(last_out == n + testing::kFakeTail);
      CHECK(info.device() == "fake:0");
      CHECK(info.compute_seconds() == Approx(0.003 * (chunks + 1)));
      CHECK(info.total_seconds() == Approx(0.010 * (chunks + 1)));
    }
  }
}

TEST_CASE("ResampleStream keeps 1-D signals 1-D and handles empty ones", "[client]") {
  auto client = ConnectToFake();
  v1::ResampleStreamConfig config;
  config.mutable_upfirdn()->set_up(2);
  HostArray x = RandomArray(DType::kComplex64, {300});
  auto y = client->ResampleStream(config, x, 64);
  REQUIRE(y.ok());
  CHECK(y->shape() == std::vector<int64_t>{300 + testing::kFakeTail});
  CHECK(y->data<std::complex<float>>()[5] == 2.0f * x.data<std::complex<float>>()[5]);

  HostArray empty(DType::kFloat32, {2, 0});
  auto e = client->ResampleStream(config, empty, 64);
  REQUIRE(e.ok());
  CHECK(e->shape() == std::vector<int64_t>{2, testing::kFakeTail});
}

TEST_CASE("ResampleStream reports a failed chunk and bad arguments", "[client]") {
  auto client = ConnectToFake();
  v1::ResampleStreamConfig config;
  config.set_request_id("fail");
  config.mutable_resample_poly()->set_up(1);
  HostArray x = RandomArray(DType::kFloat32, {2, 1000});
  auto y = client->ResampleStream(config, x, 100);
  CHECK(y.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(y.status().message()) == "chunk 2: x: NaN in chunk");

  v1::ResampleStreamConfig no_op;
  CHECK(client->ResampleStream(no_op, x, 100).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(client->ResampleStream(config, x, 0).status().code() ==
        absl::StatusCode::kInvalidArgument);
  HostArray cube(DType::kFloat32, {2, 2, 2});
  CHECK(client->ResampleStream(config, cube, 1).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ResampleStream against a dead server returns Unavailable", "[client]") {
  ClientOptions options;
  options.address = "127.0.0.1:1";
  auto client = Client::Connect(options);
  REQUIRE(client.ok());
  v1::ResampleStreamConfig config;
  config.mutable_resample_poly()->set_up(1);
  auto y = (*client)->ResampleStream(config, RandomArray(DType::kFloat32, {1, 100}), 10);
  CHECK(y.status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fresnel

TEST_CASE("ChannelTarget: one address and URIs pass through, numeric lists become ipv4:/ipv6:",
          "[client]") {
  for (const char* same : {"localhost:50051", "fresnel.example:50051", "127.0.0.1:1",
                           "dns:///fresnel-grpc.ns.svc.cluster.local:50051",
                           "ipv4:10.0.0.1:50051,10.0.0.2:50051", "unix:/run/fresnel.sock",
                           "[::1]:50051"}) {
    auto target = fresnel::ChannelTarget(same);
    REQUIRE(target.ok());
    CHECK(*target == same);
  }
  auto v4 = fresnel::ChannelTarget("127.0.0.1:50051, localhost:50052,10.1.2.3:7");
  REQUIRE(v4.ok());
  CHECK(*v4 == "ipv4:127.0.0.1:50051,127.0.0.1:50052,10.1.2.3:7");
  auto v6 = fresnel::ChannelTarget("[::1]:50051,[fe80::1]:50052");
  REQUIRE(v6.ok());
  CHECK(*v6 == "ipv6:[::1]:50051,[fe80::1]:50052");

  auto named = fresnel::ChannelTarget("a.example:1,b.example:2");
  CHECK(named.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(named.status().message().find("dns:///NAME:PORT") != absl::string_view::npos);
  CHECK(fresnel::ChannelTarget("127.0.0.1:1,[::1]:2").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(fresnel::ChannelTarget("127.0.0.1:1,,127.0.0.1:2").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(fresnel::ChannelTarget("").status().code() == absl::StatusCode::kInvalidArgument);
}
