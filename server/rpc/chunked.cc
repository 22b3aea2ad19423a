#include "server/rpc/chunked.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fresnel/core/status.h"

namespace fresnel::server {

void ChunkedWriter::Add(int name, HostArray array) {
  arrays_.push_back(Entry{name, std::move(array), nullptr});
}

void ChunkedWriter::AddBorrowed(int name, const HostArray* array) {
  arrays_.push_back(Entry{name, HostArray(), array});
}

bool ChunkedWriter::Next(const Fill& fill) {
  if (arrays_.empty()) return false;
  Entry& e = arrays_.front();
  const HostArray& array = e.borrowed != nullptr ? *e.borrowed : e.owned;
  v1::ArrayChunk chunk = ArrayChunkAt(array, offset_, chunk_bytes_);
  const bool last = chunk.last();
  const int name = e.name;
  if (last) {
    arrays_.pop_front();  // frees an owned array before its last chunk goes out
    offset_ = 0;
  } else {
    offset_ += chunk_bytes_;
  }
  fill(name, std::move(chunk));
  return true;
}

std::vector<int> ChunkedWriter::names() const {
  std::vector<int> out;
  out.reserve(arrays_.size());
  for (const Entry& e : arrays_) out.push_back(e.name);
  return out;
}

void ChunkedReader::Expect(Expected expected) {
  if (Slot* s = Find(expected.name)) {
    if (!s->received) s->expected = std::move(expected);
    return;
  }
  arrays_.emplace_back(expected);
}

ChunkedReader::Slot* ChunkedReader::Find(int name) {
  for (Slot& s : arrays_) {
    if (s.expected.name == name) return &s;
  }
  return nullptr;
}

const ChunkedReader::Slot* ChunkedReader::Find(int name) const {
  for (const Slot& s : arrays_) {
    if (s.expected.name == name) return &s;
  }
  return nullptr;
}

absl::Status ChunkedReader::Add(int name, v1::ArrayChunk&& chunk) {
  Slot* s = Find(name);
  if (s == nullptr) {
    std::vector<std::string> fields;
    for (const Slot& a : arrays_) {
      fields.push_back(absl::StrCat(a.expected.field, " (", a.expected.name, ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        name_field_, " must be one of ", absl::StrJoin(fields, ", "), "; got ", name));
  }
  FRESNEL_ASSIGN_OR_RETURN(
      s->complete, s->assembler.Add(std::move(chunk), s->expected.field, s->expected.max_bytes));
  s->received = true;
  return absl::OkStatus();
}

bool ChunkedReader::Received(int name) const {
  const Slot* s = Find(name);
  return s != nullptr && s->received;
}

absl::StatusOr<std::optional<HostArray>> ChunkedReader::Take(int name) {
  Slot* s = Find(name);
  if (s == nullptr || !s->received) return std::optional<HostArray>();
  if (!s->complete) {
    return absl::InvalidArgumentError(
        absl::StrCat(s->expected.field, ": the upload ended before the chunk marked last"));
  }
  FRESNEL_ASSIGN_OR_RETURN(HostArray a, s->assembler.Take(s->expected.field));
  return std::optional<HostArray>(std::move(a));
}

}  // namespace fresnel::server
