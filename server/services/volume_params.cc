#include "server/services/volume_params.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"

namespace fresnel::server {
namespace {

absl::StatusOr<std::array<float, 3>> Vec3(const google::protobuf::RepeatedField<float>& v,
                                          const char* field) {
  if (v.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must have 3 values (x, y, z), got ", v.size()));
  }
  return std::array<float, 3>{v[0], v[1], v[2]};
}

template <typename T>
absl::StatusOr<std::vector<T>> TakeVector(HostArray array, DType dtype,
                                          const std::vector<int64_t>& shape, const char* field) {
  if (array.dtype() != dtype || array.shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be ", dtype == DType::kInt32 ? "int32 " : "float32 ", ShapeString(shape),
        " (the header's counts), got ", ShapeString(array.shape())));
  }
  std::vector<T> out(static_cast<size_t>(array.size()));
  if (!out.empty()) std::memcpy(out.data(), array.raw(), array.nbytes());
  return out;
}

const char* CompositingName(volume::Compositing c) {
  switch (c) {
    case volume::Compositing::kPairwise: return "pairwise";
    case volume::Compositing::kSegmentedScan: return "segmented_scan";
    default: return "auto";
  }
}

}  // namespace

absl::StatusOr<MeshUploadBudget> ParseMeshHeader(const v1::MeshHeader& header,
                                                 const VolumeLimits& limits) {
  MeshUploadBudget b;
  b.num_points = header.num_points();
  b.num_tets = header.num_tets();
  if (b.num_points < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.num_points must be >= 4, got ", b.num_points));
  }
  if (b.num_tets < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.num_tets must be >= 1, got ", b.num_tets));
  }
  if (b.num_points > limits.max_points) {
    return absl::ResourceExhaustedError(absl::StrCat("header.num_points ", b.num_points,
                                                     " exceeds the server's limit of ",
                                                     limits.max_points));
  }
  if (b.num_tets > limits.max_tets) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "header.num_tets ", b.num_tets, " exceeds the server's limit of ", limits.max_tets));
  }
  return b;
}

const char* MeshArrayName(v1::MeshArray which) {
  switch (which) {
    case v1::MESH_ARRAY_POINTS: return "points_xyz";
    case v1::MESH_ARRAY_TETS: return "tets";
    case v1::MESH_ARRAY_SCALARS: return "scalars";
    default: return "array";
  }
}

absl::StatusOr<volume::TetMesh> MeshFromArrays(const MeshUploadBudget& budget, HostArray points,
                                               HostArray tets, HostArray scalars) {
  volume::TetMesh mesh;
  const std::vector<int64_t> points_shape = {budget.num_points, 3};
  const std::vector<int64_t> tets_shape = {budget.num_tets, 4};
  const std::vector<int64_t> scalars_shape = {budget.num_points};
  FRESNEL_ASSIGN_OR_RETURN(mesh.points_xyz, TakeVector<float>(std::move(points), DType::kFloat32,
                                                              points_shape, "points_xyz"));
  FRESNEL_ASSIGN_OR_RETURN(mesh.tets, TakeVector<int32_t>(std::move(tets), DType::kInt32,
                                                          tets_shape, "tets"));
  FRESNEL_ASSIGN_OR_RETURN(mesh.scalars, TakeVector<float>(std::move(scalars), DType::kFloat32,
                                                           scalars_shape, "scalars"));
  return mesh;
}

void FillMeshReport(const volume::MeshReport& report, v1::UploadMeshResponse* out) {
  out->set_num_points(report.num_points);
  out->set_num_tets(report.num_tets);
  out->set_degenerate_tets(report.degenerate_tets);
  out->mutable_bounds_min()->Assign(report.bounds_min.begin(), report.bounds_min.end());
  out->mutable_bounds_max()->Assign(report.bounds_max.begin(), report.bounds_max.end());
  out->set_scalar_min(report.scalar_min);
  out->set_scalar_max(report.scalar_max);
}

int64_t VolumeRenderInput::ImageBytes() const { return volume::ImageBytes(camera, options); }

