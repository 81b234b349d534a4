// SPDX-License-Identifier: Apache-2.0
#include "balloon/reclaim_controller.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "balloon/fake_balloon_control.h"
#include "balloon/fake_host_memory.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"

namespace dsec::balloon {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int64_t kSec = 1'000'000'000;
constexpr uint64_t kBase = 0x10000000;

class FakeVm : public ReclaimVm {
 public:
  explicit FakeVm(FakeHostMemory* mem) : mem_(mem) {}
  std::string name() const override { return "fake"; }
  pid_t pid() const override { return ::getpid(); }
  devices::BalloonControl* balloon() override { return with_balloon ? &control : nullptr; }
  std::vector<HostRange> guest_ram() const override { return {{kBase, 64 * kMiB}}; }
  absl::StatusOr<uint64_t> ResidentBytes() override {
    return mem_->ResidentPages(kBase, 64 * kMiB) * 4096;
  }
  FakeBalloonControl control;
  bool with_balloon = true;

 private:
  FakeHostMemory* mem_;
};

// Scripted working-set samples.
class FakeSource : public WorkingSetSource {
 public:
  std::string_view name() const override { return "fake"; }
  absl::Status Track(uint64_t id, pid_t, std::span<const HostRange>) override {
    tracked.push_back(id);
    return absl::OkStatus();
  }
  void Untrack(uint64_t id) override { std::erase(tracked, id); }
  absl::StatusOr<WorkingSetSample> Sample(uint64_t) override { return next; }
  std::vector<uint64_t> tracked;
  WorkingSetSample next;
};

class ReclaimControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsec-swaps-XXXXXX";
    ASSERT_TRUE(ScopedFd(::mkstemp(tmpl)).valid());
    swaps_ = tmpl;
    SetSwap(false);
  }
  void TearDown() override {
    controller_.reset();
    ::unlink(swaps_.c_str());
  }
  void SetSwap(bool on) {
    std::ofstream out(swaps_);
    out << "Filename Type Size Used Priority\n";
    if (on) out << "/dev/zram9 partition 1048572 0 100\n";
  }
  void Start(ReclaimKnobs knobs = {}) {
    ReclaimControllerOptions o;
    o.knobs = knobs;
    o.clock = &clock_;
    o.proc_swaps = swaps_;
    auto mem = std::make_unique<FakeHostMemory>();
    mem_ = mem.get();
    auto source = std::make_unique<FakeSource>();
    source_ = source.get();
    controller_ = ReclaimController::Create(o, std::move(source), std::move(mem)).value();
    vm_ = std::make_shared<FakeVm>(mem_);
    mem_->Touch(kBase, 64 * kMiB);
    id_ = controller_->Register(vm_).value();
  }
  VmReclaimMetrics Metrics() { return controller_->Metrics().at(0); }

  std::string swaps_;
  FakeClock clock_{1000 * kSec};
  FakeHostMemory* mem_ = nullptr;
  FakeSource* source_ = nullptr;
  std::unique_ptr<ReclaimController> controller_;
  std::shared_ptr<FakeVm> vm_;
  uint64_t id_ = 0;
};

TEST_F(ReclaimControllerTest, SetsBalloonTargetFromGuestStatsAndAsksForMore) {
  ReclaimKnobs k;
  k.min_free_mib = 8;
  k.aggressiveness = 0.5;
  Start(k);
  EXPECT_EQ(source_->tracked, std::vector<uint64_t>{id_});
  vm_->control.GuestStats(40 * kMiB, 0, clock_.NowNs());
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_EQ(vm_->control.target, 16 * kMiB / 4096);
  EXPECT_EQ(vm_->control.stats_requests, 1);
  vm_->control.pages = vm_->control.target;  // the guest inflates
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_EQ(vm_->control.target_changes, 1);  // no fresh stats: no change
  EXPECT_EQ(Metrics().balloon_pages, 16 * kMiB / 4096);
  EXPECT_EQ(Metrics().resident_bytes, 64 * kMiB);
}

