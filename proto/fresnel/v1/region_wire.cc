#include "fresnel/v1/region_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace fresnel::v1 {
namespace {

// Protobuf field keys of RegionChunk: (number << 3) | wire type.
constexpr uint8_t kRegionKey = (1 << 3) | 2;  // string, length-delimited
constexpr uint8_t kOffsetKey = (2 << 3) | 0;  // int64, varint
constexpr uint8_t kDataKey = (3 << 3) | 2;    // bytes, length-delimited

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads through a list of slices.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& s) : s_(s) { Skip0(); }
  bool done() const { return i_ >= s_.size(); }
  size_t slice() const { return i_; }
  size_t pos() const { return p_; }
  uint64_t offset() const { return off_; }  // bytes read so far

  bool Byte(uint8_t* b) {
    if (done()) return false;
    *b = s_[i_].begin()[p_++];
    ++off_;
    Skip0();
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Advances n bytes, appending them to `out` when it is not null.
  bool Take(uint64_t n, std::string* out) {
    while (n > 0) {
      if (done()) return false;
      const size_t here = std::min<uint64_t>(n, s_[i_].size() - p_);
      if (out != nullptr) out->append(reinterpret_cast<const char*>(s_[i_].begin()) + p_, here);
      p_ += here;
      off_ += here;
      n -= here;
      Skip0();
    }
    return true;
  }

 private:
  void Skip0() {
    while (i_ < s_.size() && p_ >= s_[i_].size()) {
      ++i_;
      p_ = 0;
    }
  }
  const std::vector<grpc::Slice>& s_;
  size_t i_ = 0, p_ = 0;
  uint64_t off_ = 0;
};

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("chunk: not a RegionChunk (", what, ")"));
}

// A buffer of `head` (copied) and, when n > 0, a slice that is [data, data + n) itself: gRPC
// calls the release function with the holder of `keepalive` when it drops that slice.
grpc::ByteBuffer HeadAndData(const std::string& head, const char* data, size_t n,
                             std::shared_ptr<const void> keepalive) {
  if (n == 0) {
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  auto* holder = new std::shared_ptr<const void>(std::move(keepalive));
  grpc::Slice slices[2] = {
      grpc::Slice(head),
      grpc::Slice(const_cast<char*>(data), n,
                  [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, holder)};
  return grpc::ByteBuffer(slices, 2);
}

// NdArray.data (common.proto): bytes, length-delimited.
constexpr uint8_t kArrayDataKey = (3 << 3) | 2;

absl::Status NotA(absl::string_view field, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": the request could not be parsed (", what, ")"));
}

// Copies one field whose key was just read from `c` to `out` (re-encoded: same meaning).
bool CopyField(uint64_t key, Cursor* c, std::string* out) {
  const uint64_t type = key & 7;
  PutVarint(key, out);
  if (type == 0) {
    uint64_t v;
    if (!c->Varint(&v)) return false;
    PutVarint(v, out);
    return true;
  }
  if (type == 1 || type == 5) return c->Take(type == 1 ? 8 : 4, out);
  if (type == 2) {
    uint64_t len;
    if (!c->Varint(&len) || len > (uint64_t{1} << 62)) return false;
    PutVarint(len, out);
    return c->Take(len, out);
  }
  return false;  // groups (3, 4) and invalid types: none in Fresnel's messages
}

}  // namespace

absl::Status InlineArrayRequest::Parse(const grpc::ByteBuffer& buffer, int array_field,
                                       absl::string_view field,
                                       google::protobuf::MessageLite* message) {
  slices_.clear();
  data_len_ = 0;
  data_slice_ = data_pos_ = 0;
  if (!buffer.Dump(&slices_).ok()) return NotA(field, "unreadable buffer");
  const uint64_t array_key = (static_cast<uint64_t>(array_field) << 3) | 2;
  std::string rest;  // the message without the array's data
  Cursor c(slices_);
  while (!c.done()) {
    uint64_t key;
    if (!c.Varint(&key)) return NotA(field, "truncated key");
    if (key != array_key) {
      if (!CopyField(key, &c, &rest)) return NotA(field, "truncated or invalid field");
      continue;
    }
    uint64_t len;
    if (!c.Varint(&len) || len > (uint64_t{1} << 62)) return NotA(field, "truncated length");
    const uint64_t end = c.offset() + len;
    std::string array;  // the array's fields but data
    while (c.offset() < end) {
      uint64_t inner;
      if (!c.Varint(&inner)) return NotA(field, "truncated array key");
      if (inner == kArrayDataKey) {
        uint64_t n;
        if (!c.Varint(&n) || n > (uint64_t{1} << 62)) return NotA(field, "truncated data");
        data_slice_ = c.slice();
        data_pos_ = c.pos();
        data_len_ = static_cast<int64_t>(n);  // a repeated data field: the last one counts
        if (!c.Take(n, nullptr)) return NotA(field, "truncated data");
      } else if (!CopyField(inner, &c, &array)) {
        return NotA(field, "truncated or invalid array field");
      }
    }
    if (c.offset() != end) return NotA(field, "array length");
    PutVarint(array_key, &rest);
    PutVarint(array.size(), &rest);
    rest += array;
  }
  if (!message->ParseFromString(rest)) return NotA(field, "invalid message");
  return absl::OkStatus();
}

