// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/virtio_devices.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_fields.h"
#include "base/status.h"
#include "platform/arch/x86_64/layout.h"
#include "vmm/vm/guest_address_space.h"
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

absl::StatusOr<std::unique_ptr<VirtioDevices>> VirtioDevices::Create(const virtio::DeviceSpecs& specs,
                                                                     const Context& context) {
  if (specs.size() > kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d virtio devices requested; at most %d fit", specs.size(), kMaxDevices));
  }
  std::unique_ptr<VirtioDevices> d(new VirtioDevices());
  d->registrar_ = std::make_unique<KvmNotifyRegistrar>(context.kvm_vm);
  std::vector<arch::AddressRange> ram;
  for (const memory::GuestRegion& r : context.memory->regions()) ram.push_back({r.gpa, r.size});
  d->address_space_ = std::make_unique<KvmGuestAddressSpace>(context.kvm_vm, ram);
  std::map<const virtio::DeviceKind*, size_t> per_kind;
  for (const std::shared_ptr<const virtio::DeviceSpec>& spec : specs) {
    if (spec == nullptr) return absl::InvalidArgumentError("an empty device spec");
    const virtio::DeviceKind& kind = spec->kind();
    virtio::DeviceEnv env;
    env.memory = context.memory;
    env.loop = context.loop;
    env.mmio_bus = context.mmio_bus;
    env.address_space = d->address_space_.get();
    env.index = per_kind[&kind]++;
    // On error `d` is destroyed, which takes down what was built so far.
    DSEC_ASSIGN_OR_RETURN(virtio::BuiltDevice built, spec->Build(env));
    DSEC_RETURN_IF_ERROR(d->Add(std::move(built), &kind, context));
  }
  return d;
}

absl::Status VirtioDevices::Add(virtio::BuiltDevice built, const virtio::DeviceKind* kind,
                                const Context& context) {
  if (built.device == nullptr) {
    return absl::InternalError(absl::StrCat(built.name, ": the builder made no device"));
  }
  // The slot owns the resources from here on, whatever fails below.
  slots_.push_back(Slot{});
  Slot& slot = slots_.back();
  const uint32_t index = static_cast<uint32_t>(slots_.size() - 1);
  slot.kind = kind;
  slot.name = built.name;
  slot.base = arch::kVirtioMmioBase + index * arch::kVirtioMmioStride;
  slot.irq = kFirstIrq + index;
  slot.device = std::move(built.device);
  slot.resources = std::move(built.resources);
  slot.control = std::move(built.control);
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<IrqfdLine> line,
                        IrqfdLine::Create(*context.kvm_vm, slot.irq));
  slot.irq_line = std::move(line);
  virtio::MmioTransport::Options opts;
  opts.name = slot.name;
  opts.base = slot.base;
  opts.device = slot.device;
  opts.memory = context.memory;
  opts.interrupt = slot.irq_line;
  opts.loop = context.loop;
  opts.registrar = registrar_.get();
  DSEC_ASSIGN_OR_RETURN(slot.transport, virtio::MmioTransport::Create(opts));
  return context.mmio_bus->Insert(slot.transport, slot.base, virtio::mmio::kWindowSize);
}

std::string VirtioDevices::CommandLine() const {
  std::string out;
  for (const Slot& s : slots_) {
    absl::StrAppend(&out, absl::StrFormat(" virtio_mmio.device=4K@0x%x:%d", s.base, s.irq));
  }
  return out;
}

VirtioDevices::~VirtioDevices() {
  // No vCPU runs any more. Per device, newest first: the transport (it
  // resets an active device), the device, then its resources newest first
  // (bus claims and memslots before the mappings they point into). The
  // mmio bus holds the transports too, so a device the guest left active
  // (a guest that stopped without resetting it) is reset here, before its
  // back-end goes, not when the bus lets go of the transport.
  while (!slots_.empty()) {
    Slot& s = slots_.back();
    s.transport->ResetDeviceForTeardown();
    s.transport.reset();
    s.irq_line.reset();
    s.control.reset();
    s.device.reset();
    while (!s.resources.empty()) s.resources.pop_back();
    slots_.pop_back();
  }
}

absl::StatusOr<nlohmann::json> VirtioDevices::SaveState() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Slot& s : slots_) {
    DSEC_ASSIGN_OR_RETURN(nlohmann::json state, s.transport->SaveState());
    out.push_back({{"name", s.name}, {"state", std::move(state)}});
  }
  return out;
}

absl::Status VirtioDevices::RestoreState(const nlohmann::json& state) {
  if (!state.is_array() || state.size() != slots_.size()) {
    return InvalidField("devices.virtio", absl::StrCat("devices.virtio must list the VM's ",
                                                       slots_.size(), " virtio devices"));
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::string path = absl::StrCat("devices.virtio[", i, "]");
    const nlohmann::json& d = state[i];
    if (!d.is_object() || !d.contains("name") || !d["name"].is_string() ||
        d["name"].get<std::string>() != slots_[i].name || !d.contains("state") || d.size() != 2) {
      return InvalidField(path, absl::StrCat(path, " must be {\"name\": \"", slots_[i].name,
                                             "\", \"state\": {...}}"));
    }
    DSEC_RETURN_IF_ERROR(slots_[i].transport->RestoreState(d["state"]));
  }
  return absl::OkStatus();
}

}  // namespace dsec::vm
