// [gpu] tests: every CUDA kernel against the CPU oracle on fresh random inputs, SciPy golden
// files on the GPU, and GPU streaming against the GPU one-shot result. They skip (with a WARN)
// when no CUDA device is visible.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fresnel/interp/interp.h"
#include "interp/interp_internal.h"
#include "interp_test_util.h"
#include "support/test_support.h"

namespace fresnel::interp {
namespace {

using fresnel::testing::RandomArray;
using fresnel::testing::RelativeError;
using fresnel::testing::SkipWithoutGpu;
using fresnel::testing::TestGpu;
using namespace fresnel::interp::testing;  // NOLINT

const Device kCpu = Device::Cpu();

std::vector<double> RandomTaps(int64_t l) {
  HostArray h = RandomArray(DType::kFloat64, {l});
  return std::vector<double>(h.data<double>(), h.data<double>() + l);
}

// NaN-free and every output written (the poisoned buffer would leave NaN).
bool AllFinite(const HostArray& a) {
  for (const auto& v : fresnel::testing::ToComplex(a)) {
    if (!std::isfinite(v.real()) || !std::isfinite(v.imag())) return false;
  }
  return true;
}

struct Config {
  int up, down;
  int64_t taps, n, channels;
  DType dtype;
  double cval;
};

std::string Describe(const Config& c) {
  return "up " + std::to_string(c.up) + " down " + std::to_string(c.down) + " taps " +
         std::to_string(c.taps) + " n " + std::to_string(c.n) + " ch " +
         std::to_string(c.channels) + " " + DTypeName(c.dtype) + " cval " + std::to_string(c.cval);
}

std::vector<Config> KernelConfigs() {
  std::vector<Config> cs;
  // kRegisterBlocked: every up and P bucket, odd sizes, several channels.
  for (int up : {1, 2, 3, 4, 8}) {
    for (int64_t p : {1, 3, 8, 9, 16, 17, 32}) {
      const int64_t taps = up * p - (p > 1 ? up / 2 : 0);
      cs.push_back({up, 1, taps, 5003 + p, 1 + p % 3, DType::kFloat32, p % 2 ? 0.0 : 0.5});
    }
  }
  cs.push_back({4, 1, 64, 1, 1, DType::kFloat32, 0.0});
  cs.push_back({4, 1, 64, 3, 2, DType::kFloat32, 0.0});
  cs.push_back({4, 1, 64, 300007, 1, DType::kFloat32, 0.0});
  // Enough tiles that every persistent block loops (the prefetch pipeline), across channels.
  cs.push_back({4, 1, 64, 3000017, 1, DType::kFloat32, 0.0});
  cs.push_back({1, 1, 7, 3000017, 2, DType::kFloat32, 0.0});
  cs.push_back({8, 1, 200, 2000003, 1, DType::kFloat32, 0.5});
  cs.push_back({2, 1, 30, 1000003, 3, DType::kFloat32, 0.0});
  // kSmemTile: other up, down > 1, double and complex, decimation beyond the staged span.
  cs.push_back({5, 1, 40, 7001, 2, DType::kFloat32, 0.0});
  cs.push_back({3, 2, 61, 9001, 3, DType::kFloat32, -1.0});
  cs.push_back({4, 1, 64, 8191, 2, DType::kFloat64, 0.0});
  cs.push_back({4, 1, 64, 8191, 2, DType::kComplex64, 0.25});
  cs.push_back({160, 147, 3218, 20000, 1, DType::kFloat32, 0.0});
  cs.push_back({147, 160, 3218, 20000, 2, DType::kFloat64, 0.0});
  cs.push_back({1, 40, 81, 50000, 1, DType::kFloat32, 0.0});
  cs.push_back({2, 61, 300, 40000, 1, DType::kComplex64, 0.0});
  cs.push_back({7, 3, 5, 1000, 1, DType::kFloat64, 2.0});
  // kWarpPerOutput: long filters.
  cs.push_back({2, 1, 1000, 5000, 1, DType::kFloat32, 0.0});
  cs.push_back({1, 3, 4000, 7000, 2, DType::kFloat64, 0.0});
  cs.push_back({3, 5, 2000, 3000, 1, DType::kComplex64, 1.0});
  // kPhaseGroups (float32): rational rates with many phases (one tile and many, several
  // channels), long bands (R = 8 periods per lane) for up 1, 2, 3 and 5, decimation, and rates
  // that reduce by their gcd.
  cs.push_back({160, 147, 3201, 3000017, 1, DType::kFloat32, 0.0});
  cs.push_back({160, 147, 3218, 200003, 3, DType::kFloat32, 0.5});
  cs.push_back({147, 160, 3201, 100003, 1, DType::kFloat32, 0.0});
  cs.push_back({3, 2, 1024, 1000003, 1, DType::kFloat32, 0.0});
  cs.push_back({3, 2, 3 * 2048, 100003, 2, DType::kFloat32, -0.5});
  cs.push_back({2, 1, 256, 1000003, 1, DType::kFloat32, 0.0});
  cs.push_back({1, 3, 400, 300007, 2, DType::kFloat32, 0.0});
  cs.push_back({5, 3, 333, 200003, 1, DType::kFloat32, 0.25});
  cs.push_back({4, 6, 90, 100003, 2, DType::kFloat32, 0.0});
  cs.push_back({11, 7, 7, 50021, 1, DType::kFloat32, 1.0});
  // Staging in rounds (u % 4 == 0, odd d, > 18 groups) where a tile has several chunks, a
  // round's tasks span two of them and the last round is partial (76/75: 19 groups).
  cs.push_back({76, 75, 760, 200003, 2, DType::kFloat32, 0.0});
  // complex128 (double2): kSmemTile with and without the staged span, and kWarpPerOutput.
  cs.push_back({4, 1, 64, 8191, 2, DType::kComplex128, 0.25});
  cs.push_back({2, 61, 300, 40000, 1, DType::kComplex128, 0.0});
  cs.push_back({1, 3, 4000, 7000, 2, DType::kComplex128, -0.5});
  return cs;
}

TEST_CASE("GPU: every dtype, complex taps, N-d axes and empty signals match SciPy",
          "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  CHECK(CheckExtGoldens(*TestGpu()) > 200);
}

TEST_CASE("GPU resample (cuFFT) and decimate match SciPy", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  CHECK(CheckFftGoldens(*TestGpu()) > 320);
}

TEST_CASE("GPU resample (cuFFT) matches the CPU oracle on long signals", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  const int64_t sizes[][2] = {{48000, 44100}, {44100, 48000}, {65536, 100000}, {30030, 30030}};
  for (auto& sz : sizes) {
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kComplex64, DType::kComplex128}) {
      INFO(sz[0] << " -> " << sz[1] << " " << DTypeName(dt));
      HostArray x = RandomArray(dt, {2, sz[0]});
      ResampleOptions o;
      o.num = sz[1];
      StageTimes t;
      auto y = Resample(gpu, x, o, &t);
      auto want = Resample(kCpu, x, o);
      REQUIRE(y.ok());
      REQUIRE(want.ok());
      CHECK(y->dtype() == dt);
      // cuFFT in float for float32/complex64: error grows like log(n) eps.
      const bool single = dt == DType::kFloat32 || dt == DType::kComplex64;
      CHECK(RelativeError(*y, *want) <= (single ? 2e-5 : 1e-11));
      CHECK(t.compute_s > 0);
    }
  }
  Device null_stream = gpu;
  null_stream.stream = nullptr;
  ResampleOptions o;
  o.num = 10;
  CHECK_FALSE(Resample(null_stream, RandomArray(DType::kFloat32, {20}), o).ok());
}

