// Conversion between the fusion protos (proto/fresnel/v1/fusion.proto) and fresnel::fusion types.
// Nothing here computes or validates beyond the shape of the message: the kernels' own validators
// (fusion::ValidateConfig, fusion::ValidateFrame) check the values.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fresnel/fusion/fusion.h"
#include "fresnel/v1/fusion.pb.h"

namespace fresnel::server {

// Unset optional fields take the kernel's defaults. INVALID_ARGUMENT for a missing camera, an
// unknown depth format or more than 3 ICP levels; the values are checked by ValidateConfig.
absl::StatusOr<fusion::FusionConfig> FusionConfigFromProto(const v1::FusionConfig& config);
// Every field set (the config as the session runs it).
void FusionConfigToProto(const fusion::FusionConfig& config, v1::FusionConfig* out);

fusion::CameraIntrinsics CameraFromProto(const v1::FusionCamera& camera);
void CameraToProto(const fusion::CameraIntrinsics& camera, v1::FusionCamera* out);

// 12 numbers (row-major 3x4); INVALID_ARGUMENT naming `field` otherwise. Finiteness and
// orthonormality are the caller's check (RigidTransform::IsValid, ValidateFrame).
absl::StatusOr<fusion::RigidTransform> PoseFromProto(const v1::FusionPose& pose,
                                                     absl::string_view field);
void PoseToProto(const fusion::RigidTransform& pose, v1::FusionPose* out);

absl::StatusOr<fusion::RenderMode> RenderModeFromProto(v1::FusionRenderMode mode);

void FrameResultToProto(const fusion::FrameResult& result, v1::FusionFrameResult* out);

}  // namespace fresnel::server
