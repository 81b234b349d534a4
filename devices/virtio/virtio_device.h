// SPDX-License-Identifier: Apache-2.0
// The transport-agnostic virtio device interface (virtio 1.2 sections 2 and
// 5). A device (rng, blk, vsock, ...) implements VirtioDevice; a transport
// (MmioTransport, virtio 1.2 section 4.2) owns the registers, the feature
// negotiation, the status state machine, the queues and the interrupt, and
// calls the device at the points documented below. Devices never see the
// transport.
//
// Threads (the contract every device relies on):
//  - vCPU threads (any number, concurrently): device_type(), device_features(),
//    num_queues(), queue_max_size(), ReadConfig(), WriteConfig(). These must
//    be thread-safe, must not block and must not do file I/O. The first four
//    must return constants for the device's lifetime.
//  - the event-loop thread (one thread, see base/event_loop.h): Activate(),
//    QueueNotify(), Reset(), and everything the device does with its queues.
//    Queue objects are owned by the loop thread from Activate() until Reset().
//  - DriverNotifier methods may be called from the loop thread (and
//    SignalConfigChanged/ReportBroken from any thread).
//
// Lifecycle as seen by a device:
//   [constructed] --Activate()--> [active: QueueNotify()*] --Reset()--> [reset]
//   --Activate()--> ... A device can be activated again after Reset() (the
//   driver re-initialises it). Reset() is also called when the transport is
//   destroyed while the device is active. If Activate() fails, Reset() is
//   still called before the next Activate().
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "platform/memory/guest_memory.h"

namespace dsec {
class EventLoop;
}  // namespace dsec

namespace dsec::virtio {

class Queue;

// Device IDs (virtio 1.2 section 5, table "Device Types").
enum class DeviceType : uint32_t {
  kNet = 1,
  kBlock = 2,
  kConsole = 3,
  kEntropy = 4,
  kBalloon = 5,
  kScsi = 8,
  k9p = 9,
  kGpu = 16,
  kInput = 18,
  kVsock = 19,
  kFs = 26,
  kPmem = 27,
};

// Reserved (device-independent) feature bits, virtio 1.2 section 6.
inline constexpr uint64_t kFeatureRingIndirectDesc = 1ull << 28;  // VIRTIO_F_INDIRECT_DESC
inline constexpr uint64_t kFeatureRingEventIdx = 1ull << 29;      // VIRTIO_F_EVENT_IDX
inline constexpr uint64_t kFeatureVersion1 = 1ull << 32;          // VIRTIO_F_VERSION_1
inline constexpr uint64_t kFeatureAccessPlatform = 1ull << 33;    // VIRTIO_F_ACCESS_PLATFORM
inline constexpr uint64_t kFeatureRingPacked = 1ull << 34;        // VIRTIO_F_RING_PACKED
inline constexpr uint64_t kFeatureInOrder = 1ull << 35;           // VIRTIO_F_IN_ORDER

// Device status bits (virtio 1.2 section 2.1).
inline constexpr uint32_t kStatusAcknowledge = 1;
inline constexpr uint32_t kStatusDriver = 2;
inline constexpr uint32_t kStatusDriverOk = 4;
inline constexpr uint32_t kStatusFeaturesOk = 8;
inline constexpr uint32_t kStatusDeviceNeedsReset = 64;
inline constexpr uint32_t kStatusFailed = 128;

// The largest queue size of a split virtqueue (virtio 1.2 section 2.7).
inline constexpr uint16_t kMaxQueueSize = 32768;

// How an active device tells the driver something happened. Implemented by
// the transport; valid from Activate() until Reset() returns.
class DriverNotifier {
 public:
  virtual ~DriverNotifier() = default;

  // The device added used buffers to queue `queue_index` (Queue::AddUsed).
  // The transport decides whether the driver wants an interrupt
  // (VIRTIO_F_EVENT_IDX used_event / VIRTQ_AVAIL_F_NO_INTERRUPT, via
  // Queue::NeedsInterrupt), sets the ISR "used buffer" bit and raises the
  // interrupt. Call once after a batch of AddUsed, not per buffer.
  // Loop thread only.
  virtual void SignalUsed(uint16_t queue_index) = 0;

  // The device-specific configuration space changed: the transport bumps the
  // config generation and sends a configuration change notification.
  // Any thread.
  virtual void SignalConfigChanged() = 0;

