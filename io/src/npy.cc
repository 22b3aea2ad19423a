#include "fresnel/io/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fresnel {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

const char* Descr(DType d) {
  switch (d) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kComplex64: return "<c8";
    case DType::kComplex128: return "<c16";
    case DType::kUint8: return "|u1";
    case DType::kUint16: return "<u2";
    case DType::kInt16: return "<i2";
    case DType::kInt32: return "<i4";
  }
  return "";
}

absl::StatusOr<DType> FromDescr(absl::string_view s) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kComplex64, DType::kComplex128,
                  DType::kUint8, DType::kUint16, DType::kInt16, DType::kInt32}) {
    absl::string_view want = Descr(d);
    if (s == want) return d;
    // "<u1" and "|u1" are both little-endian bytes.
    if (want[0] == '|' && s.size() == want.size() && s.substr(1) == want.substr(1)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("npy: unsupported descr '", s, "'"));
}

// Value of `key` in the header dict, as raw text up to the next top-level comma or brace.
absl::StatusOr<absl::string_view> DictValue(absl::string_view header, absl::string_view key) {
  std::string quoted = absl::StrCat("'", key, "'");
  size_t k = header.find(quoted);
  if (k == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("npy: header lacks '", key, "'"));
  }
  size_t colon = header.find(':', k + quoted.size());
  if (colon == absl::string_view::npos) return absl::InvalidArgumentError("npy: bad header");
  size_t start = colon + 1;
  int depth = 0;
  size_t i = start;
  for (; i < header.size(); ++i) {
    char c = header[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return absl::StripAsciiWhitespace(header.substr(start, i - start));
}

}  // namespace

absl::StatusOr<HostArray> ParseNpy(absl::string_view file) {
  if (file.size() < 10 || file.substr(0, 6) != absl::string_view(kMagic, 6)) {
    return absl::InvalidArgumentError("npy: not a .npy file (bad magic)");
  }
  int major = static_cast<unsigned char>(file[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(file[8]) | (static_cast<unsigned char>(file[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return absl::InvalidArgumentError("npy: truncated header");
    uint32_t len;
    std::memcpy(&len, file.data() + 8, 4);
    header_len = len;
    offset = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("npy: unsupported version ", major));
  }
  if (file.size() < offset + header_len) return absl::InvalidArgumentError("npy: truncated header");
  absl::string_view header = file.substr(offset, header_len);

  auto descr = DictValue(header, "descr");
  if (!descr.ok()) return descr.status();
  absl::string_view d = absl::StripPrefix(absl::StripSuffix(*descr, "'"), "'");
  if (!d.empty() && d[0] == '>') {
    return absl::InvalidArgumentError("npy: big-endian data is not supported");
  }
  auto dtype = FromDescr(d);
  if (!dtype.ok()) return dtype.status();

  auto fortran = DictValue(header, "fortran_order");
  if (!fortran.ok()) return fortran.status();
  if (*fortran != "False") {
    return absl::InvalidArgumentError("npy: Fortran-order arrays are not supported");
  }

  auto shape_text = DictValue(header, "shape");
  if (!shape_text.ok()) return shape_text.status();
  absl::string_view inner = absl::StripSuffix(absl::StripPrefix(*shape_text, "("), ")");
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v)) {
      return absl::InvalidArgumentError(absl::StrCat("npy: bad shape '", *shape_text, "'"));
    }
    shape.push_back(v);
  }
  std::string payload(file.substr(offset + header_len));
  return HostArray::FromBytes(*dtype, std::move(shape), std::move(payload), "npy");
}

std::string SerializeNpy(const HostArray& a) {
  std::string shape;
  for (int64_t d : a.shape()) absl::StrAppend(&shape, d, ",");
  if (a.ndim() > 1) shape.pop_back();  // (n,) keeps its comma, (a,b) does not need one
  std::string dict = absl::StrCat("{'descr': '", Descr(a.dtype()),
                                  "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad so that magic + length field + header (ending in '\n') is a multiple of 64.
  bool v2 = dict.size() + 1 + 10 > 65535;
  size_t prefix = v2 ? 12 : 10;
  size_t total = prefix + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict.append(pad, ' ');
  dict.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  uint32_t len = static_cast<uint32_t>(dict.size());
  if (v2) {
    out.append(reinterpret_cast<const char*>(&len), 4);
  } else {
    out.push_back(static_cast<char>(len & 0xff));
    out.push_back(static_cast<char>((len >> 8) & 0xff));
  }
  out += dict;
  out += a.bytes();
  return out;
}

absl::StatusOr<HostArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  auto a = ParseNpy(ss.str());
  if (!a.ok()) return absl::Status(a.status().code(), absl::StrCat(path, ": ", a.status().message()));
  return a;
}

absl::Status WriteNpy(const std::string& path, const HostArray& array) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  std::string bytes = SerializeNpy(array);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return absl::DataLossError(absl::StrCat("short write to '", path, "'"));
  return absl::OkStatus();
}

}  // namespace fresnel
