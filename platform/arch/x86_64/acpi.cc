// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/acpi.h"

#include <cstddef>
#include <cstring>

#include "absl/strings/str_format.h"
#include "platform/arch/x86_64/layout.h"

namespace dsec::arch {

namespace {

#pragma pack(push, 1)
// ACPI 6.4 section 5.2.5.3, "Root System Description Pointer (RSDP) Structure".
struct Rsdp {
  char signature[8];  // "RSD PTR "
  uint8_t checksum;   // of the first 20 bytes
  char oem_id[6];
  uint8_t revision;   // 2: ACPI 2.0+, XSDT present
  uint32_t rsdt_address;
  uint32_t length;
  uint64_t xsdt_address;
  uint8_t extended_checksum;  // of all 36 bytes
  uint8_t reserved[3];
};
// Section 5.2.6, "System Description Table Header".
struct SdtHeader {
  char signature[4];
  uint32_t length;
  uint8_t revision;
  uint8_t checksum;
  char oem_id[6];
  char oem_table_id[8];
  uint32_t oem_revision;
  char creator_id[4];
  uint32_t creator_revision;
};
// Section 5.2.3.2, "Generic Address Structure".
struct Gas {
  uint8_t space_id;  // 1: system I/O
  uint8_t bit_width;
  uint8_t bit_offset;
  uint8_t access_size;  // 2: word
  uint64_t address;
};
// Section 5.2.9, "Fixed ACPI Description Table" (revision 6).
struct Fadt {
  SdtHeader header;
  uint32_t firmware_ctrl;
  uint32_t dsdt;
  uint8_t reserved0;
  uint8_t preferred_pm_profile;
  uint16_t sci_int;
  uint32_t smi_cmd;
  uint8_t acpi_enable;
  uint8_t acpi_disable;
  uint8_t s4bios_req;
  uint8_t pstate_cnt;
  uint32_t pm1a_evt_blk;
  uint32_t pm1b_evt_blk;
  uint32_t pm1a_cnt_blk;
  uint32_t pm1b_cnt_blk;
  uint32_t pm2_cnt_blk;
  uint32_t pm_tmr_blk;
  uint32_t gpe0_blk;
  uint32_t gpe1_blk;
  uint8_t pm1_evt_len;
  uint8_t pm1_cnt_len;
  uint8_t pm2_cnt_len;
  uint8_t pm_tmr_len;
  uint8_t gpe0_blk_len;
  uint8_t gpe1_blk_len;
  uint8_t gpe1_base;
  uint8_t cst_cnt;
  uint16_t p_lvl2_lat;
  uint16_t p_lvl3_lat;
  uint16_t flush_size;
  uint16_t flush_stride;
  uint8_t duty_offset;
  uint8_t duty_width;
  uint8_t day_alrm;
  uint8_t mon_alrm;
  uint8_t century;
  uint16_t iapc_boot_arch;
  uint8_t reserved1;
  uint32_t flags;
  Gas reset_reg;
  uint8_t reset_value;
  uint16_t arm_boot_arch;
  uint8_t minor_version;
  uint64_t x_firmware_ctrl;
  uint64_t x_dsdt;
  Gas x_pm1a_evt_blk;
  Gas x_pm1b_evt_blk;
  Gas x_pm1a_cnt_blk;
  Gas x_pm1b_cnt_blk;
  Gas x_pm2_cnt_blk;
  Gas x_pm_tmr_blk;
  Gas x_gpe0_blk;
  Gas x_gpe1_blk;
  Gas sleep_control_reg;
  Gas sleep_status_reg;
  uint64_t hypervisor_vendor_id;
};
// Section 5.2.10, "Firmware ACPI Control Structure".
struct Facs {
  char signature[4];  // "FACS"
  uint32_t length;    // 64
  uint32_t hardware_signature;
  uint32_t firmware_waking_vector;
  uint32_t global_lock;
  uint32_t flags;
  uint64_t x_firmware_waking_vector;
  uint8_t version;  // 2
  uint8_t reserved[3];
  uint32_t ospm_flags;
  uint8_t reserved2[24];
};
// Section 5.2.12, "Multiple APIC Description Table".
struct MadtHeader {
  SdtHeader header;
  uint32_t local_apic_address;
  uint32_t flags;  // bit 0 PCAT_COMPAT: 8259s present
};
struct MadtLocalApic {  // 5.2.12.2, type 0
  uint8_t type;
  uint8_t length;
  uint8_t processor_uid;
  uint8_t apic_id;
  uint32_t flags;  // bit 0 enabled
};
struct MadtIoApic {  // 5.2.12.3, type 1
  uint8_t type;
  uint8_t length;
  uint8_t ioapic_id;
  uint8_t reserved;
  uint32_t address;
  uint32_t gsi_base;
};
struct MadtLocalApicNmi {  // 5.2.12.7, type 4
  uint8_t type;
  uint8_t length;
  uint8_t processor_uid;  // 0xff: all processors
  uint16_t flags;         // 0: conforms to the bus
  uint8_t lint;
};
#pragma pack(pop)

static_assert(sizeof(Rsdp) == 36);
static_assert(sizeof(SdtHeader) == 36);
static_assert(sizeof(Gas) == 12);
static_assert(offsetof(Fadt, pm1a_evt_blk) == 56);
static_assert(offsetof(Fadt, pm1a_cnt_blk) == 64);
static_assert(offsetof(Fadt, iapc_boot_arch) == 109);
static_assert(offsetof(Fadt, flags) == 112);
static_assert(offsetof(Fadt, x_dsdt) == 140);
static_assert(offsetof(Fadt, x_pm1a_evt_blk) == 148);
static_assert(offsetof(Fadt, x_pm1a_cnt_blk) == 172);
static_assert(offsetof(Fadt, sleep_control_reg) == 244);
static_assert(sizeof(Fadt) == 276);
static_assert(sizeof(Facs) == 64);
static_assert(sizeof(MadtHeader) == 44);
static_assert(sizeof(MadtLocalApic) == 8);
static_assert(sizeof(MadtIoApic) == 12);
static_assert(sizeof(MadtLocalApicNmi) == 6);

// FADT flags (section 5.2.9, table 5.10).
constexpr uint32_t kFadtWbinvd = 1u << 0;       // WBINVD works (required)
constexpr uint32_t kFadtProcC1 = 1u << 2;       // C1 on all processors
constexpr uint32_t kFadtPwrButton = 1u << 4;    // no fixed-feature power button
constexpr uint32_t kFadtSlpButton = 1u << 5;    // no fixed-feature sleep button
constexpr uint32_t kFadtResetRegSup = 1u << 10;  // (not set: reboot goes by the i8042)
// IA-PC boot architecture flags (table 5.11).
constexpr uint16_t kBootLegacyDevices = 1u << 0;  // ISA devices (the UART)
constexpr uint16_t kBoot8042 = 1u << 1;           // the i8042 (reset path)
constexpr uint16_t kBootVgaNotPresent = 1u << 2;
constexpr uint16_t kBootCmosRtcNotPresent = 1u << 5;  // no RTC: kvm-clock has the wall time

// Offsets inside the blob. Each table starts 16-byte aligned (the FACS 64).
constexpr size_t kRsdpOffset = 0;
constexpr size_t kXsdtOffset = 64;
constexpr size_t kXsdtEntries = 2;  // FADT, MADT
constexpr size_t kFadtOffset = 128;
constexpr size_t kFacsOffset = 448;
constexpr size_t kDsdtOffset = 512;
constexpr size_t kMadtOffset = 576;

// The DSDT's AML (ACPI 6.4 chapter 20): Name (_S5_, Package (0x04) {0x05,
// Zero, Zero, Zero}): the sleep type values for soft-off, which is all
// Linux needs to register ACPI power-off (acpi_sleep_state_supported).
constexpr uint8_t kDsdtAml[] = {
    0x08, '_', 'S', '5', '_',  // NameOp, NameSeg
    0x12, 0x07, 0x04,          // PackageOp, PkgLength 7, NumElements 4
    0x0A, kAcpiS5SleepType,    // BytePrefix 5: SLP_TYPa
    0x00, 0x00, 0x00,          // ZeroOp x3: SLP_TYPb, reserved
};

void FillHeader(SdtHeader* h, const char (&signature)[5], uint32_t length, uint8_t revision) {
  std::memcpy(h->signature, signature, 4);
  h->length = length;
  h->revision = revision;
  std::memcpy(h->oem_id, "DSECVM", 6);
  std::memcpy(h->oem_table_id, "DSECVMM ", 8);
  h->oem_revision = 1;
  std::memcpy(h->creator_id, "DSEC", 4);
  h->creator_revision = 1;
}

Gas IoGas(uint16_t port, uint8_t bytes) {
  Gas g{};
  g.space_id = 1;
  g.bit_width = static_cast<uint8_t>(bytes * 8);
  g.access_size = 2;
  g.address = port;
  return g;
}

void SetChecksum(std::vector<uint8_t>& blob, size_t offset, size_t len, size_t checksum_at) {
  blob[checksum_at] = 0;
  blob[checksum_at] = static_cast<uint8_t>(-AcpiChecksum(blob.data() + offset, len));
}

template <typename T>
void Put(std::vector<uint8_t>& blob, size_t offset, const T& value) {
  std::memcpy(blob.data() + offset, &value, sizeof(T));
}

}  // namespace

uint8_t AcpiChecksum(const uint8_t* data, size_t len) {
  uint8_t sum = 0;
  for (size_t i = 0; i < len; ++i) sum = static_cast<uint8_t>(sum + data[i]);
  return sum;
}

absl::StatusOr<std::vector<uint8_t>> BuildAcpiTables(const AcpiConfig& config, uint64_t base) {
  if (config.vcpu_count == 0 || config.vcpu_count > 255) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ACPI tables: %d vCPUs (want 1..255)", config.vcpu_count));
  }
  const size_t madt_len = sizeof(MadtHeader) + config.vcpu_count * sizeof(MadtLocalApic) +
                          sizeof(MadtIoApic) + sizeof(MadtLocalApicNmi);
  const size_t total = kMadtOffset + madt_len;
  if (base % 16 != 0 || base + total > UINT32_MAX || total > kAcpiTablesMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ACPI tables: base 0x%x is not 16-byte aligned below 4 GiB", base));
  }
  std::vector<uint8_t> blob(total, 0);
  const auto addr = [base](size_t offset) { return base + offset; };

