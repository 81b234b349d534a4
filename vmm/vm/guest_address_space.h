// SPDX-License-Identifier: Apache-2.0
// The VM's guest-physical address space beyond RAM, as device builders see
// it (virtio::GuestAddressSpace): windows of device memory (the layer images
// virtio-pmem maps, any device window to come) placed by one rule for every
// kind, and mapped as KVM memslots.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "devices/virtio/device_spec.h"
#include "platform/arch/x86_64/layout.h"
#include "platform/kvm/kvm_vm.h"

namespace dsec::vm {

// Windows are 2 MiB aligned and 2 MiB multiples (what Linux needs to give a
// virtio-pmem window struct pages: 2 MiB subsections).
inline constexpr uint64_t kWindowAlignment = 2ull << 20;
// 1 TiB: within the 40 physical address bits of every x86-64 CPU KVM runs on.
inline constexpr uint64_t kWindowGpaLimit = 1ull << 40;

// Places windows one at a time, in the order devices are built.
//
// Rule: after guest RAM, 2 MiB aligned, in order. A window goes below the
// 32-bit MMIO hole (arch::kMmioHoleStart, 3 GiB) when it fits between the
// end of low RAM and the hole — there a guest with 4 GiB identity page
// tables (the test guest) reaches it without extra tables; otherwise (and
// every window after it) above 4 GiB and above any high RAM. Windows never
// overlap RAM or the hole (the virtio-mmio, test-device, IOAPIC and LAPIC
// ranges all lie inside it), and all end below `limit` (the guest physical
// address width we promise to fit in). Threads: one owner.
class WindowPlacer {
 public:
  explicit WindowPlacer(std::span<const arch::AddressRange> ram, uint64_t limit = kWindowGpaLimit);
  // The next window's start. InvalidArgument for a size that is zero or not
  // 2 MiB aligned; ResourceExhausted when it does not fit below the limit.
  absl::StatusOr<uint64_t> Place(uint64_t size);

 private:
  uint64_t cursor_ = 0;
  uint64_t high_end_ = 0;
  uint64_t limit_ = 0;
  bool high_ = false;
  size_t count_ = 0;
  uint64_t total_ = 0;
};

// The address space the device builders of one VM share: windows by
// WindowPlacer's rule, mappings as KVM memslots (a read-only mapping is a
// read-only memslot, whose guest writes exit as MMIO). Threads: the owner
// thread, while the VM is built. The KvmVm outlives it and its mappings.
class KvmGuestAddressSpace : public virtio::GuestAddressSpace {
 public:
  KvmGuestAddressSpace(kvm::KvmVm* vm, std::span<const arch::AddressRange> ram)
      : vm_(vm), placer_(ram) {}

  absl::StatusOr<uint64_t> AllocateWindow(uint64_t size) override { return placer_.Place(size); }
  absl::StatusOr<std::unique_ptr<virtio::GuestMapping>> Map(uint64_t gpa, uint64_t size, void* host,
                                                            bool read_only) override;

 private:
  kvm::KvmVm* vm_;
  WindowPlacer placer_;
};

}  // namespace dsec::vm
