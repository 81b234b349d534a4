// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <any>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/virtio/device_spec.h"
#include "devices/virtio/mmio_transport.h"
#include "devices/virtio/virtio_device.h"
#include "base/event_loop.h"
#include "platform/bus/bus.h"
#include "platform/kvm/kvm_vm.h"
#include "platform/memory/memfd_guest_memory.h"

namespace dsec::vm {

class IrqfdLine;

// The microVM's virtio-mmio devices, built from the configuration's device
// specs (each kind's builder, device_table.h) and put behind transports: for
// device i, a 4 KiB register window at kVirtioMmioBase + i * 0x1000,
// interrupt GSI kFirstIrq + i (an ISA IRQ on the in-kernel PIC/IOAPIC,
// edge-triggered through an irqfd), queue notifications as KVM ioeventfds
// on the window's QueueNotify register. Linux (and the test guest) learn of
// them from `virtio_mmio.device=4K@ADDR:IRQ` on the kernel command line
// (CommandLine()).
//
// What devices need of KVM they get through narrow interfaces implemented
// here: the ioeventfd registrar of the transports, and the guest address
// space (KvmGuestAddressSpace: windows after RAM, memslots) that a device
// such as virtio-pmem maps its memory into. What a device offers the VM's
// owner, the owner finds by type (Find<T>).
//
// Threads and lifetime: built by Vm::Create before the event loop runs and
// destroyed after it stopped (the transports' rule); holds every device's
// resources (images, taps, sockets, mappings) until then.
class VirtioDevices {
 public:
  static constexpr uint32_t kFirstIrq = 5;
  // IRQs 5..14: ISA lines no legacy device of this machine uses.
  static constexpr uint32_t kMaxDevices = 10;

  struct Context {
    kvm::KvmVm* kvm_vm = nullptr;
    // Memfd-backed guest RAM (the balloon releases pages by punching holes).
    const memory::MemfdGuestMemory* memory = nullptr;
    EventLoop* loop = nullptr;
    bus::Bus* mmio_bus = nullptr;
  };

  // InvalidArgument (naming the device) when a spec cannot be built or more
  // than kMaxDevices are asked for; nothing is left behind on error.
  static absl::StatusOr<std::unique_ptr<VirtioDevices>> Create(const virtio::DeviceSpecs& specs,
                                                               const Context& context);
  ~VirtioDevices();

  // " virtio_mmio.device=4K@0xd0000000:5 ..." (empty without devices).
  std::string CommandLine() const;
  size_t size() const { return slots_.size(); }
  // Transport of device i (configuration order).
  const virtio::MmioTransport& transport(size_t i) const { return *slots_[i].transport; }
  // The name of device i ("virtio-blk0").
  const std::string& name(size_t i) const { return slots_[i].name; }

  // Snapshots: each device's transport state, in configuration order
  // ([{"name", "state"}]); on the loop thread (MmioTransport::SaveState's
  // errors, naming the device). RestoreState takes that back before the
  // loop runs, checking that it names this VM's devices in order.
  absl::StatusOr<nlohmann::json> SaveState() const;
  absl::Status RestoreState(const nlohmann::json& state);

  // The i-th control object (BuiltDevice::control) of type T among the
  // devices, in configuration order, or nullptr: how the VM's owner finds
  // what a device offers by its interface, not by its kind (the reclaim
  // controller: Find<devices::BalloonControl>(); a pmem layer:
  // Find<const pmem::PmemLayer>(i)). Any thread, while this object lives.
  template <typename T>
  T* Find(size_t i = 0) const {
    for (const Slot& s : slots_) {
      const auto* p = std::any_cast<std::shared_ptr<T>>(&s.control);
      if (p != nullptr && *p != nullptr && i-- == 0) return p->get();
    }
    return nullptr;
  }

 private:
  class KvmNotifyRegistrar;
  struct Slot {
    const virtio::DeviceKind* kind = nullptr;
    std::string name;
    uint64_t base = 0;
    uint32_t irq = 0;
    std::shared_ptr<IrqfdLine> irq_line;
    std::shared_ptr<virtio::VirtioDevice> device;
    std::shared_ptr<virtio::MmioTransport> transport;
    std::vector<std::shared_ptr<void>> resources;
    std::any control;
  };

  VirtioDevices() = default;
  absl::Status Add(virtio::BuiltDevice built, const virtio::DeviceKind* kind, const Context& context);

  std::unique_ptr<KvmNotifyRegistrar> registrar_;
  std::unique_ptr<virtio::GuestAddressSpace> address_space_;
  std::vector<Slot> slots_;
};

}  // namespace dsec::vm
