// Conversion between the wire array (fresnel.v1.NdArray / ArrayChunk) and fresnel::HostArray.
// The only place where DType values cross between protobuf and the kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/core/array.h"
#include "fresnel/v1/common.pb.h"
#include "google/protobuf/message.h"

namespace fresnel {

absl::StatusOr<DType> FromProto(v1::DType dtype, absl::string_view field);
v1::DType ToProto(DType dtype);

// Bytes in a registered shared-memory region (NdArray.shm): `size` bytes at `data`, valid while
// `keepalive` (the region's mapping) lives, even after the region is unregistered.
struct ShmSpan {
  char* data = nullptr;
  int64_t size = 0;
  std::shared_ptr<const void> keepalive;
};
// Finds `nbytes` bytes at ref.offset_bytes of the caller's region ref.region: NOT_FOUND naming
// `field`.region for a region the caller has not registered, INVALID_ARGUMENT naming
// `field`.offset_bytes for a range outside the region. The server's is ShmRegistry::Resolver.
using ShmResolver = std::function<absl::StatusOr<ShmSpan>(
    const v1::ShmRef& ref, int64_t nbytes, absl::string_view field)>;

// prod(shape) * itemsize(dtype) in bytes; INVALID_ARGUMENT naming `field` for an unknown dtype,
// a negative dimension or a count that overflows int64.
absl::StatusOr<int64_t> ArrayBytes(v1::DType dtype, const std::vector<int64_t>& shape,
                                   absl::string_view field);

// Validates dtype, shape and byte count; messages name `field` ("x", "taps", ...).
// The NdArray's bytes are moved out when `array` is an rvalue. An array whose `shm` is set is
// INVALID_ARGUMENT here (`field`.shm: not accepted by this call); the overload with a resolver
// copies its bytes out of the region instead (one copy, the region is not read again).
absl::StatusOr<HostArray> FromProto(const v1::NdArray& array, absl::string_view field);
absl::StatusOr<HostArray> FromProto(v1::NdArray&& array, absl::string_view field);
absl::StatusOr<HostArray> FromProto(v1::NdArray&& array, absl::string_view field,
                                    const ShmResolver& resolver);

// An NdArray that names `nbytes`-long bytes at `offset_bytes` of `region` instead of carrying
// them: dtype and shape set, data empty.
v1::NdArray ShmArray(DType dtype, const std::vector<int64_t>& shape, const std::string& region,
                     int64_t offset_bytes);

// Every NdArray set in `message` (singular and repeated message fields, depth first in field
// number order, through any message type) with its path: "phase", "image.image",
// "header.request.mask", "frames[2].points". The order is the one output regions lay arrays
// out in (docs/transport.md, "Outputs to a region").
struct NdArrayField {
  std::string path;
  v1::NdArray* array = nullptr;
};
std::vector<NdArrayField> NdArrayFields(google::protobuf::Message* message);

// Output regions: each array of a response occupies a slot of RegionSlotBytes(its bytes) from
// the request's out_shm.offset_bytes on, one after another; OutputRegionBytes is what the region
// must hold from there (a sum of slots, so the order does not change it). -1 on overflow.
constexpr int64_t kRegionSlotAlign = 64;
int64_t RegionSlotBytes(int64_t nbytes);
int64_t OutputRegionBytes(const std::vector<int64_t>& nbytes);

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