TEST_CASE("GPU complex taps, integer promotion and axes match the CPU oracle", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  for (DType dt : {DType::kFloat32, DType::kComplex64, DType::kFloat64, DType::kComplex128,
                   DType::kInt16}) {
    for (DTypeRule rule : {DTypeRule::kKeepPrecision, DTypeRule::kSciPy}) {
      INFO(DTypeName(dt) << (rule == DTypeRule::kSciPy ? " scipy" : " keep"));
      HostArray x = RandomArray(dt, {3, 20011, 2});
      UpfirdnOptions o;
      o.up = 3;
      o.down = 2;
      o.axis = 1;
      o.dtype_rule = rule;
      o.taps_dtype = DType::kComplex128;
      auto taps = RandomTaps(48);
      o.taps_imag = RandomTaps(48);
      auto y = Upfirdn(gpu, taps, x, o);
      auto want = Upfirdn(kCpu, taps, x, o);
      REQUIRE(y.ok());
      REQUIRE(want.ok());
      CHECK(y->dtype() == want->dtype());
      CHECK(y->shape() == want->shape());
      CHECK(RelativeError(*y, *want) <= Tolerance(want->dtype()));
      ResamplePolyOptions r;
      r.up = 160;
      r.down = 147;
      r.axis = -2;
      r.dtype_rule = rule;
      auto z = ResamplePoly(gpu, x, r);
      auto zwant = ResamplePoly(kCpu, x, r);
      REQUIRE(z.ok());
      REQUIRE(zwant.ok());
      CHECK(z->dtype() == zwant->dtype());
      CHECK(RelativeError(*z, *zwant) <= Tolerance(zwant->dtype()));
    }
  }
}

