// fresnel_bench_transport: the transport ceiling. Starts, in this process, a bare gRPC echo
// server (echo.proto: same build, same channel arguments, Fresnel's message shapes) and a
// fresneld (FresnelServer, the very server main() starts), then for each payload size measures
// payload bytes sent + received per second over loopback:
//
//   unary   echo: Echo.Unary with one NdArray;   Fresnel: Upfirdn (float32, one tap 1.0, up 1,
//           down 1: the answer is as large as the question and the compute is negligible)
//   stream  echo: Echo.Stream with ArrayChunks;  Fresnel: ResampleStream (same filter) through
//           fresnel::Client, both in --chunk-mib chunks
//   shm     echo: the unary echo again (what gRPC moves for one message of this size); Fresnel:
//           Upfirdn with x and y in one SharedRegion (fresnel/client/shm.h): x is written into
//           the region once, before the timing; the call is timed, y is left in the region (a
//           same-host client that keeps its data there). Skipped (with a note on stderr) when
//           the region cannot be created, e.g. a small /dev/shm.
//   chunked echo: Echo.Stream over --streams parallel streams on separate connections, each its
//           slice of the payload; Fresnel: Client::UpfirdnArray with its default TransferOptions
//           (unary up to 16 MiB of x + y, one stream below 64 MiB, --streams parallel streams on
//           separate connections from there, through a server staging region, cut into up to
//           --segments pipelined sub-calls of at least --segment-mib of x + y each)
//   reuse   the chunked path into one output array kept across calls
//           (Client::UpfirdnArrayInto: no y allocated or zero-filled per call), against the same
//           echo
//   memcpy  one copy of the payload (bytes copied per second), the host's own ceiling
//
// With the chunked row, stderr also gets what a fresh y of the payload's size costs on this host
// by itself (FreshOutputCost). --y-touch: who faults the chunked row's fresh y in, the download
// threads as they write it (write, TransferOptions' default since session 9) or a thread of its
// own during the upload (prefault; TransferOptions::prefault_y).
//
// and prints a table (median of --reps runs after one warm-up), or with --json one object per row:
// {"bytes", "path", "echo_gbps", "fresnel_gbps", "ratio", "memcpy_gbps"}.
//
//   fresnel_bench_transport [--sizes 1,64,1024] [--reps 5] [--chunk-mib 4] [--streams 4]
//                           [--segments 8] [--segment-mib 32] [--parallel-min-mib 64]
//                           [--y-touch write|prefault]
//                           [--gpus all|none] [--json] [--paths unary,stream,chunked,reuse,shm]
//                           [--issue-case] [--tiny [--concurrency 64] [--seconds 3]]
//
// --tiny measures small-request throughput instead (issue 13, Load): --concurrency threads (64)
// each sending back-to-back unary calls for --seconds (3) over --streams connections: Echo.Unary
// with a 1 KiB NdArray against Upfirdn of the same 256 float32 samples (one tap, up 1; the
// server places it as it would any request), through the generated stubs; prints req/s of both
// and their ratio (issue target >= 0.5).
//
// --issue-case measures issue 10's case instead (upfirdn float32 2^26 samples, up 4, 64 taps:
// 256 MiB in, 1 GiB out) over the unary, chunked and shm paths: client latency and the server's
// split (total, queue, h2d, compute, d2h), one line (or JSON object) per path.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "echo.grpc.pb.h"
#include "fresnel/client/client.h"
#include "fresnel/client/shm.h"
#include "fresnel/core/status.h"
#include "fresnel/core/uninitialized_array.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/interpolation.grpc.pb.h"
#include "fresnel/v1/wire_limits.h"
#include "grpcpp/grpcpp.h"
#include "server/config.h"
#include "server/server.h"

namespace fresnel::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Largest message either side accepts: room for a 1 GiB payload in one unary call.
constexpr int64_t kMessageCap = (int64_t{3} << 29);  // 1.5 GiB

