#include "server/jobs.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "server/ids.h"
#include "server/metrics.h"

namespace fresnel::server {
namespace {

std::string FormatWallTime(std::chrono::system_clock::time_point t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

constexpr JobState kAllStates[] = {JobState::kQueued, JobState::kRunning, JobState::kDone,
                                   JobState::kFailed, JobState::kCancelled};

}  // namespace

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

// The keys_ entry of an owner's idempotency key: owner names never hold a newline (server/auth.h).
std::string OwnedKey(const std::string& owner, const std::string& key) {
  return absl::StrCat(owner, "\n", key);
}

}  // namespace

struct JobStore::Record {
  JobSnapshot snap;
  std::string owner;
  std::string idempotency_key;  // OwnedKey(owner, key); empty without a key
  uint64_t fingerprint = 0;
  uint64_t seq = 0;
  int64_t held_bytes = 0;    // counted in JobStore::held_bytes_
  std::shared_ptr<Job> job;  // the pool's job, until the job is terminal
  std::shared_ptr<const JobOutput> output;
  SteadyClock::time_point accepted;
  SteadyClock::time_point finished_at;
  std::map<uint64_t, Listener> listeners;
};

JobStore::JobStore(JobStoreOptions options, DevicePool* pool, Metrics* metrics)
    : options_(std::move(options)), pool_(pool), metrics_(metrics) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PublishMetricsLocked();
  }
  sweeper_ = std::thread([this] { SweepLoop(); });
}

JobStore::~JobStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  sweep_cv_.notify_all();
  sweeper_.join();
}

int64_t JobStore::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

std::string JobStore::NewIdLocked() {
  // 128 bits from the OS's random source (std::random_device reads it directly, unlike a seeded
  // PRNG whose later outputs follow from earlier ones): ids cannot be guessed from other ids.
  for (;;) {
    std::string id =
        absl::StrFormat("%08x%08x%08x%08x", random_(), random_(), random_(), random_());
    if (!options_.instance.empty()) absl::StrAppend(&id, "@", options_.instance);
    if (jobs_.count(id) == 0 && dropped_.count(id) == 0) return id;
  }
}

JobStore::Record* JobStore::FindLocked(const std::string& id, const std::string& owner,
                                       absl::Status* not_found) {
  auto it = jobs_.find(id);
  if (it != jobs_.end() && it->second->owner == owner) return it->second.get();
  auto gone = dropped_.find(id);
  if (gone != dropped_.end() && gone->second.owner == owner) {
    *not_found = absl::NotFoundError(gone->second.reason);
    return nullptr;
  }
  const size_t at = id.rfind('@');
  if (at != std::string::npos && !options_.instance.empty() &&
      id.compare(at + 1, std::string::npos, options_.instance) != 0) {
    *not_found = absl::NotFoundError(absl::StrCat("job ", EchoId(id), " belongs to instance ",
                                                  EchoId(id.substr(at + 1)),
                                                  "; this is instance ", options_.instance));
    return nullptr;
  }
  *not_found = absl::NotFoundError(absl::StrCat("unknown job id '", EchoId(id), "'"));
  return nullptr;
}

JobSnapshot JobStore::SnapshotLocked(const Record& r) const { return r.snap; }

void JobStore::NotifyLocked(Record& r) {
  if (r.listeners.empty()) return;
  const JobSnapshot snap = SnapshotLocked(r);
  for (auto& entry : r.listeners) entry.second(snap);
}

