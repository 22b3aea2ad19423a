// CPU tests of the interp kernels: SciPy golden files, an independent direct-convolution
// reference, validation messages, and chunked streaming against the one-shot result.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <random>
#include <string>
#include <vector>

#include "fresnel/interp/interp.h"
#include "fresnel/interp/into.h"
#include "interp/interp_internal.h"
#include "interp_test_util.h"
#include "support/test_support.h"

namespace fresnel::interp {
namespace {

using fresnel::testing::RandomArray;
using fresnel::testing::RelativeError;
using namespace fresnel::interp::testing;  // NOLINT

const Device kCpu = Device::Cpu();

// Expects `status` to be `code` with a message mentioning `field`.
void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& field) {
  INFO(status.ToString());
  CHECK(status.code() == code);
  CHECK(std::string(status.message()).find(field) != std::string::npos);
}

// Upsample with zeros, convolve in full, downsample: the textbook definition, in double.
HostArray DirectUpfirdn(const std::vector<double>& h, const HostArray& x, int up, int down,
                        double cval = 0) {
  internal::HostSignalView v = internal::ViewOf(x);
  const int64_t n = v.len, l = static_cast<int64_t>(h.size());
  const int64_t out = UpfirdnOutputLength(n, l, up, down);
  auto xs = fresnel::testing::ToComplex(x);
  HostArray y(DType::kComplex128, {v.channels, out});
  auto* yd = y.data<std::complex<double>>();
  for (int64_t c = 0; c < v.channels; ++c) {
    for (int64_t k = 0; k < out; ++k) {
      std::complex<double> acc = 0;
      for (int64_t j = 0; j < l; ++j) {
        const int64_t pos = k * down - j;  // position in the upsampled signal
        if (pos % up != 0) continue;       // an inserted zero (pos < 0 included: floor below)
        const int64_t i = pos >= 0 ? pos / up : -((-pos) / up);
        std::complex<double> s = (i >= 0 && i < n) ? xs[c * n + i] : std::complex<double>(cval);
        acc += h[j] * s;
      }
      yd[c * out + k] = acc;
    }
  }
  if (x.ndim() == 1) REQUIRE(y.Reshape({out}).ok());
  return y;
}

TEST_CASE("every dtype, complex taps, N-d axes and empty signals match SciPy", "[interp]") {
  CHECK(CheckExtGoldens(kCpu) > 200);
}

TEST_CASE("ResultDType follows numpy.result_type(h, x, float32) under the SciPy rule",
          "[interp]") {
  using D = DType;
  const auto kS = DTypeRule::kSciPy, kK = DTypeRule::kKeepPrecision;
  CHECK(ResultDType(D::kFloat32, D::kFloat64, kS) == D::kFloat64);
  CHECK(ResultDType(D::kFloat32, D::kFloat64, kK) == D::kFloat32);
  CHECK(ResultDType(D::kComplex64, D::kFloat64, kS) == D::kComplex128);
  CHECK(ResultDType(D::kComplex64, D::kFloat64, kK) == D::kComplex64);
  CHECK(ResultDType(D::kFloat64, D::kComplex64, kS) == D::kComplex128);
  CHECK(ResultDType(D::kFloat32, D::kComplex128, kK) == D::kComplex64);
  CHECK(ResultDType(D::kUint8, D::kFloat32, kK) == D::kFloat32);
  CHECK(ResultDType(D::kInt16, D::kComplex64, kS) == D::kComplex64);
  CHECK(ResultDType(D::kInt32, D::kFloat32, kK) == D::kFloat64);
  CHECK(ResultDType(D::kInt32, D::kComplex64, kS) == D::kComplex128);
}

TEST_CASE("complex taps on real and complex signals equal the direct convolution", "[interp]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (DType dt : {DType::kFloat64, DType::kComplex128}) {
    HostArray x = RandomArray(dt, {2, 37});
    std::vector<double> hr(19), hi(19);
    for (size_t i = 0; i < hr.size(); ++i) {
      hr[i] = u(rng);
      hi[i] = u(rng);
    }
    UpfirdnOptions o;
    o.up = 3;
    o.down = 2;
    o.taps_imag = hi;
    auto y = Upfirdn(kCpu, hr, x, o);
    REQUIRE(y.ok());
    CHECK(y->dtype() == DType::kComplex128);
    // Direct: real and imaginary taps separately, combined here.
    HostArray a = DirectUpfirdn(hr, x, 3, 2), b = DirectUpfirdn(hi, x, 3, 2);
    HostArray want(DType::kComplex128, a.shape());
    for (int64_t i = 0; i < static_cast<int64_t>(a.size()); ++i) {
      want.data<std::complex<double>>()[i] =
          a.data<std::complex<double>>()[i] +
          std::complex<double>(0, 1) * b.data<std::complex<double>>()[i];
    }
    CHECK(RelativeError(*y, want) <= 1e-13);
  }
}

