// Reads a FRESNEL_UNWRAP_DEBUG_DUMP file (goldstein_cuda.cu, DumpPairing, layout version 2) and
// replays the GPU's pairing step by step against the rules of docs/unwrap.md, starting every step
// from the GPU's own state. The first step where the GPU's proposals or acceptances differ from
// the rules is where the GPU went wrong, and the report says how: which residue, what it proposed
// (target, distance, whether that target was still unpaired / masked), what the rules give, and
// whether the difference is in the propose phase (scan or stale matched flags) or in the accept
// phase (stale proposals). Diagnostics only; every line starts with "gpu: ".
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "unwrap/unwrap_common.h"
#include "unwrap/unwrap_internal.h"

namespace fresnel::unwrap::testing {

struct PairingDump {
  int rows = 0, cols = 0, count = 0, mask_present = 0, active = 0, steps = 0, iterations = 0;
  int rounds = 0, stale = 0;
  long long bins = 0;
  std::vector<uint32_t> word;
  std::vector<unsigned long long> key;
  std::vector<int> prop, base, cnt, masked, matches;
  std::vector<uint8_t> mask;
  // Per step: the residues (list positions) that proposed, with their key and proposed position.
  struct Proposal {
    int pos;
    unsigned long long key;
    int prop;
  };
  std::vector<std::vector<Proposal>> step_proposals;
};

inline bool ReadPairingDump(const std::string& path, PairingDump* d, std::string* error) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *error = "cannot open " + path;
    return false;
  }
  int version = 0;
  if (std::fscanf(f,
                  "fresnel-unwrap-dump %d rows %d cols %d count %d bins %lld mask %d active %d "
                  "steps %d iterations %d rounds %d stale %d\n",
                  &version, &d->rows, &d->cols, &d->count, &d->bins, &d->mask_present, &d->active,
                  &d->steps, &d->iterations, &d->rounds, &d->stale) != 11 ||
      version != 2) {
    std::fclose(f);
    *error = "not a version 2 dump: " + path;
    return false;
  }
  auto read = [f](void* dst, size_t size, size_t n) { return std::fread(dst, size, n, f) == n; };
  const size_t n = static_cast<size_t>(d->count), bins = static_cast<size_t>(d->bins);
  const size_t pixels = static_cast<size_t>(d->rows) * d->cols;
  d->word.resize(n);
  d->key.resize(n);
  d->prop.resize(n);
  d->base.resize(bins);
  d->cnt.resize(bins);
  d->masked.resize(bins);
  d->mask.resize(d->mask_present ? pixels : 0);
  d->matches.resize(d->steps);
  bool ok = read(d->word.data(), 4, n) && read(d->key.data(), 8, n) && read(d->prop.data(), 4, n) &&
            read(d->base.data(), 4, bins) && read(d->cnt.data(), 4, bins) &&
            read(d->masked.data(), 4, bins) && read(d->mask.data(), 1, d->mask.size()) &&
            read(d->matches.data(), 4, d->matches.size());
  if (ok && d->rounds) {
    d->step_proposals.resize(d->steps);
    for (int s = 0; ok && s < d->steps; ++s) {
      int made = 0;
      ok = read(&made, 4, 1) && made >= 0 && made <= d->count;
      for (int i = 0; ok && i < made; ++i) {
        PairingDump::Proposal p{};
        ok = read(&p.pos, 4, 1) && read(&p.key, 8, 1) && read(&p.prop, 4, 1);
        d->step_proposals[s].push_back(p);
      }
    }
  }
  std::fclose(f);
  if (!ok) *error = "truncated dump: " + path;
  return ok;
}

