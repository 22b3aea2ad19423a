// HostArrays for outputs that are overwritten in full: no zero-fill (issue 10, "results never
// zero-filled before being overwritten"). A header of its own rather than a HostArray member so
// that adding it did not touch array.h, which nearly every file of the tree includes.
#pragma once

#include <cstdint>
#include <vector>

#include "fresnel/core/array.h"

namespace fresnel {

// An array whose bytes are NOT initialised, for an output that the caller overwrites in full
// before anything reads it (a device-to-host copy, a download, a kernel writing every element).
// Reading a byte before it is written gives an unspecified value. Like HostArray's zero-filled
// constructor, a large array (>= 16 MiB) is backed by huge pages where the kernel allows and
// faulted in by several threads at once (the kernel zeroes each new page as it maps it, on the
// faulting thread); what is skipped is the constructor's single-threaded fill of the whole
// buffer after that (~100 ms per GiB on the H200 host). `shape` must be valid (non-negative
// dimensions). Synchronous: the prefault is done when it returns.
HostArray UninitializedArray(DType dtype, std::vector<int64_t> shape);

}  // namespace fresnel
