// SPDX-License-Identifier: Apache-2.0
// virtio-balloon on real KVM: the test guest's driver (guest-kernel/README.md,
// `balloon`, `balloon-pfn`, and the balloon service behind `touch`, `idle`
// and `phases`) inflates to the target the monitor sets, and the monitor
// releases the inflated pages (holes punched in the guest-RAM memfd, seen as
// fewer resident bytes), deflating gives the pages back to the guest;
// hostile inflate requests are refused. The service also reports free pages
// (released on the host), sends statistics, and deflates when the guest runs
// out of memory.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/balloon/balloon_control.h"
#include "devices/balloon/balloon_spec.h"
#include "gtest/gtest.h"
#include "tests/integration/test_support.h"
#include "tests/integration/virtio_test_util.h"
#include "vmm/vm/virtio_devices.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

using dsec::testing::FirstReportOf;
using dsec::testing::ReportsOf;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kPage = 4096;

// Bytes the guest-RAM memfds hold on the host (st_blocks): what punching
// holes frees, whether or not the monitor maps the pages.
uint64_t AllocatedBytes(const Vm& vm) {
  uint64_t total = 0;
  for (size_t i = 0; i < vm.memory().regions().size(); ++i) {
    struct stat st {};
    if (::fstat(vm.memory().RegionFd(i), &st) != 0) {
      ADD_FAILURE() << "fstat(guest RAM memfd) failed";
      return 0;
    }
    total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

// Checks the `phases` console protocol (the reclaim benchmark parses it):
// exactly four `phase name=<touch|free|hot|idle> ms=<N>` lines in order, then
// the result line with its five keys. Returns the result.
std::optional<dsec::testing::Report> CheckPhases(const std::vector<std::string>& lines) {
  const std::vector<dsec::testing::Report> phases = ReportsOf(lines, "phase");
  const char* const kNames[] = {"touch", "free", "hot", "idle"};
  EXPECT_EQ(phases.size(), 4u);
  for (size_t i = 0; i < phases.size() && i < 4; ++i) {
    EXPECT_EQ(phases[i].Get("name"), kNames[i]);
    EXPECT_EQ(phases[i].fields.size(), 2u) << "phase line " << i;
    EXPECT_FALSE(phases[i].Get("ms").empty());
  }
  for (const std::string& line : lines) {
    if (line.rfind("phase ", 0) == 0) {
      EXPECT_TRUE(line.rfind("phase name=", 0) == 0 && line.find(" ms=") != std::string::npos)
          << line;
    }
  }
  auto result = FirstReportOf(lines, "result");
  EXPECT_TRUE(result.has_value());
  if (!result) return std::nullopt;
  EXPECT_EQ(result->Get("workload"), "phases");
  for (const char* key : {"touch_ms", "hot_ms", "idle_ms", "balloon_pages", "reported_pages"}) {
    EXPECT_FALSE(result->Get(key).empty()) << key;
  }
  EXPECT_EQ(result->fields.size(), 6u);
  if (phases.size() == 4) {
    EXPECT_EQ(result->GetU64("touch_ms"), phases[0].GetU64("ms"));
    EXPECT_EQ(result->GetU64("hot_ms"), phases[2].GetU64("ms"));
    EXPECT_EQ(result->GetU64("idle_ms"), phases[3].GetU64("ms"));
  }
  return result;
}

class BalloonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }

  static VmConfig Config(const std::string& workload, uint64_t target_mib, uint64_t mem_mib = 128,
                         bool balloon = true) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "console=ttyS0 testguest.run=" + workload;
    c.mem_mib = mem_mib;
    c.console.kind = ConsoleConfig::Kind::kNone;
    c.timeout_ms = 60'000;
    if (balloon) c.devices.push_back(devices::BalloonSpec::Make(target_mib));
    return c;
  }

  // Runs the VM to its end; returns it (still holding guest memory and the
  // device) after checking a clean exit and a `result` line.
  static std::unique_ptr<Vm> RunToEnd(const VmConfig& config) {
    auto vm = Vm::Create(config);
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return nullptr;
    EXPECT_TRUE((*vm)->Start().ok());
    VmStats stats = (*vm)->Wait();
    EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
    EXPECT_EQ(stats.stop.guest_exit_code, 0u);
    for (const std::string& line : (*vm)->TestMessages()) {
      if (line.rfind("error", 0) == 0) ADD_FAILURE() << line;
    }
    return std::move(*vm);
  }
};

