// SessionStore: placement and reservations, one-at-a-time ordered jobs on the session's device,
// the per-session queue bound, TTL, eviction, closing while a job runs, per-client limits, ids
// that name their instance, and sessions lost with an unhealthy device. Jobs block on gates, so
// every outcome is decided by the test, not by timing.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "server/device_pool.h"
#include "support/test_support.h"
#include "support/gate.h"
#include "server/sessions.h"

namespace fresnel::server {
namespace {

using testing::Gate;

using testing::GateGuard;

// Counts live states, so tests see when the store released one.
struct CountedState : SessionState {
  explicit CountedState(std::atomic<int>* live) : live_(live) { ++*live_; }
  ~CountedState() override { --*live_; }
  std::atomic<int>* live_;
  int value = 0;
};

std::unique_ptr<DevicePool> CpuPool(int workers) {
  DevicePoolOptions o;
  o.cpu_workers = workers;
  o.queue_capacity = 64;
  auto pool = DevicePool::Create(o, nullptr);
  REQUIRE(pool.ok());
  return std::move(*pool);
}

SessionStoreOptions Options() {
  SessionStoreOptions o;
  o.instance = "test-a:1";
  o.cpu_cap_bytes = 1000;
  o.sweep_interval_s = 0.01;
  return o;
}

SessionSpec Spec(int64_t bytes, const std::string& client = "alice") {
  SessionSpec s;
  s.kind = "test";
  s.client = client;
  s.preference = DevicePreference::kCpu;
  s.device_bytes = bytes;
  return s;
}

std::shared_ptr<Job> JobRunning(std::function<void()> body, std::promise<absl::Status>* done,
                                std::string* device_seen = nullptr) {
  auto job = std::make_shared<Job>();
  job->service = "test";
  job->method = "Call";
  job->run = [body = std::move(body), device_seen](const Device& d, StageTimes*) {
    if (device_seen) *device_seen = d.Name();
    body();
    return absl::OkStatus();
  };
  job->done = [done](const absl::Status& s, const JobReport&) {
    if (done) done->set_value(s);
  };
  return job;
}

void WaitFor(const std::function<bool()>& cond) {
  for (int i = 0; i < 4000 && !cond(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(cond());
}

TEST_CASE("sessions run their jobs one at a time, in order, on their device", "[server][sessions]") {
  Gate first;
  auto pool = CpuPool(4);
  SessionStore store(Options(), pool.get(), nullptr);
  GateGuard guard{{&first}};
  std::atomic<int> live{0};
  auto opened = store.Open(Spec(100), std::make_shared<CountedState>(&live));
  REQUIRE(opened.ok());
  std::shared_ptr<Session> s = *opened;
  CHECK(s->device() == "cpu");
  CHECK(s->id().rfind("s-", 0) == 0);
  CHECK(s->id().find("@test-a:1") != std::string::npos);

  constexpr int kJobs = 8;
  std::vector<int> order;
  std::mutex order_mu;
  std::atomic<int> concurrent{0}, most{0};
  std::vector<std::promise<absl::Status>> done(kJobs);
  std::vector<std::string> seen(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    auto job = JobRunning(
        [&, i] {
          const int now = ++concurrent;
          most = std::max(most.load(), now);
          if (i == 0) first.Wait();  // the rest queue behind it
          static_cast<CountedState*>(s->state())->value += 1;
          {
            std::lock_guard<std::mutex> lock(order_mu);
            order.push_back(i);
          }
          --concurrent;
        },
        &done[i], &seen[i]);
    REQUIRE(s->Submit(job).ok());
  }
  CHECK(s->pending() == kJobs);
  first.Open();
  for (auto& d : done) CHECK(d.get_future().get().ok());
  std::vector<int> expected(kJobs);
  for (int i = 0; i < kJobs; ++i) expected[i] = i;
  CHECK(order == expected);
  CHECK(most.load() == 1);
  for (const std::string& d : seen) CHECK(d == "cpu");
  CHECK(static_cast<CountedState*>(s->state())->value == kJobs);
}

TEST_CASE("a session's queue is bounded and says so", "[server][sessions]") {
  Gate gate;
  auto pool = CpuPool(2);
  SessionStore store(Options(), pool.get(), nullptr);
  GateGuard guard{{&gate}};
  SessionSpec spec = Spec(10);
  spec.max_pending = 2;
  auto s = store.Open(spec);
  REQUIRE(s.ok());
  std::vector<std::promise<absl::Status>> done(3);
  REQUIRE((*s)->Submit(JobRunning([&] { gate.Wait(); }, &done[0])).ok());
  REQUIRE((*s)->Submit(JobRunning([] {}, &done[1])).ok());
  REQUIRE((*s)->Submit(JobRunning([] {}, &done[2])).ok());
  absl::Status refused = (*s)->Submit(JobRunning([] {}, nullptr));
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(refused.message()).find("limit 2") != std::string::npos);
  gate.Open();
  for (auto& d : done) CHECK(d.get_future().get().ok());
}

TEST_CASE("session ids: other clients, other instances and unknown ids are NOT_FOUND",
          "[server][sessions]") {
  auto pool = CpuPool(1);
  SessionStore store(Options(), pool.get(), nullptr);
  auto s = store.Open(Spec(10, "alice"));
  REQUIRE(s.ok());
  CHECK(store.Find((*s)->id(), "alice").ok());
  auto other_client = store.Find((*s)->id(), "mallory");
  CHECK(other_client.status().code() == absl::StatusCode::kNotFound);
  CHECK(store.Close((*s)->id(), "mallory").code() == absl::StatusCode::kNotFound);
  auto other = store.Find("s-0123456789abcdef0123456789abcdef@test-b:2", "alice");
  REQUIRE(other.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(other.status().message()).find("belongs to instance test-b:2") !=
        std::string::npos);
  CHECK(std::string(other.status().message()).find("this is instance test-a:1") !=
        std::string::npos);
  auto unknown = store.Find("s-nothing@test-a:1", "alice");
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);
  const std::string huge(100000, 'x');
  auto long_id = store.Find(huge, "alice");
  CHECK(long_id.status().message().size() < 400);  // ids are not echoed whole
}

TEST_CASE("what a client learns of another's sessions: nothing (ended ones, content keys)",
          "[server][sessions][auth]") {
  auto pool = CpuPool(1);
  SessionStore store(Options(), pool.get(), nullptr);
  auto a = store.Open(Spec(10, "alice"));
  REQUIRE(a.ok());
  const std::string id = (*a)->id();
  const std::string never = "s-0123456789abcdef0123456789abcdef@test-a:1";
  REQUIRE(store.Close(id, "alice").ok());
  auto own = store.Find(id, "alice");
  REQUIRE(own.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(own.status().message()).find("was closed") != std::string::npos);
  // To mallory it reads as an id that never existed.
  auto theirs = store.Find(id, "mallory");
  REQUIRE(theirs.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(theirs.status().message()).find("no session") == 0);
  CHECK(std::string(store.Find(never, "mallory").status().message()).find("no session") == 0);

  // Content keys are per client: the same key finds each client's own session only.
  auto alice_mesh = store.Open(Spec(10, "alice"));
  auto bob_mesh = store.Open(Spec(10, "bob"));
  REQUIRE(alice_mesh.ok());
  REQUIRE(bob_mesh.ok());
  store.SetKey(*alice_mesh, "hash-1");
  CHECK(store.FindByKey("test", "hash-1", "bob") == nullptr);
  store.SetKey(*bob_mesh, "hash-1");
  CHECK(store.FindByKey("test", "hash-1", "alice") == *alice_mesh);
  CHECK(store.FindByKey("test", "hash-1", "bob") == *bob_mesh);
  // Closing bob's leaves alice's key in place.
  REQUIRE(store.Close((*bob_mesh)->id(), "bob").ok());
  CHECK(store.FindByKey("test", "hash-1", "bob") == nullptr);
  CHECK(store.FindByKey("test", "hash-1", "alice") == *alice_mesh);
}

TEST_CASE("memory caps, per-client limits and LRU eviction of evictable sessions",
          "[server][sessions]") {
  auto pool = CpuPool(1);
  SessionStoreOptions o = Options();
  o.max_sessions_per_client = 3;
  SessionStore store(o, pool.get(), nullptr);
  auto a = store.Open(Spec(600));
  REQUIRE(a.ok());
  auto b = store.Open(Spec(600));
  REQUIRE(b.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(b.status().message()).find("600 bytes") != std::string::npos);
  CHECK(std::string(b.status().message()).find("400 bytes") != std::string::npos);
  REQUIRE(store.Close((*a)->id(), "alice").ok());
  auto closed = store.Find((*a)->id(), "alice");
  CHECK(closed.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(closed.status().message()).find("closed") != std::string::npos);

  SessionSpec cache = Spec(600);
  cache.evictable = true;
  auto c1 = store.Open(cache);
  REQUIRE(c1.ok());
  auto c2 = store.Open(cache);  // evicts c1, the least recently used
  REQUIRE(c2.ok());
  auto gone = store.Find((*c1)->id(), "alice");
  CHECK(gone.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(gone.status().message()).find("evicted") != std::string::npos);
  CHECK(store.DeviceStats().back().reserved_bytes == 600);

  auto d = store.Open(Spec(100));
  REQUIRE(d.ok());
  auto e = store.Open(Spec(100));
  REQUIRE(e.ok());
  auto f = store.Open(Spec(100));  // alice holds c2, d, e: her limit is 3
  CHECK(f.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(store.Open(Spec(100, "bob")).ok());
}

TEST_CASE("idle sessions expire, busy ones do not, and their state is released",
          "[server][sessions]") {
  Gate gate;
  auto pool = CpuPool(1);
  SessionStore store(Options(), pool.get(), nullptr);
  GateGuard guard{{&gate}};
  std::atomic<int> live{0};
  SessionSpec spec = Spec(10);
  spec.ttl_s = 0.05;
  auto idle = store.Open(spec, std::make_shared<CountedState>(&live));
  auto busy = store.Open(spec, std::make_shared<CountedState>(&live));
  REQUIRE(idle.ok());
  REQUIRE(busy.ok());
  const std::string idle_id = (*idle)->id();
  std::promise<absl::Status> done;
  REQUIRE((*busy)->Submit(JobRunning([&] { gate.Wait(); }, &done)).ok());
  idle->reset();
  WaitFor([&] { return store.open_sessions() == 1; });  // (Find would keep it alive)
  auto expired = store.Find(idle_id, "alice");
  CHECK(std::string(expired.status().message()).find("expired") != std::string::npos);
  WaitFor([&] { return live.load() == 1; });  // the idle one's state is gone
  CHECK(store.Find((*busy)->id(), "alice").ok());  // running for longer than its TTL
  gate.Open();
  CHECK(done.get_future().get().ok());
}

TEST_CASE("closing a session while its job runs keeps the state until the job ends",
          "[server][sessions]") {
  Gate entered, gate;
  auto pool = CpuPool(1);
  SessionStore store(Options(), pool.get(), nullptr);
  GateGuard guard{{&entered, &gate}};
  std::atomic<int> live{0};
  auto s = store.Open(Spec(10), std::make_shared<CountedState>(&live));
  REQUIRE(s.ok());
  std::promise<absl::Status> done;
  std::atomic<int> value_seen{-1};
  REQUIRE((*s)
              ->Submit(JobRunning(
                  [&] {
                    entered.Open();
                    gate.Wait();
                    value_seen = static_cast<CountedState*>((*s)->state())->value;
                  },
                  &done))
              .ok());
  entered.Wait();
  REQUIRE(store.Close((*s)->id(), "alice").ok());
  CHECK(live.load() == 1);
  CHECK((*s)->Submit(JobRunning([] {}, nullptr)).code() == absl::StatusCode::kNotFound);
  gate.Open();
  CHECK(done.get_future().get().ok());
  CHECK(value_seen.load() == 0);
  WaitFor([&] { return live.load() == 0; });
}

TEST_CASE("an unhealthy device ends its sessions and takes no more", "[server][sessions]") {
  auto pool = CpuPool(1);
  SessionStore store(Options(), pool.get(), nullptr);
  std::atomic<int> live{0};
  auto s = store.Open(Spec(10), std::make_shared<CountedState>(&live));
  REQUIRE(s.ok());
  REQUIRE(pool->MarkUnhealthy("cpu", "injected fault"));
  CHECK_FALSE(pool->Snapshot().back().healthy);
  auto lost = store.Find((*s)->id(), "alice");
  REQUIRE(lost.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(lost.status().message()).find("injected fault") != std::string::npos);
  CHECK(live.load() == 0);
  CHECK(store.Open(Spec(10)).status().code() == absl::StatusCode::kUnavailable);
  auto job = JobRunning([] {}, nullptr);
  job->preference = DevicePreference::kCpu;
  CHECK(pool->Submit(job).code() == absl::StatusCode::kUnavailable);
}

// Three jobs of each session: each runs on the session's own device (of `kind`), every time.
void CheckJobsStayOnTheirDevice(const std::vector<std::shared_ptr<Session>>& sessions,
                                DeviceKind kind) {
  for (const auto& s : sessions) {
    for (int k = 0; k < 3; ++k) {
      std::promise<std::string> ran_on;
      auto job = std::make_shared<Job>();
      job->service = "test";
      job->method = "Step";
      job->run = [kind](const Device& d, StageTimes*) {
        return d.kind == kind ? absl::OkStatus()
                              : absl::InternalError("ran on the other kind of device");
      };
      job->done = [&ran_on](const absl::Status& st, const JobReport& r) {
        ran_on.set_value(st.ok() ? r.device : std::string(st.message()));
      };
      REQUIRE(s->Submit(job).ok());
      CHECK(ran_on.get_future().get() == s->device());
    }
  }
}

// Once `device` went bad: its sessions are NOT_FOUND, the others still there. Returns how many
// were lost.
int LostSessions(SessionStore& store, const std::vector<std::shared_ptr<Session>>& sessions,
                 const std::string& device) {
  int lost = 0;
  for (const auto& s : sessions) {
    auto found = store.Find(s->id(), "alice");
    if (s->device() == device) {
      CHECK(found.status().code() == absl::StatusCode::kNotFound);
      ++lost;
    } else {
      CHECK(found.ok());
    }
  }
  return lost;
}

// Issue 14 without a GPU: --cpu-partitions 2 makes the pool hold two CPU devices (own workers,
// queues, session caps and health), so CI runs the multi-device session paths too.
TEST_CASE("two CPU partitions: sessions spread, stay, share the cap, fail alone",
          "[server][sessions]") {
  DevicePoolOptions o;
  o.cpu_partitions = 2;
  o.cpu_workers = 2;
  auto created = DevicePool::Create(o, nullptr);
  REQUIRE(created.ok());
  std::unique_ptr<DevicePool> pool = std::move(*created);
  SessionStore store(Options(), pool.get(), nullptr);  // 1000 bytes: 500 per partition
  std::vector<std::shared_ptr<Session>> sessions;
  std::map<std::string, int> per_device;
  for (int i = 0; i < 4; ++i) {
    auto s = store.Open(Spec(200));
    REQUIRE(s.ok());
    per_device[(*s)->device()] += 1;
    sessions.push_back(*s);
  }
  CHECK(per_device["cpu.0"] == 2);
  CHECK(per_device["cpu.1"] == 2);
  // 150 more bytes fit under neither half of the cap (the CPU's 1000 bytes are shared).
  auto too_big = store.Open(Spec(150));
  REQUIRE(too_big.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(too_big.status().message()), Catch::Contains("2 of 2 devices short"));
  CheckJobsStayOnTheirDevice(sessions, DeviceKind::kCpu);
  // One partition going bad takes only its own sessions; new sessions go to the other.
  REQUIRE(pool->MarkUnhealthy("cpu.1", "injected fault"));
  CHECK(LostSessions(store, sessions, "cpu.1") == 2);
  auto s5 = store.Open(Spec(50));
  REQUIRE(s5.ok());
  CHECK((*s5)->device() == "cpu.0");
}

// Issue 14: two GPU pool devices `a` and `b` of 1 GiB each: sessions spread over them, stay
// where they were placed, respect each device's cap, and one device going bad takes only its
// own sessions. Returns the pool for the caller's last checks.
std::unique_ptr<DevicePool> CheckSessionsOnTwoGpuDevices(DevicePoolOptions o, const std::string& a,
                                                       const std::string& b) {
  o.streams_per_gpu = 1;
  auto created = DevicePool::Create(o, nullptr);
  REQUIRE(created.ok());
  std::unique_ptr<DevicePool> pool = std::move(*created);
  const std::vector<DeviceSnapshot> devices = pool->Snapshot();
  REQUIRE(devices.size() == 3);
  CHECK(devices[0].id == a);
  CHECK(devices[1].id == b);
  CHECK(devices[2].id == "cpu");
  CHECK(devices[0].total_memory_bytes == int64_t{1} << 30);
  CHECK(devices[1].total_memory_bytes == int64_t{1} << 30);

  SessionStoreOptions so = Options();  // GPU cap: 90 % of each device's 1 GiB
  SessionStore store(so, pool.get(), nullptr);
  auto gpu_spec = [](int64_t bytes) {
    SessionSpec s = Spec(bytes);
    s.preference = DevicePreference::kGpu;
    return s;
  };
  // Four sessions of 300 MiB spread two and two.
  std::vector<std::shared_ptr<Session>> sessions;
  std::map<std::string, int> per_device;
  for (int i = 0; i < 4; ++i) {
    auto s = store.Open(gpu_spec(int64_t{300} << 20));
    REQUIRE(s.ok());
    per_device[(*s)->device()] += 1;
    sessions.push_back(*s);
  }
  CHECK(per_device[a] == 2);
  CHECK(per_device[b] == 2);
  // Each device's cap holds, though the GPU itself has far more memory: 300 MiB more fits on
  // neither (2 x 300 + 300 > 921 MiB).
  auto too_big = store.Open(gpu_spec(int64_t{330} << 20));
  REQUIRE(too_big.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(too_big.status().message()), Catch::Contains("2 of 2 devices short"));
  CheckJobsStayOnTheirDevice(sessions, DeviceKind::kCuda);
  // One device going bad takes only its own sessions; new sessions go to the other.
  REQUIRE(pool->MarkUnhealthy(b, "injected fault"));
  CHECK(LostSessions(store, sessions, b) == 2);
  auto s5 = store.Open(gpu_spec(int64_t{100} << 20));
  REQUIRE(s5.ok());
  CHECK((*s5)->device() == a);
  return pool;
}

// Issue 14 on one GPU: --gpu-partitions 2 makes the pool hold two devices on cuda:0 (own streams,
// queues and memory caps), so the multi-device paths (placement, affinity, per-device caps and
// health) run for real without a second GPU.
// (Tags on the TEST_CASE line: tests/CMakeLists.txt registers a _gpu entry only when it sees them.)
TEST_CASE("two GPU partitions: sessions spread, stay, respect caps, fail alone", "[sessions][gpu]") {
  if (fresnel::testing::SkipWithoutGpu()) return;
  DevicePoolOptions o;
  o.gpus = {0};
  o.gpu_partitions = 2;
  o.gpu_memory_bytes = int64_t{2} << 30;  // 1 GiB per partition
  std::unique_ptr<DevicePool> pool = CheckSessionsOnTwoGpuDevices(o, "cuda:0.0", "cuda:0.1");
  // A sticky error poisons the whole GPU: both partitions leave together.
  pool->MarkGpuUnhealthy(0, "sticky error (test)");
  for (const DeviceSnapshot& d : pool->Snapshot()) {
    CHECK(d.healthy == (d.kind == DeviceKind::kCpu));
  }
}

// Issue 14 on two GPUs (nvidia-h200-x2): the same on cuda:0 and cuda:1, each capped at 1 GiB;
// a sticky error on one GPU leaves the other serving.
TEST_CASE("two GPUs: sessions spread, stay, respect caps, fail alone", "[sessions][gpu]") {
  if (fresnel::testing::SkipWithFewerGpus(2)) return;
  DevicePoolOptions o;
  o.gpus = {0, 1};
  o.gpu_memory_bytes = int64_t{1} << 30;
  std::unique_ptr<DevicePool> pool = CheckSessionsOnTwoGpuDevices(o, "cuda:0", "cuda:1");
  pool->MarkGpuUnhealthy(1, "sticky error (test)");
  for (const DeviceSnapshot& d : pool->Snapshot()) {
    CHECK(d.healthy == (d.id != "cuda:1"));
  }
}

}  // namespace
}  // namespace fresnel::server
