// Conversion between the wire array (fresnel.v1.NdArray / ArrayChunk) and fresnel::HostArray.
// The only place where DType values cross between protobuf and the kernels.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/common.pb.h"

namespace fresnel {

absl::StatusOr<DType> FromProto(v1::DType dtype, absl::string_view field);
v1::DType ToProto(DType dtype);

// Validates dtype, shape and byte count; messages name `field` ("x", "taps", ...).
// The NdArray's bytes are moved out when `array` is an rvalue.
absl::StatusOr<HostArray> FromProto(const v1::NdArray& array, absl::string_view field);
absl::StatusOr<HostArray> FromProto(v1::NdArray&& array, absl::string_view field);

// Copies (or, for an rvalue HostArray, moves) into `out`.
void ToProto(const HostArray& array, v1::NdArray* out);
void ToProto(HostArray&& array, v1::NdArray* out);

// Splits an array into chunks of at most `chunk_bytes` data bytes (at least one chunk, even for
// an empty array). The first chunk carries dtype and shape.
std::vector<v1::ArrayChunk> SplitIntoChunks(const HostArray& array, int64_t chunk_bytes);
// The one chunk of SplitIntoChunks(array, chunk_bytes) that starts at byte `offset`, for senders
// that make one chunk at a time instead of copying the whole array up front.
v1::ArrayChunk ArrayChunkAt(const HostArray& array, int64_t offset, int64_t chunk_bytes);

// Reassembles chunks in order. Validates offsets, sizes and the `last` flag.
class ChunkAssembler {
 public:
  // Adds a chunk; returns true once the chunk with `last` arrived.
  absl::StatusOr<bool> Add(v1::ArrayChunk&& chunk, absl::string_view field,
                           int64_t max_total_bytes);
  // The completed array (after Add returned true).
  absl::StatusOr<HostArray> Take(absl::string_view field);
  // Bytes of memory held so far: grows with the data that arrived (at most twice it), never with
  // the total a first chunk claims.
  int64_t held_bytes() const { return static_cast<int64_t>(bytes_.capacity()); }

 private:
  bool started_ = false;
  bool done_ = false;
  v1::DType dtype_ = v1::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape_;
  int64_t total_ = 0;
  std::string bytes_;
};

}  // namespace fresnel
