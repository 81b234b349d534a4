// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/virtio_devices.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "devices/balloon/balloon_backend.h"
#include "devices/balloon/balloon_device.h"
#include "devices/blk/blk_device.h"
#include "devices/blk/disk_image.h"
#include "devices/net/mac_address.h"
#include "devices/net/net_device.h"
#include "devices/net/tap_backend.h"
#include "devices/pmem/pmem_backend.h"
#include "devices/pmem/pmem_device.h"
#include "devices/rng/rng_backend.h"
#include "devices/rng/rng_device.h"
#include "devices/vsock/unix_backend.h"
#include "devices/vsock/vsock_device.h"
#include "platform/arch/x86_64/layout.h"
#include "base/status.h"
#include "pmem-dax/layer_mapping.h"
#include "pmem-dax/pmem_placement.h"
#include "pmem-dax/readonly_write_sink.h"
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
  d->mmio_bus_ = context.mmio_bus;
  d->registrar_ = std::make_unique<KvmNotifyRegistrar>(context.kvm_vm);
  const size_t wanted = (config.rng ? 1 : 0) + (config.balloon ? 1 : 0) + config.disks.size() + config.nets.size() +
                        (config.vsock ? 1 : 0) + config.pmems.size();
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
  if (config.balloon) {
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<devices::MemfdBalloonBackend> backend,
                          devices::MemfdBalloonBackend::ForGuestMemory(*context.memory));
    DSEC_ASSIGN_OR_RETURN(std::shared_ptr<devices::BalloonDevice> balloon,
                          devices::BalloonDevice::Create(std::move(backend), {}));
    const uint64_t target_pages = config.balloon_target_mib * (1024 * 1024 / 4096);
    if (target_pages > balloon->ram_pages()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--balloon-target-mib %d exceeds guest RAM", config.balloon_target_mib));
    }
    balloon->SetTargetPages(static_cast<uint32_t>(target_pages));
    d->balloon_ = balloon;
    DSEC_RETURN_IF_ERROR(d->Add("virtio-balloon", std::move(balloon), context));
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
  DSEC_RETURN_IF_ERROR(d->AddPmems(config, context));
  return d;
}

absl::Status VirtioDevices::AddPmems(const VmConfig& config, const Context& context) {
  if (config.pmems.empty()) return absl::OkStatus();
  // Open and map every layer first: a missing or empty image is the likely
  // error and is reported before anything is placed or registered.
  std::vector<std::unique_ptr<pmem::LayerMapping>> mappings;
  std::vector<uint64_t> sizes;
  for (const PmemConfig& p : config.pmems) {
    auto mapping = pmem::LayerMapping::Create(p.path, p.read_only);
    if (!mapping.ok()) return Annotate(mapping.status(), absl::StrCat("--pmem ", p.path));
    sizes.push_back(mapping->region_size());
    mappings.push_back(std::make_unique<pmem::LayerMapping>(std::move(*mapping)));
  }
  std::vector<arch::AddressRange> ram;
  for (const memory::GuestRegion& r : context.memory->regions()) ram.push_back({r.gpa, r.size});
  auto starts = pmem::PlacePmemRegions(ram, sizes);
  if (!starts.ok()) return Annotate(starts.status(), "--pmem");
  for (size_t i = 0; i < mappings.size(); ++i) {
    PmemLayer layer;
    layer.gpa = (*starts)[i];
    layer.mapping = std::move(mappings[i]);
    const pmem::LayerMapping& m = *layer.mapping;
    const std::string name = absl::StrCat("virtio-pmem", i);
    auto slot = kvm::MemSlot::Create(context.kvm_vm, layer.gpa, m.region_size(), m.host_addr(),
                                     kvm::MemSlotFlags{.readonly = m.read_only()});
    if (!slot.ok()) return Annotate(slot.status(), absl::StrCat("--pmem ", m.path(), ": memslot"));
    layer.slot = std::move(*slot);
    if (m.read_only()) {
      layer.sink = std::make_shared<pmem::ReadOnlyWriteSink>(name, m.host_addr(), m.region_size());
      DSEC_RETURN_IF_ERROR(context.mmio_bus->Insert(layer.sink, layer.gpa, m.region_size()));
    }
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<devices::FilePmemBackend> backend,
                          devices::FilePmemBackend::Create(m.fd(), m.file_size()));
    devices::PmemOptions po;
    po.start = layer.gpa;
    po.size = m.region_size();
    po.read_only = m.read_only();
    DSEC_ASSIGN_OR_RETURN(layer.device, devices::PmemDevice::Create(std::move(backend), po));
    std::shared_ptr<devices::PmemDevice> device = layer.device;
    pmems_.push_back(std::move(layer));
    DSEC_RETURN_IF_ERROR(Add(name, std::move(device), context));
  }
  return absl::OkStatus();
}

uint64_t VirtioDevices::pmem_start(size_t i) const { return pmems_[i].gpa; }
uint64_t VirtioDevices::pmem_size(size_t i) const { return pmems_[i].mapping->region_size(); }
const devices::PmemMetrics& VirtioDevices::pmem_metrics(size_t i) const {
  return pmems_[i].device->metrics();
}
uint64_t VirtioDevices::pmem_refused_writes(size_t i) const {
  return pmems_[i].sink ? pmems_[i].sink->refused_writes() : 0;
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
  balloon_.reset();
  vsock_backend_.reset();
  // No vCPU runs any more: take the write sinks off the bus before their
  // mappings are unmapped, then remove the memslots and unmap.
  for (const PmemLayer& p : pmems_) {
    if (p.sink && mmio_bus_ != nullptr) (void)mmio_bus_->Remove(p.gpa);
  }
  pmems_.clear();
}

}  // namespace dsec::vm
