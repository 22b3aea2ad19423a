// A gate that test jobs wait on until the test opens it, so that every outcome (queued, running,
// cancelled) is decided by the test rather than by timing. GateGuard opens gates when a test
// leaves early (a failed REQUIRE), so that a pool's destructor does not wait forever on a worker
// blocked in Wait(): declare the gates before the pool and the guard after it.
#pragma once

#include <condition_variable>
#include <initializer_list>
#include <mutex>
#include <vector>

namespace fresnel::testing {

class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

struct GateGuard {
  std::vector<Gate*> gates;
  ~GateGuard() {
    for (Gate* g : gates) g->Open();
  }
};

}  // namespace fresnel::testing