TEST_CASE("resample (FFT with windows and domain freq) and decimate match SciPy", "[interp]") {
  CHECK(CheckFftGoldens(kCpu) > 320);
}

TEST_CASE("resample of a periodic band-limited signal samples it on the new grid", "[interp]") {
  // x(t) = sum of a few harmonics of a period-n signal, far below either Nyquist: resampling to
  // num samples must give x(k n / num) (complex: e^{2 pi i f t} terms) to rounding.
  const int64_t sizes[][2] = {{48000, 44100}, {44100, 48000}, {65536, 100000}, {30030, 30030}};
  const double kPi = 3.14159265358979323846;
  const int harmonics[] = {1, 7, 40, 333};
  for (auto& sz : sizes) {
    for (DType dt : {DType::kFloat64, DType::kComplex128}) {
      INFO(sz[0] << " -> " << sz[1] << " " << DTypeName(dt));
      const int64_t n = sz[0], num = sz[1];
      auto value = [&](double t, bool imag) {
        double v = 0;
        for (int h : harmonics) {
          v += imag ? std::sin(2 * kPi * h * t / n) : std::cos(2 * kPi * h * t / n + 0.3 * h);
        }
        return v;
      };
      HostArray x(dt, {n});
      HostArray want(dt, {num});
      for (int64_t i = 0; i < n; ++i) {
        if (dt == DType::kFloat64) {
          x.data<double>()[i] = value(static_cast<double>(i), false);
        } else {
          x.data<std::complex<double>>()[i] = {value(static_cast<double>(i), false),
                                               value(static_cast<double>(i), true)};
        }
      }
      for (int64_t k = 0; k < num; ++k) {
        const double t = static_cast<double>(k) * n / num;
        if (dt == DType::kFloat64) {
          want.data<double>()[k] = value(t, false);
        } else {
          want.data<std::complex<double>>()[k] = {value(t, false), value(t, true)};
        }
      }
      ResampleOptions o;
      o.num = num;
      auto y = Resample(kCpu, x, o);
      REQUIRE(y.ok());
      CHECK(RelativeError(*y, want) <= 1e-10);
    }
  }
}

TEST_CASE("resample and decimate refuse bad input naming the field", "[interp]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const HostArray x = RandomArray(DType::kFloat64, {2, 10});
  ResampleOptions r;
  r.num = 0;
  ExpectError(ValidateResample(x, r), kInvalid, "num");
  r.num = 5;
  ExpectError(ValidateResample(HostArray(DType::kFloat64, {2, 0}), r), kInvalid, "x.shape");
  ExpectError(ValidateResample(HostArray(DType::kFloat64, {}), r), kInvalid, "x.shape");
  r.axis = 2;
  ExpectError(ValidateResample(x, r), kInvalid, "axis");
  r.axis = -1;
  // The window: a name or values, not both; one finite value per sample; valid parameters.
  r.window_values.assign(9, 1.0);
  ExpectError(ValidateResample(x, r), kInvalid, "window_values");
  r.window_values.assign(10, 1.0);
  CHECK(ValidateResample(x, r).ok());
  r.window_values[3] = std::nan("");
  ExpectError(ValidateResample(x, r), kInvalid, "window_values[3]");
  r.window_values.assign(10, 1.0);
  r.window = WindowSpec{Window::kHann};
  ExpectError(ValidateResample(x, r), kInvalid, "window");
  r.window_values.clear();
  CHECK(ValidateResample(x, r).ok());
  r.window = WindowSpec{Window::kGaussian, 5.0, {-1.0}};
  ExpectError(ValidateResample(x, r), kInvalid, "window.params[0]");
  r.window = WindowSpec{Window::kChebwin, 5.0, {60.0}};
  ExpectError(ValidateResample(HostArray(DType::kFloat32, {1, kMaxChebwinTaps}), r), kInvalid,
              "window");
  r.window.reset();
  DecimateOptions d;
  d.q = 1;
  ExpectError(ValidateDecimate(x, d), kInvalid, "q");
  d.q = 3;
  d.n = -1;
  ExpectError(ValidateDecimate(x, d), kInvalid, "n");
  d.n = 0;
  CHECK(ValidateDecimate(x, d).ok());
}

