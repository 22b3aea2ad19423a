// Least-squares unwrapping on CUDA, in float32: the same Neumann Poisson solve as
// least_squares_cpu.cc, with each 1-D type-II DCT done by Makhoul's reordering, a batched cuFFT
// C2C transform and a twiddle pass. Rows use a contiguous batched plan; columns a strided plan
// (stride = cols, distance 1), which avoids two transposes.
// The weighted path runs the CPU's PCG with float32 vectors: Q(p) is a 5-point stencil over the
// edge weights (fused with the dot product p.Q(p)), the preconditioner is the Poisson solve above,
// and each dot product is a block reduction in double finished by one atomicAdd per block. alpha
// and beta are formed on the host: three small device-to-host copies per iteration.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "core/cuda_util.cuh"
#include "core/staged_copy.h"
#include "fresnel/core/uninitialized_array.h"
#include "fresnel/core/status.h"
#include "unwrap/unwrap_common.h"
#include "unwrap/unwrap_internal.h"

namespace fresnel::unwrap::internal {
namespace {

using fresnel::cuda::BlocksFor;
using fresnel::cuda::DeviceBuffer;
using fresnel::cuda::StageClock;
using fresnel::cuda::StagedDownload;
using fresnel::cuda::StagedPiece;
using fresnel::cuda::StagedUpload;
using fresnel::cuda::StreamOf;

absl::Status CufftStatus(cufftResult r, const char* what) {
  if (r == CUFFT_SUCCESS) return absl::OkStatus();
  if (r == CUFFT_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": cuFFT allocation failed"));
  }
  return absl::InternalError(absl::StrCat(what, ": cuFFT error ", static_cast<int>(r)));
}
#define FRESNEL_CUFFT_RETURN_IF_ERROR(call) FRESNEL_RETURN_IF_ERROR(CufftStatus((call), #call))

// A cuFFT plan whose work area comes from the device pool.
class Plan {
 public:
  ~Plan() {
    if (handle_ != 0) cufftDestroy(handle_);
  }
  // n-point C2C transforms, `batch` of them, element stride `stride`, distance `dist`.
  absl::Status Make(const Device& device, int n, int batch, int stride, int dist) {
    FRESNEL_CUFFT_RETURN_IF_ERROR(cufftCreate(&handle_));
    FRESNEL_CUFFT_RETURN_IF_ERROR(cufftSetAutoAllocation(handle_, 0));
    int dims[1] = {n};
    int embed[1] = {n};
    size_t work = 0;
    FRESNEL_CUFFT_RETURN_IF_ERROR(cufftMakePlanMany(handle_, 1, dims, embed, stride, dist, embed,
                                                    stride, dist, CUFFT_C2C, batch, &work));
    FRESNEL_RETURN_IF_ERROR(work_.Allocate(device, static_cast<int64_t>(work)));
    FRESNEL_CUFFT_RETURN_IF_ERROR(cufftSetWorkArea(handle_, work_.get()));
    FRESNEL_CUFFT_RETURN_IF_ERROR(cufftSetStream(handle_, StreamOf(device)));
    return absl::OkStatus();
  }
  absl::Status Exec(cufftComplex* data, int direction) {
    FRESNEL_CUFFT_RETURN_IF_ERROR(cufftExecC2C(handle_, data, data, direction));
    return absl::OkStatus();
  }

 private:
  cufftHandle handle_ = 0;
  DeviceBuffer<char> work_;
};

__device__ __forceinline__ int Source(int m, int n) {
  return m < (n + 1) / 2 ? 2 * m : 2 * (n - 1 - m) + 1;
}
// e^{i * sign * pi * k / (2n)}, evaluated in double.
__device__ __forceinline__ cufftComplex Twiddle(int k, int n, double sign) {
  double s, c;
  sincospi(sign * k / (2.0 * n), &s, &c);
  return make_cuFloatComplex(static_cast<float>(c), static_cast<float>(s));
}

