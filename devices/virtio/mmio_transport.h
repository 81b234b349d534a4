// SPDX-License-Identifier: Apache-2.0
// The virtio-mmio transport, version 2 (virtio 1.2 section 4.2): the register
// window a guest driver sees for one VirtioDevice. Feature negotiation, the
// device status state machine, queue setup, the interrupt (ISR bits), the
// config generation, and the hand-over of the data plane to the event loop.
//
// Threading model (the choice and why):
//  - Registers (Read/Write) are accessed from any number of vCPU threads and
//    are serialised by one mutex (mu_). The mutex is never held while waiting
//    for anything, and vCPU threads never wait for the loop thread, so a vCPU
//    cannot deadlock with the data plane, and a slow device cannot stall
//    MMIO exits.
//  - The data plane (the device's Activate/QueueNotify/Reset and the Queue
//    objects it uses) runs on the event-loop thread only. Hand-over is by
//    EventLoop::Post (FIFO): DRIVER_OK snapshots the driver's queue
//    configuration under mu_ and posts the activation; writing 0 to Status
//    resets every register at once (the driver reads 0 back immediately, as
//    virtio 1.2 section 2.4 asks) and posts the device's Reset(). An epoch
//    counter, bumped by every reset, makes a posted activation that a reset
//    overtook a no-op, and makes notifications, interrupts and ReportBroken()
//    from a data plane that is being torn down go nowhere. The rings the
//    driver configures after a reset are separate Queue copies, so the loop
//    never reads state a vCPU is writing.
//  - Queue notifications always travel through one eventfd per queue, watched
//    on the loop: KVM signals it directly when a NotifyRegistrar registered
//    it as an ioeventfd (QueueNotify at base+0x50, datamatch = queue index);
//    a QueueNotify write that does exit to us signals the same eventfd.
//
// Lifetime: Create() and destruction happen on the loop thread or while the
// loop is not running (EventLoop::Add/Remove rule). Posted tasks hold a
// weak_ptr, so destroying the transport with tasks queued is safe. memory,
// loop and registrar must outlive the transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "platform/interrupt/interrupt_line.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/virtio_device.h"
#include "base/event_loop.h"
#include "base/eventfd.h"
#include "platform/bus/bus.h"
#include "platform/memory/guest_memory.h"

namespace dsec::virtio {

// Register offsets (virtio 1.2 section 4.2.2, table "MMIO Device Register
// Layout").
namespace mmio {
inline constexpr uint64_t kMagicValue = 0x000;
inline constexpr uint64_t kVersion = 0x004;
inline constexpr uint64_t kDeviceId = 0x008;
inline constexpr uint64_t kVendorId = 0x00c;
inline constexpr uint64_t kDeviceFeatures = 0x010;
inline constexpr uint64_t kDeviceFeaturesSel = 0x014;
inline constexpr uint64_t kDriverFeatures = 0x020;
inline constexpr uint64_t kDriverFeaturesSel = 0x024;
inline constexpr uint64_t kQueueSel = 0x030;
inline constexpr uint64_t kQueueNumMax = 0x034;
inline constexpr uint64_t kQueueNum = 0x038;
inline constexpr uint64_t kQueueReady = 0x044;
inline constexpr uint64_t kQueueNotify = 0x050;
inline constexpr uint64_t kInterruptStatus = 0x060;
inline constexpr uint64_t kInterruptAck = 0x064;
inline constexpr uint64_t kStatus = 0x070;
inline constexpr uint64_t kQueueDescLow = 0x080;
inline constexpr uint64_t kQueueDescHigh = 0x084;
inline constexpr uint64_t kQueueDriverLow = 0x090;
inline constexpr uint64_t kQueueDriverHigh = 0x094;
inline constexpr uint64_t kQueueDeviceLow = 0x0a0;
inline constexpr uint64_t kQueueDeviceHigh = 0x0a4;
inline constexpr uint64_t kShmSel = 0x0ac;
inline constexpr uint64_t kShmLenLow = 0x0b0;
inline constexpr uint64_t kShmLenHigh = 0x0b4;
inline constexpr uint64_t kShmBaseLow = 0x0b8;
inline constexpr uint64_t kShmBaseHigh = 0x0bc;
inline constexpr uint64_t kConfigGeneration = 0x0fc;
inline constexpr uint64_t kConfig = 0x100;
inline constexpr uint64_t kWindowSize = 0x1000;

inline constexpr uint32_t kMagic = 0x74726976;  // "virt"
inline constexpr uint32_t kVersion2 = 2;
inline constexpr uint32_t kVendor = 0x43455344;  // "DSEC"

// InterruptStatus bits (section 4.2.2).
inline constexpr uint32_t kIsrUsedBuffer = 1;
inline constexpr uint32_t kIsrConfigChange = 2;
}  // namespace mmio

// Keeps a queue-notify route alive; dropping it unregisters it.
class NotifyRegistration {
 public:
  virtual ~NotifyRegistration() = default;
};

// Routes a guest's queue notification straight to an eventfd without a
// userspace exit. The VM implements it with KVM_IOEVENTFD (with DATAMATCH);
// tests use a fake or none.
class NotifyRegistrar {
 public:
  virtual ~NotifyRegistrar() = default;
  // A `len`-byte guest write of `datamatch` to `gpa` signals `fd`.
  virtual absl::StatusOr<std::unique_ptr<NotifyRegistration>> Register(uint64_t gpa, uint32_t len,
                                                                       uint64_t datamatch,
                                                                       int fd) = 0;
};

class MmioTransport : public bus::BusDevice, public std::enable_shared_from_this<MmioTransport> {
 public:
  struct Options {
    std::string name;   // for logs ("virtio-rng0")
    uint64_t base = 0;  // guest-physical base of the 4 KiB window
    std::shared_ptr<VirtioDevice> device;
    const memory::GuestMemory* memory = nullptr;
    std::shared_ptr<devices::InterruptLine> interrupt;
    EventLoop* loop = nullptr;
    NotifyRegistrar* registrar = nullptr;  // optional
  };
  static absl::StatusOr<std::shared_ptr<MmioTransport>> Create(Options options);
  ~MmioTransport() override;

