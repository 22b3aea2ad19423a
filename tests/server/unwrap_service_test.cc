// fresnel.v1.UnwrapService end to end over loopback gRPC (in-process fresneld, CPU pool): jobs go
// QUEUED -> RUNNING -> DONE and their results equal fresnel::unwrap's own on the CPU; idempotency
// keys, cancellation, List, TTL expiry, the memory cap, --max-jobs, bad input, the synchronous
// call, and chunked uploads and results. The [gpu] case compares a GPU server with the CPU bit for
// bit (Goldstein).
#include <catch2/catch.hpp>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <sys/resource.h>

#include "absl/strings/str_cat.h"
#include "commands.h"
#include "fresnel/client/client.h"
#include "fresnel/client/shm.h"
#include "fresnel/client/unwrap_client.h"
#include "fresnel/io/npy.h"
#include "fresnel/io/png.h"
#include "fresnel/unwrap/unwrap.h"
#include "fresnel/v1/array_convert.h"
#include "server/jobs.h"
#include "region_check.h"
#include "server_fixture.h"
#include "support/cli_runner.h"
#include "support/test_support.h"

namespace fresnel::testing {
namespace {

constexpr double kPi = 3.14159265358979323846;

struct TestPhase {
  HostArray phase;
  HostArray mask;  // uint8, 1 on a disc whose phase is NaN; empty when unmasked
};

// A random smooth surface (tilt plus a Gaussian bump, several turns of 2 pi), `pairs` vortex
// pairs at random places (each pair makes a +1 and a -1 residue), Gaussian noise of `sigma`
// radians, wrapped to [-pi, pi]; with `masked`, a random disc is NaN and masked.
TestPhase MakePhase(int64_t rows, int64_t cols, DType dtype, double sigma, int pairs, bool masked) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> noise(0, sigma > 0 ? sigma : 1);
  const double turns = 3 + 5 * u(rng), tilt = u(rng);
  const double bx = 0.3 + 0.4 * u(rng), by = 0.3 + 0.4 * u(rng);
  struct Vortex {
    double r, c, charge;
  };
  std::vector<Vortex> vortices;
  for (int i = 0; i < pairs; ++i) {
    const double r = (0.1 + 0.8 * u(rng)) * rows, c = (0.1 + 0.8 * u(rng)) * cols;
    vortices.push_back({r, c, 1});
    vortices.push_back({r + 3 + 10 * u(rng), c + 3 + 10 * u(rng), -1});
  }
  const double dr = (0.2 + 0.6 * u(rng)) * rows, dc = (0.2 + 0.6 * u(rng)) * cols;
  const double radius = 0.08 * std::min(rows, cols);
  TestPhase out;
  out.phase = HostArray(dtype, {rows, cols});
  if (masked) out.mask = HostArray(DType::kUint8, {rows, cols});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double x = (c + 0.5) / cols, y = (r + 0.5) / rows;
      double phi = 2 * kPi * turns *
                   (tilt * x + (1 - tilt) * y +
                    0.5 * std::exp(-((x - bx) * (x - bx) + (y - by) * (y - by)) / 0.04));
      for (const Vortex& v : vortices) phi += v.charge * std::atan2(r - v.r, c - v.c);
      if (sigma > 0) phi += noise(rng);
      double w = phi - 2 * kPi * std::floor((phi + kPi) / (2 * kPi));
      const int64_t i = r * cols + c;
      if (masked && (r - dr) * (r - dr) + (c - dc) * (c - dc) < radius * radius) {
        out.mask.data<uint8_t>()[i] = 1;
        w = std::nan("");
      }
      if (dtype == DType::kFloat32) {
        out.phase.data<float>()[i] = static_cast<float>(w);
      } else {
        out.phase.data<double>()[i] = w;
      }
    }
  }
  return out;
}

v1::UnwrapRequest Request(const TestPhase& p,
                          v1::UnwrapMethod method = v1::UNWRAP_METHOD_GOLDSTEIN) {
  v1::UnwrapRequest r;
  ToProto(p.phase, r.mutable_phase());
  if (p.mask.ndim() == 2) ToProto(p.mask, r.mutable_mask());
  r.set_method(method);
  r.mutable_device()->set_kind(v1::DEVICE_KIND_CPU);
  return r;
}

// What the kernels give on the CPU for the same request (maps on).
unwrap::GoldsteinResult DirectGoldstein(const TestPhase& p) {
  unwrap::GoldsteinOptions o;
  if (p.mask.ndim() == 2) o.mask = &p.mask;
  auto r = unwrap::UnwrapGoldstein(Device::Cpu(), p.phase, o);
  REQUIRE(r.ok());
  return std::move(*r);
}

HostArray DirectLeastSquares(const TestPhase& p, bool congruent) {
  unwrap::LeastSquaresOptions o;
  if (p.mask.ndim() == 2) o.mask = &p.mask;
  o.congruent = congruent;
  auto r = unwrap::UnwrapLeastSquares(Device::Cpu(), p.phase, o);
  REQUIRE(r.ok());
  return std::move(r->unwrapped);
}

bool Same(const HostArray& a, const HostArray& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.bytes() == b.bytes();
}

void CheckEqualsDirect(const UnwrapResult& got, const unwrap::GoldsteinResult& want) {
  CHECK(Same(got.unwrapped, want.unwrapped));
  CHECK(Same(got.residues, want.residues));
  CHECK(Same(got.cuts, want.cuts));
  CHECK(Same(got.regions, want.regions));
  CHECK(Same(got.unreached, want.unreached));
  CHECK(got.stats.positive_residues() == want.stats.positive_residues);
  CHECK(got.stats.negative_residues() == want.stats.negative_residues);
  CHECK(got.stats.residue_pairs() == want.stats.residue_pairs);
  CHECK(got.stats.border_cuts() == want.stats.border_cuts);
  CHECK(got.stats.mask_cuts() == want.stats.mask_cuts);
  CHECK(got.stats.cut_length() == want.stats.cut_length);
  CHECK(got.stats.cut_pixels() == want.stats.cut_pixels);
  CHECK(got.stats.regions() == want.stats.regions);
  CHECK(got.stats.unreached_pixels() == want.stats.unreached_pixels);
  CHECK(got.stats.masked_pixels() == want.stats.masked_pixels);
  CHECK(got.stats.pairing_radius() == want.stats.pairing_radius);
}

std::unique_ptr<Client> Connect(const TestServer& ts) {
  return ConnectClient(ts, std::chrono::seconds(120), 256 << 20);
}

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

std::string Id(const absl::StatusOr<v1::SubmitResponse>& r) {
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return r->job().job_id();
}

// A job that keeps the only CPU worker busy for a while (a large noisy image), so that jobs
// submitted after it stay queued until it is cancelled.
v1::UnwrapRequest BlockerRequest() {
  static const TestPhase blocker = MakePhase(2048, 2048, DType::kFloat32, 1.0, 0, false);
  return Request(blocker);
}

// Cancels the blocker and waits until it is over (cancelled at its next progress report, or done
// if it got there first).
void StopBlocker(Client& client, const std::string& id) {
  REQUIRE(client.CancelUnwrap(id).ok());
  auto end = client.WatchUnwrap(id);
  REQUIRE(end.ok());
  CHECK((end->state() == v1::JOB_STATE_CANCELLED || end->state() == v1::JOB_STATE_DONE));
}

server::ServerConfig OneWorker() {
  server::ServerConfig config = TestServer::CpuConfig();
  config.cpu_workers = 1;
  return config;
}

