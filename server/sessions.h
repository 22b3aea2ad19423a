// SessionStore: state that lives on one device across many calls — a fusion volume updated by
// every frame, a mesh uploaded once and rendered many times. Knows no gRPC and no workload: a
// service opens a session with what it will reserve, hands the store its state, and runs every
// later call through Session::Submit, which places the job on the session's device and runs the
// session's jobs one at a time, in the order they were submitted.
//
// Ids name their instance ("s-<32 hex>@<instance>"), so a request that reaches another server
// instance is answered NOT_FOUND naming the owner. A session ends when its client closes it,
// when it was idle (no job queued or running) for its TTL, when a newer session needs its
// memory and it was opened as evictable (least recently used first), or when its device turns
// unhealthy. Ended ids are remembered, so that asking for one answers NOT_FOUND saying what
// happened ("expired", "evicted", "closed", "device lost") rather than "unknown".
//
// Memory: each device has a cap on the bytes sessions reserve (default: 90 % of a GPU's memory;
// the CPU's cap is the options' host cap); Open picks the device of the wanted kind with the most
// room and answers RESOURCE_EXHAUSTED with the counts when none has enough.
//
// Thread-safe.
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
#include "server/device_pool.h"

namespace fresnel::server {

class Metrics;

// What a workload keeps in a session. Destroyed when the session ends, after its last job
// finished, on whatever thread drops the last reference: destructors that free device memory
// must make their device current themselves.
class SessionState {
 public:
  virtual ~SessionState() = default;
};

struct SessionSpec {
  std::string kind;    // the workload, e.g. "fusion" (metrics label, per-kind counts)
  std::string client;  // who opened it ("" without authentication); only they may use it
  DevicePreference preference = DevicePreference::kAny;
  int64_t device_bytes = 0;  // reserved on the chosen device for the session's lifetime
  double ttl_s = 0;          // idle time before it expires; 0 = the store's default
  bool evictable = false;    // a cache entry (a mesh) that may be dropped to make room
  int max_pending = 8;       // jobs queued behind the running one before Submit refuses
};

struct SessionStoreOptions {
  std::string instance = "local";  // names this server in ids
  double ttl_s = 300;
  int max_sessions_per_device = 64;
  int max_sessions_per_client = 32;
  // Bytes sessions may reserve on each GPU; 0 = 90 % of its memory.
  int64_t gpu_cap_bytes = 0;
  // Bytes sessions may reserve in host memory (CPU sessions).
  int64_t cpu_cap_bytes = int64_t{8} << 30;
  size_t max_remembered = 10000;
  // How often the sweeper looks for expired sessions.
  double sweep_interval_s = 1.0;
};

class SessionStore;

// A handle to an open session. Services hold it only for the duration of a call (or a stream);
// the store owns the session.
class Session : public std::enable_shared_from_this<Session> {
 public:
  const std::string& id() const { return id_; }
  const std::string& kind() const { return spec_.kind; }
  const std::string& client() const { return spec_.client; }
  // "cpu" or "cuda:N": where the state lives and every job of the session runs.
  const std::string& device() const { return device_; }
  DeviceKind device_kind() const { return device_kind_; }
  int64_t reserved_bytes() const { return spec_.device_bytes; }

  // Runs `job` on the session's device after every job submitted before it has finished. The
  // job's affinity is set here; its done callback is wrapped so the next job starts when it
  // ends. RESOURCE_EXHAUSTED when max_pending jobs already wait, NOT_FOUND once the session
  // ended (with the reason), UNAVAILABLE when its device is unhealthy or the server drains.
  absl::Status Submit(std::shared_ptr<Job> job);

  // The workload's state. Touch it only from the session's jobs (which never run concurrently)
  // or before the first job was submitted.
  SessionState* state() const { return state_.get(); }
  void set_state(std::shared_ptr<SessionState> state) { state_ = std::move(state); }

  // Jobs queued or running.
  int pending() const;

 private:
  friend class SessionStore;
  Session(SessionStore* store, std::string id, SessionSpec spec, std::string device,
          DeviceKind kind)
      : store_(store), id_(std::move(id)), spec_(std::move(spec)), device_(std::move(device)),
        device_kind_(kind) {}
  // After a job of the session ended (or the pool refused the first one): starts the next.
  void JobEnded();
  // Marks the session ended; its state is released once no job is queued or running.
  void End(const std::string& message);

  SessionStore* const store_;
  const std::string id_;
  const SessionSpec spec_;
  const std::string device_;
  const DeviceKind device_kind_;
  std::shared_ptr<SessionState> state_;

