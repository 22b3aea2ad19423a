// `fresnel unwrap` and `fresnel jobs` without a server: flag validation and exit codes, reading
// phase images (.npy, and a TIFF written byte by byte here), and the preview image. The commands
// against a real server are tested in tests/server/unwrap_service_test.cc.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "commands.h"
#include "fresnel/io/npy.h"
#include "image_io.h"
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

std::string TempPath(const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("fresnel_unwrap_cli_test_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return (dir / name).string();
}

// A minimal little-endian baseline TIFF: one strip, no compression, `samples` samples per pixel
// of `bits` bits and SampleFormat `format` (1 uint, 2 int, 3 float).
void WriteTiff(const std::string& path, uint32_t rows, uint32_t cols, uint16_t bits,
               uint16_t format, uint16_t samples, const void* data) {
  const uint32_t bytes = rows * cols * samples * (bits / 8);
  struct Entry {
    uint16_t tag, type;
    uint32_t count, value;
  };
  const uint16_t kShort = 3, kLong = 4;
  const uint32_t data_offset = 8 + 2 + 10 * 12 + 4;
  const Entry entries[] = {
      {256, kLong, 1, cols},     {257, kLong, 1, rows}, {258, kShort, 1, bits},
      {259, kShort, 1, 1},       {262, kShort, 1, 1},   {273, kLong, 1, data_offset},
      {277, kShort, 1, samples}, {278, kLong, 1, rows}, {279, kLong, 1, bytes},
      {339, kShort, 1, format},
  };
  std::string file("II*\0", 4);
  auto u16 = [&](uint16_t v) { file.append(reinterpret_cast<const char*>(&v), 2); };
  auto u32 = [&](uint32_t v) { file.append(reinterpret_cast<const char*>(&v), 4); };
  u32(8);
  u16(10);
  for (const Entry& e : entries) {
    u16(e.tag);
    u16(e.type);
    u32(e.count);
    if (e.type == kShort) {  // a SHORT value sits left-justified in the 4-byte field
      u16(static_cast<uint16_t>(e.value));
      u16(0);
    } else {
      u32(e.value);
    }
  }
  u32(0);  // no next IFD
  REQUIRE(file.size() == data_offset);
  file.append(static_cast<const char*>(data), bytes);
  std::ofstream(path, std::ios::binary)
      .write(file.data(), static_cast<std::streamsize>(file.size()));
}

TEST_CASE("unwrap and jobs usage errors exit with 2 and name the flag", "[client][cli][unwrap]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"unwrap", "in.npy"}, "--out"},
      {{"unwrap", "--out", "o.npy"}, "input"},
      {{"unwrap", "in.npy", "--out", "o.txt"}, "must end in .npy"},
      {{"unwrap", "in.png", "--out", "o.npy"}, "must be a .npy, .tif or .tiff image"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--mask", "m.png"}, "--mask"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--method", "cg"}, "--method"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--method", "lsq", "--quality", "q.npy"},
       "--quality applies to --method goldstein or wlsq only"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--method", "lsq", "--save-maps"}, "--save-maps"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--no-congruent"}, "--no-congruent applies"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--seed", "3"}, "ROW,COL"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--seed", "-1,2"}, "ROW,COL"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--iterations", "0"}, "--iterations"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--png", "p.jpg"}, "must end in .png"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--device", "tpu"}, "--device"},
      {{"unwrap", "in.npy", "--out", "o.npy", "--sync", "--idempotency-key", "k"},
       "--idempotency-key applies to jobs"},
      {{"jobs"}, "A subcommand is required"},
      {{"jobs", "frob"}, "unknown jobs action 'frob'"},
      {{"jobs", "get"}, "id is required"},
      {{"jobs", "cancel"}, "id is required"},
      {{"jobs", "get", "abc", "--out", "x.txt"}, "must end in .npy"},
      {{"jobs", "get", "abc", "--save-maps"}, "--save-maps needs --out"},
      {{"jobs", "list", "--limit", "0"}, "--limit"},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    INFO(joined);
    Result r = Run(c.args);
    CHECK(r.code == kExitUsage);
    CHECK(Contains(r.err, c.message));
    CHECK(Contains(r.err, "fresnel: error: usage:"));
  }
}

