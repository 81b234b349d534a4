// SPDX-License-Identifier: Apache-2.0
// virtio-balloon on real KVM: the test guest's driver (guest-kernel/README.md,
// `balloon`, `balloon-pfn`) inflates to the target the monitor sets, and the
// monitor releases the inflated pages (holes punched in the guest-RAM memfd,
// seen as fewer resident bytes), deflating gives the pages back to the guest;
// hostile inflate requests are refused.
#include <cstdint>
#include <memory>
#include <string>

#include "devices/balloon/balloon_control.h"
#include "gtest/gtest.h"
#include "tests/integration/test_support.h"
#include "tests/integration/virtio_test_util.h"
#include "vmm/vm/virtio_devices.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

using dsec::testing::FirstReportOf;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kPage = 4096;

class BalloonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }

  static VmConfig Config(const std::string& workload, uint64_t target_mib) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "console=ttyS0 testguest.run=" + workload;
    c.mem_mib = 128;
    c.console.kind = ConsoleConfig::Kind::kNone;
    c.timeout_ms = 60'000;
    c.balloon = true;
    c.balloon_target_mib = target_mib;
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

  devices::BalloonControl* balloon = vm->virtio()->balloon();
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
  auto vm = Vm::Create(Config("balloon-cycle:64", 48));
  ASSERT_TRUE(vm.ok()) << vm.status();
  devices::BalloonControl* balloon = (*vm)->virtio()->balloon();
  ASSERT_NE(balloon, nullptr);
  ASSERT_TRUE((*vm)->Start().ok());
  // The guest holds the inflated balloon until the target drops.
  ASSERT_TRUE(dsec::testing::SpinUntil(
      [&] { return balloon->balloon_pages() == kTargetPages; }, 30'000));
  auto inflated_resident = (*vm)->memory().ResidentBytes();
  ASSERT_TRUE(inflated_resident.ok()) << inflated_resident.status();
  balloon->SetTargetPages(0);
  VmStats stats = (*vm)->Wait();
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  ASSERT_EQ(stats.stop.guest_exit_code, 0u);
  auto result = FirstReportOf((*vm)->TestMessages(), "result");
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
  auto resident = (*vm)->memory().ResidentBytes();
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
  const devices::BalloonMetrics m = vm->virtio()->balloon()->metrics();
  // The first copy is not RAM; the repeat is refused as a duplicate.
  EXPECT_EQ(m.refused_not_ram, 1u);
  EXPECT_EQ(m.refused_total(), 2u);
  EXPECT_EQ(m.inflated_pages, 0u);
  EXPECT_EQ(m.released_bytes, 0u);
  EXPECT_EQ(vm->virtio()->balloon()->balloon_pages(), 0u);
}

TEST_F(BalloonTest, RepeatedPageIsInflatedOnce) {
  // PFN 0x1000 is 16 MiB: RAM. The second copy in the buffer is refused.
  std::unique_ptr<Vm> vm = RunToEnd(Config("balloon-pfn:4096", 0));
  ASSERT_NE(vm, nullptr);
  const devices::BalloonMetrics m = vm->virtio()->balloon()->metrics();
  EXPECT_EQ(m.inflated_pages, 1u);
  EXPECT_EQ(m.refused_duplicate, 1u);
  EXPECT_EQ(m.released_bytes, kPage);
  EXPECT_EQ(vm->virtio()->balloon()->balloon_pages(), 1u);
}

}  // namespace
}  // namespace dsec::vm
