#include "server/services/fusion_params.h"

#include "absl/strings/str_cat.h"

namespace fresnel::server {

fusion::CameraIntrinsics CameraFromProto(const v1::FusionCamera& c) {
  fusion::CameraIntrinsics k;
  k.fx = c.fx();
  k.fy = c.fy();
  k.cx = c.cx();
  k.cy = c.cy();
  k.width = c.width();
  k.height = c.height();
  return k;
}

void CameraToProto(const fusion::CameraIntrinsics& k, v1::FusionCamera* out) {
  out->set_fx(k.fx);
  out->set_fy(k.fy);
  out->set_cx(k.cx);
  out->set_cy(k.cy);
  out->set_width(k.width);
  out->set_height(k.height);
}

absl::StatusOr<fusion::FusionConfig> FusionConfigFromProto(const v1::FusionConfig& p) {
  fusion::FusionConfig c;
  if (!p.has_camera()) return absl::InvalidArgumentError("config.camera: required");
  c.camera = CameraFromProto(p.camera());
  switch (p.depth_format()) {
    case v1::FUSION_DEPTH_UINT16: c.depth_format = fusion::DepthFormat::kUint16; break;
    case v1::FUSION_DEPTH_FLOAT32: c.depth_format = fusion::DepthFormat::kFloat32; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("config.depth_format: unknown value ", static_cast<int>(p.depth_format())));
  }
  if (p.has_depth_scale()) c.depth_scale = p.depth_scale();
  if (p.has_min_depth_m()) c.min_depth_m = p.min_depth_m();
  if (p.has_max_depth_m()) c.max_depth_m = p.max_depth_m();
  if (p.has_voxel_size_m()) c.voxel_size_m = p.voxel_size_m();
  if (p.has_truncation_m()) c.truncation_m = p.truncation_m();
  if (p.has_max_weight()) c.max_weight = p.max_weight();
  if (p.has_brick_budget_bytes()) c.brick_budget_bytes = p.brick_budget_bytes();
  c.color = p.color();
  if (p.has_tracking()) c.tracking = p.tracking();
  c.clearing_radius_m = p.clearing_radius_m();
  if (p.has_clearing_interval_frames()) c.clearing_interval_frames = p.clearing_interval_frames();
  if (p.icp_iterations_size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.icp_iterations: at most 3 pyramid levels, got ", p.icp_iterations_size()));
  }
  for (int l = 0; l < p.icp_iterations_size(); ++l) c.icp_iterations[l] = p.icp_iterations(l);
  c.cuda_disable = p.cuda_disable();
  c.cuda_enable = p.cuda_enable();
  // Levels not given keep no iterations when some were given (a coarse-only or fine-only ICP).
  if (p.icp_iterations_size() > 0) {
    for (int l = p.icp_iterations_size(); l < 3; ++l) c.icp_iterations[l] = 0;
  }
  return c;
}

void FusionConfigToProto(const fusion::FusionConfig& c, v1::FusionConfig* out) {
  CameraToProto(c.camera, out->mutable_camera());
  out->set_depth_format(c.depth_format == fusion::DepthFormat::kUint16 ? v1::FUSION_DEPTH_UINT16
                                                                       : v1::FUSION_DEPTH_FLOAT32);
  out->set_depth_scale(c.depth_scale);
  out->set_min_depth_m(c.min_depth_m);
  out->set_max_depth_m(c.max_depth_m);
  out->set_voxel_size_m(c.voxel_size_m);
  out->set_truncation_m(c.truncation_m);
  out->set_max_weight(c.max_weight);
  out->set_brick_budget_bytes(c.brick_budget_bytes);
  out->set_color(c.color);
  out->set_tracking(c.tracking);
  out->set_clearing_radius_m(c.clearing_radius_m);
  out->set_clearing_interval_frames(c.clearing_interval_frames);
  out->clear_icp_iterations();
  for (int it : c.icp_iterations) out->add_icp_iterations(it);
  out->set_cuda_disable(c.cuda_disable);
  out->set_cuda_enable(c.cuda_enable);
}

absl::StatusOr<fusion::RigidTransform> PoseFromProto(const v1::FusionPose& pose,
                                                     absl::string_view field) {
  if (pose.m_size() != 12) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must hold 12 numbers (row-major 3x4 [R | t]), got ", pose.m_size()));
  }
  fusion::RigidTransform t;
  for (int i = 0; i < 12; ++i) t.m[i] = pose.m(i);
  return t;
}

void PoseToProto(const fusion::RigidTransform& pose, v1::FusionPose* out) {
  out->clear_m();
  for (double v : pose.m) out->add_m(v);
}

absl::StatusOr<fusion::RenderMode> RenderModeFromProto(v1::FusionRenderMode mode) {
  switch (mode) {
    case v1::FUSION_RENDER_SHADED: return fusion::RenderMode::kShaded;
    case v1::FUSION_RENDER_DEPTH: return fusion::RenderMode::kDepth;
    case v1::FUSION_RENDER_NORMALS: return fusion::RenderMode::kNormals;
    case v1::FUSION_RENDER_COLOR: return fusion::RenderMode::kColor;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("render.mode: unknown value ", static_cast<int>(mode)));
  }
}

void FrameResultToProto(const fusion::FrameResult& r, v1::FusionFrameResult* out) {
  out->set_frame_index(r.frame_index);
  PoseToProto(r.T_world_camera, out->mutable_t_world_camera());
  out->set_tracking(r.state == fusion::TrackingState::kOk ? v1::FUSION_TRACKING_OK
                                                          : v1::FUSION_TRACKING_LOST);
  out->set_relocalized(r.relocalized);
  out->set_integrated(r.integrated);
  out->set_inliers(r.inliers);
  out->set_residual_m(r.residual_m);
  out->set_icp_iterations(r.icp_iterations);
  out->set_bricks_in_use(r.bricks_in_use);
  out->set_brick_capacity(r.brick_capacity);
  out->set_bricks_dropped(r.bricks_dropped);
  v1::FusionStageSeconds* s = out->mutable_stage_seconds();
  s->set_track(r.track_s);
  s->set_integrate(r.integrate_s);
  s->set_raycast(r.raycast_s);
}

}  // namespace fresnel::server
