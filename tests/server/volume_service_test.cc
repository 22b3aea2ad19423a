// VolumeRenderService end to end over loopback gRPC through fresnel::VolumeClient: a CPU server's
// render equals the kernel's own render bit for bit, progressive partial frames add up to the
// image, the same mesh uploaded twice is stored once, deleted and evicted meshes answer
// NOT_FOUND saying why, every bad-input class is answered with its code naming the field (and the
// server goes on serving), and the session and memory counts return to zero. The CLI renders a
// generated mesh and refuses unknown VTK cells by name. [gpu]: GPU renders vs the CPU oracle.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fresnel/client/shm.h"
#include "fresnel/client/volume_client.h"
#include "fresnel/io/png.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/volume/mesh.h"
#include "fresnel/volume/render.h"
#include "region_check.h"
#include "server_fixture.h"
#include "support/cli_runner.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

std::unique_ptr<Client> Connect(const TestServer& ts) {
  return ConnectClient(ts);
}

volume::TetMesh Grid(int cells, volume::GridShape shape = volume::GridShape::kBox) {
  volume::GridMeshSpec spec;
  spec.cells_x = spec.cells_y = spec.cells_z = cells;
  spec.shape = shape;
  auto mesh = volume::GenerateGridMesh(spec);
  REQUIRE(mesh.ok());
  return *std::move(mesh);
}

struct MeshArrays {
  HostArray points, tets, scalars;
};

MeshArrays ArraysOf(const volume::TetMesh& m) {
  MeshArrays a{HostArray(DType::kFloat32, {m.num_points(), 3}),
               HostArray(DType::kInt32, {m.num_tets(), 4}),
               HostArray(DType::kFloat32, {m.num_points()})};
  std::memcpy(a.points.raw(), m.points_xyz.data(), a.points.nbytes());
  std::memcpy(a.tets.raw(), m.tets.data(), a.tets.nbytes());
  std::memcpy(a.scalars.raw(), m.scalars.data(), a.scalars.nbytes());
  return a;
}

absl::StatusOr<v1::UploadMeshResponse> Upload(VolumeClient& vc, const volume::TetMesh& m,
                                              v1::DeviceKind kind = v1::DEVICE_KIND_ANY) {
  MeshArrays a = ArraysOf(m);
  return vc.UploadMesh(a.points, a.tets, a.scalars, kind);
}

// A transfer function with colour and extinction over [0, 1] (the generators' scalar range).
volume::TransferFunction Tf() {
  volume::TransferFunction tf;
  tf.points = {{0.0f, 0.1f, 0.2f, 0.9f, 0.5f}, {0.5f, 0.9f, 0.9f, 0.9f, 2.0f},
               {1.0f, 0.9f, 0.2f, 0.1f, 6.0f}};
  tf.background = {0.05f, 0.05f, 0.1f, 1.0f};
  return tf;
}

void TfToProto(const volume::TransferFunction& tf, v1::TransferFunction* out) {
  for (const volume::TfPoint& p : tf.points) {
    v1::TfPoint* q = out->add_points();
    q->set_scalar(p.scalar);
    q->set_r(p.r);
    q->set_g(p.g);
    q->set_b(p.b);
    q->set_extinction_per_unit(p.extinction_per_unit);
  }
  out->mutable_background()->Assign(tf.background.begin(), tf.background.end());
}

void CameraToProto(const volume::Camera& c, v1::VolumeCamera* out) {
  out->mutable_eye()->Assign(c.eye.begin(), c.eye.end());
  out->mutable_target()->Assign(c.target.begin(), c.target.end());
  out->mutable_up()->Assign(c.up.begin(), c.up.end());
  out->set_vertical_fov_deg(c.vertical_fov_deg);
  out->set_orthographic_height(c.orthographic_height);
  out->set_width(c.width);
  out->set_height(c.height);
}

v1::VolumeRenderRequest RenderReq(const std::string& id, const volume::Camera& camera,
                                  v1::VolumeImageFormat format = v1::VOLUME_IMAGE_RGBA_F32) {
  v1::VolumeRenderRequest r;
  r.set_mesh_id(id);
  TfToProto(Tf(), r.mutable_transfer_function());
  CameraToProto(camera, r.mutable_camera());
  r.set_format(format);
  return r;
}

