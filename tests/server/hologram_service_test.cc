// HologramService end to end over loopback gRPC through fresnel::Client: results equal the
// kernels' own (bit for bit on the CPU), chunked results reassemble exactly, a bad Stream frame
// gets its own status while the stream goes on, Reconstruct equals ReconstructAsm, and bad
// input is INVALID_ARGUMENT naming the field. [gpu]: GPU renders against the CPU oracle.
#include <catch2/catch.hpp>

#include <thread>

#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "fresnel/client/client.h"
#include "fresnel/client/shm.h"
#include "fresnel/io/npy.h"
#include "fresnel/hologram/hologram.h"
#include "fresnel/hologram/point_cloud.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/hologram.grpc.pb.h"
#include "region_check.h"
#include "server_fixture.h"
#include "support/cli_runner.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

constexpr double kPitch = 8e-6;
constexpr double kWavelength = 532e-9;

// Random points within the hologram's footprint, 4-8 cm in front of it.
hologram::PointCloud RandomCloud(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> lateral(-0.4e-3, 0.4e-3), depth(0.04, 0.08),
      amplitude(0.2, 1.0), phase(-3.1, 3.1);
  hologram::PointCloud cloud;
  for (int i = 0; i < n; ++i) {
    cloud.push_back({lateral(rng), lateral(rng), depth(rng), amplitude(rng), phase(rng)});
  }
  return cloud;
}

HostArray CloudArray(const hologram::PointCloud& cloud) {
  HostArray a(DType::kFloat64, {static_cast<int64_t>(cloud.size()), 5});
  double* v = a.data<double>();
  for (size_t i = 0; i < cloud.size(); ++i) {
    const hologram::Point& p = cloud[i];
    const double row[5] = {p.x_m, p.y_m, p.z_m, p.amplitude, p.phase_rad};
    std::memcpy(v + i * 5, row, sizeof(row));
  }
  return a;
}

v1::HologramConfig Config(int64_t width, int64_t height, v1::HologramAlgorithm algorithm) {
  v1::HologramConfig c;
  c.set_width(width);
  c.set_height(height);
  c.set_pitch_m(kPitch);
  c.set_wavelength_m(kWavelength);
  c.set_algorithm(algorithm);
  c.mutable_outputs()->set_field(true);
  c.mutable_outputs()->set_phase(true);
  c.mutable_outputs()->set_amplitude(true);
  c.mutable_reconstruction()->set_depth_m(0.06);
  return c;
}

hologram::HologramOptions KernelOptions(int64_t width, int64_t height, hologram::Algorithm a) {
  hologram::HologramOptions o;
  o.width = width;
  o.height = height;
  o.pitch_m = kPitch;
  o.wavelength_m = kWavelength;
  o.algorithm = a;
  o.outputs.field = o.outputs.phase = o.outputs.amplitude = true;
  o.reconstruction.enabled = true;
  o.reconstruction.depth_m = 0.06;
  return o;
}

v1::RenderRequest RenderReq(const hologram::PointCloud& cloud, const v1::HologramConfig& config) {
  v1::RenderRequest r;
  ToProto(CloudArray(cloud), r.mutable_points());
  *r.mutable_config() = config;
  return r;
}

std::unique_ptr<Client> Connect(const TestServer& ts, int64_t max_message_bytes = 64 << 20) {
  return ConnectClient(ts, std::chrono::seconds(120), max_message_bytes);
}

bool SameBytes(const HostArray& a, const HostArray& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.bytes() == b.bytes();
}

void CheckEqual(const HologramRender& got, const hologram::HologramResult& want) {
  CHECK(SameBytes(got.field, want.field));
  CHECK(SameBytes(got.phase, want.phase));
  CHECK(SameBytes(got.amplitude, want.amplitude));
  CHECK(SameBytes(got.reconstruction, want.reconstruction));
  CHECK(got.header.reconstruction_scale() == want.reconstruction_scale);
}

