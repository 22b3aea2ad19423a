#include "server/sessions.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/ids.h"
#include "server/metrics.h"

namespace fresnel::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string Echo(const std::string& id) { return EchoId(id); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Session

absl::Status Session::Submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return absl::NotFoundError(end_reason_);
    if (running_ && static_cast<int>(waiting_.size()) >= spec_.max_pending) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "session ", id_, " already has ", waiting_.size(),
          " calls waiting behind the running one (limit ", spec_.max_pending,
          "); wait for answers before sending more"));
    }
    job->affinity = device_;
    std::shared_ptr<Session> self = shared_from_this();
    job->done = [self, done = std::move(job->done)](const absl::Status& status,
                                                     const JobReport& report) {
      // The job's work is over: while its answer is being sent the session may be evicted (its
      // state is then released by JobEnded, just after). Without this a client that sends its
      // next upload the moment it has the answer could find the previous mesh still "running".
      {
        std::lock_guard<std::mutex> lock(self->mu_);
        self->finishing_ = true;
      }
      if (done) done(status, report);
      self->JobEnded();
    };
    last_used_ = SteadyClock::now();
    if (running_) {
      waiting_.push_back(std::move(job));
      return absl::OkStatus();
    }
    running_ = true;
  }
  absl::Status st = store_->pool_->Submit(job);
  if (!st.ok()) {
    job->done = nullptr;  // refused: the caller's done must not run (DevicePool::Submit's contract)
    JobEnded();
  }
  return st;
}

int Session::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size()) + (running_ ? 1 : 0);
}

void Session::JobEnded() {
  std::shared_ptr<Job> next;
  std::shared_ptr<SessionState> release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    finishing_ = false;
    last_used_ = SteadyClock::now();
    if (!waiting_.empty()) {
      next = std::move(waiting_.front());
      waiting_.pop_front();
      running_ = true;
    } else if (ended_) {
      release = std::move(state_);
    }
  }
  release.reset();  // outside the lock: the state's destructor may free device memory
  if (next) {
    absl::Status st = store_->pool_->Submit(next);
    // Refused after it was accepted (drain, unhealthy device): complete it with why; its done
    // wrapper calls JobEnded again for the job after it.
    if (!st.ok()) next->CompleteUnrun(st);
  }
}

void Session::End(const std::string& message) {
  std::shared_ptr<SessionState> release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    end_reason_ = message;
    if (!running_ && waiting_.empty()) release = std::move(state_);
  }
}

// ---------------------------------------------------------------------------------------------
// SessionStore

SessionStore::SessionStore(SessionStoreOptions options, DevicePool* pool, Metrics* metrics)
    : options_(std::move(options)), pool_(pool), metrics_(metrics) {
  const std::vector<DeviceSnapshot> snapshot = pool_->Snapshot();
  // CPU partitions (--cpu-partitions) share the CPU's session cap.
  const int64_t cpu_devices = std::max<int64_t>(
      1, std::count_if(snapshot.begin(), snapshot.end(),
                       [](const DeviceSnapshot& d) { return d.kind == DeviceKind::kCpu; }));
  for (const DeviceSnapshot& d : snapshot) {
    DeviceSlot slot;
    slot.id = d.id;
    slot.kind = d.kind;
    if (d.kind == DeviceKind::kCuda) {
      slot.cap_bytes = options_.gpu_cap_bytes > 0 ? options_.gpu_cap_bytes
                                                  : d.total_memory_bytes / 10 * 9;
    } else {
      slot.cap_bytes = options_.cpu_cap_bytes / cpu_devices;
    }
    devices_.push_back(slot);
    if (metrics_) metrics_->SetSessionReservedBytes(slot.id, 0);
  }
  pool_->AddHealthListener([this](const std::string& device, bool healthy,
                                  const std::string& reason) {
    OnDeviceHealth(device, healthy, reason);
  });
  sweeper_ = std::thread([this] { SweepLoop(); });
}

SessionStore::~SessionStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  sweep_cv_.notify_all();
  sweeper_.join();
  std::vector<std::shared_ptr<Session>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, e] : open_) left.push_back(e.session);
    open_.clear();
  }
  for (auto& s : left) s->End(absl::StrCat("session ", s->id(), " ended: the server stopped"));
}

std::string SessionStore::NewIdLocked() {
  for (;;) {
    char hex[33];
    std::snprintf(hex, sizeof hex, "%08x%08x%08x%08x", random_(), random_(), random_(), random_());
    std::string id = absl::StrCat("s-", hex, "@", options_.instance);
    if (open_.count(id) == 0 && ended_.count(id) == 0) return id;
  }
}