absl::StatusOr<JobStore::Submitted> JobStore::Submit(JobSpec spec) {
  if (!spec.run) return absl::InternalError("JobSpec.run is empty");
  // The store keeps these for the job's whole life (and List returns them): bounded, and counted
  // in the bytes the job holds.
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{
                                        "request_id", &spec.request_id},
                                    {"idempotency_key", &spec.idempotency_key}}) {
    if (value->size() > kMaxJobStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": at most ", kMaxJobStringBytes,
                                                     " bytes, got ", value->size()));
    }
  }
  const int64_t need = spec.input_bytes + spec.output_bytes +
                       static_cast<int64_t>(spec.request_id.size() + spec.idempotency_key.size());
  auto job = std::make_shared<Job>();
  Submitted submitted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ExpireLocked(SteadyClock::now());
    if (!spec.idempotency_key.empty()) {
      auto k = keys_.find(OwnedKey(spec.owner, spec.idempotency_key));
      if (k != keys_.end()) {
        const Record& r = *jobs_.at(k->second);
        if (r.fingerprint != spec.fingerprint) {
          return absl::InvalidArgumentError(
              absl::StrCat("idempotency_key '", spec.idempotency_key, "' already names job ",
                           r.snap.id, ", which was submitted with a different request"));
        }
        submitted.job = SnapshotLocked(r);
        submitted.existing = true;
        return submitted;
      }
    }
    if (unfinished_ >= options_.max_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many unfinished jobs: ", unfinished_, " are queued or running and the limit is ",
          options_.max_jobs, " (--max-jobs); retry when some have finished"));
    }
    if (!MakeRoomLocked(need)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the job needs ", need, " bytes for its input and result, but unfinished jobs hold ",
          held_bytes_, " of the job store's ", options_.memory_bytes,
          " bytes (--job-memory-bytes); retry when some have finished"));
    }
    auto record = std::make_unique<Record>();
    Record& r = *record;
    r.snap.id = NewIdLocked();
    r.snap.state = JobState::kQueued;
    r.snap.method = spec.method;
    r.snap.method_code = spec.method_code;
    r.snap.dtype = spec.dtype;
    r.snap.shape = spec.shape;
    r.snap.request_id = spec.request_id;
    r.snap.created = std::chrono::system_clock::now();
    r.snap.version = 1;
    r.owner = spec.owner;
    if (!spec.idempotency_key.empty()) r.idempotency_key = OwnedKey(spec.owner, spec.idempotency_key);
    r.fingerprint = spec.fingerprint;
    r.seq = next_seq_++;
    r.held_bytes = need;
    r.job = job;
    r.accepted = SteadyClock::now();
    held_bytes_ += need;
    ++unfinished_;
    by_seq_.emplace(r.seq, r.snap.id);
    if (!r.idempotency_key.empty()) keys_.emplace(r.idempotency_key, r.snap.id);
    submitted.job = SnapshotLocked(r);
    jobs_.emplace(r.snap.id, std::move(record));
    PublishMetricsLocked();
  }

  const std::string id = submitted.job.id;
  job->service = std::move(spec.service);
  job->method = std::move(spec.rpc_method);
  job->preference = spec.preference;
  job->device_bytes = spec.device_bytes;
  const Job* self = job.get();  // outlives its run function
  job->run = [this, id, self, run = std::move(spec.run)](const Device& device,
                                                         StageTimes* times) -> absl::Status {
    if (!MarkRunning(id, device)) return absl::CancelledError("cancelled before it started");
    // Stops when the job's client cancels it and when the pool cancels it (drain timeout).
    JobProgressFn progress = [this, id, self](const std::string& stage, double stage_fraction,
                                              double overall) {
      return Progress(id, stage, stage_fraction, overall) && !self->cancelled();
    };
    absl::StatusOr<std::shared_ptr<const JobOutput>> output = run(device, times, progress);
    if (!output.ok()) return output.status();
    if (*output == nullptr) return absl::InternalError("the job produced no output");
    SetOutput(id, *std::move(output));
    return absl::OkStatus();
  };
  job->done = [this, id](const absl::Status& status, const JobReport& report) {
    Complete(id, status, report);
  };
  absl::Status queued = pool_->Submit(job);
  if (!queued.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    RemoveRejectedLocked(id, queued);
    return queued;
  }
  return submitted;
}

