// DrainGate: what SIGTERM's drain does to calls that are already open. When the drain begins,
// new streams and sessions are refused (UNAVAILABLE, "send them to another instance"), while the
// streams and sessions open at that moment go on being served — their next chunks and frames are
// still accepted by the pool — until they end or the drain timeout passes. Then every one still
// open is stopped with UNAVAILABLE saying so, instead of being cut off by gRPC's shutdown with a
// bare CANCELLED.
//
// Streaming reactors hold a Ticket: Register gives one with the reactor's stop function, which
// must be thread-safe and end the call with the status it is given once no work of the call is
// running. The reactor calls ticket.Close() first thing in OnDone: after that its stop function is
// never called, and while a stop function runs Close() waits, so the reactor cannot be deleted
// under it. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fresnel::server {

class DrainGate {
 public:
  using Stop = std::function<void(const absl::Status&)>;

  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&&) noexcept = default;
    Ticket& operator=(Ticket&& o) noexcept {
      if (this != &o) {
        Close();
        gate_ = std::exchange(o.gate_, nullptr);
        state_ = std::move(o.state_);
      }
      return *this;
    }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Close(); }

    // The call is over: its stop function is not called any more (waits for one that runs).
    void Close() {
      if (state_ == nullptr) return;
      {
        std::lock_guard<std::recursive_mutex> lock(state_->mu);
        state_->alive = false;
      }
      if (gate_ != nullptr) gate_->Unregister(state_.get());
      gate_ = nullptr;
      state_.reset();
    }

   private:
    friend class DrainGate;
    struct State {
      std::recursive_mutex mu;  // recursive: a stop function may end the call on this thread
      bool alive = true;
      Stop stop;
    };
    DrainGate* gate_ = nullptr;
    std::shared_ptr<State> state_;
  };

  // A ticket for an open call of `what` ("a hologram Stream"), or UNAVAILABLE once the drain began.
  absl::Status Register(absl::string_view what, Stop stop, Ticket* out) {
    auto state = std::make_shared<Ticket::State>();
    state->stop = std::move(stop);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (draining_) {
        return absl::UnavailableError(absl::StrCat(
            "the server is draining (shutting down) and opens no new ", what,
            "; send it to another instance"));
      }
      open_.emplace(state.get(), state);
    }
    out->Close();
    out->gate_ = this;
    out->state_ = std::move(state);
    return absl::OkStatus();
  }

  bool draining() const {
    std::lock_guard<std::mutex> lock(mu_);
    return draining_;
  }

  // From Shutdown: refuses new calls, waits until the open ones end or `until`; then stops the
  // rest with `timeout_status`. Returns how many had to be stopped.
  int Drain(std::chrono::steady_clock::time_point until, const absl::Status& timeout_status) {
    std::vector<std::shared_ptr<Ticket::State>> left;
    {
      std::unique_lock<std::mutex> lock(mu_);
      draining_ = true;
      cv_.wait_until(lock, until, [&] { return open_.empty(); });
      for (auto& [key, state] : open_) left.push_back(state);
    }
    int stopped = 0;
    for (auto& state : left) {  // not under mu_: a stop may close its ticket
      std::lock_guard<std::recursive_mutex> lock(state->mu);
      if (!state->alive) continue;
      state->stop(timeout_status);
      ++stopped;
    }
    return stopped;
  }

  int open() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(open_.size());
  }

 private:
  void Unregister(const void* key) {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(key);
    if (open_.empty()) cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool draining_ = false;
  std::map<const void*, std::shared_ptr<Ticket::State>> open_;
};

}  // namespace fresnel::server
