// SPDX-License-Identifier: Apache-2.0
#include "platform/kvm/kvm_vcpu.h"

#include <linux/kvm.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "platform/kvm/ioctl_util.h"
#include "platform/kvm/kvm_ioctl_numbers.h"
#include "platform/kvm/kvm_abi.h"

namespace dsec::kvm {

// x86_types.h mirrors the kernel's x86 structures so callers never include
// <linux/kvm.h>; conversions below are memcpy, which these checks make safe.
static_assert(sizeof(Segment) == sizeof(kvm_segment));
static_assert(offsetof(Segment, selector) == offsetof(kvm_segment, selector));
static_assert(offsetof(Segment, type) == offsetof(kvm_segment, type));
static_assert(offsetof(Segment, unusable) == offsetof(kvm_segment, unusable));
static_assert(sizeof(DescriptorTable) == sizeof(kvm_dtable));
static_assert(offsetof(DescriptorTable, limit) == offsetof(kvm_dtable, limit));
static_assert(sizeof(SpecialRegisters) == sizeof(kvm_sregs));
static_assert(offsetof(SpecialRegisters, tr) == offsetof(kvm_sregs, tr));
static_assert(offsetof(SpecialRegisters, gdt) == offsetof(kvm_sregs, gdt));
static_assert(offsetof(SpecialRegisters, cr0) == offsetof(kvm_sregs, cr0));
static_assert(offsetof(SpecialRegisters, efer) == offsetof(kvm_sregs, efer));
static_assert(offsetof(SpecialRegisters, apic_base) == offsetof(kvm_sregs, apic_base));
static_assert(offsetof(SpecialRegisters, interrupt_bitmap) ==
              offsetof(kvm_sregs, interrupt_bitmap));
static_assert(sizeof(Registers) == sizeof(kvm_regs));
static_assert(offsetof(Registers, r8) == offsetof(kvm_regs, r8));
static_assert(offsetof(Registers, rip) == offsetof(kvm_regs, rip));
static_assert(offsetof(Registers, rflags) == offsetof(kvm_regs, rflags));
static_assert(sizeof(CpuidEntry) == sizeof(kvm_cpuid_entry2));
static_assert(offsetof(CpuidEntry, flags) == offsetof(kvm_cpuid_entry2, flags));
static_assert(offsetof(CpuidEntry, edx) == offsetof(kvm_cpuid_entry2, edx));
static_assert(kCpuidFlagSignificantIndex == KVM_CPUID_FLAG_SIGNIFCANT_INDEX);
static_assert(kIoctlRun == KVM_RUN && kIoctlType == KVMIO);  // kvm_ioctl_numbers.h
static_assert(sizeof(MsrEntry) == sizeof(kvm_msr_entry));
static_assert(offsetof(MsrEntry, data) == offsetof(kvm_msr_entry, data));
static_assert(sizeof(LapicState) == sizeof(kvm_lapic_state));
static_assert(LapicState::kSize == KVM_APIC_REG_SIZE);
static_assert(sizeof(VcpuEvents) == sizeof(kvm_vcpu_events));
static_assert(alignof(VcpuEvents) >= alignof(kvm_vcpu_events));
static_assert(sizeof(FpuRegs) == sizeof(kvm_fpu));
// struct kvm_xsave ends in a flexible array (empty in C, a 4-byte wrapper
// under g++): the legacy area is its first 4 KiB.
static_assert(offsetof(kvm_xsave, region) == 0 &&
              sizeof(kvm_xsave::region) == KvmVcpu::kLegacyXsaveSize);
static_assert(sizeof(XcrsState) == sizeof(kvm_xcrs));
static_assert(sizeof(DebugRegs) == sizeof(kvm_debugregs));
static_assert(sizeof(IrqchipState) == sizeof(kvm_irqchip));
static_assert(sizeof(ClockData) == sizeof(kvm_clock_data));
static_assert(kMpStateRunnable == KVM_MP_STATE_RUNNABLE);
static_assert(kMpStateUninitialized == KVM_MP_STATE_UNINITIALIZED);
static_assert(kMpStateInitReceived == KVM_MP_STATE_INIT_RECEIVED);
static_assert(kMpStateHalted == KVM_MP_STATE_HALTED);
static_assert(kMpStateSipiReceived == KVM_MP_STATE_SIPI_RECEIVED);
static_assert(vcpu_exit::SystemEvent::kShutdown == KVM_SYSTEM_EVENT_SHUTDOWN);
static_assert(vcpu_exit::SystemEvent::kReset == KVM_SYSTEM_EVENT_RESET);
static_assert(vcpu_exit::SystemEvent::kCrash == KVM_SYSTEM_EVENT_CRASH);

using internal::IoctlRetry;

namespace {

template <typename To, typename From>
To BitCopy(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  static_assert(std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>);
  // The x86_types.h structs have default member initialisers, which makes
  // them non-trivial types for -Wclass-memaccess although a byte copy is
  // well-defined for trivially copyable types; hence the void* casts.
  To to;
  std::memcpy(static_cast<void*>(&to), static_cast<const void*>(&from), sizeof(To));
  return to;
}

std::string Hex(uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); }

// Buffer for struct kvm_msrs in its C layout (see kvm_abi.h): an 8-byte
// header, then the entries.
class MsrBuffer {
 public:
  explicit MsrBuffer(size_t n) : buf_(sizeof(abi::MsrsHeader) + n * sizeof(kvm_msr_entry)) {
    header()->nmsrs = static_cast<uint32_t>(n);
  }
  abi::MsrsHeader* header() { return reinterpret_cast<abi::MsrsHeader*>(buf_.data()); }
  // operator new aligns to at least 16 bytes, enough for the entries' u64s.
  kvm_msr_entry* entries() {
    return reinterpret_cast<kvm_msr_entry*>(buf_.data() + sizeof(abi::MsrsHeader));
  }

