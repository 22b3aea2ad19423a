// `fresnel bench`: a closed-loop load generator in the spirit of Triton's perf_analyzer. Each of
// `concurrency` workers sends one request, waits for the answer, and sends the next, over one
// shared channel. Reports client-observed latency percentiles and throughput, and compares the
// mean client latency with the server's own accounting (ExecutionInfo): the difference is the
// cost of the RPC itself (serialisation, transport, gRPC queues).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench_work.h"
#include "commands.h"
#include "fuse_cmd.h"
#include "format.h"
#include "fresnel/client/shm.h"
#include "fresnel/interp/interp.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel::cli {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Gcd(int64_t a, int64_t b) { return b == 0 ? a : Gcd(b, a % b); }

// A Hamming-windowed sinc low-pass with cutoff `cutoff` (relative to Nyquist), scaled to a DC
// gain of `gain`: close to scipy.signal.firwin(numtaps, cutoff) * gain. Benchmarks only need a
// filter of the right length, not SciPy's exact taps.
std::vector<double> WindowedSinc(int numtaps, double cutoff, double gain) {
  std::vector<double> h(static_cast<size_t>(numtaps));
  const double mid = (numtaps - 1) / 2.0;
  double sum = 0;
  for (int i = 0; i < numtaps; ++i) {
    const double t = cutoff * (i - mid);
    const double sinc = t == 0 ? 1.0 : std::sin(M_PI * t) / (M_PI * t);
    const double window = numtaps > 1 ? 0.54 - 0.46 * std::cos(2 * M_PI * i / (numtaps - 1)) : 1;
    h[i] = cutoff * sinc * window;
    sum += h[i];
  }
  for (double& v : h) v *= gain / sum;
  return h;
}

HostArray RandomSignal(DType dtype, int64_t channels, int64_t samples) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> u(-1, 1);
  HostArray x(dtype, {channels, samples});
  const int64_t n = x.size();
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kFloat64: x.data<double>()[i] = u(rng); break;
      case DType::kComplex64: {
        const float re = static_cast<float>(u(rng));
        const float im = static_cast<float>(u(rng));
        x.data<std::complex<float>>()[i] = {re, im};
        break;
      }
      default: x.data<float>()[i] = static_cast<float>(u(rng)); break;
    }
  }
  return x;
}

// x as a request names it in a region: dtype and shape, no bytes.
v1::NdArray ArrayRef(const HostArray& x) {
  v1::NdArray a;
  a.set_dtype(ToProto(x.dtype()));
  for (int64_t d : x.shape()) a.add_shape(d);
  return a;
}

// One benchmark request, built once and sent by every worker.
class BenchRequest {
 public:
  explicit BenchRequest(const BenchOptions& o) : o_(o) {
    const DType dtype = o.dtype == "float64"     ? DType::kFloat64
                        : o.dtype == "complex64" ? DType::kComplex64
                                                 : DType::kFloat32;
    x_ = RandomSignal(dtype, o.channels, o.samples);
    const v1::DeviceKind device = DeviceKindFromFlag(o.device);
    const int64_t g = Gcd(o.up, o.down);
    const double cutoff = 1.0 / static_cast<double>(std::max(o.up / g, o.down / g));
    if (o.op == "upfirdn") {
      upfirdn_.set_up(o.up);
      upfirdn_.set_down(o.down);
      upfirdn_.mutable_device()->set_kind(device);
      v1::FirwinDesign* d = upfirdn_.mutable_design();
      d->set_numtaps(o.taps > 0 ? o.taps
                                : static_cast<int>(interp::ResamplePolyDefaultNumtaps(o.up, o.down)));
      d->set_cutoff(cutoff);
      d->set_window(v1::KAISER);
      d->set_gain(o.up);
      upfirdn_ref_ = upfirdn_;
      *upfirdn_ref_.mutable_x() = ArrayRef(x_);
      ToProto(x_, upfirdn_.mutable_x());
    } else {
      resample_.set_up(o.up);
      resample_.set_down(o.down);
      resample_.mutable_device()->set_kind(device);
      if (o.taps > 0) {
        const std::vector<double> taps = WindowedSinc(o.taps, cutoff, o.up);
        HostArray t(DType::kFloat64, {o.taps});
        std::copy(taps.begin(), taps.end(), t.data<double>());
        ToProto(t, resample_.mutable_taps());
      }
      if (o.op == "stream") {
        *config_.mutable_resample_poly() = resample_;
      } else {
        resample_ref_ = resample_;
        *resample_ref_.mutable_x() = ArrayRef(x_);
        ToProto(x_, resample_.mutable_x());
      }
    }
    chunk_ = o.chunk > 0 ? o.chunk : std::max<int64_t>(1, (o.samples + 7) / 8);
  }

