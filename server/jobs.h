// JobStore: asynchronous jobs that outlive the RPC that created them. Knows nothing of gRPC or of
// any workload: a service hands it a JobSpec (a run function plus what to show about the job),
// and the store runs it on the DevicePool, tracks its state and progress, keeps its output, tells
// subscribers about every change, and forgets it again.
//
// Lifecycle: QUEUED (in a device queue) -> RUNNING (stage + progress) -> DONE | FAILED |
// CANCELLED. A finished job is kept for `ttl_s` seconds after it finished. Every job holds bytes
// against `memory_bytes`: an unfinished one its input plus the output it will produce (reserved
// at Submit), a DONE one its output. When a new job or result does not fit, the oldest DONE
// results are evicted first; when it still does not fit, Submit is RESOURCE_EXHAUSTED. Dropped
// jobs (TTL or eviction) are remembered by id, so that asking for one answers NOT_FOUND saying
// what happened to it rather than "unknown".
//
// Every job belongs to JobSpec::owner. The lookups take the caller's name and answer another
// owner's job exactly as an unknown id (NOT_FOUND, "unknown job id"), so that a client learns
// nothing of other clients' jobs; idempotency keys are per owner.
//
// Thread-safe. Listeners run under the store's lock, in order, one at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"
#include "fresnel/core/device.h"
#include "server/device_pool.h"

namespace fresnel::server {

class Metrics;

// Longest request_id and idempotency_key a job may carry (JobStore::Submit: INVALID_ARGUMENT).
inline constexpr size_t kMaxJobStringBytes = 256;

enum class JobState { kQueued, kRunning, kDone, kFailed, kCancelled };
// "queued", "running", "done", "failed", "cancelled" (also the metrics' state label).
const char* JobStateName(JobState state);
inline bool IsTerminal(JobState state) {
  return state == JobState::kDone || state == JobState::kFailed || state == JobState::kCancelled;
}

// What a DONE job keeps, opaque to the store.
class JobOutput {
 public:
  virtual ~JobOutput() = default;
  virtual int64_t bytes() const = 0;
};

// Called by a job's run function between (and within) its stages: the stage's name, the fraction
// of that stage done and an estimate of the fraction of the whole job done, both in [0, 1].
// Returns false when the job was cancelled: the run function should then stop and return
// CancelledError.
using JobProgressFn =
    std::function<bool(const std::string& stage, double stage_fraction, double progress)>;

struct JobSpec {
  // The client that submitted it (ClientOf): only that client finds it again (Get, GetResult,
  // Cancel, Subscribe, List) and only within its own idempotency keys. "" without authentication.
  std::string owner;
  // Shown to clients (List, Watch).
  std::string method;  // the service's name for what the job does, e.g. "goldstein"
  // The service's own code for the method (e.g. a proto enum value), carried back unchanged in
  // snapshots so that the service needs no reverse lookup of `method`.
  int method_code = 0;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string request_id;
  // Non-empty: a second Submit with the same key returns this job instead of creating one, as
  // long as the store remembers the job; with a different fingerprint it is INVALID_ARGUMENT.
  std::string idempotency_key;
  uint64_t fingerprint = 0;
  // Bytes held while unfinished (input + the output it will produce); a DONE job then holds its
  // output's bytes(), which must not exceed output_bytes.
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;
  // Placement and metrics labels for the DevicePool.
  std::string service;
  std::string rpc_method;
  DevicePreference preference = DevicePreference::kAny;
  int64_t device_bytes = 0;
  // Runs on a pool worker. Must return an output (OK) or an error; CancelledError after the
  // progress hook said stop.
  std::function<absl::StatusOr<std::shared_ptr<const JobOutput>>(
      const Device& device, StageTimes* times, const JobProgressFn& progress)>
      run;
};

// A job as clients see it.
struct JobSnapshot {
  std::string id;
  JobState state = JobState::kQueued;
  std::string method;
  int method_code = 0;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string request_id;
  std::string stage;
  double stage_fraction = 0;
  double progress = 0;
  bool cancel_requested = false;
  absl::Status status;  // FAILED / CANCELLED: why
  // Wall-clock times; started and finished are the epoch while unset.
  std::chrono::system_clock::time_point created, started, finished, expires;
  JobReport report;    // device, queue wait, stage times (terminal jobs)
  double total_s = 0;  // accepted -> finished
  int64_t result_bytes = 0;
  uint64_t version = 0;  // grows with every change of this job
};

struct JobStoreOptions {
  double ttl_s = 600;
  int64_t memory_bytes = int64_t{4} << 30;
  int max_jobs = 64;              // unfinished jobs
  size_t max_remembered = 10000;  // ids of dropped jobs remembered for their NOT_FOUND message
  // Non-empty: ids end in "@instance", and an id that names another instance is NOT_FOUND
  // saying which instance it belongs to (many servers behind one load-balanced address).
  std::string instance;
};

class JobStore {
 public:
  // `pool` must outlive the store's jobs: destroy (or drain) the pool before the store.
  JobStore(JobStoreOptions options, DevicePool* pool, Metrics* metrics);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  struct Submitted {
    JobSnapshot job;
    bool existing = false;  // the idempotency key named a job the store already had
  };
  // Creates the job and queues it on the pool. RESOURCE_EXHAUSTED for --max-jobs or the memory
  // cap (and the pool's own RESOURCE_EXHAUSTED / UNAVAILABLE / FAILED_PRECONDITION).
  absl::StatusOr<Submitted> Submit(JobSpec spec);

