#include "server/device_pool.h"

#include <algorithm>
#include <exception>
#include <iostream>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/metrics.h"

namespace fresnel::server {

// One device: its bounded queue, its workers and, for a GPU, its memory pool.
class DeviceQueue {
 public:
  DeviceQueue(DevicePool* owner, std::string id, std::string name, DeviceKind kind, int ordinal,
              int capacity, Metrics* metrics)
      : owner_(owner), id_(std::move(id)), name_(std::move(name)), kind_(kind), ordinal_(ordinal),
        capacity_(capacity), metrics_(metrics) {
    if (metrics_) metrics_->SetDeviceHealthy(id_, true);
  }

  ~DeviceQueue() { Stop(); }

  // Starts `workers` threads. For a GPU each creates its own stream on the device (which also
  // makes the device current on that thread).
  absl::Status Start(int workers, int64_t release_threshold_bytes, int64_t max_bytes) {
    if (kind_ == DeviceKind::kCuda) {
      auto pool = GpuMemPool::Create(ordinal_, release_threshold_bytes, max_bytes);
      if (!pool.ok()) return pool.status();
      mem_pool_ = std::move(*pool);
      auto props = GetGpuProperties(ordinal_);
      if (!props.ok()) return props.status();
      props_ = *props;
      if (max_bytes > 0) props_.total_memory_bytes = std::min(props_.total_memory_bytes, max_bytes);
      // Create the streams here so that a failure is reported before the server starts.
      for (int i = 0; i < workers; ++i) {
        auto s = GpuStream::Create(ordinal_);
        if (!s.ok()) return s.status();
        streams_.push_back(std::move(*s));
      }
    }
    workers_count_ = workers;
    for (int i = 0; i < workers; ++i) {
      Device device = Device::Cpu();
      if (kind_ == DeviceKind::kCuda) {
        device = Device::Cuda(ordinal_, streams_[i]->handle(), mem_pool_->handle());
      }
      threads_.emplace_back([this, device] { WorkerLoop(device); });
    }
    return absl::OkStatus();
  }

