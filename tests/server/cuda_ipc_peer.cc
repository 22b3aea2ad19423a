// The client side of CUDA IPC regions, as a process of its own (cudaIpcGetMemHandle's memory
// cannot be opened by the process that allocated it): allocates device memory, registers it with
// a fresneld (RegisterCudaRegion) and runs Upfirdn / ResamplePoly naming it.
//
//   cuda_ipc_peer check ADDRESS             results equal the gRPC path bit for bit, and the
//                                           errors of bad regions; exit 0 when all hold
//   cuda_ipc_peer bench ADDRESS LOG2N REPS  issue 10's case (upfirdn float32 2^LOG2N, up 4, 64
//                                           taps) with x and y in a POSIX shm region and in a
//                                           CUDA IPC region: a table of client latency and the
//                                           server's stages (medians)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/client/client.h"
#include "fresnel/client/shm.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel {
namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

void CheckStatus(const absl::Status& st, absl::StatusCode code, const std::string& text,
                 const std::string& what) {
  const bool ok = st.code() == code && st.message().find(text) != absl::string_view::npos;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAIL: %s: got %s (want code %d naming '%s')\n", what.c_str(),
                 st.ToString().c_str(), static_cast<int>(code), text.c_str());
  }
}

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "FAIL: %s: %s\n", #call, cudaGetErrorString(e_));           \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

HostArray RandomFloats(std::vector<int64_t> shape, uint32_t seed) {
  HostArray x(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) x.data<float>()[i] = u(rng);
  return x;
}

v1::NdArray Named(const HostArray& x, const std::string& region, int64_t offset) {
  return ShmArray(x.dtype(), x.shape(), region, offset);
}

v1::UpfirdnRequest UpfirdnReq(const HostArray& x, int up, int ntaps) {
  v1::UpfirdnRequest r;
  r.set_up(up);
  HostArray taps(DType::kFloat64, {ntaps});
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < ntaps; ++i) taps.data<double>()[i] = u(rng);
  ToProto(taps, r.mutable_taps());
  r.mutable_x()->set_dtype(ToProto(x.dtype()));
  for (int64_t d : x.shape()) r.mutable_x()->add_shape(d);
  r.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  return r;
}

std::string DeviceBytes(const void* p, size_t n) {
  std::string out(n, '\0');
  CUDA_OK(cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost));
  return out;
}

int64_t Round(int64_t n) { return (n + 4095) / 4096 * 4096; }

