// Serial CPU reference of Goldstein branch-cut unwrapping: the oracle the CUDA path must equal bit
// for bit. It follows the rules of docs/unwrap.md literally (synchronous pairing rounds, serial
// flood fill per region); only the arithmetic shared with the GPU comes from unwrap_common.h.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fresnel/core/status.h"
#include "unwrap/unwrap_common.h"
#include "unwrap/unwrap_internal.h"

namespace fresnel::unwrap::internal {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Residue {
  int y = 0, x = 0;
  int charge = 0;
  bool active = true;
  uint64_t key = kNoKey;  // this iteration's proposal
  int prop = -1;          // list index of the proposed residue (residue keys only)
  uint64_t target = kNoKey;  // final partner key (residue or ground)
};

template <class T>
class GoldsteinCpu {
 public:
  GoldsteinCpu(const HostArray& phase, const GoldsteinOptions& options)
      : options_(options),
        rows_(static_cast<int>(phase.dim(0))),
        cols_(static_cast<int>(phase.dim(1))),
        n_(phase.size()),
        phase_(phase.data<T>()),
        mask_(options.mask != nullptr ? options.mask->data<uint8_t>() : nullptr) {}

  absl::StatusOr<GoldsteinResult> Run(DType dtype) {
    GoldsteinResult result;
    auto t0 = Clock::now();
    FRESNEL_RETURN_IF_ERROR(Report(options_.progress, Stage::kResidues, 0.0));
    ComputeResidues();
    result.stage_times.residues_s = Since(t0);

    t0 = Clock::now();
    FRESNEL_RETURN_IF_ERROR(Report(options_.progress, Stage::kBranchCuts, 0.0));
    if (mask_ != nullptr) LabelIslands();
    FRESNEL_RETURN_IF_ERROR(PairResidues());
    DrawCuts();
    result.stage_times.branch_cuts_s = Since(t0);

    t0 = Clock::now();
    FRESNEL_RETURN_IF_ERROR(Report(options_.progress, Stage::kIntegrate, 0.0));
    FRESNEL_RETURN_IF_ERROR(Integrate());
    result.unwrapped = HostArray(dtype, {rows_, cols_});
    WriteOutputs(result);
    result.stage_times.integrate_s = Since(t0);
    result.stats = stats_;
    FRESNEL_RETURN_IF_ERROR(Report(options_.progress, Stage::kDone, 1.0));
    return result;
  }

 private:
  bool Masked(int64_t i) const { return mask_ != nullptr && mask_[i] != 0; }
  int64_t Idx(int y, int x) const { return static_cast<int64_t>(y) * cols_ + x; }

  // Stage 1: plaquette charges of fully unmasked plaquettes, the residue list in raster order,
  // and the bin table (residues and masked-pixel counts per 16 x 16 bin).
  void ComputeResidues() {
    charge_.assign(n_, 0);
    for (int y = 0; y + 1 < rows_; ++y) {
      for (int x = 0; x + 1 < cols_; ++x) {
        int64_t a = Idx(y, x), b = a + 1, c = a + cols_ + 1, d = a + cols_;
        if (Masked(a) || Masked(b) || Masked(c) || Masked(d)) continue;
        int q = PlaquetteCharge(phase_[a], phase_[b], phase_[c], phase_[d]);
        q = q > 1 ? 1 : (q < -1 ? -1 : q);
        if (q == 0) continue;
        charge_[a] = static_cast<int16_t>(q);
        Residue r;
        r.y = y;
        r.x = x;
        r.charge = q;
        res_.push_back(r);
        (q > 0 ? stats_.positive_residues : stats_.negative_residues)++;
      }
    }
    nby_ = (rows_ + kBin - 1) / kBin;
    nbx_ = (cols_ + kBin - 1) / kBin;
    bin_start_.assign(static_cast<size_t>(nby_) * nbx_ + 1, 0);
    for (const Residue& r : res_) bin_start_[Bin(r.y, r.x) + 1]++;
    for (size_t b = 1; b < bin_start_.size(); ++b) bin_start_[b] += bin_start_[b - 1];
    bin_items_.resize(res_.size());
    std::vector<int> fill(bin_start_.begin(), bin_start_.end() - 1);
    for (size_t i = 0; i < res_.size(); ++i) bin_items_[fill[Bin(res_[i].y, res_[i].x)]++] = i;
    if (mask_ != nullptr) {
      bin_masked_.assign(static_cast<size_t>(nby_) * nbx_, 0);
      for (int y = 0; y < rows_; ++y) {
        for (int x = 0; x < cols_; ++x) {
          if (Masked(Idx(y, x))) {
            bin_masked_[Bin(y, x)]++;
            stats_.masked_pixels++;
          }
        }
      }
    }
  }