TEST_CASE("unwrap reports missing and malformed inputs with exit code 4", "[client][cli][unwrap]") {
  Result missing = Run({"unwrap", TempPath("missing.npy"), "--out", TempPath("o.npy")});
  CHECK(missing.code == kExitIo);
  CHECK(Contains(missing.err, "NOT_FOUND: cannot open"));
  const std::string one_d = TempPath("one_d.npy");
  REQUIRE(WriteNpy(one_d, RandomArray(DType::kFloat32, {16})).ok());
  Result r = Run({"unwrap", one_d, "--out", TempPath("o.npy")});
  CHECK(r.code == kExitIo);
  CHECK(Contains(r.err, "expected a 2-D image"));
  const std::string ints = TempPath("ints.npy");
  REQUIRE(WriteNpy(ints, HostArray(DType::kInt32, {4, 4})).ok());
  r = Run({"unwrap", ints, "--out", TempPath("o.npy")});
  CHECK(r.code == kExitIo);
  CHECK(Contains(r.err, "float32 or float64"));
  const std::string phase = TempPath("phase.npy");
  REQUIRE(WriteNpy(phase, RandomArray(DType::kFloat32, {4, 4})).ok());
  const std::string mask = TempPath("mask.npy");
  REQUIRE(WriteNpy(mask, HostArray(DType::kUint8, {4, 5})).ok());
  r = Run({"unwrap", phase, "--mask", mask, "--out", TempPath("o.npy")});
  CHECK(r.code == kExitIo);
  CHECK(Contains(r.err, "differs from the phase's"));
  // Unreachable server: the files were fine, the RPC is what failed.
  r = Run(
      {"--server", "127.0.0.1:1", "--timeout", "5", "unwrap", phase, "--out", TempPath("o.npy")});
  CHECK(r.code == kExitRpc);
  CHECK(Contains(r.err, "UNAVAILABLE"));
}

TEST_CASE("ReadImage reads 2-D .npy and single-channel TIFF images", "[client][cli][unwrap]") {
  HostArray phase = RandomArray(DType::kFloat32, {5, 7});
  const std::string npy = TempPath("p.npy");
  REQUIRE(WriteNpy(npy, phase).ok());
  auto a = ReadImage(npy);
  REQUIRE(a.ok());
  CHECK(a->bytes() == phase.bytes());

  const std::string tif = TempPath("p.tif");
  WriteTiff(tif, 5, 7, 32, 3, 1, phase.raw());
  auto t = ReadImage(tif);
  if (!TiffSupported()) {
    CHECK(t.status().code() == absl::StatusCode::kUnimplemented);
    return;
  }
  REQUIRE(t.ok());
  CHECK(t->dtype() == DType::kFloat32);
  CHECK(t->shape() == std::vector<int64_t>{5, 7});
  CHECK(t->bytes() == phase.bytes());

  HostArray wide = RandomArray(DType::kFloat64, {3, 4});
  WriteTiff(TempPath("d.tiff"), 3, 4, 64, 3, 1, wide.raw());
  auto d = ReadImage(TempPath("d.tiff"));
  REQUIRE(d.ok());
  CHECK(d->dtype() == DType::kFloat64);
  CHECK(d->bytes() == wide.bytes());

  HostArray mask(DType::kUint8, {3, 4});
  mask.data<uint8_t>()[5] = 1;
  WriteTiff(TempPath("m.tif"), 3, 4, 8, 1, 1, mask.raw());
  auto m = ReadImage(TempPath("m.tif"));
  REQUIRE(m.ok());
  CHECK(m->dtype() == DType::kUint8);
  CHECK(m->bytes() == mask.bytes());

  std::vector<uint8_t> rgb(3 * 4 * 3, 7);
  WriteTiff(TempPath("rgb.tif"), 3, 4, 8, 1, 3, rgb.data());
  auto bad = ReadImage(TempPath("rgb.tif"));
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(std::string(bad.status().message()), "single-channel"));
  CHECK(ReadImage(TempPath("none.tif")).status().code() == absl::StatusCode::kNotFound);
}

