// The pose readers (io/src/pose.cc; fusion's dataset reads through them): byte 0 picks the format
// (poses.txt, Redwood trajectory.log, TUM groundtruth.txt), the rest is the file.
#include <cstddef>
#include <cstdint>

#include "fresnel/io/pose.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fresnel;  // NOLINT
  if (size < 1) return 0;
  static fresnel::fuzz::ScratchFile file(".txt");
  if (!file.Write(data + 1, size - 1)) return 0;
  switch (data[0] % 3) {
    case 0: (void)ReadPosesTxt(file.path()); break;
    case 1: (void)ReadTrajectoryLog(file.path()); break;
    default: (void)ReadTumTrajectory(file.path()); break;
  }
  return 0;
}
