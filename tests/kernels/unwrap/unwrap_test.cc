// CPU tests of phase unwrapping: accuracy on synthetic data, invariants on random data with many
// residues, masks, seeds, validation, progress/cancel, least squares.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "fresnel/core/device.h"
#include "fresnel/unwrap/unwrap.h"
#include "synthetic_phase.h"
#include "unwrap_checks.h"

namespace fresnel::unwrap {
namespace {

using testing::At;
using testing::CheckGoldsteinInvariants;
using testing::FreshSeed;
using testing::kPi;
using testing::MakeNoisyPatch;
using testing::MakeSynthetic;
using testing::RandomMask;
using testing::RandomPhase;
using testing::SyntheticSpec;
using testing::WrongFraction;

GoldsteinResult MustGoldstein(const HostArray& phase, const GoldsteinOptions& options = {}) {
  auto r = UnwrapGoldstein(Device::Cpu(), phase, options);
  REQUIRE(r.ok());
  return *std::move(r);
}

// Wrapped phase of vortices at plaquette centres (cy + 0.5, cx + 0.5) with the given charges,
// plus a gentle tilt.
HostArray Vortices(int rows, int cols, const std::vector<std::array<int, 3>>& v) {
  HostArray a(DType::kFloat64, {rows, cols});
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      double phi = 0.05 * x + 0.03 * y;
      for (const auto& [cy, cx, q] : v) phi += q * std::atan2(y - (cy + 0.5), x - (cx + 0.5));
      a.data<double>()[y * cols + x] = testing::Wrap(phi);
    }
  }
  return a;
}

TEST_CASE("residue-free phase unwraps to the truth plus one multiple of 2 pi", "[unwrap]") {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (auto [rows, cols] : {std::pair{97, 131}, std::pair{128, 64}, std::pair{2, 2},
                              std::pair{2, 40}, std::pair{33, 2}}) {
      SyntheticSpec spec;
      spec.rows = rows;
      spec.cols = cols;
      spec.turns = std::max(rows, cols) / 40.0;
      spec.seed = FreshSeed();
      auto data = MakeSynthetic(spec, dtype);
      INFO("dtype " << DTypeName(dtype) << " shape " << rows << "x" << cols);
      GoldsteinOptions options;
      GoldsteinResult r = MustGoldstein(data.wrapped, options);
      CHECK(r.stats.positive_residues + r.stats.negative_residues == 0);
      CHECK(r.stats.cut_pixels == 0);
      CHECK(r.stats.regions == 1);
      CHECK(r.stats.unreached_pixels == 0);
      // One constant offset, the same multiple of 2 pi everywhere.
      const double offset = At(r.unwrapped, 0) - data.truth[0];
      double worst = 0;
      for (int64_t i = 0; i < data.wrapped.size(); ++i) {
        worst = std::max(worst, std::fabs(At(r.unwrapped, i) - data.truth[i] - offset));
      }
      CHECK(worst < 1e-4);
      CHECK(std::fabs(offset / (2 * kPi) - std::nearbyint(offset / (2 * kPi))) < 1e-5);
      CheckGoldsteinInvariants(data.wrapped, options, r);
    }
  }
}