  Rsdp rsdp{};
  std::memcpy(rsdp.signature, "RSD PTR ", 8);
  std::memcpy(rsdp.oem_id, "DSECVM", 6);
  rsdp.revision = 2;
  rsdp.length = sizeof(Rsdp);
  rsdp.xsdt_address = addr(kXsdtOffset);
  Put(blob, kRsdpOffset, rsdp);
  SetChecksum(blob, kRsdpOffset, 20, kRsdpOffset + offsetof(Rsdp, checksum));
  SetChecksum(blob, kRsdpOffset, sizeof(Rsdp), kRsdpOffset + offsetof(Rsdp, extended_checksum));

  SdtHeader xsdt{};
  const uint32_t xsdt_len = sizeof(SdtHeader) + kXsdtEntries * sizeof(uint64_t);
  FillHeader(&xsdt, "XSDT", xsdt_len, 1);
  Put(blob, kXsdtOffset, xsdt);
  Put(blob, kXsdtOffset + sizeof(SdtHeader), static_cast<uint64_t>(addr(kFadtOffset)));
  Put(blob, kXsdtOffset + sizeof(SdtHeader) + 8, static_cast<uint64_t>(addr(kMadtOffset)));
  SetChecksum(blob, kXsdtOffset, xsdt_len, kXsdtOffset + offsetof(SdtHeader, checksum));