// rho = div(wrapped gradient), gradients with a masked end = 0; also records the first invalid
// unmasked phase value.
// With edge weights (wx, wy non-null: the step right / down from each pixel), the weighted
// divergence b of the weighted normal equations; multiplying by 1.0 otherwise is exact.
template <class T>
__global__ void RhoKernel(const T* phase, const uint8_t* mask, const float* wx, const float* wy,
                          int rows, int cols, float* rho, int* bad) {
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  if (y >= rows || x >= cols) return;
  const int i = y * cols + x;
  auto masked = [mask](int j) { return mask != nullptr && mask[j] != 0; };
  if (!masked(i)) {
    const double v = static_cast<double>(phase[i]);
    if (!(isfinite(v) && fabs(v) <= ::fresnel::unwrap::kPhaseLimit)) atomicMin(bad, i);
  }
  auto grad = [&](int a, int b) -> double {
    if (masked(a) || masked(b)) return 0.0;
    return (static_cast<double>(phase[b]) - static_cast<double>(phase[a])) -
           kTwoPi * EdgeWrap(phase[a], phase[b]);
  };
  auto ew = [&](const float* w, int j) { return w != nullptr ? static_cast<double>(w[j]) : 1.0; };
  double r = 0;
  if (x + 1 < cols) r += ew(wx, i) * grad(i, i + 1);
  if (x > 0) r -= ew(wx, i - 1) * grad(i - 1, i);
  if (y + 1 < rows) r += ew(wy, i) * grad(i, i + cols);
  if (y > 0) r -= ew(wy, i - cols) * grad(i - cols, i);
  rho[i] = static_cast<float>(r);
}

// Edge weights min(w(p), w(q))^2 right (wx) and down (wy) of each pixel, 0 off the image; w is
// `weights` (1 when null) and 0 on masked pixels.
template <class W>
__global__ void EdgeWeightKernel(const W* weights, const uint8_t* mask, int rows, int cols,
                                 float* wx, float* wy) {
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  if (y >= rows || x >= cols) return;
  const int i = y * cols + x;
  auto w = [&](int j) -> double {
    if (mask != nullptr && mask[j] != 0) return 0.0;
    return weights != nullptr ? static_cast<double>(weights[j]) : 1.0;
  };
  const double wi = w(i);
  const double a = x + 1 < cols ? fmin(wi, w(i + 1)) : 0.0;
  const double b = y + 1 < rows ? fmin(wi, w(i + cols)) : 0.0;
  wx[i] = static_cast<float>(a * a);
  wy[i] = static_cast<float>(b * b);
}

constexpr int kReduceThreads = 256;

