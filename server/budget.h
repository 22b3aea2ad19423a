// Budget: a server-wide cap on something that requests hold while they live — bytes of derived
// state (a stream's designed filter and delay line, a queued render's points) or a count (open
// streams). A handler reserves before it accepts the work and the Reservation gives the amount
// back when it is destroyed, so a handful of small requests cannot make the server allocate
// gigabytes or hold thousands of streams. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
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
  Budget(std::string name, int64_t cap) : name_(std::move(name)), cap_(cap) {}

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
      if (budget_ != nullptr) budget_->used_.fetch_sub(amount_);
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
    int64_t used = used_.load();
    for (;;) {
      if (amount > cap_ - used) {
        return absl::ResourceExhaustedError(absl::StrCat(
            what, " needs ", amount, " of the server's ", name_, " (", cap_, "), of which ", used,
            " are in use by other requests; retry later"));
      }
      if (used_.compare_exchange_weak(used, used + amount)) return Reservation(this, amount);
    }
  }

  int64_t used() const { return used_.load(); }
  int64_t cap() const { return cap_; }

 private:
  const std::string name_;
  const int64_t cap_;
  std::atomic<int64_t> used_{0};
};

}  // namespace fresnel::server
