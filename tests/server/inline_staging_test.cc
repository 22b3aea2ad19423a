// Inline (unary) Upfirdn / ResamplePoly through the server's staging buffers (issue 10, item 3):
// x copied from the received slices into a (pinned) staging buffer, y written by the kernel into
// another and sent from there. The raw wire helpers are the protobuf encoding both ways, the
// parallel gather copies exactly, staging buffers are reused and never reach a client unzeroed,
// and the results equal the HostArray path (a server without staging) and the CPU kernel bit
// for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "fresnel/core/copy.h"
#include "fresnel/interp/interp.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/interpolation.grpc.pb.h"
#include "fresnel/v1/region_wire.h"
#include "server/shm.h"
#include "server_fixture.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// `wire` cut into slices of `step` bytes, as gRPC may hand a received message over.
grpc::ByteBuffer Cut(const std::string& wire, size_t step) {
  std::vector<grpc::Slice> parts;
  for (size_t at = 0; at < wire.size(); at += step) parts.emplace_back(wire.substr(at, step));
  return grpc::ByteBuffer(parts.data(), parts.size());
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  REQUIRE(buffer.Dump(&slices).ok());
  std::string wire;
  for (const grpc::Slice& s : slices) wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return wire;
}

TEST_CASE("GatherBytes copies pieces in order, serially and in parallel", "[server][inline]") {
  for (size_t total : {size_t{0}, size_t{1000}, size_t{37} << 20}) {
    const std::string src = RandomBytes(total, 5);
    std::vector<BytePiece> pieces;
    std::mt19937 rng(9);
    for (size_t at = 0; at < total;) {
      size_t n = std::min<size_t>(total - at, rng() % 3 == 0 ? 0 : 1 + rng() % (3 << 20));
      pieces.push_back({src.data() + at, n});
      at += n;
    }
    std::string dst(total + 16, '\x7f');
    GatherBytes(pieces, dst.data());
    CHECK(dst.compare(0, total, src) == 0);
    CHECK(dst.substr(total) == std::string(16, '\x7f'));  // nothing written past the end
    // Part by part, at boundaries inside pieces, small and parallel: the same bytes, and nothing
    // outside the range written.
    std::string parts(total + 16, '\x7f');
    size_t at = 0;
    for (size_t step : {size_t{777}, size_t{9} << 20, size_t{1}, size_t{5} << 20}) {
      const size_t end = std::min(total, at + step);
      GatherBytesRange(pieces, parts.data(), at, end);
      CHECK(parts.compare(0, end, src, 0, end) == 0);
      CHECK(parts.substr(end, 16) == std::string(std::min<size_t>(16, total + 16 - end), '\x7f'));
      at = end;
    }
    GatherBytesRange(pieces, parts.data(), at, SIZE_MAX);  // the rest, end clamped
    CHECK(parts.compare(0, total, src) == 0);
    CHECK(parts.substr(total) == std::string(16, '\x7f'));
  }
}

