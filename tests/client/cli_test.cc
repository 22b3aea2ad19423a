// The `fresnel` CLI: argument validation and exit codes (no server needed), and the commands
// against the in-process fake server.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include "commands.h"
#include "fake_server.h"
#include "fresnel/io/npy.h"
#include "fresnel/io/png.h"
#include "fresnel/io/signal.h"
#include "support/cli_runner.h"
#include "support/test_support.h"

namespace fresnel::cli {
namespace {

using testing::RandomArray;

using Result = testing::CliResult;
Result Run(std::vector<std::string> args) { return testing::RunCli(std::move(args)); }

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

testing::FakeServer& Fake() {
  static testing::FakeServer* server = new testing::FakeServer();
  return *server;
}

std::string TempPath(const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("fresnel_cli_test_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return (dir / name).string();
}

TEST_CASE("CLI usage errors exit with 2 and say what is wrong", "[client][cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, "A subcommand is required"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"interp", "a.wav", "b.wav"}, "--up is required"},
      {{"interp", "a.wav", "b.wav", "--up", "0"}, "--up: must be >= 1, got 0"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--down", "x"}, "--down"},
      {{"interp", "a.wav", "--up", "2"}, "output"},
      {{"interp", "a.wav", "b.mp3", "--up", "2"}, "must be .wav, .npy, .f32 or .raw"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--window", "gauss"}, "--window"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--taps", "t.npy", "--taps-design", "9,0.5"},
       "excludes"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--taps-design", "9,0.5"},
       "--taps-design needs --mode upfirdn"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--mode", "upfirdn", "--taps-design", "9"},
       "NUMTAPS,CUTOFF"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--mode", "upfirdn", "--taps-design", "9,1.5"},
       "CUTOFF must lie in (0, 1)"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--mode", "upfirdn", "--padtype", "mean"},
       "--mode resample only"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--chunk", "100", "--padtype", "reflect"},
       "constant only"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--window", "hann", "--beta", "3"},
       "--window kaiser only"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--png", "plot.jpg"}, "must end in .png"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--device", "tpu"}, "--device"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--mode", "decimate"}, "--up 1"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--window", "gaussian"}, "takes 1"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--window", "kaiser,x"}, "not a number"},
      {{"interp", "a.wav", "b.wav", "--up", "1", "--down", "2", "--mode", "decimate", "--window",
        "hann"},
       "designs no filter"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--mode", "fft", "--taps", "t.npy"},
       "designs no filter"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--freq-domain"}, "--mode fft only"},
      {{"interp", "a.wav", "b.wav", "--up", "2", "--mode", "fft", "--chunk", "10"},
       "cannot --chunk"},
      {{"interp", "a.wav", "b.wav", "--up", "1", "--down", "2", "--mode", "decimate", "--shm"},
       "cannot --shm"},
      {{"bench", "--concurrency", "0"}, "--concurrency"},
      {{"bench", "--duration", "1", "--count", "5"}, "excludes"},
      {{"bench", "--op", "fft"}, "--op"},
      {{"bench", "--chunk", "10"}, "--op stream only"},
      {{"bench", "--op", "upfirdn", "--up", "2", "--down", "2"}, "reduce to 1/1"},
      {{"bench", "--op", "stream", "--shm"}, "--shm applies to"},
      {{"bench", "--op", "mix", "--connections", "2"}, "--op mix"},
      {{"bench", "--op", "unwrap", "--image-size", "4096"}, "--image-size"},
      {{"bench", "--op", "hologram", "--image-size", "1x8"}, "--image-size"},
      {{"bench", "--op", "hologram", "--meshes", "2"}, "--meshes applies"},
      {{"bench", "--op", "volume", "--mesh", "cone:3"}, "--mesh"},
      {{"bench", "--op", "hologram", "--algorithm", "fast"}, "--algorithm"},
      {{"bench", "--op", "unwrap", "--method", "wls"}, "--method"},
      {{"--timeout", "-1", "info"}, "--timeout"},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    INFO("fresnel " << joined);
    Result r = Run(c.args);
    CHECK(r.code == kExitUsage);
    CHECK(Contains(r.err, "fresnel: error: usage: "));
    CHECK(Contains(r.err, c.message));
    CHECK(r.out.empty());
  }
}

TEST_CASE("CLI help and version exit with 0", "[client][cli]") {
  Result help = Run({"--help"});
  CHECK(help.code == kExitOk);
  CHECK(Contains(help.out, "Exit codes: 0 success"));
  CHECK(Contains(help.out, "FRESNEL_SERVER"));
  Result interp_help = Run({"interp", "--help"});
  CHECK(interp_help.code == kExitOk);
  CHECK(Contains(interp_help.out, "--taps-design"));
  CHECK(Run({"--version"}).code == kExitOk);
}

TEST_CASE("CLI file and RPC errors have their own exit codes", "[client][cli]") {
  Result missing = Run({"interp", TempPath("missing.wav"), TempPath("o.wav"), "--up", "2",
                        "--server", "127.0.0.1:1"});
  CHECK(missing.code == kExitIo);
  CHECK(Contains(missing.err, "fresnel: error: NOT_FOUND: cannot open"));

  REQUIRE(WriteNpy(TempPath("in.npy"), RandomArray(DType::kFloat32, {100})).ok());
  Result dead = Run({"interp", TempPath("in.npy"), TempPath("o.npy"), "--up", "2", "--server",
                     "127.0.0.1:1"});
  CHECK(dead.code == kExitRpc);
  CHECK(Contains(dead.err, "fresnel: error: UNAVAILABLE: "));
  CHECK(Contains(dead.err, "127.0.0.1:1"));

  Result info = Run({"--server", "127.0.0.1:1", "info"});
  CHECK(info.code == kExitRpc);

  // --axis is checked against the file's shape before any call; streams take the last axis.
  Result axis = Run({"interp", TempPath("in.npy"), TempPath("o.npy"), "--up", "2", "--axis", "1",
                     "--server", "127.0.0.1:1"});
  CHECK(axis.code == kExitUsage);
  CHECK(Contains(axis.err, "--axis 1 is out of range"));
  CHECK(Contains(axis.err, "[100]"));
  REQUIRE(WriteNpy(TempPath("in3d.npy"), RandomArray(DType::kFloat32, {2, 50, 3})).ok());
  Result streamed = Run({"interp", TempPath("in3d.npy"), TempPath("o.npy"), "--up", "2",
                         "--axis", "1", "--chunk", "10", "--server", "127.0.0.1:1"});
  CHECK(streamed.code == kExitUsage);
  CHECK(Contains(streamed.err, "--chunk streams along the last axis"));

  // The server's message comes through verbatim with its code name.
  Result rejected = Run({"interp", TempPath("in.npy"), TempPath("o.npy"), "--up", "99",
                         "--mode", "upfirdn", "--server", Fake().address()});
  CHECK(rejected.code == kExitRpc);
  CHECK(Contains(rejected.err, "fresnel: error: INVALID_ARGUMENT: up: 99 exceeds the limit of 64"));
}

TEST_CASE("fresnel info prints tables and JSON", "[client][cli]") {
  Result r = Run({"info", "--server", Fake().address(), "--stats"});
  REQUIRE(r.code == kExitOk);
  CHECK(Contains(r.out, "0.0.0-fake"));
  CHECK(Contains(r.out, "SERVING"));
  CHECK(Contains(r.out, "fake cpu"));
  CHECK(Contains(r.out, "message 1.0 MiB"));
  CHECK(Contains(r.out, "COMPLETED"));
  Result j = Run({"info", "--server", Fake().address(), "--json"});
  REQUIRE(j.code == kExitOk);
  CHECK(j.out.front() == '{');
  CHECK(Contains(j.out, "\"health\": \"SERVING\""));
  CHECK(Contains(j.out, "\"max_message_bytes\""));
}

TEST_CASE("fresnel interp converts files, streams large inputs and plots", "[client][cli]") {
  // WAV in, WAV out: the fake's resample_poly holds samples; the rate scales by up/down.
  HostArray x = RandomArray(DType::kFloat32, {2, 4000});
  REQUIRE(WriteSignal(TempPath("in.wav"), x, 16000).ok());
  Result r = Run({"interp", TempPath("in.wav"), TempPath("out.wav"), "--up", "3", "--down", "2",
                  "--server", Fake().address(), "--png", TempPath("plot.png"),
                  "--plot-samples", "200"});
  REQUIRE(r.code == kExitOk);
  CHECK(Contains(r.out, "[2 x 4000]"));
  CHECK(Contains(r.out, "[2 x 6000]"));
  CHECK(Contains(r.out, "fake:0"));
  auto out = ReadSignal(TempPath("out.wav"));
  REQUIRE(out.ok());
  CHECK(out->sample_rate_hz == 24000);
  CHECK(out->samples.shape() == std::vector<int64_t>{2, 6000});
  auto png = ReadPng(TempPath("plot.png"));
  REQUIRE(png.ok());
  CHECK(png->shape() == std::vector<int64_t>{500, 1200, 3});

  // --chunk streams; the fake doubles every chunk and appends its tail.
  REQUIRE(WriteNpy(TempPath("in1d.npy"), RandomArray(DType::kFloat32, {1000})).ok());
  Result s = Run({"interp", TempPath("in1d.npy"), TempPath("s.npy"), "--up", "1", "--chunk",
                  "128", "--server", Fake().address(), "--json"});
  REQUIRE(s.code == kExitOk);
  CHECK(Contains(s.out, "\"streamed\": true"));
  CHECK(Contains(s.out, "\"chunks\": 8"));
  auto streamed = ReadNpy(TempPath("s.npy"));
  REQUIRE(streamed.ok());
  CHECK(streamed->shape() == std::vector<int64_t>{1000 + testing::kFakeTail});

  // Larger than the fake's 1 MiB message cap: streamed automatically.
  HostArray big = RandomArray(DType::kFloat32, {1, 400000});
  REQUIRE(WriteSignal(TempPath("big.f32"), big, 0).ok());
  Result b = Run({"interp", TempPath("big.f32"), TempPath("big_out.f32"), "--up", "1",
                  "--mode", "upfirdn", "--server", Fake().address()});
  REQUIRE(b.code == kExitOk);
  CHECK(Contains(b.err, "exceeds the server's message cap"));
  CHECK(Contains(b.out, "streamed in"));
  CHECK(std::filesystem::file_size(TempPath("big_out.f32")) ==
        (400000 + testing::kFakeTail) * 4);

  // ... unless the padding cannot be streamed.
  Result p = Run({"interp", TempPath("big.f32"), TempPath("big_out.f32"), "--up", "1",
                  "--padtype", "reflect", "--server", Fake().address()});
  CHECK(p.code == kExitUsage);
  CHECK(Contains(p.err, "only --padtype constant can be streamed"));
}

TEST_CASE("fresnel bench reports throughput and latency", "[client][cli]") {
  Result r = Run({"bench", "--server", Fake().address(), "--op", "upfirdn", "--count", "20",
                  "--concurrency", "4", "--samples", "1000", "--json"});
  REQUIRE(r.code == kExitOk);
  CHECK(Contains(r.out, "\"requests_ok\": 20"));
  CHECK(Contains(r.out, "\"p99\""));
  CHECK(Contains(r.out, "\"fake:0\": 20"));
  Result t = Run({"bench", "--server", Fake().address(), "--op", "stream", "--duration", "0.2",
                  "--samples", "1000", "--chunk", "250"});
  REQUIRE(t.code == kExitOk);
  CHECK(Contains(t.out, "p50"));
  CHECK(Contains(t.out, "rpc (ms)"));
  Result dead = Run({"bench", "--server", "127.0.0.1:1", "--count", "2"});
  CHECK(dead.code == kExitRpc);
  CHECK(Contains(dead.err, "warm-up failed"));
}

}  // namespace
}  // namespace fresnel::cli
