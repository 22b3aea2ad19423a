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
//   fresnel_bench_interp [--json] [--no-e2e] [--variants all|V1,V2,...]
//
// --variants also times kRegisterBlocked's store variants (FRESNEL_INTERP_RB_STORE values, e.g.
// bulk or warp:3; interp_cuda.cu) on case (a) and the up sweep.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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
  // End to end (0 when not measured).
  double e2e_s = 0, h2d_s = 0, compute_s = 0, d2h_s = 0;
};

class Bench {
 public:
  Bench(Device device, bool e2e) : device_(device), e2e_(e2e) {}

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
    Row r;
    r.name = name;
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
    auto plan = CudaPolyphase::Create(device_, f, DType::kFloat32, kernel);
    BENCH_CHECK(plan.status());
    r.kernel = internal::CudaKernelName(plan->kernel());
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
    r.gbps = (r.in_bytes + r.out_bytes) / r.kernel_s / 1e9;
    r.pct_copy = 100.0 * r.gbps / copy_gbps_;
    return r;
  }

  // The host-level call on pageable host arrays: median of 3 after one warm-up.
  template <class Call>
  void EndToEnd(Row& r, Call call) {
    if (!e2e_) return;
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
  double copy_gbps_ = 0;
};

std::vector<double> Taps(int64_t l) {
  std::vector<float> r = RandomFloats(static_cast<size_t>(l), 99 + l);
  return std::vector<double>(r.begin(), r.end());
}

void PrintTable(const std::vector<Row>& rows, double copy_gbps, const GpuProperties& p) {
  std::printf("device: %s (%d SMs)   D2D copy bandwidth (read + write): %.0f GB/s\n",
              p.name.c_str(), p.multiprocessors, copy_gbps);
  std::printf("%-34s %-18s %9s %9s %10s %8s %7s | %9s %8s %8s %8s\n", "case", "kernel",
              "in MiB", "out MiB", "kernel ms", "GB/s", "%copy", "e2e ms", "h2d ms", "gpu ms",
              "d2h ms");
  for (const Row& r : rows) {
    std::printf("%-34s %-18s %9.1f %9.1f %10.4f %8.0f %6.1f%% |", r.name.c_str(),
                r.kernel.c_str(), r.in_bytes / 1048576.0, r.out_bytes / 1048576.0,
                r.kernel_s * 1e3, r.gbps, r.pct_copy);
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
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf(
        "  {\"case\": \"%s\", \"kernel\": \"%s\", \"channels\": %lld, \"n\": %lld, "
        "\"out\": %lld, \"in_bytes\": %.0f, \"out_bytes\": %.0f, \"kernel_s\": %.6e, "
        "\"gbps\": %.1f, \"pct_copy\": %.2f, \"e2e_s\": %.6e, \"h2d_s\": %.6e, "
        "\"compute_s\": %.6e, \"d2h_s\": %.6e}%s\n",
        r.name.c_str(), r.kernel.c_str(), static_cast<long long>(r.channels),
        static_cast<long long>(r.n), static_cast<long long>(r.out), r.in_bytes, r.out_bytes,
        r.kernel_s, r.gbps, r.pct_copy, r.e2e_s, r.h2d_s, r.compute_s, r.d2h_s,
        i + 1 < rows.size() ? "," : "");
  }
  std::printf("]}\n");
}

int Main(int argc, char** argv) {
  bool json = false, e2e = true;
  std::vector<std::string> variants;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json = true;
    else if (std::strcmp(argv[i], "--no-e2e") == 0) e2e = false;
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
      std::fprintf(stderr, "usage: %s [--json] [--no-e2e] [--variants all|V1,V2,...]\n",
                   argv[0]);
      return 2;
    }
  }
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
  Bench b(Device::Cuda(0, (*stream)->handle(), (*pool)->handle()), e2e);
  b.MeasureCopy();
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
    Row r = b.Kernel("b: resample_poly 160/147 2^26", d->filter, 1, n26, d->skip, out,
                     CudaKernel::kAuto);
    HostArray x = b.HostSignal(1, n26);
    b.EndToEnd(r, [&](StageTimes* t) { BENCH_CHECK(ResamplePoly(b.device(), x, o, t).status()); });
    rows.push_back(r);
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
  }
  // Selector sweep: taps per phase P for up/down = 3/2, kSmemTile against kWarpPerOutput (does
  // one warp per output ever win for long filters?), and the fast path against kSmemTile for
  // other up values.
  const int64_t n22 = int64_t{1} << 22, n24 = int64_t{1} << 24;
  for (int64_t p : {8, 64, 256, 1024, 2048}) {
    Polyphase f{Taps(3 * p), 3, 2};
    const int64_t out = UpfirdnOutputLength(n22, 3 * p, 3, 2);
    for (CudaKernel k : {CudaKernel::kSmemTile, CudaKernel::kWarpPerOutput}) {
      rows.push_back(b.Kernel(absl::StrCat("sweep: 3/2 P=", p, " 2^22"), f, 1, n22, 0, out, k));
    }
  }
  for (int up : {1, 2, 3, 8}) {
    Polyphase f{Taps(16 * up), up, 1};
    const int64_t out = UpfirdnOutputLength(n24, 16 * up, up, 1);
    for (CudaKernel k : {CudaKernel::kRegisterBlocked, CudaKernel::kSmemTile}) {
      rows.push_back(b.Kernel(absl::StrCat("sweep: up", up, " P=16 2^24"), f, 1, n24, 0, out, k));
    }
  }
  // kRegisterBlocked store variants (same bits, different store paths).
  for (const std::string& v : variants) {
    setenv("FRESNEL_INTERP_RB_STORE", v.c_str(), 1);
    {
      Polyphase f{Taps(64), 4, 1};
      const int64_t out = UpfirdnOutputLength(n26, 64, 4, 1);
      Row r = b.Kernel("a: upfirdn up4 64t 2^26", f, 1, n26, 0, out, CudaKernel::kRegisterBlocked);
      r.kernel = "rb/" + v;
      rows.push_back(r);
    }
    for (int up : {1, 2, 3, 8}) {
      Polyphase f{Taps(16 * up), up, 1};
      const int64_t out = UpfirdnOutputLength(n24, 16 * up, up, 1);
      Row r = b.Kernel(absl::StrCat("sweep: up", up, " P=16 2^24"), f, 1, n24, 0, out,
                       CudaKernel::kRegisterBlocked);
      r.kernel = "rb/" + v;
      rows.push_back(r);
    }
    unsetenv("FRESNEL_INTERP_RB_STORE");
  }
  if (json) {
    PrintJson(rows, b.copy_gbps(), *props);
    std::fprintf(stderr, "ceilings (GB/s): write_only %.1f read_write_1_4 %.1f cs %.1f\n",
                 write_gbps, up_gbps, up_cs_gbps);
  } else {
    PrintTable(rows, b.copy_gbps(), *props);
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