TEST_CASE("Submit, Watch sees QUEUED then RUNNING then DONE, Get equals the CPU kernels",
          "[server][unwrap]") {
  TestServer ts(OneWorker());
  auto client = Connect(ts);
  const std::string blocker = Id(client->SubmitUnwrap(BlockerRequest()));
  TestPhase p = MakePhase(120, 170, DType::kFloat32, 0.0, 3, true);
  const std::string id = Id(client->SubmitUnwrap(Request(p)));
  // 32 hex digits, then "@" and the server's instance name (HOSTNAME:PORT by default).
  CHECK(id.size() > 33);
  CHECK(id.find('@') == 32);
  CHECK(id != blocker);

  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::UnwrapJob> seen;
  absl::StatusOr<v1::UnwrapJob> final_state;
  std::thread watcher([&] {
    final_state = client->WatchUnwrap(id, [&](const v1::UnwrapJob& job) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(job);
      cv.notify_all();
    });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return !seen.empty(); }));
  }
  StopBlocker(*client, blocker);
  watcher.join();
  REQUIRE(final_state.ok());
  CHECK(final_state->state() == v1::JOB_STATE_DONE);
  REQUIRE(seen.size() >= 3);
  CHECK(seen.front().state() == v1::JOB_STATE_QUEUED);
  CHECK(seen.back().state() == v1::JOB_STATE_DONE);
  bool running = false;
  for (size_t i = 0; i < seen.size(); ++i) {
    running |= seen[i].state() == v1::JOB_STATE_RUNNING;
    if (i > 0) CHECK(seen[i].state() >= seen[i - 1].state());
    if (seen[i].state() == v1::JOB_STATE_RUNNING && !seen[i].stage().empty()) {
      CHECK(seen[i].progress() >= 0.0);
      CHECK(seen[i].progress() <= 1.0);
    }
  }
  CHECK(running);
  const v1::UnwrapJob& done = seen.back();
  CHECK(done.device() == "cpu");
  CHECK(done.progress() == 1.0);
  CHECK(done.result_bytes() == 120 * 170 * (4 + 2 + 1 + 4 + 1));
  CHECK(done.shape_size() == 2);
  CHECK(done.dtype() == v1::FLOAT32);
  CHECK(done.finished().seconds() >= done.created().seconds());
  CHECK(done.expires().seconds() >= done.finished().seconds() + 599);

  auto result = client->GetUnwrapResult(id);
  REQUIRE(result.ok());
  CheckEqualsDirect(*result, DirectGoldstein(p));
  CHECK(result->info.device() == "cpu");
  CHECK(result->info.total_seconds() > 0);
  CHECK(result->stats.positive_residues() >= 1);
}

TEST_CASE("UnwrapClient: the service's calls on their own, chunked both ways", "[server][unwrap]") {
  TestServer ts;
  auto client = Connect(ts);
  UnwrapClient unwrap(client.get());
  TestPhase p = MakePhase(96, 130, DType::kFloat32, 0.0, 2, true);
  // A small message cap sends the phase and mask in chunks and gets the result in chunks.
  SubmitOptions small;
  small.max_message_bytes = 32 << 10;
  auto submitted = unwrap.Submit(Request(p), small);
  const std::string id = Id(submitted);
  auto done = unwrap.Watch(id);
  REQUIRE(done.ok());
  CHECK(done->state() == v1::JOB_STATE_DONE);
  auto state = unwrap.GetJob(id);
  REQUIRE(state.ok());
  CHECK(state->job_id() == id);
  auto result = unwrap.GetResult(id, 8192);
  REQUIRE(result.ok());
  CheckEqualsDirect(*result, DirectGoldstein(p));
  auto sync = unwrap.Unwrap(Request(p));
  REQUIRE(sync.ok());
  CheckEqualsDirect(*sync, DirectGoldstein(p));
  auto listed = unwrap.List();
  REQUIRE(listed.ok());
  CHECK(listed->jobs_size() == 1);
  auto cancelled = unwrap.Cancel(id);  // a finished job stays DONE
  REQUIRE(cancelled.ok());
  CHECK(cancelled->state() == v1::JOB_STATE_DONE);
  CHECK(unwrap.GetJob("j-nope").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("an idempotency key returns the same job", "[server][unwrap]") {
  TestServer ts;
  auto client = Connect(ts);
  TestPhase p = MakePhase(40, 50, DType::kFloat64, 0.0, 1, false);
  SubmitOptions key;
  key.idempotency_key = "retry-safe-1";
  auto a = client->SubmitUnwrap(Request(p), key);
  auto b = client->SubmitUnwrap(Request(p), key);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK_FALSE(a->existing());
  CHECK(b->existing());
  CHECK(a->job().job_id() == b->job().job_id());
  auto c = client->SubmitUnwrap(Request(p));  // no key: a new job
  CHECK(Id(c) != a->job().job_id());
  TestPhase other = MakePhase(40, 50, DType::kFloat64, 0.0, 1, false);
  auto d = client->SubmitUnwrap(Request(other), key);
  CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(d.status().message(), "idempotency_key"));
}

TEST_CASE("Cancel of a queued job ends it CANCELLED", "[server][unwrap]") {
  TestServer ts(OneWorker());
  auto client = Connect(ts);
  const std::string blocker = Id(client->SubmitUnwrap(BlockerRequest()));
  TestPhase p = MakePhase(64, 64, DType::kFloat32, 0.0, 1, false);
  const std::string id = Id(client->SubmitUnwrap(Request(p)));
  auto cancelled = client->CancelUnwrap(id);
  REQUIRE(cancelled.ok());
  CHECK(cancelled->state() == v1::JOB_STATE_CANCELLED);
  CHECK(cancelled->status().code() == static_cast<int>(absl::StatusCode::kCancelled));
  auto watched = client->WatchUnwrap(id);
  REQUIRE(watched.ok());
  CHECK(watched->state() == v1::JOB_STATE_CANCELLED);
  auto get = client->GetUnwrapResult(id);
  CHECK(get.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(get.status().message(), "cancelled"));
  StopBlocker(*client, blocker);
}

TEST_CASE("List shows the jobs newest first, with paging", "[server][unwrap]") {
  TestServer ts;
  auto client = Connect(ts);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    TestPhase p = MakePhase(30 + i, 40, DType::kFloat32, 0.0, 0, false);
    ids.push_back(Id(client->SubmitUnwrap(
        Request(p, i == 1 ? v1::UNWRAP_METHOD_LEAST_SQUARES : v1::UNWRAP_METHOD_GOLDSTEIN))));
  }
  auto all = client->ListUnwrapJobs();
  REQUIRE(all.ok());
  REQUIRE(all->jobs_size() == 3);
  CHECK(all->next_page_token().empty());
  for (int i = 0; i < 3; ++i) {
    const v1::UnwrapJob& j = all->jobs(i);
    CHECK(j.job_id() == ids[2 - i]);
    CHECK(j.shape(0) == 30 + (2 - i));
    CHECK(j.shape(1) == 40);
    CHECK(j.created().seconds() > 0);
  }
  CHECK(all->jobs(1).method() == v1::UNWRAP_METHOD_LEAST_SQUARES);
  v1::ListJobsRequest page;
  page.set_page_size(2);
  auto first = client->ListUnwrapJobs(page);
  REQUIRE(first.ok());
  CHECK(first->jobs_size() == 2);
  REQUIRE_FALSE(first->next_page_token().empty());
  page.set_page_token(first->next_page_token());
  auto second = client->ListUnwrapJobs(page);
  REQUIRE(second.ok());
  REQUIRE(second->jobs_size() == 1);
  CHECK(second->jobs(0).job_id() == ids[0]);
}

