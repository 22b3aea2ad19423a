// The CLI's signal files (WAV through libsndfile, NPY, raw float32) and the plot rasteriser.
#include <catch2/catch.hpp>
#include <sndfile.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fresnel/io/npy.h"
#include "fresnel/io/png.h"
#include "plot.h"
#include "fresnel/io/signal.h"
#include "support/test_support.h"

namespace fresnel::cli {
namespace {

using testing::MaxAbsError;
using testing::RandomArray;

// A fresh scratch directory per test case, removed afterwards.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("fresnel_client_test_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST_CASE("FormatFromPath follows the extension", "[client][io]") {
  CHECK(FormatFromPath("a/b.NPY") == SignalFormat::kNpy);
  CHECK(FormatFromPath("x.f32") == SignalFormat::kRawFloat32);
  CHECK(FormatFromPath("x.raw") == SignalFormat::kRawFloat32);
  CHECK(FormatFromPath("x.wav") == SignalFormat::kAudio);
  CHECK(FormatFromPath("x.flac") == SignalFormat::kAudio);
  CHECK(FormatFromPath("dir.npy/x") == SignalFormat::kAudio);
  CHECK(CheckWritablePath("out.WAV").ok());
  CHECK(CheckWritablePath("out.npy").ok());
  CHECK(CheckWritablePath("out.f32").ok());
  CHECK(CheckWritablePath("out.flac").code() == absl::StatusCode::kInvalidArgument);
  CHECK(CheckWritablePath("out").code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("WAV round trip keeps float samples, channels and rate", "[client][io]") {
  TempDir dir;
  HostArray x = RandomArray(DType::kFloat32, {2, 1001});
  REQUIRE(WriteSignal(dir / "a.wav", x, 22050).ok());
  auto s = ReadSignal(dir / "a.wav");
  REQUIRE(s.ok());
  CHECK(s->sample_rate_hz == 22050);
  CHECK(s->samples.shape() == x.shape());
  CHECK(MaxAbsError(s->samples, x) == 0);

  // 1-D float64 becomes one float32 channel; the rate is rounded.
  HostArray mono = RandomArray(DType::kFloat64, {500});
  REQUIRE(WriteWav(dir / "m.wav", mono, 44099.6).ok());
  auto m = ReadAudio(dir / "m.wav");
  REQUIRE(m.ok());
  CHECK(m->sample_rate_hz == 44100);
  CHECK(m->samples.shape() == std::vector<int64_t>{1, 500});
  CHECK(std::abs(m->samples.data<float>()[123] - mono.data<double>()[123]) < 1e-6);
}

TEST_CASE("Audio input of other encodings is decoded to float", "[client][io]") {
  TempDir dir;
  SF_INFO info{};
  info.samplerate = 8000;
  info.channels = 2;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  const std::string path = dir / "pcm16.wav";
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  REQUIRE(f != nullptr);
  std::vector<short> frames = {16384, -16384, 8192, 0, -32768, 32767};
  REQUIRE(sf_writef_short(f, frames.data(), 3) == 3);
  sf_close(f);
  auto s = ReadAudio(path);
  REQUIRE(s.ok());
  REQUIRE(s->samples.shape() == std::vector<int64_t>{2, 3});
  const float* v = s->samples.data<float>();
  CHECK(v[0] == Approx(0.5));    // channel 0, frame 0
  CHECK(v[1] == Approx(0.25));   // channel 0, frame 1
  CHECK(v[2] == Approx(-1.0));   // channel 0, frame 2
  CHECK(v[3] == Approx(-0.5));   // channel 1, frame 0
}

TEST_CASE("NPY and raw float32 round trips", "[client][io]") {
  TempDir dir;
  HostArray c = RandomArray(DType::kComplex64, {3, 64});
  REQUIRE(WriteSignal(dir / "c.npy", c, 0).ok());
  auto cn = ReadSignal(dir / "c.npy");
  REQUIRE(cn.ok());
  CHECK(cn->samples.dtype() == DType::kComplex64);
  CHECK(cn->samples.bytes() == c.bytes());
  CHECK(cn->sample_rate_hz == 0);

  HostArray x = RandomArray(DType::kFloat32, {3, 77});
  REQUIRE(WriteSignal(dir / "x.f32", x, 0).ok());
  CHECK(std::filesystem::file_size(dir / "x.f32") == 3 * 77 * 4);
  SignalReadOptions three;
  three.raw_channels = 3;
  auto r = ReadSignal(dir / "x.f32", three);
  REQUIRE(r.ok());
  CHECK(r->samples.shape() == x.shape());
  CHECK(r->samples.bytes() == x.bytes());
  // Interleaved on disk: the second float is channel 1's first sample.
  std::ifstream in(dir / "x.f32", std::ios::binary);
  float first_two[2];
  in.read(reinterpret_cast<char*>(first_two), sizeof(first_two));
  CHECK(first_two[1] == x.data<float>()[77]);
}

TEST_CASE("Bad signal files give clear errors", "[client][io]") {
  TempDir dir;
  auto missing = ReadSignal(dir / "missing.wav");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find("missing.wav") != std::string::npos);
  CHECK(ReadSignal(dir / "missing.npy").status().code() == absl::StatusCode::kNotFound);
  CHECK(ReadSignal(dir / "missing.f32").status().code() == absl::StatusCode::kNotFound);

  WriteBytes(dir / "junk.wav", "this is not a RIFF file at all");
  auto junk = ReadSignal(dir / "junk.wav");
  CHECK(junk.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(junk.status().message()).find("junk.wav") != std::string::npos);

  WriteBytes(dir / "junk.npy", "\x93NUMPY\x01\x00garbage");
  CHECK(ReadSignal(dir / "junk.npy").status().code() == absl::StatusCode::kInvalidArgument);

  WriteBytes(dir / "odd.raw", std::string(10, '\0'));  // 2.5 floats
  SignalReadOptions one;
  auto odd = ReadSignal(dir / "odd.raw", one);
  CHECK(odd.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(odd.status().message()).find("--raw-channels") != std::string::npos);

  HostArray complex = RandomArray(DType::kComplex64, {2, 8});
  auto to_wav = WriteSignal(dir / "c.wav", complex, 48000);
  CHECK(to_wav.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(to_wav.message()).find(".npy") != std::string::npos);
  CHECK(WriteSignal(dir / "r.wav", RandomArray(DType::kFloat32, {8}), 0).code() ==
        absl::StatusCode::kInvalidArgument);  // no sample rate
  CHECK(!WriteSignal(dir / "no/such/dir/x.wav", RandomArray(DType::kFloat32, {8}), 8000).ok());
  CHECK(!WriteSignal(dir / "no/such/dir/x.f32", RandomArray(DType::kFloat32, {8}), 0).ok());
  CHECK(WriteSignal(dir / "x.mp3", RandomArray(DType::kFloat32, {8}), 8000).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("NiceTicks picks round steps inside the range", "[client][plot]") {
  auto ticks = NiceTicks(-0.93, 1.07, 5);
  REQUIRE(ticks.size() >= 4);
  CHECK(ticks.front() >= -0.93);
  CHECK(ticks.back() <= 1.07 + 1e-12);
  CHECK(ticks[1] - ticks[0] == Approx(0.5));
  CHECK(NiceTicks(0, 0, 5).empty());
}

TEST_CASE("RenderPlot draws both traces in their colours and writes a PNG", "[client][plot]") {
  TempDir dir;
  PlotTrace in, out;
  for (int i = 0; i < 200; ++i) {
    in.x.push_back(i / 100.0);
    in.y.push_back(std::sin(i / 10.0));
  }
  for (int i = 0; i < 600; ++i) {
    out.x.push_back(i / 300.0);
    out.y.push_back(0.5 * std::cos(i / 30.0));
  }
  in.color = kPlotBlue;
  in.label = "input";
  out.color = kPlotOrange;
  out.label = "output";
  PlotOptions options;
  options.width_px = 640;
  options.height_px = 300;
  options.x_label = "time (s)";
  options.title = "test plot";
  auto image = RenderPlot({in, out}, options);
  REQUIRE(image.ok());
  REQUIRE(image->shape() == std::vector<int64_t>{300, 640, 3});
  int64_t blue = 0, orange = 0, other = 0;
  const uint8_t* p = image->data<uint8_t>();
  for (int64_t i = 0; i < 300 * 640; ++i) {
    Rgb c{p[3 * i], p[3 * i + 1], p[3 * i + 2]};
    if (c == kPlotBlue) ++blue;
    else if (c == kPlotOrange) ++orange;
    else if (!(c == kPlotBackground)) ++other;
  }
  CHECK(blue > 300);    // a trace crossing most of the width
  CHECK(orange > 300);
  CHECK(other > 1000);  // axes, grid, labels

  REQUIRE(WritePlotPng(dir / "plot.png", {in, out}, options).ok());
  auto png = ReadPng(dir / "plot.png");
  REQUIRE(png.ok());
  CHECK(png->shape() == std::vector<int64_t>{300, 640, 3});
  CHECK(png->bytes() == image->bytes());
}

TEST_CASE("RenderPlot validates its input", "[client][plot]") {
  PlotOptions tiny;
  tiny.width_px = 10;
  CHECK(RenderPlot({}, tiny).status().code() == absl::StatusCode::kInvalidArgument);
  PlotTrace bad;
  bad.x = {1, 2};
  bad.y = {1};
  CHECK(RenderPlot({bad}, PlotOptions()).status().code() == absl::StatusCode::kInvalidArgument);
  // No data, constant and non-finite data still render.
  CHECK(RenderPlot({}, PlotOptions()).ok());
  PlotTrace flat;
  flat.x = {0, 1, 2, std::nan("")};
  flat.y = {3, 3, 3, 3};
  CHECK(RenderPlot({flat}, PlotOptions()).ok());
}

}  // namespace
}  // namespace fresnel::cli