TEST_F(BalloonTest, InflatingReleasesHostMemory) {
  constexpr uint64_t kTouchMib = 64;
  constexpr uint64_t kTargetMib = 48;
  constexpr uint64_t kTargetPages = kTargetMib * kMiB / kPage;

  // Same guest work, balloon target 0: the baseline residency.
  std::unique_ptr<Vm> base = RunToEnd(Config("balloon:" + std::to_string(kTouchMib), 0));
  ASSERT_NE(base, nullptr);
  auto base_result = FirstReportOf(base->TestMessages(), "result");
  ASSERT_TRUE(base_result.has_value());
  EXPECT_EQ(base_result->GetU64("inflated"), 0u);
  auto base_resident = base->memory().ResidentBytes();
  ASSERT_TRUE(base_resident.ok()) << base_resident.status();
  EXPECT_GE(*base_resident, kTouchMib * kMiB);
  base.reset();

  std::unique_ptr<Vm> vm = RunToEnd(Config("balloon:" + std::to_string(kTouchMib), kTargetMib));
  ASSERT_NE(vm, nullptr);
  auto result = FirstReportOf(vm->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("workload"), "balloon");
  EXPECT_EQ(result->GetU64("target_pages"), kTargetPages);
  EXPECT_EQ(result->GetU64("actual_pages"), kTargetPages);
  EXPECT_EQ(result->GetU64("inflated"), kTargetPages);

  devices::BalloonControl* balloon = vm->virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(balloon, nullptr);
  EXPECT_EQ(balloon->target_pages(), kTargetPages);
  EXPECT_EQ(balloon->actual_pages(), kTargetPages);
  EXPECT_EQ(balloon->balloon_pages(), kTargetPages);
  const devices::BalloonMetrics m = balloon->metrics();
  EXPECT_EQ(m.inflated_pages, kTargetPages);
  EXPECT_EQ(m.released_bytes, kTargetMib * kMiB);
  EXPECT_EQ(m.refused_total(), 0u);
  EXPECT_EQ(m.release_errors, 0u);

  auto resident = vm->memory().ResidentBytes();
  ASSERT_TRUE(resident.ok()) << resident.status();
  const int64_t dropped = static_cast<int64_t>(*base_resident) - static_cast<int64_t>(*resident);
  std::printf("resident: %llu KiB without balloon, %llu KiB with a %llu MiB balloon\n",
              static_cast<unsigned long long>(*base_resident / 1024),
              static_cast<unsigned long long>(*resident / 1024),
              static_cast<unsigned long long>(kTargetMib));
  // The inflated pages were all touched (the guest reuses its freed burst
  // first); a few MiB of slack for the driver's own buffers.
  EXPECT_GE(dropped, static_cast<int64_t>((kTargetMib - 4) * kMiB));
  EXPECT_LE(dropped, static_cast<int64_t>((kTargetMib + 4) * kMiB));
}