int RunCheck(Client* client) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{1000003}, std::vector<int64_t>{3, 100001}}) {
    const std::string label = shape.size() == 1 ? "1-D" : "3 rows";
    HostArray x = RandomFloats(shape, 11);
    v1::UpfirdnRequest req = UpfirdnReq(x, 4, 64);
    v1::UpfirdnRequest inline_req = req;
    ToProto(x, inline_req.mutable_x());
    auto want = client->Upfirdn(inline_req);
    if (!want.ok()) {
      Check(false, "inline Upfirdn: " + want.status().ToString());
      return 1;
    }
    const std::string& y_want = want->y().data();
    const int64_t x_bytes = static_cast<int64_t>(x.nbytes());
    const int64_t y_off = Round(x_bytes);
    const int64_t total = y_off + static_cast<int64_t>(y_want.size());
    char* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), total));
    CUDA_OK(cudaMemcpy(buf, x.raw(), x_bytes, cudaMemcpyHostToDevice));
    auto reg = RegisterCudaRegion(client, "ipc", buf, total);
    Check(reg.ok(), label + " RegisterCudaRegion: " + reg.status().ToString());
    if (!reg.ok()) return 1;
    Check(reg->region().cuda_device() >= 0, label + " the region is on a device");

    // x and y in the region.
    v1::UpfirdnRequest both = req;
    *both.mutable_x() = Named(x, "ipc", 0);
    both.mutable_y_shm()->set_region("ipc");
    both.mutable_y_shm()->set_offset_bytes(y_off);
    CUDA_OK(cudaMemset(buf + y_off, 0, y_want.size()));
    auto r = client->Upfirdn(both);
    Check(r.ok(), label + " Upfirdn x, y in the CUDA region: " + r.status().ToString());
    if (r.ok()) {
      Check(r->info().device().rfind("cuda", 0) == 0, label + " ran on " + r->info().device());
      Check(r->y().has_shm() && r->y().data().empty(), label + " y names the region");
      Check(DeviceBytes(buf + y_off, y_want.size()) == y_want,
            label + " x, y in the CUDA region == gRPC path bit for bit");
    }
    // x in the region, y inline.
    v1::UpfirdnRequest x_only = req;
    *x_only.mutable_x() = Named(x, "ipc", 0);
    r = client->Upfirdn(x_only);
    Check(r.ok() && r->y().data() == y_want, label + " x in the CUDA region, y inline: " +
                                                 r.status().ToString());
    // x inline, y in the region.
    v1::UpfirdnRequest y_only = inline_req;
    y_only.mutable_y_shm()->set_region("ipc");
    y_only.mutable_y_shm()->set_offset_bytes(y_off);
    CUDA_OK(cudaMemset(buf + y_off, 0, y_want.size()));
    r = client->Upfirdn(y_only);
    Check(r.ok() && DeviceBytes(buf + y_off, y_want.size()) == y_want,
          label + " x inline, y in the CUDA region: " + r.status().ToString());

    // ResamplePoly 160/147 (designed filter) the same way.
    v1::ResamplePolyRequest rp;
    rp.set_up(160);
    rp.set_down(147);
    rp.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
    v1::ResamplePolyRequest rp_inline = rp;
    ToProto(x, rp_inline.mutable_x());
    auto rp_want = client->ResamplePoly(rp_inline);
    Check(rp_want.ok(), label + " inline ResamplePoly: " + rp_want.status().ToString());
    if (rp_want.ok() && static_cast<int64_t>(rp_want->y().data().size()) <= total - y_off) {
      *rp.mutable_x() = Named(x, "ipc", 0);
      rp.mutable_y_shm()->set_region("ipc");
      rp.mutable_y_shm()->set_offset_bytes(y_off);
      auto got = client->ResamplePoly(rp);
      Check(got.ok() && DeviceBytes(buf + y_off, rp_want->y().data().size()) ==
                            rp_want->y().data(),
            label + " ResamplePoly in the CUDA region: " + got.status().ToString());
    }

    if (shape.size() == 1) {
      // Bounds, per field.
      v1::UpfirdnRequest past = both;
      past.mutable_x()->mutable_shm()->set_offset_bytes(total - 4);
      CheckStatus(client->Upfirdn(past).status(), absl::StatusCode::kInvalidArgument,
                  "x.shm.offset_bytes", "x past the region's end");
      past = both;
      past.mutable_y_shm()->set_offset_bytes(y_off + 8);
      CheckStatus(client->Upfirdn(past).status(), absl::StatusCode::kInvalidArgument,
                  "y_shm.offset_bytes", "y past the region's end");
      // Calls that read host memory only refuse a device region, naming it.
      v1::UpfirdnRequest reflect = x_only;
      reflect.set_mode(v1::PAD_REFLECT);
      CheckStatus(client->Upfirdn(reflect).status(), absl::StatusCode::kInvalidArgument,
                  "x.shm.region", "reflect-mode Upfirdn (the HostArray path) on device memory");
      v1::ResampleRequest fft;
      *fft.mutable_x() = Named(x, "ipc", 0);
      fft.set_num(1000);
      CheckStatus(client->Resample(fft).status(), absl::StatusCode::kInvalidArgument,
                  "x.shm.region", "Resample on device memory");
      // The other services read and write host memory only: an input or an output region in
      // device memory is refused, naming the field (docs/transport.md, "Which requests accept
      // it").
      v1::UnwrapRequest unwrap;
      *unwrap.mutable_phase() = Named(x, "ipc", 0);
      CheckStatus(client->Unwrap(unwrap).status(), absl::StatusCode::kInvalidArgument,
                  "phase.shm.region", "Unwrap's phase in device memory");
      v1::RenderRequest render;
      v1::HologramConfig* hc = render.mutable_config();
      hc->set_width(64);
      hc->set_height(48);
      hc->set_pitch_m(8e-6);
      hc->set_wavelength_m(532e-9);
      HostArray point(DType::kFloat64, {1, 4});
      const double p[4] = {0, 0, 0.05, 1};
      std::memcpy(point.raw(), p, sizeof(p));
      ToProto(point, render.mutable_points());
      render.mutable_out_shm()->set_region("ipc");
      CheckStatus(client->Render(render).status(), absl::StatusCode::kInvalidArgument,
                  "out_shm.region", "Render's outputs into device memory");
      // Registration errors.
      auto ipc = CudaIpcRegionOf(buf, total);
      Check(ipc.ok(), "CudaIpcRegionOf: " + ipc.status().ToString());
      if (ipc.ok()) {
        v1::RegisterRegionRequest big;
        big.set_name("big");
        big.set_size_bytes(total + (int64_t{1} << 30));
        *big.mutable_cuda_ipc() = *ipc;
        CheckStatus(client->RegisterRegion(big).status(), absl::StatusCode::kInvalidArgument,
                    "size_bytes", "a region larger than the allocation");
        v1::RegisterRegionRequest other = big;
        other.set_size_bytes(4096);
        std::string uuid = ipc->device_uuid();
        uuid[0] = static_cast<char>(uuid[0] ^ 0x55);
        other.mutable_cuda_ipc()->set_device_uuid(uuid);
        CheckStatus(client->RegisterRegion(other).status(),
                    absl::StatusCode::kFailedPrecondition, "cuda_ipc.device_uuid",
                    "a device the server does not have");
        v1::RegisterRegionRequest garbage = big;
        garbage.set_size_bytes(4096);
        std::string handle(64, '\0');
        std::mt19937 rng(3);
        for (char& c : handle) c = static_cast<char>(rng());
        garbage.mutable_cuda_ipc()->set_handle(handle);
        absl::Status st = client->RegisterRegion(garbage).status();
        Check(!st.ok() && st.message().find("cuda_ipc.handle") != absl::string_view::npos,
              "a malformed handle: " + st.ToString());
        std::fprintf(stderr, "malformed handle -> %s\n", st.ToString().c_str());
        garbage.mutable_cuda_ipc()->set_handle("short");
        CheckStatus(client->RegisterRegion(garbage).status(), absl::StatusCode::kInvalidArgument,
                    "cuda_ipc.handle", "a handle of 5 bytes");
      }
      auto host = RegisterCudaRegion(client, "host", x.raw(), 64);
      CheckStatus(host.status(), absl::StatusCode::kFailedPrecondition, "not CUDA device memory",
                  "a host pointer");
    }
    Check(client->UnregisterRegion("ipc").ok(), label + " UnregisterRegion");
    CheckStatus(client->Upfirdn(both).status(), absl::StatusCode::kNotFound, "x.shm.region",
                label + " after UnregisterRegion");
    CUDA_OK(cudaFree(buf));
  }
  std::fprintf(stderr, "%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}

struct Sample {
  double client_ms, total_ms, h2d_ms, compute_ms, d2h_ms;
  std::string device;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Print(const char* path, const std::vector<Sample>& s, double gbytes) {
  std::vector<double> c, t, h, k, d;
  for (const Sample& x : s) {
    c.push_back(x.client_ms);
    t.push_back(x.total_ms);
    h.push_back(x.h2d_ms);
    k.push_back(x.compute_ms);
    d.push_back(x.d2h_ms);
  }
  std::printf("| %-22s | %8.2f | %8.2f | %7.2f | %7.2f | %7.2f | %6.1f | %s |\n", path,
              Median(c), Median(t), Median(h), Median(k), Median(d), gbytes / (Median(c) * 1e-3),
              s.empty() ? "" : s.back().device.c_str());
}

template <class F>
std::vector<Sample> Time(int reps, F&& call) {
  std::vector<Sample> out;
  for (int i = 0; i < reps + 1; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<v1::InterpolationResponse> r = call();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) {
      std::fprintf(stderr, "FAIL: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    if (i == 0) continue;  // warm-up: first-touch of buffers, plan caches
    const v1::ExecutionInfo& e = r->info();
    out.push_back({ms, e.total_seconds() * 1e3, e.h2d_seconds() * 1e3, e.compute_seconds() * 1e3,
                   e.d2h_seconds() * 1e3, e.device()});
  }
  return out;
}

int RunBench(Client* client, int log2n, int reps) {
  const int64_t n = int64_t{1} << log2n;
  HostArray x = RandomFloats({n}, 7);
  v1::UpfirdnRequest req = UpfirdnReq(x, 4, 64);
  const int64_t x_bytes = static_cast<int64_t>(x.nbytes());
  const int64_t y_bytes = ((n - 1) * 4 + 64 - 1 + 1) * 4;
  const int64_t y_off = Round(x_bytes);
  const double gbytes = static_cast<double>(x_bytes + y_bytes) / 1e9;
  std::printf("upfirdn float32 n = 2^%d, up 4, 64 taps: x %.0f MiB, y %.0f MiB; %d reps "
              "(medians, ms; GB/s = (x + y) / client latency)\n\n",
              log2n, x_bytes / 1048576.0, y_bytes / 1048576.0, reps);
  std::printf("| path                   | client   | server   | h2d     | compute | d2h     | GB/s   | device |\n");
  std::printf("| ---------------------- | -------- | -------- | ------- | ------- | ------- | ------ | ------ |\n");

  if (std::getenv("PEER_INLINE") != nullptr) {  // x and y inline (the server's staging buffers)
    v1::UpfirdnRequest inline_req = req;
    ToProto(x, inline_req.mutable_x());
    std::vector<Sample> in = Time(std::min(reps, 3), [&] { return client->Upfirdn(inline_req); });
    Print("inline x, y (staging)", in, gbytes);
  }
  auto region = SharedRegion::Create(client, "bench-shm", y_off + y_bytes);
  if (!region.ok()) {
    std::fprintf(stderr, "FAIL: SharedRegion: %s\n", region.status().ToString().c_str());
    return 1;
  }
  if (!(*region)->Write(x, 0).ok()) return 1;
  std::vector<Sample> shm = Time(reps, [&] { return client->Upfirdn(req, **region, 0, y_off); });
  Print("POSIX shm x, y (pinned)", shm, gbytes);

  char* buf = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), y_off + y_bytes));
  CUDA_OK(cudaMemcpy(buf, x.raw(), x_bytes, cudaMemcpyHostToDevice));
  auto reg = RegisterCudaRegion(client, "bench-ipc", buf, y_off + y_bytes);
  if (!reg.ok()) {
    std::fprintf(stderr, "FAIL: RegisterCudaRegion: %s\n", reg.status().ToString().c_str());
    return 1;
  }
  v1::UpfirdnRequest ipc = req;
  *ipc.mutable_x() = Named(x, "bench-ipc", 0);
  ipc.mutable_y_shm()->set_region("bench-ipc");
  ipc.mutable_y_shm()->set_offset_bytes(y_off);
  std::vector<Sample> dev = Time(reps, [&] { return client->Upfirdn(ipc); });
  Print("CUDA IPC x, y", dev, gbytes);
  v1::UpfirdnRequest ipc_x = req;
  *ipc_x.mutable_x() = Named(x, "bench-ipc", 0);
  ipc_x.mutable_y_shm()->set_region("bench-shm");
  ipc_x.mutable_y_shm()->set_offset_bytes(y_off);
  std::vector<Sample> mixed = Time(reps, [&] { return client->Upfirdn(ipc_x); });
  Print("CUDA IPC x, shm y", mixed, gbytes);

  const std::string via_ipc = DeviceBytes(buf + y_off, y_bytes);
  const bool same = std::memcmp(via_ipc.data(), static_cast<char*>((*region)->data()) + y_off,
                                y_bytes) == 0;
  std::printf("\ny through CUDA IPC == y through POSIX shm, bit for bit: %s\n",
              same ? "yes" : "NO");
  (void)client->UnregisterRegion("bench-ipc");
  CUDA_OK(cudaFree(buf));
  return same ? 0 : 1;
}

}  // namespace
}  // namespace fresnel

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: cuda_ipc_peer check|bench ADDRESS [LOG2N REPS]\n");
    return 2;
  }
  const std::string mode = argv[1];
  fresnel::ClientOptions options;
  options.address = argv[2];
  options.connect_timeout_s = 30;
  options.max_message_bytes = int64_t{1536} << 20;  // the inline bench row: 1 GiB of y
  auto client = fresnel::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "FAIL: connect: %s\n", client.status().ToString().c_str());
    return 2;
  }
  CUDA_OK(cudaSetDevice(0));
  if (mode == "check") return fresnel::RunCheck(client->get());
  if (mode == "bench" && argc >= 5) {
    return fresnel::RunBench(client->get(), std::atoi(argv[3]), std::atoi(argv[4]));
  }
  std::fprintf(stderr, "usage: cuda_ipc_peer check|bench ADDRESS [LOG2N REPS]\n");
  return 2;
}
