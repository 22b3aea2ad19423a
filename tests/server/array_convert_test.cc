#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "fresnel/core/uninitialized_array.h"
#include "fresnel/v1/array_convert.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

TEST_CASE("NdArray round trips every dtype", "[proto]") {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kComplex64, DType::kComplex128,
                  DType::kUint8, DType::kUint16, DType::kInt16, DType::kInt32}) {
    HostArray a = RandomArray(d, {3, 5});
    v1::NdArray wire;
    ToProto(a, &wire);
    auto back = FromProto(wire, "x");
    REQUIRE(back.ok());
    CHECK(back->dtype() == d);
    CHECK(back->shape() == a.shape());
    CHECK(back->bytes() == a.bytes());
  }
}

TEST_CASE("UninitializedArray has the size, storage and moves of a zero-filled array",
          "[proto]") {
  // Small (heap) and large (>= 16 MiB: huge-page advice, parallel prefault) storage; every byte
  // written, then read back, moved into a message and out again.
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 5}, std::vector<int64_t>{0},
                                     std::vector<int64_t>{}, std::vector<int64_t>{3, 1 << 21}}) {
    HostArray a = UninitializedArray(DType::kFloat32, shape);
    CHECK(a.shape() == shape);
    REQUIRE(a.nbytes() == static_cast<size_t>(ShapeElements(shape)) * 4);
    CHECK(a.bytes().c_str()[a.nbytes()] == '\0');  // std::string's terminator is there
    const HostArray ref = RandomArray(DType::kFloat32, shape);
    if (a.nbytes() > 0) std::memcpy(a.raw(), ref.raw(), a.nbytes());
    CHECK(a.bytes() == ref.bytes());
    v1::NdArray wire;
    ToProto(std::move(a), &wire);
    auto back = FromProto(std::move(wire), "y");
    REQUIRE(back.ok());
    CHECK(back->bytes() == ref.bytes());
  }
  // The zero-filled constructor still zero-fills, large arrays included.
  HostArray z(DType::kUint8, {17 << 20});
  CHECK(std::all_of(z.bytes().begin(), z.bytes().end(), [](char c) { return c == 0; }));
}

TEST_CASE("FromProto names the field on bad arrays", "[proto]") {
  v1::NdArray wire;
  ToProto(RandomArray(DType::kFloat32, {4}), &wire);
  wire.add_shape(2);
  auto bad = FromProto(wire, "signal");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("signal.data"));
  wire.clear_shape();
  wire.add_shape(-4);
  CHECK_THAT(std::string(FromProto(wire, "signal").status().message()),
             Catch::Contains("signal.shape"));
  wire.set_dtype(v1::DTYPE_UNSPECIFIED);
  CHECK_THAT(std::string(FromProto(wire, "signal").status().message()),
             Catch::Contains("signal.dtype"));
}

TEST_CASE("element count times item size is overflow-checked", "[proto]") {
  // [2^61] float64 is 2^64 bytes, which wraps to 0 in size_t; [1, 2^62] float32 likewise.
  for (auto [dtype, shape] : {std::pair<v1::DType, std::vector<int64_t>>{v1::FLOAT64, {int64_t{1} << 61}},
                              {v1::FLOAT32, {1, int64_t{1} << 62}},
                              {v1::COMPLEX128, {int64_t{1} << 60}}}) {
    v1::NdArray wire;
    wire.set_dtype(dtype);
    for (int64_t d : shape) wire.add_shape(d);
    auto bad = FromProto(wire, "taps");
    REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(bad.status().message()), Catch::Contains("taps.shape"));
  }
}

TEST_CASE("chunks reassemble to the original array", "[proto]") {
  HostArray a = RandomArray(DType::kComplex64, {7, 33});
  for (int64_t chunk : {1, 7, 100, 1 << 20}) {
    auto chunks = SplitIntoChunks(a, chunk);
    ChunkAssembler assembler;
    bool done = false;
    for (auto& c : chunks) {
      auto r = assembler.Add(std::move(c), "field", 1 << 20);
      REQUIRE(r.ok());
      done = *r;
    }
    REQUIRE(done);
    auto back = assembler.Take("field");
    REQUIRE(back.ok());
    CHECK(back->shape() == a.shape());
    CHECK(back->bytes() == a.bytes());
  }
}

TEST_CASE("chunk assembly rejects gaps and oversize arrays", "[proto]") {
  HostArray a = RandomArray(DType::kFloat32, {100});
  auto chunks = SplitIntoChunks(a, 64);
  {
    ChunkAssembler assembler;
    REQUIRE(assembler.Add(std::move(chunks[0]), "f", 1 << 20).ok());
    auto r = assembler.Add(std::move(chunks[2]), "f", 1 << 20);
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  }
  {
    ChunkAssembler assembler;
    auto again = SplitIntoChunks(a, 64);
    auto r = assembler.Add(std::move(again[0]), "f", 100);
    CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
  }
  {
    // A first chunk that claims 4 GiB but carries 3 bytes reserves nothing like 4 GiB.
    ChunkAssembler assembler;
    v1::ArrayChunk c;
    c.set_dtype(v1::UINT8);
    c.add_shape(int64_t{4} << 30);
    c.set_total_bytes(int64_t{4} << 30);
    c.set_data("abc");
    REQUIRE(assembler.Add(std::move(c), "f", int64_t{8} << 30).ok());
    CHECK(assembler.held_bytes() < (1 << 20));
  }
}

}  // namespace
}  // namespace fresnel::testing
