// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/virtio_devices.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "devices/blk/blk_device.h"
#include "devices/blk/disk_image.h"
#include "devices/net/mac_address.h"
#include "devices/net/net_device.h"
#include "devices/net/tap_backend.h"
#include "devices/rng/rng_backend.h"
#include "devices/rng/rng_device.h"
#include "devices/vsock/unix_backend.h"
#include "devices/vsock/vsock_device.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/base/status.h"
#include "vmm/vm/irqfd_line.h"

namespace dsec::vm {

// Queue notifications as KVM ioeventfds: a guest write of the queue index to
// QueueNotify signals the transport's eventfd inside KVM, with no exit to
// the monitor (virtio 1.2 section 4.2.3.3).
class VirtioDevices::KvmNotifyRegistrar : public virtio::NotifyRegistrar {
 public:
  explicit KvmNotifyRegistrar(kvm::KvmVm* vm) : vm_(vm) {}

  absl::StatusOr<std::unique_ptr<virtio::NotifyRegistration>> Register(uint64_t gpa, uint32_t len,
                                                                       uint64_t datamatch,
                                                                       int fd) override {
    DSEC_ASSIGN_OR_RETURN(kvm::IoEventRegistration reg,
                          vm_->RegisterIoeventfd(fd, gpa, len, kvm::IoSpace::kMmio, datamatch));
    return std::unique_ptr<virtio::NotifyRegistration>(new Registration(std::move(reg)));
  }

 private:
  class Registration : public virtio::NotifyRegistration {
   public:
    explicit Registration(kvm::IoEventRegistration reg) : reg_(std::move(reg)) {}

   private:
    kvm::IoEventRegistration reg_;
  };
  kvm::KvmVm* vm_;
};

absl::StatusOr<std::unique_ptr<VirtioDevices>> VirtioDevices::Create(const VmConfig& config,
                                                                     const Context& context) {
  std::unique_ptr<VirtioDevices> d(new VirtioDevices());
  d->registrar_ = std::make_unique<KvmNotifyRegistrar>(context.kvm_vm);
  const size_t wanted =
      (config.rng ? 1 : 0) + config.disks.size() + config.nets.size() + (config.vsock ? 1 : 0);
  if (wanted > kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d virtio devices requested; at most %d fit", wanted, kMaxDevices));
  }

  if (config.rng) {
    DSEC_ASSIGN_OR_RETURN(
        std::shared_ptr<devices::RngDevice> rng,
        devices::RngDevice::Create(std::make_unique<devices::GetrandomEntropySource>(), {}));
    DSEC_RETURN_IF_ERROR(d->Add("virtio-rng", std::move(rng), context));
  }
  for (size_t i = 0; i < config.disks.size(); ++i) {
    const DiskConfig& disk = config.disks[i];
    auto image = devices::DiskImage::Open(disk.path, disk.read_only);
    if (!image.ok()) return Annotate(image.status(), absl::StrCat("--disk ", disk.path));
    devices::BlkDeviceConfig blk;
    blk.serial = absl::StrCat("dsec-disk", i);
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<devices::BlkDevice> dev,
                          devices::BlkDevice::Create(std::move(*image), blk));
    DSEC_RETURN_IF_ERROR(d->Add(absl::StrCat("virtio-blk", i), std::move(dev), context));
  }
  for (size_t i = 0; i < config.nets.size(); ++i) {
    const NetConfig& net = config.nets[i];
    auto tap = devices::TapBackend::Open(absl::string_view(net.tap.data(), net.tap.size()));
    if (!tap.ok()) return Annotate(tap.status(), absl::StrCat("--net ", net.tap));
    devices::NetDeviceConfig nc;
    nc.id = net.tap;
    if (!net.mac.empty()) {
      DSEC_ASSIGN_OR_RETURN(nc.mac, devices::ParseMac(absl::string_view(net.mac.data(), net.mac.size())));
    } else {
      nc.mac = devices::DeriveMac(std::hash<std::string>{}(net.tap));
    }
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<devices::NetDevice> dev,
                          devices::NetDevice::Create(nc, std::move(*tap)));
    DSEC_RETURN_IF_ERROR(d->Add(absl::StrCat("virtio-net", i), std::move(dev), context));
  }
  if (config.vsock) {
    devices::UnixVsockBackendOptions vo;
    vo.path = config.vsock->socket_path;
    vo.guest_cid = config.vsock->guest_cid;
    auto backend = devices::UnixVsockBackend::Create(context.loop, vo);
    if (!backend.ok()) {
      return Annotate(backend.status(), absl::StrCat("--vsock ", config.vsock->socket_path));
    }
    d->vsock_backend_ = std::move(*backend);
    DSEC_ASSIGN_OR_RETURN(
        std::unique_ptr<devices::VsockDevice> dev,
        devices::VsockDevice::Create(config.vsock->guest_cid, d->vsock_backend_.get()));
    DSEC_RETURN_IF_ERROR(d->Add("virtio-vsock", std::move(dev), context));
  }
  return d;
}

absl::Status VirtioDevices::Add(const std::string& name,
                                std::shared_ptr<virtio::VirtioDevice> device,
                                const Context& context) {
  Slot slot;
  const uint32_t index = static_cast<uint32_t>(slots_.size());
  slot.base = arch::kVirtioMmioBase + index * arch::kVirtioMmioStride;
  slot.irq = kFirstIrq + index;
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<IrqfdLine> line,
                        IrqfdLine::Create(*context.kvm_vm, slot.irq));
  slot.irq_line = std::move(line);
  slot.device = std::move(device);
  virtio::MmioTransport::Options opts;
  opts.name = name;
  opts.base = slot.base;
  opts.device = slot.device;
  opts.memory = context.memory;
  opts.interrupt = slot.irq_line;
  opts.loop = context.loop;
  opts.registrar = registrar_.get();
  DSEC_ASSIGN_OR_RETURN(slot.transport, virtio::MmioTransport::Create(opts));
  DSEC_RETURN_IF_ERROR(
      context.mmio_bus->Insert(slot.transport, slot.base, virtio::mmio::kWindowSize));
  slots_.push_back(std::move(slot));
  return absl::OkStatus();
}

std::string VirtioDevices::CommandLine() const {
  std::string out;
  for (const Slot& s : slots_) {
    absl::StrAppend(&out, absl::StrFormat(" virtio_mmio.device=4K@0x%x:%d", s.base, s.irq));
  }
  return out;
}

VirtioDevices::~VirtioDevices() {
  // Transports first (they reset active devices), then the vsock backend the
  // vsock device points at, then the registrar their notify routes use.
  slots_.clear();
  vsock_backend_.reset();
}

}  // namespace dsec::vm
