// The public window primitive (fresnel/interp/window.h) and UpfirdnInto's IntoOptions: a call cut
// into windows at output boundaries that fall between samples gives the one-shot result bit for
// bit (CPU and CUDA), the overlapped CUDA pipeline too, and so do x / y in device memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(FRESNEL_WITH_CUDA)
#include <cuda_runtime.h>
#endif

#include "fresnel/core/gpu.h"
#include "fresnel/interp/interp.h"
#include "fresnel/interp/into.h"
#include "fresnel/interp/window.h"
#include "interp_test_util.h"
#include "support/test_support.h"

namespace fresnel::interp {
namespace {

using fresnel::testing::RandomArray;
using fresnel::testing::SkipWithoutGpu;
using fresnel::testing::TestGpu;

std::vector<double> Taps(int64_t l, uint64_t seed) {
  return testing::ToDoubles(RandomArray(DType::kFloat64, {l}, seed));
}

// One call: upfirdn (taps > 0) or resample_poly (taps == 0: the designed filter).
struct Case {
  DType dtype;
  int64_t channels, n;
  int up, down;
  int64_t taps;
  double cval;
};

std::vector<Case> Cases() {
  return {{DType::kFloat32, 1, 20011, 4, 1, 64, 0.0},   // the filter
          {DType::kFloat32, 3, 4099, 3, 2, 17, 0.5},
          {DType::kFloat64, 2, 3001, 2, 3, 31, 0.0},
          {DType::kComplex64, 1, 2777, 5, 1, 12, -1.0},
          {DType::kComplex128, 2, 1301, 1, 4, 9, 0.0},
          {DType::kFloat32, 1, 9001, 3, 2, 0, 0.0},      // resample_poly 3/2, designed
          {DType::kFloat64, 2, 5003, 160, 147, 0, 0.25}};  // resample_poly 160/147
}

std::vector<int64_t> Shape(const Case& c) {
  return c.channels == 1 ? std::vector<int64_t>{c.n} : std::vector<int64_t>{c.channels, c.n};
}

absl::StatusOr<WindowFilter> FilterOf(const Case& c) {
  if (c.taps > 0) {
    UpfirdnOptions o;
    o.up = c.up;
    o.down = c.down;
    o.cval = c.cval;
    return WindowFilter::ForUpfirdn(Taps(c.taps, 7), c.dtype, o);
  }
  ResamplePolyOptions o;
  o.up = c.up;
  o.down = c.down;
  o.cval = c.cval;
  return WindowFilter::ForResamplePoly(c.dtype, o);
}

// The one-shot result through UpfirdnInto / ResamplePolyInto with `into`.
std::string OneShot(const Device& device, const Case& c, const HostArray& x,
                    const IntoOptions& into = {}, const void* x_data = nullptr,
                    void* y_data = nullptr) {
  const HostSignalRef ref{x.dtype(), x.shape(), x_data != nullptr ? x_data : x.raw()};
  absl::StatusOr<WindowFilter> f = FilterOf(c);
  REQUIRE(f.ok());
  const int64_t out = f->OutputLength(c.n);
  std::string y(static_cast<size_t>(c.channels * out) * DTypeSize(c.dtype), '\x5a');
  void* dst = y_data != nullptr ? y_data : y.data();
  absl::Status st;
  if (c.taps > 0) {
    UpfirdnOptions o;
    o.up = c.up;
    o.down = c.down;
    o.cval = c.cval;
    st = UpfirdnInto(device, Taps(c.taps, 7), ref, o, dst, static_cast<int64_t>(y.size()),
                     nullptr, into);
  } else {
    ResamplePolyOptions o;
    o.up = c.up;
    o.down = c.down;
    o.cval = c.cval;
    st = ResamplePolyInto(device, ref, o, dst, static_cast<int64_t>(y.size()), nullptr, into);
  }
  INFO(st.ToString());
  REQUIRE(st.ok());
  return y;
}

// The call with x filled only as IntoOptions::x_prefix_ready asks (garbage before): the
// one-shot bits, the counts never shrink, and the last covers what the call read.
std::string Lazily(const Device& device, const Case& c, const HostArray& x, IntoOptions into) {
  std::string lazy(x.nbytes(), '\xff');  // NaN bytes: read before being filled shows
  std::vector<int64_t> asked;
  into.x_prefix_ready = [&](int64_t bytes) {
    asked.push_back(bytes);
    std::memcpy(lazy.data(), x.raw(), static_cast<size_t>(bytes));
  };
  std::string y = OneShot(device, c, x, into, lazy.data());
  REQUIRE_FALSE(asked.empty());
  CHECK(std::is_sorted(asked.begin(), asked.end()));
  CHECK(asked.back() <= static_cast<int64_t>(x.nbytes()));
  return y;
}

// The call as windows of random sizes (boundaries anywhere, never aligned to up or down), each
// given exactly InputsOf(its outputs) of x.
std::string Windowed(const Device& device, const Case& c, const HostArray& x, uint64_t seed) {
  absl::StatusOr<WindowFilter> f = FilterOf(c);
  REQUIRE(f.ok());
  const int64_t out = f->OutputLength(c.n);
  const size_t es = DTypeSize(c.dtype);
  std::string y(static_cast<size_t>(c.channels * out) * es, '\x5a');
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> step(1, std::max<int64_t>(2, out / 5));
  for (int64_t j = 0; j < out;) {
    const int64_t count = std::min(out - j, step(rng));
    const IndexRange in = f->InputsOf(c.n, IndexRange{j, j + count});
    WindowArgs a;
    a.channels = c.channels;
    a.x = static_cast<const char*>(x.raw()) + static_cast<size_t>(in.first) * es;
    a.x_stride = c.n;
    a.x_first = in.first;
    a.x_len = in.size();
    a.y = y.data() + static_cast<size_t>(j) * es;
    a.y_stride = out;
    a.out_first = j;
    a.out_count = count;
    absl::Status st = WindowInto(device, *f, a);
    INFO(st.ToString());
    REQUIRE(st.ok());
    j += count;
  }
  return y;
}

TEST_CASE("windows of a call at boundaries between samples give the one-shot bits (CPU)",
          "[interp][window]") {
  const Device cpu = Device::Cpu();
  for (const Case& c : Cases()) {
    INFO(DTypeName(c.dtype) << " " << c.channels << "x" << c.n << " up " << c.up << " down "
                            << c.down << " taps " << c.taps);
    HostArray x = RandomArray(c.dtype, Shape(c), 11);
    const std::string want = OneShot(cpu, c, x);
    CHECK(Windowed(cpu, c, x, 1) == want);
    CHECK(Windowed(cpu, c, x, 2) == want);
    // overlap_chunk_bytes is a CUDA option: the CPU ignores it.
    IntoOptions chunked;
    chunked.overlap_chunk_bytes = 4096;
    CHECK(OneShot(cpu, c, x, chunked) == want);
    CHECK(Lazily(cpu, c, x, chunked) == want);
  }
}

TEST_CASE("InputsOf is the samples the outputs read, clamped to the signal", "[interp][window]") {
  UpfirdnOptions o;
  o.up = 4;
  absl::StatusOr<WindowFilter> f = WindowFilter::ForUpfirdn(Taps(64, 1), DType::kFloat32, o);
  REQUIRE(f.ok());
  // 16 taps per phase; output j reads x[floor(j / 4) - 15 .. floor(j / 4)].
  IndexRange r = f->InputsOf(1000, IndexRange{400, 404});
  CHECK(r.first == 85);
  CHECK(r.end == 101);
  r = f->InputsOf(1000, IndexRange{0, 3});
  CHECK(r.first == 0);
  CHECK(r.end == 1);
  r = f->InputsOf(1000, IndexRange{3990, 4060});  // the tail reads the last samples only
  CHECK(r.first == 982);
  CHECK(r.end == 1000);
  CHECK(f->OutputLength(1000) == UpfirdnOutputLength(1000, 64, 4, 1));
  UpfirdnOptions reflect;
  reflect.mode = PadMode::kReflect;
  CHECK(WindowFilter::ForUpfirdn(Taps(8, 1), DType::kFloat32, reflect).status().code() ==
        absl::StatusCode::kUnimplemented);
  UpfirdnOptions bad;
  bad.up = 0;
  CHECK(WindowFilter::ForUpfirdn(Taps(8, 1), DType::kFloat32, bad).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // Device memory needs a CUDA device.
  IntoOptions on_gpu;
  on_gpu.x_cuda_device = 0;
  HostArray x = RandomArray(DType::kFloat32, {100}, 3);
  std::string y(4096, '\0');
  absl::Status st = UpfirdnInto(Device::Cpu(), Taps(8, 1), {x.dtype(), x.shape(), x.raw()},
                                UpfirdnOptions{}, y.data(), 4096, nullptr, on_gpu);
  CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(st.message()).find("x:") == 0);
  CHECK(CudaWindow::Create(Device::Cpu(), *f).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("windows and the overlapped pipeline give the one-shot bits on the GPU",
          "[interp][window][gpu]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  for (const Case& c : Cases()) {
    INFO(DTypeName(c.dtype) << " " << c.channels << "x" << c.n << " up " << c.up << " down "
                            << c.down << " taps " << c.taps);
    HostArray x = RandomArray(c.dtype, Shape(c), 11);
    const std::string want = OneShot(gpu, c, x);
    CHECK(Windowed(gpu, c, x, 3) == want);
    // Chunks of 1024 outputs (the smallest the pipeline takes): many chunks, three streams.
    for (int64_t chunk_bytes : {int64_t{1}, int64_t{5000}, int64_t{1} << 16}) {
      IntoOptions chunked;
      chunked.overlap_chunk_bytes = chunk_bytes;
      INFO("overlap_chunk_bytes " << chunk_bytes);
      CHECK(OneShot(gpu, c, x, chunked) == want);
      CHECK(Lazily(gpu, c, x, chunked) == want);
    }
    // Pinned host buffers (the server's regions and staging buffers are).
    HostArray pinned_x = x;
    std::string y(want.size(), '\0');
    REQUIRE(PinHostMemory(pinned_x.raw(), static_cast<int64_t>(pinned_x.nbytes())).ok());
    REQUIRE(PinHostMemory(y.data(), static_cast<int64_t>(y.size())).ok());
    IntoOptions chunked;
    chunked.overlap_chunk_bytes = 8192;
    OneShot(gpu, c, pinned_x, chunked, nullptr, y.data());
    CHECK(y == want);
    UnpinHostMemory(y.data());
    UnpinHostMemory(pinned_x.raw());
#if defined(FRESNEL_WITH_CUDA)
    // x and y in device memory of the call's device: read and written in place; and at an
    // offset that is not 256-byte aligned (one D2D copy), and with host y.
    void* xd = nullptr;
    void* yd = nullptr;
    REQUIRE(cudaMalloc(&xd, x.nbytes() + 512) == cudaSuccess);
    REQUIRE(cudaMalloc(&yd, want.size() + 512) == cudaSuccess);
    for (size_t shift : {size_t{0}, size_t{16}}) {
      char* xs = static_cast<char*>(xd) + shift;
      char* ys = static_cast<char*>(yd) + shift;
      REQUIRE(cudaMemcpy(xs, x.raw(), x.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess);
      IntoOptions placed;
      placed.x_cuda_device = gpu.ordinal;
      placed.y_cuda_device = gpu.ordinal;
      OneShot(gpu, c, x, placed, xs, ys);
      std::string got(want.size(), '\0');
      REQUIRE(cudaMemcpy(got.data(), ys, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
      INFO("device x and y, shift " << shift);
      CHECK(got == want);
      IntoOptions x_only;
      x_only.x_cuda_device = gpu.ordinal;
      x_only.overlap_chunk_bytes = 4096;
      CHECK(OneShot(gpu, c, x, x_only, xs) == want);
      IntoOptions y_only;
      y_only.y_cuda_device = gpu.ordinal;
      y_only.overlap_chunk_bytes = 4096;
      REQUIRE(cudaMemset(ys, 0, want.size()) == cudaSuccess);
      OneShot(gpu, c, x, y_only, nullptr, ys);
      REQUIRE(cudaMemcpy(got.data(), ys, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECK(got == want);
    }
    cudaFree(xd);
    cudaFree(yd);
#endif
  }
}

}  // namespace
}  // namespace fresnel::interp
