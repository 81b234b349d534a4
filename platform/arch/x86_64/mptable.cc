// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/mptable.h"

#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "platform/arch/x86_64/layout.h"
#include "base/status.h"

namespace dsec::arch {

namespace {

constexpr uint8_t kMpSpecRev = 4;      // MP spec 1.4
constexpr uint8_t kLapicVersion = 0x14;  // integrated xAPIC
constexpr uint8_t kIoApicVersion = 0x11;
constexpr uint8_t kCpuEnabled = 1, kCpuBootstrap = 2;
// Family 6 with FPU and APIC feature bits (CPUID.1:EDX bits 0 and 9); Linux
// only uses these for display.
constexpr uint32_t kCpuSignature = 0x600;
constexpr uint32_t kCpuFeatures = (1u << 0) | (1u << 9);
constexpr uint8_t kIsaBusId = 0;

template <typename T>
void Append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

// MP spec: each structure's bytes, including its checksum field, sum to 0.
uint8_t Checksum(const uint8_t* data, size_t len) {
  uint8_t sum = 0;
  for (size_t i = 0; i < len; ++i) sum = static_cast<uint8_t>(sum + data[i]);
  return static_cast<uint8_t>(-sum);
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> BuildMpTable(uint32_t vcpus, uint64_t addr) {
  if (vcpus == 0 || vcpus > kMaxVcpus) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d vCPUs: the MP table supports 1 to %d", vcpus, kMaxVcpus));
  }
  if (addr > UINT32_MAX - 0x10000) {
    return absl::InvalidArgumentError("MP table must be below 4 GiB");
  }
  const uint8_t ioapic_id = static_cast<uint8_t>(vcpus);
  std::vector<uint8_t> out;
  out.resize(sizeof(MpFloatingPointer) + sizeof(MpConfigHeader));
  uint16_t entries = 0;
  for (uint32_t i = 0; i < vcpus; ++i) {
    MpProcessorEntry p{};
    p.type = kMpEntryProcessor;
    p.lapic_id = static_cast<uint8_t>(i);
    p.lapic_version = kLapicVersion;
    p.cpu_flags = kCpuEnabled | (i == 0 ? kCpuBootstrap : 0);
    p.cpu_signature = kCpuSignature;
    p.feature_flags = kCpuFeatures;
    Append(out, p);
    ++entries;
  }
  MpBusEntry bus{};
  bus.type = kMpEntryBus;
  bus.bus_id = kIsaBusId;
  std::memcpy(bus.bus_type, "ISA   ", 6);
  Append(out, bus);
  ++entries;
  MpIoApicEntry ioapic{};
  ioapic.type = kMpEntryIoApic;
  ioapic.id = ioapic_id;
  ioapic.version = kIoApicVersion;
  ioapic.flags = 1;
  ioapic.address = static_cast<uint32_t>(kIoApicBase);
  Append(out, ioapic);
  ++entries;
  // ISA IRQ n arrives on IOAPIC pin n: KVM's default GSI routing sends GSI
  // n < 16 to both the PIC and IOAPIC pin n.
  for (uint32_t irq = 0; irq < kIsaIrqs; ++irq) {
    MpInterruptEntry e{};
    e.type = kMpEntryIoInterrupt;
    e.irq_type = kMpIrqInt;
    e.source_bus = kIsaBusId;
    e.source_irq = static_cast<uint8_t>(irq);
    e.dest_id = ioapic_id;
    e.dest_pin = static_cast<uint8_t>(irq);
    Append(out, e);
    ++entries;
  }
  // Virtual-wire: LINT0 takes the PIC's ExtINT, LINT1 NMI, on every LAPIC.
  for (auto [type, pin] : {std::pair<uint8_t, uint8_t>{kMpIrqExtInt, 0}, {kMpIrqNmi, 1}}) {
    MpInterruptEntry e{};
    e.type = kMpEntryLocalInterrupt;
    e.irq_type = type;
    e.source_bus = kIsaBusId;
    e.source_irq = 0;
    e.dest_id = 0xff;
    e.dest_pin = pin;
    Append(out, e);
    ++entries;
  }

  const size_t config_len = out.size() - sizeof(MpFloatingPointer);
  MpConfigHeader hdr{};
  std::memcpy(hdr.signature, "PCMP", 4);
  hdr.base_table_length = static_cast<uint16_t>(config_len);
  hdr.spec_rev = kMpSpecRev;
  std::memcpy(hdr.oem_id, "DSEC    ", 8);
  std::memcpy(hdr.product_id, "DSEC-VMM    ", 12);
  hdr.entry_count = entries;
  hdr.lapic_address = static_cast<uint32_t>(kLapicBase);
  std::memcpy(out.data() + sizeof(MpFloatingPointer), &hdr, sizeof(hdr));
  out[sizeof(MpFloatingPointer) + offsetof(MpConfigHeader, checksum)] =
      Checksum(out.data() + sizeof(MpFloatingPointer), config_len);

  MpFloatingPointer fp{};
  std::memcpy(fp.signature, "_MP_", 4);
  fp.config_table = static_cast<uint32_t>(addr + sizeof(MpFloatingPointer));
  fp.length = 1;
  fp.spec_rev = kMpSpecRev;
  fp.checksum = Checksum(reinterpret_cast<const uint8_t*>(&fp), sizeof(fp));
  std::memcpy(out.data(), &fp, sizeof(fp));
  return out;
}

absl::Status WriteMpTable(const memory::GuestMemory& mem, uint32_t vcpus) {
  DSEC_ASSIGN_OR_RETURN(std::vector<uint8_t> table, BuildMpTable(vcpus, kMpTableAddr));
  if (kMpTableAddr + table.size() > kLowReservedArea.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MP table of %d bytes does not fit the reserved area", table.size()));
  }
  return mem.Write(kMpTableAddr, table);
}

void ConfigureLapicLvt(std::span<uint8_t, 1024> lapic_regs) {
  auto set = [&](size_t off, uint32_t mode) {
    uint32_t v;
    std::memcpy(&v, lapic_regs.data() + off, 4);
    // Delivery mode is bits 10:8; bit 16 is the mask.
    v = (v & ~(0x700u | (1u << 16))) | (mode << 8);
    std::memcpy(lapic_regs.data() + off, &v, 4);
  };
  set(kLapicLvtLint0, kLvtDeliveryExtInt);
  set(kLapicLvtLint1, kLvtDeliveryNmi);
}

}  // namespace dsec::arch