// The replay; `expected_mask` is the caller's mask (nullptr = none), compared with the device's.
inline std::string ReplayPairingDump(const PairingDump& d, const uint8_t* expected_mask) {
  using namespace fresnel::unwrap::internal;
  constexpr uint32_t kMatched = 0x80000000u, kNegative = 0x40000000u, kIndex = 0x3fffffffu;
  std::ostringstream os;
  const int rows = d.rows, cols = d.cols, count = d.count;
  const int64_t pixels = static_cast<int64_t>(rows) * cols;
  os << "gpu: dump " << rows << "x" << cols << " residues " << count << " stale " << d.stale
     << " unpaired after pairing " << d.active << "\n";
  // Inputs of the pairing: device mask, bin table, residue list.
  int64_t mask_diff = 0;
  if (expected_mask != nullptr && d.mask_present) {
    for (int64_t i = 0; i < pixels; ++i) mask_diff += (d.mask[i] != 0) != (expected_mask[i] != 0);
  }
  const int nbx = (cols + kBin - 1) / kBin;
  int64_t bin_masked_diff = 0, bin_list_bad = 0;
  std::vector<int> seen(pixels, -1);
  std::vector<int> y(count), x(count), neg(count);
  for (int i = 0; i < count; ++i) {
    const int idx = static_cast<int>(d.word[i] & kIndex);
    y[i] = idx / cols;
    x[i] = idx % cols;
    neg[i] = (d.word[i] & kNegative) != 0;
    if (idx >= pixels || seen[idx] >= 0) ++bin_list_bad;  // out of range or duplicated
    if (idx < pixels) seen[idx] = i;
  }
  for (long long b = 0; b < d.bins; ++b) {
    const int by = static_cast<int>(b / nbx), bx = static_cast<int>(b % nbx);
    int mc = 0;
    for (int yy = by * kBin; yy < std::min(rows, by * kBin + kBin); ++yy) {
      for (int xx = bx * kBin; xx < std::min(cols, bx * kBin + kBin); ++xx) {
        mc += d.mask_present && d.mask[static_cast<int64_t>(yy) * cols + xx] != 0;
      }
    }
    bin_masked_diff += mc != d.masked[b];
    for (int s = 0; s < d.cnt[b]; ++s) {
      const int q = d.base[b] + s;
      if (q < 0 || q >= count || (y[q] / kBin) * nbx + x[q] / kBin != b) ++bin_list_bad;
    }
  }
  os << "gpu: inputs: device mask differs at " << mask_diff << " pixels, bins with a wrong masked "
     << "count " << bin_masked_diff << ", bad residue-list/bin entries " << bin_list_bad << "\n";
  if (!d.rounds) {
    os << "gpu: no per-step proposals in the dump (image too large for the recording)\n";
    return os.str();
  }
  auto masked_at = [&](int yy, int xx) {
    return d.mask_present && d.mask[static_cast<int64_t>(yy) * cols + xx] != 0;
  };
  auto describe = [&](unsigned long long k) {
    std::ostringstream o;
    if (k == kNoKey) return std::string("none");
    const uint32_t id = KeyId(k);
    const int ty = PaddedRow(id, cols), tx = PaddedCol(id, cols);
    o << (KeyIsGround(k) ? (ty < 0 || tx < 0 || ty >= rows || tx >= cols ? "frame" : "mask")
                         : "residue")
      << " (" << ty << "," << tx << ") d2 " << (k >> 32);
    if (KeyIsGround(k) && ty >= 0 && tx >= 0 && ty < rows && tx < cols && !masked_at(ty, tx)) {
      o << " [NOT MASKED]";
    }
    return o.str();
  };
  // Plaquette -> list position, for the brute-force box scans.
  const std::vector<int>& at = seen;
  const std::vector<int> radii = RadiusSchedule(rows, cols);
  std::vector<char> active(count, 1);
  int reported = 0, step_reports = 0;
  const int kMaxReports = 12;
  for (int s = 0; s < d.steps; ++s) {
    const auto& props = d.step_proposals[s];
    if (props.empty()) continue;
    const int r = radii[s / d.iterations];
    std::vector<unsigned long long> gkey(count, 0);
    std::vector<int> gprop(count, -1);
    for (const auto& p : props) {
      gkey[p.pos] = p.key;
      gprop[p.pos] = p.prop;
    }
    int missing = 0, extra = 0;
    for (int i = 0; i < count; ++i) {
      missing += active[i] && gkey[i] == 0;
      extra += !active[i] && gkey[i] != 0;
    }
    int wrong = 0;
    for (const auto& p : props) {
      const int i = p.pos;
      if (!active[i]) continue;
      // The rules: best candidate among the residues still unpaired, the mask and the frame.
      unsigned long long best = BestFrameKey(y[i], x[i], r, rows, cols);
      int best_q = -1;
      for (int yy = std::max(0, y[i] - r); yy <= std::min(rows - 1, y[i] + r); ++yy) {
        for (int xx = std::max(0, x[i] - r); xx <= std::min(cols - 1, x[i] + r); ++xx) {
          const int q = at[static_cast<int64_t>(yy) * cols + xx];
          if (q < 0 || !active[q] || neg[q] == neg[i]) continue;
          const unsigned long long k = ResidueKey(y[i], x[i], yy, xx, cols);
          if (k < best) best = k, best_q = q;
        }
      }
      for (int yy = std::max(0, y[i] - r); yy <= std::min(rows - 1, y[i] + r + 1); ++yy) {
        for (int xx = std::max(0, x[i] - r); xx <= std::min(cols - 1, x[i] + r + 1); ++xx) {
          if (!masked_at(yy, xx)) continue;
          const unsigned long long k = GroundKey(y[i], x[i], yy, xx, cols);
          if (k < best) best = k, best_q = -1;
        }
      }
      if (best == p.key && (KeyIsGround(best) || best == kNoKey || best_q == p.prop)) continue;
      ++wrong;
      if (reported++ < kMaxReports) {
        os << "gpu: step " << s << " (radius " << r << ") PROPOSAL of residue " << i << " ("
           << y[i] << "," << x[i] << ")" << (neg[i] ? "-" : "+") << ": gpu " << describe(p.key);
        if (!KeyIsGround(p.key) && p.key != kNoKey && p.prop >= 0 && p.prop < count) {
          os << " = residue " << p.prop << (active[p.prop] ? "" : " [ALREADY PAIRED]");
        }
        os << ", rules " << describe(best) << "\n";
      }
    }
    // Acceptance from the GPU's own proposals: ground always, residues when mutual.
    int accepted = 0;
    std::vector<int> now;
    for (const auto& p : props) {
      const int i = p.pos;
      if (!active[i] || p.key == kNoKey) continue;
      bool ok = KeyIsGround(p.key);
      if (!ok && p.prop >= 0 && p.prop < count) {
        ok = gkey[p.prop] != 0 && gkey[p.prop] != kNoKey && !KeyIsGround(gkey[p.prop]) &&
             gprop[p.prop] == i;
      }
      if (ok) now.push_back(i);
    }
    accepted = static_cast<int>(now.size());
    if ((missing || extra || wrong || accepted != d.matches[s]) && step_reports++ < kMaxReports) {
      os << "gpu: step " << s << " (radius " << r << "): " << props.size() << " proposals, "
         << missing << " unpaired residues did not propose, " << extra
         << " paired residues proposed, " << wrong << " proposals differ from the rules; "
         << "accepted " << d.matches[s] << " on the gpu, " << accepted
         << " by the rules from the gpu's proposals"
         << (accepted != d.matches[s] ? " [ACCEPT PHASE DIFFERS]" : "") << "\n";
    }
    for (int i : now) active[i] = 0;
  }
  // Residues left for the final frame cuts: the replay's count against the device's `active`.
  int left = 0, unflagged = 0;
  for (int i = 0; i < count; ++i) {
    left += active[i];
    unflagged += (d.word[i] & kMatched) == 0;  // every residue is flagged after the frame cuts
  }
  os << "gpu: replay done: " << reported << " proposal differences, " << step_reports
     << " steps that differ; left for frame cuts "
     << left << " (device " << d.active << "); residues not flagged paired " << unflagged << "\n";
  return os.str();
}

}  // namespace fresnel::unwrap::testing
