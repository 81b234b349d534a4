// SPDX-License-Identifier: Apache-2.0
#include "bench/net_host_stats.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::bench::net {
namespace {

// "Name:   123 kB" lines: the number after `name`, or -1.
int64_t Field(absl::string_view text, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t v = 0;
    if (!words.empty() && absl::SimpleAtoi(words[0], &v)) return v;
  }
  return -1;
}

}  // namespace

absl::StatusOr<HostStats> ReadHostStats() {
  HostStats s;
  DSEC_ASSIGN_OR_RETURN(std::string meminfo, ReadFile("/proc/meminfo"));
  s.mem_available_kib = Field(meminfo, "MemAvailable");
  s.slab_kib = Field(meminfo, "Slab");
  s.sunreclaim_kib = Field(meminfo, "SUnreclaim");
  s.percpu_kib = Field(meminfo, "Percpu");
  DSEC_ASSIGN_OR_RETURN(std::string status, ReadFile("/proc/self/status"));
  s.rss_kib = Field(status, "VmRSS");
  DSEC_ASSIGN_OR_RETURN(std::vector<std::string> fds, ListDirectory("/proc/self/fdinfo"));
  s.fds = static_cast<int64_t>(fds.size());
  for (const std::string& fd : fds) {
    // Gone in between (the listing's own descriptor): skipped.
    absl::StatusOr<std::string> info = ReadFile(absl::StrCat("/proc/self/fdinfo/", fd));
    if (!info.ok()) continue;
    if (absl::StrContains(*info, "prog_type:") || absl::StrContains(*info, "map_type:") ||
        absl::StrContains(*info, "link_type:")) {
      ++s.bpf_fds;
      s.bpf_memlock_bytes += std::max<int64_t>(0, Field(*info, "memlock"));
    }
  }
  return s;
}

absl::Status EnsureFdLimit(int64_t needed) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return ErrnoStatus("getrlimit(RLIMIT_NOFILE)");
  if (static_cast<int64_t>(r.rlim_cur) >= needed) return absl::OkStatus();
  rlimit want = r;
  want.rlim_cur = static_cast<rlim_t>(needed);
  want.rlim_max = std::max(r.rlim_max, want.rlim_cur);
  if (::setrlimit(RLIMIT_NOFILE, &want) == 0) return absl::OkStatus();
  const int err = errno;
  return absl::ResourceExhaustedError(absl::StrCat(
      "needs about ", needed, " descriptors; RLIMIT_NOFILE is ", r.rlim_cur, " (hard ", r.rlim_max,
      ") and raising it failed: ", strerror(err),
      (err == EPERM ? " (no CAP_SYS_RESOURCE: raise `ulimit -Hn` or use a smaller --max)" : "")));
}

}  // namespace dsec::bench::net
