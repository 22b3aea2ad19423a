// Legacy VTK unstructured grids: reader (ASCII/BINARY, 4.2 and 5.1 cell layouts, splitting of
// hexahedra, wedges and pyramids) and writer.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fresnel/core/status.h"
#include "fresnel/volume/mesh.h"

namespace fresnel::volume {
namespace {

constexpr int kVtkTetra = 10, kVtkHexahedron = 12, kVtkWedge = 13, kVtkPyramid = 14;

std::string CellTypeName(int64_t type) {
  static const struct {
    int type;
    const char* name;
  } kNames[] = {{1, "VTK_VERTEX"},
                {2, "VTK_POLY_VERTEX"},
                {3, "VTK_LINE"},
                {4, "VTK_POLY_LINE"},
                {5, "VTK_TRIANGLE"},
                {6, "VTK_TRIANGLE_STRIP"},
                {7, "VTK_POLYGON"},
                {8, "VTK_PIXEL"},
                {9, "VTK_QUAD"},
                {10, "VTK_TETRA"},
                {11, "VTK_VOXEL"},
                {12, "VTK_HEXAHEDRON"},
                {13, "VTK_WEDGE"},
                {14, "VTK_PYRAMID"},
                {15, "VTK_PENTAGONAL_PRISM"},
                {16, "VTK_HEXAGONAL_PRISM"},
                {21, "VTK_QUADRATIC_EDGE"},
                {22, "VTK_QUADRATIC_TRIANGLE"},
                {23, "VTK_QUADRATIC_QUAD"},
                {24, "VTK_QUADRATIC_TETRA"},
                {25, "VTK_QUADRATIC_HEXAHEDRON"},
                {26, "VTK_QUADRATIC_WEDGE"},
                {27, "VTK_QUADRATIC_PYRAMID"},
                {42, "VTK_POLYHEDRON"}};
  for (const auto& n : kNames)
    if (n.type == type) return absl::StrCat(n.name, " (", type, ")");
  return absl::StrCat("unknown VTK cell type (", type, ")");
}

int TypeSize(absl::string_view t) {
  if (t == "bit") return 0;
  if (t == "unsigned_char" || t == "char") return 1;
  if (t == "short" || t == "unsigned_short") return 2;
  if (t == "int" || t == "unsigned_int" || t == "float" || t == "vtktypeint32" ||
      t == "vtktypeuint32")
    return 4;
  if (t == "long" || t == "unsigned_long" || t == "double" || t == "vtktypeint64" ||
      t == "vtktypeuint64" || t == "vtkIdType")
    return 8;
  return -1;
}

// a * b for element counts read from the file; -1 (a bad count) when either is negative or the
// product overflows.
int64_t CountProduct(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
  return r;
}

class Parser {
 public:
  explicit Parser(absl::string_view buf) : buf_(buf) {}

