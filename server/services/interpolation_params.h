// Proto -> fresnel::interp conversion for the interpolation service: filters, windows, modes,
// and the whole-request parsing shared by the unary and streaming calls.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "fresnel/interp/interp.h"
#include "fresnel/v1/array_convert.h"
#include "fresnel/v1/interpolation.pb.h"

namespace fresnel::server {

absl::StatusOr<interp::PadMode> PadModeFromProto(v1::PadMode mode, absl::string_view field);
absl::StatusOr<interp::WindowSpec> WindowFromProto(v1::Window window, double kaiser_beta,
                                                   interp::Window unspecified,
                                                   absl::string_view field);
// A 1-D float32/float64/complex64/complex128 NdArray as double taps.
struct ProtoTaps {
  std::vector<double> real;
  std::vector<double> imag;  // empty for real dtypes
  DType dtype = DType::kFloat64;
};
// Taps whose `shm` names a region are copied out of it through `regions` (the caller's host
// regions); without a resolver such taps are INVALID_ARGUMENT naming `field`.shm.
absl::StatusOr<ProtoTaps> TapsFromProto(const v1::NdArray& taps, absl::string_view field,
                                        const ShmResolver& regions = ShmResolver());
absl::StatusOr<interp::DTypeRule> DTypeRuleFromProto(v1::DTypeRule rule);
// gain * firwin(numtaps, cutoff, window).
absl::StatusOr<std::vector<double>> TapsFromDesign(const v1::FirwinDesign& design,
                                                   const interp::Limits& limits);

struct UpfirdnCall {
  std::vector<double> taps;
  interp::UpfirdnOptions options;
};
// Everything but x (validated later together with x). `regions`: where taps naming a region are
// read from.
absl::StatusOr<UpfirdnCall> ParseUpfirdn(const v1::UpfirdnRequest& request,
                                         const interp::Limits& limits,
                                         const ShmResolver& regions = ShmResolver());
absl::StatusOr<interp::ResamplePolyOptions> ParseResamplePoly(
    const v1::ResamplePolyRequest& request, const ShmResolver& regions = ShmResolver());
// ResampleRequest's options (window by name or values, domain); the rest is ValidateResample's.
absl::StatusOr<interp::ResampleOptions> ParseResample(const v1::ResampleRequest& request);

}  // namespace fresnel::server
