// PLY parsing, mesh sampling, box fitting and image planes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "fresnel/hologram/point_cloud.h"
#include "hologram_test_util.h"

namespace fresnel::hologram {
namespace {

template <class T>
void Append(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof v);
}

TEST_CASE("ASCII PLY with a quad and a triangle", "[hologram][ply]") {
  const std::string ply =
      "ply\nformat ascii 1.0\ncomment test\nelement vertex 5\nproperty float x\n"
      "property float y\nproperty double z\nproperty uchar intensity\n"
      "element face 2\nproperty list uchar int vertex_indices\nend_header\n"
      "0 0 0 10\n1 0 0 20\n1 1 0 30\n0 1 0.5 40\n2 2 2 50\n"
      "4 0 1 2 3\n3 1 4 2\n";
  PlyOptions options;
  options.amplitude_property = "intensity";
  const auto mesh = ParsePly(ply, options);
  REQUIRE(mesh.ok());
  REQUIRE(mesh->vertices.size() == 5);
  CHECK(mesh->vertices[3][2] == 0.5);
  CHECK(mesh->vertex_values[4] == 50);
  REQUIRE(mesh->faces.size() == 3);  // the quad becomes two triangles
  CHECK(mesh->faces[0] == std::array<int32_t, 3>{0, 1, 2});
  CHECK(mesh->faces[1] == std::array<int32_t, 3>{0, 2, 3});
  CHECK(mesh->faces[2] == std::array<int32_t, 3>{1, 4, 2});
}

TEST_CASE("binary little-endian PLY with mixed types and a skipped element", "[hologram][ply]") {
  std::string ply =
      "ply\nformat binary_little_endian 1.0\nelement camera 1\nproperty list uchar float k\n"
      "property int id\nelement vertex 3\nproperty short flags\nproperty double x\n"
      "property float y\nproperty float z\nproperty list uchar ushort extra\n"
      "element face 1\nproperty list uint uint vertex_indices\nproperty uchar tag\nend_header\n";
  Append<uint8_t>(&ply, 2);
  Append<float>(&ply, 1.f);
  Append<float>(&ply, 2.f);
  Append<int32_t>(&ply, 7);
  for (int i = 0; i < 3; ++i) {
    Append<int16_t>(&ply, -1);
    Append<double>(&ply, 0.25 * i);
    Append<float>(&ply, -1.5f * i);
    Append<float>(&ply, 3.f);
    Append<uint8_t>(&ply, 1);
    Append<uint16_t>(&ply, 9);
  }
  Append<uint32_t>(&ply, 3);
  for (uint32_t k : {2u, 1u, 0u}) Append<uint32_t>(&ply, k);
  Append<uint8_t>(&ply, 1);
  const auto mesh = ParsePly(ply);
  REQUIRE(mesh.ok());
  REQUIRE(mesh->vertices.size() == 3);
  CHECK(mesh->vertices[2][0] == 0.5);
  CHECK(mesh->vertices[2][1] == -3.0);
  CHECK(mesh->vertices[1][2] == 3.0);
  CHECK(mesh->vertex_values.empty());
  REQUIRE(mesh->faces.size() == 1);
  CHECK(mesh->faces[0] == std::array<int32_t, 3>{2, 1, 0});

  // Truncated data.
  const auto truncated = ParsePly(ply.substr(0, ply.size() - 6));
  CHECK(truncated.status().code() == absl::StatusCode::kInvalidArgument);
}

// Found by tests/fuzz/ply_fuzz.cc: list lengths and face indices read as doubles were converted to
// integers unchecked (1e300 is undefined behaviour; 2^32 + 1 wrapped to vertex 1), and an element
// of 2^62 rows spun on after the data ran out.
TEST_CASE("PLY counts, list lengths and indices are checked before use", "[hologram][ply]") {
  const std::string head = "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\n"
                           "property float y\nproperty float z\n";
  const std::string verts = "0 0 0\n1 0 0\n0 1 0\n";
  const std::string face = "element face 1\nproperty list uchar int vertex_indices\nend_header\n";
  auto message = [](const std::string& s) {
    absl::Status st = ParsePly(s).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    return std::string(st.message());
  };
  CHECK(ParsePly(head + face + verts + "3 0 1 2\n").ok());
  CHECK_THAT(message(head + face + verts + "3 0 1 4294967297\n"),
             Catch::Contains("bad vertex index 4.29497e+09"));
  CHECK_THAT(message(head + face + verts + "3 0 1 1e300\n"), Catch::Contains("bad vertex index"));
  CHECK_THAT(message(head + face + verts + "3 0 1 0.5\n"), Catch::Contains("bad vertex index"));
  CHECK_THAT(message(head + face + verts + "1e300 0 1 2\n"), Catch::Contains("bad list length"));
  CHECK_THAT(message(head + face + verts + "nan 0 1 2\n"), Catch::Contains("bad list length"));
  // A skipped element's list of 1e19 items, and 2^62 rows of a skipped element.
  CHECK_THAT(message("ply\nformat ascii 1.0\nelement extra 1\nproperty list float int v\n" +
                     head.substr(std::string("ply\nformat ascii 1.0\n").size()) +
                     "end_header\n1e19 1\n" + verts),
             Catch::Contains("bad list length"));
  CHECK_THAT(message("ply\nformat ascii 1.0\nelement extra 4611686018427387904\n"
                     "property uchar v\n" +
                     head.substr(std::string("ply\nformat ascii 1.0\n").size()) +
                     "end_header\n1\n" + verts),
             Catch::Contains("claims 4611686018427387904 rows"));
  // Rows without properties hold no bytes: skipped at once however many.
  CHECK(ParsePly("ply\nformat ascii 1.0\nelement nothing 9223372036854775807\n" +
                 head.substr(std::string("ply\nformat ascii 1.0\n").size()) + "end_header\n" +
                 verts)
            .ok());
}

TEST_CASE("malformed PLY files are rejected", "[hologram][ply]") {
  CHECK(!ParsePly("plx\n").ok());
  CHECK(!ParsePly("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n1\n").ok());
  CHECK(!ParsePly("ply\nformat binary_big_endian 1.0\nend_header\n").ok());
  CHECK(!ParsePly("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n").ok());
  CHECK(!ParsePly("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                  "property float z\nend_header\n1 2 abc\n")
             .ok());
  const auto bad_face = ParsePly(
      "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
      "property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n"
      "0 0 0\n3 0 0 5\n");
  CHECK(bad_face.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReadPly("/nonexistent/file.ply").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("the shared bunny parses as documented", "[hologram][ply][data]") {
  const std::string path = testing::CghDataPath("bunny.ply");
  if (path.empty()) {
    WARN("cgh/bunny.ply not found: skipping");
    return;
  }
  PlyOptions options;
  options.amplitude_property = "confidence";
  const auto mesh = ReadPly(path, options);
  REQUIRE(mesh.ok());
  CHECK(mesh->vertices.size() == 35947);
  CHECK(mesh->faces.size() == 69451);
  double lo = 1e9, hi = -1e9;
  for (const auto& v : mesh->vertices) {
    lo = std::min(lo, v[0]);
    hi = std::max(hi, v[0]);
  }
  CHECK(lo == Approx(-0.0947).margin(1e-4));
  CHECK(hi == Approx(0.0610).margin(1e-4));

  const auto cloud = SampleMesh(*mesh, 100000);
  REQUIRE(cloud.ok());
  CHECK(cloud->size() == 100000);
  const auto fitted = FitToBox(*cloud, {0.0159, 0.0039, 0.0108}, {0, 0, 0.2});
  REQUIRE(fitted.ok());
  double zlo = 1, zhi = 0, xlo = 1, xhi = -1;
  for (const Point& p : *fitted) {
    zlo = std::min(zlo, p.z_m);
    zhi = std::max(zhi, p.z_m);
    xlo = std::min(xlo, p.x_m);
    xhi = std::max(xhi, p.x_m);
  }
  CHECK(zhi - zlo == Approx(0.0108));
  CHECK((zhi + zlo) / 2 == Approx(0.2));
  CHECK(xhi - xlo == Approx(0.0159));
}

TEST_CASE("mesh sampling: vertices, centroids, then random surface points", "[hologram][ply]") {
  PlyMesh mesh;
  mesh.vertices = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 1}};
  mesh.faces = {{0, 1, 2}, {1, 3, 2}};
  const auto few = SampleMesh(mesh, 2);
  REQUIRE(few.ok());
  CHECK(few->size() == 2);
  const auto six = SampleMesh(mesh, 6);
  REQUIRE(six.ok());
  CHECK((*six)[4].x_m == Approx(1.0 / 3));
  CHECK((*six)[5].z_m == Approx(1.0 / 3));
  const auto many = SampleMesh(mesh, 1000, 42);
  REQUIRE(many.ok());
  REQUIRE(many->size() == 1000);
  for (const Point& p : *many) {
    CHECK(p.x_m >= -1e-12);
    CHECK(p.x_m <= 1 + 1e-12);
    CHECK(p.amplitude == 1.0);
    // Every point lies on one of the two triangles (z = 0, or the plane z = x + y − 1).
    const bool on_first = std::abs(p.z_m) < 1e-12 && p.x_m + p.y_m <= 1 + 1e-12;
    const bool on_second = std::abs(p.z_m - (p.x_m + p.y_m - 1)) < 1e-12;
    CHECK((on_first || on_second));
  }
  const auto again = SampleMesh(mesh, 1000, 42);
  CHECK((*again)[999].y_m == (*many)[999].y_m);
  PlyMesh no_faces;
  no_faces.vertices = mesh.vertices;
  CHECK(SampleMesh(no_faces, 5).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("image planes put one point per pixel", "[hologram]") {
  HostArray img(DType::kUint8, {3, 4});
  for (int i = 0; i < 12; ++i) img.data<uint8_t>()[i] = static_cast<uint8_t>(i * 20);
  const auto pts = ImageToPointCloud(img, {1e-5, 0.1});
  REQUIRE(pts.ok());
  REQUIRE(pts->size() == 12);
  // Pixel (row 0, col 0) at x = −2·s, y = −1·s; (row 2, col 3) at x = s, y = s.
  CHECK((*pts)[0].x_m == Approx(-2e-5));
  CHECK((*pts)[0].y_m == Approx(-1e-5));
  CHECK((*pts)[11].x_m == Approx(1e-5));
  CHECK((*pts)[11].y_m == Approx(1e-5));
  CHECK((*pts)[11].amplitude == Approx(220.0 / 255));
  CHECK((*pts)[5].z_m == 0.1);
  const auto skip = ImageToPointCloud(img, {1e-5, 0.1, true});
  CHECK(skip->size() == 11);
  CHECK(!ImageToPointCloud(img, {0, 0.1}).ok());
  CHECK(!ImageToPointCloud(HostArray(DType::kFloat32, {2, 2}), {1e-5, 0.1}).ok());
}

}  // namespace
}  // namespace fresnel::hologram
