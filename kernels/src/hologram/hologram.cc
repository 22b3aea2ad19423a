// Validation and device dispatch of the hologram entry points, the host-side outputs of the CPU
// path, and the comparison metrics.
#include "fresnel/hologram/hologram.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "hologram/hologram_internal.h"

namespace fresnel::hologram {
namespace {

using internal::PreparedPoints;

using internal::kMaxAmplitude;
using internal::kMaxCoordinateM;

// Index of the first NaN or infinity among n values, or -1.
template <class T>
int64_t FirstNonFinite(const T* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return i;
  }
  return -1;
}

constexpr double kMaxLengthM = 1.0;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status CheckPositiveLength(absl::string_view field, double v, double max) {
  if (!std::isfinite(v) || v <= 0 || v > max) {
    return Invalid(field, absl::StrCat("must be positive, finite and at most ", max, " m, got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(absl::string_view field, int64_t v, int64_t max) {
  if (v < 1 || v > max) return Invalid(field, absl::StrCat("must be in [1, ", max, "], got ", v));
  return absl::OkStatus();
}

absl::Status ValidateAsmOptions(const AsmOptions& o, absl::string_view prefix) {
  FRESNEL_RETURN_IF_ERROR(CheckPositiveLength(absl::StrCat(prefix, "pitch_m"), o.pitch_m, kMaxLengthM));
  FRESNEL_RETURN_IF_ERROR(
      CheckPositiveLength(absl::StrCat(prefix, "wavelength_m"), o.wavelength_m, kMaxLengthM));
  FRESNEL_RETURN_IF_ERROR(
      CheckPositiveLength(absl::StrCat(prefix, "depth_m"), o.depth_m, kMaxCoordinateM));
  return absl::OkStatus();
}

// complex64 / amplitude / phase outputs of a complex128 field.
void FillOutputs(const std::vector<std::complex<double>>& field, const HologramOptions& options,
                 HologramResult* result) {
  const int64_t n = static_cast<int64_t>(field.size());
  const std::vector<int64_t> shape = {options.height, options.width};
  if (options.outputs.field) {
    result->field = HostArray(DType::kComplex64, shape);
    auto* out = result->field.data<std::complex<float>>();
    for (int64_t i = 0; i < n; ++i) out[i] = std::complex<float>(field[i]);
  }
  if (options.outputs.phase) {
    result->phase = HostArray(DType::kUint8, shape);
    auto* out = result->phase.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = internal::PhaseByte(field[i].real(), field[i].imag());
  }
  if (options.outputs.amplitude) {
    result->amplitude = HostArray(DType::kFloat32, shape);
    auto* out = result->amplitude.data<float>();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::abs(field[i]));
  }
}

// exp(i·phase) of the phase-only hologram, with the phase quantised as in the uint8 output.
std::vector<std::complex<double>> PhaseOnly(const std::vector<std::complex<double>>& field) {
  std::vector<std::complex<double>> out(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    const double k = internal::PhaseByte(field[i].real(), field[i].imag());
    out[i] = std::polar(1.0, 2.0 * internal::kPi * k / 256.0);
  }
  return out;
}

}  // namespace

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kReference: return "reference";
    case Algorithm::kTriangular: return "triangular";
    case Algorithm::kPiecewise: return "piecewise";
    case Algorithm::kTensor: return "tensor";
  }
  return "?";
}

absl::StatusOr<Algorithm> AlgorithmFromName(absl::string_view name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kReference, Algorithm::kTriangular,
                      Algorithm::kPiecewise, Algorithm::kTensor}) {
    if (name == AlgorithmName(a)) return a;
  }
  return Invalid("algorithm", absl::StrCat("unknown algorithm \"", name,
                                           "\" (auto, reference, triangular, piecewise, tensor)"));
}

const char* TensorPrecisionName(TensorPrecision precision) {
  switch (precision) {
    case TensorPrecision::kAuto: return "auto";
    case TensorPrecision::kInt8: return "int8";
    case TensorPrecision::kFp16: return "fp16";
    case TensorPrecision::kBf16: return "bf16";
    case TensorPrecision::kTf32: return "tf32";
  }
  return "?";
}

absl::StatusOr<TensorPrecision> TensorPrecisionFromName(absl::string_view name) {
  for (TensorPrecision p : {TensorPrecision::kAuto, TensorPrecision::kInt8, TensorPrecision::kFp16,
                            TensorPrecision::kBf16, TensorPrecision::kTf32}) {
    if (name == TensorPrecisionName(p)) return p;
  }
  return Invalid("tensor_precision",
                 absl::StrCat("unknown precision \"", name, "\" (auto, int8, fp16, bf16, tf32)"));
}

