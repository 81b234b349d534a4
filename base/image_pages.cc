// SPDX-License-Identifier: Apache-2.0
#include "base/image_pages.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec {

namespace {

using Range = std::pair<uintptr_t, uintptr_t>;  // [first, second)

struct Segments {
  uintptr_t page = 4096;
  std::vector<Range> read_only;  // rounded inwards to whole pages
  std::vector<Range> writable;   // rounded outwards to whole pages
  bool seen = false;
};

// dl_iterate_phdr lists the main program first; only it is looked at.
int CollectMainProgram(dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* s = static_cast<Segments*>(data);
  if (s->seen) return 1;
  s->seen = true;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD && ph.p_type != PT_GNU_RELRO) continue;
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    const uintptr_t end = start + ph.p_memsz;
    if (ph.p_type == PT_GNU_RELRO || (ph.p_flags & PF_W) != 0) {
      s->writable.emplace_back(start & ~(s->page - 1), (end + s->page - 1) & ~(s->page - 1));
    } else {
      const uintptr_t first = (start + s->page - 1) & ~(s->page - 1);
      const uintptr_t last = end & ~(s->page - 1);
      if (first < last) s->read_only.emplace_back(first, last);
    }
  }
  return 1;
}

// `ranges` minus every writable range.
std::vector<Range> Subtract(const std::vector<Range>& ranges, const std::vector<Range>& holes) {
  std::vector<Range> out;
  for (Range r : ranges) {
    std::vector<Range> pieces = {r};
    for (const Range& h : holes) {
      std::vector<Range> next;
      for (const Range& p : pieces) {
        if (h.second <= p.first || h.first >= p.second) {
          next.push_back(p);
          continue;
        }
        if (p.first < h.first) next.emplace_back(p.first, h.first);
        if (h.second < p.second) next.emplace_back(h.second, p.second);
      }
      pieces = std::move(next);
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

}  // namespace

absl::StatusOr<ImagePagesReleased> UnmapImageReadOnlyPages() {
  Segments s;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) s.page = static_cast<uintptr_t>(page);
  ::dl_iterate_phdr(&CollectMainProgram, &s);
  if (!s.seen) return absl::NotFoundError("dl_iterate_phdr listed no main program");
  ImagePagesReleased released;
  for (const Range& r : Subtract(s.read_only, s.writable)) {
    if (::madvise(reinterpret_cast<void*>(r.first), r.second - r.first, MADV_DONTNEED) != 0) {
      return ErrnoStatus(absl::StrCat("madvise(MADV_DONTNEED) of the executable's read-only "
                                      "pages at 0x",
                                      absl::Hex(r.first)));
    }
    released.bytes += r.second - r.first;
    ++released.ranges;
  }
  return released;
}

}  // namespace dsec
