// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/queue.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "devices/virtio/virtio_device.h"
#include "base/status.h"

namespace dsec::virtio {

namespace {

// Guest chains may not describe more than this many bytes in either
// direction: the used ring reports lengths as u32 (section 2.7.8).
constexpr uint64_t kMaxChainBytes = std::numeric_limits<uint32_t>::max();

template <typename... Args>
absl::Status RingError(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat("virtqueue: ", absl::StrFormat(fmt, args...)));
}

bool IsPowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Whether [gpa, gpa+len) is backed by guest memory, possibly across adjacent
// regions (like GuestMemory::Read). Overflow-safe: a range that wraps past
// 2^64 is refused.
bool RangeInMemory(const memory::GuestMemory& memory, uint64_t gpa, uint64_t len) {
  if (len == 0) return true;
  if (len - 1 > std::numeric_limits<uint64_t>::max() - gpa) return false;
  uint64_t done = 0;
  while (done < len) {
    uint64_t addr = gpa + done;
    const memory::GuestRegion* r = memory.FindRegion(addr);
    if (r == nullptr) return false;
    done += std::min<uint64_t>(len - done, r->end() - addr);
  }
  return true;
}

}  // namespace

Queue::Queue(uint16_t max_size) : max_size_(max_size), size_(max_size) {
  DSEC_CHECK(IsPowerOfTwo(max_size) && max_size <= kMaxQueueSize);
}

void Queue::Reset() {
  size_ = max_size_;
  desc_addr_ = avail_addr_ = used_addr_ = 0;
  ready_ = false;
  memory_ = nullptr;
  event_idx_ = indirect_ = false;
  avail_idx_ptr_ = used_idx_ptr_ = nullptr;
  next_avail_ = used_idx_ = signalled_used_ = in_flight_ = 0;
}

