// FusionService end to end over loopback gRPC through fresnel::FusionSession: a session on the
// CPU gives the kernel's own results bit for bit (poses, views, the mesh), a snapshot restores a
// session that renders the same view, every bad-input class is answered with the right code
// naming the field while the session goes on, and session counts and reservations are back to
// zero after close, cancellation and errors. [gpu]: a GPU session against the CPU oracle.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fresnel/client/client.h"
#include "fresnel/client/fusion_client.h"
#include "fresnel/fusion/dataset.h"
#include "fresnel/fusion/fusion.h"
#include "fresnel/v1/fusion.grpc.pb.h"
#include "fresnel/client/shm.h"
#include "region_check.h"
#include "server_fixture.h"
#include "support/cli_runner.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

// A small camera so that the CPU oracle is quick: 96 x 72, 60 degrees across.
fusion::CameraIntrinsics SmallCamera() {
  fusion::CameraIntrinsics k;
  k.width = 96;
  k.height = 72;
  k.fx = k.fy = 83.0;
  k.cx = 47.5;
  k.cy = 35.5;
  return k;
}

fusion::FusionConfig KernelConfig() {
  fusion::FusionConfig c;
  c.camera = SmallCamera();
  c.voxel_size_m = 0.02;
  c.truncation_m = 0.08;
  c.brick_budget_bytes = int64_t{24} << 20;
  c.max_depth_m = 4.0;
  return c;
}

v1::FusionConfig ProtoConfig(v1::DeviceKind kind = v1::DEVICE_KIND_ANY) {
  const fusion::FusionConfig k = KernelConfig();
  v1::FusionConfig c;
  v1::FusionCamera* cam = c.mutable_camera();
  cam->set_fx(k.camera.fx);
  cam->set_fy(k.camera.fy);
  cam->set_cx(k.camera.cx);
  cam->set_cy(k.camera.cy);
  cam->set_width(k.camera.width);
  cam->set_height(k.camera.height);
  c.set_voxel_size_m(k.voxel_size_m);
  c.set_truncation_m(k.truncation_m);
  c.set_brick_budget_bytes(k.brick_budget_bytes);
  c.set_max_depth_m(k.max_depth_m);
  c.mutable_device()->set_kind(kind);
  return c;
}

void SetPose(const fusion::RigidTransform& t, v1::FusionPose* out) {
  for (double v : t.m) out->add_m(v);
}

fusion::RigidTransform PoseOf(const v1::FusionPose& p) {
  fusion::RigidTransform t;
  for (int i = 0; i < 12 && i < p.m_size(); ++i) t.m[i] = p.m(i);
  return t;
}

// Frames of the synthetic room along the test orbit: uint16 millimetres.
struct Sequence {
  std::vector<fusion::RigidTransform> poses;
  std::vector<std::string> depth;
};

Sequence MakeSequence(int frames) {
  const fusion::SyntheticScene scene = fusion::SyntheticScene::Room();
  Sequence s;
  s.poses = fusion::SyntheticScene::Orbit(frames, 0.15);
  for (const fusion::RigidTransform& pose : s.poses) {
    HostArray d = fusion::ToUint16Depth(scene.RenderDepth(SmallCamera(), pose, 4.0), 1000.0);
    s.depth.emplace_back(d.bytes());
  }
  return s;
}

// Frame i: the first at its true pose (fixed), the others tracked.
v1::FusionFrame ProtoFrame(const Sequence& s, int i) {
  v1::FusionFrame f;
  f.set_depth(s.depth[i]);
  if (i == 0) SetPose(s.poses[0], f.mutable_fixed_pose());
  f.set_timestamp_s(i / 30.0);
  return f;
}

fusion::FrameInput KernelFrame(const Sequence& s, int i) {
  fusion::FrameInput f;
  f.depth = s.depth[i];
  if (i == 0) f.fixed_pose = s.poses[0];
  return f;
}

std::unique_ptr<Client> Connect(const TestServer& ts) {
  return ConnectClient(ts, std::chrono::milliseconds(0));
}

// Open sessions of kind fusion as the metrics show them (0 when none was ever opened).
int OpenFusionSessions(const TestServer& ts) {
  const std::string text = ts.server->MetricsText();
  const std::string key = "fresnel_sessions{";
  int total = 0;
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.find("kind=\"fusion\"") == std::string::npos) continue;
    total += static_cast<int>(std::lround(std::stod(line.substr(line.rfind(' ') + 1))));
  }
  return total;
}

