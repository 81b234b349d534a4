// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/default_paths.h"

#include <unistd.h>

#include "base/file_io.h"

namespace dsec::monitor {

namespace {
bool Readable(const std::string& path) { return !path.empty() && ::access(path.c_str(), R_OK) == 0; }
}  // namespace

std::string DefaultTestGuestPath() {
  if (std::string beside = PathBesideSelf("guest-kernel/testguest/testguest.elf"); Readable(beside)) {
    return beside;
  }
#ifdef DSEC_TESTGUEST_ELF_PATH
  if (Readable(DSEC_TESTGUEST_ELF_PATH)) return DSEC_TESTGUEST_ELF_PATH;
#endif
  return "";
}

std::string MonitorBinaryPath() {
  if (std::string beside = PathBesideSelf("dsec-monitor"); ::access(beside.c_str(), X_OK) == 0) {
    return beside;
  }
#ifdef DSEC_MONITOR_BINARY_PATH
  if (::access(DSEC_MONITOR_BINARY_PATH, X_OK) == 0) return DSEC_MONITOR_BINARY_PATH;
#endif
  return "";
}

}  // namespace dsec::monitor
