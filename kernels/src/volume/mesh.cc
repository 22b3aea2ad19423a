// TetMesh validation, content hash and generators.
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fresnel/volume/mesh.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"
#include "tbb/parallel_reduce.h"

namespace fresnel::volume {
namespace {

double TetVolume6AndEdge3(const float* p, const int32_t* t, double* edge3) {
  double v[4][3];
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 3; ++k) v[i][k] = p[3 * int64_t{t[i]} + k];
  double e1[3], e2[3], e3[3];
  for (int k = 0; k < 3; ++k) {
    e1[k] = v[1][k] - v[0][k];
    e2[k] = v[2][k] - v[0][k];
    e3[k] = v[3][k] - v[0][k];
  }
  const double det = e1[0] * (e2[1] * e3[2] - e2[2] * e3[1]) -
                     e1[1] * (e2[0] * e3[2] - e2[2] * e3[0]) +
                     e1[2] * (e2[0] * e3[1] - e2[1] * e3[0]);
  double longest2 = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) {
      double d2 = 0;
      for (int k = 0; k < 3; ++k) d2 += (v[i][k] - v[j][k]) * (v[i][k] - v[j][k]);
      longest2 = std::max(longest2, d2);
    }
  *edge3 = longest2 * std::sqrt(longest2);
  return det;
}

struct Reduction {
  int64_t degenerate = 0;
  int64_t bad_index_tet = -1;  // first tet with an index out of range
  float lo[3] = {INFINITY, INFINITY, INFINITY};
  float hi[3] = {-INFINITY, -INFINITY, -INFINITY};
};

}  // namespace

bool IsDegenerateTet(const TetMesh& mesh, int64_t tet) {
  double edge3 = 0;
  const double det6 = TetVolume6AndEdge3(mesh.points_xyz.data(), &mesh.tets[4 * tet], &edge3);
  return !(std::fabs(det6) / 6.0 > kDegenerateRelVolume * edge3);
}

absl::StatusOr<MeshReport> ValidateMesh(const TetMesh& mesh) {
  if (mesh.points_xyz.size() % 3 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "points_xyz has ", mesh.points_xyz.size(), " values, not a multiple of 3"));
  }
  if (mesh.tets.size() % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tets has ", mesh.tets.size(), " indices, not a multiple of 4"));
  }
  const int64_t np = mesh.num_points(), nt = mesh.num_tets();
  if (np > kMaxPoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("points_xyz holds ", np, " points, over the limit of ", kMaxPoints));
  }
  if (nt < 1 || nt > kMaxTets) {
    return absl::InvalidArgumentError(
        absl::StrCat("tets holds ", nt, " tetrahedra; it must hold 1 to ", kMaxTets));
  }
  if (static_cast<int64_t>(mesh.scalars.size()) != np) {
    return absl::InvalidArgumentError(absl::StrCat("scalars has ", mesh.scalars.size(),
                                                   " values; it must have one per point (", np,
                                                   ")"));
  }
  for (int64_t i = 0; i < 3 * np; ++i) {
    if (!std::isfinite(mesh.points_xyz[i])) {
      return absl::InvalidArgumentError(absl::StrCat("points_xyz[", i / 3, "] (coordinate ",
                                                     i % 3, ") is not finite"));
    }
  }
  for (int64_t i = 0; i < np; ++i) {
    if (!std::isfinite(mesh.scalars[i])) {
      return absl::InvalidArgumentError(absl::StrCat("scalars[", i, "] is not finite"));
    }
  }
  for (int64_t i = 0; i < 4 * nt; ++i) {
    const int32_t v = mesh.tets[i];
    if (v < 0 || v >= np) {
      return absl::InvalidArgumentError(absl::StrCat("tets[", i / 4, "] index ", i % 4, " = ", v,
                                                     " is out of range [0, ", np, ")"));
    }
  }
  Reduction total = tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, nt, 4096), Reduction{},
      [&](const tbb::blocked_range<int64_t>& r, Reduction acc) {
        for (int64_t t = r.begin(); t < r.end(); ++t) {
          if (IsDegenerateTet(mesh, t)) ++acc.degenerate;
          for (int i = 0; i < 4; ++i) {
            const float* p = &mesh.points_xyz[3 * int64_t{mesh.tets[4 * t + i]}];
            for (int k = 0; k < 3; ++k) {
              acc.lo[k] = std::min(acc.lo[k], p[k]);
              acc.hi[k] = std::max(acc.hi[k], p[k]);
            }
          }
        }
        return acc;
      },
      [](Reduction a, const Reduction& b) {
        a.degenerate += b.degenerate;
        for (int k = 0; k < 3; ++k) {
          a.lo[k] = std::min(a.lo[k], b.lo[k]);
          a.hi[k] = std::max(a.hi[k], b.hi[k]);
        }
        return a;
      });
  MeshReport report;
  report.num_points = np;
  report.num_tets = nt;
  report.degenerate_tets = total.degenerate;
  for (int k = 0; k < 3; ++k) {
    report.bounds_min[k] = total.lo[k];
    report.bounds_max[k] = total.hi[k];
  }
  if (np > 0) {
    auto [lo, hi] = std::minmax_element(mesh.scalars.begin(), mesh.scalars.end());
    report.scalar_min = *lo;
    report.scalar_max = *hi;
  }
  return report;
}