TEST_CASE("golden files are present", "[interp]") {
  REQUIRE_FALSE(GoldenDir().empty());
  REQUIRE(LoadManifest().size() > 300);
}

TEST_CASE("upfirdn matches SciPy golden outputs", "[interp]") {
  int checked = 0;
  for (const GoldenCase& g : LoadManifest()) {
    if (g.kind != "upfirdn") continue;
    INFO(g.name);
    HostArray x = LoadGolden(g.Get("x"));
    std::vector<double> h = ToDoubles(LoadGolden(g.Get("h")));
    HostArray want = LoadGolden(g.Get("y"));
    UpfirdnOptions o;
    o.up = g.Int("up");
    o.down = g.Int("down");
    o.mode = ParsePadMode(g.Get("mode"));
    o.cval = g.Double("cval");
    auto y = Upfirdn(kCpu, h, x, o);
    REQUIRE(y.ok());
    CHECK(y->dtype() == x.dtype());
    CHECK(y->shape() == want.shape());
    CHECK(RelativeError(*y, want) <= Tolerance(x.dtype()));
    ++checked;
  }
  CHECK(checked > 100);
}

TEST_CASE("resample_poly matches SciPy golden outputs", "[interp]") {
  int checked = 0;
  for (const GoldenCase& g : LoadManifest()) {
    if (g.kind != "resample_poly") continue;
    INFO(g.name);
    HostArray x = LoadGolden(g.Get("x"));
    HostArray want = LoadGolden(g.Get("y"));
    ResamplePolyOptions o;
    o.up = g.Int("up");
    o.down = g.Int("down");
    o.padtype = ParsePadMode(g.Get("padtype"));
    o.cval = g.Double("cval");
    if (g.Get("window") == "taps") {
      o.taps = ToDoubles(LoadGolden(g.Get("h")));
    } else {
      o.window = ParseWindow(g.Get("window"));
    }
    auto y = ResamplePoly(kCpu, x, o);
    REQUIRE(y.ok());
    CHECK(y->dtype() == x.dtype());
    CHECK(y->shape() == want.shape());
    CHECK(RelativeError(*y, want) <= Tolerance(x.dtype()));
    ++checked;
  }
  CHECK(checked > 50);
}

