// SPDX-License-Identifier: Apache-2.0
#include "base/image_pages.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "base/scoped_fd.h"
#include "gtest/gtest.h"

extern "C" char __executable_start[], etext[];

namespace dsec {
namespace {

// Written at run time: lives in .data, a writable segment, which the release
// must leave alone.
int g_written = 0;
const char kConstant[] = "read-only constant in .rodata";

// Pages of [begin, end) that this process has mapped (/proc/self/pagemap
// bit 63), or -1 when the file cannot be read.
long PresentPages(uintptr_t begin, uintptr_t end) {
  ScopedFd fd(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return -1;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  long present = 0;
  for (uintptr_t a = begin & ~(page - 1); a < end; a += page) {
    uint64_t entry = 0;
    if (::pread(fd.get(), &entry, sizeof(entry), static_cast<off_t>(a / page * 8)) !=
        static_cast<ssize_t>(sizeof(entry))) {
      return -1;
    }
    present += (entry >> 63) & 1;
  }
  return present;
}

__attribute__((noinline)) int Twice(int x) { return 2 * x; }

TEST(ImagePages, DropsTextMappingsAndKeepsWrittenData) {
  g_written = 12345;
  const auto begin = reinterpret_cast<uintptr_t>(__executable_start);
  const auto end = reinterpret_cast<uintptr_t>(etext);
  const long before = PresentPages(begin, end);
  ASSERT_GT(before, 0) << "/proc/self/pagemap unreadable";

  absl::StatusOr<ImagePagesReleased> released = UnmapImageReadOnlyPages();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_GE(released->ranges, 1);
  EXPECT_GE(released->bytes, end - begin - 2 * static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)));

  // Measured before any other code runs much: far fewer text pages mapped
  // than before (what this very function touches faults straight back).
  const long after = PresentPages(begin, end);
  EXPECT_LT(after, before / 2) << "before " << before << " after " << after;

  // Code and constants fault back in from the page cache; written data is
  // untouched.
  EXPECT_EQ(Twice(21), 42);
  EXPECT_EQ(std::string(kConstant), "read-only constant in .rodata");
  EXPECT_EQ(g_written, 12345);
  EXPECT_GT(PresentPages(begin, end), 0);
}

TEST(ImagePages, RepeatableAndHarmless) {
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<ImagePagesReleased> released = UnmapImageReadOnlyPages();
    ASSERT_TRUE(released.ok()) << released.status();
    EXPECT_EQ(Twice(i), 2 * i);
  }
}

}  // namespace
}  // namespace dsec