TEST_CASE("a CUDA device without a stream is refused, never the default stream", "[unwrap]") {
  const Device no_stream = Device::Cuda(0, nullptr);
  HostArray phase = RandomPhase(DType::kFloat32, 16, 16, 7);
  auto g = UnwrapGoldstein(no_stream, phase, {});
  REQUIRE(g.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(g.status().message()).find("device.stream is null") != std::string::npos);
  auto ls = UnwrapLeastSquares(no_stream, phase, {});
  CHECK(ls.status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("random phase with many residues keeps every invariant", "[unwrap]") {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (auto [rows, cols] : {std::pair{40, 56}, std::pair{67, 131}, std::pair{3, 90}}) {
      const uint64_t seed = FreshSeed();
      INFO("seed " << seed << " dtype " << DTypeName(dtype) << " " << rows << "x" << cols);
      HostArray phase = RandomPhase(dtype, rows, cols, seed);
      GoldsteinOptions options;
      options.iterations_per_radius = 1 + static_cast<int>(seed % 8);
      GoldsteinResult r = MustGoldstein(phase, options);
      CHECK(r.stats.residue_pairs * 2 + r.stats.border_cuts ==
            r.stats.positive_residues + r.stats.negative_residues);
      CHECK(r.stats.positive_residues + r.stats.negative_residues > (rows - 1) * (cols - 1) / 5);
      CheckGoldsteinInvariants(phase, options, r);
      // The reference is deterministic.
      GoldsteinResult again = MustGoldstein(phase, options);
      CHECK(again.unwrapped.bytes() == r.unwrapped.bytes());
      CHECK(again.cuts.bytes() == r.cuts.bytes());
    }
  }
}

TEST_CASE("a dipole is joined by one cut and a lone vortex is cut to the border", "[unwrap]") {
  SECTION("dipole") {
    HostArray phase = Vortices(48, 64, {{20, 20, 1}, {20, 27, -1}});
    GoldsteinResult r = MustGoldstein(phase);
    CHECK(r.stats.positive_residues == 1);
    CHECK(r.stats.negative_residues == 1);
    CHECK(r.stats.residue_pairs == 1);
    CHECK(r.stats.border_cuts == 0);
    CHECK(r.stats.cut_pixels == 8);  // the straight line (20, 20)..(20, 27)
    CHECK(r.residues.data<int16_t>()[20 * 64 + 20] == 1);
    CHECK(r.residues.data<int16_t>()[20 * 64 + 27] == -1);
    for (int x = 20; x <= 27; ++x) CHECK(r.cuts.data<uint8_t>()[20 * 64 + x] == 1);
    CheckGoldsteinInvariants(phase, {}, r);
  }
  SECTION("lone vortex") {
    HostArray phase = Vortices(40, 50, {{12, 30, 1}});
    GoldsteinResult r = MustGoldstein(phase);
    CHECK(r.stats.positive_residues == 1);
    CHECK(r.stats.border_cuts == 1);
    CHECK(r.stats.cut_pixels == 13);  // straight up from (12, 30): rows 0..12
    CHECK(r.stats.pairing_radius == 18);  // radii 1..8, 12, 18: the first to reach row -1
    CheckGoldsteinInvariants(phase, {}, r);
  }
}

TEST_CASE("noisy data: few wrongly unwrapped pixels", "[unwrap]") {
  SyntheticSpec spec;
  spec.rows = 192;
  spec.cols = 256;
  spec.turns = 5;
  spec.sigma = 0.62;  // about 1.5e-3 residues per plaquette
  spec.seed = FreshSeed();
  INFO("seed " << spec.seed);
  auto data = MakeSynthetic(spec);
  GoldsteinResult r = MustGoldstein(data.wrapped);
  CHECK(r.stats.positive_residues > 5);
  CheckGoldsteinInvariants(data.wrapped, {}, r);
  const double wrong = WrongFraction(r.unwrapped, data.truth);
  INFO("goldstein wrong fraction " << wrong << ", regions " << r.stats.regions);
  CHECK(wrong < 0.05);
  LeastSquaresOptions ls;
  auto l = UnwrapLeastSquares(Device::Cpu(), data.wrapped, ls);
  REQUIRE(l.ok());
  CHECK(WrongFraction(l->unwrapped, data.truth) < 0.1);
}

TEST_CASE("masks: apertures, islands with net charge, discharge into the mask", "[unwrap]") {
  SECTION("circular aperture") {
    SyntheticSpec spec;
    spec.rows = 160;
    spec.cols = 160;
    spec.turns = 5;
    spec.sigma = 0.5;
    spec.seed = FreshSeed();
    INFO("seed " << spec.seed);
    auto data = MakeSynthetic(spec);
    HostArray mask(DType::kUint8, {160, 160});
    for (int y = 0; y < 160; ++y) {
      for (int x = 0; x < 160; ++x) {
        const bool outside = (y - 80) * (y - 80) + (x - 80) * (x - 80) > 70 * 70;
        mask.data<uint8_t>()[y * 160 + x] = outside ? 1 : 0;
        if (outside) data.wrapped.data<float>()[y * 160 + x] = NAN;  // masked may be anything
      }
    }
    GoldsteinOptions options;
    options.mask = &mask;
    GoldsteinResult r = MustGoldstein(data.wrapped, options);
    CheckGoldsteinInvariants(data.wrapped, options, r);
    CHECK(r.stats.masked_pixels > 0);
    const double wrong = WrongFraction(r.unwrapped, data.truth, mask.data<uint8_t>());
    INFO("wrong fraction in the aperture " << wrong);
    CHECK(wrong < 0.05);
  }
  SECTION("a masked vortex core becomes a charged island cut to the border") {
    HostArray phase = Vortices(40, 40, {{20, 20, 1}});
    HostArray mask(DType::kUint8, {40, 40});
    for (int y = 19; y <= 22; ++y) {
      for (int x = 19; x <= 22; ++x) mask.data<uint8_t>()[y * 40 + x] = 1;
    }
    GoldsteinOptions options;
    options.mask = &mask;
    GoldsteinResult r = MustGoldstein(phase, options);
    CHECK(r.stats.positive_residues + r.stats.negative_residues == 0);
    CHECK(r.stats.island_cuts == 1);
    CheckGoldsteinInvariants(phase, options, r);
  }
  SECTION("random masks over random phase") {
    for (int trial = 0; trial < 3; ++trial) {
      const uint64_t seed = FreshSeed();
      INFO("seed " << seed);
      HostArray phase = RandomPhase(DType::kFloat32, 60, 90, seed);
      HostArray mask = RandomMask(60, 90, 6, 6, 20, seed);
      GoldsteinOptions options;
      options.mask = &mask;
      GoldsteinResult r = MustGoldstein(phase, options);
      CHECK(r.stats.mask_cuts > 0);
      CheckGoldsteinInvariants(phase, options, r);
    }
  }
}

TEST_CASE("seeds: user seed and quality map", "[unwrap]") {
  SyntheticSpec spec;
  spec.rows = 70;
  spec.cols = 90;
  spec.turns = 3;
  spec.sigma = 0.9;
  spec.seed = FreshSeed();
  INFO("seed " << spec.seed);
  auto data = MakeSynthetic(spec, DType::kFloat64);
  GoldsteinOptions base;
  GoldsteinResult plain = MustGoldstein(data.wrapped, base);

  // Pick an open pixel as the user seed: it keeps its wrapped value, and its region moves by a
  // whole number of turns relative to the default run.
  int64_t s = -1;
  for (int64_t i = data.wrapped.size() / 2; i < data.wrapped.size(); ++i) {
    if (!plain.cuts.data<uint8_t>()[i]) {
      s = i;
      break;
    }
  }
  REQUIRE(s >= 0);
  GoldsteinOptions seeded;
  seeded.seed = Pixel{s / 90, s % 90};
  GoldsteinResult r = MustGoldstein(data.wrapped, seeded);
  CheckGoldsteinInvariants(data.wrapped, seeded, r);
  CHECK(At(r.unwrapped, s) == At(data.wrapped, s));
  CHECK(r.regions.bytes() == plain.regions.bytes());
  const int32_t region = r.regions.data<int32_t>()[s];
  const double shift = At(r.unwrapped, s) - At(plain.unwrapped, s);
  int64_t off = 0;
  for (int64_t i = 0; i < data.wrapped.size(); ++i) {
    if (r.regions.data<int32_t>()[i] != region) continue;
    off += std::fabs(At(r.unwrapped, i) - At(plain.unwrapped, i) - shift) > 1e-6;
  }
  CHECK(off == 0);

  // Quality: each region's best pixel keeps its wrapped value.
  HostArray quality = testing::RandomPhase(DType::kFloat32, 70, 90, spec.seed + 1);
  GoldsteinOptions q;
  q.quality = &quality;
  GoldsteinResult rq = MustGoldstein(data.wrapped, q);
  CheckGoldsteinInvariants(data.wrapped, q, rq);
  std::vector<int64_t> best(rq.stats.regions + 1, -1);
  for (int64_t i = 0; i < data.wrapped.size(); ++i) {
    const int32_t l = rq.regions.data<int32_t>()[i];
    if (l == 0 || rq.cuts.data<uint8_t>()[i]) continue;
    if (best[l] < 0 || quality.data<float>()[i] > quality.data<float>()[best[l]]) best[l] = i;
  }
  int64_t moved = 0;
  for (int64_t l = 1; l <= rq.stats.regions; ++l) {
    moved += At(rq.unwrapped, best[l]) != At(data.wrapped, best[l]);
  }
  CHECK(moved == 0);
}

TEST_CASE("bad input is rejected naming the field", "[unwrap]") {
  auto message_of = [](const HostArray& phase, const GoldsteinOptions& o) {
    auto r = UnwrapGoldstein(Device::Cpu(), phase, o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  HostArray phase = RandomPhase(DType::kFloat32, 30, 50, FreshSeed());
  HostArray bad = phase;
  bad.data<float>()[12 * 50 + 40] = NAN;
  CHECK_THAT(message_of(bad, {}), Catch::Contains("phase[12,40]"));
  bad.data<float>()[12 * 50 + 40] = 4.0f;
  bad.data<float>()[20 * 50 + 3] = INFINITY;
  CHECK_THAT(message_of(bad, {}), Catch::Contains("phase[12,40]"));
  // Masked non-finite values are fine.
  HostArray mask(DType::kUint8, {30, 50});
  mask.data<uint8_t>()[12 * 50 + 40] = 1;
  mask.data<uint8_t>()[20 * 50 + 3] = 1;
  GoldsteinOptions masked;
  masked.mask = &mask;
  CHECK(UnwrapGoldstein(Device::Cpu(), bad, masked).ok());

  CHECK_THAT(message_of(HostArray(DType::kFloat32, {1, 5}), {}), Catch::Contains("phase.shape"));
  CHECK_THAT(message_of(HostArray(DType::kFloat32, {5}), {}), Catch::Contains("phase.shape"));
  CHECK_THAT(message_of(HostArray(DType::kFloat32, {2, 3, 4}), {}),
             Catch::Contains("phase.shape"));
  CHECK_THAT(message_of(HostArray(DType::kComplex64, {4, 4}), {}),
             Catch::Contains("phase.dtype"));
  GoldsteinOptions small;
  small.limits.max_pixels = 100;
  CHECK_THAT(message_of(phase, small), Catch::Contains("phase.shape"));
  small.limits = Limits{};
  small.limits.max_side = 40;
  CHECK_THAT(message_of(phase, small), Catch::Contains("phase.shape"));

  HostArray wrong_mask(DType::kUint8, {30, 51});
  GoldsteinOptions o;
  o.mask = &wrong_mask;
  CHECK_THAT(message_of(phase, o), Catch::Contains("mask.shape"));
  HostArray float_mask(DType::kFloat32, {30, 50});
  o.mask = &float_mask;
  CHECK_THAT(message_of(phase, o), Catch::Contains("mask.dtype"));
  o.mask = nullptr;
  HostArray quality(DType::kFloat32, {30, 50});
  quality.data<float>()[7 * 50 + 9] = NAN;
  o.quality = &quality;
  CHECK_THAT(message_of(phase, o), Catch::Contains("quality[7,9]"));
  HostArray quality_shape(DType::kFloat32, {50, 30});
  o.quality = &quality_shape;
  CHECK_THAT(message_of(phase, o), Catch::Contains("quality.shape"));
  o.quality = nullptr;
  o.seed = Pixel{30, 0};
  CHECK_THAT(message_of(phase, o), Catch::Contains("seed"));
  o.seed = Pixel{12, 40};
  o.mask = &mask;
  CHECK_THAT(message_of(phase, o), Catch::Contains("seed"));
  o = {};
  o.iterations_per_radius = 0;
  CHECK_THAT(message_of(phase, o), Catch::Contains("iterations_per_radius"));

  auto ls = UnwrapLeastSquares(Device::Cpu(), bad, {});
  REQUIRE_FALSE(ls.ok());
  CHECK_THAT(std::string(ls.status().message()), Catch::Contains("phase[12,40]"));
}

TEST_CASE("progress reports stages in order and can cancel", "[unwrap]") {
  HostArray phase = RandomPhase(DType::kFloat32, 64, 64, FreshSeed());
  std::vector<Stage> seen;
  GoldsteinOptions o;
  o.progress = [&seen](Stage s, double f) {
    CHECK(f >= 0);
    CHECK(f <= 1);
    if (seen.empty() || seen.back() != s) seen.push_back(s);
    return true;
  };
  REQUIRE(UnwrapGoldstein(Device::Cpu(), phase, o).ok());
  CHECK(seen == std::vector<Stage>{Stage::kValidate, Stage::kResidues, Stage::kBranchCuts,
                                   Stage::kIntegrate, Stage::kDone});
  for (Stage stop : {Stage::kValidate, Stage::kResidues, Stage::kBranchCuts, Stage::kIntegrate}) {
    o.progress = [stop](Stage s, double) { return s != stop; };
    auto r = UnwrapGoldstein(Device::Cpu(), phase, o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kCancelled);
  }
  LeastSquaresOptions l;
  l.progress = [](Stage s, double) { return s != Stage::kLeastSquares; };
  auto r = UnwrapLeastSquares(Device::Cpu(), phase, l);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kCancelled);
}

TEST_CASE("least squares recovers a residue-free surface", "[unwrap]") {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SyntheticSpec spec;
    spec.rows = 90;
    spec.cols = 128;
    spec.turns = 3;
    spec.seed = FreshSeed();
    auto data = MakeSynthetic(spec, dtype);
    LeastSquaresOptions o;
    auto r = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    REQUIRE(r.ok());
    CHECK(WrongFraction(r->unwrapped, data.truth) == 0);
    // Congruent output is input + 2 pi k exactly.
    for (int64_t i = 0; i < data.wrapped.size(); i += 97) {
      const double t = (At(r->unwrapped, i) - At(data.wrapped, i)) / (2 * kPi);
      CHECK(std::fabs(t - std::nearbyint(t)) < 1e-5);
    }
    // Without congruence: the solution equals the truth minus its mean.
    o.congruent = false;
    auto raw = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    REQUIRE(raw.ok());
    double mean = 0;
    for (double t : data.truth) mean += t;
    mean /= data.truth.size();
    double worst = 0;
    for (int64_t i = 0; i < data.wrapped.size(); ++i) {
      worst = std::max(worst, std::fabs(At(raw->unwrapped, i) - (data.truth[i] - mean)));
    }
    CHECK(worst < 1e-3);
  }
  SECTION("masked pixels are zero") {
    auto data = MakeSynthetic(SyntheticSpec{});
    HostArray mask = RandomMask(256, 256, 4, 10, 10, FreshSeed());
    LeastSquaresOptions o;
    o.mask = &mask;
    auto r = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    REQUIRE(r.ok());
    int64_t nonzero = 0;
    for (int64_t i = 0; i < mask.size(); ++i) {
      nonzero += mask.data<uint8_t>()[i] && r->unwrapped.data<float>()[i] != 0;
    }
    CHECK(nonzero == 0);
  }
}

TEST_CASE("weighted least squares confines a low-quality noisy region", "[unwrap]") {
  SyntheticSpec spec;
  spec.rows = 200;
  spec.cols = 240;
  spec.turns = 4;
  spec.seed = FreshSeed();
  INFO("seed " << spec.seed);
  auto patch = MakeNoisyPatch(spec, 2.0, 0.f);
  const uint8_t* skip = patch.in_patch.data();
  LeastSquaresOptions o;
  auto plain = UnwrapLeastSquares(Device::Cpu(), patch.data.wrapped, o);
  o.weighted = true;
  o.weights = &patch.weights;
  auto weighted = UnwrapLeastSquares(Device::Cpu(), patch.data.wrapped, o);
  REQUIRE(plain.ok());
  REQUIRE(weighted.ok());
  const double wrong_plain = WrongFraction(plain->unwrapped, patch.data.truth, nullptr, skip);
  const double wrong_weighted =
      WrongFraction(weighted->unwrapped, patch.data.truth, nullptr, skip);
  INFO("wrong outside the patch: unweighted " << wrong_plain << ", weighted " << wrong_weighted
                                              << "; " << weighted->iterations
                                              << " iterations, residual " << weighted->residual);
  CHECK(plain->iterations == 0);
  CHECK(weighted->iterations > 1);
  CHECK(weighted->residual <= o.tolerance);
  CHECK(wrong_weighted < wrong_plain);
  CHECK(wrong_weighted < 0.001);
  // Weights 0.05 inside the patch instead of 0: still far better than unweighted.
  auto soft = MakeNoisyPatch(spec, 2.0, 0.05f);
  o.weights = &soft.weights;
  auto soft_r = UnwrapLeastSquares(Device::Cpu(), soft.data.wrapped, o);
  REQUIRE(soft_r.ok());
  CHECK(WrongFraction(soft_r->unwrapped, soft.data.truth, nullptr, skip) < wrong_plain);
}

TEST_CASE("weighted least squares with all-ones weights is the unweighted solution", "[unwrap]") {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SyntheticSpec spec;
    spec.rows = 96;
    spec.cols = 130;
    spec.sigma = 0.5;
    spec.seed = FreshSeed();
    INFO("seed " << spec.seed);
    auto data = MakeSynthetic(spec, dtype);
    HostArray ones(dtype, {spec.rows, spec.cols});
    for (int64_t i = 0; i < ones.size(); ++i) {
      dtype == DType::kFloat32 ? void(ones.data<float>()[i] = 1.f)
                               : void(ones.data<double>()[i] = 1.0);
    }
    LeastSquaresOptions o;
    o.congruent = false;
    auto plain = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    o.weighted = true;
    o.weights = &ones;
    auto weighted = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    REQUIRE(plain.ok());
    REQUIRE(weighted.ok());
    // The preconditioner is the exact inverse: one iteration.
    CHECK(weighted->iterations == 1);
    double worst = 0;
    for (int64_t i = 0; i < data.wrapped.size(); ++i) {
      worst = std::max(worst, std::fabs(At(weighted->unwrapped, i) - At(plain->unwrapped, i)));
    }
    CHECK(worst < 1e-4);
    // weighted = true with neither weights nor a mask takes the direct solve.
    o.weights = nullptr;
    auto direct = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    REQUIRE(direct.ok());
    CHECK(direct->iterations == 0);
  }
}