TEST_CASE("List pages by bytes: every page fits the message cap", "[server][unwrap]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 16 << 10;  // 40 jobs of ~500 wire bytes each do not fit one page
  // All 40 may be queued at once (the fixture's 16 made a slow, loaded machine answer
  // RESOURCE_EXHAUSTED "all CPU queues are full" now and then: this case is about List).
  config.queue_length = 64;
  TestServer ts(config);
  auto client = Connect(ts);
  std::set<std::string> ids;
  for (int i = 0; i < 40; ++i) {
    TestPhase p = MakePhase(8, 8, DType::kFloat32, 0.0, 0, false);
    v1::UnwrapRequest r = Request(p);
    r.set_request_id(absl::StrCat(i, std::string(server::kMaxJobStringBytes - 4, 'r')));
    ids.insert(Id(client->SubmitUnwrap(r)));
  }
  std::set<std::string> listed;
  int pages = 0;
  v1::ListJobsRequest page;
  do {
    auto got = client->ListUnwrapJobs(page);
    REQUIRE(got.ok());
    CHECK(got->ByteSizeLong() <= static_cast<size_t>(config.max_message_bytes / 2));
    for (const v1::UnwrapJob& j : got->jobs()) listed.insert(j.job_id());
    page.set_page_token(got->next_page_token());
    ++pages;
  } while (!page.page_token().empty() && pages < 100);
  CHECK(pages >= 2);
  CHECK(listed == ids);
}

TEST_CASE("results past the TTL are NOT_FOUND and say that they expired", "[server][unwrap]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.job_ttl_s = 0.3;
  TestServer ts(config);
  auto client = Connect(ts);
  TestPhase p = MakePhase(50, 60, DType::kFloat32, 0.0, 1, false);
  const std::string id = Id(client->SubmitUnwrap(Request(p)));
  auto done = client->WatchUnwrap(id);
  REQUIRE(done.ok());
  REQUIRE(done->state() == v1::JOB_STATE_DONE);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto get = client->GetUnwrapResult(id);
  CHECK(get.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(get.status().message(), "expired"));
  CHECK(Contains(get.status().message(), id));
  CHECK(client->WatchUnwrap(id).status().code() == absl::StatusCode::kNotFound);
  CHECK(client->CancelUnwrap(id).status().code() == absl::StatusCode::kNotFound);
  auto list = client->ListUnwrapJobs();
  REQUIRE(list.ok());
  CHECK(list->jobs_size() == 0);
}

TEST_CASE("the job memory cap evicts the oldest result, and refuses jobs that cannot fit",
          "[server][unwrap]") {
  server::ServerConfig config = TestServer::CpuConfig();
  // A 64 x 64 float32 Goldstein job holds 16 KiB of input + 48 KiB of result while it runs and
  // 48 KiB when done: one result fits next to a running job, two do not.
  config.job_memory_bytes = 100000;
  TestServer ts(config);
  auto client = Connect(ts);
  TestPhase a = MakePhase(64, 64, DType::kFloat32, 0.0, 1, false);
  TestPhase b = MakePhase(64, 64, DType::kFloat32, 0.0, 1, false);
  const std::string id_a = Id(client->SubmitUnwrap(Request(a)));
  REQUIRE(client->WatchUnwrap(id_a).ok());
  const std::string id_b = Id(client->SubmitUnwrap(Request(b)));
  REQUIRE(client->WatchUnwrap(id_b).ok());
  auto get_a = client->GetUnwrapResult(id_a);
  CHECK(get_a.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(get_a.status().message(), "evicted"));
  auto get_b = client->GetUnwrapResult(id_b);
  REQUIRE(get_b.ok());
  CheckEqualsDirect(*get_b, DirectGoldstein(b));
  TestPhase big = MakePhase(128, 128, DType::kFloat32, 0.0, 0, false);
  auto refused = client->SubmitUnwrap(Request(big));
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(refused.status().message(), "--job-memory-bytes"));
  CHECK(client->GetUnwrapResult(id_b).ok());  // nothing was evicted for a job that cannot fit
}

TEST_CASE("too many unfinished jobs is RESOURCE_EXHAUSTED", "[server][unwrap]") {
  server::ServerConfig config = OneWorker();
  config.max_jobs = 1;
  TestServer ts(config);
  auto client = Connect(ts);
  const std::string blocker = Id(client->SubmitUnwrap(BlockerRequest()));
  TestPhase p = MakePhase(32, 32, DType::kFloat32, 0.0, 0, false);
  auto refused = client->SubmitUnwrap(Request(p));
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(refused.status().message(), "--max-jobs"));
  StopBlocker(*client, blocker);
  CHECK(client->SubmitUnwrap(Request(p)).ok());
}