// Adds the block's sum of v to *out (blockDim.x == kReduceThreads).
__device__ void BlockSumAdd(double v, double* out) {
  __shared__ double warp_sums[kReduceThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kReduceThreads / 32 ? warp_sums[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
}

#define FRESNEL_GRID_STRIDE(i, n)                                                     \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// *dot += a . b
__global__ void DotKernel(const float* a, const float* b, int64_t n, double* dot) {
  double acc = 0;
  FRESNEL_GRID_STRIDE(i, n) acc += static_cast<double>(a[i]) * b[i];
  BlockSumAdd(acc, dot);
}

// q = Q(p), the weighted Laplacian, and *dot += p . q.
__global__ void ApplyQKernel(const float* p, const float* wx, const float* wy, int cols,
                             int64_t n, float* q, double* dot) {
  double acc = 0;
  FRESNEL_GRID_STRIDE(i, n) {
    const int x = static_cast<int>(i % cols);
    const float v = p[i];
    float r = 0.f;
    if (x + 1 < cols) r += wx[i] * (p[i + 1] - v);
    if (x > 0) r -= wx[i - 1] * (v - p[i - 1]);
    if (i + cols < n) r += wy[i] * (p[i + cols] - v);
    if (i >= cols) r -= wy[i - cols] * (v - p[i - cols]);
    q[i] = r;
    acc += static_cast<double>(v) * r;
  }
  BlockSumAdd(acc, dot);
}

// x += alpha p, r -= alpha q, *dot += r . r
__global__ void UpdateXrKernel(const float* p, const float* q, float alpha, int64_t n, float* x,
                               float* r, double* dot) {
  double acc = 0;
  FRESNEL_GRID_STRIDE(i, n) {
    x[i] += alpha * p[i];
    const float ri = r[i] - alpha * q[i];
    r[i] = ri;
    acc += static_cast<double>(ri) * ri;
  }
  BlockSumAdd(acc, dot);
}

// p = z + beta p
__global__ void UpdatePKernel(const float* z, float beta, int64_t n, float* p) {
  FRESNEL_GRID_STRIDE(i, n) p[i] = z[i] + beta * p[i];
}

// Forward DCT along rows (axis 1) or columns (axis 0): gather in Makhoul's order ...
__global__ void GatherKernel(const float* src, cufftComplex* buf, int rows, int cols, int axis) {
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  if (y >= rows || x >= cols) return;
  const int from = axis == 1 ? y * cols + Source(x, cols) : Source(y, rows) * cols + x;
  buf[y * cols + x] = make_cuFloatComplex(src[from], 0.f);
}
// ... then X[k] = Re(V[k] e^{-i pi k / 2n}).
__global__ void TwiddleKernel(const cufftComplex* buf, float* dst, int rows, int cols, int axis) {
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  if (y >= rows || x >= cols) return;
  const int k = axis == 1 ? x : y, n = axis == 1 ? cols : rows;
  const cufftComplex v = buf[y * cols + x];
  const cufftComplex w = Twiddle(k, n, -1.0);
  dst[y * cols + x] = v.x * w.x - v.y * w.y;
}

// Inverse DCT: V[k] = e^{i pi k / 2n} (X[k] - i X[n - k]), X[n] = 0. With `divide`, X is first
// divided by the Laplacian's eigenvalue 2 cos(pi m / rows) + 2 cos(pi k / cols) - 4 (mode (0,0)
// set to 0): the Poisson solve, fused into the first inverse pass.
__global__ void InversePrepKernel(const float* src, cufftComplex* buf, int rows, int cols,
                                  int axis, bool divide) {
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  if (y >= rows || x >= cols) return;
  auto value = [&](int yy, int xx) -> float {
    float v = src[yy * cols + xx];
    if (!divide) return v;
    if (yy == 0 && xx == 0) return 0.f;
    const double lambda = 2.0 * cospi(static_cast<double>(yy) / rows) +
                          2.0 * cospi(static_cast<double>(xx) / cols) - 4.0;
    return static_cast<float>(v / lambda);
  };
  const int k = axis == 1 ? x : y, n = axis == 1 ? cols : rows;
  const float a = value(y, x);
  float b = 0.f;
  if (k > 0) b = axis == 1 ? value(y, n - k) : value(n - k, x);
  const cufftComplex w = Twiddle(k, n, 1.0);
  // (a - i b) * w
  buf[y * cols + x] = make_cuFloatComplex(a * w.x + b * w.y, a * w.y - b * w.x);
}
// x[Source(m)] = Re(v[m]) / n.
__global__ void ScatterKernel(const cufftComplex* buf, float* dst, int rows, int cols, int axis) {
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
  if (y >= rows || x >= cols) return;
  const int to = axis == 1 ? y * cols + Source(x, cols) : Source(y, rows) * cols + x;
  dst[to] = buf[y * cols + x].x / static_cast<float>(axis == 1 ? cols : rows);
}

template <class T>
__global__ void LsOutputKernel(const T* phase, const uint8_t* mask, const float* phi, int64_t n,
                               bool congruent, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (mask != nullptr && mask[i] != 0) {
      out[i] = T(0);
    } else if (congruent) {
      const double turns =
          rint((static_cast<double>(phi[i]) - static_cast<double>(phase[i])) * kInvTwoPi);
      out[i] = AddTurns(phase[i], static_cast<int>(turns));
    } else {
      out[i] = static_cast<T>(phi[i]);
    }
  }
}

__global__ void SetIntKernel(int* p, int v) { *p = v; }

// The DCT Poisson solve, in place on `real` (n floats), with `buf` (n complex) as scratch.
struct PoissonSolver {
  Plan row_plan, col_plan;
  int rows = 0, cols = 0;
  cufftComplex* buf = nullptr;
  cudaStream_t stream = nullptr;

  absl::Status Solve(float* real) {
    const dim3 block(32, 8), grid((cols + 31) / 32, (rows + 7) / 8);
    // Forward DCT-II along rows (axis 1), then columns (axis 0).
    for (int axis : {1, 0}) {
      GatherKernel<<<grid, block, 0, stream>>>(real, buf, rows, cols, axis);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(GatherKernel);
      FRESNEL_RETURN_IF_ERROR((axis == 1 ? row_plan : col_plan).Exec(buf, CUFFT_FORWARD));
      TwiddleKernel<<<grid, block, 0, stream>>>(buf, real, rows, cols, axis);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(TwiddleKernel);
    }
    // Divide by the eigenvalues and invert: columns, then rows.
    for (int axis : {0, 1}) {
      InversePrepKernel<<<grid, block, 0, stream>>>(real, buf, rows, cols, axis, axis == 0);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(InversePrepKernel);
      FRESNEL_RETURN_IF_ERROR((axis == 1 ? row_plan : col_plan).Exec(buf, CUFFT_INVERSE));
      ScatterKernel<<<grid, block, 0, stream>>>(buf, real, rows, cols, axis);
      FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(ScatterKernel);
    }
    return absl::OkStatus();
  }
};

// Preconditioned conjugate gradients on Q(x) = b (b in `b`, overwritten as the residual r); the
// solution goes to `x`. Mirrors Solve in least_squares_cpu.cc.
absl::Status Pcg(const Device& device, PoissonSolver& poisson, const float* wx, const float* wy,
                 int64_t n, const LeastSquaresOptions& options, float* b, float* x,
                 LeastSquaresResult& result) {
  cudaStream_t stream = poisson.stream;
  DeviceBuffer<float> d_z, d_p, d_q;
  DeviceBuffer<double> d_dot;
  FRESNEL_RETURN_IF_ERROR(d_z.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_p.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_q.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_dot.Allocate(device, 1));
  float *r = b, *z = d_z.get(), *p = d_p.get(), *q = d_q.get();
  const unsigned blocks = std::min<unsigned>(BlocksFor(n, kReduceThreads), 2048);
  // Runs `launch` (which adds to the device scalar) and returns the scalar (synchronises).
  auto reduce = [&](auto launch) -> absl::StatusOr<double> {
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_dot.get(), 0, sizeof(double), stream));
    launch();
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    double v = 0;
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(&v, d_dot.get(), sizeof(double), cudaMemcpyDeviceToHost, stream));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return v;
  };
  auto dot = [&](const float* u, const float* v) {
    return reduce([&] { DotKernel<<<blocks, kReduceThreads, 0, stream>>>(u, v, n, d_dot.get()); });
  };
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x, 0, n * sizeof(float), stream));
  FRESNEL_ASSIGN_OR_RETURN(const double bb, dot(r, r));
  const double b_norm = std::sqrt(bb);
  result.iterations = 0;
  result.residual = b_norm > 0 ? 1.0 : 0.0;
  if (b_norm == 0) return absl::OkStatus();
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(z, r, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  FRESNEL_RETURN_IF_ERROR(poisson.Solve(z));
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(p, z, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  FRESNEL_ASSIGN_OR_RETURN(double rz, dot(r, z));
  while (result.iterations < options.max_iterations) {
    FRESNEL_ASSIGN_OR_RETURN(const double pq, reduce([&] {
      ApplyQKernel<<<blocks, kReduceThreads, 0, stream>>>(p, wx, wy, poisson.cols, n, q,
                                                          d_dot.get());
    }));
    if (pq == 0.0 || rz == 0.0) break;
    const float alpha = static_cast<float>(rz / pq);
    FRESNEL_ASSIGN_OR_RETURN(const double rr, reduce([&] {
      UpdateXrKernel<<<blocks, kReduceThreads, 0, stream>>>(p, q, alpha, n, x, r, d_dot.get());
    }));
    ++result.iterations;
    result.residual = std::sqrt(rr) / b_norm;
    FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares,
                                   0.9 * result.iterations / options.max_iterations));
    if (result.residual <= options.tolerance) break;
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(z, r, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    FRESNEL_RETURN_IF_ERROR(poisson.Solve(z));
    FRESNEL_ASSIGN_OR_RETURN(const double rz_next, dot(r, z));
    const float beta = static_cast<float>(rz_next / rz);
    rz = rz_next;
    UpdatePKernel<<<blocks, kReduceThreads, 0, stream>>>(z, beta, n, p);
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(UpdatePKernel);
  }
  return absl::OkStatus();
}

