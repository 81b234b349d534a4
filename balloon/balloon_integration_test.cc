// SPDX-License-Identifier: Apache-2.0
// Integration tests on real memory of this process: the pagemap sampler over
// a real memfd (sees reads and writes, keeps content), and the controller's
// MADV_PAGEOUT into a zram swap device the test creates and always removes.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "balloon/host_memory.h"
#include "balloon/pagemap_sampler.h"
#include "balloon/reclaim_controller.h"
#include "balloon/zram_swap.h"
#include "gtest/gtest.h"
#include "base/mmap.h"
#include "platform/memory/memfd_guest_memory.h"

namespace dsec::balloon {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kChunk = 2 * kMiB;
constexpr uint64_t kRam = 64 * kMiB;

std::vector<HostRange> RamOf(const memory::GuestMemory& mem) {
  std::vector<HostRange> out;
  for (const auto& r : mem.regions()) out.push_back({reinterpret_cast<uint64_t>(r.host), r.size});
  return out;
}

TEST(PagemapSamplerIntegrationTest, SeesReadsAndWritesAndKeepsContent) {
  auto mem = memory::MemfdGuestMemory::Create({{0, kRam}}, {}).value();
  ASSERT_TRUE(mem->Fill(0, 0x3c, kRam).ok());
  auto ops = ProcSelfMemoryOps::Create().value();
  PagemapSamplerOptions o;
  o.cold_intervals = 2;
  auto sampler = PagemapSampler::Create(ops.get(), o).value();
  const std::vector<HostRange> ram = RamOf(*mem);
  ASSERT_TRUE(sampler->Track(1, ::getpid(), ram).ok());
  uint8_t* host = mem->regions()[0].host;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(sampler->Sample(1).ok());  // arm
  const auto t1 = std::chrono::steady_clock::now();
  // Reads of chunks 0-3, writes to chunks 4-7 (every page of them).
  volatile uint64_t sum = 0;
  for (uint64_t off = 0; off < 4 * kChunk; off += 4096) sum = sum + host[off];
  for (uint64_t off = 4 * kChunk; off < 8 * kChunk; off += 4096) host[off] = 0x3c;
  auto s = sampler->Sample(1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->hot_bytes, 8 * kChunk);
  EXPECT_EQ(sum, 0x3cu * 4 * kChunk / 4096);
  for (int i = 0; i < 2; ++i) {
    s = sampler->Sample(1);
    ASSERT_TRUE(s.ok());
  }
  EXPECT_EQ(s->hot_bytes, 0u);
  EXPECT_EQ(s->cold.size(), kRam / kChunk);  // idle for 2 intervals
  // MADV_DONTNEED on the shared memfd kept every byte resident and intact.
  EXPECT_EQ(mem->ResidentBytes().value(), kRam);
  std::vector<uint8_t> all(kRam);
  ASSERT_TRUE(mem->Read(0, all).ok());
  EXPECT_EQ(std::count(all.begin(), all.end(), 0x3c), static_cast<long>(kRam));
  std::printf("pagemap sampler over %llu MiB: one interval %.0f us, %llu pages unmapped so far\n",
              static_cast<unsigned long long>(kRam / kMiB),
              std::chrono::duration<double, std::micro>(t1 - t0).count(),
              static_cast<unsigned long long>(sampler->cost().unmapped_pages));
}

TEST(PagemapSamplerIntegrationTest, RefusesPrivateMappings) {
  auto ops = ProcSelfMemoryOps::Create().value();
  auto sampler = PagemapSampler::Create(ops.get(), {}).value();
  auto map = Mmap::Anonymous(4 * kMiB).value();
  const HostRange ram[] = {{reinterpret_cast<uint64_t>(map.data()), map.size()}};
  EXPECT_EQ(sampler->Track(1, ::getpid(), ram).code(), absl::StatusCode::kFailedPrecondition);
}

class MemfdVm : public ReclaimVm {
 public:
  explicit MemfdVm(memory::MemfdGuestMemory* mem) : mem_(mem) {}
  std::string name() const override { return "memfd"; }
  pid_t pid() const override { return ::getpid(); }
  devices::BalloonControl* balloon() override { return nullptr; }
  std::vector<HostRange> guest_ram() const override { return RamOf(*mem_); }
  absl::StatusOr<uint64_t> ResidentBytes() override { return mem_->ResidentBytes(); }

