// HostArrays for outputs that are overwritten in full: no zero-fill (issue 10, "results never
// zero-filled before being overwritten"). A header of its own rather than a HostArray member so
// that adding it did not touch array.h, which nearly every file of the tree includes.
#pragma once

#include <cstdint>
#include <vector>

#include "fresnel/core/array.h"

namespace fresnel {

// Who faults a large new buffer's pages in (each fault is where the kernel zeroes the page:
// about as costly as writing it once, and on some hosts, e.g. a freshly started VM, many times
// that).
enum class FirstTouch {
  kPrefault,  // before the call returns, by up to 8 threads at once (MADV_POPULATE_WRITE)
  kOnWrite,   // whoever writes a page first, later: several writer threads fault in parallel
};

// An array whose bytes are NOT initialised, for an output that the caller overwrites in full
// before anything reads it (a device-to-host copy, a download, a kernel writing every element).
// Reading a byte before it is written gives an unspecified value. Like HostArray's zero-filled
// constructor, a large array (>= 16 MiB) gets huge-page advice (used where the kernel allows)
// and, with kPrefault, its pages faulted in by several threads at once; what is skipped is the
// constructor's single-threaded fill of the whole buffer after that (~100 ms per GiB on the
// H200 host). `shape` must be valid (non-negative dimensions). Synchronous.
HostArray UninitializedArray(DType dtype, std::vector<int64_t> shape,
                             FirstTouch touch = FirstTouch::kPrefault);

}  // namespace fresnel
