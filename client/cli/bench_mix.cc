// `fresnel bench --op mix`: a mixed-workload soak test (issue 13, Load). `concurrency` closed-loop
// clients, each on its own channel, send a rotating mix of small requests of every unary
// workload — tiny Upfirdn, ResamplePoly, a hologram Render, a synchronous Unwrap — for
// `duration` seconds. Reports per-workload throughput and latency percentiles, every error by
// code (an error the server gives on purpose still counts: a soak run must have none), and, with
// --server-pid on the server's host, the server's resident memory after warm-up and at the end.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "format.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Resident set size of `pid` in bytes (VmRSS), or -1.
int64_t RssBytes(int pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// The requests of the mix, built once and shared by every client.
class Mix {
 public:
  static constexpr int kKinds = 4;
  static const char* Name(int kind) {
    static const char* names[kKinds] = {"upfirdn (256 samples)", "resample_poly (16384, 3/2)",
                                        "hologram render (64x64, 64 points)",
                                        "unwrap (64x64, goldstein)"};
    return names[kind];
  }

  explicit Mix(v1::DeviceKind device) {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    auto signal = [&](int64_t n) {
      HostArray x(DType::kFloat32, {1, n});
      for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(u(rng));
      return x;
    };
    upfirdn_.set_up(2);
    upfirdn_.set_down(1);
    upfirdn_.mutable_device()->set_kind(device);
    HostArray taps(DType::kFloat64, {8});
    for (int i = 0; i < 8; ++i) taps.data<double>()[i] = 1.0 / (1 + i);
    ToProto(taps, upfirdn_.mutable_taps());
    ToProto(signal(256), upfirdn_.mutable_x());

    resample_.set_up(3);
    resample_.set_down(2);
    resample_.mutable_device()->set_kind(device);
    ToProto(signal(16384), resample_.mutable_x());

    v1::HologramConfig* c = render_.mutable_config();
    c->set_width(64);
    c->set_height(64);
    c->set_pitch_m(8e-6);
    c->set_wavelength_m(532e-9);
    c->set_algorithm(v1::HOLOGRAM_ALGORITHM_REFERENCE);
    c->mutable_device()->set_kind(device);
    HostArray points(DType::kFloat64, {64, 4});
    for (int i = 0; i < 64; ++i) {
      double* p = points.data<double>() + 4 * i;
      p[0] = u(rng) * 2e-4;
      p[1] = u(rng) * 2e-4;
      p[2] = 0.05 + 0.01 * u(rng);
      p[3] = 1.0;
    }
    ToProto(points, render_.mutable_points());

    // A tilted plane with noise, wrapped: Goldstein has residues to pair.
    HostArray phase(DType::kFloat32, {64, 64});
    for (int r = 0; r < 64; ++r) {
      for (int col = 0; col < 64; ++col) {
        const double v = 0.4 * r + 0.25 * col + 0.6 * u(rng);
        phase.data<float>()[r * 64 + col] = static_cast<float>(std::remainder(v, 2 * M_PI));
      }
    }
    ToProto(phase, unwrap_.mutable_phase());
    unwrap_.mutable_device()->set_kind(device);
  }

  absl::Status Run(Client& client, int kind) const {
    switch (kind) {
      case 0: return client.Upfirdn(upfirdn_).status();
      case 1: return client.ResamplePoly(resample_).status();
      case 2: return client.Render(render_).status();
      default: return client.Unwrap(unwrap_).status();
    }
  }

 private:
  v1::UpfirdnRequest upfirdn_;
  v1::ResamplePolyRequest resample_;
  v1::RenderRequest render_;
  v1::UnwrapRequest unwrap_;
};

struct KindTally {
  std::vector<double> latencies_s;
  std::map<std::string, int64_t> errors;    // code -> count
  // "CODE: message" -> count: 8 distinct messages per client, the rest as "CODE: (other messages)".
  std::map<std::string, int64_t> messages;
  std::string first_error;

  void Error(const absl::Status& st) {
    ++errors[absl::StatusCodeToString(st.code())];
    std::string key = st.ToString().substr(0, 200);
    if (messages.size() >= 8 && messages.count(key) == 0) {
      key = absl::StrCat(absl::StatusCodeToString(st.code()), ": (other messages)");
    }
    ++messages[key];
    if (first_error.empty()) first_error = st.ToString();
  }
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

int RunMixBench(const GlobalOptions& global, const BenchOptions& o, std::ostream& out,
                std::ostream& err) {
  const Mix mix(DeviceKindFromFlag(o.device));
  // One channel per client, as independent clients would have.
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < o.concurrency; ++i) {
    absl::StatusOr<std::unique_ptr<Client>> c = ConnectClient(global);
    if (!c.ok()) return ReportError(err, kExitRpc, c.status(), global.server);
    clients.push_back(std::move(*c));
  }
  if (!o.json) {
    out << "fresnel bench: mix of " << Mix::kKinds << " workloads, device " << o.device << "; "
        << o.concurrency << " clients, " << absl::StrFormat("%g s", o.duration_s)
        << " after a warm-up round of every client\n"
        << std::flush;
  }
  // Warm-up: every client, at once, sends each kind twice (its connection, the server's per-
  // connection buffers and first allocations), so the memory read after it is the baseline.
  {
    std::vector<absl::Status> failed(static_cast<size_t>(o.concurrency));
    std::vector<std::thread> warm;
    for (int w = 0; w < o.concurrency; ++w) {
      warm.emplace_back([&, w] {
        for (int i = 0; i < 2 * Mix::kKinds && failed[w].ok(); ++i) {
          failed[w] = mix.Run(*clients[w], i % Mix::kKinds);
        }
      });
    }
    for (std::thread& t : warm) t.join();
    for (const absl::Status& st : failed) {
      if (!st.ok()) {
        err << "fresnel: warm-up failed\n";
        return ReportError(err, kExitRpc, st, global.server);
      }
    }
  }
  const int64_t rss_start = o.server_pid > 0 ? RssBytes(o.server_pid) : -1;
  int64_t rss_max = rss_start;
  std::vector<std::vector<KindTally>> tallies(static_cast<size_t>(o.concurrency),
                                              std::vector<KindTally>(Mix::kKinds));
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  std::atomic<bool> done{false};
  // The server's RSS every 0.5 s: its maximum, one value per tenth of the run (a plateau and a
  // leak look alike in "start, max, end" after a short warm-up, not in the timeline) and the value
  // at half time (the second half's growth).
  std::vector<int64_t> rss_tenths;
  int64_t rss_half = -1;
  std::thread sampler([&] {
    while (!done.load() && o.server_pid > 0) {
      const int64_t rss = RssBytes(o.server_pid);
      rss_max = std::max(rss_max, rss);
      const double at = std::chrono::duration<double>(Clock::now() - start).count();
      if (at >= o.duration_s * 0.1 * static_cast<double>(rss_tenths.size() + 1)) {
        rss_tenths.push_back(rss);
      }
      if (rss_half < 0 && at >= o.duration_s / 2) rss_half = rss;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  std::vector<std::thread> workers;
  for (int w = 0; w < o.concurrency; ++w) {
    workers.emplace_back([&, w] {
      for (int64_t i = w; Clock::now() < deadline; ++i) {
        const int kind = static_cast<int>(i % Mix::kKinds);
        KindTally& t = tallies[w][kind];
        const Clock::time_point t0 = Clock::now();
        absl::Status st = mix.Run(*clients[w], kind);
        if (st.ok()) {
          t.latencies_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        } else {
          t.Error(st);
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  done.store(true);
  sampler.join();
  const int64_t rss_end = o.server_pid > 0 ? RssBytes(o.server_pid) : -1;

  int64_t total_ok = 0, total_failed = 0;
  Table t;
  JsonObject per_kind;
  for (int kind = 0; kind < Mix::kKinds; ++kind) {
    KindTally all;
    for (auto& per_client : tallies) {
      KindTally& k = per_client[kind];
      all.latencies_s.insert(all.latencies_s.end(), k.latencies_s.begin(), k.latencies_s.end());
      for (const auto& [code, n] : k.errors) all.errors[code] += n;
      for (const auto& [m, n] : k.messages) all.messages[m] += n;
      if (all.first_error.empty()) all.first_error = k.first_error;
    }
    const int64_t ok = static_cast<int64_t>(all.latencies_s.size());
    int64_t failed = 0;
    std::vector<std::string> errors;
    for (const auto& [code, n] : all.errors) {
      failed += n;
      errors.push_back(absl::StrCat(code, " ", n));
    }
    total_ok += ok;
    total_failed += failed;
    const double p50 = Percentile(all.latencies_s, 0.50), p99 = Percentile(all.latencies_s, 0.99);
    t.AddRow({Mix::Name(kind),
              absl::StrFormat("%8.1f req/s  p50 %s ms  p99 %s ms  %d ok, %d failed%s", ok / elapsed,
                              FormatMs(p50), FormatMs(p99), ok, failed,
                              errors.empty() ? std::string()
                                             : absl::StrCat(" (", absl::StrJoin(errors, ", "),
                                                            "; first: ", all.first_error, ")"))});
    JsonObject k, error_counts, message_counts;
    for (const auto& [code, n] : all.errors) error_counts.Add(code, n);
    for (const auto& [m, n] : all.messages) message_counts.Add(m, n);
    k.Add("requests_per_second", ok / elapsed)
        .Add("p50_ms", p50 * 1e3)
        .Add("p99_ms", p99 * 1e3)
        .Add("ok", ok)
        .Add("failed", failed)
        .Add("errors", error_counts)
        .Add("error_messages", message_counts);
    if (!all.first_error.empty()) k.Add("first_error", all.first_error);
    per_kind.Add(Mix::Name(kind), k);
  }
  const double growth = rss_start > 0 ? 100.0 * (rss_end - rss_start) / rss_start : 0;
  const double growth_half = rss_half > 0 ? 100.0 * (rss_end - rss_half) / rss_half : 0;
  std::string timeline;
  for (int64_t r : rss_tenths) absl::StrAppend(&timeline, timeline.empty() ? "" : " ", r >> 20);
  if (o.json) {
    JsonObject json;
    json.Add("server", global.server)
        .Add("op", "mix")
        .Add("device", o.device)
        .Add("clients", o.concurrency)
        .Add("elapsed_seconds", elapsed)
        .Add("requests_ok", total_ok)
        .Add("requests_failed", total_failed)
        .Add("workloads", per_kind);
    if (o.server_pid > 0) {
      json.Add("server_rss_start_bytes", rss_start)
          .Add("server_rss_max_bytes", rss_max)
          .Add("server_rss_end_bytes", rss_end)
          .Add("server_rss_growth_percent", growth)
          .Add("server_rss_half_bytes", rss_half)
          .Add("server_rss_second_half_growth_percent", growth_half)
          .Add("server_rss_tenths_mib", timeline);
    }
    out << json.Str() << "\n";
  } else {
    t.AddRow({"all", absl::StrFormat("%8.1f req/s, %d ok, %d failed in %.1f s",
                                     total_ok / elapsed, total_ok, total_failed, elapsed)});
    if (o.server_pid > 0) {
      t.AddRow({"server RSS", absl::StrFormat("%.1f MiB after warm-up, max %.1f, end %.1f (%+.1f %%)",
                                              rss_start / 1048576.0, rss_max / 1048576.0,
                                              rss_end / 1048576.0, growth)});
      t.AddRow({"server RSS, second half",
                absl::StrFormat("%.1f MiB at half time, end %.1f (%+.1f %%); MiB at each tenth: %s",
                                rss_half / 1048576.0, rss_end / 1048576.0, growth_half,
                                timeline)});
    }
    out << "\n";
    t.Print(out);
  }
  return total_failed == 0 ? kExitOk : kExitRpc;
}

}  // namespace fresnel::cli
