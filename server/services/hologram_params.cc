#include "server/services/hologram_params.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/hologram/point_cloud.h"
#include "fresnel/v1/array_convert.h"

namespace fresnel::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::StatusOr<hologram::Algorithm> AlgorithmFromProto(v1::HologramAlgorithm a,
                                                       absl::string_view field) {
  switch (a) {
    case v1::HOLOGRAM_ALGORITHM_AUTO: return hologram::Algorithm::kAuto;
    case v1::HOLOGRAM_ALGORITHM_REFERENCE: return hologram::Algorithm::kReference;
    case v1::HOLOGRAM_ALGORITHM_TRIANGULAR: return hologram::Algorithm::kTriangular;
    case v1::HOLOGRAM_ALGORITHM_PIECEWISE: return hologram::Algorithm::kPiecewise;
    case v1::HOLOGRAM_ALGORITHM_TENSOR: return hologram::Algorithm::kTensor;
    default: break;
  }
  return Invalid(field, absl::StrCat("unknown algorithm value ", static_cast<int>(a)));
}

absl::StatusOr<hologram::TensorPrecision> PrecisionFromProto(v1::HologramTensorPrecision p,
                                                             absl::string_view field) {
  switch (p) {
    case v1::HOLOGRAM_TENSOR_PRECISION_AUTO: return hologram::TensorPrecision::kAuto;
    case v1::HOLOGRAM_TENSOR_PRECISION_INT8: return hologram::TensorPrecision::kInt8;
    case v1::HOLOGRAM_TENSOR_PRECISION_FP16: return hologram::TensorPrecision::kFp16;
    case v1::HOLOGRAM_TENSOR_PRECISION_BF16: return hologram::TensorPrecision::kBf16;
    case v1::HOLOGRAM_TENSOR_PRECISION_TF32: return hologram::TensorPrecision::kTf32;
    default: break;
  }
  return Invalid(field, absl::StrCat("unknown precision value ", static_cast<int>(p)));
}


}  // namespace

absl::StatusOr<hologram::ReconstructionSource> SourceFromProto(
    v1::HologramReconstructionSource source, absl::string_view field) {
  switch (source) {
    case v1::HOLOGRAM_RECONSTRUCTION_SOURCE_FIELD: return hologram::ReconstructionSource::kField;
    case v1::HOLOGRAM_RECONSTRUCTION_SOURCE_PHASE_ONLY:
      return hologram::ReconstructionSource::kPhaseOnly;
    default: break;
  }
  return Invalid(field, absl::StrCat("unknown source value ", static_cast<int>(source)));
}

absl::StatusOr<hologram::HologramOptions> ParseHologramConfig(const v1::HologramConfig& config,
                                                              const hologram::Limits& limits) {
  hologram::HologramOptions o;
  o.width = config.width();
  o.height = config.height();
  o.pitch_m = config.pitch_m();
  o.wavelength_m = config.wavelength_m();
  FRESNEL_ASSIGN_OR_RETURN(o.algorithm, AlgorithmFromProto(config.algorithm(), "algorithm"));
  switch (config.alias()) {
    case v1::HOLOGRAM_ALIAS_CLIP: o.alias = hologram::AliasPolicy::kClip; break;
    case v1::HOLOGRAM_ALIAS_NONE: o.alias = hologram::AliasPolicy::kNone; break;
    default:
      return Invalid("alias", absl::StrCat("unknown alias policy value ",
                                           static_cast<int>(config.alias())));
  }
  if (config.has_min_snr_db()) o.min_snr_db = config.min_snr_db();
  FRESNEL_ASSIGN_OR_RETURN(o.tensor_precision,
                           PrecisionFromProto(config.tensor_precision(), "tensor_precision"));
  o.reconstruction.enabled = config.has_reconstruction();
  if (o.reconstruction.enabled) {
    o.reconstruction.depth_m = config.reconstruction().depth_m();
    FRESNEL_ASSIGN_OR_RETURN(o.reconstruction.source,
                             SourceFromProto(config.reconstruction().source(),
                                             "reconstruction.source"));
  }
  const v1::HologramOutputs& out = config.outputs();
  o.outputs.field = out.field();
  o.outputs.phase = out.phase();
  o.outputs.amplitude = out.amplitude();
  if (!out.field() && !out.phase() && !out.amplitude() && !o.reconstruction.enabled) {
    o.outputs.field = true;
  }
  if (config.lateral_subdivision() < 0) {
    return Invalid("lateral_subdivision",
                   absl::StrCat("must be >= 0 (0 means 1), got ", config.lateral_subdivision()));
  }
  o.lateral_subdivision = config.lateral_subdivision() == 0 ? 1 : config.lateral_subdivision();
  if (config.max_chunk_bytes() < 0) {
    return Invalid("max_chunk_bytes",
                   absl::StrCat("must be >= 0 (0 = the server's choice), got ",
                                config.max_chunk_bytes()));
  }
  FRESNEL_RETURN_IF_ERROR(hologram::ValidateOptions(o, limits));
  return o;
}

