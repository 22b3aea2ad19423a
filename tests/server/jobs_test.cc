// JobStore: lifecycle and listeners, cancellation, TTL expiry, the memory cap, --max-jobs,
// idempotency keys and paging, with fake jobs that block on gates so that every outcome is
// deterministic.
#include "server/jobs.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "server/device_pool.h"
#include "support/gate.h"

namespace fresnel::server {
namespace {

using testing::Gate;

class FakeOutput : public JobOutput {
 public:
  explicit FakeOutput(int64_t bytes) : bytes_(bytes) {}
  int64_t bytes() const override { return bytes_; }

 private:
  int64_t bytes_;
};

// A pool of CPU workers and a store on it. The pool goes first on destruction: its last jobs
// complete into the store.
struct Env {
  explicit Env(JobStoreOptions options, int workers = 1) {
    DevicePoolOptions o;
    o.cpu_workers = workers;
    o.queue_capacity = 64;
    auto p = DevicePool::Create(o, nullptr);
    REQUIRE(p.ok());
    pool = std::move(*p);
    store = std::make_unique<JobStore>(options, pool.get(), nullptr);
  }
  ~Env() {
    pool.reset();
    store.reset();
  }
  std::unique_ptr<DevicePool> pool;
  std::unique_ptr<JobStore> store;
};

// A job that reports "first" progress, waits for `gate` (if any), reports "second" and returns an
// output of `output_bytes` (or `error`). Cancellation is honoured at either report.
JobSpec Spec(Gate* gate, int64_t output_bytes, absl::Status error = absl::OkStatus()) {
  JobSpec spec;
  spec.method = "fake";
  spec.dtype = DType::kFloat32;
  spec.shape = {4, 4};
  spec.input_bytes = 10;
  spec.output_bytes = output_bytes;
  spec.service = "test";
  spec.rpc_method = "Fake";
  spec.preference = DevicePreference::kCpu;
  spec.run = [gate, output_bytes, error](const Device&, StageTimes*, const JobProgressFn& progress)
      -> absl::StatusOr<std::shared_ptr<const JobOutput>> {
    if (!progress("first", 0.5, 0.25)) return absl::CancelledError("stopped at first");
    if (gate != nullptr) gate->Wait();
    if (!progress("second", 1.0, 1.0)) return absl::CancelledError("stopped at second");
    if (!error.ok()) return error;
    return std::shared_ptr<const JobOutput>(std::make_shared<FakeOutput>(output_bytes));
  };
  return spec;
}

JobSnapshot WaitFor(JobStore& store, const std::string& id,
                    const std::function<bool(const JobSnapshot&)>& cond,
                    const std::string& owner = "") {
  for (int i = 0; i < 5000; ++i) {
    absl::StatusOr<JobSnapshot> s = store.Get(id, owner);
    REQUIRE(s.ok());
    if (cond(*s)) return *s;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  FAIL("job " << id << " never reached the expected state");
  return {};
}

bool Finished(const JobSnapshot& s) { return IsTerminal(s.state); }

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

TEST_CASE("a job goes queued, running with progress, done; listeners see it in order",
          "[server][jobs]") {
  Env env({});
  Gate block, gate;
  auto blocker = env.store->Submit(Spec(&block, 1));
  REQUIRE(blocker.ok());
  auto job = env.store->Submit(Spec(&gate, 100));
  REQUIRE(job.ok());
  CHECK(job->job.state == JobState::kQueued);
  CHECK_FALSE(job->existing);
  CHECK(job->job.id.size() == 32);
  CHECK(job->job.id.find_first_not_of("0123456789abcdef") == std::string::npos);

  std::mutex mu;
  std::vector<JobSnapshot> seen;
  auto token = env.store->Subscribe(job->job.id, "", [&](const JobSnapshot& s) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(s);
  });
  REQUIRE(token.ok());
  CHECK(env.store->held_bytes() == 2 * 10 + 1 + 100);
  block.Open();
  WaitFor(*env.store, job->job.id, [](const JobSnapshot& s) { return s.stage == "first"; });
  gate.Open();
  JobSnapshot done = WaitFor(*env.store, job->job.id, Finished);
  CHECK(done.state == JobState::kDone);
  CHECK(done.result_bytes == 100);
  CHECK(done.report.device == "cpu");
  CHECK(done.progress == 1.0);
  WaitFor(*env.store, blocker->job.id, Finished);
  CHECK(env.store->held_bytes() == 1 + 100);
  env.store->Unsubscribe(job->job.id, *token);

  std::vector<JobSnapshot> states;
  {
    std::lock_guard<std::mutex> lock(mu);
    states = seen;
  }
  REQUIRE(states.size() >= 4);
  CHECK(states.front().state == JobState::kQueued);
  CHECK(states.back().state == JobState::kDone);
  for (size_t i = 1; i < states.size(); ++i) {
    CHECK(states[i].version > states[i - 1].version);
    CHECK(static_cast<int>(states[i].state) >= static_cast<int>(states[i - 1].state));
  }
  bool saw_first = false;
  for (const JobSnapshot& s : states) {
    saw_first |= s.state == JobState::kRunning && s.stage == "first";
  }
  CHECK(saw_first);

  auto result = env.store->GetResult(job->job.id, "");
  REQUIRE(result.ok());
  CHECK(result->output->bytes() == 100);
}

TEST_CASE("cancel: a queued job ends at once, a running one at its next progress report",
          "[server][jobs]") {
  Env env({});
  Gate gate;
  auto running = env.store->Submit(Spec(&gate, 8));
  auto queued = env.store->Submit(Spec(nullptr, 8));
  REQUIRE(running.ok());
  REQUIRE(queued.ok());
  WaitFor(*env.store, running->job.id,
          [](const JobSnapshot& s) { return s.state == JobState::kRunning; });

  auto c = env.store->Cancel(queued->job.id, "");
  REQUIRE(c.ok());
  CHECK(c->state == JobState::kCancelled);
  CHECK(c->status.code() == absl::StatusCode::kCancelled);
  auto r = env.store->GetResult(queued->job.id, "");
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(r.status().message(), "cancelled"));

