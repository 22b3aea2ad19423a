// Checks shared by the CPU and GPU unwrap tests: properties every correct Goldstein result has,
// verified without looking at how it was computed.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "fresnel/unwrap/unwrap.h"
#include "synthetic_phase.h"

namespace fresnel::unwrap::testing {

// A seed for fresh random inputs, printed on failure.
inline uint64_t FreshSeed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Uniformly random wrapped phase: about one plaquette in three is a residue.
inline HostArray RandomPhase(DType dtype, int rows, int cols, uint64_t seed) {
  HostArray a(dtype, {rows, cols});
  uint64_t state = seed;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double v = -kPi + 2 * kPi * Uniform01(state);
    if (dtype == DType::kFloat32) {
      float f = static_cast<float>(v);
      a.data<float>()[i] = std::fabs(f) > kPi ? 0.f : f;
    } else {
      a.data<double>()[i] = v;
    }
  }
  return a;
}

// A random mask: `blobs` filled discs of radius up to `max_radius`, plus isolated pixels.
inline HostArray RandomMask(int rows, int cols, int blobs, int max_radius, int singles,
                            uint64_t seed) {
  HostArray m(DType::kUint8, {rows, cols});
  uint64_t state = seed ^ 0x5bd1e995u;
  auto pick = [&state](int n) { return static_cast<int>(Uniform01(state) * n); };
  for (int b = 0; b < blobs; ++b) {
    const int cy = pick(rows), cx = pick(cols), r = 1 + pick(max_radius);
    for (int y = std::max(0, cy - r); y <= std::min(rows - 1, cy + r); ++y) {
      for (int x = std::max(0, cx - r); x <= std::min(cols - 1, cx + r); ++x) {
        if ((y - cy) * (y - cy) + (x - cx) * (x - cx) <= r * r) m.data<uint8_t>()[y * cols + x] = 1;
      }
    }
  }
  for (int s = 0; s < singles; ++s) m.data<uint8_t>()[pick(rows) * cols + pick(cols)] = 1;
  return m;
}

inline void CheckGoldsteinInvariants(const HostArray& phase, const GoldsteinOptions& options,
                                     const GoldsteinResult& r) {
  const int rows = static_cast<int>(phase.dim(0)), cols = static_cast<int>(phase.dim(1));
  const int64_t n = phase.size();
  const uint8_t* mask = options.mask != nullptr ? options.mask->data<uint8_t>() : nullptr;
  auto masked = [mask](int64_t i) { return mask != nullptr && mask[i] != 0; };
  REQUIRE(r.unwrapped.shape() == phase.shape());
  REQUIRE(r.unwrapped.dtype() == phase.dtype());
  REQUIRE(r.residues.dtype() == DType::kInt16);
  REQUIRE(r.cuts.dtype() == DType::kUint8);
  REQUIRE(r.regions.dtype() == DType::kInt32);
  REQUIRE(r.unreached.dtype() == DType::kUint8);
  const int16_t* res = r.residues.data<int16_t>();
  const uint8_t* cut = r.cuts.data<uint8_t>();
  const int32_t* lab = r.regions.data<int32_t>();
  const uint8_t* unr = r.unreached.data<uint8_t>();

  // Residue map: equals an independent computation; counts match the statistics.
  std::vector<int> charges;
  const int64_t independent = CountResidues(phase, mask, &charges);
  int64_t pos = 0, neg = 0, mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    pos += res[i] > 0;
    neg += res[i] < 0;
    mismatches += res[i] != charges[i];
  }
  CHECK(mismatches == 0);
  CHECK(pos + neg == independent);
  CHECK(r.stats.positive_residues == pos);
  CHECK(r.stats.negative_residues == neg);

  // Every residue's top-left pixel is on a cut (or masked): no loop can enclose it alone.
  int64_t uncut_residues = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (res[i] != 0 && !masked(i) && !cut[i]) ++uncut_residues;
  }
  CHECK(uncut_residues == 0);

  // Congruence: output - input is a multiple of 2*pi; masked pixels are 0.
  int64_t not_congruent = 0, masked_nonzero = 0, cut_count = 0, unreached = 0;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double out = At(r.unwrapped, i), in = At(phase, i);
    if (masked(i)) {
      masked_nonzero += out != 0 || cut[i] != 0 || unr[i] != 0;
      continue;
    }
    cut_count += cut[i];
    unreached += unr[i];
    const double turns = (out - in) / (2 * kPi);
    const double err = std::fabs(turns - std::nearbyint(turns)) * 2 * kPi;
    worst = std::max(worst, err);
    not_congruent += err > 1e-5;
  }
  INFO("worst congruence error " << worst);
  CHECK(not_congruent == 0);
  CHECK(masked_nonzero == 0);
  CHECK(r.stats.cut_pixels == cut_count);
  CHECK(r.stats.unreached_pixels == unreached);

  // Regions: open 4-neighbours share a label, and their unwrapped difference is the wrapped
  // gradient (path independence); labels 1..R appear in raster order of first occurrence; each
  // region's first pixel is its seed (k = 0) when no quality map or seed is given.
  auto open = [&](int64_t i) { return !masked(i) && !cut[i]; };
  int64_t split = 0, inconsistent = 0, unlabeled = 0;
  int32_t next_label = 1;
  int64_t bad_seed = 0;
  const bool default_seeds = options.quality == nullptr && !options.seed.has_value();
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      const int64_t i = static_cast<int64_t>(y) * cols + x;
      if (!open(i)) continue;
      if (lab[i] <= 0) {
        ++unlabeled;
        continue;
      }
      if (lab[i] == next_label) {
        ++next_label;
        if (default_seeds && At(r.unwrapped, i) != At(phase, i)) ++bad_seed;
      } else if (lab[i] > next_label) {
        ++unlabeled;  // a label appearing before its predecessor
      }
      const int64_t right = x + 1 < cols ? i + 1 : -1, down = y + 1 < rows ? i + cols : -1;
      for (int64_t j : {right, down}) {
        if (j < 0 || !open(j)) continue;
        if (lab[j] != lab[i]) {
          ++split;
          continue;
        }
        const double step = At(r.unwrapped, j) - At(r.unwrapped, i);
        const double wrapped_step = Wrap(At(phase, j) - At(phase, i));
        if (std::fabs(step - wrapped_step) > 1e-3 &&
            std::fabs(std::fabs(step) - kPi) > 1e-3) {  // |step| == pi is ambiguous
          ++inconsistent;
        }
      }
    }
  }
  CHECK(unlabeled == 0);
  CHECK(split == 0);
  CHECK(inconsistent == 0);
  CHECK(bad_seed == 0);
  CHECK(r.stats.regions == next_label - 1);
  int64_t stray_labels = 0;
  for (int64_t i = 0; i < n; ++i) stray_labels += (masked(i) || unr[i]) && lab[i] != 0;
  CHECK(stray_labels == 0);
}

}  // namespace fresnel::unwrap::testing
