// OrderedStream: the bidirectional reactor of a session stream (FusionService.Session and the
// like). Every request message gets a sequence number (0 = the first) and exactly one answer —
// a response, a response followed by chunks cut as they are sent, or nothing — and the answers go
// out in request order, one write at a time, whichever thread produced them (the gRPC thread for
// validation errors, a device worker for a session job).
//
// Backpressure: at most `max_in_flight` requests are read and not yet fully answered; while that
// many are, the reactor does not read, so HTTP/2 flow control holds the client back. Memory stays
// bounded by max_in_flight requests and answers.
//
// Ending: End(status) stops reading and finishes with `status` once every request read so far is
// answered and written (a close request, a half-close, a fatal error after which the earlier
// answers are still worth sending); Abort(status) stops reading and writing and finishes once no
// answer is outstanding (cancellation, a broken connection). The reactor never finishes while an
// answer is outstanding, so a job may always call Answer(); the subclass must answer every
// request it was given exactly once.
//
// A request whose answer comes with a later one's (a frame sent in several messages) is marked
// with Absorb: it then counts against max_in_flight no longer, so a long run of such requests
// cannot stall the read they wait for. An answer no request asked for (a frame cut short by the
// half-close) takes a number from Reserve().
//
// Subclasses implement OnRequest (on a gRPC thread, one at a time, in order) and may override
// OnHalfClose, OnAbort and OnStreamDone; their constructor calls StartReading() last.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/call.h"
#include "server/status_util.h"

namespace fresnel::server {

template <class Request, class Response>
class OrderedStream : public RpcCall<grpc::ServerBidiReactor<Request, Response>> {
 public:
  // One request's answer: `first`, then, while `more` returns true, the response it filled.
  struct Reply {
    Response first;
    std::function<bool(Response*)> more;
  };