 private:
  std::vector<uint8_t> buf_;
};

}  // namespace

absl::StatusOr<VcpuExit> KvmVcpu::Run() {
  // Not retried on EINTR: the interruption is how the monitor gets the vCPU
  // thread back (see the kick protocol in kvm_vcpu.h). EAGAIN is what KVM_RUN
  // returns once when an AP waiting for SIPI (KVM_MP_STATE_INIT_RECEIVED)
  // receives it; the caller just runs again, so it is the same outcome.
  if (::ioctl(fd_.get(), KVM_RUN, 0) < 0) {
    int err = errno;
    if (err == EINTR || err == EAGAIN) return vcpu_exit::Interrupted{};
    return ErrnoStatus(absl::StrCat("KVM_RUN(vcpu ", id_, ")"), err);
  }
  auto* run = reinterpret_cast<kvm_run*>(run_.data());
  switch (run->exit_reason) {
    case KVM_EXIT_IO: {
      // The data lives in the kvm_run mapping at data_offset (api.rst,
      // KVM_EXIT_IO); the offset is set by the kernel, checked all the same
      // so a kernel bug cannot turn into an out-of-bounds span.
      uint64_t bytes = uint64_t{run->io.size} * run->io.count;
      if (run->io.data_offset > run_.size() || bytes > run_.size() - run->io.data_offset) {
        return absl::InternalError(absl::StrCat("KVM_EXIT_IO(vcpu ", id_, "): data offset ",
                                                run->io.data_offset, " + ", bytes,
                                                " bytes outside kvm_run mapping"));
      }
      return vcpu_exit::Io{
          .port = run->io.port,
          .size = run->io.size,
          .is_write = run->io.direction == KVM_EXIT_IO_OUT,
          .count = run->io.count,
          .data = std::span<uint8_t>(run_.data() + run->io.data_offset, bytes),
      };
    }
    case KVM_EXIT_MMIO: {
      uint32_t len = run->mmio.len;
      if (len > sizeof(run->mmio.data)) {
        return absl::InternalError(
            absl::StrCat("KVM_EXIT_MMIO(vcpu ", id_, "): length ", len, " > 8"));
      }
      return vcpu_exit::Mmio{
          .gpa = run->mmio.phys_addr,
          .len = len,
          .is_write = run->mmio.is_write != 0,
          .data = std::span<uint8_t>(run->mmio.data, len),
      };
    }
    case KVM_EXIT_HLT:
      return vcpu_exit::Hlt{};
    case KVM_EXIT_SHUTDOWN:
      return vcpu_exit::Shutdown{};
    case KVM_EXIT_SYSTEM_EVENT:
      return vcpu_exit::SystemEvent{.type = run->system_event.type,
                                    .flags = run->system_event.flags};
    case KVM_EXIT_FAIL_ENTRY:
      return vcpu_exit::FailEntry{.hardware_reason = run->fail_entry.hardware_entry_failure_reason,
                                  .cpu = run->fail_entry.cpu};
    case KVM_EXIT_INTERNAL_ERROR: {
      vcpu_exit::InternalError e{.suberror = run->internal.suberror, .data = {}};
      uint32_t n = run->internal.ndata;
      constexpr uint32_t kMaxData = sizeof(run->internal.data) / sizeof(run->internal.data[0]);
      if (n > kMaxData) n = kMaxData;
      e.data.assign(run->internal.data, run->internal.data + n);
      return e;
    }
    case KVM_EXIT_INTR:
      return vcpu_exit::Interrupted{};
    default:
      return vcpu_exit::Unknown{.exit_reason = run->exit_reason};
  }
}

