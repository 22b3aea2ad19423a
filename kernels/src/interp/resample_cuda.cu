// The CUDA back end of scipy.signal.resample (FFT method): batched cuFFT over channels, the
// spectrum surgery of resample_spectrum.h in a kernel, all on the Device's stream with buffers and
// the cuFFT work area from its pool (plans are made per call with auto-allocation off).
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_util.cuh"
#include "fresnel/core/status.h"
#include "interp/interp_internal.h"
#include "interp/resample_spectrum.h"
#include "interp/transfer_cuda.cuh"

namespace fresnel::interp::internal {
namespace {

constexpr int kThreads = 256;

absl::Status CufftStatus(cufftResult r, const char* what) {
  if (r == CUFFT_SUCCESS) return absl::OkStatus();
  if (r == CUFFT_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": cuFFT could not allocate memory"));
  }
  return absl::InternalError(absl::StrCat(what, ": cuFFT error ", static_cast<int>(r)));
}

// A plan destroyed with its owner.
struct Plan {
  cufftHandle handle = 0;
  bool made = false;
  ~Plan() {
    if (made) cufftDestroy(handle);
  }
};

// Complex working type of each signal type.
template <class T> struct WorkOf;
template <> struct WorkOf<float> { using C = float2; using R = float; };
template <> struct WorkOf<float2> { using C = float2; using R = float; };
template <> struct WorkOf<double> { using C = double2; using R = double; };
template <> struct WorkOf<double2> { using C = double2; using R = double; };

template <class C> __device__ __forceinline__ C Make(double re, double im);
template <> __device__ __forceinline__ float2 Make<float2>(double re, double im) {
  return make_float2(static_cast<float>(re), static_cast<float>(im));
}
template <> __device__ __forceinline__ double2 Make<double2>(double re, double im) {
  return make_double2(re, im);
}

template <class T, class C>
__device__ __forceinline__ C ToComplex(T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return Make<C>(v, 0.0);
  } else {
    return Make<C>(v.x, v.y);
  }
}

template <class T, class C>
__global__ void __launch_bounds__(kThreads) LoadKernel(const T* __restrict__ x, int64_t n,
                                                       C* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    out[i] = ToComplex<T, C>(x[i]);
  }
}

// F[c][k] from X[c][.] per resample_spectrum.h, each X bin times its window weight w (null: no
// window), the sums in double.
template <class C>
__global__ void __launch_bounds__(kThreads)
    SpectrumKernel(const C* __restrict__ xs, const double* __restrict__ w, int64_t nx,
                   int64_t num, int64_t channels, bool real_input, C* __restrict__ f) {
  const int64_t total = channels * num;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t c = i / num, k = i - c * num;
    SpectrumTerm t = real_input ? RealBin(k, nx, num) : ComplexBin(k, nx, num);
    if (w != nullptr) {
      if (t.j1 >= 0) t.s1 *= w[t.j1];
      if (t.j2 >= 0) t.s2 *= w[t.j2];
    }
    const C* row = xs + c * nx;
    double re = 0, im = 0;
    if (t.j1 >= 0) {
      re += t.s1 * row[t.j1].x;
      im += t.s1 * row[t.j1].y;
    }
    if (t.j2 >= 0) {
      re += t.s2 * row[t.j2].x;
      im += t.s2 * row[t.j2].y;
    }
    if (t.conj) im = -im;
    if (t.real_only) im = 0;
    f[i] = Make<C>(re, im);
  }
}

template <class T, class C>
__global__ void __launch_bounds__(kThreads) StoreKernel(const C* __restrict__ f, int64_t n,
                                                        double scale, T* __restrict__ y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      y[i] = static_cast<T>(f[i].x * scale);
    } else {
      T v;
      v.x = static_cast<decltype(v.x)>(f[i].x * scale);
      v.y = static_cast<decltype(v.y)>(f[i].y * scale);
      y[i] = v;
    }
  }
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535)));
}

// A batched 1-D C2C/Z2Z plan of `len` points, work area from the device's pool.
absl::Status MakePlan(const Device& device, cudaStream_t stream, int64_t len, int64_t batch,
                      bool dbl, Plan* plan, cuda::DeviceBuffer<unsigned char>* work) {
  FRESNEL_RETURN_IF_ERROR(CufftStatus(cufftCreate(&plan->handle), "cufftCreate"));
  plan->made = true;
  FRESNEL_RETURN_IF_ERROR(
      CufftStatus(cufftSetAutoAllocation(plan->handle, 0), "cufftSetAutoAllocation"));
  long long n = len;
  size_t work_bytes = 0;
  FRESNEL_RETURN_IF_ERROR(CufftStatus(
      cufftMakePlanMany64(plan->handle, 1, &n, nullptr, 1, n, nullptr, 1, n,
                          dbl ? CUFFT_Z2Z : CUFFT_C2C, batch, &work_bytes),
      "cufftMakePlanMany64"));
  FRESNEL_RETURN_IF_ERROR(work->Allocate(device, static_cast<int64_t>(work_bytes)));
  FRESNEL_RETURN_IF_ERROR(
      CufftStatus(cufftSetWorkArea(plan->handle, work->get()), "cufftSetWorkArea"));
  return CufftStatus(cufftSetStream(plan->handle, stream), "cufftSetStream");
}

