// GPU tests of phase unwrapping ([gpu]; they skip without a CUDA device): Goldstein on CUDA must
// equal the CPU reference bit for bit on fresh random inputs; least squares must agree to float32
// rounding; errors and progress behave as on the CPU.
#include <catch2/catch.hpp>
#if defined(FRESNEL_WITH_CUDA)
#include <cuda_runtime.h>
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "core/staged_copy.h"
#include "fresnel/core/gpu.h"
#include "fresnel/core/device.h"
#include "fresnel/unwrap/unwrap.h"
#include "pairing_replay.h"
#include "support/test_support.h"
#include "synthetic_phase.h"
#include "unwrap_checks.h"

namespace fresnel::unwrap {
namespace {

using fresnel::testing::SkipWithoutGpu;
using fresnel::testing::TestGpu;
using testing::At;
using testing::CheckGoldsteinInvariants;
using testing::FreshSeed;
using testing::MakeNoisyPatch;
using testing::MakeSynthetic;
using testing::RandomMask;
using testing::RandomPhase;
using testing::SyntheticSpec;

// "" when equal, else where the first difference is.
std::string FirstDifference(const char* name, const HostArray& a, const HostArray& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return std::string(name) + ": shape or dtype differs";
  }
  if (a.bytes() == b.bytes()) return "";
  const size_t elem = DTypeSize(a.dtype());
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(a.bytes().data() + i * elem, b.bytes().data() + i * elem, elem) != 0) {
      if (first < 0) first = i;
      ++count;
    }
  }
  std::ostringstream os;
  const int64_t cols = a.ndim() == 2 ? a.dim(1) : 1;
  os << name << ": " << count << " elements differ, first at [" << first / cols << ","
     << first % cols << "]";
  if (a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64) {
    os << " cpu " << At(a, first) << " gpu " << At(b, first);
  } else if (a.dtype() == DType::kInt32) {
    os << " cpu " << a.data<int32_t>()[first] << " gpu " << b.data<int32_t>()[first];
  } else if (a.dtype() == DType::kInt16) {
    os << " cpu " << a.data<int16_t>()[first] << " gpu " << b.data<int16_t>()[first];
  } else {
    os << " cpu " << int{a.data<uint8_t>()[first]} << " gpu " << int{b.data<uint8_t>()[first]};
  }
  return os.str();
}

void CheckBitExact(const HostArray& phase, const GoldsteinOptions& options,
                   const std::string& label) {
  INFO(label);
  auto cpu = UnwrapGoldstein(Device::Cpu(), phase, options);
  REQUIRE(cpu.ok());
  auto gpu = UnwrapGoldstein(*TestGpu(), phase, options);
  INFO("gpu status " << gpu.status().ToString());
  REQUIRE(gpu.ok());
  // Maps first: they localise a divergence (residues -> cuts -> regions -> values).
  CHECK(FirstDifference("residues", cpu->residues, gpu->residues) == "");
  CHECK(FirstDifference("cuts", cpu->cuts, gpu->cuts) == "");
  CHECK(FirstDifference("regions", cpu->regions, gpu->regions) == "");
  CHECK(FirstDifference("unreached", cpu->unreached, gpu->unreached) == "");
  CHECK(FirstDifference("unwrapped", cpu->unwrapped, gpu->unwrapped) == "");
  const GoldsteinStats &a = cpu->stats, &b = gpu->stats;
  CHECK(a.positive_residues == b.positive_residues);
  CHECK(a.negative_residues == b.negative_residues);
  CHECK(a.residue_pairs == b.residue_pairs);
  CHECK(a.border_cuts == b.border_cuts);
  CHECK(a.mask_cuts == b.mask_cuts);
  CHECK(a.island_cuts == b.island_cuts);
  CHECK(a.cut_pixels == b.cut_pixels);
  CHECK(a.cut_length == b.cut_length);
  CHECK(a.regions == b.regions);
  CHECK(a.unreached_pixels == b.unreached_pixels);
  CHECK(a.masked_pixels == b.masked_pixels);
  CHECK(a.pairing_radius == b.pairing_radius);
  CheckGoldsteinInvariants(phase, options, *gpu);
}