TEST_CASE("weighted least squares with a mask only", "[unwrap]") {
  SyntheticSpec spec;
  spec.seed = FreshSeed();
  INFO("seed " << spec.seed);
  auto data = MakeSynthetic(spec);
  HostArray mask = RandomMask(256, 256, 4, 10, 10, spec.seed);
  LeastSquaresOptions o;
  o.mask = &mask;
  o.weighted = true;
  o.max_iterations = 300;
  auto r = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
  REQUIRE(r.ok());
  INFO(r->iterations << " iterations, residual " << r->residual);
  CHECK(r->residual <= o.tolerance);
  CHECK(WrongFraction(r->unwrapped, data.truth, mask.data<uint8_t>()) == 0);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < mask.size(); ++i) {
    nonzero += mask.data<uint8_t>()[i] && r->unwrapped.data<float>()[i] != 0;
  }
  CHECK(nonzero == 0);
}

TEST_CASE("weighted least squares validates weights and PCG options", "[unwrap]") {
  HostArray phase = RandomPhase(DType::kFloat32, 16, 20, FreshSeed());
  auto fails = [&](const LeastSquaresOptions& o, const std::string& needle) {
    auto r = UnwrapLeastSquares(Device::Cpu(), phase, o);
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(r.status().message()).find(needle) != std::string::npos);
  };
  HostArray good(DType::kFloat32, {16, 20});
  for (int64_t i = 0; i < good.size(); ++i) good.data<float>()[i] = 0.5f;
  LeastSquaresOptions o;
  o.weights = &good;
  fails(o, "weights requires weighted");
  o.weighted = true;
  REQUIRE(UnwrapLeastSquares(Device::Cpu(), phase, o).ok());
  HostArray wrong_shape(DType::kFloat32, {20, 16});
  o.weights = &wrong_shape;
  fails(o, "weights.shape");
  HostArray wrong_dtype(DType::kUint8, {16, 20});
  o.weights = &wrong_dtype;
  fails(o, "weights.dtype");
  HostArray bad = good;
  o.weights = &bad;
  for (float v : {std::nanf(""), INFINITY, -0.25f, 1.5f}) {
    bad.data<float>()[3 * 20 + 7] = v;
    fails(o, "weights[3,7]");
  }
  // A masked pixel's weight is not read.
  HostArray mask(DType::kUint8, {16, 20});
  mask.data<uint8_t>()[3 * 20 + 7] = 1;
  o.mask = &mask;
  REQUIRE(UnwrapLeastSquares(Device::Cpu(), phase, o).ok());
  o.weights = &good;
  o.tolerance = 0;
  fails(o, "tolerance");
  o.tolerance = 1e-6;
  o.max_iterations = 0;
  fails(o, "max_iterations");
}

}  // namespace
}  // namespace fresnel::unwrap

