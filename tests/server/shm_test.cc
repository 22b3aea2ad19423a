// Shared-memory regions (issue 10, item 4): the registry's bounds, ownership and lifetime rules,
// and Upfirdn / ResamplePoly with x and y in a region giving exactly what the gRPC path gives.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <future>
#include <thread>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "fresnel/io/npy.h"
#include "support/cli_runner.h"
#include "fresnel/client/client.h"
#include "fresnel/client/shm.h"
#include "fresnel/interp/interp.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/region_wire.h"
#include "fresnel/v1/shm.grpc.pb.h"
#include "server/shm.h"
#include "server_fixture.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

using server::ShmRegistry;
using server::ShmRegistryOptions;
using server::Clock;

// A POSIX shared-memory object of `size` bytes, unlinked at the end of the test.
struct TestObject {
  explicit TestObject(int64_t size) {
    static std::atomic<int> n{0};
    name = absl::StrCat("/fresnel-test-", getpid(), "-", n++);
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, size) == 0);
    close(fd);
  }
  ~TestObject() { shm_unlink(name.c_str()); }
  void Resize(int64_t size) const {
    int fd = shm_open(name.c_str(), O_RDWR, 0);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, size) == 0);
    close(fd);
  }
  std::string name;
};

v1::RegisterRegionRequest Req(const std::string& name, const std::string& shm_name, int64_t size) {
  v1::RegisterRegionRequest r;
  r.set_name(name);
  r.set_shm_name(shm_name);
  r.set_size_bytes(size);
  return r;
}

v1::ShmRef Ref(const std::string& region, int64_t offset) {
  v1::ShmRef r;
  r.set_region(region);
  r.set_offset_bytes(offset);
  return r;
}

bool Contains(const absl::Status& st, const std::string& text) {
  return st.message().find(text) != absl::string_view::npos;
}

TEST_CASE("shm registry: register, list, resolve and unregister", "[server][shm]") {
  TestObject obj(4096);
  ShmRegistry reg(ShmRegistryOptions{});
  auto info = reg.Register("alice", Req("a", obj.name, 4096));
  REQUIRE(info.ok());
  CHECK(info->size_bytes() == 4096);
  CHECK(reg.mapped_bytes() == 4096);
  REQUIRE(reg.List("alice").size() == 1);
  CHECK(reg.List("alice")[0].shm_name() == obj.name);
  CHECK(reg.List("bob").empty());  // ListRegions shows the caller's only

  // What the registry maps is the object itself: bytes written through one mapping are seen
  // through the other.
  auto span = reg.Resolve("alice", Ref("a", 100), 8, "x.shm");
  REQUIRE(span.ok());
  std::memcpy(span->data, "fresnel!", 8);
  auto again = reg.Resolve("alice", Ref("a", 100), 8, "x.shm");
  REQUIRE(again.ok());
  CHECK(std::memcmp(again->data, "fresnel!", 8) == 0);

  CHECK(reg.Register("alice", Req("a", obj.name, 16)).status().code() ==
        absl::StatusCode::kAlreadyExists);
  REQUIRE(reg.Unregister("alice", "a").ok());
  CHECK(reg.Unregister("alice", "a").code() == absl::StatusCode::kNotFound);
  CHECK(reg.List("alice").empty());
}

TEST_CASE("shm registry: bad regions get the right codes naming the field", "[server][shm]") {
  TestObject obj(4096);
  ShmRegistry reg(ShmRegistryOptions{});
  REQUIRE(reg.Register("alice", Req("a", obj.name, 4096)).ok());

  SECTION("unknown region") {
    auto s = reg.Resolve("alice", Ref("nope", 0), 8, "x.shm").status();
    CHECK(s.code() == absl::StatusCode::kNotFound);
    CHECK(Contains(s, "x.shm.region"));
  }
  SECTION("another client's region is NOT_FOUND (names are per client)") {
    auto s = reg.Resolve("bob", Ref("a", 0), 8, "x.shm").status();
    CHECK(s.code() == absl::StatusCode::kNotFound);
    CHECK(reg.Unregister("bob", "a").code() == absl::StatusCode::kNotFound);
    // and bob cannot map alice's object under a name of his own
    auto r = reg.Register("bob", Req("mine", obj.name, 4096)).status();
    CHECK(r.code() == absl::StatusCode::kPermissionDenied);
    CHECK(Contains(r, "another client"));
  }
  SECTION("out of bounds, overflow-safe") {
    for (auto [offset, n] : std::vector<std::pair<int64_t, int64_t>>{
             {4090, 8}, {4097, 0}, {-1, 4}, {0, 4097}, {INT64_MAX, 1}, {8, INT64_MAX - 4},
             {0, -1}}) {
      auto s = reg.Resolve("alice", Ref("a", offset), n, "y_shm").status();
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(Contains(s, "y_shm.offset_bytes"));
    }
    CHECK(reg.Resolve("alice", Ref("a", 4096), 0, "x.shm").ok());  // empty at the end is inside
    CHECK(reg.Resolve("alice", Ref("a", 0), 4096, "x.shm").ok());
  }
  SECTION("an object shrunk after registration is refused, not read") {
    obj.Resize(1024);
    auto s = reg.Resolve("alice", Ref("a", 0), 8, "x.shm").status();
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  }
}

