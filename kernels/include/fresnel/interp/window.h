// The window primitive of one-shot Upfirdn / ResamplePoly calls, public (issue 10): any range of a
// call's outputs computed from any piece of x that holds the samples those outputs read, with the
// same bits as the whole call on the same device. This is what lets a caller cut one call into
// chunks and overlap chunk i+1's upload, chunk i's kernel and chunk i-1's download
// (UpfirdnInto's IntoOptions::overlap_chunk_bytes does exactly that), or run a call on device
// memory it already holds (CUDA IPC regions).
//
// Sample indices are the call's: x sample i is x[i] of the whole signal (0 <= i < n), output j is
// y[j] of the whole call's result (0 <= j < OutputLength(n)). Outside the samples a window is
// given, x is the call's cval (mode / padtype constant), as it is outside [0, n) in the call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "fresnel/interp/interp.h"

namespace fresnel::interp {

// A contiguous range [first, end) of sample (or output) indices.
struct IndexRange {
  int64_t first = 0;
  int64_t end = 0;
  int64_t size() const { return end > first ? end - first : 0; }
};

// The filter of one call, as windows see it. Taken where UpfirdnInto / ResamplePolyInto take the
// call (fresnel/interp/into.h: real taps, mode / padtype constant, the result in x's dtype);
// the factories answer UNIMPLEMENTED otherwise and validate the options as Upfirdn does.
class WindowFilter {
 public:
  static absl::StatusOr<WindowFilter> ForUpfirdn(const std::vector<double>& taps, DType dtype,
                                                 const UpfirdnOptions& options);
  static absl::StatusOr<WindowFilter> ForResamplePoly(DType dtype,
                                                      const ResamplePolyOptions& options);

  DType dtype() const { return dtype_; }
  // The call's output count for an n-sample signal.
  int64_t OutputLength(int64_t n) const;
  // The x samples (clamped to [0, n)) that outputs `outputs` of the call read: a window holding
  // at least these computes them exactly. Empty when they read only the padding.
  IndexRange InputsOf(int64_t n, IndexRange outputs) const;

  // The polyphase form (the call's output j is the full upfirdn's output j + skip()).
  const std::vector<double>& taps() const { return taps_; }
  int up() const { return up_; }
  int down() const { return down_; }
  int64_t skip() const { return skip_; }
  double cval() const { return cval_; }

 private:
  WindowFilter() = default;
  DType dtype_ = DType::kFloat32;
  std::vector<double> taps_;
  int up_ = 1;
  int down_ = 1;
  int64_t skip_ = 0;
  double cval_ = 0;
  bool upfirdn_ = true;
  int rp_up_ = 1;    // ResamplePoly's rates as given (its output length)
  int rp_down_ = 1;
};

// One window of `channels` rows. x holds samples [x_first, x_first + x_len) of every channel,
// row c at x + c * x_stride elements; y receives outputs [out_first, out_first + out_count),
// row c at y + c * y_stride elements. Elements are the filter's dtype. Strides >= the row
// lengths; x and y must not overlap.
struct WindowArgs {
  int64_t channels = 1;
  const void* x = nullptr;
  int64_t x_stride = 0;
  int64_t x_first = 0;
  int64_t x_len = 0;
  void* y = nullptr;
  int64_t y_stride = 0;
  int64_t out_first = 0;
  int64_t out_count = 0;
};

// The window on host memory, on any device (CUDA: one H2D, the kernel, one D2H on device.stream).
// Synchronous: y is complete when this returns. INVALID_ARGUMENT for negative ranges or strides
// shorter than the rows.
absl::Status WindowInto(const Device& device, const WindowFilter& filter, const WindowArgs& host,
                        StageTimes* times = nullptr);

// A WindowFilter prepared on one CUDA device: its taps uploaded (from the device's pool) and the
// kernel chosen. The choice depends only on (up, down, taps per phase, dtype), never on a window,
// so every window of one filter runs the same arithmetic. FAILED_PRECONDITION without CUDA or on
// the CPU device.
class CudaWindow {
 public:
  // Enqueues the taps upload on device.stream; does not synchronise.
  static absl::StatusOr<CudaWindow> Create(const Device& device, const WindowFilter& filter);
  CudaWindow(CudaWindow&&) noexcept;
  CudaWindow& operator=(CudaWindow&&) noexcept;
  ~CudaWindow();

  // Enqueues the window's kernel on device.stream (any stream of the device Create was given;
  // the caller orders it after the taps upload and after x's bytes are there). x and y are
  // device memory of that device. Does not synchronise.
  absl::Status LaunchAsync(const Device& device, const WindowArgs& on_device) const;
  const WindowFilter& filter() const;

 private:
  struct Impl;
  explicit CudaWindow(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fresnel::interp
