// SPDX-License-Identifier: Apache-2.0
// One KVM virtual machine: guest memory slots, the in-kernel interrupt
// controllers, interrupt routing, irqfd/ioeventfd registrations and vCPUs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"
#include "platform/kvm/x86_types.h"
#include "platform/memory/guest_memory.h"

namespace dsec::kvm {

class KvmVcpu;
class KvmVm;

struct MemSlotFlags {
  // KVM_MEM_READONLY: guest reads hit memory, guest writes exit to the
  // monitor as MMIO (ROM, write-protected pmem). Needs KVM_CAP_READONLY_MEM.
  bool readonly = false;
  // KVM_MEM_LOG_DIRTY_PAGES: track written pages for GetDirtyLog().
  bool log_dirty = false;
};

// One entry of the GSI routing table (KVM_SET_GSI_ROUTING). Either an input
// pin of an in-kernel irqchip or an MSI message.
struct GsiRoute {
  enum class Kind { kIrqchip, kMsi };
  // KVM_IRQCHIP_* numbering of the in-kernel chips.
  static constexpr uint32_t kPicMaster = 0;
  static constexpr uint32_t kPicSlave = 1;
  static constexpr uint32_t kIoapic = 2;

  uint32_t gsi = 0;
  Kind kind = Kind::kIrqchip;
  uint32_t irqchip = 0;      // kIrqchip: kPicMaster/kPicSlave/kIoapic
  uint32_t pin = 0;          // kIrqchip: input pin on that chip
  uint64_t msi_address = 0;  // kMsi: full 64-bit message address
  uint32_t msi_data = 0;     // kMsi: message data
};

enum class IoSpace { kPio, kMmio };

// An irqfd: signalling the eventfd raises `gsi` inside KVM without a trip
// through the monitor. Deassigned on destruction. Move-only.
//
// Holds its own duplicate of the eventfd, so the caller's EventFd may be
// moved or closed; the KvmVm that made it must outlive it.
class IrqfdRegistration {
 public:
  IrqfdRegistration() = default;
  ~IrqfdRegistration() { Reset(); }
  IrqfdRegistration(IrqfdRegistration&& other) noexcept { *this = std::move(other); }
  IrqfdRegistration& operator=(IrqfdRegistration&& other) noexcept;
  IrqfdRegistration(const IrqfdRegistration&) = delete;
  IrqfdRegistration& operator=(const IrqfdRegistration&) = delete;

  bool active() const { return vm_ != nullptr; }
  uint32_t gsi() const { return gsi_; }
  // Deassigns now (errors are logged: nothing a caller could do about them).
  void Reset();

 private:
  friend class KvmVm;
  IrqfdRegistration(KvmVm* vm, ScopedFd eventfd, uint32_t gsi)
      : vm_(vm), eventfd_(std::move(eventfd)), gsi_(gsi) {}
  KvmVm* vm_ = nullptr;
  ScopedFd eventfd_;
  uint32_t gsi_ = 0;
};

// An ioeventfd: a guest write to the registered PIO/MMIO address (of the
// registered length, and matching `datamatch` if given) signals the eventfd
// inside KVM instead of exiting to the monitor. Deassigned on destruction.
// Move-only; same lifetime rule as IrqfdRegistration.
class IoEventRegistration {
 public:
  IoEventRegistration() = default;
  ~IoEventRegistration() { Reset(); }
  IoEventRegistration(IoEventRegistration&& other) noexcept { *this = std::move(other); }
  IoEventRegistration& operator=(IoEventRegistration&& other) noexcept;
  IoEventRegistration(const IoEventRegistration&) = delete;
  IoEventRegistration& operator=(const IoEventRegistration&) = delete;

  bool active() const { return vm_ != nullptr; }
  uint64_t addr() const { return addr_; }
  void Reset();

