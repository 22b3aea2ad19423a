// fresnel_bench_interp: polyphase interpolation on one CUDA device.
//
// Measures the device-to-device copy bandwidth (cudaMemcpyAsync of a 1 GiB buffer, bytes read +
// written) as the ceiling, then for each case the kernel alone (device-pointer entry point,
// CUDA events, median of 25 after warm-up), its effective bandwidth (input + output bytes over
// kernel time) as a percentage of the copy bandwidth, and the end-to-end host call (pageable
// host arrays: H2D, kernel, D2H, synchronised) with its StageTimes split. Two more ceilings for
// case (a)'s write-heavy traffic: a plain kernel writing 1 GiB of float4, and one reading
// 256 MiB and writing 1 GiB (one float4 in, four out per thread) without arithmetic.
//
//   fresnel_bench_interp [--json] [--no-e2e] [--only PREFIX] [--variants all|V1,V2,...]
//   fresnel_bench_interp --cpu [--cpu-log2n N] [--cpu-case PREFIX] [--python PATH]
//
// --variants also times kRegisterBlocked's store variants (CudaPlanOptions::rb_store values,
// optionally with a blocks-per-SM cap, e.g. bulk or warp:3; interp_cuda.cu) on case (a) and the
// up sweep. Long-filter rows also print useful GFMA/s (outputs x taps per phase over kernel
// time) against the FP32 FMA peak (SMs x 128 lanes x the clock attribute).
//
// --only keeps the GPU cases whose name starts with PREFIX (e.g. for a profiler run).
//
// --cpu needs no GPU: it times the CPU back end (Device::Cpu, all TBB threads) on the same
// filters over 2^N samples (default 2^22), and scipy.signal's single-threaded upfirdn /
// resample_poly on the same data through `python3 -c` (when python3 with scipy is installed;
// otherwise it prints "scipy not available"; --python names the interpreter, default python3),
// side by side with the speed-up. --cpu-case keeps the cases whose name starts with PREFIX.
#include <cuda_runtime.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/gpu.h"
#include "fresnel/interp/interp.h"
#include "interp/interp_internal.h"

namespace fresnel::interp {
namespace {

using internal::CudaKernel;
using internal::CudaPolyphase;
using internal::Polyphase;

constexpr int kWarmup = 3;
constexpr int kReps = 25;

#define BENCH_CHECK(expr)                                                          \
  do {                                                                             \
    ::absl::Status bench_status_ = (expr);                                         \
    if (!bench_status_.ok()) {                                                     \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                      \
                   bench_status_.ToString().c_str());                              \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
#define BENCH_CUDA(call) BENCH_CHECK(::fresnel::cuda::ToStatus((call), #call))

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Uniform [-1, 1) floats from a 64-bit LCG: fast enough for 2^26 samples, never all zeros.
std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<float>(static_cast<double>(s >> 40) / double(1ull << 23) - 1.0);
  }
  return v;
}

// Median seconds of `fn` (which enqueues work on `stream`) over kReps event-bracketed runs.
template <class Fn>
double TimeOnStream(cudaStream_t stream, Fn fn) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < kWarmup; ++i) fn();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> t;
  for (int i = 0; i < kReps; ++i) {
    BENCH_CUDA(cudaEventRecord(a, stream));
    fn();
    BENCH_CUDA(cudaEventRecord(b, stream));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Median(t);
}

struct Row {
  std::string name;
  std::string kernel;
  int64_t channels = 1, n = 0, out = 0;
  double in_bytes = 0, out_bytes = 0;
  double kernel_s = 0;
  double gbps = 0, pct_copy = 0;
  double fma_per_s = 0, pct_fma = 0;  // long-filter rows: useful FMAs (outputs x P)
  double rel_err = -1;  // ||y - y_cpu|| / ||y_cpu|| against the CPU oracle (-1: not checked)
  // End to end (0 when not measured).
  double e2e_s = 0, h2d_s = 0, compute_s = 0, d2h_s = 0;
};

class Bench {
 public:
  Bench(Device device, bool e2e, std::string only)
      : device_(device), e2e_(e2e), only_(std::move(only)) {}
  // Whether the case `name` runs (--only PREFIX; rows of skipped cases are not printed).
  bool Runs(const std::string& name) const { return name.rfind(only_, 0) == 0; }

