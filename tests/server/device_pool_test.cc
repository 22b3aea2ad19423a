// DevicePool: queue bounds, deadlines, cancellation and draining, with jobs that block on a latch
// so that every outcome is deterministic.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <string>
#include <vector>
#include <mutex>

#include "server/device_pool.h"
#include "support/gate.h"

namespace fresnel::server {
namespace {

using testing::Gate;

struct Outcome {
  std::promise<absl::Status> status;
  std::atomic<bool> ran{false};
};

std::shared_ptr<Job> MakeJob(Gate* gate, Outcome* out, std::atomic<int>* started = nullptr) {
  auto job = std::make_shared<Job>();
  job->service = "test";
  job->method = "Block";
  job->preference = DevicePreference::kCpu;
  job->run = [gate, out, started](const Device&, StageTimes*) {
    out->ran = true;
    if (started) ++*started;
    if (gate) gate->Wait();
    return absl::OkStatus();
  };
  job->done = [out](const absl::Status& s, const JobReport&) { out->status.set_value(s); };
  return job;
}

std::unique_ptr<DevicePool> CpuPool(int workers, int capacity) {
  DevicePoolOptions o;
  o.cpu_workers = workers;
  o.queue_capacity = capacity;
  auto pool = DevicePool::Create(o, nullptr);
  REQUIRE(pool.ok());
  return std::move(*pool);
}

void WaitUntil(const std::function<bool()>& cond) {
  for (int i = 0; i < 2000 && !cond(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(cond());
}

TEST_CASE("a full queue rejects with RESOURCE_EXHAUSTED and accepted jobs still finish",
          "[server][pool]") {
  auto pool = CpuPool(1, 2);
  Gate gate;
  Outcome running, queued1, queued2, rejected;
  std::atomic<int> started{0};
  REQUIRE(pool->Submit(MakeJob(&gate, &running, &started)).ok());
  WaitUntil([&] { return started.load() == 1; });
  REQUIRE(pool->Submit(MakeJob(&gate, &queued1)).ok());
  REQUIRE(pool->Submit(MakeJob(&gate, &queued2)).ok());
  absl::Status st = pool->Submit(MakeJob(&gate, &rejected));
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK(pool->Snapshot().back().rejected == 1);
  gate.Open();
  CHECK(running.status.get_future().get().ok());
  CHECK(queued1.status.get_future().get().ok());
  CHECK(queued2.status.get_future().get().ok());
  CHECK_FALSE(rejected.ran.load());
}

TEST_CASE("a job whose deadline passes in the queue is not run", "[server][pool]") {
  auto pool = CpuPool(1, 4);
  Gate gate;
  Outcome blocker, late;
  std::atomic<int> started{0};
  REQUIRE(pool->Submit(MakeJob(&gate, &blocker, &started)).ok());
  WaitUntil([&] { return started.load() == 1; });
  auto job = MakeJob(nullptr, &late);
  job->deadline = Clock::now() + std::chrono::milliseconds(5);
  REQUIRE(pool->Submit(job).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  gate.Open();
  absl::Status st = late.status.get_future().get();
  CHECK(st.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_FALSE(late.ran.load());
  CHECK(blocker.status.get_future().get().ok());
}

TEST_CASE("cancelling a queued job removes it at once", "[server][pool]") {
  auto pool = CpuPool(1, 4);
  Gate gate;
  Outcome blocker, cancelled;
  std::atomic<int> started{0};
  REQUIRE(pool->Submit(MakeJob(&gate, &blocker, &started)).ok());
  WaitUntil([&] { return started.load() == 1; });
  auto job = MakeJob(nullptr, &cancelled);
  REQUIRE(pool->Submit(job).ok());
  CHECK(pool->Snapshot().back().queued == 1);
  job->Cancel();
  auto f = cancelled.status.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(f.get().code() == absl::StatusCode::kCancelled);
  CHECK(pool->Snapshot().back().queued == 0);
  gate.Open();
  CHECK(blocker.status.get_future().get().ok());
  CHECK_FALSE(cancelled.ran.load());
}

TEST_CASE("draining finishes accepted work and refuses new work", "[server][pool]") {
  auto pool = CpuPool(2, 8);
  Gate gate;
  Outcome a, b, c, refused;
  std::atomic<int> started{0};
  REQUIRE(pool->Submit(MakeJob(&gate, &a, &started)).ok());
  REQUIRE(pool->Submit(MakeJob(&gate, &b, &started)).ok());
  REQUIRE(pool->Submit(MakeJob(&gate, &c, &started)).ok());
  auto drained = std::async(std::launch::async, [&] {
    return pool->Drain(std::chrono::seconds(10));
  });
  WaitUntil([&] { return pool->draining(); });
  CHECK(pool->Submit(MakeJob(nullptr, &refused)).code() == absl::StatusCode::kUnavailable);
  gate.Open();
  CHECK(drained.get());
  CHECK(a.status.get_future().get().ok());
  CHECK(b.status.get_future().get().ok());
  CHECK(c.status.get_future().get().ok());
  CHECK(started.load() == 3);
}

TEST_CASE("a drain that times out fails the jobs still queued with UNAVAILABLE",
          "[server][pool]") {
  auto pool = CpuPool(1, 8);
  Gate gate;
  Outcome running, queued;
  std::atomic<int> started{0};
  REQUIRE(pool->Submit(MakeJob(&gate, &running, &started)).ok());
  WaitUntil([&] { return started.load() == 1; });
  REQUIRE(pool->Submit(MakeJob(nullptr, &queued)).ok());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    gate.Open();
  });
  CHECK_FALSE(pool->Drain(std::chrono::milliseconds(20)));
  opener.join();
  CHECK(queued.status.get_future().get().code() == absl::StatusCode::kUnavailable);
  CHECK(running.status.get_future().get().ok());
}

TEST_CASE("a job that throws becomes an error, not a crash", "[server][pool]") {
  auto pool = CpuPool(1, 4);
  Outcome out;
  auto job = MakeJob(nullptr, &out);
  job->run = [](const Device&, StageTimes*) -> absl::Status { throw std::runtime_error("boom"); };
  REQUIRE(pool->Submit(job).ok());
  absl::Status st = out.status.get_future().get();
  CHECK(st.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(st.message()), Catch::Contains("boom"));
}

TEST_CASE("a GPU-only job on a server without GPUs is refused", "[server][pool]") {
  auto pool = CpuPool(1, 4);
  Outcome out;
  auto job = MakeJob(nullptr, &out);
  job->preference = DevicePreference::kGpu;
  CHECK(pool->Submit(job).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("gpu_partitions must be at least 1", "[server][pool]") {
  DevicePoolOptions o;
  o.gpu_partitions = 0;
  auto pool = DevicePool::Create(o, nullptr);
  REQUIRE(pool.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(pool.status().message()), Catch::Contains("gpu_partitions"));
}

TEST_CASE("CPU partitions: named devices sharing the workers; ANY work goes to the least loaded",
          "[server][pool]") {
  for (int bad : {0, kMaxCpuPartitions + 1}) {
    DevicePoolOptions o;
    o.cpu_partitions = bad;
    auto pool = DevicePool::Create(o, nullptr);
    REQUIRE(pool.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(pool.status().message()), Catch::Contains("cpu_partitions"));
  }
  DevicePoolOptions o;
  o.cpu_partitions = 2;
  o.cpu_workers = 3;
  o.queue_capacity = 8;
  auto created = DevicePool::Create(o, nullptr);
  REQUIRE(created.ok());
  std::unique_ptr<DevicePool> pool = std::move(*created);
  const std::vector<DeviceSnapshot> devices = pool->Snapshot();
  REQUIRE(devices.size() == 2);
  CHECK(devices[0].id == "cpu.0");
  CHECK(devices[0].workers == 2);
  CHECK(devices[1].id == "cpu.1");
  CHECK(devices[1].workers == 1);
  // Where each job ran (its report's device), or its error.
  auto job_on = [](Gate* gate, std::promise<std::string>* where, DevicePreference preference) {
    auto job = std::make_shared<Job>();
    job->service = "test";
    job->method = "Where";
    job->preference = preference;
    job->run = [gate](const Device&, StageTimes*) {
      if (gate) gate->Wait();
      return absl::OkStatus();
    };
    job->done = [where](const absl::Status& s, const JobReport& r) {
      where->set_value(s.ok() ? r.device : std::string(s.message()));
    };
    return job;
  };
  // Four jobs held on a gate, ANY and CPU alike: each goes to the less loaded partition (equally
  // loaded ones in turn), two and two.
  Gate gate;
  std::vector<std::promise<std::string>> held(4);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(pool->Submit(job_on(&gate, &held[i], i % 2 == 0 ? DevicePreference::kAny
                                                             : DevicePreference::kCpu))
                .ok());
  }
  std::map<std::string, int> load;
  for (const DeviceSnapshot& d : pool->Snapshot()) load[d.id] = d.queued + d.running;
  CHECK(load["cpu.0"] == 2);
  CHECK(load["cpu.1"] == 2);
  // Every worker busy: cpu.0 runs two, cpu.1 one and queues one.
  auto running = [&](const std::string& id) {
    for (const DeviceSnapshot& d : pool->Snapshot()) {
      if (d.id == id) return d.running;
    }
    return -1;
  };
  WaitUntil([&] { return running("cpu.0") == 2 && running("cpu.1") == 1; });
  // One partition unhealthy: the other takes what comes next, though it is the busier one.
  REQUIRE(pool->MarkUnhealthy("cpu.1", "injected fault"));
  std::promise<std::string> next;
  REQUIRE(pool->Submit(job_on(nullptr, &next, DevicePreference::kAny)).ok());
  gate.Open();
  CHECK(next.get_future().get() == "cpu.0");
  // What ran finished; cpu.1's queued job was not run and says why.
  std::map<std::string, int> ran;
  for (auto& h : held) ran[h.get_future().get()] += 1;
  CHECK(ran["cpu.0"] == 2);
  CHECK(ran["cpu.1"] == 1);
  CHECK(ran["cpu.1 is unhealthy (injected fault); the job was not run"] == 1);
  // Both unhealthy: refused at once.
  REQUIRE(pool->MarkUnhealthy("cpu.0", "injected fault"));
  std::promise<std::string> refused;
  CHECK(pool->Submit(job_on(nullptr, &refused, DevicePreference::kAny)).code() ==
        absl::StatusCode::kUnavailable);
}

// Jobs that find every device idle (each finished before the next is submitted: a request
// whose host side outlasts its time in the pool) take the devices in turn; with "ties to the
// first" all of them went to cpu.0 (on two GPUs: one busy GPU and one idle).
TEST_CASE("equally loaded devices take turns", "[server][pool]") {
  DevicePoolOptions o;
  o.cpu_partitions = 2;
  o.cpu_workers = 2;
  auto created = DevicePool::Create(o, nullptr);
  REQUIRE(created.ok());
  std::unique_ptr<DevicePool> pool = std::move(*created);
  std::map<std::string, int> ran;
  for (int i = 0; i < 8; ++i) {
    auto job = std::make_shared<Job>();
    job->service = "test";
    job->method = "Turns";
    job->preference = i % 2 == 0 ? DevicePreference::kAny : DevicePreference::kCpu;
    job->run = [](const Device&, StageTimes*) { return absl::OkStatus(); };
    std::promise<std::string> where;
    job->done = [&where](const absl::Status& s, const JobReport& r) {
      where.set_value(s.ok() ? r.device : std::string(s.message()));
    };
    REQUIRE(pool->Submit(job).ok());
    ran[where.get_future().get()] += 1;
    // The worker reports before it counts the job as finished: wait for both to be idle again.
    WaitUntil([&] {
      for (const DeviceSnapshot& d : pool->Snapshot()) {
        if (d.queued + d.running != 0) return false;
      }
      return true;
    });
  }
  CHECK(ran["cpu.0"] == 4);
  CHECK(ran["cpu.1"] == 4);
}

}  // namespace
}  // namespace fresnel::server
