// Mesh tests: validation, content hash, the VTK reader (both layouts, ASCII and binary, cell
// splitting consistent across shared faces) and the generators.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/volume/mesh.h"
#include "support/test_support.h"
#include "volume_test_util.h"

namespace fresnel::volume {
namespace {

using testing::FreshSeed;

double SignedVolume(const TetMesh& m, int64_t t) {
  double p[4][3];
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 3; ++k) p[i][k] = m.points_xyz[3 * int64_t{m.tets[4 * t + i]} + k];
  double e[3][3];
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k) e[i][k] = p[i + 1][k] - p[0][k];
  return (e[0][0] * (e[1][1] * e[2][2] - e[1][2] * e[2][1]) -
          e[0][1] * (e[1][0] * e[2][2] - e[1][2] * e[2][0]) +
          e[0][2] * (e[1][0] * e[2][1] - e[1][1] * e[2][0])) / 6;
}

double TotalVolume(const TetMesh& m) {
  double v = 0;
  for (int64_t t = 0; t < m.num_tets(); ++t) v += std::fabs(SignedVolume(m, t));
  return v;
}

// Faces (sorted point triples) and how many tetrahedra share each. A conforming mesh has every
// face shared by one (boundary) or two (interior) tetrahedra.
std::map<std::array<int32_t, 3>, int> FaceCounts(const TetMesh& m) {
  std::map<std::array<int32_t, 3>, int> faces;
  for (int64_t t = 0; t < m.num_tets(); ++t)
    for (int f = 0; f < 4; ++f) {
      std::array<int32_t, 3> k;
      for (int i = 0; i < 3; ++i) k[i] = m.tets[4 * t + ((f + 1 + i) & 3)];
      std::sort(k.begin(), k.end());
      ++faces[k];
    }
  return faces;
}

TEST_CASE("ValidateMesh names the bad field", "[volume]") {
  auto mesh = GenerateGridMesh({2, 2, 2});
  REQUIRE(mesh.ok());
  auto r = ValidateMesh(*mesh);
  REQUIRE(r.ok());
  CHECK(r->num_tets == 48);
  CHECK(r->degenerate_tets == 0);
  {
    TetMesh m = *mesh;
    m.tets[17] = static_cast<int32_t>(m.num_points());
    auto s = ValidateMesh(m);
    CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.status().message()), Catch::Contains("tets[4] index 1"));
  }
  {
    TetMesh m = *mesh;
    m.tets[3] = -1;
    CHECK_THAT(std::string(ValidateMesh(m).status().message()), Catch::Contains("out of range"));
  }
  {
    TetMesh m = *mesh;
    m.points_xyz[7] = NAN;
    CHECK_THAT(std::string(ValidateMesh(m).status().message()),
               Catch::Contains("points_xyz[2] (coordinate 1)"));
  }
  {
    TetMesh m = *mesh;
    m.scalars[5] = INFINITY;
    CHECK_THAT(std::string(ValidateMesh(m).status().message()), Catch::Contains("scalars[5]"));
  }
  {
    TetMesh m = *mesh;
    m.scalars.pop_back();
    CHECK_THAT(std::string(ValidateMesh(m).status().message()), Catch::Contains("scalars has"));
  }
  {
    TetMesh m = *mesh;
    m.tets.pop_back();
    CHECK_THAT(std::string(ValidateMesh(m).status().message()),
               Catch::Contains("not a multiple of 4"));
  }
  {
    TetMesh m = *mesh;
    m.tets.clear();
    CHECK(ValidateMesh(m).status().code() == absl::StatusCode::kInvalidArgument);
  }
  {
    // A flat tetrahedron is counted, not refused.
    TetMesh m = *mesh;
    m.tets.insert(m.tets.end(), {0, 1, 2, 3});  // four points of one grid row: collinear
    auto s = ValidateMesh(m);
    REQUIRE(s.ok());
    CHECK(s->degenerate_tets == 1);
  }
}

