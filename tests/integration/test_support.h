// SPDX-License-Identifier: Apache-2.0
// Helpers shared by integration tests: where the built artefacts are, KVM
// availability, test-guest report parsing, and running the real binary.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsec::testing {

std::string TestGuestPath();
std::string VmmBinaryPath();
// build/dsec-monitor, the monitor binary (what `dsec-vmm vm run` execs).
std::string MonitorBinaryPath();
// "" when /dev/kvm is usable, otherwise why not (for GTEST_SKIP).
std::string KvmUnavailableReason();

// One test-guest report line "kind key=value key=value ...". The value of
// the last key may contain spaces when it is `text` (the command line).
struct Report {
  std::string kind;
  std::map<std::string, std::string> fields;
  std::string Get(const std::string& key) const;
  uint64_t GetU64(const std::string& key) const;  // decimal or 0x hex
};
Report ParseReport(const std::string& line);
// All reports of one kind, in order.
std::vector<Report> ReportsOf(const std::vector<std::string>& lines, const std::string& kind);
std::optional<Report> FirstReportOf(const std::vector<std::string>& lines, const std::string& kind);

struct CommandResult {
  int exit_status = -1;  // -1 if killed by a signal
  int term_signal = 0;   // the signal that killed it
  std::string out;
  std::string err;
};
// Runs argv (no shell; base/subprocess.h), stdin on /dev/null, capturing
// stdout and stderr (the last `max_bytes` of each). A program that cannot
// be started: exit_status -1 and no signal.
CommandResult RunCommand(const std::vector<std::string>& argv, size_t max_bytes = 16 << 20);

// Open file descriptors and threads of this process (for leak checks).
int CountOpenFds();
int CountThreads();

// The scheduler state of thread `tid` of this process, from its stat file
// ('R' running or runnable, 'S' asleep, ...; '?' once it is gone).
char ThreadState(pid_t tid);
// The threads of process `pid` that run or wait to run (state R), as
// "tid (comm)".
std::vector<std::string> RunnableThreads(pid_t pid);

// A unique temporary directory removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dsec::testing
