#include "fresnel/core/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

namespace fresnel {
namespace {

// Below this a parallel copy costs more in task start-up than it saves; blocks of this size keep
// every worker busy and each block one or two pieces (gRPC's received slices are much smaller
// than this or one whole message).
constexpr size_t kBlockBytes = size_t{4} << 20;

}  // namespace

void GatherBytes(const std::vector<BytePiece>& pieces, char* dst) {
  size_t total = 0;
  std::vector<size_t> start(pieces.size() + 1, 0);  // offset of each piece in dst
  for (size_t i = 0; i < pieces.size(); ++i) {
    start[i] = total;
    total += pieces[i].size;
  }
  start[pieces.size()] = total;
  if (total <= 2 * kBlockBytes) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].size > 0) std::memcpy(dst + start[i], pieces[i].data, pieces[i].size);
    }
    return;
  }
  const size_t blocks = (total + kBlockBytes - 1) / kBlockBytes;
  tbb::parallel_for(tbb::blocked_range<size_t>(0, blocks), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t b = r.begin(); b != r.end(); ++b) {
      const size_t lo = b * kBlockBytes, hi = std::min(total, lo + kBlockBytes);
      // The piece holding byte lo: the last whose start is <= lo.
      size_t i = static_cast<size_t>(std::upper_bound(start.begin(), start.end() - 1, lo) -
                                     start.begin()) - 1;
      for (size_t at = lo; at < hi; ++i) {
        const size_t from = at - start[i];
        const size_t n = std::min(hi, start[i + 1]) - at;
        if (n > 0) std::memcpy(dst + at, pieces[i].data + from, n);
        at += n;
      }
    }
  });
}

}  // namespace fresnel