absl::StatusOr<hologram::HologramOptions> ApplyOverrides(const hologram::HologramOptions& base,
                                                         const v1::HologramFrameOverrides& ov,
                                                         const hologram::Limits& limits) {
  hologram::HologramOptions o = base;
  if (ov.has_algorithm()) {
    FRESNEL_ASSIGN_OR_RETURN(o.algorithm, AlgorithmFromProto(ov.algorithm(), "overrides.algorithm"));
  }
  if (ov.has_tensor_precision()) {
    FRESNEL_ASSIGN_OR_RETURN(o.tensor_precision, PrecisionFromProto(ov.tensor_precision(),
                                                                     "overrides.tensor_precision"));
  }
  if (ov.has_min_snr_db()) o.min_snr_db = ov.min_snr_db();
  if (ov.has_reconstruction_depth_m()) {
    if (!o.reconstruction.enabled) {
      return Invalid("overrides.reconstruction_depth_m",
                     "the stream's config asks for no reconstruction (set config.reconstruction)");
    }
    o.reconstruction.depth_m = ov.reconstruction_depth_m();
  }
  if (ov.has_outputs()) {
    o.outputs.field = ov.outputs().field();
    o.outputs.phase = ov.outputs().phase();
    o.outputs.amplitude = ov.outputs().amplitude();
    if (!o.outputs.field && !o.outputs.phase && !o.outputs.amplitude && !o.reconstruction.enabled) {
      o.outputs.field = true;
    }
  }
  FRESNEL_RETURN_IF_ERROR(hologram::ValidateOptions(o, limits));
  return o;
}

std::vector<int64_t> OutputArrayBytes(const hologram::HologramOptions& options) {
  const int64_t pixels = options.width * options.height;
  std::vector<int64_t> bytes;
  if (options.outputs.field) bytes.push_back(pixels * 8);      // complex64
  if (options.outputs.phase) bytes.push_back(pixels);          // uint8
  if (options.outputs.amplitude) bytes.push_back(pixels * 4);  // float32
  if (options.reconstruction.enabled) bytes.push_back(pixels);  // uint8
  return bytes;
}

absl::Status CheckPointsShape(const v1::NdArray& points, const hologram::Limits& limits) {
  if (points.dtype() != v1::FLOAT32 && points.dtype() != v1::FLOAT64) {
    return Invalid("points", absl::StrCat("must be float32 or float64, got dtype ",
                                          v1::DType_Name(points.dtype())));
  }
  if (points.shape_size() != 2 || (points.shape(1) != 4 && points.shape(1) != 5)) {
    std::vector<int64_t> shape(points.shape().begin(), points.shape().end());
    return Invalid("points", absl::StrCat("must have shape [N, 4] (x_m, y_m, z_m, amplitude) or "
                                          "[N, 5] (+ phase_rad), got ", ShapeString(shape)));
  }
  const int64_t n = points.shape(0);
  if (n > limits.max_points) {
    return Invalid("points", absl::StrCat(n, " points exceed the limit of ", limits.max_points));
  }
  if (points.has_shm()) {
    return Invalid("points.shm", "this call does not accept shared-memory arrays; send the bytes "
                                 "in points.data");
  }
  std::vector<int64_t> shape = {n, points.shape(1)};
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("points.shape ", ShapeString(shape),
                                                   " is invalid (negative or overflowing)"));
  }
  const int64_t item = points.dtype() == v1::FLOAT32 ? 4 : 8;
  const int64_t want = n * points.shape(1) * item;
  if (static_cast<int64_t>(points.data().size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "points.data has ", points.data().size(), " bytes but shape ", ShapeString(shape), " of ",
        points.dtype() == v1::FLOAT32 ? "float32" : "float64", " needs ", want));
  }
  return absl::OkStatus();
}

