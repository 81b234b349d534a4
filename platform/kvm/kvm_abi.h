// SPDX-License-Identifier: Apache-2.0
// Private to platform/kvm. C-layout headers of the KVM structs that end in a
// flexible array, and the ioctl numbers derived from them.
//
// Why: the 6.1 uapi headers declare those arrays with __DECLARE_FLEX_ARRAY,
// which wraps the array in a struct beginning with an empty struct. An empty
// struct has size 0 in C but 1 in C++, so under g++ struct kvm_cpuid2 is 12
// bytes instead of 8, its entries start at offset 12 instead of 8, and
// KVM_GET_SUPPORTED_CPUID (which encodes the struct size) becomes 0xc00cae05,
// which the kernel rejects with EINVAL. Later kernels guard the macro for C++;
// mirroring the C layout here works with either header.
#pragma once

#include <linux/ioctl.h>

#include <cstdint>

namespace dsec::kvm::abi {

inline constexpr unsigned kKvmIo = 0xAE;  // KVMIO

// struct kvm_cpuid2 without its entries (kvm_cpuid_entry2[nent] follows).
struct CpuidHeader {
  uint32_t nent;
  uint32_t padding;
};
// struct kvm_msrs without its entries (kvm_msr_entry[nmsrs] follows).
struct MsrsHeader {
  uint32_t nmsrs;
  uint32_t pad;
};
// struct kvm_msr_list without its indices (__u32[nmsrs] follows).
struct MsrListHeader {
  uint32_t nmsrs;
};
// struct kvm_irq_routing without its entries (kvm_irq_routing_entry[nr]
// follows).
struct IrqRoutingHeader {
  uint32_t nr;
  uint32_t flags;
};

// The request numbers as Documentation/virt/kvm/api.rst defines them, with
// the C struct sizes; checked against the literal values the kernel uses.
inline constexpr unsigned long kGetMsrIndexList = _IOWR(kKvmIo, 0x02, MsrListHeader);
inline constexpr unsigned long kGetSupportedCpuid = _IOWR(kKvmIo, 0x05, CpuidHeader);
inline constexpr unsigned long kSetGsiRouting = _IOW(kKvmIo, 0x6a, IrqRoutingHeader);
inline constexpr unsigned long kGetMsrs = _IOWR(kKvmIo, 0x88, MsrsHeader);
inline constexpr unsigned long kSetMsrs = _IOW(kKvmIo, 0x89, MsrsHeader);
inline constexpr unsigned long kSetCpuid2 = _IOW(kKvmIo, 0x90, CpuidHeader);
inline constexpr unsigned long kGetCpuid2 = _IOWR(kKvmIo, 0x91, CpuidHeader);

static_assert(kGetMsrIndexList == 0xc004ae02);
static_assert(kGetSupportedCpuid == 0xc008ae05);
static_assert(kSetGsiRouting == 0x4008ae6a);
static_assert(kGetMsrs == 0xc008ae88);
static_assert(kSetMsrs == 0x4008ae89);
static_assert(kSetCpuid2 == 0x4008ae90);
static_assert(kGetCpuid2 == 0xc008ae91);

}  // namespace dsec::kvm::abi