 private:
  memory::MemfdGuestMemory* mem_;
};

// Cold guest memory goes to swap and comes back on access (counted as a
// refault).
class OneColdRange : public WorkingSetSource {
 public:
  explicit OneColdRange(HostRange r) : r_(r) {}
  std::string_view name() const override { return "one-cold-range"; }
  absl::Status Track(uint64_t, pid_t, std::span<const HostRange>) override {
    return absl::OkStatus();
  }
  void Untrack(uint64_t) override {}
  absl::StatusOr<WorkingSetSample> Sample(uint64_t) override {
    WorkingSetSample s;
    if (once_) s.cold.push_back({r_, 9});
    once_ = false;
    return s;
  }

 private:
  HostRange r_;
  bool once_ = true;
};

TEST(PageoutIntegrationTest, ColdGuestMemoryGoesToZramAndRefaultsAreCounted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for zram and swapon";
  // Removed (swapoff, reset, hot_remove) when the test ends, even on failure.
  auto zram = ZramSwap::Create(128 * kMiB);
  if (!zram.ok()) GTEST_SKIP() << "zram swap not available on this host: " << zram.status();
  auto mem = memory::MemfdGuestMemory::Create({{0, kRam}}, {}).value();
  ASSERT_TRUE(mem->Fill(0, 0x77, kRam).ok());
  const HostRange cold{reinterpret_cast<uint64_t>(mem->regions()[0].host), 32 * kMiB};
  ReclaimControllerOptions o;
  o.knobs.aggressiveness = 1.0;
  o.knobs.max_slowdown = 1.0;
  auto controller = ReclaimController::Create(o, std::make_unique<OneColdRange>(cold),
                                              ProcSelfMemoryOps::Create().value())
                        .value();
  ASSERT_TRUE(controller->swap_available());
  auto vm = std::make_shared<MemfdVm>(mem.get());
  ASSERT_TRUE(controller->Register(vm).ok());
  ASSERT_TRUE(controller->Tick().ok());
  VmReclaimMetrics m = controller->Metrics().at(0);
  EXPECT_GE(m.reclaimed_bytes, 24 * kMiB);  // most of the 32 MiB (some may be busy)
  EXPECT_LE(mem->ResidentBytes().value(), kRam - 24 * kMiB);
  // The guest reads it again: swapped back in, content intact, counted.
  std::vector<uint8_t> back(8 * kMiB);
  ASSERT_TRUE(mem->Read(0, back).ok());
  EXPECT_EQ(std::count(back.begin(), back.end(), 0x77), static_cast<long>(back.size()));
  ASSERT_TRUE(controller->Tick().ok());
  m = controller->Metrics().at(0);
  EXPECT_GE(m.refault_bytes, 6 * kMiB);
  std::printf("paged out %llu MiB to zram, %llu MiB refaulted\n",
              static_cast<unsigned long long>(m.reclaimed_bytes / kMiB),
              static_cast<unsigned long long>(m.refault_bytes / kMiB));
}

TEST(ZramSwapIntegrationTest, IsSwappedOnAndRemovedOnDestruction) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for zram and swapon";
  auto zram = ZramSwap::Create(16 * kMiB);
  if (!zram.ok()) GTEST_SKIP() << "zram swap not available on this host: " << zram.status();
  const std::string dev = (*zram)->device();
  const std::string sys = "/sys/block/zram" + std::to_string((*zram)->id());
  auto swaps = ReadSwaps();
  ASSERT_TRUE(swaps.ok());
  EXPECT_GE(swaps->devices, 1);
  EXPECT_TRUE((*zram)->MmStat().ok());
  zram->reset();
  EXPECT_NE(::access(dev.c_str(), F_OK), 0) << dev << " left behind";
  EXPECT_NE(::access(sys.c_str(), F_OK), 0) << sys << " left behind";
}

}  // namespace
}  // namespace dsec::balloon
