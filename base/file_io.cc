// SPDX-License-Identifier: Apache-2.0
#include "base/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec {

namespace {
constexpr size_t kMaxFileBytes = 1 << 20;
}  // namespace

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(absl::StrCat("read ", path));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than ", kMaxFileBytes,
                                                     " bytes; not a sysfs/cgroupfs file"));
    }
  }
  return out;
}

int WriteSmallFileErrno(const std::string& path, std::string_view value) {
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return errno;
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  // cgroupfs and sysfs take a command in one write or not at all.
  return static_cast<size_t>(n) == value.size() ? 0 : EIO;
}

absl::Status WriteSmallFile(const std::string& path, std::string_view value) {
  int err = WriteSmallFileErrno(path, value);
  if (err == 0) return absl::OkStatus();
  return ErrnoToStatus(absl::StrCat("write \"", std::string(value), "\" to ", path), err);
}

absl::StatusOr<long long> ParseIntFile(const std::string& path, std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  long long value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected an integer, found \"", std::string(text), "\""));
  }
  return value;
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), ::closedir);
  if (dir == nullptr) return ErrnoToStatus(absl::StrCat("opendir ", path));
  std::vector<std::string> names;
  errno = 0;
  while (dirent* entry = ::readdir(dir.get())) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
    errno = 0;
  }
  if (errno != 0) return ErrnoToStatus(absl::StrCat("readdir ", path));
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(absl::StrCat("read ", path));
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

absl::Status WriteFile(const std::string& path, std::string_view content, mode_t mode, bool append) {
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), mode));
  if (!fd.valid()) return ErrnoToStatus(absl::StrCat("open ", path));
  while (!content.empty()) {
    ssize_t n = ::write(fd.get(), content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoToStatus(absl::StrCat("write ", path), n < 0 ? errno : EIO);
    content.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string partial = path.substr(0, end);
    if (!partial.empty() && partial.back() != '/' && ::mkdir(partial.c_str(), mode) != 0 &&
        errno != EEXIST) {
      return ErrnoToStatus(absl::StrCat("mkdir ", partial));
    }
    if (end == std::string::npos) return absl::OkStatus();
  }
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string FileTail(const std::string& path, size_t max_bytes) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return "";
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return "";
  const off_t size = st.st_size;
  const off_t start = size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string out(static_cast<size_t>(size - start), '\0');
  ssize_t n = ::pread(fd.get(), out.data(), out.size(), start);
  if (n < 0) return "";
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string SelfExePath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string PathBesideSelf(const std::string& name) {
  std::string exe = SelfExePath();
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? name : exe.substr(0, slash + 1) + name;
}

}  // namespace dsec