absl::Status SessionStore::NotFoundLocked(const std::string& id,
                                          const std::string& client) const {
  // Why a session ended is told to its client only: to others it is an unknown id.
  auto it = ended_.find(id);
  if (it != ended_.end() && it->second.client == client) {
    return absl::NotFoundError(it->second.message);
  }
  const size_t at = id.rfind('@');
  if (id.rfind("s-", 0) == 0 && at != std::string::npos) {
    const std::string owner = id.substr(at + 1);
    if (owner != options_.instance) {
      return absl::NotFoundError(absl::StrCat("session ", Echo(id), " belongs to instance ",
                                              Echo(owner), "; this is instance ",
                                              options_.instance));
    }
  }
  return absl::NotFoundError(absl::StrCat("no session ", Echo(id), " on instance ",
                                          options_.instance));
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Open(SessionSpec spec,
                                                            std::shared_ptr<SessionState> state) {
  if (spec.device_bytes < 0) {
    return absl::InvalidArgumentError("a session cannot reserve negative device memory");
  }
  if (spec.ttl_s <= 0) spec.ttl_s = options_.ttl_s;
  if (spec.max_pending < 0) spec.max_pending = 0;
  if (pool_->draining()) {
    return absl::UnavailableError("server is shutting down and opens no new sessions");
  }
  const bool have_gpu = std::any_of(devices_.begin(), devices_.end(), [](const DeviceSlot& d) {
    return d.kind == DeviceKind::kCuda;
  });
  if (spec.preference == DevicePreference::kGpu && !have_gpu) {
    return absl::FailedPreconditionError("device.kind is GPU but this server has no GPU");
  }
  const DeviceKind kind =
      spec.preference == DevicePreference::kCpu || !have_gpu ? DeviceKind::kCpu : DeviceKind::kCuda;
  std::unordered_map<std::string, bool> healthy;
  for (const DeviceSnapshot& d : pool_->Snapshot()) healthy[d.id] = d.healthy;

  std::lock_guard<std::mutex> lock(mu_);
  if (per_client_[spec.client] >= options_.max_sessions_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client has ", per_client_[spec.client], " open sessions (limit ",
        options_.max_sessions_per_client, "); close one first"));
  }
  DeviceSlot* best = nullptr;
  int full_count = 0, memory_short = 0, considered = 0;
  int64_t most_room = 0;
  for (DeviceSlot& d : devices_) {
    if (d.kind != kind || !healthy[d.id]) continue;
    ++considered;
    if (d.sessions >= options_.max_sessions_per_device) {
      ++full_count;
      continue;
    }
    if (d.reserved_bytes + spec.device_bytes > d.cap_bytes &&
        !(spec.device_bytes <= d.cap_bytes && EvictForLocked(d, spec.device_bytes, spec.kind))) {
      ++memory_short;
      continue;
    }
    const int64_t room = d.cap_bytes - d.reserved_bytes;
    if (best == nullptr || room > most_room ||
        (room == most_room && d.sessions < best->sessions)) {
      best = &d;
      most_room = room;
    }
  }
  if (best == nullptr) {
    const char* what = kind == DeviceKind::kCuda ? "GPU" : "CPU";
    if (considered == 0) {
      return absl::UnavailableError(absl::StrCat("no healthy ", what, " to open a session on"));
    }
    if (full_count == considered) {
      return absl::ResourceExhaustedError(
          absl::StrCat("every ", what, " holds ", options_.max_sessions_per_device,
                       " sessions (the per-device limit)"));
    }
    int64_t largest_room = 0;
    for (const DeviceSlot& d : devices_) {
      if (d.kind == kind) largest_room = std::max(largest_room, d.cap_bytes - d.reserved_bytes);
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "the session needs ", spec.device_bytes, " bytes of ", what,
        " memory; the most any device has left under its session cap is ", largest_room,
        " bytes (", memory_short, " of ", considered, " devices short)"));
  }
  std::string id = NewIdLocked();
  std::shared_ptr<Session> s(new Session(this, id, spec, best->id, best->kind));
  s->state_ = std::move(state);
  best->reserved_bytes += spec.device_bytes;
  best->sessions += 1;
  per_client_[spec.client] += 1;
  open_[id] = Entry{s, ""};
  PublishLocked(best->id, spec.kind);
  return s;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Find(const std::string& id,
                                                            const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(id);
  if (it == open_.end() || it->second.session->client() != client) {
    return NotFoundLocked(id, client);
  }
  {
    std::lock_guard<std::mutex> slock(it->second.session->mu_);
    it->second.session->last_used_ = SteadyClock::now();
  }
  return it->second.session;
}

absl::Status SessionStore::Close(const std::string& id, const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(id);
  if (it == open_.end() || it->second.session->client() != client) {
    return NotFoundLocked(id, client);
  }
  std::shared_ptr<Session> s = it->second.session;
  EndLocked(s, absl::StrCat("session ", Echo(id), " was closed"), nullptr);
  return absl::OkStatus();
}

// Content keys are per client: the same mesh uploaded by two clients is two sessions, each
// found only by its owner. Client names never hold a newline (server/auth.h).
std::string SessionStore::OwnedKey(const std::string& client, const std::string& key) {
  return absl::StrCat(client, "\n", key);
}