// Polls until the server released every fusion session (a stream's end is seen asynchronously).
bool SessionsReleased(const TestServer& ts) {
  for (int i = 0; i < 400; ++i) {
    if (OpenFusionSessions(ts) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool SameBytes(const HostArray& a, const HostArray& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.bytes() == b.bytes();
}

}  // namespace

TEST_CASE("fusion service: a CPU session equals the kernel bit for bit", "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(8);

  auto session = FusionSession::Open(*client, ProtoConfig(v1::DEVICE_KIND_CPU));
  REQUIRE(session.ok());
  CHECK((*session)->opened().device() == "cpu");
  CHECK((*session)->opened().reserved_bytes() == fusion::DeviceBytes(KernelConfig()));
  CHECK((*session)->opened().brick_capacity() == fusion::BrickCapacity(KernelConfig()));
  CHECK((*session)->opened().config().cuda_disable() == 0);  // the defaults unless a bench asks
  CHECK(OpenFusionSessions(ts) == 1);

  Device cpu;
  auto oracle = fusion::Volume::Create(cpu, KernelConfig());
  REQUIRE(oracle.ok());
  for (int i = 0; i < 8; ++i) {
    auto got = (*session)->ProcessFrame(ProtoFrame(seq, i));
    REQUIRE(got.ok());
    auto want = (*oracle)->ProcessFrame(cpu, KernelFrame(seq, i));
    REQUIRE(want.ok());
    CHECK(got->frame_index() == want->frame_index);
    CHECK(got->timestamp_s() == Approx(i / 30.0));
    CHECK(got->bricks_in_use() == want->bricks_in_use);
    CHECK(got->inliers() == want->inliers);
    CHECK(PoseOf(got->t_world_camera()).m == want->T_world_camera.m);
    CHECK(got->info().device() == "cpu");
    // The synthetic frames are exact: tracking stays within a centimetre of the truth.
    CHECK(fusion::TranslationDistance(PoseOf(got->t_world_camera()), seq.poses[i]) < 0.01);
  }

  v1::FusionRenderRequest view;
  SetPose(seq.poses[4], view.mutable_t_world_camera());
  view.set_mode(v1::FUSION_RENDER_SHADED);
  auto image = (*session)->Render(view);
  REQUIRE(image.ok());
  auto want_image =
      (*oracle)->Render(cpu, seq.poses[4], SmallCamera(), fusion::RenderMode::kShaded);
  REQUIRE(want_image.ok());
  CHECK(SameBytes(*image, *want_image));

  // A small chunk size makes the mesh come in many pieces.
  auto mesh = (*session)->ExtractMesh(64 << 10);
  REQUIRE(mesh.ok());
  auto want_mesh = (*oracle)->ExtractMesh(cpu);
  REQUIRE(want_mesh.ok());
  CHECK(mesh->vertices == want_mesh->num_vertices());
  CHECK(mesh->triangles == want_mesh->num_triangles());
  CHECK(mesh->vertices > 100);
  CHECK(mesh->ply == fusion::EncodePly(*want_mesh));

  // Snapshot, restore in a second session: the same view.
  auto snap = (*session)->Snapshot(100 << 10);
  REQUIRE(snap.ok());
  auto restored = FusionSession::Restore(*client, snap->config, snap->bytes);
  REQUIRE(restored.ok());
  CHECK((*restored)->opened().frame_index() == 8);
  CHECK((*restored)->session_id() != (*session)->session_id());
  auto again = (*restored)->Render(view);
  REQUIRE(again.ok());
  CHECK(SameBytes(*again, *image));
  CHECK(OpenFusionSessions(ts) == 2);

  auto frames = (*session)->Close();
  REQUIRE(frames.ok());
  CHECK(*frames == 8);
  auto frames2 = (*restored)->Close();
  REQUIRE(frames2.ok());
  CHECK(*frames2 == 8);
  CHECK(SessionsReleased(ts));
}

TEST_CASE("fusion service: bad frames are answered and the session goes on",
          "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(2);
  auto session = FusionSession::Open(*client, ProtoConfig());
  REQUIRE(session.ok());
  auto expect = [&](const v1::FusionFrame& f, absl::StatusCode code, const std::string& field) {
    auto r = (*session)->ProcessFrame(f);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == code);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(field));
  };
  v1::FusionFrame f = ProtoFrame(seq, 0);
  f.set_depth(seq.depth[0].substr(0, 1000));
  expect(f, absl::StatusCode::kInvalidArgument, "depth");
  f = ProtoFrame(seq, 0);
  f.set_rgb(std::string(17, '\0'));
  expect(f, absl::StatusCode::kInvalidArgument, "rgb");
  f = ProtoFrame(seq, 0);
  f.mutable_fixed_pose()->set_m(3, std::nan(""));
  expect(f, absl::StatusCode::kInvalidArgument, "fixed_pose");
  f = ProtoFrame(seq, 0);
  f.mutable_fixed_pose()->add_m(1.0);
  expect(f, absl::StatusCode::kInvalidArgument, "fixed_pose");
  f = ProtoFrame(seq, 1);
  SetPose(fusion::RigidTransform::FromTranslation(INFINITY, 0, 0), f.mutable_pose_prior());
  expect(f, absl::StatusCode::kInvalidArgument, "pose_prior");

  v1::FusionRenderRequest view;
  view.set_mode(v1::FUSION_RENDER_COLOR);
  auto r = (*session)->Render(view);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("render.mode"));
  view.set_mode(v1::FUSION_RENDER_DEPTH);
  view.mutable_camera()->set_fx(-1);
  view.mutable_camera()->set_width(96);
  view.mutable_camera()->set_height(72);
  r = (*session)->Render(view);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("render.camera.fx"));
  view.mutable_camera()->set_fx(80);
  view.mutable_camera()->set_fy(80);
  view.mutable_camera()->set_width(8192);
  view.mutable_camera()->set_height(8192);
  r = (*session)->Render(view);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);

  // The session survived all of it.
  auto good = (*session)->ProcessFrame(ProtoFrame(seq, 0));
  REQUIRE(good.ok());
  CHECK(good->frame_index() == 0);
  auto frames = (*session)->Close();
  REQUIRE(frames.ok());
  CHECK(*frames == 1);
  CHECK(SessionsReleased(ts));
}