TEST_CASE("firwin matches SciPy golden outputs", "[interp]") {
  int checked = 0;
  for (const GoldenCase& g : LoadManifest()) {
    if (g.kind != "firwin") continue;
    INFO(g.name);
    std::vector<double> want = ToDoubles(LoadGolden(g.Get("y")));
    auto h = Firwin(g.Int("numtaps"), g.Double("cutoff"), ParseWindow(g.Get("window")));
    if (std::isnan(want[0])) {
      // SciPy returns NaN when the window sums to zero (hann with 2 taps); Firwin refuses.
      CHECK(h.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    REQUIRE(h.ok());
    REQUIRE(h->size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(std::fabs((*h)[i] - want[i]) < 1e-14);
    ++checked;
  }
  CHECK(checked > 100);
}

TEST_CASE("signal extension matches SciPy's _pad_test", "[interp]") {
  int checked = 0;
  for (const GoldenCase& g : LoadManifest()) {
    if (g.kind != "pad") continue;
    INFO(g.name);
    HostArray x = LoadGolden(g.Get("x"));
    HostArray want = LoadGolden(g.Get("y"));
    const int64_t n = x.dim(0);
    HostArray ext = internal::ExtendSignal(internal::ViewOf(x), ParsePadMode(g.Get("mode")),
                                           g.Double("cval"), -g.Int("npre"), n + g.Int("npost"));
    REQUIRE(ext.Reshape({ext.dim(1)}).ok());
    CHECK(fresnel::testing::MaxAbsError(ext, want) < 1e-12);
    ++checked;
  }
  CHECK(checked == 27);
}

TEST_CASE("upfirdn equals the direct definition on random inputs", "[interp]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int up = 1 + static_cast<int>(rng() % 9);
    const int down = 1 + static_cast<int>(rng() % 9);
    const int l = 1 + static_cast<int>(rng() % 70);
    const int64_t n = 1 + static_cast<int64_t>(rng() % 90);
    const int64_t ch = 1 + static_cast<int64_t>(rng() % 3);
    const DType dt = trial % 3 == 0 ? DType::kComplex64 : DType::kFloat64;
    INFO("up " << up << " down " << down << " taps " << l << " n " << n);
    HostArray x = RandomArray(dt, {ch, n});
    HostArray hh = RandomArray(DType::kFloat64, {l});
    std::vector<double> h(hh.data<double>(), hh.data<double>() + l);
    UpfirdnOptions o;
    o.up = up;
    o.down = down;
    o.cval = trial % 4 == 1 ? 0.3 : 0.0;
    auto y = Upfirdn(kCpu, h, x, o);
    REQUIRE(y.ok());
    CHECK(RelativeError(*y, DirectUpfirdn(h, x, up, down, o.cval)) <= Tolerance(dt));
  }
}

// The real back end (vectorised across periods, de-interleaved tiles) and the complex one
// (scalar, one output at a time) sum the same products in the same order: on a real signal
// sent as complex with zero imaginary parts they agree bit for bit, for windows placed anywhere.
TEST_CASE("the real CPU path equals the scalar complex path exactly", "[interp]") {
  std::mt19937 rng(11);
  struct Case {
    int up, down;
    int64_t taps, n;
  };
  const Case cases[] = {{160, 147, 3201, 20011}, {147, 160, 3201, 9001}, {3, 2, 1024, 30011},
                        {2, 1, 256, 10007},      {1, 7, 70, 5003},       {4, 6, 33, 999},
                        {7, 5, 1, 64},           {1, 3000, 5, 20000},    {5, 1, 9, 3}};
  for (const Case& c : cases) {
    INFO("up " << c.up << " down " << c.down << " taps " << c.taps << " n " << c.n);
    HostArray hh = RandomArray(DType::kFloat64, {c.taps});
    internal::Polyphase f{std::vector<double>(hh.data<double>(), hh.data<double>() + c.taps),
                          c.up, c.down};
    HostArray x = RandomArray(DType::kFloat64, {2, c.n});
    HostArray xc(DType::kComplex128, {2, c.n});
    for (int64_t i = 0; i < 2 * c.n; ++i) {
      xc.data<std::complex<double>>()[i] = std::complex<double>(x.data<double>()[i], 0.0);
    }
    const int64_t x_first = static_cast<int64_t>(rng() % 41) - 20;
    const int64_t out_first = static_cast<int64_t>(rng() % 300);
    const int64_t out_count = UpfirdnOutputLength(c.n, c.taps, c.up, c.down) + 7;
    const double cval = rng() % 2 ? 0.0 : -0.75;
    auto y = internal::UpfirdnWindowCpu(f, internal::ViewOf(x), x_first, cval, out_first,
                                        out_count);
    auto yc = internal::UpfirdnWindowCpu(f, internal::ViewOf(xc), x_first, cval, out_first,
                                         out_count);
    REQUIRE(y.ok());
    REQUIRE(yc.ok());
    bool same = true;
    for (int64_t i = 0; i < y->size(); ++i) {
      same = same && y->data<double>()[i] == yc->data<std::complex<double>>()[i].real();
    }
    CHECK(same);
  }
}

TEST_CASE("output lengths follow SciPy", "[interp]") {
  CHECK(UpfirdnOutputLength(10, 3, 1, 1) == 12);
  CHECK(UpfirdnOutputLength(10, 1, 3, 1) == 28);
  CHECK(UpfirdnOutputLength(10, 8, 2, 3) == 9);
  // n == 0: SciPy's formula still holds (the filtered cval); where it is negative SciPy raises.
  CHECK(UpfirdnOutputLength(0, 8, 2, 3) == 2);
  CHECK(UpfirdnOutputLength(0, 3, 1, 1) == 2);
  CHECK(UpfirdnOutputLength(0, 1, 1, 1) == 0);
  CHECK(UpfirdnOutputLength(0, 2, 3, 1) == 0);
  CHECK(ResamplePolyOutputLength(10, 3, 2) == 15);
  CHECK(ResamplePolyOutputLength(11, 6, 4) == 17);
  CHECK(ResamplePolyOutputLength(1000, 147, 160) == 919);
  CHECK(ResamplePolyOutputLength(0, 3, 2) == 0);
}

TEST_CASE("resample_poly with up == down copies; classic recipe in one call", "[interp]") {
  HostArray x = RandomArray(DType::kFloat32, {2, 17});
  ResamplePolyOptions o;
  o.up = 5;
  o.down = 5;
  auto y = ResamplePoly(kCpu, x, o);
  REQUIRE(y.ok());
  CHECK(SameValues(*y, x));

  auto h = Firwin(12, 1.0 / 4, WindowSpec{Window::kHamming});
  REQUIRE(h.ok());
  for (double& v : *h) v *= 4;
  UpfirdnOptions u;
  u.up = 4;
  HostArray x1 = RandomArray(DType::kFloat64, {50});
  auto z = Upfirdn(kCpu, *h, x1, u);
  REQUIRE(z.ok());
  CHECK(z->shape() == std::vector<int64_t>{(50 - 1) * 4 + 12});
  CHECK(RelativeError(*z, DirectUpfirdn(*h, x1, 4, 1)) < 1e-13);
}


TEST_CASE("invalid requests name the offending field", "[interp]") {
  const HostArray x = RandomArray(DType::kFloat32, {2, 10});
  const std::vector<double> h = {0.25, 0.5, 0.25};
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  UpfirdnOptions ok;
  ok.up = 2;
  REQUIRE(ValidateUpfirdn(h, x, ok).ok());

  UpfirdnOptions o = ok;
  o.up = 0;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "up");
  o = ok;
  o.up = (1 << 16) + 1;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "up");
  o = ok;
  o.down = -3;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "down");
  ExpectError(ValidateUpfirdn({}, x, ok), kInvalid, "taps");
  ExpectError(ValidateUpfirdn({1.0, NAN}, x, ok), kInvalid, "taps[1]");
  ExpectError(ValidateUpfirdn({1.0, INFINITY}, x, ok), kInvalid, "taps");
  Limits small;
  small.max_taps = 2;
  ExpectError(ValidateUpfirdn(h, x, ok, small), kInvalid, "taps");
  // N-d and every dtype are accepted; 0-D is not, nor an axis out of range.
  CHECK(ValidateUpfirdn(h, HostArray(DType::kFloat32, {2, 3, 4}), ok).ok());
  CHECK(ValidateUpfirdn(h, HostArray(DType::kInt16, {5}), ok).ok());
  CHECK(ValidateUpfirdn(h, HostArray(DType::kComplex128, {5}), ok).ok());
  ExpectError(ValidateUpfirdn(h, HostArray(DType::kFloat32, {}), ok), kInvalid, "x.shape");
  // Empty (a zero dimension) but the other dimensions multiply past int64 (fuzz_interp_params).
  const int64_t huge = int64_t{1} << 40;
  ExpectError(ValidateUpfirdnShape(h, DType::kFloat32, {huge, huge, 0}, ok), kInvalid, "x.shape");
  ExpectError(ValidateResamplePolyShape(DType::kFloat32, {0, huge, huge}, ResamplePolyOptions{}),
              kInvalid, "x.shape");
  o = ok;
  o.axis = 2;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "axis");
  o.axis = -3;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "axis");
  o = ok;
  o.taps_imag = {1.0};
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "taps_imag");
  o.taps_imag = {1.0, NAN, 0.0};
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "taps_imag[1]");
  o = ok;
  o.taps_dtype = DType::kInt32;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "taps.dtype");
  o = ok;
  o.dtype_rule = static_cast<DTypeRule>(7);
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "dtype_rule");
  o = ok;
  o.mode = PadMode::kReflect;
  ExpectError(ValidateUpfirdn(h, HostArray(DType::kFloat32, {3, 0}), o), kInvalid, "mode");
  o = ok;
  o.mode = PadMode::kMedian;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "mode");
  o = ok;
  o.cval = NAN;
  ExpectError(ValidateUpfirdn(h, x, o), kInvalid, "cval");
  Limits tiny;
  tiny.max_output_samples = 40;
  ExpectError(ValidateUpfirdn(h, x, ok, tiny), absl::StatusCode::kResourceExhausted, "x.shape");
  // Entry points validate too.
  o = ok;
  o.up = 0;
  ExpectError(Upfirdn(kCpu, h, x, o).status(), kInvalid, "up");

  ResamplePolyOptions r;
  r.up = 3;
  r.down = 2;
  REQUIRE(ValidateResamplePoly(x, r).ok());
  ResamplePolyOptions rb = r;
  rb.down = 0;
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "down");
  rb = r;
  rb.taps = {1.0, std::nan("")};
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "taps");
  rb = r;
  rb.window = WindowSpec{Window::kKaiser, INFINITY};
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "window");
  rb = r;
  rb.window.type = static_cast<Window>(42);
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "window");
  rb = r;
  rb.padtype = PadMode::kMean;
  rb.cval = 1.0;
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "cval");
  rb = r;
  rb.padtype = static_cast<PadMode>(99);
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "padtype");
  rb = r;
  rb.up = 60000;
  rb.down = 59999;
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "up");
  CHECK(ValidateResamplePoly(HostArray(DType::kUint8, {4}), r).ok());
  CHECK(ValidateResamplePoly(HostArray(DType::kFloat64, {1, 1, 4}), r).ok());
  ExpectError(ValidateResamplePoly(HostArray(DType::kFloat64, {}), r), kInvalid, "x.shape");
  rb = r;
  rb.axis = 1;
  ExpectError(ValidateResamplePoly(HostArray(DType::kFloat64, {4}), rb), kInvalid, "axis");
  rb = r;
  rb.taps_imag = {1.0, 2.0};
  ExpectError(ValidateResamplePoly(x, rb), kInvalid, "taps_imag");
  tiny.max_output_samples = 29;  // the output is 2 x 15
  ExpectError(ValidateResamplePoly(x, r, tiny), absl::StatusCode::kResourceExhausted, "x.shape");

  ExpectError(Firwin(0, 0.5, {}).status(), kInvalid, "numtaps");
  ExpectError(Firwin(11, 1.0, {}).status(), kInvalid, "cutoff");
  ExpectError(Firwin(11, 0.5, WindowSpec{Window::kKaiser, NAN}).status(), kInvalid, "window");
}

