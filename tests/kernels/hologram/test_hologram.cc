// CPU tests of the hologram kernels: validation, the float64 oracle against an independent
// brute-force sum and the analytic single point, aliasing policy, the float32 and fixed-point
// (TA / PA) CPU paths, outputs, ASM reconstruction and the metrics. Small sizes: seconds on two
// cores.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fresnel/hologram/hologram.h"
#include "fresnel/hologram/point_cloud.h"
#include "hologram/hologram_internal.h"
#include "hologram_test_util.h"

namespace fresnel::hologram {
namespace {

using testing::BruteForce;
using testing::RandomCloud;
using testing::Rng;
using testing::SmallOptions;
using testing::ToArray;

const Device kCpu = Device::Cpu();
constexpr double kPi = 3.14159265358979323846;

std::string MessageOf(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("validation names the offending field", "[hologram]") {
  const HologramOptions good = SmallOptions(64, 48, Algorithm::kReference);
  PointCloud pts(20, Point{0, 0, 0.1, 1, 0});
  REQUIRE(ValidateHologram(pts, good).ok());

  auto expect = [&](const PointCloud& p, const HologramOptions& o, const std::string& field) {
    const absl::Status s = ValidateHologram(p, o);
    INFO(s.ToString());
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(MessageOf(s).rfind(field + ":", 0) == 0);
    // ComputeHologram validates too.
    CHECK(ComputeHologram(kCpu, p, o).status().code() == absl::StatusCode::kInvalidArgument);
  };
  HologramOptions o = good;
  o.width = 0;
  expect(pts, o, "width");
  o = good;
  o.height = 20000;
  expect(pts, o, "height");
  o = good;
  o.pitch_m = 0;
  expect(pts, o, "pitch_m");
  o.pitch_m = -4e-6;
  expect(pts, o, "pitch_m");
  o.pitch_m = std::nan("");
  expect(pts, o, "pitch_m");
  o = good;
  o.wavelength_m = -1;
  expect(pts, o, "wavelength_m");
  o.wavelength_m = std::numeric_limits<double>::infinity();
  expect(pts, o, "wavelength_m");
  o = good;
  o.lateral_subdivision = 0;
  expect(pts, o, "lateral_subdivision");
  o = good;
  o.reconstruction.enabled = true;
  o.reconstruction.depth_m = 0;
  expect(pts, o, "reconstruction.depth_m");
  o = good;
  o.max_device_workspace_bytes = -1;
  expect(pts, o, "max_device_workspace_bytes");

  expect(PointCloud{}, good, "points");
  PointCloud bad = pts;
  bad[17].z_m = 0;
  expect(bad, good, "points[17].z_m");
  bad = pts;
  bad[17].z_m = -0.1;
  expect(bad, good, "points[17].z_m");
  bad = pts;
  bad[3].x_m = std::nan("");
  expect(bad, good, "points[3].x_m");
  bad = pts;
  bad[4].y_m = std::numeric_limits<double>::infinity();
  expect(bad, good, "points[4].y_m");
  bad = pts;
  bad[5].amplitude = -1;
  expect(bad, good, "points[5].amplitude");
  bad = pts;
  bad[6].phase_rad = std::nan("");
  expect(bad, good, "points[6].phase_rad");

  Limits limits;
  limits.max_points = 19;
  CHECK(ValidateHologram(pts, good, limits).code() == absl::StatusCode::kInvalidArgument);
  CHECK(MessageOf(ValidateHologram(pts, good, limits)).rfind("points:", 0) == 0);
  limits = Limits{};
  limits.max_pixels = 64 * 48 - 1;
  CHECK(MessageOf(ValidateHologram(pts, good, limits)).rfind("width * height:", 0) == 0);
}

TEST_CASE("the tensor algorithm needs a GPU", "[hologram]") {
  const HologramOptions o = SmallOptions(32, 32, Algorithm::kTensor);
  const auto r = ComputeHologram(kCpu, PointCloud{Point{0, 0, 0.1, 1, 0}}, o);
  REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MessageOf(r.status()).rfind("algorithm:", 0) == 0);
}

TEST_CASE("a CUDA device without a stream is refused, never the default stream", "[hologram]") {
  const Device no_stream = Device::Cuda(0, nullptr);
  const auto r = ComputeHologram(no_stream, PointCloud{Point{0, 0, 0.1, 1, 0}},
                                 SmallOptions(32, 32, Algorithm::kReference));
  REQUIRE(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(MessageOf(r.status()), Catch::Contains("device.stream is null"));
  HostArray field(DType::kComplex64, {16, 16});
  AsmOptions asm_options;
  asm_options.pitch_m = 4e-6;
  asm_options.wavelength_m = 532e-9;
  asm_options.depth_m = 0.1;
  const auto rec = ReconstructAsm(no_stream, field, asm_options);
  CHECK(rec.status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("huge amplitudes and non-finite fields are refused, not rendered as inf or black",
          "[hologram]") {
  const HologramOptions o = SmallOptions(32, 32, Algorithm::kReference);
  const auto r = ComputeHologram(kCpu, PointCloud{Point{0, 0, 0.1, 1e300, 0}}, o);
  REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MessageOf(r.status()).rfind("points[0].amplitude:", 0) == 0);
  AsmOptions asm_options;
  asm_options.pitch_m = 4e-6;
  asm_options.wavelength_m = 532e-9;
  asm_options.depth_m = 0.1;
  for (DType dtype : {DType::kComplex64, DType::kComplex128}) {
    HostArray field(dtype, {16, 16});
    if (dtype == DType::kComplex64) {
      field.data<std::complex<float>>()[37] = {std::nanf(""), 0.f};
    } else {
      field.data<std::complex<double>>()[37] = {0.0, std::numeric_limits<double>::infinity()};
    }
    const auto rec = ReconstructAsm(kCpu, field, asm_options);
    REQUIRE(rec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(rec.status()), Catch::Contains("field: sample 37 is not finite"));
  }
}

TEST_CASE("names round-trip", "[hologram]") {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kReference, Algorithm::kTriangular,
                      Algorithm::kPiecewise, Algorithm::kTensor}) {
    CHECK(AlgorithmFromName(AlgorithmName(a)).value() == a);
  }
  for (TensorPrecision p : {TensorPrecision::kAuto, TensorPrecision::kInt8, TensorPrecision::kFp16,
                            TensorPrecision::kBf16, TensorPrecision::kTf32}) {
    CHECK(TensorPrecisionFromName(TensorPrecisionName(p)).value() == p);
  }
  CHECK(AlgorithmFromName("fast").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(TensorPrecisionFromName("fp8").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("auto picks the algorithm and precision from the requested quality", "[hologram]") {
  HologramOptions o = SmallOptions(8, 8, Algorithm::kAuto);
  const Device gpu = Device::Cuda(0, nullptr);
  CHECK(internal::ResolveAlgorithm(kCpu, o) == Algorithm::kReference);
  CHECK(internal::ResolveAlgorithm(gpu, o) == Algorithm::kTensor);
  CHECK(internal::ResolvePrecision(o) == TensorPrecision::kInt8);
  o.min_snr_db = 60;
  CHECK(internal::ResolveAlgorithm(gpu, o) == Algorithm::kTensor);
  CHECK(internal::ResolvePrecision(o) == TensorPrecision::kFp16);
  o.min_snr_db = 90;
  CHECK(internal::ResolveAlgorithm(gpu, o) == Algorithm::kReference);
  o.tensor_precision = TensorPrecision::kBf16;
  CHECK(internal::ResolvePrecision(o) == TensorPrecision::kBf16);
}

TEST_CASE("single point matches the analytic Fresnel wave", "[hologram]") {
  auto rng = Rng();
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  HologramOptions o = SmallOptions(48, 40, Algorithm::kReference);
  o.alias = AliasPolicy::kNone;
  const Point p{u(rng) * 1e-4, u(rng) * 1e-4, 0.05 + 0.05 * std::abs(u(rng)), 0.7, u(rng) * 3};
  const auto r = ComputeHologram(kCpu, {p}, o);
  REQUIRE(r.ok());
  const auto* h = r->field.data<std::complex<float>>();
  double max_err = 0;
  for (int64_t v = 0; v < o.height; ++v) {
    for (int64_t x = 0; x < o.width; ++x) {
      const double xu = (x - o.width / 2) * o.pitch_m, yv = (v - o.height / 2) * o.pitch_m;
      const double r2 = (xu - p.x_m) * (xu - p.x_m) + (yv - p.y_m) * (yv - p.y_m);
      const std::complex<double> want =
          std::polar(p.amplitude, p.phase_rad + kPi * r2 / (o.wavelength_m * p.z_m));
      max_err = std::max(max_err, std::abs(std::complex<double>(h[v * o.width + x]) - want));
    }
  }
  CHECK(max_err < 1e-6);  // complex64 output rounding
}

TEST_CASE("float64 oracle equals a brute-force sum (both alias policies)", "[hologram]") {
  auto rng = Rng();
  for (AliasPolicy alias : {AliasPolicy::kClip, AliasPolicy::kNone}) {
    HologramOptions o = SmallOptions(40, 33, Algorithm::kReference);
    o.alias = alias;
    // Near depths make the alias-free zone smaller than the hologram.
    const PointCloud pts = RandomCloud(60, o, 0.0002, 0.003, true, rng);
    const auto r = ComputeHologram(kCpu, pts, o);
    REQUIRE(r.ok());
    const HostArray want = ToArray(BruteForce(pts, o), o.height, o.width);
    CHECK(SnrDb(r->field, want) > 120);
  }
}

TEST_CASE("clipping limits each point to its alias-free zone", "[hologram]") {
  HologramOptions o = SmallOptions(64, 64, Algorithm::kReference);
  // λz/(2p) = 532e-9 · 4e-4 / 16e-6 = 13.3 µm: fewer than 2 pixels either side.
  const Point p{3 * o.pitch_m, -2 * o.pitch_m, 4e-4, 1, 0};
  const double half = o.wavelength_m * p.z_m / (2 * o.pitch_m);
  const auto clipped = ComputeHologram(kCpu, {p}, o);
  o.alias = AliasPolicy::kNone;
  const auto full = ComputeHologram(kCpu, {p}, o);
  REQUIRE(clipped.ok());
  REQUIRE(full.ok());
  int inside = 0;
  for (int64_t v = 0; v < o.height; ++v) {
    for (int64_t u = 0; u < o.width; ++u) {
      const double dx = (u - o.width / 2) * o.pitch_m - p.x_m;
      const double dy = (v - o.height / 2) * o.pitch_m - p.y_m;
      const auto c = clipped->field.data<std::complex<float>>()[v * o.width + u];
      const auto f = full->field.data<std::complex<float>>()[v * o.width + u];
      CHECK(std::abs(f) == Approx(1.0).epsilon(1e-6));
      if (std::abs(dx) <= half && std::abs(dy) <= half) {
        ++inside;
        CHECK(c == f);
      } else {
        CHECK(c == std::complex<float>(0, 0));
      }
    }
  }
  CHECK(inside == 9);
}

TEST_CASE("float32 CPU path tracks the float64 oracle", "[hologram]") {
  auto rng = Rng();
  HologramOptions o = SmallOptions(96, 80, Algorithm::kReference);
  const PointCloud pts = RandomCloud(300, o, 0.02, 0.2, true, rng);
  const auto ref = ComputeHologram(kCpu, pts, o);
  o.cpu_float32 = true;
  const auto f32 = ComputeHologram(kCpu, pts, o);
  REQUIRE(ref.ok());
  REQUIRE(f32.ok());
  CHECK(SnrDb(f32->field, ref->field) > 90);
}

TEST_CASE("shared rows and columns are merged without changing the result", "[hologram]") {
  // An image plane: every column shares x, every row shares y, all share z.
  HostArray img(DType::kUint8, {24, 20});
  auto rng = Rng();
  for (int64_t i = 0; i < img.size(); ++i) img.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  HologramOptions o = SmallOptions(64, 48, Algorithm::kReference);
  const PointCloud pts = ImageToPointCloud(img, {2 * o.pitch_m, 0.01}).value();
  const auto r = ComputeHologram(kCpu, pts, o);
  REQUIRE(r.ok());
  CHECK(SnrDb(r->field, ToArray(BruteForce(pts, o), o.height, o.width)) > 120);
}

TEST_CASE("TA / PA byte functions and their Fourier scaling", "[hologram]") {
  int sum_t = 0, sum_p = 0, max_t = 0, min_p = 999, max_p = 0;
  for (int b = 0; b < 256; ++b) {
    sum_t += internal::TriangleValue(b);
    sum_p += internal::PiecewiseValue(b);
    max_t = std::max(max_t, internal::TriangleValue(b));
    min_p = std::min(min_p, internal::PiecewiseValue(b));
    max_p = std::max(max_p, internal::PiecewiseValue(b));
  }
  CHECK(sum_t == 64 * 256);
  CHECK(sum_p == 128 * 256);
  CHECK(max_t == 128);
  CHECK(min_p == 34);
  CHECK(max_p == 222);
  // Odd-harmonic series of a triangle wave of amplitude 64: 8/π² · 64 ≈ 51.9.
  CHECK(internal::FundamentalAmplitude(false) == Approx(8 / (kPi * kPi) * 64).epsilon(2e-3));
  CHECK(internal::FundamentalAmplitude(true) > 80);
  // 32-bit phase arithmetic wraps modulo 2^32 for any sign and size of m.
  CHECK(internal::QuadraticPhase32(3, -5) == 75u);
  CHECK(internal::QuadraticPhase32(1u << 20, 1 << 12) == 0u);
  CHECK(internal::XPhaseByte(0) == 255u);
  CHECK(internal::YPhaseByte(0xFF800000u) == 0u);
}

TEST_CASE("TA and PA approximate the exact hologram with the paper's quality ordering",
          "[hologram]") {
  auto rng = Rng();
  HologramOptions o = SmallOptions(96, 96, Algorithm::kReference);
  const PointCloud pts = RandomCloud(250, o, 0.05, 0.2, true, rng);
  // Positions on the lateral grid, so only the phase and amplitude quantisation and the cosine
  // shapes remain.
  PointCloud grid = pts;
  for (Point& p : grid) {
    p.x_m = std::round(p.x_m / o.pitch_m) * o.pitch_m;
    p.y_m = std::round(p.y_m / o.pitch_m) * o.pitch_m;
  }
  const auto exact = ComputeHologram(kCpu, grid, o);
  o.algorithm = Algorithm::kTriangular;
  const auto ta = ComputeHologram(kCpu, grid, o);
  o.algorithm = Algorithm::kPiecewise;
  const auto pa = ComputeHologram(kCpu, grid, o);
  REQUIRE(exact.ok());
  REQUIRE(ta.ok());
  REQUIRE(pa.ok());
  const double snr_ta = SnrDb(ta->field, exact->field);
  const double snr_pa = SnrDb(pa->field, exact->field);
  INFO("TA " << snr_ta << " dB, PA " << snr_pa << " dB");
  // Harmonics of a triangle wave carry -18.3 dB of its power; PA's shape about -30 dB.
  CHECK(snr_ta > 15);
  CHECK(snr_ta < 22);
  CHECK(snr_pa > 26);
  CHECK(snr_pa > snr_ta + 8);

  // Finer lateral quantisation (s = p/4) of off-grid points.
  o.lateral_subdivision = 4;
  const auto pa2 = ComputeHologram(kCpu, pts, o);
  o.algorithm = Algorithm::kReference;
  const auto exact2 = ComputeHologram(kCpu, pts, o);
  REQUIRE(pa2.ok());
  CHECK(SnrDb(pa2->field, exact2->field) > 20);
}

TEST_CASE("TA's byte offset leaves no phase bias", "[hologram]") {
  // Correlating many points' TA / PA field with the exact one: arg of the correlation is the
  // mean phase error.
  auto rng = Rng();
  HologramOptions o = SmallOptions(256, 256, Algorithm::kTriangular);
  o.alias = AliasPolicy::kNone;
  PointCloud pts = RandomCloud(1600, o, 0.05, 0.2, true, rng);
  for (Point& p : pts) {
    p.x_m = std::round(p.x_m / o.pitch_m) * o.pitch_m;
    p.y_m = std::round(p.y_m / o.pitch_m) * o.pitch_m;
  }
  for (Algorithm a : {Algorithm::kTriangular, Algorithm::kPiecewise}) {
    o.algorithm = a;
    const auto approx = ComputeHologram(kCpu, pts, o);
    o.algorithm = Algorithm::kReference;
    const auto exact = ComputeHologram(kCpu, pts, o);
    REQUIRE(approx.ok());
    REQUIRE(exact.ok());
    std::complex<double> corr = 0;
    double gain_num = 0, gain_den = 0;
    for (int64_t i = 0; i < exact->field.size(); ++i) {
      const std::complex<double> x(approx->field.data<std::complex<float>>()[i]);
      const std::complex<double> e(exact->field.data<std::complex<float>>()[i]);
      corr += x * std::conj(e);
      gain_den += std::norm(e);
    }
    gain_num = std::abs(corr);
    // Without the offset the bias would be one byte unit, 0.0245 rad. TA's harmonics leave noise
    // on this estimate (fresh random clouds every run) that falls with the number of pixels, not
    // points: on 64x64 its sd was 0.0049 rad (0.012 exceeded about one run in 60), on 256x256
    // 0.00037 (max 0.0012 in 150 runs), so the threshold is ~30 sd away. PA's is a quarter of TA's.
    CHECK(std::abs(std::arg(corr)) < (a == Algorithm::kTriangular ? 0.012 : 0.005));
    CHECK(gain_num / gain_den == Approx(1.0).epsilon(0.02));
  }
}

TEST_CASE("phase and amplitude outputs follow the field", "[hologram]") {
  auto rng = Rng();
  HologramOptions o = SmallOptions(40, 30, Algorithm::kReference);
  o.outputs.phase = true;
  o.outputs.amplitude = true;
  const auto r = ComputeHologram(kCpu, RandomCloud(50, o, 0.05, 0.1, true, rng), o);
  REQUIRE(r.ok());
  REQUIRE(r->phase.dtype() == DType::kUint8);
  REQUIRE(r->amplitude.dtype() == DType::kFloat32);
  for (int64_t i = 0; i < r->field.size(); ++i) {
    const std::complex<float> f = r->field.data<std::complex<float>>()[i];
    CHECK(r->amplitude.data<float>()[i] == Approx(std::abs(f)).epsilon(1e-5));
    const double want = std::fmod(std::arg(std::complex<double>(f)) / (2 * kPi) * 256 + 256, 256);
    const double got = r->phase.data<uint8_t>()[i];
    const double diff = std::abs(want - got);
    CHECK(std::min(diff, 256 - diff) <= 0.5 + 1e-6);
  }
}

TEST_CASE("ASM refocuses a point hologram onto the point", "[hologram]") {
  auto rng = Rng();
  std::uniform_int_distribution<int> pix(-20, 20);
  HologramOptions o = SmallOptions(128, 96, Algorithm::kReference);
  o.alias = AliasPolicy::kNone;
  const int du = pix(rng), dv = pix(rng);
  const Point p{du * o.pitch_m, dv * o.pitch_m, 0.03, 1, 0};
  o.reconstruction.enabled = true;
  o.reconstruction.depth_m = p.z_m;
  const auto r = ComputeHologram(kCpu, {p}, o);
  REQUIRE(r.ok());
  const HostArray& img = r->reconstruction;
  REQUIRE(img.shape() == std::vector<int64_t>{o.height, o.width});
  int64_t best = 0;
  for (int64_t i = 1; i < img.size(); ++i) {
    if (img.data<uint8_t>()[i] > img.data<uint8_t>()[best]) best = i;
  }
  CHECK(best % o.width == o.width / 2 + du);
  CHECK(best / o.width == o.height / 2 + dv);
  CHECK(img.data<uint8_t>()[best] == 255);
  CHECK(r->reconstruction_scale > 0);

  // The standalone entry point on the same field, and the phase-only source.
  AsmOptions a{o.pitch_m, o.wavelength_m, p.z_m, ReconstructionSource::kField};
  const auto again = ReconstructAsm(kCpu, r->field, a);
  REQUIRE(again.ok());
  CHECK(Psnr8(again->image, img) > 50);
  a.source = ReconstructionSource::kPhaseOnly;
  const auto phase_only = ReconstructAsm(kCpu, r->field, a);
  REQUIRE(phase_only.ok());
  CHECK(phase_only->image.data<uint8_t>()[best] == 255);
  // Bad input.
  a.depth_m = -1;
  CHECK(ReconstructAsm(kCpu, r->field, a).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReconstructAsm(kCpu, r->reconstruction, AsmOptions{o.pitch_m, o.wavelength_m, 0.03})
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CPU ASM equals a direct-DFT angular spectrum", "[hologram]") {
  // Sizes with radix-7 and radix-5 factors (kissfft's generic butterflies) and several TBB tasks.
  const int64_t h = 70, w = 112;
  const double p = 8e-6, lambda = 532e-9, depth = 0.02;
  auto rng = Rng();
  std::normal_distribution<double> n(0, 1);
  HostArray field(DType::kComplex128, {h, w});
  auto* f = field.data<std::complex<double>>();
  for (int64_t i = 0; i < field.size(); ++i) f[i] = {n(rng), n(rng)};
  // Separable direct DFTs: rows, columns, transfer, inverse columns, inverse rows.
  std::vector<std::complex<double>> a(f, f + field.size()), t(a.size());
  auto dft_rows = [&](double sign) {
    for (int64_t v = 0; v < h; ++v)
      for (int64_t k = 0; k < w; ++k) {
        std::complex<double> s = 0;
        for (int64_t u = 0; u < w; ++u) s += a[v * w + u] * std::polar(1.0, sign * 2 * kPi * k * u / w);
        t[v * w + k] = s;
      }
    a = t;
  };
  auto dft_cols = [&](double sign) {
    for (int64_t u = 0; u < w; ++u)
      for (int64_t k = 0; k < h; ++k) {
        std::complex<double> s = 0;
        for (int64_t v = 0; v < h; ++v) s += a[v * w + u] * std::polar(1.0, sign * 2 * kPi * k * v / h);
        t[k * w + u] = s;
      }
    a = t;
  };
  dft_rows(-1);
  dft_cols(-1);
  for (int64_t v = 0; v < h; ++v) {
    for (int64_t u = 0; u < w; ++u) {
      const double fy = internal::FftIndex(v, h) / (h * p), fx = internal::FftIndex(u, w) / (w * p);
      a[v * w + u] *= std::polar(1.0, internal::AsmPhase(fx, fy, lambda, depth));
    }
  }
  dft_cols(1);
  dft_rows(1);
  double scale = 0;
  for (const auto& c : a) scale = std::max(scale, std::abs(c) / (w * h));
  const auto r = ReconstructAsm(kCpu, field, {p, lambda, depth});
  REQUIRE(r.ok());
  CHECK(r->scale == Approx(scale).epsilon(1e-9));
  int64_t off = 0;
  for (int64_t i = 0; i < field.size(); ++i) {
    const double want = std::nearbyint(255 * std::abs(a[i]) / (w * h) / scale);
    if (std::abs(want - r->image.data<uint8_t>()[i]) > 0) ++off;
  }
  CHECK(off == 0);
}

TEST_CASE("metrics", "[hologram]") {
  HostArray a(DType::kUint8, {4, 4}), b(DType::kUint8, {4, 4});
  for (int i = 0; i < 16; ++i) a.data<uint8_t>()[i] = b.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  CHECK(std::isinf(Psnr8(a, b)));
  b.data<uint8_t>()[3] += 4;  // MSE = 1
  CHECK(Psnr8(a, b) == Approx(10 * std::log10(255.0 * 255.0)));
  CHECK(Psnr8(a, HostArray(DType::kUint8, {2, 8})) == -1);
  HostArray x(DType::kComplex64, {2}), y(DType::kComplex64, {2});
  y.data<std::complex<float>>()[0] = {1, 0};
  y.data<std::complex<float>>()[1] = {0, 1};
  x.data<std::complex<float>>()[0] = {1.1f, 0};
  x.data<std::complex<float>>()[1] = {0, 1};
  CHECK(SnrDb(x, y) == Approx(10 * std::log10(2 / 0.01)).epsilon(1e-5));
}

// Row-major [n, columns] values of `pts` as T, shifted by one byte so that they are unaligned
// (as in a protobuf bytes field).
template <class T>
std::string Rows(const PointCloud& pts, int columns) {
  std::string bytes(1 + pts.size() * columns * sizeof(T), '\0');
  for (size_t i = 0; i < pts.size(); ++i) {
    const T v[5] = {static_cast<T>(pts[i].x_m), static_cast<T>(pts[i].y_m),
                    static_cast<T>(pts[i].z_m), static_cast<T>(pts[i].amplitude),
                    static_cast<T>(pts[i].phase_rad)};
    std::memcpy(&bytes[1 + i * columns * sizeof(T)], v, columns * sizeof(T));
  }
  return bytes;
}

void RequireSameResult(const HologramResult& a, const HologramResult& b) {
  REQUIRE(a.field.shape() == b.field.shape());
  REQUIRE(a.field.bytes() == b.field.bytes());
  REQUIRE(a.phase.bytes() == b.phase.bytes());
}

TEST_CASE("a prepared cloud renders bit for bit as the cloud it came from", "[hologram]") {
  auto rng = Rng();
  for (AliasPolicy alias : {AliasPolicy::kClip, AliasPolicy::kNone}) {
    for (Algorithm algorithm : {Algorithm::kReference, Algorithm::kTriangular}) {
      HologramOptions o = SmallOptions(40, 24, algorithm);
      o.alias = alias;
      o.outputs.phase = true;
      const PointCloud pts = RandomCloud(70, o, 0.02, 0.05, true, rng);
      const auto want = ComputeHologram(kCpu, pts, o);
      REQUIRE(want.ok());
      // In three parts of float64 rows, unaligned: the same values, so the same bits.
      CloudBuilder builder(o);
      const std::string rows = Rows<double>(pts, 5);
      const int64_t row_bytes = 5 * sizeof(double);
      int64_t from = 0;
      for (int64_t to : {int64_t{10}, int64_t{45}, int64_t{70}}) {
        REQUIRE(builder.AppendRows(rows.data() + 1 + from * row_bytes, DType::kFloat64, to - from,
                                   5).ok());
        from = to;
      }
      REQUIRE(builder.size() == 70);
      absl::StatusOr<PreparedCloud> cloud = builder.Finish();
      REQUIRE(cloud.ok());
      CHECK(builder.size() == 0);
      REQUIRE(cloud->size() == 70);
      const auto got = ComputeHologram(kCpu, *cloud, o);
      REQUIRE(got.ok());
      RequireSameResult(*got, *want);
    }
  }
}

TEST_CASE("float32 rows and four columns convert like the same values as a PointCloud",
          "[hologram]") {
  auto rng = Rng();
  HologramOptions o = SmallOptions(32, 32, Algorithm::kReference);
  PointCloud pts = RandomCloud(40, o, 0.02, 0.05, true, rng);
  PointCloud rounded = pts;  // what float32 [N, 4] carries: rounded values, phase 0
  for (Point& p : rounded) {
    p = Point{static_cast<float>(p.x_m), static_cast<float>(p.y_m), static_cast<float>(p.z_m),
              static_cast<float>(p.amplitude), 0.0};
  }
  CloudBuilder builder(o);
  const std::string rows = Rows<float>(pts, 4);
  REQUIRE(builder.AppendRows(rows.data() + 1, DType::kFloat32, 40, 4).ok());
  absl::StatusOr<PreparedCloud> cloud = builder.Finish();
  REQUIRE(cloud.ok());
  const auto got = ComputeHologram(kCpu, *cloud, o);
  const auto want = ComputeHologram(kCpu, rounded, o);
  REQUIRE(got.ok());
  REQUIRE(want.ok());
  RequireSameResult(*got, *want);
}

TEST_CASE("CloudBuilder rejects bad values by their index in the whole cloud, keeping nothing",
          "[hologram]") {
  auto rng = Rng();
  const HologramOptions o = SmallOptions(32, 32, Algorithm::kReference);
  Limits limits;
  // A bad value far into a large batch (several parallel blocks) is found and named.
  PointCloud big = RandomCloud(40000, o, 0.02, 0.05, true, rng);
  limits.max_points = 100000;
  {
    CloudBuilder builder(o, limits);
    REQUIRE(builder.Append(PointCloud(big.begin(), big.begin() + 5)).ok());
    big[33000].z_m = -1;
    big[37000].amplitude = NAN;
    const absl::Status st = builder.Append(big);
    INFO(st.ToString());
    REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(MessageOf(st).rfind("points[33005].z_m:", 0) == 0);
    CHECK(builder.size() == 5);  // the bad batch left nothing behind
    big[33000].z_m = 0.03;
    big[37000].amplitude = 0.5;
    REQUIRE(builder.Append(big).ok());
    CHECK(builder.size() == 40005);
  }
  // Each check of ValidateHologram, with the same message.
  const PointCloud good = RandomCloud(6, o, 0.02, 0.05, true, rng);
  for (int field = 0; field < 5; ++field) {
    PointCloud bad = good;
    double* v[5] = {&bad[4].x_m, &bad[4].y_m, &bad[4].z_m, &bad[4].amplitude, &bad[4].phase_rad};
    *v[field] = field == 2 ? 0.0 : INFINITY;
    CloudBuilder builder(o, limits);
    const absl::Status st = builder.Append(bad);
    REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st == ValidateHologram(bad, o, limits));
  }
  // The limit counts every part; the columns and dtype are checked.
  limits.max_points = 10;
  CloudBuilder builder(o, limits);
  REQUIRE(builder.Append(good).ok());
  const absl::Status over = builder.Append(good);
  CHECK(over.code() == absl::StatusCode::kInvalidArgument);
  CHECK(MessageOf(over).rfind("points: 12 points exceed the limit of 10", 0) == 0);
  const std::string rows = Rows<double>(good, 5);
  CHECK(builder.AppendRows(rows.data() + 1, DType::kFloat64, 1, 3).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(builder.AppendRows(rows.data() + 1, DType::kInt32, 1, 5).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(builder.size() == 6);
  // Nothing appended: the empty cloud's error.
  CloudBuilder empty(o, limits);
  const absl::StatusOr<PreparedCloud> none = empty.Finish();
  CHECK(MessageOf(none.status()) == "points: the point cloud is empty");
}

TEST_CASE("a prepared cloud refuses another geometry", "[hologram]") {
  auto rng = Rng();
  const HologramOptions o = SmallOptions(32, 32, Algorithm::kReference);
  absl::StatusOr<PreparedCloud> cloud =
      PrepareCloud(RandomCloud(8, o, 0.02, 0.05, false, rng), o);
  REQUIRE(cloud.ok());
  HologramOptions other = o;
  other.pitch_m *= 2;
  const auto r = ComputeHologram(kCpu, *cloud, other);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MessageOf(r.status()).rfind("points:", 0) == 0);
  other = o;
  other.outputs.amplitude = true;  // not geometry: accepted
  CHECK(ComputeHologram(kCpu, *cloud, other).ok());
  CHECK(ComputeHologram(kCpu, PreparedCloud(), o).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ValidateOptions checks what ValidateHologram checks before the points",
          "[hologram]") {
  const HologramOptions good = SmallOptions(64, 48, Algorithm::kReference);
  CHECK(ValidateOptions(good).ok());
  const PointCloud one = {Point{0, 0, 0.1, 1, 0}};
  for (int c = 0; c < 4; ++c) {
    HologramOptions o = good;
    if (c == 0) o.width = 0;
    if (c == 1) o.wavelength_m = NAN;
    if (c == 2) o.lateral_subdivision = 300;
    if (c == 3) {
      o.reconstruction.enabled = true;
      o.reconstruction.depth_m = -1;
    }
    const absl::Status st = ValidateOptions(o);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st == ValidateHologram(one, o));
  }
}

TEST_CASE("DeviceBytes counts the field, the outputs, the reconstruction and the points",
          "[hologram]") {
  HologramOptions o = SmallOptions(2048, 1024, Algorithm::kTensor);
  o.outputs.field = false;
  o.outputs.phase = true;
  const int64_t pixels = 2048 * 1024;
  CHECK(OutputBytes(o) == pixels);
  const int64_t one = DeviceBytes(o, 1);
  CHECK(one >= pixels * 8 + OutputBytes(o));
  CHECK(DeviceBytes(o, 1001) - one >= 1000 * (5 * 8 + 4 * 4));  // at least the uploaded arrays
  o.reconstruction.enabled = true;
  CHECK(DeviceBytes(o, 1) - one >= pixels * 8 * 3 + pixels);  // + spectra and the 8-bit image
  // The largest request the default limits allow stays far from overflow.
  const Limits limits;
  HologramOptions big = o;
  big.width = 16384;
  big.height = limits.max_pixels / 16384;
  big.outputs.field = big.outputs.amplitude = true;
  const int64_t most = DeviceBytes(big, limits.max_points);
  CHECK(most > 0);
  CHECK(most < (int64_t{1} << 40));
  // The upload cap of a chunked field: max_pixels samples of complex128.
  Limits small;
  small.max_pixels = 1000;
  CHECK(ReconstructMaxFieldBytes(small) == 16000);
}

}  // namespace
}  // namespace fresnel::hologram
