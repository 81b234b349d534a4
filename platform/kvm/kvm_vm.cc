// SPDX-License-Identifier: Apache-2.0
#include "platform/kvm/kvm_vm.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/logging.h"
#include "base/mmap.h"
#include "base/status.h"
#include "platform/kvm/ioctl_util.h"
#include "platform/kvm/kvm_abi.h"
#include "platform/kvm/kvm_vcpu.h"

namespace dsec::kvm {

using internal::IoctlRetry;

namespace {

constexpr uint64_t kPageSize = 4096;

std::string Hex(uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); }

// Duplicates an eventfd so a registration can deassign it later whatever
// happens to the caller's EventFd. KVM matches irqfds and ioeventfds by the
// underlying eventfd context, not by descriptor number, so a duplicate names
// the same registration.
absl::StatusOr<ScopedFd> DupEventFd(int eventfd) {
  int fd = ::fcntl(eventfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus("fcntl(F_DUPFD_CLOEXEC) of eventfd");
  return ScopedFd(fd);
}

kvm_ioeventfd MakeIoeventfd(int fd, uint64_t addr, uint32_t len, IoSpace space,
                            std::optional<uint64_t> datamatch, bool deassign) {
  kvm_ioeventfd io{};
  io.addr = addr;
  io.len = len;
  io.fd = fd;
  if (space == IoSpace::kPio) io.flags |= KVM_IOEVENTFD_FLAG_PIO;
  if (datamatch.has_value()) {
    io.flags |= KVM_IOEVENTFD_FLAG_DATAMATCH;
    io.datamatch = *datamatch;
  }
  if (deassign) io.flags |= KVM_IOEVENTFD_FLAG_DEASSIGN;
  return io;
}

}  // namespace

namespace internal {

struct SlotInfo {
  uint64_t gpa = 0;
  uint64_t size = 0;
  MemSlotFlags flags;
};

struct SlotTable {
  SlotTable(int vm_fd, uint32_t max) : fd(vm_fd), max_slots(max) {}

  absl::Mutex mu;
  // The VM's fd, -1 once the KvmVm closed it (every slot went with it).
  int fd ABSL_GUARDED_BY(mu);
  const uint32_t max_slots;
  std::map<uint32_t, SlotInfo> slots ABSL_GUARDED_BY(mu);
};

// Deletes `slot` unless the VM is closed (then it went with the VM).
absl::Status RemoveSlot(SlotTable& t, uint32_t slot) {
  absl::MutexLock lock(&t.mu);
  if (t.fd < 0) return absl::OkStatus();  // the VM is closed: the slot went with it
  auto it = t.slots.find(slot);
  if (it == t.slots.end()) {
    return absl::NotFoundError(absl::StrCat("memory slot ", slot, " not in use"));
  }
  // A zero memory_size deletes the slot (api.rst, KVM_SET_USER_MEMORY_REGION).
  kvm_userspace_memory_region region{};
  region.slot = slot;
  region.guest_phys_addr = it->second.gpa;
  if (int r = IoctlRetry(t.fd, KVM_SET_USER_MEMORY_REGION, &region); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_USER_MEMORY_REGION(delete slot ", slot, ", gpa ",
                                      Hex(it->second.gpa), ")"),
                         -r);
  }
  t.slots.erase(it);
  return absl::OkStatus();
}

}  // namespace internal

// ---- RAII handles ----

IrqfdRegistration& IrqfdRegistration::operator=(IrqfdRegistration&& other) noexcept {
  if (this != &other) {
    Reset();
    vm_ = std::exchange(other.vm_, nullptr);
    eventfd_ = std::move(other.eventfd_);
    gsi_ = other.gsi_;
  }
  return *this;
}

void IrqfdRegistration::Reset() {
  if (vm_ == nullptr) return;
  absl::Status s = vm_->DeassignIrqfd(eventfd_.get(), gsi_);
  if (!s.ok())
    DSEC_LOG(warn, "component=kvm irqfd_deassign_failed gsi={} error={}", gsi_, s.ToString());
  vm_->live_handles_.fetch_sub(1);
  vm_ = nullptr;
  eventfd_.Reset();
}