TEST_CASE("InlineArrayRequest and MessageWithArrayBuffer are the protobuf encoding",
          "[server][inline][transfer]") {
  v1::UpfirdnRequest req;
  req.set_request_id("r-1");
  req.mutable_x()->set_dtype(v1::FLOAT32);
  req.mutable_x()->add_shape(2);
  req.mutable_x()->add_shape(50000);
  req.mutable_x()->set_data(RandomBytes(400000, 3));
  HostArray taps = RandomArray(DType::kFloat64, {17}, 4);
  ToProto(taps, req.mutable_taps());
  req.set_up(3);
  req.set_axis(-1);
  req.mutable_y_shm()->set_region("out");
  const std::string wire = req.SerializeAsString();
  for (size_t step : {size_t{1}, size_t{4093}, wire.size()}) {
    if (step == 1 && wire.size() > 100000) {
      // one byte per slice is slow for 400 kB: do it on a small message only
      v1::UpfirdnRequest small = req;
      small.mutable_x()->set_data(RandomBytes(300, 1));
      v1::InlineArrayRequest view;
      v1::UpfirdnRequest parsed;
      REQUIRE(view.Parse(Cut(small.SerializeAsString(), 1), 2, "request", &parsed).ok());
      CHECK(view.DataString() == small.x().data());
      continue;
    }
    v1::InlineArrayRequest view;
    v1::UpfirdnRequest parsed;
    REQUIRE(view.Parse(Cut(wire, step), v1::UpfirdnRequest::kXFieldNumber, "request", &parsed)
                .ok());
    CHECK(parsed.x().data().empty());
    CHECK(view.data_bytes() == static_cast<int64_t>(req.x().data().size()));
    CHECK(view.DataString() == req.x().data());
    v1::UpfirdnRequest back = parsed;
    back.mutable_x()->set_data(view.DataString());
    CHECK(back.SerializeAsString() == wire);
  }
  // Fields out of order and x split in two occurrences (protobuf merges them): still parsed.
  v1::UpfirdnRequest head = req;
  head.clear_x();
  v1::UpfirdnRequest part1, part2;
  part1.mutable_x()->set_dtype(v1::FLOAT32);
  part1.mutable_x()->add_shape(2);
  part2.mutable_x()->add_shape(50000);
  part2.mutable_x()->set_data(req.x().data());
  const std::string shuffled =
      part2.SerializeAsString() + head.SerializeAsString() + part1.SerializeAsString();
  v1::InlineArrayRequest view;
  v1::UpfirdnRequest parsed;
  REQUIRE(view.Parse(Cut(shuffled, 65536), 2, "request", &parsed).ok());
  v1::UpfirdnRequest want;
  REQUIRE(want.ParseFromString(shuffled));
  CHECK(view.DataString() == want.x().data());
  want.mutable_x()->clear_data();
  CHECK(parsed.SerializeAsString() == want.SerializeAsString());
  // Garbage and truncation are INVALID_ARGUMENT naming the field.
  absl::Status bad = view.Parse(Cut(std::string("\x12\xff\xff\xff\x0f", 5), 5), 2, "request",
                                &parsed);
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.message()).find("request") != std::string::npos);
  CHECK(view.Parse(Cut(wire.substr(0, wire.size() - 10), 999), 2, "request", &parsed).code() ==
        absl::StatusCode::kInvalidArgument);

  // A response sent with its data as a separate slice parses as the whole message.
  v1::InterpolationResponse resp;
  resp.set_request_id("r-1");
  resp.mutable_info()->set_device("cpu");
  resp.mutable_info()->set_total_seconds(0.25);
  v1::NdArray meta;
  meta.set_dtype(v1::COMPLEX64);
  meta.add_shape(3);
  meta.add_shape(7);
  const std::string y = RandomBytes(3 * 7 * 8, 8);
  grpc::ByteBuffer out = v1::MessageWithArrayBuffer(resp, v1::InterpolationResponse::kYFieldNumber,
                                                    meta, y.data(), y.size(), nullptr);
  v1::InterpolationResponse got;
  REQUIRE(got.ParseFromString(Flatten(out)));
  v1::InterpolationResponse expect = resp;
  *expect.mutable_y() = meta;
  expect.mutable_y()->set_data(y);
  CHECK(got.SerializeAsString() == expect.SerializeAsString());
}

