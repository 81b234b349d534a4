// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_device.h"

#include <algorithm>

#include "devices/pmem/pmem_request.h"
#include "base/event_loop.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {

namespace {
// Chains served per kick before yielding the loop to other devices.
constexpr int kMaxChainsPerRun = 64;
}  // namespace

// One thread that runs blocking backend calls in submission order. Tasks
// hand their results back to the loop with EventLoop::Post.
class PmemDevice::Worker {
 public:
  Worker() : thread_([this] { Run(); }) {}
  ~Worker() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void Submit(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Worker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
              return w->stop_ || !w->tasks_.empty();
            },
            this));
        if (tasks_.empty()) return;  // stop_ and nothing left
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

PmemDevice::PmemDevice(std::unique_ptr<PmemBackend> backend, PmemOptions options)
    : backend_(std::move(backend)), options_(options) {
  if (!options_.read_only) worker_ = std::make_unique<Worker>();
}

absl::StatusOr<std::shared_ptr<PmemDevice>> PmemDevice::Create(
    std::unique_ptr<PmemBackend> backend, PmemOptions options) {
  if (!backend) return absl::InvalidArgumentError("virtio-pmem: no backend");
  uint16_t q = options.queue_size;
  if (q == 0 || q > virtio::kMaxQueueSize || (q & (q - 1)) != 0) {
    return absl::InvalidArgumentError("virtio-pmem: queue size must be a power of two <= 32768");
  }
  if (options.size == 0 || options.clock == nullptr || options.flush_min_interval_ns < 0 ||
      options.size_check_interval_ns <= 0) {
    return absl::InvalidArgumentError("virtio-pmem: size, clock and intervals required");
  }
  return std::shared_ptr<PmemDevice>(new PmemDevice(std::move(backend), options));
}

PmemDevice::~PmemDevice() {
  CancelTimers();
  worker_.reset();  // joins: no task runs after this
}

void PmemDevice::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  ReadPmemConfig(options_.start, options_.size, offset, data);
}

absl::Status PmemDevice::Activate(const virtio::ActivateContext& context) {
  context_ = context;
  active_ = true;
  std::weak_ptr<PmemDevice> weak = weak_from_this();
  const uint64_t generation = generation_;
  DSEC_ASSIGN_OR_RETURN(
      check_timer_,
      context_.loop->AddTimer(options_.size_check_interval_ns, options_.size_check_interval_ns,
                              [weak, generation] {
                                auto self = weak.lock();
                                if (self && self->generation_ == generation) self->CheckSizeNow();
                              }));
  return absl::OkStatus();
}

void PmemDevice::CancelTimers() {
  if (context_.loop != nullptr) {
    if (delay_timer_ >= 0) (void)context_.loop->CancelTimer(delay_timer_);
    if (check_timer_ >= 0) (void)context_.loop->CancelTimer(check_timer_);
  }
  delay_timer_ = -1;
  check_timer_ = -1;
}

void PmemDevice::Reset() {
  CancelTimers();
  // Chains in flight are abandoned (their buffers belong to the guest again);
  // a sync still running completes into a stale generation and is ignored.
  waiting_.clear();
  in_sync_.clear();
  sync_running_ = false;
  process_posted_ = false;
  context_ = {};
  active_ = false;
  ++generation_;
}

void PmemDevice::Broken(const absl::Status& reason) {
  context_.notifier->ReportBroken(reason);
  active_ = false;
}

void PmemDevice::CheckSizeNow() {
  if (!active_) return;
  absl::Status s = backend_->CheckSize();
  if (s.ok()) return;
  metrics_.size_changes.fetch_add(1, std::memory_order_relaxed);
  DSEC_LOG_RATELIMITED(err, 1, "device=virtio-pmem {}", s.ToString());
  if (check_timer_ >= 0) (void)context_.loop->CancelTimer(check_timer_);
  check_timer_ = -1;
  Broken(s);
}

bool PmemDevice::Complete(const virtio::DescriptorChain& chain, uint32_t ret) {
  virtio::ChainWriter writer(*context_.memory, chain);
  // Cannot fail for a parsed chain (it has >= 4 writable bytes).
  if (absl::Status s = writer.WriteObj(ret); !s.ok()) {
    Broken(s);
    return false;
  }
  if (absl::Status s = context_.queues[0].AddUsed(chain.head, sizeof(ret)); !s.ok()) {
    Broken(s);
    return false;
  }
  return true;
}

void PmemDevice::QueueNotify(uint16_t queue_index) {
  if (queue_index == 0) Process();
}