  mutable std::mutex mu_;
  std::deque<std::shared_ptr<Job>> waiting_;
  bool running_ = false;
  // The running job's work is done and its done callback (the answer) is on its way: eviction
  // may take the session (EvictForLocked); the state is released when JobEnded follows.
  bool finishing_ = false;
  bool ended_ = false;
  std::string end_reason_;
  std::chrono::steady_clock::time_point last_used_ = std::chrono::steady_clock::now();
};

// What ServerInfo and the metrics show of one device's sessions.
struct SessionDeviceStats {
  std::string device;
  int sessions = 0;
  int64_t reserved_bytes = 0;
  int64_t cap_bytes = 0;
};

class SessionStore {
 public:
  // `pool` must outlive the store.
  SessionStore(SessionStoreOptions options, DevicePool* pool, Metrics* metrics);
  ~SessionStore();
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // Places a new session on a healthy device of the wanted kind with room for its reservation
  // (ANY: a GPU when the server has one, else the CPU). RESOURCE_EXHAUSTED with the counts when
  // the per-device or per-client limit or every device's memory cap is reached (after evicting
  // idle evictable sessions where that helps); FAILED_PRECONDITION for a GPU request on a
  // server without one; INVALID_ARGUMENT for a negative reservation.
  absl::StatusOr<std::shared_ptr<Session>> Open(SessionSpec spec,
                                                std::shared_ptr<SessionState> state = nullptr);

  // The open session `id` of `client`. NOT_FOUND for an id that never existed, that another
  // instance minted (naming it), or that ended (with why); another client's session is
  // NOT_FOUND too, so that ids cannot be probed.
  absl::StatusOr<std::shared_ptr<Session>> Find(const std::string& id, const std::string& client);

  // Ends a session: later Find/Submit answer NOT_FOUND "closed"; jobs already queued still run,
  // and the state is released after the last of them. NOT_FOUND as Find.
  absl::Status Close(const std::string& id, const std::string& client);

  // Looks up a session by content key among `client`'s open ones of `kind` (for caches: the same
  // mesh uploaded twice by one client is stored once). Empty key or no match: nullptr.
  std::shared_ptr<Session> FindByKey(const std::string& kind, const std::string& key,
                                     const std::string& client);
  // Associates `key` with an open session (FindByKey, for the session's client).
  void SetKey(const std::shared_ptr<Session>& session, const std::string& key);

  std::vector<SessionDeviceStats> DeviceStats() const;
  int open_sessions() const;
  const SessionStoreOptions& options() const { return options_; }
  const std::string& instance() const { return options_.instance; }

 private:
  friend class Session;
  struct DeviceSlot {
    std::string id;
    DeviceKind kind = DeviceKind::kCpu;
    int64_t cap_bytes = 0;
    int64_t reserved_bytes = 0;
    int sessions = 0;
  };
  struct Entry {
    std::shared_ptr<Session> session;
    std::string key;
  };

  std::string NewIdLocked();
  absl::Status NotFoundLocked(const std::string& id, const std::string& client) const;
  // Ends the session (already removed from open_) and releases its reservation.
  void EndLocked(const std::shared_ptr<Session>& s, const std::string& reason,
                 const char* metric_reason);
  bool EvictForLocked(DeviceSlot& slot, int64_t bytes, const std::string& kind);
  void RememberLocked(const std::string& id, const std::string& client,
                      const std::string& message);
  void PublishLocked(const std::string& device, const std::string& kind);
  void OnDeviceHealth(const std::string& device, bool healthy, const std::string& reason);
  void SweepLoop();

  const SessionStoreOptions options_;
  DevicePool* const pool_;
  Metrics* const metrics_;

  mutable std::mutex mu_;
  std::condition_variable sweep_cv_;
  std::vector<DeviceSlot> devices_;
  std::unordered_map<std::string, Entry> open_;
  // (kind, OwnedKey(client, key)) -> id
  std::map<std::pair<std::string, std::string>, std::string> by_key_;
  static std::string OwnedKey(const std::string& client, const std::string& key);
  std::unordered_map<std::string, int> per_client_;
  struct Ended {
    std::string client;
    std::string message;  // the NOT_FOUND message its client gets
  };
  std::unordered_map<std::string, Ended> ended_;  // id -> why it ended
  std::deque<std::string> ended_order_;
  std::random_device random_;
  bool stop_ = false;
  std::thread sweeper_;
};

}  // namespace fresnel::server