TEST_CASE("GPU upfirdn matches the CPU oracle", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  for (const Config& c : KernelConfigs()) {
    INFO(Describe(c));
    auto taps = RandomTaps(c.taps);
    HostArray x = RandomArray(c.dtype, {c.channels, c.n});
    UpfirdnOptions o;
    o.up = c.up;
    o.down = c.down;
    o.cval = c.cval;
    StageTimes t;
    auto y = Upfirdn(gpu, taps, x, o, &t);
    REQUIRE(y.ok());
    auto want = Upfirdn(kCpu, taps, x, o);
    REQUIRE(want.ok());
    CHECK(AllFinite(*y));
    CHECK(RelativeError(*y, *want) <= Tolerance(c.dtype));
    CHECK(t.compute_s > 0);
  }
}

#if defined(FRESNEL_WITH_CUDA)
// kTensorTf32's stated accuracy (relative L2 against the CPU oracle). Summed in chunks of a few
// k-steps (the default, tensor_tf32.h "Accumulation") it is held to kTensorTf32Tolerance at
// every band length. With the whole band in the tensor cores' accumulators (tc_chunk_ksteps
// kWholeBand, session 7's kernel) the error grows with the band: measured on the H200
// (2026-12-01) 9.2e-7 at P = 128, 2.4e-6 at P = 342, 1.42e-5 at P = 2048, i.e. about 7e-9 per
// tap per phase; that variant is held to twice that slope. Chunked (4 k-steps) it measured
// 2.1e-7 to 2.8e-7 for P = 64 .. 2048 (2026-12-02, fresnel_bench_interp), FFMA 1.5e-7 to 8.1e-7.
constexpr double kTensorTf32Tolerance = 2e-6;
constexpr int kWholeBand = 1 << 20;
double TensorTf32Tolerance(int64_t taps_per_phase, int chunk_ksteps = 0) {
  if (chunk_ksteps != kWholeBand) return kTensorTf32Tolerance;
  return std::max(1e-5, 1.5e-8 * static_cast<double>(taps_per_phase));
}