TEST_CASE("bad input is INVALID_ARGUMENT naming the field, for Unwrap and Submit",
          "[server][unwrap]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.unwrap_max_side = 100;
  TestServer ts(config);
  auto client = Connect(ts);
  TestPhase good = MakePhase(20, 30, DType::kFloat32, 0.0, 1, true);
  struct Case {
    std::string name;
    std::function<void(v1::UnwrapRequest*)> edit;
    std::string field;
  };
  auto set_phase = [](v1::UnwrapRequest* r, const HostArray& a) { ToProto(a, r->mutable_phase()); };
  const std::vector<Case> cases = {
      {"no phase", [](v1::UnwrapRequest* r) { r->clear_phase(); }, "phase"},
      {"1-D phase", [&](v1::UnwrapRequest* r) { set_phase(r, RandomArray(DType::kFloat32, {40})); },
       "phase.shape"},
      {"1 x 5 phase",
       [&](v1::UnwrapRequest* r) {
         r->clear_mask();
         set_phase(r, RandomArray(DType::kFloat32, {1, 5}));
       },
       "phase.shape"},
      {"int32 phase",
       [&](v1::UnwrapRequest* r) {
         set_phase(r, HostArray(DType::kInt32, {20, 30}));
       },
       "phase.dtype"},
      {"over the side limit",
       [&](v1::UnwrapRequest* r) {
         r->clear_mask();
         set_phase(r, RandomArray(DType::kFloat32, {101, 20}));
       },
       "exceeds the limit of 100"},
      {"unmasked NaN", [&](v1::UnwrapRequest* r) { r->clear_mask(); }, "is not finite"},
      {"phase beyond pi",
       [&](v1::UnwrapRequest* r) {
         HostArray p = RandomArray(DType::kFloat64, {20, 30});
         p.data<double>()[7] = 4.0;
         r->clear_mask();
         set_phase(r, p);
       },
       "phase[0,7]"},
      {"float32 mask",
       [&](v1::UnwrapRequest* r) {
         ToProto(RandomArray(DType::kFloat32, {20, 30}), r->mutable_mask());
       },
       "mask.dtype"},
      {"mask of another shape",
       [&](v1::UnwrapRequest* r) {
         ToProto(HostArray(DType::kUint8, {20, 31}), r->mutable_mask());
       },
       "mask.shape"},
      {"bytes not matching the shape",
       [&](v1::UnwrapRequest* r) { r->mutable_phase()->mutable_data()->resize(10); }, "phase"},
      {"quality with least squares",
       [&](v1::UnwrapRequest* r) {
         r->set_method(v1::UNWRAP_METHOD_LEAST_SQUARES);
         ToProto(RandomArray(DType::kFloat32, {20, 30}), r->mutable_quality());
       },
       "quality"},
      {"weights (quality) above 1 with weighted least squares",
       [&](v1::UnwrapRequest* r) {
         r->set_method(v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES);
         HostArray q(DType::kFloat32, {20, 30});
         q.data<float>()[5] = 1.5f;
         ToProto(q, r->mutable_quality());
       },
       "quality[0,5]"},
      {"non-finite quality",
       [&](v1::UnwrapRequest* r) {
         HostArray q = RandomArray(DType::kFloat32, {20, 30});
         q.data<float>()[3] = INFINITY;
         ToProto(q, r->mutable_quality());
       },
       "quality[0,3]"},
      {"iterations out of range",
       [](v1::UnwrapRequest* r) { r->mutable_options()->set_iterations_per_radius(100); },
       "options.iterations_per_radius"},
      {"seed outside the image",
       [](v1::UnwrapRequest* r) {
         r->mutable_options()->mutable_seed()->set_row(20);
         r->mutable_options()->mutable_seed()->set_col(0);
       },
       "seed"},
      {"congruent with Goldstein",
       [](v1::UnwrapRequest* r) { r->mutable_options()->set_congruent(false); },
       "options.congruent"},
      {"unknown method",
       [](v1::UnwrapRequest* r) { r->set_method(static_cast<v1::UnwrapMethod>(7)); }, "method"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    v1::UnwrapRequest request = Request(good);
    c.edit(&request);
    auto sync = client->Unwrap(request);
    CHECK(sync.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(sync.status().message(), c.field));
    auto job = client->SubmitUnwrap(request);
    CHECK(job.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(job.status().message(), c.field));
  }
  // NaN where the mask excludes the pixel is fine.
  CHECK(client->Unwrap(Request(good)).ok());
  auto list = client->ListUnwrapJobs();
  REQUIRE(list.ok());
  CHECK(list->jobs_size() == 0);  // no bad request became a job

  // Unknown and missing job ids.
  const std::string unknown = "00112233445566778899aabbccddeeff";
  for (const absl::Status& st :
       {client->GetUnwrapResult(unknown).status(), client->WatchUnwrap(unknown).status(),
        client->CancelUnwrap(unknown).status(), client->GetUnwrapJob(unknown).status()}) {
    CHECK(st.code() == absl::StatusCode::kNotFound);
    CHECK(Contains(st.message(), "unknown job id"));
  }
  auto empty = client->CancelUnwrap("");
  CHECK(empty.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(empty.status().message(), "job_id"));
  v1::ListJobsRequest bad_page;
  bad_page.set_page_token("nonsense");
  CHECK(client->ListUnwrapJobs(bad_page).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the synchronous Unwrap equals the job's result and the kernels'", "[server][unwrap]") {
  TestServer ts;
  auto client = Connect(ts);
  SECTION("Goldstein, float32, masked, maps") {
    TestPhase p = MakePhase(90, 110, DType::kFloat32, 0.2, 2, true);
    auto sync = client->Unwrap(Request(p));
    REQUIRE(sync.ok());
    const std::string id = Id(client->SubmitUnwrap(Request(p)));
    REQUIRE(client->WatchUnwrap(id).ok());
    auto async = client->GetUnwrapResult(id);
    REQUIRE(async.ok());
    const unwrap::GoldsteinResult want = DirectGoldstein(p);
    CheckEqualsDirect(*sync, want);
    CheckEqualsDirect(*async, want);
    CHECK_FALSE(sync->request_id.empty());
    CHECK(sync->method == v1::UNWRAP_METHOD_GOLDSTEIN);
  }
  SECTION("Goldstein without maps") {
    TestPhase p = MakePhase(50, 70, DType::kFloat64, 0.0, 1, false);
    v1::UnwrapRequest r = Request(p);
    r.mutable_options()->set_return_maps(false);
    auto sync = client->Unwrap(r);
    REQUIRE(sync.ok());
    const unwrap::GoldsteinResult want = DirectGoldstein(p);
    CHECK(Same(sync->unwrapped, want.unwrapped));
    CHECK(sync->residues.ndim() == 0);
    CHECK(sync->cuts.ndim() == 0);
    // The planted vortex pair; about one random image in 50 carries one more residue pair, so the
    // kernel's own count is the reference.
    CHECK(sync->stats.positive_residues() == want.stats.positive_residues);
    CHECK(sync->stats.positive_residues() >= 1);
  }
  SECTION("least squares, float64, both outputs") {
    TestPhase p = MakePhase(64, 80, DType::kFloat64, 0.1, 0, true);
    for (bool congruent : {true, false}) {
      v1::UnwrapRequest r = Request(p, v1::UNWRAP_METHOD_LEAST_SQUARES);
      r.mutable_options()->set_congruent(congruent);
      auto sync = client->Unwrap(r);
      REQUIRE(sync.ok());
      const std::string id = Id(client->SubmitUnwrap(r));
      REQUIRE(client->WatchUnwrap(id).ok());
      auto async = client->GetUnwrapResult(id);
      REQUIRE(async.ok());
      const HostArray want = DirectLeastSquares(p, congruent);
      CHECK(Same(sync->unwrapped, want));
      CHECK(Same(async->unwrapped, want));
      CHECK(sync->method == v1::UNWRAP_METHOD_LEAST_SQUARES);
      CHECK(async->stats.masked_pixels() > 0);
    }
  }
  SECTION("weighted least squares: quality as weights, PCG statistics") {
    TestPhase p = MakePhase(64, 80, DType::kFloat32, 0.3, 1, true);
    HostArray weights(DType::kFloat32, {64, 80});
    for (int64_t i = 0; i < weights.size(); ++i) {
      weights.data<float>()[i] = static_cast<float>(0.2 + 0.8 * ((i * 7919) % 101) / 100.0);
    }
    v1::UnwrapRequest r = Request(p, v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES);
    ToProto(weights, r.mutable_quality());
    auto sync = client->Unwrap(r);
    REQUIRE(sync.ok());
    const std::string id = Id(client->SubmitUnwrap(r));
    REQUIRE(client->WatchUnwrap(id).ok());
    auto async = client->GetUnwrapResult(id);
    REQUIRE(async.ok());
    unwrap::LeastSquaresOptions o;
    o.mask = &p.mask;
    o.weighted = true;
    o.weights = &weights;
    auto want = unwrap::UnwrapLeastSquares(Device::Cpu(), p.phase, o);
    REQUIRE(want.ok());
    CHECK(Same(sync->unwrapped, want->unwrapped));
    CHECK(Same(async->unwrapped, want->unwrapped));
    CHECK(sync->method == v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES);
    CHECK(sync->stats.pcg_iterations() == want->iterations);
    CHECK(sync->stats.pcg_iterations() > 1);
    CHECK(sync->stats.pcg_residual() <= 1e-6);
    auto job = client->GetUnwrapJob(id);
    REQUIRE(job.ok());
    CHECK(job->method() == v1::UNWRAP_METHOD_WEIGHTED_LEAST_SQUARES);
  }
}

TEST_CASE("large arrays travel in chunks both ways under a small message cap", "[server][unwrap]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 16;
  TestServer ts(config);
  auto client = Connect(ts);
  // 256 KiB of phase up (over the 64 KiB cap: the client chunks it), 768 KiB of results down.
  TestPhase p = MakePhase(256, 256, DType::kFloat32, 0.3, 2, true);
  auto sync = client->Unwrap(Request(p));
  CHECK(sync.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string id = Id(client->SubmitUnwrap(Request(p)));
  auto done = client->WatchUnwrap(id);
  REQUIRE(done.ok());
  REQUIRE(done->state() == v1::JOB_STATE_DONE);

  // Raw Get: a header, then several chunks per array, each message under the cap.
  grpc::ClientContext ctx;
  v1::GetUnwrapResultRequest request;
  request.set_job_id(id);
  auto reader = ts.unwrap->Get(&ctx, request);
  v1::GetUnwrapResultResponse message;
  int messages = 0;
  std::map<int, int> chunks;
  while (reader->Read(&message)) {
    CHECK(static_cast<int64_t>(message.ByteSizeLong()) <= config.max_message_bytes);
    if (messages++ == 0) {
      REQUIRE(message.has_result());
      CHECK(message.result().chunked_arrays_size() == 5);
      CHECK_FALSE(message.result().has_unwrapped());
    } else {
      REQUIRE(message.has_chunk());
      ++chunks[message.chunk().array()];
    }
  }
  REQUIRE(reader->Finish().ok());
  CHECK(chunks[v1::UNWRAP_ARRAY_UNWRAPPED] >= 4);
  CHECK(chunks[v1::UNWRAP_ARRAY_REGIONS] >= 4);
  CHECK(chunks.size() == 5);

  auto result = client->GetUnwrapResult(id);
  REQUIRE(result.ok());
  CheckEqualsDirect(*result, DirectGoldstein(p));
  auto small_chunks = client->GetUnwrapResult(id, 4096);
  REQUIRE(small_chunks.ok());
  CHECK(Same(small_chunks->unwrapped, result->unwrapped));
}

TEST_CASE("uploads in progress count against --stream-state-bytes as they arrive",
          "[server][unwrap]") {
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 1 << 16;  // the client sends chunks of ~48 KiB
  config.stream_state_bytes = 1 << 20;
  TestServer ts(config);
  auto client = Connect(ts);
  TestPhase big = MakePhase(1024, 512, DType::kFloat32, 0.3, 2, false);  // 2 MiB up
  auto refused = client->SubmitUnwrap(Request(big));
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(refused.status().message(), "--stream-state-bytes"));
  // The refused upload's bytes were given back: a smaller one fits.
  TestPhase small = MakePhase(256, 256, DType::kFloat32, 0.3, 2, false);  // 256 KiB
  const std::string id = Id(client->SubmitUnwrap(Request(small)));
  auto done = client->WatchUnwrap(id);
  REQUIRE(done.ok());
  CHECK(done->state() == v1::JOB_STATE_DONE);
}

// Bytes of address space this process has mapped (VmSize), or -1.
int64_t MappedBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7)) * 1024;
  }
  return -1;
}