double ExpectedTensorSnrDb(TensorPrecision precision) {
  // Design values under the lowest hologram SNR measured on the H200 (docs/hologram.md): a
  // 3000-point random-phase image cloud gave int8 41.0 dB (36.9 with merged columns) and fp16
  // 68.8 dB, below the 48-53 / 76 dB that host simulation of random clouds had suggested.
  // bf16 has int8's 8 significant bits; tf32 has fp16's 11.
  switch (precision) {
    case TensorPrecision::kInt8: return 36;
    case TensorPrecision::kBf16: return 36;
    case TensorPrecision::kFp16: return 65;
    case TensorPrecision::kTf32: return 65;
    case TensorPrecision::kAuto: return 36;
  }
  return 0;
}

absl::Status ValidateOptions(const HologramOptions& options, const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(CheckSize("width", options.width, limits.max_width));
  FRESNEL_RETURN_IF_ERROR(CheckSize("height", options.height, limits.max_height));
  if (options.width * options.height > limits.max_pixels) {
    return Invalid("width * height", absl::StrCat(options.width * options.height,
                                                  " pixels exceed the limit of ", limits.max_pixels));
  }
  FRESNEL_RETURN_IF_ERROR(CheckPositiveLength("pitch_m", options.pitch_m, kMaxLengthM));
  FRESNEL_RETURN_IF_ERROR(CheckPositiveLength("wavelength_m", options.wavelength_m, kMaxLengthM));
  if (!std::isfinite(options.min_snr_db)) {
    return Invalid("min_snr_db", absl::StrCat("must be finite, got ", options.min_snr_db));
  }
  if (options.lateral_subdivision < 1 || options.lateral_subdivision > 256) {
    return Invalid("lateral_subdivision",
                   absl::StrCat("must be in [1, 256], got ", options.lateral_subdivision));
  }
  if (options.max_device_workspace_bytes < 0) {
    return Invalid("max_device_workspace_bytes",
                   absl::StrCat("must be >= 0, got ", options.max_device_workspace_bytes));
  }
  if (options.reconstruction.enabled) {
    FRESNEL_RETURN_IF_ERROR(CheckPositiveLength("reconstruction.depth_m",
                                                options.reconstruction.depth_m, kMaxCoordinateM));
  }
  return absl::OkStatus();
}

