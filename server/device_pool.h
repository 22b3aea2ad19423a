// DevicePool: the server's compute resources and the only place where jobs wait.
//
// Every visible CUDA device gets K worker threads, each owning one non-blocking stream, and one
// stream-ordered memory pool shared by them; the CPU gets M worker threads. A job goes to the
// least-loaded device of the requested kind (queued + running) whose memory can hold it, equally
// loaded ones taken in turn; with no GPU, kind ANY goes to the CPU. Each device has a bounded queue: Submit() answers
// RESOURCE_EXHAUSTED when it is full and UNAVAILABLE once draining began. Handlers only Submit;
// compute never runs on a gRPC thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "fresnel/core/device.h"
#include "fresnel/core/gpu.h"

namespace fresnel::server {

class Metrics;

enum class DevicePreference { kAny, kGpu, kCpu };

using Clock = std::chrono::steady_clock;

// What a finished job reports besides its status.
struct JobReport {
  std::string device;           // "cpu" / "cuda:N"; empty when the job never ran
  double queue_wait_s = 0;
  StageTimes stages;            // filled by the job's run function
  double run_s = 0;             // wall time of the run function
};

// A unit of work. `run` executes on a worker with the chosen Device and fills `stages`; `done`
// is called exactly once, from a worker thread (or from Cancel/Submit callers), with the final
// status: OK or run's error, CANCELLED, DEADLINE_EXCEEDED, or UNAVAILABLE after a drain timeout.
class Job {
 public:
  std::string service;
  std::string method;
  DevicePreference preference = DevicePreference::kAny;
  std::optional<Clock::time_point> deadline;
  int64_t device_bytes = 0;  // estimate of device memory the job needs
  // Non-empty: the job must run on this device ("cpu", "cuda:N"), whatever the preference says,
  // because state it needs lives there (a session). Submit answers UNAVAILABLE when that device
  // is unhealthy and NOT_FOUND when the pool has no such device.
  std::string affinity;
  // Work of a stream or session that was open when the drain began (a next chunk, frame or
  // session step): the pool still accepts it while the drain waits for open calls to end.
  bool continues_call = false;
  std::function<absl::Status(const Device&, StageTimes*)> run;
  std::function<void(const absl::Status&, const JobReport&)> done;

  // Marks the job cancelled. A queued job is removed and completed with CANCELLED at once; a
  // running one finishes normally (its result is discarded by the caller).
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

  // Completes a job that its owner accepted but the pool then refused (a session's job queued
  // behind another when the server began to drain), so that `done` still runs exactly once.
  void CompleteUnrun(const absl::Status& status);

 private:
  friend class DevicePool;
  friend class DeviceQueue;
  // Returns true for the one caller that may complete the job.
  bool Claim() { return !claimed_.exchange(true); }
  void Complete(const absl::Status& status, const JobReport& report);

