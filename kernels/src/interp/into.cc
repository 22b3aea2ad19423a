// UpfirdnInto / ResamplePolyInto (fresnel/interp/into.h): the one-shot calls on caller-owned
// buffers. The window primitive is the one Upfirdn and ResamplePoly run for these cases (mode
// constant, real taps, x already in its working dtype and layout), so the results are the same
// bits; only where x comes from and where y goes differ.
#include "fresnel/interp/into.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "interp/interp_internal.h"
#include "interp/window_internal.h"

namespace fresnel::interp {
namespace {

bool WorkDType(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kComplex64 ||
         d == DType::kComplex128;
}

// x's rows are contiguous along `axis`: nothing but size-1 dimensions after it.
bool RowsContiguous(const std::vector<int64_t>& shape, int axis) {
  const int nd = static_cast<int>(shape.size());
  const int a = axis < 0 ? axis + nd : axis;
  if (a < 0 || a >= nd) return false;
  for (int d = a + 1; d < nd; ++d) {
    if (shape[d] != 1) return false;
  }
  return true;
}

// The [channels, len] view of a validated, supported x.
internal::HostSignalView ViewOfRef(const HostSignalRef& x, int axis) {
  const internal::AxisGeometry g = internal::GeometryOf(internal::SignalShape(x.dtype, x.shape),
                                                        axis);
  internal::HostSignalView v;
  v.dtype = x.dtype;
  v.channels = g.channels();
  v.len = g.len;
  v.stride = g.len;
  v.data = x.data;
  return v;
}

absl::Status CheckRoom(int64_t channels, int64_t out_len, DType dtype, int64_t y_bytes,
                       const void* y) {
  const int64_t need = channels * out_len * static_cast<int64_t>(DTypeSize(dtype));
  if (need > 0 && y == nullptr) return absl::InvalidArgumentError("y: null output buffer");
  if (y_bytes < need) {
    return absl::InvalidArgumentError(
        absl::StrCat("y: ", y_bytes, " bytes of room, the result needs ", need));
  }
  return absl::OkStatus();
}

// Runs the window primitive of `filter` over x into y (out_count outputs per channel from
// out_first). CUDA writes y straight from the device; the CPU back end computes into its own
// array, copied once.
absl::Status WindowInto(const Device& device, const internal::Polyphase& filter,
                        const internal::HostSignalView& v, double cval, int64_t out_first,
                        int64_t out_count, void* y, StageTimes* times, const IntoOptions& into) {
  if (times != nullptr) *times = StageTimes{};
  const bool on_device = into.x_cuda_device >= 0 || into.y_cuda_device >= 0;
  if (on_device && device.kind != DeviceKind::kCuda) {
    return absl::FailedPreconditionError(absl::StrCat(
        into.x_cuda_device >= 0 ? "x" : "y", ": device memory of cuda:",
        std::max(into.x_cuda_device, into.y_cuda_device), " needs a CUDA device, not ",
        device.Name()));
  }
  if (out_count == 0 || v.channels == 0) return absl::OkStatus();
  const int64_t es = static_cast<int64_t>(DTypeSize(v.dtype));
  const int64_t y_bytes = v.channels * out_count * es;
  // x and y in the same memory and overlapping (allowed: x is read completely before y is
  // written) are never chunked: a chunk's y would land on x that a later chunk still reads.
  const char* xb = static_cast<const char*>(v.data);
  const char* yb = static_cast<const char*>(y);
  const bool overlap = into.x_cuda_device == into.y_cuda_device &&
                       xb < yb + y_bytes && yb < xb + v.channels * v.len * es;
  const bool chunked =
      into.overlap_chunk_bytes > 0 && y_bytes >= 2 * into.overlap_chunk_bytes && !overlap;
  if (device.kind == DeviceKind::kCuda && (on_device || chunked)) {
#if defined(FRESNEL_WITH_CUDA)
    internal::PlacedWindow w;
    w.filter = &filter;
    w.dtype = v.dtype;
    w.channels = v.channels;
    w.len = v.len;
    w.x = v.data;
    w.x_device = into.x_cuda_device;
    w.cval = cval;
    w.out_first = out_first;
    w.out_count = out_count;
    w.y = y;
    w.y_device = into.y_cuda_device;
    w.chunk_outputs = chunked ? std::max<int64_t>(1, into.overlap_chunk_bytes / (v.channels * es))
                              : 0;
    w.x_prefix_ready = into.x_prefix_ready;
    return internal::UpfirdnWindowCudaPlaced(device, w, times);
#endif
  }
  if (into.x_prefix_ready) into.x_prefix_ready(v.channels * v.len * es);
  if (device.kind == DeviceKind::kCpu) {
    const auto t0 = std::chrono::steady_clock::now();
    FRESNEL_ASSIGN_OR_RETURN(HostArray out, internal::UpfirdnWindowCpu(filter, v, 0, cval,
                                                                       out_first, out_count));
    std::memcpy(y, out.raw(), out.nbytes());
    if (times != nullptr) {
      times->compute_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return absl::OkStatus();
  }
#if defined(FRESNEL_WITH_CUDA)
  return internal::UpfirdnWindowCudaInto(device, filter, v, 0, cval, out_first, out_count, y,
                                         times);
#else
  return absl::FailedPreconditionError(
      absl::StrCat("device ", device.Name(), ": this build has no CUDA support"));
#endif
}

}  // namespace

bool UpfirdnIntoSupported(DType x_dtype, const std::vector<int64_t>& x_shape,
                          const UpfirdnOptions& options) {
  return WorkDType(x_dtype) && options.taps_imag.empty() && options.mode == PadMode::kConstant &&
         UpfirdnResultDType(x_dtype, options) == x_dtype && RowsContiguous(x_shape, options.axis);
}

bool ResamplePolyIntoSupported(DType x_dtype, const std::vector<int64_t>& x_shape,
                               const ResamplePolyOptions& options) {
  const int g = std::gcd(options.up, options.down);
  const bool copy = g > 0 && options.up / g == 1 && options.down / g == 1;
  return WorkDType(x_dtype) && !copy && options.taps_imag.empty() &&
         options.padtype == PadMode::kConstant &&
         ResamplePolyResultDType(x_dtype, options) == x_dtype &&
         RowsContiguous(x_shape, options.axis);
}

absl::Status UpfirdnInto(const Device& device, const std::vector<double>& taps,
                         const HostSignalRef& x, const UpfirdnOptions& options, void* y,
                         int64_t y_bytes, StageTimes* times, const IntoOptions& into) {
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  FRESNEL_RETURN_IF_ERROR(ValidateUpfirdnShape(taps, x.dtype, x.shape, options));
  if (!UpfirdnIntoSupported(x.dtype, x.shape, options)) {
    return absl::UnimplementedError("UpfirdnInto: this call needs Upfirdn (see into.h)");
  }
  const internal::HostSignalView v = ViewOfRef(x, options.axis);
  if (v.channels * v.len > 0 && x.data == nullptr) {
    return absl::InvalidArgumentError("x: null data");
  }
  const int64_t out_len =
      UpfirdnOutputLength(v.len, static_cast<int64_t>(taps.size()), options.up, options.down);
  FRESNEL_RETURN_IF_ERROR(CheckRoom(v.channels, out_len, x.dtype, y_bytes, y));
  const internal::Polyphase filter{taps, options.up, options.down};
  return WindowInto(device, filter, v, options.cval, 0, out_len, y, times, into);
}

absl::Status ResamplePolyInto(const Device& device, const HostSignalRef& x,
                              const ResamplePolyOptions& options, void* y, int64_t y_bytes,
                              StageTimes* times, const IntoOptions& into) {
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  FRESNEL_RETURN_IF_ERROR(ValidateResamplePolyShape(x.dtype, x.shape, options));
  if (!ResamplePolyIntoSupported(x.dtype, x.shape, options)) {
    return absl::UnimplementedError("ResamplePolyInto: this call needs ResamplePoly (see into.h)");
  }
  const internal::HostSignalView v = ViewOfRef(x, options.axis);
  if (v.channels * v.len > 0 && x.data == nullptr) {
    return absl::InvalidArgumentError("x: null data");
  }
  const int64_t n_out = ResamplePolyOutputLength(v.len, options.up, options.down);
  FRESNEL_RETURN_IF_ERROR(CheckRoom(v.channels, n_out, x.dtype, y_bytes, y));
  if (n_out == 0 || v.channels == 0) {
    if (times != nullptr) *times = StageTimes{};
    return absl::OkStatus();
  }
  FRESNEL_ASSIGN_OR_RETURN(internal::ResamplePolyDesign design,
                           internal::DesignResamplePoly(options, x.dtype));
  return WindowInto(device, design.filter, v, options.cval, design.skip, n_out, y, times, into);
}

}  // namespace fresnel::interp