  auto c2 = env.store->Cancel(running->job.id, "");
  REQUIRE(c2.ok());
  CHECK(c2->state == JobState::kRunning);
  CHECK(c2->cancel_requested);
  gate.Open();  // the job reports "second" next and is told to stop
  JobSnapshot end = WaitFor(*env.store, running->job.id, Finished);
  CHECK(end.state == JobState::kCancelled);
  CHECK(Contains(end.status.message(), "stopped at second"));
  // Cancelling a finished job changes nothing.
  auto c3 = env.store->Cancel(running->job.id, "");
  REQUIRE(c3.ok());
  CHECK(c3->state == JobState::kCancelled);
  CHECK(env.store->held_bytes() == 0);
}

TEST_CASE("a failing job ends FAILED with its status", "[server][jobs]") {
  Env env({});
  auto job = env.store->Submit(Spec(nullptr, 8, absl::InvalidArgumentError("phase[1,2] bad")));
  REQUIRE(job.ok());
  JobSnapshot end = WaitFor(*env.store, job->job.id, Finished);
  CHECK(end.state == JobState::kFailed);
  CHECK(end.status.code() == absl::StatusCode::kInvalidArgument);
  auto r = env.store->GetResult(job->job.id, "");
  CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(r.status().message(), "phase[1,2] bad"));
}

TEST_CASE("finished jobs expire after the TTL and are remembered as expired", "[server][jobs]") {
  JobStoreOptions options;
  options.ttl_s = 0.05;
  Env env(options);
  auto job = env.store->Submit(Spec(nullptr, 64));
  REQUIRE(job.ok());
  WaitFor(*env.store, job->job.id, Finished);
  // The sweeper drops it without anyone asking.
  for (int i = 0; i < 1000 && env.store->held_bytes() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(env.store->held_bytes() == 0);
  auto get = env.store->Get(job->job.id, "");
  CHECK(get.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(get.status().message(), "expired after its TTL"));
  CHECK(Contains(get.status().message(), job->job.id));
  auto result = env.store->GetResult(job->job.id, "");
  CHECK(result.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(result.status().message(), "expired"));
  auto unknown = env.store->Get("0123456789abcdef0123456789abcdef", "");
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(unknown.status().message(), "unknown job id"));
  auto page = env.store->List(0, "", "");
  REQUIRE(page.ok());
  CHECK(page->jobs.empty());
}

