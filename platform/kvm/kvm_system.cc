// SPDX-License-Identifier: Apache-2.0
#include "platform/kvm/kvm_system.h"

#include <fcntl.h>
#include <linux/kvm.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "platform/kvm/ioctl_util.h"
#include "platform/kvm/kvm_abi.h"
#include "platform/kvm/kvm_vm.h"

namespace dsec::kvm {

using internal::IoctlRetry;

namespace {

struct CapName {
  Capability cap;
  int kernel_value;
  std::string_view name;
};

#define DSEC_KVM_CAP(enumerator, kernel) \
  { Capability::enumerator, kernel, #kernel }
constexpr CapName kCapNames[] = {
    DSEC_KVM_CAP(kIrqchip, KVM_CAP_IRQCHIP),
    DSEC_KVM_CAP(kHlt, KVM_CAP_HLT),
    DSEC_KVM_CAP(kUserMemory, KVM_CAP_USER_MEMORY),
    DSEC_KVM_CAP(kSetTssAddr, KVM_CAP_SET_TSS_ADDR),
    DSEC_KVM_CAP(kExtCpuid, KVM_CAP_EXT_CPUID),
    DSEC_KVM_CAP(kNrVcpus, KVM_CAP_NR_VCPUS),
    DSEC_KVM_CAP(kNrMemslots, KVM_CAP_NR_MEMSLOTS),
    DSEC_KVM_CAP(kMpState, KVM_CAP_MP_STATE),
    DSEC_KVM_CAP(kSyncMmu, KVM_CAP_SYNC_MMU),
    DSEC_KVM_CAP(kIrqRouting, KVM_CAP_IRQ_ROUTING),
    DSEC_KVM_CAP(kIrqfd, KVM_CAP_IRQFD),
    DSEC_KVM_CAP(kPit2, KVM_CAP_PIT2),
    DSEC_KVM_CAP(kPitState2, KVM_CAP_PIT_STATE2),
    DSEC_KVM_CAP(kIoeventfd, KVM_CAP_IOEVENTFD),
    DSEC_KVM_CAP(kSetIdentityMapAddr, KVM_CAP_SET_IDENTITY_MAP_ADDR),
    DSEC_KVM_CAP(kAdjustClock, KVM_CAP_ADJUST_CLOCK),
    DSEC_KVM_CAP(kVcpuEvents, KVM_CAP_VCPU_EVENTS),
    DSEC_KVM_CAP(kXsave, KVM_CAP_XSAVE),
    DSEC_KVM_CAP(kXcrs, KVM_CAP_XCRS),
    DSEC_KVM_CAP(kTscControl, KVM_CAP_TSC_CONTROL),
    DSEC_KVM_CAP(kGetTscKhz, KVM_CAP_GET_TSC_KHZ),
    DSEC_KVM_CAP(kMaxVcpus, KVM_CAP_MAX_VCPUS),
    DSEC_KVM_CAP(kTscDeadlineTimer, KVM_CAP_TSC_DEADLINE_TIMER),
    DSEC_KVM_CAP(kKvmclockCtrl, KVM_CAP_KVMCLOCK_CTRL),
    DSEC_KVM_CAP(kSignalMsi, KVM_CAP_SIGNAL_MSI),
    DSEC_KVM_CAP(kReadonlyMem, KVM_CAP_READONLY_MEM),
    DSEC_KVM_CAP(kIrqfdResample, KVM_CAP_IRQFD_RESAMPLE),
    DSEC_KVM_CAP(kSplitIrqchip, KVM_CAP_SPLIT_IRQCHIP),
    DSEC_KVM_CAP(kIoeventfdAnyLength, KVM_CAP_IOEVENTFD_ANY_LENGTH),
    DSEC_KVM_CAP(kMaxVcpuId, KVM_CAP_MAX_VCPU_ID),
    DSEC_KVM_CAP(kImmediateExit, KVM_CAP_IMMEDIATE_EXIT),
    DSEC_KVM_CAP(kDirtyLogRing, KVM_CAP_DIRTY_LOG_RING),
};
#undef DSEC_KVM_CAP

// The enum's values are the kernel's numbers, so CheckExtension can pass
// them straight through.
constexpr bool CapValuesMatchKernel() {
  for (const CapName& c : kCapNames) {
    if (static_cast<int>(c.cap) != c.kernel_value) return false;
  }
  return true;
}
static_assert(CapValuesMatchKernel(), "Capability enum out of sync with <linux/kvm.h>");

// Upper bounds for the grow-on-E2BIG loops; KVM reports far fewer entries,
// so reaching them means something is wrong rather than a big host.
constexpr uint32_t kMaxCpuidEntries = 4096;
constexpr uint32_t kMaxMsrIndices = 16384;

}  // namespace

std::string CapabilityName(Capability cap) {
  for (const CapName& c : kCapNames) {
    if (c.cap == cap) return std::string(c.name);
  }
  return absl::StrCat("KVM_CAP_", static_cast<int>(cap));
}

absl::StatusOr<KvmSystem> KvmSystem::Create(const char* path) {
  ScopedFd fd(::open(path, O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    int err = errno;
    return absl::UnavailableError(
        absl::StrCat("open(", path, "): ", std::strerror(err), " (errno ", err, ")"));
  }
  int version = IoctlRetry(fd.get(), KVM_GET_API_VERSION, 0);
  if (version < 0) return ErrnoStatus(absl::StrCat("KVM_GET_API_VERSION(", path, ")"), -version);
  if (version != kApiVersion) {
    return absl::UnavailableError(
        absl::StrCat(path, " reports KVM API version ", version, ", need ", kApiVersion));
  }
  return KvmSystem(std::move(fd));
}

int KvmSystem::CheckExtension(Capability cap) const {
  int ret = IoctlRetry(fd_.get(), KVM_CHECK_EXTENSION, static_cast<int>(cap));
  return ret < 0 ? 0 : ret;
}

absl::Status KvmSystem::RequireExtensions(std::span<const Capability> caps) const {
  for (Capability cap : caps) {
    if (CheckExtension(cap) <= 0) {
      return absl::UnavailableError(absl::StrCat("host KVM lacks ", CapabilityName(cap)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CpuidEntry>> KvmSystem::GetSupportedCpuid() const {
  static_assert(sizeof(CpuidEntry) == sizeof(kvm_cpuid_entry2));
  // struct kvm_cpuid2 ends in a flexible array; KVM fails with E2BIG when
  // nent is too small (api.rst, KVM_GET_SUPPORTED_CPUID), so grow and retry.
  for (uint32_t nent = 128; nent <= kMaxCpuidEntries; nent *= 2) {
    // C layout of struct kvm_cpuid2: see kvm_abi.h for why not the header's.
    std::vector<uint8_t> buf(sizeof(abi::CpuidHeader) + nent * sizeof(kvm_cpuid_entry2));
    auto* cpuid = reinterpret_cast<abi::CpuidHeader*>(buf.data());
    cpuid->nent = nent;
    if (int r = IoctlRetry(fd_.get(), abi::kGetSupportedCpuid, cpuid); r < 0) {
      if (r == -E2BIG) continue;
      return ErrnoStatus(absl::StrCat("KVM_GET_SUPPORTED_CPUID(nent ", nent, ")"), -r);
    }
    std::vector<CpuidEntry> entries(cpuid->nent);
    std::memcpy(static_cast<void*>(entries.data()), buf.data() + sizeof(abi::CpuidHeader),
                cpuid->nent * sizeof(kvm_cpuid_entry2));
    return entries;
  }
  return absl::InternalError(
      absl::StrCat("KVM_GET_SUPPORTED_CPUID: more than ", kMaxCpuidEntries, " entries"));
}

absl::StatusOr<std::vector<uint32_t>> KvmSystem::GetMsrIndexList() const {
  // First call with nmsrs = 0 learns the count (E2BIG, nmsrs updated); the
  // loop also covers the list growing between calls.
  uint32_t nmsrs = 0;
  while (nmsrs <= kMaxMsrIndices) {
    std::vector<uint8_t> buf(sizeof(abi::MsrListHeader) + nmsrs * sizeof(uint32_t));
    auto* list = reinterpret_cast<abi::MsrListHeader*>(buf.data());
    list->nmsrs = nmsrs;
    if (int r = IoctlRetry(fd_.get(), abi::kGetMsrIndexList, list); r < 0) {
      if (r == -E2BIG && list->nmsrs > nmsrs) {
        nmsrs = list->nmsrs;
        continue;
      }
      return ErrnoStatus(absl::StrCat("KVM_GET_MSR_INDEX_LIST(nmsrs ", nmsrs, ")"), -r);
    }
    std::vector<uint32_t> indices(list->nmsrs);
    std::memcpy(indices.data(), buf.data() + sizeof(abi::MsrListHeader),
                indices.size() * sizeof(uint32_t));
    return indices;
  }
  return absl::InternalError(
      absl::StrCat("KVM_GET_MSR_INDEX_LIST: more than ", kMaxMsrIndices, " MSRs"));
}

absl::StatusOr<size_t> KvmSystem::VcpuMmapSize() const {
  int size = IoctlRetry(fd_.get(), KVM_GET_VCPU_MMAP_SIZE, 0);
  if (size < 0) return ErrnoStatus("KVM_GET_VCPU_MMAP_SIZE", -size);
  if (static_cast<size_t>(size) < sizeof(kvm_run)) {
    return absl::InternalError(
        absl::StrCat("KVM_GET_VCPU_MMAP_SIZE: ", size, " bytes, smaller than struct kvm_run"));
  }
  return static_cast<size_t>(size);
}

absl::StatusOr<std::unique_ptr<KvmVm>> KvmSystem::CreateVm() const {
  DSEC_ASSIGN_OR_RETURN(size_t mmap_size, VcpuMmapSize());
  int vm_fd = IoctlRetry(fd_.get(), KVM_CREATE_VM, 0);
  if (vm_fd < 0) return ErrnoToStatus("KVM_CREATE_VM", -vm_fd);
  ScopedFd vm(vm_fd);
  // KVM_CAP_NR_MEMSLOTS is the per-VM (per address space) slot count; 32 is
  // the documented minimum if the query is unsupported.
  int slots = IoctlRetry(vm.get(), KVM_CHECK_EXTENSION, KVM_CAP_NR_MEMSLOTS);
  if (slots <= 0) slots = 32;
  return std::unique_ptr<KvmVm>(new KvmVm(std::move(vm), mmap_size, static_cast<uint32_t>(slots)));
}

}  // namespace dsec::kvm