bool Mentions(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST_CASE("Render on the CPU pool equals ComputeHologram on the CPU, bit for bit",
          "[server][hologram]") {
  TestServer ts;
  auto client = Connect(ts);
  const hologram::PointCloud cloud = RandomCloud(150, 7);
  for (auto [proto, kernel] :
       {std::pair{v1::HOLOGRAM_ALGORITHM_REFERENCE, hologram::Algorithm::kReference},
        std::pair{v1::HOLOGRAM_ALGORITHM_TRIANGULAR, hologram::Algorithm::kTriangular},
        std::pair{v1::HOLOGRAM_ALGORITHM_AUTO, hologram::Algorithm::kAuto}}) {
    INFO("algorithm " << hologram::AlgorithmName(kernel));
    auto got = client->Render(RenderReq(cloud, Config(96, 64, proto)));
    REQUIRE(got.ok());
    auto want = hologram::ComputeHologram(Device::Cpu(), cloud, KernelOptions(96, 64, kernel));
    REQUIRE(want.ok());
    CheckEqual(*got, *want);
    CHECK(got->header.points() == 150);
    CHECK(got->header.width() == 96);
    CHECK(got->header.info().device() == "cpu");
    CHECK(got->header.algorithm() != v1::HOLOGRAM_ALGORITHM_AUTO);
    CHECK(got->header.chunked_outputs_size() == 0);  // everything fits inline
  }
}

TEST_CASE("Render from an image source equals ImageToPointCloud + ComputeHologram",
          "[server][hologram]") {
  TestServer ts;
  auto client = Connect(ts);
  HostArray image(DType::kUint8, {12, 10});
  std::mt19937 rng(3);
  for (int64_t i = 0; i < image.size(); ++i) image.data<uint8_t>()[i] = rng() & 0xff;
  v1::RenderRequest req;
  ToProto(image, req.mutable_image()->mutable_image());
  req.mutable_image()->set_spacing_m(2 * kPitch);
  req.mutable_image()->set_depth_m(0.05);
  *req.mutable_config() = Config(64, 64, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  auto got = client->Render(req);
  REQUIRE(got.ok());
  auto cloud = hologram::ImageToPointCloud(image, {2 * kPitch, 0.05, false});
  REQUIRE(cloud.ok());
  auto want = hologram::ComputeHologram(Device::Cpu(), *cloud,
                                        KernelOptions(64, 64, hologram::Algorithm::kReference));
  REQUIRE(want.ok());
  CheckEqual(*got, *want);
}

TEST_CASE("Render results larger than the message cap arrive in chunks and reassemble exactly",
          "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 64 << 10;  // a 256 x 192 field is 384 KiB
  TestServer ts(config);
  auto client = Connect(ts);
  const hologram::PointCloud cloud = RandomCloud(40, 11);
  const v1::HologramConfig cfg = Config(256, 192, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  auto want = hologram::ComputeHologram(Device::Cpu(), cloud,
                                        KernelOptions(256, 192, hologram::Algorithm::kReference));
  REQUIRE(want.ok());

  SECTION("through the client") {
    auto got = client->Render(RenderReq(cloud, cfg));
    REQUIRE(got.ok());
    CheckEqual(*got, *want);
    CHECK(got->header.chunked_outputs_size() >= 2);
  }
  SECTION("on the wire: header first, then ordered chunks under the cap") {
    auto stub = v1::HologramService::NewStub(ts.channel);
    grpc::ClientContext ctx;
    v1::RenderRequest req = RenderReq(cloud, cfg);
    req.mutable_config()->set_max_chunk_bytes(20000);
    auto reader = stub->Render(&ctx, req);
    v1::RenderResponse msg;
    REQUIRE(reader->Read(&msg));
    REQUIRE(msg.has_header());
    const v1::HologramResultHeader header = msg.header();
    int chunks = 0;
    std::vector<int> order;
    while (reader->Read(&msg)) {
      REQUIRE(msg.has_chunk());
      CHECK(msg.chunk().chunk().data().size() <= 20000);
      CHECK(static_cast<int64_t>(msg.ByteSizeLong()) <= config.max_message_bytes);
      if (order.empty() || order.back() != msg.chunk().output()) order.push_back(msg.chunk().output());
      ++chunks;
    }
    REQUIRE(reader->Finish().ok());
    CHECK(chunks > 20);  // 384 KiB of field alone
    REQUIRE(order.size() == static_cast<size_t>(header.chunked_outputs_size()));
    for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == header.chunked_outputs(i));
  }
}

TEST_CASE("Stream renders frames in order; a bad frame gets its own status and the stream goes on",
          "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 64 << 10;  // frame 2's outputs are chunked
  TestServer ts(config);
  auto client = Connect(ts);
  const hologram::PointCloud f0 = RandomCloud(30, 21), f2 = RandomCloud(35, 22);
  hologram::PointCloud bad = RandomCloud(20, 23);
  bad[17].z_m = -0.01;

  std::vector<v1::HologramFrameRequest> frames(3);
  *frames[0].mutable_config() = Config(128, 128, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  frames[0].set_request_id("video-1");
  ToProto(CloudArray(f0), frames[0].mutable_points());
  ToProto(CloudArray(bad), frames[1].mutable_points());
  ToProto(CloudArray(f2), frames[2].mutable_points());
  frames[2].mutable_overrides()->set_algorithm(v1::HOLOGRAM_ALGORITHM_TRIANGULAR);
  frames[2].mutable_overrides()->set_reconstruction_depth_m(0.05);

  size_t next = 0;
  std::vector<int64_t> seen;
  std::vector<absl::Status> statuses;
  std::vector<HologramRender> results(3);
  absl::Status st = client->RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (next >= frames.size()) return false;
        *f = frames[next++];
        return true;
      },
      [&](int64_t index, const absl::Status& status, HologramRender* r) {
        seen.push_back(index);
        statuses.push_back(status);
        if (r != nullptr) results[index] = std::move(*r);
      });
  REQUIRE(st.ok());
  REQUIRE(seen == std::vector<int64_t>{0, 1, 2});
  CHECK(statuses[0].ok());
  CHECK(statuses[1].code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(statuses[1], "points[17].z_m"));
  CHECK(statuses[2].ok());

  auto want0 = hologram::ComputeHologram(Device::Cpu(), f0,
                                         KernelOptions(128, 128, hologram::Algorithm::kReference));
  REQUIRE(want0.ok());
  CheckEqual(results[0], *want0);
  CHECK(results[0].header.request_id() == "video-1");
  hologram::HologramOptions o2 = KernelOptions(128, 128, hologram::Algorithm::kTriangular);
  o2.reconstruction.depth_m = 0.05;
  auto want2 = hologram::ComputeHologram(Device::Cpu(), f2, o2);
  REQUIRE(want2.ok());
  CheckEqual(results[2], *want2);
  CHECK(results[2].header.algorithm() == v1::HOLOGRAM_ALGORITHM_TRIANGULAR);
  CHECK(results[2].header.chunked_outputs_size() > 0);
}

// What a Stream of one frame per cloud answered: the frame indices in the order their answers
// came, and each frame's status and render.
struct StreamedFrames {
  absl::Status status;  // the stream's own
  std::vector<int64_t> order;
  std::vector<absl::Status> statuses;
  std::vector<HologramRender> results;
};

// Streams `clouds` as one frame each over one Stream call, the first frame carrying `config`.
StreamedFrames StreamClouds(Client& client, const v1::HologramConfig& config,
                            const std::vector<hologram::PointCloud>& clouds) {
  StreamedFrames got;
  got.statuses.resize(clouds.size());
  got.results.resize(clouds.size());
  size_t next = 0;
  got.status = client.RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (next == clouds.size()) return false;
        if (next == 0) *f->mutable_config() = config;
        ToProto(CloudArray(clouds[next++]), f->mutable_points());
        return true;
      },
      [&](int64_t index, const absl::Status& status, HologramRender* r) {
        got.order.push_back(index);
        if (index < 0 || index >= static_cast<int64_t>(clouds.size())) return;
        got.statuses[static_cast<size_t>(index)] = status;
        if (r != nullptr) got.results[static_cast<size_t>(index)] = std::move(*r);
      });
  return got;
}