  void MeasureCopy() {
    const size_t bytes = size_t{1} << 30;
    cuda::DeviceBuffer<unsigned char> a, b;
    BENCH_CHECK(a.Allocate(device_, static_cast<int64_t>(bytes)));
    BENCH_CHECK(b.Allocate(device_, static_cast<int64_t>(bytes)));
    BENCH_CUDA(cudaMemsetAsync(a.get(), 1, bytes, Stream()));
    double s = TimeOnStream(Stream(), [&] {
      BENCH_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, Stream()));
    });
    copy_gbps_ = 2.0 * bytes / s / 1e9;
  }
  double copy_gbps() const { return copy_gbps_; }
  // FP32 FMA/s of the device: SMs x 128 FP32 lanes x clock.
  void MeasureFmaPeak(int sms) {
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device_.ordinal) != cudaSuccess ||
        khz <= 0) {
      cudaGetLastError();
      khz = 1980000;  // H200 boost clock
    }
    clock_mhz_ = khz / 1000.0;
    fma_peak_ = static_cast<double>(sms) * 128.0 * khz * 1e3;
  }
  double fma_peak() const { return fma_peak_; }
  double clock_mhz() const { return clock_mhz_; }

  // Probe bandwidth (bytes read + written over time) of internal::LaunchBandwidthProbe.
  double MeasureProbe(int kind) {
    const int64_t n_out = int64_t{1} << 28;  // 1 GiB of float32 written
    cuda::DeviceBuffer<float> x, y;
    BENCH_CHECK(x.Allocate(device_, n_out / 4));
    BENCH_CHECK(y.Allocate(device_, n_out));
    BENCH_CUDA(cudaMemsetAsync(x.get(), 0x3f, static_cast<size_t>(n_out), Stream()));
    double s = TimeOnStream(Stream(), [&] {
      BENCH_CHECK(internal::LaunchBandwidthProbe(device_, kind, x.get(), y.get(), n_out));
    });
    const double bytes = 4.0 * n_out * (kind == 0 ? 1.0 : 1.25);
    return bytes / s / 1e9;
  }

  // Kernel-only time of one window launch: outputs [out_first, out_first + out_count) of the
  // full upfirdn of `channels` x n float32 samples.
  Row Kernel(const std::string& name, const Polyphase& f, int64_t channels, int64_t n,
             int64_t out_first, int64_t out_count, CudaKernel kernel) {
    internal::CudaPlanOptions o;
    o.kernel = kernel;
    return Kernel(name, f, channels, n, out_first, out_count, o);
  }
  // With `check`, the output is also compared with the CPU oracle (double accumulation) on the
  // same input: Row::rel_err.
  Row Kernel(const std::string& name, const Polyphase& f, int64_t channels, int64_t n,
             int64_t out_first, int64_t out_count, const internal::CudaPlanOptions& options,
             bool check = false) {
    Row r;
    r.name = name;
    if (!Runs(name)) return r;  // kernel_s == 0: not printed
    r.channels = channels;
    r.n = n;
    r.out = out_count;
    r.in_bytes = 4.0 * channels * n;
    r.out_bytes = 4.0 * channels * out_count;
    std::vector<float> host = RandomFloats(static_cast<size_t>(channels * n), 42 + n);
    cuda::DeviceBuffer<float> x, y;
    BENCH_CHECK(x.Allocate(device_, channels * n));
    BENCH_CHECK(y.Allocate(device_, channels * out_count));
    BENCH_CUDA(cudaMemcpyAsync(x.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice,
                               Stream()));
    auto plan = CudaPolyphase::Create(device_, f, DType::kFloat32, options);
    if (absl::IsFailedPrecondition(plan.status())) {  // a forced variant that does not tile
      std::fprintf(stderr, "%s: %s\n", name.c_str(), plan.status().ToString().c_str());
      return r;  // kernel_s == 0: not printed
    }
    BENCH_CHECK(plan.status());
    r.kernel = internal::CudaKernelName(plan->kernel());
    if (options.pg_widen != 0) r.kernel = absl::StrCat("phase_groups/widen", options.pg_widen);
    if (options.pg_layout != 0) absl::StrAppend(&r.kernel, "/layout", options.pg_layout);
    if (options.pg_periods_per_lane != 0) {
      absl::StrAppend(&r.kernel, "/r", options.pg_periods_per_lane);
    }
    if (options.pg_prefetch != 0) absl::StrAppend(&r.kernel, "/prefetch", options.pg_prefetch);
    if (options.pg_stage != 0) absl::StrAppend(&r.kernel, "/stage", options.pg_stage);
    if (options.pg_tail != 0) absl::StrAppend(&r.kernel, "/tail", options.pg_tail);
    if (options.pg_bulk_in != 0) absl::StrAppend(&r.kernel, "/bulkin", options.pg_bulk_in);
    if (options.kernel == CudaKernel::kTensorTf32) r.kernel = "tensor_3xtf32";
    if (r.kernel == "tensor_tf32" || r.kernel == "tensor_3xtf32") {
      r.kernel = "tensor_3xtf32";
      if (options.tc_chunk_ksteps != 0) absl::StrAppend(&r.kernel, "/c", options.tc_chunk_ksteps);
      if (options.tc_min_blocks != 0) absl::StrAppend(&r.kernel, "/mb", options.tc_min_blocks);
    }
    internal::DeviceSignal s;
    s.channels = channels;
    s.x = x.get();
    s.x_stride = n;
    s.x_len = n;
    s.y = y.get();
    s.y_stride = out_count;
    s.out_first = out_first;
    s.out_count = out_count;
    r.kernel_s = TimeOnStream(Stream(), [&] { BENCH_CHECK(plan->LaunchAsync(device_, s)); });
    BENCH_CUDA(cudaStreamSynchronize(Stream()));
    if (check) {
      std::vector<float> got(static_cast<size_t>(channels * out_count));
      BENCH_CUDA(cudaMemcpy(got.data(), y.get(), got.size() * 4, cudaMemcpyDeviceToHost));
      internal::HostSignalView view;
      view.dtype = DType::kFloat32;
      view.channels = channels;
      view.len = n;
      view.stride = n;
      view.data = host.data();
      // The oracle of the previous checked row is reused when it ran the same filter on the
      // same outputs (several variants of one case in a row).
      const std::string key =
          absl::StrCat(f.up, "/", f.down, "/", f.taps.size(), "/", f.taps.empty() ? 0 : f.taps[0],
                       "/", channels, "/", n, "/", out_first, "/", out_count);
      if (key != oracle_key_) {
        auto want = internal::UpfirdnWindowCpu(f, view, 0, 0.0, out_first, out_count);
        BENCH_CHECK(want.status());
        const float* wp = static_cast<const float*>(want->raw());
        oracle_.assign(wp, wp + got.size());
        oracle_key_ = key;
      }
      const float* w = oracle_.data();
      double num = 0, den = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        num += (static_cast<double>(got[i]) - w[i]) * (static_cast<double>(got[i]) - w[i]);
        den += static_cast<double>(w[i]) * w[i];
      }
      r.rel_err = std::isfinite(num) && den > 0 ? std::sqrt(num / den) : 1.0 / 0.0;
    }
    r.gbps = (r.in_bytes + r.out_bytes) / r.kernel_s / 1e9;
    r.pct_copy = 100.0 * r.gbps / copy_gbps_;
    r.fma_per_s = static_cast<double>(channels) * out_count * f.TapsPerPhase() / r.kernel_s;
    r.pct_fma = fma_peak_ > 0 ? 100.0 * r.fma_per_s / fma_peak_ : 0;
    return r;
  }

  // The host-level call on pageable host arrays: median of 3 after one warm-up.
  template <class Call>
  void EndToEnd(Row& r, Call call) {
    if (!e2e_ || !Runs(r.name)) return;
    std::vector<double> wall, h2d, comp, d2h;
    for (int i = 0; i < 4; ++i) {
      StageTimes t;
      auto t0 = std::chrono::steady_clock::now();
      call(&t);
      double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i == 0) continue;
      wall.push_back(w);
      h2d.push_back(t.h2d_s);
      comp.push_back(t.compute_s);
      d2h.push_back(t.d2h_s);
    }
    r.e2e_s = Median(wall);
    r.h2d_s = Median(h2d);
    r.compute_s = Median(comp);
    r.d2h_s = Median(d2h);
  }

  HostArray HostSignal(int64_t channels, int64_t n) {
    HostArray x(DType::kFloat32, channels == 1 ? std::vector<int64_t>{n}
                                               : std::vector<int64_t>{channels, n});
    std::vector<float> v = RandomFloats(static_cast<size_t>(channels * n), 7 + n);
    std::memcpy(x.raw(), v.data(), v.size() * 4);
    return x;
  }

  const Device& device() const { return device_; }

 private:
  cudaStream_t Stream() const { return cuda::StreamOf(device_); }
  Device device_;
  bool e2e_;
  std::string only_;
  double copy_gbps_ = 0;
  double fma_peak_ = 0, clock_mhz_ = 0;
  std::string oracle_key_;
  std::vector<float> oracle_;
};

