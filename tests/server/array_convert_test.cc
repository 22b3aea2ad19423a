#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

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
    CHECK(static_cast<const char*>(a.raw())[a.nbytes()] == '\0');  // std::string's terminator
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

TEST_CASE("a borrowed array is a view; its copies own their bytes", "[proto]") {
  std::vector<float> memory = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<HostArray> view =
      HostArray::Borrow(DType::kFloat32, {2, 3}, memory.data(), memory.size() * sizeof(float), "x");
  REQUIRE(view.ok());
  CHECK(view->borrowed());
  CHECK(view->raw() == memory.data());
  CHECK(view->nbytes() == 24);
  view->data<float>()[1] = 20;  // writes through to the memory
  CHECK(memory[1] == 20);

  HostArray copy = *view;  // owns: later writes to the memory do not reach it
  CHECK_FALSE(copy.borrowed());
  CHECK(copy.raw() != memory.data());
  memory[0] = 10;
  CHECK(copy.data<float>()[0] == 1);
  CHECK(copy.data<float>()[1] == 20);
  HostArray assigned;
  assigned = *view;
  CHECK_FALSE(assigned.borrowed());
  CHECK(assigned.bytes() == view->bytes());

  HostArray moved = *std::move(view);  // a move keeps the view and empties the source
  CHECK(moved.borrowed());
  CHECK(moved.raw() == memory.data());
  CHECK(view->nbytes() == 0);
  CHECK(view->ndim() == 0);
  CHECK_FALSE(view->borrowed());

  v1::NdArray wire;
  ToProto(std::move(moved), &wire);  // the bytes are copied out of the view, not taken
  CHECK(wire.data().size() == 24);
  CHECK(std::memcmp(wire.data().data(), memory.data(), 24) == 0);

  // Same checks as FromBytes, naming the field; no bytes at all is an empty array.
  absl::StatusOr<HostArray> short_view =
      HostArray::Borrow(DType::kFloat32, {2, 3}, memory.data(), 20, "phase");
  REQUIRE_FALSE(short_view.ok());
  CHECK(short_view.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(short_view.status().message().find("phase.data has 20 bytes") != std::string::npos);
  CHECK_FALSE(HostArray::Borrow(DType::kFloat32, {2}, nullptr, 8, "phase").ok());
  absl::StatusOr<HostArray> empty = HostArray::Borrow(DType::kUint8, {0}, nullptr, 0, "phase");
  REQUIRE(empty.ok());
  CHECK_FALSE(empty->borrowed());
  CHECK(empty->size() == 0);
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