 private:
  friend class KvmVm;
  KvmVm* vm_ = nullptr;
  ScopedFd eventfd_;
  uint64_t addr_ = 0;
  uint32_t len_ = 0;
  IoSpace space_ = IoSpace::kMmio;
  std::optional<uint64_t> datamatch_;
};

namespace internal {
// A VM's memory slot table (numbers, ranges, flags) and its fd, shared by
// the KvmVm and its MemSlots (kvm_vm.cc): a MemSlot may outlive its KvmVm.
struct SlotTable;
}  // namespace internal

// A memory slot owned by a handle (guest RAM, pmem windows, ROM images).
// Destroyed while its VM is open, it removes the slot
// (KVM_SET_USER_MEMORY_REGION with size 0) and frees the number. Destroyed
// after its KvmVm, it does nothing: closing the VM fd freed every slot at
// once. Guest RAM relies on that (vmm/vm declares its RAM slots before the
// KvmVm): on PVM hosts each deletion waits for SRCU grace periods, which
// would land in every monitor's exit (docs/deviations.md).
// Move-only; the host memory must stay mapped while the slot is registered
// (until the MemSlot or the KvmVm is destroyed, whichever comes first).
class MemSlot {
 public:
  static absl::StatusOr<MemSlot> Create(KvmVm* vm, uint64_t gpa, uint64_t size, void* host_addr,
                                        MemSlotFlags flags);
  MemSlot() = default;
  ~MemSlot() { Reset(); }
  MemSlot(MemSlot&& other) noexcept { *this = std::move(other); }
  MemSlot& operator=(MemSlot&& other) noexcept;
  MemSlot(const MemSlot&) = delete;
  MemSlot& operator=(const MemSlot&) = delete;

  bool active() const { return table_ != nullptr; }
  uint32_t slot() const { return slot_; }
  uint64_t gpa() const { return gpa_; }
  uint64_t size() const { return size_; }
  // Removes the slot now if the VM is still open (errors are logged).
  void Reset();

 private:
  MemSlot(std::shared_ptr<internal::SlotTable> table, uint32_t slot, uint64_t gpa, uint64_t size)
      : table_(std::move(table)), slot_(slot), gpa_(gpa), size_(size) {}
  std::shared_ptr<internal::SlotTable> table_;
  uint32_t slot_ = 0;
  uint64_t gpa_ = 0;
  uint64_t size_ = 0;
};

// A KVM VM file descriptor and what hangs off it.
//
// Lifetime: created by KvmSystem::CreateVm() and owned by the VM object of the
// layer above through a unique_ptr (it is pinned in memory: registrations
// point at it). It must outlive every IrqfdRegistration and
// IoEventRegistration it made; the destructor aborts (DSEC_CHECK) if any is
// still alive, since their destructors would otherwise use a dead VM.
// MemSlots may outlive it (see MemSlot). vCPUs hold their own descriptor and
// may be destroyed in any order.
//
// Threads: slot bookkeeping is locked, so memory slots may be added and
// removed from any thread (e.g. pmem hotplug from the API thread while vCPUs
// run). The other methods are single ioctls the kernel serialises itself.
class KvmVm {
 public:
  ~KvmVm();
  KvmVm(const KvmVm&) = delete;
  KvmVm& operator=(const KvmVm&) = delete;

  // KVM_SET_USER_MEMORY_REGION with a free slot number. gpa, size and
  // host_addr must be 4 KiB aligned and size non-zero (InvalidArgument);
  // ResourceExhausted when all slots are used. The host memory must stay
  // mapped until RemoveMemorySlot().
  absl::StatusOr<uint32_t> AddMemorySlot(uint64_t gpa, uint64_t size, void* host_addr,
                                         MemSlotFlags flags = {});
  // Deletes the slot and frees its number; NotFound if it is not in use.
  absl::Status RemoveMemorySlot(uint32_t slot);
  // One slot per region of `memory` (the usual RAM setup), owned by the
  // caller. On failure the slots added so far are removed again.
  absl::StatusOr<std::vector<MemSlot>> AddGuestMemory(const memory::GuestMemory& memory,
                                                      MemSlotFlags flags = {});
  // KVM_GET_DIRTY_LOG: one bit per 4 KiB page of the slot (bit i of word
  // i/64 is page i), set for pages written since the previous call. The slot
  // must have been added with log_dirty (FailedPrecondition otherwise).
  absl::StatusOr<std::vector<uint64_t>> GetDirtyLog(uint32_t slot);

  // KVM_CREATE_IRQCHIP: in-kernel PIC pair, IOAPIC and local APICs, with
  // KVM's default GSI routing (GSI 0-15 to PIC and IOAPIC, 16-23 IOAPIC).
  // Must precede CreateVcpu().
  absl::Status CreateIrqchip();
  // KVM_CREATE_PIT2 with KVM_PIT_SPEAKER_DUMMY (port 0x61 emulated without a
  // PC speaker). Needs the irqchip.
  absl::Status CreatePit2();

