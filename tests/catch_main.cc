// The test executables' main. A [gpu] case that finds no GPU (or fewer than it needs) calls
// SkipWithoutGpu() (SkipWithFewerGpus()); when every case that ran did so (and nothing failed),
// the executable exits with kSkipReturnCode, which CTest's SKIP_RETURN_CODE reports as
// "Skipped" instead of "Passed".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>
#include <set>
#include <string>

#include "support/test_support.h"

namespace {

std::set<std::string>& CasesRun() {
  static std::set<std::string> names;
  return names;
}

struct CaseCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override { CasesRun().insert(info.name); }
};

}  // namespace

CATCH_REGISTER_LISTENER(CaseCounter)

int main(int argc, char** argv) {
  Catch::Session session;
  const int rc = session.run(argc, argv);
  const size_t skipped = fresnel::testing::GpuSkippedCases().size();
  if (rc == 0 && skipped > 0 && skipped == CasesRun().size()) {
    std::cout << "SKIPPED: all " << skipped
              << " test cases need a CUDA device (or more than are visible)\n";
    return fresnel::testing::kSkipReturnCode;
  }
  if (skipped > 0) {
    std::cout << skipped << " of " << CasesRun().size()
              << " test cases skipped: no CUDA device visible, or fewer than they need\n";
  }
  return rc;
}