TEST_CASE("MeshContentHash keys on content", "[volume]") {
  auto a = GenerateGridMesh({3, 4, 5});
  REQUIRE(a.ok());
  TetMesh b = *a;
  CHECK(MeshContentHash(*a) == MeshContentHash(b));
  CHECK(MeshContentHash(*a).size() == 64);
  b.scalars[11] = std::nextafter(b.scalars[11], 2.0f);
  CHECK(MeshContentHash(*a) != MeshContentHash(b));
  b = *a;
  std::swap(b.tets[0], b.tets[1]);
  CHECK(MeshContentHash(*a) != MeshContentHash(b));
}

TEST_CASE("generators: sizes, volume, conformity", "[volume]") {
  CHECK(GridSpecForTets(1000000).cells_x == 55);
  CHECK(GridSpecForTets(6000000).cells_x == 100);
  CHECK(GridSpecForTets(35000000).cells_x == 180);
  GridMeshSpec spec{5, 4, 3, {0, 0, 0}, {5, 4, 3}};
  auto box = GenerateGridMesh(spec);
  REQUIRE(box.ok());
  CHECK(box->num_tets() == 6 * 60);
  CHECK(TotalVolume(*box) == Approx(60).epsilon(1e-6));
  int boundary = 0;
  for (const auto& [k, n] : FaceCounts(*box)) {
    REQUIRE(n <= 2);
    boundary += n == 1;
  }
  CHECK(boundary == 2 * 2 * (5 * 4 + 4 * 3 + 5 * 3));
  for (int64_t t = 0; t < box->num_tets(); ++t) REQUIRE(SignedVolume(*box, t) > 0);

  spec = GridMeshSpec{12, 12, 6, {0, 0, 0}, {12, 12, 6}, GridShape::kHoleAndNotch};
  auto holed = GenerateGridMesh(spec);
  REQUIRE(holed.ok());
  // Hole: x in [4, 6), y in [4, 8), all z → 2·4·6 = 48 cells; notch: x in [10, 12), y in [4, 8),
  // z in [2, 4) → 16 cells.
  CHECK(TotalVolume(*holed) == Approx(12 * 12 * 6 - 48 - 16).epsilon(1e-6));
  auto report = ValidateMesh(*holed);
  REQUIRE(report.ok());
  CHECK(report->degenerate_tets == 0);
  for (const auto& [k, n] : FaceCounts(*holed)) REQUIRE(n <= 2);
}

TEST_CASE("VTK: the shared cube and Blunt Fin", "[volume]") {
  const std::string cube = fresnel::testing::DataPath("volume/cube_tets.vtk");
  const std::string fin = fresnel::testing::DataPath("volume/bluntfin_tets.vtk");
  if (cube.empty() || fin.empty()) {
    WARN("shared data missing: skipping");
    return;
  }
  VtkReadReport rep;
  auto c = ReadVtk(cube, {}, &rep);
  REQUIRE(c.ok());
  CHECK(c->num_points() == 8);
  CHECK(c->num_tets() == 6);
  CHECK(rep.version == "4.2");
  for (int i = 0; i < 8; ++i) CHECK(c->scalars[i] == i);
  CHECK(TotalVolume(*c) == Approx(1.0));
  auto f = ReadVtk(fin, {}, &rep);
  REQUIRE(f.ok());
  CHECK(f->num_points() == 40960);
  CHECK(f->num_tets() == 187395);
  CHECK(rep.scalar_name == "scalar");
  auto r = ValidateMesh(*f);
  REQUIRE(r.ok());
  // 77 tetrahedra have exactly zero volume (the grid's collapsed edge; data README).
  CHECK(r->degenerate_tets >= 77);
  CHECK(r->degenerate_tets < 934);
  CHECK(r->scalar_min == Approx(0.1926).margin(1e-4));
  CHECK(r->scalar_max == Approx(4.9775).margin(1e-4));
  CHECK(TotalVolume(*f) == Approx(931.163).epsilon(1e-4));
}

