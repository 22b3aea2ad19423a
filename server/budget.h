// Budget: a server-wide cap on something that requests hold while they live — bytes of derived
// state (a stream's designed filter and delay line, a queued render's points) or a count (open
// streams). A handler reserves before it accepts the work and the Reservation gives the amount
// back when it is destroyed, so a handful of small requests cannot make the server allocate
// gigabytes or hold thousands of streams. Thread-safe. An observer (the metrics gauge
// fresnel_budget_used) sees every change in order, under the budget's lock.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fresnel::server {

class Budget {
 public:
  // `name` is the flag that sets the cap (it appears in the RESOURCE_EXHAUSTED message).
  using Observer = std::function<void(int64_t used)>;
  Budget(std::string name, int64_t cap, Observer observer = nullptr)
      : name_(std::move(name)), cap_(cap), observer_(std::move(observer)) {
    if (observer_) observer_(0);
  }

  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)), amount_(std::exchange(o.amount_, 0)) {}
    Reservation& operator=(Reservation&& o) noexcept {
      if (this != &o) {
        Release();
        budget_ = std::exchange(o.budget_, nullptr);
        amount_ = std::exchange(o.amount_, 0);
      }
      return *this;
    }
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { Release(); }
    int64_t amount() const { return amount_; }

    // Takes `more` from the same budget (an upload that grows with what arrives). On
    // RESOURCE_EXHAUSTED the reservation keeps what it had. Needs a reservation made by Reserve.
    absl::Status Grow(int64_t more, absl::string_view what) {
      if (budget_ == nullptr) return absl::OkStatus();
      absl::StatusOr<Reservation> extra = budget_->Reserve(more, what);
      if (!extra.ok()) return extra.status();
      amount_ += std::exchange(extra->amount_, 0);
      extra->budget_ = nullptr;
      return absl::OkStatus();
    }

   private:
    friend class Budget;
    Reservation(Budget* b, int64_t amount) : budget_(b), amount_(amount) {}
    void Release() {
      if (budget_ != nullptr) budget_->Add(-amount_);
      budget_ = nullptr;
      amount_ = 0;
    }
    Budget* budget_ = nullptr;
    int64_t amount_ = 0;
  };

  // Takes `amount` for `what` ("the filter of this stream"), or RESOURCE_EXHAUSTED with the
  // numbers when it does not fit under the cap.
  absl::StatusOr<Reservation> Reserve(int64_t amount, absl::string_view what) {
    if (amount < 0) amount = 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (amount > cap_ - used_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " needs ", amount, " of the server's ", name_, " (", cap_, "), of which ", used_,
          " are in use by other requests; retry later"));
    }
    used_ += amount;
    if (observer_) observer_(used_);
    return Reservation(this, amount);
  }

  int64_t used() const {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
  }
  int64_t cap() const { return cap_; }
  const std::string& name() const { return name_; }

 private:
  void Add(int64_t delta) {
    std::lock_guard<std::mutex> lock(mu_);
    used_ += delta;
    if (observer_) observer_(used_);
  }

  const std::string name_;
  const int64_t cap_;
  const Observer observer_;
  mutable std::mutex mu_;
  int64_t used_ = 0;
};

// The same cap for each of many keys (a client's open streams): one Budget per key, made on first
// use and dropped again when it is idle, so a key costs memory only while it holds something.
// Thread-safe; reservations may outlive nothing but the KeyedBudget itself.
class KeyedBudget {
 public:
  // `name` is the flag that sets the per-key cap.
  KeyedBudget(std::string name, int64_t cap) : name_(std::move(name)), cap_(cap) {}

  // Takes `amount` (at least 1) of `key`'s cap for `what`, or RESOURCE_EXHAUSTED naming the key.
  absl::StatusOr<Budget::Reservation> Reserve(const std::string& key, int64_t amount,
                                              absl::string_view what) {
    std::lock_guard<std::mutex> lock(mu_);
    // Drop idle keys first (a reservation gives its amount back under its Budget's own lock and
    // never touches the Budget afterwards, so one at zero is unreferenced).
    for (auto it = budgets_.begin(); it != budgets_.end();) {
      it = it->second->used() == 0 && it->first != key ? budgets_.erase(it) : std::next(it);
    }
    std::unique_ptr<Budget>& b = budgets_[key];
    if (b == nullptr) b = std::make_unique<Budget>(name_, cap_);
    absl::StatusOr<Budget::Reservation> r = b->Reserve(amount < 1 ? 1 : amount, what);
    if (!r.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": client '", key, "' already holds ", b->used(), " of its ", name_, " (", cap_,
          "); close some or retry later"));
    }
    return r;
  }

  // Keys holding something now (for tests and metrics).
  size_t keys() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [key, b] : budgets_) n += b->used() > 0 ? 1 : 0;
    return n;
  }
  int64_t cap() const { return cap_; }

 private:
  const std::string name_;
  const int64_t cap_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Budget>> budgets_;
};

}  // namespace fresnel::server
