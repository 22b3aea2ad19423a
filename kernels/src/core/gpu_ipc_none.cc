// CUDA IPC for builds without CUDA: nothing can be opened.
#include "fresnel/core/gpu_ipc.h"

#include "absl/strings/str_cat.h"

namespace fresnel {

absl::StatusOr<std::string> GpuUuid(int) {
  return absl::FailedPreconditionError("this build has no CUDA support");
}

absl::StatusOr<std::unique_ptr<GpuIpcMapping>> GpuIpcMapping::Open(int, const std::string&,
                                                                   absl::string_view field) {
  return absl::FailedPreconditionError(
      absl::StrCat(field, ": this build has no CUDA support (CUDA IPC regions need it)"));
}

GpuIpcMapping::~GpuIpcMapping() = default;

}  // namespace fresnel
