// SPDX-License-Identifier: Apache-2.0
// Intel MultiProcessor Specification 1.4 tables, so that a guest without
// ACPI finds its vCPUs, the ISA bus and the IOAPIC; and the LAPIC LVT setup
// for virtual-wire mode.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/memory/guest_memory.h"

namespace dsec::arch {

// APIC ids are 0..vcpus-1 and the IOAPIC takes id `vcpus`; 64 keeps the
// table well inside the reserved area after the EBDA.
inline constexpr uint32_t kMaxVcpus = 64;

#pragma pack(push, 1)
// MP spec 4.1, "MP Floating Pointer Structure".
struct MpFloatingPointer {
  char signature[4];  // "_MP_"
  uint32_t config_table;
  uint8_t length;  // in 16-byte units
  uint8_t spec_rev;
  uint8_t checksum;
  uint8_t features[5];  // all 0: a configuration table is present
};
// MP spec 4.2, "MP Configuration Table Header".
struct MpConfigHeader {
  char signature[4];  // "PCMP"
  uint16_t base_table_length;
  uint8_t spec_rev;
  uint8_t checksum;
  char oem_id[8];
  char product_id[12];
  uint32_t oem_table;
  uint16_t oem_table_size;
  uint16_t entry_count;
  uint32_t lapic_address;
  uint16_t ext_table_length;
  uint8_t ext_checksum;
  uint8_t reserved;
};
// MP spec 4.3.1-4.3.5, base table entries.
struct MpProcessorEntry {
  uint8_t type;  // 0
  uint8_t lapic_id;
  uint8_t lapic_version;
  uint8_t cpu_flags;  // bit 0 enabled, bit 1 bootstrap processor
  uint32_t cpu_signature;
  uint32_t feature_flags;
  uint32_t reserved[2];
};
struct MpBusEntry {
  uint8_t type;  // 1
  uint8_t bus_id;
  char bus_type[6];
};
struct MpIoApicEntry {
  uint8_t type;  // 2
  uint8_t id;
  uint8_t version;
  uint8_t flags;  // bit 0 enabled
  uint32_t address;
};
struct MpInterruptEntry {
  uint8_t type;  // 3: I/O interrupt, 4: local interrupt
  uint8_t irq_type;  // 0 INT, 1 NMI, 2 SMI, 3 ExtINT
  uint16_t flags;  // polarity/trigger, 0 = conforms to bus
  uint8_t source_bus;
  uint8_t source_irq;
  uint8_t dest_id;  // IOAPIC id, or LAPIC id (0xff = all)
  uint8_t dest_pin;  // INTIN# or LINTIN#
};
#pragma pack(pop)
static_assert(sizeof(MpFloatingPointer) == 16);
static_assert(sizeof(MpConfigHeader) == 44);
static_assert(sizeof(MpProcessorEntry) == 20);
static_assert(sizeof(MpBusEntry) == 8);
static_assert(sizeof(MpIoApicEntry) == 8);
static_assert(sizeof(MpInterruptEntry) == 8);

inline constexpr uint8_t kMpEntryProcessor = 0, kMpEntryBus = 1, kMpEntryIoApic = 2,
                         kMpEntryIoInterrupt = 3, kMpEntryLocalInterrupt = 4;
inline constexpr uint8_t kMpIrqInt = 0, kMpIrqNmi = 1, kMpIrqExtInt = 3;
inline constexpr uint32_t kIsaIrqs = 16;

// The floating pointer followed by the configuration table, as the bytes to
// place at `addr`. InvalidArgument for vcpus outside 1..kMaxVcpus.
absl::StatusOr<std::vector<uint8_t>> BuildMpTable(uint32_t vcpus, uint64_t addr);
// Builds the table for kMpTableAddr and writes it there.
absl::Status WriteMpTable(const memory::GuestMemory& mem, uint32_t vcpus);

// LAPIC register offsets (SDM Vol. 3A, table 11-1) and LVT delivery modes.
inline constexpr size_t kLapicLvtLint0 = 0x350;
inline constexpr size_t kLapicLvtLint1 = 0x360;
inline constexpr uint32_t kLvtDeliveryNmi = 0x4, kLvtDeliveryExtInt = 0x7;

// Sets LINT0 to ExtINT and LINT1 to NMI, unmasked (virtual-wire mode, MP
// spec 3.6.2.2), in a raw LAPIC register page as KVM_GET_LAPIC returns it.
void ConfigureLapicLvt(std::span<uint8_t, 1024> lapic_regs);

}  // namespace dsec::arch
