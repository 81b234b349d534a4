// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/virtio/mmio_transport.h"
#include "devices/virtio/virtio_device.h"
#include "base/event_loop.h"
#include "platform/bus/bus.h"
#include "platform/kvm/kvm_vm.h"
#include "platform/memory/guest_memory.h"
#include "platform/memory/memfd_guest_memory.h"
#include "vmm/vm/vm_config.h"

namespace dsec::devices {
class BalloonControl;
class UnixVsockBackend;
class PmemDevice;
struct PmemMetrics;
}  // namespace dsec::devices

namespace dsec::pmem {
class LayerMapping;
class ReadOnlyWriteSink;
}  // namespace dsec::pmem

namespace dsec::vm {

class IrqfdLine;

// The microVM's virtio-mmio devices: for device i, a 4 KiB register window at
// kVirtioMmioBase + i * 0x1000, interrupt GSI kFirstIrq + i (an ISA IRQ on
// the in-kernel PIC/IOAPIC, edge-triggered through an irqfd), queue
// notifications as KVM ioeventfds on the window's QueueNotify register. Linux
// (and the test guest) learn of them from `virtio_mmio.device=4K@ADDR:IRQ`
// on the kernel command line (CommandLine()).
//
// virtio-pmem layers (`--pmem`) are the exception to "devices never see
// KVM": each layer's file mapping (pmem-dax/) is its own memslot, placed by
// pmem::PlacePmemRegions after guest RAM; a read-only layer is a KVM
// read-only slot whose write exits reach a ReadOnlyWriteSink on the MMIO bus.
//
// Threads and lifetime: built by Vm::Create before the event loop runs and
// destroyed after it stopped (the transports' rule); holds the back-ends
// (disk images, taps, the vsock socket, pmem mappings) the devices use.
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

  static absl::StatusOr<std::unique_ptr<VirtioDevices>> Create(const VmConfig& config,
                                                               const Context& context);
  ~VirtioDevices();

  // " virtio_mmio.device=4K@0xd0000000:5 ..." (empty without devices).
  std::string CommandLine() const;
  size_t size() const { return slots_.size(); }
  // Transport of device i (creation order: rng, balloon, disks, nets, vsock,
  // pmems).
  const virtio::MmioTransport& transport(size_t i) const { return *slots_[i].transport; }

  // The virtio-balloon device's control interface (set the target, read
  // stats and counters; any thread), or nullptr without VmConfig::balloon.
  devices::BalloonControl* balloon() const { return balloon_.get(); }

  // pmem layer i (the order of VmConfig::pmems): its guest-physical window,
  // its device's counters, and guest writes refused on a read-only layer.
  size_t pmem_count() const { return pmems_.size(); }
  uint64_t pmem_start(size_t i) const;
  uint64_t pmem_size(size_t i) const;
  const devices::PmemMetrics& pmem_metrics(size_t i) const;
  uint64_t pmem_refused_writes(size_t i) const;

 private:
  class KvmNotifyRegistrar;
  struct Slot {
    uint64_t base = 0;
    uint32_t irq = 0;
    std::shared_ptr<IrqfdLine> irq_line;
    std::shared_ptr<virtio::VirtioDevice> device;
    std::shared_ptr<virtio::MmioTransport> transport;
  };

  // One layer: the mapping outlives its memslot (declared first, destroyed
  // last); the sink is removed from the bus before the mapping goes.
  struct PmemLayer {
    std::unique_ptr<pmem::LayerMapping> mapping;
    kvm::MemSlot slot;
    uint64_t gpa = 0;
    std::shared_ptr<pmem::ReadOnlyWriteSink> sink;
    std::shared_ptr<devices::PmemDevice> device;
  };

  VirtioDevices() = default;
  absl::Status Add(const std::string& name, std::shared_ptr<virtio::VirtioDevice> device,
                   const Context& context);
  absl::Status AddPmems(const VmConfig& config, const Context& context);

  bus::Bus* mmio_bus_ = nullptr;
  std::unique_ptr<KvmNotifyRegistrar> registrar_;
  // After the registrar, before the slots: destroyed after the transports
  // that reset the pmem devices.
  std::vector<PmemLayer> pmems_;
  std::unique_ptr<devices::UnixVsockBackend> vsock_backend_;
  // The balloon device (also held by its slot).
  std::shared_ptr<devices::BalloonControl> balloon_;
  // Destroyed first (declared last): transports reset their devices.
  std::vector<Slot> slots_;
};

}  // namespace dsec::vm
