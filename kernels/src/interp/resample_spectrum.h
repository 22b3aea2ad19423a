// scipy.signal.resample's spectrum surgery (FFT method, window=None), as an index map shared by
// the CPU and CUDA back ends: output bin k of the full length-`num` spectrum F is
//
//   v = s1 * X[j1] + s2 * X[j2]   (a term is absent when its index is -1)
//   F[k] = real_only ? Re(v') : v',   v' = conj ? conj(v) : v
//
// where X is the full length-nx DFT of one channel. SciPy (1.10, signaltools.py) copies the
// positive frequencies up to N/2 (N = min(num, nx)) and, for complex input, the negative ones;
// for even N it doubles (real) or merges (complex) the Nyquist bin when downsampling and halves /
// splits it when upsampling. For real input SciPy works on rfft bins and inverts with irfft; here
// the same bins are extended to the Hermitian full spectrum (irfft ignores the imaginary parts
// of bin 0 and, for even num, of bin num/2).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FRESNEL_INTERP_HD __host__ __device__
#else
#define FRESNEL_INTERP_HD
#endif

namespace fresnel::interp::internal {

struct SpectrumTerm {
  int64_t j1 = -1;
  double s1 = 0;
  int64_t j2 = -1;
  double s2 = 0;
  bool conj = false;
  bool real_only = false;
};

// Bin k of the complex-input output spectrum Y (length num).
FRESNEL_INTERP_HD inline SpectrumTerm ComplexBin(int64_t k, int64_t nx, int64_t num) {
  SpectrumTerm t;
  const int64_t n = nx < num ? nx : num;
  const int64_t nyq = n / 2 + 1;
  if (k < nyq) {
    t.j1 = k;
    t.s1 = 1;
  } else if (n > 2 && k >= num - (n - nyq)) {
    t.j1 = k - num + nx;
    t.s1 = 1;
  }
  if (n % 2 == 0) {
    if (num < nx) {
      // Y[-N/2] += X[-N/2]; with num == N that is bin N/2 (an empty slice when N == 2).
      if (n > 2 && k == n / 2) {
        t.j2 = nx - n / 2;
        t.s2 = 1;
      }
    } else if (nx < num) {
      if (k == n / 2 || k == num - n / 2) {
        t.j1 = n / 2;
        t.s1 = 0.5;
        t.j2 = -1;
      }
    }
  }
  return t;
}

// Bin k of the Hermitian full spectrum that irfft(Y, num) inverts for real input.
FRESNEL_INTERP_HD inline SpectrumTerm RealBin(int64_t k, int64_t nx, int64_t num) {
  const bool mirrored = k > num / 2;
  const int64_t h = mirrored ? num - k : k;  // the rfft bin
  SpectrumTerm t;
  const int64_t n = nx < num ? nx : num;
  const int64_t nyq = n / 2 + 1;
  if (h < nyq) {
    t.j1 = h;
    t.s1 = 1;
    if (n % 2 == 0 && h == n / 2) {
      if (num < nx) t.s1 = 2;
      if (nx < num) t.s1 = 0.5;
    }
  }
  t.conj = mirrored;
  t.real_only = h == 0 || (num % 2 == 0 && h == num / 2);
  return t;
}

}  // namespace fresnel::interp::internal