  bool AtEnd() {
    SkipSpace();
    return pos_ >= buf_.size();
  }
  absl::string_view Line() {
    const size_t start = pos_;
    while (pos_ < buf_.size() && buf_[pos_] != '\n') ++pos_;
    absl::string_view line = buf_.substr(start, pos_ - start);
    if (pos_ < buf_.size()) ++pos_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  }
  absl::StatusOr<absl::string_view> Token(const char* what) {
    SkipSpace();
    if (pos_ >= buf_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("VTK: unexpected end of file reading ", what));
    }
    const size_t start = pos_;
    while (pos_ < buf_.size() && !IsSpace(buf_[pos_])) ++pos_;
    return buf_.substr(start, pos_ - start);
  }
  absl::StatusOr<int64_t> Int(const char* what) {
    FRESNEL_ASSIGN_OR_RETURN(absl::string_view tok, Token(what));
    int64_t v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || p != tok.data() + tok.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("VTK: ", what, ": expected an integer, got '", tok, "'"));
    }
    return v;
  }

  // Reads `count` numbers of VTK type `type` as doubles (ASCII tokens, or big-endian binary
  // right after the current line).
  absl::Status Numbers(bool binary, absl::string_view type, int64_t count, const char* what,
                       std::vector<double>* out) {
    const int size = TypeSize(type);
    if (size <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("VTK: ", what, ": unsupported data type '", type, "'"));
    }
    // Every value takes at least one byte (ASCII: a digit; binary: `size`), so a count the rest
    // of the file cannot hold is refused before it is allocated.
    const int64_t left = static_cast<int64_t>(buf_.size() - std::min(pos_, buf_.size()));
    if (count < 0 || count > left / (binary ? size : 1)) {
      return absl::InvalidArgumentError(absl::StrCat("VTK: ", what, ": bad count ", count,
                                                     " (", left, " bytes left in the file)"));
    }
    out->resize(count);
    if (!binary) {
      for (int64_t i = 0; i < count; ++i) {
        FRESNEL_ASSIGN_OR_RETURN(absl::string_view tok, Token(what));
        double v = 0;
        auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
        if (ec != std::errc() || p != tok.data() + tok.size()) {
          // from_chars rejects "nan"/"inf" spellings some writers use; strtod accepts them.
          std::string s(tok);
          char* end = nullptr;
          v = std::strtod(s.c_str(), &end);
          if (end != s.c_str() + s.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("VTK: ", what, "[", i, "]: expected a number, got '", tok, "'"));
          }
        }
        (*out)[i] = v;
      }
      return absl::OkStatus();
    }
    Line();  // the rest of the keyword line; data starts on the next byte
    const size_t bytes = static_cast<size_t>(count) * size;
    if (pos_ + bytes > buf_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("VTK: ", what, ": binary data ends early (", count, " values)"));
    }
    const unsigned char* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
    for (int64_t i = 0; i < count; ++i, p += size) {
      uint64_t bits = 0;
      for (int k = 0; k < size; ++k) bits = (bits << 8) | p[k];
      double v = 0;
      if (type == "float") {
        uint32_t b32 = static_cast<uint32_t>(bits);
        float f;
        std::memcpy(&f, &b32, 4);
        v = f;
      } else if (type == "double") {
        std::memcpy(&v, &bits, 8);
      } else if (type == "char") {
        v = static_cast<int8_t>(bits);
      } else if (type == "short") {
        v = static_cast<int16_t>(bits);
      } else if (type == "int" || type == "vtktypeint32") {
        v = static_cast<int32_t>(bits);
      } else if (type == "long" || type == "vtktypeint64" || type == "vtkIdType") {
        v = static_cast<double>(static_cast<int64_t>(bits));
      } else {
        v = static_cast<double>(bits);
      }
      (*out)[i] = v;
    }
    pos_ += bytes;
    return absl::OkStatus();
  }

  // Skips to the first empty line (5.1 METADATA blocks end with one).
  void SkipToBlankLine() {
    Line();
    while (pos_ < buf_.size()) {
      absl::string_view l = Line();
      if (absl::StripAsciiWhitespace(l).empty()) return;
    }
  }

 private:
  static bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
  void SkipSpace() {
    while (pos_ < buf_.size() && IsSpace(buf_[pos_])) ++pos_;
  }
  absl::string_view buf_;
  size_t pos_ = 0;
};

absl::Status CheckIds(const std::vector<double>& ids, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const double v = ids[i];
    if (!(v >= 0 && v < 2147483647.0) || v != std::floor(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("VTK: ", what, "[", i, "] = ", v, " is not a valid point id"));
    }
  }
  return absl::OkStatus();
}

// Cell splitting. Every quadrilateral face is split along the diagonal through its smallest
// point id, a rule that depends only on the face, so neighbouring cells agree.
struct Splitter {
  TetMesh* mesh;
  VtkReadReport* report;

