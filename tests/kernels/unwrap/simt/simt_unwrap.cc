// Runs the CUDA Goldstein pipeline -- the exact kernel source of kernels/src/unwrap/
// goldstein_kernels.cuh, every kernel, in the launch order of goldstein_cuda.cu's Run<T> -- on the
// host under the SIMT emulator of shim/simt.h, and compares values, maps and statistics with the
// CPU reference. No GPU needed. Opt-in target (not built by default):
//
//   ninja -C build unwrap_simt_emulation
//   build/tests/kernels/unwrap/unwrap_simt_emulation SEED ROWS COLS [options]
//     --no-mask        no mask (default: RandomMask(rows, cols, 8, 12, 40, SEED), as the
//                      "random phase with mask" GPU test)
//     --separate       pairing as separate launches (FRESNEL_UNWRAP_NO_COOPERATIVE)
//     --tile-scan      segmented-scan tile kernel (GoldsteinCudaOptions::tile_scan)
//     --runs N         N schedules (default 1)     --preempt P  preemption probability (0.2)
//     --sms S          emulated SM count, sets the grid sizes as on the device (default 1)
//
// Exit status 0 when every run equals the CPU bit for bit. Device buffers the pipeline does not
// initialise are filled with random garbage, blocks of a launch run in random order, and threads
// are interleaved at random at every __ldcg/__stcg/fence/atomic. 200x300 takes about a minute per
// run. Keep the launch sequence below in step with goldstein_cuda.cu.
#include "simt.h"  // first: the CUDA stand-ins

#include "fresnel/unwrap/unwrap.h"
#include "unwrap/unwrap_common.h"
// The real kernels' host stubs live in fresnel_kernels under the same names; compile the emulated
// ones into another namespace.
#define cuda cuda_emu
#include "unwrap/goldstein_kernels.cuh"
#undef cuda

#include <cstring>
#include <string>

#include "unwrap/unwrap_internal.h"
#include "unwrap_checks.h"