// Found by tests/fuzz/tiff_fuzz.cc: a 150-byte TIFF claiming 65535 x 65535 float64 pixels was
// allocated (32 GiB) before any row was read.
TEST_CASE("ReadImage refuses TIFF sizes over ImageReadOptions::max_pixels before allocating",
          "[client][cli][unwrap]") {
  if (!TiffSupported()) return;
  const std::string tif = TempPath("huge.tif");
  const double row[4] = {0, 1, 2, 3};
  WriteTiff(tif, 2, 2, 64, 3, 1, row);
  {
    // ImageWidth and ImageLength (the first two IFD entries' values) become 65535.
    std::fstream f(tif, std::ios::binary | std::ios::in | std::ios::out);
    const uint32_t big = 65535;
    f.seekp(18);
    f.write(reinterpret_cast<const char*>(&big), 4);
    f.seekp(30);
    f.write(reinterpret_cast<const char*>(&big), 4);
  }
  auto huge = ReadImage(tif);
  CHECK(huge.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(std::string(huge.status().message()), "exceed the limit of 1073741824"));
  WriteTiff(tif, 2, 2, 64, 3, 1, row);
  ImageReadOptions options;
  options.max_pixels = 3;
  auto small = ReadImage(tif, options);
  CHECK(small.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(std::string(small.status().message()), "2 x 2 pixels exceed the limit of 3"));
  options.max_pixels = 4;
  CHECK(ReadImage(tif, options).ok());
}

TEST_CASE("the preview shows wrapped and unwrapped side by side, cuts red, mask blue",
          "[client][cli][unwrap]") {
  HostArray wrapped(DType::kFloat32, {4, 6});
  HostArray unwrapped(DType::kFloat32, {4, 6});
  for (int64_t i = 0; i < 24; ++i) {
    wrapped.data<float>()[i] = -3.0f + 0.25f * static_cast<float>(i);
    unwrapped.data<float>()[i] = static_cast<float>(i);
  }
  HostArray mask(DType::kUint8, {4, 6});
  HostArray cuts(DType::kUint8, {4, 6});
  mask.data<uint8_t>()[0] = 1;
  cuts.data<uint8_t>()[7] = 1;  // row 1, col 1
  auto img = RenderUnwrapPreview(wrapped, unwrapped, &mask, &cuts);
  REQUIRE(img.ok());
  REQUIRE(img->shape() == std::vector<int64_t>{4, 2 * 6 + 8, 3});
  auto px = [&](int64_t y, int64_t x, int ch) {
    return img->data<uint8_t>()[(y * 20 + x) * 3 + ch];
  };
  CHECK(px(0, 0, 2) > px(0, 0, 0));  // masked: blue, on both halves
  CHECK(px(0, 14, 2) > px(0, 14, 0));
  CHECK(px(1, 15, 0) == 230);  // the cut pixel, right half
  CHECK(px(1, 15, 1) == 30);
  CHECK(px(1, 1, 0) == px(1, 1, 1));  // left half stays gray there
  CHECK(px(0, 7, 0) == 255);          // the gap
  CHECK(px(3, 19, 0) == 255);         // brightest unwrapped pixel
  // Large images are reduced to max_side per half.
  HostArray big = RandomArray(DType::kFloat32, {300, 100});
  auto small = RenderUnwrapPreview(big, big, nullptr, nullptr, 64);
  REQUIRE(small.ok());
  CHECK(small->dim(0) == 60);
  CHECK(small->dim(1) == 2 * 20 + 8);
  CHECK_FALSE(RenderUnwrapPreview(big, wrapped, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace fresnel::cli