std::vector<int64_t> FrameOrder(int frames) {
  std::vector<int64_t> order(static_cast<size_t>(frames));
  for (int i = 0; i < frames; ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

// Frames are rendered several at a time (one per worker, plus one read ahead): a small frame
// behind a large one finishes first, yet the answers come back in frame order, each equal to
// the one-shot render.
TEST_CASE("Stream renders frames concurrently and answers them in order, bad ones with their status",
          "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.cpu_workers = 3;
  TestServer ts(config);
  auto client = Connect(ts);
  constexpr int kFrames = 14;
  std::vector<hologram::PointCloud> clouds;
  for (int i = 0; i < kFrames; ++i) clouds.push_back(RandomCloud(i % 3 == 0 ? 900 : 4, 100 + i));
  StreamedFrames got =
      StreamClouds(*client, Config(96, 80, v1::HOLOGRAM_ALGORITHM_REFERENCE), clouds);
  REQUIRE(got.status.ok());
  REQUIRE(got.order == FrameOrder(kFrames));
  for (int i = 0; i < kFrames; ++i) {
    CHECK(got.statuses[i].ok());
    auto want = hologram::ComputeHologram(Device::Cpu(), clouds[i],
                                          KernelOptions(96, 80, hologram::Algorithm::kReference));
    REQUIRE(want.ok());
    CheckEqual(got.results[i], *want);
  }

  // Whole frames are checked and converted on host tasks while the next frame is read (session
  // 9), so a large frame's conversion may finish after a small later one's: the answers still
  // come in frame order, a bad frame among them gets its own status naming the point (its index
  // within the frame), and every good one equals the one-shot render.
  constexpr int kMixed = 16;
  std::vector<hologram::PointCloud> mixed;
  std::vector<int64_t> bad_point(kMixed, -1);
  for (int i = 0; i < kMixed; ++i) {
    mixed.push_back(RandomCloud(i % 3 == 0 ? 60000 : 5, 300 + i));
    if (i % 4 == 1) {
      bad_point[i] = static_cast<int64_t>(mixed.back().size()) - 1 - i % 3;
      mixed.back()[static_cast<size_t>(bad_point[i])].amplitude = -1;
    }
  }
  StreamedFrames m = StreamClouds(*client, Config(32, 24, v1::HOLOGRAM_ALGORITHM_TRIANGULAR), mixed);
  REQUIRE(m.status.ok());
  REQUIRE(m.order == FrameOrder(kMixed));
  for (int i = 0; i < kMixed; ++i) {
    INFO("mixed frame " << i);
    if (bad_point[i] >= 0) {
      CHECK(m.statuses[i].code() == absl::StatusCode::kInvalidArgument);
      CHECK(Mentions(m.statuses[i], absl::StrCat("points[", bad_point[i], "].amplitude")));
      continue;
    }
    REQUIRE(m.statuses[i].ok());
    auto want = hologram::ComputeHologram(Device::Cpu(), mixed[i],
                                          KernelOptions(32, 24, hologram::Algorithm::kTriangular));
    REQUIRE(want.ok());
    CheckEqual(m.results[i], *want);
  }
}

// A stream that runs out of time while frames are rendering ends with DEADLINE_EXCEEDED once its
// jobs are done; the server keeps serving.
TEST_CASE("Stream past its deadline ends cleanly with frames in flight", "[server][hologram]") {
  TestServer ts;
  auto client = Connect(ts);
  int sent = 0;
  CallOptions call;
  call.timeout = std::chrono::milliseconds(300);
  absl::Status st = client->RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (sent == 200) return false;
        if (sent == 0) *f->mutable_config() = Config(256, 256, v1::HOLOGRAM_ALGORITHM_REFERENCE);
        ToProto(CloudArray(RandomCloud(1500, 300 + sent++)), f->mutable_points());
        return true;
      },
      [](int64_t, const absl::Status&, HologramRender*) {},
      call);
  CHECK(st.code() == absl::StatusCode::kDeadlineExceeded);
  v1::RenderRequest request;
  *request.mutable_config() = Config(32, 32, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  ToProto(CloudArray(RandomCloud(5, 7)), request.mutable_points());
  CHECK(client->Render(std::move(request)).ok());
}

// `fresnel hologram --frames`: the CLI's video mode against the server. Without --spin every
// frame is the same cloud, so the last frame's field equals the one-shot render.
TEST_CASE("fresnel hologram --frames streams frames and reports frames per second",
          "[server][hologram][cli]") {
  TestServer ts;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fresnel_hologram_frames_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  const hologram::PointCloud cloud = RandomCloud(40, 77);
  REQUIRE(WriteNpy(path("cloud.npy"), CloudArray(cloud)).ok());
  auto cli = [&](std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), {"--server", ts.address, "hologram", "--points",
                               path("cloud.npy"), "--size", "64x48", "--pitch", "8e-6",
                               "--wavelength", "532e-9", "--algorithm", "reference"});
    const CliResult r = RunCli(std::move(args));
    *out = r.out + r.err;
    return r.code;
  };
  std::string out;
  REQUIRE(cli({"--frames", "5", "--field-npy", path("still.npy"), "--json"}, &out) == 0);
  INFO(out);
  CHECK(out.find("\"frames\": 5") != std::string::npos);
  CHECK(out.find("\"frames_failed\": 0") != std::string::npos);
  CHECK(out.find("\"frames_per_second\": ") != std::string::npos);
  auto still = ReadNpy(path("still.npy"));
  REQUIRE(still.ok());
  auto want = hologram::ComputeHologram(Device::Cpu(), cloud,
                                        KernelOptions(64, 48, hologram::Algorithm::kReference));
  REQUIRE(want.ok());
  CHECK(SameBytes(*still, want->field));

  REQUIRE(cli({"--frames", "3", "--spin", "10", "--field-npy", path("spun.npy")}, &out) == 0);
  CHECK(out.find("3 frames over one Stream call") != std::string::npos);
  auto spun = ReadNpy(path("spun.npy"));
  REQUIRE(spun.ok());
  CHECK(spun->shape() == still->shape());
  CHECK_FALSE(SameBytes(*spun, *still));  // the last frame shows the cloud turned by 20 degrees
  // ... exactly: the one-shot hologram of the cloud turned by 20 degrees about the vertical axis
  // through its bounding box's centre.
  hologram::PointCloud turned = cloud;
  const auto [x0, x1] = std::minmax_element(
      cloud.begin(), cloud.end(), [](const auto& a, const auto& b) { return a.x_m < b.x_m; });
  const auto [z0, z1] = std::minmax_element(
      cloud.begin(), cloud.end(), [](const auto& a, const auto& b) { return a.z_m < b.z_m; });
  const double cx = 0.5 * (x0->x_m + x1->x_m), cz = 0.5 * (z0->z_m + z1->z_m);
  const double rad = 20.0 * 3.14159265358979323846 / 180.0;
  for (hologram::Point& p : turned) {
    const double dx = p.x_m - cx, dz = p.z_m - cz;
    p.x_m = cx + std::cos(rad) * dx + std::sin(rad) * dz;
    p.z_m = cz - std::sin(rad) * dx + std::cos(rad) * dz;
  }
  auto want_spun = hologram::ComputeHologram(
      Device::Cpu(), turned, KernelOptions(64, 48, hologram::Algorithm::kReference));
  REQUIRE(want_spun.ok());
  CHECK(SameBytes(*spun, want_spun->field));
  std::filesystem::remove_all(dir);
}

