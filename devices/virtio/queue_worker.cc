// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/queue_worker.h"

#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "base/event_loop.h"
#include "base/status.h"

namespace dsec::virtio {

QueueWorker::QueueWorker(Activation& activation, uint16_t queue_index, uint32_t budget,
                         std::function<void()> resume)
    : activation_(&activation), index_(queue_index), budget_(budget), resume_(std::move(resume)) {
  DSEC_CHECK(budget_ > 0 && resume_ != nullptr);
}

void QueueWorker::Sync() {
  if (epoch_ == activation_->epoch()) return;
  epoch_ = activation_->epoch();
  used_pending_ = false;
  posted_ = false;  // an older continuation is guarded out and never runs
}

bool QueueWorker::continuation_posted() {
  Sync();
  return posted_;
}

RunResult QueueWorker::Run(Admit admit, Handler handle) {
  Sync();
  RunResult result;
  if (!activation_->running()) return result;
  Queue& queue = activation_->queue(index_);
  if (!queue.active()) return result;
  DSEC_DCHECK(!in_run_);
  in_run_ = true;
  const uint64_t epoch = epoch_;
  for (;;) {
    if (result.handled == budget_) {
      result.stop = RunStop::kBudget;
      PostContinuation();
      break;
    }
    if (!admit()) {
      result.stop = RunStop::kNotAdmitted;
      break;
    }
    absl::StatusOr<std::optional<DescriptorChain>> chain = queue.Pop();
    if (!chain.ok()) {
      activation_->MarkBroken(chain.status());
      result.stop = RunStop::kBroken;
      break;
    }
    if (!chain->has_value()) {
      result.stop = RunStop::kEmpty;
      break;
    }
    ++result.handled;
    DescriptorChain& c = **chain;
    const uint16_t head = c.head;
    ChainResult done = handle(c);
    // The handler may have marked the device broken itself.
    if (!activation_->running() || activation_->epoch() != epoch) {
      result.stop = RunStop::kBroken;
      break;
    }
    bool stop = false;
    switch (done.kind()) {
      case ChainResult::Kind::kUsed:
        // (Complete() without its checks: this run made them.)
        if (absl::Status s = queue.AddUsed(head, done.len()); !s.ok()) {
          activation_->MarkBroken(s);
          result.stop = RunStop::kBroken;
          stop = true;
        } else {
          used_pending_ = true;
        }
        break;
      case ChainResult::Kind::kKept:
        break;
      case ChainResult::Kind::kPutBack:
        queue.UndoPop();
        result.stop = RunStop::kPutBack;
        stop = true;
        break;
      case ChainResult::Kind::kRequeue:
        queue.UndoPop();
        break;
      case ChainResult::Kind::kBroken:
        activation_->MarkBroken(done.reason());
        result.stop = RunStop::kBroken;
        stop = true;
        break;
    }
    if (stop) break;
  }
  in_run_ = false;
  // One notification per run, for everything returned in it (and by
  // Complete() calls since the last one). A broken device tells the driver
  // nothing more: it will reset.
  SignalUsed();
  return result;
}

bool QueueWorker::Complete(uint16_t head, uint32_t len) {
  Sync();
  if (!activation_->running()) return false;
  if (absl::Status s = activation_->queue(index_).AddUsed(head, len); !s.ok()) {
    activation_->MarkBroken(s);
    return false;
  }
  used_pending_ = true;
  return true;
}

void QueueWorker::SignalUsed() {
  Sync();
  if (!used_pending_ || !activation_->running()) return;
  used_pending_ = false;
  activation_->notifier().SignalUsed(index_);
}

void QueueWorker::PostContinuation() {
  if (posted_) return;
  posted_ = true;
  // The guard drops the task if the device is reset (or destroyed) before
  // it runs; within the same activation `this` is alive.
  activation_->loop().Post(activation_->Guard([this] {
    posted_ = false;
    resume_();
  }));
}

}  // namespace dsec::virtio