  Fadt fadt{};
  FillHeader(&fadt.header, "FACP", sizeof(Fadt), 6);
  fadt.firmware_ctrl = static_cast<uint32_t>(addr(kFacsOffset));
  fadt.dsdt = static_cast<uint32_t>(addr(kDsdtOffset));
  fadt.sci_int = kAcpiSciIrq;
  fadt.smi_cmd = 0;  // no SMI command port: the machine is always in ACPI mode
  fadt.pm1a_evt_blk = kAcpiPm1EventPort;
  fadt.pm1a_cnt_blk = kAcpiPm1ControlPort;
  fadt.pm1_evt_len = kAcpiPm1EventLength;
  fadt.pm1_cnt_len = kAcpiPm1ControlLength;
  fadt.p_lvl2_lat = 101;   // > 100: C2 not supported
  fadt.p_lvl3_lat = 1001;  // > 1000: C3 not supported
  fadt.iapc_boot_arch = kBootLegacyDevices | kBoot8042 | kBootVgaNotPresent | kBootCmosRtcNotPresent;
  fadt.flags = kFadtWbinvd | kFadtProcC1 | kFadtPwrButton | kFadtSlpButton;
  static_assert((kFadtResetRegSup & (kFadtWbinvd | kFadtProcC1 | kFadtPwrButton | kFadtSlpButton)) == 0);
  fadt.minor_version = 0;
  fadt.x_firmware_ctrl = 0;  // the 32-bit FIRMWARE_CTRL field is used (both may not be set)
  fadt.x_dsdt = addr(kDsdtOffset);
  fadt.x_pm1a_evt_blk = IoGas(kAcpiPm1EventPort, kAcpiPm1EventLength);
  fadt.x_pm1a_cnt_blk = IoGas(kAcpiPm1ControlPort, kAcpiPm1ControlLength);
  std::memcpy(&fadt.hypervisor_vendor_id, "DSECVMM\0", 8);
  Put(blob, kFadtOffset, fadt);
  SetChecksum(blob, kFadtOffset, sizeof(Fadt), kFadtOffset + offsetof(SdtHeader, checksum));