TEST_CASE("shm registry: registration is validated and capped by --shm-bytes", "[server][shm]") {
  TestObject obj(1 << 20);
  ShmRegistryOptions o;
  o.cap_bytes = 1 << 20;
  ShmRegistry reg(o);
  CHECK(reg.Register("c", Req("", obj.name, 16)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(reg.Register("c", Req("a", "no-slash", 16)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(reg.Register("c", Req("a", "/a/b", 16)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(reg.Register("c", Req("a", obj.name, 0)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  auto small = reg.Register("c", Req("a", obj.name, (1 << 20) + 1)).status();
  // over the cap (checked before the object's size)
  CHECK(small.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(small, "--shm-bytes"));
  CHECK(reg.Register("c", Req("a", "/fresnel-test-does-not-exist", 16)).status().code() ==
        absl::StatusCode::kNotFound);
  REQUIRE(reg.Register("c", Req("a", obj.name, 1 << 19)).ok());
  auto over = reg.Register("c", Req("b", obj.name, (1 << 19) + 1)).status();
  CHECK(over.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(over, "--shm-bytes"));
  CHECK(reg.mapped_bytes() == (1 << 19));  // the failed ones hold nothing

  ShmRegistry roomy(ShmRegistryOptions{});
  auto big = roomy.Register("c", Req("a", obj.name, (1 << 20) + 1)).status();
  CHECK(big.code() == absl::StatusCode::kInvalidArgument);  // the object is smaller
  CHECK(Contains(big, "size_bytes"));
  CHECK(roomy.mapped_bytes() == 0);
}

TEST_CASE("staging regions: buffers are kept, reused, bounded and never leak between clients",
          "[server][shm][staging]") {
  ShmRegistryOptions o;
  o.cap_bytes = 8 << 20;
  o.staging_cache_bytes = 3 << 20;
  ShmRegistry reg(o);
  // A staging region (empty shm_name), filled and given back: its buffer is kept.
  REQUIRE(reg.Register("a", Req("s", "", 2 << 20)).ok());
  auto span = reg.Resolve("a", Ref("s", 0), 2 << 20, "chunk");
  REQUIRE(span.ok());
  std::memset(span->data, 0x5a, 2 << 20);
  *span = ShmSpan();
  REQUIRE(reg.Unregister("a", "s").ok());
  CHECK(reg.staging_cached_bytes() == (2 << 20));
  CHECK(reg.mapped_bytes() == (2 << 20));  // kept buffers stay counted in --shm-bytes

  // The same client gets it back (a size within [capacity / 2, capacity]).
  REQUIRE(reg.Register("a", Req("t", "", (1 << 20) + 4096)).ok());
  CHECK(reg.staging_reuses() == 1);
  CHECK(reg.staging_cached_bytes() == 0);
  auto again = reg.Resolve("a", Ref("t", 0), (1 << 20) + 4096, "chunk");
  REQUIRE(again.ok());
  CHECK(static_cast<unsigned char>(again->data[100]) == 0x5a);  // its own bytes: not re-zeroed
  // ... bounded to the registered size, not the buffer's capacity.
  CHECK(reg.Resolve("a", Ref("t", 0), (1 << 20) + 4097, "chunk").status().code() ==
        absl::StatusCode::kInvalidArgument);
  *again = ShmSpan();
  REQUIRE(reg.Unregister("a", "t").ok());

  // Another client reusing it reads zeros only.
  REQUIRE(reg.Register("b", Req("u", "", 2 << 20)).ok());
  CHECK(reg.staging_reuses() == 2);
  auto other = reg.Resolve("b", Ref("u", 0), 2 << 20, "chunk");
  REQUIRE(other.ok());
  bool zero = true;
  for (int64_t i = 0; i < (2 << 20); i += 4093) zero = zero && other->data[i] == 0;
  CHECK(zero);
  *other = ShmSpan();
  REQUIRE(reg.Unregister("b", "u").ok());

  // The cache holds at most staging_cache_bytes: a second buffer that does not fit is unmapped.
  REQUIRE(reg.Register("a", Req("v", "", 2 << 20)).ok());   // reuses the kept one
  REQUIRE(reg.Register("a", Req("w", "", 2 << 20)).ok());   // a fresh one
  CHECK(reg.mapped_bytes() == (4 << 20));
  REQUIRE(reg.Unregister("a", "v").ok());
  REQUIRE(reg.Unregister("a", "w").ok());
  CHECK(reg.staging_cached_bytes() == (2 << 20));
  CHECK(reg.mapped_bytes() == (2 << 20));

  // Kept buffers are only a cache: a registration that needs their budget drops them first; past
  // --shm-bytes itself it is RESOURCE_EXHAUSTED (it does not wait).
  REQUIRE(reg.Register("a", Req("big", "", 7 << 20)).ok());
  CHECK(reg.staging_cached_bytes() == 0);
  CHECK(reg.mapped_bytes() == (7 << 20));
  auto over = reg.Register("a", Req("more", "", 2 << 20)).status();
  CHECK(over.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(over, "--shm-bytes"));
  REQUIRE(reg.Unregister("a", "big").ok());
  CHECK(reg.staging_cached_bytes() == 0);  // 7 MiB is more than the cache keeps
  CHECK(reg.mapped_bytes() == 0);

  ShmRegistryOptions none = o;
  none.staging_cache_bytes = 0;
  ShmRegistry uncached(none);
  REQUIRE(uncached.Register("a", Req("s", "", 1 << 20)).ok());
  REQUIRE(uncached.Unregister("a", "s").ok());
  CHECK(uncached.mapped_bytes() == 0);
  CHECK(uncached.staging_cached_bytes() == 0);
}

TEST_CASE("shm registry: a region unregistered while a request uses it stays mapped for it",
          "[server][shm]") {
  TestObject obj(1 << 16);
  ShmRegistry reg(ShmRegistryOptions{});
  REQUIRE(reg.Register("c", Req("a", obj.name, 1 << 16)).ok());
  auto span = reg.Resolve("c", Ref("a", 0), 1 << 16, "y_shm");
  REQUIRE(span.ok());
  REQUIRE(reg.Unregister("c", "a").ok());
  CHECK(reg.Resolve("c", Ref("a", 0), 8, "x.shm").status().code() ==
        absl::StatusCode::kNotFound);
  // The request still writes its result: the mapping lives as long as its span.
  std::memset(span->data, 0x5a, 1 << 16);
  CHECK(static_cast<unsigned char>(span->data[(1 << 16) - 1]) == 0x5a);
  CHECK(reg.mapped_bytes() == (1 << 16));
  *span = ShmSpan();
  CHECK(reg.mapped_bytes() == 0);
  // The name is free again.
  CHECK(reg.Register("c", Req("a", obj.name, 64)).ok());
}

TEST_CASE("shm registry: idle regions expire after the TTL; use keeps them", "[server][shm]") {
  TestObject obj(4096);
  auto now = std::make_shared<Clock::time_point>(Clock::now());
  ShmRegistryOptions o;
  o.ttl_s = 10;
  o.now = [now] { return *now; };
  ShmRegistry reg(o);
  REQUIRE(reg.Register("c", Req("a", obj.name, 4096)).ok());
  REQUIRE(reg.Register("c", Req("b", obj.name, 4096)).ok());
  *now += std::chrono::seconds(8);
  REQUIRE(reg.Resolve("c", Ref("a", 0), 1, "x.shm").ok());  // a is used, b is not
  *now += std::chrono::seconds(8);
  auto left = reg.List("c");
  REQUIRE(left.size() == 1);
  CHECK(left[0].name() == "a");
  CHECK(left[0].idle_seconds() == Approx(8.0));
  CHECK(reg.mapped_bytes() == 4096);
  *now += std::chrono::seconds(11);
  CHECK(reg.List("c").empty());
  CHECK(reg.mapped_bytes() == 0);
}

TEST_CASE("NdArray.shm through the shared conversion", "[server][shm][proto]") {
  TestObject obj(4096);
  ShmRegistry reg(ShmRegistryOptions{});
  REQUIRE(reg.Register("c", Req("a", obj.name, 4096)).ok());
  HostArray x = RandomArray(DType::kFloat32, {2, 100});
  auto span = reg.Resolve("c", Ref("a", 256), x.nbytes(), "x");
  REQUIRE(span.ok());
  std::memcpy(span->data, x.raw(), x.nbytes());

  v1::NdArray wire = ShmArray(DType::kFloat32, {2, 100}, "a", 256);
  auto got = FromProto(v1::NdArray(wire), "x", reg.ResolverFor("c"));
  REQUIRE(got.ok());
  CHECK(got->bytes() == x.bytes());
  // Without a resolver (a call that takes no shared memory) it is refused, naming the field.
  auto refused = FromProto(v1::NdArray(wire), "phase");
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(refused.status(), "phase.shm"));
  // data and shm together are ambiguous.
  v1::NdArray both = wire;
  both.set_data("xx");
  CHECK(FromProto(std::move(both), "x", reg.ResolverFor("c")).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // Another client's name resolves nothing.
  CHECK(FromProto(v1::NdArray(wire), "x", reg.ResolverFor("other")).status().code() ==
        absl::StatusCode::kNotFound);
  // A shape whose byte count overflows int64 is refused before any range check.
  v1::NdArray huge = ShmArray(DType::kComplex128, {INT64_MAX / 8, 4}, "a", 0);
  auto h = FromProto(std::move(huge), "x", reg.ResolverFor("c"));
  CHECK(h.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(h.status(), "x.shape"));
}

// --- end to end: fresnel::Client + SharedRegion against an in-process fresneld ---

std::unique_ptr<Client> Connect(const TestServer& ts) {
  return ConnectClient(ts, std::chrono::seconds(60));
}

v1::UpfirdnRequest UpfirdnShape(const HostArray& x, int up, int down) {
  v1::UpfirdnRequest req;
  req.mutable_x()->set_dtype(ToProto(x.dtype()));
  req.mutable_x()->mutable_shape()->Assign(x.shape().begin(), x.shape().end());
  HostArray taps = RandomArray(DType::kFloat64, {31}, 7);
  ToProto(taps, req.mutable_taps());
  req.set_up(up);
  req.set_down(down);
  return req;
}

TEST_CASE("Upfirdn and ResamplePoly through a shared region equal the gRPC path bit for bit",
          "[server][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  const DType dtype = GENERATE(DType::kFloat32, DType::kFloat64, DType::kComplex64);
  HostArray x = RandomArray(dtype, {3, 5000}, 11);
  const int64_t x_off = 64;
  const int64_t y_off = 4096 + static_cast<int64_t>(x.nbytes());
  auto region = SharedRegion::Create(client.get(), "io", 1 << 22);
  REQUIRE(region.ok());
  REQUIRE((*region)->Write(x, x_off).ok());

  v1::UpfirdnRequest req = UpfirdnShape(x, 5, 3);
  v1::UpfirdnRequest inline_req = req;
  ToProto(x, inline_req.mutable_x());
  auto want = client->Upfirdn(inline_req);
  REQUIRE(want.ok());
  auto got = client->Upfirdn(req, **region, x_off, y_off);
  REQUIRE(got.ok());
  CHECK(got->y().data().empty());
  CHECK(got->y().shm().region() == "io");
  CHECK(got->y().shm().offset_bytes() == y_off);
  auto y = (*region)->Read(got->y());
  REQUIRE(y.ok());
  auto y_want = FromProto(want->y(), "y");
  REQUIRE(y_want.ok());
  CHECK(y->shape() == y_want->shape());
  CHECK(y->bytes() == y_want->bytes());

  v1::ResamplePolyRequest rp;
  rp.mutable_x()->set_dtype(ToProto(x.dtype()));
  rp.mutable_x()->mutable_shape()->Assign(x.shape().begin(), x.shape().end());
  rp.set_up(3);
  rp.set_down(7);
  v1::ResamplePolyRequest rp_inline = rp;
  ToProto(x, rp_inline.mutable_x());
  auto rp_want = client->ResamplePoly(rp_inline);
  REQUIRE(rp_want.ok());
  auto rp_got = client->ResamplePoly(rp, **region, x_off, y_off);
  REQUIRE(rp_got.ok());
  auto ry = (*region)->Read(rp_got->y());
  REQUIRE(ry.ok());
  CHECK(ry->bytes() == FromProto(rp_want->y(), "y")->bytes());

  // x from the region, y inline (no y_shm): the same bytes again.
  v1::UpfirdnRequest x_only = req;
  *x_only.mutable_x() = (*region)->Ref(x.dtype(), x.shape(), x_off);
  auto mixed = client->Upfirdn(x_only);
  REQUIRE(mixed.ok());
  CHECK(mixed->y().data() == want->y().data());
}

// On a GPU server: pinned regions and the direct path give the inline (HostArray) path's bits.
TEST_CASE("GPU server: pinned regions, direct path = inline bits", "[server][shm][gpu]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";  // regions are pinned (--pin-regions) and the calls run on the GPU
  TestServer ts(config);
  auto client = Connect(ts);
  const DType dtype = GENERATE(DType::kFloat32, DType::kComplex64, DType::kFloat64);
  HostArray x = RandomArray(dtype, {2, 300001}, 17);
  v1::UpfirdnRequest req = UpfirdnShape(x, 4, 1);
  req.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  v1::UpfirdnRequest inline_req = req;
  ToProto(x, inline_req.mutable_x());
  // Inline x and y: through the server's pinned staging buffers (inline_staging_test.cc checks
  // that path against the HostArray path).
  auto want = client->Upfirdn(inline_req);
  REQUIRE(want.ok());
  CHECK(want->info().device().rfind("cuda", 0) == 0);
  auto y_want = FromProto(want->y(), "y");
  REQUIRE(y_want.ok());

  // x and y in one shared region (pinned by the server), the direct path.
  const int64_t y_off = (static_cast<int64_t>(x.nbytes()) + 4095) / 4096 * 4096;
  auto region = SharedRegion::Create(client.get(), "gpu-io", y_off + y_want->nbytes());
  REQUIRE(region.ok());
  REQUIRE((*region)->Write(x, 0).ok());
  auto got = client->Upfirdn(req, **region, 0, y_off);
  REQUIRE(got.ok());
  CHECK(got->info().device().rfind("cuda", 0) == 0);
  auto y = (*region)->Read(got->y());
  REQUIRE(y.ok());
  CHECK(y->bytes() == y_want->bytes());

  // The chunked path: a staging region (pinned, kept and reused on the second call).
  v1::UpfirdnRequest shape_only = req;
  TransferOptions parallel;
  parallel.unary_max_bytes = 0;
  parallel.parallel_min_bytes = 0;
  parallel.streams = 3;
  parallel.chunk_bytes = 1 << 20;
  for (int call = 0; call < 2; ++call) {
    TransferReport report;
    auto chunked = client->UpfirdnArray(shape_only, x, parallel, {}, &report);
    REQUIRE(chunked.ok());
    CHECK(std::string(report.path) == "parallel");
    CHECK(report.info.device().rfind("cuda", 0) == 0);
    CHECK(chunked->bytes() == y_want->bytes());
  }

  // ResamplePoly the same way.
  v1::ResamplePolyRequest rp;
  rp.mutable_x()->set_dtype(ToProto(x.dtype()));
  rp.mutable_x()->mutable_shape()->Assign(x.shape().begin(), x.shape().end());
  rp.set_up(160);
  rp.set_down(147);
  rp.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
  v1::ResamplePolyRequest rp_inline = rp;
  ToProto(x, rp_inline.mutable_x());
  auto rp_want = client->ResamplePoly(rp_inline);
  REQUIRE(rp_want.ok());
  auto rp_chunked = client->ResamplePolyArray(rp, x, parallel, {});
  REQUIRE(rp_chunked.ok());
  CHECK(rp_chunked->bytes() == FromProto(rp_want->y(), "y")->bytes());
}

TEST_CASE("shm requests: bad regions get the right codes and the server survives",
          "[server][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  HostArray x = RandomArray(DType::kFloat32, {1000}, 3);
  auto region = SharedRegion::Create(client.get(), "r", 1 << 16);
  REQUIRE(region.ok());
  REQUIRE((*region)->Write(x, 0).ok());
  v1::UpfirdnRequest req = UpfirdnShape(x, 2, 1);

  auto listed = client->ListRegions();
  REQUIRE(listed.ok());
  REQUIRE(listed->regions_size() == 1);
  CHECK(listed->regions(0).name() == "r");
  CHECK(listed->ttl_seconds() > 0);

  v1::UpfirdnRequest unknown = req;
  *unknown.mutable_x() = ShmArray(DType::kFloat32, {1000}, "missing", 0);
  auto s1 = client->Upfirdn(unknown).status();
  CHECK(s1.code() == absl::StatusCode::kNotFound);
  CHECK(Contains(s1, "x.shm.region"));

  auto s2 = client->Upfirdn(req, **region, (1 << 16) - 100, 8192).status();
  CHECK(s2.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s2, "x.shm.offset_bytes"));

  auto s3 = client->Upfirdn(req, **region, 0, (1 << 16) - 100).status();  // y does not fit
  CHECK(s3.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s3, "y_shm.offset_bytes"));

  auto s4 = client->Upfirdn(req, **region, INT64_MAX, INT64_MAX).status();
  CHECK(s4.code() == absl::StatusCode::kInvalidArgument);

  // The server is still fine.
  REQUIRE(client->Upfirdn(req, **region, 0, 8192).ok());
  // Unregistered: the region's name is gone.
  REQUIRE((*region)->Unregister().ok());
  CHECK(client->Upfirdn(req, **region, 0, 8192).status().code() == absl::StatusCode::kNotFound);
  CHECK(client->UnregisterRegion("r").code() == absl::StatusCode::kNotFound);
}

// Filter taps may lie in a region too (Upfirdn, ResamplePoly, a ResampleStream's config).
TEST_CASE("filter taps in a shared region give the inline taps' bits", "[server][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  HostArray x = RandomArray(DType::kFloat32, {2, 3000}, 41);
  const DType taps_dtype = GENERATE(DType::kFloat64, DType::kComplex64);
  HostArray taps = RandomArray(taps_dtype, {37}, 42);
  const int64_t taps_off = 128;
  auto region = SharedRegion::Create(client.get(), "taps", 1 << 16);
  REQUIRE(region.ok());
  REQUIRE((*region)->Write(taps, taps_off).ok());
  const v1::NdArray taps_ref = (*region)->Ref(taps.dtype(), taps.shape(), taps_off);

  // The request with its taps inline and with them in the region give the same y; returns the
  // latter.
  auto same_y = [&](auto request, auto call) {
    auto inline_request = request;
    ToProto(taps, inline_request.mutable_taps());
    *request.mutable_taps() = taps_ref;
    auto want = call(inline_request);
    auto got = call(request);
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    CHECK(got->y().data() == want->y().data());
    CHECK(got->y().dtype() == want->y().dtype());
    return request;
  };
  v1::UpfirdnRequest up;
  ToProto(x, up.mutable_x());
  up.set_up(3);
  up.set_down(2);
  up = same_y(up, [&](const v1::UpfirdnRequest& r) { return client->Upfirdn(r); });
  v1::ResamplePolyRequest rp;
  ToProto(x, rp.mutable_x());
  rp.set_up(5);
  rp.set_down(4);
  rp = same_y(rp, [&](const v1::ResamplePolyRequest& r) { return client->ResamplePoly(r); });

  // Bad references name the taps.
  v1::UpfirdnRequest unknown = up;
  *unknown.mutable_taps() = ShmArray(taps.dtype(), taps.shape(), "missing", 0);
  auto s1 = client->Upfirdn(unknown).status();
  CHECK(s1.code() == absl::StatusCode::kNotFound);
  CHECK(Contains(s1, "taps.shm.region"));
  v1::ResamplePolyRequest outside = rp;
  *outside.mutable_taps() = (*region)->Ref(taps.dtype(), taps.shape(), (1 << 16) - 8);
  auto s2 = client->ResamplePoly(outside).status();
  CHECK(s2.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s2, "taps.shm.offset_bytes"));
  REQUIRE(client->Upfirdn(up).ok());  // the server is fine
}

TEST_CASE("shm requests: a region unregistered mid-request does not crash the server",
          "[server][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  HostArray x = RandomArray(DType::kFloat32, {4, 1 << 18}, 5);
  const int64_t y_off = static_cast<int64_t>(x.nbytes());
  for (int round = 0; round < 6; ++round) {
    auto region = SharedRegion::Create(client.get(), absl::StrCat("mid", round), 48 << 20);
    REQUIRE(region.ok());
    REQUIRE((*region)->Write(x, 0).ok());
    v1::UpfirdnRequest req = UpfirdnShape(x, 8, 1);
    auto call = std::async(std::launch::async,
                           [&] { return client->Upfirdn(req, **region, 0, y_off).status(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(round * 3));
    absl::Status un = (*region)->Unregister();
    absl::Status st = call.get();
    // Either the call resolved the region first (OK: it wrote y into the still-mapped region)
    // or the unregistration came first (NOT_FOUND); nothing else.
    INFO(st.ToString() << " / " << un.ToString());
    CHECK((st.ok() || st.code() == absl::StatusCode::kNotFound));
    CHECK(un.ok());
  }
  auto info = client->GetServerInfo();
  CHECK(info.ok());
}

TEST_CASE("ResampleStream chunks may lie in a shared region", "[server][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  HostArray x = RandomArray(DType::kFloat32, {1, 4000}, 13);
  auto region = SharedRegion::Create(client.get(), "chunks", 1 << 16);
  REQUIRE(region.ok());
  REQUIRE((*region)->Write(x, 128).ok());
  v1::UpfirdnRequest req = UpfirdnShape(x, 2, 1);
  v1::UpfirdnRequest inline_req = req;
  ToProto(x, inline_req.mutable_x());
  auto want = client->Upfirdn(inline_req);
  REQUIRE(want.ok());

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = ts.interp->ResampleStream(&ctx);
  v1::ResampleStreamRequest first;
  *first.mutable_config()->mutable_upfirdn() = req;
  first.mutable_config()->mutable_upfirdn()->mutable_x()->set_shape(1, 0);
  REQUIRE(stream->Write(first));
  v1::ResampleStreamRequest chunk;
  // Two chunks out of the region: samples [0, 1500) and [1500, 4000).
  *chunk.mutable_chunk() = (*region)->Ref(DType::kFloat32, {1, 1500}, 128);
  REQUIRE(stream->Write(chunk));
  *chunk.mutable_chunk() = (*region)->Ref(DType::kFloat32, {1, 2500}, 128 + 1500 * 4);
  chunk.set_end(true);
  REQUIRE(stream->Write(chunk));
  stream->WritesDone();
  std::string got;
  v1::ResampleStreamResponse resp;
  while (stream->Read(&resp)) got += resp.y().data();
  REQUIRE(stream->Finish().ok());
  CHECK(got == want->y().data());

  // A chunk in an unknown region ends the stream with NOT_FOUND naming chunk.shm.region.
  grpc::ClientContext ctx2;
  auto bad = ts.interp->ResampleStream(&ctx2);
  REQUIRE(bad->Write(first));
  *chunk.mutable_chunk() = ShmArray(DType::kFloat32, {1, 10}, "gone", 0);
  bad->Write(chunk);
  bad->WritesDone();
  while (bad->Read(&resp)) {
  }
  grpc::Status st = bad->Finish();
  CHECK(st.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(st.error_message().find("chunk.shm.region") != std::string::npos);
}

TEST_CASE("shm lets arrays larger than the message cap through", "[server][shm]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 20;
  TestServer ts(config);
  auto client = Connect(ts);
  HostArray x = RandomArray(DType::kFloat32, {1 << 19}, 9);  // 2 MiB in, 4 MiB out
  auto region = SharedRegion::Create(client.get(), "big", 8 << 20);
  REQUIRE(region.ok());
  REQUIRE((*region)->Write(x, 0).ok());
  v1::UpfirdnRequest req = UpfirdnShape(x, 2, 1);
  auto got = client->Upfirdn(req, **region, 0, 2 << 20);
  REQUIRE(got.ok());
  auto y = (*region)->Read(got->y());
  REQUIRE(y.ok());
  CHECK(y->nbytes() > (4u << 20) - 1);
  // the same result as the CPU kernel
  interp::UpfirdnOptions o;
  o.up = 2;
  auto taps = FromProto(req.taps(), "taps");
  REQUIRE(taps.ok());
  std::vector<double> t(taps->data<double>(), taps->data<double>() + taps->size());
  auto want = interp::Upfirdn(Device::Cpu(), t, x, o);
  REQUIRE(want.ok());
  CHECK(y->bytes() == want->bytes());
}

TEST_CASE("SharedMemoryService refuses what --shm-bytes does not allow", "[server][shm]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.shm_bytes = 0;
  TestServer ts(config);
  auto client = Connect(ts);
  auto region = SharedRegion::Create(client.get(), "r", 4096);
  REQUIRE_FALSE(region.ok());
  CHECK(region.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(region.status(), "--shm-bytes"));
}

TEST_CASE("chunked transfer: unary, one stream and parallel streams give identical results",
          "[server][shm][transfer]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 20;  // x (2.4 MB) and y do not fit one message
  TestServer ts(config);
  auto client = Connect(ts);
  HostArray x = RandomArray(DType::kFloat32, {2, 300000}, 31);
  v1::UpfirdnRequest req = UpfirdnShape(x, 3, 2);
  v1::ResamplePolyRequest rp;
  rp.set_up(2);
  rp.set_down(5);

  // The reference: the CPU kernel (what the unary call returns, tested in test_server).
  interp::UpfirdnOptions uo;
  uo.up = 3;
  uo.down = 2;
  auto taps = FromProto(req.taps(), "taps");
  REQUIRE(taps.ok());
  std::vector<double> t(taps->data<double>(), taps->data<double>() + taps->size());
  auto want = interp::Upfirdn(Device::Cpu(), t, x, uo);
  REQUIRE(want.ok());
  interp::ResamplePolyOptions ro;
  ro.up = 2;
  ro.down = 5;
  auto want_rp = interp::ResamplePoly(Device::Cpu(), x, ro);
  REQUIRE(want_rp.ok());

  struct Case {
    const char* path;
    TransferOptions options;
  };
  TransferOptions one;
  one.unary_max_bytes = 0;
  one.parallel_min_bytes = INT64_MAX;
  one.chunk_bytes = 256 << 10;
  TransferOptions three = one;
  three.parallel_min_bytes = 0;
  three.streams = 3;
  three.chunk_bytes = 100000;  // slices and chunks not aligned to samples
  for (const Case& c : {Case{"stream", one}, Case{"parallel", three}}) {
    INFO(c.path);
    TransferReport report;
    auto y = client->UpfirdnArray(req, x, c.options, {}, &report);
    REQUIRE(y.ok());
    CHECK(std::string(report.path) == c.path);
    CHECK(y->shape() == want->shape());
    CHECK(y->bytes() == want->bytes());
    auto yr = client->ResamplePolyArray(rp, x, c.options, {}, &report);
    REQUIRE(yr.ok());
    CHECK(yr->bytes() == want_rp->bytes());
  }
  // A small signal goes unary, and gives the same bytes as the kernel too.
  HostArray small = RandomArray(DType::kFloat32, {1000}, 2);
  TransferReport report;
  auto ys = client->ResamplePolyArray(rp, small, TransferOptions(), {}, &report);
  REQUIRE(ys.ok());
  CHECK(std::string(report.path) == "unary");
  CHECK(ys->bytes() == interp::ResamplePoly(Device::Cpu(), small, ro)->bytes());
  // Every staging region is gone again.
  auto listed = client->ListRegions();
  REQUIRE(listed.ok());
  CHECK(listed->regions_size() == 0);
}

// Segmented transfers: the call cut into sub-calls on windows of the filtered axis (each with
// the filter's halo) or on blocks of rows, pipelined. Every geometry must give the one-shot
// kernel's bytes: windows whose edges fall anywhere, decimation (s aligned to down), a filter
// shorter than up, SciPy's designed resample_poly filters and explicit ones.
TEST_CASE("segmented chunked transfer gives the one-shot result bit for bit",
          "[server][shm][transfer]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 20;
  TestServer ts(config);
  auto client = Connect(ts);
  TransferOptions seg;
  seg.unary_max_bytes = 0;
  seg.parallel_min_bytes = 0;
  seg.streams = 3;
  seg.chunk_bytes = 100000;  // chunks and slices not aligned to samples
  seg.segment_bytes = 1;
  seg.segments = GENERATE(2, 5, 8);
  // A fresh y made during the upload (2, 8) or when the first answer comes (5): every byte of
  // the never zero-filled y must come from the download either way.
  seg.prefault_y = seg.segments != 5;
  INFO("segments " << seg.segments << " prefault_y " << seg.prefault_y);

  struct Shape {
    std::vector<int64_t> dims;
    int axis;
  };
  auto upfirdn_ref = [](const HostArray& x, const std::vector<double>& taps, int up, int down,
                        int axis) {
    interp::UpfirdnOptions o;
    o.up = up;
    o.down = down;
    o.axis = axis;
    auto y = interp::Upfirdn(Device::Cpu(), taps, x, o);
    REQUIRE(y.ok());
    return *std::move(y);
  };
  uint64_t seed = 100;
  for (const Shape& shape : {Shape{{200003}, -1}, Shape{{3, 70001}, -1}, Shape{{1, 90001}, 1},
                             Shape{{80001, 1}, 0}, Shape{{9, 20011}, -1}}) {
    for (DType dtype : {DType::kFloat32, DType::kComplex128}) {
      HostArray x = RandomArray(dtype, shape.dims, ++seed);
      struct Filter {
        int up, down, taps;
      };
      for (const Filter& f : {Filter{3, 2, 31}, Filter{1, 7, 64}, Filter{4, 1, 1},
                              Filter{4, 1, 2}, Filter{2, 2, 9}, Filter{5, 3, 200}}) {
        INFO("shape " << ShapeString(shape.dims) << " axis " << shape.axis << " dtype "
                      << DTypeName(dtype) << " up " << f.up << " down " << f.down << " taps "
                      << f.taps);
        HostArray taps = RandomArray(DType::kFloat64, {f.taps}, ++seed);
        v1::UpfirdnRequest req;
        ToProto(taps, req.mutable_taps());
        req.set_up(f.up);
        req.set_down(f.down);
        req.set_axis(shape.axis);
        TransferReport report;
        auto y = client->UpfirdnArray(req, x, seg, {}, &report);
        REQUIRE(y.ok());
        CHECK(report.segments > 1);
        CHECK(report.segments <= seg.segments);
        std::vector<double> t(taps.data<double>(), taps.data<double>() + taps.size());
        HostArray want = upfirdn_ref(x, t, f.up, f.down, shape.axis);
        CHECK(y->shape() == want.shape());
        CHECK(y->dtype() == want.dtype());
        CHECK(y->bytes() == want.bytes());
      }
      struct Rate {
        int up, down, taps;  // taps 0: SciPy's designed filter
      };
      for (const Rate& r : {Rate{2, 5, 0}, Rate{3, 2, 0}, Rate{160, 147, 0}, Rate{4, 6, 0},
                            Rate{3, 2, 101}, Rate{1, 3, 7}}) {
        INFO("shape " << ShapeString(shape.dims) << " dtype " << DTypeName(dtype)
                      << " resample_poly " << r.up << "/" << r.down << " taps " << r.taps);
        v1::ResamplePolyRequest rp;
        rp.set_up(r.up);
        rp.set_down(r.down);
        rp.set_axis(shape.axis);
        interp::ResamplePolyOptions ro;
        ro.up = r.up;
        ro.down = r.down;
        ro.axis = shape.axis;
        if (r.taps > 0) {
          HostArray taps = RandomArray(DType::kFloat64, {r.taps}, ++seed);
          ToProto(taps, rp.mutable_taps());
          ro.taps.assign(taps.data<double>(), taps.data<double>() + taps.size());
        }
        TransferReport report;
        auto y = client->ResamplePolyArray(rp, x, seg, {}, &report);
        REQUIRE(y.ok());
        CHECK(report.segments > 1);
        auto want = interp::ResamplePoly(Device::Cpu(), x, ro);
        REQUIRE(want.ok());
        CHECK(y->shape() == want->shape());
        CHECK(y->bytes() == want->bytes());
      }
    }
  }
  auto listed = client->ListRegions();
  REQUIRE(listed.ok());
  CHECK(listed->regions_size() == 0);
}

TEST_CASE("segmented transfer: reused output buffers, the one-call fallback and errors",
          "[server][shm][transfer]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 20;
  TestServer ts(config);
  auto client = Connect(ts);
  TransferOptions seg;
  seg.unary_max_bytes = 0;
  seg.parallel_min_bytes = 0;
  seg.streams = 2;
  seg.chunk_bytes = 1 << 18;
  seg.segment_bytes = 1;
  seg.segments = 4;
  HostArray x = RandomArray(DType::kFloat32, {300000}, 41);
  v1::UpfirdnRequest req = UpfirdnShape(x, 3, 2);
  req.clear_x();
  auto taps = FromProto(req.taps(), "taps");
  REQUIRE(taps.ok());
  std::vector<double> t(taps->data<double>(), taps->data<double>() + taps->size());
  interp::UpfirdnOptions uo;
  uo.up = 3;
  uo.down = 2;
  auto want = interp::Upfirdn(Device::Cpu(), t, x, uo);
  REQUIRE(want.ok());

  // A y of the right dtype and size is filled in place, whatever its shape was.
  HostArray y(DType::kFloat32, {1, want->size()});
  std::memset(y.raw(), 0x7f, y.nbytes());
  const void* buffer = y.raw();
  TransferReport report;
  REQUIRE(client->UpfirdnArrayInto(req, x, &y, seg, {}, &report).ok());
  CHECK(report.segments == 4);
  CHECK(y.raw() == buffer);
  CHECK(y.shape() == want->shape());
  CHECK(y.bytes() == want->bytes());
  // Again into the same buffer (every byte rewritten), and into one of another size.
  REQUIRE(client->UpfirdnArrayInto(req, x, &y, seg, {}, &report).ok());
  CHECK(y.raw() == buffer);
  CHECK(y.bytes() == want->bytes());
  HostArray small(DType::kFloat32, {10});
  REQUIRE(client->UpfirdnArrayInto(req, x, &small, seg, {}, &report).ok());
  CHECK(small.bytes() == want->bytes());

  // Where cutting would change the bits (a non-constant pad mode), one call runs.
  req.set_mode(v1::PAD_REFLECT);
  uo.mode = interp::PadMode::kReflect;
  auto want_reflect = interp::Upfirdn(Device::Cpu(), t, x, uo);
  REQUIRE(want_reflect.ok());
  auto reflect = client->UpfirdnArray(req, x, seg, {}, &report);
  REQUIRE(reflect.ok());
  CHECK(report.segments == 1);
  CHECK(reflect->bytes() == want_reflect->bytes());
  req.set_mode(v1::PAD_CONSTANT);

  // A sub-call the server refuses fails the transfer with its status; nothing is left behind.
  req.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);  // this server has none
  auto refused = client->UpfirdnArray(req, x, seg, {}, &report);
  REQUIRE(!refused.ok());
  auto plain = client->Upfirdn([&] {  // the same request for a small x, in one unary call
    v1::UpfirdnRequest r = req;
    ToProto(RandomArray(DType::kFloat32, {1000}, 42), r.mutable_x());
    return r;
  }());
  REQUIRE(!plain.ok());
  CHECK(refused.status().code() == plain.status().code());
  auto listed = client->ListRegions();
  REQUIRE(listed.ok());
  CHECK(listed->regions_size() == 0);
}

TEST_CASE("raw RegionChunk buffers are the protobuf encoding, both ways",
          "[server][shm][transfer]") {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  // Built raw (data not copied), parsed by protobuf.
  for (int64_t offset : {int64_t{0}, int64_t{5}, int64_t{1} << 40, int64_t{-3}}) {
    grpc::ByteBuffer raw = v1::RegionChunkBuffer("stage-1", offset, data.data(), data.size());
    std::vector<grpc::Slice> slices;
    REQUIRE(raw.Dump(&slices).ok());
    std::string wire;
    for (const grpc::Slice& sl : slices) wire.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    v1::RegionChunk parsed;
    REQUIRE(parsed.ParseFromString(wire));
    CHECK(parsed.region() == "stage-1");
    CHECK(parsed.offset_bytes() == offset);
    CHECK(parsed.data() == data);
  }
  // Encoded by protobuf (with an unknown field, fields out of order), cut into odd slices,
  // parsed in place.
  v1::RegionChunk chunk;
  chunk.set_region("r");
  chunk.set_offset_bytes(123456789);
  chunk.set_data(data);
  std::string wire = chunk.SerializeAsString();
  wire = std::string("\x28\x07", 2) + wire.substr(wire.find('\x10')) + wire.substr(0, 3);
  std::vector<grpc::Slice> parts;
  for (size_t at = 0; at < wire.size(); at += 7777) parts.emplace_back(wire.substr(at, 7777));
  grpc::ByteBuffer cut(parts.data(), parts.size());
  v1::RegionChunkView view;
  REQUIRE(view.Parse(cut).ok());
  CHECK(view.region() == "r");
  CHECK(view.offset_bytes() == 123456789);
  REQUIRE(view.data_bytes() == static_cast<int64_t>(data.size()));
  std::string back(data.size(), '\0');
  view.CopyData(back.data());
  CHECK(back == data);
  // Garbage is INVALID_ARGUMENT.
  grpc::Slice junk(std::string("\x1a\xff\xff\xff\x0f", 5));
  grpc::ByteBuffer bad(&junk, 1);
  CHECK(view.Parse(bad).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("WriteRegion and ReadRegion check regions and ranges", "[server][shm][transfer]") {
  TestServer ts;
  auto client = Connect(ts);
  v1::RegisterRegionRequest reg = Req("stage", "", 1 << 16);
  REQUIRE(client->RegisterRegion(reg).ok());
  auto stub = v1::SharedMemoryService::NewStub(ts.channel);
  auto write = [&](const std::string& region, int64_t offset, int64_t n) {
    grpc::ClientContext ctx;
    v1::WriteRegionResponse resp;
    auto w = stub->WriteRegion(&ctx, &resp);
    v1::RegionChunk c;
    c.set_region(region);
    c.set_offset_bytes(offset);
    c.set_data(std::string(static_cast<size_t>(n), 'q'));
    w->Write(c);
    w->WritesDone();
    grpc::Status st = w->Finish();
    return std::make_pair(st, resp.bytes_written());
  };
  auto [ok, n] = write("stage", 100, 1000);
  CHECK(ok.ok());
  CHECK(n == 1000);
  auto [unknown, n1] = write("nope", 0, 10);
  CHECK(unknown.error_code() == grpc::StatusCode::NOT_FOUND);
  auto [oob, n2] = write("stage", (1 << 16) - 10, 11);
  CHECK(oob.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(oob.error_message().find("chunk.offset_bytes") != std::string::npos);

  auto read = [&](int64_t offset, int64_t length, int64_t chunk, std::string* out) {
    grpc::ClientContext ctx;
    v1::ReadRegionRequest r;
    r.set_region("stage");
    r.set_offset_bytes(offset);
    r.set_length_bytes(length);
    r.set_chunk_bytes(chunk);
    auto reader = stub->ReadRegion(&ctx, r);
    v1::RegionChunk c;
    while (reader->Read(&c)) *out += c.data();
    return reader->Finish();
  };
  std::string got;
  REQUIRE(read(50, 1100, 300, &got).ok());
  REQUIRE(got.size() == 1100);
  CHECK(got.substr(0, 50) == std::string(50, '\0'));  // a fresh staging region is zero-filled
  CHECK(got.substr(50, 1000) == std::string(1000, 'q'));
  std::string none;
  CHECK(read(0, (1 << 16) + 1, 0, &none).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(read(0, 10, -1, &none).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(read(0, -1, 0, &none).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(client->UnregisterRegion("stage").ok());
  CHECK(read(0, 10, 0, &none).error_code() == grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("fresnel interp --shm writes what the gRPC path writes", "[server][shm][cli]") {
  TestServer ts;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fresnel_shm_cli_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  HostArray x = RandomArray(DType::kFloat32, {2, 3000}, 21);
  REQUIRE(WriteNpy(path("x.npy"), x).ok());
  for (const std::string mode : {"resample", "upfirdn"}) {
    CliResult a = RunCli({"--server", ts.address, "interp", path("x.npy"), path("grpc.npy"),
                          "--up", "3", "--down", "2", "--mode", mode});
    INFO(a.err);
    REQUIRE(a.code == 0);
    CliResult b = RunCli({"--server", ts.address, "interp", path("x.npy"), path("shm.npy"),
                          "--up", "3", "--down", "2", "--mode", mode, "--shm", "--json"});
    INFO(b.err);
    REQUIRE(b.code == 0);
    CHECK(b.out.find("\"shm\": true") != std::string::npos);
    auto ya = ReadNpy(path("grpc.npy"));
    auto yb = ReadNpy(path("shm.npy"));
    REQUIRE(ya.ok());
    REQUIRE(yb.ok());
    CHECK(ya->shape() == yb->shape());
    CHECK(ya->bytes() == yb->bytes());
  }
  // The CLI's region is gone after the command.
  auto client = Connect(ts);
  auto listed = client->ListRegions();
  REQUIRE(listed.ok());
  CHECK(listed->regions_size() == 0);
  CliResult bad = RunCli({"--server", ts.address, "interp", path("x.npy"), path("o.npy"), "--up",
                          "2", "--shm", "--chunk", "100"});
  CHECK(bad.code == 2);
  std::filesystem::remove_all(dir);
}

// `fresnel render --shm`: the images come back through a region (one slot per render in
// flight), the PNGs are the gRPC path's, and the region is gone afterwards.
TEST_CASE("fresnel render --shm writes what the gRPC path writes", "[server][shm][cli]") {
  TestServer ts;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fresnel_shm_render_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  auto file = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::vector<std::string> base = {"--server", ts.address, "render", "--generate", "hole:6",
                                         "--size", "96x64", "--orbit", "3", "--inflight", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCli(args);
  };
  CliResult a = with({"--out", path("grpc.png")});
  INFO(a.err);
  REQUIRE(a.code == 0);
  CliResult b = with({"--out", path("shm.png"), "--shm", "--json"});
  INFO(b.err);
  REQUIRE(b.code == 0);
  CHECK(b.out.find("\"shm\": true") != std::string::npos);
  for (const char* frame : {"_000.png", "_001.png", "_002.png"}) {
    const std::string ga = file(path(std::string("grpc") + frame));
    CHECK(!ga.empty());
    CHECK(ga == file(path(std::string("shm") + frame)));
  }
  auto client = Connect(ts);
  auto listed = client->ListRegions();
  REQUIRE(listed.ok());
  CHECK(listed->regions_size() == 0);
  // A server without regions: --shm fails (it does not fall back silently).
  server::ServerConfig no_regions = TestServer::CpuConfig();
  no_regions.shm_bytes = 0;
  TestServer plain(no_regions);
  CliResult c = RunCli({"--server", plain.address, "render", "--generate", "hole:6", "--size",
                        "96x64", "--out", path("none.png"), "--shm"});
  CHECK(c.code != 0);
  CHECK_FALSE(std::filesystem::exists(path("none.png")));
  std::filesystem::remove_all(dir);
}

// Over the server's message cap, `fresnel interp` sends the signal through a staging region
// (Client::UpfirdnArray / ResamplePolyArray), which also takes the pad modes ResampleStream
// cannot; the result is the kernel's, byte for byte.
TEST_CASE("fresnel interp over the message cap goes through a staging region",
          "[server][shm][cli]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 20;
  TestServer ts(config);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fresnel_staged_cli_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  HostArray x = RandomArray(DType::kFloat32, {2, 200000}, 23);  // 1.6 MB in
  REQUIRE(WriteNpy(path("x.npy"), x).ok());
  struct Case {
    const char* mode;
    const char* padtype;
  };
  HostArray taps = RandomArray(DType::kFloat64, {31}, 24);
  REQUIRE(WriteNpy(path("taps.npy"), taps).ok());
  const std::vector<double> t(taps.data<double>(), taps.data<double>() + taps.size());
  for (const Case& c : {Case{"resample", "constant"}, Case{"upfirdn", "constant"},
                        Case{"resample", "reflect"}, Case{"upfirdn", "edge"}}) {
    INFO(c.mode << " " << c.padtype);
    const bool upfirdn = std::string(c.mode) == "upfirdn";
    const interp::PadMode pad = std::string(c.padtype) == "reflect" ? interp::PadMode::kReflect
                                : std::string(c.padtype) == "edge"  ? interp::PadMode::kEdge
                                                                    : interp::PadMode::kConstant;
    std::vector<std::string> args = {"--server", ts.address, "interp", path("x.npy"),
                                     path("y.npy"), "--up", "3", "--down", "2", "--mode", c.mode,
                                     "--padtype", c.padtype, "--json"};
    if (upfirdn) {
      args.push_back("--taps");
      args.push_back(path("taps.npy"));
    }
    CliResult r = RunCli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("\"staged\": true") != std::string::npos);
    CHECK(r.out.find("\"streamed\": false") != std::string::npos);
    auto y = ReadNpy(path("y.npy"));
    REQUIRE(y.ok());
    absl::StatusOr<HostArray> want;
    if (upfirdn) {
      interp::UpfirdnOptions o;
      o.up = 3;
      o.down = 2;
      o.mode = pad;
      want = interp::Upfirdn(Device::Cpu(), t, x, o);
    } else {
      interp::ResamplePolyOptions o;
      o.up = 3;
      o.down = 2;
      o.padtype = pad;
      want = interp::ResamplePoly(Device::Cpu(), x, o);
    }
    REQUIRE(want.ok());
    CHECK(y->shape() == want->shape());
    CHECK(y->bytes() == want->bytes());
  }
  auto client = Connect(ts);
  auto listed = client->ListRegions();
  REQUIRE(listed.ok());
  CHECK(listed->regions_size() == 0);
  std::filesystem::remove_all(dir);
}

// Within the message cap, `fresnel interp` picks the path as the client library does: one unary
// call up to TransferOptions::unary_max_bytes (16 MiB) of x + y, a staging region above; both
// give the kernel's result byte for byte, and without staging regions the call goes unary.
TEST_CASE("fresnel interp above 16 MiB within the cap goes through a staging region",
          "[server][shm][cli]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fresnel_unary_max_cli_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  HostArray taps = RandomArray(DType::kFloat64, {17}, 25);
  REQUIRE(WriteNpy(path("taps.npy"), taps).ok());
  const std::vector<double> t(taps.data<double>(), taps.data<double>() + taps.size());
  struct Case {
    int64_t samples;
    int64_t shm_bytes;  // the server's --shm-bytes (0: no staging regions)
    bool staged;
  };
  // x float32 [2, n] and y [2, 2n + 16] float32: 6 MB + 12 MB > 16 MiB; 0.8 MB + 1.6 MB below.
  for (const Case& c : {Case{750000, int64_t{1} << 30, true}, Case{100000, int64_t{1} << 30, false},
                        Case{750000, 0, false}}) {
    INFO(c.samples << " samples, --shm-bytes " << c.shm_bytes);
    server::ServerConfig config = TestServer::CpuConfig();
    config.shm_bytes = c.shm_bytes;
    TestServer ts(config);
    HostArray x = RandomArray(DType::kFloat32, {2, c.samples}, 26);
    REQUIRE(WriteNpy(path("x.npy"), x).ok());
    CliResult r = RunCli({"--server", ts.address, "interp", path("x.npy"), path("y.npy"), "--up",
                          "2", "--mode", "upfirdn", "--taps", path("taps.npy"), "--json"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK((r.out.find("\"staged\": true") != std::string::npos) == c.staged);
    CHECK(r.out.find("\"streamed\": false") != std::string::npos);
    CHECK(r.err.find("message cap") == std::string::npos);  // no note: nothing was over it
    auto y = ReadNpy(path("y.npy"));
    REQUIRE(y.ok());
    interp::UpfirdnOptions o;
    o.up = 2;
    absl::StatusOr<HostArray> want = interp::Upfirdn(Device::Cpu(), t, x, o);
    REQUIRE(want.ok());
    CHECK(y->shape() == want->shape());
    CHECK(y->bytes() == want->bytes());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fresnel::testing