TEST_CASE("the memory cap evicts the oldest results first and refuses what cannot fit",
          "[server][jobs]") {
  JobStoreOptions options;
  options.memory_bytes = 1000;
  Env env(options);
  // Each job holds 10 (input) + 390 (output) while unfinished, 390 when done.
  auto a = env.store->Submit(Spec(nullptr, 390));
  REQUIRE(a.ok());
  WaitFor(*env.store, a->job.id, Finished);
  auto b = env.store->Submit(Spec(nullptr, 390));
  REQUIRE(b.ok());
  WaitFor(*env.store, b->job.id, Finished);
  CHECK(env.store->held_bytes() == 780);
  auto c = env.store->Submit(Spec(nullptr, 390));  // 780 + 400 > 1000: a goes
  REQUIRE(c.ok());
  WaitFor(*env.store, c->job.id, Finished);
  auto get_a = env.store->GetResult(a->job.id, "");
  CHECK(get_a.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(get_a.status().message(), "evicted"));
  CHECK(Contains(get_a.status().message(), "--job-memory-bytes"));
  CHECK(env.store->GetResult(b->job.id, "").ok());
  CHECK(env.store->GetResult(c->job.id, "").ok());

  // More than the cap even with every result evicted: refused, and nothing is evicted for it.
  auto huge = env.store->Submit(Spec(nullptr, 991));
  CHECK(huge.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(huge.status().message(), "--job-memory-bytes"));
  CHECK(env.store->GetResult(b->job.id, "").ok());

  // Unfinished jobs cannot be evicted: two 600-byte jobs do not fit together.
  Gate gate;
  auto d = env.store->Submit(Spec(&gate, 590));
  REQUIRE(d.ok());
  auto e = env.store->Submit(Spec(&gate, 590));
  CHECK(e.status().code() == absl::StatusCode::kResourceExhausted);
  gate.Open();
  WaitFor(*env.store, d->job.id, Finished);
}

TEST_CASE("--max-jobs bounds the unfinished jobs", "[server][jobs]") {
  JobStoreOptions options;
  options.max_jobs = 2;
  Env env(options);
  Gate gate;
  auto a = env.store->Submit(Spec(&gate, 1));
  auto b = env.store->Submit(Spec(&gate, 1));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto c = env.store->Submit(Spec(&gate, 1));
  CHECK(c.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(c.status().message(), "--max-jobs"));
  gate.Open();
  WaitFor(*env.store, a->job.id, Finished);
  WaitFor(*env.store, b->job.id, Finished);
  CHECK(env.store->Submit(Spec(nullptr, 1)).ok());
}

TEST_CASE("an idempotency key returns the same job; a different request with it is refused",
          "[server][jobs]") {
  JobStoreOptions options;
  options.ttl_s = 0.2;
  Env env(options);
  JobSpec first = Spec(nullptr, 4);
  first.idempotency_key = "key-1";
  first.fingerprint = 42;
  auto a = env.store->Submit(first);
  REQUIRE(a.ok());
  JobSpec again = Spec(nullptr, 4);
  again.idempotency_key = "key-1";
  again.fingerprint = 42;
  auto b = env.store->Submit(again);
  REQUIRE(b.ok());
  CHECK(b->existing);
  CHECK(b->job.id == a->job.id);
  JobSpec other = Spec(nullptr, 4);
  other.idempotency_key = "key-1";
  other.fingerprint = 43;
  auto c = env.store->Submit(other);
  CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(c.status().message(), "idempotency_key"));
  // Once the job is gone the key is free again.
  WaitFor(*env.store, a->job.id, Finished);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto d = env.store->Submit(again);
  REQUIRE(d.ok());
  CHECK_FALSE(d->existing);
  CHECK(d->job.id != a->job.id);
}