TEST_CASE("GPU Goldstein equals the CPU bit for bit on random phase", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (auto [rows, cols] : {std::pair{2, 2}, std::pair{2, 100}, std::pair{100, 2},
                              std::pair{33, 47}, std::pair{64, 64}, std::pair{300, 517}}) {
      const uint64_t seed = FreshSeed();
      GoldsteinOptions options;
      options.iterations_per_radius = 1 + static_cast<int>(seed % 8);
      std::ostringstream label;
      label << "uniform random " << DTypeName(dtype) << " " << rows << "x" << cols << " seed "
            << seed << " iterations " << options.iterations_per_radius;
      CheckBitExact(RandomPhase(dtype, rows, cols, seed), options, label.str());
    }
  }
}

TEST_CASE("GPU Goldstein equals the CPU bit for bit on noisy surfaces", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  struct Case {
    int rows, cols;
    double sigma;
    DType dtype;
  };
  for (const Case& c : {Case{1000, 1000, 0.9, DType::kFloat32},
                        Case{777, 1234, 0.6, DType::kFloat64},
                        Case{2048, 1536, 0.7, DType::kFloat32},
                        Case{4096, 2048, 0.62, DType::kFloat32}}) {
    SyntheticSpec spec;
    spec.rows = c.rows;
    spec.cols = c.cols;
    spec.turns = 12;
    spec.sigma = c.sigma;
    spec.seed = FreshSeed();
    auto data = MakeSynthetic(spec, c.dtype);
    std::ostringstream label;
    label << "noisy " << c.rows << "x" << c.cols << " sigma " << c.sigma << " seed " << spec.seed;
    CheckBitExact(data.wrapped, {}, label.str());
  }
}

TEST_CASE("GPU Goldstein equals the CPU with masks, quality maps and seeds", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  for (int trial = 0; trial < 3; ++trial) {
    const uint64_t seed = FreshSeed();
    const int rows = 200 + trial * 77, cols = 300 - trial * 41;
    HostArray phase = RandomPhase(DType::kFloat32, rows, cols, seed);
    HostArray mask = RandomMask(rows, cols, 8, 12, 40, seed);
    GoldsteinOptions options;
    options.mask = &mask;
    std::ostringstream label;
    label << "random phase with mask " << rows << "x" << cols << " seed " << seed;
    CheckBitExact(phase, options, label.str());
  }
  {
    SyntheticSpec spec;
    spec.rows = 512;
    spec.cols = 640;
    spec.turns = 8;
    spec.sigma = 0.8;
    spec.seed = FreshSeed();
    auto data = MakeSynthetic(spec, DType::kFloat64);
    HostArray mask = RandomMask(512, 640, 30, 25, 200, spec.seed);
    HostArray quality = RandomPhase(DType::kFloat64, 512, 640, spec.seed + 7);
    GoldsteinOptions options;
    options.mask = &mask;
    options.quality = &quality;
    options.seed = Pixel{static_cast<int64_t>(spec.seed % 512),
                         static_cast<int64_t>((spec.seed / 512) % 640)};
    if (mask.data<uint8_t>()[options.seed->row * 640 + options.seed->col]) options.seed.reset();
    std::ostringstream label;
    label << "noisy, mask, quality, seed; seed " << spec.seed;
    CheckBitExact(data.wrapped, options, label.str());
    options.quality = nullptr;
    CheckBitExact(data.wrapped, options, label.str() + " (no quality)");
  }
  {
    // Lone vortex: one long cut to the border, found at a large radius.
    HostArray phase(DType::kFloat32, {1024, 1024});
    for (int y = 0; y < 1024; ++y) {
      for (int x = 0; x < 1024; ++x) {
        phase.data<float>()[y * 1024 + x] =
            static_cast<float>(std::atan2(y - 600.5, x - 700.5)) * 0.999999f;
      }
    }
    CheckBitExact(phase, {}, "lone vortex");
  }
}