template <class C>
absl::Status Exec(const Plan& plan, C* data, int direction) {
  if constexpr (std::is_same_v<C, double2>) {
    auto* d = reinterpret_cast<cufftDoubleComplex*>(data);
    return CufftStatus(cufftExecZ2Z(plan.handle, d, d, direction), "cufftExecZ2Z");
  } else {
    auto* d = reinterpret_cast<cufftComplex*>(data);
    return CufftStatus(cufftExecC2C(plan.handle, d, d, direction), "cufftExecC2C");
  }
}

template <class T>
absl::StatusOr<HostArray> Run(const Device& device, const HostSignalView& x, int64_t num,
                              const ResampleSpectrum& spectrum, StageTimes* times) {
  using C = typename WorkOf<T>::C;
  constexpr bool kReal = std::is_same_v<T, float> || std::is_same_v<T, double>;
  constexpr bool kDouble = std::is_same_v<C, double2>;
  const int64_t nx = x.len, ch = x.channels;
  HostArray y(x.dtype, {ch, num});
  if (y.size() == 0) return y;
  cudaStream_t stream = cuda::StreamOf(device);
  cuda::StageClock clock(stream);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  cuda::DeviceBuffer<T> xd, yd;
  cuda::DeviceBuffer<C> xs, f;
  cuda::DeviceBuffer<double> wd;
  FRESNEL_RETURN_IF_ERROR(xd.Allocate(device, ch * nx));
  FRESNEL_RETURN_IF_ERROR(xs.Allocate(device, ch * nx));
  FRESNEL_RETURN_IF_ERROR(f.Allocate(device, ch * num));
  FRESNEL_RETURN_IF_ERROR(yd.Allocate(device, ch * num));
  FRESNEL_RETURN_IF_ERROR(UploadRowsAsync(x, xd.get(), stream));
  if (!spectrum.weights.empty()) {
    FRESNEL_RETURN_IF_ERROR(wd.Allocate(device, nx));
    // Pageable source: the copy is staged before cudaMemcpyAsync returns.
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(wd.get(), spectrum.weights.data(),
                                                 nx * sizeof(double), cudaMemcpyHostToDevice,
                                                 stream));
  }
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  Plan forward, inverse;
  cuda::DeviceBuffer<unsigned char> work_f, work_i;
  if (!spectrum.freq_domain) {
    FRESNEL_RETURN_IF_ERROR(MakePlan(device, stream, nx, ch, kDouble, &forward, &work_f));
  }
  FRESNEL_RETURN_IF_ERROR(MakePlan(device, stream, num, ch, kDouble, &inverse, &work_i));
  LoadKernel<T, C><<<GridFor(ch * nx), kThreads, 0, stream>>>(xd.get(), ch * nx, xs.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((LoadKernel<T, C>));
  if (!spectrum.freq_domain) FRESNEL_RETURN_IF_ERROR(Exec(forward, xs.get(), CUFFT_FORWARD));
  SpectrumKernel<C><<<GridFor(ch * num), kThreads, 0, stream>>>(
      xs.get(), spectrum.weights.empty() ? nullptr : wd.get(), nx, num, ch, kReal, f.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(SpectrumKernel<C>);
  FRESNEL_RETURN_IF_ERROR(Exec(inverse, f.get(), CUFFT_INVERSE));
  StoreKernel<T, C><<<GridFor(ch * num), kThreads, 0, stream>>>(
      f.get(), ch * num, 1.0 / static_cast<double>(nx), yd.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR((StoreKernel<T, C>));
  FRESNEL_RETURN_IF_ERROR(FinishCall(clock, yd.get(), y, stream, times));
  return y;
}

}  // namespace

absl::StatusOr<HostArray> ResampleCuda(const Device& device, const HostSignalView& x, int64_t num,
                                       const ResampleSpectrum& spectrum, StageTimes* times) {
  if (device.kind != DeviceKind::kCuda) {
    return absl::InvalidArgumentError("ResampleCuda needs a CUDA device");
  }
  if (device.stream == nullptr) {
    return absl::InvalidArgumentError(
        "device.stream is null: interp never enqueues on the legacy default stream");
  }
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  switch (x.dtype) {
    case DType::kFloat32: return Run<float>(device, x, num, spectrum, times);
    case DType::kFloat64: return Run<double>(device, x, num, spectrum, times);
    case DType::kComplex64: return Run<float2>(device, x, num, spectrum, times);
    case DType::kComplex128: return Run<double2>(device, x, num, spectrum, times);
    default: return ValidateDType(x.dtype);
  }
}

}  // namespace fresnel::interp::internal