std::shared_ptr<Session> SessionStore::FindByKey(const std::string& kind, const std::string& key,
                                                 const std::string& client) {
  if (key.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto k = by_key_.find({kind, OwnedKey(client, key)});
  if (k == by_key_.end()) return nullptr;
  auto it = open_.find(k->second);
  if (it == open_.end() || it->second.session->client() != client) return nullptr;
  std::lock_guard<std::mutex> slock(it->second.session->mu_);
  it->second.session->last_used_ = SteadyClock::now();
  return it->second.session;
}

void SessionStore::SetKey(const std::shared_ptr<Session>& session, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(session->id());
  if (it == open_.end()) return;
  it->second.key = OwnedKey(session->client(), key);
  by_key_[{session->kind(), it->second.key}] = session->id();
}

void SessionStore::EndLocked(const std::shared_ptr<Session>& s, const std::string& message,
                             const char* metric_reason) {
  auto it = open_.find(s->id());
  if (it == open_.end()) return;
  if (!it->second.key.empty()) {
    auto k = by_key_.find({s->kind(), it->second.key});
    if (k != by_key_.end() && k->second == s->id()) by_key_.erase(k);
  }
  open_.erase(it);
  for (DeviceSlot& d : devices_) {
    if (d.id != s->device()) continue;
    d.reserved_bytes -= s->reserved_bytes();
    d.sessions -= 1;
  }
  if (--per_client_[s->client()] <= 0) per_client_.erase(s->client());
  RememberLocked(s->id(), s->client(), message);
  if (metrics_ && metric_reason != nullptr) metrics_->AddSessionsDropped(s->kind(), metric_reason);
  PublishLocked(s->device(), s->kind());
  s->End(message);
}

bool SessionStore::EvictForLocked(DeviceSlot& slot, int64_t bytes, const std::string& kind) {
  std::vector<std::pair<SteadyClock::time_point, std::shared_ptr<Session>>> idle;
  int64_t could_free = 0;
  for (auto& [id, e] : open_) {
    Session& s = *e.session;
    if (s.device() != slot.id || !s.spec_.evictable || s.kind() != kind) continue;
    std::lock_guard<std::mutex> slock(s.mu_);
    if ((s.running_ && !s.finishing_) || !s.waiting_.empty()) continue;
    idle.emplace_back(s.last_used_, e.session);
    could_free += s.reserved_bytes();
  }
  if (slot.reserved_bytes - could_free + bytes > slot.cap_bytes) return false;
  std::sort(idle.begin(), idle.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [when, s] : idle) {
    if (slot.reserved_bytes + bytes <= slot.cap_bytes) break;
    EndLocked(s,
              absl::StrCat("session ", s->id(), " was evicted (least recently used) to make room"),
              "evicted");
  }
  return slot.reserved_bytes + bytes <= slot.cap_bytes;
}

void SessionStore::RememberLocked(const std::string& id, const std::string& client,
                                  const std::string& message) {
  ended_[id] = Ended{client, message};
  ended_order_.push_back(id);
  while (ended_order_.size() > options_.max_remembered) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void SessionStore::PublishLocked(const std::string& device, const std::string& kind) {
  if (metrics_ == nullptr) return;
  int count = 0;
  for (const auto& [id, e] : open_) {
    if (e.session->device() == device && e.session->kind() == kind) ++count;
  }
  metrics_->SetSessions(kind, device, count);
  for (const DeviceSlot& d : devices_) {
    if (d.id == device) metrics_->SetSessionReservedBytes(device, static_cast<double>(d.reserved_bytes));
  }
}

void SessionStore::OnDeviceHealth(const std::string& device, bool healthy,
                                  const std::string& reason) {
  if (healthy) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Session>> lost;
  for (auto& [id, e] : open_) {
    if (e.session->device() == device) lost.push_back(e.session);
  }
  for (auto& s : lost) {
    EndLocked(s, absl::StrCat("session ", s->id(), " was lost with its device ", device, " (",
                              reason, ")"),
              "device_lost");
  }
}

std::vector<SessionDeviceStats> SessionStore::DeviceStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SessionDeviceStats> out;
  for (const DeviceSlot& d : devices_) {
    out.push_back(SessionDeviceStats{d.id, d.sessions, d.reserved_bytes, d.cap_bytes});
  }
  return out;
}

int SessionStore::open_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(open_.size());
}

void SessionStore::SweepLoop() {
  const auto interval = std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double>(std::max(0.01, options_.sweep_interval_s)));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    sweep_cv_.wait_for(lock, interval, [this] { return stop_; });
    if (stop_) break;
    const SteadyClock::time_point now = SteadyClock::now();
    std::vector<std::shared_ptr<Session>> expired;
    for (auto& [id, e] : open_) {
      Session& s = *e.session;
      std::lock_guard<std::mutex> slock(s.mu_);
      if (s.running_ || !s.waiting_.empty()) continue;
      if (std::chrono::duration<double>(now - s.last_used_).count() > s.spec_.ttl_s) {
        expired.push_back(e.session);
      }
    }
    for (auto& s : expired) {
      EndLocked(s, absl::StrCat("session ", s->id(), " expired after ", s->spec_.ttl_s,
                                " s without a call"),
                "expired");
    }
  }
}

}  // namespace fresnel::server