class EchoService final : public Echo::CallbackService {
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context,
                                  const v1::NdArray* request, v1::NdArray* response) override {
    // The answer takes the request's bytes without a copy, as Fresnel's handlers take x.
    response->set_dtype(request->dtype());
    *response->mutable_shape() = request->shape();
    response->mutable_data()->swap(*const_cast<v1::NdArray*>(request)->mutable_data());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  class StreamEcho : public grpc::ServerBidiReactor<v1::ArrayChunk, v1::ArrayChunk> {
   public:
    StreamEcho() { StartRead(&in_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      out_.Swap(&in_);
      StartWrite(&out_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
        return;
      }
      StartRead(&in_);
    }
    void OnDone() override { delete this; }

   private:
    v1::ArrayChunk in_, out_;
  };

  grpc::ServerBidiReactor<v1::ArrayChunk, v1::ArrayChunk>* Stream(
      grpc::CallbackServerContext*) override {
    return new StreamEcho();
  }
};

// Echoes bytes [begin, end) of `data` over one Echo.Stream in `chunk_bytes` messages; false on
// failure or when fewer bytes came back.
bool EchoStream(Echo::Stub* stub, const char* data, int64_t begin, int64_t end,
                int64_t total, int64_t chunk_bytes) {
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  std::thread writer([&] {
    v1::ArrayChunk chunk;
    for (int64_t off = begin; off < end; off += chunk_bytes) {
      chunk.set_offset_bytes(off);
      chunk.set_total_bytes(total);
      chunk.set_data(data + off, static_cast<size_t>(std::min(chunk_bytes, end - off)));
      if (!stream->Write(chunk)) break;
    }
    stream->WritesDone();
  });
  int64_t got = 0;
  v1::ArrayChunk back;
  while (stream->Read(&back)) got += static_cast<int64_t>(back.data().size());
  writer.join();
  return stream->Finish().ok() && got == end - begin;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds of `fn` (which returns false on failure), median of `reps` after one warm-up.
template <class F>
double Time(int reps, F&& fn) {
  std::vector<double> t;
  for (int r = 0; r <= reps; ++r) {
    const Clock::time_point start = Clock::now();
    if (!fn()) return -1;
    if (r > 0) t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return Median(t);
}

// What a fresh y of `bytes` costs on this host by itself (stderr): the zero-filled HostArray,
// UninitializedArray with its pages prefaulted, and UninitializedArray faulted in by 4 threads
// writing it (what the download threads do with --y-touch write); median of `reps`, each freed
// before the next. The chunked row pays one of the latter two per call (the reuse row none).
void FreshOutputCost(int64_t bytes, int reps) {
  const double zero_s = Time(reps, [&] { return HostArray(DType::kUint8, {bytes}).nbytes() > 0; });
  const double prefault_s = Time(reps, [&] {
    return UninitializedArray(DType::kUint8, {bytes}, FirstTouch::kPrefault).nbytes() > 0;
  });
  const double write_s = Time(reps, [&] {
    HostArray a = UninitializedArray(DType::kUint8, {bytes}, FirstTouch::kOnWrite);
    char* p = static_cast<char*>(a.raw());
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([=] {
        const int64_t b = bytes * i / 4, e = bytes * (i + 1) / 4;
        std::memset(p + b, 1, static_cast<size_t>(e - b));
      });
    }
    for (std::thread& t : threads) t.join();
    return true;
  });
  std::fprintf(stderr,
               "fresh y of %lld MiB: zero-filled HostArray %.1f ms, UninitializedArray prefaulted "
               "%.1f ms, UninitializedArray written by 4 threads %.1f ms\n",
               static_cast<long long>(bytes >> 20), zero_s * 1e3, prefault_s * 1e3, write_s * 1e3);
}

struct Options {
  std::vector<int64_t> sizes_mib = {1, 64, 1024};
  int reps = 5;
  int64_t chunk_mib = 4;
  int streams = 4;
  TransferOptions transfer;  // --segments, --segment-mib, --parallel-min-mib (and the above)
  std::string gpus = "all";
  bool json = false;
  bool issue_case = false;  // --issue-case: issue 10's upfirdn case instead of the size sweep
  bool tiny = false;        // --tiny: small-request throughput against the echo
  int concurrency = 64;
  double seconds = 3;
  std::string paths = "unary,stream,chunked,reuse,shm";  // which rows to measure
  bool Wants(const char* path) const {
    for (absl::string_view p : absl::StrSplit(paths, ',')) {
      if (p == path) return true;
    }
    return false;
  }
};

// Issue 10's case: upfirdn float32 2^26 samples, up 4, 64 taps (256 MiB in, 1 GiB out), one
// call at a time over each path; prints the client latency and the server's split (median of
// --reps after a warm-up), one line per path, or JSON with --json.
int IssueCase(const Options& o, Client* client, int64_t chunk_bytes) {
  const int64_t samples = int64_t{1} << 26;
  HostArray x(DType::kFloat32, {samples});
  for (int64_t i = 0; i < samples; ++i) x.data<float>()[i] = static_cast<float>(i % 977) * 1e-3f;
  HostArray taps(DType::kFloat64, {64});
  for (int i = 0; i < 64; ++i) taps.data<double>()[i] = 1.0 / (1 + i);
  v1::UpfirdnRequest request;
  ToProto(taps, request.mutable_taps());
  request.set_up(4);
  request.set_down(1);
  const int64_t y_samples = (samples - 1) * 4 + 64;
  const int64_t y_bytes = y_samples * 4;
  struct Sample {
    double client_s = 0;
    v1::ExecutionInfo info;
  };
  auto run = [&](const char* path, const std::function<absl::StatusOr<v1::ExecutionInfo>()>& fn) {
    std::vector<Sample> samples_seen;
    for (int r = 0; r <= o.reps; ++r) {
      const Clock::time_point start = Clock::now();
      absl::StatusOr<v1::ExecutionInfo> info = fn();
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      if (!info.ok()) {
        std::fprintf(stderr, "%s: %s\n", path, info.status().ToString().c_str());
        return false;
      }
      if (r > 0) samples_seen.push_back(Sample{s, *info});
    }
    std::sort(samples_seen.begin(), samples_seen.end(),
              [](const Sample& a, const Sample& b) { return a.client_s < b.client_s; });
    const Sample& m = samples_seen[samples_seen.size() / 2];
    const double gbps = static_cast<double>(x.nbytes() + y_bytes) / m.client_s / 1e9;
    if (o.json) {
      std::printf("{\"case\": \"upfirdn_f32_2p26_up4_64taps\", \"path\": \"%s\", "
                  "\"client_s\": %.4f, \"payload_gbps\": %.3f, \"server_total_s\": %.4f, "
                  "\"queue_s\": %.4f, \"h2d_s\": %.4f, \"compute_s\": %.4f, \"d2h_s\": %.4f}\n",
                  path, m.client_s, gbps, m.info.total_seconds(), m.info.queue_wait_seconds(),
                  m.info.h2d_seconds(), m.info.compute_seconds(), m.info.d2h_seconds());
    } else {
      std::printf("%-8s client %8.1f ms (%6.2f GB/s)  server total %7.1f ms: queue %.1f, h2d "
                  "%.1f, compute %.2f, d2h %.1f ms\n",
                  path, m.client_s * 1e3, gbps, m.info.total_seconds() * 1e3,
                  m.info.queue_wait_seconds() * 1e3, m.info.h2d_seconds() * 1e3,
                  m.info.compute_seconds() * 1e3, m.info.d2h_seconds() * 1e3);
    }
    std::fflush(stdout);
    return true;
  };
  bool ok = true;
  if (o.Wants("unary")) {
    v1::UpfirdnRequest inline_request = request;
    ToProto(x, inline_request.mutable_x());
    ok = ok && run("unary", [&]() -> absl::StatusOr<v1::ExecutionInfo> {
      FRESNEL_ASSIGN_OR_RETURN(v1::InterpolationResponse r, client->Upfirdn(inline_request));
      return r.info();
    });
  }
  TransferOptions transfer = o.transfer;
  transfer.streams = o.streams;
  transfer.chunk_bytes = chunk_bytes;
  TransferReport report;
  auto split = [&](const char* path) {  // where the last call went (stderr)
    std::fprintf(stderr,
                 "%s: %d stream(s), %d segment(s): upload %.4f s, call %.4f s, download %.4f s "
                 "(server, summed over segments: total %.4f, h2d %.4f, compute %.4f, d2h %.4f)\n",
                 path, report.streams, report.segments, report.upload_s, report.call_s,
                 report.download_s, report.info.total_seconds(), report.info.h2d_seconds(),
                 report.info.compute_seconds(), report.info.d2h_seconds());
  };
  if (o.Wants("chunked")) {
    ok = ok && run("chunked", [&]() -> absl::StatusOr<v1::ExecutionInfo> {
      FRESNEL_ASSIGN_OR_RETURN(HostArray y, client->UpfirdnArray(request, x, transfer, {}, &report));
      if (y.size() != y_samples) return absl::InternalError("chunked: wrong output size");
      return report.info;
    });
    split("chunked");
  }
  if (o.Wants("reuse")) {
    HostArray y;
    ok = ok && run("reuse", [&]() -> absl::StatusOr<v1::ExecutionInfo> {
      FRESNEL_RETURN_IF_ERROR(client->UpfirdnArrayInto(request, x, &y, transfer, {}, &report));
      if (y.size() != y_samples) return absl::InternalError("reuse: wrong output size");
      return report.info;
    });
    split("reuse");
  }
  if (o.Wants("shm")) {
    const int64_t y_off = (static_cast<int64_t>(x.nbytes()) + 4095) / 4096 * 4096;
    auto region = SharedRegion::Create(client, "issue-case", y_off + y_bytes);
    if (!region.ok()) {
      std::fprintf(stderr, "shm skipped: %s\n", region.status().ToString().c_str());
    } else if ((*region)->Write(x, 0).ok()) {
      v1::UpfirdnRequest shm_request = request;
      shm_request.mutable_x()->set_dtype(v1::FLOAT32);
      shm_request.mutable_x()->add_shape(samples);
      ok = ok && run("shm", [&]() -> absl::StatusOr<v1::ExecutionInfo> {
        FRESNEL_ASSIGN_OR_RETURN(v1::InterpolationResponse r,
                                 client->Upfirdn(shm_request, **region, 0, y_off));
        return r.info();
      });
    }
  }
  return ok ? 0 : 1;
}

// Runs `call(thread)` back to back on `threads` threads for `seconds` after a warm-up second;
// returns completed calls per second (-1 when any call failed).
double Throughput(int threads, double seconds, const std::function<bool(int)>& call) {
  std::atomic<bool> measuring{false}, stop{false}, failed{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (!call(t)) {
          failed = true;
          return;
        }
        if (measuring.load(std::memory_order_relaxed)) done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  measuring = true;
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const int64_t n = done.load();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  for (std::thread& th : pool) th.join();
  return failed ? -1 : static_cast<double>(n) / elapsed;
}

// --tiny: small requests, echo vs Upfirdn, the same shapes, threads and connections.
int Tiny(const Options& o, const std::vector<std::unique_ptr<Echo::Stub>>& echo_stubs,
         const std::string& fresnel_address, const grpc::ChannelArguments& args) {
  HostArray x(DType::kFloat32, {256});
  for (int i = 0; i < 256; ++i) x.data<float>()[i] = static_cast<float>(i) * 1e-2f;
  v1::NdArray echo_request;
  ToProto(x, &echo_request);
  v1::UpfirdnRequest upfirdn;
  ToProto(x, upfirdn.mutable_x());
  HostArray one(DType::kFloat64, {1});
  one.data<double>()[0] = 1.0;
  ToProto(one, upfirdn.mutable_taps());
  upfirdn.set_up(1);
  upfirdn.set_down(1);
  std::vector<std::unique_ptr<v1::InterpolationService::Stub>> stubs;
  for (int i = 0; i < o.streams; ++i) {
    grpc::ChannelArguments own = args;
    own.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    own.SetInt("fresnel.bench_channel", 100 + i);
    stubs.push_back(v1::InterpolationService::NewStub(
        grpc::CreateCustomChannel(fresnel_address, grpc::InsecureChannelCredentials(), own)));
  }
  const double echo_rps = Throughput(o.concurrency, o.seconds, [&](int t) {
    grpc::ClientContext ctx;
    v1::NdArray back;
    return echo_stubs[t % echo_stubs.size()]->Unary(&ctx, echo_request, &back).ok();
  });
  // Where the server placed them (--small-job-bytes sends them to the CPU while it has room).
  std::atomic<int64_t> on_cpu{0}, on_gpu{0};
  const double fresnel_rps = Throughput(o.concurrency, o.seconds, [&](int t) {
    grpc::ClientContext ctx;
    v1::InterpolationResponse back;
    const bool ok = stubs[t % stubs.size()]->Upfirdn(&ctx, upfirdn, &back).ok();
    if (ok) (back.info().device() == "cpu" ? on_cpu : on_gpu).fetch_add(1);
    return ok;
  });
  const int64_t placed = std::max<int64_t>(1, on_cpu.load() + on_gpu.load());
  const std::string device = absl::StrFormat("%.0f %% cpu, %.0f %% gpu",
                                             100.0 * on_cpu.load() / placed,
                                             100.0 * on_gpu.load() / placed);
  if (echo_rps < 0 || fresnel_rps < 0) {
    std::fprintf(stderr, "a tiny call failed\n");
    return 1;
  }
  if (o.json) {
    std::printf("{\"case\": \"tiny_unary_1KiB\", \"threads\": %d, \"connections\": %d, "
                "\"echo_rps\": %.0f, \"fresnel_rps\": %.0f, \"ratio\": %.3f, \"device\": \"%s\"}\n",
                o.concurrency, o.streams, echo_rps, fresnel_rps, fresnel_rps / echo_rps,
                device.c_str());
  } else {
    std::printf("| request | threads | connections | echo req/s | Fresnel req/s | ratio | device |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
    std::printf("| 256 float32 (1 KiB), unary | %d | %d | %.0f | %.0f | %.2f | %s |\n",
                o.concurrency, o.streams, echo_rps, fresnel_rps, fresnel_rps / echo_rps,
                device.c_str());
  }
  return 0;
}

int Run(const Options& o) {
  // The echo server, with the channel arguments fresneld uses.
  EchoService echo;
  grpc::ServerBuilder builder;
  int echo_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port of its own (server.cc)
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMessageCap));
  builder.SetMaxSendMessageSize(static_cast<int>(kMessageCap));
  builder.RegisterService(&echo);
  std::unique_ptr<grpc::Server> echo_server = builder.BuildAndStart();
  if (!echo_server || echo_port == 0) {
    std::fprintf(stderr, "cannot start the echo server\n");
    return 1;
  }
  server::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics = "off";
  config.gpus = o.gpus;
  config.max_message_bytes = kMessageCap;
  config.max_output_samples = kMessageCap;
  auto fresneld = server::FresnelServer::Start(config);
  if (!fresneld.ok()) {
    std::fprintf(stderr, "cannot start fresneld: %s\n", fresneld.status().ToString().c_str());
    return 1;
  }

  // Clients with the same channel arguments (fresnel::Client's).
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(static_cast<int>(kMessageCap));
  args.SetMaxReceiveMessageSize(static_cast<int>(kMessageCap));
  auto echo_channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", echo_port),
                                                grpc::InsecureChannelCredentials(), args);
  std::unique_ptr<Echo::Stub> stub = Echo::NewStub(echo_channel);
  std::vector<std::unique_ptr<Echo::Stub>> parallel_stubs;
  for (int i = 0; i < o.streams; ++i) {
    grpc::ChannelArguments own = args;  // a connection of its own, as fresnel::Client makes
    own.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    own.SetInt("fresnel.bench_channel", i);
    parallel_stubs.push_back(Echo::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", echo_port), grpc::InsecureChannelCredentials(), own)));
  }
  ClientOptions client_options;
  client_options.address = absl::StrCat("127.0.0.1:", (*fresneld)->port());
  client_options.max_message_bytes = kMessageCap;
  auto client = Client::Connect(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "cannot connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const int64_t chunk_bytes = o.chunk_mib << 20;
  if (o.issue_case) return IssueCase(o, client->get(), chunk_bytes);
  if (o.tiny) {
    const int rc = Tiny(o, parallel_stubs, client_options.address, args);
    (*fresneld)->Shutdown();
    echo_server->Shutdown();
    return rc;
  }

  if (!o.json) {
    std::printf("%-10s %-7s %12s %14s %8s %12s\n", "payload", "path", "echo GB/s", "fresnel GB/s",
                "ratio", "memcpy GB/s");
  }
  for (int64_t mib : o.sizes_mib) {
    const int64_t bytes = mib << 20;
    const int64_t samples = bytes / 4;
    HostArray x(DType::kFloat32, {samples});
    for (int64_t i = 0; i < samples; ++i) x.data<float>()[i] = static_cast<float>(i % 977) * 1e-3f;
    std::string copy(static_cast<size_t>(bytes), '\0');
    const double memcpy_s = Time(o.reps, [&] {
      std::memcpy(copy.data(), x.bytes().data(), static_cast<size_t>(bytes));
      return true;
    });
    const double memcpy_gbps = static_cast<double>(bytes) / memcpy_s / 1e9;

    // unary
    v1::NdArray wire;
    ToProto(x, &wire);
    const double echo_unary_s = !o.Wants("unary") && !o.Wants("shm") ? 0 : Time(o.reps, [&] {
      grpc::ClientContext ctx;
      v1::NdArray back;
      grpc::Status st = stub->Unary(&ctx, wire, &back);
      return st.ok() && static_cast<int64_t>(back.data().size()) == bytes;
    });
    v1::UpfirdnRequest request;
    *request.mutable_x() = wire;
    HostArray one(DType::kFloat64, {1});
    one.data<double>()[0] = 1.0;
    ToProto(one, request.mutable_taps());
    request.set_up(1);
    request.set_down(1);
    std::string error;
    const double fresnel_unary_s = !o.Wants("unary") ? 0 : Time(o.reps, [&] {
      auto r = (*client)->Upfirdn(request);
      if (!r.ok()) error = r.status().ToString();
      return r.ok() && static_cast<int64_t>(r->y().data().size()) == bytes;
    });

    // stream, in chunks
    const char* x_data = x.bytes().data();
    const double echo_stream_s = !o.Wants("stream") ? 0 : Time(o.reps, [&] {
      return EchoStream(stub.get(), x_data, 0, bytes, bytes, chunk_bytes);
    });
    // chunked: the slices of --streams parallel streams, each on its own connection
    const double echo_parallel_s = !o.Wants("chunked") && !o.Wants("reuse") ? 0 : Time(o.reps, [&] {
      std::vector<bool> ok(parallel_stubs.size());
      std::vector<std::thread> threads;
      const int n = static_cast<int>(parallel_stubs.size());
      const int64_t per = (bytes / n + chunk_bytes - 1) / chunk_bytes * chunk_bytes;
      for (int i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
          const int64_t begin = std::min(bytes, per * i);
          const int64_t end = i == n - 1 ? bytes : std::min(bytes, begin + per);
          ok[i] = begin >= end ||
                  EchoStream(parallel_stubs[i].get(), x_data, begin, end, bytes, chunk_bytes);
        });
      }
      for (std::thread& t : threads) t.join();
      return std::all_of(ok.begin(), ok.end(), [](bool b) { return b; });
    });
    TransferOptions transfer = o.transfer;
    transfer.streams = o.streams;
    transfer.chunk_bytes = chunk_bytes;
    TransferReport report;
    // The request without x (x is the array argument): a request still holding x inline would
    // be copied with it by UpfirdnArray's by-value parameter (a payload-sized copy and page
    // faults per call, in the rows measured before 2026-12-01 15:10).
    v1::UpfirdnRequest chunked_request = request;
    chunked_request.clear_x();
    // Where the last chunked call spent its time (stderr, so --json stays one object per row).
    auto split = [&](const char* path) {
      std::fprintf(stderr,
                   "%s %lld MiB: %s, %d stream(s), %d segment(s): upload %.4f s, call %.4f s, "
                   "download %.4f s (server, summed over segments: %.4f s: queue %.4f, h2d %.4f, "
                   "compute %.4f, d2h %.4f)\n",
                   path, static_cast<long long>(mib), report.path, report.streams,
                   report.segments, report.upload_s, report.call_s, report.download_s,
                   report.info.total_seconds(), report.info.queue_wait_seconds(),
                   report.info.h2d_seconds(), report.info.compute_seconds(),
                   report.info.d2h_seconds());
    };
    const double fresnel_parallel_s = !o.Wants("chunked") ? 0 : Time(o.reps, [&] {
      auto r = (*client)->UpfirdnArray(chunked_request, x, transfer, {}, &report);
      if (!r.ok()) error = r.status().ToString();
      return r.ok() && r->size() == samples;
    });
    if (o.Wants("chunked")) split("chunked");
    HostArray reused;  // one output array across the calls
    const double fresnel_reuse_s = !o.Wants("reuse") ? 0 : Time(o.reps, [&] {
      absl::Status st = (*client)->UpfirdnArrayInto(chunked_request, x, &reused, transfer, {},
                                                     &report);
      if (!st.ok()) error = st.ToString();
      return st.ok() && reused.size() == samples;
    });
    if (o.Wants("reuse")) split("reuse");
    if (o.Wants("chunked")) FreshOutputCost(bytes, o.reps);
    v1::ResampleStreamConfig stream_config;
    v1::UpfirdnRequest* up = stream_config.mutable_upfirdn();
    *up->mutable_taps() = request.taps();
    up->set_up(1);
    up->set_down(1);
    up->mutable_x()->set_dtype(v1::FLOAT32);
    up->mutable_x()->add_shape(1);
    up->mutable_x()->add_shape(0);
    const double fresnel_stream_s = !o.Wants("stream") ? 0 : Time(o.reps, [&] {
      auto r = (*client)->ResampleStream(stream_config, x, chunk_bytes / 4);
      if (!r.ok()) error = r.status().ToString();
      return r.ok() && r->size() == samples;
    });
    // shm: x at 0, y right after it.
    double fresnel_shm_s = 0;  // 0 = skipped
    if (o.Wants("shm")) {
      auto region = SharedRegion::Create(client->get(), "bench", 2 * bytes);
      if (!region.ok()) {
        std::fprintf(stderr, "shm skipped at %lld MiB: %s\n", static_cast<long long>(mib),
                     region.status().ToString().c_str());
      } else if ((*region)->Write(x, 0).ok()) {
        v1::UpfirdnRequest shm_request = request;
        shm_request.mutable_x()->clear_data();
        fresnel_shm_s = Time(o.reps, [&] {
          auto r = (*client)->Upfirdn(shm_request, **region, 0, bytes);
          if (!r.ok()) error = r.status().ToString();
          return r.ok() && r->y().has_shm() && r->y().shape(0) == samples;
        });
      }
    }
    if (!error.empty()) std::fprintf(stderr, "fresnel: %s\n", error.c_str());

    struct Row {
      const char* path;
      double echo_s, fresnel_s;
    };
    std::vector<Row> rows;
    if (o.Wants("unary")) rows.push_back(Row{"unary", echo_unary_s, fresnel_unary_s});
    if (o.Wants("stream")) rows.push_back(Row{"stream", echo_stream_s, fresnel_stream_s});
    if (o.Wants("chunked")) rows.push_back(Row{"chunked", echo_parallel_s, fresnel_parallel_s});
    if (o.Wants("reuse")) rows.push_back(Row{"reuse", echo_parallel_s, fresnel_reuse_s});
    if (fresnel_shm_s != 0) rows.push_back(Row{"shm", echo_unary_s, fresnel_shm_s});
    for (const Row& row : rows) {
      // Payload sent plus received.
      const double moved = 2.0 * static_cast<double>(bytes);
      const double echo_gbps = row.echo_s > 0 ? moved / row.echo_s / 1e9 : 0;
      const double fresnel_gbps = row.fresnel_s > 0 ? moved / row.fresnel_s / 1e9 : 0;
      const double ratio = echo_gbps > 0 ? fresnel_gbps / echo_gbps : 0;
      if (o.json) {
        std::printf("{\"bytes\": %lld, \"path\": \"%s\", \"echo_gbps\": %.4f, \"fresnel_gbps\": "
                    "%.4f, \"ratio\": %.4f, \"memcpy_gbps\": %.3f}\n",
                    static_cast<long long>(bytes), row.path, echo_gbps, fresnel_gbps, ratio,
                    memcpy_gbps);
      } else {
        std::printf("%-10s %-7s %12.3f %14.3f %8.3f %12.2f\n", absl::StrCat(mib, " MiB").c_str(),
                    row.path, echo_gbps, fresnel_gbps, ratio, memcpy_gbps);
      }
      if (row.echo_s < 0 || row.fresnel_s < 0) {
        std::fprintf(stderr, "a %s call failed at %lld MiB\n", row.path,
                     static_cast<long long>(mib));
        return 1;
      }
    }
    std::fflush(stdout);
  }
  (*fresneld)->Shutdown();
  echo_server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace fresnel::bench

int main(int argc, char** argv) {
  fresnel::bench::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const bool has_value = i + 1 < argc;
    if (k == "--json") {
      o.json = true;
    } else if (k == "--issue-case") {
      o.issue_case = true;
    } else if (k == "--tiny") {
      o.tiny = true;
    } else if (k == "--concurrency" && has_value) {
      o.concurrency = std::clamp(std::atoi(argv[++i]), 1, 1024);
    } else if (k == "--seconds" && has_value) {
      o.seconds = std::clamp(std::atof(argv[++i]), 0.5, 60.0);
    } else if (k == "--sizes" && has_value) {
      o.sizes_mib.clear();
      for (absl::string_view s : absl::StrSplit(argv[++i], ',')) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(s, &v) || v <= 0 || v > 1024) {
          std::fprintf(stderr, "--sizes: MiB values in 1..1024\n");
          return 2;
        }
        o.sizes_mib.push_back(v);
      }
    } else if (k == "--reps" && has_value) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else if (k == "--chunk-mib" && has_value) {
      o.chunk_mib = std::clamp<int64_t>(std::atoi(argv[++i]), 1, 60);
    } else if (k == "--streams" && has_value) {
      o.streams = std::clamp(std::atoi(argv[++i]), 1, 16);
    } else if (k == "--segments" && has_value) {
      o.transfer.segments = std::clamp(std::atoi(argv[++i]), 1, 16);
    } else if (k == "--segment-mib" && has_value) {
      o.transfer.segment_bytes = int64_t{std::clamp(std::atoi(argv[++i]), 1, 4096)} << 20;
    } else if (k == "--parallel-min-mib" && has_value) {
      o.transfer.parallel_min_bytes = int64_t{std::clamp(std::atoi(argv[++i]), 0, 1 << 20)} << 20;
    } else if (k == "--y-touch" && has_value) {
      o.transfer.prefault_y = std::string(argv[++i]) == "prefault";
    } else if (k == "--paths" && has_value) {
      o.paths = argv[++i];
    } else if (k == "--gpus" && has_value) {
      o.gpus = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: fresnel_bench_transport [--sizes 1,64,1024] [--reps 5] "
                   "[--chunk-mib 4] [--streams 4] [--gpus all|none] [--json]\n"
                   "                               [--segments 8] [--segment-mib 32] "
                   "[--parallel-min-mib 64] [--y-touch write|prefault]\n"
                   "                               [--paths unary,stream,chunked,reuse,shm] "
                   "[--issue-case]\n"
                   "                               [--tiny [--concurrency 64] [--seconds 3]]\n");
      return 2;
    }
  }
  return fresnel::bench::Run(o);
}