  // NOT_FOUND for unknown ids (and another owner's), and for dropped ones with the reason.
  absl::StatusOr<JobSnapshot> Get(const std::string& id, const std::string& owner);

  struct Result {
    JobSnapshot job;
    std::shared_ptr<const JobOutput> output;  // stays valid even if the job is dropped meanwhile
  };
  // A DONE job's output; FAILED_PRECONDITION while the job is not DONE.
  absl::StatusOr<Result> GetResult(const std::string& id, const std::string& owner);

  // Cancels: a queued job ends CANCELLED before this returns; a running one gets
  // cancel_requested and stops at its next progress report. Finished jobs are left alone.
  absl::StatusOr<JobSnapshot> Cancel(const std::string& id, const std::string& owner);

  struct Page {
    std::vector<JobSnapshot> jobs;  // newest first
    std::string next_page_token;    // empty on the last page
  };
  // `owner`'s jobs only. page_size 0 means 100 (at most 1000); INVALID_ARGUMENT for a malformed
  // page_token. With `size_of` set, a page also ends before the sum of size_of(job) would pass
  // `max_page_bytes` (a page always holds at least one job), so that a page of jobs with long
  // strings still fits in one response message. size_of runs under the store's lock.
  using SizeOf = std::function<int64_t(const JobSnapshot&)>;
  absl::StatusOr<Page> List(int page_size, const std::string& page_token,
                            const std::string& owner, const SizeOf& size_of = nullptr,
                            int64_t max_page_bytes = 0);

  // Calls `listener` with the job's current snapshot before returning, then after every change
  // until Unsubscribe (or until the job is dropped). Listeners run under the store's lock: they
  // must return quickly and must not call the store. Returns a token for Unsubscribe.
  using Listener = std::function<void(const JobSnapshot&)>;
  absl::StatusOr<uint64_t> Subscribe(const std::string& id, const std::string& owner,
                                     Listener listener);
  // After it returns the listener is not running and will not run again.
  void Unsubscribe(const std::string& id, uint64_t token);

  int64_t held_bytes() const;
  const JobStoreOptions& options() const { return options_; }

 private:
  struct Record;
  using SteadyClock = std::chrono::steady_clock;

  std::string NewIdLocked();
  Record* FindLocked(const std::string& id, const std::string& owner, absl::Status* not_found);
  JobSnapshot SnapshotLocked(const Record& r) const;
  void NotifyLocked(Record& r);
  void ExpireLocked(SteadyClock::time_point now);
  // Evicts the oldest DONE results until `more` bytes fit under the cap; false if they cannot.
  bool MakeRoomLocked(int64_t more);
  void DropLocked(const std::string& id, const std::string& reason, const char* metric_reason);
  void RemoveRejectedLocked(const std::string& id, const absl::Status& why);
  void RememberDroppedLocked(const std::string& id, const std::string& owner,
                             const std::string& reason);
  void PublishMetricsLocked();

  bool MarkRunning(const std::string& id, const Device& device);
  bool Progress(const std::string& id, const std::string& stage, double stage_fraction,
                double progress);
  void SetOutput(const std::string& id, std::shared_ptr<const JobOutput> output);
  void Complete(const std::string& id, const absl::Status& status, const JobReport& report);
  void SweepLoop();

  const JobStoreOptions options_;
  DevicePool* const pool_;
  Metrics* const metrics_;

  mutable std::mutex mu_;
  std::condition_variable sweep_cv_;
  std::unordered_map<std::string, std::unique_ptr<Record>> jobs_;
  std::map<uint64_t, std::string> by_seq_;                // creation order, for List
  std::deque<std::string> finished_order_;                // terminal jobs in finish order
  std::unordered_map<std::string, std::string> keys_;     // OwnedKey(owner, key) -> id
  struct Dropped {
    std::string owner;
    std::string reason;  // the NOT_FOUND message
  };
  std::unordered_map<std::string, Dropped> dropped_;      // id -> why it is gone
  std::deque<std::string> dropped_order_;
  std::random_device random_;
  uint64_t next_seq_ = 1;
  uint64_t next_token_ = 1;
  int64_t held_bytes_ = 0;
  int unfinished_ = 0;
  bool stop_ = false;
  std::thread sweeper_;
};

}  // namespace fresnel::server