// Issue 13 item 4: under an address-space limit a Submit used to hang (never answered, one more
// in-flight request per call). The upload's growth fails and the call ends RESOURCE_EXHAUSTED; the
// server goes on serving once memory is back.
TEST_CASE("an upload that runs out of address space is RESOURCE_EXHAUSTED, and the server serves on",
          "[server][unwrap]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot be tested");
  return;
#endif
  server::ServerConfig config = TestServer::CpuConfig();
  config.max_message_bytes = 8 << 20;
  config.stream_state_bytes = int64_t{64} << 30;  // the budgets would allow it: the OS does not
  config.job_memory_bytes = int64_t{64} << 30;
  TestServer ts(config);
  const int64_t mapped = MappedBytes();
  REQUIRE(mapped > 0);
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_AS, &old) == 0);
  // 768 MiB above what is mapped now: the upload of 2 GiB cannot fit, a chunk still can.
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(mapped + (int64_t{768} << 20));
  REQUIRE(setrlimit(RLIMIT_AS, &tight) == 0);
  const int64_t rows = 16384, cols = 32768;  // float32: 2 GiB
  const int64_t total = rows * cols * 4;
  grpc::Status st;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::SubmitResponse response;
    auto writer = ts.unwrap->Submit(&ctx, &response);
    v1::SubmitRequest header;
    header.mutable_header()->mutable_request()->mutable_device()->set_kind(v1::DEVICE_KIND_CPU);
    bool ok = writer->Write(header);
    const int64_t chunk_bytes = 4 << 20;
    v1::SubmitRequest m;
    m.mutable_chunk()->set_array(v1::UNWRAP_ARRAY_PHASE);
    v1::ArrayChunk* c = m.mutable_chunk()->mutable_chunk();
    c->set_dtype(v1::FLOAT32);
    c->add_shape(rows);
    c->add_shape(cols);
    c->set_total_bytes(total);
    c->mutable_data()->assign(static_cast<size_t>(chunk_bytes), '\0');
    for (int64_t offset = 0; ok && offset < total; offset += chunk_bytes) {
      c->set_offset_bytes(offset);
      c->set_last(offset + chunk_bytes >= total);
      ok = writer->Write(m);
      if (offset == 0) {  // later chunks need only the data
        c->clear_shape();
        c->set_dtype(v1::DTYPE_UNSPECIFIED);
        c->set_total_bytes(0);
      }
    }
    if (ok) writer->WritesDone();
    st = writer->Finish();
  }
  REQUIRE(setrlimit(RLIMIT_AS, &old) == 0);
  CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(Contains(st.error_message(), "out of host memory"));
  // Nothing is left in flight, and the server still answers.
  auto client = Connect(ts);
  TestPhase small = MakePhase(64, 64, DType::kFloat32, 0.3, 2, false);
  auto done = client->WatchUnwrap(Id(client->SubmitUnwrap(Request(small))));
  REQUIRE(done.ok());
  CHECK(done->state() == v1::JOB_STATE_DONE);
  CHECK(Contains(ts.server->MetricsText(),
                 "fresnel_in_flight_requests{method=\"Submit\",service=\"fresnel.v1.UnwrapService\"} 0"));
}

TEST_CASE("a Submit upload that breaks the chunk protocol is refused", "[server][unwrap]") {
  TestServer ts;
  TestPhase p = MakePhase(32, 32, DType::kFloat32, 0.0, 0, false);
  auto submit = [&](const std::vector<v1::SubmitRequest>& messages) {
    grpc::ClientContext ctx;
    v1::SubmitResponse response;
    auto writer = ts.unwrap->Submit(&ctx, &response);
    for (const v1::SubmitRequest& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  v1::SubmitRequest header;
  v1::UnwrapRequest* r = header.mutable_header()->mutable_request();
  r->mutable_device()->set_kind(v1::DEVICE_KIND_CPU);
  std::vector<v1::ArrayChunk> pieces = SplitIntoChunks(p.phase, 1000);
  auto chunk = [](const v1::ArrayChunk& c, v1::UnwrapArray a) {
    v1::SubmitRequest m;
    m.mutable_chunk()->set_array(a);
    *m.mutable_chunk()->mutable_chunk() = c;
    return m;
  };
  std::vector<v1::SubmitRequest> ok = {header};
  for (const auto& c : pieces) ok.push_back(chunk(c, v1::UNWRAP_ARRAY_PHASE));
  CHECK(submit(ok).ok());
  // The last chunk never came.
  std::vector<v1::SubmitRequest> truncated(ok.begin(), ok.end() - 1);
  grpc::Status st = submit(truncated);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Contains(st.error_message(), "phase"));
  // A chunk first.
  st = submit({ok[1]});
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Contains(st.error_message(), "header"));
  // Inline and chunked at once.
  v1::SubmitRequest both = header;
  ToProto(p.phase, both.mutable_header()->mutable_request()->mutable_phase());
  st = submit({both, ok[1]});
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  // Out of order.
  std::vector<v1::SubmitRequest> swapped = ok;
  std::swap(swapped[1], swapped[2]);
  st = submit(swapped);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(Contains(st.error_message(), "offset_bytes"));
}

