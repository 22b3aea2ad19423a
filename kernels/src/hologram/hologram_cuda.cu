// CUDA hologram entry point: uploads, point batching, the float reference and fixed-point
// (TA / PA) launches, the outputs and the cuFFT reconstruction. The tensor-core path lives in
// hologram_tensor.cu.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/core/uninitialized_array.h"
#include "hologram/hologram_cuda_util.cuh"
#include "hologram/hologram_kernels.cuh"

namespace fresnel::hologram {
namespace cuda {
namespace {

using internal::PreparedPoints;

// ---------------------------------------------------------------------------------------------
// Float reference.
// ---------------------------------------------------------------------------------------------

absl::Status RunReference(const Device& device, const PreparedPoints& p,
                          const HologramOptions& options, StageClock* clock,
                          EventProfiler* profiler, float2* field, HologramResult* result) {
  const cudaStream_t stream = StreamOf(device);
  const int64_t n = p.size();
  std::vector<float> amplitude(p.amplitude.begin(), p.amplitude.end());
  PackedUpload up;
  const size_t ox = up.Add(p.x), oy = up.Add(p.y), oi = up.Add(p.inv2lz),
               ot = up.Add(p.phase_turns), oa = up.Add(amplitude), oul = up.Add(p.ulo),
               ouh = up.Add(p.uhi), ovl = up.Add(p.vlo), ovh = up.Add(p.vhi);
  FRESNEL_RETURN_IF_ERROR(up.Upload(device));
  FRESNEL_RETURN_IF_ERROR(clock->Mark());
  profiler->Mark("upload");
  RefPoints pts{up.Ptr<double>(ox),  up.Ptr<double>(oy),  up.Ptr<double>(oi),
                up.Ptr<double>(ot),  up.Ptr<float>(oa),   up.Ptr<int32_t>(oul),
                up.Ptr<int32_t>(ouh), up.Ptr<int32_t>(ovl), up.Ptr<int32_t>(ovh)};

  const int64_t mpad = RoundUp(p.width, kRefBlock), npad = RoundUp(p.height, kRefBlock);
  const int64_t per_point = (mpad + npad) * static_cast<int64_t>(sizeof(uint2));
  FRESNEL_ASSIGN_OR_RETURN(const int64_t budget, WorkspaceBudget(options, 0));
  int64_t batch = budget / per_point / kRefStage * kRefStage;
  if (batch < kRefStage) return TooLarge(per_point * kRefStage, budget);
  batch = std::min(batch, RoundUp(n, kRefStage));
  DeviceBuffer<uint2> xt, yt;
  FRESNEL_RETURN_IF_ERROR(xt.Allocate(device, batch * mpad));
  FRESNEL_RETURN_IF_ERROR(yt.Allocate(device, batch * npad));

  int64_t batches = 0;
  for (int64_t j0 = 0; j0 < n; j0 += batch, ++batches) {
    if (j0 > 0 && options.should_stop && options.should_stop()) {
      return absl::CancelledError("the render was stopped (request cancelled or past its deadline)");
    }
    const int64_t nj = std::min(batch, n - j0);
    RefTablesKernel<<<StrideGrid(nj * mpad), 256, 0, stream>>>(pts, j0, nj, p.width, mpad, 0,
                                                                 p.pitch_m, xt.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RefTablesKernel);
    RefTablesKernel<<<StrideGrid(nj * npad), 256, 0, stream>>>(pts, j0, nj, p.height, npad, 1,
                                                                 p.pitch_m, yt.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RefTablesKernel);
    profiler->Mark("phase1_tables");
    const dim3 grid(static_cast<unsigned>(mpad / kRefBlock), static_cast<unsigned>(npad / kRefBlock));
    const dim3 block(kRefBlock, kRefBlock);
    if (p.clipped) {
      RefPixelsKernel<true><<<grid, block, 0, stream>>>(xt.get(), yt.get(), nj, mpad, npad,
                                                        static_cast<int>(p.width),
                                                        static_cast<int>(p.height), j0 > 0, field);
    } else {
      RefPixelsKernel<false><<<grid, block, 0, stream>>>(xt.get(), yt.get(), nj, mpad, npad,
                                                         static_cast<int>(p.width),
                                                         static_cast<int>(p.height), j0 > 0, field);
    }
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // RefPixelsKernel
    profiler->Mark("phase2_pixels");
  }
  result->point_batches = batches;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Fixed point (TA / PA).
// ---------------------------------------------------------------------------------------------

template <bool kPiecewise, bool kMasked>
void LaunchFixedPixels(bool paper, dim3 grid, cudaStream_t stream, const uint32_t* xt,
                       const uint32_t* yt, const uint32_t* xm, const uint32_t* ym,
                       const uint32_t* amp, int64_t nq, int64_t stride, int width, int height,
                       bool accumulate, long long* re, long long* im) {
  const dim3 block(kFixBlock, kFixBlock);
  if (paper) {
    FixedPixelsKernel<kPiecewise, kMasked, PaperOps, false><<<grid, block, 0, stream>>>(
        xt, yt, xm, ym, amp, nq, stride, width, height, accumulate, re, im);
  } else {
    FixedPixelsKernel<kPiecewise, kMasked, FastOps, true><<<grid, block, 0, stream>>>(
        xt, yt, xm, ym, amp, nq, stride, width, height, accumulate, re, im);
  }
}

absl::Status RunFixed(const Device& device, const PreparedPoints& p,
                      const HologramOptions& options, bool piecewise, StageClock* clock,
                      EventProfiler* profiler, float2* field, HologramResult* result) {
  const cudaStream_t stream = StreamOf(device);
  const internal::FixedPointPoints f =
      internal::PrepareFixedPoint(p, options.lateral_subdivision, piecewise);
  const int64_t n = p.size();
  const int64_t quads = RoundUp(CeilDiv(n, 4), kFixStage);
  std::vector<uint32_t> amp(static_cast<size_t>(quads), 0);
  for (int64_t j = 0; j < n; ++j) amp[j / 4] |= static_cast<uint32_t>(f.a8[j]) << (8 * (j % 4));
  PackedUpload up;
  const size_t oxq = up.Add(f.xq), oyq = up.Add(f.yq), oc = up.Add(f.c), op = up.Add(f.phase0),
               oul = up.Add(p.ulo), ouh = up.Add(p.uhi), ovl = up.Add(p.vlo),
               ovh = up.Add(p.vhi), oa = up.Add(amp);
  FRESNEL_RETURN_IF_ERROR(up.Upload(device));
  FRESNEL_RETURN_IF_ERROR(clock->Mark());
  profiler->Mark("upload");
  FixedPoints pts{up.Ptr<int64_t>(oxq), up.Ptr<int64_t>(oyq), up.Ptr<uint32_t>(oc),
                  up.Ptr<uint32_t>(op), up.Ptr<int32_t>(oul), up.Ptr<int32_t>(ouh),
                  up.Ptr<int32_t>(ovl), up.Ptr<int32_t>(ovh), n};
  const uint32_t* amp_dev = up.Ptr<uint32_t>(oa);

  const bool masked = p.clipped;
  const int64_t mpad = RoundUp(p.width, kFixTileU), npad = RoundUp(p.height, kFixTileV);
  const int64_t pixels = p.width * p.height;
  DeviceBuffer<long long> tot_re, tot_im;
  FRESNEL_RETURN_IF_ERROR(tot_re.Allocate(device, pixels));
  FRESNEL_RETURN_IF_ERROR(tot_im.Allocate(device, pixels));

  // (M + N) words per quad, twice with masks.
  const int64_t per_quad = (mpad + npad) * 4 * (masked ? 2 : 1);
  FRESNEL_ASSIGN_OR_RETURN(const int64_t budget, WorkspaceBudget(options, 0));
  int64_t batch = budget / per_quad / kFixStage * kFixStage;
  if (batch < kFixStage) return TooLarge(per_quad * kFixStage, budget);
  batch = std::min(batch, quads);
  DeviceBuffer<uint32_t> xt, yt, xm, ym;
  FRESNEL_RETURN_IF_ERROR(xt.Allocate(device, batch * mpad));
  FRESNEL_RETURN_IF_ERROR(yt.Allocate(device, batch * npad));
  if (masked) {
    FRESNEL_RETURN_IF_ERROR(xm.Allocate(device, batch * mpad));
    FRESNEL_RETURN_IF_ERROR(ym.Allocate(device, batch * npad));
  }

  int64_t batches = 0;
  for (int64_t q0 = 0; q0 < quads; q0 += batch, ++batches) {
    if (q0 > 0 && options.should_stop && options.should_stop()) {
      return absl::CancelledError("the render was stopped (request cancelled or past its deadline)");
    }
    const int64_t nq = std::min(batch, quads - q0);
    const unsigned qblocks = static_cast<unsigned>(CeilDiv(nq, 256));
    FixedTablesKernel<<<dim3(qblocks, static_cast<unsigned>(mpad)), 256, 0, stream>>>(
        pts, q0, nq, p.width, mpad, nq, f.subdivision, 0, masked, xt.get(), xm.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FixedTablesKernel);
    FixedTablesKernel<<<dim3(qblocks, static_cast<unsigned>(npad)), 256, 0, stream>>>(
        pts, q0, nq, p.height, npad, nq, f.subdivision, 1, masked, yt.get(), ym.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FixedTablesKernel);
    profiler->Mark("phase1_tables");
    const dim3 grid(static_cast<unsigned>(mpad / kFixTileU), static_cast<unsigned>(npad / kFixTileV));
    const int w = static_cast<int>(p.width), h = static_cast<int>(p.height);
    const bool acc = q0 > 0;
    if (piecewise) {
      if (masked) {
        LaunchFixedPixels<true, true>(options.paper_intrinsics, grid, stream, xt.get(), yt.get(),
                                      xm.get(), ym.get(), amp_dev + q0, nq, nq, w, h, acc,
                                      tot_re.get(), tot_im.get());
      } else {
        LaunchFixedPixels<true, false>(options.paper_intrinsics, grid, stream, xt.get(), yt.get(),
                                       xm.get(), ym.get(), amp_dev + q0, nq, nq, w, h, acc,
                                       tot_re.get(), tot_im.get());
      }
    } else {
      if (masked) {
        LaunchFixedPixels<false, true>(options.paper_intrinsics, grid, stream, xt.get(), yt.get(),
                                       xm.get(), ym.get(), amp_dev + q0, nq, nq, w, h, acc,
                                       tot_re.get(), tot_im.get());
      } else {
        LaunchFixedPixels<false, false>(options.paper_intrinsics, grid, stream, xt.get(),
                                        yt.get(), xm.get(), ym.get(), amp_dev + q0, nq, nq, w, h,
                                        acc, tot_re.get(), tot_im.get());
      }
    }
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());  // FixedPixelsKernel
    profiler->Mark("phase2_pixels");
  }
  FixedFinishKernel<<<::fresnel::cuda::BlocksFor(pixels, 256), 256, 0, stream>>>(
      tot_re.get(), tot_im.get(), pixels, f.scale, field);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(FixedFinishKernel);
  profiler->Mark("finish");
  result->point_batches = batches;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// ASM reconstruction (cuFFT).
// ---------------------------------------------------------------------------------------------

absl::Status CufftStatus(cufftResult r, const char* what) {
  if (r == CUFFT_SUCCESS) return absl::OkStatus();
  if (r == CUFFT_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": cuFFT could not allocate memory"));
  }
  return absl::InternalError(absl::StrCat(what, ": cuFFT error ", static_cast<int>(r)));
}

// C2C plans per (device, height, width), one cache per host thread: a plan's work area must not
// be shared by calls in flight on different streams, and every entry point here synchronises
// its stream before returning, so one thread never has two executions of a plan in flight.
absl::StatusOr<cufftHandle> CachedPlan(int ordinal, int64_t height, int64_t width) {
  struct Cache {
    std::map<std::tuple<int, int64_t, int64_t>, cufftHandle> plans;
    ~Cache() {
      for (auto& [key, plan] : plans) cufftDestroy(plan);
    }
  };
  thread_local Cache cache;
  const auto key = std::make_tuple(ordinal, height, width);
  auto it = cache.plans.find(key);
  if (it != cache.plans.end()) return it->second;
  cufftHandle plan;
  FRESNEL_RETURN_IF_ERROR(CufftStatus(
      cufftPlan2d(&plan, static_cast<int>(height), static_cast<int>(width), CUFFT_C2C),
      "cufftPlan2d"));
  cache.plans.emplace(key, plan);
  return plan;
}

// Reconstructs `field` (float2 [H][W] on the device) into an 8-bit image on the device; the
// scale (max |U|) is copied to *scale_host, valid once the stream has synchronised.
absl::Status AsmOnDevice(const Device& device, const float2* field, int64_t width, int64_t height,
                         const AsmOptions& options, DeviceBuffer<uint8_t>* image,
                         unsigned int* scale_bits_host) {
  const cudaStream_t stream = StreamOf(device);
  const int64_t n = width * height;
  DeviceBuffer<float2> work;
  DeviceBuffer<float> magnitude;
  DeviceBuffer<unsigned int> max_bits;
  FRESNEL_RETURN_IF_ERROR(work.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(magnitude.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(max_bits.Allocate(device, 1));
  FRESNEL_RETURN_IF_ERROR(image->Allocate(device, n));
  const unsigned blocks = ::fresnel::cuda::BlocksFor(n, 256);
  AsmSourceKernel<<<blocks, 256, 0, stream>>>(
      field, n, options.source == ReconstructionSource::kPhaseOnly, work.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(AsmSourceKernel);
  FRESNEL_ASSIGN_OR_RETURN(cufftHandle plan, CachedPlan(device.ordinal, height, width));
  FRESNEL_RETURN_IF_ERROR(CufftStatus(cufftSetStream(plan, stream), "cufftSetStream"));
  auto* data = reinterpret_cast<cufftComplex*>(work.get());
  FRESNEL_RETURN_IF_ERROR(
      CufftStatus(cufftExecC2C(plan, data, data, CUFFT_FORWARD), "cufftExecC2C forward"));
  AsmTransferKernel<<<blocks, 256, 0, stream>>>(work.get(), width, height, options.pitch_m,
                                                options.wavelength_m, options.depth_m);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(AsmTransferKernel);
  FRESNEL_RETURN_IF_ERROR(
      CufftStatus(cufftExecC2C(plan, data, data, CUFFT_INVERSE), "cufftExecC2C inverse"));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(max_bits.get(), 0, sizeof(unsigned int), stream));
  MagnitudeMaxKernel<<<blocks, 256, 0, stream>>>(work.get(), n, magnitude.get(), max_bits.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(MagnitudeMaxKernel);
  QuantiseKernel<<<blocks, 256, 0, stream>>>(magnitude.get(), n, max_bits.get(), image->get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(QuantiseKernel);
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scale_bits_host, max_bits.get(),
                                               sizeof(unsigned int), cudaMemcpyDeviceToHost,
                                               stream));
  return absl::OkStatus();
}

double BitsToFloat(unsigned int bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class T>
absl::Status CopyToHost(const Device& device, const T* src, HostArray* dst) {
  return dst->nbytes() == 0
             ? absl::OkStatus()
             : ::fresnel::cuda::ToStatus(cudaMemcpyAsync(dst->raw(), src, dst->nbytes(),
                                                         cudaMemcpyDeviceToHost, StreamOf(device)),
                                         "cudaMemcpyAsync (result)");
}

}  // namespace
}  // namespace cuda

namespace internal {

absl::StatusOr<HologramResult> HologramCuda(const Device& device, const PreparedPoints& prepared,
                                            const HologramOptions& options, Algorithm algorithm,
                                            TensorPrecision precision, StageTimes* times) {
  using namespace ::fresnel::hologram::cuda;  // NOLINT
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  const cudaStream_t stream = StreamOf(device);
  StageClock clock(stream);
  EventProfiler profiler(options.profile, stream);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  profiler.Mark("start");

  const int64_t w = prepared.width, h = prepared.height, pixels = w * h;
  DeviceBuffer<float2> field;
  FRESNEL_RETURN_IF_ERROR(field.Allocate(device, pixels));
  HologramResult result;
  result.algorithm = algorithm;
  switch (algorithm) {
    case Algorithm::kReference:
      FRESNEL_RETURN_IF_ERROR(
          RunReference(device, prepared, options, &clock, &profiler, field.get(), &result));
      break;
    case Algorithm::kTriangular:
    case Algorithm::kPiecewise:
      FRESNEL_RETURN_IF_ERROR(RunFixed(device, prepared, options,
                                       algorithm == Algorithm::kPiecewise, &clock, &profiler,
                                       field.get(), &result));
      break;
    case Algorithm::kTensor:
      FRESNEL_RETURN_IF_ERROR(RunTensor(device, prepared, options, precision, &clock, &profiler,
                                        field.get(), &result));
      break;
    case Algorithm::kAuto:
      return absl::InternalError("unresolved algorithm");
  }

  DeviceBuffer<uint8_t> phase, recon;
  DeviceBuffer<float> amplitude;
  if (options.outputs.phase) FRESNEL_RETURN_IF_ERROR(phase.Allocate(device, pixels));
  if (options.outputs.amplitude) FRESNEL_RETURN_IF_ERROR(amplitude.Allocate(device, pixels));
  if (options.outputs.phase || options.outputs.amplitude) {
    OutputsKernel<<<::fresnel::cuda::BlocksFor(pixels, 256), 256, 0, stream>>>(
        field.get(), pixels, phase.get(), amplitude.get());
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(OutputsKernel);
    profiler.Mark("outputs");
  }
  unsigned int scale_bits = 0;
  if (options.reconstruction.enabled) {
    const AsmOptions asm_options{options.pitch_m, options.wavelength_m,
                                 options.reconstruction.depth_m, options.reconstruction.source};
    FRESNEL_RETURN_IF_ERROR(AsmOnDevice(device, field.get(), w, h, asm_options, &recon, &scale_bits));
    profiler.Mark("reconstruction");
  }
  FRESNEL_RETURN_IF_ERROR(clock.Mark());

  const std::vector<int64_t> shape = {h, w};
  // The outputs are not zero-filled: the download writes every byte of each.
  PackedDownload down;
  if (options.outputs.field) {
    result.field = UninitializedArray(DType::kComplex64, shape);
    down.Add(field.get(), &result.field);
  }
  if (options.outputs.phase) {
    result.phase = UninitializedArray(DType::kUint8, shape);
    down.Add(phase.get(), &result.phase);
  }
  if (options.outputs.amplitude) {
    result.amplitude = UninitializedArray(DType::kFloat32, shape);
    down.Add(amplitude.get(), &result.amplitude);
  }
  if (options.reconstruction.enabled) {
    result.reconstruction = UninitializedArray(DType::kUint8, shape);
    down.Add(recon.get(), &result.reconstruction);
  }
  FRESNEL_RETURN_IF_ERROR(down.Enqueue(device));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  down.Finish();
  result.reconstruction_scale = BitsToFloat(scale_bits);
  result.profile = profiler.Durations();
  if (times != nullptr) {
    times->h2d_s = clock.Seconds(0);
    times->compute_s = clock.Seconds(1);
    times->d2h_s = clock.Seconds(2);
  }
  return result;
}

absl::StatusOr<Reconstruction> ReconstructAsmCuda(const Device& device, const HostArray& field,
                                                  const AsmOptions& options, StageTimes* times) {
  using namespace ::fresnel::hologram::cuda;  // NOLINT
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  const cudaStream_t stream = StreamOf(device);
  StageClock clock(stream);
  const int64_t h = field.dim(0), w = field.dim(1);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  DeviceBuffer<float2> dfield;
  FRESNEL_RETURN_IF_ERROR(dfield.Allocate(device, w * h));
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dfield.get(), field.raw(), field.nbytes(),
                                               cudaMemcpyHostToDevice, stream));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  DeviceBuffer<uint8_t> image;
  unsigned int scale_bits = 0;
  FRESNEL_RETURN_IF_ERROR(AsmOnDevice(device, dfield.get(), w, h, options, &image, &scale_bits));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  Reconstruction r;
  r.image = HostArray(DType::kUint8, {h, w});
  FRESNEL_RETURN_IF_ERROR(CopyToHost(device, image.get(), &r.image));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  r.scale = BitsToFloat(scale_bits);
  if (times != nullptr) {
    times->h2d_s = clock.Seconds(0);
    times->compute_s = clock.Seconds(1);
    times->d2h_s = clock.Seconds(2);
  }
  return r;
}

}  // namespace internal
}  // namespace fresnel::hologram
