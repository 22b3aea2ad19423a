// Upfirdn and ResamplePoly between caller-owned host buffers: the server's shared-memory and
// staging regions (issue 10). x is read where it lies and y written where the caller says —
// no HostArray is made for either, nothing is zero-filled before being overwritten, and on CUDA
// the host<->device copies are DMA at full bus speed when the buffers are page-locked
// (fresnel::PinHostMemory in fresnel/core/gpu.h; pageable buffers work too, at the driver's
// pageable speed). Results are bit-identical to Upfirdn / ResamplePoly (fresnel/interp/interp.h)
// on the same device: the same primitive runs on the same window.
//
// Only the common case is taken (see *IntoSupported); anything else is UNIMPLEMENTED and the
// caller uses the HostArray entry points.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/interp/interp.h"

namespace fresnel::interp {

// The validators of interp.h on a dtype and shape, for a signal that is not (yet) a HostArray.
absl::Status ValidateUpfirdnShape(const std::vector<double>& taps, DType dtype,
                                  const std::vector<int64_t>& shape,
                                  const UpfirdnOptions& options, const Limits& limits = {});
absl::Status ValidateResamplePolyShape(DType dtype, const std::vector<int64_t>& shape,
                                       const ResamplePolyOptions& options,
                                       const Limits& limits = {});

// A row-major signal in caller-owned host memory: prod(shape) elements of dtype at `data`.
struct HostSignalRef {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Whether UpfirdnInto takes this call: x float32/float64/complex64/complex128, real taps,
// mode constant, the result keeps x's dtype (UpfirdnResultDType) and the filtered axis has only
// size-1 dimensions after it (rows contiguous).
bool UpfirdnIntoSupported(DType x_dtype, const std::vector<int64_t>& x_shape,
                          const UpfirdnOptions& options);
// Same for ResamplePolyInto: also padtype constant and up/down not reducing to 1/1.
bool ResamplePolyIntoSupported(DType x_dtype, const std::vector<int64_t>& x_shape,
                               const ResamplePolyOptions& options);

// Where x and y lie and how the CUDA call moves them (the defaults: host memory, one H2D, the
// kernel, one D2H).
struct IntoOptions {
  // >= 0: x.data / y are device memory of this CUDA ordinal (a client's CUDA IPC region), not
  // host memory. The call must then run on a CUDA device: on that one it reads / writes them in
  // place (no host round trip; pointers not 256-byte aligned take one D2D copy), on another one
  // peer copy moves them. FAILED_PRECONDITION on the CPU device.
  int x_cuda_device = -1;
  int y_cuda_device = -1;
  // > 0, on CUDA: the host legs are cut into windows of about this many bytes of y
  // (fresnel/interp/window.h), round-robin on three streams with a ring of three device buffers,
  // so chunk i+1's H2D, chunk i's kernel and chunk i-1's D2H overlap. Taken when y has at least
  // two such chunks. Same bits as one window. StageTimes are then the sums of the chunks' stage
  // times (they overlap: their sum exceeds the wall time). Ignored on the CPU.
  int64_t overlap_chunk_bytes = 0;
  // Set: x's bytes are not all there yet. The call invokes it on the calling thread with a count
  // of leading bytes of x that must be valid when it returns, before it reads them (with chunks,
  // 1-D x: before each chunk's H2D is enqueued, with growing counts, so the caller fills x while
  // earlier chunks' copies and kernels run; otherwise once with all of x, first).
  std::function<void(int64_t bytes)> x_prefix_ready;
};

// Filters x into y: y holds x's shape with the filtered axis replaced by the output length
// (UpfirdnOutputLength / ResamplePolyOutputLength), in x's dtype; `y_bytes` is the room at y
// (INVALID_ARGUMENT naming y when too small). x and y may overlap: x is read completely before
// y is written (one H2D, the kernel, one D2H, in stream order). Validates like Upfirdn
// (limits: the defaults); UNIMPLEMENTED when *IntoSupported is false. Synchronous on every
// device: y is complete when this returns.
absl::Status UpfirdnInto(const Device& device, const std::vector<double>& taps,
                         const HostSignalRef& x, const UpfirdnOptions& options, void* y,
                         int64_t y_bytes, StageTimes* times = nullptr,
                         const IntoOptions& into = {});
absl::Status ResamplePolyInto(const Device& device, const HostSignalRef& x,
                              const ResamplePolyOptions& options, void* y, int64_t y_bytes,
                              StageTimes* times = nullptr, const IntoOptions& into = {});

}  // namespace fresnel::interp
