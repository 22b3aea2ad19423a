#include "render_cmd.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "fresnel/client/shm.h"
#include "fresnel/client/volume_client.h"
#include "fresnel/io/png.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/core/status.h"

namespace fresnel::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// "a,b,c" -> n floats; InvalidArgument naming `what`.
absl::StatusOr<std::vector<float>> Floats(absl::string_view text, size_t n,
                                          const std::string& what) {
  std::vector<float> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    float v;
    if (!absl::SimpleAtof(part, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", part, "' is not a number"));
    }
    out.push_back(v);
  }
  if (out.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected ", n, " comma-separated numbers, got '", text, "'"));
  }
  return out;
}

absl::Status ParseTf(RenderCmdOptions* o) {
  v1::TransferFunction& tf = o->tf_proto;
  tf.Clear();
  if (o->tf == "default" || absl::StartsWith(o->tf, "default:")) {
    if (o->tf != "default") {
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> v, Floats(o->tf.substr(8), 1, "--tf default"));
      if (v[0] <= 0) return absl::InvalidArgumentError("--tf default:MAX_EXTINCTION must be > 0");
      tf.set_default_max_extinction(v[0]);
    }
  } else {
    int i = 0;
    for (absl::string_view point : absl::StrSplit(o->tf, ' ', absl::SkipEmpty())) {
      const std::string what = absl::StrCat("--tf point ", i++);
      std::vector<absl::string_view> parts = absl::StrSplit(point, ':');
      if (parts.size() != 3) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": expected SCALAR:R,G,B:EXTINCTION, got '", point, "'"));
      }
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> s, Floats(parts[0], 1, what + " scalar"));
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> rgb, Floats(parts[1], 3, what + " colour"));
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> ext, Floats(parts[2], 1, what + " extinction"));
      v1::TfPoint* p = tf.add_points();
      p->set_scalar(s[0]);
      p->set_r(rgb[0]);
      p->set_g(rgb[1]);
      p->set_b(rgb[2]);
      p->set_extinction_per_unit(ext[0]);
    }
    if (tf.points_size() == 0) return absl::InvalidArgumentError("--tf: no control points");
  }
  if (!o->background.empty()) {
    FRESNEL_ASSIGN_OR_RETURN(std::vector<float> bg, Floats(o->background, 4, "--background"));
    tf.mutable_background()->Assign(bg.begin(), bg.end());
  }
  return absl::OkStatus();
}