// The kernel's own render of `m`, on `device`.
HostArray KernelRender(const Device& device, const volume::TetMesh& m,
                       const volume::Camera& camera) {
  auto dm = volume::DeviceMesh::Create(device, m);
  REQUIRE(dm.ok());
  auto r = volume::Render(device, **dm, Tf(), camera);
  REQUIRE(r.ok());
  return std::move(r->image);
}

volume::Camera CameraFor(const volume::TetMesh& m, float azimuth, int w, int h) {
  auto report = volume::ValidateMesh(m);
  REQUIRE(report.ok());
  return volume::OrbitCamera(report->bounds_min, report->bounds_max, azimuth, 25, w, h);
}

// The value of the first metric line starting with `prefix` and containing `label` (-1 if none).
double MetricValue(const std::string& text, const std::string& prefix, const std::string& label) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0 && line.find(label) != std::string::npos) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return -1;
}

void CheckStatus(const absl::Status& st, absl::StatusCode code, const std::string& needle) {
  INFO(st.ToString());
  CHECK(st.code() == code);
  CHECK(std::string(st.message()).find(needle) != std::string::npos);
}

// Sends a header with these counts and then the given arrays as one chunk each (raw, so that
// the counts and the arrays may disagree).
absl::Status RawUpload(const TestServer& ts, int64_t num_points, int64_t num_tets,
                       const std::vector<std::pair<v1::MeshArray, HostArray>>& arrays,
                       v1::UploadMeshResponse* response = nullptr, int device_kind = 0) {
  auto stub = v1::VolumeRenderService::NewStub(ts.channel);
  grpc::ClientContext context;
  v1::UploadMeshResponse r;
  auto writer = stub->UploadMesh(&context, &r);
  v1::UploadMeshRequest header;
  header.mutable_header()->set_num_points(num_points);
  header.mutable_header()->set_num_tets(num_tets);
  header.mutable_header()->mutable_device()->set_kind(static_cast<v1::DeviceKind>(device_kind));
  bool ok = writer->Write(header);
  for (const auto& [which, array] : arrays) {
    if (!ok) break;
    v1::UploadMeshRequest m;
    m.mutable_chunk()->set_array(which);
    *m.mutable_chunk()->mutable_chunk() = ArrayChunkAt(array, 0, 1 << 30);
    ok = writer->Write(m);
  }
  if (ok) writer->WritesDone();
  grpc::Status st = writer->Finish();
  if (response) *response = r;
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

TEST_CASE("a CPU server renders a mesh exactly as the kernel does", "[server][volume]") {
  TestServer ts;
  auto client = Connect(ts);
  VolumeClient vc(client.get());
  const volume::TetMesh m = Grid(6);
  auto up = Upload(vc, m);
  REQUIRE(up.ok());
  CHECK(up->device() == "cpu");
  CHECK(up->num_tets() == m.num_tets());
  CHECK(up->num_points() == m.num_points());
  CHECK(up->degenerate_tets() == 0);
  CHECK_FALSE(up->existing());
  CHECK(up->device_bytes() == volume::DeviceBytes(m));
  CHECK(up->content_hash() == volume::MeshContentHash(m));
  CHECK(up->mesh_id().rfind("s-", 0) == 0);

  const volume::Camera camera = CameraFor(m, 30, 64, 48);
  const HostArray expected = KernelRender(Device::Cpu(), m, camera);
  auto r = vc.Render(RenderReq(up->mesh_id(), camera));
  REQUIRE(r.ok());
  CHECK(r->image.dtype() == DType::kFloat32);
  CHECK(r->image.shape() == std::vector<int64_t>{48, 64, 4});
  CHECK((r->image.bytes() == expected.bytes()));
  CHECK(r->stats.tets_rendered() == m.num_tets());
  CHECK(r->stats.records() > 0);
  CHECK(r->info.device() == "cpu");
  CHECK(r->partial_frames == 0);

  // RGBA8 is the kernel's ToRgba8 of the same image.
  auto r8 = vc.Render(RenderReq(up->mesh_id(), camera, v1::VOLUME_IMAGE_RGBA8));
  REQUIRE(r8.ok());
  auto expected8 = volume::ToRgba8(expected);
  REQUIRE(expected8.ok());
  CHECK(r8->image.dtype() == DType::kUint8);
  CHECK((r8->image.bytes() == expected8->bytes()));

  // An orbit view is OrbitCamera about the mesh's bounds; the default transfer function is the
  // kernel's over the mesh's scalar range, and changing it needs no new upload.
  v1::VolumeRenderRequest orbit;
  orbit.set_mesh_id(up->mesh_id());
  orbit.mutable_orbit()->set_azimuth_deg(30);
  orbit.mutable_orbit()->set_elevation_deg(25);
  orbit.mutable_orbit()->set_width(64);
  orbit.mutable_orbit()->set_height(48);
  orbit.mutable_orbit()->set_vertical_fov_deg(30);
  TfToProto(Tf(), orbit.mutable_transfer_function());
  orbit.set_format(v1::VOLUME_IMAGE_RGBA_F32);
  auto ro = vc.Render(orbit);
  REQUIRE(ro.ok());
  CHECK((ro->image.bytes() == expected.bytes()));
  orbit.clear_transfer_function();
  auto rd = vc.Render(orbit);
  REQUIRE(rd.ok());
  CHECK((rd->image.bytes() != expected.bytes()));
}

TEST_CASE("progressive renders send every hash block, and the blocks make the image",
          "[server][volume]") {
  TestServer ts;
  auto client = Connect(ts);
  VolumeClient vc(client.get());
  const volume::TetMesh m = Grid(6, volume::GridShape::kHoleAndNotch);
  auto up = Upload(vc, m);
  REQUIRE(up.ok());
  const volume::Camera camera = CameraFor(m, 60, 37, 29);  // sides not multiples of the stride
  for (int bits : {2, 3}) {
    v1::VolumeRenderRequest req = RenderReq(up->mesh_id(), camera);
    req.set_progressive(true);
    req.set_hash_block_bits(bits);
    HostArray assembled(DType::kFloat32, {29, 37, 4});
    std::vector<int> blocks;
    auto r = vc.Render(req, [&](const v1::VolumePartialFrame& p) {
      blocks.push_back(p.block());
      auto px = FromProto(p.pixels(), "pixels");
      REQUIRE(px.ok());
      const int64_t rows = px->dim(0), cols = px->dim(1);
      CHECK(rows == (29 - p.y0() + p.stride() - 1) / p.stride());
      CHECK(cols == (37 - p.x0() + p.stride() - 1) / p.stride());
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < cols; ++i) {
          std::memcpy(assembled.data<float>() +
                          ((p.y0() + j * p.stride()) * 37 + p.x0() + i * p.stride()) * 4,
                      px->data<float>() + (j * cols + i) * 4, 16);
        }
      }
    });
    REQUIRE(r.ok());
    const int n = 1 << (2 * bits);
    CHECK(r->partial_frames == n);
    CHECK(r->stats.num_blocks() == n);
    CHECK(static_cast<int>(blocks.size()) == n);
    CHECK((assembled.bytes() == r->image.bytes()));
  }
}

