// WindowFilter, WindowInto and CudaWindow (fresnel/interp/window.h): the one polyphase primitive of
// interp_internal.h with its window parameters public. Host-side code only; the CUDA kernels are
// CudaPolyphase's (interp_cuda.cu).
#include "fresnel/interp/window.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/interp/into.h"
#include "interp/interp_internal.h"

namespace fresnel::interp {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

absl::Status CheckArgs(const WindowArgs& a) {
  if (a.channels < 0 || a.x_len < 0 || a.out_first < 0 || a.out_count < 0) {
    return absl::InvalidArgumentError("window: negative channels, x_len, out_first or out_count");
  }
  if ((a.channels > 1 && (a.x_stride < a.x_len || a.y_stride < a.out_count))) {
    return absl::InvalidArgumentError("window: a stride is shorter than its rows");
  }
  if (a.channels * a.out_count > 0 && a.y == nullptr) {
    return absl::InvalidArgumentError("window: null y");
  }
  if (a.channels * a.x_len > 0 && a.x == nullptr) {
    return absl::InvalidArgumentError("window: null x");
  }
  return absl::OkStatus();
}

internal::Polyphase PolyphaseOf(const WindowFilter& f) {
  return internal::Polyphase{f.taps(), f.up(), f.down()};
}

internal::HostSignalView ViewOf(const WindowFilter& f, const WindowArgs& a) {
  internal::HostSignalView v;
  v.dtype = f.dtype();
  v.channels = a.channels;
  v.len = a.x_len;
  v.stride = a.channels > 1 ? a.x_stride : a.x_len;
  v.data = a.x;
  return v;
}

}  // namespace

absl::StatusOr<WindowFilter> WindowFilter::ForUpfirdn(const std::vector<double>& taps,
                                                      DType dtype,
                                                      const UpfirdnOptions& options) {
  FRESNEL_RETURN_IF_ERROR(ValidateUpfirdnShape(taps, dtype, {1}, options));
  if (!UpfirdnIntoSupported(dtype, {1}, options)) {
    return absl::UnimplementedError("WindowFilter: this call needs Upfirdn (see into.h)");
  }
  WindowFilter f;
  f.dtype_ = dtype;
  f.taps_ = taps;
  f.up_ = options.up;
  f.down_ = options.down;
  f.cval_ = options.cval;
  f.upfirdn_ = true;
  return f;
}

absl::StatusOr<WindowFilter> WindowFilter::ForResamplePoly(DType dtype,
                                                           const ResamplePolyOptions& options) {
  FRESNEL_RETURN_IF_ERROR(ValidateResamplePolyShape(dtype, {1}, options));
  if (!ResamplePolyIntoSupported(dtype, {1}, options)) {
    return absl::UnimplementedError("WindowFilter: this call needs ResamplePoly (see into.h)");
  }
  FRESNEL_ASSIGN_OR_RETURN(internal::ResamplePolyDesign design,
                           internal::DesignResamplePoly(options, dtype));
  WindowFilter f;
  f.dtype_ = dtype;
  f.taps_ = std::move(design.filter.taps);
  f.up_ = design.filter.up;
  f.down_ = design.filter.down;
  f.skip_ = design.skip;
  f.cval_ = options.cval;
  f.upfirdn_ = false;
  f.rp_up_ = options.up;
  f.rp_down_ = options.down;
  return f;
}

int64_t WindowFilter::OutputLength(int64_t n) const {
  if (upfirdn_) return UpfirdnOutputLength(n, static_cast<int64_t>(taps_.size()), up_, down_);
  return ResamplePolyOutputLength(n, rp_up_, rp_down_);
}

// Full output k = j + skip reads s[q - m] for m in [0, P), q = floor(k * down / up)
// (interp_internal.h): outputs [k0, k1) read [floor(k0 * down / up) - P + 1,
// floor((k1 - 1) * down / up)].
IndexRange WindowFilter::InputsOf(int64_t n, IndexRange outputs) const {
  if (outputs.size() == 0 || n <= 0) return IndexRange{0, 0};
  const int64_t p = (static_cast<int64_t>(taps_.size()) + up_ - 1) / up_;
  const int64_t k0 = outputs.first + skip_;
  const int64_t k1 = outputs.end + skip_;
  IndexRange r;
  r.first = std::clamp<int64_t>(FloorDiv(k0 * down_, up_) - p + 1, 0, n);
  r.end = std::clamp<int64_t>(FloorDiv((k1 - 1) * down_, up_) + 1, 0, n);
  if (r.end < r.first) r.end = r.first;
  return r;
}