// A fixed masked case (seed from a failing run of the cooperative pairing kernel) run several
// times in the configured pairing mode (GoldsteinCudaOptions::pairing; the fences only exist in the
// cooperative kernel), with and without the per-thread fences (cooperative_fences = false):
// prints the pairing statistics of the CPU and of each GPU run, to tell a deterministic divergence
// from a race and to show whether the fences matter. With FRESNEL_UNWRAP_DEBUG_DUMP set, the GPU
// also records every pairing step and each run is replayed against the rules (pairing_replay.h):
// the first step where the GPU deviates, and how, is printed. Every line starts with "cpu:" or
// "gpu:" (tests/bench/unwrap/run_on_gpu.sh greps for them).
TEST_CASE("GPU mask diagnostics", "[.][unwrap][gpu][diagnostics]") {
  if (SkipWithoutGpu()) return;
  const uint64_t seed = 1021061482294052910ull;
  HostArray phase = RandomPhase(DType::kFloat32, 200, 300, seed);
  HostArray mask = RandomMask(200, 300, 8, 12, 40, seed);
  GoldsteinOptions options;
  options.mask = &mask;
  auto cpu = UnwrapGoldstein(Device::Cpu(), phase, options);
  REQUIRE(cpu.ok());
  auto line = [](const char* who, const GoldsteinStats& s) {
    std::ostringstream os;
    os << who << ": pairs " << s.residue_pairs << " border " << s.border_cuts << " mask "
       << s.mask_cuts << " island " << s.island_cuts << " cut px " << s.cut_pixels;
    return os.str();
  };
  const char* dump = std::getenv("FRESNEL_UNWRAP_DEBUG_DUMP");
  const std::string dump_path = dump != nullptr ? dump : "";
  std::string report = line("cpu", cpu->stats);
  for (const bool fence : {true, false}) {
    options.cuda.cooperative_fences = fence;
    for (int run = 0; run < 2; ++run) {
      const std::string who = std::string("gpu") + (fence ? "" : " (no fence)");
      auto gpu = UnwrapGoldstein(*TestGpu(), phase, options);
      if (!gpu.ok()) {
        report += "\n" + who + ": error " + gpu.status().ToString();
      } else {
        report += "\n" + line(who.c_str(), gpu->stats) +
                  (gpu->cuts.bytes() == cpu->cuts.bytes() ? " (cuts equal)" : " (cuts differ)");
      }
      if (!dump_path.empty() && run == 0) {
        testing::PairingDump d;
        std::string error;
        if (testing::ReadPairingDump(dump_path, &d, &error)) {
          std::string replay = testing::ReplayPairingDump(d, mask.data<uint8_t>());
          if (!replay.empty() && replay.back() == '\n') replay.pop_back();
          report += "\n" + replay;
        } else {
          report += "\ngpu: " + error;
        }
      }
    }
  }
  WARN(report);
}

// Every pairing mode that may be the default (graph, separate launches) with both tile kernels,
// on the inputs that broke the cooperative kernel (masks, a noisy
// 1000x1000 image) and on sizes that reuse the cached pairing graph with other parameters.
TEST_CASE("GPU Goldstein: pairing modes and tile kernels", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  const uint64_t seed = FreshSeed();
  HostArray masked = RandomPhase(DType::kFloat32, 277, 259, seed);
  HostArray mask = RandomMask(277, 259, 8, 12, 40, seed);
  SyntheticSpec spec;
  spec.rows = 1000;
  spec.cols = 1000;
  spec.turns = 8;
  spec.sigma = 0.7;
  spec.seed = seed + 1;
  auto noisy = MakeSynthetic(spec, DType::kFloat32);
  HostArray small = RandomPhase(DType::kFloat64, 33, 47, seed + 2);
  using Pairing = GoldsteinCudaOptions::Pairing;
  for (const Pairing pairing : {Pairing::kGraph, Pairing::kLaunches}) {
    for (const bool tile_scan : {false, true}) {
      GoldsteinCudaOptions cuda;
      cuda.pairing = pairing;
      cuda.tile_scan = tile_scan;
      const std::string cfg = std::string("pairing ") +
                              (pairing == Pairing::kGraph ? "graph" : "launches") +
                              " tile_scan " + (tile_scan ? "1" : "0") + " seed " +
                              std::to_string(seed);
      GoldsteinOptions options;
      options.mask = &mask;
      options.cuda = cuda;
      CheckBitExact(masked, options, "masked random 277x259, " + cfg);
      GoldsteinOptions plain;
      plain.cuda = cuda;
      CheckBitExact(noisy.wrapped, plain, "noisy 1000x1000, " + cfg);
      GoldsteinOptions three;
      three.cuda = cuda;
      three.iterations_per_radius = 3;
      CheckBitExact(small, three, "random 33x47 float64, 3 iterations, " + cfg);
    }
  }
}