TEST_CASE("fusion service: bad configs and snapshots end the stream naming the field",
          "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  auto open_fails = [&](const v1::FusionConfig& c, absl::StatusCode code,
                        const std::string& field) {
    auto s = FusionSession::Open(*client, c);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == code);
    CHECK_THAT(std::string(s.status().message()), Catch::Contains(field));
  };
  v1::FusionConfig c = ProtoConfig();
  c.mutable_camera()->set_fx(0);
  open_fails(c, absl::StatusCode::kInvalidArgument, "camera.fx");
  c = ProtoConfig();
  c.mutable_camera()->set_width(3);
  open_fails(c, absl::StatusCode::kInvalidArgument, "camera.width");
  c = ProtoConfig();
  c.clear_camera();
  open_fails(c, absl::StatusCode::kInvalidArgument, "config.camera");
  c = ProtoConfig();
  c.set_truncation_m(0.001);
  open_fails(c, absl::StatusCode::kInvalidArgument, "truncation_m");
  c = ProtoConfig();
  c.set_brick_budget_bytes(10);
  open_fails(c, absl::StatusCode::kInvalidArgument, "brick_budget_bytes");
  c = ProtoConfig();
  c.mutable_device()->set_kind(static_cast<v1::DeviceKind>(7));
  open_fails(c, absl::StatusCode::kInvalidArgument, "config.device");
  // A budget larger than the server's session memory cap: RESOURCE_EXHAUSTED with the counts.
  c = ProtoConfig(v1::DEVICE_KIND_CPU);
  c.set_brick_budget_bytes(int64_t{64} << 30);
  open_fails(c, absl::StatusCode::kResourceExhausted, "bytes");

  // Snapshots that are not one.
  auto restore_fails = [&](const std::string& bytes, const std::string& field) {
    auto s = FusionSession::Restore(*client, ProtoConfig(), bytes);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.status().message()), Catch::Contains(field));
  };
  restore_fails("not a snapshot at all", "snapshot");
  restore_fails("", "snapshot");

  // A snapshot with a config that is not its own.
  {
    auto s = FusionSession::Open(*client, ProtoConfig());
    REQUIRE(s.ok());
    auto snap = (*s)->Snapshot();
    REQUIRE(snap.ok());
    v1::FusionConfig other = snap->config;
    other.set_brick_budget_bytes(int64_t{8} << 20);
    auto r = FusionSession::Restore(*client, other, snap->bytes);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("restore.config"));
    REQUIRE((*s)->Close().ok());
  }

  // A stream whose first message is a frame.
  {
    grpc::ClientContext context;
    auto stub = v1::FusionService::NewStub(ts.channel);
    auto stream = stub->Session(&context);
    v1::FusionRequest req;
    req.mutable_frame()->set_depth("xx");
    stream->Write(req);
    v1::FusionResponse resp;
    CHECK_FALSE(stream->Read(&resp));
    grpc::Status st = stream->Finish();
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("config"));
  }
  CHECK(SessionsReleased(ts));
}

