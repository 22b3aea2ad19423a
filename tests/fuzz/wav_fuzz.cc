// fresnel::ReadSignal for audio files (io/src/signal.cc, libsndfile): any bytes as a
// .wav file (libsndfile detects the container from the bytes, so AIFF, FLAC, ... are reached too).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fresnel/io/signal.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fresnel::fuzz::ScratchFile file(".wav");
  if (!file.Write(data, size)) return 0;
  auto signal = fresnel::ReadSignal(file.path());
  if (!signal.ok()) return 0;
  if (signal->samples.ndim() != 2) std::abort();
  return 0;
}