namespace fresnel::unwrap {
namespace {

TEST_CASE("Unwrap runs each method as its own entry point does, with overall progress",
          "[unwrap]") {
  const uint64_t seed = testing::FreshSeed();
  INFO("seed " << seed);
  const HostArray phase = testing::RandomPhase(DType::kFloat64, 48, 56, seed);
  const HostArray mask = testing::RandomMask(48, 56, 3, 5, 10, seed + 1);
  int64_t masked = 0;
  for (int64_t i = 0; i < mask.size(); ++i) masked += mask.data<uint8_t>()[i] != 0;
  HostArray quality(DType::kFloat64, {48, 56});
  for (int64_t i = 0; i < quality.size(); ++i) {
    quality.data<double>()[i] = 0.25 + 0.5 * std::fabs(std::sin(0.37 * i + seed % 97));
  }
  for (Method method :
       {Method::kGoldstein, Method::kLeastSquares, Method::kWeightedLeastSquares}) {
    INFO("method " << MethodName(method));
    UnwrapOptions o;
    o.method = method;
    o.mask = &mask;
    o.quality = method == Method::kLeastSquares ? nullptr : &quality;
    std::vector<double> overall;
    std::vector<Stage> stages;
    o.progress = [&](Stage stage, double, double all) {
      stages.push_back(stage);
      overall.push_back(all);
      return true;
    };
    REQUIRE(ValidateUnwrap(phase, o).ok());
    CHECK(UnwrapDeviceBytes(phase, o) > 2 * phase.nbytes());
    auto r = Unwrap(Device::Cpu(), phase, o);
    REQUIRE(r.ok());
    CHECK(r->method == method);
    REQUIRE(!overall.empty());
    for (size_t i = 1; i < overall.size(); ++i) CHECK(overall[i] >= overall[i - 1]);
    CHECK(stages.back() == Stage::kDone);
    CHECK(overall.back() == 1.0);
    if (method == Method::kGoldstein) {
      GoldsteinOptions g;
      g.mask = &mask;
      g.quality = &quality;
      auto ref = UnwrapGoldstein(Device::Cpu(), phase, g);
      REQUIRE(ref.ok());
      CHECK(r->unwrapped.bytes() == ref->unwrapped.bytes());
      CHECK(r->regions.bytes() == ref->regions.bytes());
      CHECK(r->stats.positive_residues == ref->stats.positive_residues);
      CHECK(r->stats.masked_pixels == ref->stats.masked_pixels);
    } else {
      LeastSquaresOptions l;
      l.mask = &mask;
      l.weighted = method == Method::kWeightedLeastSquares;
      l.weights = l.weighted ? &quality : nullptr;
      auto ref = UnwrapLeastSquares(Device::Cpu(), phase, l);
      REQUIRE(ref.ok());
      CHECK(r->unwrapped.bytes() == ref->unwrapped.bytes());
      CHECK(r->pcg_iterations == ref->iterations);
      CHECK(r->stats.masked_pixels == masked);
      CHECK(r->residues.ndim() == 0);
    }
  }
}

TEST_CASE("results go into the caller's buffers (ResultBuffers), checked naming the array",
          "[unwrap]") {
  HostArray phase = testing::RandomPhase(DType::kFloat32, 40, 50, 17);
  auto want = UnwrapGoldstein(Device::Cpu(), phase, {});
  REQUIRE(want.ok());
  std::vector<float> unwrapped(40 * 50);
  std::vector<int16_t> residues(40 * 50);
  ResultBuffers into;
  into.unwrapped = *HostArray::Borrow(DType::kFloat32, {40, 50}, unwrapped.data(), 8000);
  into.residues = *HostArray::Borrow(DType::kInt16, {40, 50}, residues.data(), 4000);
  GoldsteinOptions options;
  options.into = &into;
  auto got = UnwrapGoldstein(Device::Cpu(), phase, options);
  REQUIRE(got.ok());
  CHECK(got->unwrapped.raw() == unwrapped.data());  // the caller's memory holds the result
  CHECK(got->residues.raw() == residues.data());
  CHECK_FALSE(got->cuts.borrowed());                  // not given: a new array
  CHECK(got->unwrapped.bytes() == want->unwrapped.bytes());
  CHECK(got->residues.bytes() == want->residues.bytes());
  CHECK(got->cuts.bytes() == want->cuts.bytes());

  // Through the one entry point, least squares too.
  std::vector<float> lsq(40 * 50);
  ResultBuffers lsq_into;
  lsq_into.unwrapped = *HostArray::Borrow(DType::kFloat32, {40, 50}, lsq.data(), 8000);
  UnwrapOptions u;
  u.method = Method::kLeastSquares;
  u.into = &lsq_into;
  auto lsq_got = Unwrap(Device::Cpu(), phase, u);
  REQUIRE(lsq_got.ok());
  CHECK(lsq_got->unwrapped.raw() == lsq.data());
  auto lsq_want = UnwrapLeastSquares(Device::Cpu(), phase, {});
  REQUIRE(lsq_want.ok());
  CHECK(lsq_got->unwrapped.bytes() == lsq_want->unwrapped.bytes());

  // Another dtype or shape, or a map the call does not return: INVALID_ARGUMENT naming it.
  std::vector<int32_t> wrong(40 * 50);
  ResultBuffers bad;
  bad.residues = *HostArray::Borrow(DType::kInt32, {40, 50}, wrong.data(), 8000);
  options.into = &bad;
  auto refused = UnwrapGoldstein(Device::Cpu(), phase, options);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("into.residues") != std::string::npos);
  bad.residues = HostArray();
  bad.regions = *HostArray::Borrow(DType::kInt32, {50, 40}, wrong.data(), 8000);
  refused = UnwrapGoldstein(Device::Cpu(), phase, options);
  CHECK(refused.status().message().find("into.regions") != std::string::npos);
  bad.regions = *HostArray::Borrow(DType::kInt32, {40, 50}, wrong.data(), 8000);
  options.return_maps = false;
  refused = UnwrapGoldstein(Device::Cpu(), phase, options);
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("into.regions: this call returns no maps") !=
        std::string::npos);
}

