// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/cgroup_events.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {

bool HasLine(std::string_view text, std::string_view key, std::string_view value) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    if (line.size() == key.size() + 1 + value.size() && line.substr(0, key.size()) == key &&
        line[key.size()] == ' ' && line.substr(key.size() + 1) == value) {
      return true;
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return false;
}

}  // namespace

bool HasCgroupEvents(const std::string& dir) { return PathExists(dir + "/cgroup.events"); }

absl::Status WaitCgroupEvent(const std::string& dir, std::string_view key, std::string_view value,
                             int64_t deadline_ns) {
  const std::string path = dir + "/cgroup.events";
  ScopedFd ifd(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!ifd) return ErrnoToStatus("inotify_init1");
  // Watch first, then read: a change between the two is not missed.
  if (::inotify_add_watch(ifd.get(), path.c_str(), IN_MODIFY) < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return ErrnoToStatus(absl::StrCat("inotify_add_watch ", path));
  }
  for (;;) {
    absl::StatusOr<std::string> text = ReadSmallFile(path);
    if (!text.ok()) return text.status();
    if (HasLine(*text, key, value)) return absl::OkStatus();
    const int64_t left_ms = (deadline_ns - MonotonicNowNs() + 999'999) / 1'000'000;
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(path, " did not show \"", std::string(key), " ", std::string(value), "\" in time"));
    }
    pollfd p{ifd.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 60'000)));
    if (n < 0 && errno != EINTR) return ErrnoToStatus("poll inotify");
    // Drain the events: the file is read again either way.
    char buf[4096];
    while (::read(ifd.get(), buf, sizeof(buf)) > 0) {
    }
  }
}

}  // namespace dsec::container