// kPhaseGroups forced with a variant (0: the default).
internal::CudaPlanOptions PgOptions(int widen, int layout = 0, int periods_per_lane = 0,
                                    int prefetch = 0, int stage = 0, int tail = 0,
                                    int bulk_in = 0) {
  internal::CudaPlanOptions o;
  o.kernel = CudaKernel::kPhaseGroups;
  o.pg_widen = widen;
  o.pg_layout = layout;
  o.pg_periods_per_lane = periods_per_lane;
  o.pg_prefetch = prefetch;
  o.pg_stage = stage;
  o.pg_tail = tail;
  o.pg_bulk_in = bulk_in;
  return o;
}
// kTensorTf32 forced with `chunk` k-steps per tensor-core partial sum (0: the default).
internal::CudaPlanOptions TcOptions(int chunk, int min_blocks = 0) {
  internal::CudaPlanOptions o;
  o.kernel = CudaKernel::kTensorTf32;
  o.tc_chunk_ksteps = chunk;
  o.tc_min_blocks = min_blocks;
  return o;
}
// The chunk sizes the bench compares (kNoChunks: the whole band in one partial sum, session 7).
constexpr int kNoChunks = 1 << 20;
constexpr int kTcChunks[] = {1, 2, 4, 8, kNoChunks};

std::vector<double> Taps(int64_t l) {
  std::vector<float> r = RandomFloats(static_cast<size_t>(l), 99 + l);
  return std::vector<double>(r.begin(), r.end());
}

void PrintTable(const std::vector<Row>& rows, double copy_gbps, const GpuProperties& p) {
  std::printf("device: %s (%d SMs)   D2D copy bandwidth (read + write): %.0f GB/s\n",
              p.name.c_str(), p.multiprocessors, copy_gbps);
  std::printf("%-34s %-18s %9s %9s %10s %8s %7s %8s %6s %8s | %9s %8s %8s %8s\n", "case",
              "kernel", "in MiB", "out MiB", "kernel ms", "GB/s", "%copy", "GFMA/s", "%FMA",
              "relerr", "e2e ms", "h2d ms", "gpu ms", "d2h ms");
  for (const Row& r : rows) {
    if (r.kernel_s == 0) continue;  // not run (--only)
    std::printf("%-34s %-18s %9.1f %9.1f %10.4f %8.0f %6.1f%% %8.0f %5.1f%% ", r.name.c_str(),
                r.kernel.c_str(), r.in_bytes / 1048576.0, r.out_bytes / 1048576.0,
                r.kernel_s * 1e3, r.gbps, r.pct_copy, r.fma_per_s * 1e-9, r.pct_fma);
    if (r.rel_err >= 0) {
      std::printf("%8.1e |", r.rel_err);
    } else {
      std::printf("%8s |", "-");
    }
    if (r.e2e_s > 0) {
      std::printf(" %9.1f %8.1f %8.3f %8.1f\n", r.e2e_s * 1e3, r.h2d_s * 1e3,
                  r.compute_s * 1e3, r.d2h_s * 1e3);
    } else {
      std::printf(" %9s %8s %8s %8s\n", "-", "-", "-", "-");
    }
  }
}