  // The device cannot continue: the guest violated the protocol (a ring
  // error from Queue::Pop, a malformed request the device treats as fatal)
  // or the backend failed for good. The transport sets DEVICE_NEEDS_RESET
  // (status bit 64), sends a configuration change notification, and stops
  // delivering QueueNotify() until the driver resets the device. `reason`
  // is logged (rate-limited). The device should stop processing its queues.
  // Any thread.
  virtual void ReportBroken(const absl::Status& reason) = 0;
};

// What a device gets when the driver sets DRIVER_OK (virtio 1.2 section
// 3.1.1 step 8).
struct ActivateContext {
  // The features both sides agreed on (includes kFeatureVersion1 and any
  // ring features such as kFeatureRingEventIdx; the queues already honour
  // those, the device only looks at its own bits).
  uint64_t acked_features = 0;
  // Guest RAM; outlives the device's active period.
  const memory::GuestMemory* memory = nullptr;
  // One entry per queue (index = queue index, size = num_queues()). A queue
  // the driver did not enable has ready() == false; Pop() on it fails.
  // Owned by the transport; the device uses them on the loop thread only.
  std::span<Queue> queues;
  DriverNotifier* notifier = nullptr;
  // The event loop the device runs on, for devices that watch their own fds
  // or set timers (EventLoop::Add/AddTimer: we are on the loop thread).
  EventLoop* loop = nullptr;
};

// A virtio device, independent of its transport. See the file comment for
// which thread calls what.
class VirtioDevice {
 public:
  virtual ~VirtioDevice() = default;

  // virtio 1.2 section 5 device ID.
  virtual DeviceType device_type() const = 0;
  // Device feature bits (device-specific bits 0..23 and any of 24..40 the
  // device supports, e.g. kFeatureRingEventIdx, kFeatureRingIndirectDesc).
  // The transport always adds kFeatureVersion1.
  virtual uint64_t device_features() const = 0;
  // Number of virtqueues and the largest size of each (a power of two,
  // 1..kMaxQueueSize).
  virtual uint16_t num_queues() const = 0;
  virtual uint16_t queue_max_size(uint16_t queue_index) const = 0;

  // Device-specific configuration space (offset 0 is the start of the
  // device's config struct). data.size() is 1, 2, 4 or 8. Reads beyond the
  // struct must yield zeros; writes to read-only fields are ignored.
  // Guest-controlled: offset and size. vCPU threads, concurrently.
  virtual void ReadConfig(uint64_t offset, std::span<uint8_t> data) = 0;
  virtual void WriteConfig(uint64_t offset, std::span<const uint8_t> data) = 0;

  // The driver set DRIVER_OK. The device keeps `context` (queues, notifier,
  // memory) until Reset(). An error marks the device DEVICE_NEEDS_RESET
  // (the transport calls Reset() before any later Activate()). Loop thread.
  virtual absl::Status Activate(const ActivateContext& context) = 0;

  // The driver notified ("kicked") queue `queue_index` (virtio 1.2 section
  // 2.7.13 / 4.2.3.3): there may be new available buffers. Also called once
  // per ready queue right after Activate() (a kick that raced activation must
  // not be lost), so spurious calls must be harmless. Not called while the
  // device is broken or inactive. Loop thread.
  virtual void QueueNotify(uint16_t queue_index) = 0;

  // The driver reset the device (wrote 0 to the status register), or the
  // transport is going away. Drop every reference taken from the
  // ActivateContext, cancel timers, remove fds from the loop, abandon
  // requests in flight (their buffers belong to the guest again). Loop thread.
  virtual void Reset() = 0;

  // Snapshots (vmm/vm). The transport saves the queues; a device saves what
  // it holds beyond them. SaveState runs on the loop thread while the VM is
  // paused and no request is in flight (the transport checks); RestoreState
  // takes SaveState's JSON (untrusted: every field checked) before the
  // restored transport activates the device. The default: this device's
  // state is not saved, and a VM with it cannot be snapshotted
  // (FailedPrecondition naming the device type).
  virtual absl::StatusOr<nlohmann::json> SaveState() const;
  virtual absl::Status RestoreState(const nlohmann::json& state);
  // Buffers of queue `queue_index` the device keeps popped by design (a
  // balloon's statistics buffer, returned when the host wants statistics):
  // part of its saved state, not requests to wait out. Loop thread.
  virtual uint16_t HeldBuffers(uint16_t /*queue_index*/) const { return 0; }
};

}  // namespace dsec::virtio