TEST_CASE("large arrays are checked in parallel and still name the first bad pixel",
          "[unwrap]") {
  // 1500 x 1100 (25 blocks of 2^16 elements, checked on all cores): the lowest bad index wins
  // wherever the blocks run, for the phase, the quality map and the weights.
  const int rows = 1500, cols = 1100;
  HostArray phase(DType::kFloat64, {rows, cols});
  HostArray quality(DType::kFloat32, {rows, cols});
  for (int64_t i = 0; i < phase.size(); ++i) {
    phase.data<double>()[i] = 0.001 * (i % 3000) - 1.5;
    quality.data<float>()[i] = 0.5f;
  }
  HostArray mask(DType::kUint8, {rows, cols});
  UnwrapOptions o;
  o.mask = &mask;
  auto message = [&] { return std::string(ValidateUnwrap(phase, o).message()); };
  CHECK(message().empty());
  // Bad pixels in several blocks, the lowest in a late-scheduled middle block.
  for (int64_t r : {1400, 900, 700, 1499}) phase.data<double>()[r * cols + 5] = std::nan("");
  phase.data<double>()[700 * cols + 3] = 9.0;
  CHECK_THAT(message(), Catch::Contains("phase[700,3]") && Catch::Contains("wrapped range"));
  mask.data<uint8_t>()[700 * cols + 3] = 1;
  mask.data<uint8_t>()[700 * cols + 5] = 1;
  CHECK_THAT(message(), Catch::Contains("phase[900,5]") && Catch::Contains("not finite"));
  for (int64_t r : {1400, 900, 1499}) mask.data<uint8_t>()[r * cols + 5] = 1;
  CHECK(message().empty());
  o.quality = &quality;
  quality.data<float>()[1200 * cols + 7] = INFINITY;
  quality.data<float>()[300 * cols] = std::nanf("");
  CHECK_THAT(message(), Catch::Contains("quality[300,0]"));
  quality.data<float>()[300 * cols] = 1.5f;  // outside [0, 1]: only the weights mind
  CHECK_THAT(message(), Catch::Contains("quality[1200,7]"));
  quality.data<float>()[1200 * cols + 7] = 0.5f;
  CHECK(message().empty());
  o.method = Method::kWeightedLeastSquares;
  CHECK_THAT(message(), Catch::Contains("quality[300,0]") && Catch::Contains("[0, 1]"));
}