void JobStore::RemoveRejectedLocked(const std::string& id, const absl::Status& why) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Record& r = *it->second;
  held_bytes_ -= r.held_bytes;
  --unfinished_;
  if (!r.idempotency_key.empty()) {
    auto k = keys_.find(r.idempotency_key);
    if (k != keys_.end() && k->second == id) keys_.erase(k);
  }
  by_seq_.erase(r.seq);
  // Someone may have learnt the id through the idempotency key meanwhile.
  RememberDroppedLocked(id, r.owner,
                        absl::StrCat("job ", id, " was not accepted: ", why.ToString()));
  jobs_.erase(it);
  PublishMetricsLocked();
}

absl::StatusOr<JobSnapshot> JobStore::Get(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(SteadyClock::now());
  absl::Status not_found;
  Record* r = FindLocked(id, owner, &not_found);
  if (r == nullptr) return not_found;
  return SnapshotLocked(*r);
}

absl::StatusOr<JobStore::Result> JobStore::GetResult(const std::string& id,
                                                     const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(SteadyClock::now());
  absl::Status not_found;
  Record* r = FindLocked(id, owner, &not_found);
  if (r == nullptr) return not_found;
  switch (r->snap.state) {
    case JobState::kDone: return Result{SnapshotLocked(*r), r->output};
    case JobState::kQueued:
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " is queued; Watch it until it is done"));
    case JobState::kRunning:
      return absl::FailedPreconditionError(absl::StrFormat(
          "job %s is running (%s, %.0f %%); Watch it until it is done", id,
          r->snap.stage.empty() ? "starting" : r->snap.stage, 100 * r->snap.progress));
    case JobState::kCancelled:
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " was cancelled and has no result"));
    case JobState::kFailed:
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " failed and has no result: ", r->snap.status.ToString()));
  }
  return absl::InternalError("unknown job state");
}

absl::StatusOr<JobSnapshot> JobStore::Cancel(const std::string& id, const std::string& owner) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ExpireLocked(SteadyClock::now());
    absl::Status not_found;
    Record* r = FindLocked(id, owner, &not_found);
    if (r == nullptr) return not_found;
    if (IsTerminal(r->snap.state)) return SnapshotLocked(*r);
    if (!r->snap.cancel_requested) {
      r->snap.cancel_requested = true;
      ++r->snap.version;
      NotifyLocked(*r);
    }
    job = r->job;
  }
  // A queued job is taken out of its queue and completed (Complete takes the lock) right here;
  // a running one sees cancel_requested at its next progress report.
  if (job) job->Cancel();
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status not_found;
  Record* r = FindLocked(id, owner, &not_found);
  if (r == nullptr) return not_found;  // finished and dropped meanwhile (a TTL of zero)
  return SnapshotLocked(*r);
}

