// SPDX-License-Identifier: Apache-2.0
// One KVM vCPU: its register state and the KVM_RUN loop primitive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mmap.h"
#include "base/scoped_fd.h"
#include "platform/kvm/x86_types.h"

namespace dsec::kvm {

// Why KVM_RUN returned, without kernel types. Spans point into the vCPU's
// kvm_run page and are valid until the next Run() on that vCPU.
namespace vcpu_exit {
// KVM_EXIT_IO: `count` repetitions (string I/O) of `size`-byte accesses.
// For reads (is_write == false) the monitor fills `data` before the next
// Run(); KVM hands it to the guest then.
struct Io {
  uint16_t port = 0;
  uint8_t size = 0;
  bool is_write = false;
  uint32_t count = 0;
  std::span<uint8_t> data;  // size * count bytes
};
// KVM_EXIT_MMIO: an access to guest-physical space without a memory slot,
// or a write to a read-only slot. For reads the monitor fills `data`.
struct Mmio {
  uint64_t gpa = 0;
  uint32_t len = 0;
  bool is_write = false;
  std::span<uint8_t> data;  // len bytes (at most 8)
};
// KVM_EXIT_HLT: the guest halted and there is no in-kernel irqchip to wait.
struct Hlt {};
// KVM_EXIT_SHUTDOWN: triple fault; the guest cannot continue.
struct Shutdown {};
// KVM_EXIT_SYSTEM_EVENT: type is KVM_SYSTEM_EVENT_* (1 shutdown, 2 reset,
// 3 crash).
struct SystemEvent {
  static constexpr uint32_t kShutdown = 1;
  static constexpr uint32_t kReset = 2;
  static constexpr uint32_t kCrash = 3;
  uint32_t type = 0;
  uint64_t flags = 0;
};
// KVM_EXIT_FAIL_ENTRY: the hardware refused the guest state.
struct FailEntry {
  uint64_t hardware_reason = 0;
  uint32_t cpu = 0;
};
// KVM_EXIT_INTERNAL_ERROR, e.g. suberror 1 = instruction emulation failed.
struct InternalError {
  uint32_t suberror = 0;
  std::vector<uint64_t> data;
};
// KVM_RUN returned EINTR (a signal, or immediate_exit was set) or
// KVM_EXIT_INTR: the monitor's own request, not the guest's.
struct Interrupted {};
// Any other exit reason (KVM_EXIT_*), reported so the caller can fail the VM.
struct Unknown {
  uint32_t exit_reason = 0;
};
}  // namespace vcpu_exit

using VcpuExit = std::variant<vcpu_exit::Io, vcpu_exit::Mmio, vcpu_exit::Hlt, vcpu_exit::Shutdown,
                              vcpu_exit::SystemEvent, vcpu_exit::FailEntry,
                              vcpu_exit::InternalError, vcpu_exit::Interrupted, vcpu_exit::Unknown>;

// A vCPU file descriptor and its mmapped struct kvm_run.
//
// Threads: one vCPU thread owns it and makes every call except
// SetImmediateExit(). KVM serialises vCPU ioctls on a per-vCPU mutex, so an
// ioctl from another thread would block until KVM_RUN returns.
//
// Kicking a running vCPU (the protocol the vCPU thread code follows):
//   kicker:      record the request (e.g. an atomic flag or queue), then
//                SetImmediateExit(true), then pthread_kill() the vCPU thread
//                with the kick signal (installed without SA_RESTART, empty
//                handler, unblocked only on vCPU threads).
//   vCPU thread: Run() returns Interrupted, either because the signal
//                interrupted the guest or, if the signal arrived while the
//                thread was outside KVM_RUN, because immediate_exit makes the
//                next KVM_RUN return EINTR at once (no lost wake-up). The
//                thread then calls SetImmediateExit(false), and only after
//                that reads the requests, so a kick racing with the clear is
//                either seen now or re-arms immediate_exit for the next Run().
//
// Lifetime: may outlive the KvmVm (it holds its own reference on the VM in
// the kernel), but is normally destroyed first.
class KvmVcpu {
 public:
  KvmVcpu(const KvmVcpu&) = delete;
  KvmVcpu& operator=(const KvmVcpu&) = delete;