  Facs facs{};
  std::memcpy(facs.signature, "FACS", 4);
  facs.length = sizeof(Facs);
  facs.version = 2;
  Put(blob, kFacsOffset, facs);

  SdtHeader dsdt{};
  const uint32_t dsdt_len = sizeof(SdtHeader) + sizeof(kDsdtAml);
  FillHeader(&dsdt, "DSDT", dsdt_len, 2);
  Put(blob, kDsdtOffset, dsdt);
  std::memcpy(blob.data() + kDsdtOffset + sizeof(SdtHeader), kDsdtAml, sizeof(kDsdtAml));
  SetChecksum(blob, kDsdtOffset, dsdt_len, kDsdtOffset + offsetof(SdtHeader, checksum));

  MadtHeader madt{};
  FillHeader(&madt.header, "APIC", static_cast<uint32_t>(madt_len), 5);
  madt.local_apic_address = static_cast<uint32_t>(kLapicBase);
  madt.flags = 1;  // PCAT_COMPAT
  Put(blob, kMadtOffset, madt);
  size_t at = kMadtOffset + sizeof(MadtHeader);
  for (uint32_t i = 0; i < config.vcpu_count; ++i) {
    MadtLocalApic lapic{0, sizeof(MadtLocalApic), static_cast<uint8_t>(i), static_cast<uint8_t>(i), 1};
    Put(blob, at, lapic);
    at += sizeof(lapic);
  }
  MadtIoApic ioapic{1, sizeof(MadtIoApic), config.ioapic_id, 0, static_cast<uint32_t>(kIoApicBase), 0};
  Put(blob, at, ioapic);
  at += sizeof(ioapic);
  // LINT1 is NMI on every LAPIC, as the MP table says (virtual-wire mode).
  MadtLocalApicNmi nmi{4, sizeof(MadtLocalApicNmi), 0xff, 0, 1};
  Put(blob, at, nmi);
  SetChecksum(blob, kMadtOffset, madt_len, kMadtOffset + offsetof(SdtHeader, checksum));
  return blob;
}

}  // namespace dsec::arch