  // KVM_GET_IRQCHIP / KVM_SET_IRQCHIP for chip GsiRoute::kPicMaster,
  // kPicSlave or kIoapic (the in-kernel irqchip), and KVM_GET_CLOCK /
  // KVM_SET_CLOCK (kvmclock's base): what a snapshot saves of the VM.
  absl::StatusOr<IrqchipState> GetIrqchip(uint32_t chip) const;
  absl::Status SetIrqchip(const IrqchipState& state);
  absl::StatusOr<ClockData> GetClock() const;
  // The size of a vCPU's XSAVE area for KVM_GET_XSAVE2 (KVM_CAP_XSAVE2 on
  // this VM), at least the legacy 4 KiB; 0 without KVM_CAP_XSAVE.
  size_t XsaveSize() const;
  absl::Status SetClock(const ClockData& clock);
  // KVM_SET_TSS_ADDR: three pages of guest-physical space below 4 GiB that
  // KVM may use for real-mode emulation on Intel; must not overlap RAM used
  // by the guest.
  absl::Status SetTssAddress(uint64_t addr);
  // KVM_SET_IDENTITY_MAP_ADDR: one page for the EPT identity map on Intel.
  absl::Status SetIdentityMapAddress(uint64_t addr);

  // KVM_IRQ_LINE: drives the level of `gsi` (edge-triggered lines take a
  // 1 then a 0).
  absl::Status SetIrqLine(uint32_t gsi, bool level);
  // KVM_SET_GSI_ROUTING: replaces the whole routing table.
  absl::Status SetGsiRouting(std::span<const GsiRoute> routes);
  // KVM_SIGNAL_MSI: injects one MSI. Returns false if the guest blocked it;
  // fails (PermissionDenied, errno 1: KVM's -1 "no destination") when no vCPU
  // matches the message's destination.
  absl::StatusOr<bool> SignalMsi(uint64_t address, uint32_t data);

  // KVM_IRQFD. Needs an irqchip (or split irqchip with a routing table).
  absl::StatusOr<IrqfdRegistration> RegisterIrqfd(const EventFd& event, uint32_t gsi);
  // KVM_IOEVENTFD. len is 1, 2, 4 or 8 (0 = any length, MMIO only, needs
  // KVM_CAP_IOEVENTFD_ANY_LENGTH). AlreadyExists if the same
  // (address, length, datamatch) is registered twice.
  absl::StatusOr<IoEventRegistration> RegisterIoeventfd(
      const EventFd& event, uint64_t addr, uint32_t len, IoSpace space,
      std::optional<uint64_t> datamatch = std::nullopt);
  // Same for an eventfd descriptor owned elsewhere (it is duplicated).
  absl::StatusOr<IoEventRegistration> RegisterIoeventfd(
      int eventfd, uint64_t addr, uint32_t len, IoSpace space,
      std::optional<uint64_t> datamatch = std::nullopt);

  // KVM_CREATE_VCPU with the given APIC ID, and its kvm_run mapping.
  absl::StatusOr<std::unique_ptr<KvmVcpu>> CreateVcpu(uint32_t id);

  // KVM_CHECK_EXTENSION on the VM (some answers are per VM, e.g.
  // KVM_CAP_NR_MEMSLOTS). Takes the raw KVM_CAP_* number; 0 on error.
  int CheckExtension(int cap) const;

  int fd() const { return fd_.get(); }

 private:
  friend class KvmSystem;
  friend class MemSlot;
  friend class IrqfdRegistration;
  friend class IoEventRegistration;

  KvmVm(ScopedFd fd, size_t vcpu_mmap_size, uint32_t max_slots);

  absl::Status DeassignIrqfd(int eventfd, uint32_t gsi);
  absl::Status DeassignIoeventfd(const IoEventRegistration& reg);

  ScopedFd fd_;
  const size_t vcpu_mmap_size_;
  // Slot bookkeeping (locked: slots may come and go from any thread).
  std::shared_ptr<internal::SlotTable> slots_;
  // Fd registrations still alive; checked in the destructor.
  std::atomic<int> live_handles_{0};
};

}  // namespace dsec::kvm
