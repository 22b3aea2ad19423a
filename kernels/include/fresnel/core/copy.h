// Host memory copies large enough to be worth several cores (issue 10: a request's inline array
// into a pinned staging buffer). One thread's memcpy moves ~6-14 GB/s on the H200 machine; the
// bus to the GPU moves ~55 GB/s from pinned memory, so a single-threaded copy in front of it
// would be the bottleneck.
#pragma once

#include <cstddef>
#include <vector>

namespace fresnel {

// A run of bytes to copy.
struct BytePiece {
  const char* data = nullptr;
  size_t size = 0;
};

// Copies `pieces`, one after the other, to dst (dst must hold their total size and not overlap
// them). Large totals are split in blocks copied in parallel (TBB); small ones are one memcpy
// per piece on the calling thread. Synchronous.
void GatherBytes(const std::vector<BytePiece>& pieces, char* dst);
// The same for bytes [begin, end) of the pieces' concatenation only (end clamped to its size),
// written to dst + begin: a caller gathers a large array part by part, ahead of its use.
void GatherBytesRange(const std::vector<BytePiece>& pieces, char* dst, size_t begin, size_t end);

}  // namespace fresnel