// compute-sanitizer racecheck (2025.3) crashes the host process (SIGSEGV before the first check)
// when the pairing graph runs: its while loop is a conditional graph node whose condition the
// kernels set on the device, which racecheck does not take (memcheck does; docs/fuzzing.md). This
// hidden case runs every other Goldstein kernel, with the pairing as separate launches, so that
// racecheck covers them: scripts/gpu/team_a.sh runs it under racecheck in place of the graph cases.
TEST_CASE("GPU Goldstein with separate pairing launches (for racecheck)",
          "[.][unwrap][gpu][racecheck]") {
  if (SkipWithoutGpu()) return;
  const uint64_t seed = FreshSeed();
  HostArray masked = RandomPhase(DType::kFloat32, 131, 97, seed);
  HostArray mask = RandomMask(131, 97, 8, 12, 40, seed);
  SyntheticSpec spec;
  spec.rows = 256;
  spec.cols = 320;
  spec.sigma = 0.8;
  spec.seed = seed + 1;
  auto noisy = MakeSynthetic(spec, DType::kFloat64);
  HostArray quality = RandomPhase(DType::kFloat32, 256, 320, seed + 2);
  for (const bool tile_scan : {false, true}) {
    GoldsteinOptions options;
    options.cuda.pairing = GoldsteinCudaOptions::Pairing::kLaunches;
    options.cuda.tile_scan = tile_scan;
    const std::string cfg = std::string("tile_scan ") + (tile_scan ? "1" : "0") + " seed " +
                            std::to_string(seed);
    GoldsteinOptions with_mask = options;
    with_mask.mask = &mask;
    CheckBitExact(masked, with_mask, "masked random 131x97, " + cfg);
    CheckBitExact(noisy.wrapped, options, "noisy 256x320 float64, " + cfg);
    GoldsteinOptions seeded = options;
    seeded.quality = &quality;
    CheckBitExact(noisy.wrapped, seeded, "noisy 256x320 with a quality map, " + cfg);
  }
}

// The cooperative pairing kernel is opt-in (GoldsteinCudaOptions::Pairing::kCooperative): on the H200 it
// diverged from the CPU on masked and noisy inputs (docs/unwrap.md). This case keeps it exercised
// and reports its state without failing the run until the divergence is understood.
TEST_CASE("GPU Goldstein: the opt-in cooperative pairing kernel", "[.][unwrap][gpu][cooperative]") {
  if (SkipWithoutGpu()) return;
  const uint64_t seed = FreshSeed();
  HostArray phase = RandomPhase(DType::kFloat32, 257, 301, seed);
  GoldsteinOptions options;
  options.cuda.pairing = GoldsteinCudaOptions::Pairing::kCooperative;
  CheckBitExact(phase, options, "cooperative kernel, seed " + std::to_string(seed));
}

TEST_CASE("GPU Goldstein is deterministic and honours return_maps", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  SyntheticSpec spec;
  spec.rows = 1536;
  spec.cols = 1536;
  spec.sigma = 0.8;
  spec.seed = FreshSeed();
  auto data = MakeSynthetic(spec);
  auto a = UnwrapGoldstein(*TestGpu(), data.wrapped, {});
  auto b = UnwrapGoldstein(*TestGpu(), data.wrapped, {});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->unwrapped.bytes() == b->unwrapped.bytes());
  CHECK(a->cuts.bytes() == b->cuts.bytes());
  GoldsteinOptions lean;
  lean.return_maps = false;
  auto c = UnwrapGoldstein(*TestGpu(), data.wrapped, lean);
  REQUIRE(c.ok());
  CHECK(c->unwrapped.bytes() == a->unwrapped.bytes());
  CHECK(c->residues.nbytes() == 0);
  CHECK(c->stats.regions == a->stats.regions);
}

