// SPDX-License-Identifier: Apache-2.0
// Integration test (real memfds, real page cache): which call really frees
// guest RAM held in a MAP_SHARED memfd. Measures the memfd's allocated
// blocks (fstat st_blocks) and the process's RssShmem for fallocate
// (PUNCH_HOLE), MADV_REMOVE and MADV_DONTNEED; the backend uses the first.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "devices/balloon/balloon_backend.h"
#include "gtest/gtest.h"
#include "base/mmap.h"
#include "base/scoped_fd.h"
#include "platform/memory/memfd_guest_memory.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kBytes = 64ull << 20;
constexpr uint64_t kSlack = 4ull << 20;  // other allocations of this process

uint64_t AllocatedBytes(int fd) {
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

uint64_t RssShmemBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (in >> key) {
    if (key == "RssShmem:") {
      in >> kb;
      return kb * 1024;
    }
    in.ignore(1 << 16, '\n');
  }
  ADD_FAILURE() << "no RssShmem in /proc/self/status";
  return 0;
}

struct Memfd {
  ScopedFd fd;
  Mmap map;
};

Memfd MakeTouchedMemfd() {
  Memfd m;
  m.fd = ScopedFd(::memfd_create("dsec-balloon-test", MFD_CLOEXEC));
  EXPECT_TRUE(m.fd.valid());
  EXPECT_EQ(::ftruncate(m.fd.get(), kBytes), 0);
  auto map = Mmap::File(m.fd.get(), kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE);
  EXPECT_TRUE(map.ok()) << map.status();
  m.map = std::move(*map);
  std::memset(m.map.data(), 0xa5, kBytes);
  EXPECT_GE(AllocatedBytes(m.fd.get()), kBytes);
  return m;
}

TEST(MemfdReleaseTest, MadvDontneedOnSharedMemfdFreesNothing) {
  Memfd m = MakeTouchedMemfd();
  const uint64_t rss_before = RssShmemBytes();
  ASSERT_EQ(::madvise(m.map.data(), kBytes, MADV_DONTNEED), 0);
  // The mapping is gone (RSS drops) but the pages stay in the memfd...
  EXPECT_LT(RssShmemBytes() + kBytes - kSlack, rss_before);
  EXPECT_GE(AllocatedBytes(m.fd.get()), kBytes);
  // ...with their content: nothing was freed.
  EXPECT_EQ(m.map.data()[kBytes / 2], 0xa5);
}

TEST(MemfdReleaseTest, PunchHoleFreesTheMemfdPages) {
  Memfd m = MakeTouchedMemfd();
  auto backend = MemfdBalloonBackend::Create({{0, kBytes, m.fd.get(), 0, m.map.data(), 4096}},
                                             MemfdBalloonBackend::Method::kPunchHole);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const uint64_t rss_before = RssShmemBytes();
  auto released = (*backend)->Release(0, kBytes);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, kBytes);
  EXPECT_LT(AllocatedBytes(m.fd.get()), kSlack);
  EXPECT_LT(RssShmemBytes() + kBytes - kSlack, rss_before);
  EXPECT_EQ(m.map.data()[kBytes / 2], 0);  // the guest reads zeros afterwards
}

TEST(MemfdReleaseTest, MadvRemoveFreesTheMemfdPages) {
  Memfd m = MakeTouchedMemfd();
  auto backend = MemfdBalloonBackend::Create({{0, kBytes, m.fd.get(), 0, m.map.data(), 4096}},
                                             MemfdBalloonBackend::Method::kMadvRemove);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const uint64_t rss_before = RssShmemBytes();
  ASSERT_TRUE((*backend)->Release(0, kBytes).ok());
  EXPECT_LT(AllocatedBytes(m.fd.get()), kSlack);
  EXPECT_LT(RssShmemBytes() + kBytes - kSlack, rss_before);
  EXPECT_EQ(m.map.data()[0], 0);
}

TEST(MemfdReleaseTest, BackendOverGuestMemoryReleasesOnlyRam) {
  auto mem = memory::MemfdGuestMemory::Create({{0, 8 << 20}, {16 << 20, 8 << 20}}, {});
  ASSERT_TRUE(mem.ok()) << mem.status();
  ASSERT_TRUE((*mem)->Fill(0, 0x5a, 8 << 20).ok());
  ASSERT_TRUE((*mem)->Fill(16 << 20, 0x5a, 8 << 20).ok());
  auto backend = MemfdBalloonBackend::ForGuestMemory(**mem);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_EQ((*backend)->releasable().size(), 2u);
  const uint64_t resident = (*mem)->ResidentBytes().value();
  ASSERT_TRUE((*backend)->Release(16 << 20, 1 << 20).ok());
  EXPECT_EQ((*mem)->ResidentBytes().value(), resident - (1 << 20));
  EXPECT_EQ(AllocatedBytes((*mem)->RegionFd(1)), 7u << 20);
  // Outside RAM, across a region's end, unaligned: refused, nothing freed.
  EXPECT_FALSE((*backend)->Release(8 << 20, 4096).ok());
  EXPECT_FALSE((*backend)->Release((8 << 20) - 4096, 8192).ok());
  EXPECT_FALSE((*backend)->Release(100, 4096).ok());
  EXPECT_EQ((*mem)->ResidentBytes().value(), resident - (1 << 20));
}

}  // namespace
}  // namespace dsec::devices
