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

// 64 pages of constants in .rodata (a read-only segment) that nothing but
// the test reads, aligned to 64 KiB, the kernel's default fault-around
// window: whether its pages are mapped does not depend on what other code
// or constants are read (a fault maps the cached pages of its own 64 KiB
// window, within its mapping).
constexpr size_t kPages = 64;
struct alignas(65536) Constants {
  char bytes[kPages * 4096];
};
constexpr Constants MakeConstants() {
  Constants c{};
  for (size_t i = 0; i < sizeof(c.bytes); ++i) c.bytes[i] = static_cast<char>(1 + i % 251);
  return c;
}
const Constants kConstants = MakeConstants();

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

// Reads one byte of each page (volatile: every read happens).
int TouchAll() {
  int sum = 0;
  for (size_t i = 0; i < sizeof(kConstants.bytes); i += 4096) {
    sum += *static_cast<const volatile char*>(&kConstants.bytes[i]);
  }
  return sum;
}

__attribute__((noinline)) int Twice(int x) { return 2 * x; }

TEST(ImagePages, DropsReadOnlyMappingsAndKeepsWrittenData) {
  g_written = 12345;
  const auto begin = reinterpret_cast<uintptr_t>(kConstants.bytes);
  const auto end = begin + sizeof(kConstants.bytes);
  const int sum = TouchAll();
  ASSERT_EQ(PresentPages(begin, end), static_cast<long>(kPages)) << "/proc/self/pagemap unreadable?";

  absl::StatusOr<ImagePagesReleased> released = UnmapImageReadOnlyPages();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_GE(released->ranges, 1);
  EXPECT_GE(released->bytes, sizeof(kConstants.bytes));
  // No longer mapped, and back (same contents) once read.
  EXPECT_EQ(PresentPages(begin, end), 0);
  EXPECT_EQ(TouchAll(), sum);
  EXPECT_EQ(PresentPages(begin, end), static_cast<long>(kPages));
  // Code faults back in too; written data is untouched.
  EXPECT_EQ(Twice(21), 42);
  EXPECT_EQ(g_written, 12345);
  const auto text_begin = reinterpret_cast<uintptr_t>(__executable_start);
  const auto text_end = reinterpret_cast<uintptr_t>(etext);
  EXPECT_GT(PresentPages(text_begin, text_end), 0);
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