TEST_CASE("fusion service: cancelled and dropped streams free their sessions",
          "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(3);
  for (int round = 0; round < 20; ++round) {
    auto s = FusionSession::Open(*client, ProtoConfig());
    REQUIRE(s.ok());
    if (round % 2 == 0) {
      // Pipelined frames, then the session object goes away without close (cancels).
      for (int i = 0; i < 3; ++i) REQUIRE((*s)->SendFrame(ProtoFrame(seq, i)).ok());
      auto first = (*s)->ReadResponse();
      REQUIRE(first.ok());
      CHECK(first->seq() == 1);
    }
  }
  CHECK(SessionsReleased(ts));
  // The server is still serving.
  auto s = FusionSession::Open(*client, ProtoConfig());
  REQUIRE(s.ok());
  REQUIRE((*s)->ProcessFrame(ProtoFrame(seq, 0)).ok());
  REQUIRE((*s)->Close().ok());
  CHECK(SessionsReleased(ts));
}

// gRPC reports an unparsable message like a half-close: without `close` the stream is not taken
// as finished (issue 13 item 8). The session still ends and frees its memory.
TEST_CASE("fusion service: garbage or a half-close without close ends INVALID_ARGUMENT",
          "[fusion_service]") {
  TestServer ts;
  v1::FusionRequest open;
  *open.mutable_config() = ProtoConfig(v1::DEVICE_KIND_CPU);
  for (const bool garbage : {true, false}) {
    RawBidiCall call(ts.channel, "/fresnel.v1.FusionService/Session");
    REQUIRE(call.Write(open));
    if (garbage) call.Write(std::string("\x0a\xff\xff\xff\xff\x0f", 6));
    call.WritesDone();
    int responses = 0;
    grpc::Status st = call.ReadAllAndFinish(&responses);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains("close"));
    CHECK(responses == 1);  // `opened`
  }
  CHECK(SessionsReleased(ts));
}

