// `fresnel bench --op hologram|unwrap|volume`: closed-loop load of one device-heavy request per
// call, for throughput per device and its scaling over a pool (issue 14: `fresneld --gpus 0`
// against `--gpus all`, the same bench in the same run). Each worker has its own connection
// (unless --connections says otherwise) and, with --shm, its own shared-memory region holding
// its inputs and receiving its outputs, so that on one host the measurement is the devices' and
// not gRPC's (docs/transport.md): what a request costs then is its host<->device copies and its
// kernels.
//
//   hologram  Render of a random cloud of --points points, phase-only output of --image-size
//   unwrap    synchronous Unwrap of a smooth wrapped surface with sparse residues, --method
//   volume    Render of --meshes cached meshes (--mesh, as `fresnel render --generate`), worker w
//             rendering mesh w % meshes: the server renders one mesh at a time and places each
//             on a device when it is uploaded, so many meshes spread over the pool's devices
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench_work.h"
#include "commands.h"
#include "fresnel/client/shm.h"
#include "fresnel/core/status.h"
#include "fresnel/client/volume_client.h"
#include "fresnel/v1/array_convert.h"
#include "hologram_cmd.h"
#include "render_cmd.h"

namespace fresnel::cli {
namespace {

struct ImageSize {
  int64_t width = 0, height = 0;
};

// --image-size, or the op's default.
absl::StatusOr<ImageSize> ParseImageSize(const BenchOptions& o) {
  const std::string spec = !o.image_size.empty() ? o.image_size
                           : o.op == "hologram"  ? "2048x2048"
                           : o.op == "unwrap"    ? "4096x4096"
                                                 : "1024x1024";
  std::vector<absl::string_view> wh = absl::StrSplit(spec, 'x');
  ImageSize s;
  if (wh.size() != 2 || !absl::SimpleAtoi(wh[0], &s.width) || !absl::SimpleAtoi(wh[1], &s.height) ||
      s.width < 2 || s.height < 2 || s.width > 32768 || s.height > 32768) {
    return absl::InvalidArgumentError(
        absl::StrCat("--image-size: expected WxH with each in [2, 32768], got '", spec, "'"));
  }
  return s;
}

// A random cloud in front of a 8 um pitch hologram: x and y over the hologram's extent, z 5-10
// cm (each point's alias-free footprint then covers most of a 2048^2 hologram).
HostArray RandomCloud(int64_t n, const ImageSize& size) {
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> u(-0.5, 0.5), z(0.05, 0.10), a(0.5, 1.0);
  HostArray points(DType::kFloat32, {n, 4});
  float* p = points.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    p[4 * i + 0] = static_cast<float>(u(rng) * size.width * 8e-6);
    p[4 * i + 1] = static_cast<float>(u(rng) * size.height * 8e-6);
    p[4 * i + 2] = static_cast<float>(z(rng));
    p[4 * i + 3] = static_cast<float>(a(rng));
  }
  return points;
}

// A smooth surface spanning many cycles, wrapped, with a jump at one pixel in 10^4 (residue
// pairs for Goldstein to cut, as in fresnel_bench_unwrap's 1e-4 density).
HostArray WrappedSurface(const ImageSize& size) {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> u(0, 1);
  HostArray phase(DType::kFloat32, {size.height, size.width});
  float* p = phase.data<float>();
  for (int64_t r = 0; r < size.height; ++r) {
    for (int64_t c = 0; c < size.width; ++c) {
      double v = 0.02 * r + 0.013 * c + 6 * std::sin(r / 300.0) * std::cos(c / 200.0);
      if (u(rng) < 1e-4) v += (u(rng) - 0.5) * 2 * M_PI;
      p[r * size.width + c] = static_cast<float>(std::remainder(v, 2 * M_PI));
    }
  }
  return phase;
}

// Everything the workers share, and what each holds.
class DeviceBench {
 public:
  DeviceBench(const GlobalOptions& global, const BenchOptions& o) : global_(global), o_(o) {}
  ~DeviceBench() {
    // Best effort: cached meshes would expire (--session-ttl) anyway.
    if (!volumes_.empty()) {
      for (const std::string& id : mesh_ids_) volumes_[0]->DeleteMesh(id).IgnoreError();
    }
  }

