// Host checks of the CUDA planners' tables (no device needed): the band tables of kPhaseGroups
// (every rotation) and the fragment-ordered filter bank of kTensorTf32 must reproduce the
// polyphase sum y[k] = sum_m htf[t*P + m] * s[q - m] when read the way the kernels read them.
// The kernels themselves are checked against the CPU oracle by the [gpu] cases.
#include <catch2/catch.hpp>

#if defined(FRESNEL_WITH_CUDA)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "interp/interp_internal.h"
#include "interp/phase_groups.h"
#include "interp/tensor_tf32.h"

namespace fresnel::interp {
namespace {

struct PlanCase {
  int up, down, taps;
};
constexpr PlanCase kPlanCases[] = {
    {160, 147, 3201}, {147, 160, 3201}, {3, 2, 1024}, {3, 2, 3072}, {2, 1, 256}, {5, 3, 333},
    {1, 3, 400},      {8, 3, 800},      {4, 6, 90},   {11, 7, 7},   {3, 4, 500}, {4, 1, 64},
    {76, 75, 760},
};

// A signal defined on every integer (the kernels read cval and padding outside x).
double Signal(int64_t i) {
  uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<double>(h >> 11) / 9007199254740992.0 - 0.5;
}

// Output k of the full upfirdn, directly.
double Direct(const std::vector<float>& htf, int up, int down, int64_t p, int64_t k) {
  const int64_t q = k * down / up, t = k * down - q * up;
  double y = 0;
  for (int64_t m = 0; m < p; ++m) y += static_cast<double>(htf[t * p + m]) * Signal(q - m);
  return y;
}

std::vector<float> RandomHtf(const PlanCase& c, int64_t* p) {
  std::mt19937 rng(c.up * 1009 + c.down * 31 + c.taps);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  internal::Polyphase f;
  f.up = c.up;
  f.down = c.down;
  for (int i = 0; i < c.taps; ++i) f.taps.push_back(u(rng));
  *p = f.TapsPerPhase();
  const std::vector<double> h = f.PhaseMajorTaps();
  return std::vector<float>(h.begin(), h.end());
}

TEST_CASE("kPhaseGroups band tables reproduce the filter in every rotation", "[interp]") {
  for (const PlanCase& c : kPlanCases) {
    int64_t p = 0;
    const std::vector<float> htf = RandomHtf(c, &p);
    for (int widen : {1, 2}) {
      for (int layout : {1, 2}) {
        for (int rotate : {1, 2}) {
          internal::PhaseGroupsChoice choice;
          choice.widen = widen;
          choice.layout = layout;
          choice.rotate = rotate;
          auto pl = internal::PlanPhaseGroups(c.up, c.down, p, htf, choice);
          if (!pl.ok()) continue;  // filters it cannot tile (the [gpu] cases cover the limits)
          INFO(c.up << "/" << c.down << " taps " << c.taps << " widen " << widen << " layout "
                    << layout << " rotate " << rotate);
          REQUIRE(static_cast<int64_t>(pl->table.size()) ==
                  static_cast<int64_t>(pl->table_floats) * pl->rotations);
          REQUIRE(static_cast<int>(pl->zoff.size()) == pl->rotations);
          CHECK(pl->rotations == (pl->plain && pl->u % 4 == 0 && rotate != 1 ? 4 : 1));
          const int tap_floats = pl->groups * pl->k * pl->v;
          for (int rs = 0; rs < pl->rotations; ++rs) {
            const float* tab = pl->table.data() + static_cast<size_t>(pl->table_floats) * rs;
            CHECK(pl->zoff[rs] <= 0);
            CHECK(-pl->zoff[rs] <= pl->extra);
            double err = 0, scale = 0;
            for (int64_t n : {1, 2, 7}) {
              for (int j = 0; j < pl->u; ++j) {
                const int gr = j / pl->v, vv = j % pl->v;
                int base = 0;
                std::memcpy(&base, tab + tap_floats + gr, sizeof(int));
                REQUIRE(base >= 0);
                // The kernel: rotated period n's output j is k = n*u - rs + j, read from inputs
                // n*d - (P-1) + zoff + base + i, i < K, with weights A[gr][i][vv].
                const int64_t k = n * pl->u - rs + j;
                double y = 0;
                const float* a = tab + static_cast<size_t>(gr) * pl->k * pl->v + vv;
                for (int i = 0; i < pl->k; ++i) {
                  y += static_cast<double>(a[i * pl->v]) *
                       Signal(n * pl->d - (p - 1) + pl->zoff[rs] + base + i);
                }
                const double want = Direct(htf, c.up, c.down, p, k);
                err = std::max(err, std::fabs(y - want));
                scale = std::max(scale, std::fabs(want));
              }
            }
            CHECK(err <= 1e-12 * std::max(scale, 1.0));
          }
        }
      }
    }
  }
}

// Plans every case with R in {0, 1, 2, 4} under two choices (`tweak_a`, `tweak_b` set what
// differs) and calls check(case, R, P, htf, plan a, plan b), the pair named in the context.
template <class TweakA, class TweakB, class Check>
void ForEachPlanPair(TweakA tweak_a, TweakB tweak_b, Check check) {
  for (const PlanCase& c : kPlanCases) {
    int64_t p = 0;
    const std::vector<float> htf = RandomHtf(c, &p);
    for (int r : {0, 1, 2, 4}) {
      internal::PhaseGroupsChoice ca, cb;
      ca.periods_per_lane = cb.periods_per_lane = r;
      tweak_a(ca);
      tweak_b(cb);
      auto a = internal::PlanPhaseGroups(c.up, c.down, p, htf, ca);
      auto b = internal::PlanPhaseGroups(c.up, c.down, p, htf, cb);
      INFO(c.up << "/" << c.down << " taps " << c.taps << " R " << r << " a "
                << a.status().ToString() << " b " << b.status().ToString());
      check(c, r, p, htf, a, b);
    }
  }
}

TEST_CASE("kPhaseGroups with two input tiles plans the same band tables", "[interp]") {
  // PhaseGroupsChoice::prefetch changes only the shared-memory layout (a second input tile):
  // where both plans exist they have the same geometry and table, and the two-tile plan's
  // shared memory holds both tiles. 160/147 (the case it is for) must plan with R = 1 and 2
  // (R = 4's two tiles exceed shared memory). The whole tile is staged in both (rounds need
  // one input tile).
  int compared = 0;
  ForEachPlanPair(
      [](internal::PhaseGroupsChoice& one) {
        one.prefetch = 1;
        one.stage = 1;
      },
      [](internal::PhaseGroupsChoice& two) {
        two.prefetch = 2;
        two.stage = 1;
      },
      [&](const PlanCase& c, int r, int64_t, const std::vector<float>&, const auto& a,
          const auto& b) {
        if (c.up == 160 && c.down == 147 && r != 4) CHECK(a.ok() == b.ok());
        if (!a.ok() || !b.ok()) return;
        CHECK(!a->prefetch);
        CHECK(b->prefetch);
        CHECK(b->smem_bytes <= 200 * 1024);
        // The widened period may not fit twice where it fits once (the planner then keeps the
        // plain period): compare plans of the same period.
        if (b->u != a->u || b->v != a->v) return;
        ++compared;
        CHECK(b->table == a->table);
        CHECK(b->k == a->k);
        if (b->periods == a->periods) {
          const int in_bytes = b->smem_bytes - a->smem_bytes;
          CHECK(in_bytes >= 4 * (b->periods * b->d + b->k - 1));
        }
      });
  CHECK(compared >= 30);
}

TEST_CASE("kPhaseGroups staged in rounds or copied out in bulk plans the same band tables",
          "[interp]") {
  // PhaseGroupsChoice::stage changes only the output staging: the same geometry and table, and
  // for 160/147 (R = 1 and 2) rounds fit three blocks per SM (228 KiB of shared memory per SM
  // on the H100/H200, 1 KiB of it reserved per block) where the whole tile's staging allows
  // two. The bulk copy-out (stage 3) keeps the whole tile's plan and footprint.
  int rounds = 0;
  ForEachPlanPair(
      [](internal::PhaseGroupsChoice& whole) { whole.stage = 1; },
      [](internal::PhaseGroupsChoice& staged) { staged.stage = 2; },
      [&](const PlanCase& c, int r, int64_t p, const std::vector<float>& htf, const auto& a,
          const auto& b) {
        if (c.up == 160 && c.down == 147) REQUIRE(a.ok() == b.ok());
        if (!a.ok() || !b.ok()) return;
        CHECK(!a->rounds);
        CHECK(b->rounds ==
              (b->plain && b->v == 4 && b->u % 4 == 0 && b->r <= 2 && b->groups > 18));
        if (b->u != a->u || b->v != a->v) return;
        CHECK(b->table == a->table);
        CHECK(b->k == a->k);
        internal::PhaseGroupsChoice bulk;
        bulk.periods_per_lane = r;
        bulk.stage = 3;
        bulk.bulk_in = 1;  // the copy-out alone (the default adds the bulk input copies)
        auto e = internal::PlanPhaseGroups(c.up, c.down, p, htf, bulk);
        REQUIRE(e.ok());
        CHECK(e->bulk == (e->plain && e->v == 4 && e->u % 4 == 0 && e->r == 2));
        CHECK(!e->rounds);
        CHECK(e->table == a->table);
        CHECK(e->smem_bytes == a->smem_bytes);
        if (!b->rounds) return;
        ++rounds;
        CHECK(b->sr % 4 == 0);
        CHECK((b->sr / 4) % 2 == 1);
        if (b->periods == a->periods) CHECK(b->smem_bytes < a->smem_bytes);
        if (c.up == 160 && c.down == 147 && r != 4) {
          CHECK(3 * (b->smem_bytes + 1024) <= 228 * 1024);
          if (r != 1) CHECK(3 * (a->smem_bytes + 1024) > 228 * 1024);
        }
      });
  CHECK(rounds >= 4);  // 160/147 and 76/75 with R = 1 and 2
}

TEST_CASE("kPhaseGroups split tail and bulk input copies keep the whole tile's plan",
          "[interp]") {
  // PhaseGroupsChoice::tail and ::bulk_in change how the block runs its tiles, not the tile:
  // the same geometry and table; they apply to the whole-tile staging of the plain tile with
  // V = 4 and R = 2 (StagedKernelFor), and the bulk input copies add their mbarrier's 16 bytes.
  int applied = 0;
  for (int tail : {2, 3}) {
    ForEachPlanPair(
        [](internal::PhaseGroupsChoice& plain) { plain.stage = 1; },
        [tail](internal::PhaseGroupsChoice& split) {
          split.stage = 1;
          split.tail = tail;
          split.bulk_in = 2;
        },
        [&](const PlanCase& c, int, int64_t, const std::vector<float>&, const auto& a,
            const auto& b) {
          REQUIRE(a.ok() == b.ok());
          if (!a.ok()) return;
          CHECK(a->tail == 0);
          CHECK(!a->bulk_in);
          const bool staged = b->plain && b->v == 4 && b->r == 2 && !b->prefetch && !b->rounds;
          CHECK(b->tail == (staged ? tail : 0));
          CHECK(b->bulk_in == staged);
          CHECK(b->table == a->table);
          CHECK(b->periods == a->periods);
          CHECK(b->smem_bytes == a->smem_bytes + (staged ? 16 : 0));
          if (c.up == 160 && c.down == 147 && b->r == 2) {
            CHECK(staged);
            // Still two blocks per SM (228 KiB per SM, 1 KiB of it reserved per block).
            CHECK(2 * (b->smem_bytes + 1024) <= 228 * 1024);
          }
          if (staged) ++applied;
        });
  }
  CHECK(applied >= 4);  // 160/147 with R = 0 (the default, 2) and 2, both tails
}

TEST_CASE("kPhaseGroups defaults: bulk copy-out, and bulk input copies only with it",
          "[interp]") {
  // Session 13 (H200: 160/147 60.9-61.9% of copy against 58.7-59.8%): the default plan is stage
  // 3 with bulk input copies where the bulk copy-out applies; where it does not, the threads
  // copy out and the input arrives by per-thread cp.async (bulk input alone was 7% slower).
  int bulk = 0;
  ForEachPlanPair(
      [](internal::PhaseGroupsChoice&) {},
      [](internal::PhaseGroupsChoice& whole) { whole.stage = 1; },
      [&](const PlanCase& c, int, int64_t, const std::vector<float>&, const auto& a,
          const auto& b) {
        REQUIRE(a.ok() == b.ok());
        if (!a.ok()) return;
        CHECK(a->bulk_in == a->bulk);
        CHECK(!b->bulk);
        CHECK(!b->bulk_in);
        CHECK(a->table == b->table);
        if (c.up == 160 && c.down == 147 && a->r == 2) CHECK(a->bulk);
        if (a->bulk) ++bulk;
      });
  CHECK(bulk >= 2);
}

TEST_CASE("kTensorTf32 fragment tables reproduce the filter", "[interp]") {
  int planned = 0;
  for (const PlanCase& c : kPlanCases) {
    int64_t p = 0;
    const std::vector<float> htf = RandomHtf(c, &p);
    auto pl = internal::PlanTensorTf32(c.up, c.down, p, htf);
    if (!pl.ok()) continue;  // P < 16 or more than 64 outputs per widened period
    ++planned;
    INFO(c.up << "/" << c.down << " taps " << c.taps);
    CHECK(pl->u % 8 == 0);
    CHECK(pl->d % 4 == 0);
    CHECK(pl->kpad % 8 == 0);
    CHECK(pl->ld % 16 == 4);
    const int ksteps = pl->kpad / 8;
    const int frag = ksteps * pl->nt * 32 * 4;
    REQUIRE(static_cast<int>(pl->table.size()) == frag + 2 * ksteps);
    // The warp-uniform A offsets: lane (g, t) adds t*ld + period, so row (8ks + t) mod d and
    // column (8ks + t) / d must come out for t < 4 (the reason d is a multiple of 4).
    for (int ks = 0; ks < ksteps; ++ks) {
      int o[2];
      std::memcpy(o, &pl->table[static_cast<size_t>(frag) + 2 * ks], sizeof(o));
      for (int half = 0; half < 2; ++half) {
        for (int t = 0; t < 4; ++t) {
          const int i = 8 * ks + 4 * half + t;
          const int addr = o[half] + t * pl->ld;
          CHECK(addr / pl->ld == i % pl->d);
          CHECK(addr % pl->ld == i / pl->d);
        }
      }
    }
    // B from its fragments (hi + lo), then the GEMM row of a few periods against the direct sum.
    auto bank = [&](int i, int j) {
      const int ks = i / 8, r = i % 8, nt = j / 8, g = j % 8;
      const int lane = g * 4 + r % 4;
      const float* f = &pl->table[((static_cast<size_t>(ks) * pl->nt + nt) * 32 + lane) * 4];
      return r < 4 ? static_cast<double>(f[0]) + f[2] : static_cast<double>(f[1]) + f[3];
    };
    double err = 0, scale = 0;
    for (int64_t n : {1, 3, 10}) {
      for (int j = 0; j < pl->u; ++j) {
        double y = 0;
        for (int i = 0; i < pl->kpad; ++i) y += Signal(n * pl->d - (p - 1) + i) * bank(i, j);
        const double want = Direct(htf, c.up, c.down, p, n * pl->u + j);
        err = std::max(err, std::fabs(y - want));
        scale = std::max(scale, std::fabs(want));
      }
    }
    // hi + lo holds a float32 tap to about 2^-22 of itself.
    CHECK(err <= 1e-6 * std::max(scale, 1.0));
  }
  CHECK(planned >= 6);
}

}  // namespace
}  // namespace fresnel::interp

#endif  // FRESNEL_WITH_CUDA