IoEventRegistration& IoEventRegistration::operator=(IoEventRegistration&& other) noexcept {
  if (this != &other) {
    Reset();
    vm_ = std::exchange(other.vm_, nullptr);
    eventfd_ = std::move(other.eventfd_);
    addr_ = other.addr_;
    len_ = other.len_;
    space_ = other.space_;
    datamatch_ = other.datamatch_;
  }
  return *this;
}

void IoEventRegistration::Reset() {
  if (vm_ == nullptr) return;
  absl::Status s = vm_->DeassignIoeventfd(*this);
  if (!s.ok()) {
    DSEC_LOG(warn, "component=kvm ioeventfd_deassign_failed addr={} error={}", Hex(addr_),
             s.ToString());
  }
  vm_->live_handles_.fetch_sub(1);
  vm_ = nullptr;
  eventfd_.Reset();
}

absl::StatusOr<MemSlot> MemSlot::Create(KvmVm* vm, uint64_t gpa, uint64_t size, void* host_addr,
                                        MemSlotFlags flags) {
  DSEC_CHECK(vm != nullptr);
  DSEC_ASSIGN_OR_RETURN(uint32_t slot, vm->AddMemorySlot(gpa, size, host_addr, flags));
  return MemSlot(vm->slots_, slot, gpa, size);
}

MemSlot& MemSlot::operator=(MemSlot&& other) noexcept {
  if (this != &other) {
    Reset();
    table_ = std::move(other.table_);
    slot_ = other.slot_;
    gpa_ = other.gpa_;
    size_ = other.size_;
  }
  return *this;
}

void MemSlot::Reset() {
  if (table_ == nullptr) return;
  absl::Status s = internal::RemoveSlot(*table_, slot_);
  if (!s.ok())
    DSEC_LOG(warn, "component=kvm memslot_remove_failed slot={} error={}", slot_, s.ToString());
  table_ = nullptr;
}

// ---- KvmVm ----

KvmVm::KvmVm(ScopedFd fd, size_t vcpu_mmap_size, uint32_t max_slots)
    : fd_(std::move(fd)),
      vcpu_mmap_size_(vcpu_mmap_size),
      slots_(std::make_shared<internal::SlotTable>(fd_.get(), max_slots)) {}

KvmVm::~KvmVm() {
  // A live handle would call into this object after it is gone.
  DSEC_CHECK(live_handles_.load() == 0);
  // MemSlots that outlive this object must not use the fd (closed below, its
  // number free for reuse): closing it frees their slots.
  absl::MutexLock lock(&slots_->mu);
  slots_->fd = -1;
  slots_->slots.clear();
}

int KvmVm::CheckExtension(int cap) const {
  int ret = IoctlRetry(fd_.get(), KVM_CHECK_EXTENSION, cap);
  return ret < 0 ? 0 : ret;
}

absl::StatusOr<uint32_t> KvmVm::AddMemorySlot(uint64_t gpa, uint64_t size, void* host_addr,
                                              MemSlotFlags flags) {
  auto host = reinterpret_cast<uint64_t>(host_addr);
  if (size == 0 || gpa % kPageSize != 0 || size % kPageSize != 0 || host % kPageSize != 0 ||
      gpa + size < gpa) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory slot gpa ", Hex(gpa), " size ", Hex(size), " host ", Hex(host),
                     ": need non-empty, 4 KiB aligned, non-wrapping ranges"));
  }
  internal::SlotTable& t = *slots_;
  absl::MutexLock lock(&t.mu);
  // Lowest free slot number: slots are few and long-lived, a scan is fine.
  uint32_t slot = 0;
  for (const auto& [used, info] : t.slots) {
    if (used != slot) break;
    ++slot;
  }
  if (slot >= t.max_slots) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", t.max_slots, " KVM memory slots in use"));
  }
  kvm_userspace_memory_region region{};
  region.slot = slot;
  region.guest_phys_addr = gpa;
  region.memory_size = size;
  region.userspace_addr = host;
  if (flags.readonly) region.flags |= KVM_MEM_READONLY;
  if (flags.log_dirty) region.flags |= KVM_MEM_LOG_DIRTY_PAGES;
  if (int r = IoctlRetry(t.fd, KVM_SET_USER_MEMORY_REGION, &region); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_USER_MEMORY_REGION(slot ", slot, ", gpa ", Hex(gpa),
                                      ", size ", Hex(size), ")"),
                         -r);
  }
  t.slots[slot] = internal::SlotInfo{gpa, size, flags};
  return slot;
}

