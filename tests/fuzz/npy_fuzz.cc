// fresnel::ParseNpy (io/src/npy.cc): any bytes as a .npy file; a parsed array must
// serialise and parse back to the same shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fresnel/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto a = fresnel::ParseNpy(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!a.ok()) return 0;
  auto b = fresnel::ParseNpy(fresnel::SerializeNpy(*a));
  if (!b.ok() || b->shape() != a->shape() || b->bytes() != a->bytes()) std::abort();
  return 0;
}