void PrintJson(const std::vector<Row>& rows, double copy_gbps, const GpuProperties& p) {
  std::printf("{\"device\": \"%s\", \"copy_gbps\": %.1f, \"rows\": [\n", p.name.c_str(),
              copy_gbps);
  std::vector<Row> run;
  for (const Row& r : rows) {
    if (r.kernel_s > 0) run.push_back(r);  // not run (--only)
  }
  for (size_t i = 0; i < run.size(); ++i) {
    const Row& r = run[i];
    std::printf(
        "  {\"case\": \"%s\", \"kernel\": \"%s\", \"channels\": %lld, \"n\": %lld, "
        "\"out\": %lld, \"in_bytes\": %.0f, \"out_bytes\": %.0f, \"kernel_s\": %.6e, "
        "\"gbps\": %.1f, \"pct_copy\": %.2f, \"gfma_s\": %.1f, \"pct_fma\": %.2f, "
        "\"rel_err\": %.3e, "
        "\"e2e_s\": %.6e, \"h2d_s\": %.6e, \"compute_s\": %.6e, \"d2h_s\": %.6e}%s\n",
        r.name.c_str(), r.kernel.c_str(), static_cast<long long>(r.channels),
        static_cast<long long>(r.n), static_cast<long long>(r.out), r.in_bytes, r.out_bytes,
        r.kernel_s, r.gbps, r.pct_copy, r.fma_per_s * 1e-9, r.pct_fma, r.rel_err, r.e2e_s,
        r.h2d_s, r.compute_s, r.d2h_s,
        i + 1 < run.size() ? "," : "");
  }
  std::printf("]}\n");
}

// ---- --cpu: the CPU back end against SciPy (single-threaded), same data ----------------------

// Times scipy.signal on x (float32) with taps h (float32; empty: resample_poly's own filter) and
// writes its result next to the inputs. Returns the median seconds, or -1 without scipy.
constexpr char kScipyScript[] = R"PY(
import sys, time
import numpy as np
try:
    from scipy import signal
except Exception:
    print("-1"); sys.exit(0)
xp, hp, up, down, kind, yp = sys.argv[1:7]
x = np.fromfile(xp, dtype=np.float32)
h = np.fromfile(hp, dtype=np.float32)
up, down = int(up), int(down)
f = (lambda: signal.upfirdn(h, x, up, down)) if kind == "upfirdn" else \
    (lambda: signal.resample_poly(x, up, down))
y = f()
t = []
c0 = time.process_time()
for _ in range(3):
    t0 = time.perf_counter(); f(); t.append(time.perf_counter() - t0)
cpu = (time.process_time() - c0) / 3
y.astype(np.float32).tofile(yp)
print(sorted(t)[1], cpu, signal.__name__, __import__("scipy").__version__)
)PY";

