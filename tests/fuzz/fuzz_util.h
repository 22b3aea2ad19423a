// Helpers shared by the libFuzzer harnesses (tests/fuzz/*_fuzz.cc): protobuf messages and message
// sequences decoded from the fuzz bytes, and a scratch file for readers that take a path.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fresnel::fuzz {

// The bytes as one protobuf message; false (the input is ignored) when they do not parse.
template <class Message>
bool ParseMessage(const uint8_t* data, size_t size, Message* out) {
  return out->ParseFromArray(data, static_cast<int>(size));
}

// A stream of messages: each is a 2-byte little-endian length followed by that many bytes (the
// last one takes what is left when the length runs past the end). At most `max_messages`.
inline std::vector<absl::string_view> SplitMessages(const uint8_t* data, size_t size,
                                                    size_t max_messages = 64) {
  std::vector<absl::string_view> out;
  size_t pos = 0;
  while (pos + 2 <= size && out.size() < max_messages) {
    size_t n = data[pos] | (size_t{data[pos + 1]} << 8);
    pos += 2;
    if (n > size - pos) n = size - pos;
    out.emplace_back(reinterpret_cast<const char*>(data + pos), n);
    pos += n;
  }
  return out;
}

// A file in $TMPDIR (or /tmp) named fresnel-fuzz-<pid><suffix>, rewritten for each input: the
// readers under test choose their format by extension and read through the C library.
class ScratchFile {
 public:
  explicit ScratchFile(const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/fresnel-fuzz-" +
            std::to_string(getpid()) + suffix;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  // Replaces the file's contents; false when it cannot be written.
  bool Write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) return false;
    const bool ok = std::fwrite(data, 1, size, f) == size;
    return std::fclose(f) == 0 && ok;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fresnel::fuzz