absl::StatusOr<VolumeRenderInput> ParseVolumeRender(const v1::VolumeRenderRequest& request,
                                                    const volume::MeshReport& report) {
  VolumeRenderInput in;
  const v1::TransferFunction& tf = request.transfer_function();
  if (tf.points_size() == 0) {
    float max_ext = tf.default_max_extinction();
    if (!(max_ext >= 0) || !std::isfinite(max_ext)) {
      return absl::InvalidArgumentError(
          "transfer_function.default_max_extinction must be finite and >= 0");
    }
    if (max_ext == 0) {
      double d2 = 0;
      for (int i = 0; i < 3; ++i) {
        const double e = report.bounds_max[i] - report.bounds_min[i];
        d2 += e * e;
      }
      max_ext = d2 > 0 ? static_cast<float>(12 / std::sqrt(d2)) : 1.0f;
    }
    in.tf = volume::DefaultTransferFunction(report.scalar_min, report.scalar_max, max_ext);
  } else {
    for (const v1::TfPoint& p : tf.points()) {
      in.tf.points.push_back({p.scalar(), p.r(), p.g(), p.b(), p.extinction_per_unit()});
    }
  }
  if (tf.background_size() != 0) {
    if (tf.background_size() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer_function.background must have 4 values (RGBA), got ", tf.background_size()));
    }
    for (int i = 0; i < 4; ++i) in.tf.background[i] = tf.background(i);
  } else if (tf.points_size() != 0) {
    in.tf.background = {0, 0, 0, 0};
  }
  FRESNEL_RETURN_IF_ERROR(volume::ValidateTransferFunction(in.tf));

  switch (request.view_case()) {
    case v1::VolumeRenderRequest::kCamera: {
      const v1::VolumeCamera& c = request.camera();
      FRESNEL_ASSIGN_OR_RETURN(in.camera.eye, Vec3(c.eye(), "camera.eye"));
      FRESNEL_ASSIGN_OR_RETURN(in.camera.target, Vec3(c.target(), "camera.target"));
      FRESNEL_ASSIGN_OR_RETURN(in.camera.up, Vec3(c.up(), "camera.up"));
      in.camera.vertical_fov_deg = c.vertical_fov_deg();
      in.camera.orthographic_height = c.orthographic_height();
      in.camera.width = c.width();
      in.camera.height = c.height();
      break;
    }
    case v1::VolumeRenderRequest::kOrbit: {
      const v1::OrbitView& o = request.orbit();
      if (!std::isfinite(o.azimuth_deg()) || !std::isfinite(o.elevation_deg()) ||
          std::fabs(o.elevation_deg()) >= 90) {
        return absl::InvalidArgumentError(
            "orbit.azimuth_deg must be finite and orbit.elevation_deg in (-90, 90)");
      }
      if (o.width() < 1 || o.height() < 1 || o.width() > volume::kMaxImageSide ||
          o.height() > volume::kMaxImageSide) {
        return absl::InvalidArgumentError(absl::StrCat("orbit.width and orbit.height must be in [1, ",
                                                       volume::kMaxImageSide, "], got ", o.width(),
                                                       "x", o.height()));
      }
      const float fov = o.vertical_fov_deg() == 0 ? 30.0f : o.vertical_fov_deg();
      if (!(fov > 0 && fov < 180)) {
        return absl::InvalidArgumentError("orbit.vertical_fov_deg must be in (0, 180)");
      }
      in.camera = volume::OrbitCamera(report.bounds_min, report.bounds_max, o.azimuth_deg(),
                                      o.elevation_deg(), o.width(), o.height(), fov);
      break;
    }
    default:
      return absl::InvalidArgumentError("camera: required (camera or orbit)");
  }
  FRESNEL_RETURN_IF_ERROR(volume::ValidateCamera(in.camera));

  if (request.hash_block_bits() != 0 && request.hash_block_bits() != 2 &&
      request.hash_block_bits() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hash_block_bits must be 0 (auto), 2 or 3, got ", request.hash_block_bits()));
  }
  in.options.hash_block_bits = request.hash_block_bits();
  if (!v1::VolumeImageFormat_IsValid(request.format())) {
    return absl::InvalidArgumentError(
        absl::StrCat("format must be VOLUME_IMAGE_RGBA8 or VOLUME_IMAGE_RGBA_F32, got ",
                     static_cast<int>(request.format())));
  }
  in.format = request.format();
  // RGBA8: the kernel converts (on the GPU: a quarter of the image's copy to the host).
  in.options.rgba8 = in.format == v1::VOLUME_IMAGE_RGBA8;
  in.progressive = request.progressive();
  return in;
}

void StatsToProto(const volume::RenderStats& s, v1::VolumeRenderStats* out) {
  out->set_project_seconds(s.project_s);
  out->set_records_seconds(s.records_s);
  out->set_sort_seconds(s.sort_s);
  out->set_composite_seconds(s.composite_s);
  out->set_d2h_seconds(s.d2h_s);
  out->set_render_seconds(s.total_s);
  out->set_records(s.records);
  out->set_max_block_records(s.max_block_records);
  out->set_tets_rendered(s.tets_rendered);
  out->set_num_blocks(s.num_blocks);
  out->set_passes(s.passes);
  out->set_warp_chunks(s.warp_chunks);
  out->set_peak_device_bytes(s.peak_device_bytes);
  out->set_compositing(CompositingName(s.compositing));
}

absl::StatusOr<HostArray> ImageInFormat(HostArray rgba, v1::VolumeImageFormat format) {
  if (format == v1::VOLUME_IMAGE_RGBA_F32 || rgba.dtype() == DType::kUint8) return rgba;
  return volume::ToRgba8(rgba);
}

}  // namespace fresnel::server