TEST_CASE("GPU errors and progress match the CPU", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  HostArray phase = RandomPhase(DType::kFloat64, 30, 50, FreshSeed());
  phase.data<double>()[12 * 50 + 40] = NAN;
  phase.data<double>()[20 * 50 + 1] = 5.0;
  auto cpu = UnwrapGoldstein(Device::Cpu(), phase, {});
  auto gpu = UnwrapGoldstein(*TestGpu(), phase, {});
  REQUIRE_FALSE(gpu.ok());
  CHECK(gpu.status() == cpu.status());
  auto ls = UnwrapLeastSquares(*TestGpu(), phase, {});
  REQUIRE_FALSE(ls.ok());
  CHECK_THAT(std::string(ls.status().message()), Catch::Contains("phase[12,40]"));

  HostArray good = RandomPhase(DType::kFloat32, 40, 40, FreshSeed());
  HostArray quality(DType::kFloat32, {40, 40});
  quality.data<float>()[3 * 40 + 4] = INFINITY;
  GoldsteinOptions q;
  q.quality = &quality;
  auto gq = UnwrapGoldstein(*TestGpu(), good, q);
  REQUIRE_FALSE(gq.ok());
  CHECK_THAT(std::string(gq.status().message()), Catch::Contains("quality[3,4]"));

  std::vector<Stage> seen;
  GoldsteinOptions o;
  o.progress = [&seen](Stage s, double) {
    if (seen.empty() || seen.back() != s) seen.push_back(s);
    return true;
  };
  REQUIRE(UnwrapGoldstein(*TestGpu(), good, o).ok());
  CHECK(seen == std::vector<Stage>{Stage::kValidate, Stage::kResidues, Stage::kBranchCuts,
                                   Stage::kIntegrate, Stage::kDone});
  o.progress = [](Stage s, double) { return s != Stage::kIntegrate; };
  auto cancelled = UnwrapGoldstein(*TestGpu(), good, o);
  REQUIRE_FALSE(cancelled.ok());
  CHECK(cancelled.status().code() == absl::StatusCode::kCancelled);
}

// Arrays of several staging chunks (core/staged_copy.h: 16 MiB each, two per call) go up and
// come down through the pinned pool: still the CPU's bits, maps included.
// A surface larger than one staging chunk per array (2600 x 1901: 19.8 MB in float32).
SyntheticSpec StagingSpec() {
  SyntheticSpec spec;
  spec.rows = 2600;
  spec.cols = 1901;
  spec.turns = 8;
  spec.sigma = 0.8;
  spec.seed = FreshSeed();
  return spec;
}

TEST_CASE("GPU Goldstein through the pinned staging chunks equals the CPU", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  const SyntheticSpec spec = StagingSpec();
  auto data = MakeSynthetic(spec, DType::kFloat64);  // 39.5 MB: three chunks
  HostArray mask = RandomMask(spec.rows, spec.cols, 30, 25, 200, spec.seed);
  HostArray quality = RandomPhase(DType::kFloat64, spec.rows, spec.cols, spec.seed + 7);
  GoldsteinOptions options;
  options.mask = &mask;
  options.quality = &quality;
  std::ostringstream label;
  label << "2600x1901 float64, mask, quality; seed " << spec.seed;
  CheckBitExact(data.wrapped, options, label.str());
}