TEST_CASE("the unwrap service is listed, healthy and measured", "[server][unwrap]") {
  TestServer ts;
  v1::ServerInfo info;
  grpc::ClientContext ctx;
  REQUIRE(ts.admin->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  CHECK(std::find(info.services().begin(), info.services().end(), "fresnel.v1.UnwrapService") !=
        info.services().end());
  CHECK(info.limits().unwrap_max_side() == 32768);
  CHECK(info.limits().max_jobs() == 64);
  CHECK(info.limits().job_ttl_seconds() == 600);
  auto client = Connect(ts);
  auto health = client->CheckHealth("fresnel.v1.UnwrapService");
  REQUIRE(health.ok());
  CHECK(*health == ServingStatus::kServing);
  TestPhase p = MakePhase(32, 32, DType::kFloat32, 0.0, 0, false);
  const std::string id = Id(client->SubmitUnwrap(Request(p)));
  REQUIRE(client->WatchUnwrap(id).ok());
  const std::string metrics = ts.server->MetricsText();
  CHECK(Contains(metrics, "fresnel_jobs{state=\"done\"} 1"));
  CHECK(Contains(metrics, "fresnel_job_store_bytes"));
  CHECK(Contains(metrics, "method=\"Submit\""));
}

CliResult Cli(const TestServer& ts, std::vector<std::string> args) {
  args.insert(args.begin(), {"--server", ts.address});
  return RunCli(std::move(args));
}

HostArray ReadBack(const std::string& path) {
  auto a = ReadNpy(path);
  REQUIRE(a.ok());
  return std::move(*a);
}

TEST_CASE("fresnel unwrap and fresnel jobs against the server", "[server][unwrap][cli]") {
  TestServer ts;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fresnel_unwrap_e2e_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  TestPhase p = MakePhase(70, 90, DType::kFloat32, 0.0, 2, true);
  REQUIRE(WriteNpy(path("phase.npy"), p.phase).ok());
  REQUIRE(WriteNpy(path("mask.npy"), p.mask).ok());
  const unwrap::GoldsteinResult want = DirectGoldstein(p);

  CliResult r = Cli(ts, {"unwrap", path("phase.npy"), "--mask", path("mask.npy"), "--out",
                         path("out.npy"), "--png", path("preview.png"), "--save-maps"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(Contains(r.out, "goldstein"));
  CHECK(Contains(r.out, absl::StrCat("residues ",
                                     want.stats.positive_residues + want.stats.negative_residues)));
  CHECK(Contains(r.err, "submitted"));
  CHECK(Contains(r.err, "100% done"));
  CHECK(Same(ReadBack(path("out.npy")), want.unwrapped));
  CHECK(Same(ReadBack(path("out_residues.npy")), want.residues));
  CHECK(Same(ReadBack(path("out_cuts.npy")), want.cuts));
  CHECK(Same(ReadBack(path("out_regions.npy")), want.regions));
  CHECK(Same(ReadBack(path("out_unreached.npy")), want.unreached));
  auto png = ReadPng(path("preview.png"));
  REQUIRE(png.ok());
  CHECK(png->shape() == std::vector<int64_t>{70, 2 * 90 + 8, 3});
  const size_t at = r.err.find("fresnel: job ");
  REQUIRE(at != std::string::npos);
  // The whole id, "@instance" included: "fresnel: job ID submitted".
  const size_t end = r.err.find(' ', at + 13);
  REQUIRE(end != std::string::npos);
  const std::string id = r.err.substr(at + 13, end - at - 13);
  CHECK(id.find('@') == 32);

  r = Cli(ts, {"unwrap", path("phase.npy"), "--mask", path("mask.npy"), "--method", "lsq", "--out",
               path("lsq.npy"), "--sync", "--json"});
  REQUIRE(r.code == 0);
  CHECK(Contains(r.out, "\"sync\": true"));
  CHECK(Contains(r.out, "\"method\": \"lsq\""));
  CHECK(Same(ReadBack(path("lsq.npy")), DirectLeastSquares(p, true)));

  r = Cli(ts, {"jobs", "list"});
  REQUIRE(r.code == 0);
  CHECK(Contains(r.out, id));
  CHECK(Contains(r.out, "done"));
  CHECK(Contains(r.out, "70 x 90"));
  r = Cli(ts, {"jobs", "get", id, "--out", path("again.npy")});
  REQUIRE(r.code == 0);
  CHECK(Contains(r.out, "done"));
  CHECK(Same(ReadBack(path("again.npy")), want.unwrapped));
  r = Cli(ts, {"jobs", "get", id, "--json"});
  REQUIRE(r.code == 0);
  CHECK(Contains(r.out, "JOB_STATE_DONE"));
  r = Cli(ts, {"jobs", "cancel", id});
  REQUIRE(r.code == 0);
  CHECK(Contains(r.out, "already done"));
  r = Cli(ts, {"jobs", "get", "00112233445566778899aabbccddeeff"});
  CHECK(r.code == cli::kExitRpc);
  CHECK(Contains(r.err, "NOT_FOUND"));
  // A phase with an unmasked NaN: the server names the pixel.
  r = Cli(ts, {"unwrap", path("phase.npy"), "--out", path("bad.npy")});
  CHECK(r.code == cli::kExitRpc);
  CHECK(Contains(r.err, "INVALID_ARGUMENT: phase["));
  // --shm: the arrays and the result through a region the command makes; as a job, the result
  // is written there when the job finishes (no arrays in Get's answer).
  for (const bool sync : {false, true}) {
    std::vector<std::string> args = {"unwrap", path("phase.npy"), "--mask", path("mask.npy"),
                                     "--out", path("shm.npy"), "--save-maps", "--shm"};
    if (sync) args.push_back("--sync");
    r = Cli(ts, args);
    INFO((sync ? "--sync: " : "job: ") << r.err);
    REQUIRE(r.code == 0);
    CHECK(Contains(r.out, "through shared memory"));
    CHECK(!Contains(r.err, "warning"));
    CHECK(Same(ReadBack(path("shm.npy")), want.unwrapped));
    CHECK(Same(ReadBack(path("shm_regions.npy")), want.regions));
    CHECK(Same(ReadBack(path("shm_cuts.npy")), want.cuts));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a GPU server unwraps like the CPU, bit for bit (Goldstein)", "[gpu][server][unwrap]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  // Noisy without a mask, and masked with the vortex residues only: docs/unwrap.md ("Status")
  // still lists dense residues next to masks as diverging on the GPU, which is the kernels' own
  // open item and is tested in tests/kernels/unwrap.
  struct Case {
    DType dtype;
    double sigma;
    bool masked;
  };
  for (const Case& c : {Case{DType::kFloat32, 0.4, false}, Case{DType::kFloat64, 0.0, true}}) {
    TestPhase p = MakePhase(300, 420, c.dtype, c.sigma, 3, c.masked);
    const unwrap::GoldsteinResult want = DirectGoldstein(p);
    v1::UnwrapRequest r = Request(p);
    r.mutable_device()->set_kind(v1::DEVICE_KIND_GPU);
    const std::string id = Id(client->SubmitUnwrap(r));
    auto done = client->WatchUnwrap(id);
    REQUIRE(done.ok());
    REQUIRE(done->state() == v1::JOB_STATE_DONE);
    CHECK(done->device().rfind("cuda:", 0) == 0);
    auto async = client->GetUnwrapResult(id);
    REQUIRE(async.ok());
    CheckEqualsDirect(*async, want);
    auto sync = client->Unwrap(r);
    REQUIRE(sync.ok());
    CHECK(sync->info.device().rfind("cuda:", 0) == 0);
    CheckEqualsDirect(*sync, want);
  }
}

// ---------------------------------------------------------------------------------------------
// Shared-memory regions (docs/transport.md, "Which requests accept it", "Outputs to a region").

v1::UnwrapResponse RawUnwrap(const TestServer& ts, const v1::UnwrapRequest& request,
                             grpc::Status* status) {
  grpc::ClientContext context;
  v1::UnwrapResponse response;
  *status = ts.unwrap->Unwrap(&context, request, &response);
  return response;
}

absl::Status UnwrapStatus(const TestServer& ts, const v1::UnwrapRequest& request) {
  grpc::Status st;
  RawUnwrap(ts, request, &st);
  return FromGrpcStatus(static_cast<int>(st.error_code()), st.error_message());
}

// Get's messages for `job` with `out_shm` (when set); the status in *status.
std::vector<v1::GetUnwrapResultResponse> RawGet(const TestServer& ts, const std::string& job,
                                                const v1::ShmRef* out_shm, absl::Status* status) {
  grpc::ClientContext context;
  v1::GetUnwrapResultRequest request;
  request.set_job_id(job);
  if (out_shm != nullptr) *request.mutable_out_shm() = *out_shm;
  auto reader = ts.unwrap->Get(&context, request);
  return ReadToEnd<v1::GetUnwrapResultResponse>(reader, status);
}

// Unwrap, Submit + Get and the client library with inputs and outputs in a region give the
// inline call's bits, on `kind`'s devices.
void CheckUnwrapThroughRegion(const TestServer& ts, Client* client, v1::DeviceKind kind) {
  TestPhase p = MakePhase(90, 110, DType::kFloat32, 0.2, 2, true);
  v1::UnwrapRequest inline_req = Request(p);
  inline_req.mutable_device()->set_kind(kind);
  inline_req.set_request_id("same");
  grpc::Status st;
  v1::UnwrapResponse want = RawUnwrap(ts, inline_req, &st);
  REQUIRE(st.ok());
  ClearTimes(&want);
  auto region = SharedRegion::Create(client, "unwrap-io", 1 << 20);
  REQUIRE(region.ok());

  // Inputs and outputs in the region.
  v1::UnwrapRequest req = inline_req;
  auto end = (*region)->PutArrays(&req, 128);
  REQUIRE(end.ok());
  CHECK(req.phase().has_shm());
  CHECK(req.mask().has_shm());
  CHECK(req.phase().data().empty());
  *req.mutable_out_shm() = (*region)->OutRef(*end);
  v1::UnwrapResponse got = RawUnwrap(ts, req, &st);
  INFO(st.error_message());
  REQUIRE(st.ok());
  v1::UnwrapResponse want_copy = want;
  CHECK(CheckArraysInRegion(&want_copy, &got, **region, *end) == 5);
  ClearTimes(&got);
  CHECK(got.SerializeAsString() == want.SerializeAsString());

  // Inputs in the region, outputs inline; inputs inline, outputs in the region.
  v1::UnwrapRequest in_only = req;
  in_only.clear_out_shm();
  v1::UnwrapResponse inline_out = RawUnwrap(ts, in_only, &st);
  REQUIRE(st.ok());
  ClearTimes(&inline_out);
  CHECK(inline_out.SerializeAsString() == want.SerializeAsString());
  v1::UnwrapRequest out_only = inline_req;
  *out_only.mutable_out_shm() = (*region)->OutRef(4096 * 16);
  got = RawUnwrap(ts, out_only, &st);
  REQUIRE(st.ok());
  want_copy = want;
  CHECK(CheckArraysInRegion(&want_copy, &got, **region, 4096 * 16) == 5);

  // The client library reads results in a region back: the same UnwrapResult.
  auto lib_inline = client->Unwrap(inline_req);
  auto lib_region = client->Unwrap(req);
  REQUIRE(lib_inline.ok());
  REQUIRE(lib_region.ok());
  CHECK(Same(lib_region->unwrapped, lib_inline->unwrapped));
  CHECK(Same(lib_region->regions, lib_inline->regions));
  CHECK(Same(lib_region->residues, lib_inline->residues));

  // Or leaves them there (CallOptions::results_in_region): views of the region, same bits.
  CallOptions in_region;
  in_region.results_in_region = true;
  auto lib_views = client->Unwrap(req, in_region);
  REQUIRE(lib_views.ok());
  const char* base = static_cast<const char*>((*region)->data());
  for (const HostArray* a : {&lib_views->unwrapped, &lib_views->residues, &lib_views->cuts,
                             &lib_views->regions, &lib_views->unreached}) {
    CHECK(a->borrowed());
    CHECK(static_cast<const char*>(a->raw()) >= base + *end);
    CHECK(static_cast<const char*>(a->raw()) + a->nbytes() <= base + (1 << 20));
  }
  CHECK(Same(lib_views->unwrapped, lib_inline->unwrapped));
  CHECK(Same(lib_views->regions, lib_inline->regions));
  CHECK(Same(lib_views->cuts, lib_inline->cuts));

  // The result over its own input (out_shm where the phase lies): the phase was read before any
  // of the result is written, on the CPU (a copy of its own) and on a GPU (the upload comes
  // first) alike, so the bits are the inline ones.
  v1::UnwrapRequest in_place = inline_req;
  REQUIRE((*region)->PutArrays(&in_place, 1 << 18).ok());
  *in_place.mutable_out_shm() = (*region)->OutRef(1 << 18);
  got = RawUnwrap(ts, in_place, &st);
  INFO(st.error_message());
  REQUIRE(st.ok());
  want_copy = want;
  CHECK(CheckArraysInRegion(&want_copy, &got, **region, 1 << 18) == 5);

  // A job: the inputs are copied out when Submit returns (the region is rewritten at once), and
  // Get writes the result into the region (one header message, no chunks).
  v1::UnwrapRequest job_req = req;
  job_req.clear_out_shm();
  const std::string id = Id(client->SubmitUnwrap(job_req));
  std::memset((*region)->data(), 0x7f, static_cast<size_t>(*end));
  REQUIRE(client->WatchUnwrap(id).ok());
  absl::Status get_status;
  const v1::ShmRef out = (*region)->OutRef(8192);
  std::vector<v1::GetUnwrapResultResponse> messages = RawGet(ts, id, &out, &get_status);
  REQUIRE(get_status.ok());
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].result().chunked_arrays_size() == 0);
  v1::UnwrapResponse job_got = messages[0].result();
  want_copy = want;
  CHECK(CheckArraysInRegion(&want_copy, &job_got, **region, 8192) == 5);
  auto lib_job = client->GetUnwrapResult(id, 0, {}, &out);
  REQUIRE(lib_job.ok());
  CHECK(Same(lib_job->unwrapped, lib_inline->unwrapped));
  CHECK(Same(lib_job->cuts, lib_inline->cuts));

  // A job whose Submit names out_shm writes its result there as it finishes and keeps none of
  // its bytes: Get's one message names the region, and a Get with an out_shm of its own is
  // refused. The client library reads the arrays back from the region.
  v1::UnwrapRequest at_finish = inline_req;
  REQUIRE((*region)->PutArrays(&at_finish, 128).ok());  // the memset above wiped them
  *at_finish.mutable_out_shm() = (*region)->OutRef(1 << 19);
  const std::string finished = Id(client->SubmitUnwrap(at_finish));
  auto finished_state = client->WatchUnwrap(finished);
  REQUIRE(finished_state.ok());
  REQUIRE(finished_state->state() == v1::JOB_STATE_DONE);
  CHECK(finished_state->result_bytes() == 0);
  messages = RawGet(ts, finished, nullptr, &get_status);
  REQUIRE(get_status.ok());
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].result().chunked_arrays_size() == 0);
  CHECK(messages[0].result().out_shm_error().empty());
  job_got = messages[0].result();
  want_copy = want;
  CHECK(CheckArraysInRegion(&want_copy, &job_got, **region, 1 << 19) == 5);
  RawGet(ts, finished, &out, &get_status);
  CHECK(StatusNames(get_status, absl::StatusCode::kInvalidArgument, "out_shm"));
  auto lib_finished = client->GetUnwrapResult(finished);
  REQUIRE(lib_finished.ok());
  CHECK(lib_finished->out_shm_error.empty());
  CHECK(Same(lib_finished->unwrapped, lib_inline->unwrapped));
  CHECK(Same(lib_finished->unreached, lib_inline->unreached));
}