  void Tet(int32_t a, int32_t b, int32_t c, int32_t d) {
    mesh->tets.insert(mesh->tets.end(), {a, b, c, d});
  }
  // Wedge: triangles (w0, w1, w2) and (w3, w4, w5), edges w0-w3, w1-w4, w2-w5. Rotated (and, if
  // needed, flipped) so that the smallest id is w0; both quads through w0 then split through it,
  // and the opposite quad (w1, w2, w5, w4) picks its own diagonal (Dompierre et al. 1999).
  void Wedge(const int32_t v[6]) {
    int m = static_cast<int>(std::min_element(v, v + 6) - v);
    int32_t w[6];
    const int base = m < 3 ? 0 : 3, other = m < 3 ? 3 : 0, r = m % 3;
    for (int i = 0; i < 3; ++i) {
      w[i] = v[base + (r + i) % 3];
      w[3 + i] = v[other + (r + i) % 3];
    }
    if (std::min(w[1], w[5]) < std::min(w[2], w[4])) {
      Tet(w[0], w[1], w[2], w[5]);
      Tet(w[0], w[1], w[5], w[4]);
    } else {
      Tet(w[0], w[1], w[2], w[4]);
      Tet(w[0], w[4], w[2], w[5]);
    }
    Tet(w[0], w[4], w[5], w[3]);
  }
  void Pyramid(const int32_t v[5]) {
    if (std::min(v[0], v[2]) < std::min(v[1], v[3])) {
      Tet(v[0], v[1], v[2], v[4]);
      Tet(v[0], v[2], v[3], v[4]);
    } else {
      Tet(v[1], v[2], v[3], v[4]);
      Tet(v[1], v[3], v[0], v[4]);
    }
  }
  // Diagonal of quad (q0, q1, q2, q3): 0 for q0-q2, 1 for q1-q3.
  static int Diagonal(int32_t q0, int32_t q1, int32_t q2, int32_t q3) {
    return std::min(q0, q2) < std::min(q1, q3) ? 0 : 1;
  }
  // Hexahedron (VTK order: bottom 0-1-2-3, top 4-5-6-7 above it). If some pair of opposite faces
  // has diagonals that span one plane, cut along it into two wedges; otherwise add a point at the
  // centre and make a pyramid of every face (12 tetrahedra).
  void Hexahedron(const int32_t v[8]) {
    static const int kPairs[3][8] = {{0, 1, 2, 3, 4, 5, 6, 7},
                                     {0, 1, 5, 4, 3, 2, 6, 7},
                                     {0, 4, 7, 3, 1, 5, 6, 2}};
    for (const auto& pair : kPairs) {
      int32_t q[4], r[4];
      for (int i = 0; i < 4; ++i) {
        q[i] = v[pair[i]];
        r[i] = v[pair[4 + i]];
      }
      const int dq = Diagonal(q[0], q[1], q[2], q[3]);
      if (dq != Diagonal(r[0], r[1], r[2], r[3])) continue;
      const int a = dq, b = dq + 1, c = dq + 2, d = (dq + 3) & 3;
      const int32_t w1[6] = {q[a], q[b], q[c], r[a], r[b], r[c]};
      const int32_t w2[6] = {q[a], q[c], q[d], r[a], r[c], r[d]};
      Wedge(w1);
      Wedge(w2);
      return;
    }
    const int32_t centre = static_cast<int32_t>(mesh->num_points());
    float c[3] = {0, 0, 0}, s = 0;
    for (int i = 0; i < 8; ++i) {
      for (int k = 0; k < 3; ++k) c[k] += mesh->points_xyz[3 * int64_t{v[i]} + k] / 8;
      s += mesh->scalars[v[i]] / 8;
    }
    mesh->points_xyz.insert(mesh->points_xyz.end(), c, c + 3);
    mesh->scalars.push_back(s);
    ++report->steiner_points;
    static const int kFaces[6][4] = {{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1, 5, 4},
                                     {1, 2, 6, 5}, {2, 3, 7, 6}, {3, 0, 4, 7}};
    for (const auto& f : kFaces) {
      const int32_t q0 = v[f[0]], q1 = v[f[1]], q2 = v[f[2]], q3 = v[f[3]];
      if (Diagonal(q0, q1, q2, q3) == 0) {
        Tet(q0, q1, q2, centre);
        Tet(q0, q2, q3, centre);
      } else {
        Tet(q1, q2, q3, centre);
        Tet(q1, q3, q0, centre);
      }
    }
  }
};

}  // namespace