  void OnReadDone(bool ok) override {
    const auto read_done = TraceNow();
    if (!ok) {
      bool ending;
      {
        std::lock_guard<std::mutex> lock(mu_);
        reads_done_ = true;
        reading_ = false;
        ending = ending_;
      }
      if (!ending) OnHalfClose();
      Progress();
      return;
    }
    this->record().Payload("in", static_cast<double>(request_.ByteSizeLong()));
    int64_t seq;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ending_) {
        reading_ = false;
        seq = -1;
      } else {
        seq = next_seq_++;
        ++in_flight_;
        ++outstanding_;
      }
    }
    if (seq >= 0) {
      // An exception (out of memory) ends the stream with a status; the request is answered.
      absl::Status st = Guarded("reading the request", [&] {
        OnRequest(seq, &request_);
        return absl::OkStatus();
      });
      if (!st.ok()) {
        End(st);
        Skip(seq);
      }
    }
    const auto handled = TraceNow();
    bool read;
    {
      std::lock_guard<std::mutex> lock(mu_);
      read = seq >= 0 && !ending_ && !reads_done_ && in_flight_ < max_in_flight_;
      reading_ = read;
      if (trace_.on) {
        trace_.read_wait += read_done - trace_.read_started;
        trace_.on_request += handled - read_done;
        ++trace_.reads;
        if (read) trace_.read_started = handled;
        if (!read && seq >= 0 && !ending_ && !reads_done_) trace_.paused_since = handled;
      }
    }
    if (read) this->StartRead(&request_);
    Progress();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        writing_ = false;
      }
      more_ = nullptr;
      Abort(absl::CancelledError("the client stopped reading"));
      return;
    }
    bool aborted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      aborted = aborted_;
    }
    if (!aborted && more_) {
      write_.Clear();
      if (more_(&write_)) {
        this->record().Payload("out", static_cast<double>(write_.ByteSizeLong()));
        TracedStartWrite();
        return;
      }
    }
    more_ = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      ++next_write_;
      --in_flight_;
      if (trace_.on) {
        trace_.write += TraceNow() - trace_.write_started;
        ++trace_.answers;
      }
    }
    Progress();
  }

  void OnCancel() override { Abort(absl::CancelledError("the client cancelled the stream")); }

  void OnDone() override {
    OnStreamDone();
    Release();  // gRPC's hold; an answer still leaving Put() keeps the object a moment longer
  }

 protected:
  OrderedStream(Metrics* metrics, const char* service, const char* method, int max_in_flight)
      : RpcCall<grpc::ServerBidiReactor<Request, Response>>(metrics, service, method),
        method_(method),
        max_in_flight_(max_in_flight < 1 ? 1 : max_in_flight) {
    trace_.on = TraceEnabled();
    trace_.opened = trace_.read_started = TraceNow();
  }
  ~OrderedStream() override = default;

  void StartReading() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = true;
      trace_.read_started = TraceNow();
    }
    this->StartRead(&request_);
  }

  // Request `seq`, on a gRPC thread; `request` may be moved from.
  virtual void OnRequest(int64_t seq, Request* request) = 0;
  // The client half-closed (and the stream was not ending already). gRPC reports a message it
  // could not parse the same way, so a session stream that ends without its closing request is
  // not taken as finished: default End(INVALID_ARGUMENT) once every request read is answered.
  virtual void OnHalfClose() {
    End(absl::InvalidArgumentError(
        "close: the stream ended without a close request: it was cut short or a message could "
        "not be parsed (every request read before was answered)"));
  }
  // The stream was aborted (once, by the first Abort, cancellation or a failed write), on the
  // thread that aborted it and outside the stream's lock: cancel the work of outstanding
  // requests here. Their answers are still due (they are dropped); the stream finishes after the
  // last one.
  virtual void OnAbort() {}
  // The stream is finished and no answer is outstanding; the object is deleted next.
  virtual void OnStreamDone() {}

  // Thread-safe; each exactly once per request.
  void Answer(int64_t seq, Reply reply) { Put(seq, std::move(reply), false); }
  void Answer(int64_t seq, Response response) { Put(seq, Reply{std::move(response), nullptr}, false); }
  void Skip(int64_t seq) { Put(seq, Reply{}, true); }
  // Request `seq` has no answer of its own: a later request's answer covers it. Unlike Skip it
  // stops counting against max_in_flight at once.
  void Absorb(int64_t seq) { Put(seq, Reply{}, true, /*absorbed=*/true); }
  // From OnRequest or OnHalfClose only: the number of an extra answer, written after those of
  // every request read so far; it must be answered like a request.
  int64_t Reserve() {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;
    ++outstanding_;
    return next_seq_++;
  }

  // Thread-safe; the first End/Abort decides the status.
  void End(const absl::Status& status) { Stop(status, false); }
  void Abort(const absl::Status& status) { Stop(status, true); }

  using RpcCall<grpc::ServerBidiReactor<Request, Response>>::record;
  using RpcCall<grpc::ServerBidiReactor<Request, Response>>::Elapsed;

 private:
  struct Slot {
    Reply reply;
    bool skip = false;
    bool absorbed = false;  // no longer counted in in_flight_
  };

  // Put runs on any thread (a device worker's job completion). Once it has counted its answer,
  // a gRPC reaction on another thread may find nothing outstanding and finish the stream, and
  // gRPC then calls OnDone — while this thread is still on its way into Progress(). The hold
  // (taken while the answer is still outstanding, so the stream cannot have finished yet) keeps
  // the object alive until Put returns; whichever of OnDone and Put lets go last deletes it.
  // (ASan caught the use after free in test_hologram_service.)
  void Put(int64_t seq, Reply reply, bool skip, bool absorbed = false) {
    Acquire();
    bool counted = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A second answer (after an exception in OnRequest was answered by Skip) is dropped.
      if (seq >= next_write_ && ready_.count(seq) == 0) {
        --outstanding_;
        if (absorbed) --in_flight_;
        if (!aborted_) ready_.emplace(seq, Slot{std::move(reply), skip, absorbed});
        counted = true;
      }
    }
    if (counted) Progress();
    Release();
  }

  // FRESNEL_STREAM_TRACE=1 (read once per process): each stream prints, when it is done, where
  // its time went (stderr, one line): per request the wait for the message (the client, the
  // transport and gRPC's parse), OnRequest (the service's checks and conversion) and the time
  // reading stood still because max_in_flight requests were unanswered or unwritten; per answer
  // the write (serialisation and send, first StartWrite to the last OnWriteDone). A profiling
  // aid for the host side of pipelined streams (docs/transport.md); off, it costs one branch.
  using TraceClock = std::chrono::steady_clock;
  struct Trace {
    bool on = false;
    int64_t reads = 0, answers = 0, pauses = 0, start_writes = 0;
    TraceClock::time_point opened, read_started, paused_since, write_started;
    TraceClock::duration read_wait{}, on_request{}, paused{}, write{}, start_write{};
  };
  static bool TraceEnabled() {
    static const bool on = [] {
      const char* v = std::getenv("FRESNEL_STREAM_TRACE");
      return v != nullptr && v[0] != '\0' && v[0] != '0';
    }();
    return on;
  }
  TraceClock::time_point TraceNow() const {
    return trace_.on ? TraceClock::now() : TraceClock::time_point();
  }
  void PrintTrace() {
    auto ms = [](TraceClock::duration d, int64_t n) {
      return n > 0 ? std::chrono::duration<double, std::milli>(d).count() / n : 0.0;
    };
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(stderr,
                 "stream trace %s: %lld requests, %lld answers in %.3f s, depth %d | per "
                 "request: read wait %.3f ms, OnRequest %.3f ms, paused at depth %.3f ms "
                 "(%lld pauses) | per answer: write %.3f ms, of it inside StartWrite %.3f ms "
                 "(%lld messages)\n",
                 method_, static_cast<long long>(trace_.reads),
                 static_cast<long long>(trace_.answers),
                 std::chrono::duration<double>(TraceClock::now() - trace_.opened).count(),
                 max_in_flight_, ms(trace_.read_wait, trace_.reads),
                 ms(trace_.on_request, trace_.reads), ms(trace_.paused, trace_.reads),
                 static_cast<long long>(trace_.pauses), ms(trace_.write, trace_.answers),
                 ms(trace_.start_write, trace_.answers),
                 static_cast<long long>(trace_.start_writes));
  }

  // StartWrite serialises the message on the calling thread (and gRPC may send it there too):
  // the trace counts that time apart, per thread kind it runs on.
  void TracedStartWrite() {
    if (!trace_.on) {
      this->StartWrite(&write_);
      return;
    }
    const auto t0 = TraceClock::now();
    this->StartWrite(&write_);
    const auto d = TraceClock::now() - t0;
    std::lock_guard<std::mutex> lock(mu_);
    trace_.start_write += d;
    ++trace_.start_writes;
  }

  void Acquire() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // The trace is printed by the last holder: a thread still inside TracedStartWrite (it holds a
    // reference) has then added its write, which OnDone could run before.
    if (trace_.on) PrintTrace();
    delete this;
  }

  void Stop(const absl::Status& status, bool abort) {
    std::map<int64_t, Slot> dropped;  // freed outside the lock
    bool first_abort = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ending_) {
        ending_ = true;
        end_status_ = status;
      }
      if (abort && !aborted_) {
        aborted_ = true;
        first_abort = true;
        if (end_status_.ok()) end_status_ = status;
        dropped.swap(ready_);
      }
    }
    if (first_abort) OnAbort();
    Progress();
  }

  // Starts what can start now: the next write, a paused read, or the finish. Touches nothing of
  // the object after starting the finish.
  void Progress() {
    bool write = false, read = false, finish = false;
    absl::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!writing_ && !aborted_) {
        auto it = ready_.find(next_write_);
        if (it == ready_.end()) break;
        if (it->second.skip) {
          if (!it->second.absorbed) --in_flight_;
          ready_.erase(it);
          ++next_write_;
          continue;
        }
        writing_ = true;
        write_ = std::move(it->second.reply.first);
        more_ = std::move(it->second.reply.more);
        ready_.erase(it);
        write = true;
        if (trace_.on) trace_.write_started = TraceNow();
      }
      if (!reading_ && !reads_done_ && !ending_ && in_flight_ < max_in_flight_) {
        reading_ = true;
        read = true;
        if (trace_.on) {
          const auto now = TraceNow();
          if (trace_.paused_since != TraceClock::time_point()) {
            trace_.paused += now - trace_.paused_since;
            ++trace_.pauses;
            trace_.paused_since = TraceClock::time_point();
          }
          trace_.read_started = now;
        }
      }
      if (!write && !read && !writing_ && !finished_ && ending_ && outstanding_ == 0 &&
          (aborted_ || in_flight_ == 0)) {
        finished_ = true;
        finish = true;
        status = end_status_;
      }
    }
    if (write) {
      this->record().Payload("out", static_cast<double>(write_.ByteSizeLong()));
      TracedStartWrite();
    }
    if (read) this->StartRead(&request_);
    if (finish) this->FinishWith(status);
  }

  const char* method_;
  const int max_in_flight_;
  Trace trace_;  // under mu_ once the stream runs
  std::atomic<int> refs_{1};  // gRPC's until OnDone, plus one per Put in progress
  Request request_;  // the read buffer (one read in flight)
  Response write_;   // the write buffer (one write in flight)
  std::function<bool(Response*)> more_;  // the rest of the answer being written

  std::mutex mu_;
  std::map<int64_t, Slot> ready_;  // answered, not yet written
  int64_t next_seq_ = 0;
  int64_t next_write_ = 0;
  int in_flight_ = 0;    // read, not yet fully written
  int outstanding_ = 0;  // read, not yet answered
  bool reading_ = false;
  bool reads_done_ = false;
  bool writing_ = false;
  bool ending_ = false;
  bool aborted_ = false;
  bool finished_ = false;
  absl::Status end_status_;
};

}  // namespace fresnel::server