namespace internal {

absl::Status CheckPoint(const Point& p, int64_t index) {
  auto field = [index](const char* name) { return absl::StrCat("points[", index, "].", name); };
  if (!std::isfinite(p.x_m) || std::abs(p.x_m) > kMaxCoordinateM) {
    return Invalid(field("x_m"), absl::StrCat("must be finite with |x| <= ", kMaxCoordinateM,
                                              " m, got ", p.x_m));
  }
  if (!std::isfinite(p.y_m) || std::abs(p.y_m) > kMaxCoordinateM) {
    return Invalid(field("y_m"), absl::StrCat("must be finite with |y| <= ", kMaxCoordinateM,
                                              " m, got ", p.y_m));
  }
  if (!std::isfinite(p.z_m) || p.z_m <= 0 || p.z_m > kMaxCoordinateM) {
    return Invalid(field("z_m"), absl::StrCat("must be positive (in front of the hologram), "
                                              "finite and at most ", kMaxCoordinateM,
                                              " m, got ", p.z_m));
  }
  if (!std::isfinite(p.amplitude) || p.amplitude < 0 || p.amplitude > kMaxAmplitude) {
    return Invalid(field("amplitude"), absl::StrCat("must be finite, >= 0 and at most ",
                                                    kMaxAmplitude, ", got ", p.amplitude));
  }
  if (!std::isfinite(p.phase_rad)) {
    return Invalid(field("phase_rad"), absl::StrCat("must be finite, got ", p.phase_rad));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status ValidateHologram(const PointCloud& points, const HologramOptions& options,
                              const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(ValidateOptions(options, limits));
  if (points.empty()) return Invalid("points", "the point cloud is empty");
  if (static_cast<int64_t>(points.size()) > limits.max_points) {
    return Invalid("points", absl::StrCat(points.size(), " points exceed the limit of ",
                                          limits.max_points));
  }
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    if (!internal::PointOk(p.x_m, p.y_m, p.z_m, p.amplitude, p.phase_rad)) {
      return internal::CheckPoint(p, static_cast<int64_t>(i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HologramResult> ComputeHologram(const Device& device, const PointCloud& points,
                                               const HologramOptions& options, StageTimes* times,
                                               const Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(ValidateOptions(options, limits));
  FRESNEL_ASSIGN_OR_RETURN(PreparedCloud prepared, PrepareCloud(points, options, limits));
  return ComputeHologram(device, prepared, options, times);
}

absl::StatusOr<HologramResult> ComputeHologram(const Device& device, const PreparedCloud& cloud,
                                               const HologramOptions& options, StageTimes* times) {
  if (cloud.size() == 0) return Invalid("points", "the point cloud is empty");
  const PreparedPoints& prepared = internal::CloudAccess::Points(cloud);
  if (!internal::SameGeometry(prepared, options)) {
    return Invalid("points", "the prepared cloud was built for another hologram geometry "
                             "(width, height, pitch_m, wavelength_m or alias)");
  }
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  const Algorithm algorithm = internal::ResolveAlgorithm(device, options);

  if (device.kind == DeviceKind::kCuda) {
#if FRESNEL_WITH_CUDA
    return internal::HologramCuda(device, prepared, options, algorithm,
                                  internal::ResolvePrecision(options), times);
#else
    return absl::FailedPreconditionError("this build of Fresnel has no CUDA support");
#endif
  }

  if (algorithm == Algorithm::kTensor) {
    return Invalid("algorithm", "\"tensor\" needs a CUDA device (tensor cores)");
  }
  const auto start = std::chrono::steady_clock::now();
  FRESNEL_ASSIGN_OR_RETURN(std::vector<std::complex<double>> field,
                           internal::HologramCpu(prepared, options, algorithm));
  HologramResult result;
  result.algorithm = algorithm;
  result.point_batches = 1;
  FillOutputs(field, options, &result);
  if (options.reconstruction.enabled) {
    AsmOptions asm_options{options.pitch_m, options.wavelength_m, options.reconstruction.depth_m,
                           options.reconstruction.source};
    Reconstruction r = internal::ReconstructAsmCpu(
        options.reconstruction.source == ReconstructionSource::kPhaseOnly ? PhaseOnly(field)
                                                                          : field,
        options.height, options.width, asm_options);
    result.reconstruction = std::move(r.image);
    result.reconstruction_scale = r.scale;
  }
  if (times != nullptr) {
    *times = StageTimes{};
    times->compute_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return result;
}

int64_t OutputBytes(const HologramOptions& o) {
  const int64_t pixels = o.width * o.height;
  int64_t per_pixel = 0;
  if (o.outputs.field) per_pixel += 8;
  if (o.outputs.phase) per_pixel += 1;
  if (o.outputs.amplitude) per_pixel += 4;
  if (o.reconstruction.enabled) per_pixel += 1;
  return pixels * per_pixel;
}

int64_t DeviceBytes(const HologramOptions& o, int64_t points) {
  // The matrix operands (TA/PA and tensor: about (width + height) bytes per point per pass) are
  // batched to fit the free device memory, so only this much of them counts: enough to keep a
  // GPU from being picked when it cannot hold even the field.
  constexpr int64_t kOperandBudgetBytes = int64_t{512} << 20;
  // Per point: the uploaded arrays of PreparedPoints (five doubles, four int32 pixel bounds), the
  // tables the tensor path builds from them on the device (two 24-byte axis polynomials and a
  // float amplitude), and merged groups' member copies (three doubles, two bounds).
  constexpr int64_t kBytesPerPoint = (5 * 8 + 4 * 4) + (2 * 24 + 4) + (3 * 8 + 2 * 4);
  const int64_t pixels = o.width * o.height;
  // The float field accumulator (complex64) and the outputs.
  int64_t bytes = pixels * 8 + OutputBytes(o);
  // ASM: the spectrum and the propagated field (complex64 each) plus the cuFFT work area.
  if (o.reconstruction.enabled) bytes += pixels * 8 * 3;
  bytes += points * kBytesPerPoint;
  bytes += std::min<int64_t>(kOperandBudgetBytes, points * (o.width + o.height));
  return bytes;
}

int64_t ReconstructMaxFieldBytes(const Limits& limits) {
  return limits.max_pixels * static_cast<int64_t>(DTypeSize(DType::kComplex128));
}

absl::StatusOr<Reconstruction> ReconstructAsm(const Device& device, const HostArray& field,
                                              const AsmOptions& options, StageTimes* times,
                                              const Limits& limits) {
  if (field.ndim() != 2) {
    return Invalid("field", absl::StrCat("must be 2-D [height, width], got shape ",
                                         ShapeString(field.shape())));
  }
  if (field.dtype() != DType::kComplex64 && field.dtype() != DType::kComplex128) {
    return Invalid("field", absl::StrCat("must be complex64 or complex128, got ",
                                         DTypeName(field.dtype())));
  }
  FRESNEL_RETURN_IF_ERROR(CheckSize("field.shape[0]", field.dim(0), limits.max_height));
  FRESNEL_RETURN_IF_ERROR(CheckSize("field.shape[1]", field.dim(1), limits.max_width));
  if (field.dim(0) * field.dim(1) > limits.max_pixels) {
    return Invalid("field", absl::StrCat(field.size(), " pixels exceed the limit of ",
                                         limits.max_pixels));
  }
  FRESNEL_RETURN_IF_ERROR(ValidateAsmOptions(options, ""));
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  // A NaN or infinite sample would spread over the whole image through the FFT and come back as
  // an "OK" black picture.
  const int64_t bad = field.dtype() == DType::kComplex64
                          ? FirstNonFinite(reinterpret_cast<const float*>(field.bytes().data()),
                                           field.size() * 2)
                          : FirstNonFinite(reinterpret_cast<const double*>(field.bytes().data()),
                                           field.size() * 2);
  if (bad >= 0) return Invalid("field", absl::StrCat("sample ", bad / 2, " is not finite"));

  if (device.kind == DeviceKind::kCuda) {
#if FRESNEL_WITH_CUDA
    if (field.dtype() == DType::kComplex64) {
      return internal::ReconstructAsmCuda(device, field, options, times);
    }
    HostArray f32(DType::kComplex64, field.shape());
    for (int64_t i = 0; i < field.size(); ++i) {
      f32.data<std::complex<float>>()[i] =
          std::complex<float>(field.data<std::complex<double>>()[i]);
    }
    return internal::ReconstructAsmCuda(device, f32, options, times);
#else
    return absl::FailedPreconditionError("this build of Fresnel has no CUDA support");
#endif
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::complex<double>> values(static_cast<size_t>(field.size()));
  for (int64_t i = 0; i < field.size(); ++i) {
    values[i] = field.dtype() == DType::kComplex64
                    ? std::complex<double>(field.data<std::complex<float>>()[i])
                    : field.data<std::complex<double>>()[i];
  }
  if (options.source == ReconstructionSource::kPhaseOnly) values = PhaseOnly(values);
  Reconstruction r = internal::ReconstructAsmCpu(values, field.dim(0), field.dim(1), options);
  if (times != nullptr) {
    *times = StageTimes{};
    times->compute_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return r;
}

double Psnr8(const HostArray& image, const HostArray& reference) {
  if (image.dtype() != DType::kUint8 || reference.dtype() != DType::kUint8 ||
      image.shape() != reference.shape()) {
    return -1;
  }
  const uint8_t* a = image.data<uint8_t>();
  const uint8_t* b = reference.data<uint8_t>();
  double sum = 0;
  for (int64_t i = 0; i < image.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  if (sum == 0) return std::numeric_limits<double>::infinity();
  const double mse = sum / static_cast<double>(image.size());
  return 10.0 * std::log10(255.0 * 255.0 / mse);
}

double SnrDb(const HostArray& x, const HostArray& reference) {
  if (x.shape() != reference.shape()) return -std::numeric_limits<double>::infinity();
  auto value = [](const HostArray& a, int64_t i) -> std::complex<double> {
    switch (a.dtype()) {
      case DType::kFloat32: return a.data<float>()[i];
      case DType::kFloat64: return a.data<double>()[i];
      case DType::kComplex64: return std::complex<double>(a.data<std::complex<float>>()[i]);
      case DType::kComplex128: return a.data<std::complex<double>>()[i];
      case DType::kUint8: return a.data<uint8_t>()[i];
      case DType::kUint16: return a.data<uint16_t>()[i];
      case DType::kInt16: return a.data<int16_t>()[i];
      case DType::kInt32: return a.data<int32_t>()[i];
    }
    return 0;
  };
  double signal = 0, noise = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    const std::complex<double> r = value(reference, i);
    signal += std::norm(r);
    noise += std::norm(value(x, i) - r);
  }
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

}  // namespace fresnel::hologram