// A cloud larger than the message cap: Render sends it as one Stream frame in parts
// (points_continue) and gets exactly the one-shot hologram.
TEST_CASE("Render sends a cloud larger than the message cap in parts", "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 64 << 10;
  TestServer ts(config);
  auto client = Connect(ts);
  const hologram::PointCloud cloud = RandomCloud(3000, 91);  // 120 KB of float64 [N, 5]
  v1::RenderRequest request;
  *request.mutable_config() = Config(64, 48, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  request.set_request_id("big-cloud");
  ToProto(CloudArray(cloud), request.mutable_points());
  REQUIRE(request.ByteSizeLong() > (64u << 10));
  auto r = client->Render(std::move(request));
  REQUIRE(r.ok());
  CHECK(r->header.points() == 3000);
  CHECK(r->header.request_id() == "big-cloud");
  auto want = hologram::ComputeHologram(Device::Cpu(), cloud,
                                        KernelOptions(64, 48, hologram::Algorithm::kReference));
  REQUIRE(want.ok());
  CheckEqual(*r, *want);
}

// Frames in parts by hand: overrides ride on the first part; a later part with overrides, or a
// stream that ends inside a frame, gets that frame an INVALID_ARGUMENT answer.
TEST_CASE("Stream frames in parts: assembled in order, bad parts answered per frame",
          "[server][hologram]") {
  TestServer ts;
  auto client = Connect(ts);
  const hologram::PointCloud a = RandomCloud(30, 51), b = RandomCloud(25, 52);
  auto part = [](const hologram::PointCloud& c, size_t from, size_t to) {
    return CloudArray(hologram::PointCloud(c.begin() + from, c.begin() + to));
  };
  std::vector<v1::HologramFrameRequest> messages(6);
  // Frame 0: three parts, the first with the config and an algorithm override.
  *messages[0].mutable_config() = Config(64, 48, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  messages[0].mutable_overrides()->set_algorithm(v1::HOLOGRAM_ALGORITHM_TRIANGULAR);
  ToProto(part(a, 0, 10), messages[0].mutable_points());
  messages[0].set_points_continue(true);
  ToProto(part(a, 10, 20), messages[1].mutable_points());
  messages[1].set_points_continue(true);
  ToProto(part(a, 20, 30), messages[2].mutable_points());
  // Frame 1: a later part carries overrides.
  ToProto(part(b, 0, 10), messages[3].mutable_points());
  messages[3].set_points_continue(true);
  ToProto(part(b, 10, 25), messages[4].mutable_points());
  messages[4].mutable_overrides()->set_algorithm(v1::HOLOGRAM_ALGORITHM_TRIANGULAR);
  // Frame 2: the stream ends after its first part.
  ToProto(part(b, 0, 5), messages[5].mutable_points());
  messages[5].set_points_continue(true);

  size_t next = 0;
  std::vector<int64_t> seen;
  std::vector<absl::Status> statuses;
  HologramRender first;
  absl::Status st = client->RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (next == messages.size()) return false;
        *f = messages[next++];
        return true;
      },
      [&](int64_t index, const absl::Status& status, HologramRender* r) {
        seen.push_back(index);
        statuses.push_back(status);
        if (index == 0 && r != nullptr) first = std::move(*r);
      });
  REQUIRE(st.ok());
  REQUIRE(seen == std::vector<int64_t>{0, 1, 2});
  REQUIRE(statuses[0].ok());
  CHECK(first.header.points() == 30);
  CHECK(first.header.algorithm() == v1::HOLOGRAM_ALGORITHM_TRIANGULAR);
  auto want = hologram::ComputeHologram(Device::Cpu(), a,
                                        KernelOptions(64, 48, hologram::Algorithm::kTriangular));
  REQUIRE(want.ok());
  CheckEqual(first, *want);
  CHECK(statuses[1].code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(statuses[1], "points_continue"));
  CHECK(statuses[2].code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(statuses[2], "last part"));
}

TEST_CASE("Stream: a frame in more parts than the pipeline holds frames, then a second frame",
          "[server][hologram]") {
  // The parts are absorbed into the frame's last message, so they do not fill the pipeline: the
  // read of the last part is never held back by the parts before it.
  TestServer ts;
  auto client = Connect(ts);
  const hologram::PointCloud a = RandomCloud(40, 71), b = RandomCloud(7, 72);
  std::vector<v1::HologramFrameRequest> messages(21);
  *messages[0].mutable_config() = Config(32, 24, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  for (int k = 0; k < 20; ++k) {
    ToProto(CloudArray(hologram::PointCloud(a.begin() + 2 * k, a.begin() + 2 * k + 2)),
            messages[k].mutable_points());
    messages[k].set_points_continue(k < 19);
  }
  ToProto(CloudArray(b), messages[20].mutable_points());
  size_t next = 0;
  std::vector<int64_t> seen;
  std::vector<HologramRender> renders;
  absl::Status st = client->RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (next == messages.size()) return false;
        *f = messages[next++];
        return true;
      },
      [&](int64_t index, const absl::Status& status, HologramRender* r) {
        REQUIRE(status.ok());
        seen.push_back(index);
        renders.push_back(std::move(*r));
      });
  REQUIRE(st.ok());
  REQUIRE(seen == std::vector<int64_t>{0, 1});
  const auto want_a =
      hologram::ComputeHologram(Device::Cpu(), a, KernelOptions(32, 24, hologram::Algorithm::kReference));
  const auto want_b =
      hologram::ComputeHologram(Device::Cpu(), b, KernelOptions(32, 24, hologram::Algorithm::kReference));
  REQUIRE(want_a.ok());
  REQUIRE(want_b.ok());
  CHECK(renders[0].header.points() == 40);
  CheckEqual(renders[0], *want_a);
  CheckEqual(renders[1], *want_b);
}

TEST_CASE("Stream: a half-close inside a frame sent in parts answers that frame, then fails",
          "[server][hologram]") {
  TestServer ts;
  const std::string method = "/fresnel.v1.HologramService/Stream";
  v1::HologramFrameRequest first;
  *first.mutable_config() = Config(16, 16, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  ToProto(CloudArray(RandomCloud(5, 3)), first.mutable_points());
  v1::HologramFrameRequest part;
  ToProto(CloudArray(RandomCloud(4, 4)), part.mutable_points());
  part.set_points_continue(true);
  RawBidiCall call(ts.channel, method);
  REQUIRE(call.Write(first));
  REQUIRE(call.Write(part));
  REQUIRE(call.Write(part));
  call.WritesDone();
  int responses = 0;
  grpc::Status st = call.ReadAllAndFinish(&responses);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("after 2 frame(s)"));
  // Frame 0's header (16 x 16: every output inline), then frame 1's header carrying its status.
  CHECK(responses == 2);
}