void KvmVcpu::SetImmediateExit(bool value) {
  // Written by the kicker thread while the vCPU thread may be entering
  // KVM_RUN, where the kernel reads it with READ_ONCE; an atomic store keeps
  // the write from being torn, reordered after the kick signal or elided.
  auto* run = reinterpret_cast<kvm_run*>(run_.data());
  std::atomic_ref<uint8_t>(run->immediate_exit).store(value ? 1 : 0, std::memory_order_seq_cst);
}

absl::StatusOr<Registers> KvmVcpu::GetRegs() const {
  kvm_regs regs{};
  if (int r = IoctlRetry(fd_.get(), KVM_GET_REGS, &regs); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_REGS(vcpu ", id_, ")"), -r);
  }
  return BitCopy<Registers>(regs);
}

absl::Status KvmVcpu::SetRegs(const Registers& regs) {
  kvm_regs k = BitCopy<kvm_regs>(regs);
  if (int r = IoctlRetry(fd_.get(), KVM_SET_REGS, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_REGS(vcpu ", id_, ")"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<SpecialRegisters> KvmVcpu::GetSregs() const {
  kvm_sregs sregs{};
  if (int r = IoctlRetry(fd_.get(), KVM_GET_SREGS, &sregs); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_SREGS(vcpu ", id_, ")"), -r);
  }
  return BitCopy<SpecialRegisters>(sregs);
}

absl::Status KvmVcpu::SetSregs(const SpecialRegisters& sregs) {
  kvm_sregs k = BitCopy<kvm_sregs>(sregs);
  if (int r = IoctlRetry(fd_.get(), KVM_SET_SREGS, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_SREGS(vcpu ", id_, ", cr0 ", Hex(sregs.cr0),
                                      ", cr4 ", Hex(sregs.cr4), ", efer ", Hex(sregs.efer), ")"),
                         -r);
  }
  return absl::OkStatus();
}

absl::Status KvmVcpu::SetFpu(const FpuState& fpu) {
  kvm_fpu k{};
  k.fcw = fpu.fcw;
  k.mxcsr = fpu.mxcsr;
  if (int r = IoctlRetry(fd_.get(), KVM_SET_FPU, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_FPU(vcpu ", id_, ")"), -r);
  }
  return absl::OkStatus();
}

absl::Status KvmVcpu::SetMsrs(std::span<const MsrEntry> msrs) {
  MsrBuffer buf(msrs.size());
  if (!msrs.empty())
    std::memcpy(buf.entries(), static_cast<const void*>(msrs.data()), msrs.size_bytes());
  // KVM_SET_MSRS returns how many entries it set, stopping at the first it
  // refuses (api.rst, KVM_SET_MSRS).
  int n = IoctlRetry(fd_.get(), abi::kSetMsrs, buf.header());
  if (n < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_MSRS(vcpu ", id_, ", ", msrs.size(), " MSRs)"), -n);
  }
  if (static_cast<size_t>(n) < msrs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KVM_SET_MSRS(vcpu ", id_, "): KVM refused MSR ",
                                                   Hex(msrs[n].index), " (set ", n, " of ",
                                                   msrs.size(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MsrEntry>> KvmVcpu::GetMsrs(std::span<const uint32_t> indices) const {
  absl::StatusOr<std::vector<MsrEntry>> got = GetMsrsPrefix(indices);
  if (got.ok() && got->size() < indices.size()) {
    const size_t n = got->size();
    return absl::InvalidArgumentError(absl::StrCat("KVM_GET_MSRS(vcpu ", id_, "): KVM refused MSR ",
                                                   Hex(indices[n]), " (read ", n, " of ",
                                                   indices.size(), ")"));
  }
  return got;
}

absl::StatusOr<std::vector<MsrEntry>> KvmVcpu::GetMsrsPrefix(
    std::span<const uint32_t> indices) const {
  MsrBuffer buf(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) buf.entries()[i].index = indices[i];
  int n = IoctlRetry(fd_.get(), abi::kGetMsrs, buf.header());
  if (n < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_MSRS(vcpu ", id_, ", ", indices.size(), " MSRs)"),
                         -n);
  }
  std::vector<MsrEntry> out(std::min(static_cast<size_t>(n), indices.size()));
  if (!out.empty())
    std::memcpy(static_cast<void*>(out.data()), buf.entries(), out.size() * sizeof(MsrEntry));
  return out;
}

absl::Status KvmVcpu::SetCpuid(std::span<const CpuidEntry> entries) {
  // C layout of struct kvm_cpuid2 (see kvm_abi.h).
  std::vector<uint8_t> buf(sizeof(abi::CpuidHeader) + entries.size_bytes());
  auto* cpuid = reinterpret_cast<abi::CpuidHeader*>(buf.data());
  cpuid->nent = static_cast<uint32_t>(entries.size());
  if (!entries.empty()) {
    std::memcpy(buf.data() + sizeof(abi::CpuidHeader), static_cast<const void*>(entries.data()),
                entries.size_bytes());
  }
  if (int r = IoctlRetry(fd_.get(), abi::kSetCpuid2, cpuid); r < 0) {
    return ErrnoToStatus(
        absl::StrCat("KVM_SET_CPUID2(vcpu ", id_, ", ", entries.size(), " entries)"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<LapicState> KvmVcpu::GetLapic() const {
  kvm_lapic_state k{};
  if (int r = IoctlRetry(fd_.get(), KVM_GET_LAPIC, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_LAPIC(vcpu ", id_, ")"), -r);
  }
  return BitCopy<LapicState>(k);
}

absl::Status KvmVcpu::SetLapic(const LapicState& lapic) {
  kvm_lapic_state k = BitCopy<kvm_lapic_state>(lapic);
  if (int r = IoctlRetry(fd_.get(), KVM_SET_LAPIC, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_LAPIC(vcpu ", id_, ")"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<VcpuEvents> KvmVcpu::GetVcpuEvents() const {
  kvm_vcpu_events k{};
  if (int r = IoctlRetry(fd_.get(), KVM_GET_VCPU_EVENTS, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_VCPU_EVENTS(vcpu ", id_, ")"), -r);
  }
  return BitCopy<VcpuEvents>(k);
}

absl::Status KvmVcpu::SetVcpuEvents(const VcpuEvents& events) {
  kvm_vcpu_events k = BitCopy<kvm_vcpu_events>(events);
  if (int r = IoctlRetry(fd_.get(), KVM_SET_VCPU_EVENTS, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_VCPU_EVENTS(vcpu ", id_, ")"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> KvmVcpu::GetMpState() const {
  kvm_mp_state k{};
  if (int r = IoctlRetry(fd_.get(), KVM_GET_MP_STATE, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_GET_MP_STATE(vcpu ", id_, ")"), -r);
  }
  return k.mp_state;
}

absl::Status KvmVcpu::SetMpState(uint32_t state) {
  kvm_mp_state k{};
  k.mp_state = state;
  if (int r = IoctlRetry(fd_.get(), KVM_SET_MP_STATE, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_MP_STATE(vcpu ", id_, ", state ", state, ")"), -r);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> KvmVcpu::GetTscKhz() const {
  int khz = IoctlRetry(fd_.get(), KVM_GET_TSC_KHZ, 0);
  if (khz < 0) return ErrnoToStatus(absl::StrCat("KVM_GET_TSC_KHZ(vcpu ", id_, ")"), -khz);
  return static_cast<uint32_t>(khz);
}

absl::Status KvmVcpu::SetTscKhz(uint32_t khz) {
  if (int r = IoctlRetry(fd_.get(), KVM_SET_TSC_KHZ, static_cast<unsigned long>(khz)); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_TSC_KHZ(vcpu ", id_, ", ", khz, ")"), -r);
  }
  return absl::OkStatus();
}

namespace {

// KVM_GET_<X> / KVM_SET_<X> of one whole structure.
// (The state's first kSize bytes are the structure's; checked above.)
template <typename State, typename Kernel>
absl::StatusOr<State> GetWhole(int fd, unsigned long request, const char* name, uint32_t id) {
  static_assert(sizeof(Kernel) >= State::kSize);
  Kernel k{};
  if (int r = IoctlRetry(fd, request, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat(name, "(vcpu ", id, ")"), -r);
  }
  State out;
  std::memcpy(out.bytes, static_cast<const void*>(&k), State::kSize);
  return out;
}
template <typename State, typename Kernel>
absl::Status SetWhole(int fd, unsigned long request, const char* name, uint32_t id,
                      const State& state) {
  static_assert(sizeof(Kernel) >= State::kSize);
  Kernel k{};
  std::memcpy(static_cast<void*>(&k), state.bytes, State::kSize);
  if (int r = IoctlRetry(fd, request, &k); r < 0) {
    return ErrnoToStatus(absl::StrCat(name, "(vcpu ", id, ")"), -r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FpuRegs> KvmVcpu::GetFpuRegs() const {
  return GetWhole<FpuRegs, kvm_fpu>(fd_.get(), KVM_GET_FPU, "KVM_GET_FPU", id_);
}
absl::Status KvmVcpu::SetFpuRegs(const FpuRegs& fpu) {
  return SetWhole<FpuRegs, kvm_fpu>(fd_.get(), KVM_SET_FPU, "KVM_SET_FPU", id_, fpu);
}
absl::StatusOr<std::vector<uint8_t>> KvmVcpu::GetXsave(size_t size) const {
  size = std::max(size, kLegacyXsaveSize);
  std::vector<uint8_t> buf(size);
  const bool legacy = size == kLegacyXsaveSize;
  if (int r = IoctlRetry(fd_.get(), legacy ? KVM_GET_XSAVE : KVM_GET_XSAVE2, buf.data()); r < 0) {
    return ErrnoToStatus(absl::StrCat(legacy ? "KVM_GET_XSAVE" : "KVM_GET_XSAVE2", "(vcpu ", id_,
                                      ", ", size, " bytes)"),
                         -r);
  }
  return buf;
}
absl::Status KvmVcpu::SetXsave(const std::vector<uint8_t>& xsave) {
  if (xsave.size() < kLegacyXsaveSize) {
    return absl::InvalidArgumentError("KVM_SET_XSAVE: an XSAVE area is at least 4 KiB");
  }
  std::vector<uint8_t> buf = xsave;  // KVM_SET_XSAVE reads through a non-const pointer
  if (int r = IoctlRetry(fd_.get(), KVM_SET_XSAVE, buf.data()); r < 0) {
    return ErrnoToStatus(absl::StrCat("KVM_SET_XSAVE(vcpu ", id_, ")"), -r);
  }
  return absl::OkStatus();
}
absl::StatusOr<XcrsState> KvmVcpu::GetXcrs() const {
  return GetWhole<XcrsState, kvm_xcrs>(fd_.get(), KVM_GET_XCRS, "KVM_GET_XCRS", id_);
}
absl::Status KvmVcpu::SetXcrs(const XcrsState& xcrs) {
  return SetWhole<XcrsState, kvm_xcrs>(fd_.get(), KVM_SET_XCRS, "KVM_SET_XCRS", id_, xcrs);
}
absl::StatusOr<DebugRegs> KvmVcpu::GetDebugRegs() const {
  return GetWhole<DebugRegs, kvm_debugregs>(fd_.get(), KVM_GET_DEBUGREGS, "KVM_GET_DEBUGREGS",
                                            id_);
}
absl::Status KvmVcpu::SetDebugRegs(const DebugRegs& regs) {
  return SetWhole<DebugRegs, kvm_debugregs>(fd_.get(), KVM_SET_DEBUGREGS, "KVM_SET_DEBUGREGS",
                                            id_, regs);
}

absl::StatusOr<std::vector<CpuidEntry>> KvmVcpu::GetCpuid() const {
  // KVM answers E2BIG when nent is too small; the table a monitor sets is
  // well under 256 entries.
  for (uint32_t nent = 64; nent <= 4096; nent *= 4) {
    std::vector<uint8_t> buf(sizeof(abi::CpuidHeader) + nent * sizeof(CpuidEntry));
    auto* cpuid = reinterpret_cast<abi::CpuidHeader*>(buf.data());
    cpuid->nent = nent;
    int r = IoctlRetry(fd_.get(), abi::kGetCpuid2, cpuid);
    if (r == -E2BIG) continue;
    if (r < 0) return ErrnoToStatus(absl::StrCat("KVM_GET_CPUID2(vcpu ", id_, ")"), -r);
    std::vector<CpuidEntry> out(std::min(cpuid->nent, nent));
    if (!out.empty()) {
      std::memcpy(static_cast<void*>(out.data()), buf.data() + sizeof(abi::CpuidHeader),
                  out.size() * sizeof(CpuidEntry));
    }
    return out;
  }
  return absl::InternalError(absl::StrCat("KVM_GET_CPUID2(vcpu ", id_, "): more than 4096 entries"));
}

}  // namespace dsec::kvm
