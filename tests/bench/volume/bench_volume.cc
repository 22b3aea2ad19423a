// fresnel_bench_volume: frame time and stages of the CUDA renderers on Blunt Fin and on
// generated meshes of about 1 M, 6 M and 35 M tetrahedra at 1024², for 16 and 64 hash blocks and
// both compositing methods; tets/s = non-degenerate tetrahedra / frame time. A frame is the wall
// time of one call, from the call until the image is in host memory: Render (a new HostArray
// each frame: out rgba8 / f32) or, for the ray walk, also RenderInto a reused page-locked host
// buffer (out rgba8p / f32p). Everything the call does is inside: validation, per-frame device
// allocations, projection and binning, the kernels, the image's copy to the host.
//
//   fresnel_bench_volume [--data DIR] [--size N] [--frames K] [--meshes fin,1m,6m,35m] [--cpu]
//                        [--scans thread,list,one,walk] [--quick] [--pass-records N,...]
//
// --data: the folder holding volume/bluntfin_tets.vtk (default: the build's FRESNEL_DATA_DIR).
// --cpu: also time the CPU ray caster on Blunt Fin at 512².
// --scans: the variants to time (thread = kThread, list = kWarpList, one = kWarpListOnePass:
//   cell projection with that ScanConversion; walk = CudaMethod::kRayWalk, stages: proj =
//   projection and face binning, records = the walk; default all four). --quick: per scan only the default options with RGBA8 out (the turntable's frame),
//   not the four f32 rows (16/64 blocks × pairwise/segmented scan). --pass-records: the
//   RenderOptions::max_pass_records values to time the RGBA8 row with (default: the default, 2^28).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "fresnel/core/gpu.h"
#include "fresnel/volume/mesh.h"
#include "fresnel/volume/render.h"

using namespace fresnel;
using namespace fresnel::volume;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* ScanName(const RenderStats& st) {
  if (st.cuda_method == CudaMethod::kRayWalk) return "walk";
  const ScanConversion s = st.scan_conversion;
  return s == ScanConversion::kThread             ? "thread"
         : s == ScanConversion::kWarpList         ? "list"
         : s == ScanConversion::kWarpListOnePass ? "one"
                                                  : "auto";
}

const char* ModeName(Compositing c) {
  return c == Compositing::kPairwise ? "pairwise" : c == Compositing::kSegmentedScan ? "segscan" : "auto";
}

struct Result {
  RenderStats median;
  double frame_s = 0;
};

// Median-by-frame-time of `frames` RenderInto calls into one reused page-locked host buffer
// (what a turntable or a server keeps per stream) after one warm-up: the frame is the call's
// wall time, the image in that host memory when it returns.
Result TimeInto(const Device& dev, const DeviceMesh& mesh, const TransferFunction& tf,
                const Camera& cam, const RenderOptions& opt, int frames) {
  const int64_t bytes = ImageBytes(cam, opt);
  const size_t page = 4096, room = (static_cast<size_t>(bytes) + page - 1) / page * page;
  void* host = std::aligned_alloc(page, room);
  if (host == nullptr || !PinHostMemory(host, static_cast<int64_t>(room)).ok()) {
    std::fprintf(stderr, "cannot pin %zu bytes\n", room);
    std::exit(1);
  }
  std::vector<RenderStats> runs;
  for (int i = 0; i <= frames; ++i) {
    auto r = RenderInto(dev, mesh, tf, cam, opt, host, bytes);
    if (!r.ok()) {
      std::fprintf(stderr, "render failed: %s\n", std::string(r.status().message()).c_str());
      std::exit(1);
    }
    if (i > 0) runs.push_back(*r);
  }
  UnpinHostMemory(host);
  std::free(host);
  std::sort(runs.begin(), runs.end(),
            [](const RenderStats& a, const RenderStats& b) { return a.total_s < b.total_s; });
  Result res;
  res.median = runs[runs.size() / 2];
  res.frame_s = res.median.total_s;
  return res;
}