TEST_CASE("Stream: the parts of a frame must have the same columns", "[server][hologram]") {
  TestServer ts;
  auto client = Connect(ts);
  std::vector<v1::HologramFrameRequest> messages(2);
  *messages[0].mutable_config() = Config(16, 16, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  ToProto(CloudArray(RandomCloud(4, 1)), messages[0].mutable_points());  // x y z a phase
  messages[0].set_points_continue(true);
  HostArray four(DType::kFloat64, {3, 4});  // x y z a
  for (int64_t i = 0; i < four.size(); ++i) four.data<double>()[i] = i % 4 == 2 ? 0.1 : 1e-4;
  ToProto(four, messages[1].mutable_points());
  size_t next = 0;
  std::vector<absl::Status> statuses;
  absl::Status st = client->RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (next == messages.size()) return false;
        *f = messages[next++];
        return true;
      },
      [&](int64_t, const absl::Status& status, HologramRender*) { statuses.push_back(status); });
  REQUIRE(st.ok());
  REQUIRE(statuses.size() == 1);
  CHECK(statuses[0].code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(statuses[0], "5 columns; this part has 4"));
}

TEST_CASE("Stream without a config on the first frame is INVALID_ARGUMENT", "[server][hologram]") {
  TestServer ts;
  auto client = Connect(ts);
  bool sent = false;
  absl::Status st = client->RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (sent) return false;
        sent = true;
        ToProto(CloudArray(RandomCloud(3, 1)), f->mutable_points());
        return true;
      },
      [](int64_t, const absl::Status&, HologramRender*) {});
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(st, "config"));
}

// gRPC reports a message it cannot parse like the client's half-close, so without the `end`
// marker a stream with garbage in it used to end OK, with frames silently missing.
TEST_CASE("Stream: an unparsable message or a missing end is an error, not the end",
          "[server][hologram]") {
  TestServer ts;
  const std::string method = "/fresnel.v1.HologramService/Stream";
  const std::string garbage("\x0a\xff\xff\xff\xff\x0f", 6);  // a length past the end
  v1::HologramFrameRequest frame;
  *frame.mutable_config() = Config(16, 16, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  ToProto(CloudArray(RandomCloud(5, 3)), frame.mutable_points());
  v1::HologramFrameRequest next;
  ToProto(CloudArray(RandomCloud(5, 4)), next.mutable_points());
  v1::HologramFrameRequest end;
  end.set_end(true);
  int responses = 0;
  SECTION("garbage first") {
    RawBidiCall call(ts.channel, method);
    call.Write(garbage);
    call.WritesDone();
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("end"));
    CHECK(responses == 0);
  }
  SECTION("garbage between frames: the frames before are answered, then INVALID_ARGUMENT") {
    RawBidiCall call(ts.channel, method);
    REQUIRE(call.Write(frame));
    call.Write(garbage);
    call.Write(next);
    call.Write(end);
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("after 1 frame(s)"));
    CHECK(responses >= 1);  // frame 0's header (and chunks)
  }
  SECTION("frames then a half-close without end") {
    RawBidiCall call(ts.channel, method);
    REQUIRE(call.Write(frame));
    REQUIRE(call.Write(next));
    call.WritesDone();
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("after 2 frame(s)"));
    CHECK(responses >= 2);
  }
  SECTION("a message after end") {
    RawBidiCall call(ts.channel, method);
    REQUIRE(call.Write(frame));
    call.Write(end);
    call.Write(next);
    call.WritesDone();
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("after the one that set end"));
  }
  SECTION("end alone is an empty stream, OK; a frame with end set is answered, OK") {
    {
      RawBidiCall call(ts.channel, method);
      REQUIRE(call.Write(end));
      call.WritesDone();
      CHECK(call.ReadAllAndFinish(&responses).ok());
      CHECK(responses == 0);
    }
    RawBidiCall call(ts.channel, method);
    frame.set_end(true);
    REQUIRE(call.Write(frame));
    call.WritesDone();
    CHECK(call.ReadAllAndFinish(&responses).ok());
    CHECK(responses >= 1);
  }
}

TEST_CASE("Reconstruct equals ReconstructAsm, inline and chunked", "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 64 << 10;
  TestServer ts(config);
  auto client = Connect(ts);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{40, 50}, {160, 200}}) {
    INFO(rows << " x " << cols);  // 16 KB inline; 256 KB in chunks
    HostArray field = RandomArray(DType::kComplex64, {rows, cols}, 5);
    v1::ReconstructConfig rc;
    rc.set_pitch_m(kPitch);
    rc.set_wavelength_m(kWavelength);
    rc.set_depth_m(0.03);
    rc.set_source(v1::HOLOGRAM_RECONSTRUCTION_SOURCE_FIELD);
    auto got = client->Reconstruct(rc, field);
    REQUIRE(got.ok());
    auto want = hologram::ReconstructAsm(Device::Cpu(), field, {kPitch, kWavelength, 0.03});
    REQUIRE(want.ok());
    CHECK(SameBytes(got->image, want->image));
    CHECK(got->scale == want->scale);
    CHECK(got->info.device() == "cpu");
  }
}

