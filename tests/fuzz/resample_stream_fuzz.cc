// The ResampleStream state machine (server/services/interpolation_service.cc, ResampleStreamCall):
// a sequence of ResampleStreamRequest messages (fuzz_util.h SplitMessages) driven through the
// parts the reactor calls, in the reactor's order: the first message's config (ParseUpfirdn /
// ParseResamplePoly, StreamingResampler::For*), then chunks (FromProto, Push on the CPU) until
// `end` (Finish). The reactor's own transitions live in an anonymous class bound to gRPC, so the
// harness repeats them; an unparsable message ends the stream with an error, as there.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fresnel/core/device.h"
#include "fresnel/interp/interp.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/interpolation.pb.h"
#include "server/services/interpolation_params.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace fresnel;

absl::StatusOr<interp::StreamingResampler> Configure(const v1::ResampleStreamConfig& config,
                                                     const interp::Limits& limits) {
  if (config.op_case() == v1::ResampleStreamConfig::kUpfirdn) {
    auto call = server::ParseUpfirdn(config.upfirdn(), limits);
    if (!call.ok()) return call.status();
    const v1::NdArray& x = config.upfirdn().x();
    auto dtype = FromProto(x.dtype(), "config.upfirdn.x");
    if (!dtype.ok()) return dtype.status();
    int64_t channels = x.shape_size() == 2 ? x.shape(0) : 1;
    return interp::StreamingResampler::ForUpfirdn(std::move(call->taps), call->options, channels,
                                                  *dtype, limits);
  }
  if (config.op_case() == v1::ResampleStreamConfig::kResamplePoly) {
    auto options = server::ParseResamplePoly(config.resample_poly());
    if (!options.ok()) return options.status();
    const v1::NdArray& x = config.resample_poly().x();
    auto dtype = FromProto(x.dtype(), "config.resample_poly.x");
    if (!dtype.ok()) return dtype.status();
    int64_t channels = x.shape_size() == 2 ? x.shape(0) : 1;
    return interp::StreamingResampler::ForResamplePoly(*options, channels, *dtype, limits);
  }
  return absl::InvalidArgumentError("config: set upfirdn or resample_poly");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  interp::Limits limits;
  limits.max_rate = 64;
  limits.max_taps = 4096;
  limits.max_output_samples = 1 << 16;
  const Device cpu = Device::Cpu();
  std::optional<interp::StreamingResampler> resampler;
  for (absl::string_view bytes : fuzz::SplitMessages(data, size, 32)) {
    v1::ResampleStreamRequest request;
    if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 0;
    if (!resampler) {
      if (request.msg_case() != v1::ResampleStreamRequest::kConfig) return 0;
      auto r = Configure(request.config(), limits);
      if (!r.ok()) return 0;
      resampler.emplace(*std::move(r));
    } else if (request.msg_case() == v1::ResampleStreamRequest::kConfig) {
      return 0;
    } else if (request.msg_case() == v1::ResampleStreamRequest::kChunk) {
      auto chunk = FromProto(std::move(*request.mutable_chunk()), "chunk");
      if (!chunk.ok()) return 0;
      if (!resampler->Push(cpu, *chunk).ok()) return 0;
    } else if (!request.end()) {
      return 0;
    }
    if (request.end()) {
      (void)resampler->Finish(cpu);
      // After Finish every call must fail, never crash.
      (void)resampler->Finish(cpu);
      return 0;
    }
  }
  if (resampler) (void)resampler->Finish(cpu);  // half-close without `end`
  return 0;
}