absl::Status ParseCamera(RenderCmdOptions* o) {
  bool have_eye = false, have_target = false, have_az = false, have_el = false;
  float fov = 0, ortho = 0;
  o->orbit_view.Clear();
  o->explicit_camera.Clear();
  std::vector<float> eye, target, up = {0, 1, 0};
  float azimuth = 0, elevation = 0;
  for (absl::string_view item : absl::StrSplit(o->camera, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string what = absl::StrCat("--camera ", kv.first);
    if (kv.first == "eye") {
      FRESNEL_ASSIGN_OR_RETURN(eye, Floats(kv.second, 3, what));
      have_eye = true;
    } else if (kv.first == "target") {
      FRESNEL_ASSIGN_OR_RETURN(target, Floats(kv.second, 3, what));
      have_target = true;
    } else if (kv.first == "up") {
      FRESNEL_ASSIGN_OR_RETURN(up, Floats(kv.second, 3, what));
    } else if (kv.first == "fov") {
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> v, Floats(kv.second, 1, what));
      fov = v[0];
      if (!(fov > 0 && fov < 180)) return absl::InvalidArgumentError(what + " must be in (0, 180)");
    } else if (kv.first == "ortho") {
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> v, Floats(kv.second, 1, what));
      ortho = v[0];
      if (!(ortho > 0)) return absl::InvalidArgumentError(what + " must be > 0");
    } else if (kv.first == "azimuth") {
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> v, Floats(kv.second, 1, what));
      azimuth = v[0];
      have_az = true;
    } else if (kv.first == "elevation") {
      FRESNEL_ASSIGN_OR_RETURN(std::vector<float> v, Floats(kv.second, 1, what));
      elevation = v[0];
      have_el = true;
      if (!(std::fabs(elevation) < 90)) {
        return absl::InvalidArgumentError(what + " must be in (-90, 90)");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--camera: unknown key '", kv.first,
          "' (eye, target, up, fov, ortho, or azimuth, elevation, fov)"));
    }
  }
  const bool explicit_view = have_eye || have_target;
  if (explicit_view && (have_az || have_el)) {
    return absl::InvalidArgumentError(
        "--camera: give either eye=/target= or azimuth=/elevation=, not both");
  }
  if (explicit_view) {
    if (!have_eye || !have_target) {
      return absl::InvalidArgumentError("--camera: eye= and target= go together");
    }
    if (ortho > 0 && fov > 0) return absl::InvalidArgumentError("--camera: fov= or ortho=, not both");
    v1::VolumeCamera& c = o->explicit_camera;
    c.mutable_eye()->Assign(eye.begin(), eye.end());
    c.mutable_target()->Assign(target.begin(), target.end());
    c.mutable_up()->Assign(up.begin(), up.end());
    c.set_vertical_fov_deg(fov > 0 ? fov : 40);
    c.set_orthographic_height(ortho);
    c.set_width(o->width);
    c.set_height(o->height);
    o->orbit_camera = false;
  } else {
    if (ortho > 0) return absl::InvalidArgumentError("--camera: ortho= needs eye= and target=");
    o->orbit_view.set_azimuth_deg(azimuth);
    o->orbit_view.set_elevation_deg(elevation);
    o->orbit_view.set_vertical_fov_deg(fov > 0 ? fov : 30);
    o->orbit_view.set_width(o->width);
    o->orbit_view.set_height(o->height);
    o->orbit_camera = true;
  }
  return absl::OkStatus();
}

absl::Status ParseGenerate(const std::string& spec, volume::GridMeshSpec* out) {
  std::pair<std::string, std::string> kv = absl::StrSplit(spec, absl::MaxSplits(':', 1));
  double n = 0;
  if (!absl::SimpleAtod(kv.second, &n) || !(n >= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--generate: expected box:N, hole:N or tets:COUNT, got '", spec, "'"));
  }
  if (kv.first == "tets") {
    if (n > 4e8) return absl::InvalidArgumentError("--generate tets: at most 4e8");
    *out = volume::GridSpecForTets(static_cast<int64_t>(n));
  } else if (kv.first == "box" || kv.first == "hole") {
    if (n > 700) return absl::InvalidArgumentError("--generate: at most 700 cubes a side");
    if (kv.first == "hole" && n < 6) return absl::InvalidArgumentError("--generate hole:N needs N >= 6");
    const int c = static_cast<int>(n);
    out->cells_x = out->cells_y = out->cells_z = c;
    out->shape = kv.first == "box" ? volume::GridShape::kBox : volume::GridShape::kHoleAndNotch;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--generate: unknown shape '", kv.first, "' (box, hole, tets)"));
  }
  return absl::OkStatus();
}

HostArray ArrayOf(DType dtype, std::vector<int64_t> shape, const void* data, size_t bytes) {
  HostArray a(dtype, std::move(shape));
  if (bytes > 0) std::memcpy(a.raw(), data, bytes);
  return a;
}

void AddStatsJson(const v1::VolumeRenderStats& s, JsonObject* json) {
  json->Add("render_seconds", s.render_seconds())
      .Add("project_seconds", s.project_seconds())
      .Add("records_seconds", s.records_seconds())
      .Add("sort_seconds", s.sort_seconds())
      .Add("composite_seconds", s.composite_seconds())
      .Add("kernel_d2h_seconds", s.d2h_seconds())
      .Add("records", s.records())
      .Add("tets_rendered", s.tets_rendered())
      .Add("hash_blocks", s.num_blocks())
      .Add("peak_device_bytes", s.peak_device_bytes())
      .Add("compositing", s.compositing());
}

}  // namespace