// Issue 13 item 3: what an upload holds before it is computed counts against
// --stream-state-bytes as it arrives — a Reconstruct's field chunks and a Stream frame's parts.
TEST_CASE("uploads in progress count against --stream-state-bytes: Reconstruct, frames in parts",
          "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 256 << 10;
  config.stream_state_bytes = 1 << 20;
  TestServer ts(config);
  auto client = Connect(ts);
  v1::ReconstructConfig rc;
  rc.set_pitch_m(kPitch);
  rc.set_wavelength_m(kWavelength);
  rc.set_depth_m(0.03);
  rc.set_source(v1::HOLOGRAM_RECONSTRUCTION_SOURCE_FIELD);
  // 2 MiB of field in 256 KiB chunks: refused once the chunks pass the budget.
  auto big = client->Reconstruct(rc, RandomArray(DType::kComplex64, {512, 512}, 7));
  REQUIRE(big.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Mentions(big.status(), "--stream-state-bytes"));
  // The refused call gives its bytes back when its reactor is gone (after the client saw the
  // status): then 256 KiB fits.
  bool released = false;
  for (int i = 0; i < 1000 && !released; ++i) {
    released = ts.server->MetricsText().find(
                   "fresnel_budget_used{budget=\"--stream-state-bytes\"} 0\n") != std::string::npos;
    if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(released);
  CHECK(client->Reconstruct(rc, RandomArray(DType::kComplex64, {160, 200}, 8)).ok());

  // Frame 0: 24000 points in six parts (56 host bytes a point: 1.3 MB > 1 MiB) is answered
  // RESOURCE_EXHAUSTED; frame 1, small, renders; the stream goes on and ends OK.
  const hologram::PointCloud a = RandomCloud(24000, 61), b = RandomCloud(50, 62);
  std::vector<v1::HologramFrameRequest> messages(7);
  for (int k = 0; k < 6; ++k) {
    ToProto(CloudArray(hologram::PointCloud(a.begin() + 4000 * k, a.begin() + 4000 * (k + 1))),
            messages[k].mutable_points());
    messages[k].set_points_continue(k < 5);
  }
  *messages[0].mutable_config() = Config(64, 48, v1::HOLOGRAM_ALGORITHM_REFERENCE);
  ToProto(CloudArray(b), messages[6].mutable_points());
  size_t next = 0;
  std::vector<absl::Status> statuses;
  absl::Status st = client->RenderStream(
      [&](v1::HologramFrameRequest* f) {
        if (next == messages.size()) return false;
        *f = messages[next++];
        return true;
      },
      [&](int64_t, const absl::Status& status, HologramRender*) { statuses.push_back(status); });
  REQUIRE(st.ok());
  REQUIRE(statuses.size() == 2);
  CHECK(statuses[0].code() == absl::StatusCode::kResourceExhausted);
  CHECK(Mentions(statuses[0], "--stream-state-bytes"));
  CHECK(statuses[1].ok());
}

TEST_CASE("Reconstruct rejects a missing or bad field, naming it", "[server][hologram]") {
  TestServer ts;
  auto stub = v1::HologramService::NewStub(ts.channel);
  {
    grpc::ClientContext ctx;
    v1::ReconstructResponse resp;
    auto writer = stub->Reconstruct(&ctx, &resp);
    v1::ReconstructRequest req;
    req.mutable_config()->set_pitch_m(kPitch);
    REQUIRE(writer->Write(req));
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message().find("field") != std::string::npos);
  }
  auto client = Connect(ts);
  v1::ReconstructConfig rc;
  rc.set_pitch_m(kPitch);
  rc.set_wavelength_m(0);
  rc.set_depth_m(0.03);
  auto got = client->Reconstruct(rc, RandomArray(DType::kComplex64, {8, 8}, 1));
  CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(got.status(), "wavelength_m"));
  rc.set_wavelength_m(kWavelength);
  got = client->Reconstruct(rc, RandomArray(DType::kFloat32, {8, 8}, 1));
  CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Mentions(got.status(), "field"));
}

TEST_CASE("Render rejects bad input with INVALID_ARGUMENT naming the field", "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.hologram_max_points = 100;
  config.hologram_max_pixels = 200 * 200;
  TestServer ts(config);
  auto client = Connect(ts);
  const hologram::PointCloud cloud = RandomCloud(20, 3);
  auto expect = [&](v1::RenderRequest req, const std::string& field) {
    INFO(field);
    auto r = client->Render(std::move(req));
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Mentions(r.status(), field));
  };
  v1::HologramConfig good = Config(64, 64, v1::HOLOGRAM_ALGORITHM_REFERENCE);

  v1::RenderRequest req = RenderReq(cloud, good);
  req.mutable_config()->set_pitch_m(0);
  expect(req, "pitch_m");
  req = RenderReq(cloud, good);
  req.mutable_config()->set_wavelength_m(-1);
  expect(req, "wavelength_m");
  hologram::PointCloud behind = cloud;
  behind[17].z_m = 0;
  expect(RenderReq(behind, good), "points[17].z_m");
  expect(RenderReq({}, good), "points");
  expect(RenderReq(RandomCloud(101, 4), good), "limit of 100");
  req = RenderReq(cloud, good);
  req.mutable_config()->set_width(300);
  req.mutable_config()->set_height(300);
  expect(req, "width * height");
  req = RenderReq(cloud, good);
  ToProto(RandomArray(DType::kFloat64, {5, 3}, 2), req.mutable_points());
  expect(req, "points");
  req = RenderReq(cloud, good);
  req.mutable_config()->set_algorithm(v1::HOLOGRAM_ALGORITHM_TENSOR);
  expect(req, "algorithm");
  req = RenderReq(cloud, good);
  req.mutable_config()->mutable_device()->set_kind(static_cast<v1::DeviceKind>(9));
  expect(req, "config.device.kind");
  req = RenderReq(cloud, good);
  req.mutable_config()->mutable_reconstruction()->set_depth_m(-2);
  expect(req, "reconstruction.depth_m");
  req = RenderReq(cloud, good);
  req.clear_points();
  expect(req, "points");
  req = RenderReq(cloud, good);
  ToProto(HostArray(DType::kUint8, {8, 8}), req.mutable_image()->mutable_image());
  req.mutable_image()->set_spacing_m(kPitch);
  expect(req, "image.depth_m");
}