std::string MeshContentHash(const TetMesh& mesh) {
  const uint64_t counts[3] = {static_cast<uint64_t>(mesh.points_xyz.size()),
                              static_cast<uint64_t>(mesh.tets.size()),
                              static_cast<uint64_t>(mesh.scalars.size())};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, counts, sizeof(counts));
  EVP_DigestUpdate(ctx, mesh.points_xyz.data(), mesh.points_xyz.size() * sizeof(float));
  EVP_DigestUpdate(ctx, mesh.tets.data(), mesh.tets.size() * sizeof(int32_t));
  EVP_DigestUpdate(ctx, mesh.scalars.data(), mesh.scalars.size() * sizeof(float));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

// ---- generators ----------------------------------------------------------------------------

float AnalyticScalar(float x, float y, float z) {
  auto blob = [](float dx, float dy, float dz, float r) {
    return std::exp(-(dx * dx + dy * dy + dz * dz) / (r * r));
  };
  const float rx = x - 0.5f, ry = y - 0.5f, rz = z - 0.5f;
  const float radius = std::sqrt(rx * rx + ry * ry + rz * rz);
  const float shell = std::exp(-((radius - 0.42f) * (radius - 0.42f)) / 0.004f);
  const float v = 0.8f * blob(x - 0.35f, y - 0.4f, z - 0.5f, 0.18f) +
                  0.6f * blob(x - 0.68f, y - 0.62f, z - 0.45f, 0.12f) + 0.35f * shell;
  return std::min(1.0f, std::max(0.0f, v));
}

GridMeshSpec GridSpecForTets(int64_t target_tets) {
  GridMeshSpec spec;
  const int n = std::max(1, static_cast<int>(std::lround(std::cbrt(target_tets / 6.0))));
  spec.cells_x = spec.cells_y = spec.cells_z = n;
  return spec;
}

