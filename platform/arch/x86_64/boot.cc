// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/boot.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "platform/arch/x86_64/acpi.h"
#include "platform/arch/x86_64/cpu_state.h"
#include "platform/arch/x86_64/mptable.h"
#include "platform/arch/x86_64/pvh.h"
#include "platform/arch/x86_64/zero_page.h"
#include "base/status.h"

namespace dsec::arch {

static_assert(kAcpiTablesAddr >= kLowReservedArea.start &&
                  kAcpiTablesAddr + kAcpiTablesMaxBytes <= kLowReservedArea.end(),
              "the ACPI tables must lie in the e820-reserved BIOS area");

const char* BootProtocolName(BootProtocol protocol) {
  switch (protocol) {
    case BootProtocol::kAuto:
      return "auto";
    case BootProtocol::kLinux64:
      return "linux64";
    case BootProtocol::kPvh:
      return "pvh";
  }
  return "unknown";
}

absl::StatusOr<BootProtocol> ParseBootProtocol(std::string_view name) {
  for (BootProtocol p : {BootProtocol::kAuto, BootProtocol::kLinux64, BootProtocol::kPvh}) {
    if (name == BootProtocolName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown boot protocol \"%s\" (want auto, linux64 or pvh)", name));
}

namespace {

absl::StatusOr<BootProtocol> ChooseProtocol(BootProtocol asked, const KernelImage& kernel) {
  const char* format = KernelFormatName(kernel.format);
  switch (asked) {
    case BootProtocol::kPvh:
      if (!kernel.pvh_entry) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "PVH boot requested but the %s kernel has no PVH entry note", format));
      }
      return BootProtocol::kPvh;
    case BootProtocol::kLinux64:
      if (!kernel.entry64) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "linux64 boot requested but the %s kernel has no 64-bit entry", format));
      }
      return BootProtocol::kLinux64;
    case BootProtocol::kAuto:
      break;
  }
  if (kernel.entry64) return BootProtocol::kLinux64;
  if (kernel.pvh_entry) return BootProtocol::kPvh;
  return absl::InvalidArgumentError(
      absl::StrFormat("the %s kernel has neither a 64-bit nor a PVH entry", format));
}

}  // namespace

absl::StatusOr<BootPlan> SetupBoot(const memory::GuestMemory& mem, const BootConfig& config) {
  // --- Validation: nothing below writes guest memory. ---
  if (config.vcpu_count == 0 || config.vcpu_count > kMaxVcpus) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vCPU count %d is outside 1..%d", config.vcpu_count, kMaxVcpus));
  }
  if (!mem.IsValidRange(0, kLowReservedArea.end())) {
    return absl::InvalidArgumentError(
        "guest RAM must cover the first 1 MiB (boot tables, command line, MP table)");
  }
  DSEC_ASSIGN_OR_RETURN(KernelImage kernel, ParseKernel(config.kernel, mem));
  DSEC_ASSIGN_OR_RETURN(BootProtocol protocol, ChooseProtocol(config.protocol, kernel));
  DSEC_RETURN_IF_ERROR(CheckCmdline(config.cmdline, kernel));
  DSEC_ASSIGN_OR_RETURN(std::vector<E820Entry> e820, GuestE820(mem));

  BootPlan plan;
  plan.protocol = protocol;
  plan.kernel_format = kernel.format;
  plan.kernel = kernel.footprint;
  plan.cmdline = {kCmdlineAddr, config.cmdline.size() + 1};
  if (config.initrd) {
    DSEC_ASSIGN_OR_RETURN(AddressRange initrd, PlaceInitrd(config.initrd->size(), kernel, mem));
    plan.initrd = initrd;
  }
  std::optional<boot_params> zero_page;
  if (protocol == BootProtocol::kLinux64) {
    DSEC_ASSIGN_OR_RETURN(zero_page, BuildZeroPage(kernel, kCmdlineAddr, config.cmdline.size(),
                                                   plan.initrd, e820));
  }
  DSEC_ASSIGN_OR_RETURN(std::vector<uint8_t> mp_table,
                        BuildMpTable(config.vcpu_count, kMpTableAddr));
  std::vector<uint8_t> acpi_tables;
  uint64_t rsdp = 0;
  if (config.acpi) {
    // The IOAPIC id the MP table gives it (mptable.h), so both agree.
    AcpiConfig acpi{config.vcpu_count, static_cast<uint8_t>(config.vcpu_count)};
    DSEC_ASSIGN_OR_RETURN(acpi_tables, BuildAcpiTables(acpi, kAcpiTablesAddr));
    rsdp = AcpiRsdpAddress(kAcpiTablesAddr);
    if (zero_page) zero_page->acpi_rsdp_addr = rsdp;  // boot protocol 2.14
  }

  // --- Loading. ---
  DSEC_RETURN_IF_ERROR(LoadKernel(config.kernel, kernel, mem));
  if (plan.initrd) DSEC_RETURN_IF_ERROR(mem.Write(plan.initrd->start, *config.initrd));
  DSEC_RETURN_IF_ERROR(mem.Write(
      kCmdlineAddr, std::span<const uint8_t>(
                        reinterpret_cast<const uint8_t*>(config.cmdline.c_str()),
                        config.cmdline.size() + 1)));
  DSEC_RETURN_IF_ERROR(mem.Write(kMpTableAddr, mp_table));
  if (!acpi_tables.empty()) DSEC_RETURN_IF_ERROR(mem.Write(kAcpiTablesAddr, acpi_tables));

  if (protocol == BootProtocol::kLinux64) {
    DSEC_RETURN_IF_ERROR(mem.WriteObj(kZeroPageAddr, *zero_page));
    DSEC_RETURN_IF_ERROR(WriteBootGdt(mem, CpuMode::kLong64));
    DSEC_RETURN_IF_ERROR(WriteIdentityPageTables(mem));
    plan.entry = *kernel.entry64;
    plan.regs = Linux64Registers(plan.entry, kZeroPageAddr);
    plan.sregs = LongModeSregs();
  } else {
    DSEC_RETURN_IF_ERROR(WritePvhStartInfo(mem, kCmdlineAddr, e820, plan.initrd, rsdp));
    DSEC_RETURN_IF_ERROR(WriteBootGdt(mem, CpuMode::kProtected32));
    plan.entry = *kernel.pvh_entry;
    plan.regs = PvhRegisters(*kernel.pvh_entry, static_cast<uint32_t>(kPvhStartInfoAddr));
    plan.sregs = ProtectedModeSregs();
  }
  plan.msrs = BootMsrs();
  plan.e820 = std::move(e820);
  return plan;
}

}  // namespace dsec::arch