TEST_CASE("every CUDA kernel agrees with the CPU oracle on windows", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  using internal::CudaKernel;
  std::mt19937 rng(std::random_device{}());
  for (const Config& c : KernelConfigs()) {
    internal::Polyphase f{RandomTaps(c.taps), c.up, c.down};
    const int64_t p = f.TapsPerPhase();
    HostArray x = RandomArray(c.dtype, {c.channels, c.n});
    // A window placed anywhere, and an output range starting anywhere (alignment, tiles).
    const int64_t x_first = static_cast<int64_t>(rng() % 50) - 25;
    const int64_t out_first = static_cast<int64_t>(rng() % 37);
    const int64_t out_count =
        UpfirdnOutputLength(c.n, c.taps, c.up, c.down) + static_cast<int64_t>(rng() % 5);
    auto want = internal::UpfirdnWindowCpu(f, internal::ViewOf(x), x_first, c.cval, out_first,
                                           out_count);
    REQUIRE(want.ok());
    // kPhaseGroups runs its default plan, then each variant (widened period or not): every
    // variant sums the same products in the same order, so they must agree bit for bit.
    // kTensorTf32 (3xTF32 tensor-core GEMM, long filters) sums in its own order: it is held to
    // its own tolerance against the oracle (default chunks, one k-step per chunk, whole band).
    struct Variant {
      CudaKernel kernel;
      int pg_widen;
      int pg_layout = 0;
      int pg_periods_per_lane = 0;
      int pg_rotate = 0;
      int pg_row_blocks = 0;
      int pg_prefetch = 0;
      int tc_chunk = 0;
      int tc_min_blocks = 0;
      int pg_stage = 0;
    };
    const Variant variants[] = {
        {CudaKernel::kRegisterBlocked, 0}, {CudaKernel::kSmemTile, 0},
        {CudaKernel::kWarpPerOutput, 0},   {CudaKernel::kPhaseGroups, 0},
        {CudaKernel::kPhaseGroups, 1},     {CudaKernel::kPhaseGroups, 2},
        {CudaKernel::kPhaseGroups, 1, 1},  {CudaKernel::kPhaseGroups, 2, 1},
        {CudaKernel::kPhaseGroups, 0, 0, 2}, {CudaKernel::kPhaseGroups, 0, 1, 2},
        {CudaKernel::kPhaseGroups, 0, 0, 1}, {CudaKernel::kPhaseGroups, 0, 0, 8},
        {CudaKernel::kPhaseGroups, 0, 0, 4},
        {CudaKernel::kPhaseGroups, 0, 0, 0, 1}, {CudaKernel::kPhaseGroups, 0, 0, 0, 0, 1},
        {CudaKernel::kPhaseGroups, 0, 0, 0, 0, 0, 2}, {CudaKernel::kPhaseGroups, 0, 0, 0, 0, 0, 1},
        {CudaKernel::kPhaseGroups, 0, 0, 1, 0, 0, 2}, {CudaKernel::kPhaseGroups, 0, 1, 0, 0, 0, 2},
        // Output staging: the whole tile copied out by the threads and by bulk copies, and
        // rounds with R = 1 and without the rotation.
        {CudaKernel::kPhaseGroups, 0, 0, 0, 0, 0, 0, 0, 0, 1},
        {CudaKernel::kPhaseGroups, 0, 0, 0, 0, 0, 0, 0, 0, 3},
        {CudaKernel::kPhaseGroups, 0, 0, 0, 0, 0, 0, 0, 0, 2},
        {CudaKernel::kPhaseGroups, 0, 0, 1, 0, 0, 0, 0, 0, 2},
        {CudaKernel::kPhaseGroups, 0, 0, 0, 1, 0, 0, 0, 0, 2},
        {CudaKernel::kTensorTf32, 0},  {CudaKernel::kTensorTf32, 0, 0, 0, 0, 0, 0, 1},
        {CudaKernel::kTensorTf32, 0, 0, 0, 0, 0, 0, kWholeBand},
        {CudaKernel::kTensorTf32, 0, 0, 0, 0, 0, 0, 0, 3},
    };
    std::optional<HostArray> pg_default;
    for (const Variant& v : variants) {
      if (!internal::CudaPolyphase::Supports(v.kernel, c.up, c.down, p, c.dtype)) continue;
      INFO(Describe(c) << " kernel " << internal::CudaKernelName(v.kernel) << " pg_widen "
                       << v.pg_widen << " pg_layout " << v.pg_layout << " R "
                       << v.pg_periods_per_lane << " rotate " << v.pg_rotate << " row_blocks "
                       << v.pg_row_blocks << " prefetch " << v.pg_prefetch << " tc_chunk "
                       << v.tc_chunk << " tc_min_blocks " << v.tc_min_blocks << " pg_stage "
                       << v.pg_stage << " x_first "
                       << x_first << " out_first " << out_first);
      internal::CudaWindowOptions opt;
      opt.plan.kernel = v.kernel;
      opt.plan.pg_widen = v.pg_widen;
      opt.plan.pg_layout = v.pg_layout;
      opt.plan.pg_periods_per_lane = v.pg_periods_per_lane;
      opt.plan.pg_rotate = v.pg_rotate;
      opt.plan.pg_row_blocks = v.pg_row_blocks;
      opt.plan.pg_prefetch = v.pg_prefetch;
      opt.plan.tc_chunk_ksteps = v.tc_chunk;
      opt.plan.tc_min_blocks = v.tc_min_blocks;
      opt.plan.pg_stage = v.pg_stage;
      opt.poison_output = true;
      auto y = internal::UpfirdnWindowCuda(gpu, f, internal::ViewOf(x), x_first, c.cval,
                                           out_first, out_count, nullptr, opt);
      // A forced R or two input tiles may not tile every filter (the tile or task count does
      // not fit; test_interp_plans checks that 160/147 plans).
      if ((v.pg_periods_per_lane != 0 || v.pg_prefetch == 2) &&
          absl::IsFailedPrecondition(y.status())) {
        continue;
      }
      REQUIRE(y.ok());
      CHECK(AllFinite(*y));
      CHECK(RelativeError(*y, *want) <= (v.kernel == CudaKernel::kTensorTf32
                                             ? TensorTf32Tolerance(p, v.tc_chunk)
                                             : Tolerance(c.dtype)));
      if (v.kernel == CudaKernel::kPhaseGroups) {
        if (!pg_default) {
          pg_default = *y;
        } else {
          CHECK(SameValues(*y, *pg_default));
        }
      }
    }
  }
}

