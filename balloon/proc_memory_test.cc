// SPDX-License-Identifier: Apache-2.0
#include "balloon/proc_memory.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace dsec::balloon {
namespace {

TEST(ProcStatusMemoryTest, ParsesRssPartsInBytes) {
  auto m = ParseProcStatusMemory(
      "Name:\tdsec-vmm\nVmHWM:\t  400000 kB\nVmRSS:\t  300000 kB\nRssAnon:\t    1000 kB\n"
      "RssFile:\t    2000 kB\nRssShmem:\t  297000 kB\nVmSwap:\t       4 kB\nThreads:\t4\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->vm_rss, 300000u * 1024);
  EXPECT_EQ(m->rss_anon, 1000u * 1024);
  EXPECT_EQ(m->rss_file, 2000u * 1024);
  EXPECT_EQ(m->rss_shmem, 297000u * 1024);
  EXPECT_EQ(m->vm_swap, 4u * 1024);
}

TEST(ProcStatusMemoryTest, RejectsMissingOrBadRss) {
  EXPECT_FALSE(ParseProcStatusMemory("Name:\tkthreadd\nThreads:\t1\n").ok());
  EXPECT_FALSE(ParseProcStatusMemory("VmRSS:\t  lots kB\n").ok());
}

TEST(ProcStatusMemoryTest, ReadsThisProcess) {
  auto m = ReadProcessMemory(::getpid());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->vm_rss, 0u);
  EXPECT_EQ(m->vm_rss, m->rss_anon + m->rss_file + m->rss_shmem);
}

}  // namespace
}  // namespace dsec::balloon