absl::Status WindowInto(const Device& device, const WindowFilter& filter, const WindowArgs& a,
                        StageTimes* times) {
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  FRESNEL_RETURN_IF_ERROR(CheckArgs(a));
  if (times != nullptr) *times = StageTimes{};
  if (a.channels * a.out_count == 0) return absl::OkStatus();
  const internal::Polyphase poly = PolyphaseOf(filter);
  const internal::HostSignalView v = ViewOf(filter, a);
  const int64_t k0 = a.out_first + filter.skip();
  const size_t es = DTypeSize(filter.dtype());
  const bool dense_y = a.channels == 1 || a.y_stride == a.out_count;
  if (device.kind == DeviceKind::kCuda && dense_y) {
#if defined(FRESNEL_WITH_CUDA)
    return internal::UpfirdnWindowCudaInto(device, poly, v, a.x_first, filter.cval(), k0,
                                           a.out_count, a.y, times);
#endif
  }
  HostArray out;
  if (device.kind == DeviceKind::kCpu) {
    FRESNEL_ASSIGN_OR_RETURN(out, internal::UpfirdnWindowCpu(poly, v, a.x_first, filter.cval(),
                                                             k0, a.out_count));
  } else {
    FRESNEL_ASSIGN_OR_RETURN(out, internal::UpfirdnWindow(device, poly, v, a.x_first,
                                                          filter.cval(), k0, a.out_count, times));
  }
  for (int64_t c = 0; c < a.channels; ++c) {
    std::memcpy(static_cast<char*>(a.y) + static_cast<size_t>(c * a.y_stride) * es,
                static_cast<const char*>(out.raw()) + static_cast<size_t>(c * a.out_count) * es,
                static_cast<size_t>(a.out_count) * es);
  }
  return absl::OkStatus();
}

struct CudaWindow::Impl {
  WindowFilter filter;
#if defined(FRESNEL_WITH_CUDA)
  internal::CudaPolyphase plan;
#endif
};

CudaWindow::CudaWindow(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaWindow::CudaWindow(CudaWindow&&) noexcept = default;
CudaWindow& CudaWindow::operator=(CudaWindow&&) noexcept = default;
CudaWindow::~CudaWindow() = default;

const WindowFilter& CudaWindow::filter() const { return impl_->filter; }

absl::StatusOr<CudaWindow> CudaWindow::Create(const Device& device, const WindowFilter& filter) {
  if (device.kind != DeviceKind::kCuda) {
    return absl::FailedPreconditionError("CudaWindow: needs a CUDA device");
  }
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
#if defined(FRESNEL_WITH_CUDA)
  FRESNEL_ASSIGN_OR_RETURN(internal::CudaPolyphase plan,
                           internal::CudaPolyphase::Create(device, PolyphaseOf(filter),
                                                           filter.dtype()));
  return CudaWindow(std::unique_ptr<Impl>(new Impl{filter, std::move(plan)}));
#else
  return absl::FailedPreconditionError(
      absl::StrCat("device ", device.Name(), ": this build has no CUDA support"));
#endif
}

absl::Status CudaWindow::LaunchAsync(const Device& device, const WindowArgs& a) const {
  FRESNEL_RETURN_IF_ERROR(RequireStream(device));
  FRESNEL_RETURN_IF_ERROR(CheckArgs(a));
  internal::DeviceSignal s;
  s.channels = a.channels;
  s.x = a.x;
  s.x_stride = a.channels > 1 ? a.x_stride : a.x_len;
  s.x_first = a.x_first;
  s.x_len = a.x_len;
  s.cval = impl_->filter.cval();
  s.y = a.y;
  s.y_stride = a.channels > 1 ? a.y_stride : a.out_count;
  s.out_first = a.out_first + impl_->filter.skip();
  s.out_count = a.out_count;
#if defined(FRESNEL_WITH_CUDA)
  return impl_->plan.LaunchAsync(device, s);
#else
  return absl::FailedPreconditionError("CudaWindow: this build has no CUDA support");
#endif
}

}  // namespace fresnel::interp