TEST_CASE("fusion service: an idle session expires and its stream ends NOT_FOUND",
          "[fusion_service]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.session_ttl_s = 0.3;
  TestServer ts(config);
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(1);
  auto s = FusionSession::Open(*client, ProtoConfig());
  REQUIRE(s.ok());
  // The store sweeps about once a second; wait until the session is gone.
  for (int i = 0; i < 300 && OpenFusionSessions(ts) > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(OpenFusionSessions(ts) == 0);
  auto r = (*s)->ProcessFrame(ProtoFrame(seq, 0));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("expired"));
  // Every later call reports the same end.
  CHECK((*s)->Close().status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("fusion service: a full brick budget is RESOURCE_EXHAUSTED per frame",
          "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(3);
  v1::FusionConfig c = ProtoConfig();
  fusion::FusionConfig k = KernelConfig();
  c.set_brick_budget_bytes(fusion::BytesPerBrick(k) * 16);  // 16 bricks: far too few
  auto s = FusionSession::Open(*client, c);
  REQUIRE(s.ok());
  CHECK((*s)->opened().brick_capacity() <= 16);
  auto r = (*s)->ProcessFrame(ProtoFrame(seq, 0));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("brick"));
  // The session is still usable: later frames are answered (tracking against the little that
  // fitted may fail, which is their own result) and views render.
  for (int i = 1; i < 3; ++i) {
    auto later = (*s)->ProcessFrame(ProtoFrame(seq, i));
    CHECK((later.ok() || absl::IsResourceExhausted(later.status())));
  }
  v1::FusionRenderRequest view;
  view.set_mode(v1::FUSION_RENDER_DEPTH);
  CHECK((*s)->Render(view).ok());
  auto frames = (*s)->Close();
  REQUIRE(frames.ok());
  CHECK(SessionsReleased(ts));
}

TEST_CASE("fusion service: pipelined frames are answered in order", "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(12);
  auto s = FusionSession::Open(*client, ProtoConfig());
  REQUIRE(s.ok());
  // More frames than the server reads ahead (FusionServiceLimits::max_pending = 8): the writer
  // thread is held back by flow control and every frame is still answered.
  std::thread writer([&] {
    for (int i = 0; i < 12; ++i) REQUIRE((*s)->SendFrame(ProtoFrame(seq, i)).ok());
  });
  for (int i = 0; i < 12; ++i) {
    auto r = (*s)->ReadResponse();
    REQUIRE(r.ok());
    CHECK(r->seq() == i + 1);
    CHECK(r->status().code() == 0);
    CHECK(r->frame().frame_index() == i);
  }
  writer.join();
  REQUIRE((*s)->Close().ok());
}

TEST_CASE("fusion service: max_queued_frames drops frames instead of queueing them",
          "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(8);
  v1::FusionConfig c = ProtoConfig();
  c.set_max_queued_frames(1);
  auto s = FusionSession::Open(*client, c);
  REQUIRE(s.ok());
  // Eight frames at once: the first is taken, and frames arriving while it runs are dropped.
  for (int i = 0; i < 8; ++i) REQUIRE((*s)->SendFrame(ProtoFrame(seq, i)).ok());
  int ok = 0, dropped = 0;
  for (int i = 0; i < 8; ++i) {
    auto r = (*s)->ReadResponse();
    REQUIRE(r.ok());
    CHECK(r->seq() == i + 1);
    if (r->status().code() == 0) {
      ++ok;
    } else {
      CHECK(r->status().code() == static_cast<int>(absl::StatusCode::kResourceExhausted));
      CHECK_THAT(r->status().message(), Catch::Contains("max_queued_frames"));
      ++dropped;
    }
  }
  CHECK(ok >= 1);
  CHECK(dropped >= 1);
  // Once the queue drained, frames are taken again.
  auto later = (*s)->ProcessFrame(ProtoFrame(seq, 1));
  CHECK(later.ok());
  REQUIRE((*s)->Close().ok());

  c.set_max_queued_frames(-1);
  auto bad = FusionSession::Open(*client, c);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("max_queued_frames"));
  CHECK(SessionsReleased(ts));
}

TEST_CASE("fusion service: ServerInfo shows the session limits", "[fusion_service]") {
  TestServer ts;
  auto client = Connect(ts);
  auto info = client->GetServerInfo();
  REQUIRE(info.ok());
  CHECK(info->fusion().max_sessions_per_device() == 64);
  CHECK(info->fusion().max_pending() == 8);
  CHECK(info->fusion().session_ttl_seconds() > 0);
  bool listed = false;
  for (const std::string& name : info->services()) listed |= name == "fresnel.v1.FusionService";
  CHECK(listed);
}