absl::StatusOr<JobStore::Page> JobStore::List(int page_size, const std::string& page_token,
                                              const std::string& owner, const SizeOf& size_of,
                                              int64_t max_page_bytes) {
  if (page_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_size must be >= 0, got ", page_size));
  }
  const size_t size = page_size == 0 ? 100 : static_cast<size_t>(std::min(page_size, 1000));
  uint64_t before = std::numeric_limits<uint64_t>::max();
  if (!page_token.empty() && (!absl::SimpleAtoi(page_token, &before) || before == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token '", page_token, "' is not a token this server returned"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(SteadyClock::now());
  Page page;
  // Walks from newest to oldest, skipping other owners' jobs; the token is the sequence number of
  // the last job returned, set only when an older job of `owner` remains.
  auto it = by_seq_.lower_bound(before);
  uint64_t last_seq = 0;
  int64_t page_bytes = 0;
  while (it != by_seq_.begin()) {
    --it;
    const Record& r = *jobs_.at(it->second);
    if (r.owner != owner) continue;
    if (page.jobs.size() == size) {
      page.next_page_token = absl::StrCat(last_seq);
      break;
    }
    JobSnapshot snap = SnapshotLocked(r);
    if (size_of) {
      const int64_t bytes = size_of(snap);
      if (!page.jobs.empty() && bytes > max_page_bytes - page_bytes) {
        page.next_page_token = absl::StrCat(last_seq);
        break;
      }
      page_bytes += bytes;
    }
    page.jobs.push_back(std::move(snap));
    last_seq = it->first;
  }
  return page;
}

absl::StatusOr<uint64_t> JobStore::Subscribe(const std::string& id, const std::string& owner,
                                             Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(SteadyClock::now());
  absl::Status not_found;
  Record* r = FindLocked(id, owner, &not_found);
  if (r == nullptr) return not_found;
  const uint64_t token = next_token_++;
  listener(SnapshotLocked(*r));
  r->listeners.emplace(token, std::move(listener));
  return token;
}

void JobStore::Unsubscribe(const std::string& id, uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it != jobs_.end()) it->second->listeners.erase(token);
}

bool JobStore::MarkRunning(const std::string& id, const Device& device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  Record& r = *it->second;
  if (r.snap.cancel_requested) return false;
  r.snap.state = JobState::kRunning;
  r.snap.started = std::chrono::system_clock::now();
  r.snap.report.device = device.Name();
  ++r.snap.version;
  NotifyLocked(r);
  PublishMetricsLocked();
  return true;
}

bool JobStore::Progress(const std::string& id, const std::string& stage, double stage_fraction,
                        double progress) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  Record& r = *it->second;
  stage_fraction = std::clamp(stage_fraction, 0.0, 1.0);
  progress = std::clamp(progress, 0.0, 1.0);
  if (r.snap.state == JobState::kRunning &&
      (stage != r.snap.stage || stage_fraction != r.snap.stage_fraction ||
       progress != r.snap.progress)) {
    r.snap.stage = stage;
    r.snap.stage_fraction = stage_fraction;
    r.snap.progress = progress;
    ++r.snap.version;
    NotifyLocked(r);
  }
  return !r.snap.cancel_requested;
}

void JobStore::SetOutput(const std::string& id, std::shared_ptr<const JobOutput> output) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it != jobs_.end()) it->second->output = std::move(output);
}

void JobStore::Complete(const std::string& id, const absl::Status& status,
                        const JobReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Record& r = *it->second;
  JobState state;
  absl::Status final_status = status;
  if (status.ok() && r.output) {
    state = JobState::kDone;
  } else if (status.ok()) {
    state = JobState::kFailed;
    final_status = absl::InternalError("the job finished without an output");
  } else if (status.code() == absl::StatusCode::kCancelled) {
    state = JobState::kCancelled;
  } else {
    state = JobState::kFailed;
  }
  if (state != JobState::kDone) r.output.reset();
  --unfinished_;
  held_bytes_ -= r.held_bytes;
  r.held_bytes = r.output ? r.output->bytes() : 0;
  held_bytes_ += r.held_bytes;
  r.finished_at = SteadyClock::now();
  const std::string device = r.snap.report.device;
  r.snap.state = state;
  r.snap.status = state == JobState::kDone ? absl::OkStatus() : final_status;
  r.snap.report = report;
  if (r.snap.report.device.empty()) r.snap.report.device = device;
  r.snap.finished = std::chrono::system_clock::now();
  r.snap.expires =
      r.snap.finished + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(options_.ttl_s));
  r.snap.total_s = std::chrono::duration<double>(r.finished_at - r.accepted).count();
  r.snap.result_bytes = r.held_bytes;
  if (state == JobState::kDone) {
    r.snap.stage = "done";
    r.snap.stage_fraction = 1;
    r.snap.progress = 1;
  }
  ++r.snap.version;
  // The pool, or whoever completes the job, still holds its own reference.
  r.job.reset();
  finished_order_.push_back(id);
  NotifyLocked(r);
  MakeRoomLocked(0);
  PublishMetricsLocked();
  sweep_cv_.notify_all();
}

