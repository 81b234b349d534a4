// SPDX-License-Identifier: Apache-2.0
// The split virtqueue (virtio 1.2 section 2.7): the only code in dsec-vmm that
// walks descriptor rings. It assumes a hostile guest: every index, length and
// address read from guest memory is bounds-checked with overflow-safe
// arithmetic, chains are capped at the queue size, indirect tables at their
// own size, and loops terminate. A violation is returned as an error
// (InvalidArgument) which the device hands to DriverNotifier::ReportBroken
// (-> DEVICE_NEEDS_RESET); it never crashes and never spins.
//
// The device-side loop over a queue (Pop up to a budget, AddUsed, one
// SignalUsed per run, a continuation, broken on a ring error) is written once,
// in QueueWorker (queue_worker.h); devices supply a per-chain handler.
//
// Pop() publishes avail_event (VIRTIO_F_EVENT_IDX) and re-checks the ring
// before reporting it empty, so a device that drains the ring until Pop()
// returns nullopt never misses a buffer the driver added without a kick.
//
// Threads: the transport configures the queue (setters, Activate, Reset) while
// the device is not active (vCPU threads, under the transport's lock, or the
// loop thread). From activation until reset the queue belongs to the device
// on the event-loop thread; it is not thread-safe.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devices/virtio/descriptor_chain.h"
#include "platform/memory/guest_memory.h"

namespace dsec::virtio {

// Ring layout constants (virtio 1.2 section 2.7.5, 2.7.6, 2.7.8).
inline constexpr uint16_t kDescFlagNext = 1;          // VIRTQ_DESC_F_NEXT
inline constexpr uint16_t kDescFlagWrite = 2;         // VIRTQ_DESC_F_WRITE
inline constexpr uint16_t kDescFlagIndirect = 4;      // VIRTQ_DESC_F_INDIRECT
inline constexpr uint16_t kAvailFlagNoInterrupt = 1;  // VIRTQ_AVAIL_F_NO_INTERRUPT
inline constexpr uint16_t kUsedFlagNoNotify = 1;      // VIRTQ_USED_F_NO_NOTIFY
inline constexpr uint64_t kDescSize = 16;
inline constexpr uint64_t kDescAlign = 16;
inline constexpr uint64_t kAvailAlign = 2;
inline constexpr uint64_t kUsedAlign = 4;

// virtq_desc (virtio 1.2 section 2.7.5), little-endian as on x86.
struct __attribute__((packed)) VirtqDesc {
  uint64_t addr;
  uint32_t len;
  uint16_t flags;
  uint16_t next;
};
static_assert(sizeof(VirtqDesc) == kDescSize);

// virtq_used_elem (virtio 1.2 section 2.7.8).
struct __attribute__((packed)) VirtqUsedElem {
  uint32_t id;
  uint32_t len;
};
static_assert(sizeof(VirtqUsedElem) == 8);

// Bytes of each ring part for a queue of `size` entries (with the
// EVENT_IDX trailer, which is always reserved).
inline constexpr uint64_t DescTableBytes(uint16_t size) { return kDescSize * size; }
inline constexpr uint64_t AvailRingBytes(uint16_t size) { return 6 + 2ull * size; }
inline constexpr uint64_t UsedRingBytes(uint16_t size) { return 6 + 8ull * size; }

// Whether the driver wants an interrupt for used entries [old_idx, new_idx)
// given its used_event (virtio 1.2 section 2.7.10, vring_need_event).
inline bool VringNeedEvent(uint16_t event_idx, uint16_t new_idx, uint16_t old_idx) {
  return static_cast<uint16_t>(new_idx - event_idx - 1) < static_cast<uint16_t>(new_idx - old_idx);
}

class Queue {
 public:
  // `max_size` is what QueueNumMax reports: a power of two, 1..32768.
  explicit Queue(uint16_t max_size);

  // Copyable and movable: the transport snapshots the driver's configuration
  // into the queues it hands to the device at activation.

  // --- Transport side: configuration before activation -------------------
  uint16_t max_size() const { return max_size_; }
  // Guest-controlled: checked by Activate(), not here (the driver may write
  // registers in any order).
  void set_size(uint16_t size) { size_ = size; }
  void set_desc_addr(uint64_t gpa) { desc_addr_ = gpa; }
  void set_avail_addr(uint64_t gpa) { avail_addr_ = gpa; }
  void set_used_addr(uint64_t gpa) { used_addr_ = gpa; }
  void set_ready(bool ready) { ready_ = ready; }
  uint16_t size() const { return size_; }
  uint64_t desc_addr() const { return desc_addr_; }
  uint64_t avail_addr() const { return avail_addr_; }
  uint64_t used_addr() const { return used_addr_; }
  // The driver enabled the queue (QueueReady). After Activate(), a ready
  // queue is also active().
  bool ready() const { return ready_; }
  bool active() const { return memory_ != nullptr; }