  uint32_t id() const { return id_; }
  int fd() const { return fd_.get(); }

  // KVM_RUN once. Guest-triggered exits are values, not errors: an error
  // status means KVM_RUN itself failed (Internal, naming errno).
  absl::StatusOr<VcpuExit> Run();
  // Sets kvm_run.immediate_exit; safe from any thread (see the class comment).
  void SetImmediateExit(bool value);

  absl::StatusOr<Registers> GetRegs() const;
  absl::Status SetRegs(const Registers& regs);
  absl::StatusOr<SpecialRegisters> GetSregs() const;
  absl::Status SetSregs(const SpecialRegisters& sregs);
  // KVM_SET_FPU with fcw and mxcsr from `fpu` and everything else zero.
  absl::Status SetFpu(const FpuState& fpu);
  // KVM_SET_MSRS. Fails if KVM accepted fewer than all, naming the first
  // refused MSR.
  absl::Status SetMsrs(std::span<const MsrEntry> msrs);
  // KVM_GET_MSRS for `indices`; fails naming the first MSR KVM refused.
  absl::StatusOr<std::vector<MsrEntry>> GetMsrs(std::span<const uint32_t> indices) const;
  // KVM_GET_MSRS as far as KVM goes: the entries of the leading MSRs it
  // read (it stops at the first it refuses; fewer than `indices` then).
  absl::StatusOr<std::vector<MsrEntry>> GetMsrsPrefix(std::span<const uint32_t> indices) const;
  // KVM_SET_CPUID2. Must precede the first Run().
  absl::Status SetCpuid(std::span<const CpuidEntry> entries);
  absl::StatusOr<LapicState> GetLapic() const;
  absl::Status SetLapic(const LapicState& lapic);
  absl::StatusOr<VcpuEvents> GetVcpuEvents() const;
  absl::Status SetVcpuEvents(const VcpuEvents& events);
  // KVM_GET/SET_MP_STATE with kMpState* values.
  absl::StatusOr<uint32_t> GetMpState() const;
  absl::Status SetMpState(uint32_t state);
  // KVM_GET_TSC_KHZ: the guest TSC frequency.
  absl::StatusOr<uint32_t> GetTscKhz() const;
  // KVM_SET_TSC_KHZ (KVM_CAP_TSC_CONTROL).
  absl::Status SetTscKhz(uint32_t khz);

  // What a snapshot saves, for a vCPU outside KVM_RUN (paused or not yet
  // started). KVM_GET/SET_FPU (all of it), KVM_GET/SET_XSAVE
  // (KVM_CAP_XSAVE), KVM_GET/SET_XCRS (KVM_CAP_XCRS), KVM_GET/SET_DEBUGREGS,
  // and KVM_GET_CPUID2 (the table KVM_SET_CPUID2 gave this vCPU).
  absl::StatusOr<FpuRegs> GetFpuRegs() const;
  static constexpr size_t kLegacyXsaveSize = 4096;
  absl::Status SetFpuRegs(const FpuRegs& fpu);
  // The XSAVE area: `size` bytes, KvmVm::XsaveSize() (KVM_GET_XSAVE2 when
  // above the legacy 4 KiB, as on hosts with AVX-512 or AMX state).
  absl::StatusOr<std::vector<uint8_t>> GetXsave(size_t size) const;
  // `xsave` must be at least KvmVm::XsaveSize() bytes (KVM reads that many).
  absl::Status SetXsave(const std::vector<uint8_t>& xsave);
  absl::StatusOr<XcrsState> GetXcrs() const;
  absl::Status SetXcrs(const XcrsState& xcrs);
  absl::StatusOr<DebugRegs> GetDebugRegs() const;
  absl::Status SetDebugRegs(const DebugRegs& regs);
  absl::StatusOr<std::vector<CpuidEntry>> GetCpuid() const;

 private:
  friend class KvmVm;
  KvmVcpu(uint32_t id, ScopedFd fd, Mmap run) : id_(id), fd_(std::move(fd)), run_(std::move(run)) {}

  const uint32_t id_;
  ScopedFd fd_;
  Mmap run_;  // struct kvm_run, shared with the kernel
};

}  // namespace dsec::kvm
