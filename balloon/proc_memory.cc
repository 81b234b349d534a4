// SPDX-License-Identifier: Apache-2.0
#include "balloon/proc_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::balloon {

absl::StatusOr<ProcessMemory> ParseProcStatusMemory(std::string_view text_in) {
  // Debian's Abseil has its own string_view.
  const absl::string_view text(text_in.data(), text_in.size());
  ProcessMemory m;
  bool have_rss = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view key = line.substr(0, colon);
    uint64_t* field = nullptr;
    if (key == "VmRSS") {
      field = &m.vm_rss;
    } else if (key == "RssAnon") {
      field = &m.rss_anon;
    } else if (key == "RssFile") {
      field = &m.rss_file;
    } else if (key == "RssShmem") {
      field = &m.rss_shmem;
    } else if (key == "VmSwap") {
      field = &m.vm_swap;
    } else {
      continue;
    }
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EndsWith(value, "kB")) value = absl::StripTrailingAsciiWhitespace(value.substr(0, value.size() - 2));
    uint64_t kib = 0;
    if (!absl::SimpleAtoi(value, &kib)) {
      return absl::InvalidArgumentError(absl::StrCat("proc status: bad ", key, " '", value, "'"));
    }
    *field = kib * 1024;
    if (field == &m.vm_rss) have_rss = true;
  }
  if (!have_rss) return absl::InvalidArgumentError("proc status: no VmRSS");
  return m;
}

absl::StatusOr<ProcessMemory> ReadProcessMemory(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  std::string text(8192, '\0');
  size_t len = 0;
  for (;;) {
    if (len == text.size()) text.resize(text.size() * 2);
    ssize_t n = ::read(fd.get(), text.data() + len, text.size() - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(absl::StrCat("read ", path));
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  text.resize(len);
  return ParseProcStatusMemory(text);
}

}  // namespace dsec::balloon