TEST_F(BalloonTest, DeflatingGivesPagesBack) {
  constexpr uint64_t kTargetPages = 48 * kMiB / kPage;
  auto observed = dsec::testing::ObservedVm::Start(Config("balloon-cycle:64", 48));
  ASSERT_TRUE(observed.ok()) << observed.status();
  dsec::testing::ObservedVm& o = **observed;
  devices::BalloonControl* balloon = o.vm().virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(balloon, nullptr);
  // The guest holds the inflated balloon until the target drops. Wait for
  // its `balloon reached` line, not for the host's page count: the count is
  // complete before the guest has re-read the target, and a target lowered
  // in between is followed at once (peak_pages would be 0).
  auto reached = o.WaitForLine("balloon reached", 30'000);
  ASSERT_TRUE(reached.has_value());
  EXPECT_NE(reached->find(" actual_pages=" + std::to_string(kTargetPages)), std::string::npos)
      << *reached;
  EXPECT_EQ(balloon->balloon_pages(), kTargetPages);
  auto inflated_resident = o.vm().memory().ResidentBytes();
  ASSERT_TRUE(inflated_resident.ok()) << inflated_resident.status();
  balloon->SetTargetPages(0);
  VmStats stats = o.Wait();
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  ASSERT_EQ(stats.stop.guest_exit_code, 0u);
  auto result = FirstReportOf(o.Messages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("workload"), "balloon-cycle");
  EXPECT_EQ(result->GetU64("peak_pages"), kTargetPages);
  EXPECT_EQ(result->GetU64("actual_pages"), 0u);
  EXPECT_EQ(result->GetU64("deflated"), kTargetPages);
  EXPECT_EQ(result->GetU64("retouched"), kTargetPages);
  const devices::BalloonMetrics m = balloon->metrics();
  EXPECT_EQ(m.inflated_pages, kTargetPages);
  EXPECT_EQ(m.deflated_pages, kTargetPages);
  EXPECT_EQ(m.refused_total(), 0u);
  EXPECT_EQ(balloon->balloon_pages(), 0u);
  // The guest wrote every deflated page: the host backs them again.
  auto resident = o.vm().memory().ResidentBytes();
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_GE(*resident, *inflated_resident + (48 - 4) * kMiB);
}

TEST_F(BalloonTest, PagesOutsideRamAreRefused) {
  // PFN 0xC0000 is 3 GiB: the MMIO hole, not RAM. Sent twice.
  std::unique_ptr<Vm> vm = RunToEnd(Config("balloon-pfn:786432", 0));
  ASSERT_NE(vm, nullptr);
  auto result = FirstReportOf(vm->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("workload"), "balloon-pfn");
  const devices::BalloonMetrics m = vm->virtio()->Find<devices::BalloonControl>()->metrics();
  // The first copy is not RAM; the repeat is refused as a duplicate.
  EXPECT_EQ(m.refused_not_ram, 1u);
  EXPECT_EQ(m.refused_total(), 2u);
  EXPECT_EQ(m.inflated_pages, 0u);
  EXPECT_EQ(m.released_bytes, 0u);
  EXPECT_EQ(vm->virtio()->Find<devices::BalloonControl>()->balloon_pages(), 0u);
}

TEST_F(BalloonTest, RepeatedPageIsInflatedOnce) {
  // PFN 0x1000 is 16 MiB: RAM. The second copy in the buffer is refused.
  std::unique_ptr<Vm> vm = RunToEnd(Config("balloon-pfn:4096", 0));
  ASSERT_NE(vm, nullptr);
  const devices::BalloonMetrics m = vm->virtio()->Find<devices::BalloonControl>()->metrics();
  EXPECT_EQ(m.inflated_pages, 1u);
  EXPECT_EQ(m.refused_duplicate, 1u);
  EXPECT_EQ(m.released_bytes, kPage);
  EXPECT_EQ(vm->virtio()->Find<devices::BalloonControl>()->balloon_pages(), 1u);
}

TEST_F(BalloonTest, PhasesWithoutBalloonKeepTheirMemory) {
  constexpr uint64_t kTouchMib = 64;
  std::unique_ptr<Vm> vm = RunToEnd(Config("phases:64,8,20,1", 0, 128, /*balloon=*/false));
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(vm->virtio()->Find<devices::BalloonControl>(), nullptr);
  auto result = CheckPhases(vm->TestMessages());
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->GetU64("balloon_pages"), 0u);
  EXPECT_EQ(result->GetU64("reported_pages"), 0u);
  // One second of idle, timed by the TSC (10 ms ticks, calibrated).
  EXPECT_GE(result->GetU64("idle_ms"), 900u);
  EXPECT_LE(result->GetU64("idle_ms"), 2000u);
  // Freed pages stay backed: nobody told the host.
  const uint64_t allocated = AllocatedBytes(*vm);
  std::printf("phases without balloon: memfd holds %llu KiB\n",
              static_cast<unsigned long long>(allocated / 1024));
  EXPECT_GE(allocated, kTouchMib * kMiB);
}