// User + system CPU seconds of this process (all threads).
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int CpuMain(int log2n, const std::string& python, const std::string& only) {
  const int64_t n = int64_t{1} << log2n;
  const std::string dir = "/tmp/fresnel_bench_interp_cpu";
  if (std::system(("mkdir -p " + dir).c_str()) != 0) return 1;
  {
    std::ofstream py(dir + "/scipy_bench.py");
    py << kScipyScript;
  }
  const Device cpu = Device::Cpu();
  struct CpuCase {
    std::string name;
    int up, down;
    int64_t taps;  // 0: resample_poly with its default filter
  };
  const std::vector<CpuCase> cases = {
      {"a: upfirdn up4 64t", 4, 1, 64},
      {"b: resample_poly 160/147", 160, 147, 0},
      {"long: upfirdn 3/2 1024t", 3, 2, 1024},
      {"long: upfirdn up2 256t", 2, 1, 256},
  };
  std::printf("CPU back end (%u hardware threads) against scipy.signal (single-threaded), "
              "2^%d float32 samples, median of 3 after one warm-up\n",
              std::thread::hardware_concurrency(), log2n);
  std::printf("%-28s %10s %10s %12s %9s | %9s %9s %9s | %10s\n", "case", "fresnel ms",
              "scipy ms", "MFMA/s", "speed-up", "f cpu ms", "s cpu ms", "cpu ratio", "max |dy|");
  const std::vector<float> xv = RandomFloats(static_cast<size_t>(n), 5);
  HostArray x(DType::kFloat32, {n});
  std::memcpy(x.raw(), xv.data(), xv.size() * 4);
  {
    std::ofstream f(dir + "/x.f32", std::ios::binary);
    f.write(reinterpret_cast<const char*>(xv.data()), static_cast<std::streamsize>(xv.size() * 4));
  }
  std::string scipy_version;
  for (const CpuCase& c : cases) {
    if (c.name.rfind(only, 0) != 0) continue;
    std::vector<double> taps;
    std::vector<float> taps_f;
    if (c.taps > 0) {
      taps_f = RandomFloats(static_cast<size_t>(c.taps), 99 + c.taps);
      taps.assign(taps_f.begin(), taps_f.end());
    }
    {
      std::ofstream f(dir + "/h.f32", std::ios::binary);
      f.write(reinterpret_cast<const char*>(taps_f.data()),
              static_cast<std::streamsize>(taps_f.size() * 4));
    }
    auto call = [&]() -> absl::StatusOr<HostArray> {
      if (c.taps > 0) {
        UpfirdnOptions o;
        o.up = c.up;
        o.down = c.down;
        return Upfirdn(cpu, taps, x, o);
      }
      ResamplePolyOptions o;
      o.up = c.up;
      o.down = c.down;
      return ResamplePoly(cpu, x, o);
    };
    absl::StatusOr<HostArray> y = call();
    BENCH_CHECK(y.status());
    std::vector<double> t;
    const double cpu0 = ProcessCpuSeconds();
    for (int i = 0; i < 3; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      BENCH_CHECK(call().status());
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double ours_cpu = (ProcessCpuSeconds() - cpu0) / 3;
    const double ours = Median(t);
    // Useful FMAs: outputs x taps per phase.
    const int64_t taps_len = c.taps > 0 ? c.taps : -1;
    double fmas = 0;
    if (taps_len > 0) {
      fmas = static_cast<double>(y->size()) * ((taps_len + c.up - 1) / c.up);
    } else {
      ResamplePolyOptions o;
      o.up = c.up;
      o.down = c.down;
      auto d = internal::DesignResamplePoly(o, DType::kFloat32);
      BENCH_CHECK(d.status());
      fmas = static_cast<double>(y->size()) * d->filter.TapsPerPhase();
    }
    const std::string cmd = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 " + python + " " + dir +
                            "/scipy_bench.py " + dir + "/x.f32 " + dir + "/h.f32 " +
                            std::to_string(c.up) + " " + std::to_string(c.down) + " " +
                            (c.taps > 0 ? "upfirdn" : "resample") + " " + dir +
                            "/y.f32 2>/dev/null";
    double scipy_s = -1, scipy_cpu = 0;
    std::string line;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[256] = {0};
      if (std::fgets(buf, sizeof buf, p) != nullptr) line = buf;
      pclose(p);
      scipy_s = line.empty() ? -1 : std::atof(line.c_str());
      const size_t sp1 = line.find(' ');
      if (sp1 != std::string::npos) scipy_cpu = std::atof(line.c_str() + sp1 + 1);
    }
    if (scipy_s <= 0) {
      std::printf("%-28s %10.1f %10s %12.0f %9s %10s   scipy not available\n", c.name.c_str(),
                  ours * 1e3, "-", fmas / ours * 1e-6, "-", "-");
      continue;
    }
    const size_t sp = line.find(' ', line.find(' ') + 1);
    if (sp != std::string::npos) scipy_version = line.substr(sp + 1);
    // The largest difference to SciPy's float32 result (SciPy sums in float32, Fresnel's CPU
    // back end in double).
    std::vector<float> ys(static_cast<size_t>(y->size()));
    std::ifstream f(dir + "/y.f32", std::ios::binary);
    f.read(reinterpret_cast<char*>(ys.data()), static_cast<std::streamsize>(ys.size() * 4));
    double maxd = f ? 0 : -1;
    for (size_t i = 0; f && i < ys.size(); ++i) {
      maxd = std::max(maxd, std::abs(static_cast<double>(ys[i]) - y->data<float>()[i]));
    }
    std::printf("%-28s %10.1f %10.1f %12.0f %8.2fx | %9.1f %9.1f %8.2fx | %10.2e\n",
                c.name.c_str(), ours * 1e3, scipy_s * 1e3, fmas / ours * 1e-6, scipy_s / ours,
                ours_cpu * 1e3, scipy_cpu * 1e3, scipy_cpu / ours_cpu, maxd);
  }
  if (!scipy_version.empty()) std::printf("scipy: %s", scipy_version.c_str());
  std::printf("cpu ms: user + system CPU time per call (all threads); cpu ratio = scipy's / "
              "Fresnel's, i.e. work per call, independent of how busy the machine is\n");
  return 0;
}

