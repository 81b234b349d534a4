// SPDX-License-Identifier: Apache-2.0
#include "platform/arch/x86_64/cpuid.h"

#include <gtest/gtest.h>

#include <cstring>

namespace dsec::arch {
namespace {

kvm::CpuidEntry Leaf(uint32_t fn, uint32_t idx, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  kvm::CpuidEntry e;
  e.function = fn;
  e.index = idx;
  e.eax = a;
  e.ebx = b;
  e.ecx = c;
  e.edx = d;
  return e;
}

const kvm::CpuidEntry* Find(const std::vector<kvm::CpuidEntry>& v, uint32_t fn, uint32_t idx) {
  for (const auto& e : v) {
    if (e.function == fn && e.index == idx) return &e;
  }
  return nullptr;
}

std::vector<kvm::CpuidEntry> HostTable() {
  return {Leaf(0, 0, 0x1f, 1, 2, 3),
          Leaf(1, 0, 0x806c1, 0xff100800, 0xffffffff, 0xffffffff),
          Leaf(4, 0, (1u << 5) | 0x1, 0, 0, 0),
          Leaf(4, 3, (3u << 5) | 0x3, 0, 0, 0),
          Leaf(6, 0, 7, 7, 7, 7),
          Leaf(0xA, 0, 0x07300805, 7, 7, 7),
          Leaf(0xB, 0, 1, 2, 0x100, 9),
          Leaf(0xB, 1, 4, 8, 0x201, 9),
          Leaf(0xB, 2, 0, 0, 2, 9),
          Leaf(0x40000000, 0, 0x40000001, 0, 0, 0),
          Leaf(0x40000001, 0, 0x1234, 0, 0, 0),
          Leaf(0x40000100, 0, 1, 1, 1, 1)};
}

TEST(CpuidTest, Leaf1CarriesApicIdAndHidesUnemulatedFeatures) {
  auto t = NormalizeCpuid(HostTable(), 2, 4);
  ASSERT_TRUE(t.ok());
  const auto* l1 = Find(*t, 1, 0);
  ASSERT_NE(l1, nullptr);
  EXPECT_EQ(l1->ebx >> 24, 2u);
  EXPECT_EQ((l1->ebx >> 16) & 0xff, 4u);
  EXPECT_EQ(l1->ebx & 0xffff, 0x0800u);  // CLFLUSH size kept
  EXPECT_TRUE(l1->ecx & (1u << 31));     // hypervisor
  for (int bit : {3, 4, 5, 6, 7, 8, 15}) EXPECT_FALSE(l1->ecx & (1u << bit)) << bit;
  for (int bit : {21, 22, 29, 31}) EXPECT_FALSE(l1->edx & (1u << bit)) << bit;
  EXPECT_TRUE(l1->edx & (1u << 28));  // HTT for SMP
  EXPECT_TRUE(l1->ecx & (1u << 0));   // SSE3 untouched
}

TEST(CpuidTest, ZeroesThermalAndPmuLeaves) {
  auto t = NormalizeCpuid(HostTable(), 0, 1);
  ASSERT_TRUE(t.ok());
  for (uint32_t fn : {6u, 0xAu}) {
    const auto* e = Find(*t, fn, 0);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->eax | e->ebx | e->ecx | e->edx, 0u);
  }
  EXPECT_FALSE(Find(*t, 1, 0)->edx & (1u << 28));  // no HTT for one vCPU
}

TEST(CpuidTest, OffersTheTscDeadlineTimerOnlyWhenKvmEmulatesIt) {
  constexpr uint32_t kTscDeadline = 1u << 24;
  auto without = NormalizeCpuid(HostTable(), 0, 1);
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(Find(*without, 1, 0)->ecx & kTscDeadline);
  CpuidOptions o;
  o.tsc_deadline_timer = true;
  auto with = NormalizeCpuid(HostTable(), 0, 1, o);
  ASSERT_TRUE(with.ok());
  EXPECT_TRUE(Find(*with, 1, 0)->ecx & kTscDeadline);
  EXPECT_TRUE(Find(*with, 1, 0)->ecx & (1u << 31));  // still a hypervisor
}

TEST(CpuidTest, TopologyIsOneThreadPerCore) {
  auto t = NormalizeCpuid(HostTable(), 3, 6);
  ASSERT_TRUE(t.ok());
  const auto* smt = Find(*t, 0xB, 0);
  EXPECT_EQ(smt->eax, 0u);
  EXPECT_EQ(smt->ebx, 1u);
  EXPECT_EQ(smt->ecx, 0x100u);
  EXPECT_EQ(smt->edx, 3u);
  const auto* core = Find(*t, 0xB, 1);
  EXPECT_EQ(core->eax, 3u);  // 6 vCPUs need 3 bits
  EXPECT_EQ(core->ebx, 6u);
  EXPECT_EQ(core->ecx, 0x201u);
  EXPECT_EQ(core->edx, 3u);
  const auto* end = Find(*t, 0xB, 2);
  EXPECT_EQ(end->ecx, 2u);
  EXPECT_EQ(end->ebx, 0u);
  const auto* l1d = Find(*t, 4, 0);
  EXPECT_EQ(l1d->eax >> 26, 5u);
  EXPECT_EQ((l1d->eax >> 14) & 0xfff, 0u);
  EXPECT_EQ(l1d->eax & 0x3fff, (1u << 5) | 0x1);
  const auto* l3 = Find(*t, 4, 3);
  EXPECT_EQ((l3->eax >> 14) & 0xfff, 5u);
}

TEST(CpuidTest, AdvertisesKvmSignatureAndDropsOtherHypervisorLeaves) {
  auto t = NormalizeCpuid(HostTable(), 0, 1);
  ASSERT_TRUE(t.ok());
  const auto* hv = Find(*t, 0x40000000, 0);
  ASSERT_NE(hv, nullptr);
  char sig[12];
  std::memcpy(sig, &hv->ebx, 4);
  std::memcpy(sig + 4, &hv->ecx, 4);
  std::memcpy(sig + 8, &hv->edx, 4);
  EXPECT_EQ(std::memcmp(sig, "KVMKVMKVM\0\0\0", 12), 0);
  EXPECT_EQ(hv->eax, 0x40000001u);
  EXPECT_EQ(Find(*t, 0x40000001, 0)->eax, 0x1234u);
  EXPECT_EQ(Find(*t, 0x40000100, 0), nullptr);
}

TEST(CpuidTest, AddsHypervisorLeafWhenKvmOmitsIt) {
  std::vector<kvm::CpuidEntry> only0 = {Leaf(0, 0, 1, 0, 0, 0)};
  auto t = NormalizeCpuid(only0, 0, 1);
  ASSERT_TRUE(t.ok());
  const auto* hv = Find(*t, 0x40000000, 0);
  ASSERT_NE(hv, nullptr);
  EXPECT_EQ(hv->eax, 0x40000000u);
}

TEST(CpuidTest, RejectsBadTopology) {
  EXPECT_FALSE(NormalizeCpuid(HostTable(), 0, 0).ok());
  EXPECT_FALSE(NormalizeCpuid(HostTable(), 4, 4).ok());
}

}  // namespace
}  // namespace dsec::arch
