// SPDX-License-Identifier: Apache-2.0
// The /dev/kvm system handle: capability queries, host-supported CPUID and
// MSRs, and VM creation. Part of platform/kvm, the only component that includes
// <linux/kvm.h>; everything above it uses the plain types of x86_types.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"
#include "platform/kvm/x86_types.h"

namespace dsec::kvm {

class KvmVm;

// KVM capabilities the monitor asks about. The values are the kernel's
// KVM_CAP_* numbers (Documentation/virt/kvm/api.rst, section 8); kvm_system.cc
// static_asserts each one against <linux/kvm.h>.
enum class Capability : int {
  kIrqchip = 0,
  kHlt = 1,
  kUserMemory = 3,
  kSetTssAddr = 4,
  kExtCpuid = 7,
  kNrVcpus = 9,
  kNrMemslots = 10,
  kMpState = 14,
  kSyncMmu = 16,
  kIrqRouting = 25,
  kIrqfd = 32,
  kPit2 = 33,
  kPitState2 = 35,
  kIoeventfd = 36,
  kSetIdentityMapAddr = 37,
  kAdjustClock = 39,
  kVcpuEvents = 41,
  kXsave = 55,
  kXcrs = 56,
  kTscControl = 60,
  kGetTscKhz = 61,
  kMaxVcpus = 66,
  kTscDeadlineTimer = 72,
  kKvmclockCtrl = 76,
  kSignalMsi = 77,
  kReadonlyMem = 81,
  kIrqfdResample = 82,
  kSplitIrqchip = 121,
  kIoeventfdAnyLength = 122,
  kMaxVcpuId = 128,
  kImmediateExit = 136,
  kDirtyLogRing = 192,
};

// "KVM_CAP_IRQFD" for Capability::kIrqfd; "KVM_CAP_<n>" for values outside
// the enum.
std::string CapabilityName(Capability cap);

// An open /dev/kvm. Create() once per process (or per VM); it is cheap.
//
// Threads: every method is a read-only ioctl on /dev/kvm, so any thread may
// call any method concurrently. A KvmVm created from it does not need the
// KvmSystem to stay alive.
class KvmSystem {
 public:
  // The API version every KVM since Linux 2.6.22 reports
  // (Documentation/virt/kvm/api.rst, KVM_GET_API_VERSION).
  static constexpr int kApiVersion = 12;

  // Opens `path` (O_RDWR | O_CLOEXEC). Unavailable if it cannot be opened or
  // reports an API version other than 12.
  static absl::StatusOr<KvmSystem> Create(const char* path = "/dev/kvm");

  KvmSystem(KvmSystem&&) = default;
  KvmSystem& operator=(KvmSystem&&) = default;

  // KVM_CHECK_EXTENSION: 0 if absent, otherwise a capability-specific value
  // (1, or a count such as the number of memory slots). Errors read as 0.
  int CheckExtension(Capability cap) const;
  // Unavailable naming the first missing capability, e.g.
  // "host KVM lacks KVM_CAP_IRQFD".
  absl::Status RequireExtensions(std::span<const Capability> caps) const;
  absl::Status RequireExtensions(std::initializer_list<Capability> caps) const {
    return RequireExtensions(std::span<const Capability>(caps.begin(), caps.size()));
  }

  // KVM_GET_SUPPORTED_CPUID: the CPUID leaves KVM can present to a guest, as
  // a starting point for the guest's CPUID table.
  absl::StatusOr<std::vector<CpuidEntry>> GetSupportedCpuid() const;
  // KVM_GET_MSR_INDEX_LIST: MSRs whose state KVM_GET/SET_MSRS can move.
  absl::StatusOr<std::vector<uint32_t>> GetMsrIndexList() const;
  // KVM_GET_VCPU_MMAP_SIZE: bytes of the per-vCPU kvm_run mapping.
  absl::StatusOr<size_t> VcpuMmapSize() const;

  // KVM_CREATE_VM (default machine type).
  absl::StatusOr<std::unique_ptr<KvmVm>> CreateVm() const;

  int fd() const { return fd_.get(); }

 private:
  explicit KvmSystem(ScopedFd fd) : fd_(std::move(fd)) {}
  ScopedFd fd_;
};

}  // namespace dsec::kvm
