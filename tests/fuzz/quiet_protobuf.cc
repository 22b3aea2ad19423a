// Linked into the harnesses that parse protobuf messages (tests/fuzz/CMakeLists.txt, PROTO):
// drops protobuf's log lines, one per string field with invalid UTF-8, which would otherwise
// dominate the run time.
#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
