// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/agent_testing.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/status.h"

namespace dsec::agent::testing {

TempDir::TempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + ".XXXXXX";
  DSEC_CHECK(mkdtemp(tmpl.data()) != nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() { RemoveTree(path_); }

void RemoveTree(const std::string& path) {
  // Depth first, not following symlinks, not crossing mount points.
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        if (remove(p) != 0) std::fprintf(stderr, "RemoveTree: %s: %s\n", p, std::strerror(errno));
        return 0;
      },
      64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

void WriteFileOrDie(const std::string& path, const std::string& data, int mode) {
  ScopedFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  DSEC_CHECK(fd.valid());
  DSEC_CHECK(write(fd.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  DSEC_CHECK(fchmod(fd.get(), static_cast<mode_t>(mode)) == 0);
}

std::string ReadFileOrDie(const std::string& path) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  DSEC_CHECK(fd.valid());
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    DSEC_CHECK(n >= 0);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::pair<ScopedFd, ScopedFd> SocketPair() {
  int sv[2];
  DSEC_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  return {ScopedFd(sv[0]), ScopedFd(sv[1])};
}

}  // namespace dsec::agent::testing
