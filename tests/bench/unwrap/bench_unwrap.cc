// fresnel_bench_unwrap: Goldstein (GPU, CPU reference) and least-squares unwrapping on synthetic
// surfaces with a target residue density, per stage, device-resident and end to end.
//
//   fresnel_bench_unwrap [--sizes 1024,4096,8192] [--densities 0,1e-4,1e-3] [--reps 7]
//                        [--cpu-max 4096] [--npy-dir DIR] [--npy-max 4096]
//                        [--pairing graph|launches|cooperative] [--tile-scan 1|0]
//
// Inputs: the smooth surface of tests/kernels/unwrap/synthetic_phase.h (10 turns) plus Gaussian
// phase noise whose sigma is bisected so that the residue density (residues per plaquette) hits
// the target. Accuracy: percentage of pixels whose multiple of 2 pi relative to the noisy truth
// differs from the image's most common one. With --npy-dir the wrapped inputs and truths up to
// --npy-max are written as .npy files for bench_skimage.py.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fresnel/core/gpu.h"
#include "fresnel/io/npy.h"
#include "fresnel/unwrap/unwrap.h"
#include "synthetic_phase.h"

namespace fresnel::unwrap {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Synthetic;
using testing::SyntheticSpec;

double Ms(double s) { return s * 1e3; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<double> ParseList(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atof(item.c_str()));
  return out;
}

Synthetic Generate(const SyntheticSpec& spec) {
  Synthetic out;
  out.truth.resize(static_cast<size_t>(spec.rows) * spec.cols);
  out.wrapped = HostArray(DType::kFloat32, {spec.rows, spec.cols});
  tbb::parallel_for(0, spec.rows, 64, [&](int y0) {
    testing::FillRows(spec, y0, std::min(spec.rows, y0 + 64), out.truth.data(),
                      out.wrapped.data<float>());
  });
  return out;
}

// Residues per plaquette on a 256-row band through the middle of the image.
double BandDensity(SyntheticSpec spec) {
  const int band = std::min(spec.rows, 256);
  std::vector<double> truth(static_cast<size_t>(band) * spec.cols);
  HostArray wrapped(DType::kFloat32, {band, spec.cols});
  const int y0 = (spec.rows - band) / 2;
  testing::FillRows(spec, y0, y0 + band, truth.data(), wrapped.data<float>(), y0);
  const double plaquettes = static_cast<double>(band - 1) * (spec.cols - 1);
  return testing::CountResidues(wrapped) / plaquettes;
}

double CalibrateSigma(SyntheticSpec spec, double density) {
  if (density <= 0) return 0;
  double lo = 0.2, hi = 1.6;
  for (int i = 0; i < 16; ++i) {
    spec.sigma = 0.5 * (lo + hi);
    (BandDensity(spec) < density ? lo : hi) = spec.sigma;
  }
  return 0.5 * (lo + hi);
}

struct GpuTimes {
  double residues = 0, cuts = 0, integrate = 0, device = 0, e2e = 0, e2e_lean = 0, h2d = 0, d2h = 0;
};

}  // namespace
}  // namespace fresnel::unwrap