absl::StatusOr<TetMesh> GenerateGridMesh(const GridMeshSpec& spec) {
  const int nx = spec.cells_x, ny = spec.cells_y, nz = spec.cells_z;
  if (nx < 1 || ny < 1 || nz < 1 || nx > 2048 || ny > 2048 || nz > 2048) {
    return absl::InvalidArgumentError("cells_x, cells_y and cells_z must be in [1, 2048]");
  }
  if (spec.shape == GridShape::kHoleAndNotch && (nx < 6 || ny < 6)) {
    return absl::InvalidArgumentError("kHoleAndNotch needs cells_x and cells_y >= 6");
  }
  const int64_t cells = int64_t{nx} * ny * nz;
  if (6 * cells > kMaxTets) {
    return absl::InvalidArgumentError(absl::StrCat("the grid has ", 6 * cells,
                                                   " tetrahedra, over the limit of ", kMaxTets));
  }
  for (int k = 0; k < 3; ++k) {
    if (!(spec.box_max[k] > spec.box_min[k]) || !std::isfinite(spec.box_min[k]) ||
        !std::isfinite(spec.box_max[k])) {
      return absl::InvalidArgumentError("box_max must exceed box_min (finite) on every axis");
    }
  }
  // Cells kept: all of the box, or all but a hole of the middle third in x and y (through z)
  // and a notch of the middle third in y, z reaching a sixth of the way in from +x.
  auto keep = [&](int i, int j, int k) {
    if (spec.shape == GridShape::kBox) return true;
    const bool hole = i >= nx / 3 && i < nx / 2 && j >= ny / 3 && j < 2 * ny / 3;
    const bool notch = i >= nx - nx / 6 && j >= ny / 3 && j < 2 * ny / 3 && k >= nz / 3 &&
                       k < nz - nz / 3;
    return !hole && !notch;
  };
  const int64_t px = nx + 1, py = ny + 1, pz = nz + 1;
  auto pid = [&](int64_t i, int64_t j, int64_t k) { return i + px * (j + py * k); };
  std::vector<int32_t> point_map(px * py * pz, -1);
  std::vector<uint8_t> kept(cells, 1);
  if (spec.shape != GridShape::kBox) {
    for (int k = 0; k < nz; ++k)
      for (int j = 0; j < ny; ++j)
        for (int i = 0; i < nx; ++i) kept[i + int64_t{nx} * (j + int64_t{ny} * k)] = keep(i, j, k);
  }
  // Number the points of kept cells in grid order.
  std::vector<uint8_t> used(px * py * pz, 0);
  for (int64_t c = 0; c < cells; ++c) {
    if (!kept[c]) continue;
    const int64_t i = c % nx, j = (c / nx) % ny, k = c / (int64_t{nx} * ny);
    for (int corner = 0; corner < 8; ++corner)
      used[pid(i + (corner & 1), j + ((corner >> 1) & 1), k + (corner >> 2))] = 1;
  }
  TetMesh mesh;
  int32_t next = 0;
  for (int64_t p = 0; p < px * py * pz; ++p)
    if (used[p]) point_map[p] = next++;
  mesh.points_xyz.resize(3 * int64_t{next});
  mesh.scalars.resize(next);
  tbb::parallel_for(int64_t{0}, pz, [&](int64_t k) {
    for (int64_t j = 0; j < py; ++j)
      for (int64_t i = 0; i < px; ++i) {
        const int32_t id = point_map[pid(i, j, k)];
        if (id < 0) continue;
        const float u = static_cast<float>(i) / nx, v = static_cast<float>(j) / ny,
                    w = static_cast<float>(k) / nz;
        float* p = &mesh.points_xyz[3 * int64_t{id}];
        p[0] = spec.box_min[0] + u * (spec.box_max[0] - spec.box_min[0]);
        p[1] = spec.box_min[1] + v * (spec.box_max[1] - spec.box_min[1]);
        p[2] = spec.box_min[2] + w * (spec.box_max[2] - spec.box_min[2]);
        mesh.scalars[id] = AnalyticScalar(u, v, w);
      }
  });
  // Kuhn split: the 6 monotone paths from corner 0 to corner 7, one per axis order.
  static const int kPaths[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                   {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  std::vector<int64_t> cell_offset(cells + 1, 0);
  for (int64_t c = 0; c < cells; ++c) cell_offset[c + 1] = cell_offset[c] + (kept[c] ? 6 : 0);
  mesh.tets.resize(4 * cell_offset[cells]);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, cells, 1024),
                    [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t c = r.begin(); c < r.end(); ++c) {
      if (!kept[c]) continue;
      const int64_t i = c % nx, j = (c / nx) % ny, k = c / (int64_t{nx} * ny);
      int32_t* out = &mesh.tets[4 * cell_offset[c]];
      for (int path = 0; path < 6; ++path) {
        int corner = 0;
        out[0] = point_map[pid(i, j, k)];
        for (int step = 0; step < 3; ++step) {
          corner |= 1 << kPaths[path][step];
          out[step + 1] =
              point_map[pid(i + (corner & 1), j + ((corner >> 1) & 1), k + (corner >> 2))];
        }
        // Even permutations of the axes give positive orientation; swap two for odd ones.
        if (path == 1 || path == 2 || path == 5) std::swap(out[1], out[2]);
        out += 4;
      }
    }
  });
  return mesh;
}

}  // namespace fresnel::volume