TEST_CASE("ValidateUnwrap refuses bad values naming the field and pixel", "[unwrap]") {
  HostArray phase(DType::kFloat32, {8, 9});
  for (int64_t i = 0; i < phase.size(); ++i) phase.data<float>()[i] = 0.1f * (i % 7);
  HostArray quality(DType::kFloat32, {8, 9});
  for (int64_t i = 0; i < quality.size(); ++i) quality.data<float>()[i] = 0.5f;
  HostArray mask(DType::kUint8, {8, 9});
  auto message = [&](const UnwrapOptions& o) {
    return std::string(ValidateUnwrap(phase, o).message());
  };
  UnwrapOptions o;
  o.mask = &mask;
  CHECK(message(o).empty());
  phase.data<float>()[2 * 9 + 3] = std::nanf("");
  CHECK_THAT(message(o), Catch::Contains("phase[2,3]") && Catch::Contains("not finite"));
  mask.data<uint8_t>()[2 * 9 + 3] = 1;  // masked: any value goes
  CHECK(message(o).empty());
  phase.data<float>()[5 * 9 + 1] = 3.5f;
  CHECK_THAT(message(o), Catch::Contains("phase[5,1]") && Catch::Contains("wrapped range"));
  phase.data<float>()[5 * 9 + 1] = 0;
  o.quality = &quality;
  quality.data<float>()[4] = INFINITY;
  CHECK_THAT(message(o), Catch::Contains("quality[0,4]") && Catch::Contains("not finite"));
  quality.data<float>()[4] = 1.5f;  // fine for Goldstein, not as weights
  CHECK(message(o).empty());
  o.method = Method::kWeightedLeastSquares;
  CHECK_THAT(message(o), Catch::Contains("quality[0,4]") && Catch::Contains("[0, 1]"));
  o.method = Method::kLeastSquares;
  CHECK_THAT(message(o), Catch::Contains("LEAST_SQUARES takes no quality map"));
  o.quality = nullptr;
  CHECK(message(o).empty());
}

}  // namespace
}  // namespace fresnel::unwrap