absl::Status KvmVm::RemoveMemorySlot(uint32_t slot) { return internal::RemoveSlot(*slots_, slot); }

absl::StatusOr<std::vector<MemSlot>> KvmVm::AddGuestMemory(const memory::GuestMemory& memory,
                                                           MemSlotFlags flags) {
  // On failure the slots added so far are removed as `added` goes.
  std::vector<MemSlot> added;
  for (const memory::GuestRegion& region : memory.regions()) {
    DSEC_ASSIGN_OR_RETURN(MemSlot slot,
                          MemSlot::Create(this, region.gpa, region.size, region.host, flags));
    added.push_back(std::move(slot));
  }
  return added;
}

absl::StatusOr<std::vector<uint64_t>> KvmVm::GetDirtyLog(uint32_t slot) {
  uint64_t pages;
  {
    absl::MutexLock lock(&slots_->mu);
    auto it = slots_->slots.find(slot);
    if (it == slots_->slots.end()) {
      return absl::NotFoundError(absl::StrCat("memory slot ", slot, " not in use"));
    }
    if (!it->second.flags.log_dirty) {
      return absl::FailedPreconditionError(
          absl::StrCat("memory slot ", slot, " was added without dirty logging"));
    }
    pages = it->second.size / kPageSize;
  }
  // KVM writes ALIGN(pages, 64) / 8 bytes (api.rst, KVM_GET_DIRTY_LOG).
  std::vector<uint64_t> bitmap((pages + 63) / 64);
  kvm_dirty_log log{};
  log.slot = slot;
  log.dirty_bitmap = bitmap.data();
  if (int r = IoctlRetry(fd_.get(), KVM_GET_DIRTY_LOG, &log); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_DIRTY_LOG(slot ", slot, ")"), -r);
  }
  return bitmap;
}