// Median-by-frame-time of `frames` renders after one warm-up.
Result Time(const Device& dev, const DeviceMesh& mesh, const TransferFunction& tf,
            const Camera& cam, const RenderOptions& opt, int frames) {
  auto warm = Render(dev, mesh, tf, cam, opt);
  if (!warm.ok()) {
    std::fprintf(stderr, "render failed: %s\n", std::string(warm.status().message()).c_str());
    std::exit(1);
  }
  std::vector<RenderStats> runs;
  for (int i = 0; i < frames; ++i) {
    auto r = Render(dev, mesh, tf, cam, opt);
    if (!r.ok()) std::exit(1);
    runs.push_back(r->stats);
  }
  std::sort(runs.begin(), runs.end(),
            [](const RenderStats& a, const RenderStats& b) { return a.total_s < b.total_s; });
  Result res;
  res.median = runs[runs.size() / 2];
  res.frame_s = res.median.total_s;
  return res;
}

void Row(const char* name, int64_t tets, int bits, bool rgba8, const Result& r,
         bool pinned = false) {
  const RenderStats& s = r.median;
  std::printf("%-10s %10lld %-6s %3d %-9s %-6s %2d %8.3f %7.3f %7.3f %7.3f %7.3f %7.3f %11lld %10.3g %8.0f\n",
              name, static_cast<long long>(tets), ScanName(s), 1 << (2 * bits),
              ModeName(s.compositing),
              pinned ? (rgba8 ? "rgba8p" : "f32p") : rgba8 ? "rgba8" : "f32", s.passes,
              1e3 * r.frame_s, 1e3 * s.project_s, 1e3 * s.records_s, 1e3 * s.sort_s,
              1e3 * s.composite_s, 1e3 * s.d2h_s, static_cast<long long>(s.records),
              static_cast<double>(tets) / r.frame_s, s.peak_device_bytes / 1048576.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = FRESNEL_DATA_DIR;
  int size = 1024, frames = 5;
  bool cpu = false, quick = false;
  std::vector<int64_t> pass_records = {RenderOptions{}.max_pass_records};
  std::vector<std::string> meshes = {"fin", "1m", "6m", "35m"};
  std::vector<std::string> scan_names = {"thread", "list", "one", "walk"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--size" && i + 1 < argc) size = std::atoi(argv[++i]);
    else if (a == "--frames" && i + 1 < argc) frames = std::max(1, std::atoi(argv[++i]));
    else if (a == "--meshes" && i + 1 < argc) meshes = absl::StrSplit(argv[++i], ',');
    else if (a == "--cpu") cpu = true;
    else if (a == "--quick") quick = true;
    else if (a == "--scans" && i + 1 < argc) scan_names = absl::StrSplit(argv[++i], ',');
    else if (a == "--pass-records" && i + 1 < argc) {
      pass_records.clear();
      for (absl::string_view v : absl::StrSplit(argv[++i], ','))
        pass_records.push_back(std::atoll(std::string(v).c_str()));
    }
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--size N] [--frames K] [--meshes fin,1m,6m,35m] [--cpu] [--scans thread,list,one,walk] [--quick] [--pass-records N,...]\n", argv[0]);
      return 2;
    }
  }
  // (method, scan conversion) per variant.
  std::vector<std::pair<CudaMethod, ScanConversion>> scans;
  for (const std::string& n : scan_names) {
    if (n != "thread" && n != "list" && n != "one" && n != "walk") {
      std::fprintf(stderr, "--scans: thread, list, one or walk, got '%s'\n", n.c_str());
      return 2;
    }
    if (n == "walk") {
      scans.push_back({CudaMethod::kRayWalk, ScanConversion::kAuto});
      continue;
    }
    scans.push_back({CudaMethod::kCellProjection, n == "thread" ? ScanConversion::kThread
                                                  : n == "list" ? ScanConversion::kWarpList
                                                                : ScanConversion::kWarpListOnePass});
  }
  if (GpuCount() < 1) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  auto props = GetGpuProperties(0);
  auto stream = GpuStream::Create(0);
  auto pool = GpuMemPool::Create(0, int64_t{4} << 30);
  if (!props.ok() || !stream.ok() || !pool.ok()) return 1;
  const Device dev = Device::Cuda(0, (*stream)->handle(), (*pool)->handle());
  std::printf("device: %s, image %d x %d, median of %d frames after a warm-up\n",
              props->name.c_str(), size, size, frames);
  std::printf("%-10s %10s %-6s %3s %-9s %-6s %2s %8s %7s %7s %7s %7s %7s %11s %10s %8s\n", "mesh", "tets",
              "scan", "blk", "composite", "out", "ps", "frame_ms", "proj", "records", "sort", "compos", "d2h",
              "records", "tets/s", "peak_MiB");
  for (const std::string& name : meshes) {
    TetMesh mesh;
    const double t0 = Now();
    if (name == "fin") {
      auto m = ReadVtk(data + "/volume/bluntfin_tets.vtk");
      if (!m.ok()) {
        std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
        continue;
      }
      mesh = std::move(*m);
    } else {
      const int64_t target = name == "1m" ? 1000000 : name == "6m" ? 6000000 : 35000000;
      auto m = GenerateGridMesh(GridSpecForTets(target));
      if (!m.ok()) return 1;
      mesh = std::move(*m);
    }
    const double t1 = Now();
    auto dm = DeviceMesh::Create(dev, mesh);
    if (!dm.ok()) {
      std::fprintf(stderr, "upload: %s\n", std::string(dm.status().message()).c_str());
      return 1;
    }
    const double t2 = Now();
    const MeshReport& rep = (*dm)->report();
    const int64_t tets = rep.num_tets - rep.degenerate_tets;
    std::fprintf(stderr, "%s: %lld tets (%lld degenerate), load/generate %.2f s, upload %.3f s, %.0f MiB on device\n",
                 name.c_str(), static_cast<long long>(rep.num_tets),
                 static_cast<long long>(rep.degenerate_tets), t1 - t0, t2 - t1,
                 (*dm)->resident_bytes() / 1048576.0);
    const float extent = std::max({rep.bounds_max[0] - rep.bounds_min[0],
                                   rep.bounds_max[1] - rep.bounds_min[1],
                                   rep.bounds_max[2] - rep.bounds_min[2]});
    const TransferFunction tf =
        DefaultTransferFunction(rep.scalar_min, rep.scalar_max, 8.0f / extent);
    const Camera cam = OrbitCamera(rep.bounds_min, rep.bounds_max, 30, 20, size, size);
    for (const auto& [method, scan] : scans) {
      if (!quick && method == CudaMethod::kRayWalk) {
        RenderOptions opt;  // f32 out (blocks and compositing do not apply)
        opt.cuda_method = method;
        Row(name.c_str(), tets, 0, false, Time(dev, **dm, tf, cam, opt, frames));
      } else if (!quick) {
        for (int bits : {2, 3})
          for (Compositing c : {Compositing::kPairwise, Compositing::kSegmentedScan}) {
            RenderOptions opt;
            opt.hash_block_bits = bits;
            opt.compositing = c;
            opt.scan_conversion = scan;
            opt.cuda_method = method;
            Row(name.c_str(), tets, bits, false, Time(dev, **dm, tf, cam, opt, frames));
          }
      }
      for (int64_t pr : pass_records) {
        RenderOptions opt;  // the defaults, RGBA8 out: what the service's turntable asks for
        opt.rgba8 = true;
        opt.scan_conversion = scan;
        opt.cuda_method = method;
        opt.max_pass_records = pr;
        const Result r = Time(dev, **dm, tf, cam, opt, frames);
        Row(name.c_str(), tets,
            method == CudaMethod::kRayWalk ? 0 : r.median.num_blocks == 64 ? 3 : 2, true, r);
        std::fprintf(stderr,
                     "%s: %lld chunks of big tetrahedra (warp each), max block %lld records, "
                     "%lld walk fallbacks\n",
                     name.c_str(), static_cast<long long>(r.median.warp_chunks),
                     static_cast<long long>(r.median.max_block_records),
                     static_cast<long long>(r.median.walk_fallbacks));
        if (method == CudaMethod::kRayWalk) {
          // The same frame into a reused pinned buffer (RenderInto), RGBA8 and f32.
          Row(name.c_str(), tets, 0, true, TimeInto(dev, **dm, tf, cam, opt, frames), true);
          RenderOptions f32 = opt;
          f32.rgba8 = false;
          Row(name.c_str(), tets, 0, false, TimeInto(dev, **dm, tf, cam, f32, frames), true);
          break;  // no records: max_pass_records does not apply
        }
      }
    }
    if (cpu && name == "fin") {
      auto cm = DeviceMesh::Create(Device::Cpu(), mesh);
      if (!cm.ok()) return 1;
      Camera small = cam;
      small.width = small.height = 512;
      auto r = Render(Device::Cpu(), **cm, tf, small);
      if (!r.ok()) return 1;
      std::printf("%-10s %10lld cpu ray cast 512x512: %.1f ms (%lld segments)\n", name.c_str(),
                  static_cast<long long>(tets), 1e3 * r->stats.total_s,
                  static_cast<long long>(r->stats.records));
    }
  }
  return 0;
}
