// PLY parsing (ASCII and binary little-endian) for fresnel/io/ply.h.
#include "fresnel/io/ply.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "fresnel/core/status.h"

namespace fresnel {
namespace {

enum class PlyType { kInt8, kUint8, kInt16, kUint16, kInt32, kUint32, kFloat32, kFloat64 };

absl::StatusOr<PlyType> ParseType(absl::string_view name) {
  if (name == "char" || name == "int8") return PlyType::kInt8;
  if (name == "uchar" || name == "uint8") return PlyType::kUint8;
  if (name == "short" || name == "int16") return PlyType::kInt16;
  if (name == "ushort" || name == "uint16") return PlyType::kUint16;
  if (name == "int" || name == "int32") return PlyType::kInt32;
  if (name == "uint" || name == "uint32") return PlyType::kUint32;
  if (name == "float" || name == "float32") return PlyType::kFloat32;
  if (name == "double" || name == "float64") return PlyType::kFloat64;
  return absl::InvalidArgumentError(absl::StrCat("ply: unknown property type \"", name, "\""));
}

size_t TypeSize(PlyType t) {
  switch (t) {
    case PlyType::kInt8:
    case PlyType::kUint8:
      return 1;
    case PlyType::kInt16:
    case PlyType::kUint16:
      return 2;
    case PlyType::kInt32:
    case PlyType::kUint32:
    case PlyType::kFloat32:
      return 4;
    case PlyType::kFloat64:
      return 8;
  }
  return 0;
}

struct Property {
  std::string name;
  PlyType type = PlyType::kFloat32;
  bool is_list = false;
  PlyType count_type = PlyType::kUint8;
};

struct Element {
  std::string name;
  int64_t count = 0;
  std::vector<Property> properties;
};

// Reads values from the body: whitespace-separated tokens (ASCII) or little-endian bytes.
class BodyReader {
 public:
  BodyReader(absl::string_view body, bool ascii) : body_(body), ascii_(ascii) {}

  absl::StatusOr<double> Read(PlyType type) {
    if (ascii_) {
      while (pos_ < body_.size() && std::isspace(static_cast<unsigned char>(body_[pos_]))) ++pos_;
      size_t end = pos_;
      while (end < body_.size() && !std::isspace(static_cast<unsigned char>(body_[end]))) ++end;
      if (end == pos_) return absl::InvalidArgumentError("ply: the file ends inside the data");
      double v;
      if (!absl::SimpleAtod(body_.substr(pos_, end - pos_), &v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ply: bad number \"", body_.substr(pos_, std::min<size_t>(end - pos_, 32)), "\""));
      }
      pos_ = end;
      return v;
    }
    const size_t n = TypeSize(type);
    if (pos_ + n > body_.size())
      return absl::InvalidArgumentError("ply: the file ends inside the data");
    const char* p = body_.data() + pos_;
    pos_ += n;
    switch (type) {
      case PlyType::kInt8:
        return static_cast<double>(static_cast<int8_t>(*p));
      case PlyType::kUint8:
        return static_cast<double>(static_cast<uint8_t>(*p));
      case PlyType::kInt16: {
        int16_t v;
        std::memcpy(&v, p, 2);
        return v;
      }
      case PlyType::kUint16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return v;
      }
      case PlyType::kInt32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case PlyType::kUint32: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case PlyType::kFloat32: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case PlyType::kFloat64: {
        double v;
        std::memcpy(&v, p, 8);
        return v;
      }
    }
    return 0.0;
  }

  // Bytes not read yet: every value still to come takes at least one.
  int64_t remaining() const { return static_cast<int64_t>(body_.size() - pos_); }

  // A list's length: a whole number in [0, max_length] (and no more than the bytes left, so that a
  // bad count cannot make the reader spin); InvalidArgument naming `what` otherwise.
  absl::StatusOr<int64_t> ReadListLength(PlyType type, int64_t max_length, absl::string_view what) {
    FRESNEL_ASSIGN_OR_RETURN(double count, Read(type));
    if (!(count >= 0 && count <= static_cast<double>(std::min(max_length, remaining()))) ||
        count != std::floor(count)) {
      return absl::InvalidArgumentError(absl::StrCat("ply: ", what, " has a bad list length ",
                                                     count));
    }
    return static_cast<int64_t>(count);
  }