absl::Status KvmVm::CreateIrqchip() {
  if (int r = IoctlRetry(fd_.get(), KVM_CREATE_IRQCHIP, 0); r < 0) {
    return ErrnoToStatus("KVM_CREATE_IRQCHIP", -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<IrqchipState> KvmVm::GetIrqchip(uint32_t chip) const {
  kvm_irqchip k{};
  k.chip_id = chip;
  if (int r = IoctlRetry(fd_.get(), KVM_GET_IRQCHIP, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_IRQCHIP(chip ", chip, ")"), -r);
  }
  IrqchipState out;
  std::memcpy(out.bytes, &k, sizeof(k));
  return out;
}

absl::Status KvmVm::SetIrqchip(const IrqchipState& state) {
  kvm_irqchip k;
  std::memcpy(&k, state.bytes, sizeof(k));
  if (int r = IoctlRetry(fd_.get(), KVM_SET_IRQCHIP, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_IRQCHIP(chip ", k.chip_id, ")"), -r);
  }
  return absl::OkStatus();
}

size_t KvmVm::XsaveSize() const {
  if (CheckExtension(KVM_CAP_XSAVE) <= 0) return 0;
  const int size = CheckExtension(KVM_CAP_XSAVE2);
  return size > 4096 ? static_cast<size_t>(size) : 4096;
}

absl::StatusOr<ClockData> KvmVm::GetClock() const {
  kvm_clock_data k{};
  if (int r = IoctlRetry(fd_.get(), KVM_GET_CLOCK, &k); r < 0) {
    return ErrnoToStatus("KVM_GET_CLOCK", -r);
  }
  ClockData out;
  std::memcpy(out.bytes, &k, sizeof(k));
  return out;
}

absl::Status KvmVm::SetClock(const ClockData& clock) {
  kvm_clock_data k;
  std::memcpy(&k, clock.bytes, sizeof(k));
  // Only the clock value: the flags KVM_GET_CLOCK reported (TSC_STABLE,
  // REALTIME, HOST_TSC) describe the source host, and KVM_SET_CLOCK refuses
  // flags it does not accept.
  k.flags = 0;
  if (int r = IoctlRetry(fd_.get(), KVM_SET_CLOCK, &k); r < 0) {
    return ErrnoToStatus("KVM_SET_CLOCK", -r);
  }
  return absl::OkStatus();
}

absl::Status KvmVm::CreatePit2() {
  kvm_pit_config config{};
  config.flags = KVM_PIT_SPEAKER_DUMMY;
  if (int r = IoctlRetry(fd_.get(), KVM_CREATE_PIT2, &config); r < 0) {
    return ErrnoToStatus("KVM_CREATE_PIT2", -r);
  }
  return absl::OkStatus();
}

absl::Status KvmVm::SetTssAddress(uint64_t addr) {
  if (int r = IoctlRetry(fd_.get(), KVM_SET_TSS_ADDR, static_cast<unsigned long>(addr)); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_TSS_ADDR(", Hex(addr), ")"), -r);
  }
  return absl::OkStatus();
}

absl::Status KvmVm::SetIdentityMapAddress(uint64_t addr) {
  uint64_t a = addr;
  if (int r = IoctlRetry(fd_.get(), KVM_SET_IDENTITY_MAP_ADDR, &a); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_IDENTITY_MAP_ADDR(", Hex(addr), ")"), -r);
  }
  return absl::OkStatus();
}

absl::Status KvmVm::SetIrqLine(uint32_t gsi, bool level) {
  kvm_irq_level irq{};
  irq.irq = gsi;
  irq.level = level ? 1 : 0;
  if (int r = IoctlRetry(fd_.get(), KVM_IRQ_LINE, &irq); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_IRQ_LINE(gsi ", gsi, ", level ", irq.level, ")"), -r);
  }
  return absl::OkStatus();
}

absl::Status KvmVm::SetGsiRouting(std::span<const GsiRoute> routes) {
  // struct kvm_irq_routing in its C layout (see kvm_abi.h): an 8-byte header,
  // then the entries (8-byte aligned; operator new gives at least 16).
  std::vector<uint8_t> buf(sizeof(abi::IrqRoutingHeader) +
                           routes.size() * sizeof(kvm_irq_routing_entry));
  auto* table = reinterpret_cast<abi::IrqRoutingHeader*>(buf.data());
  table->nr = static_cast<uint32_t>(routes.size());
  auto* entries = reinterpret_cast<kvm_irq_routing_entry*>(buf.data() + sizeof(*table));
  for (size_t i = 0; i < routes.size(); ++i) {
    const GsiRoute& r = routes[i];
    kvm_irq_routing_entry& e = entries[i];
    e.gsi = r.gsi;
    if (r.kind == GsiRoute::Kind::kIrqchip) {
      e.type = KVM_IRQ_ROUTING_IRQCHIP;
      e.u.irqchip.irqchip = r.irqchip;
      e.u.irqchip.pin = r.pin;
    } else {
      e.type = KVM_IRQ_ROUTING_MSI;
      e.u.msi.address_lo = static_cast<uint32_t>(r.msi_address);
      e.u.msi.address_hi = static_cast<uint32_t>(r.msi_address >> 32);
      e.u.msi.data = r.msi_data;
    }
  }
  if (int r = IoctlRetry(fd_.get(), abi::kSetGsiRouting, table); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_GSI_ROUTING(", routes.size(), " entries)"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> KvmVm::SignalMsi(uint64_t address, uint32_t data) {
  kvm_msi msi{};
  msi.address_lo = static_cast<uint32_t>(address);
  msi.address_hi = static_cast<uint32_t>(address >> 32);
  msi.data = data;
  int ret = IoctlRetry(fd_.get(), KVM_SIGNAL_MSI, &msi);
  if (ret < 0) {
    return ErrnoToStatus(
        absl::StrCat("KVM_SIGNAL_MSI(address ", Hex(address), ", data ", Hex(data), ")"), -ret);
  }
  return ret > 0;
}

absl::StatusOr<IrqfdRegistration> KvmVm::RegisterIrqfd(const EventFd& event, uint32_t gsi) {
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, DupEventFd(event.fd()));
  kvm_irqfd irqfd{};
  irqfd.fd = static_cast<uint32_t>(fd.get());
  irqfd.gsi = gsi;
  if (int r = IoctlRetry(fd_.get(), KVM_IRQFD, &irqfd); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_IRQFD(gsi ", gsi, ")"), -r);
  }
  live_handles_.fetch_add(1);
  return IrqfdRegistration(this, std::move(fd), gsi);
}

absl::Status KvmVm::DeassignIrqfd(int eventfd, uint32_t gsi) {
  kvm_irqfd irqfd{};
  irqfd.fd = static_cast<uint32_t>(eventfd);
  irqfd.gsi = gsi;
  irqfd.flags = KVM_IRQFD_FLAG_DEASSIGN;
  if (int r = IoctlRetry(fd_.get(), KVM_IRQFD, &irqfd); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_IRQFD(deassign gsi ", gsi, ")"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<IoEventRegistration> KvmVm::RegisterIoeventfd(const EventFd& event, uint64_t addr,
                                                             uint32_t len, IoSpace space,
                                                             std::optional<uint64_t> datamatch) {
  return RegisterIoeventfd(event.fd(), addr, len, space, datamatch);
}

absl::StatusOr<IoEventRegistration> KvmVm::RegisterIoeventfd(int eventfd, uint64_t addr,
                                                             uint32_t len, IoSpace space,
                                                             std::optional<uint64_t> datamatch) {
  if (len != 0 && len != 1 && len != 2 && len != 4 && len != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("ioeventfd length ", len, " not 0, 1, 2, 4 or 8"));
  }
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, DupEventFd(eventfd));
  kvm_ioeventfd io = MakeIoeventfd(fd.get(), addr, len, space, datamatch, /*deassign=*/false);
  if (int r = IoctlRetry(fd_.get(), KVM_IOEVENTFD, &io); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_IOEVENTFD(", space == IoSpace::kPio ? "pio " : "mmio ",
                                      Hex(addr), ", len ", len, ")"),
                         -r);
  }
  live_handles_.fetch_add(1);
  IoEventRegistration reg;
  reg.vm_ = this;
  reg.eventfd_ = std::move(fd);
  reg.addr_ = addr;
  reg.len_ = len;
  reg.space_ = space;
  reg.datamatch_ = datamatch;
  return reg;
}

absl::Status KvmVm::DeassignIoeventfd(const IoEventRegistration& reg) {
  kvm_ioeventfd io = MakeIoeventfd(reg.eventfd_.get(), reg.addr_, reg.len_, reg.space_,
                                   reg.datamatch_, /*deassign=*/true);
  if (int r = IoctlRetry(fd_.get(), KVM_IOEVENTFD, &io); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_IOEVENTFD(deassign ", Hex(reg.addr_), ")"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvmVcpu>> KvmVm::CreateVcpu(uint32_t id) {
  int vcpu_fd = IoctlRetry(fd_.get(), KVM_CREATE_VCPU, static_cast<unsigned long>(id));
  if (vcpu_fd < 0) return ErrnoToStatus(absl::StrCat("KVM_CREATE_VCPU(", id, ")"), -vcpu_fd);
  ScopedFd fd(vcpu_fd);
  absl::StatusOr<Mmap> run =
      Mmap::File(fd.get(), vcpu_mmap_size_, PROT_READ | PROT_WRITE, MAP_SHARED);
  if (!run.ok()) return Annotate(run.status(), absl::StrCat("mmap of kvm_run for vcpu ", id));
  return std::unique_ptr<KvmVcpu>(new KvmVcpu(id, std::move(fd), std::move(*run)));
}

}  // namespace dsec::kvm