  MmioTransport(const MmioTransport&) = delete;
  MmioTransport& operator=(const MmioTransport&) = delete;

  // bus::BusDevice: vCPU threads. Registers below 0x100 take aligned 4-byte
  // accesses (others read 0 / are ignored); config space takes 1/2/4/8.
  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  // Introspection, any thread.
  uint32_t status() const;  // as the driver reads it
  uint32_t config_generation() const { return config_generation_.load(); }
  uint32_t interrupt_status() const { return isr_.load(); }
  // Features the transport offers: the device's, restricted to the ring
  // features the queue implements, plus VERSION_1.
  uint64_t offered_features() const { return offered_features_; }
  const VirtioDevice& device() const { return *device_; }

  // For the owner's teardown, once the loop no longer runs: resets an
  // active device now, while what its back-end uses still exists (the bus
  // may keep this transport alive past the device's resources).
  void ResetDeviceForTeardown();

  // Snapshots (vmm/vm). SaveState: on the loop thread (the VM paused): the
  // registers, each queue's configuration and ring positions, and the
  // device's own state (VirtioDevice::SaveState). Unavailable while a queue
  // has requests in flight (the caller retries once they completed);
  // FailedPrecondition for a device whose state is not saved.
  absl::StatusOr<nlohmann::json> SaveState();
  // Before the loop runs: takes SaveState's JSON back (untrusted: every
  // field checked) and, for a device the driver had set DRIVER_OK on,
  // activates it with its queues where they were.
  absl::Status RestoreState(const nlohmann::json& state);

 private:
  class Notifier;
  explicit MmioTransport(Options options);

  uint32_t ReadRegister(uint64_t offset);
  void WriteRegister(uint64_t offset, uint32_t value);
  void WriteStatusLocked(uint32_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Queue* SelectedQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RaiseInterrupt(uint32_t isr_bit);

  // Loop thread.
  // What the device gets at activation, over active_queues_.
  ActivateContext ContextFor(uint64_t features);
  void ActivateOnLoop(uint64_t epoch, std::vector<Queue> queues, uint64_t features);
  void DeactivateOnLoop();
  void OnQueueNotify(uint16_t index);
  void SignalUsed(uint16_t index);
  void SignalConfigChanged();
  void ReportBroken(const absl::Status& reason);

  const std::string name_;
  const uint64_t base_;
  const std::shared_ptr<VirtioDevice> device_;
  const memory::GuestMemory* const memory_;
  const std::shared_ptr<devices::InterruptLine> interrupt_;
  EventLoop* const loop_;
  NotifyRegistrar* const registrar_;
  const uint64_t offered_features_;
  std::unique_ptr<Notifier> notifier_;

  mutable absl::Mutex mu_;
  uint32_t status_ ABSL_GUARDED_BY(mu_) = 0;  // without DEVICE_NEEDS_RESET
  uint32_t device_features_sel_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t driver_features_sel_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t driver_features_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t queue_sel_ ABSL_GUARDED_BY(mu_) = 0;
  bool needs_reset_ ABSL_GUARDED_BY(mu_) = false;
  // The driver's queue configuration (copied into active_queues_ at DRIVER_OK).
  std::vector<Queue> config_queues_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint32_t> isr_{0};
  std::atomic<uint32_t> config_generation_{0};
  std::atomic<uint64_t> epoch_{0};            // bumped by every reset
  std::atomic<bool> data_plane_live_{false};  // active and not broken

  // Loop thread only.
  std::vector<Queue> active_queues_;
  bool device_activated_ = false;  // device Activate() called since its last Reset()
  std::atomic<uint64_t> active_epoch_{~0ull};

  // Declared last: registrations are dropped before the eventfds close.
  std::vector<EventFd> notify_fds_;
  std::vector<std::unique_ptr<NotifyRegistration>> registrations_;
};

}  // namespace dsec::virtio
