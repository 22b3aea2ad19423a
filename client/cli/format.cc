#include "format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fresnel::cli {

std::string FormatBytes(int64_t bytes) {
  if (bytes < 0) return "-";
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

std::string FormatSeconds(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  const double a = std::fabs(seconds);
  if (a < 1e-3) return absl::StrFormat("%.0f us", seconds * 1e6);
  if (a < 1e-2) return absl::StrFormat("%.2f ms", seconds * 1e3);
  if (a < 1) return absl::StrFormat("%.1f ms", seconds * 1e3);
  return absl::StrFormat("%.2f s", seconds);
}

std::string FormatMs(double seconds) { return absl::StrFormat("%.3f", seconds * 1e3); }

std::string FormatUptime(double seconds) {
  if (seconds < 60) return absl::StrFormat("%.1f s", seconds);
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 3600) return absl::StrFormat("%dm %02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh %02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd %02dh", s / 86400, (s % 86400) / 3600);
}

std::string FormatSi(double value) {
  const double a = std::fabs(value);
  if (a >= 1e12) return absl::StrFormat("%.2f T", value / 1e12);
  if (a >= 1e9) return absl::StrFormat("%.2f G", value / 1e9);
  if (a >= 1e6) return absl::StrFormat("%.2f M", value / 1e6);
  if (a >= 1e3) return absl::StrFormat("%.2f k", value / 1e3);
  return absl::StrFormat("%.2f ", value);
}

void Table::AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

void Table::Print(std::ostream& out, const std::string& indent) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

JsonObject& JsonObject::Add(absl::string_view key, absl::string_view value) {
  return AddRaw(key, JsonQuote(value));
}
JsonObject& JsonObject::Add(absl::string_view key, const char* value) {
  return AddRaw(key, JsonQuote(value));
}
JsonObject& JsonObject::Add(absl::string_view key, const std::string& value) {
  return AddRaw(key, JsonQuote(value));
}
JsonObject& JsonObject::Add(absl::string_view key, double value) {
  return AddRaw(key, std::isfinite(value) ? absl::StrFormat("%.9g", value) : "null");
}
JsonObject& JsonObject::Add(absl::string_view key, int64_t value) {
  return AddRaw(key, absl::StrCat(value));
}
JsonObject& JsonObject::Add(absl::string_view key, int value) {
  return AddRaw(key, absl::StrCat(value));
}
JsonObject& JsonObject::Add(absl::string_view key, bool value) {
  return AddRaw(key, value ? "true" : "false");
}
JsonObject& JsonObject::Add(absl::string_view key, const JsonObject& value) {
  return AddRaw(key, value.Str());
}
JsonObject& JsonObject::Add(absl::string_view key, const std::vector<int64_t>& values) {
  return AddRaw(key, absl::StrCat("[", absl::StrJoin(values, ", "), "]"));
}
JsonObject& JsonObject::AddRaw(absl::string_view key, absl::string_view json) {
  fields_.emplace_back(std::string(key), std::string(json));
  return *this;
}

std::string JsonObject::Str() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) out += ", ";
    absl::StrAppend(&out, JsonQuote(fields_[i].first), ": ", fields_[i].second);
  }
  out += "}";
  return out;
}

}  // namespace fresnel::cli
