// SPDX-License-Identifier: Apache-2.0
#include "cmd/default_paths.h"

#include <unistd.h>

#include <climits>

namespace dsec::cmd {

std::string SelfExePath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string DefaultTestGuestPath() {
  std::string exe = SelfExePath();
  auto slash = exe.rfind('/');
  if (slash != std::string::npos) {
    std::string candidate = exe.substr(0, slash) + "/guest-kernel/testguest/testguest.elf";
    if (::access(candidate.c_str(), R_OK) == 0) return candidate;
  }
#ifdef DSEC_TESTGUEST_ELF_PATH
  if (::access(DSEC_TESTGUEST_ELF_PATH, R_OK) == 0) return DSEC_TESTGUEST_ELF_PATH;
#endif
  return "";
}

}  // namespace dsec::cmd