TEST_CASE("the same mesh is stored once; deleted and evicted meshes say why",
          "[server][volume]") {
  server::ServerConfig config = TestServer::CpuConfig();
  const volume::TetMesh a = Grid(6), b = Grid(6, volume::GridShape::kHoleAndNotch);
  // Room for the larger mesh, not for both.
  config.session_cpu_memory_bytes = volume::DeviceBytes(a) + volume::DeviceBytes(b) / 2;
  TestServer ts(config);
  auto client = Connect(ts);
  VolumeClient vc(client.get());
  auto up1 = Upload(vc, a);
  REQUIRE(up1.ok());
  auto up2 = Upload(vc, a);
  REQUIRE(up2.ok());
  CHECK(up2->existing());
  CHECK(up2->mesh_id() == up1->mesh_id());
  const std::string metrics = ts.server->MetricsText();
  CHECK(MetricValue(metrics, "fresnel_sessions{", "kind=\"mesh\"") == 1);
  CHECK(MetricValue(metrics, "fresnel_session_reserved_bytes{", "cpu") ==
        static_cast<double>(volume::DeviceBytes(a)));

  // b needs a's room: a (idle, evictable) goes.
  auto upb = Upload(vc, b);
  REQUIRE(upb.ok());
  const volume::Camera camera = CameraFor(a, 0, 16, 16);
  auto gone = vc.Render(RenderReq(up1->mesh_id(), camera));
  CheckStatus(gone.status(), absl::StatusCode::kNotFound, "evicted");
  REQUIRE(vc.Render(RenderReq(upb->mesh_id(), camera)).ok());

  REQUIRE(vc.DeleteMesh(upb->mesh_id()).ok());
  CheckStatus(vc.Render(RenderReq(upb->mesh_id(), camera)).status(),
              absl::StatusCode::kNotFound, "closed");
  CheckStatus(vc.DeleteMesh(upb->mesh_id()), absl::StatusCode::kNotFound, "closed");
  const std::string after = ts.server->MetricsText();
  CHECK(MetricValue(after, "fresnel_sessions{", "kind=\"mesh\"") == 0);
  CHECK(MetricValue(after, "fresnel_session_reserved_bytes{", "cpu") == 0);

  // A mesh larger than the whole cache.
  const volume::TetMesh big = Grid(12);
  CheckStatus(Upload(vc, big).status(), absl::StatusCode::kResourceExhausted, "mesh cache");
}

