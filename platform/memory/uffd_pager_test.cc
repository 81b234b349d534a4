// SPDX-License-Identifier: Apache-2.0
// The lazy-restore pager on plain memory (no KVM): pages come in from the
// source on first touch, from user code and from the kernel's own copies,
// concurrently; prefetched pages never fault; a dropped page reads zeros;
// the pages served are reported as runs of memory-file offsets.
#include "platform/memory/uffd_pager.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "base/mmap.h"
#include "gtest/gtest.h"

namespace dsec::memory {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPagesA = 64, kPagesB = 32;
constexpr uint64_t kOffsetB = 1 << 20;  // range B's memory-file offset

uint8_t Pattern(uint64_t file_offset) {
  return static_cast<uint8_t>((file_offset * 2654435761u) >> 11) | 1;  // never 0
}

class UffdPagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint64_t pages : {kPagesA, kPagesB}) {
      auto src = Mmap::Anonymous(pages * kPage);
      auto dst = Mmap::Anonymous(pages * kPage, PROT_READ | PROT_WRITE);
      ASSERT_TRUE(src.ok() && dst.ok());
      source_.push_back(std::move(*src));
      target_.push_back(std::move(*dst));
    }
    for (uint64_t i = 0; i < kPagesA * kPage; ++i) source_[0].data()[i] = Pattern(i);
    for (uint64_t i = 0; i < kPagesB * kPage; ++i) source_[1].data()[i] = Pattern(kOffsetB + i);
  }

  absl::StatusOr<std::unique_ptr<UserfaultPager>> MakePager() {
    return UserfaultPager::Create(
        {{target_[0].data(), source_[0].data(), kPagesA * kPage, 0},
         {target_[1].data(), source_[1].data(), kPagesB * kPage, kOffsetB}});
  }

  bool PageMatches(int range, uint64_t page) {
    const uint64_t base = range == 0 ? 0 : kOffsetB;
    const uint8_t* p = target_[range].data() + page * kPage;
    for (uint64_t i = 0; i < kPage; ++i) {
      if (p[i] != Pattern(base + page * kPage + i)) return false;
    }
    return true;
  }

  std::vector<Mmap> source_, target_;
};

