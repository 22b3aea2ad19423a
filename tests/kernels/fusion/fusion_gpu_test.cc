// GPU tests of the fusion kernels: agreement with the CPU oracle, tracking accuracy, the real-data
// sequence, snapshots, budget errors and memory hygiene.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include "fresnel/core/gpu.h"
#include "fresnel/io/png.h"
#include "fresnel/fusion/dataset.h"
#include "fresnel/fusion/fusion.h"
#include "fusion_test_util.h"
#include "support/test_support.h"

namespace fresnel::fusion {
namespace {

using testing::NearSurfaceVoxels;
using testing::RenderFrame;
using testing::SyntheticConfig;

const Device kCpu = Device::Cpu();

// Folder for images the tests leave behind (FRESNEL_TEST_OUT), or "".
std::string OutDir() {
  const char* d = std::getenv("FRESNEL_TEST_OUT");
  return d != nullptr ? std::string(d) : std::string();
}

TEST_CASE("fusion gpu: integration, raycast and mesh agree with the CPU", "[gpu][fusion]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  const Device gpu = *fresnel::testing::TestGpu();
  FusionConfig c = SyntheticConfig(320, 240, 0.01, false);
  c.color = true;
  auto vc = Volume::Create(kCpu, c);
  auto vg = Volume::Create(gpu, c);
  REQUIRE(vc.ok());
  REQUIRE(vg.ok());
  testing::FuseSequence({vc->get(), vg->get()}, {kCpu, gpu}, c, SyntheticScene::Orbit(20, 1.2), 20,
                        true, true);
  CHECK((*vc)->bricks_in_use() == (*vg)->bricks_in_use());

  SyntheticScene scene = SyntheticScene::Room();
  std::vector<float> pts = NearSurfaceVoxels(scene, c.voxel_size_m, c.truncation_m, 50000, 3);
  auto sc = (*vc)->SampleTsdf(kCpu, pts);
  auto sg = (*vg)->SampleTsdf(gpu, pts);
  REQUIRE(sc.ok());
  REQUIRE(sg.ok());
  int64_t valid = 0, exact = 0;
  double worst = 0;
  for (size_t i = 0; i < sc->size(); ++i) {
    CHECK((*sc)[i].valid == (*sg)[i].valid);
    if (!(*sc)[i].valid) continue;
    ++valid;
    double d = std::abs((*sc)[i].tsdf - (*sg)[i].tsdf);
    worst = std::max(worst, d);
    exact += d == 0;
  }
  WARN("GPU vs CPU TSDF: " << exact << " of " << valid << " samples equal, max |diff| " << worst
                           << " (units of mu)");
  // Tolerance: one quantisation step (1/32767 of mu) per observation; observed exact.
  CHECK(worst <= 20.0 / 32767);

  auto poses = SyntheticScene::Orbit(20, 1.2);
  auto dc = (*vc)->Render(kCpu, poses[7], c.camera, RenderMode::kDepth);
  auto dg = (*vg)->Render(gpu, poses[7], c.camera, RenderMode::kDepth);
  REQUIRE(dc.ok());
  REQUIRE(dg.ok());
  int64_t close = 0;
  for (int64_t i = 0; i < dc->size(); ++i)
    close += std::abs(dc->data<float>()[i] - dg->data<float>()[i]) <= 1e-4f;
  WARN("GPU vs CPU raycast depth: " << close << " of " << dc->size() << " pixels within 0.1 mm");
  CHECK(close >= 0.999 * dc->size());

  auto mc = (*vc)->ExtractMesh(kCpu);
  auto mg = (*vg)->ExtractMesh(gpu);
  REQUIRE(mc.ok());
  REQUIRE(mg.ok());
  WARN("mesh triangles CPU " << mc->num_triangles() << " GPU " << mg->num_triangles());
  CHECK(std::abs(mc->num_triangles() - mg->num_triangles()) <= mc->num_triangles() / 1000);
  if (mc->num_triangles() == mg->num_triangles()) {
    double vmax = 0;
    for (size_t i = 0; i < mc->vertices.size(); ++i)
      vmax = std::max(vmax, static_cast<double>(std::abs(mc->vertices[i] - mg->vertices[i])));
    WARN("mesh vertex max |diff| " << vmax << " m");
    CHECK(vmax < 1e-3);
  }
}

double TrackGpu(const Device& gpu, const FusionConfig& c, int frames, bool noise, int* lost,
                double* ms_per_frame) {
  SyntheticScene scene = SyntheticScene::Room();
  auto gt = SyntheticScene::Orbit(frames, 1.2);
  auto v = Volume::Create(gpu, c);
  REQUIRE(v.ok());
  std::vector<RigidTransform> est;
  *lost = 0;
  double total = 0;
  for (int i = 0; i < frames; ++i) {
    testing::Frame f = RenderFrame(scene, c, gt[i], noise, 7000 + i);
    FrameInput in;
    in.depth = f.depth;
    if (i == 0) in.fixed_pose = gt[0];
    auto r = (*v)->ProcessFrame(gpu, in);
    REQUIRE(r.ok());
    total += r->track_s + r->integrate_s + r->raycast_s;
    if (r->state == TrackingState::kLost) ++*lost;
    est.push_back(r->T_world_camera);
  }
  *ms_per_frame = 1e3 * total / frames;
  return AbsoluteTrajectoryRmse(est, gt);
}

TEST_CASE("fusion gpu: ICP tracking ATE <= 1 cm over 120 frames at 640x480", "[gpu][fusion]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  const Device gpu = *fresnel::testing::TestGpu();
  FusionConfig c = SyntheticConfig(640, 480, 0.004, true);
  c.brick_budget_bytes = int64_t{1} << 30;
  int lost = 0;
  double ms = 0;
  double ate = TrackGpu(gpu, c, 120, false, &lost, &ms);
  WARN("GPU ATE RMSE without noise: " << ate * 1000 << " mm, lost " << lost << ", " << ms
                                      << " ms/frame");
  CHECK(ate < 0.01);
  CHECK(lost == 0);
  c.depth_format = DepthFormat::kUint16;
  ate = TrackGpu(gpu, c, 120, true, &lost, &ms);
  WARN("GPU ATE RMSE with noise (uint16 mm): " << ate * 1000 << " mm, lost " << lost << ", " << ms
                                               << " ms/frame");
  CHECK(ate < 0.01);
  CHECK(lost == 0);
}

// The CUDA launch savings and the integration's ILP change no arithmetic, so each must give the
// same volume as its switch (FusionConfig::cuda_disable / cuda_enable) bit for bit: the folded
// Begin / memset / Commit launches and the one-launch vertex maps (off: 256); the ICP's batched
// partial sums (512); the integration's loads of 3 voxels before their updates (1024) and its
// occupancy bound (2048); SelectKernel's neighbour lists (4096) and the integration's skip of the
// apron voxels that the apron refresh overwrites (cuda_enable 2), both of which now run only with
// the refresh of every visible brick; that refresh (8192), which after the default refresh around
// new bricks must change nothing (aprons stay equal to their owners); the ICP graph of WHILE nodes
// (cuda_enable 1: a level's loop stops launching once it has converged) against the default graph
// of every iteration, whose converged kernels return at once. Same poses bit for bit, same
// iteration, inlier and brick counts, same mesh and render at the end. With a stop threshold no
// step meets, every level runs to its cap (and a level of 0 iterations is skipped).
TEST_CASE("fusion gpu: launch savings and integrate ILP track like their switches", "[gpu][fusion]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  const Device gpu = *fresnel::testing::TestGpu();
  SyntheticScene scene = SyntheticScene::Room();
  const int frames = 30;
  auto gt = SyntheticScene::Orbit(frames, 0.6);
  struct Case {
    std::array<int, 3> iterations;
    double stop_xi2;       // 0 = default
    int expect_per_frame;  // exact ICP iterations of each tracked frame, or -1
  };
  struct Switch {
    unsigned off, on;
  };
  const Switch kSwitches[] = {{0, 0},    {0, 1},    {256, 0},  {512, 0},
                              {1024, 0}, {2048, 0}, {4096, 0}, {0, 2},
                              {256 | 512 | 1024, 0}, {8192, 0}, {8192 | 4096, 0}};
  for (const Case& k : {Case{{10, 5, 4}, 0, -1}, Case{{3, 0, 2}, 1e-30, 5}}) {
    FusionConfig c = SyntheticConfig(320, 240, 0.01, true);
    c.depth_format = DepthFormat::kUint16;
    c.icp_iterations = k.iterations;
    if (k.stop_xi2 > 0) c.cuda_icp_stop_xi2 = {k.stop_xi2, k.stop_xi2, k.stop_xi2};
    std::vector<std::unique_ptr<Volume>> vols;
    for (const Switch& sw : kSwitches) {
      FusionConfig cv = c;
      cv.cuda_disable = sw.off;
      cv.cuda_enable = sw.on;
      auto v = Volume::Create(gpu, cv);
      REQUIRE(v.ok());
      vols.push_back(std::move(*v));
    }
    int equal = 0, early = 0, total_iterations = 0;
    for (int i = 0; i < frames; ++i) {
      testing::Frame f = RenderFrame(scene, c, gt[i], true, 900 + i);
      FrameInput in;
      in.depth = f.depth;
      if (i == 0) in.fixed_pose = gt[0];
      std::vector<FrameResult> r;
      for (auto& v : vols) {
        auto ri = v->ProcessFrame(gpu, in);
        REQUIRE(ri.ok());
        r.push_back(*ri);
      }
      CHECK(r[0].state == TrackingState::kOk);
      bool same = true;
      for (size_t j = 1; j < r.size(); ++j) {
        CHECK(r[j].icp_iterations == r[0].icp_iterations);
        CHECK(r[j].inliers == r[0].inliers);
        CHECK(r[j].bricks_in_use == r[0].bricks_in_use);
        same = same && r[j].T_world_camera.m == r[0].T_world_camera.m;
      }
      equal += same;
      if (i == 0) continue;
      total_iterations += r[0].icp_iterations;
      if (k.expect_per_frame >= 0) CHECK(r[0].icp_iterations == k.expect_per_frame);
      if (r[0].icp_iterations < 19) ++early;
    }
    WARN("ICP " << k.iterations[0] << "/" << k.iterations[1] << "/" << k.iterations[2]
                << ": poses of the " << vols.size() << " switch settings equal in " << equal
                << " of " << frames
                << " frames, " << total_iterations << " iterations in " << frames - 1
                << " tracked frames");
    CHECK(equal == frames);
    if (k.expect_per_frame < 0) CHECK(early > 0);  // levels do converge early
    // Same voxels: the meshes (bricks sorted by key, so independent of the pool order, which
    // the parallel allocation makes differ from volume to volume) and a depth render.
    auto m0 = vols[0]->ExtractMesh(gpu);
    auto d0 = vols[0]->Render(gpu, gt[frames / 2], c.camera, RenderMode::kDepth);
    REQUIRE(m0.ok());
    REQUIRE(d0.ok());
    CHECK(m0->vertices.size() > 1000);
    for (size_t j = 1; j < vols.size(); ++j) {
      auto mj = vols[j]->ExtractMesh(gpu);
      auto dj = vols[j]->Render(gpu, gt[frames / 2], c.camera, RenderMode::kDepth);
      REQUIRE(mj.ok());
      REQUIRE(dj.ok());
      CHECK((mj->vertices == m0->vertices));
      CHECK((dj->bytes() == d0->bytes()));
    }
  }
}

TEST_CASE("fusion gpu: livingroom1_clean_micro with tracking", "[gpu][fusion]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  const std::string dir = fresnel::testing::DataPath("fusion/livingroom1_clean_micro");
  if (dir.empty()) {
    WARN("shared data absent: skipping");
    return;
  }
  const Device gpu = *fresnel::testing::TestGpu();
  auto seq = OpenSequence(dir);
  REQUIRE(seq.ok());
  FusionConfig c;
  c.camera = seq->camera;
  c.depth_scale = seq->depth_scale;
  c.voxel_size_m = 0.006;
  c.truncation_m = 0.03;
  c.brick_budget_bytes = int64_t{1} << 30;
  auto v = Volume::Create(gpu, c);
  REQUIRE(v.ok());
  std::vector<RigidTransform> est;
  int lost = 0;
  for (size_t i = 0; i < seq->depth_files.size(); ++i) {
    auto png = ReadPng(seq->depth_files[i]);
    REQUIRE(png.ok());
    FrameInput in;
    in.depth = absl::string_view(png->bytes().data(), png->nbytes());
    if (i == 0) in.fixed_pose = seq->poses[0];
    auto r = (*v)->ProcessFrame(gpu, in);
    REQUIRE(r.ok());
    lost += r->state == TrackingState::kLost;
    est.push_back(r->T_world_camera);
  }
  double ate = AbsoluteTrajectoryRmse(est, seq->poses);
  WARN("livingroom1_clean_micro: ATE RMSE vs the given poses " << ate * 1000 << " mm over "
                                                               << est.size() << " frames, lost "
                                                               << lost << ", bricks "
                                                               << (*v)->bricks_in_use());
  CHECK(ate < 0.03);
  CHECK(lost == 0);
  auto mesh = (*v)->ExtractMesh(gpu);
  REQUIRE(mesh.ok());
  WARN("livingroom mesh: " << mesh->num_triangles() << " triangles");
  CHECK(mesh->num_triangles() > 10000);
  const std::string out = OutDir();
  if (!out.empty()) {
    auto shaded = (*v)->Render(gpu, est[60], c.camera, RenderMode::kShaded);
    REQUIRE(shaded.ok());
    CHECK(WritePng(out + "/livingroom_shaded.png", *shaded).ok());
    CHECK(WritePosesTxt(out + "/livingroom_poses.txt", est).ok());
  }
}

TEST_CASE("fusion gpu: snapshot/restore bit-exact, and across devices", "[gpu][fusion]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  const Device gpu = *fresnel::testing::TestGpu();
  FusionConfig c = SyntheticConfig(320, 240, 0.01, true);
  c.color = true;
  auto gt = SyntheticScene::Orbit(12, 0.6);
  auto v = Volume::Create(gpu, c);
  REQUIRE(v.ok());
  testing::FuseSequence({v->get()}, {gpu}, c, gt, 10, false, false);
  std::string snapshot;
  auto w = testing::CheckRestoreBitExact(gpu, **v, gt[11], &snapshot);
  const std::string* snap = &snapshot;
  // A GPU snapshot restored on the CPU renders the same depth.
  auto onc = Volume::Restore(kCpu, *snap);
  REQUIRE(onc.ok());
  auto dc = (*onc)->Render(kCpu, gt[11], c.camera, RenderMode::kDepth);
  auto dg = (*v)->Render(gpu, gt[11], c.camera, RenderMode::kDepth);
  REQUIRE(dc.ok());
  REQUIRE(dg.ok());
  int64_t close = 0;
  for (int64_t i = 0; i < dc->size(); ++i)
    close += std::abs(dc->data<float>()[i] - dg->data<float>()[i]) <= 1e-4f;
  CHECK(close >= 0.999 * dc->size());
}

TEST_CASE("fusion gpu: full budget, device and stream errors", "[gpu][fusion]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  const Device gpu = *fresnel::testing::TestGpu();
  FusionConfig c = SyntheticConfig(160, 120, 0.01, false);
  c.brick_budget_bytes = 200 * BytesPerBrick(c);
  auto v = Volume::Create(gpu, c);
  REQUIRE(v.ok());
  CHECK((*v)->allocated_bytes() <= DeviceBytes(c));
  SyntheticScene scene = SyntheticScene::Room();
  auto gt = SyntheticScene::Orbit(2, 0.1);
  testing::Frame f = RenderFrame(scene, c, gt[0], false, 0);
  FrameInput in;
  in.depth = f.depth;
  in.fixed_pose = gt[0];
  auto r = (*v)->ProcessFrame(gpu, in);
  REQUIRE(absl::IsResourceExhausted(r.status()));
  CHECK(r.status().message().find("200 of 200") != std::string::npos);
  CHECK((*v)->Render(gpu, gt[0], c.camera, RenderMode::kDepth).ok());
  CHECK(absl::IsFailedPrecondition((*v)->ExtractMesh(kCpu).status()));
  Device null_stream = gpu;
  null_stream.stream = nullptr;
  CHECK(absl::IsInvalidArgument((*v)->ExtractMesh(null_stream).status()));
  CHECK(absl::IsInvalidArgument(Volume::Create(null_stream, c).status()));
}

TEST_CASE("fusion gpu: device memory returns to baseline", "[gpu][fusion]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  const Device gpu = *fresnel::testing::TestGpu();
  FusionConfig c = SyntheticConfig(320, 240, 0.01, true);
  c.brick_budget_bytes = int64_t{64} << 20;
  { REQUIRE(Volume::Create(gpu, c).ok()); }  // warm-up: context, module load
  auto base = GpuFreeMemoryBytes(gpu.ordinal);
  REQUIRE(base.ok());
  for (int i = 0; i < 200; ++i) {
    auto v = Volume::Create(gpu, c);
    REQUIRE(v.ok());
  }
  auto after = GpuFreeMemoryBytes(gpu.ordinal);
  REQUIRE(after.ok());
  WARN("200 create/destroy cycles: free device memory changed by " << (*after - *base) << " bytes");
  CHECK(std::abs(*after - *base) <= (int64_t{2} << 20));

  // Repeated mesh extraction while integrating.
  SyntheticScene scene = SyntheticScene::Room();
  auto gt = SyntheticScene::Orbit(40, 1.2);
  auto v = Volume::Create(gpu, c);
  REQUIRE(v.ok());
  int64_t first = 0, worst = 0;
  for (int i = 0; i < 40; ++i) {
    testing::Frame f = RenderFrame(scene, c, gt[i], false, 0);
    FrameInput in;
    in.depth = f.depth;
    if (i == 0) in.fixed_pose = gt[0];
    REQUIRE((*v)->ProcessFrame(gpu, in).ok());
    if (i % 4 == 3) {
      REQUIRE((*v)->ExtractMesh(gpu).ok());
      REQUIRE((*v)->Render(gpu, gt[i], c.camera, RenderMode::kShaded).ok());
      auto now = GpuFreeMemoryBytes(gpu.ordinal);
      REQUIRE(now.ok());
      if (first == 0) first = *now;
      worst = std::max(worst, std::abs(*now - first));
    }
  }
  WARN("repeated mesh extraction: free device memory varied by at most " << worst << " bytes");
  CHECK(worst <= (int64_t{2} << 20));
  v->reset();
  auto end = GpuFreeMemoryBytes(gpu.ordinal);
  REQUIRE(end.ok());
  CHECK(std::abs(*end - *base) <= (int64_t{2} << 20));
}

}  // namespace
}  // namespace fresnel::fusion