// Small signals (a few tiles), every kPhaseGroups variant: quick enough for compute-sanitizer.
// One kernel variant's output: finite, within the oracle's tolerance of `want`, and the same bits
// as the first variant checked (`first` holds it; empty before the first).
void CheckVariant(const HostArray& y, const HostArray& want, DType dtype,
                  std::optional<HostArray>* first) {
  CHECK(AllFinite(y));
  CHECK(RelativeError(y, want) <= Tolerance(dtype));
  if (!*first) {
    *first = y;
  } else {
    CHECK(SameValues(y, **first));
  }
}

TEST_CASE("kPhaseGroups variants agree with the CPU oracle on short windows", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  const Config configs[] = {
      {160, 147, 3201, 9001, 2, DType::kFloat32, 0.5}, {3, 2, 1024, 20011, 1, DType::kFloat32, 0.0},
      {2, 1, 256, 20011, 1, DType::kFloat32, -1.0},    {1, 5, 300, 30011, 1, DType::kFloat32, 0.0},
      {5, 3, 40, 7001, 3, DType::kFloat32, 0.0},
      // One channel: outputs from 5, so the rotated period (s = 3 for an aligned y) is used.
      {160, 147, 3201, 9001, 1, DType::kFloat32, 0.0},
      // Staging in rounds whose tasks span chunks, the last round partial (19 groups).
      {76, 75, 760, 9001, 2, DType::kFloat32, 0.0},
  };
  for (const Config& c : configs) {
    internal::Polyphase f{RandomTaps(c.taps), c.up, c.down};
    HostArray x = RandomArray(c.dtype, {c.channels, c.n});
    const int64_t out_count = UpfirdnOutputLength(c.n, c.taps, c.up, c.down) + 3;
    auto want = internal::UpfirdnWindowCpu(f, internal::ViewOf(x), -3, c.cval, 5, out_count);
    REQUIRE(want.ok());
    REQUIRE(internal::CudaPolyphase::Supports(internal::CudaKernel::kPhaseGroups, c.up, c.down,
                                              f.TapsPerPhase(), c.dtype));
    std::optional<HostArray> first;
    struct PgVariant {
      int widen, layout, periods_per_lane, rotate, prefetch, stage = 0;
    };
    std::vector<PgVariant> variants;
    for (int widen : {1, 2}) {
      for (int layout : {1, 2}) {
        for (int r : {1, 2, 4, 8}) {
          // rotate and row_blocks off together (1) or at their defaults (2): each applies to
          // one layout only (plain / de-interleaved). One or two input tiles per block.
          for (int alt : {1, 2}) {
            for (int prefetch : {1, 2}) variants.push_back({widen, layout, r, alt, prefetch});
            // The whole tile staged (copied out by the threads or by bulk copies) and rounds
            // (where they apply: one tile, R <= 2).
            if (r <= 2) {
              for (int stage : {1, 2, 3}) variants.push_back({widen, layout, r, alt, 1, stage});
            }
          }
        }
      }
    }
    for (const PgVariant& v : variants) {
      INFO(Describe(c) << " pg_widen " << v.widen << " pg_layout " << v.layout << " R "
                       << v.periods_per_lane << " rotate/row_blocks " << v.rotate << " prefetch "
                       << v.prefetch << " stage " << v.stage);
      internal::CudaWindowOptions opt;
      opt.plan.kernel = internal::CudaKernel::kPhaseGroups;
      opt.plan.pg_widen = v.widen;
      opt.plan.pg_layout = v.layout;
      opt.plan.pg_periods_per_lane = v.periods_per_lane;
      opt.plan.pg_rotate = v.rotate;
      opt.plan.pg_row_blocks = v.rotate;
      opt.plan.pg_prefetch = v.prefetch;
      opt.plan.pg_stage = v.stage;
      opt.poison_output = true;
      auto y = internal::UpfirdnWindowCuda(gpu, f, internal::ViewOf(x), -3, c.cval, 5,
                                           out_count, nullptr, opt);
      // R = 8 does not tile every filter (its tile or task count does not fit), R = 4 only the
      // plain tile with V = 4, two input tiles not the largest tiles; 1 and 2 with one tile must.
      if ((v.periods_per_lane == 8 || v.periods_per_lane == 4 || v.prefetch == 2) &&
          absl::IsFailedPrecondition(y.status())) {
        continue;
      }
      REQUIRE(y.ok());
      // Layouts, widening and R sum the same products in the same order: the same bits.
      CheckVariant(*y, *want, c.dtype, &first);
    }
    // The tensor-core path on the same windows (its own summation order: the tolerance).
    if (internal::CudaPolyphase::Supports(internal::CudaKernel::kTensorTf32, c.up, c.down,
                                          f.TapsPerPhase(), c.dtype)) {
      INFO(Describe(c) << " tensor_tf32");
      internal::CudaWindowOptions opt;
      opt.plan.kernel = internal::CudaKernel::kTensorTf32;
      opt.poison_output = true;
      auto y = internal::UpfirdnWindowCuda(gpu, f, internal::ViewOf(x), -3, c.cval, 5,
                                           out_count, nullptr, opt);
      REQUIRE(y.ok());
      CHECK(AllFinite(*y));
      CHECK(RelativeError(*y, *want) <= TensorTf32Tolerance(f.TapsPerPhase()));
    }
  }
}

