// StreamingResampler::PushInto (issue 10 item 3): the chunk read where it lies, the outputs
// written to a caller's buffer. Fed the same chunks, it returns the bytes Push returns, bit for
// bit, on the CPU and on CUDA (pageable and pinned buffers, with and without the overlapped
// windows), for every dtype a stream takes, 1 and several channels, random chunk sizes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fresnel/core/gpu.h"
#include "fresnel/interp/interp.h"
#include "fresnel/interp/into.h"
#include "support/test_support.h"

namespace fresnel::interp {
namespace {

using fresnel::testing::RandomArray;
using fresnel::testing::SkipWithoutGpu;
using fresnel::testing::TestGpu;

// One stream: upfirdn (taps > 0) or resample_poly (taps == 0: the designed filter).
struct StreamCase {
  DType dtype;
  int64_t channels;
  int up, down;
  int64_t taps;
  double cval;
};

std::vector<StreamCase> StreamCases() {
  return {{DType::kFloat32, 1, 4, 1, 64, 0.0},     {DType::kFloat32, 3, 3, 2, 17, 0.5},
          {DType::kFloat64, 2, 2, 3, 31, 0.0},     {DType::kComplex64, 1, 5, 1, 12, -1.0},
          {DType::kComplex128, 2, 1, 4, 9, 0.0},   {DType::kFloat32, 1, 3, 2, 0, 0.0},
          {DType::kFloat64, 2, 160, 147, 0, 0.25}, {DType::kComplex64, 2, 1, 7, 200, 0.0}};
}

StreamingResampler Make(const StreamCase& c) {
  if (c.taps > 0) {
    UpfirdnOptions o;
    o.up = c.up;
    o.down = c.down;
    o.cval = c.cval;
    const HostArray h = RandomArray(DType::kFloat64, {c.taps}, 11);
    std::vector<double> taps(static_cast<const double*>(h.raw()),
                             static_cast<const double*>(h.raw()) + c.taps);
    auto s = StreamingResampler::ForUpfirdn(taps, o, c.channels, c.dtype);
    REQUIRE(s.ok());
    return *std::move(s);
  }
  ResamplePolyOptions o;
  o.up = c.up;
  o.down = c.down;
  o.cval = c.cval;
  auto s = StreamingResampler::ForResamplePoly(o, c.channels, c.dtype);
  REQUIRE(s.ok());
  return *std::move(s);
}

// Chunk sizes summing to about `total`: random, zero-length and one-sample chunks included.
std::vector<int64_t> ChunkSizes(int64_t total, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> sizes = {0, 1, 2};
  int64_t sum = 3;
  while (sum < total) {
    const int64_t k = std::uniform_int_distribution<int64_t>(0, 3000)(rng);
    sizes.push_back(k);
    sum += k;
  }
  return sizes;
}

// Where PushInto reads the chunk and writes y: pageable, or page-locked on the GPU.
struct Buffers {
  std::string x, y;
  bool pinned = false;
  Buffers(size_t x_bytes, size_t y_bytes, bool pin) : x(x_bytes, '\0'), y(y_bytes, '\0') {
    if (pin) {
      REQUIRE(PinHostMemory(x.data(), static_cast<int64_t>(x.size())).ok());
      REQUIRE(PinHostMemory(y.data(), static_cast<int64_t>(y.size())).ok());
      pinned = true;
    }
  }
  ~Buffers() {
    if (pinned) {
      UnpinHostMemory(x.data());
      UnpinHostMemory(y.data());
    }
  }
};

// Feeds the same chunks to Push on one resampler and to PushInto on another; every chunk's
// outputs and the final state must agree byte for byte.
void CheckPushIntoEqualsPush(const Device& device, const StreamCase& c, uint64_t seed, bool pin,
                             int64_t overlap_chunk_bytes) {
  CAPTURE(DTypeName(c.dtype), c.channels, c.up, c.down, c.taps, seed, pin, overlap_chunk_bytes);
  StreamingResampler a = Make(c), b = Make(c);
  const size_t es = DTypeSize(c.dtype);
  const std::vector<int64_t> sizes = ChunkSizes(12000, seed);
  const int64_t max_k = *std::max_element(sizes.begin(), sizes.end());
  const int64_t room = c.channels * b.MaxPushOutputSamples(max_k) * static_cast<int64_t>(es);
  Buffers buf(static_cast<size_t>(c.channels * max_k) * es, static_cast<size_t>(room), pin);
  for (size_t i = 0; i < sizes.size(); ++i) {
    CAPTURE(i, sizes[i]);
    const std::vector<int64_t> shape =
        c.channels == 1 && i % 2 == 0 ? std::vector<int64_t>{sizes[i]}
                                      : std::vector<int64_t>{c.channels, sizes[i]};
    const HostArray chunk = RandomArray(c.dtype, shape, seed * 1000 + i);
    absl::StatusOr<HostArray> want = a.Push(device, chunk);
    REQUIRE(want.ok());
    std::memcpy(buf.x.data(), chunk.raw(), chunk.nbytes());
    std::memset(buf.y.data(), 0x5a, buf.y.size());  // unwritten outputs show
    const HostSignalRef ref{c.dtype, shape, buf.x.data()};
    absl::StatusOr<int64_t> count =
        b.PushInto(device, ref, buf.y.data(), room, nullptr, overlap_chunk_bytes);
    REQUIRE(count.ok());
    REQUIRE(*count == want->shape().back());
    REQUIRE(*count <= b.MaxPushOutputSamples(sizes[i]));
    REQUIRE(std::memcmp(buf.y.data(), want->raw(), want->nbytes()) == 0);
    REQUIRE(a.samples_out() == b.samples_out());
  }
  absl::StatusOr<HostArray> tail_a = a.Finish(device), tail_b = b.Finish(device);
  REQUIRE(tail_a.ok());
  REQUIRE(tail_b.ok());
  REQUIRE(tail_a->nbytes() == tail_b->nbytes());
  REQUIRE(std::memcmp(tail_a->raw(), tail_b->raw(), tail_a->nbytes()) == 0);
}

TEST_CASE("PushInto gives Push's bytes on the CPU", "[interp][stream][push_into]") {
  const Device cpu = Device::Cpu();
  for (const StreamCase& c : StreamCases()) {
    for (uint64_t seed : {1, 2}) CheckPushIntoEqualsPush(cpu, c, seed, false, 0);
  }
}

TEST_CASE("PushInto refuses a short buffer, a wrong chunk, and consumes nothing then",
          "[interp][stream][push_into]") {
  const Device cpu = Device::Cpu();
  const StreamCase c{DType::kFloat32, 2, 3, 2, 17, 0.0};
  StreamingResampler s = Make(c), ref = Make(c);
  const HostArray chunk = RandomArray(DType::kFloat32, {2, 100}, 3);
  const HostSignalRef x{DType::kFloat32, {2, 100}, chunk.raw()};
  std::string y(static_cast<size_t>(2 * s.MaxPushOutputSamples(100)) * 4, '\0');
  absl::StatusOr<int64_t> short_y = s.PushInto(cpu, x, y.data(), 8);
  REQUIRE(short_y.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(short_y.status().message()).rfind("y:", 0) == 0);
  const HostSignalRef wrong_dtype{DType::kFloat64, {2, 50}, chunk.raw()};
  REQUIRE(s.PushInto(cpu, wrong_dtype, y.data(), static_cast<int64_t>(y.size())).status().code() ==
          absl::StatusCode::kInvalidArgument);
  const HostSignalRef wrong_shape{DType::kFloat32, {3, 10}, chunk.raw()};
  REQUIRE(s.PushInto(cpu, wrong_shape, y.data(), static_cast<int64_t>(y.size())).status().code() ==
          absl::StatusCode::kInvalidArgument);
  const HostSignalRef null_data{DType::kFloat32, {2, 100}, nullptr};
  REQUIRE(s.PushInto(cpu, null_data, y.data(), static_cast<int64_t>(y.size())).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(s.samples_in() == 0);
  // Still the stream it was: the same outputs as a fresh one.
  absl::StatusOr<int64_t> n = s.PushInto(cpu, x, y.data(), static_cast<int64_t>(y.size()));
  REQUIRE(n.ok());
  absl::StatusOr<HostArray> want = ref.Push(cpu, chunk);
  REQUIRE(want.ok());
  REQUIRE(*n == want->shape().back());
  REQUIRE(std::memcmp(y.data(), want->raw(), want->nbytes()) == 0);
  REQUIRE(s.Finish(cpu).ok());
  REQUIRE(s.PushInto(cpu, x, y.data(), static_cast<int64_t>(y.size())).status().code() ==
          absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("PushInto gives Push's bytes on the GPU, pinned and pageable, overlapped or not",
          "[interp][stream][push_into][gpu]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  for (const StreamCase& c : StreamCases()) {
    CheckPushIntoEqualsPush(gpu, c, 1, false, 0);
    CheckPushIntoEqualsPush(gpu, c, 2, true, 0);
    // Windows of 1024 outputs (the pipeline's smallest): most chunks are cut in several.
    CheckPushIntoEqualsPush(gpu, c, 3, true, 1);
  }
}

}  // namespace
}  // namespace fresnel::interp