TEST_CASE("fresnel fuse: a generated sequence to trajectory, mesh and views", "[fusion_service]") {
  TestServer ts;
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() /
                       absl::StrCat("fresnel_fuse_test_", std::random_device{}());
  const std::string seq_dir = (tmp / "room").string(), out_dir = (tmp / "out").string();
  CliResult r = RunCli({"--server", ts.address, "fuse", seq_dir, "--generate", "16",
                        "--voxel-size", "0.02", "--truncation", "0.08", "--budget-mib", "32",
                        "--view-every", "8", "--out-dir", out_dir, "--json"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"frames\": 16"));
  CHECK_THAT(r.out, Catch::Contains("ate_rmse_m"));
  for (const char* f : {"trajectory.txt", "mesh.ply", "view.png", "view_00008.png"}) {
    CHECK(fs::file_size(fs::path(out_dir) / f) > 100);
  }
  auto est = fusion::ReadPosesTxt((fs::path(out_dir) / "trajectory.txt").string());
  auto gt = fusion::ReadPosesTxt((fs::path(seq_dir) / "poses.txt").string());
  REQUIRE(est.ok());
  REQUIRE(gt.ok());
  REQUIRE(est->size() == 16);
  // Noisy synthetic depth, 2 cm voxels: the tracked path stays within 2 cm of the truth.
  CHECK(fusion::AbsoluteTrajectoryRmse(*est, *gt) < 0.02);

  // Bad input: a folder that is not a sequence (exit 4), a bad flag (exit 2).
  r = RunCli({"--server", ts.address, "fuse", (tmp / "nothing").string()});
  CHECK(r.code == 4);
  r = RunCli({"--server", ts.address, "fuse", seq_dir, "--use-poses", "--no-tracking"});
  CHECK(r.code == 2);

  // The load generator: two sessions at 30 fps on small frames.
  r = RunCli({"--server", ts.address, "bench", "--op", "fuse", "--concurrency", "2", "--fps",
              "30", "--duration", "0.5", "--warmup", "2", "--frame-size", "96x72",
              "--budget-mib", "32", "--json"});
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"sessions\": 2"));
  CHECK_THAT(r.out, Catch::Contains("\"connections\": 2"));  // one client each by default
  CHECK_THAT(r.out, Catch::Contains("\"sessions_failed\": 0"));
  r = RunCli({"--server", ts.address, "bench", "--op", "fuse", "--concurrency", "2", "--fps",
              "30", "--duration", "0.3", "--warmup", "2", "--frame-size", "96x72",
              "--budget-mib", "32", "--connections", "1", "--json"});
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"connections\": 1"));
  CHECK_THAT(r.out, Catch::Contains("\"sessions_failed\": 0"));
  // Sessions taking turns in the period, with A/B bits of the CUDA kernels (a CPU session ignores
  // them; the config carries them): the round trip in parts.
  r = RunCli({"--server", ts.address, "bench", "--op", "fuse", "--concurrency", "3", "--fps",
              "30", "--duration", "0.3", "--warmup", "2", "--frame-size", "96x72",
              "--budget-mib", "32", "--phase", "even", "--variant", "16384+4", "--json"});
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"phase\": \"even\""));
  CHECK_THAT(r.out, Catch::Contains("\"variant\": \"16384+4\""));
  CHECK_THAT(r.out, Catch::Contains("\"sessions_failed\": 0"));
  for (const char* part : {"\"lag\"", "\"transit\"", "\"server\"", "\"process\"",
                           "\"round_trip\"", "\"slowest_1pct_mean\""}) {
    CHECK_THAT(r.out, Catch::Contains(part));
  }
  r = RunCli({"--server", ts.address, "bench", "--op", "fuse", "--variant", "4+x"});
  CHECK(r.code == 2);
  r = RunCli({"--server", ts.address, "bench", "--op", "fuse", "--phase", "sideways"});
  CHECK(r.code == 2);
  // (4 mm voxels in 32 MiB do not hold the room: frames may be refused with RESOURCE_EXHAUSTED
  // and tracking lost; the numbers are the GPU benchmark's business, not this test's.)
  CHECK(SessionsReleased(ts));
  fs::remove_all(tmp);
}

