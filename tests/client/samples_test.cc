// The client's sample-axis chunking: SliceSamples / ConcatSamples / StreamChunkSamples.
#include <catch2/catch.hpp>

#include <random>

#include "fresnel/client/client.h"
#include "support/test_support.h"

namespace fresnel {
namespace {

using testing::MaxAbsError;
using testing::RandomArray;

TEST_CASE("SliceSamples and ConcatSamples split and rebuild a signal", "[client]") {
  std::mt19937 rng(std::random_device{}());
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kComplex64}) {
    for (int64_t channels : {1, 3}) {
      const int64_t n = std::uniform_int_distribution<int64_t>(0, 2000)(rng);
      const int64_t chunk = std::uniform_int_distribution<int64_t>(1, 300)(rng);
      HostArray x = RandomArray(dtype, {channels, n});
      std::vector<HostArray> pieces;
      for (int64_t begin = 0; begin < n; begin += chunk) {
        auto piece = SliceSamples(x, begin, std::min(chunk, n - begin));
        REQUIRE(piece.ok());
        REQUIRE(piece->shape() == std::vector<int64_t>{channels, std::min(chunk, n - begin)});
        pieces.push_back(*std::move(piece));
      }
      auto y = ConcatSamples(pieces, channels, dtype);
      REQUIRE(y.ok());
      CHECK(y->shape() == x.shape());
      CHECK(y->bytes() == x.bytes());
    }
  }
}

TEST_CASE("SliceSamples takes the right columns of every channel", "[client]") {
  HostArray x = RandomArray(DType::kFloat32, {2, 10});
  auto s = SliceSamples(x, 3, 4);
  REQUIRE(s.ok());
  for (int c = 0; c < 2; ++c) {
    for (int j = 0; j < 4; ++j) CHECK(s->data<float>()[c * 4 + j] == x.data<float>()[c * 10 + 3 + j]);
  }
  // 1-D input gives [1, k].
  HostArray v = RandomArray(DType::kFloat64, {7});
  auto sv = SliceSamples(v, 5, 2);
  REQUIRE(sv.ok());
  CHECK(sv->shape() == std::vector<int64_t>{1, 2});
  CHECK(sv->data<double>()[1] == v.data<double>()[6]);
  // An empty slice at the end is allowed.
  CHECK(SliceSamples(v, 7, 0).ok());
}

TEST_CASE("SliceSamples and ConcatSamples reject bad input", "[client]") {
  HostArray x = RandomArray(DType::kFloat32, {2, 10});
  CHECK(SliceSamples(x, 8, 3).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(SliceSamples(x, -1, 2).status().code() == absl::StatusCode::kInvalidArgument);
  HostArray cube = RandomArray(DType::kFloat32, {2, 2, 2});
  auto bad = SliceSamples(cube, 0, 1);
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("[2, 2, 2]") != std::string::npos);
  // Mismatched channels or dtype.
  std::vector<HostArray> pieces = {RandomArray(DType::kFloat32, {2, 3}),
                                   RandomArray(DType::kFloat32, {3, 3})};
  CHECK(ConcatSamples(pieces, 2, DType::kFloat32).status().code() ==
        absl::StatusCode::kInvalidArgument);
  pieces = {RandomArray(DType::kFloat64, {2, 3})};
  CHECK(!ConcatSamples(pieces, 2, DType::kFloat32).ok());
  // No pieces: an empty [channels, 0] result.
  auto empty = ConcatSamples({}, 4, DType::kFloat32);
  REQUIRE(empty.ok());
  CHECK(empty->shape() == std::vector<int64_t>{4, 0});
  // 1-D pieces count as one channel.
  auto one = ConcatSamples({RandomArray(DType::kFloat32, {5}), RandomArray(DType::kFloat32, {2})},
                           1, DType::kFloat32);
  REQUIRE(one.ok());
  CHECK(one->shape() == std::vector<int64_t>{1, 7});
}

TEST_CASE("StreamChunkSamples keeps request and response under the cap", "[client]") {
  const int64_t cap = 4 << 20;
  for (int up : {1, 3, 160}) {
    for (int down : {1, 2, 147}) {
      for (int64_t channels : {1, 2, 8}) {
        const int64_t k = StreamChunkSamples(cap, channels, DType::kFloat32, up, down);
        CHECK(k >= 1);
        const double request = static_cast<double>(k) * channels * 4;
        const double response = request * up / down;
        CHECK(request <= cap / 4.0);
        CHECK(response <= cap / 4.0 + channels * 4);
      }
    }
  }
  CHECK(StreamChunkSamples(16, 64, DType::kComplex128, 8, 1) == 1);
}

}  // namespace
}  // namespace fresnel