TEST_CASE("inline staging buffers are reused and never reach another client unzeroed",
          "[server][inline][staging]") {
  server::ShmRegistryOptions o;
  o.cap_bytes = 8 << 20;
  o.staging_cache_bytes = 4 << 20;
  server::ShmRegistry reg(o);
  CHECK(reg.AcquireStaging(0).status().code() == absl::StatusCode::kInvalidArgument);
  const char* first = nullptr;
  {
    auto span = reg.AcquireStaging(2 << 20);
    REQUIRE(span.ok());
    first = span->data;
    std::memset(span->data, 0x33, 2 << 20);
    CHECK(reg.mapped_bytes() == (2 << 20));  // counted in --shm-bytes
  }
  CHECK(reg.staging_cached_bytes() == (2 << 20));
  {
    auto again = reg.AcquireStaging((1 << 20) + 1);  // fits the kept buffer: reused, not zeroed
    REQUIRE(again.ok());
    CHECK(again->data == first);
    CHECK(reg.staging_reuses() == 1);
    auto more = reg.AcquireStaging(7 << 20);  // over --shm-bytes with the first one held
    CHECK(more.status().code() == absl::StatusCode::kResourceExhausted);
  }
  // A client's staging region that gets the buffer gets zeros, not a request's bytes.
  v1::RegisterRegionRequest r;
  r.set_name("s");
  r.set_size_bytes(2 << 20);
  REQUIRE(reg.Register("a", r).ok());
  CHECK(reg.staging_reuses() == 2);
  v1::ShmRef ref;
  ref.set_region("s");
  auto span = reg.Resolve("a", ref, 2 << 20, "chunk");
  REQUIRE(span.ok());
  bool zero = true;
  for (int64_t i = 0; i < (2 << 20); i += 4093) zero = zero && span->data[i] == 0;
  CHECK(zero);
}

std::unique_ptr<v1::InterpolationService::Stub> Stub(const TestServer& ts) {
  return v1::InterpolationService::NewStub(ts.channel);
}

// Upfirdn and ResamplePoly of `x` on `ts`: the answers' y.
struct Answers {
  std::string upfirdn, resample_poly;
  std::string upfirdn_device;
};
Answers Run(const TestServer& ts, const HostArray& x, const HostArray& taps, bool gpu) {
  auto stub = Stub(ts);
  Answers a;
  v1::UpfirdnRequest req;
  ToProto(x, req.mutable_x());
  ToProto(taps, req.mutable_taps());
  req.set_up(3);
  req.set_down(2);
  if (gpu) req.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  v1::InterpolationResponse resp;
  grpc::ClientContext c1;
  grpc::Status st = stub->Upfirdn(&c1, req, &resp);
  REQUIRE(st.ok());
  a.upfirdn = resp.y().data();
  a.upfirdn_device = resp.info().device();
  v1::ResamplePolyRequest rp;
  ToProto(x, rp.mutable_x());
  rp.set_up(160);
  rp.set_down(147);
  if (gpu) rp.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  grpc::ClientContext c2;
  v1::InterpolationResponse rresp;
  st = stub->ResamplePoly(&c2, rp, &rresp);
  REQUIRE(st.ok());
  a.resample_poly = rresp.y().data();
  return a;
}