#define MAKE_PAGER_OR_SKIP(p)                                                      \
  auto made_##p = MakePager();                                                     \
  if (!made_##p.ok() && absl::IsFailedPrecondition(made_##p.status())) {           \
    GTEST_SKIP() << made_##p.status();                                             \
  }                                                                                \
  ASSERT_TRUE(made_##p.ok()) << made_##p.status();                                 \
  std::unique_ptr<UserfaultPager> p = std::move(*made_##p)

TEST_F(UffdPagerTest, PagesComeFromTheSourceOnFirstTouchAndAreRecorded) {
  MAKE_PAGER_OR_SKIP(pager);
  ASSERT_TRUE(pager->Start().ok());
  EXPECT_TRUE(PageMatches(0, 3));
  EXPECT_TRUE(PageMatches(1, 5));
  EXPECT_TRUE(PageMatches(1, 6));
  EXPECT_EQ(pager->stats().faults, 3u);
  // Present now: a write takes no fault and stays.
  target_[0].data()[3 * kPage] = 0;
  EXPECT_EQ(target_[0].data()[3 * kPage], 0);
  EXPECT_EQ(pager->stats().faults, 3u);
  std::vector<UserfaultPager::Run> touched = pager->Touched();
  ASSERT_EQ(touched.size(), 2u);
  EXPECT_EQ(touched[0].offset, 3 * kPage);
  EXPECT_EQ(touched[0].length, kPage);
  EXPECT_EQ(touched[1].offset, kOffsetB + 5 * kPage);
  EXPECT_EQ(touched[1].length, 2 * kPage);
  pager->Stop();
  EXPECT_TRUE(pager->thread_status().ok()) << pager->thread_status();
}

TEST_F(UffdPagerTest, TheKernelsOwnCopiesIntoGuestRamAreServedToo) {
  // KVM and the kernel touch guest RAM on the guest's behalf (copy_to_user
  // here, as a read(2) into it): the pager must serve those faults, not
  // only the user-mode ones.
  MAKE_PAGER_OR_SKIP(pager);
  ASSERT_TRUE(pager->Start().ok());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::vector<uint8_t> data(100, 0xAB);
  ASSERT_EQ(::write(fds[1], data.data(), data.size()), 100);
  uint8_t* at = target_[0].data() + 7 * kPage + 50;
  ASSERT_EQ(::read(fds[0], at, 100), 100);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(at[0], 0xAB);
  EXPECT_EQ(at[99], 0xAB);
  // The rest of the page is the source's: the page came in before the copy.
  EXPECT_EQ(target_[0].data()[7 * kPage], Pattern(7 * kPage));
  EXPECT_EQ(target_[0].data()[7 * kPage + 150], Pattern(7 * kPage + 150));
  EXPECT_EQ(pager->stats().faults, 1u);
}

TEST_F(UffdPagerTest, ManyThreadsFaultingAtOnceEachSeeTheSource) {
  MAKE_PAGER_OR_SKIP(pager);
  ASSERT_TRUE(pager->Start().ok());
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t page = 0; page < kPagesA; ++page) {
        if (!PageMatches(0, (page + t * 16) % kPagesA)) ++bad[t];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_EQ(pager->stats().faults, kPagesA);
  // Several threads' messages for one page are one fault, not a page dropped.
  EXPECT_EQ(pager->stats().zero_faults, 0u);
  std::vector<UserfaultPager::Run> touched = pager->Touched();
  ASSERT_EQ(touched.size(), 1u);
  EXPECT_EQ(touched[0].length, kPagesA * kPage);
}

TEST_F(UffdPagerTest, PrefetchedPagesNeverFault) {
  MAKE_PAGER_OR_SKIP(pager);
  ASSERT_TRUE(pager->Prefetch({{0, 8 * kPage}, {kOffsetB + 30 * kPage, 2 * kPage}}).ok());
  // Overlapping a run already in: skipped, not an error.
  ASSERT_TRUE(pager->Prefetch({{4 * kPage, 8 * kPage}}).ok());
  EXPECT_EQ(pager->stats().prefetched_pages, 14u);
  ASSERT_TRUE(pager->Start().ok());
  for (uint64_t page = 0; page < 12; ++page) EXPECT_TRUE(PageMatches(0, page)) << page;
  EXPECT_TRUE(PageMatches(1, 31));
  EXPECT_EQ(pager->stats().faults, 0u);
  EXPECT_TRUE(PageMatches(0, 12));
  EXPECT_EQ(pager->stats().faults, 1u);
}

TEST_F(UffdPagerTest, PrefetchRefusesRunsOutsideOrUnaligned) {
  MAKE_PAGER_OR_SKIP(pager);
  for (UserfaultPager::Run bad : std::vector<UserfaultPager::Run>{
           {kPagesA * kPage, kPage},            // in the gap between the ranges
           {kOffsetB + 31 * kPage, 2 * kPage},  // runs past range B
           {100, kPage},                        // unaligned offset
           {0, 100},                            // unaligned length
           {0, 0},                              // empty
           {~0ull - kPage + 1, kPage}}) {       // wraps
    absl::Status s = pager->Prefetch({bad});
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad.offset << "+" << bad.length << ": " << s;
  }
  EXPECT_EQ(pager->stats().prefetched_pages, 0u);
}

TEST_F(UffdPagerTest, APageDroppedAfterItCameInReadsZeros) {
  MAKE_PAGER_OR_SKIP(pager);
  ASSERT_TRUE(pager->Start().ok());
  EXPECT_TRUE(PageMatches(0, 9));
  ASSERT_EQ(::madvise(target_[0].data() + 9 * kPage, kPage, MADV_DONTNEED), 0);
  EXPECT_EQ(target_[0].data()[9 * kPage], 0);
  EXPECT_EQ(target_[0].data()[10 * kPage - 1], 0);
  EXPECT_EQ(pager->stats().faults, 1u);
  EXPECT_EQ(pager->stats().zero_faults, 1u);
}

TEST_F(UffdPagerTest, APostedCallRunsOnThePagersThreadAndItsErrorEndsIt) {
  MAKE_PAGER_OR_SKIP(pager);
  std::atomic<int> errors{0};
  ASSERT_TRUE(pager->Start([&](const absl::Status&) { ++errors; }).ok());
  const pid_t caller = ::gettid();
  std::atomic<pid_t> ran_on{0};
  pager->PostToThread([&] {
    ran_on = ::gettid();
    return absl::OkStatus();
  });
  EXPECT_TRUE(PageMatches(0, 1));
  for (int i = 0; i < 1000 && ran_on.load() == 0; ++i) ::usleep(1000);
  EXPECT_NE(ran_on.load(), 0);
  EXPECT_NE(ran_on.load(), caller);
  pager->PostToThread([] { return absl::PermissionDeniedError("jail refused"); });
  for (int i = 0; i < 1000 && errors.load() == 0; ++i) ::usleep(1000);
  EXPECT_EQ(errors.load(), 1);
  // Nothing serves faults now: a touch gets an empty page, never a hang.
  EXPECT_EQ(target_[0].data()[20 * kPage], 0);
  pager->Stop();
  EXPECT_TRUE(absl::IsPermissionDenied(pager->thread_status())) << pager->thread_status();
}

TEST_F(UffdPagerTest, RunsAcrossRangesAdjacentInTheFileAreRecordedAndPrefetchedWhole) {
  // Two ranges back to back in the file (as a VM's regions are in a
  // snapshot's memory): the pages at their border make one run, which the
  // next restore's prefetch must take.
  auto made = UserfaultPager::Create(
      {{target_[0].data(), source_[0].data(), kPagesA * kPage, 0},
       {target_[1].data(), source_[1].data(), kPagesB * kPage, kPagesA * kPage}});
  if (!made.ok() && absl::IsFailedPrecondition(made.status())) GTEST_SKIP() << made.status();
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE((*made)->Start().ok());
  (void)*static_cast<volatile uint8_t*>(target_[0].data() + (kPagesA - 1) * kPage);
  (void)*static_cast<volatile uint8_t*>(target_[1].data());
  std::vector<UserfaultPager::Run> touched = (*made)->Touched();
  ASSERT_EQ(touched.size(), 1u);
  EXPECT_EQ(touched[0].offset, (kPagesA - 1) * kPage);
  EXPECT_EQ(touched[0].length, 2 * kPage);
  (*made)->Stop();
  made->reset();
  auto fresh_a = Mmap::Anonymous(kPagesA * kPage);
  auto fresh_b = Mmap::Anonymous(kPagesB * kPage);
  ASSERT_TRUE(fresh_a.ok() && fresh_b.ok());
  auto next = UserfaultPager::Create(
      {{fresh_a->data(), source_[0].data(), kPagesA * kPage, 0},
       {fresh_b->data(), source_[1].data(), kPagesB * kPage, kPagesA * kPage}});
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE((*next)->Prefetch(touched).ok());
  EXPECT_EQ((*next)->stats().prefetched_pages, 2u);
  EXPECT_TRUE((*next)->Served(0, kPagesA - 1));
  EXPECT_TRUE((*next)->Served(1, 0));
  EXPECT_FALSE((*next)->Served(1, 1));
  EXPECT_EQ(fresh_a->data()[(kPagesA - 1) * kPage], Pattern((kPagesA - 1) * kPage));
  EXPECT_EQ(fresh_b->data()[0], Pattern(kOffsetB));
  // A run that goes on past the last range is refused.
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*next)->Prefetch({{(kPagesA + kPagesB - 1) * kPage, 2 * kPage}})));
}

