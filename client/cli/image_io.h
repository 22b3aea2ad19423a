// The before/after preview PNG of `fresnel unwrap` (its phase, mask and quality maps are read by
// fresnel_io's ReadImage, fresnel/io/image.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/io/image.h"

namespace fresnel::cli {

// The unwrap preview: the wrapped phase (gray, -pi..pi -> black..white) and the unwrapped phase
// (gray over its own range of unmasked pixels) side by side, separated by a white gap. Masked
// pixels are drawn blue, and, when `cuts` is given (uint8, 1 = on a branch cut), cut pixels red
// on the unwrapped half. Images whose longer side exceeds `max_side` are shown at a whole-number
// reduction (a reduced pixel is red when any pixel it covers is on a cut). Returns uint8
// [h, 2 w + gap, 3]; `mask` and `cuts` may be null.
absl::StatusOr<HostArray> RenderUnwrapPreview(const HostArray& wrapped, const HostArray& unwrapped,
                                              const HostArray* mask, const HostArray* cuts,
                                              int max_side = 1024);

}  // namespace fresnel::cli