int Main(int argc, char** argv) {
  bool json = false, e2e = true, cpu = false;
  int cpu_log2n = 22;
  std::string python = "python3", cpu_case, only;
  std::vector<std::string> variants;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json = true;
    else if (std::strcmp(argv[i], "--cpu") == 0) cpu = true;
    else if (std::strcmp(argv[i], "--python") == 0 && i + 1 < argc) python = argv[++i];
    else if (std::strcmp(argv[i], "--cpu-case") == 0 && i + 1 < argc) cpu_case = argv[++i];
    else if (std::strcmp(argv[i], "--cpu-log2n") == 0 && i + 1 < argc) cpu_log2n = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--no-e2e") == 0) e2e = false;
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (std::strcmp(argv[i], "--variants") == 0 && i + 1 < argc) {
      const std::string list = argv[++i];
      for (size_t a = 0; a <= list.size();) {
        size_t e = list.find(',', a);
        if (e == std::string::npos) e = list.size();
        const std::string v = list.substr(a, e - a);
        if (v == "all") {
          for (const char* n :
               {"block", "block_cs", "warp", "warp_cs", "bulk", "bulk_cs", "direct"}) {
            variants.push_back(n);
          }
        } else if (!v.empty()) {
          variants.push_back(v);
        }
        a = e + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--json] [--no-e2e] [--only PREFIX] [--variants all|V1,V2,...] | "
                   "--cpu "
                   "[--cpu-log2n N] [--cpu-case PREFIX] [--python PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  if (cpu) return CpuMain(cpu_log2n, python, cpu_case);
  if (GpuCount() == 0) {
    std::fprintf(stderr, "fresnel_bench_interp: no CUDA device visible\n");
    return 1;
  }
  auto props = GetGpuProperties(0);
  BENCH_CHECK(props.status());
  auto stream = GpuStream::Create(0);
  BENCH_CHECK(stream.status());
  auto pool = GpuMemPool::Create(0, int64_t{16} << 30);
  BENCH_CHECK(pool.status());
  Bench b(Device::Cuda(0, (*stream)->handle(), (*pool)->handle()), e2e, only);
  b.MeasureCopy();
  b.MeasureFmaPeak(props->multiprocessors);
  const double write_gbps = b.MeasureProbe(0);
  const double up_gbps = b.MeasureProbe(1);
  const double up_cs_gbps = b.MeasureProbe(2);

  std::vector<Row> rows;
  const int64_t n26 = int64_t{1} << 26, n20 = int64_t{1} << 20;

  // (a) float32, 2^26 samples, upfirdn up = 4, 64 taps; and the same filter forced onto the
  //     general kernels (the selector's measured reason).
  {
    Polyphase f{Taps(64), 4, 1};
    const int64_t out = UpfirdnOutputLength(n26, 64, 4, 1);
    Row r = b.Kernel("a: upfirdn up4 64t 2^26", f, 1, n26, 0, out, CudaKernel::kAuto);
    HostArray x = b.HostSignal(1, n26);
    UpfirdnOptions o;
    o.up = 4;
    b.EndToEnd(r, [&](StageTimes* t) { BENCH_CHECK(Upfirdn(b.device(), f.taps, x, o, t).status()); });
    rows.push_back(r);
    rows.push_back(b.Kernel("a: (forced)", f, 1, n26, 0, out, CudaKernel::kSmemTile));
    rows.push_back(b.Kernel("a: (forced)", f, 1, n26, 0, out, CudaKernel::kWarpPerOutput));
  }
  // (b) resample_poly 160/147, default filter (3201 taps + 17 leading zeros), 2^26 float32.
  {
    ResamplePolyOptions o;
    o.up = 160;
    o.down = 147;
    auto d = internal::DesignResamplePoly(o, DType::kFloat32);
    BENCH_CHECK(d.status());
    const int64_t out = ResamplePolyOutputLength(n26, 160, 147);
    internal::CudaPlanOptions def;
    Row r = b.Kernel("b: resample_poly 160/147 2^26", d->filter, 1, n26, d->skip, out, def,
                     true);
    HostArray x = b.HostSignal(1, n26);
    b.EndToEnd(r, [&](StageTimes* t) { BENCH_CHECK(ResamplePoly(b.device(), x, o, t).status()); });
    rows.push_back(r);
    // Output staging and copy-out: the whole tile copied out by the threads (sessions 5-8's
    // kernel), by bulk copies (stage 3), and staged in rounds (three blocks per SM); named so
    // that --only "b: resample_poly" runs them with the default row.
    const std::string staging = "b: resample_poly 160/147 (forced)";
    for (int stage : {1, 3, 2}) {
      rows.push_back(b.Kernel(staging, d->filter, 1, n26, d->skip, out,
                              PgOptions(0, 0, 0, 0, stage), stage != 2));
    }
    // The last, partial wave of tiles split by groups over many blocks (pg_tail 2: after the
    // whole tiles, 3: before them) and the input tile by one bulk copy (pg_bulk_in 2), with
    // either staging; all checked against the oracle.
    for (auto [stage, tail, bulk_in] : {std::tuple{1, 2, 1}, std::tuple{1, 3, 1},
                                        std::tuple{3, 2, 1}, std::tuple{3, 3, 1},
                                        std::tuple{1, 1, 2}, std::tuple{3, 1, 2},
                                        std::tuple{3, 2, 2}, std::tuple{3, 3, 2}}) {
      rows.push_back(b.Kernel(staging, d->filter, 1, n26, d->skip, out,
                              PgOptions(0, 0, 0, 0, stage, tail, bulk_in), true));
    }
    // The tail's cost: 2^26 samples make 7134 tiles of 64 periods, 27 waves of 264 blocks (two
    // per SM on 132 SMs) and 6 tiles; this signal makes 7128 tiles (27 whole waves on such a
    // device). The same kernels, per byte, with and without a partial last wave.
    {
      const int64_t n_even = (int64_t{7128} * 64 - 2) * 147;
      const int64_t out_even = ResamplePolyOutputLength(n_even, 160, 147);
      for (int stage : {1, 3}) {
        rows.push_back(b.Kernel("b: resample_poly 160/147 7128 tiles", d->filter, 1, n_even,
                                d->skip, out_even, PgOptions(0, 0, 0, 0, stage)));
      }
    }
    rows.push_back(b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, PgOptions(1)));
    // Two input tiles per block (the next tile's copies overlap the compute): R = 2 and R = 1,
    // checked against the oracle, and one tile explicitly.
    rows.push_back(
        b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, PgOptions(0, 0, 0, 2), true));
    rows.push_back(
        b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, PgOptions(0, 0, 1, 2), true));
    rows.push_back(b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, PgOptions(0, 0, 0, 1)));
    // R = 4: one tap load per 16 FMAs (R = 2: per 8), a tile twice as long (one block per SM).
    rows.push_back(
        b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, PgOptions(0, 0, 4), true));
    // The period not rotated: outputs from 11 (d->skip) are then not 16-byte aligned, and the
    // tile's outputs leave by 4-byte stores.
    {
      internal::CudaPlanOptions o = PgOptions(0);
      o.pg_rotate = 1;
      Row r = b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, o);
      r.kernel = "phase_groups/norot";
      rows.push_back(r);
    }
    // Round 1's kernel (de-interleaved tile), and R = 1 (half the tile, more blocks per SM),
    // next to the default (plain tile, R = 2).
    rows.push_back(b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, PgOptions(0, 1)));
    rows.push_back(b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out, PgOptions(0, 0, 1)));
    rows.push_back(b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out,
                            CudaKernel::kSmemTile));
    rows.push_back(b.Kernel("b: (forced)", d->filter, 1, n26, d->skip, out,
                            CudaKernel::kWarpPerOutput));
  }
  // (c) 64 channels x 2^20 float32.
  {
    Polyphase f{Taps(64), 4, 1};
    const int64_t out = UpfirdnOutputLength(n20, 64, 4, 1);
    Row r = b.Kernel("c: 64ch upfirdn up4 64t 2^20", f, 64, n20, 0, out, CudaKernel::kAuto);
    HostArray x = b.HostSignal(64, n20);
    UpfirdnOptions o;
    o.up = 4;
    b.EndToEnd(r, [&](StageTimes* t) { BENCH_CHECK(Upfirdn(b.device(), f.taps, x, o, t).status()); });
    rows.push_back(r);
  }
  {
    ResamplePolyOptions o;
    o.up = 160;
    o.down = 147;
    auto d = internal::DesignResamplePoly(o, DType::kFloat32);
    BENCH_CHECK(d.status());
    const int64_t out = ResamplePolyOutputLength(n20, 160, 147);
    Row r = b.Kernel("c: 64ch resample 160/147 2^20", d->filter, 64, n20, d->skip, out,
                     CudaKernel::kAuto);
    HostArray x = b.HostSignal(64, n20);
    b.EndToEnd(r, [&](StageTimes* t) { BENCH_CHECK(ResamplePoly(b.device(), x, o, t).status()); });
    rows.push_back(r);
    for (int stage : {1, 3}) {
      rows.push_back(b.Kernel("c: 64ch resample 160/147 2^20", d->filter, 64, n20, d->skip, out,
                              PgOptions(0, 0, 0, 0, stage)));
    }
    rows.push_back(b.Kernel("c: 64ch resample 160/147 2^20", d->filter, 64, n20, d->skip, out,
                            PgOptions(0, 0, 0, 2)));
    rows.push_back(b.Kernel("c: 64ch resample 160/147 2^20", d->filter, 64, n20, d->skip, out,
                            PgOptions(0, 0, 4)));
  }
  // Selector sweep: taps per phase P for up/down = 3/2, kSmemTile against kWarpPerOutput (does
  // one warp per output ever win for long filters?), and the fast path against kSmemTile for
  // other up values.
  const int64_t n22 = int64_t{1} << 22, n24 = int64_t{1} << 24;
  // Long filters (taps per phase >= 64): the issue's 3/2 x 1024 taps and up 2 x 256 taps.
  for (auto [up, down, l] : {std::tuple{3, 2, 1024}, std::tuple{2, 1, 256}}) {
    Polyphase f{Taps(l), up, down};
    const int64_t out = UpfirdnOutputLength(n22, l, up, down);
    const std::string name = absl::StrCat("long: ", up, "/", down, " ", l, "t 2^22");
    internal::CudaPlanOptions def;
    // The default (the selector's choice), the FFMA kernel and the 3xTF32 tensor-core GEMM
    // with each chunk size, all checked against the CPU oracle.
    rows.push_back(b.Kernel(name, f, 1, n22, 0, out, def, true));
    rows.push_back(b.Kernel(name, f, 1, n22, 0, out, PgOptions(0), true));
    for (int chunk : kTcChunks) {
      rows.push_back(b.Kernel(name, f, 1, n22, 0, out, TcOptions(chunk), true));
    }
    // 3/2 (three n8 tiles): the kernel compiled for three blocks per SM, and explicitly not.
    for (int mb : {1, 3}) {
      for (int chunk : {2, 4, 8}) {
        rows.push_back(b.Kernel(name, f, 1, n22, 0, out, TcOptions(chunk, mb), up == 3));
      }
    }
    rows.push_back(b.Kernel(name, f, 1, n22, 0, out, PgOptions(0, 0, 0, 2)));
    rows.push_back(b.Kernel(name, f, 1, n22, 0, out, PgOptions(1)));
    {
      // The de-interleaved band loop step by step (the row-wrap test per step), as before
      // the row blocks.
      internal::CudaPlanOptions o = PgOptions(0);
      o.pg_row_blocks = 1;
      Row r = b.Kernel(name, f, 1, n22, 0, out, o);
      r.kernel = "phase_groups/norows";
      rows.push_back(r);
    }
    for (CudaKernel k : {CudaKernel::kSmemTile, CudaKernel::kWarpPerOutput}) {
      rows.push_back(b.Kernel(name, f, 1, n22, 0, out, k));
    }
  }
  for (int64_t p : {8, 64, 256, 1024, 2048}) {
    Polyphase f{Taps(3 * p), 3, 2};
    const int64_t out = UpfirdnOutputLength(n22, 3 * p, 3, 2);
    const std::string name = absl::StrCat("sweep: 3/2 P=", p, " 2^22");
    if (CudaPolyphase::Supports(CudaKernel::kPhaseGroups, 3, 2, p, DType::kFloat32)) {
      rows.push_back(b.Kernel(name, f, 1, n22, 0, out, PgOptions(0), p >= 64));
    }
    if (CudaPolyphase::Supports(CudaKernel::kTensorTf32, 3, 2, p, DType::kFloat32)) {
      for (int chunk : kTcChunks) {
        rows.push_back(b.Kernel(name, f, 1, n22, 0, out, TcOptions(chunk), true));
      }
      for (int chunk : {2, 4, 8}) {
        rows.push_back(b.Kernel(name, f, 1, n22, 0, out, TcOptions(chunk, 3), true));
      }
    }
    for (CudaKernel k : {CudaKernel::kSmemTile, CudaKernel::kWarpPerOutput}) {
      if (!CudaPolyphase::Supports(k, 3, 2, p, DType::kFloat32)) continue;
      rows.push_back(b.Kernel(name, f, 1, n22, 0, out, k));
    }
    if (p < 48) {  // short bands: R = 1 against the default R = 2
      rows.push_back(b.Kernel(absl::StrCat("sweep: 3/2 P=", p, " 2^22"), f, 1, n22, 0, out,
                              PgOptions(0, 0, 1)));
    }
  }
  for (int up : {1, 2, 3, 8}) {
    Polyphase f{Taps(16 * up), up, 1};
    const int64_t out = UpfirdnOutputLength(n24, 16 * up, up, 1);
    for (CudaKernel k : {CudaKernel::kRegisterBlocked, CudaKernel::kSmemTile}) {
      rows.push_back(b.Kernel(absl::StrCat("sweep: up", up, " P=16 2^24"), f, 1, n24, 0, out, k));
    }
  }
  // kRegisterBlocked store variants (same bits, different store paths): "name[:blocks per SM]".
  for (const std::string& v : variants) {
    internal::CudaPlanOptions o;
    o.kernel = CudaKernel::kRegisterBlocked;
    const size_t colon = v.find(':');
    o.rb_store = v.substr(0, colon);
    if (colon != std::string::npos) o.rb_max_blocks_per_sm = std::atoi(v.c_str() + colon + 1);
    {
      Polyphase f{Taps(64), 4, 1};
      const int64_t out = UpfirdnOutputLength(n26, 64, 4, 1);
      Row r = b.Kernel("a: upfirdn up4 64t 2^26", f, 1, n26, 0, out, o);
      r.kernel = "rb/" + v;
      rows.push_back(r);
    }
    for (int up : {1, 2, 3, 8}) {
      Polyphase f{Taps(16 * up), up, 1};
      const int64_t out = UpfirdnOutputLength(n24, 16 * up, up, 1);
      Row r = b.Kernel(absl::StrCat("sweep: up", up, " P=16 2^24"), f, 1, n24, 0, out, o);
      r.kernel = "rb/" + v;
      rows.push_back(r);
    }
  }
  if (json) {
    PrintJson(rows, b.copy_gbps(), *props);
    std::fprintf(stderr, "ceilings (GB/s): write_only %.1f read_write_1_4 %.1f cs %.1f\n",
                 write_gbps, up_gbps, up_cs_gbps);
  } else {
    PrintTable(rows, b.copy_gbps(), *props);
    std::printf("FP32 FMA peak: %d SMs x 128 x %.0f MHz = %.1f TFMA/s (%.1f TFLOP/s)\n",
                props->multiprocessors, b.clock_mhz(), b.fma_peak() * 1e-12,
                2e-3 * b.fma_peak() * 1e-9);
    std::printf("ceilings: write-only 1 GiB float4 %.0f GB/s (%.1f%% of copy); read 256 MiB + "
                "write 1 GiB (1:4) %.0f GB/s (%.1f%%), with streaming stores %.0f GB/s (%.1f%%)\n",
                write_gbps, 100.0 * write_gbps / b.copy_gbps(), up_gbps,
                100.0 * up_gbps / b.copy_gbps(), up_cs_gbps, 100.0 * up_cs_gbps / b.copy_gbps());
  }
  return 0;
}

}  // namespace
}  // namespace fresnel::interp

int main(int argc, char** argv) { return fresnel::interp::Main(argc, argv); }
