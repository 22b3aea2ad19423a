// Client-given ids in messages: a client may send anything, so an id is echoed in a status
// message cut to kMaxEchoedId characters (a 64 KiB id echoed whole made the error itself too
// large for gRPC's metadata, and the client saw that instead of NOT_FOUND).
#pragma once

#include <cstddef>
#include <string>

namespace fresnel::server {

inline constexpr size_t kMaxEchoedId = 96;

inline std::string EchoId(const std::string& id) {
  return id.size() <= kMaxEchoedId ? id : id.substr(0, kMaxEchoedId) + "...";
}

}  // namespace fresnel::server