// Several waves of tiles and a partial last one (the grid capped by pg_max_blocks): the split
// tail (parts after or before the whole tiles) and the bulk input copies, with either staging,
// against the oracle and bit for bit against the default. Rows 16-byte aligned (the rotated
// period, 16-byte and bulk copy-out) and not (4-byte stores), first and last tiles partial.
TEST_CASE("kPhaseGroups split tail and bulk input copies agree with the CPU oracle",
          "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  struct Case {
    Config c;
    int64_t out_extra;  // outputs past the signal's (zeros); makes the row length odd or not
  };
  const Case cases[] = {
      {{160, 147, 3201, 147 * 64 * 13 + 501, 2, DType::kFloat32, 0.0}, 0},
      {{160, 147, 3201, 147 * 64 * 13 + 501, 2, DType::kFloat32, 0.25}, 1},
      {{160, 147, 3201, 147 * 64 * 41 + 77, 1, DType::kFloat32, 0.0}, 2},
      {{5, 3, 40, 3 * 64 * 40 + 11, 3, DType::kFloat32, 0.0}, 0},
  };
  for (const Case& cs : cases) {
    const Config& c = cs.c;
    internal::Polyphase f{RandomTaps(c.taps), c.up, c.down};
    HostArray x = RandomArray(c.dtype, {c.channels, c.n});
    int64_t out_count = UpfirdnOutputLength(c.n, c.taps, c.up, c.down);
    out_count += cs.out_extra == 1 ? (out_count % 2 == 0 ? 1 : 2) : (4 - out_count % 4) % 4;
    auto want = internal::UpfirdnWindowCpu(f, internal::ViewOf(x), -3, c.cval, 5, out_count);
    REQUIRE(want.ok());
    std::optional<HostArray> first;
    for (int max_blocks : {0, 8, 12, 40}) {
      for (int stage : {1, 3}) {
        for (int tail : {1, 2, 3}) {
          for (int bulk_in : {1, 2}) {
            INFO(Describe(c) << " out_count " << out_count << " pg_max_blocks " << max_blocks
                             << " pg_stage " << stage << " pg_tail " << tail << " pg_bulk_in "
                             << bulk_in);
            internal::CudaWindowOptions opt;
            opt.plan.kernel = internal::CudaKernel::kPhaseGroups;
            opt.plan.pg_stage = stage;
            opt.plan.pg_tail = tail;
            opt.plan.pg_bulk_in = bulk_in;
            opt.plan.pg_max_blocks = max_blocks;
            opt.poison_output = true;
            auto y = internal::UpfirdnWindowCuda(gpu, f, internal::ViewOf(x), -3, c.cval, 5,
                                                 out_count, nullptr, opt);
            REQUIRE(y.ok());
            CheckVariant(*y, *want, c.dtype, &first);
          }
        }
      }
    }
  }
}

