// SPDX-License-Identifier: Apache-2.0
#include "devices/pmem/pmem_device.h"

#include <algorithm>

#include "devices/pmem/pmem_request.h"
#include "base/event_loop.h"
#include "base/logging.h"
#include "base/status.h"
#include "absl/strings/str_cat.h"

namespace dsec::devices {

// One thread that runs blocking backend calls in submission order. Tasks
// hand their results back to the loop with EventLoop::Post.
class PmemDevice::SyncThread {
 public:
  SyncThread() : thread_([this] { Run(); }) {}
  ~SyncThread() {
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
            +[](SyncThread* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
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
  if (!options_.read_only) sync_thread_ = std::make_unique<SyncThread>();
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
  sync_thread_.reset();  // joins: no task runs after this
}

void PmemDevice::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  ReadPmemConfig(options_.start, options_.size, offset, data);
}

absl::Status PmemDevice::Activate(const virtio::ActivateContext& context) {
  activation_.Begin(context);
  DSEC_ASSIGN_OR_RETURN(
      check_timer_,
      context.loop->AddTimer(options_.size_check_interval_ns, options_.size_check_interval_ns,
                             activation_.Guard([this] { CheckSizeNow(); })));
  return absl::OkStatus();
}

void PmemDevice::CancelTimers() {
  if (activation_.active()) {
    if (delay_timer_ >= 0) (void)activation_.loop().CancelTimer(delay_timer_);
    if (check_timer_ >= 0) (void)activation_.loop().CancelTimer(check_timer_);
  }
  delay_timer_ = -1;
  check_timer_ = -1;
}

void PmemDevice::Reset() {
  CancelTimers();
  // Chains in flight are abandoned (their buffers belong to the guest again);
  // a sync still running completes into a guard that has expired.
  waiting_.clear();
  in_sync_.clear();
  sync_running_ = false;
  activation_.End();
}

void PmemDevice::CheckSizeNow() {
  if (!activation_.running()) return;
  absl::Status s = backend_->CheckSize();
  if (s.ok()) return;
  metrics_.size_changes.fetch_add(1, std::memory_order_relaxed);
  DSEC_LOG_RATELIMITED(err, 1, "device=virtio-pmem {}", s.ToString());
  if (check_timer_ >= 0) (void)activation_.loop().CancelTimer(check_timer_);
  check_timer_ = -1;
  activation_.MarkBroken(s);
}

absl::Status PmemDevice::WriteResponse(const virtio::DescriptorChain& chain, uint32_t ret) {
  virtio::ChainWriter writer(activation_.memory(), chain);
  // Cannot fail for a parsed chain (it has >= 4 writable bytes).
  return writer.WriteObj(ret);
}

void PmemDevice::QueueNotify(uint16_t queue_index) {
  if (queue_index == 0) Process();
}

void PmemDevice::Process() {
  worker_.Run([this](virtio::DescriptorChain& chain) { return Handle(chain); });
  MaybeStartSync();
}

virtio::ChainResult PmemDevice::Handle(virtio::DescriptorChain& chain) {
  absl::StatusOr<PmemRequest> request = ParsePmemRequest(activation_.memory(), chain);
  if (!request.ok()) {
    metrics_.bad_requests.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-pmem {}", request.status().ToString());
    return virtio::ChainResult::Used(0);
  }
  uint32_t ret = kPmemRespOk;
  if (request->type != kPmemReqTypeFlush) {
    // Guest-controlled: the type; anything but FLUSH gets an error status.
    metrics_.unknown_requests.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(warn, 1, "device=virtio-pmem unknown request type={}", request->type);
    ret = kPmemRespError;
  } else {
    metrics_.flush_requests.fetch_add(1, std::memory_order_relaxed);
    if (!options_.read_only) {
      // Completed when the sync that covers it is done (OnSyncDone).
      waiting_.push_back(std::move(chain));
      return virtio::ChainResult::Kept();
    }
  }
  if (absl::Status s = WriteResponse(chain, ret); !s.ok()) return virtio::ChainResult::Broken(s);
  return virtio::ChainResult::Used(sizeof(ret));
}

void PmemDevice::MaybeStartSync() {
  if (!activation_.running() || sync_running_ || waiting_.empty() || delay_timer_ >= 0) return;
  const int64_t now = options_.clock->NowNs();
  const int64_t since = now - last_sync_start_ns_;
  if (synced_once_ && since < options_.flush_min_interval_ns) {
    absl::StatusOr<int> id = activation_.loop().AddTimer(
        options_.flush_min_interval_ns - since, 0, activation_.Guard([this] {
          delay_timer_ = -1;  // one-shot timers remove themselves
          MaybeStartSync();
        }));
    if (!id.ok()) {
      activation_.MarkBroken(id.status());
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
  EventLoop* loop = &activation_.loop();
  std::shared_ptr<PmemBackend> backend = backend_;
  // The status travels in a slot the guarded task reads when it runs on the
  // loop (the guard is made here, on the loop thread).
  auto result = std::make_shared<absl::Status>();
  std::function<void()> done = activation_.Guard([this, result] { OnSyncDone(*result); });
  sync_thread_->Submit([loop, backend, result, done = std::move(done)] {
    // Worker thread: may block on the disk.
    absl::Status status = backend->CheckSize();
    if (status.ok()) status = backend->Flush();
    *result = status;
    loop->Post(done);  // Post orders the write above before the task runs
  });
  metrics_.syncs.fetch_add(1, std::memory_order_relaxed);
}

void PmemDevice::OnSyncDone(const absl::Status& status) {
  sync_running_ = false;
  if (!activation_.running()) return;
  const uint32_t ret = status.ok() ? kPmemRespOk : kPmemRespError;
  if (!status.ok()) {
    metrics_.flush_errors.fetch_add(in_sync_.size(), std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(err, 1, "device=virtio-pmem flush failed: {}", status.ToString());
  }
  std::vector<virtio::DescriptorChain> done = std::move(in_sync_);
  in_sync_.clear();
  for (const virtio::DescriptorChain& c : done) {
    if (absl::Status s = WriteResponse(c, ret); !s.ok()) {
      activation_.MarkBroken(s);
      return;
    }
    if (!worker_.Complete(c.head, sizeof(ret))) return;
  }
  worker_.SignalUsed();
  if (absl::IsFailedPrecondition(status)) {
    // The file changed size under the mapping: the guest's view is gone.
    metrics_.size_changes.fetch_add(1, std::memory_order_relaxed);
    activation_.MarkBroken(status);
    return;
  }
  MaybeStartSync();
}

absl::StatusOr<nlohmann::json> PmemDevice::SaveState() const {
  if (pending_flushes() > 0) {
    return absl::UnavailableError("virtio-pmem: flushes in flight");
  }
  return nlohmann::json{{"start", options_.start},
                        {"size", options_.size},
                        {"read_only", options_.read_only}};
}

absl::Status PmemDevice::RestoreState(const nlohmann::json& state) {
  const nlohmann::json want = {{"start", options_.start},
                               {"size", options_.size},
                               {"read_only", options_.read_only}};
  if (state != want) {
    return absl::FailedPreconditionError(
        absl::StrCat("virtio-pmem: the snapshot's window ", state.dump(), " is not this one's ",
                     want.dump(), " (the image or its placement changed)"));
  }
  return absl::OkStatus();
}

}  // namespace dsec::devices