  std::atomic<bool> cancelled_{false};
  std::atomic<bool> claimed_{false};
  Clock::time_point enqueued_;
  std::atomic<class DeviceQueue*> queue_{nullptr};  // set when queued
};

struct DevicePoolOptions {
  std::vector<int> gpus;          // ordinals to use
  int streams_per_gpu = 4;        // ServerConfig::streams_per_gpu (--streams-per-gpu)
  int cpu_workers = 2;
  int queue_capacity = 64;        // per device
  int64_t gpu_pool_release_threshold_bytes = int64_t{4} << 30;
  // > 0: each GPU's memory pool may hold at most this much (--gpu-memory-bytes); placement,
  // session reservations and `fresnel info` then see it as the device's memory.
  int64_t gpu_memory_bytes = 0;
  // > 1: each GPU appears as this many pool devices ("cuda:0.0", "cuda:0.1", ...), each with its
  // own worker streams, queue and memory pool capped at 1/N of the GPU's memory (or of
  // gpu_memory_bytes). Placement, sessions, health and metrics then treat them as separate
  // devices: multi-device behaviour on one GPU (tests), or hard memory shares between tenants. A
  // sticky error poisons the whole GPU, so it takes every partition of that GPU out.
  int gpu_partitions = 1;
  // > 1: the CPU appears as this many pool devices ("cpu.0", "cpu.1", ...; "cpu" when 1), the
  // cpu_workers split between them (each at least one) and each with its own queue, session
  // memory cap, health and metrics: the multi-device paths on a machine without GPUs (tests and
  // CI), or separate CPU queues for separate tenants. At most kMaxCpuPartitions.
  int cpu_partitions = 1;
  // > 0: a job of preference ANY whose device_bytes estimate is at most this many bytes goes to
  // the CPU while the CPU has room (load under kSmallJobCpuLoadPerWorker per worker): for a
  // request of a few microseconds of work the GPU's launch, copies and synchronisation cost more
  // than the work (--small-job-bytes). A busy CPU spills them to the GPUs as usual.
  int64_t small_job_bytes = 0;
};

inline constexpr int kMaxCpuPartitions = 64;

// Queued + running small jobs per CPU worker before small jobs spill to the GPUs.
inline constexpr int kSmallJobCpuLoadPerWorker = 4;

// Live numbers of one device.
struct DeviceSnapshot {
  std::string id;
  std::string name;
  DeviceKind kind = DeviceKind::kCpu;
  int workers = 0;
  int64_t total_memory_bytes = 0;
  int compute_major = 0, compute_minor = 0, multiprocessors = 0;
  int queued = 0;
  int running = 0;
  int64_t completed = 0, failed = 0, rejected = 0;
  int64_t memory_in_use_bytes = 0;
  double busy_seconds = 0;
  bool healthy = true;
  std::string health_reason;  // why it is unhealthy
};

class DeviceQueue;

class DevicePool {
 public:
  // Creates the devices and starts their workers. GPUs that fail to initialise are skipped with a
  // log line. `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<DevicePool>> Create(const DevicePoolOptions& options,
                                                            Metrics* metrics);
  ~DevicePool();

  // Queues `job`. RESOURCE_EXHAUSTED when the chosen device's queue is full, UNAVAILABLE while
  // draining, FAILED_PRECONDITION when the preference names a kind the server lacks. On error
  // `done` is not called.
  absl::Status Submit(std::shared_ptr<Job> job);

  // The drain's first phase: new work is refused (UNAVAILABLE) but jobs that continue an open
  // call (Job::continues_call) are still accepted, so streams open at SIGTERM can finish.
  void BeginDrain() { closing_.store(true); }

  // Stops accepting work and waits until every accepted job has finished or `timeout` passed;
  // then jobs still queued complete with UNAVAILABLE and running ones are cancelled (they stop at
  // their next cancellation check), and the workers are joined. Returns true when everything
  // finished within `timeout`.
  bool Drain(std::chrono::milliseconds timeout);

  bool draining() const { return draining_.load(); }

  // Takes a device out of placement for good: a sticky CUDA error poisons its context, so jobs
  // that need it fail with UNAVAILABLE and new work goes elsewhere. Workers call this themselves
  // when a job on a GPU leaves the context in a sticky error; tests call it to inject the fault.
  // Returns false for an unknown id. Calls the health listener (outside the pool's locks).
  bool MarkUnhealthy(const std::string& device_id, const std::string& reason);
  // The same for every pool device on GPU `ordinal` (all its partitions): a sticky error poisons
  // the GPU's context, not one partition.
  void MarkGpuUnhealthy(int ordinal, const std::string& reason);
  // Adds a function called with (device id, healthy, reason) whenever a device's health
  // changes, on the thread that noticed it. Add listeners before work is submitted.
  void AddHealthListener(std::function<void(const std::string&, bool, const std::string&)> fn);
  int gpu_count() const;
  std::vector<DeviceSnapshot> Snapshot() const;
  int InFlight() const;

 private:
  DevicePool() = default;
  friend class DeviceQueue;
  void NotifyHealth(const std::string& id, bool healthy, const std::string& reason);

  // The small-job rule of DevicePoolOptions::small_job_bytes; true when `job` was queued on the CPU.
  bool TrySmallOnCpu(const std::shared_ptr<Job>& job);

  std::vector<std::unique_ptr<DeviceQueue>> devices_;  // GPUs first, CPU last
  int64_t small_job_bytes_ = 0;
  std::mutex health_mu_;
  std::vector<std::function<void(const std::string&, bool, const std::string&)>> health_listeners_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> closing_{false};
  // Placement among equally loaded devices rotates: one more per tie (Submit).
  std::atomic<uint64_t> ties_{0};
};

}  // namespace fresnel::server