#endif  // FRESNEL_WITH_CUDA

TEST_CASE("GPU extension modes and padtypes match the CPU oracle", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  const PadMode modes[] = {PadMode::kConstant, PadMode::kSymmetric, PadMode::kReflect,
                           PadMode::kEdge,     PadMode::kWrap,      PadMode::kSmooth,
                           PadMode::kAntisymmetric, PadMode::kAntireflect, PadMode::kLine};
  for (PadMode mode : modes) {
    for (DType dt : {DType::kFloat32, DType::kComplex64}) {
      INFO(internal::PadModeName(mode) << " " << DTypeName(dt));
      HostArray x = RandomArray(dt, {2, 3001});
      UpfirdnOptions o;
      o.up = 4;
      o.down = 1;
      o.mode = mode;
      auto taps = RandomTaps(64);
      auto y = Upfirdn(gpu, taps, x, o);
      auto want = Upfirdn(kCpu, taps, x, o);
      REQUIRE(y.ok());
      REQUIRE(want.ok());
      CHECK(RelativeError(*y, *want) <= Tolerance(dt));
    }
  }
  const PadMode padtypes[] = {PadMode::kMean,    PadMode::kMedian, PadMode::kMaximum,
                              PadMode::kMinimum, PadMode::kLine,   PadMode::kReflect};
  for (PadMode pad : padtypes) {
    INFO(internal::PadModeName(pad));
    HostArray x = RandomArray(DType::kFloat64, {3, 4000});
    ResamplePolyOptions o;
    o.up = 3;
    o.down = 2;
    o.padtype = pad;
    auto y = ResamplePoly(gpu, x, o);
    auto want = ResamplePoly(kCpu, x, o);
    REQUIRE(y.ok());
    REQUIRE(want.ok());
    CHECK(RelativeError(*y, *want) <= Tolerance(DType::kFloat64));
  }
}

TEST_CASE("GPU resample_poly matches the CPU oracle", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  const int rates[][2] = {{160, 147}, {147, 160}, {3, 2}, {2, 3}, {4, 1}, {1, 4}, {5, 5}};
  for (auto& r : rates) {
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kComplex64, DType::kComplex128}) {
      INFO(r[0] << "/" << r[1] << " " << DTypeName(dt));
      HostArray x = RandomArray(dt, {2, 30011});
      ResamplePolyOptions o;
      o.up = r[0];
      o.down = r[1];
      auto y = ResamplePoly(gpu, x, o);
      auto want = ResamplePoly(kCpu, x, o);
      REQUIRE(y.ok());
      REQUIRE(want.ok());
      CHECK(RelativeError(*y, *want) <= Tolerance(dt));
    }
  }
}

TEST_CASE("SciPy golden outputs on the GPU", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  const auto cases = LoadManifest();
  REQUIRE_FALSE(cases.empty());
  for (const GoldenCase& g : cases) {
    INFO(g.name);
    if (g.kind == "upfirdn") {
      HostArray x = LoadGolden(g.Get("x"));
      UpfirdnOptions o;
      o.up = g.Int("up");
      o.down = g.Int("down");
      o.mode = ParsePadMode(g.Get("mode"));
      o.cval = g.Double("cval");
      auto y = Upfirdn(gpu, ToDoubles(LoadGolden(g.Get("h"))), x, o);
      REQUIRE(y.ok());
      CHECK(RelativeError(*y, LoadGolden(g.Get("y"))) <= Tolerance(x.dtype()));
    } else if (g.kind == "resample_poly") {
      HostArray x = LoadGolden(g.Get("x"));
      ResamplePolyOptions o;
      o.up = g.Int("up");
      o.down = g.Int("down");
      o.padtype = ParsePadMode(g.Get("padtype"));
      o.cval = g.Double("cval");
      if (g.Get("window") == "taps") {
        o.taps = ToDoubles(LoadGolden(g.Get("h")));
      } else {
        o.window = ParseWindow(g.Get("window"));
      }
      auto y = ResamplePoly(gpu, x, o);
      REQUIRE(y.ok());
      CHECK(RelativeError(*y, LoadGolden(g.Get("y"))) <= Tolerance(x.dtype()));
    }
  }
}