void PmemDevice::Process() {
  if (!active_) return;
  virtio::Queue& queue = context_.queues[0];
  if (!queue.active()) return;
  bool used_any = false;
  bool more = false;
  for (int served = 0;; ++served) {
    if (served == kMaxChainsPerRun) {
      more = true;
      break;
    }
    absl::StatusOr<std::optional<virtio::DescriptorChain>> chain = queue.Pop();
    if (!chain.ok()) {
      Broken(chain.status());
      return;
    }
    if (!chain->has_value()) break;
    virtio::DescriptorChain& c = **chain;
    absl::StatusOr<PmemRequest> request = ParsePmemRequest(*context_.memory, c);
    if (!request.ok()) {
      metrics_.bad_requests.fetch_add(1, std::memory_order_relaxed);
      DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-pmem {}", request.status().ToString());
      if (absl::Status s = queue.AddUsed(c.head, 0); !s.ok()) {
        Broken(s);
        return;
      }
      used_any = true;
      continue;
    }
    if (request->type != kPmemReqTypeFlush) {
      // Guest-controlled: the type; anything but FLUSH gets an error status.
      metrics_.unknown_requests.fetch_add(1, std::memory_order_relaxed);
      DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-pmem unknown request type={}", request->type);
      if (!Complete(c, kPmemRespError)) return;
      used_any = true;
      continue;
    }
    metrics_.flush_requests.fetch_add(1, std::memory_order_relaxed);
    if (options_.read_only) {
      if (!Complete(c, kPmemRespOk)) return;
      used_any = true;
      continue;
    }
    waiting_.push_back(std::move(c));
  }
  if (used_any) context_.notifier->SignalUsed(0);
  MaybeStartSync();
  if (more && !process_posted_) {
    process_posted_ = true;
    std::weak_ptr<PmemDevice> weak = weak_from_this();
    const uint64_t generation = generation_;
    context_.loop->Post([weak, generation] {
      auto self = weak.lock();
      if (!self || self->generation_ != generation) return;
      self->process_posted_ = false;
      self->Process();
    });
  }
}

void PmemDevice::MaybeStartSync() {
  if (!active_ || sync_running_ || waiting_.empty() || delay_timer_ >= 0) return;
  std::weak_ptr<PmemDevice> weak = weak_from_this();
  const uint64_t generation = generation_;
  const int64_t now = options_.clock->NowNs();
  const int64_t since = now - last_sync_start_ns_;
  if (synced_once_ && since < options_.flush_min_interval_ns) {
    absl::StatusOr<int> id = context_.loop->AddTimer(
        options_.flush_min_interval_ns - since, 0, [weak, generation] {
          auto self = weak.lock();
          if (!self || self->generation_ != generation) return;
          self->delay_timer_ = -1;  // one-shot timers remove themselves
          self->MaybeStartSync();
        });
    if (!id.ok()) {
      Broken(id.status());
      return;
    }
    delay_timer_ = *id;
    return;
  }
  in_sync_ = std::move(waiting_);
  waiting_.clear();
  sync_running_ = true;
  synced_once_ = true;
  last_sync_start_ns_ = now;
  EventLoop* loop = context_.loop;
  std::shared_ptr<PmemBackend> backend = backend_;
  worker_->Submit([weak, generation, loop, backend] {
    // Worker thread: may block on the disk.
    absl::Status status = backend->CheckSize();
    if (status.ok()) status = backend->Flush();
    loop->Post([weak, generation, status] {
      auto self = weak.lock();
      if (!self || self->generation_ != generation) return;
      self->OnSyncDone(status);
    });
  });
  metrics_.syncs.fetch_add(1, std::memory_order_relaxed);
}

void PmemDevice::OnSyncDone(const absl::Status& status) {
  sync_running_ = false;
  if (!active_) return;
  const uint32_t ret = status.ok() ? kPmemRespOk : kPmemRespError;
  if (!status.ok()) {
    metrics_.flush_errors.fetch_add(in_sync_.size(), std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(err, 1, "device=virtio-pmem flush failed: {}", status.ToString());
  }
  std::vector<virtio::DescriptorChain> done = std::move(in_sync_);
  in_sync_.clear();
  for (const virtio::DescriptorChain& c : done) {
    if (!Complete(c, ret)) return;
  }
  if (!done.empty()) context_.notifier->SignalUsed(0);
  if (absl::IsFailedPrecondition(status)) {
    // The file changed size under the mapping: the guest's view is gone.
    metrics_.size_changes.fetch_add(1, std::memory_order_relaxed);
    Broken(status);
    return;
  }
  MaybeStartSync();
}

}  // namespace dsec::devices
