// SIMT emulator stand-in for <cooperative_groups.h> (only what goldstein_kernels.cuh uses).
#pragma once
#include "simt.h"

namespace cooperative_groups {
struct grid_group {
  void sync() { simt::GridSync(); }
};
inline grid_group this_grid() { return {}; }
}  // namespace cooperative_groups
