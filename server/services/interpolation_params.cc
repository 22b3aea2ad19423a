#include "server/services/interpolation_params.h"

#include <complex>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel::server {

absl::StatusOr<interp::PadMode> PadModeFromProto(v1::PadMode mode, absl::string_view field) {
  switch (mode) {
    case v1::PAD_CONSTANT: return interp::PadMode::kConstant;
    case v1::PAD_SYMMETRIC: return interp::PadMode::kSymmetric;
    case v1::PAD_REFLECT: return interp::PadMode::kReflect;
    case v1::PAD_EDGE: return interp::PadMode::kEdge;
    case v1::PAD_WRAP: return interp::PadMode::kWrap;
    case v1::PAD_SMOOTH: return interp::PadMode::kSmooth;
    case v1::PAD_ANTISYMMETRIC: return interp::PadMode::kAntisymmetric;
    case v1::PAD_ANTIREFLECT: return interp::PadMode::kAntireflect;
    case v1::PAD_LINE: return interp::PadMode::kLine;
    case v1::PAD_MEAN: return interp::PadMode::kMean;
    case v1::PAD_MEDIAN: return interp::PadMode::kMedian;
    case v1::PAD_MAXIMUM: return interp::PadMode::kMaximum;
    case v1::PAD_MINIMUM: return interp::PadMode::kMinimum;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown pad mode ", static_cast<int>(mode)));
  }
}

absl::StatusOr<interp::WindowSpec> WindowFromProto(v1::Window window, double kaiser_beta,
                                                   interp::Window unspecified,
                                                   absl::string_view field) {
  interp::WindowSpec spec;
  spec.kaiser_beta = kaiser_beta == 0 ? 5.0 : kaiser_beta;
  switch (window) {
    case v1::WINDOW_UNSPECIFIED: spec.type = unspecified; break;
    case v1::BOXCAR: spec.type = interp::Window::kBoxcar; break;
    case v1::HAMMING: spec.type = interp::Window::kHamming; break;
    case v1::HANN: spec.type = interp::Window::kHann; break;
    case v1::BLACKMAN: spec.type = interp::Window::kBlackman; break;
    case v1::KAISER: spec.type = interp::Window::kKaiser; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown window ", static_cast<int>(window)));
  }
  if (!(spec.kaiser_beta >= 0) || spec.kaiser_beta > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("kaiser_beta must be in [0, 1000], got ", kaiser_beta));
  }
  return spec;
}

absl::StatusOr<ProtoTaps> TapsFromProto(const v1::NdArray& taps, absl::string_view field,
                                        const ShmResolver& regions) {
  // Taps in a region: one copy out of it (a copy of the small message first, since the request
  // is const).
  FRESNEL_ASSIGN_OR_RETURN(HostArray a, taps.has_shm() && regions
                                            ? FromProto(v1::NdArray(taps), field, regions)
                                            : FromProto(taps, field));
  if (a.ndim() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape must be 1-D, got ", ShapeString(a.shape())));
  }
  ProtoTaps out;
  out.dtype = a.dtype();
  const size_t n = static_cast<size_t>(a.size());
  out.real.resize(n);
  switch (a.dtype()) {
    case DType::kFloat32:
      for (size_t i = 0; i < n; ++i) out.real[i] = a.data<float>()[i];
      break;
    case DType::kFloat64:
      for (size_t i = 0; i < n; ++i) out.real[i] = a.data<double>()[i];
      break;
    case DType::kComplex64:
      out.imag.resize(n);
      for (size_t i = 0; i < n; ++i) {
        out.real[i] = a.data<std::complex<float>>()[i].real();
        out.imag[i] = a.data<std::complex<float>>()[i].imag();
      }
      break;
    case DType::kComplex128:
      out.imag.resize(n);
      for (size_t i = 0; i < n; ++i) {
        out.real[i] = a.data<std::complex<double>>()[i].real();
        out.imag[i] = a.data<std::complex<double>>()[i].imag();
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype must be float32, float64, complex64 or complex128, got ",
                       DTypeName(a.dtype())));
  }
  return out;
}

absl::StatusOr<interp::DTypeRule> DTypeRuleFromProto(v1::DTypeRule rule) {
  switch (rule) {
    case v1::DTYPE_KEEP_PRECISION: return interp::DTypeRule::kKeepPrecision;
    case v1::DTYPE_SCIPY: return interp::DTypeRule::kSciPy;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype_rule: unknown rule ", static_cast<int>(rule)));
  }
}

