// InterpolationService request parsing (server/services/interpolation_params.cc): the first byte
// picks the message, the rest is an UpfirdnRequest (even), a ResampleRequest (255, the FFT method
// with its window and domain) or a ResamplePolyRequest (other odd values). A request that
// parses and validates is run on the CPU when its output is small, as the service would.
#include <cstddef>
#include <cstdint>

#include "fresnel/core/device.h"
#include "fresnel/interp/interp.h"
#include "fresnel/v1/array_convert.h"
#include "server/services/interpolation_params.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// Small limits (the server's come from flags): keep each execution fast and bounded.
fresnel::interp::Limits FuzzLimits() {
  fresnel::interp::Limits limits;
  limits.max_rate = 64;
  limits.max_taps = 4096;
  limits.max_output_samples = 1 << 16;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fresnel;
  if (size < 1) return 0;
  const interp::Limits limits = FuzzLimits();
  if (data[0] == 255) {
    v1::ResampleRequest request;
    if (!fuzz::ParseMessage(data + 1, size - 1, &request)) return 0;
    auto options = server::ParseResample(request);
    if (!options.ok()) return 0;
    auto x = FromProto(request.x(), "x");
    if (!x.ok()) return 0;
    if (!interp::ValidateResample(*x, *options, limits).ok()) return 0;
    (void)interp::Resample(Device::Cpu(), *x, *options);
  } else if (data[0] % 2 == 0) {
    v1::UpfirdnRequest request;
    if (!fuzz::ParseMessage(data + 1, size - 1, &request)) return 0;
    auto call = server::ParseUpfirdn(request, limits);
    if (!call.ok()) return 0;
    auto x = FromProto(request.x(), "x");
    if (!x.ok()) return 0;
    if (!interp::ValidateUpfirdn(call->taps, *x, call->options, limits).ok()) return 0;
    (void)interp::Upfirdn(Device::Cpu(), call->taps, *x, call->options);
  } else {
    v1::ResamplePolyRequest request;
    if (!fuzz::ParseMessage(data + 1, size - 1, &request)) return 0;
    auto options = server::ParseResamplePoly(request);
    if (!options.ok()) return 0;
    auto x = FromProto(request.x(), "x");
    if (!x.ok()) return 0;
    if (!interp::ValidateResamplePoly(*x, *options, limits).ok()) return 0;
    (void)interp::ResamplePoly(Device::Cpu(), *x, *options);
  }
  return 0;
}