  bool TryPush(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || static_cast<int>(queue_.size()) >= capacity_) {
        ++rejected_;
        return false;
      }
      job->enqueued_ = Clock::now();
      job->queue_ = this;
      queue_.push_back(job);
      if (metrics_) metrics_->SetQueueDepth(id_, static_cast<double>(queue_.size()));
    }
    cv_.notify_one();
    return true;
  }

  // Removes a queued job; false when it is not (or no longer) queued.
  bool Remove(const Job* job) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [job](const std::shared_ptr<Job>& j) { return j.get() == job; });
    if (it == queue_.end()) return false;
    queue_.erase(it);
    if (metrics_) metrics_->SetQueueDepth(id_, static_cast<double>(queue_.size()));
    idle_cv_.notify_all();
    return true;
  }

  int workers() const { return workers_count_; }

  int Load() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(queue_.size()) + running_;
  }

  bool Idle() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.empty() && running_ == 0;
  }

  // Waits until idle or `until`; returns whether idle.
  bool WaitIdle(Clock::time_point until) {
    std::unique_lock<std::mutex> lock(mu_);
    return idle_cv_.wait_until(lock, until, [this] { return queue_.empty() && running_ == 0; });
  }

  // Completes queued jobs with `status`, lets running jobs finish and joins the workers.
  void Stop(const absl::Status& status = absl::UnavailableError("server is shutting down")) {
    std::deque<std::shared_ptr<Job>> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ && threads_.empty()) return;
      stop_ = true;
      left.swap(queue_);
    }
    cv_.notify_all();
    for (auto& job : left) {
      if (job->Claim()) job->Complete(status, JobReport{});
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
    streams_.clear();
  }

  bool can_hold(int64_t bytes) const {
    return kind_ == DeviceKind::kCpu || bytes <= props_.total_memory_bytes;
  }

  DeviceSnapshot Snapshot() const {
    DeviceSnapshot s;
    s.id = id_;
    s.name = kind_ == DeviceKind::kCuda ? props_.name : name_;
    s.kind = kind_;
    s.workers = workers_count_;
    s.total_memory_bytes = props_.total_memory_bytes;
    s.compute_major = props_.compute_major;
    s.compute_minor = props_.compute_minor;
    s.multiprocessors = kind_ == DeviceKind::kCuda
                            ? props_.multiprocessors
                            : static_cast<int>(std::thread::hardware_concurrency());
    std::lock_guard<std::mutex> lock(mu_);
    s.queued = static_cast<int>(queue_.size());
    s.running = running_;
    s.completed = completed_;
    s.failed = failed_;
    s.rejected = rejected_;
    s.busy_seconds = busy_s_;
    s.memory_in_use_bytes = mem_pool_ ? mem_pool_->UsedBytes() : 0;
    s.healthy = healthy_;
    s.health_reason = health_reason_;
    return s;
  }

  // Asks every running job to stop (Job::cancelled() turns true; kernels that poll it stop at
  // their next check). Returns how many were running.
  int CancelRunning() {
    std::vector<std::shared_ptr<Job>> running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      running = running_jobs_;
    }
    for (auto& j : running) j->Cancel();  // Cancel takes mu_ (Remove): outside the lock
    return static_cast<int>(running.size());
  }

  bool healthy() const {
    std::lock_guard<std::mutex> lock(mu_);
    return healthy_;
  }

  // Returns true when this call changed the device to unhealthy.
  bool SetUnhealthy(const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!healthy_) return false;
      healthy_ = false;
      health_reason_ = reason;
    }
    std::cerr << "fresneld: " << id_ << " is unhealthy: " << reason << "\n";
    if (metrics_) metrics_->SetDeviceHealthy(id_, false);
    return true;
  }

  DeviceKind kind() const { return kind_; }
  const std::string& id() const { return id_; }
  int ordinal() const { return ordinal_; }

 private:
  void WorkerLoop(Device device) {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        ++running_;
        running_jobs_.push_back(job);
        if (metrics_) {
          metrics_->SetQueueDepth(id_, static_cast<double>(queue_.size()));
          metrics_->SetRunning(id_, running_);
        }
      }
      Run(*job, device);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --running_;
        running_jobs_.erase(std::find(running_jobs_.begin(), running_jobs_.end(), job));
        if (metrics_) metrics_->SetRunning(id_, running_);
      }
      idle_cv_.notify_all();
    }
  }

  void Run(Job& job, const Device& device) {
    JobReport report;
    report.device = id_;
    Clock::time_point start = Clock::now();
    report.queue_wait_s = std::chrono::duration<double>(start - job.enqueued_).count();
    absl::Status status;
    std::string unhealthy_reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!healthy_) unhealthy_reason = health_reason_;
    }
    if (!unhealthy_reason.empty()) {
      status = absl::UnavailableError(
          absl::StrCat(id_, " is unhealthy (", unhealthy_reason, "); the job was not run"));
    } else if (job.cancelled()) {
      status = absl::CancelledError("cancelled while queued");
    } else if (job.deadline && start > *job.deadline) {
      status = absl::DeadlineExceededError(absl::StrCat(
          "deadline passed after ", report.queue_wait_s, " s in the ", id_, " queue; not run"));
    } else {
      try {
        status = job.run(device, &report.stages);
      } catch (const std::bad_alloc&) {
        status = absl::ResourceExhaustedError(absl::StrCat("out of host memory on ", id_));
      } catch (const std::exception& e) {
        status = absl::InternalError(absl::StrCat("job failed on ", id_, ": ", e.what()));
      }
      report.run_s = std::chrono::duration<double>(Clock::now() - start).count();
      if (report.stages.compute_s == 0) report.stages.compute_s = report.run_s;
      if (!status.ok() && kind_ == DeviceKind::kCuda) {
        // A sticky error (illegal address, launch failure) poisons the context: every later
        // call on this device would fail. Take the device out instead of pretending to recover.
        absl::Status context = GpuContextStatus(ordinal_, device.stream);
        if (!context.ok() && owner_ != nullptr) {
          owner_->MarkGpuUnhealthy(ordinal_, std::string(context.message()));
        }
      }
      if (metrics_) {
        metrics_->ObserveQueueWait(job.service, job.method, id_, report.queue_wait_s);
        metrics_->ObserveCompute(job.service, job.method, id_, report.stages.compute_s);
        if (kind_ == DeviceKind::kCuda) {
          metrics_->ObserveTransfer(id_, "h2d", report.stages.h2d_s);
          metrics_->ObserveTransfer(id_, "d2h", report.stages.d2h_s);
          metrics_->SetDeviceMemory(id_, static_cast<double>(mem_pool_->UsedBytes()));
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_s_ += report.run_s;
      if (status.ok()) {
        ++completed_;
      } else {
        ++failed_;
      }
    }
    if (job.Claim()) job.Complete(status, report);
  }

  DevicePool* const owner_;
  const std::string id_;
  const std::string name_;
  const DeviceKind kind_;
  const int ordinal_;
  const int capacity_;
  Metrics* const metrics_;
  GpuProperties props_;
  std::unique_ptr<GpuMemPool> mem_pool_;
  std::vector<std::unique_ptr<GpuStream>> streams_;
  std::vector<std::thread> threads_;
  int workers_count_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> running_jobs_;  // popped and not yet finished
  bool stop_ = false;
  int running_ = 0;
  int64_t completed_ = 0, failed_ = 0, rejected_ = 0;
  double busy_s_ = 0;
  bool healthy_ = true;
  std::string health_reason_;
};

