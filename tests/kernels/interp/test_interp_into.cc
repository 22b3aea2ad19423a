// UpfirdnInto / ResamplePolyInto (fresnel/interp/into.h): the same bits as Upfirdn /
// ResamplePoly, written to caller-owned (also page-locked, also overlapping) buffers; the
// unsupported cases are refused so callers fall back.
#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <cstring>
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

std::vector<double> Taps(int64_t l, uint64_t seed) {
  HostArray h = RandomArray(DType::kFloat64, {l}, seed);
  return std::vector<double>(h.data<double>(), h.data<double>() + l);
}

struct Case {
  DType dtype;
  std::vector<int64_t> shape;
  int up, down;
  int64_t taps;
  double cval;
};

std::vector<Case> Cases() {
  return {{DType::kFloat32, {5003}, 4, 1, 64, 0.0},
          {DType::kFloat32, {3, 4099}, 3, 2, 17, 0.5},
          {DType::kFloat64, {2, 1000}, 2, 3, 31, 0.0},
          {DType::kComplex64, {777}, 5, 1, 12, -1.0},
          {DType::kComplex128, {2, 301}, 1, 4, 9, 0.0},
          {DType::kFloat32, {4, 513, 1}, 2, 1, 8, 0.0}};  // axis -2 with a size-1 trailing dim
}

// y bytes of Upfirdn through the HostArray path and through UpfirdnInto into `y` (pre-filled
// with garbage: every byte must be written).
void CheckUpfirdn(const Device& device, const Case& c, bool pinned) {
  UpfirdnOptions o;
  o.up = c.up;
  o.down = c.down;
  o.cval = c.cval;
  o.axis = c.shape.size() == 3 ? -2 : -1;
  const std::vector<double> taps = Taps(c.taps, 7);
  HostArray x = RandomArray(c.dtype, c.shape, 11);
  REQUIRE(UpfirdnIntoSupported(x.dtype(), x.shape(), o));
  auto want = Upfirdn(device, taps, x, o);
  REQUIRE(want.ok());
  const size_t n = want->nbytes();
  void* y = mmap(nullptr, n + 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(y != MAP_FAILED);
  std::memset(y, 0xab, n + 64);
  if (pinned) REQUIRE(PinHostMemory(y, static_cast<int64_t>(n + 64)).ok());
  StageTimes t;
  absl::Status st = UpfirdnInto(device, taps, HostSignalRef{x.dtype(), x.shape(), x.raw()}, o, y,
                                static_cast<int64_t>(n), &t);
  INFO(DTypeName(c.dtype) << " up " << c.up << " down " << c.down << " " << st.ToString());
  CHECK(st.ok());
  CHECK(std::memcmp(y, want->raw(), n) == 0);
  CHECK(static_cast<unsigned char*>(y)[n] == 0xab);  // nothing past the result
  if (pinned) UnpinHostMemory(y);
  munmap(y, n + 64);
}

void CheckResamplePoly(const Device& device, const Case& c) {
  ResamplePolyOptions o;
  o.up = c.up;
  o.down = c.down;
  o.cval = c.cval;
  o.axis = c.shape.size() == 3 ? -2 : -1;
  HostArray x = RandomArray(c.dtype, c.shape, 13);
  if (!ResamplePolyIntoSupported(x.dtype(), x.shape(), o)) return;  // up/down reduce to 1/1
  auto want = ResamplePoly(device, x, o);
  REQUIRE(want.ok());
  std::string y(want->nbytes(), '\x5a');
  absl::Status st = ResamplePolyInto(device, HostSignalRef{x.dtype(), x.shape(), x.raw()}, o,
                                     y.data(), static_cast<int64_t>(y.size()));
  INFO(DTypeName(c.dtype) << " up " << c.up << " down " << c.down << " " << st.ToString());
  CHECK(st.ok());
  CHECK(y == want->bytes());
}

// x and y in one buffer, y over x: x is read completely before y is written.
void CheckOverlap(const Device& device) {
  UpfirdnOptions o;
  o.up = 2;
  const std::vector<double> taps = Taps(16, 3);
  HostArray x = RandomArray(DType::kFloat32, {4096}, 5);
  auto want = Upfirdn(device, taps, x, o);
  REQUIRE(want.ok());
  std::string buffer(want->nbytes(), '\0');
  std::memcpy(buffer.data(), x.raw(), x.nbytes());
  REQUIRE(UpfirdnInto(device, taps, HostSignalRef{x.dtype(), x.shape(), buffer.data()}, o,
                      buffer.data(), static_cast<int64_t>(buffer.size()))
              .ok());
  CHECK(buffer == want->bytes());
}

TEST_CASE("UpfirdnInto and ResamplePolyInto equal the HostArray calls bit for bit (CPU)",
          "[interp][into]") {
  const Device cpu = Device::Cpu();
  for (const Case& c : Cases()) {
    CheckUpfirdn(cpu, c, false);
    CheckResamplePoly(cpu, c);
  }
  CheckOverlap(cpu);
}

TEST_CASE("UpfirdnInto refuses what it does not take and checks y's room", "[interp][into]") {
  const Device cpu = Device::Cpu();
  const std::vector<double> taps = Taps(8, 1);
  HostArray x = RandomArray(DType::kFloat32, {100}, 2);
  const HostSignalRef ref{x.dtype(), x.shape(), x.raw()};
  std::string y(1 << 12, '\0');
  UpfirdnOptions symmetric;
  symmetric.mode = PadMode::kSymmetric;
  CHECK_FALSE(UpfirdnIntoSupported(x.dtype(), x.shape(), symmetric));
  CHECK(UpfirdnInto(cpu, taps, ref, symmetric, y.data(), 1 << 12).code() ==
        absl::StatusCode::kUnimplemented);
  UpfirdnOptions complex_taps;
  complex_taps.taps_imag = taps;
  CHECK(UpfirdnInto(cpu, taps, ref, complex_taps, y.data(), 1 << 12).code() ==
        absl::StatusCode::kUnimplemented);
  HostArray ints(DType::kInt16, {100});
  CHECK_FALSE(UpfirdnIntoSupported(ints.dtype(), ints.shape(), UpfirdnOptions{}));
  UpfirdnOptions first_axis;
  first_axis.axis = 0;
  CHECK_FALSE(UpfirdnIntoSupported(DType::kFloat32, {100, 3}, first_axis));
  // 107 outputs of 4 bytes: 427 bytes of room are too few, and the message says so.
  absl::Status small = UpfirdnInto(cpu, taps, ref, UpfirdnOptions{}, y.data(), 427);
  CHECK(small.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(small.message()).find("y:") == 0);
  CHECK(UpfirdnInto(cpu, taps, ref, UpfirdnOptions{}, y.data(), 428).ok());
  // Validation is Upfirdn's.
  UpfirdnOptions bad;
  bad.up = 0;
  CHECK(UpfirdnInto(cpu, taps, ref, bad, y.data(), 1 << 12).code() ==
        absl::StatusCode::kInvalidArgument);
  ResamplePolyOptions same;
  same.up = 3;
  same.down = 3;
  CHECK_FALSE(ResamplePolyIntoSupported(DType::kFloat32, {100}, same));
}

TEST_CASE("UpfirdnInto and ResamplePolyInto on the GPU: pageable and pinned buffers",
          "[interp][into][gpu]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  for (const Case& c : Cases()) {
    CheckUpfirdn(gpu, c, false);
    CheckUpfirdn(gpu, c, true);
    CheckResamplePoly(gpu, c);
  }
  CheckOverlap(gpu);
}

}  // namespace
}  // namespace fresnel::interp
