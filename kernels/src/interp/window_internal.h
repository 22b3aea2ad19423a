// Internal to the interp area: a one-shot window whose x and y may lie in device memory (CUDA IPC
// regions) and whose host legs may be cut into chunks on three streams so that copies overlap the
// kernel (UpfirdnInto's IntoOptions, fresnel/interp/into.h). Not installed; no CUDA types.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "fresnel/core/device.h"
#include "interp/interp_internal.h"

namespace fresnel::interp::internal {

// Outputs [out_first, out_first + out_count) of the full upfirdn of `filter` over x, for every
// channel. x: [channels, len] contiguous at x, host memory when x_device < 0, else device memory
// of CUDA ordinal x_device; y: [channels, out_count] contiguous, likewise.
struct PlacedWindow {
  const Polyphase* filter = nullptr;
  DType dtype = DType::kFloat32;
  int64_t channels = 1;
  int64_t len = 0;
  const void* x = nullptr;
  int x_device = -1;
  // Host x only: x is preceded by `head_len` samples per channel at `head` ([channels, head_len]
  // contiguous), so the window is [head | x], head_len + len samples (StreamingResampler's delay
  // line and the new chunk, never copied into one buffer on the host). `x_first` is the window's
  // first sample index in the signal (the kernel sees cval outside [x_first, x_first + window)).
  const void* head = nullptr;
  int64_t head_len = 0;
  int64_t x_first = 0;
  double cval = 0;
  int64_t out_first = 0;
  int64_t out_count = 0;
  void* y = nullptr;
  int y_device = -1;
  // > 0: the host legs (x host: H2D; y host: D2H) are cut into windows of this many outputs,
  // round-robin on three streams of the device, each with its own device buffers (a ring of
  // three), so chunk i+1's upload, chunk i's kernel and chunk i-1's download run at once.
  // Same bits as one window: each output reads the same samples in the same order.
  int64_t chunk_outputs = 0;
  // IntoOptions::x_prefix_ready (host x only).
  std::function<void(int64_t bytes)> x_prefix_ready;
};

#if defined(FRESNEL_WITH_CUDA)
// Runs it on `device` (a CUDA device). x or y on another device moves by one peer copy (D2D
// through the host where the devices have no peer access: cudaMemcpyPeer decides). Device
// pointers not 256-byte aligned go through a device buffer (one D2D copy). Synchronous.
// times: h2d_s / compute_s / d2h_s are the sums of the chunks' stage times on their streams (with
// chunks they overlap, so they add up to more than the call's wall time); peer copies count as
// h2d / d2h.
absl::Status UpfirdnWindowCudaPlaced(const Device& device, const PlacedWindow& call,
                                     StageTimes* times);
#endif

}  // namespace fresnel::interp::internal
