// ChunkedWriter -> ChunkedReader round trips of named arrays, and the reader's refusals.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "server/rpc/chunked.h"

namespace fresnel::server {
namespace {

HostArray RandomBytes(DType dtype, std::vector<int64_t> shape, std::mt19937_64& rng) {
  HostArray a(dtype, std::move(shape));
  for (size_t i = 0; i < a.nbytes(); ++i) static_cast<uint8_t*>(a.raw())[i] = rng() & 0xff;
  return a;
}

TEST_CASE("named arrays survive ChunkedWriter -> ChunkedReader in order", "[server][chunked]") {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t chunk = 4096;
  const HostArray a = RandomBytes(DType::kFloat32, {37, 113}, rng);  // 16724 bytes: 5 chunks
  HostArray b = RandomBytes(DType::kUint8, {4096}, rng);             // exactly one chunk
  const HostArray empty(DType::kFloat64, {0, 3});                    // zero bytes: one chunk
  const HostArray b_copy = b;
  ChunkedWriter writer(chunk);
  writer.AddBorrowed(7, &a);
  writer.Add(3, std::move(b));
  writer.AddBorrowed(9, &empty);
  CHECK(writer.names() == std::vector<int>{7, 3, 9});

  ChunkedReader reader("chunk.array", {{7, "alpha", 1 << 20}, {3, "beta", 4096}});
  reader.Expect({9, "gamma", 0});
  std::vector<int> order;
  int messages = 0;
  while (writer.Next([&](int name, v1::ArrayChunk&& c) {
    CHECK(static_cast<int64_t>(c.data().size()) <= chunk);
    order.push_back(name);
    REQUIRE(reader.Add(name, std::move(c)).ok());
  })) {
    ++messages;
  }
  CHECK(writer.done());
  CHECK(messages == 5 + 1 + 1);
  CHECK(order == std::vector<int>{7, 7, 7, 7, 7, 3, 9});
  CHECK_FALSE(writer.Next([](int, v1::ArrayChunk&&) { FAIL("no chunk after the last"); }));

  auto got_a = reader.Take(7);
  REQUIRE(got_a.ok());
  REQUIRE(got_a->has_value());
  CHECK((*got_a)->shape() == a.shape());
  CHECK((*got_a)->bytes() == a.bytes());
  auto got_b = reader.Take(3);
  REQUIRE(got_b.ok());
  CHECK((**got_b).bytes() == b_copy.bytes());
  auto got_empty = reader.Take(9);
  REQUIRE(got_empty.ok());
  CHECK((**got_empty).shape() == empty.shape());
}

TEST_CASE("ChunkedReader refuses unknown names, caps and cut-short uploads",
          "[server][chunked]") {
  std::mt19937_64 rng(std::random_device{}());
  const HostArray a = RandomBytes(DType::kUint8, {10000}, rng);
  ChunkedReader reader("chunk.array", {{1, "phase", 10000}, {2, "mask", 100}});
  CHECK_FALSE(reader.Received(1));
  auto none = reader.Take(1);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());  // nothing arrived: absent, not an error

  absl::Status unknown = reader.Add(5, ArrayChunkAt(a, 0, 4096));
  CHECK(unknown.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(unknown.message()),
             Catch::Contains("chunk.array") && Catch::Contains("phase (1)") &&
                 Catch::Contains("got 5"));

  absl::Status over = reader.Add(2, ArrayChunkAt(a, 0, 4096));  // declares 10000 > 100
  CHECK(over.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(over.message()), Catch::Contains("mask"));

  REQUIRE(reader.Add(1, ArrayChunkAt(a, 0, 4096)).ok());  // first of three chunks only
  CHECK(reader.Received(1));
  auto cut = reader.Take(1);
  CHECK(cut.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(cut.status().message()),
             Catch::Contains("phase") && Catch::Contains("before the chunk marked last"));
}

}  // namespace
}  // namespace fresnel::server