  int64_t bytes_in() const { return static_cast<int64_t>(x_.nbytes()); }
  int64_t chunk() const { return chunk_; }
  // y's bytes (upfirdn, resample_poly): what a worker's region holds after x with --shm.
  int64_t bytes_out() const {
    const int64_t n = o_.op == "upfirdn"
                          ? interp::UpfirdnOutputLength(o_.samples, upfirdn_.design().numtaps(),
                                                        o_.up, o_.down)
                          : interp::ResamplePolyOutputLength(o_.samples, o_.up, o_.down);
    return n * o_.channels * static_cast<int64_t>(DTypeSize(x_.dtype()));
  }
  // --shm: x copied into `region` at 0 once; y is written after it (RegionSlotBytes(x)).
  absl::Status PutX(SharedRegion& region) const { return region.Write(x_, 0); }

  absl::StatusOr<BenchOutcome> Run(Client& client, const SharedRegion* region) const {
    BenchOutcome outcome;
    if (region != nullptr) {
      const int64_t y_offset = RegionSlotBytes(bytes_in());
      absl::StatusOr<v1::InterpolationResponse> r =
          o_.op == "upfirdn" ? client.Upfirdn(upfirdn_ref_, *region, 0, y_offset)
                             : client.ResamplePoly(resample_ref_, *region, 0, y_offset);
      if (!r.ok()) return r.status();
      outcome.info = r->info();
      outcome.bytes_out = bytes_out();
      return outcome;
    }
    if (o_.op == "stream") {
      absl::StatusOr<HostArray> y =
          client.ResampleStream(config_, x_, chunk_, CallOptions(), nullptr, &outcome.info);
      if (!y.ok()) return y.status();
      outcome.bytes_out = static_cast<int64_t>(y->nbytes());
      return outcome;
    }
    absl::StatusOr<v1::InterpolationResponse> r =
        o_.op == "upfirdn" ? client.Upfirdn(upfirdn_) : client.ResamplePoly(resample_);
    if (!r.ok()) return r.status();
    outcome.info = r->info();
    outcome.bytes_out = static_cast<int64_t>(r->y().data().size());
    return outcome;
  }

 private:
  const BenchOptions& o_;
  HostArray x_;
  v1::UpfirdnRequest upfirdn_, upfirdn_ref_;  // _ref_: x by dtype and shape only (--shm)
  v1::ResamplePolyRequest resample_, resample_ref_;
  v1::ResampleStreamConfig config_;
  int64_t chunk_ = 0;
};

struct Tally {
  std::vector<double> latencies_s;
  double queue_s = 0, h2d_s = 0, compute_s = 0, d2h_s = 0, server_s = 0;
  int64_t bytes_out = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> errors;   // gRPC code name -> count
  std::map<std::string, int64_t> devices;  // ExecutionInfo.device -> count
  absl::Status first_error;

  void Merge(const Tally& o) {
    latencies_s.insert(latencies_s.end(), o.latencies_s.begin(), o.latencies_s.end());
    queue_s += o.queue_s;
    h2d_s += o.h2d_s;
    compute_s += o.compute_s;
    d2h_s += o.d2h_s;
    server_s += o.server_s;
    bytes_out += o.bytes_out;
    failed += o.failed;
    for (const auto& [k, v] : o.errors) errors[k] += v;
    for (const auto& [k, v] : o.devices) devices[k] += v;
    if (first_error.ok()) first_error = o.first_error;
  }
};