TEST_CASE("VTK: write and read back in every layout", "[volume]") {
  auto mesh = GenerateGridMesh({3, 2, 2, {-1.5f, 0, 0}, {1.25f, 1, 2}});
  REQUIRE(mesh.ok());
  for (VtkFormat fmt : {VtkFormat::kAscii42, VtkFormat::kBinary42, VtkFormat::kAscii51,
                        VtkFormat::kBinary51}) {
    const std::string bytes = FormatVtk(*mesh, fmt);
    VtkReadReport rep;
    auto back = ParseVtk(bytes, {}, &rep);
    INFO("format " << static_cast<int>(fmt));
    REQUIRE(back.ok());
    CHECK(back->points_xyz == mesh->points_xyz);
    CHECK(back->tets == mesh->tets);
    CHECK(back->scalars == mesh->scalars);
    CHECK(rep.version == ((fmt == VtkFormat::kAscii51 || fmt == VtkFormat::kBinary51) ? "5.1" : "4.2"));
  }
}

// A grid of n³ hexahedra (or wedges, or pyramids around added centre points) with point ids
// shuffled, as a legacy VTK 4.2 ASCII file.
std::string MixedCellsVtk(int n, int mode, std::mt19937_64& rng, double* volume) {
  const int p = n + 1;
  std::vector<int> perm(p * p * p);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  auto id = [&](int i, int j, int k) { return perm[i + p * (j + p * k)]; };
  std::vector<std::array<double, 3>> pts(p * p * p);
  for (int k = 0; k < p; ++k)
    for (int j = 0; j < p; ++j)
      for (int i = 0; i < p; ++i) pts[id(i, j, k)] = {double(i), double(j), double(k)};
  std::vector<std::vector<int>> cells;
  std::vector<int> types;
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) {
        const int v[8] = {id(i, j, k),         id(i + 1, j, k),     id(i + 1, j + 1, k),
                          id(i, j + 1, k),     id(i, j, k + 1),     id(i + 1, j, k + 1),
                          id(i + 1, j + 1, k + 1), id(i, j + 1, k + 1)};
        // Mixed: one type per z column, since the wedges' triangle faces (z) follow their fixed cut.
        const int m = mode == 3 ? (i + j) % 3 : mode;
        if (m == 0) {
          cells.push_back({v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]});
          types.push_back(12);
        } else if (m == 1) {  // two wedges, cut along the plane through points 0, 2, 6, 4
          cells.push_back({v[0], v[1], v[2], v[4], v[5], v[6]});
          cells.push_back({v[0], v[2], v[3], v[4], v[6], v[7]});
          types.insert(types.end(), {13, 13});
        } else {  // six pyramids around a new centre point
          const int c = static_cast<int>(pts.size());
          pts.push_back({i + 0.5, j + 0.5, k + 0.5});
          const int faces[6][4] = {{0, 1, 2, 3}, {4, 7, 6, 5}, {0, 4, 5, 1},
                                   {1, 5, 6, 2}, {2, 6, 7, 3}, {3, 7, 4, 0}};
          for (const auto& f : faces) {
            cells.push_back({v[f[0]], v[f[1]], v[f[2]], v[f[3]], c});
            types.push_back(14);
          }
        }
      }
  // In mixed grids a hexahedron next to wedges or pyramids shares quadrilateral faces with
  // them, so every cell type must split its faces by the same rule.
  std::string s = "# vtk DataFile Version 4.2\nmixed\nASCII\nDATASET UNSTRUCTURED_GRID\n";
  absl::StrAppend(&s, "POINTS ", pts.size(), " double\n");
  for (const auto& q : pts) absl::StrAppend(&s, q[0], " ", q[1], " ", q[2], "\n");
  size_t size = 0;
  for (const auto& c : cells) size += c.size() + 1;
  absl::StrAppend(&s, "CELLS ", cells.size(), " ", size, "\n");
  for (const auto& c : cells) {
    absl::StrAppend(&s, c.size());
    for (int v : c) absl::StrAppend(&s, " ", v);
    s += "\n";
  }
  absl::StrAppend(&s, "CELL_TYPES ", types.size(), "\n");
  for (int t : types) absl::StrAppend(&s, t, "\n");
  absl::StrAppend(&s, "CELL_DATA ", cells.size(), "\nSCALARS cellid int 1\nLOOKUP_TABLE default\n");
  for (size_t i = 0; i < cells.size(); ++i) absl::StrAppend(&s, i, "\n");
  absl::StrAppend(&s, "POINT_DATA ", pts.size(), "\nSCALARS temp float\nLOOKUP_TABLE default\n");
  for (const auto& q : pts) absl::StrAppend(&s, q[0] + 2 * q[1], "\n");
  *volume = double(n) * n * n;
  return s;
}