  int Bin(int y, int x) const { return (y / kBin) * nbx_ + x / kBin; }

  // Masked 8-connected components ("islands"): root = first pixel in raster order, and whether
  // the island touches the image edge (then it is part of the ground).
  void LabelIslands() {
    island_.assign(n_, -1);
    std::vector<int64_t> stack;
    for (int64_t s = 0; s < n_; ++s) {
      if (!Masked(s) || island_[s] >= 0) continue;
      island_[s] = s;
      bool border = false;
      stack.assign(1, s);
      while (!stack.empty()) {
        int64_t p = stack.back();
        stack.pop_back();
        int y = static_cast<int>(p / cols_), x = static_cast<int>(p % cols_);
        if (y == 0 || x == 0 || y == rows_ - 1 || x == cols_ - 1) border = true;
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            int yy = y + dy, xx = x + dx;
            if (yy < 0 || xx < 0 || yy >= rows_ || xx >= cols_) continue;
            int64_t q = Idx(yy, xx);
            if (Masked(q) && island_[q] < 0) {
              island_[q] = s;
              stack.push_back(q);
            }
          }
        }
      }
      island_roots_.push_back(s);
      island_border_.push_back(border);
    }
  }

  // The best candidate of residue i within radius r (docs/unwrap.md, "Pairing").
  void Propose(int i, int r) {
    Residue& p = res_[i];
    uint64_t best = BestFrameKey(p.y, p.x, r, rows_, cols_);
    int best_q = -1;
    const int y0 = std::max(0, p.y - r), y1 = std::min(rows_ - 1, p.y + r + 1);
    const int x0 = std::max(0, p.x - r), x1 = std::min(cols_ - 1, p.x + r + 1);
    for (int by = y0 / kBin; by <= y1 / kBin; ++by) {
      for (int bx = x0 / kBin; bx <= x1 / kBin; ++bx) {
        const int b = by * nbx_ + bx;
        for (int s = bin_start_[b]; s < bin_start_[b + 1]; ++s) {
          const Residue& q = res_[bin_items_[s]];
          if (!q.active || q.charge != -p.charge) continue;
          if (std::abs(q.y - p.y) > r || std::abs(q.x - p.x) > r) continue;
          uint64_t key = ResidueKey(p.y, p.x, q.y, q.x, cols_);
          if (key < best) {
            best = key;
            best_q = bin_items_[s];
          }
        }
        if (mask_ == nullptr || bin_masked_[b] == 0) continue;
        const int ry0 = std::max(y0, by * kBin), ry1 = std::min(y1, by * kBin + kBin - 1);
        const int rx0 = std::max(x0, bx * kBin), rx1 = std::min(x1, bx * kBin + kBin - 1);
        const int area = (std::min(rows_, by * kBin + kBin) - by * kBin) *
                         (std::min(cols_, bx * kBin + kBin) - bx * kBin);
        if (bin_masked_[b] == area) {
          uint64_t key = GroundKey(p.y, p.x, std::clamp(p.y, ry0, ry1),
                                   std::clamp(p.x, rx0, rx1), cols_);
          if (key < best) best = key, best_q = -1;
          continue;
        }
        for (int y = ry0; y <= ry1; ++y) {
          for (int x = rx0; x <= rx1; ++x) {
            if (!Masked(Idx(y, x))) continue;
            uint64_t key = GroundKey(p.y, p.x, y, x, cols_);
            if (key < best) best = key, best_q = -1;
          }
        }
      }
    }
    p.key = best;
    p.prop = best_q;
  }

  // Stage 2a: synchronous pairing rounds with growing radius.
  absl::Status PairResidues() {
    std::vector<int> radii = RadiusSchedule(rows_, cols_);
    int active = static_cast<int>(res_.size());
    std::vector<int> matched;
    for (size_t ri = 0; ri < radii.size() && active > 0; ++ri) {
      const int r = radii[ri];
      for (int it = 0; it < options_.iterations_per_radius && active > 0; ++it) {
        for (size_t i = 0; i < res_.size(); ++i) {
          if (res_[i].active) Propose(static_cast<int>(i), r);
        }
        matched.clear();
        for (size_t i = 0; i < res_.size(); ++i) {
          const Residue& p = res_[i];
          if (!p.active || p.key == kNoKey) continue;
          bool ok = KeyIsGround(p.key);
          if (!ok) {
            const Residue& q = res_[p.prop];
            ok = q.active && q.key != kNoKey && !KeyIsGround(q.key) &&
                 q.prop == static_cast<int>(i);
          }
          if (ok) matched.push_back(static_cast<int>(i));
        }
        for (int i : matched) {
          Residue& p = res_[i];
          p.active = false;
          p.target = p.key;
          if (KeyIsGround(p.key)) {
            int ty = PaddedRow(KeyId(p.key), cols_), tx = PaddedCol(KeyId(p.key), cols_);
            bool frame = ty < 0 || tx < 0 || ty >= rows_ || tx >= cols_;
            (frame ? stats_.border_cuts : stats_.mask_cuts)++;
          } else if (p.charge > 0) {
            stats_.residue_pairs++;
          }
        }
        active -= static_cast<int>(matched.size());
        if (matched.empty()) break;
        stats_.pairing_radius = std::max(stats_.pairing_radius, r);
      }
      FRESNEL_RETURN_IF_ERROR(Report(options_.progress, Stage::kBranchCuts,
                                     0.9 * (ri + 1) / static_cast<double>(radii.size())));
    }
    // Residues still unpaired after the last radius's iterations go to their nearest frame pixel.
    const int final_radius = radii.back();
    for (Residue& p : res_) {
      if (!p.active) continue;
      p.active = false;
      p.target = BestFrameKey(p.y, p.x, final_radius, rows_, cols_);
      stats_.border_cuts++;
      stats_.pairing_radius = final_radius;
    }
    return absl::OkStatus();
  }

  void Plot(int y0, int x0, int y1, int x1) {
    stats_.cut_length += DrawLine(y0, x0, y1, x1, rows_, cols_,
                                  [this](int y, int x) { cut_[Idx(y, x)] = 1; });
  }

  // Stage 2b: island charges, then every cut line.
  void DrawCuts() {
    cut_.assign(n_, 0);
    for (const Residue& p : res_) {
      uint32_t id = KeyId(p.target);
      int ty = PaddedRow(id, cols_), tx = PaddedCol(id, cols_);
      if (!KeyIsGround(p.target)) {
        // Each pair is drawn once, from the smaller padded id (the proposer with the smaller id).
        if (PaddedId(p.y, p.x, cols_) < id) Plot(p.y, p.x, ty, tx);
        continue;
      }
      Plot(p.y, p.x, ty, tx);
    }
    if (mask_ == nullptr) return;
    // Net charge of each island: the charges of the plaquettes that touch it (wrap counts of
    // steps with a masked end taken as 0) plus the residues discharged into it.
    std::vector<int64_t> island_charge(island_roots_.size(), 0);
    // Root pixel -> slot: the roots were found in raster order, so the vector is sorted.
    auto slot_of = [this](int64_t root) {
      return static_cast<int>(std::lower_bound(island_roots_.begin(), island_roots_.end(), root) -
                              island_roots_.begin());
    };
    for (int y = 0; y + 1 < rows_; ++y) {
      for (int x = 0; x + 1 < cols_; ++x) {
        int64_t c[4] = {Idx(y, x), Idx(y, x + 1), Idx(y + 1, x + 1), Idx(y + 1, x)};
        int masked = 0, first = -1;
        for (int k = 0; k < 4; ++k) {
          if (Masked(c[k])) {
            ++masked;
            if (first < 0) first = k;
          }
        }
        if (masked == 0 || masked == 4) continue;
        int w[4];
        for (int k = 0; k < 4; ++k) {
          int64_t a = c[k], b = c[(k + 1) & 3];
          w[k] = (Masked(a) || Masked(b)) ? 0 : EdgeWrap(phase_[a], phase_[b]);
        }
        int charge = ChargeFromWraps(w[0], w[1], w[2], w[3]);
        if (charge != 0) island_charge[slot_of(island_[c[first]])] += charge;
      }
    }
    for (const Residue& p : res_) {
      if (!KeyIsGround(p.target)) continue;
      uint32_t id = KeyId(p.target);
      int ty = PaddedRow(id, cols_), tx = PaddedCol(id, cols_);
      if (ty < 0 || tx < 0 || ty >= rows_ || tx >= cols_) continue;
      island_charge[slot_of(island_[Idx(ty, tx)])] += p.charge;
    }
    for (size_t s = 0; s < island_roots_.size(); ++s) {
      if (island_charge[s] == 0 || island_border_[s]) continue;
      int y = static_cast<int>(island_roots_[s] / cols_);
      int x = static_cast<int>(island_roots_[s] % cols_);
      int ty, tx;
      IslandFrameTarget(y, x, rows_, cols_, &ty, &tx);
      Plot(y, x, ty, tx);
      stats_.island_cuts++;
    }
  }

  bool Open(int64_t i) const { return !Masked(i) && cut_[i] == 0; }

  // Stage 3: flood fill every region from its first pixel in raster order (a queue, 4-neighbours,
  // k(q) = k(p) - EdgeWrap(p -> q)), then move k to the region's seed.
  absl::Status Integrate() {
    k_.assign(n_, 0);
    label_.assign(n_, 0);
    // Per open pixel: bit 4 = open, bits 0-3 = open 4-neighbours (up, left, right, down), so that
    // the fill needs no coordinates.
    constexpr uint8_t kOpen = 16;
    std::vector<uint8_t> nbits(n_);
    for (int64_t i = 0; i < n_; ++i) nbits[i] = Open(i) ? kOpen : 0;
    for (int y = 0; y < rows_; ++y) {
      const int64_t row = static_cast<int64_t>(y) * cols_;
      for (int x = 0; x < cols_; ++x) {
        const int64_t i = row + x;
        if (!nbits[i]) continue;
        nbits[i] |= static_cast<uint8_t>((y > 0 && nbits[i - cols_] ? 1 : 0) |
                                         (x > 0 && nbits[i - 1] ? 2 : 0) |
                                         (x + 1 < cols_ && nbits[i + 1] ? 4 : 0) |
                                         (y + 1 < rows_ && nbits[i + cols_] ? 8 : 0));
      }
    }
    const int32_t step[4] = {-cols_, -1, 1, cols_};
    std::unique_ptr<int32_t[]> queue(new int32_t[n_]);
    std::vector<int64_t> region_seed;  // per label - 1
    const bool seeded = options_.quality != nullptr || options_.seed.has_value();
    const int64_t user_seed =
        options_.seed.has_value() ? options_.seed->row * cols_ + options_.seed->col : -1;
    int64_t visited = 0, next_report = int64_t{1} << 22;
    for (int64_t s = 0; s < n_; ++s) {
      if (!nbits[s] || label_[s] != 0) continue;
      const int32_t label = static_cast<int32_t>(region_seed.size() + 1);
      label_[s] = label;
      k_[s] = 0;
      uint64_t best_key = 0;
      int64_t best = s;
      int64_t head = 0, tail = 0;
      queue[tail++] = static_cast<int32_t>(s);
      while (head < tail) {
        const int32_t p = queue[head++];
        if (seeded) {
          const uint64_t key = SeedKey(SeedQuality(p, user_seed), static_cast<uint32_t>(p));
          if (key > best_key) best_key = key, best = p;
        }
        const uint8_t bits = nbits[p];
        for (int d = 0; d < 4; ++d) {
          if (!(bits & (1 << d))) continue;
          const int32_t q = p + step[d];
          if (label_[q] != 0) continue;
          label_[q] = label;
          k_[q] = k_[p] - EdgeWrap(phase_[p], phase_[q]);
          queue[tail++] = q;
        }
      }
      region_seed.push_back(best);
      visited += tail;
      if (visited >= next_report) {
        next_report += int64_t{1} << 22;
        FRESNEL_RETURN_IF_ERROR(
            Report(options_.progress, Stage::kIntegrate, 0.9 * visited / static_cast<double>(n_)));
      }
    }
    stats_.regions = static_cast<int64_t>(region_seed.size());
    if (seeded) {
      std::vector<int32_t> seed_k(region_seed.size());
      for (size_t r = 0; r < region_seed.size(); ++r) seed_k[r] = k_[region_seed[r]];
      for (int64_t p = 0; p < n_; ++p) {
        if (label_[p] != 0) k_[p] -= seed_k[label_[p] - 1];
      }
    }
    // Cut pixels take k from their first open neighbour: up, left, right, down.
    unreached_.assign(n_, 0);
    for (int64_t p = 0; p < n_; ++p) {
      if (Masked(p) || cut_[p] == 0) continue;
      stats_.cut_pixels++;
      const int y = static_cast<int>(p / cols_), x = static_cast<int>(p % cols_);
      const int64_t nb[4] = {y > 0 ? p - cols_ : -1, x > 0 ? p - 1 : -1,
                             x + 1 < cols_ ? p + 1 : -1, y + 1 < rows_ ? p + cols_ : -1};
      bool done = false;
      for (int64_t q : nb) {
        if (q < 0 || !nbits[q]) continue;
        k_[p] = k_[q] - EdgeWrap(phase_[q], phase_[p]);
        label_[p] = label_[q];
        done = true;
        break;
      }
      if (!done) {
        unreached_[p] = 1;
        stats_.unreached_pixels++;
      }
    }
    return absl::OkStatus();
  }

  uint32_t SeedQuality(int64_t p, int64_t user_seed) const {
    if (p == user_seed) return 0xffffffffu;
    if (options_.quality == nullptr) return 0;
    float q = options_.quality->dtype() == DType::kFloat32
                  ? options_.quality->data<float>()[p]
                  : static_cast<float>(options_.quality->data<double>()[p]);
    return OrderedFloatBits(q);
  }

  void WriteOutputs(GoldsteinResult& result) {
    T* out = result.unwrapped.data<T>();
    for (int64_t p = 0; p < n_; ++p) {
      out[p] = Masked(p) ? T(0) : AddTurns(phase_[p], k_[p]);
    }
    if (!options_.return_maps) return;
    result.residues = HostArray(DType::kInt16, {rows_, cols_});
    std::memcpy(result.residues.raw(), charge_.data(), n_ * sizeof(int16_t));
    result.cuts = HostArray(DType::kUint8, {rows_, cols_});
    uint8_t* cuts = result.cuts.data<uint8_t>();
    for (int64_t p = 0; p < n_; ++p) cuts[p] = (cut_[p] != 0 && !Masked(p)) ? 1 : 0;
    result.regions = HostArray(DType::kInt32, {rows_, cols_});
    std::memcpy(result.regions.raw(), label_.data(), n_ * sizeof(int32_t));
    result.unreached = HostArray(DType::kUint8, {rows_, cols_});
    std::memcpy(result.unreached.raw(), unreached_.data(), n_);
  }

  const GoldsteinOptions& options_;
  const int rows_, cols_;
  const int64_t n_;
  const T* phase_;
  const uint8_t* mask_;
  GoldsteinStats stats_;

  std::vector<int16_t> charge_;
  std::vector<Residue> res_;
  int nby_ = 0, nbx_ = 0;
  std::vector<int> bin_start_, bin_items_, bin_masked_;
  std::vector<int64_t> island_;  // root pixel per masked pixel, -1 elsewhere
  std::vector<int64_t> island_roots_;
  std::vector<bool> island_border_;
  std::vector<uint8_t> cut_;
  std::vector<int32_t> k_;
  std::vector<int32_t> label_;
  std::vector<uint8_t> unreached_;
};

}  // namespace

absl::StatusOr<GoldsteinResult> UnwrapGoldsteinCpu(const HostArray& phase,
                                                   const GoldsteinOptions& options) {
  FRESNEL_RETURN_IF_ERROR(CheckPhaseValues(phase, options.mask));
  if (options.quality != nullptr) {
    FRESNEL_RETURN_IF_ERROR(CheckQualityValues(*options.quality, options.mask));
  }
  if (phase.dtype() == DType::kFloat32) {
    return GoldsteinCpu<float>(phase, options).Run(phase.dtype());
  }
  return GoldsteinCpu<double>(phase, options).Run(phase.dtype());
}

}  // namespace fresnel::unwrap::internal
