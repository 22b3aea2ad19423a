// Runs the fresnel CLI in-process (cli::Main) and captures what it prints. Header-only: for
// tests that link fresnel_cli_lib.
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"

namespace fresnel::testing {

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

// `args` without the program name, e.g. {"--server", address, "info"}.
inline CliResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), "fresnel");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::Main(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace fresnel::testing