TEST_CASE("empty signals", "[interp]") {
  UpfirdnOptions o;
  o.up = 3;
  auto y = Upfirdn(kCpu, {1, 2, 3}, HostArray(DType::kFloat32, {0}), o);
  REQUIRE(y.ok());
  CHECK(y->shape() == std::vector<int64_t>{0});
  // Taps longer than up: SciPy returns the filter applied to cval everywhere.
  o.up = 1;
  o.cval = 2.0;
  y = Upfirdn(kCpu, {1, 2, 3}, HostArray(DType::kFloat64, {0}), o);
  REQUIRE(y.ok());
  REQUIRE(y->shape() == std::vector<int64_t>{2});
  CHECK(y->data<double>()[0] == 12.0);
  CHECK(y->data<double>()[1] == 12.0);
  ResamplePolyOptions r;
  r.up = 3;
  r.down = 2;
  r.padtype = PadMode::kMean;
  auto z = ResamplePoly(kCpu, HostArray(DType::kFloat64, {2, 0}), r);
  REQUIRE(z.ok());
  CHECK(z->shape() == std::vector<int64_t>({2, 0}));
}

// Splits n into random chunk sizes, with empty and single-sample chunks mixed in.
std::vector<int64_t> RandomChunks(int64_t n, std::mt19937& rng) {
  std::vector<int64_t> sizes;
  while (n > 0) {
    int64_t s;
    switch (rng() % 5) {
      case 0: s = 0; break;
      case 1: s = 1; break;
      default: s = 1 + static_cast<int64_t>(rng() % 40); break;
    }
    s = std::min(s, n);
    sizes.push_back(s);
    n -= s;
  }
  sizes.push_back(0);
  return sizes;
}