absl::StatusOr<std::vector<double>> TapsFromDesign(const v1::FirwinDesign& design,
                                                   const interp::Limits& limits) {
  if (design.numtaps() <= 0 || design.numtaps() > limits.max_taps) {
    return absl::InvalidArgumentError(absl::StrCat("design.numtaps must be in [1, ",
                                                   limits.max_taps, "], got ", design.numtaps()));
  }
  interp::WindowSpec window;
  if (!design.window_name().empty()) {
    FRESNEL_ASSIGN_OR_RETURN(
        window, interp::WindowFromName(design.window_name(),
                                       {design.window_params().begin(),
                                        design.window_params().end()},
                                       "design.window_name"));
  } else {
    FRESNEL_ASSIGN_OR_RETURN(window, WindowFromProto(design.window(), design.kaiser_beta(),
                                                     interp::Window::kHamming, "design.window"));
  }
  FRESNEL_ASSIGN_OR_RETURN(std::vector<double> taps,
                           interp::Firwin(design.numtaps(), design.cutoff(), window));
  double gain = design.gain() == 0 ? 1.0 : design.gain();
  for (double& t : taps) t *= gain;
  return taps;
}

absl::StatusOr<UpfirdnCall> ParseUpfirdn(const v1::UpfirdnRequest& request,
                                         const interp::Limits& limits,
                                         const ShmResolver& regions) {
  UpfirdnCall call;
  switch (request.filter_case()) {
    case v1::UpfirdnRequest::kTaps: {
      FRESNEL_ASSIGN_OR_RETURN(ProtoTaps taps, TapsFromProto(request.taps(), "taps", regions));
      call.taps = std::move(taps.real);
      call.options.taps_imag = std::move(taps.imag);
      call.options.taps_dtype = taps.dtype;
      break;
    }
    case v1::UpfirdnRequest::kDesign: {
      FRESNEL_ASSIGN_OR_RETURN(call.taps, TapsFromDesign(request.design(), limits));
      break;
    }
    default:
      return absl::InvalidArgumentError("taps: a filter is required (taps or design)");
  }
  call.options.up = request.up() == 0 ? 1 : request.up();
  call.options.down = request.down() == 0 ? 1 : request.down();
  FRESNEL_ASSIGN_OR_RETURN(call.options.mode, PadModeFromProto(request.mode(), "mode"));
  call.options.cval = request.cval();
  FRESNEL_ASSIGN_OR_RETURN(call.options.dtype_rule, DTypeRuleFromProto(request.dtype_rule()));
  call.options.axis = request.has_axis() ? request.axis() : -1;
  return call;
}

namespace {

// A request's get_window name and tuple parameters (`window_name`, `window_params`).
template <class Request>
absl::StatusOr<interp::WindowSpec> NamedWindow(const Request& request) {
  return interp::WindowFromName(request.window_name(),
                                {request.window_params().begin(), request.window_params().end()},
                                "window_name");
}

}  // namespace

absl::StatusOr<interp::ResamplePolyOptions> ParseResamplePoly(
    const v1::ResamplePolyRequest& request, const ShmResolver& regions) {
  interp::ResamplePolyOptions o;
  o.up = request.up();
  o.down = request.down();
  if (request.has_taps() && request.taps().shape_size() > 0) {
    FRESNEL_ASSIGN_OR_RETURN(ProtoTaps taps, TapsFromProto(request.taps(), "taps", regions));
    o.taps = std::move(taps.real);
    o.taps_imag = std::move(taps.imag);
    o.taps_dtype = taps.dtype;
  }
  if (!request.window_name().empty()) {
    FRESNEL_ASSIGN_OR_RETURN(o.window, NamedWindow(request));
  } else {
    FRESNEL_ASSIGN_OR_RETURN(o.window, WindowFromProto(request.window(), request.kaiser_beta(),
                                                       interp::Window::kKaiser, "window"));
  }
  FRESNEL_ASSIGN_OR_RETURN(o.padtype, PadModeFromProto(request.padtype(), "padtype"));
  o.cval = request.cval();
  FRESNEL_ASSIGN_OR_RETURN(o.dtype_rule, DTypeRuleFromProto(request.dtype_rule()));
  o.axis = request.has_axis() ? request.axis() : -1;
  return o;
}

absl::StatusOr<interp::ResampleOptions> ParseResample(const v1::ResampleRequest& request) {
  interp::ResampleOptions o;
  o.num = request.num();
  o.axis = request.has_axis() ? request.axis() : -1;
  o.freq_domain = request.freq_domain();
  o.window_values.assign(request.window_values().begin(), request.window_values().end());
  if (!request.window_name().empty()) {
    FRESNEL_ASSIGN_OR_RETURN(o.window, NamedWindow(request));
  } else if (!request.window_params().empty()) {
    return absl::InvalidArgumentError("window_params given without window_name");
  }
  return o;
}

}  // namespace fresnel::server