template <class T>
absl::StatusOr<LeastSquaresResult> Run(const Device& device, const HostArray& phase,
                                       const LeastSquaresOptions& options, StageTimes* times) {
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.ordinal));
  cudaStream_t stream = StreamOf(device);
  const int rows = static_cast<int>(phase.dim(0)), cols = static_cast<int>(phase.dim(1));
  const int64_t n = phase.size();
  StageClock clock(stream);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  DeviceBuffer<T> d_phase, d_out;
  DeviceBuffer<uint8_t> d_mask;
  DeviceBuffer<float> d_real;
  DeviceBuffer<cufftComplex> d_buf;
  DeviceBuffer<int> d_bad;
  FRESNEL_RETURN_IF_ERROR(d_phase.Allocate(device, n));
  // Up through the pinned staging chunks (core/staged_copy.h), phase and mask in one pass.
  std::vector<StagedPiece> up = {{d_phase.get(), phase.raw(), phase.nbytes()}};
  const uint8_t* mask = nullptr;
  if (options.mask != nullptr) {
    FRESNEL_RETURN_IF_ERROR(d_mask.Allocate(device, n));
    up.push_back({d_mask.get(), options.mask->raw(), static_cast<size_t>(n)});
    mask = d_mask.get();
  }
  FRESNEL_RETURN_IF_ERROR(StagedUpload(device.ordinal, up, stream));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kLeastSquares, 0.0));

  FRESNEL_RETURN_IF_ERROR(d_real.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_buf.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_out.Allocate(device, n));
  FRESNEL_RETURN_IF_ERROR(d_bad.Allocate(device, 1));
  PoissonSolver poisson;
  poisson.rows = rows;
  poisson.cols = cols;
  poisson.buf = d_buf.get();
  poisson.stream = stream;
  FRESNEL_RETURN_IF_ERROR(poisson.row_plan.Make(device, cols, rows, 1, cols));
  FRESNEL_RETURN_IF_ERROR(poisson.col_plan.Make(device, rows, cols, cols, 1));

  const dim3 block(32, 8), grid((cols + 31) / 32, (rows + 7) / 8);
  float* real = d_real.get();
  LeastSquaresResult result;
  const bool weighted = RunsWeighted(options);
  DeviceBuffer<float> d_wx, d_wy, d_x;
  if (weighted) {
    FRESNEL_RETURN_IF_ERROR(d_wx.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(d_wy.Allocate(device, n));
    FRESNEL_RETURN_IF_ERROR(d_x.Allocate(device, n));
    const HostArray* w = options.weights;
    if (w == nullptr) {
      EdgeWeightKernel<float><<<grid, block, 0, stream>>>(nullptr, mask, rows, cols, d_wx.get(),
                                                          d_wy.get());
    } else {
      // The weights travel in their own dtype through d_buf (8 bytes per pixel, enough for
      // float64), which the Poisson solve only needs later.
      FRESNEL_RETURN_IF_ERROR(
          StagedUpload(device.ordinal, {{d_buf.get(), w->raw(), w->nbytes()}}, stream));
      if (w->dtype() == DType::kFloat32) {
        EdgeWeightKernel<float><<<grid, block, 0, stream>>>(
            reinterpret_cast<const float*>(d_buf.get()), mask, rows, cols, d_wx.get(),
            d_wy.get());
      } else {
        EdgeWeightKernel<double><<<grid, block, 0, stream>>>(
            reinterpret_cast<const double*>(d_buf.get()), mask, rows, cols, d_wx.get(),
            d_wy.get());
      }
    }
    FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(EdgeWeightKernel<float>);
  }
  SetIntKernel<<<1, 1, 0, stream>>>(d_bad.get(), INT_MAX);
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(SetIntKernel);
  RhoKernel<T><<<grid, block, 0, stream>>>(d_phase.get(), mask, d_wx.get(), d_wy.get(), rows,
                                           cols, real, d_bad.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(RhoKernel<T>);
  const float* phi = real;
  if (weighted) {
    // Invalid phase would turn PCG's scalars into NaN: check first (PCG synchronises anyway).
    int bad = INT_MAX;
    FRESNEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(&bad, d_bad.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (bad != INT_MAX) return BadPhaseValue(phase, bad);
    FRESNEL_RETURN_IF_ERROR(
        Pcg(device, poisson, d_wx.get(), d_wy.get(), n, options, real, d_x.get(), result));
    phi = d_x.get();
  } else {
    FRESNEL_RETURN_IF_ERROR(poisson.Solve(real));
  }
  LsOutputKernel<T><<<std::min<unsigned>(BlocksFor(n, 256), 4096), 256, 0, stream>>>(
      d_phase.get(), mask, phi, n, options.congruent, d_out.get());
  FRESNEL_CUDA_RETURN_IF_LAUNCH_ERROR(LsOutputKernel<T>);
  FRESNEL_RETURN_IF_ERROR(clock.Mark());

  // Every byte is written by the download: no zero fill first (its pages are faulted in by the
  // copy-out threads), or straight into the caller's buffer (options.into).
  result.unwrapped = internal::ResultArray(
      options.into != nullptr ? &options.into->unwrapped : nullptr, phase.dtype(), phase.shape());
  int bad = INT_MAX;
  FRESNEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&bad, d_bad.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
  // Synchronises the stream (the flag above included).
  FRESNEL_RETURN_IF_ERROR(StagedDownload(
      device.ordinal, {{result.unwrapped.raw(), d_out.get(), n * sizeof(T)}}, stream));
  FRESNEL_RETURN_IF_ERROR(clock.Mark());
  FRESNEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  if (bad != INT_MAX) return BadPhaseValue(phase, bad);
  if (times != nullptr) {
    times->h2d_s = clock.Seconds(0);
    times->compute_s = clock.Seconds(1);
    times->d2h_s = clock.Seconds(2);
  }
  FRESNEL_RETURN_IF_ERROR(Report(options.progress, Stage::kDone, 1.0));
  return result;
}

}  // namespace

absl::StatusOr<LeastSquaresResult> UnwrapLeastSquaresCuda(const Device& device,
                                                          const HostArray& phase,
                                                          const LeastSquaresOptions& options,
                                                          StageTimes* times) {
  if (phase.dtype() == DType::kFloat32) return Run<float>(device, phase, options, times);
  return Run<double>(device, phase, options, times);
}

}  // namespace fresnel::unwrap::internal