// Pushes x in chunks and returns the concatenation of every output.
HostArray RunStream(StreamingResampler& s, const Device& dev, const HostArray& x,
                    const std::vector<int64_t>& chunks) {
  const internal::HostSignalView v = internal::ViewOf(x);
  const size_t es = DTypeSize(x.dtype());
  std::vector<std::string> rows(static_cast<size_t>(v.channels));
  int64_t pos = 0;
  auto append = [&](const HostArray& y) {
    const int64_t m = y.ndim() == 1 ? y.dim(0) : y.dim(1);
    for (int64_t c = 0; c < v.channels; ++c) {
      rows[c].append(static_cast<const char*>(y.raw()) + c * m * es, m * es);
    }
  };
  for (int64_t k : chunks) {
    std::vector<int64_t> shape = x.ndim() == 1 ? std::vector<int64_t>{k}
                                               : std::vector<int64_t>{v.channels, k};
    HostArray chunk(x.dtype(), shape);
    for (int64_t c = 0; c < v.channels; ++c) {
      std::memcpy(static_cast<char*>(chunk.raw()) + c * k * es,
                  static_cast<const char*>(x.raw()) + (c * v.len + pos) * es, k * es);
    }
    pos += k;
    auto y = s.Push(dev, chunk);
    REQUIRE(y.ok());
    CHECK(y->ndim() == x.ndim());
    append(*y);
  }
  auto tail = s.Finish(dev);
  REQUIRE(tail.ok());
  append(*tail);
  std::string all;
  for (auto& r : rows) all += r;
  const int64_t m = static_cast<int64_t>(rows[0].size() / es);
  std::vector<int64_t> shape = x.ndim() == 1 ? std::vector<int64_t>{m}
                                             : std::vector<int64_t>{v.channels, m};
  auto out = HostArray::FromBytes(x.dtype(), shape, all);
  REQUIRE(out.ok());
  CHECK(s.samples_in() == v.len);
  CHECK(s.samples_out() == m);
  return *std::move(out);
}