#if defined(FRESNEL_WITH_CUDA)
// StagedUpload / StagedDownload move exactly the bytes given: sizes below, at and across chunk
// boundaries, several pieces per call, and more calls at once than the pool has pairs (those
// take the pageable path).
TEST_CASE("staged host<->device copies move every byte", "[unwrap][gpu][staging]") {
  if (SkipWithoutGpu()) return;
  const Device& gpu = *TestGpu();
  const size_t chunk = fresnel::cuda::kStagingChunkBytes;
  const std::vector<std::vector<size_t>> calls = {
      {1000},          {chunk},          {chunk + 1, 7},       {3 * chunk - 5},
      {5 << 20, 333, 2 * chunk + 17}, {fresnel::cuda::kStagingMinBytes - 1}};
  // "" when the bytes came back, else what went wrong (no Catch2 macros: it runs on threads).
  auto round_trip = [&](const std::vector<size_t>& sizes, uint32_t seed) -> std::string {
    auto pattern = [&](size_t i, size_t b) {
      return static_cast<char>((b * 2654435761u + seed * 977 + i) >> 7);
    };
    if (cudaSetDevice(gpu.ordinal) != cudaSuccess) return "cudaSetDevice";
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "stream";
    std::vector<std::string> src, back;
    std::vector<void*> dev(sizes.size(), nullptr);
    std::vector<fresnel::cuda::StagedPiece> up, down;
    std::string error;
    for (size_t i = 0; i < sizes.size() && error.empty(); ++i) {
      src.emplace_back(sizes[i], '\0');
      for (size_t b = 0; b < sizes[i]; ++b) src.back()[b] = pattern(i, b);
      back.emplace_back(sizes[i], '\x5a');
      if (cudaMalloc(&dev[i], sizes[i]) != cudaSuccess) error = "cudaMalloc";
      up.push_back({dev[i], src.back().data(), sizes[i]});
      down.push_back({back.back().data(), dev[i], sizes[i]});
    }
    if (error.empty() && !fresnel::cuda::StagedUpload(gpu.ordinal, up, stream).ok()) {
      error = "upload";
    }
    for (std::string& s : src) s.assign(s.size(), '\x11');  // the sources may change at once
    if (error.empty() && !fresnel::cuda::StagedDownload(gpu.ordinal, down, stream).ok()) {
      error = "download";
    }
    for (size_t i = 0; i < back.size() && error.empty(); ++i) {
      for (size_t b = 0; b < sizes[i]; ++b) {
        if (back[i][b] != pattern(i, b)) {
          error = "piece " + std::to_string(i) + " differs at byte " + std::to_string(b);
          break;
        }
      }
    }
    for (void* d : dev) cudaFree(d);
    cudaStreamDestroy(stream);
    return error;
  };
  for (size_t c = 0; c < calls.size(); ++c) {
    CAPTURE(c);
    CHECK(round_trip(calls[c], static_cast<uint32_t>(c)) == "");
  }
  // Six at once on one device: more than the pool's four pairs.
  std::vector<std::future<std::string>> at_once;
  for (uint32_t t = 0; t < 6; ++t) {
    at_once.push_back(std::async(std::launch::async, [&, t] {
      return round_trip({2 * chunk + 4099 * t, 12345}, 100 + t);
    }));
  }
  for (auto& f : at_once) CHECK(f.get() == "");
  CHECK(fresnel::cuda::StagingPoolBytes() <=
        int64_t{fresnel::cuda::kStagingChunks} * static_cast<int64_t>(chunk));
}
#endif

#if defined(FRESNEL_WITH_CUDA)
// Host memory in a mapping of its own, page-locked when `pinned` (what a pinned shared-memory
// region is to the server), cut into 64-byte-aligned slots.
class HostBlock {
 public:
  HostBlock(size_t bytes, bool pinned) : size_(bytes) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    pinned_ = pinned && data_ != nullptr && PinHostMemory(data_, static_cast<int64_t>(size_)).ok();
  }
  ~HostBlock() {
    if (pinned_) UnpinHostMemory(data_);
    if (data_ != nullptr) munmap(data_, size_);
  }
  bool ok(bool want_pinned) const { return data_ != nullptr && pinned_ == want_pinned; }
  // A view of the next slot for an array of `dtype` and `shape`.
  HostArray Next(DType dtype, const std::vector<int64_t>& shape) {
    const size_t n = static_cast<size_t>(ShapeElements(shape)) * DTypeSize(dtype);
    absl::StatusOr<HostArray> a = HostArray::Borrow(dtype, shape, data_ + used_, n);
    used_ += (n + 63) / 64 * 64;
    return a.ok() && used_ <= size_ ? *std::move(a) : HostArray();
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0, used_ = 0;
  bool pinned_ = false;
};