TEST_F(UffdPagerTest, PrefetchOverPagesAlreadyInGoesOnAfterManyPartialCopies) {
  // Every other page in first, then the whole range: the kernel stops each
  // copy at the next page that is there (a partial copy), many times over.
  MAKE_PAGER_OR_SKIP(pager);
  std::vector<UserfaultPager::Run> every_other;
  for (uint64_t p = 0; p < kPagesA; p += 2) every_other.push_back({p * kPage, kPage});
  ASSERT_TRUE(pager->Prefetch(every_other).ok());
  absl::Status s = pager->Prefetch({{0, kPagesA * kPage}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(pager->stats().prefetched_pages, kPagesA);
  ASSERT_TRUE(pager->Start().ok());
  for (uint64_t p = 0; p < kPagesA; ++p) EXPECT_TRUE(PageMatches(0, p)) << p;
  EXPECT_EQ(pager->stats().faults, 0u);
}

TEST_F(UffdPagerTest, BadRangesAreRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(UserfaultPager::Create({}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      UserfaultPager::Create({{target_[0].data() + 1, source_[0].data(), kPage, 0}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      UserfaultPager::Create({{target_[0].data(), source_[0].data(), 100, 0}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      UserfaultPager::Create({{target_[0].data(), nullptr, kPage, 0}}).status()));
}

}  // namespace
}  // namespace dsec::memory