TEST_CASE("bad uploads and renders are refused naming the field; the server survives",
          "[server][volume]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.volume_max_tets = 5000;
  config.volume_max_points = 5000;
  TestServer ts(config);
  auto client = Connect(ts);
  VolumeClient vc(client.get());
  const volume::TetMesh m = Grid(4);
  const int64_t np = m.num_points(), nt = m.num_tets();

  {
    volume::TetMesh bad = m;
    bad.tets[4 * 7 + 2] = static_cast<int32_t>(np);
    CheckStatus(Upload(vc, bad).status(), absl::StatusCode::kInvalidArgument, "tets[7]");
  }
  {
    volume::TetMesh bad = m;
    bad.points_xyz[3 * 5 + 1] = std::numeric_limits<float>::quiet_NaN();
    CheckStatus(Upload(vc, bad).status(), absl::StatusCode::kInvalidArgument, "points_xyz[5]");
  }
  {
    volume::TetMesh bad = m;
    bad.scalars[9] = std::numeric_limits<float>::infinity();
    CheckStatus(Upload(vc, bad).status(), absl::StatusCode::kInvalidArgument, "scalars[9]");
  }
  MeshArrays a = ArraysOf(m);
  // Counts that disagree with the arrays.
  CheckStatus(RawUpload(ts, np + 1, nt,
                        {{v1::MESH_ARRAY_POINTS, a.points},
                         {v1::MESH_ARRAY_TETS, a.tets},
                         {v1::MESH_ARRAY_SCALARS, a.scalars}}),
              absl::StatusCode::kInvalidArgument, "points_xyz");
  // More bytes than the header's counts allow: refused by the chunk's total, before the data.
  CheckStatus(RawUpload(ts, np, nt - 1, {{v1::MESH_ARRAY_TETS, a.tets}}),
              absl::StatusCode::kResourceExhausted, "tets.total_bytes");
  CheckStatus(RawUpload(ts, np, nt, {{v1::MESH_ARRAY_POINTS, a.points}}),
              absl::StatusCode::kInvalidArgument, "tets: missing");
  // An unknown device kind is refused with the header, before any array byte.
  CheckStatus(RawUpload(ts, np, nt, {{v1::MESH_ARRAY_POINTS, a.points}}, nullptr, 7),
              absl::StatusCode::kInvalidArgument, "header.device.kind");
  CheckStatus(RawUpload(ts, 3, nt, {}), absl::StatusCode::kInvalidArgument, "header.num_points");
  CheckStatus(RawUpload(ts, np, 0, {}), absl::StatusCode::kInvalidArgument, "header.num_tets");
  // Over the server's limits: refused on the header.
  CheckStatus(RawUpload(ts, np, 6000, {}), absl::StatusCode::kResourceExhausted,
              "header.num_tets");
  CheckStatus(RawUpload(ts, 6000, nt, {}), absl::StatusCode::kResourceExhausted,
              "header.num_points");
  {
    v1::MeshArray unknown = static_cast<v1::MeshArray>(7);
    CheckStatus(RawUpload(ts, np, nt, {{unknown, a.scalars}}), absl::StatusCode::kInvalidArgument,
                "chunk.array");
  }

  {
    // A zero-volume tetrahedron (a repeated vertex) is accepted, counted and skipped.
    volume::TetMesh with_flat = m;
    with_flat.tets.insert(with_flat.tets.end(), {0, 0, 1, 2});
    auto flat = Upload(vc, with_flat);
    REQUIRE(flat.ok());
    CHECK(flat->degenerate_tets() == 1);
    CHECK(flat->num_tets() == nt + 1);
    auto r = vc.Render(RenderReq(flat->mesh_id(), CameraFor(m, 10, 16, 16)));
    REQUIRE(r.ok());
    CHECK(r->stats.tets_rendered() == nt);
    REQUIRE(vc.DeleteMesh(flat->mesh_id()).ok());
  }

  auto up = Upload(vc, m);
  REQUIRE(up.ok());
  const volume::Camera camera = CameraFor(m, 10, 32, 32);
  CheckStatus(vc.Render(RenderReq("s-0123456789abcdef0123456789abcdef@elsewhere", camera)).status(),
              absl::StatusCode::kNotFound, "elsewhere");
  CheckStatus(vc.Render(RenderReq("", camera)).status(), absl::StatusCode::kInvalidArgument,
              "mesh_id");
  {
    v1::VolumeRenderRequest r = RenderReq(up->mesh_id(), camera);
    r.mutable_transfer_function()->mutable_points(1)->set_scalar(-1);
    CheckStatus(vc.Render(r).status(), absl::StatusCode::kInvalidArgument,
                "transfer_function.points");
  }
  {
    v1::VolumeRenderRequest r = RenderReq(up->mesh_id(), camera);
    r.mutable_transfer_function()->mutable_points(0)->set_extinction_per_unit(-2);
    CheckStatus(vc.Render(r).status(), absl::StatusCode::kInvalidArgument, "transfer_function");
  }
  {
    v1::VolumeRenderRequest r = RenderReq(up->mesh_id(), camera);
    r.mutable_camera()->set_width(0);
    CheckStatus(vc.Render(r).status(), absl::StatusCode::kInvalidArgument, "camera.width");
  }
  {
    v1::VolumeRenderRequest r = RenderReq(up->mesh_id(), camera);
    r.mutable_camera()->mutable_eye()->Truncate(2);
    CheckStatus(vc.Render(r).status(), absl::StatusCode::kInvalidArgument, "camera.eye");
  }
  {
    v1::VolumeRenderRequest r = RenderReq(up->mesh_id(), camera);
    r.clear_camera();
    CheckStatus(vc.Render(r).status(), absl::StatusCode::kInvalidArgument, "camera");
  }
  {
    v1::VolumeRenderRequest r = RenderReq(up->mesh_id(), camera);
    r.set_hash_block_bits(4);
    CheckStatus(vc.Render(r).status(), absl::StatusCode::kInvalidArgument, "hash_block_bits");
  }
  {
    // An image over the message cap.
    v1::VolumeRenderRequest r = RenderReq(up->mesh_id(), camera);
    r.mutable_camera()->set_width(8192);
    r.mutable_camera()->set_height(8192);
    CheckStatus(vc.Render(r).status(), absl::StatusCode::kResourceExhausted, "max message size");
  }
  // Still serving.
  auto ok = vc.Render(RenderReq(up->mesh_id(), camera));
  REQUIRE(ok.ok());
  CHECK(ok->image.shape() == std::vector<int64_t>{32, 32, 4});

  v1::GetServerInfoRequest info_req;
  v1::ServerInfo info;
  grpc::ClientContext ctx;
  REQUIRE(ts.admin->GetServerInfo(&ctx, info_req, &info).ok());
  CHECK(info.limits().volume_max_tets() == 5000);
  CHECK(info.limits().volume_max_points() == 5000);
  CHECK(info.limits().volume_max_image_side() == volume::kMaxImageSide);
  CHECK(std::find(info.services().begin(), info.services().end(),
                  "fresnel.v1.VolumeRenderService") != info.services().end());
}

