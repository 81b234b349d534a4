// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/acpi.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "platform/arch/x86_64/layout.h"

namespace dsec::arch {
namespace {

uint32_t U32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint64_t U64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
uint16_t U16(const std::vector<uint8_t>& b, size_t at) {
  uint16_t v;
  std::memcpy(&v, b.data() + at, 2);
  return v;
}

// A table found through the pointers, as a guest walks them: its offset in
// the blob after checking that it lies inside, carries `signature` and sums
// to zero over its length.
size_t Table(const std::vector<uint8_t>& blob, uint64_t base, uint64_t gpa, const char* signature) {
  EXPECT_GE(gpa, base);
  const size_t at = gpa - base;
  EXPECT_LE(at + 36, blob.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(blob.data() + at), 4), signature);
  const uint32_t len = U32(blob, at + 4);
  EXPECT_LE(at + len, blob.size());
  EXPECT_EQ(AcpiChecksum(blob.data() + at, len), 0) << signature;
  return at;
}

TEST(AcpiTablesTest, RsdpXsdtFadtMadtAndDsdtChainWithValidChecksums) {
  const uint64_t base = kAcpiTablesAddr;
  auto blob = BuildAcpiTables({2, 2}, base);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<uint8_t>& b = *blob;
  // RSDP (ACPI 6.4 5.2.5.3): both checksums, revision 2, XSDT pointer.
  EXPECT_EQ(std::memcmp(b.data(), "RSD PTR ", 8), 0);
  EXPECT_EQ(AcpiChecksum(b.data(), 20), 0);
  EXPECT_EQ(AcpiChecksum(b.data(), 36), 0);
  EXPECT_EQ(b[15], 2);
  EXPECT_EQ(U32(b, 20), 36u);
  const size_t xsdt = Table(b, base, U64(b, 24), "XSDT");
  ASSERT_EQ(U32(b, xsdt + 4), 36u + 16u);
  const size_t fadt = Table(b, base, U64(b, xsdt + 36), "FACP");
  const size_t madt = Table(b, base, U64(b, xsdt + 44), "APIC");

  // FADT: fixed-hardware PM1 blocks, the SCI, no SMI port, not reduced hardware.
  EXPECT_EQ(U32(b, fadt + 4), 276u);
  EXPECT_EQ(b[fadt + 8], 6);
  EXPECT_EQ(U16(b, fadt + 46), kAcpiSciIrq);
  EXPECT_EQ(U32(b, fadt + 48), 0u);
  EXPECT_EQ(U32(b, fadt + 56), kAcpiPm1EventPort);
  EXPECT_EQ(U32(b, fadt + 64), kAcpiPm1ControlPort);
  EXPECT_EQ(b[fadt + 88], kAcpiPm1EventLength);
  EXPECT_EQ(b[fadt + 89], kAcpiPm1ControlLength);
  const uint32_t flags = U32(b, fadt + 112);
  EXPECT_EQ(flags & (1u << 20), 0u) << "HW_REDUCED_ACPI must be clear";
  EXPECT_NE(flags & 1u, 0u) << "WBINVD";
  EXPECT_NE(U16(b, fadt + 109) & (1u << 1), 0u) << "8042 present (reset path)";
  // X_PM1a_CNT_BLK: system I/O, 16 bits at the control port.
  EXPECT_EQ(b[fadt + 172], 1);
  EXPECT_EQ(b[fadt + 173], 16);
  EXPECT_EQ(U64(b, fadt + 176), kAcpiPm1ControlPort);
  EXPECT_EQ(U64(b, fadt + 148 + 4), kAcpiPm1EventPort);

  // FACS (no checksum) and the DSDT with \_S5_ = {5, 0, 0, 0}.
  const size_t facs = U32(b, fadt + 36) - base;
  EXPECT_EQ(facs % 64, 0u);
  EXPECT_EQ(std::memcmp(b.data() + facs, "FACS", 4), 0);
  EXPECT_EQ(U32(b, facs + 4), 64u);
  EXPECT_EQ(U32(b, fadt + 40), U64(b, fadt + 140));
  const size_t dsdt = Table(b, base, U64(b, fadt + 140), "DSDT");
  const std::vector<uint8_t> aml(b.begin() + dsdt + 36, b.begin() + dsdt + U32(b, dsdt + 4));
  const std::vector<uint8_t> want = {0x08, '_', 'S', '5', '_', 0x12, 0x07, 0x04,
                                     0x0A, kAcpiS5SleepType, 0x00, 0x00, 0x00};
  EXPECT_EQ(aml, want);

  // MADT: the LAPIC base, PCAT_COMPAT, one LAPIC per vCPU, the IOAPIC, LINT1 NMI.
  EXPECT_EQ(U32(b, madt + 36), kLapicBase);
  EXPECT_EQ(U32(b, madt + 40), 1u);
  size_t at = madt + 44;
  for (uint8_t cpu = 0; cpu < 2; ++cpu) {
    EXPECT_EQ(b[at], 0);
    EXPECT_EQ(b[at + 1], 8);
    EXPECT_EQ(b[at + 3], cpu);
    EXPECT_EQ(U32(b, at + 4), 1u);
    at += 8;
  }
  EXPECT_EQ(b[at], 1);
  EXPECT_EQ(b[at + 2], 2) << "IOAPIC id as in the MP table";
  EXPECT_EQ(U32(b, at + 4), kIoApicBase);
  EXPECT_EQ(U32(b, at + 8), 0u);
  at += 12;
  EXPECT_EQ(b[at], 4);
  EXPECT_EQ(b[at + 5], 1);
  EXPECT_EQ(at + 6, madt + U32(b, madt + 4));
}

TEST(AcpiTablesTest, PointersFollowTheBase) {
  auto a = BuildAcpiTables({1, 1}, 0xE0000);
  auto b = BuildAcpiTables({1, 1}, 0xF0000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(U64(*a, 24) + 0x10000, U64(*b, 24));
}

TEST(AcpiTablesTest, MadtGrowsWithTheVcpus) {
  auto one = BuildAcpiTables({1, 1}, kAcpiTablesAddr);
  auto many = BuildAcpiTables({64, 64}, kAcpiTablesAddr);
  ASSERT_TRUE(one.ok() && many.ok());
  EXPECT_EQ(many->size() - one->size(), 63u * 8u);
  EXPECT_LE(many->size(), kAcpiTablesMaxBytes);
}

TEST(AcpiTablesTest, RejectsBadInput) {
  EXPECT_EQ(BuildAcpiTables({0, 0}, kAcpiTablesAddr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildAcpiTables({256, 0}, kAcpiTablesAddr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildAcpiTables({1, 1}, 0xE0008).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildAcpiTables({1, 1}, 0xFFFFFFF0ull).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsec::arch