absl::StatusOr<TetMesh> ParseVtk(absl::string_view bytes, const VtkReadOptions& options,
                                 VtkReadReport* report_out) {
  VtkReadReport report;
  Parser in(bytes);
  absl::string_view header = in.Line();
  if (!absl::StartsWith(header, "# vtk DataFile Version")) {
    return absl::InvalidArgumentError("VTK: the first line is not '# vtk DataFile Version x.y'");
  }
  report.version = std::string(absl::StripAsciiWhitespace(header.substr(22)));
  in.Line();  // title
  const std::string mode = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(in.Line()));
  if (mode != "ASCII" && mode != "BINARY") {
    return absl::InvalidArgumentError(
        absl::StrCat("VTK: the third line must be ASCII or BINARY, got '", mode, "'"));
  }
  const bool binary = mode == "BINARY";
  FRESNEL_ASSIGN_OR_RETURN(absl::string_view kw, in.Token("DATASET"));
  FRESNEL_ASSIGN_OR_RETURN(absl::string_view dataset, in.Token("DATASET type"));
  if (kw != "DATASET" || dataset != "UNSTRUCTURED_GRID") {
    return absl::InvalidArgumentError(absl::StrCat(
        "VTK: only DATASET UNSTRUCTURED_GRID is supported, got '", kw, " ", dataset, "'"));
  }
  std::vector<double> points, scalars, conn, offsets, types, scratch;
  int64_t num_points = -1, num_cells = -1, point_data = -1, section_size = 0;
  bool in_point_data = false, have_scalars = false;
  while (!in.AtEnd()) {
    FRESNEL_ASSIGN_OR_RETURN(absl::string_view key, in.Token("section"));
    if (key == "POINTS") {
      FRESNEL_ASSIGN_OR_RETURN(num_points, in.Int("POINTS count"));
      if (num_points < 0 || num_points > options.max_points) {
        return absl::InvalidArgumentError(absl::StrCat(
            "VTK: POINTS count ", num_points, " is outside [0, ", options.max_points, "]"));
      }
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view type, in.Token("POINTS type"));
      FRESNEL_RETURN_IF_ERROR(
          in.Numbers(binary, type, CountProduct(3, num_points), "POINTS", &points));
    } else if (key == "CELLS") {
      FRESNEL_ASSIGN_OR_RETURN(int64_t a, in.Int("CELLS count"));
      FRESNEL_ASSIGN_OR_RETURN(int64_t b, in.Int("CELLS size"));
      // 5.1: "CELLS offsets connectivity" then OFFSETS and CONNECTIVITY arrays.
      Parser peek = in;
      auto next = peek.Token("CELLS");
      const bool v51 = next.ok() && *next == "OFFSETS";
      const int64_t cells = v51 ? (a > 0 ? a - 1 : -1) : a;
      if (cells < 0 || cells > options.max_cells) {
        return absl::InvalidArgumentError(absl::StrCat("VTK: CELLS count ", cells,
                                                       " is outside [0, ", options.max_cells, "]"));
      }
      if (v51) {
        in = peek;
        FRESNEL_ASSIGN_OR_RETURN(absl::string_view type, in.Token("OFFSETS type"));
        FRESNEL_RETURN_IF_ERROR(in.Numbers(binary, type, a, "OFFSETS", &offsets));
        FRESNEL_ASSIGN_OR_RETURN(absl::string_view ck, in.Token("CONNECTIVITY"));
        if (ck != "CONNECTIVITY") {
          return absl::InvalidArgumentError("VTK: OFFSETS must be followed by CONNECTIVITY");
        }
        FRESNEL_ASSIGN_OR_RETURN(absl::string_view ctype, in.Token("CONNECTIVITY type"));
        FRESNEL_RETURN_IF_ERROR(in.Numbers(binary, ctype, b, "CONNECTIVITY", &conn));
        num_cells = a - 1;
        if (num_cells < 0 || offsets.front() != 0 || offsets.back() != static_cast<double>(b)) {
          return absl::InvalidArgumentError(
              "VTK: OFFSETS must start at 0 and end at the CONNECTIVITY size");
        }
      } else {
        // 4.2: per cell "n id0 ... id(n-1)", as int32 in binary files.
        FRESNEL_RETURN_IF_ERROR(in.Numbers(binary, "int", b, "CELLS", &scratch));
        num_cells = a;
        offsets.assign(1, 0);
        conn.clear();
        conn.reserve(b);
        size_t i = 0;
        for (int64_t c = 0; c < a; ++c) {
          if (i >= scratch.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("VTK: CELLS size ", b, " is too small for ", a, " cells"));
          }
          const double n = scratch[i++];
          // Compared as doubles before the conversion (a count past size_t is undefined).
          if (!(n >= 0 && n <= static_cast<double>(scratch.size() - i)) || n != std::floor(n)) {
            return absl::InvalidArgumentError(
                absl::StrCat("VTK: CELLS cell ", c, " has a bad point count ", n));
          }
          conn.insert(conn.end(), scratch.begin() + i, scratch.begin() + i + static_cast<size_t>(n));
          i += static_cast<size_t>(n);
          offsets.push_back(static_cast<double>(conn.size()));
        }
        if (i != scratch.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("VTK: CELLS size ", b, " does not match its ", a, " cells"));
        }
      }
    } else if (key == "CELL_TYPES") {
      FRESNEL_ASSIGN_OR_RETURN(int64_t n, in.Int("CELL_TYPES count"));
      FRESNEL_RETURN_IF_ERROR(in.Numbers(binary, "int", n, "CELL_TYPES", &types));
    } else if (key == "POINT_DATA" || key == "CELL_DATA") {
      FRESNEL_ASSIGN_OR_RETURN(int64_t n, in.Int("POINT_DATA count"));
      in_point_data = key == "POINT_DATA";
      if (in_point_data) point_data = n;
      section_size = n;  // tuples of the arrays that follow
    } else if (key == "SCALARS") {
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view name, in.Token("SCALARS name"));
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view type, in.Token("SCALARS type"));
      // Optional component count, then "LOOKUP_TABLE name".
      int64_t ncomp = 1;
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view t3, in.Token("LOOKUP_TABLE"));
      if (t3 != "LOOKUP_TABLE") {
        int64_t c = 0;
        auto [p, ec] = std::from_chars(t3.data(), t3.data() + t3.size(), c);
        if (ec != std::errc() || c < 1 || c > 4) {
          return absl::InvalidArgumentError(
              absl::StrCat("VTK: SCALARS ", name, ": bad component count '", t3, "'"));
        }
        ncomp = c;
        FRESNEL_ASSIGN_OR_RETURN(t3, in.Token("LOOKUP_TABLE"));
      }
      if (t3 != "LOOKUP_TABLE") {
        return absl::InvalidArgumentError(
            absl::StrCat("VTK: SCALARS ", name, " must be followed by LOOKUP_TABLE"));
      }
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view lut, in.Token("LOOKUP_TABLE name"));
      (void)lut;
      const int64_t n = section_size;
      std::vector<double> values;
      FRESNEL_RETURN_IF_ERROR(in.Numbers(binary, type, CountProduct(n, ncomp), "SCALARS", &values));
      const bool wanted = options.scalar_name.empty() ? !have_scalars : name == options.scalar_name;
      if (in_point_data && wanted && !have_scalars) {
        scalars.resize(n);
        for (int64_t i = 0; i < n; ++i) scalars[i] = values[i * ncomp];
        have_scalars = true;
        report.scalar_name = std::string(name);
      }
    } else if (key == "LOOKUP_TABLE") {
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view name, in.Token("LOOKUP_TABLE name"));
      (void)name;
      FRESNEL_ASSIGN_OR_RETURN(int64_t n, in.Int("LOOKUP_TABLE size"));
      std::vector<double> values;
      FRESNEL_RETURN_IF_ERROR(
          in.Numbers(binary, binary ? "unsigned_char" : "float", CountProduct(4, n), "LOOKUP_TABLE",
                     &values));
    } else if (key == "VECTORS" || key == "NORMALS" || key == "TENSORS") {
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view name, in.Token("array name"));
      (void)name;
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view type, in.Token("array type"));
      const int64_t n = section_size;
      std::vector<double> values;
      FRESNEL_RETURN_IF_ERROR(
          in.Numbers(binary, type, CountProduct(n, key == "TENSORS" ? 9 : 3), "array", &values));
    } else if (key == "FIELD") {
      FRESNEL_ASSIGN_OR_RETURN(absl::string_view name, in.Token("FIELD name"));
      (void)name;
      FRESNEL_ASSIGN_OR_RETURN(int64_t arrays, in.Int("FIELD array count"));
      for (int64_t a = 0; a < arrays; ++a) {
        FRESNEL_ASSIGN_OR_RETURN(absl::string_view aname, in.Token("FIELD array name"));
        if (aname == "METADATA") {
          in.SkipToBlankLine();
          --a;
          continue;
        }
        FRESNEL_ASSIGN_OR_RETURN(int64_t comps, in.Int("FIELD components"));
        FRESNEL_ASSIGN_OR_RETURN(int64_t tuples, in.Int("FIELD tuples"));
        FRESNEL_ASSIGN_OR_RETURN(absl::string_view type, in.Token("FIELD type"));
        std::vector<double> values;
        FRESNEL_RETURN_IF_ERROR(
            in.Numbers(binary, type, CountProduct(comps, tuples), "FIELD", &values));
      }
    } else if (key == "METADATA") {
      in.SkipToBlankLine();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("VTK: unsupported section '", key, "'"));
    }
  }
  if (num_points < 0) return absl::InvalidArgumentError("VTK: no POINTS section");
  if (num_cells < 0) return absl::InvalidArgumentError("VTK: no CELLS section");
  if (static_cast<int64_t>(types.size()) != num_cells) {
    return absl::InvalidArgumentError(absl::StrCat("VTK: CELL_TYPES has ", types.size(),
                                                   " entries for ", num_cells, " cells"));
  }
  if (!have_scalars) {
    return absl::InvalidArgumentError(
        options.scalar_name.empty()
            ? std::string("VTK: no POINT_DATA SCALARS array")
            : absl::StrCat("VTK: no POINT_DATA SCALARS array named '", options.scalar_name, "'"));
  }
  if (point_data != num_points) {
    return absl::InvalidArgumentError(absl::StrCat("VTK: POINT_DATA has ", point_data,
                                                   " values for ", num_points, " points"));
  }
  FRESNEL_RETURN_IF_ERROR(CheckIds(conn, "CELLS"));
  // 5.1 OFFSETS come from the file: whole, non-decreasing, within CONNECTIVITY (a cell must not
  // reach past it).
  for (size_t c = 1; c < offsets.size(); ++c) {
    const double o = offsets[c];
    if (!(o >= offsets[c - 1] && o <= static_cast<double>(conn.size())) || o != std::floor(o)) {
      return absl::InvalidArgumentError(absl::StrCat("VTK: OFFSETS[", c, "] = ", o,
                                                     " is not a valid offset"));
    }
  }
  for (size_t c = 0; c < types.size(); ++c) {
    if (!(types[c] >= 0 && types[c] <= 255) || types[c] != std::floor(types[c])) {
      return absl::InvalidArgumentError(
          absl::StrCat("VTK: CELL_TYPES[", c, "] = ", types[c], " is not a cell type"));
    }
  }
  TetMesh mesh;
  mesh.points_xyz.assign(points.begin(), points.end());
  mesh.scalars.assign(scalars.begin(), scalars.end());
  Splitter split{&mesh, &report};
  for (int64_t c = 0; c < num_cells; ++c) {
    const int64_t type = static_cast<int64_t>(types[c]);
    const int64_t begin = static_cast<int64_t>(offsets[c]), end = static_cast<int64_t>(offsets[c + 1]);
    const int64_t n = end - begin;
    int32_t v[8];
    const int64_t want = type == kVtkTetra ? 4 : type == kVtkHexahedron ? 8
                         : type == kVtkWedge ? 6 : type == kVtkPyramid ? 5 : -1;
    if (want < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "VTK: cell ", c, " has type ", CellTypeName(type),
          "; only VTK_TETRA (10), VTK_HEXAHEDRON (12), VTK_WEDGE (13) and VTK_PYRAMID (14) are "
          "supported"));
    }
    if (n != want) {
      return absl::InvalidArgumentError(absl::StrCat("VTK: cell ", c, " (", CellTypeName(type),
                                                     ") has ", n, " points, expected ", want));
    }
    for (int64_t i = 0; i < n; ++i) {
      v[i] = static_cast<int32_t>(conn[begin + i]);
      if (v[i] >= num_points) {
        return absl::InvalidArgumentError(absl::StrCat("VTK: cell ", c, " point id ", v[i],
                                                       " is out of range [0, ", num_points, ")"));
      }
    }
    switch (type) {
      case kVtkTetra:
        split.Tet(v[0], v[1], v[2], v[3]);
        ++report.tets;
        break;
      case kVtkHexahedron:
        split.Hexahedron(v);
        ++report.hexahedra;
        break;
      case kVtkWedge:
        split.Wedge(v);
        ++report.wedges;
        break;
      default:
        split.Pyramid(v);
        ++report.pyramids;
        break;
    }
  }
  report.cells_read = num_cells;
  if (report_out != nullptr) *report_out = report;
  return mesh;
}