namespace {

using namespace fresnel;
using namespace fresnel::unwrap;
using namespace fresnel::unwrap::internal;
using namespace fresnel::unwrap::internal::cuda_emu;

template <class V>
void Garbage(std::vector<V>& v, std::mt19937_64& rng) {
  for (auto& e : v) {
    const uint64_t r = rng();
    std::memcpy(&e, &r, sizeof(V) < 8 ? sizeof(V) : 8);
  }
}

unsigned BlocksFor(int64_t n, int t) {
  const int64_t b = (n + t - 1) / t;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

struct Result {
  std::vector<float> out;
  std::vector<int16_t> charge;
  std::vector<uint8_t> cut, unreached;
  std::vector<int> regions;
  Counters c{};
};

struct Config {
  bool cooperative = true, tile_scan = false;
  int sms = 1;
};

Result Emulate(const HostArray& phase, const GoldsteinOptions& options, const Config& cfg,
               uint64_t schedule_seed) {
  using T = float;
  simt::M().rng.seed(schedule_seed);
  std::mt19937_64 grng(schedule_seed * 7 + 1);
  const int rows = static_cast<int>(phase.dim(0)), cols = static_cast<int>(phase.dim(1));
  const int64_t n = phase.size();
  const int sms = cfg.sms;
  Params<T> p{};
  p.rows = rows;
  p.cols = cols;
  p.nby = (rows + kBin - 1) / kBin;
  p.nbx = (cols + kBin - 1) / kBin;
  const int64_t bins = static_cast<int64_t>(p.nby) * p.nbx;
  p.res_capacity = static_cast<int>(n / 2 + 16);
  const bool seeded = options.quality != nullptr || options.seed.has_value();
  p.seeded = seeded;
  p.user_seed = options.seed ? static_cast<int>(options.seed->row * cols + options.seed->col) : -1;
  p.return_maps = true;
  // "Device" buffers; everything Run does not initialise gets garbage.
  std::vector<T> d_phase(phase.data<T>(), phase.data<T>() + n), d_out(n);
  std::vector<uint8_t> d_mask, d_cut(n), d_island_border, d_unreached(n);
  std::vector<int16_t> d_charge(n);
  std::vector<int> d_bin_base(bins), d_bin_count(bins), d_bin_masked(bins),
      d_res_prop(p.res_capacity), d_res_step(p.res_capacity), d_matches(kMaxRadii * 64), d_island,
      d_island_charge, d_lab(n), d_lk(n), d_seed_k, d_row_count(rows), d_row_offset(rows),
      d_region_label(n), d_regions(n);
  std::vector<uint32_t> d_res_word(p.res_capacity);
  std::vector<unsigned long long> d_res_key(p.res_capacity), d_uf(n), d_node_key, d_region_key;
  std::vector<Counters> d_counters(1);
  Garbage(d_out, grng), Garbage(d_cut, grng), Garbage(d_unreached, grng), Garbage(d_charge, grng);
  Garbage(d_bin_base, grng), Garbage(d_bin_count, grng), Garbage(d_bin_masked, grng);
  Garbage(d_res_prop, grng), Garbage(d_res_step, grng), Garbage(d_matches, grng);
  Garbage(d_lab, grng), Garbage(d_lk, grng), Garbage(d_row_count, grng);
  Garbage(d_row_offset, grng), Garbage(d_region_label, grng), Garbage(d_regions, grng);
  Garbage(d_res_word, grng), Garbage(d_res_key, grng), Garbage(d_uf, grng);
  Garbage(d_counters, grng);
  p.phase = d_phase.data();
  if (options.mask != nullptr) {
    d_mask.assign(options.mask->data<uint8_t>(), options.mask->data<uint8_t>() + n);
    d_island.resize(n);
    d_island_charge.assign(n, 0);   // cudaMemsetAsync in Run
    d_island_border.assign(n, 0);   // cudaMemsetAsync in Run
    Garbage(d_island, grng);
    p.mask = d_mask.data();
    p.island = d_island.data();
    p.island_charge = d_island_charge.data();
    p.island_border = d_island_border.data();
  }
  if (options.quality != nullptr) {
    p.quality = options.quality->raw();
    p.quality_double = options.quality->dtype() == DType::kFloat64;
  }
  if (seeded) {
    d_node_key.resize(n), d_region_key.resize(n), d_seed_k.resize(n);
    Garbage(d_node_key, grng), Garbage(d_region_key, grng), Garbage(d_seed_k, grng);
    p.node_key = d_node_key.data();
    p.region_key = d_region_key.data();
    p.seed_k = d_seed_k.data();
  }
  p.regions_out = d_regions.data();
  p.unreached_out = d_unreached.data();
  p.charge = d_charge.data();
  p.cut = d_cut.data();
  p.bin_base = d_bin_base.data();
  p.bin_count = d_bin_count.data();
  p.bin_masked = d_bin_masked.data();
  p.res_word = d_res_word.data();
  p.res_key = d_res_key.data();
  p.res_prop = d_res_prop.data();
  p.res_step = d_res_step.data();
  p.counters = d_counters.data();
  p.matches = d_matches.data();
  p.lab = d_lab.data();
  p.lk = d_lk.data();
  p.uf = d_uf.data();
  p.row_count = d_row_count.data();
  p.row_offset = d_row_offset.data();
  p.region_label = d_region_label.data();
  p.out = d_out.data();

  // Run's memsets and InitCountersKernel.
  std::memset(p.counters, 0, sizeof(Counters));
  p.counters->bad_phase = INT_MAX;
  p.counters->bad_quality = INT_MAX;
  std::fill(d_matches.begin(), d_matches.end(), 0);
  std::fill(d_cut.begin(), d_cut.end(), 0);
  std::fill(d_row_count.begin(), d_row_count.end(), 0);
  std::fill(d_res_step.begin(), d_res_step.end(), -1);

  constexpr int kAll = 1 << 30;  // all blocks of the launch resident at once
  auto launch = [](dim3 g, dim3 b, int wave, auto kernel) {
    simt::Launch(g, b, wave, [&] { kernel(); });
  };
  launch(dim3(p.nbx, p.nby), dim3(kBin, kBin), 1, [&] { ResidueKernel<T>(p); });
  const unsigned pixel_blocks = std::min<unsigned>(BlocksFor(n, 256), unsigned(sms) * 16);
  if (options.mask != nullptr) {
    launch(dim3(pixel_blocks), dim3(256), kAll, [&] { IslandInitKernel<T>(p); });
    launch(dim3(pixel_blocks), dim3(256), kAll, [&] { IslandUnionKernel<T>(p); });
    launch(dim3(pixel_blocks), dim3(256), kAll, [&] { IslandFlattenKernel<T>(p); });
  }
  const std::vector<int> radii = RadiusSchedule(rows, cols);
  Schedule sched{};
  sched.num_radii = static_cast<int>(radii.size());
  sched.iterations = options.iterations_per_radius;
  sched.fence = 1;
  std::copy(radii.begin(), radii.end(), sched.radii);
  launch(dim3(1), dim3(1), 1, [&] { PairingInitKernel<T>(p); });
  const unsigned pairing_blocks = unsigned(sms) * 4;
  if (cfg.cooperative) {
    launch(dim3(pairing_blocks), dim3(256), kAll, [&] { PairingCooperativeKernel<T>(p, sched); });
  } else {
    for (int ri = 0; ri < sched.num_radii; ++ri) {
      for (int it = 0; it < sched.iterations; ++it) {
        const int step = ri * sched.iterations + it;
        const int prev = it > 0 ? step - 1 : -1;
        launch(dim3(pairing_blocks), dim3(256), kAll,
               [&] { ProposeKernel<T>(p, sched.radii[ri], step, prev); });
        launch(dim3(pairing_blocks), dim3(256), kAll,
               [&] { AcceptKernel<T>(p, sched.radii[ri], step, prev); });
      }
    }
    launch(dim3(pairing_blocks), dim3(256), kAll,
           [&] { ForceToFrameKernel<T>(p, sched.radii[sched.num_radii - 1]); });
  }
  launch(dim3(sms * 8), dim3(256), kAll, [&] { DrawResidueCutsKernel<T>(p); });
  if (options.mask != nullptr) {
    launch(dim3(pixel_blocks), dim3(256), kAll, [&] { IslandPlaquetteChargeKernel<T>(p); });
    launch(dim3(pixel_blocks), dim3(256), kAll, [&] { IslandCutsKernel<T>(p); });
  }
  const int tiles_y = (rows + kTile - 1) / kTile, tiles_x = (cols + kTile - 1) / kTile;
  if (cfg.tile_scan) {
    launch(dim3(tiles_x, tiles_y), dim3(32, 8), 1, [&] { TileIntegrateScanKernel<T>(p); });
  } else {
    launch(dim3(tiles_x, tiles_y), dim3(32, 8), 1, [&] { TileIntegrateKernel<T>(p); });
  }
  const int64_t segments =
      static_cast<int64_t>(tiles_y) * (tiles_x - 1) + static_cast<int64_t>(tiles_y - 1) * tiles_x;
  if (segments > 0) {
    launch(dim3(std::min<unsigned>(BlocksFor(segments, 256), unsigned(sms) * 16)), dim3(256), kAll,
           [&] { TileUnionKernel<T>(p, tiles_y, tiles_x); });
  }
  launch(dim3(pixel_blocks), dim3(256), kAll, [&] { ResolveKernel<T>(p); });
  if (seeded) {
    launch(dim3(pixel_blocks), dim3(256), kAll, [&] { SeedReduceKernel<T>(p); });
    launch(dim3(pixel_blocks), dim3(256), kAll, [&] { SeedOffsetKernel<T>(p); });
  }
  launch(dim3(1), dim3(1024), 1, [&] { RowScanKernel(p.row_count, p.row_offset, rows); });
  launch(dim3(BlocksFor(static_cast<int64_t>(rows) * 32, 256)), dim3(256), 8,
         [&] { LabelRootsKernel<T>(p); });
  launch(dim3((cols + 31) / 32, (rows + 7) / 8), dim3(32, 8), 8, [&] { FinalKernel<T>(p); });
  Result r;
  r.out = d_out;
  r.charge = d_charge;
  r.cut = d_cut;
  r.unreached = d_unreached;
  r.regions = d_regions;
  r.c = *p.counters;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s SEED ROWS COLS [--no-mask] [--separate] [--tile-scan] "
                 "[--runs N] [--preempt P] [--sms S]\n", argv[0]);
    return 2;
  }
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  const int rows = std::atoi(argv[2]), cols = std::atoi(argv[3]);
  bool masked = true;
  int runs = 1;
  Config cfg;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-mask") masked = false;
    else if (a == "--separate") cfg.cooperative = false;
    else if (a == "--tile-scan") cfg.tile_scan = true;
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--preempt" && i + 1 < argc) simt::M().preempt = std::atof(argv[++i]);
    else if (a == "--sms" && i + 1 < argc) cfg.sms = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  HostArray phase = testing::RandomPhase(DType::kFloat32, rows, cols, seed);
  HostArray mask = testing::RandomMask(rows, cols, 8, 12, 40, seed);
  GoldsteinOptions options;
  if (masked) options.mask = &mask;
  auto cpu = UnwrapGoldstein(Device::Cpu(), phase, options);
  if (!cpu.ok()) {
    std::printf("cpu: %s\n", cpu.status().ToString().c_str());
    return 1;
  }
  const GoldsteinStats& s = cpu->stats;
  std::printf("cpu: pairs %lld border %lld mask %lld island %lld cut px %lld regions %lld\n",
              (long long)s.residue_pairs, (long long)s.border_cuts, (long long)s.mask_cuts,
              (long long)s.island_cuts, (long long)s.cut_pixels, (long long)s.regions);
  int failures = 0;
  for (int run = 0; run < runs; ++run) {
    simt::M().errors = 0;
    const Result g = Emulate(phase, options, cfg, 1000 + run);
    const Counters& c = g.c;
    const int64_t n = phase.size();
    auto same = [](const void* a, const void* b, size_t bytes) {
      return std::memcmp(a, b, bytes) == 0;
    };
    const bool maps = same(g.out.data(), cpu->unwrapped.raw(), n * sizeof(float)) &&
                      same(g.cut.data(), cpu->cuts.raw(), n) &&
                      same(g.regions.data(), cpu->regions.raw(), n * sizeof(int)) &&
                      same(g.charge.data(), cpu->residues.raw(), n * sizeof(int16_t)) &&
                      same(g.unreached.data(), cpu->unreached.raw(), n);
    const bool stats =
        (long long)c.residue_pairs == s.residue_pairs && (long long)c.border_cuts == s.border_cuts &&
        (long long)c.mask_cuts == s.mask_cuts && (long long)c.island_cuts == s.island_cuts &&
        (long long)c.cut_pixels == s.cut_pixels && (long long)c.cut_length == s.cut_length &&
        (long long)c.regions == s.regions && (long long)c.unreached == s.unreached_pixels &&
        c.pairing_radius == s.pairing_radius && c.inconsistent == 0 && c.stale == 0;
    std::printf("emulated run %d: pairs %llu border %llu mask %llu island %llu cut px %llu regions "
                "%llu stale %d: maps %s, statistics %s, emulator errors %d\n",
                run, c.residue_pairs, c.border_cuts, c.mask_cuts, c.island_cuts, c.cut_pixels,
                c.regions, c.stale, maps ? "equal" : "DIFFER", stats ? "equal" : "DIFFER",
                simt::M().errors);
    failures += !maps || !stats || simt::M().errors != 0;
  }
  return failures == 0 ? 0 : 1;
}