// unwrap::ResultBuffers: the phase read from and every result written straight into the
// caller's memory (pageable: through the staging chunks; pinned: DMA where it lies), the same
// bits as the CPU, and the result arrays are the caller's views.
void CheckResultsIntoCallerMemory(bool pinned) {
  INFO((pinned ? "pinned" : "pageable") << " caller memory");
  const SyntheticSpec spec = StagingSpec();
  INFO("seed " << spec.seed);
  auto data = MakeSynthetic(spec, DType::kFloat32);  // 19.8 MB: two staging chunks a map
  const std::vector<int64_t> shape = data.wrapped.shape();
  HostBlock block(size_t{160} << 20, pinned);  // phase, five results, least squares: 99 MB
  REQUIRE(block.ok(pinned));
  HostArray phase = block.Next(DType::kFloat32, shape);
  REQUIRE(phase.nbytes() == data.wrapped.nbytes());
  std::memcpy(phase.raw(), data.wrapped.raw(), phase.nbytes());
  ResultBuffers into;
  into.unwrapped = block.Next(DType::kFloat32, shape);
  into.residues = block.Next(DType::kInt16, shape);
  into.cuts = block.Next(DType::kUint8, shape);
  into.regions = block.Next(DType::kInt32, shape);
  into.unreached = block.Next(DType::kUint8, shape);
  const void* where[] = {into.unwrapped.raw(), into.residues.raw(), into.cuts.raw(),
                         into.regions.raw(), into.unreached.raw()};
  REQUIRE(into.unreached.nbytes() > 0);

  auto cpu = UnwrapGoldstein(Device::Cpu(), data.wrapped, {});
  REQUIRE(cpu.ok());
  GoldsteinOptions options;
  options.into = &into;
  auto gpu = UnwrapGoldstein(*TestGpu(), phase, options);
  INFO(gpu.status().ToString());
  REQUIRE(gpu.ok());
  const HostArray* got[] = {&gpu->unwrapped, &gpu->residues, &gpu->cuts, &gpu->regions,
                            &gpu->unreached};
  for (int i = 0; i < 5; ++i) {
    CHECK(got[i]->borrowed());
    CHECK(got[i]->raw() == where[i]);
  }
  CHECK(FirstDifference("residues", cpu->residues, gpu->residues) == "");
  CHECK(FirstDifference("cuts", cpu->cuts, gpu->cuts) == "");
  CHECK(FirstDifference("regions", cpu->regions, gpu->regions) == "");
  CHECK(FirstDifference("unreached", cpu->unreached, gpu->unreached) == "");
  CHECK(FirstDifference("unwrapped", cpu->unwrapped, gpu->unwrapped) == "");

  // Least squares into the caller's memory: the bits of the same GPU call into new arrays.
  auto plain = UnwrapLeastSquares(*TestGpu(), data.wrapped, {});
  REQUIRE(plain.ok());
  ResultBuffers lsq_into;
  lsq_into.unwrapped = block.Next(DType::kFloat32, shape);
  REQUIRE(lsq_into.unwrapped.nbytes() > 0);
  const void* lsq_where = lsq_into.unwrapped.raw();
  LeastSquaresOptions lsq_options;
  lsq_options.into = &lsq_into;
  auto lsq = UnwrapLeastSquares(*TestGpu(), phase, lsq_options);
  REQUIRE(lsq.ok());
  CHECK(lsq->unwrapped.raw() == lsq_where);
  CHECK(FirstDifference("least squares", plain->unwrapped, lsq->unwrapped) == "");
}

TEST_CASE("GPU results go straight into the caller's memory, pageable or pinned",
          "[unwrap][gpu][staging]") {
  if (SkipWithoutGpu()) return;
  CheckResultsIntoCallerMemory(false);
  CheckResultsIntoCallerMemory(true);
}
#endif

TEST_CASE("GPU least squares agrees with the CPU", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  for (auto [rows, cols] : {std::pair{256, 256}, std::pair{333, 517}, std::pair{1024, 768}}) {
    SyntheticSpec spec;
    spec.rows = rows;
    spec.cols = cols;
    spec.turns = 6;
    spec.sigma = 0.6;
    spec.seed = FreshSeed();
    INFO(rows << "x" << cols << " seed " << spec.seed);
    auto data = MakeSynthetic(spec);
    HostArray mask = RandomMask(rows, cols, 5, 20, 30, spec.seed);
    LeastSquaresOptions o;
    o.mask = &mask;
    o.congruent = false;
    auto cpu = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    auto gpu = UnwrapLeastSquares(*TestGpu(), data.wrapped, o);
    REQUIRE(cpu.ok());
    REQUIRE(gpu.ok());
    const double rel = fresnel::testing::RelativeError(gpu->unwrapped, cpu->unwrapped);
    INFO("relative error " << rel);
    CHECK(rel < 1e-4);
    o.congruent = true;
    auto cpu_c = UnwrapLeastSquares(Device::Cpu(), data.wrapped, o);
    auto gpu_c = UnwrapLeastSquares(*TestGpu(), data.wrapped, o);
    REQUIRE(cpu_c.ok());
    REQUIRE(gpu_c.ok());
    int64_t differ = 0;
    for (int64_t i = 0; i < data.wrapped.size(); ++i) {
      differ += At(cpu_c->unwrapped, i) != At(gpu_c->unwrapped, i);
    }
    CHECK(differ <= data.wrapped.size() / 10000);
  }
}

