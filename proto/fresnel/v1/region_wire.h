// fresnel.v1.RegionChunk (shm.proto) on the wire without the protobuf copies (issue 10): the
// chunked transfer's WriteRegion / ReadRegion messages are built as a gRPC ByteBuffer whose
// data slice points at the caller's bytes (no copy into a protobuf string, none into a
// serialisation buffer), and parsed in place from the received slices, the data bytes copied
// once, straight to where they go. The bytes on the wire are exactly the protobuf encoding
// (fields in number order), so either side may be an ordinary protobuf peer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace fresnel::v1 {

// The RegionChunk {region, offset_bytes, data[0, n)} as a ByteBuffer. `data` is not copied: it
// must stay valid until gRPC releases the slice, which holds `keepalive` until then (pass
// nullptr when the bytes outlive the call anyway).
grpc::ByteBuffer RegionChunkBuffer(const std::string& region, int64_t offset_bytes,
                                   const char* data, size_t n,
                                   std::shared_ptr<const void> keepalive = nullptr);

// A RegionChunk parsed from a ByteBuffer, its data left in the buffer's slices.
class RegionChunkView {
 public:
  // INVALID_ARGUMENT (naming `chunk`) when the bytes are not a RegionChunk.
  absl::Status Parse(const grpc::ByteBuffer& buffer);
  const std::string& region() const { return region_; }
  int64_t offset_bytes() const { return offset_; }
  int64_t data_bytes() const { return data_len_; }
  // Copies the data_bytes() bytes of data to dst.
  void CopyData(char* dst) const;

 private:
  std::vector<grpc::Slice> slices_;
  std::string region_;
  int64_t offset_ = 0;
  int64_t data_len_ = 0;
  size_t data_slice_ = 0, data_pos_ = 0;  // where data starts
};

// A unary request whose one large array (the NdArray at top-level field `array_field`, e.g.
// UpfirdnRequest.x) stays in the received slices (issue 10, inline arrays): every other byte of
// the message is parsed into `message` as protobuf would (x's dtype, shape and shm included),
// x.data is left empty there and its bytes are recorded here, to be copied once, straight to
// where they go (a pinned staging buffer), instead of into a fresh protobuf string first.
class InlineArrayRequest {
 public:
  // INVALID_ARGUMENT (naming `field`) when the bytes are not such a message.
  absl::Status Parse(const grpc::ByteBuffer& buffer, int array_field, absl::string_view field,
                     google::protobuf::MessageLite* message);
  // The length of the array's data (0 when the message had none).
  int64_t data_bytes() const { return data_len_; }
  // The data in pieces, each valid while this object lives.
  struct Piece {
    const char* data;
    size_t size;
  };
  std::vector<Piece> DataPieces() const;
  // The data as one string (one copy), for the paths that need x inside the message.
  std::string DataString() const;

 private:
  std::vector<grpc::Slice> slices_;
  int64_t data_len_ = 0;
  size_t data_slice_ = 0, data_pos_ = 0;  // where data starts
};

// A response message as a ByteBuffer whose large array is not copied: `head` (serialised as is,
// without its array field) followed by the NdArray at top-level field `array_field` holding
// `meta`'s dtype and shape and data = [data, data + n). The data slice holds `keepalive` until
// gRPC has sent it. Protobuf merges the two parts: the peer parses the message with the array in
// place, as if it had been serialised whole.
grpc::ByteBuffer MessageWithArrayBuffer(const google::protobuf::MessageLite& head, int array_field,
                                        const google::protobuf::MessageLite& meta,
                                        const char* data, size_t n,
                                        std::shared_ptr<const void> keepalive);

}  // namespace fresnel::v1