// "" when the answers are the same bytes, else how they differ (not the megabytes themselves).
std::string FirstDifference(const std::string& got, const std::string& want, size_t item) {
  if (got == want) return "";
  if (got.size() != want.size()) {
    return "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  }
  size_t first = got.size(), count = 0;
  for (size_t i = 0; i < got.size(); i += item) {
    if (std::memcmp(got.data() + i, want.data() + i, item) != 0) {
      first = std::min(first, i / item);
      ++count;
    }
  }
  return std::to_string(count) + " of " + std::to_string(got.size() / item) +
         " elements differ, the first at " + std::to_string(first);
}

void CompareStagedWithHostArrayPath(const server::ServerConfig& base, bool gpu,
                                    std::vector<int64_t> shape = {3, 900001}) {
  server::ServerConfig staged_cfg = base;  // staging on (--shm-bytes default)
  server::ServerConfig plain_cfg = base;
  plain_cfg.shm_bytes = 0;  // no registry: the HostArray path, as before issue 10
  TestServer staged(staged_cfg), plain(plain_cfg);
  const DType dtype = GENERATE(DType::kFloat32, DType::kComplex64, DType::kFloat64);
  // Over 8 MiB for the float32 case, so the gather runs in parallel over many received slices.
  HostArray x = RandomArray(dtype, shape, 21);
  HostArray taps = RandomArray(DType::kFloat64, {48}, 22);
  const Answers want = Run(plain, x, taps, gpu);
  for (int round = 0; round < 2; ++round) {  // the second round reuses the staging buffers
    const Answers got = Run(staged, x, taps, gpu);
    CAPTURE(DTypeName(dtype), round);
    CHECK(FirstDifference(got.upfirdn, want.upfirdn, DTypeSize(dtype)) == "");
    CHECK(FirstDifference(got.resample_poly, want.resample_poly, DTypeSize(dtype)) == "");
    if (gpu) CHECK(got.upfirdn_device.rfind("cuda", 0) == 0);
  }
  if (!gpu) {  // and the CPU kernel, the oracle
    interp::UpfirdnOptions o;
    o.up = 3;
    o.down = 2;
    std::vector<double> t(taps.data<double>(), taps.data<double>() + taps.size());
    auto y = interp::Upfirdn(Device::Cpu(), t, x, o);
    REQUIRE(y.ok());
    CHECK(y->bytes() == want.upfirdn);
  }
}

TEST_CASE("inline Upfirdn / ResamplePoly through staging equal the HostArray path bit for bit",
          "[server][inline]") {
  CompareStagedWithHostArrayPath(TestServer::CpuConfig(), false);
}

TEST_CASE("GPU server: inline arrays through pinned staging = HostArray path", "[server][inline][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  CompareStagedWithHostArrayPath(config, true);
}

TEST_CASE("GPU server: the direct path's copy/compute overlap in small chunks = HostArray path",
          "[server][inline][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  // 256 KiB of y per chunk: tens of chunks on the three streams, x gathered chunk by chunk (1-D)
  // or at once (3 rows), chunk boundaries nowhere near a multiple of up or down.
  config.overlap_chunk_bytes = 256 << 10;
  CompareStagedWithHostArrayPath(config, true, {2700001});
  CompareStagedWithHostArrayPath(config, true, {3, 900001});
}

TEST_CASE("inline requests with bad x through the raw path get INVALID_ARGUMENT",
          "[server][inline]") {
  TestServer ts;
  auto stub = Stub(ts);
  HostArray x = RandomArray(DType::kFloat32, {2, 1000}, 2);
  v1::UpfirdnRequest req;
  ToProto(x, req.mutable_x());
  req.mutable_taps()->set_dtype(v1::FLOAT64);
  req.mutable_taps()->add_shape(1);
  double one = 1.0;
  req.mutable_taps()->set_data(&one, sizeof one);
  SECTION("data and shape disagree") {
    req.mutable_x()->set_shape(1, 999);
    v1::InterpolationResponse resp;
    grpc::ClientContext c;
    grpc::Status st = stub->Upfirdn(&c, req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message().find("x.data") != std::string::npos);
  }
  SECTION("data and shape disagree, x large enough to be staged") {
    HostArray big = RandomArray(DType::kFloat32, {2, 300000}, 3);
    ToProto(big, req.mutable_x());
    req.mutable_x()->set_shape(1, 300001);
    v1::InterpolationResponse resp;
    grpc::ClientContext c;
    grpc::Status st = stub->Upfirdn(&c, req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message().find("x.data") != std::string::npos);
    ToProto(x, req.mutable_x());
  }
  SECTION("data and shm both set") {
    req.mutable_x()->mutable_shm()->set_region("io");
    v1::InterpolationResponse resp;
    grpc::ClientContext c;
    grpc::Status st = stub->Upfirdn(&c, req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message().find("x") != std::string::npos);
  }
  SECTION("bytes that are no UpfirdnRequest") {
    grpc::GenericStub generic(ts.channel);
    grpc::ClientContext c;
    grpc::Slice junk(std::string("\x12\xff\xff\xff\x0f", 5));
    grpc::ByteBuffer bad(&junk, 1), out;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&c, "/fresnel.v1.InterpolationService/Upfirdn", grpc::StubOptions(), &bad,
                      &out, [&](grpc::Status s) { done.set_value(s); });
    grpc::Status st = done.get_future().get();
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  // The server still serves.
  v1::InterpolationResponse resp;
  grpc::ClientContext c;
  req.mutable_x()->set_shape(1, 1000);
  req.mutable_x()->clear_shm();
  REQUIRE(stub->Upfirdn(&c, req, &resp).ok());
  CHECK(resp.y().data() == x.bytes());
}

}  // namespace
}  // namespace fresnel::testing