std::vector<InlineArrayRequest::Piece> InlineArrayRequest::DataPieces() const {
  std::vector<Piece> pieces;
  int64_t left = data_len_;
  size_t i = data_slice_, p = data_pos_;
  while (left > 0 && i < slices_.size()) {
    const size_t here = std::min<int64_t>(left, static_cast<int64_t>(slices_[i].size() - p));
    pieces.push_back({reinterpret_cast<const char*>(slices_[i].begin()) + p, here});
    left -= static_cast<int64_t>(here);
    ++i;
    p = 0;
  }
  return pieces;
}

std::string InlineArrayRequest::DataString() const {
  std::string out;
  out.reserve(static_cast<size_t>(data_len_));
  for (const Piece& piece : DataPieces()) out.append(piece.data, piece.size);
  return out;
}

grpc::ByteBuffer MessageWithArrayBuffer(const google::protobuf::MessageLite& head, int array_field,
                                        const google::protobuf::MessageLite& meta,
                                        const char* data, size_t n,
                                        std::shared_ptr<const void> keepalive) {
  std::string out = head.SerializeAsString();
  std::string array = meta.SerializeAsString();
  if (n > 0) {
    array.push_back(static_cast<char>(kArrayDataKey));
    PutVarint(n, &array);
  }
  PutVarint((static_cast<uint64_t>(array_field) << 3) | 2, &out);
  PutVarint(array.size() + n, &out);
  out += array;
  return HeadAndData(out, data, n, std::move(keepalive));
}

grpc::ByteBuffer RegionChunkBuffer(const std::string& region, int64_t offset_bytes,
                                   const char* data, size_t n,
                                   std::shared_ptr<const void> keepalive) {
  std::string head;
  head.reserve(region.size() + 32);
  if (!region.empty()) {
    head.push_back(static_cast<char>(kRegionKey));
    PutVarint(region.size(), &head);
    head += region;
  }
  if (offset_bytes != 0) {
    head.push_back(static_cast<char>(kOffsetKey));
    PutVarint(static_cast<uint64_t>(offset_bytes), &head);
  }
  if (n > 0) {
    head.push_back(static_cast<char>(kDataKey));
    PutVarint(n, &head);
  }
  return HeadAndData(head, data, n, std::move(keepalive));
}

absl::Status RegionChunkView::Parse(const grpc::ByteBuffer& buffer) {
  slices_.clear();
  region_.clear();
  offset_ = 0;
  data_len_ = 0;
  data_slice_ = data_pos_ = 0;
  if (!buffer.Dump(&slices_).ok()) return Malformed("unreadable buffer");
  Cursor c(slices_);
  while (!c.done()) {
    uint64_t key;
    if (!c.Varint(&key)) return Malformed("truncated key");
    const uint64_t field = key >> 3, type = key & 7;
    if (type == 0) {
      uint64_t v;
      if (!c.Varint(&v)) return Malformed("truncated varint");
      if (field == 2) offset_ = static_cast<int64_t>(v);
    } else if (type == 2) {
      uint64_t len;
      if (!c.Varint(&len)) return Malformed("truncated length");
      if (len > (uint64_t{1} << 62)) return Malformed("length");
      if (field == 1) {
        region_.clear();
        if (!c.Take(len, &region_)) return Malformed("truncated region");
      } else if (field == 3) {
        data_slice_ = c.slice();
        data_pos_ = c.pos();
        data_len_ = static_cast<int64_t>(len);
        if (!c.Take(len, nullptr)) return Malformed("truncated data");
      } else if (!c.Take(len, nullptr)) {
        return Malformed("truncated field");
      }
    } else if (type == 1 || type == 5) {
      if (!c.Take(type == 1 ? 8 : 4, nullptr)) return Malformed("truncated fixed field");
    } else {
      return Malformed("wire type");
    }
  }
  return absl::OkStatus();
}

void RegionChunkView::CopyData(char* dst) const {
  int64_t left = data_len_;
  size_t i = data_slice_, p = data_pos_;
  while (left > 0 && i < slices_.size()) {
    const size_t here = std::min<int64_t>(left, static_cast<int64_t>(slices_[i].size() - p));
    std::memcpy(dst, slices_[i].begin() + p, here);
    dst += here;
    left -= static_cast<int64_t>(here);
    ++i;
    p = 0;
  }
}

}  // namespace fresnel::v1