absl::StatusOr<TetMesh> ReadVtk(const std::string& path, const VtkReadOptions& options,
                                VtkReadReport* report) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return ParseVtk(bytes, options, report);
}

namespace {

template <class T>
void PutBigEndian(std::string* out, T value) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &value, sizeof(T));
  for (int i = static_cast<int>(sizeof(T)) - 1; i >= 0; --i) out->push_back(static_cast<char>(b[i]));
}

}  // namespace

std::string FormatVtk(const TetMesh& mesh, VtkFormat format) {
  const bool binary = format == VtkFormat::kBinary42 || format == VtkFormat::kBinary51;
  const bool v51 = format == VtkFormat::kAscii51 || format == VtkFormat::kBinary51;
  const int64_t np = mesh.num_points(), nt = mesh.num_tets();
  std::string out = absl::StrCat("# vtk DataFile Version ", v51 ? "5.1" : "4.2",
                                 "\nfresnel tetrahedral mesh\n", binary ? "BINARY" : "ASCII",
                                 "\nDATASET UNSTRUCTURED_GRID\n");
  auto floats = [&](const float* v, int64_t n, int per_line) {
    if (binary) {
      for (int64_t i = 0; i < n; ++i) PutBigEndian(&out, v[i]);
      out += "\n";
      return;
    }
    char buf[32];
    for (int64_t i = 0; i < n; ++i) {
      std::snprintf(buf, sizeof(buf), "%.9g", v[i]);
      out += buf;
      out += (i + 1) % per_line == 0 ? "\n" : " ";
    }
  };
  absl::StrAppend(&out, "POINTS ", np, " float\n");
  floats(mesh.points_xyz.data(), 3 * np, 3);
  if (v51) {
    absl::StrAppend(&out, "CELLS ", nt + 1, " ", 4 * nt, "\nOFFSETS vtktypeint64\n");
    for (int64_t i = 0; i <= nt; ++i) {
      if (binary) PutBigEndian<int64_t>(&out, 4 * i);
      else absl::StrAppend(&out, 4 * i, "\n");
    }
    if (binary) out += "\n";
    out += "CONNECTIVITY vtktypeint64\n";
    for (int64_t i = 0; i < 4 * nt; ++i) {
      if (binary) PutBigEndian<int64_t>(&out, mesh.tets[i]);
      else absl::StrAppend(&out, mesh.tets[i], (i % 4 == 3) ? "\n" : " ");
    }
    if (binary) out += "\n";
  } else {
    absl::StrAppend(&out, "CELLS ", nt, " ", 5 * nt, "\n");
    for (int64_t t = 0; t < nt; ++t) {
      if (binary) {
        PutBigEndian<int32_t>(&out, 4);
        for (int k = 0; k < 4; ++k) PutBigEndian<int32_t>(&out, mesh.tets[4 * t + k]);
      } else {
        absl::StrAppend(&out, "4 ", mesh.tets[4 * t], " ", mesh.tets[4 * t + 1], " ",
                        mesh.tets[4 * t + 2], " ", mesh.tets[4 * t + 3], "\n");
      }
    }
    if (binary) out += "\n";
  }
  absl::StrAppend(&out, "CELL_TYPES ", nt, "\n");
  for (int64_t t = 0; t < nt; ++t) {
    if (binary) PutBigEndian<int32_t>(&out, kVtkTetra);
    else out += "10\n";
  }
  if (binary) out += "\n";
  absl::StrAppend(&out, "POINT_DATA ", np, "\nSCALARS scalar float 1\nLOOKUP_TABLE default\n");
  floats(mesh.scalars.data(), np, 1);
  return out;
}

absl::Status WriteVtk(const TetMesh& mesh, const std::string& path, VtkFormat format) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  const std::string bytes = FormatVtk(mesh, format);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return f ? absl::OkStatus() : absl::InternalError(absl::StrCat("writing ", path, " failed"));
}

}  // namespace fresnel::volume
