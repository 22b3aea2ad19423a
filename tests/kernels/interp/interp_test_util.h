// Helpers shared by the interp tests: the SciPy golden manifest, option parsing, tolerances.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "fresnel/core/array.h"
#include "fresnel/io/npy.h"
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

// "hamming", "kaiser:5.0", "general_gaussian:1.5:7.0", ...: a name and get_window's parameters.
inline WindowSpec ParseWindow(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ':')) parts.push_back(part);
  std::vector<double> params;
  for (size_t i = 1; i < parts.size(); ++i) params.push_back(std::stod(parts[i]));
  auto w = WindowFromName(parts.at(0), params);
  if (!w.ok()) throw std::runtime_error(std::string(w.status().message()));
  return *w;
}

inline DType ParseDType(const std::string& s) { return *DTypeFromName(s); }

// Relative-error tolerance for results in `dtype` compared with a double-precision reference.
inline double Tolerance(DType dtype) {
  return dtype == DType::kFloat64 || dtype == DType::kComplex128 ? 1e-12 : 1e-5;
}

inline std::vector<double> ImagParts(const HostArray& a) {
  std::vector<double> v;
  for (const auto& c : fresnel::testing::ToComplex(a)) v.push_back(c.imag());
  return v;
}

inline bool IsComplexDType(DType d) { return d == DType::kComplex64 || d == DType::kComplex128; }

// What DTypeRule::kKeepPrecision must give, written out case by case rather than through
// ResultDType: SciPy's dtype for integer x; otherwise x's precision, complex when x or h is.
inline DType KeepPrecisionDType(DType x, DType h, DType scipy) {
  switch (x) {
    case DType::kFloat32:
    case DType::kComplex64:
      return IsComplexDType(h) ? DType::kComplex64 : x;
    case DType::kFloat64:
    case DType::kComplex128:
      return IsComplexDType(h) ? DType::kComplex128 : x;
    default:
      return scipy;
  }
}

// Every upfirdn_ext / resample_ext golden case (all dtypes, complex taps, N-d along an axis,
// empty signals) on `device`, under both dtype rules: SciPy's rule must give SciPy's dtype, the
// default rule the dtype above, each within Tolerance of SciPy's values. Returns the count.
inline int CheckExtGoldens(const Device& device) {
  int checked = 0;
  for (const GoldenCase& g : LoadManifest()) {
    if (g.kind != "upfirdn_ext" && g.kind != "resample_ext") continue;
    INFO(g.name);
    const HostArray x = LoadGolden(g.Get("x"));
    const HostArray want = LoadGolden(g.Get("y"));
    const bool explicit_taps = g.kind == "upfirdn_ext" || g.Get("window") == "taps";
    HostArray h = explicit_taps ? LoadGolden(g.Get("h")) : HostArray();
    // A designed resample_poly filter has x's dtype (float64 for integer x).
    const DType hd = explicit_taps ? h.dtype()
                     : (x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64 ||
                        IsComplexDType(x.dtype()))
                         ? x.dtype()
                         : DType::kFloat64;
    for (DTypeRule rule : {DTypeRule::kSciPy, DTypeRule::kKeepPrecision}) {
      INFO((rule == DTypeRule::kSciPy ? "rule scipy" : "rule keep"));
      absl::StatusOr<HostArray> y;
      if (g.kind == "upfirdn_ext") {
        UpfirdnOptions o;
        o.up = g.Int("up");
        o.down = g.Int("down");
        o.mode = ParsePadMode(g.Get("mode"));
        o.cval = g.Double("cval");
        o.axis = g.Int("axis");
        o.taps_dtype = h.dtype();
        o.dtype_rule = rule;
        if (IsComplexDType(h.dtype())) o.taps_imag = ImagParts(h);
        y = Upfirdn(device, ToDoubles(h), x, o);
      } else {
        ResamplePolyOptions o;
        o.up = g.Int("up");
        o.down = g.Int("down");
        o.padtype = ParsePadMode(g.Get("padtype"));
        o.axis = g.Int("axis");
        o.dtype_rule = rule;
        if (explicit_taps) {
          o.taps = ToDoubles(h);
          o.taps_dtype = h.dtype();
          if (IsComplexDType(h.dtype())) o.taps_imag = ImagParts(h);
        } else {
          o.window = ParseWindow(g.Get("window"));
        }
        y = ResamplePoly(device, x, o);
      }
      INFO(y.status().ToString());
      REQUIRE(y.ok());
      const bool copy = g.Int("up") == g.Int("down") && g.kind == "resample_ext";
      const DType expect = copy ? x.dtype()
                           : rule == DTypeRule::kSciPy
                               ? want.dtype()
                               : KeepPrecisionDType(x.dtype(), hd, want.dtype());
      CHECK(DTypeName(y->dtype()) == std::string(DTypeName(expect)));
      CHECK(y->shape() == want.shape());
      if (y->shape() == want.shape() && want.size() > 0) {
        CHECK(fresnel::testing::RelativeError(*y, want) <= Tolerance(expect));
      }
      ++checked;
    }
  }
  return checked;
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

// Every resample (FFT; with windows and domain='freq' too) and decimate golden case on `device`: SciPy's dtype and shape, values
// within Tolerance. Returns the count.
inline int CheckFftGoldens(const Device& device) {
  int checked = 0;
  for (const GoldenCase& g : LoadManifest()) {
    if (g.kind != "resample" && g.kind != "resample_win" && g.kind != "decimate") continue;
    INFO(g.name);
    const HostArray x = LoadGolden(g.Get("x"));
    const HostArray want = LoadGolden(g.Get("y"));
    absl::StatusOr<HostArray> y;
    if (g.kind == "resample" || g.kind == "resample_win") {
      ResampleOptions o;
      o.num = g.Int("num");
      o.axis = g.Int("axis");
      o.freq_domain = g.Get("domain") == "freq";
      const std::string& window = g.Get("window");
      if (window == "values") {
        o.window_values = ToDoubles(LoadGolden(g.Get("w")));
      } else if (!window.empty() && window != "none") {
        o.window = ParseWindow(window);
      }
      y = Resample(device, x, o);
    } else {
      DecimateOptions o;
      o.q = g.Int("q");
      o.n = g.Int("n");
      o.zero_phase = g.Int("zero_phase") != 0;
      o.axis = g.Int("axis");
      y = Decimate(device, x, o);
    }
    INFO(y.status().ToString());
    REQUIRE(y.ok());
    CHECK(DTypeName(y->dtype()) == std::string(DTypeName(want.dtype())));
    CHECK(y->shape() == want.shape());
    if (y->shape() == want.shape() && want.size() > 0) {
      CHECK(fresnel::testing::RelativeError(*y, want) <= Tolerance(want.dtype()));
    }
    ++checked;
  }
  return checked;
}

}  // namespace fresnel::interp::testing
