// Named arrays over chunked messages, both ways. An array too large for one message travels as
// a sequence of v1::ArrayChunk pieces, each inside a service's own message that also names the
// array (a proto enum: UnwrapArray, MeshArray, HologramOutput, ...). These two classes hold what
// every service shares; the service keeps its message types and fills or reads their fields.
//
// ChunkedWriter: a sequence of named arrays -> chunks of at most `chunk_bytes` array bytes, cut
// one at a time as they are sent (never a copy of the whole array), in the order added. The
// caller's callback puts each chunk into its message; a write reactor asks for the next chunk
// when the previous write completed.
//
// ChunkedReader: chunks of named arrays -> the arrays (uploads): one ChunkAssembler per name, each
// under a byte cap, with the errors every upload answers the same way.
//
// Neither is thread-safe: one reactor drives each, one message at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/common.pb.h"

namespace fresnel::server {

class ChunkedWriter {
 public:
  // Puts one chunk of the array `name` into the message being built.
  using Fill = std::function<void(int name, v1::ArrayChunk&& chunk)>;

  // `chunk_bytes` > 0: array bytes per chunk (v1::ChunkPayloadBytes of the message cap).
  explicit ChunkedWriter(int64_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

  // Queues an array the writer owns; it is freed once its last chunk was cut.
  void Add(int name, HostArray array);
  // Queues an array the caller keeps alive (unchanged) until its last chunk was cut.
  void AddBorrowed(int name, const HostArray* array);

  // Cuts the next chunk and hands it to `fill`. False (and `fill` not called) once every array
  // was sent. An array of zero bytes is one chunk with `last` set.
  bool Next(const Fill& fill);

  bool done() const { return arrays_.empty(); }
  int64_t chunk_bytes() const { return chunk_bytes_; }
  // The names still to send, in order (a header lists them before the first chunk).
  std::vector<int> names() const;

 private:
  struct Entry {
    int name;
    HostArray owned;
    const HostArray* borrowed;  // null: `owned`
  };
  const int64_t chunk_bytes_;
  std::deque<Entry> arrays_;
  int64_t offset_ = 0;  // into arrays_.front()
};

class ChunkedReader {
 public:
  // One array an upload may carry in chunks.
  struct Expected {
    int name;           // its wire value (the proto enum)
    std::string field;  // its name in errors ("phase", "points_xyz")
    int64_t max_bytes;  // the most bytes it may have (limits, declared counts)
  };

  // `name_field` names the field that carries the array's name in errors ("chunk.array").
  explicit ChunkedReader(std::string name_field, std::vector<Expected> expected = {})
      : name_field_(std::move(name_field)), arrays_(expected.begin(), expected.end()) {}

  // Adds (or replaces, before any of its chunks arrived) an expected array.
  void Expect(Expected expected);

  // One chunk of the array `name`, in order. INVALID_ARGUMENT for a name not expected (listing
  // the expected ones), and as ChunkAssembler::Add says (offsets, sizes, `last`, max_bytes).
  absl::Status Add(int name, v1::ArrayChunk&& chunk);

  // Whether a chunk of `name` arrived.
  bool Received(int name) const;

  // The array `name`: nullopt when no chunk of it arrived; INVALID_ARGUMENT naming its field when
  // the upload ended before its chunk marked last.
  absl::StatusOr<std::optional<HostArray>> Take(int name);

 private:
  struct Slot {
    Slot(const Expected& e) : expected(e) {}  // NOLINT: from the constructor's list
    Expected expected;
    ChunkAssembler assembler;
    bool received = false;
    bool complete = false;
  };
  Slot* Find(int name);
  const Slot* Find(int name) const;

  const std::string name_field_;
  std::deque<Slot> arrays_;
};

}  // namespace fresnel::server