TEST_CASE("jobs belong to their owner: another owner's job is an unknown id, keys are per owner",
          "[server][jobs][auth]") {
  JobStoreOptions options;
  options.ttl_s = 0.2;
  Env env(options);
  Gate gate;
  JobSpec alice_spec = Spec(&gate, 4);
  alice_spec.owner = "alice";
  alice_spec.idempotency_key = "shared-key";
  alice_spec.fingerprint = 1;
  auto alice_job = env.store->Submit(alice_spec);
  REQUIRE(alice_job.ok());
  const std::string id = alice_job->job.id;
  std::vector<std::string> bob_ids;
  for (int i = 0; i < 3; ++i) {
    JobSpec bob_spec = Spec(nullptr, 4);
    bob_spec.owner = "bob";
    auto bob_job = env.store->Submit(bob_spec);
    REQUIRE(bob_job.ok());
    bob_ids.push_back(bob_job->job.id);
  }

  // Bob sees none of it, and the answer is the one an id that never existed gets.
  for (const absl::Status& st :
       {env.store->Get(id, "bob").status(), env.store->GetResult(id, "bob").status(),
        env.store->Cancel(id, "bob").status(),
        env.store->Subscribe(id, "bob", [](const JobSnapshot&) {}).status(),
        env.store->Get(id, "").status()}) {
    CHECK(st.code() == absl::StatusCode::kNotFound);
    CHECK(Contains(st.message(), "unknown job id"));
  }
  // Bob's cancel did nothing.
  CHECK_FALSE(env.store->Get(id, "alice")->cancel_requested);

  // The same idempotency key names a different job for each owner.
  JobSpec bob_keyed = Spec(nullptr, 4);
  bob_keyed.owner = "bob";
  bob_keyed.idempotency_key = "shared-key";
  bob_keyed.fingerprint = 2;  // alice's fingerprint differs: would be INVALID_ARGUMENT if shared
  auto bob_job = env.store->Submit(bob_keyed);
  REQUIRE(bob_job.ok());
  CHECK_FALSE(bob_job->existing);
  CHECK(bob_job->job.id != id);
  bob_ids.push_back(bob_job->job.id);

  // List shows each owner's own jobs, pages included.
  auto alice_page = env.store->List(0, "", "alice");
  REQUIRE(alice_page.ok());
  REQUIRE(alice_page->jobs.size() == 1);
  CHECK(alice_page->jobs[0].id == id);
  std::vector<std::string> listed;
  std::string token;
  do {
    auto page = env.store->List(3, token, "bob");
    REQUIRE(page.ok());
    for (const JobSnapshot& s : page->jobs) listed.push_back(s.id);
    token = page->next_page_token;
  } while (!token.empty());
  std::reverse(bob_ids.begin(), bob_ids.end());
  CHECK(listed == bob_ids);
  CHECK(env.store->List(0, "", "carol")->jobs.empty());

  gate.Open();
  WaitFor(*env.store, id, Finished, "alice");
  CHECK(env.store->GetResult(id, "alice").ok());
  // Once dropped, the reason is told to the owner only.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto gone = env.store->Get(id, "alice");
  REQUIRE(gone.status().code() == absl::StatusCode::kNotFound);
  CHECK_FALSE(Contains(gone.status().message(), "unknown job id"));
  CHECK(Contains(env.store->Get(id, "bob").status().message(), "unknown job id"));
}

TEST_CASE("strings a job keeps are bounded; ids in errors are not echoed whole",
          "[server][jobs]") {
  Env env(JobStoreOptions{});
  JobSpec long_id = Spec(nullptr, 4);
  long_id.request_id = std::string(kMaxJobStringBytes + 1, 'r');
  auto a = env.store->Submit(long_id);
  REQUIRE(a.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(a.status().message()).rfind("request_id:", 0) == 0);
  JobSpec long_key = Spec(nullptr, 4);
  long_key.idempotency_key = std::string(24 << 20, 'k');
  auto b = env.store->Submit(long_key);
  REQUIRE(b.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(b.status().message()).rfind("idempotency_key:", 0) == 0);
  auto unknown = env.store->Get(std::string(64 << 10, 'x'), "");
  REQUIRE(unknown.status().code() == absl::StatusCode::kNotFound);
  CHECK(unknown.status().message().size() < 300);
}

