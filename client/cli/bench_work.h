// The closed-loop measurement and the report that every single-request op of `fresnel bench`
// shares: bench.cc (upfirdn, resample_poly, stream) and bench_device.cc (hologram, unwrap,
// volume). `concurrency` workers each send one request, wait for the answer and send the next.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "commands.h"
#include "format.h"
#include "fresnel/v1/common.pb.h"

namespace fresnel::cli {

struct BenchOutcome {
  v1::ExecutionInfo info;
  int64_t bytes_out = 0;  // response payload
};

struct BenchWork {
  // One request of worker `worker` (0 .. concurrency - 1), blocking; each worker calls it from
  // its own thread, so per-worker state needs no lock.
  std::function<absl::StatusOr<BenchOutcome>(int worker)> run;
  int64_t bytes_in = 0;     // request payload per call
  double items = 0;         // work items per request, for the rate row ("samples", "pixels")
  std::string item_name;    // plural; the JSON key is <item_name>_per_second
  std::string description;  // the header line after "fresnel bench: "
  std::function<void(JsonObject*)> add_json;  // the op's own JSON fields (after "op")
};

// Warm-up (--warmup, default one per worker), then --count requests or --duration seconds;
// prints the table (or --json). Exit code kExitOk, or kExitRpc when every request failed.
int RunBenchWork(const GlobalOptions& global, const BenchOptions& options, const BenchWork& work,
                 std::ostream& out, std::ostream& err);

}  // namespace fresnel::cli
