// SPDX-License-Identifier: Apache-2.0
// The one virtqueue service loop that every device runs.
//
// A device owns one QueueWorker per queue it serves and calls Run() when the
// queue may have work (a kick, a timer, a backend becoming ready, a slot
// freed by a completion). Run():
//   1. does nothing unless the device's Activation is running() and the
//      queue is enabled;
//   2. before each chain asks the device's admit gate (optional) whether it
//      may take one now (rate limit tokens, I/O depth, a packet to deliver);
//   3. pops the chain (Queue::Pop; a ring error marks the device broken
//      through Activation::MarkBroken) and hands it to the device's
//      handler, which parses it (the device's *_request code) and says what
//      became of it (ChainResult): used with a length, kept for an
//      asynchronous completion, put back (Queue::UndoPop) because it cannot
//      be served now, requeued (put back and go on), or a device error;
//   4. returns used chains (Queue::AddUsed) and, once per run, asks the
//      transport to notify the driver (DriverNotifier::SignalUsed, which
//      applies VIRTIO_F_EVENT_IDX / NO_INTERRUPT via Queue::NeedsInterrupt);
//   5. after `budget` handler calls, stops and posts one continuation to the
//      event loop (guarded by Activation::Guard, so a reset device runs no
//      stale work), so that a guest that keeps its ring full cannot
//      monopolise the loop thread. The continuation calls the device's
//      `resume` function, which runs the worker again.
//
// Chains kept by the handler are returned later with Complete(), followed by
// SignalUsed() (or by a Run(), which signals at its end).
//
// Typical device code (loop thread):
//
//   QueueWorker worker_{activation_, 0, kDefaultChainBudget, [this] { Process(); }};
//   void Process() {
//     worker_.Run([&](DescriptorChain& chain) {
//       absl::StatusOr<Request> r = ParseRequest(activation_.memory(), chain);
//       if (!r.ok()) return ChainResult::Used(0);
//       ...
//       return ChainResult::Used(written);
//     });
//   }
//
// Threads: the event-loop thread only. A worker must not be run from inside
// its own handler.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "devices/virtio/activation.h"
#include "devices/virtio/descriptor_chain.h"

namespace dsec::virtio {

// Chains served per run before a worker yields the loop to other handlers,
// unless the device has a reason for another figure.
inline constexpr uint32_t kDefaultChainBudget = 64;

// What the device's handler did with one chain.
class ChainResult {
 public:
  enum class Kind : uint8_t {
    kUsed,     // return it now with len() bytes written into it
    kKept,     // the device returns it later (QueueWorker::Complete)
    kPutBack,  // cannot serve it now: back to the ring, end this run
    kRequeue,  // back to the ring, and go on (the next Pop returns it again)
    kBroken,   // the device cannot continue: reason()
  };

  static ChainResult Used(uint32_t len) { return ChainResult(Kind::kUsed, len, {}); }
  // Asynchronous requests (blk I/O, pmem flush) and buffers the device holds
  // (the balloon's statistics buffer).
  static ChainResult Kept() { return ChainResult(Kind::kKept, 0, {}); }
  // The device has arranged to be run again (a timer, a backend watch, the
  // driver's next kick); e.g. rate limited, no entropy, a backend that
  // would block, no packet for the guest.
  static ChainResult PutBack() { return ChainResult(Kind::kPutBack, 0, {}); }
  // E.g. a received frame too large for the buffer was dropped and the
  // buffer serves the next frame. Counts against the budget.
  static ChainResult Requeue() { return ChainResult(Kind::kRequeue, 0, {}); }
  // A device or backend failure (not a malformed request, which a device
  // completes with an error status or length 0).
  static ChainResult Broken(absl::Status reason) {
    return ChainResult(Kind::kBroken, 0, std::move(reason));
  }

  Kind kind() const { return kind_; }
  uint32_t len() const { return len_; }
  const absl::Status& reason() const { return reason_; }

 private:
  ChainResult(Kind kind, uint32_t len, absl::Status reason)
      : kind_(kind), len_(len), reason_(std::move(reason)) {}
  Kind kind_;
  uint32_t len_;
  absl::Status reason_;
};

// Why a run ended.
enum class RunStop : uint8_t {
  kInactive,     // not activated, broken before the run, or queue not enabled
  kEmpty,        // the ring has no more chains
  kNotAdmitted,  // the admit gate said no
  kPutBack,      // the handler put a chain back
  kBudget,       // budget used up; a continuation is posted
  kBroken,       // the device broke during the run
};

struct RunResult {
  RunStop stop = RunStop::kInactive;
  uint32_t handled = 0;  // handler calls in this run
};

class QueueWorker {
 public:
  using Handler = absl::FunctionRef<ChainResult(DescriptorChain& chain)>;
  using Admit = absl::FunctionRef<bool()>;

  // `activation` must outlive the worker (both are members of the device,
  // the activation declared first). `budget` > 0 handler calls per run.
  // `resume` runs the queue again from a posted continuation (the device's
  // own Process function, so that what it does after a run happens too).
  QueueWorker(Activation& activation, uint16_t queue_index, uint32_t budget,
              std::function<void()> resume);
  QueueWorker(const QueueWorker&) = delete;
  QueueWorker& operator=(const QueueWorker&) = delete;
  // Movable only before its first Run() (a posted continuation points at
  // it), e.g. to build a vector of workers in the device's constructor.
  QueueWorker(QueueWorker&&) = default;

  RunResult Run(Handler handle) {
    return Run([] { return true; }, handle);
  }
  RunResult Run(Admit admit, Handler handle);

  // Returns a chain the handler kept (AddUsed). False, with nothing done, if
  // the device is not running; false after marking the device broken if the
  // queue refuses it. The driver is notified at the next SignalUsed() or at
  // the end of the next Run().
  bool Complete(uint16_t head, uint32_t len);
  // Notifies the driver once if chains were returned since the last signal.
  void SignalUsed();

  uint16_t queue_index() const { return index_; }
  // A continuation of this activation is waiting on the loop.
  bool continuation_posted();

 private:
  // Forgets per-activation state left from an earlier activation.
  void Sync();
  void PostContinuation();

  Activation* activation_;
  uint16_t index_;
  uint32_t budget_;
  std::function<void()> resume_;
  uint64_t epoch_ = 0;  // the activation epoch the fields below belong to
  bool used_pending_ = false;
  bool posted_ = false;
  bool in_run_ = false;
};

}  // namespace dsec::virtio