TEST_CASE("GPU streaming equals the GPU one-shot result exactly", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  std::mt19937 rng(std::random_device{}());
  struct StreamCase {
    int up, down;
    int64_t taps;  // 0: resample_poly with the default filter
    DType dtype;
  };
  const StreamCase cases[] = {
      {160, 147, 0, DType::kFloat32},    // resample_poly, kPhaseGroups (V = 4, R = 2)
      {3, 2, 1024, DType::kFloat32},     // kPhaseGroups, long band (R = 8), widened period
      {4, 1, 64, DType::kFloat32},       // kRegisterBlocked
      {8, 1, 200, DType::kFloat32},      // kRegisterBlocked, P = 25 padded to 32
      {3, 2, 61, DType::kComplex64},     // kSmemTile
      {2, 1, 1000, DType::kFloat64},     // kWarpPerOutput
      {160, 147, 0, DType::kComplex64},  // kSmemTile
      {2, 3, 0, DType::kFloat64},
  };
  for (const StreamCase& c : cases) {
    INFO("up " << c.up << " down " << c.down << " taps " << c.taps << " "
               << DTypeName(c.dtype));
    const int64_t n = 20000 + static_cast<int64_t>(rng() % 5000);
    HostArray x = RandomArray(c.dtype, {2, n});
    std::vector<int64_t> chunks;
    for (int64_t left = n; left > 0;) {
      int64_t k = rng() % 4 == 0 ? static_cast<int64_t>(rng() % 2)
                                 : static_cast<int64_t>(rng() % 3000);
      k = std::min(k, left);
      chunks.push_back(k);
      left -= k;
    }
    HostArray one, streamed;
    absl::StatusOr<StreamingResampler> s = absl::UnknownError("unset");
    if (c.taps > 0) {
      UpfirdnOptions o;
      o.up = c.up;
      o.down = c.down;
      auto taps = RandomTaps(c.taps);
      auto y = Upfirdn(gpu, taps, x, o);
      REQUIRE(y.ok());
      one = *std::move(y);
      s = StreamingResampler::ForUpfirdn(taps, o, 2, c.dtype);
    } else {
      ResamplePolyOptions o;
      o.up = c.up;
      o.down = c.down;
      auto y = ResamplePoly(gpu, x, o);
      REQUIRE(y.ok());
      one = *std::move(y);
      s = StreamingResampler::ForResamplePoly(o, 2, c.dtype);
    }
    REQUIRE(s.ok());
    const size_t es = DTypeSize(c.dtype);
    std::vector<std::string> rows(2);
    int64_t pos = 0;
    auto append = [&](const HostArray& y) {
      for (int64_t ch = 0; ch < 2; ++ch) {
        rows[ch].append(static_cast<const char*>(y.raw()) + ch * y.dim(1) * es, y.dim(1) * es);
      }
    };
    for (int64_t k : chunks) {
      HostArray chunk(c.dtype, {2, k});
      for (int64_t ch = 0; ch < 2; ++ch) {
        std::memcpy(static_cast<char*>(chunk.raw()) + ch * k * es,
                    static_cast<const char*>(x.raw()) + (ch * n + pos) * es, k * es);
      }
      pos += k;
      auto y = s->Push(gpu, chunk);
      REQUIRE(y.ok());
      append(*y);
    }
    auto tail = s->Finish(gpu);
    REQUIRE(tail.ok());
    append(*tail);
    auto joined = HostArray::FromBytes(
        c.dtype, {2, static_cast<int64_t>(rows[0].size() / es)}, rows[0] + rows[1]);
    REQUIRE(joined.ok());
    CHECK(SameValues(*joined, one));
  }
}

TEST_CASE("GPU calls time their stages and refuse the default stream", "[gpu][interp]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  HostArray x = RandomArray(DType::kFloat32, {1 << 20});
  UpfirdnOptions o;
  o.up = 4;
  StageTimes t;
  auto y = Upfirdn(gpu, RandomTaps(64), x, o, &t);
  REQUIRE(y.ok());
  CHECK(t.h2d_s > 0);
  CHECK(t.compute_s > 0);
  CHECK(t.d2h_s > 0);
  Device no_stream = Device::Cuda(gpu.ordinal, nullptr);
  auto z = Upfirdn(no_stream, RandomTaps(64), x, o);
  CHECK(z.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fresnel::interp