TEST_CASE("GPU weighted least squares agrees with the CPU", "[unwrap][gpu]") {
  if (SkipWithoutGpu()) return;
  for (auto [rows, cols] : {std::pair{256, 256}, std::pair{333, 517}, std::pair{1024, 768}}) {
    SyntheticSpec spec;
    spec.rows = rows;
    spec.cols = cols;
    spec.turns = 6;
    spec.sigma = 0.3;
    spec.seed = FreshSeed();
    INFO(rows << "x" << cols << " seed " << spec.seed);
    auto patch = MakeNoisyPatch(spec, 2.0, 0.05f);
    HostArray mask = RandomMask(rows, cols, 5, 20, 30, spec.seed);
    LeastSquaresOptions o;
    o.mask = &mask;
    o.weighted = true;
    o.weights = &patch.weights;
    o.congruent = false;
    auto cpu = UnwrapLeastSquares(Device::Cpu(), patch.data.wrapped, o);
    auto gpu = UnwrapLeastSquares(*TestGpu(), patch.data.wrapped, o);
    REQUIRE(cpu.ok());
    REQUIRE(gpu.ok());
    double worst = 0;
    for (int64_t i = 0; i < patch.data.wrapped.size(); ++i) {
      worst = std::max(worst, std::fabs(At(gpu->unwrapped, i) - At(cpu->unwrapped, i)));
    }
    WARN(rows << "x" << cols << ": CPU " << cpu->iterations << " iterations (residual "
              << cpu->residual << "), GPU " << gpu->iterations << " (residual " << gpu->residual
              << "), max |phi_gpu - phi_cpu| = " << worst << " rad");
    CHECK(gpu->residual <= o.tolerance);
    // float32 PCG (double reductions) against float64: the iteration counts drift apart on some
    // inputs (H200, 2026-12-01: 36 vs 31 at 256x256, seed 17838921495886241772, with the phases
    // still within 0.036 rad), so allow a fifth of the CPU's count, at least 3.
    CHECK(std::abs(gpu->iterations - cpu->iterations) <= std::max(3, cpu->iterations / 5));
    CHECK(worst < 0.05);
    o.congruent = true;
    auto cpu_c = UnwrapLeastSquares(Device::Cpu(), patch.data.wrapped, o);
    auto gpu_c = UnwrapLeastSquares(*TestGpu(), patch.data.wrapped, o);
    REQUIRE(cpu_c.ok());
    REQUIRE(gpu_c.ok());
    int64_t differ = 0;
    for (int64_t i = 0; i < patch.data.wrapped.size(); ++i) {
      differ += At(cpu_c->unwrapped, i) != At(gpu_c->unwrapped, i);
    }
    INFO(differ << " pixels differ");
    CHECK(differ <= patch.data.wrapped.size() / 10000);
  }
}

TEST_CASE("GPU weighted least squares timing", "[.][unwrap][gpu][timing]") {
  if (SkipWithoutGpu()) return;
  for (int side : {1024, 4096}) {
    SyntheticSpec spec;
    spec.rows = side;
    spec.cols = side;
    spec.turns = 20;
    spec.sigma = 0.3;
    spec.seed = FreshSeed();
    auto patch = MakeNoisyPatch(spec, 2.0, 0.05f);
    LeastSquaresOptions o;
    StageTimes plain_t, t;
    REQUIRE(UnwrapLeastSquares(*TestGpu(), patch.data.wrapped, o, &plain_t).ok());  // warm-up
    REQUIRE(UnwrapLeastSquares(*TestGpu(), patch.data.wrapped, o, &plain_t).ok());
    o.weighted = true;
    o.weights = &patch.weights;
    auto r = UnwrapLeastSquares(*TestGpu(), patch.data.wrapped, o, &t);
    REQUIRE(r.ok());
    WARN(side << "^2 float32: unweighted compute " << plain_t.compute_s * 1e3
              << " ms; weighted compute " << t.compute_s * 1e3 << " ms, " << r->iterations
              << " iterations (residual " << r->residual << "), "
              << t.compute_s * 1e3 / std::max(1, r->iterations) << " ms/iteration; h2d "
              << t.h2d_s * 1e3 << " ms, d2h " << t.d2h_s * 1e3 << " ms");
  }
}

}  // namespace
}  // namespace fresnel::unwrap