int main(int argc, char** argv) {
  using namespace fresnel;
  using namespace fresnel::unwrap;
  std::vector<double> sizes = {1024, 4096, 8192};
  std::vector<double> densities = {0, 1e-4, 1e-3};
  int reps = 7;
  int cpu_max = 4096, npy_max = 4096;
  std::string npy_dir;
  GoldsteinCudaOptions cuda;  // GoldsteinCudaOptions: kernel choices, same results
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--sizes") sizes = ParseList(v);
    else if (k == "--densities") densities = ParseList(v);
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--cpu-max") cpu_max = std::atoi(v.c_str());
    else if (k == "--npy-dir") npy_dir = v;
    else if (k == "--npy-max") npy_max = std::atoi(v.c_str());
    else if (k == "--tile-scan") cuda.tile_scan = v != "0";
    else if (k == "--pairing" && (v == "graph" || v == "launches" || v == "cooperative")) {
      cuda.pairing = v == "graph"      ? GoldsteinCudaOptions::Pairing::kGraph
                     : v == "launches" ? GoldsteinCudaOptions::Pairing::kLaunches
                                       : GoldsteinCudaOptions::Pairing::kCooperative;
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }

  std::unique_ptr<GpuStream> stream;
  std::unique_ptr<GpuMemPool> pool;
  Device gpu;
  const bool have_gpu = GpuCount() > 0;
  if (have_gpu) {
    auto props = GetGpuProperties(0);
    auto s = GpuStream::Create(0);
    auto p = GpuMemPool::Create(0, int64_t{64} << 30);
    if (!props.ok() || !s.ok() || !p.ok()) {
      std::fprintf(stderr, "GPU setup failed\n");
      return 1;
    }
    stream = std::move(*s);
    pool = std::move(*p);
    gpu = Device::Cuda(0, stream->handle(), pool->handle());
    std::printf("GPU: %s, %d SMs\n", props->name.c_str(), props->multiprocessors);
  } else {
    std::printf("GPU: none (CPU reference only)\n");
  }

  struct Row {
    int size;
    double target, density, sigma;
    int64_t residues;
    GpuTimes g;
    double cpu_ms = -1;
    std::string exact = "-";
    double wrong_gold = -1, wrong_ls = -1;
    double ls_device = 0, ls_e2e = 0, ls_cpu_ms = -1;
    int64_t regions = 0, cut_pixels = 0, unreached = 0;
  };
  std::vector<Row> rows;

  for (double size_d : sizes) {
    const int size = static_cast<int>(size_d);
    for (double target : densities) {
      SyntheticSpec spec;
      spec.rows = spec.cols = size;
      spec.turns = 10;
      spec.seed = 20261130 + size;
      spec.sigma = CalibrateSigma(spec, target);
      auto t0 = Clock::now();
      Synthetic data = Generate(spec);
      const double gen_s = std::chrono::duration<double>(Clock::now() - t0).count();
      Row row;
      row.size = size;
      row.target = target;
      row.sigma = spec.sigma;
      std::fprintf(stderr, "[%d^2 density %g] sigma %.4f, generated in %.2f s\n", size, target,
                   spec.sigma, gen_s);
      {
        // The host check of every value the service runs before it queues an unwrap
        // (ValidateUnwrap; parallel since session 13): median of reps.
        std::vector<double> check_ms;
        for (int r = 0; r < std::max(reps, 1); ++r) {
          auto c0 = Clock::now();
          const absl::Status st = ValidateUnwrap(data.wrapped, UnwrapOptions{});
          check_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - c0).count());
          if (!st.ok()) std::fprintf(stderr, "ValidateUnwrap: %s\n", st.ToString().c_str());
        }
        std::sort(check_ms.begin(), check_ms.end());
        std::printf("%d^2 density %g: host check of every value (ValidateUnwrap) %.2f ms "
                    "(median of %zu, %u hardware threads)\n",
                    size, target, check_ms[check_ms.size() / 2], check_ms.size(),
                    std::thread::hardware_concurrency());
      }

      if (!npy_dir.empty() && size <= npy_max) {
        char name[256];
        std::snprintf(name, sizeof name, "%s/wrapped_%d_%g.npy", npy_dir.c_str(), size, target);
        if (!WriteNpy(name, data.wrapped).ok()) std::fprintf(stderr, "cannot write %s\n", name);
        HostArray truth(DType::kFloat32, {size, size});
        for (int64_t i = 0; i < truth.size(); ++i) {
          truth.data<float>()[i] = static_cast<float>(data.truth[i]);
        }
        std::snprintf(name, sizeof name, "%s/truth_%d_%g.npy", npy_dir.c_str(), size, target);
        if (!WriteNpy(name, truth).ok()) std::fprintf(stderr, "cannot write %s\n", name);
      }

      GoldsteinResult reference;
      bool have_result = false;
      if (have_gpu) {
        std::vector<double> res, cut, integ, dev, e2e, lean, h2d, d2h;
        GoldsteinOptions options;
        options.cuda = cuda;
        GoldsteinOptions lean_options = options;
        lean_options.return_maps = false;
        for (int r = 0; r < reps + 1; ++r) {
          StageTimes times;
          auto t = Clock::now();
          auto out = UnwrapGoldstein(gpu, data.wrapped, options, &times);
          const double wall = std::chrono::duration<double>(Clock::now() - t).count();
          if (!out.ok()) {
            std::fprintf(stderr, "GPU Goldstein failed: %s\n", out.status().ToString().c_str());
            return 1;
          }
          if (r == 0) {  // warm-up; keep the result
            reference = std::move(*out);
            have_result = true;
            continue;
          }
          res.push_back(out->stage_times.residues_s);
          cut.push_back(out->stage_times.branch_cuts_s);
          integ.push_back(out->stage_times.integrate_s);
          dev.push_back(times.compute_s);
          h2d.push_back(times.h2d_s);
          d2h.push_back(times.d2h_s);
          e2e.push_back(wall);
          t = Clock::now();
          auto l = UnwrapGoldstein(gpu, data.wrapped, lean_options, &times);
          lean.push_back(std::chrono::duration<double>(Clock::now() - t).count());
          if (!l.ok()) return 1;
        }
        row.g = {Median(res), Median(cut), Median(integ), Median(dev), Median(e2e), Median(lean),
                 Median(h2d), Median(d2h)};
        std::vector<double> ls_dev, ls_e2e;
        for (int r = 0; r < std::max(2, reps / 2) + 1; ++r) {
          StageTimes times;
          auto t = Clock::now();
          auto ls = UnwrapLeastSquares(gpu, data.wrapped, {}, &times);
          const double wall = std::chrono::duration<double>(Clock::now() - t).count();
          if (!ls.ok()) {
            std::fprintf(stderr, "GPU LS failed: %s\n", ls.status().ToString().c_str());
            return 1;
          }
          if (r == 0) {
            row.wrong_ls = testing::WrongFraction(ls->unwrapped, data.truth);
            continue;
          }
          ls_dev.push_back(times.compute_s);
          ls_e2e.push_back(wall);
        }
        row.ls_device = Median(ls_dev);
        row.ls_e2e = Median(ls_e2e);
      }
      if (size <= cpu_max) {
        auto t = Clock::now();
        auto cpu = UnwrapGoldstein(Device::Cpu(), data.wrapped, {});
        row.cpu_ms = Ms(std::chrono::duration<double>(Clock::now() - t).count());
        if (!cpu.ok()) {
          std::fprintf(stderr, "CPU Goldstein failed: %s\n", cpu.status().ToString().c_str());
          return 1;
        }
        if (have_result) {
          const bool same = cpu->unwrapped.bytes() == reference.unwrapped.bytes() &&
                            cpu->cuts.bytes() == reference.cuts.bytes() &&
                            cpu->regions.bytes() == reference.regions.bytes() &&
                            cpu->residues.bytes() == reference.residues.bytes() &&
                            cpu->unreached.bytes() == reference.unreached.bytes();
          row.exact = same ? "yes" : "NO";
        } else {
          reference = std::move(*cpu);
          have_result = true;
        }
        if (!have_gpu && size <= 1024) {
          auto ls = UnwrapLeastSquares(Device::Cpu(), data.wrapped, {});
          if (ls.ok()) row.wrong_ls = testing::WrongFraction(ls->unwrapped, data.truth);
        }
      }
      if (have_result) {
        const GoldsteinStats& s = reference.stats;
        row.residues = s.positive_residues + s.negative_residues;
        row.density = row.residues / (static_cast<double>(size - 1) * (size - 1));
        row.regions = s.regions;
        row.cut_pixels = s.cut_pixels;
        row.unreached = s.unreached_pixels;
        row.wrong_gold = testing::WrongFraction(reference.unwrapped, data.truth);
      }
      rows.push_back(row);
      std::fprintf(stderr, "  done: device %.3f ms, e2e %.3f ms, cpu %.1f ms, exact %s\n",
                   Ms(row.g.device), Ms(row.g.e2e), row.cpu_ms, row.exact.c_str());
    }
  }

  // Floor: the bytes a device-resident run must move at least (read the float32 phase, write the
  // unwrapped value, the int16 residue map, the uint8 cut and unreached maps and the int32
  // labels: 16 B/pixel) at 4.3 TB/s, the copy bandwidth measured on this H200 model.
  std::printf("\nGoldstein (median of %d runs after one warm-up; ms)\n", reps);
  std::printf("%6s %8s %9s %8s | %8s %8s %8s %9s %7s | %9s %9s | %10s %8s %8s | %5s\n", "size",
              "target", "density", "residues", "residue", "cuts", "integr", "device", "%floor",
              "e2e", "e2e-lean", "cpu-ref", "x-dev", "x-e2e", "exact");
  for (const Row& r : rows) {
    const double floor_ms = 16.0 * r.size * r.size / 4.3e12 * 1e3;
    std::printf("%6d %8.0e %9.2e %8lld | %8.3f %8.3f %8.3f %9.3f %6.0f%% | %9.2f %9.2f | ", r.size,
                r.target, r.density, static_cast<long long>(r.residues), Ms(r.g.residues),
                Ms(r.g.cuts), Ms(r.g.integrate), Ms(r.g.device),
                r.g.device > 0 ? 100.0 * floor_ms / Ms(r.g.device) : 0.0, Ms(r.g.e2e),
                Ms(r.g.e2e_lean));
    if (r.cpu_ms >= 0 && r.g.device > 0) {
      std::printf("%10.1f %8.0f %8.1f | %5s\n", r.cpu_ms, r.cpu_ms / Ms(r.g.device),
                  r.cpu_ms / Ms(r.g.e2e), r.exact.c_str());
    } else if (r.cpu_ms >= 0) {
      std::printf("%10.1f %8s %8s | %5s\n", r.cpu_ms, "-", "-", r.exact.c_str());
    } else {
      std::printf("%10s %8s %8s | %5s\n", "-", "-", "-", r.exact.c_str());
    }
  }
  std::printf("\nEnd-to-end parts (ms): the call's host-to-device and device-to-host copies (pageable\n"
              "HostArray memory) and the rest of e2e (host allocation of the result arrays, etc.)\n");
  std::printf("%6s %8s %9s %9s %9s %9s\n", "size", "target", "h2d", "d2h", "device", "host");
  for (const Row& r : rows) {
    std::printf("%6d %8.0e %9.2f %9.2f %9.3f %9.2f\n", r.size, r.target, Ms(r.g.h2d), Ms(r.g.d2h),
                Ms(r.g.device), Ms(r.g.e2e - r.g.h2d - r.g.d2h - r.g.device));
  }
  std::printf("\nAccuracy and least squares (wrong = %% of pixels off the common 2 pi multiple)\n");
  std::printf("%6s %8s %7s %8s %9s %9s %11s | %9s %9s %9s\n", "size", "target", "sigma",
              "regions", "cut px", "unreached", "wrong-gold%", "ls-device", "ls-e2e", "wrong-ls%");
  for (const Row& r : rows) {
    std::printf("%6d %8.0e %7.4f %8lld %9lld %9lld %11.4f | %9.3f %9.2f %9.4f\n", r.size, r.target,
                r.sigma, static_cast<long long>(r.regions), static_cast<long long>(r.cut_pixels),
                static_cast<long long>(r.unreached), 100 * r.wrong_gold, Ms(r.ls_device),
                Ms(r.ls_e2e), r.wrong_ls >= 0 ? 100 * r.wrong_ls : -1.0);
  }
  return 0;
}
