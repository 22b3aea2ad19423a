// Host <-> device copies of pageable host memory through reusable page-locked staging (issue 10
// item 3): a bounded pool of pinned chunks per device, kept for the process's life, so that a
// large pageable array goes up or down at DMA speed without pinning the array itself (pinning
// costs about as much as copying it) and without the driver's own single-threaded pageable path
// (~12 GB/s on the H200 machine). Each chunk is copied between the caller's memory and a pinned
// chunk on all cores (TBB) while the other chunk of the pair is on the bus. Pieces whose host
// side is page-locked already (a pinned shared-memory region) skip the staging: one DMA each,
// straight from or to where they are. No CUDA types here (`stream` is a cudaStream_t); defined
// in CUDA builds only.
//
// Bounded: kStagingChunks chunks of kStagingChunkBytes per device (128 MiB), two per call; a
// call that finds fewer than two free (several large copies at once on one device) or copies
// less than kStagingMinBytes in all takes the plain pageable cudaMemcpyAsync instead, and so does
// every call when the environment sets FRESNEL_HOST_STAGING=0. The same bytes arrive either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace fresnel::cuda {

inline constexpr size_t kStagingChunkBytes = size_t{16} << 20;
inline constexpr int kStagingChunks = 8;
// Below this in all, the pageable copy is as fast (the driver stages small copies itself).
inline constexpr size_t kStagingMinBytes = size_t{4} << 20;

// One array's copy: `bytes` from src to dst (host -> device for uploads, device -> host for
// downloads).
struct StagedPiece {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// Enqueues the uploads of `pieces` (pageable host src, device dst of `ordinal`) on `stream`.
// When it returns, the host sources may be changed or freed (their bytes are in pinned chunks
// or already on the device); the DMAs may still be in flight on `stream`, ordered before what
// is enqueued on it next.
absl::Status StagedUpload(int ordinal, const std::vector<StagedPiece>& pieces,
                          void* stream);

// The downloads of `pieces` (device src of `ordinal`, pageable host dst), after everything
// enqueued on `stream` so far. Synchronous: the host destinations are complete when it returns,
// and so is the work enqueued on `stream` before it. Pieces are downloaded in order, chunk i+1's
// DMA overlapping the copy-out of chunk i, across pieces too.
absl::Status StagedDownload(int ordinal, const std::vector<StagedPiece>& pieces,
                            void* stream);

// Pinned bytes the pools hold now (all devices), and how many calls took the pageable path
// because no pair of chunks was free (tests, benchmarks).
int64_t StagingPoolBytes();
int64_t StagingPoolFallbacks();

}  // namespace fresnel::cuda