TEST_CASE("chunked upfirdn equals one-shot exactly", "[interp]") {
  std::mt19937 rng(11);
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kComplex64};
  for (int trial = 0; trial < 40; ++trial) {
    UpfirdnOptions o;
    o.up = 1 + static_cast<int>(rng() % 8);
    o.down = 1 + static_cast<int>(rng() % 8);
    o.cval = trial % 3 == 0 ? -0.5 : 0.0;
    const int l = 1 + static_cast<int>(rng() % 60);
    const int64_t n = static_cast<int64_t>(rng() % 200);
    const int64_t ch = 1 + static_cast<int64_t>(rng() % 3);
    const DType dt = dtypes[trial % 3];
    INFO("up " << o.up << " down " << o.down << " taps " << l << " n " << n << " ch " << ch);
    HostArray x = ch == 1 && trial % 2 ? RandomArray(dt, {n}) : RandomArray(dt, {ch, n});
    HostArray hh = RandomArray(DType::kFloat64, {l});
    std::vector<double> h(hh.data<double>(), hh.data<double>() + l);
    auto one = Upfirdn(kCpu, h, x, o);
    REQUIRE(one.ok());
    auto s = StreamingResampler::ForUpfirdn(h, o, ch, dt);
    REQUIRE(s.ok());
    HostArray chunked = RunStream(*s, kCpu, x, RandomChunks(n, rng));
    CHECK(SameValues(chunked, *one));
  }
}

TEST_CASE("chunked resample_poly equals one-shot exactly", "[interp]") {
  std::mt19937 rng(12);
  const int rates[][2] = {{3, 2}, {2, 3}, {160, 147}, {1, 4}, {5, 1}, {4, 4}, {6, 9}, {7, 3}};
  for (int trial = 0; trial < 24; ++trial) {
    ResamplePolyOptions o;
    o.up = rates[trial % 8][0];
    o.down = rates[trial % 8][1];
    o.cval = trial % 5 == 0 ? 1.25 : 0.0;
    if (trial % 4 == 3) o.taps = {0.1, 0.2, 0.4, 0.2, 0.1, -0.05};
    const DType dt = trial % 3 == 1 ? DType::kComplex64
                                    : (trial % 3 == 2 ? DType::kFloat32 : DType::kFloat64);
    const int64_t n = static_cast<int64_t>(rng() % 300);
    const int64_t ch = 1 + trial % 2;
    INFO("up " << o.up << " down " << o.down << " n " << n);
    HostArray x = RandomArray(dt, {ch, n});
    auto one = ResamplePoly(kCpu, x, o);
    REQUIRE(one.ok());
    auto s = StreamingResampler::ForResamplePoly(o, ch, dt);
    REQUIRE(s.ok());
    HostArray chunked = RunStream(*s, kCpu, x, RandomChunks(n, rng));
    CHECK(SameValues(chunked, *one));
  }
}