TEST_CASE("fusion service: a GPU session agrees with the CPU oracle", "[fusion_service][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  const Sequence seq = MakeSequence(10);
  auto session = FusionSession::Open(*client, ProtoConfig(v1::DEVICE_KIND_GPU));
  REQUIRE(session.ok());
  CHECK((*session)->opened().device().rfind("cuda:", 0) == 0);
  Device cpu;
  auto oracle = fusion::Volume::Create(cpu, KernelConfig());
  REQUIRE(oracle.ok());
  for (int i = 0; i < 10; ++i) {
    auto got = (*session)->ProcessFrame(ProtoFrame(seq, i));
    REQUIRE(got.ok());
    auto want = (*oracle)->ProcessFrame(cpu, KernelFrame(seq, i));
    REQUIRE(want.ok());
    CHECK(got->info().device().rfind("cuda:", 0) == 0);
    // GPU and CPU ICP reduce in different orders: poses agree to 1 mm / 1 mrad.
    CHECK(fusion::TranslationDistance(PoseOf(got->t_world_camera()), want->T_world_camera) <
          1e-3);
    CHECK(fusion::RotationAngle(PoseOf(got->t_world_camera()), want->T_world_camera) < 1e-3);
    CHECK(std::abs(got->bricks_in_use() - want->bricks_in_use) <= want->bricks_in_use / 50 + 2);
  }
  v1::FusionRenderRequest view;
  SetPose(seq.poses[5], view.mutable_t_world_camera());
  view.set_mode(v1::FUSION_RENDER_DEPTH);
  auto image = (*session)->Render(view);
  REQUIRE(image.ok());
  auto want = (*oracle)->Render(cpu, seq.poses[5], SmallCamera(), fusion::RenderMode::kDepth);
  REQUIRE(want.ok());
  // Depth within 1 cm on >= 98 % of the pixels where both see a surface.
  const float* a = image->data<float>();
  const float* b = want->data<float>();
  int64_t both = 0, close = 0;
  for (int64_t i = 0; i < want->size(); ++i) {
    if (a[i] > 0 && b[i] > 0) {
      ++both;
      close += std::abs(a[i] - b[i]) < 0.01f;
    }
  }
  CHECK(both > want->size() / 2);
  CHECK(close >= both * 98 / 100);
  auto mesh = (*session)->ExtractMesh();
  REQUIRE(mesh.ok());
  CHECK(mesh->vertices > 100);
  REQUIRE((*session)->Close().ok());
  CHECK(SessionsReleased(ts));
}

// ---------------------------------------------------------------------------------------------
// Renders into a shared-memory region (docs/transport.md, "Outputs to a region").

static void CheckFusionRenderThroughRegion(Client* client, v1::DeviceKind kind) {
  const Sequence seq = MakeSequence(3);
  auto session = FusionSession::Open(*client, ProtoConfig(kind));
  REQUIRE(session.ok());
  for (int i = 0; i < 3; ++i) REQUIRE((*session)->ProcessFrame(ProtoFrame(seq, i)).ok());
  auto region = SharedRegion::Create(client, "fuse-out", 1 << 17);
  REQUIRE(region.ok());
  for (v1::FusionRenderMode mode : {v1::FUSION_RENDER_SHADED, v1::FUSION_RENDER_NORMALS}) {
    INFO("mode " << mode);
    v1::FusionRenderRequest view;
    SetPose(seq.poses[1], view.mutable_t_world_camera());
    view.set_mode(mode);
    auto want = (*session)->Render(view);
    REQUIRE(want.ok());
    *view.mutable_out_shm() = (*region)->OutRef(64);
    auto got = (*session)->Render(view);
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    CHECK(SameBytes(*got, *want));
    auto in_region = (*region)->Read(ShmArray(want->dtype(), want->shape(), "fuse-out", 64));
    REQUIRE(in_region.ok());
    CHECK(in_region->bytes() == want->bytes());
  }
  // Bad ranges are answered per request; the session goes on.
  v1::FusionRenderRequest bad;
  bad.set_mode(v1::FUSION_RENDER_DEPTH);
  *bad.mutable_out_shm() = (*region)->OutRef(0);
  bad.mutable_out_shm()->set_region("missing");
  CHECK(StatusNames((*session)->Render(bad).status(), absl::StatusCode::kNotFound,
                    "render.out_shm.region"));
  *bad.mutable_out_shm() = (*region)->OutRef((1 << 17) - 1024);
  CHECK(StatusNames((*session)->Render(bad).status(), absl::StatusCode::kInvalidArgument,
                    "render.out_shm.offset_bytes"));
  bad.clear_out_shm();
  CHECK((*session)->Render(bad).ok());
  REQUIRE((*session)->Close().ok());
}

TEST_CASE("fusion service: renders into a shared region equal the inline ones",
          "[fusion_service][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  CheckFusionRenderThroughRegion(client.get(), v1::DEVICE_KIND_CPU);
}

TEST_CASE("fusion service: a GPU session's renders into a shared region equal the inline ones",
          "[fusion_service][shm][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  CheckFusionRenderThroughRegion(client.get(), v1::DEVICE_KIND_GPU);
}

}  // namespace fresnel::testing
