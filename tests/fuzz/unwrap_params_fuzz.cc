// UnwrapService request parsing (server/services/unwrap_params.cc): the bytes are an
// UnwrapRequest with its arrays inline, parsed and validated by ParseUnwrap as the Unwrap call
// does; the sizes placement uses are computed, and a small valid request is run on the CPU.
#include <cstddef>
#include <cstdint>

#include "fresnel/core/device.h"
#include "server/services/unwrap_params.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fresnel;
  v1::UnwrapRequest request;
  if (!fuzz::ParseMessage(data, size, &request)) return 0;
  unwrap::Limits limits;
  limits.max_side = 1024;
  limits.max_pixels = 1 << 16;
  auto in = server::ParseUnwrap(&request, limits);
  if (!in.ok()) return 0;
  (void)in->InputBytes();
  (void)in->OutputBytes();
  (void)in->DeviceBytes();
  (void)in->Fingerprint();
  if (in->rows() * in->cols() <= 4096) {
    StageTimes times;
    (void)server::RunUnwrap(Device::Cpu(), *in, &times, {});
  }
  return 0;
}