TEST_CASE("estimates: output lengths and device bytes bound what the calls produce", "[interp]") {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 30; ++trial) {
    const int q = 2 + static_cast<int>(rng() % 6);
    const int64_t n = 1 + static_cast<int64_t>(rng() % 400);
    const int64_t ch = 1 + static_cast<int64_t>(rng() % 3);
    DecimateOptions d;
    d.q = q;
    d.n = trial % 3 == 0 ? 0 : 4 + static_cast<int>(rng() % 30);
    d.zero_phase = trial % 2 == 0;
    INFO("q " << q << " n " << n << " order " << d.n << " zero_phase " << d.zero_phase);
    HostArray x = RandomArray(DType::kFloat32, {ch, n});
    auto y = Decimate(kCpu, x, d);
    REQUIRE(y.ok());
    CHECK(y->dim(1) == DecimateOutputLength(n, q));
    CHECK(DecimateNumtaps(d) == (d.n == 0 ? 20 * q : d.n) + 1);
    // At least the signal, the result and the filter as float64.
    CHECK(DecimateDeviceBytes(x.dtype(), ch, n, d) >=
          static_cast<int64_t>(x.nbytes() + y->nbytes()) + DecimateNumtaps(d) * 8);

    ResamplePolyOptions r;
    r.up = 1 + static_cast<int>(rng() % 7);
    r.down = 1 + static_cast<int>(rng() % 7);
    auto rp = ResamplePoly(kCpu, x, r);
    REQUIRE(rp.ok());
    CHECK(ResamplePolyDeviceBytes(x.dtype(), ch, n, r) >=
          static_cast<int64_t>(x.nbytes() + rp->nbytes()) +
              ResamplePolyDefaultNumtaps(r.up, r.down) * 8);

    ResampleOptions f;
    f.num = 1 + static_cast<int64_t>(rng() % 500);
    auto rs = Resample(kCpu, x, f);
    REQUIRE(rs.ok());
    // Signal and result plus two complex64 spectra (and cuFFT's work areas as much again).
    CHECK(ResampleDeviceBytes(x.dtype(), ch, n, f) ==
          static_cast<int64_t>(x.nbytes() + rs->nbytes()) + 2 * ch * (n + f.num) * 8);

    // A stream: every Push returns at most MaxPushOutputSamples, and its device bound covers
    // the chunk and those outputs.
    auto s = StreamingResampler::ForResamplePoly(r, ch, DType::kFloat32);
    REQUIRE(s.ok());
    CHECK(s->StateBytes() > 0);
    int64_t at = 0;
    while (at < n) {
      const int64_t k = std::min<int64_t>(n - at, 1 + static_cast<int64_t>(rng() % 90));
      auto chunk = fresnel::testing::RandomArray(DType::kFloat32, {ch, k});
      auto out = s->Push(kCpu, chunk);
      REQUIRE(out.ok());
      CHECK(out->dim(1) <= s->MaxPushOutputSamples(k));
      CHECK(s->PushDeviceBytes(k) >= static_cast<int64_t>(chunk.nbytes() + out->nbytes()));
      at += k;
    }
  }
}

TEST_CASE("streaming rejects what it cannot do", "[interp]") {
  UpfirdnOptions o;
  o.up = 2;
  o.mode = PadMode::kReflect;
  ExpectError(StreamingResampler::ForUpfirdn({1, 1}, o, 1, DType::kFloat32).status(),
              absl::StatusCode::kInvalidArgument, "mode");
  ResamplePolyOptions r;
  r.up = 3;
  r.down = 2;
  r.padtype = PadMode::kMean;
  ExpectError(StreamingResampler::ForResamplePoly(r, 1, DType::kFloat32).status(),
              absl::StatusCode::kInvalidArgument, "padtype");
  r.padtype = PadMode::kConstant;
  ExpectError(StreamingResampler::ForResamplePoly(r, 0, DType::kFloat32).status(),
              absl::StatusCode::kInvalidArgument, "x.shape");
  ExpectError(StreamingResampler::ForResamplePoly(r, 1, DType::kInt32).status(),
              absl::StatusCode::kInvalidArgument, "x.dtype");
  ResamplePolyOptions bad = r;
  bad.up = 0;
  ExpectError(StreamingResampler::ForResamplePoly(bad, 1, DType::kFloat32).status(),
              absl::StatusCode::kInvalidArgument, "up");

  auto s = StreamingResampler::ForResamplePoly(r, 2, DType::kFloat32);
  REQUIRE(s.ok());
  ExpectError(s->Push(kCpu, HostArray(DType::kFloat64, {2, 4})).status(),
              absl::StatusCode::kInvalidArgument, "x.dtype");
  ExpectError(s->Push(kCpu, HostArray(DType::kFloat32, {3, 4})).status(),
              absl::StatusCode::kInvalidArgument, "x.shape");
  ExpectError(s->Push(kCpu, HostArray(DType::kFloat32, {4})).status(),
              absl::StatusCode::kInvalidArgument, "x.shape");
  REQUIRE(s->Push(kCpu, RandomArray(DType::kFloat32, {2, 9})).ok());
  REQUIRE(s->Finish(kCpu).ok());
  CHECK(s->Push(kCpu, RandomArray(DType::kFloat32, {2, 9})).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(s->Finish(kCpu).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("CUDA requests fail cleanly without CUDA", "[interp]") {
  if (fresnel::testing::TestGpu() != nullptr) return;  // covered by the [gpu] cases
  Device d = Device::Cuda(0, nullptr);
  UpfirdnOptions o;
  auto y = Upfirdn(d, {1.0}, RandomArray(DType::kFloat32, {8}), o);
  CHECK_FALSE(y.ok());
}

}  // namespace
}  // namespace fresnel::interp