absl::Status AppendPointsFromProto(const v1::NdArray& points, const hologram::Limits& limits,
                                   hologram::CloudBuilder* cloud) {
  FRESNEL_RETURN_IF_ERROR(CheckPointsShape(points, limits));
  return cloud->AppendRows(points.data().data(),
                           points.dtype() == v1::FLOAT32 ? DType::kFloat32 : DType::kFloat64,
                           points.shape(0), static_cast<int>(points.shape(1)));
}

absl::StatusOr<hologram::PointCloud> PointsFromProto(const v1::NdArray& points,
                                                     const hologram::Limits& limits) {
  FRESNEL_RETURN_IF_ERROR(CheckPointsShape(points, limits));
  const int64_t n = points.shape(0);
  const int64_t cols = points.shape(1);
  const char* bytes = points.data().data();
  hologram::PointCloud cloud(static_cast<size_t>(n));
  auto convert = [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < n; ++i) {
      T row[5] = {0, 0, 0, 0, 0};
      std::memcpy(row, bytes + i * cols * static_cast<int64_t>(sizeof(T)), cols * sizeof(T));
      cloud[static_cast<size_t>(i)] = hologram::Point{row[0], row[1], row[2], row[3], row[4]};
    }
  };
  if (points.dtype() == v1::FLOAT32) {
    convert(0.f);
  } else {
    convert(0.0);
  }
  return cloud;
}

absl::StatusOr<hologram::PointCloud> PointsFromImage(const v1::ImageSource& image,
                                                     const hologram::Limits& limits) {
  const v1::NdArray& img = image.image();
  if (img.dtype() != v1::UINT8 || img.shape_size() != 2) {
    std::vector<int64_t> shape(img.shape().begin(), img.shape().end());
    return Invalid("image.image", absl::StrCat("must be uint8 [rows, cols], got ",
                                               v1::DType_Name(img.dtype()), " ",
                                               ShapeString(shape)));
  }
  if (img.shape(0) < 1 || img.shape(1) < 1 ||
      img.shape(0) > limits.max_points / std::max<int64_t>(1, img.shape(1))) {
    return Invalid("image.image",
                   absl::StrCat("a ", img.shape(0), " x ", img.shape(1),
                                " image must be non-empty and have at most ", limits.max_points,
                                " pixels (one point each)"));
  }
  if (!std::isfinite(image.spacing_m()) || image.spacing_m() <= 0) {
    return Invalid("image.spacing_m",
                   absl::StrCat("must be positive and finite, got ", image.spacing_m()));
  }
  if (!std::isfinite(image.depth_m()) || image.depth_m() <= 0) {
    return Invalid("image.depth_m",
                   absl::StrCat("must be positive and finite, got ", image.depth_m()));
  }
  FRESNEL_ASSIGN_OR_RETURN(HostArray gray, FromProto(img, "image.image"));
  hologram::ImagePlaneOptions options;
  options.spacing_m = image.spacing_m();
  options.depth_m = image.depth_m();
  options.skip_zero = image.skip_zero();
  return hologram::ImageToPointCloud(gray, options);
}

absl::Status CheckAlgorithmPlacement(const hologram::HologramOptions& options,
                                     const v1::DeviceHint& hint, int gpus) {
  if (options.algorithm != hologram::Algorithm::kTensor) return absl::OkStatus();
  if (hint.kind() == v1::DEVICE_KIND_CPU) {
    return Invalid("algorithm", "\"tensor\" runs on GPU tensor cores but the request asks for the "
                                "CPU (use reference, triangular, piecewise or auto there)");
  }
  if (gpus == 0) {
    return Invalid("algorithm", "\"tensor\" runs on GPU tensor cores and this server has no GPU "
                                "(use reference, triangular, piecewise or auto)");
  }
  return absl::OkStatus();
}