TEST_CASE("VTK: hexahedra, wedges and pyramids split conformingly", "[volume]") {
  std::mt19937_64 rng(FreshSeed());
  for (int mode = 0; mode < 4; ++mode) {
    for (int rep = 0; rep < 3; ++rep) {
      double volume = 0;
      const int n = 3;
      const std::string vtk = MixedCellsVtk(n, mode, rng, &volume);
      VtkReadReport report;
      auto mesh = ParseVtk(vtk, {}, &report);
      INFO("mode " << mode);
      REQUIRE(mesh.ok());
      CHECK(report.scalar_name == "temp");
      auto r = ValidateMesh(*mesh);
      REQUIRE(r.ok());
      CHECK(r->degenerate_tets == 0);
      CHECK(TotalVolume(*mesh) == Approx(volume).epsilon(1e-9));
      int boundary = 0;
      for (const auto& [k, count] : FaceCounts(*mesh)) {
        REQUIRE(count <= 2);
        boundary += count == 1;
      }
      // Every boundary square is split into exactly two triangles.
      CHECK(boundary == 2 * 6 * n * n);
      // Interpolated scalars stay linear: the scalar is x + 2y at every point (also the added
      // centres), so each tetrahedron reproduces it.
      for (int64_t i = 0; i < mesh->num_points(); ++i) {
        REQUIRE(mesh->scalars[i] ==
                Approx(mesh->points_xyz[3 * i] + 2 * mesh->points_xyz[3 * i + 1]));
      }
    }
  }
}

TEST_CASE("VTK: bad input is refused by name", "[volume]") {
  const std::string head = "# vtk DataFile Version 4.2\nx\nASCII\nDATASET UNSTRUCTURED_GRID\n"
                           "POINTS 4 float\n0 0 0 1 0 0 0 1 0 0 0 1\n";
  const std::string tail = "POINT_DATA 4\nSCALARS s float 1\nLOOKUP_TABLE default\n0 1 2 3\n";
  auto parse = [](const std::string& s) { return ParseVtk(s).status(); };
  CHECK(parse(head + "CELLS 1 5\n4 0 1 2 3\nCELL_TYPES 1\n10\n" + tail).ok());
  auto st = parse(head + "CELLS 1 4\n3 0 1 2\nCELL_TYPES 1\n5\n" + tail);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("VTK_TRIANGLE (5)"));
  st = parse(head + "CELLS 1 11\n10 0 1 2 3 0 1 2 3 0 1\nCELL_TYPES 1\n24\n" + tail);
  CHECK_THAT(std::string(st.message()), Catch::Contains("VTK_QUADRATIC_TETRA (24)"));
  st = parse(head + "CELLS 1 5\n4 0 1 2 9\nCELL_TYPES 1\n10\n" + tail);
  CHECK_THAT(std::string(st.message()), Catch::Contains("out of range"));
  st = parse(head + "CELLS 1 5\n4 0 1 2 3\nCELL_TYPES 1\n10\n");
  CHECK_THAT(std::string(st.message()), Catch::Contains("SCALARS"));
  st = parse(head + "CELLS 1 5\n4 0 1 2 3\nCELL_TYPES 2\n10 10\n" + tail);
  CHECK_THAT(std::string(st.message()), Catch::Contains("CELL_TYPES"));
  st = parse("# vtk DataFile Version 4.2\nx\nASCII\nDATASET STRUCTURED_POINTS\n");
  CHECK_THAT(std::string(st.message()), Catch::Contains("UNSTRUCTURED_GRID"));
  st = parse(head.substr(0, head.size() - 10));
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
}