TEST_CASE("Unwrap and jobs with arrays in a shared region give the inline bits", "[server][unwrap][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  CheckUnwrapThroughRegion(ts, client.get(), v1::DEVICE_KIND_CPU);
}

TEST_CASE("Unwrap and jobs: bad regions get the right codes naming the field, and the server serves on",
          "[server][unwrap][shm]") {
  TestServer ts;
  auto client = Connect(ts);
  TestPhase p = MakePhase(40, 50, DType::kFloat64, 0.1, 1, true);
  const v1::UnwrapRequest inline_req = Request(p);
  auto region = SharedRegion::Create(client.get(), "r", 1 << 16);
  REQUIRE(region.ok());
  v1::UnwrapRequest req = inline_req;
  auto end = (*region)->PutArrays(&req, 0);
  REQUIRE(end.ok());

  v1::UnwrapRequest bad = req;
  bad.mutable_phase()->mutable_shm()->set_region("missing");
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kNotFound, "phase.shm.region"));
  CHECK(StatusNames(client->SubmitUnwrap(bad).status(), absl::StatusCode::kNotFound,
                    "phase.shm.region"));
  bad = req;
  bad.mutable_mask()->mutable_shm()->set_offset_bytes((1 << 16) - 10);
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kInvalidArgument,
                    "mask.shm.offset_bytes"));
  bad = req;
  bad.mutable_phase()->mutable_shm()->set_offset_bytes(-64);
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kInvalidArgument,
                    "phase.shm.offset_bytes"));
  bad = req;
  bad.mutable_phase()->set_data("x");
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kInvalidArgument, "phase: set data or shm"));
  bad = req;
  bad.mutable_phase()->add_shape(1LL << 40);
  bad.mutable_phase()->add_shape(1LL << 40);
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kInvalidArgument, "phase.shape"));
  // Outputs: an unknown region, a range too small, a negative offset; nothing runs.
  bad = inline_req;
  *bad.mutable_out_shm() = (*region)->OutRef(0);
  bad.mutable_out_shm()->set_region("missing");
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kNotFound, "out_shm.region"));
  *bad.mutable_out_shm() = (*region)->OutRef((1 << 16) - 4096);  // 40*50*16 bytes do not fit
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kInvalidArgument,
                    "out_shm.offset_bytes"));
  *bad.mutable_out_shm() = (*region)->OutRef(-1);
  CHECK(StatusNames(UnwrapStatus(ts, bad), absl::StatusCode::kInvalidArgument,
                    "out_shm.offset_bytes"));
  // A Submit's out_shm is checked before the job is created.
  v1::UnwrapRequest submit_out = inline_req;
  *submit_out.mutable_out_shm() = (*region)->OutRef(0);
  submit_out.mutable_out_shm()->set_region("missing");
  CHECK(StatusNames(client->SubmitUnwrap(submit_out).status(), absl::StatusCode::kNotFound,
                    "out_shm.region"));
  for (int64_t offset : {int64_t{(1 << 16) - 4096}, int64_t{-64}}) {  // too small, negative
    *submit_out.mutable_out_shm() = (*region)->OutRef(offset);
    CHECK(StatusNames(client->SubmitUnwrap(submit_out).status(),
                      absl::StatusCode::kInvalidArgument, "out_shm.offset_bytes"));
  }
  auto listed = client->ListUnwrapJobs();
  REQUIRE(listed.ok());
  CHECK(listed->jobs_size() == 0);

  // Get into a region that is too small, or that was unregistered after Submit: refused, and the
  // result is still there to fetch inline.
  const std::string id = Id(client->SubmitUnwrap(req));
  REQUIRE(client->WatchUnwrap(id).ok());
  absl::Status st;
  const v1::ShmRef tight = (*region)->OutRef((1 << 16) - 1000);
  RawGet(ts, id, &tight, &st);
  CHECK(StatusNames(st, absl::StatusCode::kInvalidArgument, "out_shm.offset_bytes"));
  REQUIRE((*region)->Unregister().ok());
  const v1::ShmRef gone = (*region)->OutRef(0);
  RawGet(ts, id, &gone, &st);
  CHECK(StatusNames(st, absl::StatusCode::kNotFound, "out_shm.region"));
  CHECK(StatusNames(UnwrapStatus(ts, req), absl::StatusCode::kNotFound, "phase.shm.region"));
  auto fetched = client->GetUnwrapResult(id);
  REQUIRE(fetched.ok());
  auto fresh = client->Unwrap(inline_req);
  REQUIRE(fresh.ok());
  CHECK(Same(fetched->unwrapped, fresh->unwrapped));
}

