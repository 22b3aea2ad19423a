#include "support/test_support.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include "fresnel/core/gpu.h"

namespace fresnel::testing {

const Device* TestGpu() {
  static std::unique_ptr<GpuStream> stream;
  static Device device;
  static bool init = false;
  static bool available = false;
  if (!init) {
    init = true;
    if (GpuCount() > 0) {
      auto s = GpuStream::Create(0);
      if (s.ok()) {
        stream = std::move(*s);
        device = Device::Cuda(0, stream->handle());
        available = true;
      }
    }
  }
  return available ? &device : nullptr;
}

namespace {
std::set<std::string>& SkippedCases() {
  static std::set<std::string> names;
  return names;
}
}  // namespace

bool SkipWithoutGpu() {
  if (TestGpu() != nullptr) return false;
  WARN("no CUDA device visible: skipping GPU test");
  SkippedCases().insert(Catch::getResultCapture().getCurrentTestName());
  return true;
}

bool SkipWithFewerGpus(int n) {
  if (SkipWithoutGpu()) return true;
  if (GpuCount() >= n) return false;
  WARN(GpuCount() << " CUDA device(s) visible, this case needs " << n << ": skipping it");
  SkippedCases().insert(Catch::getResultCapture().getCurrentTestName());
  return true;
}

const std::set<std::string>& GpuSkippedCases() { return SkippedCases(); }

std::string SourcePath(const std::string& relative) {
  return std::string(FRESNEL_SOURCE_DIR) + "/" + relative;
}

std::string DataPath(const std::string& relative) {
  std::filesystem::path p = std::filesystem::path(FRESNEL_DATA_DIR) / relative;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

HostArray RandomArray(DType dtype, std::vector<int64_t> shape, uint64_t seed) {
  static std::random_device rd;
  std::mt19937_64 rng(seed != 0 ? seed : (static_cast<uint64_t>(rd()) << 32) ^ rd());
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  HostArray a(dtype, std::move(shape));
  int64_t n = a.size();
  switch (dtype) {
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) a.data<float>()[i] = static_cast<float>(u(rng));
      break;
    case DType::kFloat64:
      for (int64_t i = 0; i < n; ++i) a.data<double>()[i] = u(rng);
      break;
    case DType::kComplex64:
      for (int64_t i = 0; i < n; ++i) {
        float re = static_cast<float>(u(rng));
        float im = static_cast<float>(u(rng));
        a.data<std::complex<float>>()[i] = {re, im};
      }
      break;
    case DType::kComplex128:
      for (int64_t i = 0; i < n; ++i) {
        double re = u(rng);
        double im = u(rng);
        a.data<std::complex<double>>()[i] = {re, im};
      }
      break;
    case DType::kUint8:
      for (int64_t i = 0; i < n; ++i) a.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
      break;
    case DType::kUint16:
      for (int64_t i = 0; i < n; ++i) a.data<uint16_t>()[i] = static_cast<uint16_t>(rng());
      break;
    case DType::kInt16:
      for (int64_t i = 0; i < n; ++i) a.data<int16_t>()[i] = static_cast<int16_t>(rng());
      break;
    case DType::kInt32:
      for (int64_t i = 0; i < n; ++i) a.data<int32_t>()[i] = static_cast<int32_t>(rng());
      break;
  }
  return a;
}

std::vector<std::complex<double>> ToComplex(const HostArray& a) {
  int64_t n = a.size();
  std::vector<std::complex<double>> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (a.dtype()) {
      case DType::kFloat32: out[i] = a.data<float>()[i]; break;
      case DType::kFloat64: out[i] = a.data<double>()[i]; break;
      case DType::kComplex64: out[i] = std::complex<double>(a.data<std::complex<float>>()[i]); break;
      case DType::kComplex128: out[i] = a.data<std::complex<double>>()[i]; break;
      case DType::kUint8: out[i] = a.data<uint8_t>()[i]; break;
      case DType::kUint16: out[i] = a.data<uint16_t>()[i]; break;
      case DType::kInt16: out[i] = a.data<int16_t>()[i]; break;
      case DType::kInt32: out[i] = a.data<int32_t>()[i]; break;
    }
  }
  return out;
}

double RelativeError(const HostArray& a, const HostArray& b) {
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  auto x = ToComplex(a);
  auto y = ToComplex(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += std::norm(x[i] - y[i]);
    den += std::norm(y[i]);
  }
  if (std::isnan(num)) return std::numeric_limits<double>::infinity();
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double MaxAbsError(const HostArray& a, const HostArray& b) {
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  auto x = ToComplex(a);
  auto y = ToComplex(b);
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::abs(x[i] - y[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

}  // namespace fresnel::testing
