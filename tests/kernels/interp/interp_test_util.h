// Helpers shared by the interp tests: the SciPy golden manifest, option parsing, tolerances.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fresnel/core/array.h"
#include "fresnel/core/npy.h"
#include "fresnel/interp/interp.h"
#include "support/test_support.h"

namespace fresnel::interp::testing {

// One line of golden/manifest.txt: "<kind> <name> key=value ...".
struct GoldenCase {
  std::string kind;
  std::string name;
  std::map<std::string, std::string> kv;

  const std::string& Get(const std::string& key) const {
    static const std::string kEmpty;
    auto it = kv.find(key);
    return it == kv.end() ? kEmpty : it->second;
  }
  int Int(const std::string& key) const { return std::stoi(Get(key)); }
  double Double(const std::string& key) const { return std::stod(Get(key)); }
};

// The golden folder: in the source tree, or relative to the working directory (the GPU machine
// runs the tests from a copy of the repository root).
inline std::string GoldenDir() {
  std::string p = fresnel::testing::SourcePath("tests/kernels/interp/golden");
  if (std::filesystem::exists(p + "/manifest.txt")) return p;
  if (std::filesystem::exists("tests/kernels/interp/golden/manifest.txt")) {
    return "tests/kernels/interp/golden";
  }
  return "";
}

inline std::vector<GoldenCase> LoadManifest() {
  std::vector<GoldenCase> cases;
  const std::string dir = GoldenDir();
  if (dir.empty()) return cases;
  std::ifstream in(dir + "/manifest.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    GoldenCase c;
    ss >> c.kind >> c.name;
    std::string tok;
    while (ss >> tok) {
      auto eq = tok.find('=');
      if (eq != std::string::npos) c.kv[tok.substr(0, eq)] = tok.substr(eq + 1);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

inline HostArray LoadGolden(const std::string& file) {
  auto a = ReadNpy(GoldenDir() + "/" + file);
  if (!a.ok()) throw std::runtime_error(std::string(a.status().message()));
  return *std::move(a);
}

inline std::vector<double> ToDoubles(const HostArray& a) {
  std::vector<double> v;
  for (const auto& c : fresnel::testing::ToComplex(a)) v.push_back(c.real());
  return v;
}

inline PadMode ParsePadMode(const std::string& s) {
  static const std::map<std::string, PadMode> kModes = {
      {"constant", PadMode::kConstant},   {"symmetric", PadMode::kSymmetric},
      {"reflect", PadMode::kReflect},     {"edge", PadMode::kEdge},
      {"wrap", PadMode::kWrap},           {"smooth", PadMode::kSmooth},
      {"antisymmetric", PadMode::kAntisymmetric},
      {"antireflect", PadMode::kAntireflect},
      {"line", PadMode::kLine},           {"mean", PadMode::kMean},
      {"median", PadMode::kMedian},       {"maximum", PadMode::kMaximum},
      {"minimum", PadMode::kMinimum}};
  return kModes.at(s);
}

// "hamming", "kaiser:5.0", ...
inline WindowSpec ParseWindow(const std::string& s) {
  WindowSpec w;
  std::string name = s.substr(0, s.find(':'));
  if (name == "boxcar") w.type = Window::kBoxcar;
  if (name == "hamming") w.type = Window::kHamming;
  if (name == "hann") w.type = Window::kHann;
  if (name == "blackman") w.type = Window::kBlackman;
  if (name == "kaiser") {
    w.type = Window::kKaiser;
    w.kaiser_beta = std::stod(s.substr(s.find(':') + 1));
  }
  return w;
}

inline DType ParseDType(const std::string& s) { return *DTypeFromName(s); }

// Relative-error tolerance for results in `dtype` compared with a double-precision reference.
inline double Tolerance(DType dtype) {
  return dtype == DType::kFloat64 ? 1e-12 : 1e-5;
}

// Exact equality of two arrays (shape, dtype and every byte's value as numbers: -0 == +0).
inline bool SameValues(const HostArray& a, const HostArray& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  auto x = fresnel::testing::ToComplex(a);
  auto y = fresnel::testing::ToComplex(b);
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != y[i]) return false;
  }
  return true;
}

}  // namespace fresnel::interp::testing