absl::Status Queue::Activate(const memory::GuestMemory& memory, uint64_t features) {
  memory_ = nullptr;
  next_avail_ = used_idx_ = signalled_used_ = in_flight_ = 0;
  if (!ready_) return absl::OkStatus();
  // Guest-controlled: size and the three ring addresses (QueueNum,
  // QueueDesc/Driver/Device). Section 2.7: the queue size of a split
  // virtqueue is a power of two, at most what the device offers.
  if (!IsPowerOfTwo(size_) || size_ > max_size_) {
    return RingError("queue size %d invalid (max %d, must be a power of two)", size_, max_size_);
  }
  // Section 2.7, table "Virtqueue Part Alignment": 16 / 2 / 4 bytes.
  if (desc_addr_ % kDescAlign != 0 || avail_addr_ % kAvailAlign != 0 ||
      used_addr_ % kUsedAlign != 0) {
    return RingError("misaligned ring: desc=%#x avail=%#x used=%#x", desc_addr_, avail_addr_,
                     used_addr_);
  }
  // Each part must lie in one host mapping: the indices are accessed through
  // host pointers with atomic loads and stores.
  absl::StatusOr<uint8_t*> desc = memory.HostAddress(desc_addr_, DescTableBytes(size_));
  absl::StatusOr<uint8_t*> avail = memory.HostAddress(avail_addr_, AvailRingBytes(size_));
  absl::StatusOr<uint8_t*> used = memory.HostAddress(used_addr_, UsedRingBytes(size_));
  if (!desc.ok() || !avail.ok() || !used.ok()) {
    return RingError("ring outside guest memory: desc=%#x avail=%#x used=%#x size=%d", desc_addr_,
                     avail_addr_, used_addr_, size_);
  }
  avail_idx_ptr_ = reinterpret_cast<uint16_t*>(*avail + 2);
  used_idx_ptr_ = reinterpret_cast<uint16_t*>(*used + 2);
  event_idx_ = (features & kFeatureRingEventIdx) != 0;
  indirect_ = (features & kFeatureRingIndirectDesc) != 0;
  memory_ = &memory;
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> Queue::LoadAvailIdx() const {
  // Section 2.7.13.2 (device side): the acquire load orders the ring entry
  // and descriptor reads after the index the driver published.
  return __atomic_load_n(avail_idx_ptr_, __ATOMIC_ACQUIRE);
}

void Queue::PublishAvailEvent(uint16_t value) const {
  // Section 2.7.10: avail_event lives right after used->ring[size].
  uint8_t* host = reinterpret_cast<uint8_t*>(used_idx_ptr_) + 2 + 8ull * size_;
  __atomic_store_n(reinterpret_cast<uint16_t*>(host), value, __ATOMIC_RELAXED);
}

absl::StatusOr<std::optional<DescriptorChain>> Queue::Pop() {
  if (memory_ == nullptr) return absl::FailedPreconditionError("virtqueue: not active");
  DSEC_ASSIGN_OR_RETURN(uint16_t avail_idx, LoadAvailIdx());
  // Guest-controlled: avail_idx. At most `size` entries can be outstanding
  // (section 2.7.6); a larger jump is a driver bug or an attack.
  uint16_t pending = static_cast<uint16_t>(avail_idx - next_avail_);
  if (pending == 0 && event_idx_) {
    // Section 2.7.10: tell the driver to kick once it makes entry
    // next_avail available, then look again so that an entry published
    // before it read avail_event is not missed.
    PublishAvailEvent(next_avail_);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    DSEC_ASSIGN_OR_RETURN(avail_idx, LoadAvailIdx());
    pending = static_cast<uint16_t>(avail_idx - next_avail_);
  }
  if (pending > size_) {
    return RingError("avail idx %d is %d entries ahead of %d (queue size %d)", avail_idx, pending,
                     next_avail_, size_);
  }
  if (pending == 0) return std::nullopt;
  // The driver cannot have more chains outstanding than the queue has
  // descriptors; if it claims so it is re-using heads (avail idx lying).
  if (in_flight_ >= size_) {
    return RingError("more than %d chains in flight (avail idx lying)", size_);
  }
  uint64_t slot_gpa = avail_addr_ + 4 + 2ull * (next_avail_ % size_);
  DSEC_ASSIGN_OR_RETURN(uint16_t head, memory_->ReadObj<uint16_t>(slot_gpa));
  // Guest-controlled: head (section 2.7.6 ring entry).
  if (head >= size_) return RingError("head index %d out of range (size %d)", head, size_);
  DescriptorChain chain;
  chain.head = head;
  DSEC_RETURN_IF_ERROR(ReadChain(head, chain));
  ++next_avail_;
  ++in_flight_;
  return chain;
}

void Queue::UndoPop() {
  DSEC_CHECK(in_flight_ > 0);
  --next_avail_;
  --in_flight_;
}

absl::Status Queue::ReadChain(uint16_t head, DescriptorChain& chain) const {
  WalkState state;
  uint16_t index = head;
  // Section 2.7.5.2: a chain is never longer than the queue size; the cap
  // also ends any loop the guest builds with `next`.
  for (uint32_t walked = 0;; ++walked) {
    if (walked >= size_)
      return RingError("chain at head %d longer than queue size %d", head, size_);
    DSEC_ASSIGN_OR_RETURN(VirtqDesc desc,
                          memory_->ReadObj<VirtqDesc>(desc_addr_ + kDescSize * index));
    // Guest-controlled: every field of desc, validated below.
    if (desc.flags & kDescFlagIndirect) {
      // Section 2.7.5.3.1: only with VIRTIO_F_INDIRECT_DESC, never combined
      // with NEXT; it ends the chain.
      if (!indirect_) return RingError("indirect descriptor without VIRTIO_F_INDIRECT_DESC");
      if (desc.flags & kDescFlagNext) return RingError("indirect descriptor with NEXT set");
      return ReadIndirect(desc, chain, state);
    }
    DSEC_RETURN_IF_ERROR(AppendBuffer(desc, chain, state));
    if (!(desc.flags & kDescFlagNext)) return absl::OkStatus();
    if (desc.next >= size_)
      return RingError("next index %d out of range (size %d)", desc.next, size_);
    index = desc.next;
  }
}

absl::Status Queue::ReadIndirect(const VirtqDesc& desc, DescriptorChain& chain,
                                 WalkState& state) const {
  // Guest-controlled: desc.addr/len describe the indirect table (section
  // 2.7.5.3). Its length is a non-zero multiple of 16 and it lies in RAM.
  if (desc.len == 0 || desc.len % kDescSize != 0) {
    return RingError("indirect table length %d not a non-zero multiple of 16", desc.len);
  }
  uint32_t count = desc.len / kDescSize;
  if (count > kMaxQueueSize) return RingError("indirect table of %d entries too large", count);
  if (!RangeInMemory(*memory_, desc.addr, desc.len)) {
    return RingError("indirect table %#x+%d outside guest memory", desc.addr, desc.len);
  }
  uint32_t index = 0;
  // The walk is capped at the table's own size, which also ends loops.
  for (uint32_t walked = 0;; ++walked) {
    if (walked >= count) return RingError("indirect chain longer than its table (%d)", count);
    DSEC_ASSIGN_OR_RETURN(VirtqDesc entry,
                          memory_->ReadObj<VirtqDesc>(desc.addr + kDescSize * index));
    // Guest-controlled: every field of entry.
    if (entry.flags & kDescFlagIndirect)
      return RingError("indirect descriptor inside indirect table");
    DSEC_RETURN_IF_ERROR(AppendBuffer(entry, chain, state));
    if (!(entry.flags & kDescFlagNext)) return absl::OkStatus();
    if (entry.next >= count)
      return RingError("indirect next %d out of range (%d)", entry.next, count);
    index = entry.next;
  }
}

absl::Status Queue::AppendBuffer(const VirtqDesc& desc, DescriptorChain& chain,
                                 WalkState& state) const {
  bool writable = (desc.flags & kDescFlagWrite) != 0;
  // Section 2.7.4.2: device-readable descriptors precede device-writable ones.
  if (!writable && state.seen_writable) {
    return RingError("readable descriptor after a writable one");
  }
  state.seen_writable |= writable;
  if (desc.len == 0) return absl::OkStatus();  // carries no bytes
  if (!RangeInMemory(*memory_, desc.addr, desc.len)) {
    return RingError("buffer %#x+%d outside guest memory", desc.addr, desc.len);
  }
  uint64_t& total = writable ? state.writable_bytes : state.readable_bytes;
  total += desc.len;  // at most kMaxQueueSize * 2^32: no u64 overflow
  if (total > kMaxChainBytes) return RingError("chain describes more than 4 GiB");
  (writable ? chain.writable : chain.readable).push_back({desc.addr, desc.len});
  return absl::OkStatus();
}

absl::Status Queue::AddUsed(uint16_t head, uint32_t len) {
  if (memory_ == nullptr) return absl::FailedPreconditionError("virtqueue: not active");
  if (head >= size_) return absl::InvalidArgumentError("virtqueue: AddUsed head out of range");
  if (in_flight_ == 0) return absl::InvalidArgumentError("virtqueue: AddUsed without Pop");
  uint64_t elem_gpa = used_addr_ + 4 + 8ull * (used_idx_ % size_);
  DSEC_RETURN_IF_ERROR(memory_->WriteObj(elem_gpa, VirtqUsedElem{head, len}));
  ++used_idx_;
  --in_flight_;
  // Section 2.7.8 / 2.7.13.3.1 (device side): the element and the buffer
  // contents must be visible before the driver can see the new idx.
  std::atomic_thread_fence(std::memory_order_release);
  __atomic_store_n(used_idx_ptr_, used_idx_, __ATOMIC_RELAXED);
  return absl::OkStatus();
}

bool Queue::NeedsInterrupt() {
  if (memory_ == nullptr) return false;
  // Order the used idx store before reading the driver's suppression
  // fields, or both sides could decide the other will act (section 2.7.10).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint16_t old = signalled_used_;
  signalled_used_ = used_idx_;
  const uint8_t* avail = reinterpret_cast<const uint8_t*>(avail_idx_ptr_) - 2;
  if (event_idx_) {
    // Guest-controlled: used_event (any value is meaningful).
    uint16_t used_event = __atomic_load_n(
        reinterpret_cast<const uint16_t*>(avail + 4 + 2ull * size_), __ATOMIC_RELAXED);
    return VringNeedEvent(used_event, used_idx_, old);
  }
  if (old == used_idx_) return false;
  // Guest-controlled: avail flags (section 2.7.7).
  uint16_t flags = __atomic_load_n(reinterpret_cast<const uint16_t*>(avail), __ATOMIC_RELAXED);
  return (flags & kAvailFlagNoInterrupt) == 0;
}

}  // namespace dsec::virtio
