// Sizes of the wire that the client library and the server agree on: how much room a message
// needs besides its array bytes, and how large a chunk of a chunked array is. One definition for
// both sides, so a chunk one side makes always fits what the other accepts.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fresnel::v1 {

// Room for a message's fields besides its array bytes (ids, shapes, configs, ExecutionInfo,
// chunk framing). A message whose array bytes plus this exceed the message cap goes in chunks.
inline constexpr int64_t kEnvelopeBytes = 16 << 10;
// Smallest chunk either side makes or accepts a request for: below it the per-message overhead
// dominates.
inline constexpr int64_t kMinChunkBytes = 4096;
// SharedMemoryService.ReadRegion's chunk when the request leaves chunk_bytes 0 (shm.proto).
inline constexpr int64_t kDefaultRegionChunkBytes = 4 << 20;

// Array bytes per chunk under a message cap of `max_message_bytes`: the cap less the envelope (at
// least kMinChunkBytes), or `requested` clamped into [kMinChunkBytes, that] when it is positive.
inline int64_t ChunkPayloadBytes(int64_t max_message_bytes, int64_t requested = 0) {
  const int64_t cap = std::max(kMinChunkBytes, max_message_bytes - kEnvelopeBytes);
  return requested > 0 ? std::clamp(requested, kMinChunkBytes, cap) : cap;
}

}  // namespace fresnel::v1
