// SPDX-License-Identifier: Apache-2.0
#include "balloon/pagemap_sampler.h"

#include <sys/mman.h>
#include <unistd.h>

#include "balloon/fake_host_memory.h"
#include "gtest/gtest.h"

namespace dsec::balloon {
namespace {

constexpr uint64_t kBase = 0x10000000;
constexpr uint64_t kChunk = 2 << 20;
constexpr uint64_t kChunks = 16;

class PagemapSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PagemapSamplerOptions o;
    o.verify_shared = false;  // fake memory has no /proc/self/maps entry
    o.cold_intervals = 3;
    sampler_ = PagemapSampler::Create(&mem_, o).value();
    const HostRange ram[] = {{kBase, kChunks * kChunk}};
    ASSERT_TRUE(sampler_->Track(1, ::getpid(), ram).ok());
    mem_.Touch(kBase, kChunks * kChunk);  // the guest touched all of its RAM once
  }
  WorkingSetSample Sample() {
    auto s = sampler_->Sample(1);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : WorkingSetSample{};
  }

  FakeHostMemory mem_;
  std::unique_ptr<PagemapSampler> sampler_;
};

TEST_F(PagemapSamplerTest, HotChunksStayHotIdleChunksTurnCold) {
  WorkingSetSample first = Sample();  // arms samples; nothing observed yet
  EXPECT_EQ(first.tracked_bytes, kChunks * kChunk);
  EXPECT_EQ(first.hot_bytes, 0u);
  EXPECT_TRUE(first.cold.empty());
  EXPECT_EQ(sampler_->cost().unmapped_pages, kChunks * 4);
  // DONTNEED on a shared mapping only unmaps: nothing was freed.
  EXPECT_EQ(mem_.ResidentPages(kBase, kChunks * kChunk), kChunks * kChunk / 4096);
  for (int interval = 1; interval <= 3; ++interval) {
    mem_.Touch(kBase, 4 * kChunk);  // hot set: the first 4 chunks, read or written
    WorkingSetSample s = Sample();
    EXPECT_EQ(s.hot_bytes, 4 * kChunk) << interval;
    if (interval < 3) {
      EXPECT_TRUE(s.cold.empty()) << interval;
    } else {
      ASSERT_EQ(s.cold.size(), kChunks - 4);
      EXPECT_EQ(s.cold[0].range.addr, kBase + 4 * kChunk);
      EXPECT_EQ(s.cold[0].range.size, kChunk);
      EXPECT_EQ(s.cold[0].idle_intervals, 3u);
    }
  }
  // The cost: at most one unmapped page per sample and interval, and one
  // induced fault per accessed sample (the hot chunks' 4 samples, 3 times).
  EXPECT_LE(sampler_->cost().unmapped_pages, 4 * kChunks * 4);
  EXPECT_EQ(sampler_->cost().accessed_samples, 3 * 4 * 4u);
  EXPECT_EQ(sampler_->cost().intervals, 4u);
}

TEST_F(PagemapSamplerTest, AccessEndsColdnessAndPagedOutChunksAreNotCold) {
  for (int i = 0; i < 4; ++i) Sample();
  WorkingSetSample cold = Sample();
  EXPECT_EQ(cold.cold.size(), kChunks);
  mem_.Touch(kBase + 5 * kChunk, kChunk);  // the guest comes back to chunk 5
  mem_.set_swap(true);
  ASSERT_TRUE(mem_.Advise(kBase, kChunk, MADV_PAGEOUT).ok());  // chunk 0 paged out
  WorkingSetSample s = Sample();
  EXPECT_EQ(s.hot_bytes, kChunk);
  EXPECT_EQ(s.cold.size(), kChunks - 2);  // not chunk 5 (hot), not chunk 0 (not resident)
  for (const ColdRange& c : s.cold) {
    EXPECT_NE(c.range.addr, kBase);
    EXPECT_NE(c.range.addr, kBase + 5 * kChunk);
  }
}

TEST(PagemapSamplerCreateTest, RefusesOtherProcessesAndBadRanges) {
  FakeHostMemory mem;
  PagemapSamplerOptions o;
  o.verify_shared = false;
  auto sampler = PagemapSampler::Create(&mem, o).value();
  const HostRange ram[] = {{kBase, kChunk}};
  EXPECT_EQ(sampler->Track(1, ::getpid() + 1, ram).code(), absl::StatusCode::kUnavailable);
  const HostRange odd[] = {{kBase + 1, kChunk}};
  EXPECT_EQ(sampler->Track(1, ::getpid(), odd).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sampler->Sample(9).status().code(), absl::StatusCode::kNotFound);
  o.samples_per_chunk = 0;
  EXPECT_FALSE(PagemapSampler::Create(&mem, o).ok());
}

}  // namespace
}  // namespace dsec::balloon