TEST_CASE("a Render past its deadline stops and frees its worker", "[server][hologram]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.cpu_workers = 1;
  TestServer ts(config);
  ClientOptions options;
  options.address = ts.address;
  options.default_timeout = std::chrono::seconds(1);
  auto client = Client::Connect(options);
  REQUIRE(client.ok());
  // 4000 distinct columns on 2048 x 2048 with the float64 reference: tens of seconds on the CPU.
  auto r = (*client)->Render(RenderReq(RandomCloud(4000, 11), Config(2048, 2048,
                                                                     v1::HOLOGRAM_ALGORITHM_REFERENCE)));
  REQUIRE(r.status().code() == absl::StatusCode::kDeadlineExceeded);
  // The render polls its cancellation between row blocks: the worker is free within moments,
  // not after the render's full run time.
  bool idle = false;
  for (int i = 0; i < 100 && !idle; ++i) {
    idle = ts.server->MetricsText().find("fresnel_running_jobs{device=\"cpu\"} 0") !=
           std::string::npos;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(idle);
}

TEST_CASE("Render on the GPU matches the CPU oracle", "[server][hologram][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  const hologram::PointCloud cloud = RandomCloud(2000, 31);

  // Reference: float32 on the GPU against the float64 CPU oracle.
  v1::RenderRequest req = RenderReq(cloud, Config(512, 384, v1::HOLOGRAM_ALGORITHM_REFERENCE));
  req.mutable_config()->mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  auto gpu = client->Render(req);
  REQUIRE(gpu.ok());
  CHECK(gpu->header.info().device().rfind("cuda:", 0) == 0);
  auto cpu = hologram::ComputeHologram(Device::Cpu(), cloud,
                                       KernelOptions(512, 384, hologram::Algorithm::kReference));
  REQUIRE(cpu.ok());
  const double snr = hologram::SnrDb(gpu->field, cpu->field);
  INFO("reference SNR " << snr << " dB");
  CHECK(snr >= 60);

  // TA: the GPU's reconstruction against the CPU emulation's (cuFFT float32 vs kissfft float64).
  req = RenderReq(cloud, Config(512, 384, v1::HOLOGRAM_ALGORITHM_TRIANGULAR));
  req.mutable_config()->mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  auto gpu_ta = client->Render(req);
  REQUIRE(gpu_ta.ok());
  auto cpu_ta = hologram::ComputeHologram(
      Device::Cpu(), cloud, KernelOptions(512, 384, hologram::Algorithm::kTriangular));
  REQUIRE(cpu_ta.ok());
  const double psnr = hologram::Psnr8(gpu_ta->reconstruction, cpu_ta->reconstruction);
  INFO("TA reconstruction PSNR " << psnr << " dB");
  CHECK(psnr >= 40);
}

// ---------------------------------------------------------------------------------------------
// Shared-memory regions (docs/transport.md, "Which requests accept it", "Outputs to a region").

// Render's messages through the raw stub, and the call's status.
std::vector<v1::RenderResponse> RawRender(const TestServer& ts, const v1::RenderRequest& request,
                                          absl::Status* status) {
  auto stub = v1::HologramService::NewStub(ts.channel);
  grpc::ClientContext context;
  auto reader = stub->Render(&context, request);
  return ReadToEnd<v1::RenderResponse>(reader, status);
}

// Render (points and image sources), Stream frames and Reconstruct with inputs and outputs in a
// region give the inline calls' bits, on `kind`'s devices.
void CheckHologramThroughRegion(const TestServer& ts, Client* client, v1::DeviceKind kind) {
  auto region = SharedRegion::Create(client, "holo-io", 4 << 20);
  REQUIRE(region.ok());
  const hologram::PointCloud cloud = RandomCloud(300, 41);
  v1::RenderRequest inline_req = RenderReq(cloud, Config(96, 64, v1::HOLOGRAM_ALGORITHM_REFERENCE));
  inline_req.mutable_config()->mutable_device()->set_kind(kind);
  inline_req.set_request_id("same");
  absl::Status st;
  std::vector<v1::RenderResponse> want = RawRender(ts, inline_req, &st);
  REQUIRE(st.ok());
  REQUIRE(want.size() == 1);  // everything inline under the default cap
  ClearTimes(&want[0]);

  SECTION("Render: points and outputs in the region; points only; outputs only") {
    v1::RenderRequest req = inline_req;
    auto end = (*region)->PutArrays(&req, 0);
    REQUIRE(end.ok());
    CHECK(req.points().has_shm());
    *req.mutable_out_shm() = (*region)->OutRef(*end);
    std::vector<v1::RenderResponse> got = RawRender(ts, req, &st);
    INFO(st.ToString());
    REQUIRE(st.ok());
    REQUIRE(got.size() == 1);
    CHECK(got[0].header().chunked_outputs_size() == 0);
    v1::RenderResponse want_copy = want[0];
    CHECK(CheckArraysInRegion(&want_copy, &got[0], **region, *end) == 4);
    ClearTimes(&got[0]);
    CHECK(got[0].SerializeAsString() == want[0].SerializeAsString());

    v1::RenderRequest points_only = req;
    points_only.clear_out_shm();
    got = RawRender(ts, points_only, &st);
    REQUIRE(st.ok());
    ClearTimes(&got[0]);
    CHECK(got[0].SerializeAsString() == want[0].SerializeAsString());

    v1::RenderRequest out_only = inline_req;
    *out_only.mutable_out_shm() = (*region)->OutRef(1 << 20);
    got = RawRender(ts, out_only, &st);
    REQUIRE(st.ok());
    want_copy = want[0];
    CHECK(CheckArraysInRegion(&want_copy, &got[0], **region, 1 << 20) == 4);

    // The client library reads them back.
    auto lib_inline = client->Render(inline_req);
    auto lib_region = client->Render(req);
    REQUIRE(lib_inline.ok());
    REQUIRE(lib_region.ok());
    CHECK(SameBytes(lib_region->field, lib_inline->field));
    CHECK(SameBytes(lib_region->phase, lib_inline->phase));
    CHECK(SameBytes(lib_region->reconstruction, lib_inline->reconstruction));
  }

  SECTION("Render from an image source in the region") {
    v1::RenderRequest img;
    *img.mutable_config() = inline_req.config();
    HostArray gray = RandomArray(DType::kUint8, {12, 16}, 3);
    ToProto(gray, img.mutable_image()->mutable_image());
    img.mutable_image()->set_spacing_m(20e-6);
    img.mutable_image()->set_depth_m(0.05);
    img.set_request_id("img");
    std::vector<v1::RenderResponse> img_want = RawRender(ts, img, &st);
    REQUIRE(st.ok());
    v1::RenderRequest img_req = img;
    auto end = (*region)->PutArrays(&img_req, 64);
    REQUIRE(end.ok());
    CHECK(img_req.image().image().has_shm());
    *img_req.mutable_out_shm() = (*region)->OutRef(*end);
    std::vector<v1::RenderResponse> got = RawRender(ts, img_req, &st);
    REQUIRE(st.ok());
    CHECK(CheckArraysInRegion(&img_want[0], &got[0], **region, *end) == 4);
  }

  SECTION("Stream: frames with points and outputs in the region, each with its own range") {
    const hologram::PointCloud clouds[3] = {RandomCloud(200, 51), RandomCloud(150, 52),
                                            RandomCloud(250, 53)};
    const int64_t frame_out = 1 << 20;  // each frame's outputs (96 x 64 x 14 bytes) fit in 1 MiB
    std::vector<v1::HologramFrameRequest> frames(3);
    int64_t in_at = 3 * frame_out;
    for (int i = 0; i < 3; ++i) {
      if (i == 0) *frames[0].mutable_config() = inline_req.config();
      ToProto(CloudArray(clouds[i]), frames[i].mutable_points());
      if (i != 1) {  // frame 1: points inline
        auto end = (*region)->PutArrays(&frames[i], in_at);
        REQUIRE(end.ok());
        in_at = *end;
      }
      *frames[i].mutable_out_shm() = (*region)->OutRef(i * frame_out);
    }
    size_t next = 0;
    std::vector<HologramRender> results(3);
    std::vector<absl::Status> statuses(3);
    REQUIRE(client
                ->RenderStream(
                    [&](v1::HologramFrameRequest* f) {
                      if (next == frames.size()) return false;
                      *f = frames[next++];
                      return true;
                    },
                    [&](int64_t index, const absl::Status& status, HologramRender* r) {
                      statuses[index] = status;
                      if (r != nullptr) results[index] = std::move(*r);
                    })
                .ok());
    for (int i = 0; i < 3; ++i) {
      INFO("frame " << i);
      REQUIRE(statuses[i].ok());
      v1::RenderRequest one = RenderReq(clouds[i], inline_req.config());
      auto want_frame = client->Render(one);
      REQUIRE(want_frame.ok());
      CHECK(SameBytes(results[i].field, want_frame->field));
      CHECK(SameBytes(results[i].amplitude, want_frame->amplitude));
      // And the bytes are where the frame's out_shm said: field first.
      auto field = (*region)->Read(ShmArray(DType::kComplex64, {64, 96}, "holo-io", i * frame_out));
      REQUIRE(field.ok());
      CHECK(field->bytes() == want_frame->field.bytes());
    }
  }

  SECTION("Reconstruct: the field and the image in the region") {
    HostArray field = RandomArray(DType::kComplex64, {40, 50}, 9);
    v1::ReconstructConfig rc;
    rc.set_pitch_m(kPitch);
    rc.set_wavelength_m(kWavelength);
    rc.set_depth_m(0.03);
    rc.mutable_device()->set_kind(kind);
    auto want_rc = client->Reconstruct(rc, field);
    REQUIRE(want_rc.ok());
    v1::ReconstructConfig in_region = rc;
    ToProto(field, in_region.mutable_field());
    auto end = (*region)->PutArrays(&in_region, 0);
    REQUIRE(end.ok());
    *in_region.mutable_out_shm() = (*region)->OutRef(*end);
    auto got = client->Reconstruct(in_region, HostArray());
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    CHECK(SameBytes(got->image, want_rc->image));
    CHECK(got->scale == want_rc->scale);
    auto image = (*region)->Read(ShmArray(DType::kUint8, {40, 50}, "holo-io", *end));
    REQUIRE(image.ok());
    CHECK(image->bytes() == want_rc->image.bytes());
  }
}

TEST_CASE("Render, Stream and Reconstruct with arrays in a shared region give the inline bits",
          "[server][hologram][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  CheckHologramThroughRegion(ts, client.get(), v1::DEVICE_KIND_CPU);
}

TEST_CASE("hologram: bad regions get the right codes naming the field, and the server serves on",
          "[server][hologram][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  auto region = SharedRegion::Create(client.get(), "r", 1 << 16);
  REQUIRE(region.ok());
  const v1::RenderRequest inline_req =
      RenderReq(RandomCloud(50, 61), Config(64, 48, v1::HOLOGRAM_ALGORITHM_REFERENCE));
  v1::RenderRequest req = inline_req;
  auto end = (*region)->PutArrays(&req, 0);
  REQUIRE(end.ok());
  absl::Status st;

  v1::RenderRequest bad = req;
  bad.mutable_points()->mutable_shm()->set_region("missing");
  RawRender(ts, bad, &st);
  CHECK(StatusNames(st, absl::StatusCode::kNotFound, "points.shm.region"));
  bad = req;
  bad.mutable_points()->mutable_shm()->set_offset_bytes((1 << 16) - 8);
  RawRender(ts, bad, &st);
  CHECK(StatusNames(st, absl::StatusCode::kInvalidArgument, "points.shm.offset_bytes"));
  bad = inline_req;
  *bad.mutable_out_shm() = (*region)->OutRef(0);
  bad.mutable_out_shm()->set_region("missing");
  RawRender(ts, bad, &st);
  CHECK(StatusNames(st, absl::StatusCode::kNotFound, "out_shm.region"));
  // 64 x 48 x (8 + 1 + 4 + 1) bytes = 43008: from 32 KiB on they do not fit.
  *bad.mutable_out_shm() = (*region)->OutRef(32 << 10);
  RawRender(ts, bad, &st);
  CHECK(StatusNames(st, absl::StatusCode::kInvalidArgument, "out_shm.offset_bytes"));
  *bad.mutable_out_shm() = (*region)->OutRef(-64);
  RawRender(ts, bad, &st);
  CHECK(StatusNames(st, absl::StatusCode::kInvalidArgument, "out_shm.offset_bytes"));

  // Stream: a bad frame gets its own status; the others render.
  std::vector<v1::HologramFrameRequest> frames(4);
  *frames[0].mutable_config() = inline_req.config();
  *frames[0].mutable_points() = req.points();
  *frames[1].mutable_points() = req.points();
  frames[1].mutable_points()->mutable_shm()->set_region("missing");
  *frames[2].mutable_points() = inline_req.points();
  *frames[2].mutable_out_shm() = (*region)->OutRef(60 << 10);
  *frames[3].mutable_points() = inline_req.points();
  size_t next = 0;
  std::vector<absl::Status> statuses(4);
  REQUIRE(client
              ->RenderStream(
                  [&](v1::HologramFrameRequest* f) {
                    if (next == frames.size()) return false;
                    *f = frames[next++];
                    return true;
                  },
                  [&](int64_t index, const absl::Status& status, HologramRender*) {
                    statuses[index] = status;
                  })
              .ok());
  CHECK(statuses[0].ok());
  CHECK(StatusNames(statuses[1], absl::StatusCode::kNotFound, "points.shm.region"));
  CHECK(StatusNames(statuses[2], absl::StatusCode::kInvalidArgument, "out_shm.offset_bytes"));
  CHECK(statuses[3].ok());

  // Reconstruct: a field in an unknown region, an image range outside the region.
  v1::ReconstructConfig rc;
  rc.set_pitch_m(kPitch);
  rc.set_wavelength_m(kWavelength);
  rc.set_depth_m(0.03);
  *rc.mutable_field() = ShmArray(DType::kComplex64, {40, 50}, "missing", 0);
  CHECK(StatusNames(client->Reconstruct(rc, HostArray()).status(), absl::StatusCode::kNotFound,
                    "field.shm.region"));
  *rc.mutable_field() = ShmArray(DType::kComplex64, {40, 50}, "r", 0);
  *rc.mutable_out_shm() = (*region)->OutRef((1 << 16) - 100);
  CHECK(StatusNames(client->Reconstruct(rc, HostArray()).status(),
                    absl::StatusCode::kInvalidArgument, "out_shm.offset_bytes"));

  // Unregistered: its name is gone; the server still renders.
  REQUIRE((*region)->Unregister().ok());
  RawRender(ts, req, &st);
  CHECK(StatusNames(st, absl::StatusCode::kNotFound, "points.shm.region"));
  CHECK(client->Render(inline_req).ok());
}

TEST_CASE("a GPU server: Render, Stream and Reconstruct through a shared region give the inline bits",
          "[server][hologram][shm][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  CheckHologramThroughRegion(ts, client.get(), v1::DEVICE_KIND_GPU);
}

}  // namespace
}  // namespace fresnel::testing