hologram::HologramOptions OptionsForDevice(const hologram::HologramOptions& options,
                                           const Device& device) {
  hologram::HologramOptions o = options;
  if (device.kind == DeviceKind::kCpu && o.algorithm == hologram::Algorithm::kTensor) {
    o.algorithm = hologram::Algorithm::kReference;
  }
  return o;
}

v1::HologramAlgorithm AlgorithmToProto(hologram::Algorithm algorithm) {
  switch (algorithm) {
    case hologram::Algorithm::kAuto: return v1::HOLOGRAM_ALGORITHM_AUTO;
    case hologram::Algorithm::kReference: return v1::HOLOGRAM_ALGORITHM_REFERENCE;
    case hologram::Algorithm::kTriangular: return v1::HOLOGRAM_ALGORITHM_TRIANGULAR;
    case hologram::Algorithm::kPiecewise: return v1::HOLOGRAM_ALGORITHM_PIECEWISE;
    case hologram::Algorithm::kTensor: return v1::HOLOGRAM_ALGORITHM_TENSOR;
  }
  return v1::HOLOGRAM_ALGORITHM_AUTO;
}

v1::HologramTensorPrecision PrecisionToProto(hologram::TensorPrecision precision) {
  switch (precision) {
    case hologram::TensorPrecision::kAuto: return v1::HOLOGRAM_TENSOR_PRECISION_AUTO;
    case hologram::TensorPrecision::kInt8: return v1::HOLOGRAM_TENSOR_PRECISION_INT8;
    case hologram::TensorPrecision::kFp16: return v1::HOLOGRAM_TENSOR_PRECISION_FP16;
    case hologram::TensorPrecision::kBf16: return v1::HOLOGRAM_TENSOR_PRECISION_BF16;
    case hologram::TensorPrecision::kTf32: return v1::HOLOGRAM_TENSOR_PRECISION_TF32;
  }
  return v1::HOLOGRAM_TENSOR_PRECISION_AUTO;
}

void FillResultHeader(const hologram::HologramResult& result, int64_t points,
                      const hologram::HologramOptions& options, v1::HologramResultHeader* header) {
  header->set_algorithm(AlgorithmToProto(result.algorithm));
  header->set_precision(PrecisionToProto(result.precision));
  header->set_gemm_inner_dim(result.gemm_inner_dim);
  header->set_point_batches(result.point_batches);
  header->set_points(points);
  header->set_width(options.width);
  header->set_height(options.height);
  header->set_reconstruction_scale(result.reconstruction_scale);
}

HostArray* OutputArray(hologram::HologramResult* result, v1::HologramOutput which) {
  switch (which) {
    case v1::HOLOGRAM_OUTPUT_FIELD: return &result->field;
    case v1::HOLOGRAM_OUTPUT_PHASE: return &result->phase;
    case v1::HOLOGRAM_OUTPUT_AMPLITUDE: return &result->amplitude;
    case v1::HOLOGRAM_OUTPUT_RECONSTRUCTION: return &result->reconstruction;
    default: return nullptr;
  }
}

v1::NdArray* HeaderArray(v1::HologramResultHeader* header, v1::HologramOutput which) {
  switch (which) {
    case v1::HOLOGRAM_OUTPUT_FIELD: return header->mutable_field();
    case v1::HOLOGRAM_OUTPUT_PHASE: return header->mutable_phase();
    case v1::HOLOGRAM_OUTPUT_AMPLITUDE: return header->mutable_amplitude();
    case v1::HOLOGRAM_OUTPUT_RECONSTRUCTION: return header->mutable_reconstruction();
    default: return nullptr;
  }
}

const char* OutputName(v1::HologramOutput which) {
  switch (which) {
    case v1::HOLOGRAM_OUTPUT_FIELD: return "field";
    case v1::HOLOGRAM_OUTPUT_PHASE: return "phase";
    case v1::HOLOGRAM_OUTPUT_AMPLITUDE: return "amplitude";
    case v1::HOLOGRAM_OUTPUT_RECONSTRUCTION: return "reconstruction";
    default: return "output";
  }
}

}  // namespace fresnel::server
