// SPDX-License-Identifier: Apache-2.0
// Plain descriptions of x86 vCPU state, in the layout KVM uses, so that code
// outside platform/kvm (boot protocol, CPUID policy, snapshots) can describe CPU
// state without including <linux/kvm.h>. platform/kvm static_asserts that these
// match the kernel structures byte for byte.
#pragma once

#include <cstdint>

namespace dsec::kvm {

struct Segment {
  uint64_t base = 0;
  uint32_t limit = 0;
  uint16_t selector = 0;
  uint8_t type = 0;
  uint8_t present = 0, dpl = 0, db = 0, s = 0, l = 0, g = 0, avl = 0;
  uint8_t unusable = 0;
  uint8_t padding = 0;
};

struct DescriptorTable {
  uint64_t base = 0;
  uint16_t limit = 0;
  uint16_t padding[3] = {0, 0, 0};
};

struct SpecialRegisters {
  Segment cs, ds, es, fs, gs, ss;
  Segment tr, ldt;
  DescriptorTable gdt, idt;
  uint64_t cr0 = 0, cr2 = 0, cr3 = 0, cr4 = 0, cr8 = 0;
  uint64_t efer = 0;
  uint64_t apic_base = 0;
  uint64_t interrupt_bitmap[4] = {0, 0, 0, 0};
};

struct Registers {
  uint64_t rax = 0, rbx = 0, rcx = 0, rdx = 0;
  uint64_t rsi = 0, rdi = 0, rsp = 0, rbp = 0;
  uint64_t r8 = 0, r9 = 0, r10 = 0, r11 = 0;
  uint64_t r12 = 0, r13 = 0, r14 = 0, r15 = 0;
  uint64_t rip = 0, rflags = 0;
};

// The parts of struct kvm_fpu a monitor sets at boot; platform/kvm fills the rest
// with zeros.
struct FpuState {
  uint16_t fcw = 0x37f;     // x87 control word after FNINIT
  uint32_t mxcsr = 0x1f80;  // SSE control/status after reset
};

struct CpuidEntry {
  uint32_t function = 0;
  uint32_t index = 0;
  uint32_t flags = 0;  // KVM_CPUID_FLAG_* (bit 0: significant index)
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  uint32_t padding[3] = {0, 0, 0};
};

inline constexpr uint32_t kCpuidFlagSignificantIndex = 1;

struct MsrEntry {
  uint32_t index = 0;
  uint32_t reserved = 0;
  uint64_t data = 0;
};

// The local APIC register page as KVM_GET_LAPIC/KVM_SET_LAPIC move it: the
// 1 KiB at the start of the xAPIC MMIO page (Intel SDM vol. 3A, 11.4.1,
// table 11-1), each register at its MMIO offset (e.g. TPR at 0x80).
struct LapicState {
  static constexpr uint32_t kSize = 1024;
  uint8_t regs[kSize] = {};
};

// struct kvm_vcpu_events (pending exception, interrupt, NMI, SMI state) kept
// opaque: snapshot code saves and restores it whole and never interprets it.
struct VcpuEvents {
  static constexpr uint32_t kSize = 64;
  alignas(8) uint8_t bytes[kSize] = {};
};


// Whole-state blobs a snapshot saves and restores without interpreting
// them, each the byte image of its kernel structure (platform/kvm checks the
// sizes): struct kvm_fpu, kvm_xsave (the legacy 4 KiB area), kvm_xcrs,
// kvm_debugregs, kvm_irqchip (one chip: PIC master, PIC slave or IOAPIC) and
// kvm_clock_data. (The XSAVE area is a byte vector: its size is the host's,
// KVM_CAP_XSAVE2, 4 KiB or more.)
template <uint32_t N>
struct OpaqueState {
  static constexpr uint32_t kSize = N;
  alignas(8) uint8_t bytes[N] = {};
};
using FpuRegs = OpaqueState<416>;
using XcrsState = OpaqueState<392>;
using DebugRegs = OpaqueState<128>;
using IrqchipState = OpaqueState<520>;
using ClockData = OpaqueState<48>;

// KVM_MP_STATE_* values (Documentation/virt/kvm/api.rst, KVM_GET_MP_STATE).
inline constexpr uint32_t kMpStateRunnable = 0;
inline constexpr uint32_t kMpStateUninitialized = 1;
inline constexpr uint32_t kMpStateInitReceived = 2;
inline constexpr uint32_t kMpStateHalted = 3;
inline constexpr uint32_t kMpStateSipiReceived = 4;

}  // namespace dsec::kvm