std::string FramePath(const std::string& out, int64_t frame) {
  const size_t dot = out.rfind('.');
  const size_t slash = out.rfind('/');
  const std::string index = absl::StrFormat("_%03d", frame);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return out + index;
  return out.substr(0, dot) + index + out.substr(dot);
}

absl::Status ValidateRenderOptions(RenderCmdOptions* o) {
  if (o->input.empty() == o->generate.empty()) {
    return absl::InvalidArgumentError("give a mesh file (input) or --generate, exactly one");
  }
  if (o->out.empty()) return absl::InvalidArgumentError("--out: required (a .png file)");
  std::vector<absl::string_view> wh = absl::StrSplit(o->size, 'x');
  if (wh.size() != 2 || !absl::SimpleAtoi(wh[0], &o->width) ||
      !absl::SimpleAtoi(wh[1], &o->height) || o->width < 1 || o->height < 1 ||
      o->width > volume::kMaxImageSide || o->height > volume::kMaxImageSide) {
    return absl::InvalidArgumentError(absl::StrCat("--size: expected WxH with each in [1, ",
                                                   volume::kMaxImageSide, "], got '", o->size,
                                                   "'"));
  }
  if (o->orbit < 0 || o->orbit > 720) {
    return absl::InvalidArgumentError("--orbit: frames must be in [0, 720]");
  }
  if (o->inflight < 1 || o->inflight > 16) {
    return absl::InvalidArgumentError("--inflight must be in [1, 16]");
  }
  if (o->hash_bits != 0 && o->hash_bits != 2 && o->hash_bits != 3) {
    return absl::InvalidArgumentError("--hash-bits must be 0 (auto), 2 or 3");
  }
  if (!o->generate.empty()) {
    volume::GridMeshSpec spec;
    FRESNEL_RETURN_IF_ERROR(ParseGenerate(o->generate, &spec));
  }
  FRESNEL_RETURN_IF_ERROR(ParseTf(o));
  FRESNEL_RETURN_IF_ERROR(ParseCamera(o));
  if (o->orbit > 0 && !o->orbit_camera) {
    return absl::InvalidArgumentError(
        "--orbit needs an orbit camera (--camera \"azimuth=DEG elevation=DEG\")");
  }
  return absl::OkStatus();
}

absl::StatusOr<volume::TetMesh> LoadRenderMesh(const RenderCmdOptions& o) {
  if (!o.generate.empty()) {
    volume::GridMeshSpec spec;
    FRESNEL_RETURN_IF_ERROR(ParseGenerate(o.generate, &spec));
    return volume::GenerateGridMesh(spec);
  }
  volume::VtkReadOptions read;
  read.scalar_name = o.scalar;
  absl::StatusOr<volume::TetMesh> mesh = volume::ReadVtk(o.input, read);
  if (!mesh.ok()) {
    return absl::Status(mesh.status().code(), absl::StrCat(o.input, ": ", mesh.status().message()));
  }
  return mesh;
}