// Runs `concurrency` closed-loop workers until `count` requests were issued (count > 0) or
// until `duration_s` elapsed. Returns the merged tally and the wall time.
std::pair<Tally, double> RunPhase(const BenchWork& work, int concurrency, int64_t count,
                                  double duration_s) {
  std::vector<Tally> tallies(static_cast<size_t>(concurrency));
  std::atomic<int64_t> issued{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration_s));
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&, w] {
      Tally& t = tallies[w];
      while (true) {
        if (count > 0) {
          if (issued.fetch_add(1) >= count) break;
        } else if (Clock::now() >= deadline) {
          break;
        }
        const Clock::time_point t0 = Clock::now();
        absl::StatusOr<BenchOutcome> r = work.run(w);
        const double latency = std::chrono::duration<double>(Clock::now() - t0).count();
        if (!r.ok()) {
          ++t.failed;
          ++t.errors[absl::StatusCodeToString(r.status().code())];
          if (t.first_error.ok()) t.first_error = r.status();
          continue;
        }
        t.latencies_s.push_back(latency);
        t.queue_s += r->info.queue_wait_seconds();
        t.h2d_s += r->info.h2d_seconds();
        t.compute_s += r->info.compute_seconds();
        t.d2h_s += r->info.d2h_seconds();
        t.server_s += r->info.total_seconds();
        t.bytes_out += r->bytes_out;
        ++t.devices[r->info.device().empty() ? "?" : r->info.device()];
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  Tally all;
  for (const Tally& t : tallies) all.Merge(t);
  return {std::move(all), elapsed};
}

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

absl::Status ValidateBenchOptions(const BenchOptions& o) {
  if (o.op != "upfirdn" && o.op != "resample_poly" && o.op != "stream" && o.op != "fuse" &&
      o.op != "mix" && !IsDeviceBenchOp(o.op)) {
    return absl::InvalidArgumentError(
        "--op must be upfirdn, resample_poly, stream, fuse, mix, hologram, unwrap or volume");
  }
  if (o.connections < 0) return absl::InvalidArgumentError("--connections must be >= 1");
  if (o.connections > 0 && o.op == "mix") {
    return absl::InvalidArgumentError("--op mix gives every client its own connection");
  }
  if (IsDeviceBenchOp(o.op)) {
    if (absl::Status s = ValidateDeviceBenchOptions(o); !s.ok()) return s;
  } else if (o.shm && o.op != "upfirdn" && o.op != "resample_poly") {
    return absl::InvalidArgumentError(
        "--shm applies to --op upfirdn, resample_poly, hologram, unwrap and volume");
  }
  if (o.server_pid < 0) return absl::InvalidArgumentError("--server-pid must be >= 1");
  if (o.server_pid > 0 && o.op != "mix") {
    return absl::InvalidArgumentError("--server-pid applies to --op mix only");
  }
  if (o.op == "mix" && o.count > 0) {
    return absl::InvalidArgumentError("--op mix runs for --duration, not --count");
  }
  if (o.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be >= 1");
  if (o.count < 0) return absl::InvalidArgumentError("--count must be >= 1");
  if (o.count == 0 && !(o.duration_s > 0)) {
    return absl::InvalidArgumentError("--duration must be > 0");
  }
  if (o.samples < 1) return absl::InvalidArgumentError("--samples must be >= 1");
  if (o.channels < 1) return absl::InvalidArgumentError("--channels must be >= 1");
  if (o.up < 1 || o.down < 1) return absl::InvalidArgumentError("--up and --down must be >= 1");
  if (o.taps < 0) return absl::InvalidArgumentError("--taps must be >= 1");
  if (o.op == "upfirdn" && o.up == o.down) {
    // The bench designs upfirdn's filter with cutoff 1 / max(up, down) after dividing both by
    // their gcd: equal factors give cutoff 1, which firwin refuses.
    return absl::InvalidArgumentError(absl::StrCat(
        "--op upfirdn: --up ", o.up, " and --down ", o.down,
        " reduce to 1/1 (the designed filter's cutoff would be 1); use different factors"));
  }
  if (o.dtype != "float32" && o.dtype != "float64" && o.dtype != "complex64") {
    return absl::InvalidArgumentError("--dtype must be float32, float64 or complex64");
  }
  if (o.chunk < 0) return absl::InvalidArgumentError("--chunk must be >= 1");
  if (o.chunk > 0 && o.op != "stream") {
    return absl::InvalidArgumentError("--chunk applies to --op stream only");
  }
  if (o.samples * o.channels > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError("--samples x --channels must stay below 2^31");
  }
  return absl::OkStatus();
}

int RunBenchWork(const GlobalOptions& global, const BenchOptions& o, const BenchWork& work,
                 std::ostream& out, std::ostream& err) {
  const int warmup = o.warmup >= 0 ? o.warmup : o.concurrency;
  if (!o.json) {
    out << "fresnel bench: " << work.description << ", device " << o.device << "; concurrency "
        << o.concurrency << ", "
        << (o.count > 0 ? absl::StrCat(o.count, " requests")
                        : absl::StrFormat("%g s", o.duration_s))
        << " after " << warmup << " warm-up request(s)\n"
        << std::flush;
  }

  if (warmup > 0) {
    auto [tally, unused] = RunPhase(work, std::min(o.concurrency, warmup), warmup, 0);
    if (tally.failed > 0) {
      err << "fresnel: warm-up failed (" << tally.failed << " of " << warmup << " requests)\n";
      return ReportError(err, kExitRpc, tally.first_error, global.server);
    }
  }
  auto [tally, elapsed] = RunPhase(work, o.concurrency, o.count, o.duration_s);
  const int64_t ok = static_cast<int64_t>(tally.latencies_s.size());
  if (ok == 0) {
    err << "fresnel: every request failed (" << tally.failed << ")\n";
    return ReportError(err, kExitRpc, tally.first_error, global.server);
  }

  std::vector<double> lat = tally.latencies_s;
  std::sort(lat.begin(), lat.end());
  double sum = 0;
  for (double v : lat) sum += v;
  const double mean = sum / ok;
  const double rps = ok / elapsed;
  const double items_ps = rps * work.items;
  const double mbps = (static_cast<double>(work.bytes_in) * ok + tally.bytes_out) / elapsed / 1e6;
  const double m_queue = tally.queue_s / ok, m_h2d = tally.h2d_s / ok,
               m_compute = tally.compute_s / ok, m_d2h = tally.d2h_s / ok,
               m_server = tally.server_s / ok;
  std::vector<std::string> devices;
  for (const auto& [name, n] : tally.devices) devices.push_back(absl::StrCat(name, " ", n));
  std::vector<std::string> errors;
  for (const auto& [code, n] : tally.errors) errors.push_back(absl::StrCat(code, " ", n));

  if (o.json) {
    JsonObject throughput, latency, server, device_counts, error_counts;
    throughput.Add("requests_per_second", rps)
        .Add(absl::StrCat(work.item_name, "_per_second"), items_ps)
        .Add("megabytes_per_second", mbps);
    latency.Add("p50", Percentile(lat, 0.50) * 1e3)
        .Add("p90", Percentile(lat, 0.90) * 1e3)
        .Add("p99", Percentile(lat, 0.99) * 1e3)
        .Add("max", lat.back() * 1e3)
        .Add("mean", mean * 1e3);
    server.Add("queue_wait", m_queue * 1e3)
        .Add("h2d", m_h2d * 1e3)
        .Add("compute", m_compute * 1e3)
        .Add("d2h", m_d2h * 1e3)
        .Add("total", m_server * 1e3);
    for (const auto& [name, n] : tally.devices) device_counts.Add(name, n);
    for (const auto& [code, n] : tally.errors) error_counts.Add(code, n);
    JsonObject json;
    json.Add("server", global.server).Add("op", o.op);
    if (work.add_json) work.add_json(&json);
    json.Add("device", o.device)
        .Add("concurrency", o.concurrency)
        .Add("warmup_requests", warmup)
        .Add("elapsed_seconds", elapsed)
        .Add("requests_ok", ok)
        .Add("requests_failed", tally.failed)
        .Add("errors", error_counts)
        .Add("devices", device_counts)
        .Add("throughput", throughput)
        .Add("latency_ms", latency)
        .Add("server_mean_ms", server)
        .Add("rpc_overhead_mean_ms", (mean - m_server) * 1e3);
    out << json.Str() << "\n";
    return kExitOk;
  }

  Table t;
  t.AddRow({"requests", absl::StrCat(ok, " ok, ", tally.failed, " failed in ",
                                     absl::StrFormat("%.2f", elapsed), " s",
                                     errors.empty() ? std::string()
                                                    : absl::StrCat(" (", absl::StrJoin(errors, ", "), ")"))});
  t.AddRow({"throughput", absl::StrFormat("%.1f req/s, %s%s/s, %.1f MB/s (request + "
                                          "response payload)",
                                          rps, FormatSi(items_ps), work.item_name, mbps)});
  t.AddRow({"latency (ms)",
            absl::StrCat("p50 ", FormatMs(Percentile(lat, 0.50)), "  p90 ",
                         FormatMs(Percentile(lat, 0.90)), "  p99 ",
                         FormatMs(Percentile(lat, 0.99)), "  max ", FormatMs(lat.back()),
                         "  mean ", FormatMs(mean))});
  t.AddRow({"server (ms)", absl::StrCat("queue ", FormatMs(m_queue), " + h2d ", FormatMs(m_h2d),
                                        " + compute ", FormatMs(m_compute), " + d2h ",
                                        FormatMs(m_d2h), "; total ", FormatMs(m_server),
                                        " (mean)")});
  t.AddRow({"rpc (ms)", absl::StrCat(FormatMs(mean - m_server),
                                     " mean client latency - mean server total "
                                     "(serialisation + transport)")});
  t.AddRow({"devices", absl::StrJoin(devices, ", ")});
  out << "\n";
  t.Print(out);
  return kExitOk;
}

int RunBench(const GlobalOptions& global, const BenchOptions& o, std::ostream& out,
             std::ostream& err) {
  if (absl::Status s = ValidateBenchOptions(o); !s.ok()) {
    return ReportUsageError(err, std::string(s.message()), "bench");
  }
  if (o.op == "fuse") {
    FuseBenchOptions f;
    f.sessions = o.concurrency;
    f.fps = o.fps;
    f.duration_s = o.count > 0 ? static_cast<double>(o.count) / o.fps : o.duration_s;
    f.warmup_frames = o.warmup >= 0 ? o.warmup : 30;
    f.frame_size = o.frame_size;
    f.budget_mib = o.budget_mib;
    f.connections = o.connections;
    f.phase = o.phase;
    f.variant = o.variant;
    f.device = o.device;
    f.json = o.json;
    return RunFuseBench(global, f, out, err);
  }
  if (o.op == "mix") return RunMixBench(global, o, out, err);
  if (IsDeviceBenchOp(o.op)) return RunDeviceBench(global, o, out, err);
  // One channel shared by every worker unless --connections asks for more.
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < std::max(1, o.connections); ++i) {
    absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(global);
    if (!client.ok()) return ReportError(err, kExitRpc, client.status(), global.server);
    clients.push_back(*std::move(client));
  }
  const BenchRequest request(o);
  BenchWork work;
  // --shm: a region per worker, x copied into it once, y written after it by every call.
  std::vector<std::unique_ptr<SharedRegion>> regions;
  for (int w = 0; o.shm && w < o.concurrency; ++w) {
    absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create(
        clients[w % clients.size()].get(), absl::StrCat("fresnel-bench-", getpid(), "-", w),
        RegionSlotBytes(request.bytes_in()) + request.bytes_out());
    if (!region.ok()) return ReportError(err, kExitRpc, region.status(), global.server);
    if (absl::Status s = request.PutX(**region); !s.ok()) return ReportError(err, kExitIo, s);
    regions.push_back(*std::move(region));
  }
  work.run = [&](int worker) {
    return request.Run(*clients[worker % clients.size()],
                       regions.empty() ? nullptr : regions[worker].get());
  };
  work.bytes_in = request.bytes_in();
  work.items = static_cast<double>(o.samples) * o.channels;
  work.item_name = "samples";
  work.description = absl::StrCat(
      o.op, " ", o.dtype, " [", o.channels, " x ", o.samples, "], up ", o.up, " down ", o.down,
      ", ", o.taps > 0 ? absl::StrCat(o.taps, " taps") : std::string("default filter"),
      o.op == "stream" ? absl::StrCat(", chunks of ", request.chunk()) : std::string(),
      clients.size() > 1 ? absl::StrCat(", ", clients.size(), " connections") : std::string(),
      o.shm ? ", x and y through a shared-memory region per worker" : "");
  work.add_json = [&](JsonObject* json) {
    json->Add("dtype", o.dtype)
        .Add("shape", std::vector<int64_t>{o.channels, o.samples})
        .Add("up", o.up)
        .Add("down", o.down)
        .Add("taps", o.taps)
        .Add("connections", static_cast<int64_t>(clients.size()))
        .Add("shm", o.shm);
  };
  return RunBenchWork(global, o, work, out, err);
}

}  // namespace fresnel::cli