TEST_CASE("List pages through the jobs newest first", "[server][jobs]") {
  Env env({});
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto job = env.store->Submit(Spec(nullptr, 1));
    REQUIRE(job.ok());
    ids.push_back(job->job.id);
  }
  std::vector<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    auto page = env.store->List(2, token, "");
    REQUIRE(page.ok());
    CHECK(page->jobs.size() <= 2);
    for (const JobSnapshot& s : page->jobs) listed.push_back(s.id);
    token = page->next_page_token;
    ++pages;
  } while (!token.empty());
  CHECK(pages == 3);
  std::reverse(ids.begin(), ids.end());
  CHECK(listed == ids);
  CHECK(env.store->List(0, "x", "").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(env.store->List(-1, "", "").status().code() == absl::StatusCode::kInvalidArgument);
  std::set<std::string> distinct(ids.begin(), ids.end());
  CHECK(distinct.size() == ids.size());
}

TEST_CASE("List pages end by bytes as well as by count", "[server][jobs]") {
  Env env({});
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    JobSpec spec = Spec(nullptr, 1);
    spec.request_id = std::string(i == 2 ? 200 : 50, 'r');  // one job larger than a page
    auto job = env.store->Submit(spec);
    REQUIRE(job.ok());
    ids.push_back(job->job.id);
  }
  auto size_of = [](const JobSnapshot& s) { return static_cast<int64_t>(s.request_id.size()); };
  std::vector<size_t> page_sizes;
  std::vector<std::string> listed;
  std::string token;
  do {
    auto page = env.store->List(0, token, "", size_of, 120);
    REQUIRE(page.ok());
    int64_t bytes = 0;
    for (const JobSnapshot& s : page->jobs) {
      listed.push_back(s.id);
      bytes += size_of(s);
    }
    // Within the byte limit, except a page of one job larger than the limit on its own.
    CHECK((bytes <= 120 || page->jobs.size() == 1));
    page_sizes.push_back(page->jobs.size());
    token = page->next_page_token;
  } while (!token.empty() && page_sizes.size() < 10);
  // Newest first: 50 + 50 | 200 alone | 50 + 50.
  CHECK(page_sizes == std::vector<size_t>{2, 1, 2});
  std::reverse(ids.begin(), ids.end());
  CHECK(listed == ids);
}

TEST_CASE("with an instance name, ids name their instance and other instances' ids are refused",
          "[jobs]") {
  JobStoreOptions options;
  options.instance = "node-a:50051";
  Env env(options);
  auto job = env.store->Submit(Spec(nullptr, 8));
  REQUIRE(job.ok());
  const std::string& id = job->job.id;
  const std::string suffix = "@node-a:50051";
  REQUIRE(id.size() == 32 + suffix.size());
  CHECK(id.compare(32, std::string::npos, suffix) == 0);
  CHECK(id.substr(0, 32).find_first_not_of("0123456789abcdef") == std::string::npos);
  WaitFor(*env.store, id, Finished);
  CHECK(env.store->GetResult(id, "").ok());

  // The same random part minted by another instance: NOT_FOUND naming both, for every lookup.
  const std::string foreign = id.substr(0, 32) + "@node-b:50051";
  for (const absl::Status& status :
       {env.store->Get(foreign, "").status(), env.store->GetResult(foreign, "").status(),
        env.store->Cancel(foreign, "").status(),
        env.store->Subscribe(foreign, "", [](const JobSnapshot&) {}).status()}) {
    CHECK(status.code() == absl::StatusCode::kNotFound);
    CHECK(Contains(status.message(), "belongs to instance node-b:50051"));
    CHECK(Contains(status.message(), "this is instance node-a:50051"));
  }
  // An id without an instance is simply unknown.
  absl::Status plain = env.store->Get(id.substr(0, 32), "").status();
  CHECK(plain.code() == absl::StatusCode::kNotFound);
  CHECK(Contains(plain.message(), "unknown job id"));
}

}  // namespace
}  // namespace fresnel::server