TEST_F(BalloonTest, FreePageReportingReleasesHostMemory) {
  constexpr uint64_t kTouchMib = 128;
  constexpr uint64_t kHotMib = 8;
  auto observed = dsec::testing::ObservedVm::Start(Config("phases:128,8,20,3", 0, 256));
  ASSERT_TRUE(observed.ok()) << observed.status();
  dsec::testing::ObservedVm& o = **observed;
  ASSERT_TRUE(o.WaitForLine("phase name=touch", 15'000).has_value());
  const uint64_t touched = AllocatedBytes(o.vm());
  VmStats stats = o.Wait();
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  ASSERT_EQ(stats.stop.guest_exit_code, 0u);
  const std::vector<std::string> lines = o.Messages();
  for (const std::string& line : lines) {
    if (line.rfind("error", 0) == 0) ADD_FAILURE() << line;
  }
  auto result = CheckPhases(lines);
  ASSERT_TRUE(result.has_value());
  // Everything freed but the last < 4 MiB (the reporting threshold).
  const uint64_t reported = result->GetU64("reported_pages");
  EXPECT_GE(reported, (kTouchMib - kHotMib - 4) * kMiB / kPage);
  EXPECT_LE(reported, kTouchMib * kMiB / kPage);
  EXPECT_EQ(result->GetU64("balloon_pages"), 0u);

  devices::BalloonControl* balloon = o.vm().virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(balloon, nullptr);
  const devices::BalloonMetrics m = balloon->metrics();
  EXPECT_EQ(m.reported_pages, reported);
  EXPECT_EQ(m.reported_released_bytes, reported * kPage);
  EXPECT_EQ(m.refused_total(), 0u);
  EXPECT_EQ(m.release_errors, 0u);
  EXPECT_EQ(m.bad_requests, 0u);
  const uint64_t allocated = AllocatedBytes(o.vm());
  std::printf("free page reporting: memfd held %llu KiB after the touch phase, %llu KiB at the end "
              "(%llu pages reported)\n",
              static_cast<unsigned long long>(touched / 1024),
              static_cast<unsigned long long>(allocated / 1024),
              static_cast<unsigned long long>(reported));
  // The hot set, the guest's image and buffers, and < 4 MiB unreported;
  // without reporting all 128 MiB stay (PhasesWithoutBalloonKeepTheirMemory).
  // `touched` is read as the touch line arrives, by which time reporting may
  // have begun: informational only.
  EXPECT_LE(allocated, (kHotMib + 20) * kMiB);
  EXPECT_GT(touched, allocated);
}

TEST_F(BalloonTest, StatisticsReachTheHostAndFollowTheBalloon) {
  constexpr uint64_t kTargetPages = 32 * kMiB / kPage;
  auto observed = dsec::testing::ObservedVm::Start(Config("idle:0", 0));
  ASSERT_TRUE(observed.ok()) << observed.status();
  dsec::testing::ObservedVm& o = **observed;
  auto start = o.WaitForLine("idle start", 10'000);
  ASSERT_TRUE(start.has_value());
  EXPECT_NE(start->find(" balloon=1 "), std::string::npos) << *start;
  devices::BalloonControl* balloon = o.vm().virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(balloon, nullptr);
  EXPECT_TRUE(balloon->stats_enabled());
  ASSERT_TRUE(dsec::testing::SpinUntil([&] { return balloon->GetStats().has_value(); }, 5'000));
  using Tag = devices::BalloonStatTag;
  const devices::BalloonStatsSample s1 = *balloon->GetStats();
  for (Tag t : {Tag::kSwapIn, Tag::kSwapOut, Tag::kFreeMemory, Tag::kTotalMemory,
                Tag::kAvailableMemory, Tag::kDiskCaches}) {
    EXPECT_TRUE(s1.stats.Has(t)) << static_cast<int>(t);
  }
  EXPECT_FALSE(s1.stats.Has(Tag::kMajorFaults));  // not tracked by the guest
  EXPECT_EQ(s1.stats.Get(Tag::kSwapIn), 0u);
  EXPECT_EQ(s1.stats.Get(Tag::kDiskCaches), 0u);
  const uint64_t total = s1.stats.Get(Tag::kTotalMemory);
  const uint64_t free1 = s1.stats.Get(Tag::kFreeMemory);
  EXPECT_GE(total, 120 * kMiB);
  EXPECT_LE(total, 128 * kMiB);
  EXPECT_GE(free1, 100 * kMiB);  // the guest's image and buffers: a few MiB
  EXPECT_LE(free1, total);
  EXPECT_EQ(s1.stats.Get(Tag::kAvailableMemory), free1);

  // The idle guest halts between ticks: its vCPU thread then sleeps in the
  // kernel (state S) instead of spinning, which a busy guest's never does.
  // A thread's state changes without an event: it is re-read until a
  // deadline.
  const std::vector<pid_t> tids = o.vm().VcpuThreadIds();
  ASSERT_FALSE(tids.empty());
  using dsec::testing::ThreadState;
  EXPECT_TRUE(dsec::testing::SpinUntil([&] { return ThreadState(tids[0]) == 'S'; }, 5'000))
      << "the idle guest's vCPU thread never slept (state " << ThreadState(tids[0]) << ")";

  // The service follows a new target while idle; fresh stats show it.
  balloon->SetTargetPages(kTargetPages);
  ASSERT_TRUE(dsec::testing::SpinUntil(
      [&] { return balloon->balloon_pages() == kTargetPages && balloon->actual_pages() == kTargetPages; },
      5'000));
  balloon->RequestStats();
  ASSERT_TRUE(dsec::testing::SpinUntil(
      [&] { return balloon->GetStats()->sequence > s1.sequence; }, 5'000));
  const uint64_t free2 = balloon->GetStats()->stats.Get(Tag::kFreeMemory);
  EXPECT_EQ(free2 + kTargetPages * kPage, free1);

  balloon->SetTargetPages(0);
  ASSERT_TRUE(dsec::testing::SpinUntil([&] { return balloon->balloon_pages() == 0; }, 5'000));
  const uint64_t seq2 = balloon->GetStats()->sequence;
  balloon->RequestStats();
  ASSERT_TRUE(dsec::testing::SpinUntil(
      [&] { return balloon->GetStats()->sequence > seq2; }, 5'000));
  EXPECT_EQ(balloon->GetStats()->stats.Get(Tag::kFreeMemory), free1);
  const devices::BalloonMetrics m = balloon->metrics();
  EXPECT_GE(m.stats_updates, 3u);
  EXPECT_EQ(m.inflated_pages, kTargetPages);
  EXPECT_EQ(m.deflated_pages, kTargetPages);
  EXPECT_EQ(m.deflated_unrequested_pages, 0u);
  EXPECT_EQ(m.refused_total(), 0u);

  o.vm().RequestStop(StopReason::kHostRequest, "test done");
  VmStats stats = o.Wait();
  EXPECT_EQ(stats.stop.reason, StopReason::kHostRequest) << stats.stop.detail;
  for (const std::string& line : o.Messages()) {
    if (line.rfind("error", 0) == 0) ADD_FAILURE() << line;
  }
}

TEST_F(BalloonTest, DeflatesOnOomWhenTheGuestNeedsThePages) {
  constexpr uint64_t kTouchMib = 64;
  constexpr uint64_t kTargetPages = 127 * kMiB / kPage;
  constexpr uint64_t kTouchPages = kTouchMib * kMiB / kPage;
  // A target above the guest's free memory: the balloon takes every page it
  // can before `touch` starts, so each page touch needs comes from it.
  std::unique_ptr<Vm> vm = RunToEnd(Config("touch:" + std::to_string(kTouchMib), 127));
  ASSERT_NE(vm, nullptr);
  auto result = FirstReportOf(vm->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("workload"), "touch");
  EXPECT_EQ(result->GetU64("pages"), kTouchPages);
  const uint64_t oom = result->GetU64("oom_deflated");
  EXPECT_GE(oom, kTouchPages);
  EXPECT_LT(oom, kTouchPages + 256);  // deflated 256 pages at a time

  devices::BalloonControl* balloon = vm->virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(balloon, nullptr);
  const devices::BalloonMetrics m = balloon->metrics();
  std::printf("deflate on OOM: inflated %llu pages, deflated %llu on OOM, %llu left\n",
              static_cast<unsigned long long>(m.inflated_pages),
              static_cast<unsigned long long>(m.deflated_unrequested_pages),
              static_cast<unsigned long long>(balloon->balloon_pages()));
  EXPECT_GE(m.inflated_pages, 110 * kMiB / kPage);  // nearly all of the guest
  EXPECT_LT(m.inflated_pages, kTargetPages);        // more than it had free
  EXPECT_EQ(m.deflated_pages, oom);
  EXPECT_EQ(m.deflated_unrequested_pages, oom);
  EXPECT_EQ(balloon->balloon_pages(), m.inflated_pages - oom);
  EXPECT_EQ(result->GetU64("balloon_pages"), balloon->balloon_pages());
  EXPECT_EQ(balloon->actual_pages(), balloon->balloon_pages());
  EXPECT_EQ(balloon->target_pages(), kTargetPages);  // the host's wish is unchanged
  EXPECT_EQ(m.refused_total(), 0u);
}

}  // namespace
}  // namespace dsec::vm
