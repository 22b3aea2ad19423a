// Text helpers for the `fresnel` CLI: human-readable sizes and times, aligned tables, and a
// minimal JSON object writer (the CLI's --json output is built from these).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fresnel::cli {

// 1536 -> "1.5 KiB"; negative -> "-".
std::string FormatBytes(int64_t bytes);
// Seconds with a unit that keeps 3-4 significant digits: "812 us", "3.21 ms", "1.20 s".
std::string FormatSeconds(double seconds);
// Milliseconds with three decimals: "3.210".
std::string FormatMs(double seconds);
// Uptime style: "42.1 s", "3m 07s", "2h 05m", "3d 04h".
std::string FormatUptime(double seconds);
// Large counts with an SI prefix: 48500000 -> "48.5 M".
std::string FormatSi(double value);

// Columns padded to their widest cell, separated by two spaces.
class Table {
 public:
  void AddRow(std::vector<std::string> cells);
  void Print(std::ostream& out, const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string JsonQuote(absl::string_view s);

// Builds {"key": value, ...} in insertion order. Numbers are written with full precision;
// non-finite doubles become null.
class JsonObject {
 public:
  JsonObject& Add(absl::string_view key, absl::string_view value);
  JsonObject& Add(absl::string_view key, const char* value);
  JsonObject& Add(absl::string_view key, const std::string& value);
  JsonObject& Add(absl::string_view key, double value);
  JsonObject& Add(absl::string_view key, int64_t value);
  JsonObject& Add(absl::string_view key, int value);
  JsonObject& Add(absl::string_view key, bool value);
  JsonObject& Add(absl::string_view key, const JsonObject& value);
  JsonObject& Add(absl::string_view key, const std::vector<int64_t>& values);
  // `json` must already be valid JSON.
  JsonObject& AddRaw(absl::string_view key, absl::string_view json);
  std::string Str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

}  // namespace fresnel::cli