void JobStore::ExpireLocked(SteadyClock::time_point now) {
  const auto ttl = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(options_.ttl_s));
  bool dropped = false;
  while (!finished_order_.empty()) {
    const std::string id = finished_order_.front();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {  // evicted already
      finished_order_.pop_front();
      continue;
    }
    const Record& r = *it->second;
    if (r.finished_at + ttl > now) break;
    finished_order_.pop_front();
    const std::string what = r.snap.state == JobState::kDone
                                 ? absl::StrCat("result of job ", id)
                                 : absl::StrCat("job ", id, " (", JobStateName(r.snap.state), ")");
    DropLocked(id,
               absl::StrFormat("%s expired after its TTL of %g s: it finished at %s and the "
                               "server keeps finished jobs for --job-ttl seconds",
                               what, options_.ttl_s, FormatWallTime(r.snap.finished)),
               "expired");
    dropped = true;
  }
  if (dropped) PublishMetricsLocked();
}

bool JobStore::MakeRoomLocked(int64_t more) {
  if (held_bytes_ + more <= options_.memory_bytes) return true;
  // Evict nothing unless evicting is enough.
  int64_t evictable = 0;
  for (const auto& entry : jobs_) {
    if (entry.second->snap.state == JobState::kDone) evictable += entry.second->held_bytes;
  }
  if (held_bytes_ - evictable + more > options_.memory_bytes) return false;
  size_t i = 0;
  while (held_bytes_ + more > options_.memory_bytes && i < finished_order_.size()) {
    const std::string id = finished_order_[i];
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      finished_order_.erase(finished_order_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const Record& r = *it->second;
    if (r.snap.state != JobState::kDone || r.held_bytes == 0) {
      ++i;
      continue;
    }
    finished_order_.erase(finished_order_.begin() + static_cast<std::ptrdiff_t>(i));
    DropLocked(id,
               absl::StrFormat("result of job %s was evicted (it finished at %s) to keep the job "
                               "store under its memory cap of %d bytes (--job-memory-bytes)",
                               id, FormatWallTime(r.snap.finished), options_.memory_bytes),
               "evicted");
  }
  PublishMetricsLocked();
  return held_bytes_ + more <= options_.memory_bytes;
}

void JobStore::DropLocked(const std::string& id, const std::string& reason,
                          const char* metric_reason) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Record& r = *it->second;
  held_bytes_ -= r.held_bytes;
  if (!r.idempotency_key.empty()) {
    auto k = keys_.find(r.idempotency_key);
    if (k != keys_.end() && k->second == id) keys_.erase(k);
  }
  by_seq_.erase(r.seq);
  RememberDroppedLocked(id, r.owner, reason);
  jobs_.erase(it);  // a Get stream still sending the output keeps its own reference
  if (metrics_) metrics_->AddJobsDropped(metric_reason);
}

void JobStore::RememberDroppedLocked(const std::string& id, const std::string& owner,
                                     const std::string& reason) {
  dropped_[id] = Dropped{owner, reason};
  dropped_order_.push_back(id);
  while (dropped_order_.size() > options_.max_remembered) {
    dropped_.erase(dropped_order_.front());
    dropped_order_.pop_front();
  }
}

void JobStore::PublishMetricsLocked() {
  if (!metrics_) return;
  int counts[5] = {0, 0, 0, 0, 0};
  for (const auto& entry : jobs_) ++counts[static_cast<int>(entry.second->snap.state)];
  for (JobState s : kAllStates) {
    metrics_->SetJobs(JobStateName(s), counts[static_cast<int>(s)]);
  }
  metrics_->SetJobStoreBytes(static_cast<double>(held_bytes_));
}

void JobStore::SweepLoop() {
  const auto ttl = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(options_.ttl_s));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    ExpireLocked(SteadyClock::now());
    // The oldest finished job expires first (everyone gets the same TTL).
    std::optional<SteadyClock::time_point> next;
    for (const std::string& id : finished_order_) {
      auto it = jobs_.find(id);
      if (it != jobs_.end()) {
        next = it->second->finished_at + ttl;
        break;
      }
    }
    if (next) {
      sweep_cv_.wait_until(lock, *next);
    } else {
      sweep_cv_.wait(lock);
    }
  }
}

}  // namespace fresnel::server
