// SPDX-License-Identifier: Apache-2.0
#include "platform/memory/guest_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <limits>

#include "gtest/gtest.h"
#include "platform/memory/fake_guest_memory.h"
#include "platform/memory/memfd_guest_memory.h"

namespace dsec::memory {
namespace {

std::unique_ptr<FakeGuestMemory> TwoRegions() {
  // [0, 64K) and [64K, 128K) adjacent, then a hole, then [1M, 1M+4K).
  auto mem = FakeGuestMemory::Create({{0, 0x10000}, {0x10000, 0x10000}, {0x100000, 0x1000}});
  EXPECT_TRUE(mem.ok());
  return std::move(*mem);
}

TEST(GuestMemory, HostAddressChecksBoundsWithoutOverflow) {
  auto mem = TwoRegions();
  EXPECT_TRUE(mem->HostAddress(0, 0x10000).ok());
  EXPECT_FALSE(mem->HostAddress(0xfff0, 0x20).ok());  // crosses regions
  EXPECT_FALSE(mem->HostAddress(0x20000, 1).ok());    // hole
  EXPECT_FALSE(mem->HostAddress(0x100000, std::numeric_limits<uint64_t>::max()).ok());
  EXPECT_FALSE(mem->HostAddress(std::numeric_limits<uint64_t>::max(), 2).ok());
  EXPECT_TRUE(mem->HostAddress(0x101000, 0).ok());  // empty range at the end
}

TEST(GuestMemory, ReadWriteAcrossAdjacentRegions) {
  auto mem = TwoRegions();
  uint8_t in[32];
  for (int i = 0; i < 32; ++i) in[i] = static_cast<uint8_t>(i + 1);
  ASSERT_TRUE(mem->Write(0xfff0, in).ok());
  uint8_t out[32] = {};
  ASSERT_TRUE(mem->Read(0xfff0, out).ok());
  EXPECT_EQ(0, std::memcmp(in, out, sizeof(in)));
}

TEST(GuestMemory, FailedWriteLeavesMemoryUnchanged) {
  auto mem = TwoRegions();
  uint8_t in[64];
  std::memset(in, 0xaa, sizeof(in));
  // Starts inside the second region and runs into the hole.
  EXPECT_EQ(mem->Write(0x1fff0, in).code(), absl::StatusCode::kInvalidArgument);
  auto v = mem->ReadObj<uint8_t>(0x1fff0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 0);
  EXPECT_FALSE(mem->Fill(0x100ff0, 1, 0x20).ok());
  EXPECT_EQ(*mem->ReadObj<uint8_t>(0x100ff0), 0);
}

TEST(GuestMemory, ObjectAccessRoundTrips) {
  auto mem = TwoRegions();
  struct Pair {
    uint32_t a;
    uint64_t b;
  };
  ASSERT_TRUE(mem->WriteObj<Pair>(0x100, Pair{7, 9}).ok());
  auto p = mem->ReadObj<Pair>(0x100);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->a, 7u);
  EXPECT_EQ(p->b, 9u);
  EXPECT_FALSE(mem->ReadObj<Pair>(0x100ffc).ok());
}

TEST(GuestMemory, RejectsOverlappingOrEmptyRegions) {
  EXPECT_FALSE(FakeGuestMemory::Create({{0, 0x2000}, {0x1000, 0x1000}}).ok());
  EXPECT_FALSE(FakeGuestMemory::Create({{0, 0}}).ok());
  EXPECT_FALSE(FakeGuestMemory::Create({{0x1000, 0x1000}, {0, 0x1000}}).ok());
}

TEST(MemfdGuestMemory, IsLazilyCommittedAndReportsResidency) {
  auto mem = MemfdGuestMemory::Create({{0, 64 << 20}}, {});
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto before = (*mem)->ResidentBytes();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(*before, 0u);
  ASSERT_TRUE((*mem)->Fill(0, 1, 1 << 20).ok());
  EXPECT_EQ(*(*mem)->ResidentBytes(), 1u << 20);
  EXPECT_GE((*mem)->RegionFd(0), 0);
}

TEST(MemfdGuestMemory, RejectsUnalignedRegions) {
  EXPECT_EQ(MemfdGuestMemory::Create({{0, 1000}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The VmFlags of the mapping that holds `p` in /proc/self/smaps.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool in = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(MemfdGuestMemory, PrivateRamIsOfferedToKsmAndSharedRamIsNot) {
  if (::access("/sys/kernel/mm/ksm/run", F_OK) != 0) GTEST_SKIP() << "this kernel has no KSM";
  auto lazy = MemfdGuestMemory::MapAnonymous({{0, 1 << 20}});
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  EXPECT_NE(VmFlagsOf(lazy->get()->regions()[0].host).find(" mg"), std::string::npos)
      << VmFlagsOf(lazy->get()->regions()[0].host);
  char path[] = "/tmp/dsec-guest-memory-test-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  auto restored = MemfdGuestMemory::MapPrivateFile({{0, 1 << 20}}, fd, {0});
  ::close(fd);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_NE(VmFlagsOf(restored->get()->regions()[0].host).find(" mg"), std::string::npos);
  auto booted = MemfdGuestMemory::Create({{0, 1 << 20}}, {});
  ASSERT_TRUE(booted.ok()) << booted.status();
  EXPECT_EQ(VmFlagsOf(booted->get()->regions()[0].host).find(" mg"), std::string::npos);
}

}  // namespace
}  // namespace dsec::memory