  // Validates the configuration against guest memory (size a power of two
  // and <= max_size; each ring part aligned per section 2.7 and inside guest
  // memory) and binds the queue to `memory` (which must outlive the queue's
  // active period). `features` are the negotiated features: kFeatureRingEventIdx
  // and kFeatureRingIndirectDesc change how the rings are used. A queue that
  // is not ready() stays inactive and Activate() returns OK.
  // The ring indices start at 0 (the driver zeroes the rings before
  // enabling a queue, virtio 1.2 section 2.7.13.1 / 3.1.1).
  absl::Status Activate(const memory::GuestMemory& memory, uint64_t features);

  // Back to the state after construction (size = max_size, addresses 0, not
  // ready, inactive). virtio 1.2 section 4.2.2.1: reset clears QueueReady.
  void Reset();

  // --- Device side: the event-loop thread, while active ------------------

  // The next available chain (virtio 1.2 section 2.7.13.2 / 2.7.5), or
  // nullopt if the ring is empty. Readable buffers first, then writable; an
  // error (InvalidArgument) for any ring violation, after which the queue
  // must not be used until reset. FailedPrecondition if not active.
  absl::StatusOr<std::optional<DescriptorChain>> Pop();

  // Gives the last popped chain back: the next Pop() returns it again (for
  // devices that cannot serve a request now, e.g. no entropy or rate limited).
  void UndoPop();

  // Returns a chain to the driver (virtio 1.2 section 2.7.8): writes
  // used->ring[used_idx % size] = {head, len}, then a release fence, then
  // publishes used->idx. `len` is the number of bytes written into the
  // chain's writable buffers. InvalidArgument if head >= size or more chains
  // are returned than were popped (device bugs, never guest input).
  absl::Status AddUsed(uint16_t head, uint32_t len);

  // After one or more AddUsed(): whether the driver wants an interrupt now
  // (virtio 1.2 section 2.7.7 / 2.7.10: used_event with EVENT_IDX, otherwise
  // VIRTQ_AVAIL_F_NO_INTERRUPT). False if nothing was added since the last
  // call. Called by the transport from DriverNotifier::SignalUsed.
  bool NeedsInterrupt();

  // Snapshots: after Activate() of a restored queue, the ring positions it
  // had when it was saved (any values: the indices are free-running u16s).
  // `in_flight`: chains the device holds (VirtioDevice::HeldBuffers).
  void RestoreProgress(uint16_t next_avail, uint16_t used_idx, uint16_t signalled_used,
                       uint16_t in_flight = 0) {
    next_avail_ = next_avail;
    used_idx_ = used_idx;
    signalled_used_ = signalled_used;
    in_flight_ = in_flight;
  }
  uint16_t signalled_used() const { return signalled_used_; }

  // Chains popped and not yet returned with AddUsed.
  uint16_t in_flight() const { return in_flight_; }
  uint16_t next_avail() const { return next_avail_; }
  uint16_t used_idx() const { return used_idx_; }

 private:
  // Walks the chain starting at `head` into `chain`.
  struct WalkState {
    bool seen_writable = false;
    uint64_t readable_bytes = 0;
    uint64_t writable_bytes = 0;
  };
  absl::Status ReadChain(uint16_t head, DescriptorChain& chain) const;
  absl::Status ReadIndirect(const VirtqDesc& desc, DescriptorChain& chain, WalkState& state) const;
  absl::Status AppendBuffer(const VirtqDesc& desc, DescriptorChain& chain, WalkState& state) const;
  absl::StatusOr<uint16_t> LoadAvailIdx() const;
  void PublishAvailEvent(uint16_t value) const;

  uint16_t max_size_;
  uint16_t size_;
  uint64_t desc_addr_ = 0;
  uint64_t avail_addr_ = 0;
  uint64_t used_addr_ = 0;
  bool ready_ = false;

  // Active state.
  const memory::GuestMemory* memory_ = nullptr;
  bool event_idx_ = false;
  bool indirect_ = false;
  // Host pointers of the ring indices, for atomic loads and stores (the
  // ring parts were checked to lie in guest memory and to be aligned).
  uint16_t* avail_idx_ptr_ = nullptr;
  uint16_t* used_idx_ptr_ = nullptr;
  uint16_t next_avail_ = 0;
  uint16_t used_idx_ = 0;
  uint16_t signalled_used_ = 0;  // used idx at the last NeedsInterrupt()
  uint16_t in_flight_ = 0;
};

}  // namespace dsec::virtio