  absl::Status Prepare(ImageSize size) {
    const v1::DeviceKind device = DeviceKindFromFlag(o_.device);
    const int connections = o_.connections > 0 ? o_.connections : o_.concurrency;
    for (int i = 0; i < connections; ++i) {
      absl::StatusOr<std::unique_ptr<Client>> c = ConnectClient(global_);
      if (!c.ok()) return c.status();
      clients_.push_back(*std::move(c));
    }
    if (o_.op == "hologram") {
      v1::HologramConfig* c = hologram_.mutable_config();
      c->set_width(size.width);
      c->set_height(size.height);
      c->set_pitch_m(8e-6);
      c->set_wavelength_m(532e-9);
      c->set_algorithm(AlgorithmFromFlag(o_.algorithm));
      c->mutable_outputs()->set_phase(true);
      c->mutable_device()->set_kind(device);
      ToProto(RandomCloud(o_.points, size), hologram_.mutable_points());
      bytes_in_ = static_cast<int64_t>(hologram_.points().data().size());
      output_bytes_ = {size.width * size.height};  // uint8 phase
    } else if (o_.op == "unwrap") {
      ToProto(WrappedSurface(size), unwrap_.mutable_phase());
      unwrap_.set_method(o_.method == "lsq" ? v1::UNWRAP_METHOD_LEAST_SQUARES
                                            : v1::UNWRAP_METHOD_GOLDSTEIN);
      unwrap_.mutable_options()->set_return_maps(false);
      unwrap_.mutable_device()->set_kind(device);
      bytes_in_ = static_cast<int64_t>(unwrap_.phase().data().size());
      output_bytes_ = {size.width * size.height * 4};  // float32 unwrapped
    } else {
      FRESNEL_RETURN_IF_ERROR(PrepareVolume(size, device));
    }
    // --shm: each worker's inputs, then its outputs, in a region of its own.
    if (o_.shm) {
      for (int w = 0; w < o_.concurrency; ++w) {
        Client* client = clients_[w % clients_.size()].get();
        google::protobuf::Message* request = WorkerRequest(w);
        const int64_t in_bytes = o_.op == "volume" ? 0 : RegionSlotBytes(bytes_in_);
        absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create(
            client, absl::StrCat("fresnel-bench-", getpid(), "-", w),
            in_bytes + OutputRegionBytes(output_bytes_));
        if (!region.ok()) return region.status();
        absl::StatusOr<int64_t> end = (*region)->PutArrays(request, 0);
        if (!end.ok()) return end.status();
        v1::ShmRef out = (*region)->OutRef(*end);
        if (o_.op == "hologram") {
          *static_cast<v1::RenderRequest*>(request)->mutable_out_shm() = out;
        } else if (o_.op == "unwrap") {
          *static_cast<v1::UnwrapRequest*>(request)->mutable_out_shm() = out;
        } else {
          *static_cast<v1::VolumeRenderRequest*>(request)->mutable_out_shm() = out;
        }
        regions_.push_back(*std::move(region));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<BenchOutcome> Run(int worker) {
    Client& client = *clients_[worker % clients_.size()];
    BenchOutcome outcome;
    if (o_.op == "hologram") {
      absl::StatusOr<HologramRender> r = client.Render(hologram_requests_.empty()
                                                           ? hologram_
                                                           : hologram_requests_[worker]);
      if (!r.ok()) return r.status();
      outcome.info = r->header.info();
      outcome.bytes_out = static_cast<int64_t>(r->phase.nbytes());
    } else if (o_.op == "unwrap") {
      // With --shm the result stays in the worker's region (views, no copy out).
      CallOptions call;
      call.results_in_region = o_.shm;
      absl::StatusOr<UnwrapResult> r =
          client.Unwrap(unwrap_requests_.empty() ? unwrap_ : unwrap_requests_[worker], call);
      if (!r.ok()) return r.status();
      outcome.info = r->info;
      outcome.bytes_out = static_cast<int64_t>(r->unwrapped.nbytes());
    } else {
      // The VolumeClient of the worker's connection: a result in a region is read back by
      // the Client that made the region.
      absl::StatusOr<VolumeRenderResult> r =
          volumes_[worker % volumes_.size()]->Render(volume_requests_[worker]);
      if (!r.ok()) return r.status();
      outcome.info = r->info;
      outcome.bytes_out = static_cast<int64_t>(r->image.nbytes());
    }
    return outcome;
  }

  int64_t bytes_in() const { return bytes_in_; }
  int connections() const { return static_cast<int>(clients_.size()); }
  int64_t tets() const { return tets_; }
  int meshes() const { return static_cast<int>(mesh_ids_.size()); }
  // Where the pool placed the meshes: device -> how many.
  std::map<std::string, int64_t> MeshesPerDevice() const {
    std::map<std::string, int64_t> per_device;
    for (const std::string& d : mesh_devices_) ++per_device[d];
    return per_device;
  }

 private:
  // The request worker `w` sends, copied per worker when each has its own region.
  google::protobuf::Message* WorkerRequest(int w) {
    if (o_.op == "hologram") {
      if (hologram_requests_.empty()) hologram_requests_.assign(o_.concurrency, hologram_);
      return &hologram_requests_[w];
    }
    if (o_.op == "unwrap") {
      if (unwrap_requests_.empty()) unwrap_requests_.assign(o_.concurrency, unwrap_);
      return &unwrap_requests_[w];
    }
    return &volume_requests_[w];
  }

  absl::Status PrepareVolume(ImageSize size, v1::DeviceKind device) {
    RenderCmdOptions r;
    r.generate = o_.mesh;
    r.out = "unused.png";
    r.size = absl::StrCat(size.width, "x", size.height);
    r.device = o_.device;
    FRESNEL_RETURN_IF_ERROR(ValidateRenderOptions(&r));
    absl::StatusOr<volume::TetMesh> mesh = LoadRenderMesh(r);
    if (!mesh.ok()) return mesh.status();
    tets_ = mesh->num_tets();
    const int64_t np = mesh->num_points();
    HostArray points(DType::kFloat32, {np, 3});
    std::memcpy(points.raw(), mesh->points_xyz.data(), mesh->points_xyz.size() * sizeof(float));
    HostArray tets(DType::kInt32, {tets_, 4});
    std::memcpy(tets.raw(), mesh->tets.data(), mesh->tets.size() * sizeof(int32_t));
    HostArray scalars(DType::kFloat32, {np});
    std::memcpy(scalars.raw(), mesh->scalars.data(), mesh->scalars.size() * sizeof(float));
    for (const std::unique_ptr<Client>& c : clients_) {
      volumes_.push_back(std::make_unique<VolumeClient>(c.get()));
    }
    const int meshes = o_.meshes > 0 ? o_.meshes : o_.concurrency;
    const float s0 = scalars.data<float>()[0];
    for (int k = 0; k < meshes; ++k) {
      // The server caches meshes by content: a distinct first scalar makes each its own mesh
      // (its own session, placed on its own device as the pool sees fit).
      scalars.data<float>()[0] = s0 + 1e-3f * static_cast<float>(k);
      absl::StatusOr<v1::UploadMeshResponse> up =
          volumes_[0]->UploadMesh(points, tets, scalars, device);
      if (!up.ok()) return up.status();
      mesh_ids_.push_back(up->mesh_id());
      mesh_devices_.push_back(up->device());
    }
    volume_requests_.resize(static_cast<size_t>(o_.concurrency));
    for (int w = 0; w < o_.concurrency; ++w) {
      v1::VolumeRenderRequest& req = volume_requests_[w];
      req.set_mesh_id(mesh_ids_[w % mesh_ids_.size()]);
      *req.mutable_transfer_function() = r.tf_proto;
      *req.mutable_orbit() = r.orbit_view;
      req.set_format(v1::VOLUME_IMAGE_RGBA8);
    }
    output_bytes_ = {size.width * size.height * 4};  // RGBA8
    return absl::OkStatus();
  }

  const GlobalOptions& global_;
  const BenchOptions& o_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<SharedRegion>> regions_;  // after clients_: destroyed first
  int64_t bytes_in_ = 0;
  std::vector<int64_t> output_bytes_;
  v1::RenderRequest hologram_;
  std::vector<v1::RenderRequest> hologram_requests_;  // one per worker with --shm
  v1::UnwrapRequest unwrap_;
  std::vector<v1::UnwrapRequest> unwrap_requests_;  // one per worker with --shm
  std::vector<std::unique_ptr<VolumeClient>> volumes_;  // one per connection
  std::vector<std::string> mesh_ids_, mesh_devices_;
  std::vector<v1::VolumeRenderRequest> volume_requests_;  // one per worker
  int64_t tets_ = 0;
};

}  // namespace

bool IsDeviceBenchOp(const std::string& op) {
  return op == "hologram" || op == "unwrap" || op == "volume";
}

absl::Status ValidateDeviceBenchOptions(const BenchOptions& o) {
  FRESNEL_RETURN_IF_ERROR(ParseImageSize(o).status());
  if (o.points < 1 || o.points > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError("--points must be in [1, 16777216]");
  }
  if (o.meshes < 0 || o.meshes > 1024) return absl::InvalidArgumentError("--meshes must be in [1, 1024]");
  if (o.meshes > 0 && o.op != "volume") {
    return absl::InvalidArgumentError("--meshes applies to --op volume only");
  }
  if (o.op == "volume") {
    RenderCmdOptions r;
    r.generate = o.mesh;
    r.out = "unused.png";
    absl::Status s = ValidateRenderOptions(&r);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("--mesh: ", s.message()));
  }
  return absl::OkStatus();
}

int RunDeviceBench(const GlobalOptions& global, const BenchOptions& o, std::ostream& out,
                   std::ostream& err) {
  absl::StatusOr<ImageSize> size = ParseImageSize(o);
  if (!size.ok()) return ReportUsageError(err, std::string(size.status().message()), "bench");
  DeviceBench bench(global, o);
  if (absl::Status s = bench.Prepare(*size); !s.ok()) {
    return ReportError(err, kExitRpc, s, global.server);
  }
  BenchWork work;
  work.run = [&](int worker) { return bench.Run(worker); };
  work.bytes_in = bench.bytes_in();
  work.items = static_cast<double>(size->width) * static_cast<double>(size->height);
  work.item_name = "pixels";
  const std::string image = absl::StrCat(size->width, "x", size->height);
  std::string what;
  if (o.op == "hologram") {
    what = absl::StrCat("hologram ", image, " phase of ", o.points, " points, algorithm ",
                        o.algorithm);
  } else if (o.op == "unwrap") {
    what = absl::StrCat("unwrap ", image, " float32, ", o.method);
  } else {
    what = absl::StrCat("volume ", image, " RGBA8 of ", bench.meshes(), " meshes (", o.mesh, ", ",
                        bench.tets(), " tets each)");
  }
  work.description = absl::StrCat(what, ", ", bench.connections(),
                                  bench.connections() == 1 ? " connection" : " connections",
                                  o.shm ? ", arrays through a shared-memory region per worker"
                                        : "");
  work.add_json = [&](JsonObject* json) {
    json->Add("image", std::vector<int64_t>{size->width, size->height})
        .Add("connections", bench.connections())
        .Add("shm", o.shm);
    if (o.op == "hologram") json->Add("points", o.points).Add("algorithm", o.algorithm);
    if (o.op == "unwrap") json->Add("method", o.method);
    if (o.op == "volume") {
      JsonObject meshes_per_device;
      for (const auto& [d, n] : bench.MeshesPerDevice()) meshes_per_device.Add(d, n);
      json->Add("mesh", o.mesh).Add("tets", bench.tets()).Add("meshes_per_device", meshes_per_device);
    }
  };
  if (!o.json && o.op == "volume") {
    std::vector<std::string> parts;
    for (const auto& [d, n] : bench.MeshesPerDevice()) parts.push_back(absl::StrCat(d, " ", n));
    out << "meshes placed: " << absl::StrJoin(parts, ", ") << "\n";
  }
  return RunBenchWork(global, o, work, out, err);
}

}  // namespace fresnel::cli
