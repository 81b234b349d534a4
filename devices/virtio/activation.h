// SPDX-License-Identifier: Apache-2.0
// What a virtio device holds from Activate() until Reset(), and the one way a
// device gives up ("broken").
//
// Every device keeps one Activation as a member: Activate() calls
// Begin(context), Reset() (and the destructor, if still active) calls End().
// In between:
//  - context(), queue(i), memory(), notifier() and loop() are what the
//    transport handed over (virtio_device.h, ActivateContext);
//  - MarkBroken(reason) is how the device, or one of its QueueWorkers on a
//    ring error, stops for good: it records the first reason, runs the
//    device's on-broken hook (cancel timers, stop watching backend fds),
//    calls DriverNotifier::ReportBroken once (the transport sets
//    DEVICE_NEEDS_RESET, virtio 1.2 section 2.1.2) and makes running()
//    false, which stops every QueueWorker of the device until the driver
//    resets it;
//  - Guard(task) wraps work posted to the loop and timer callbacks so that
//    they do nothing once this activation is over (Reset, a later
//    Activate, or the device's destruction): a stale continuation never
//    touches rings the driver has re-initialised.
//
// Threads: the event-loop thread only, like everything a device does
// between Activate() and Reset(). A task returned by Guard() may be handed
// to EventLoop::Post from any thread, but it is created and it runs on the
// loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "base/status.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/virtio_device.h"

namespace dsec {
class EventLoop;
}  // namespace dsec

namespace dsec::virtio {

class Activation {
 public:
  // `on_broken` (optional) runs once, on the loop thread, when the device
  // is marked broken, before the driver is told; it may not call Begin/End.
  explicit Activation(std::function<void(const absl::Status&)> on_broken = nullptr)
      : on_broken_(std::move(on_broken)) {}
  Activation(const Activation&) = delete;
  Activation& operator=(const Activation&) = delete;

  // Activate(): keeps `context` and starts a new activation (not broken,
  // fresh guard). Ends the previous one if the device did not.
  void Begin(const ActivateContext& context);
  // Reset(): drops the context, clears the broken state and expires every
  // guard handed out since Begin().
  void End();

  // Between Begin() and End().
  bool active() const { return active_; }
  bool broken() const { return broken_; }
  // Active and not broken: the device may use its queues.
  bool running() const { return active_ && !broken_; }
  // The first reason given to MarkBroken() in this activation (OK if none).
  const absl::Status& broken_reason() const { return broken_reason_; }
  // Bumped by every Begin() and End(): lets per-queue state notice that
  // the activation it belongs to is over.
  uint64_t epoch() const { return epoch_; }

  // See the file comment. A no-op when not active or already broken (the
  // first reason is the one the driver hears about).
  void MarkBroken(const absl::Status& reason);

  // A task that runs `task` only if this activation is still the current one
  // when it runs (see the file comment). Outside an activation, a task that
  // does nothing.
  std::function<void()> Guard(std::function<void()> task) const;

  // What Activate() was given. Valid while active() (checked).
  const ActivateContext& context() const {
    DSEC_CHECK(active_);
    return context_;
  }
  Queue& queue(uint16_t index) const {
    DSEC_CHECK(active_ && index < context_.queues.size());
    return context_.queues[index];
  }
  const memory::GuestMemory& memory() const { return *context().memory; }
  DriverNotifier& notifier() const { return *context().notifier; }
  EventLoop& loop() const { return *context().loop; }

 private:
  const std::function<void(const absl::Status&)> on_broken_;
  ActivateContext context_;
  bool active_ = false;
  bool broken_ = false;
  absl::Status broken_reason_;
  uint64_t epoch_ = 0;
  // Alive from Begin() to End(); guards hold a weak_ptr to it. Destroying
  // the device (and so this object) expires them too.
  std::shared_ptr<const uint64_t> token_;
};

}  // namespace dsec::virtio