// Found reading vtk_io.cc for tests/fuzz/vtk_fuzz.cc: a few bytes claiming a huge count made the
// reader allocate it up front (POINTS 10^9: 24 GB), and products of counts overflowed int64.
TEST_CASE("VTK: counts beyond the options or the file are refused before allocating", "[volume]") {
  const std::string head = "# vtk DataFile Version 4.2\nx\nASCII\nDATASET UNSTRUCTURED_GRID\n";
  auto message = [](const std::string& s, const VtkReadOptions& o = {}) {
    absl::Status st = ParseVtk(s, o).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    return std::string(st.message());
  };
  CHECK_THAT(message(head + "POINTS 1000000000 float\n0 0 0\n"), Catch::Contains("bad count"));
  CHECK_THAT(message(head + "POINTS 8589934592 float\n0 0 0\n"),
             Catch::Contains("outside [0, 2147483647]"));
  CHECK_THAT(message(head + "POINTS 3074457345618258603 float\n0 0 0\n"),
             Catch::Contains("POINTS"));
  VtkReadOptions small;
  small.max_points = 3;
  small.max_cells = 1;
  CHECK_THAT(message(head + "POINTS 4 float\n0 0 0 1 0 0 0 1 0 0 0 1\n", small),
             Catch::Contains("outside [0, 3]"));
  CHECK_THAT(message(head + "CELLS 2 10\n4 0 1 2 3 4 0 1 2 3\n", small),
             Catch::Contains("CELLS count 2"));
  // SCALARS with 4 components of 2^62 tuples: the product overflows.
  CHECK_THAT(message(head + "POINT_DATA 4611686018427387904\nSCALARS s float 4\n"
                            "LOOKUP_TABLE default\n0\n"),
             Catch::Contains("bad count"));
  CHECK_THAT(message("# vtk DataFile Version 4.2\nx\nBINARY\nDATASET UNSTRUCTURED_GRID\n"
                     "POINTS 2 float\n\x01\x02"),
             Catch::Contains("bad count"));
}

// Found by tests/fuzz/vtk_fuzz.cc (corpus/vtk/crash-cell-count-float-cast): a 4.2 cell's point
// count of 4.7e20 was converted to size_t unchecked (undefined behaviour); likewise cell types,
// and 5.1 OFFSETS that decrease let a cell read past CONNECTIVITY.
TEST_CASE("VTK: cell counts, offsets and types from the file are checked", "[volume]") {
  const std::string points = "POINTS 4 float\n0 0 0 1 0 0 0 1 0 0 0 1\n";
  const std::string head42 =
      "# vtk DataFile Version 4.2\nx\nASCII\nDATASET UNSTRUCTURED_GRID\n" + points;
  const std::string head51 =
      "# vtk DataFile Version 5.1\nx\nASCII\nDATASET UNSTRUCTURED_GRID\n" + points;
  const std::string tail = "POINT_DATA 4\nSCALARS s float 1\nLOOKUP_TABLE default\n0 1 2 3\n";
  auto message = [](const std::string& s) {
    absl::Status st = ParseVtk(s).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    return std::string(st.message());
  };
  CHECK(ParseVtk(head51 + "CELLS 2 4\nOFFSETS vtktypeint64\n0 4\nCONNECTIVITY vtktypeint64\n"
                          "0 1 2 3\nCELL_TYPES 1\n10\n" + tail)
            .ok());
  CHECK_THAT(message(head42 + "CELLS 1 5\n466666666603364649637 0 1 2 3\nCELL_TYPES 1\n10\n" +
                     tail),
             Catch::Contains("bad point count"));
  CHECK_THAT(message(head42 + "CELLS 1 5\n4 0 1 2 3\nCELL_TYPES 1\n1e300\n" + tail),
             Catch::Contains("CELL_TYPES[0] = 1e+300 is not a cell type"));
  CHECK_THAT(message(head51 + "CELLS 3 4\nOFFSETS vtktypeint64\n0 8 4\n"
                              "CONNECTIVITY vtktypeint64\n0 1 2 3\nCELL_TYPES 2\n12 10\n" + tail),
             Catch::Contains("OFFSETS[1] = 8 is not a valid offset"));
}

}  // namespace
}  // namespace fresnel::volume