void Job::Cancel() {
  cancelled_.store(true);
  DeviceQueue* q = queue_;
  if (q != nullptr && q->Remove(this) && Claim()) {
    JobReport report;
    report.queue_wait_s = std::chrono::duration<double>(Clock::now() - enqueued_).count();
    Complete(absl::CancelledError("cancelled by the client"), report);
  }
}

void Job::CompleteUnrun(const absl::Status& status) {
  if (Claim()) Complete(status, JobReport{});
}

void Job::Complete(const absl::Status& status, const JobReport& report) {
  if (done) done(status, report);
}

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(const DevicePoolOptions& options,
                                                               Metrics* metrics) {
  std::unique_ptr<DevicePool> pool(new DevicePool());
  if (options.gpu_partitions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_partitions must be >= 1, got ", options.gpu_partitions));
  }
  if (options.cpu_partitions < 1 || options.cpu_partitions > kMaxCpuPartitions) {
    return absl::InvalidArgumentError(absl::StrCat("cpu_partitions must be 1..", kMaxCpuPartitions,
                                                   ", got ", options.cpu_partitions));
  }
  const int parts = options.gpu_partitions;
  for (int ordinal : options.gpus) {
    // A partition's memory pool is capped at its share of the GPU (or of --gpu-memory-bytes).
    int64_t cap = options.gpu_memory_bytes;
    if (parts > 1) {
      if (cap == 0) {
        auto props = GetGpuProperties(ordinal);
        if (!props.ok()) {
          std::cerr << "fresneld: skipping cuda:" << ordinal << ": " << props.status() << "\n";
          continue;
        }
        cap = props->total_memory_bytes;
      }
      cap /= parts;
    }
    for (int part = 0; part < parts; ++part) {
      const std::string id = parts == 1 ? absl::StrCat("cuda:", ordinal)
                                        : absl::StrCat("cuda:", ordinal, ".", part);
      auto q = std::make_unique<DeviceQueue>(pool.get(), id, "", DeviceKind::kCuda, ordinal,
                                             options.queue_capacity, metrics);
      absl::Status st = q->Start(std::max(1, options.streams_per_gpu),
                                 options.gpu_pool_release_threshold_bytes, cap);
      if (!st.ok()) {
        std::cerr << "fresneld: skipping " << id << ": " << st << "\n";
        continue;
      }
      pool->devices_.push_back(std::move(q));
    }
  }
  const int cpu_parts = options.cpu_partitions;
  const int cpu_workers = std::max(1, options.cpu_workers);
  for (int part = 0; part < cpu_parts; ++part) {
    const std::string id = cpu_parts == 1 ? std::string("cpu") : absl::StrCat("cpu.", part);
    auto cpu = std::make_unique<DeviceQueue>(pool.get(), id, "host CPU", DeviceKind::kCpu, 0,
                                             options.queue_capacity, metrics);
    const int workers =
        std::max(1, cpu_workers / cpu_parts + (part < cpu_workers % cpu_parts ? 1 : 0));
    absl::Status st = cpu->Start(workers, 0, 0);
    if (!st.ok()) return st;
    pool->devices_.push_back(std::move(cpu));
  }
  pool->small_job_bytes_ = std::max<int64_t>(0, options.small_job_bytes);
  return pool;
}