 private:
  absl::string_view body_;
  bool ascii_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<PlyMesh> ParsePly(absl::string_view bytes, const PlyOptions& options) {
  // Header: lines up to "end_header".
  size_t pos = 0;
  auto next_line = [&](absl::string_view* line) {
    if (pos >= bytes.size()) return false;
    size_t end = bytes.find('\n', pos);
    if (end == absl::string_view::npos) end = bytes.size();
    *line = absl::StripTrailingAsciiWhitespace(bytes.substr(pos, end - pos));
    pos = end + 1;
    return true;
  };
  absl::string_view line;
  if (!next_line(&line) || line != "ply") {
    return absl::InvalidArgumentError("ply: the file does not start with \"ply\"");
  }
  bool ascii = false;
  bool have_format = false;
  std::vector<Element> elements;
  int line_no = 1;
  while (true) {
    if (!next_line(&line)) return absl::InvalidArgumentError("ply: no end_header line");
    ++line_no;
    std::vector<absl::string_view> tok = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (tok.empty() || tok[0] == "comment" || tok[0] == "obj_info") continue;
    if (tok[0] == "end_header") break;
    if (tok[0] == "format") {
      if (tok.size() < 2)
        return absl::InvalidArgumentError(
            absl::StrCat("ply: header line ", line_no, ": bad format line"));
      if (tok[1] == "ascii") {
        ascii = true;
      } else if (tok[1] == "binary_little_endian") {
        ascii = false;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("ply: header line ", line_no, ": unsupported format \"", tok[1], "\""));
      }
      have_format = true;
    } else if (tok[0] == "element") {
      Element e;
      if (tok.size() != 3 || !absl::SimpleAtoi(tok[2], &e.count) || e.count < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("ply: header line ", line_no, ": bad element line"));
      }
      e.name = std::string(tok[1]);
      elements.push_back(std::move(e));
    } else if (tok[0] == "property") {
      if (elements.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("ply: header line ", line_no, ": property before any element"));
      }
      Property prop;
      if (tok.size() == 5 && tok[1] == "list") {
        prop.is_list = true;
        FRESNEL_ASSIGN_OR_RETURN(prop.count_type, ParseType(tok[2]));
        FRESNEL_ASSIGN_OR_RETURN(prop.type, ParseType(tok[3]));
        prop.name = std::string(tok[4]);
      } else if (tok.size() == 3) {
        FRESNEL_ASSIGN_OR_RETURN(prop.type, ParseType(tok[1]));
        prop.name = std::string(tok[2]);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("ply: header line ", line_no, ": bad property line"));
      }
      elements.back().properties.push_back(std::move(prop));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("ply: header line ", line_no, ": unknown keyword \"", tok[0], "\""));
    }
  }
  if (!have_format) return absl::InvalidArgumentError("ply: no format line");

  PlyMesh mesh;
  bool have_vertex = false;
  BodyReader reader(bytes.substr(std::min(pos, bytes.size())), ascii);
  for (const Element& e : elements) {
    // Each row of an element with properties takes at least one byte of what is left.
    if (!e.properties.empty() && e.count > reader.remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("ply: element ", e.name, " claims ", e.count,
                                                     " rows; the file ends before"));
    }
    if (e.properties.empty() && e.name != "vertex") continue;  // rows without data
    if (e.name == "vertex") {
      if (e.count > options.max_vertices) {
        return absl::InvalidArgumentError(
            absl::StrCat("ply: ", e.count, " vertices exceed the limit of ", options.max_vertices));
      }
      int ix = -1, iy = -1, iz = -1, iv = -1;
      for (size_t i = 0; i < e.properties.size(); ++i) {
        const std::string& n = e.properties[i].name;
        if (n == "x") ix = static_cast<int>(i);
        if (n == "y") iy = static_cast<int>(i);
        if (n == "z") iz = static_cast<int>(i);
        if (!options.amplitude_property.empty() && n == options.amplitude_property)
          iv = static_cast<int>(i);
      }
      if (ix < 0 || iy < 0 || iz < 0) {
        return absl::InvalidArgumentError("ply: element vertex lacks property x, y or z");
      }
      if (!options.amplitude_property.empty() && iv < 0) {
        return absl::InvalidArgumentError(absl::StrCat("ply: element vertex has no property \"",
                                                       options.amplitude_property, "\""));
      }
      mesh.vertices.resize(static_cast<size_t>(e.count));
      if (iv >= 0) mesh.vertex_values.resize(static_cast<size_t>(e.count));
      for (int64_t r = 0; r < e.count; ++r) {
        for (size_t i = 0; i < e.properties.size(); ++i) {
          const Property& prop = e.properties[i];
          if (prop.is_list) {
            FRESNEL_ASSIGN_OR_RETURN(int64_t count,
                                     reader.ReadListLength(prop.count_type, INT64_MAX, prop.name));
            for (int64_t k = 0; k < count; ++k) {
              FRESNEL_RETURN_IF_ERROR(reader.Read(prop.type).status());
            }
            continue;
          }
          FRESNEL_ASSIGN_OR_RETURN(double v, reader.Read(prop.type));
          if (static_cast<int>(i) == ix) mesh.vertices[r][0] = v;
          if (static_cast<int>(i) == iy) mesh.vertices[r][1] = v;
          if (static_cast<int>(i) == iz) mesh.vertices[r][2] = v;
          if (static_cast<int>(i) == iv) mesh.vertex_values[r] = v;
        }
      }
      have_vertex = true;
    } else if (e.name == "face") {
      if (e.count > options.max_faces) {
        return absl::InvalidArgumentError(
            absl::StrCat("ply: ", e.count, " faces exceed the limit of ", options.max_faces));
      }
      mesh.faces.reserve(static_cast<size_t>(e.count));
      std::vector<int64_t> poly;
      for (int64_t r = 0; r < e.count; ++r) {
        for (const Property& prop : e.properties) {
          if (!prop.is_list) {
            FRESNEL_RETURN_IF_ERROR(reader.Read(prop.type).status());
            continue;
          }
          FRESNEL_ASSIGN_OR_RETURN(
              int64_t count,
              reader.ReadListLength(prop.count_type, 1024, absl::StrCat("face ", r)));
          poly.clear();
          for (int64_t k = 0; k < count; ++k) {
            FRESNEL_ASSIGN_OR_RETURN(double idx, reader.Read(prop.type));
            // Checked before the conversion (a float or out-of-range index is no vertex).
            if (!(idx >= 0 && idx <= static_cast<double>(INT32_MAX)) || idx != std::floor(idx)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("ply: face ", r, " has a bad vertex index ", idx));
            }
            poly.push_back(static_cast<int64_t>(idx));
          }
          if (prop.name != "vertex_indices" && prop.name != "vertex_index") continue;
          for (size_t k = 2; k < poly.size(); ++k) {
            std::array<int32_t, 3> tri = {static_cast<int32_t>(poly[0]),
                                          static_cast<int32_t>(poly[k - 1]),
                                          static_cast<int32_t>(poly[k])};
            mesh.faces.push_back(tri);
          }
        }
      }
    } else {
      // Skip any other element.
      for (int64_t r = 0; r < e.count; ++r) {
        for (const Property& prop : e.properties) {
          if (prop.is_list) {
            FRESNEL_ASSIGN_OR_RETURN(int64_t count,
                                     reader.ReadListLength(prop.count_type, INT64_MAX, prop.name));
            for (int64_t k = 0; k < count; ++k) {
              FRESNEL_RETURN_IF_ERROR(reader.Read(prop.type).status());
            }
          } else {
            FRESNEL_RETURN_IF_ERROR(reader.Read(prop.type).status());
          }
        }
      }
    }
  }
  if (!have_vertex) return absl::InvalidArgumentError("ply: no vertex element");
  const int64_t nv = static_cast<int64_t>(mesh.vertices.size());
  for (size_t f = 0; f < mesh.faces.size(); ++f) {
    for (int32_t i : mesh.faces[f]) {
      if (i < 0 || i >= nv) {
        return absl::InvalidArgumentError(
            absl::StrCat("ply: face ", f, " refers to vertex ", i, " of ", nv));
      }
    }
  }
  return mesh;
}

absl::StatusOr<PlyMesh> ReadPly(const std::string& path, const PlyOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ParsePly(ss.str(), options);
}

}  // namespace fresnel