CLI::App* AddRenderCommand(CLI::App* app, RenderCmdOptions* o) {
  CLI::App* cmd = app->add_subcommand(
      "render",
      "Volume-render a tetrahedral mesh on the server (legacy VTK, or --generate) into a PNG; "
      "--orbit N renders a turntable and reports frames per second");
  cmd->add_option("input", o->input,
                  "Legacy VTK unstructured grid (.vtk, ASCII or binary; tetrahedra, hexahedra, "
                  "wedges and pyramids)");
  cmd->add_option("--generate", o->generate,
                  "Generate the mesh instead: box:N or hole:N (N^3 cubes of 6 tetrahedra; hole "
                  "has a hole and a notch) or tets:COUNT (a box of about COUNT tetrahedra)");
  cmd->add_option("--write-vtk", o->write_vtk, "Also write the mesh as binary VTK here");
  cmd->add_option("--scalar", o->scalar, "VTK POINT_DATA array to render (default: the first)");
  cmd->add_option("--tf", o->tf,
                  "Transfer function: 'default' (blue-white-red over the scalar range), "
                  "'default:MAX_EXTINCTION', or control points 'S:R,G,B:EXT S:R,G,B:EXT ...' "
                  "(scalar, linear colour in [0,1], extinction per mesh unit)")
      ->capture_default_str();
  cmd->add_option("--background", o->background, "Background R,G,B,A in [0, 1]");
  cmd->add_option("--camera", o->camera,
                  "'azimuth=DEG elevation=DEG [fov=DEG]' orbits the mesh's bounding box; "
                  "'eye=X,Y,Z target=X,Y,Z [up=X,Y,Z] [fov=DEG|ortho=HEIGHT]' places it "
                  "(mesh units)")
      ->capture_default_str();
  cmd->add_option("--size", o->size, "Image WxH in pixels")->capture_default_str();
  cmd->add_option("--out,-o", o->out, "Output PNG (RGBA); --orbit: OUT_000.png, OUT_001.png, ...");
  cmd->add_option("--orbit", o->orbit,
                  "Turntable: N frames around the vertical axis from the camera's azimuth, "
                  "with frames per second through the service");
  cmd->add_option("--inflight", o->inflight,
                  "--orbit: render calls in flight (the server runs one mesh's renders one at a "
                  "time; 2 hides each image's transfer)")
      ->capture_default_str();
  cmd->add_flag("--progressive", o->progressive,
                "Ask for a partial frame per completed hash block (counted in the summary)");
  cmd->add_option("--hash-bits", o->hash_bits, "Hash blocks: 0 auto, 2 (16 blocks), 3 (64)")
      ->capture_default_str();
  cmd->add_option("--device", o->device, "Where the server keeps the mesh and renders it")
      ->check(CLI::IsMember({"any", "gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_flag("--keep", o->keep, "Leave the mesh cached on the server (default: delete it)");
  cmd->add_flag("--shm", o->shm,
                "Same host as fresneld: the rendered images come back through a shared-memory "
                "region made for the command, one slot per render in flight (with "
                "--progressive the partial frames still travel inline)");
  cmd->add_flag("--json", o->json, "Print the summary as JSON");
  cmd->footer(kExitCodeHelp);
  return cmd;
}

int RunRender(const GlobalOptions& global, RenderCmdOptions o, std::ostream& out,
              std::ostream& err) {
  if (absl::Status s = ValidateRenderOptions(&o); !s.ok()) {
    return ReportUsageError(err, std::string(s.message()), "render");
  }
  const auto t_load = SteadyClock::now();
  absl::StatusOr<volume::TetMesh> mesh = LoadRenderMesh(o);
  if (!mesh.ok()) {
    const int code = o.generate.empty() ? kExitIo : kExitUsage;
    return ReportError(err, code, mesh.status());
  }
  const double load_s = SecondsSince(t_load);
  if (!o.write_vtk.empty()) {
    if (absl::Status s = volume::WriteVtk(*mesh, o.write_vtk, volume::VtkFormat::kBinary42);
        !s.ok()) {
      return ReportError(err, kExitIo, s);
    }
  }
  const int64_t np = mesh->num_points(), nt = mesh->num_tets();
  HostArray points = ArrayOf(DType::kFloat32, {np, 3}, mesh->points_xyz.data(),
                             mesh->points_xyz.size() * sizeof(float));
  HostArray tets = ArrayOf(DType::kInt32, {nt, 4}, mesh->tets.data(),
                           mesh->tets.size() * sizeof(int32_t));
  HostArray scalars = ArrayOf(DType::kFloat32, {static_cast<int64_t>(mesh->scalars.size())},
                              mesh->scalars.data(), mesh->scalars.size() * sizeof(float));
  *mesh = volume::TetMesh();

  absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
  if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);
  VolumeClient volume_client(client->get());
  const auto t_upload = SteadyClock::now();
  absl::StatusOr<v1::UploadMeshResponse> uploaded =
      volume_client.UploadMesh(points, tets, scalars, DeviceKindFromFlag(o.device));
  if (!uploaded.ok()) return ReportError(err, kExitRpc, uploaded.status(), global.server);
  const double upload_s = SecondsSince(t_upload);

  // --shm: one image slot per render in flight (slot 0 for the first render, slot w for worker
  // w of a turntable); VolumeClient::Render copies each image out of its slot before returning.
  std::unique_ptr<SharedRegion> region;
  const int64_t slot_bytes = OutputRegionBytes({int64_t{o.width} * o.height * 4});
  if (o.shm) {
    const int64_t slots = o.orbit > 0 ? std::min<int64_t>(o.inflight, o.orbit) : 1;
    absl::StatusOr<std::unique_ptr<SharedRegion>> made = SharedRegion::Create(
        client->get(), absl::StrCat("fresnel-cli-render-", getpid()), slots * slot_bytes);
    if (!made.ok()) return ReportError(err, kExitRpc, made.status(), global.server);
    region = *std::move(made);
  }
  auto make_request = [&](int64_t frame, int64_t slot) {
    v1::VolumeRenderRequest r;
    if (region) *r.mutable_out_shm() = region->OutRef(slot * slot_bytes);
    r.set_mesh_id(uploaded->mesh_id());
    *r.mutable_transfer_function() = o.tf_proto;
    if (o.orbit_camera) {
      v1::OrbitView* v = r.mutable_orbit();
      *v = o.orbit_view;
      if (o.orbit > 0) {
        v->set_azimuth_deg(o.orbit_view.azimuth_deg() + 360.0f * frame / o.orbit);
      }
    } else {
      *r.mutable_camera() = o.explicit_camera;
    }
    r.set_format(v1::VOLUME_IMAGE_RGBA8);
    r.set_progressive(o.progressive);
    r.set_hash_block_bits(o.hash_bits);
    return r;
  };

  // The first render (also the warm-up of a turntable).
  const auto t_first = SteadyClock::now();
  absl::StatusOr<VolumeRenderResult> first = volume_client.Render(make_request(0, 0));
  const double first_s = SecondsSince(t_first);
  if (!first.ok()) return ReportError(err, kExitRpc, first.status(), global.server);

  std::vector<std::string> files;
  double orbit_s = 0;
  double write_s = 0;
  std::vector<VolumeRenderResult> frames;
  if (o.orbit > 0) {
    frames.resize(static_cast<size_t>(o.orbit));
    std::atomic<int64_t> next{0};
    std::mutex mu;
    absl::Status failed;
    const auto t0 = SteadyClock::now();
    std::vector<std::thread> workers;
    for (int w = 0; w < std::min<int64_t>(o.inflight, o.orbit); ++w) {
      workers.emplace_back([&, w] {
        for (int64_t i = next++; i < o.orbit; i = next++) {
          absl::StatusOr<VolumeRenderResult> r = volume_client.Render(make_request(i, w));
          if (!r.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (failed.ok()) failed = r.status();
            next = o.orbit;
            return;
          }
          frames[static_cast<size_t>(i)] = *std::move(r);
        }
      });
    }
    for (std::thread& t : workers) t.join();
    orbit_s = SecondsSince(t0);
    if (!failed.ok()) return ReportError(err, kExitRpc, failed, global.server);
    const auto tw = SteadyClock::now();
    for (int64_t i = 0; i < o.orbit; ++i) {
      const std::string path = FramePath(o.out, i);
      if (absl::Status s = WritePng(path, frames[static_cast<size_t>(i)].image); !s.ok()) {
        return ReportError(err, kExitIo, s);
      }
      files.push_back(path);
    }
    write_s = SecondsSince(tw);
  } else {
    const auto tw = SteadyClock::now();
    if (absl::Status s = WritePng(o.out, first->image); !s.ok()) return ReportError(err, kExitIo, s);
    write_s = SecondsSince(tw);
    files.push_back(o.out);
  }
  if (!o.keep) {
    // Best effort: the mesh would expire or be evicted anyway.
    volume_client.DeleteMesh(uploaded->mesh_id()).IgnoreError();
  }
  const VolumeRenderResult& last = o.orbit > 0 ? frames.back() : *first;
  const double fps = o.orbit > 0 && orbit_s > 0 ? o.orbit / orbit_s : 0;
  // Server-side seconds per frame of the turntable: the render kernel's own time.
  double kernel_sum = 0;
  for (const VolumeRenderResult& f : frames) kernel_sum += f.stats.render_seconds();

  if (o.json) {
    JsonObject json;
    json.Add("source", o.input.empty() ? o.generate : o.input)
        .Add("points", np)
        .Add("tets", nt)
        .Add("degenerate_tets", uploaded->degenerate_tets())
        .Add("mesh_id", uploaded->mesh_id())
        .Add("existing", uploaded->existing())
        .Add("device", uploaded->device())
        .Add("mesh_device_bytes", uploaded->device_bytes())
        .Add("load_seconds", load_s)
        .Add("upload_seconds", upload_s)
        .Add("width", o.width)
        .Add("height", o.height)
        .Add("first_render_seconds", first_s)
        .Add("partial_frames", first->partial_frames)
        .Add("shm", o.shm);
    AddStatsJson(last.stats, &json);
    AddExecutionJson(last.info, first_s, &json);
    if (o.orbit > 0) {
      json.Add("frames", o.orbit)
          .Add("inflight", o.inflight)
          .Add("orbit_seconds", orbit_s)
          .Add("fps", fps)
          .Add("mean_render_seconds", kernel_sum / o.orbit)
          .Add("tets_per_second", kernel_sum > 0 ? o.orbit * static_cast<double>(nt) / kernel_sum
                                                 : 0.0);
    }
    json.Add("png_write_seconds", write_s);
    json.Add("files", static_cast<int64_t>(files.size()));
    json.Add("first_file", files.front());
    out << json.Str() << "\n";
    return kExitOk;
  }
  out << "mesh: " << np << " points, " << nt << " tetrahedra";
  if (uploaded->degenerate_tets() > 0) out << " (" << uploaded->degenerate_tets() << " degenerate, skipped)";
  out << "; " << (uploaded->existing() ? "already on " : "uploaded to ") << uploaded->device()
      << " in " << FormatSeconds(upload_s) << " (" << FormatBytes(uploaded->device_bytes())
      << ")\n";
  const v1::VolumeRenderStats& fs = first->stats;
  out << "render: " << o.width << "x" << o.height << " in " << FormatSeconds(first_s) << " (kernel "
      << FormatSeconds(fs.render_seconds());
  // The CPU ray caster reports projection and records only.
  const std::pair<const char*, double> stages[] = {{"project", fs.project_seconds()},
                                                   {"records", fs.records_seconds()},
                                                   {"sort", fs.sort_seconds()},
                                                   {"composite", fs.composite_seconds()}};
  const char* sep = ": ";
  for (const auto& [name, seconds] : stages) {
    if (seconds <= 0) continue;
    out << sep << name << " " << FormatSeconds(seconds);
    sep = ", ";
  }
  out << "; " << FormatSi(static_cast<double>(fs.records())) << " records, " << fs.num_blocks()
      << (fs.num_blocks() == 1 ? " hash block)" : " hash blocks)");
  if (o.progressive) out << ", " << first->partial_frames << " partial frames";
  if (o.shm) out << ", through shared memory";
  out << "\n";
  if (o.orbit > 0) {
    out << "orbit: " << o.orbit << " frames in " << FormatSeconds(orbit_s) << " = "
        << absl::StrFormat("%.1f", fps) << " fps through the service (" << o.inflight
        << " in flight; kernel " << FormatSeconds(kernel_sum / o.orbit) << " a frame)\n";
    out << "wrote " << files.size() << " PNGs: " << files.front() << " ... " << files.back()
        << " (" << FormatSeconds(write_s) << ")\n";
  } else {
    out << "wrote " << o.out << "\n";
  }
  return kExitOk;
}

}  // namespace fresnel::cli
