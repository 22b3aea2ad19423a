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

void GatherBytesRange(const std::vector<BytePiece>& pieces, char* dst, size_t begin,
                      size_t end) {
  size_t total = 0;
  std::vector<size_t> start(pieces.size() + 1, 0);  // offset of each piece in dst
  for (size_t i = 0; i < pieces.size(); ++i) {
    start[i] = total;
    total += pieces[i].size;
  }
  start[pieces.size()] = total;
  end = std::min(end, total);
  if (begin >= end) return;
  // Copies dst[lo, hi) from the pieces that hold it.
  auto copy_span = [&](size_t lo, size_t hi) {
    // The piece holding byte lo: the last whose start is <= lo.
    size_t i = static_cast<size_t>(std::upper_bound(start.begin(), start.end() - 1, lo) -
                                   start.begin()) - 1;
    for (size_t at = lo; at < hi; ++i) {
      const size_t from = at - start[i];
      const size_t n = std::min(hi, start[i + 1]) - at;
      if (n > 0) std::memcpy(dst + at, pieces[i].data + from, n);
      at += n;
    }
  };
  if (end - begin <= 2 * kBlockBytes) {
    copy_span(begin, end);
    return;
  }
  const size_t blocks = (end - begin + kBlockBytes - 1) / kBlockBytes;
  tbb::parallel_for(tbb::blocked_range<size_t>(0, blocks), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t b = r.begin(); b != r.end(); ++b) {
      const size_t lo = begin + b * kBlockBytes;
      copy_span(lo, std::min(end, lo + kBlockBytes));
    }
  });
}

void GatherBytes(const std::vector<BytePiece>& pieces, char* dst) {
  GatherBytesRange(pieces, dst, 0, SIZE_MAX);
}

}  // namespace fresnel