TEST_CASE("a job whose out_shm region is gone when it finishes keeps its result and says why",
          "[server][unwrap][shm]") {
  TestServer ts(OneWorker());
  auto client = Connect(ts);
  TestPhase p = MakePhase(40, 50, DType::kFloat64, 0.1, 1, true);
  const v1::UnwrapRequest inline_req = Request(p);
  auto region = SharedRegion::Create(client.get(), "gone-by-then", 1 << 16);
  REQUIRE(region.ok());
  // The job waits behind the blocker on the one CPU worker while its region is unregistered.
  const std::string blocker = Id(client->SubmitUnwrap(BlockerRequest()));
  v1::UnwrapRequest req = inline_req;
  *req.mutable_out_shm() = (*region)->OutRef(0);
  const std::string id = Id(client->SubmitUnwrap(req));
  REQUIRE((*region)->Unregister().ok());
  StopBlocker(*client, blocker);
  auto done = client->WatchUnwrap(id);
  REQUIRE(done.ok());
  CHECK(done->state() == v1::JOB_STATE_DONE);
  CHECK(done->result_bytes() > 0);
  absl::Status st;
  std::vector<v1::GetUnwrapResultResponse> messages = RawGet(ts, id, nullptr, &st);
  REQUIRE(st.ok());
  REQUIRE(!messages.empty());
  INFO(messages[0].result().out_shm_error());
  CHECK(Contains(messages[0].result().out_shm_error(), "NOT_FOUND"));
  CHECK(Contains(messages[0].result().out_shm_error(), "out_shm.region"));
  CHECK(messages[0].result().chunked_arrays_size() == 5);
  CHECK(!messages[0].result().unwrapped().has_shm());
  auto fetched = client->GetUnwrapResult(id);
  REQUIRE(fetched.ok());
  CHECK(fetched->out_shm_error == messages[0].result().out_shm_error());
  auto fresh = client->Unwrap(inline_req);
  REQUIRE(fresh.ok());
  CHECK(Same(fetched->unwrapped, fresh->unwrapped));
  CHECK(Same(fetched->regions, fresh->regions));
}

TEST_CASE("another client's region is NOT_FOUND for Unwrap's inputs and outputs",
          "[server][unwrap][shm][auth]") {
  const std::filesystem::path tokens =
      std::filesystem::temp_directory_path() / absl::StrCat("fresnel-regions-tokens-", getpid());
  std::ofstream(tokens) << "alice aaaaaaaaaaaaaaaaaaaaaaaa\nbob bbbbbbbbbbbbbbbbbbbbbbbb\n";
  server::ServerConfig config = TestServer::CpuConfig();
  config.token_file = tokens.string();
  TestServer ts(config);
  auto connect = [&](const char* token) {
    ClientOptions o;
    o.address = ts.address;
    o.token = token;
    o.default_timeout = std::chrono::seconds(60);
    auto c = Client::Connect(o);
    REQUIRE(c.ok());
    return std::move(*c);
  };
  auto alice = connect("aaaaaaaaaaaaaaaaaaaaaaaa");
  auto bob = connect("bbbbbbbbbbbbbbbbbbbbbbbb");
  TestPhase p = MakePhase(30, 40, DType::kFloat32, 0.0, 1, false);
  auto region = SharedRegion::Create(alice.get(), "mine", 1 << 16);
  REQUIRE(region.ok());
  v1::UnwrapRequest req = Request(p);
  auto end = (*region)->PutArrays(&req, 0);
  REQUIRE(end.ok());
  *req.mutable_out_shm() = (*region)->OutRef(*end);
  REQUIRE(alice->Unwrap(req).ok());
  CHECK(StatusNames(bob->Unwrap(req).status(), absl::StatusCode::kNotFound, "phase.shm.region"));
  v1::UnwrapRequest out_only = Request(p);
  *out_only.mutable_out_shm() = (*region)->OutRef(*end);
  CHECK(StatusNames(bob->Unwrap(out_only).status(), absl::StatusCode::kNotFound,
                    "out_shm.region"));
  CHECK(alice->Unwrap(req).ok());  // still alice's, still served
  std::filesystem::remove(tokens);
}

TEST_CASE("a GPU server: Unwrap and jobs through a shared region give the inline bits",
          "[gpu][server][unwrap][shm]") {
  if (SkipWithoutGpu()) return;
  server::ServerConfig config = TestServer::CpuConfig();
  config.gpus = "all";
  TestServer ts(config);
  auto client = Connect(ts);
  CheckUnwrapThroughRegion(ts, client.get(), v1::DEVICE_KIND_GPU);
}

}  // namespace
}  // namespace fresnel::testing