TEST_CASE("fresnel render: a generated mesh, a turntable, and bad input", "[server][volume][cli]") {
  TestServer ts;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("fresnel_render_", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string png = (dir / "mesh.png").string();
  const std::string vtk = (dir / "mesh.vtk").string();
  CliResult r = RunCli({"--server", ts.address, "render", "--generate", "hole:6", "--size",
                        "48x40", "--out", png, "--write-vtk", vtk, "--progressive"});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("partial frames") != std::string::npos);
  auto image = ReadPng(png);
  REQUIRE(image.ok());
  CHECK(image->shape() == std::vector<int64_t>{40, 48, 4});

  // The VTK written above, read back, a turntable with explicit control points.
  r = RunCli({"--server", ts.address, "render", vtk, "--size", "32x24", "--out",
              (dir / "orbit.png").string(), "--orbit", "3", "--tf",
              "0:0,0,1:0.5 1:1,0.5,0:4", "--background", "0,0,0,1", "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("\"fps\":") != std::string::npos);
  CHECK(r.out.find("\"frames\": 3") != std::string::npos);
  for (int i = 0; i < 3; ++i) {
    CHECK(std::filesystem::exists(dir / absl::StrFormat("orbit_%03d.png", i)));
  }

  // A cell type the reader refuses: named, exit 4.
  const std::string tri = (dir / "triangle.vtk").string();
  {
    std::ofstream f(tri);
    f << "# vtk DataFile Version 4.2\ntriangle\nASCII\nDATASET UNSTRUCTURED_GRID\n"
         "POINTS 3 float\n0 0 0 1 0 0 0 1 0\nCELLS 1 4\n3 0 1 2\nCELL_TYPES 1\n5\n"
         "POINT_DATA 3\nSCALARS s float 1\nLOOKUP_TABLE default\n0 1 2\n";
  }
  r = RunCli({"--server", ts.address, "render", tri, "--out", png});
  CHECK(r.code == 4);
  CHECK(r.err.find("VTK_TRIANGLE") != std::string::npos);
  // Usage errors name the flag: exit 2.
  r = RunCli({"--server", ts.address, "render", "--generate", "box:4", "--out", png, "--tf",
              "0:1,1:2"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--tf") != std::string::npos);
  r = RunCli({"--server", ts.address, "render", "--generate", "box:4", "--out", png, "--camera",
              "eye=0,0,5 target=0,0,0", "--orbit", "4"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--orbit") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a GPU server's renders match the CPU oracle", "[server][volume][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  VolumeClient vc(client.get());
  for (auto shape : {volume::GridShape::kBox, volume::GridShape::kHoleAndNotch}) {
    const volume::TetMesh m = Grid(20, shape);
    auto up = Upload(vc, m, v1::DEVICE_KIND_GPU);
    REQUIRE(up.ok());
    CHECK(up->device().rfind("cuda:", 0) == 0);
    const volume::Camera camera = CameraFor(m, 35, 256, 192);
    v1::VolumeRenderRequest req = RenderReq(up->mesh_id(), camera);
    req.set_progressive(true);
    auto gpu = vc.Render(req);
    REQUIRE(gpu.ok());
    CHECK(gpu->info.device().rfind("cuda:", 0) == 0);
    CHECK(gpu->partial_frames == gpu->stats.num_blocks());
    const HostArray cpu = KernelRender(Device::Cpu(), m, camera);
    const double psnr = volume::ImagePsnrDb(gpu->image, cpu);
    INFO("GPU vs CPU PSNR " << psnr << " dB");
    CHECK(psnr >= 40);
    REQUIRE(vc.DeleteMesh(up->mesh_id()).ok());
  }
}

}  // namespace
}  // namespace fresnel::testing

namespace fresnel::testing {
namespace {

// Opt-in measurement, not a test: the turntable through an in-process GPU server and the CLI
// (loopback gRPC, the same path as fresneld + fresnel). FRESNEL_VOLUME_BENCH_MESH picks the
// --generate spec (default tets:6e6), FRESNEL_VOLUME_BENCH_FRAMES the frames per run.
TEST_CASE("turntable frames per second through the service", "[.][volume_bench]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  const char* mesh_env = std::getenv("FRESNEL_VOLUME_BENCH_MESH");
  const char* frames_env = std::getenv("FRESNEL_VOLUME_BENCH_FRAMES");
  const std::string mesh = mesh_env ? mesh_env : "tets:6e6";
  const std::string frames = frames_env ? frames_env : "60";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("fresnel_turntable_", ::getpid());
  std::filesystem::create_directories(dir);
  for (const char* inflight : {"2", "1", "4"}) {
    CliResult r = RunCli({"--server", ts.address, "--timeout", "600", "render", "--generate",
                          mesh, "--size", "1024x1024", "--orbit", frames, "--inflight", inflight,
                          "--keep", "--device", "gpu", "--out", (dir / "frame.png").string(),
                          "--json"});
    std::cout << "turntable " << mesh << " inflight " << inflight << ": " << r.out << r.err
              << std::flush;
    REQUIRE(r.code == 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Outputs to a shared-memory region (docs/transport.md, "Outputs to a region").

// Render with out_shm gives the inline render's bits, in the region (the final image; progressive
// blocks stay inline); bad ranges are refused before rendering. On `kind`'s devices.
void CheckVolumeThroughRegion(const TestServer& ts, Client* client, v1::DeviceKind kind) {
  (void)ts;
  VolumeClient vc(client);
  const volume::TetMesh m = Grid(6);
  auto up = Upload(vc, m, kind);
  REQUIRE(up.ok());
  const volume::Camera camera = CameraFor(m, 40, 64, 48);
  auto region = SharedRegion::Create(client, "vol-out", 1 << 16);
  REQUIRE(region.ok());
  for (v1::VolumeImageFormat format : {v1::VOLUME_IMAGE_RGBA_F32, v1::VOLUME_IMAGE_RGBA8}) {
    INFO("format " << format);
    v1::VolumeRenderRequest req = RenderReq(up->mesh_id(), camera, format);
    auto want = vc.Render(req);
    REQUIRE(want.ok());
    std::memset((*region)->data(), 0xab, 1 << 16);
    *req.mutable_out_shm() = (*region)->OutRef(128);
    req.set_progressive(true);
    auto got = vc.Render(req);
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    CHECK(got->partial_frames > 0);
    CHECK(got->image.shape() == want->image.shape());
    CHECK(got->image.bytes() == want->image.bytes());
    auto in_region = (*region)->Read(ShmArray(want->image.dtype(), want->image.shape(),
                                              "vol-out", 128));
    REQUIRE(in_region.ok());
    CHECK(in_region->bytes() == want->image.bytes());
  }
  v1::VolumeRenderRequest bad = RenderReq(up->mesh_id(), camera);
  *bad.mutable_out_shm() = (*region)->OutRef(0);
  bad.mutable_out_shm()->set_region("missing");
  CHECK(StatusNames(vc.Render(bad).status(), absl::StatusCode::kNotFound, "out_shm.region"));
  *bad.mutable_out_shm() = (*region)->OutRef(20 << 10);  // 64 x 48 x 16 bytes do not fit
  CHECK(StatusNames(vc.Render(bad).status(), absl::StatusCode::kInvalidArgument,
                    "out_shm.offset_bytes"));
  CHECK(vc.Render(RenderReq(up->mesh_id(), camera)).ok());
}

TEST_CASE("Render into a shared region gives the inline image; bad regions are refused",
          "[server][volume][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  CheckVolumeThroughRegion(ts, client.get(), v1::DEVICE_KIND_CPU);
}

TEST_CASE("a GPU server: Render into a shared region gives the inline image",
          "[server][volume][shm][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  CheckVolumeThroughRegion(ts, client.get(), v1::DEVICE_KIND_GPU);
}

}  // namespace
}  // namespace fresnel::testing
