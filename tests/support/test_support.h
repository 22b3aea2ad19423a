// Shared test helpers: the devices a kernel test runs on, random inputs, error norms and paths.
#pragma once

#include <complex>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fresnel/core/array.h"
#include "fresnel/core/device.h"

namespace fresnel::testing {

// A CUDA device with its own stream, created on first use; nullptr when no GPU is visible.
// The GPU test cases call this and return early (after a WARN) when it is null.
const Device* TestGpu();

// Returns true (and logs a WARN) when a [gpu] test must skip because no GPU is visible, and
// records the running test case as skipped: an executable whose every case skipped exits with
// kSkipReturnCode, which CTest reports as "Skipped" (tests/catch_main.cc, SKIP_RETURN_CODE).
bool SkipWithoutGpu();
inline constexpr int kSkipReturnCode = 77;
// The same for a case that needs `n` GPUs (issue 14's two-GPU cases): skips, recorded like
// SkipWithoutGpu, when fewer are visible.
bool SkipWithFewerGpus(int n);
// Names of the test cases that called SkipWithoutGpu() and skipped.
const std::set<std::string>& GpuSkippedCases();

// Path of a file under the repository, e.g. "tests/kernels/interp/golden/x.npy".
std::string SourcePath(const std::string& relative);
// Path under ../shared/data, or "" when that folder is absent (tests then skip).
std::string DataPath(const std::string& relative);

// Uniform random values in [-1, 1) (real and imaginary parts for complex), fresh per call
// unless a seed is given.
HostArray RandomArray(DType dtype, std::vector<int64_t> shape, uint64_t seed = 0);

// ||a - b|| / ||b|| over all elements, computed in double; a and b must have equal
// shapes (returns +inf otherwise). Complex arrays use the complex magnitude.
double RelativeError(const HostArray& a, const HostArray& b);
// max |a - b|.
double MaxAbsError(const HostArray& a, const HostArray& b);

// Converts any real or complex array to complex128 values (for comparisons).
std::vector<std::complex<double>> ToComplex(const HostArray& a);

}  // namespace fresnel::testing