TEST_F(ReclaimControllerTest, NoPageoutWithoutSwap) {
  Start();
  source_->next.cold = {{{kBase, 8 * kMiB}, 5}};
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_FALSE(controller_->swap_available());
  EXPECT_EQ(mem_->advise_calls(MADV_PAGEOUT), 0u);
}

TEST_F(ReclaimControllerTest, PagesOutColdMemoryCountsReclaimAndRefaultsAndBacksOff) {
  ReclaimKnobs k;
  k.aggressiveness = 1.0;
  k.max_slowdown = 0.05;
  k.refault_cost_ns = 20'000;
  Start(k);
  SetSwap(true);
  mem_->set_swap(true);
  source_->next.cold = {{{kBase, 8 * kMiB}, 5}};
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_TRUE(controller_->swap_available());
  EXPECT_EQ(mem_->advise_calls(MADV_PAGEOUT), 1u);
  EXPECT_EQ(Metrics().reclaimed_bytes, 8 * kMiB);
  // The guest comes back to 4 MiB of it within a second: 1024 refaults/s *
  // 20 us = 2% slowdown, under the limit.
  source_->next.cold.clear();
  mem_->Touch(kBase, 4 * kMiB);
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_EQ(Metrics().refault_bytes, 4 * kMiB);
  EXPECT_EQ(Metrics().pageout_pauses, 0u);
  // All of the rest within 100 ms: 10240 refaults/s = 20%: pageout stops.
  source_->next.cold = {{{kBase + 32 * kMiB, 8 * kMiB}, 5}};
  mem_->Touch(kBase + 4 * kMiB, 4 * kMiB);
  clock_.AdvanceNs(kSec / 10);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_EQ(Metrics().refault_bytes, 8 * kMiB);
  EXPECT_EQ(Metrics().pageout_pauses, 1u);
  EXPECT_EQ(mem_->advise_calls(MADV_PAGEOUT), 1u);
  EXPECT_GT(Metrics().slowdown, 0.05);
}

TEST_F(ReclaimControllerTest, FirstTouchOfNeverResidentMemoryIsNoRefault) {
  ReclaimKnobs k;
  k.aggressiveness = 1.0;
  Start(k);
  SetSwap(true);
  mem_->set_swap(true);
  // 8 MiB the guest never touched (beyond the resident 64 MiB) looks cold,
  // plus 4 MiB that is resident.
  source_->next.cold = {{{kBase + 64 * kMiB, 8 * kMiB}, 5}, {{kBase, 4 * kMiB}, 5}};
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_EQ(Metrics().reclaimed_bytes, 4 * kMiB);
  // The guest now touches all 12 MiB for the first time / again: only the
  // 4 MiB that left memory are refaults.
  source_->next.cold.clear();
  mem_->Touch(kBase + 64 * kMiB, 8 * kMiB);
  mem_->Touch(kBase, 4 * kMiB);
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_EQ(Metrics().refault_bytes, 4 * kMiB);
}

TEST_F(ReclaimControllerTest, VmWithoutBalloonStillPagesOut) {
  ReclaimKnobs k;
  k.aggressiveness = 1.0;
  Start(k);
  vm_->with_balloon = false;
  SetSwap(true);
  mem_->set_swap(true);
  source_->next.cold = {{{kBase, 2 * kMiB}, 5}};
  clock_.AdvanceNs(kSec);
  ASSERT_TRUE(controller_->Tick().ok());
  EXPECT_EQ(Metrics().reclaimed_bytes, 2 * kMiB);
}

TEST_F(ReclaimControllerTest, UnregisterStopsTracking) {
  Start();
  ASSERT_TRUE(controller_->Unregister(id_).ok());
  EXPECT_TRUE(source_->tracked.empty());
  EXPECT_TRUE(controller_->Metrics().empty());
  EXPECT_EQ(controller_->Unregister(id_).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(controller_->Tick().ok());
}

TEST(ReclaimControllerCreateTest, RejectsBadKnobs) {
  ReclaimControllerOptions o;
  o.knobs.aggressiveness = 1.5;
  EXPECT_FALSE(ReclaimController::Create(o, nullptr, std::make_unique<FakeHostMemory>()).ok());
  EXPECT_FALSE(ReclaimController::Create({}, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace dsec::balloon