DevicePool::~DevicePool() {
  for (auto& d : devices_) d->Stop();
}

int DevicePool::gpu_count() const {
  return static_cast<int>(std::count_if(devices_.begin(), devices_.end(), [](const auto& d) {
    return d->kind() == DeviceKind::kCuda;
  }));
}

absl::Status DevicePool::Submit(std::shared_ptr<Job> job) {
  if (draining_.load() || (closing_.load() && !job->continues_call)) {
    return absl::UnavailableError(
        "server is shutting down and accepts no new work; send it to another instance");
  }
  if (!job->affinity.empty()) {
    for (auto& d : devices_) {
      if (d->id() != job->affinity) continue;
      if (!d->healthy()) {
        return absl::UnavailableError(absl::StrCat(
            d->id(), " is unhealthy; state that lived on it is lost"));
      }
      if (d->TryPush(job)) return absl::OkStatus();
      return absl::ResourceExhaustedError(
          absl::StrCat("the ", d->id(), " queue is full; retry later"));
    }
    return absl::NotFoundError(absl::StrCat("this server has no device ", job->affinity));
  }
  if (TrySmallOnCpu(job)) return absl::OkStatus();
  bool want_gpu = job->preference == DevicePreference::kGpu ||
                  (job->preference == DevicePreference::kAny && gpu_count() > 0);
  if (job->preference == DevicePreference::kGpu && gpu_count() == 0) {
    return absl::FailedPreconditionError("device.kind is GPU but this server has no GPU");
  }
  DeviceKind kind = want_gpu ? DeviceKind::kCuda : DeviceKind::kCpu;
  // Least loaded first (equally loaded ones in turn, below).
  std::vector<DeviceQueue*> candidates;
  for (auto& d : devices_) {
    if (d->kind() == kind && d->healthy() && d->can_hold(job->device_bytes)) {
      candidates.push_back(d.get());
    }
  }
  if (candidates.empty() && kind == DeviceKind::kCpu) {
    return absl::UnavailableError("the CPU device is unhealthy and takes no work");
  }
  if (candidates.empty()) {
    if (job->preference == DevicePreference::kAny && kind == DeviceKind::kCuda) {
      // Too large for every GPU: the CPU takes it.
      for (auto& d : devices_) {
        if (d->kind() == DeviceKind::kCpu && d->healthy()) candidates.push_back(d.get());
      }
      if (candidates.empty()) {
        return absl::UnavailableError(
            absl::StrCat("the job needs about ", job->device_bytes,
                         " bytes of device memory, no healthy GPU has that and the CPU is "
                         "unhealthy"));
      }
    } else {
      return absl::ResourceExhaustedError(
          absl::StrCat("the job needs about ", job->device_bytes,
                       " bytes of device memory; no healthy GPU has that"));
    }
  }
  // Each device's load read once (it changes as workers finish), least loaded first. Equally
  // loaded devices take turns: jobs that spend little of their call in the pool (a request
  // whose host side is longer than its device time) find every device idle, and "ties to the
  // first" would send them all to one GPU while the other stays idle.
  std::vector<std::pair<int, DeviceQueue*>> by_load;
  for (DeviceQueue* d : candidates) by_load.emplace_back(d->Load(), d);
  std::stable_sort(by_load.begin(), by_load.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t tied = 1;
  while (tied < by_load.size() && by_load[tied].first == by_load[0].first) ++tied;
  if (tied > 1) {
    const size_t first = static_cast<size_t>(ties_.fetch_add(1) % tied);
    std::rotate(by_load.begin(), by_load.begin() + static_cast<std::ptrdiff_t>(first),
                by_load.begin() + static_cast<std::ptrdiff_t>(tied));
  }
  for (const auto& [load, d] : by_load) {
    if (d->TryPush(job)) return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("all ", kind == DeviceKind::kCuda ? "GPU" : "CPU",
                   " queues are full; retry later"));
}

bool DevicePool::TrySmallOnCpu(const std::shared_ptr<Job>& job) {
  if (job->preference != DevicePreference::kAny || small_job_bytes_ <= 0 ||
      job->device_bytes <= 0 || job->device_bytes > small_job_bytes_ || gpu_count() == 0) {
    return false;
  }
  // The least loaded healthy CPU device with room.
  DeviceQueue* best = nullptr;
  int best_load = 0;
  for (auto& d : devices_) {
    if (d->kind() != DeviceKind::kCpu || !d->healthy()) continue;
    const int load = d->Load();
    if (load >= kSmallJobCpuLoadPerWorker * d->workers()) continue;
    if (best == nullptr || load < best_load) {
      best = d.get();
      best_load = load;
    }
  }
  return best != nullptr && best->TryPush(job);
}

bool DevicePool::Drain(std::chrono::milliseconds timeout) {
  draining_.store(true);
  Clock::time_point until = Clock::now() + timeout;
  bool all_idle = true;
  for (auto& d : devices_) all_idle = d->WaitIdle(until) && all_idle;
  if (!all_idle) {
    // Out of time: queued jobs complete UNAVAILABLE (Stop), running ones are asked to stop; those
    // that poll their cancellation (renders, unwrap jobs) end within a moment.
    int asked = 0;
    for (auto& d : devices_) asked += d->CancelRunning();
    if (asked > 0) {
      std::cerr << "fresneld: drain timeout: asked " << asked << " running job(s) to stop\n";
    }
  }
  for (auto& d : devices_) d->Stop();
  return all_idle;
}

std::vector<DeviceSnapshot> DevicePool::Snapshot() const {
  std::vector<DeviceSnapshot> out;
  for (const auto& d : devices_) out.push_back(d->Snapshot());
  return out;
}

bool DevicePool::MarkUnhealthy(const std::string& device_id, const std::string& reason) {
  for (auto& d : devices_) {
    if (d->id() != device_id) continue;
    if (d->SetUnhealthy(reason)) NotifyHealth(device_id, false, reason);
    return true;
  }
  return false;
}

void DevicePool::MarkGpuUnhealthy(int ordinal, const std::string& reason) {
  for (auto& d : devices_) {
    if (d->kind() != DeviceKind::kCuda || d->ordinal() != ordinal) continue;
    if (d->SetUnhealthy(reason)) NotifyHealth(d->id(), false, reason);
  }
}

void DevicePool::AddHealthListener(
    std::function<void(const std::string&, bool, const std::string&)> fn) {
  std::lock_guard<std::mutex> lock(health_mu_);
  health_listeners_.push_back(std::move(fn));
}

void DevicePool::NotifyHealth(const std::string& id, bool healthy, const std::string& reason) {
  std::vector<std::function<void(const std::string&, bool, const std::string&)>> fns;
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    fns = health_listeners_;
  }
  for (auto& fn : fns) fn(id, healthy, reason);
}

int DevicePool::InFlight() const {
  int n = 0;
  for (const auto& d : devices_) n += d->Load();
  return n;
}

}  // namespace fresnel::server
