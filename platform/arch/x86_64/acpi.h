// SPDX-License-Identifier: Apache-2.0
// The guest's ACPI tables (ACPI 6.x): just enough for a Linux guest to find
// its CPUs and IOAPIC (MADT) and to power itself off through the fixed
// hardware PM1 control register (FADT + a DSDT holding \_S5). No firmware
// runs: the monitor writes the tables into the reserved BIOS area before the
// first instruction, and a kernel finds the RSDP by scanning 0xE0000-0xFFFFF
// (ACPI 6.4 section 5.2.5.1) or through boot_params.acpi_rsdp_addr / the PVH
// start info.
//
// Why fixed hardware and not the hardware-reduced model: a hardware-reduced
// FADT makes Linux drop the 8259 PIC and the PIT clock event
// (acpi_generic_reduced_hw_init), so that ISA interrupts (the serial console,
// the virtio-mmio devices announced on the command line) would need DSDT
// device objects to get IRQ numbers at all. Fixed hardware keeps the legacy
// interrupt model the MP table already describes and needs two tiny register
// blocks (devices/acpi).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::arch {

// Where the tables go: the RSDP first, 16-byte aligned, in the range Linux
// scans; the area is e820-reserved (kLowReservedArea).
inline constexpr uint64_t kAcpiTablesAddr = 0xE0000;
inline constexpr uint64_t kAcpiTablesMaxBytes = 0x10000;

// The PM1a register blocks (I/O ports), as QEMU's ICH9 places them: the
// event block holds PM1_STS (2 bytes) then PM1_EN (2), the control block
// PM1_CNT (2). ACPI 6.4 section 4.8.3.
inline constexpr uint16_t kAcpiPm1EventPort = 0x600;
inline constexpr uint16_t kAcpiPm1EventLength = 4;
inline constexpr uint16_t kAcpiPm1ControlPort = 0x604;
inline constexpr uint16_t kAcpiPm1ControlLength = 2;
// The SCI: ISA IRQ 9, as on every PC chipset. The monitor never raises it
// (no ACPI event is ever pending); Linux only installs a handler.
inline constexpr uint16_t kAcpiSciIrq = 9;
// The SLP_TYP value \_S5 (soft off) carries; the PM1 device powers the VM off
// when the guest writes it with SLP_EN.
inline constexpr uint8_t kAcpiS5SleepType = 5;

struct AcpiConfig {
  uint32_t vcpu_count = 1;  // LAPIC ids 0..n-1 (the MP table's numbering)
  uint8_t ioapic_id = 0;    // the MP table gives the IOAPIC id `vcpu_count`
};

// The tables as one blob to be written at `base` (kAcpiTablesAddr): RSDP,
// XSDT -> FADT, MADT; FADT -> FACS, DSDT. Every address inside points into
// the blob; every checksum is set. InvalidArgument for 0 or more than 255
// vCPUs or a base that the 32-bit pointers of ACPI 1.0 fields cannot reach.
absl::StatusOr<std::vector<uint8_t>> BuildAcpiTables(const AcpiConfig& config, uint64_t base);

// The RSDP's address inside a blob built at `base` (the blob's first byte).
inline constexpr uint64_t AcpiRsdpAddress(uint64_t base) { return base; }

// The 8-bit sum of `len` bytes (ACPI checksums make it 0).
uint8_t AcpiChecksum(const uint8_t* data, size_t len);

}  // namespace dsec::arch
