// SPDX-License-Identifier: Apache-2.0
// For the integration tests of cgroup programs: a cgroup v2 directory of
// the running test's own, made below this process's v2 cgroup and removed
// (once empty) with the object. Tests only.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dsec::bpf {

// The cgroup v2 directory this process is in ("" without a v2 hierarchy):
// the v2 mount point (/sys/fs/cgroup/unified on this host, /sys/fs/cgroup on
// a v2-only one) joined with /proc/self/cgroup's "0::" path.
inline std::string OwnCgroup2Dir() {
  std::string root;
  std::ifstream mounts("/proc/self/mounts");
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream in(line);
    std::string dev, dir, type;
    in >> dev >> dir >> type;
    if (type == "cgroup2") {
      root = dir;
      break;
    }
  }
  if (root.empty()) return "";
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    if (line.rfind("0::", 0) == 0) return line == "0::/" ? root : root + line.substr(3);
  }
  return root;
}

class TestCgroup {
 public:
  // Makes <own v2 cgroup>/dsec-<what>-test-<pid>-<test name>; path() is ""
  // (and the test should skip) without a v2 hierarchy.
  explicit TestCgroup(const std::string& what) {
    const std::string parent = OwnCgroup2Dir();
    if (parent.empty()) return;
    path_ = absl::StrCat(parent, "/dsec-", what, "-test-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    EXPECT_EQ(mkdir(path_.c_str(), 0755), 0) << path_ << ": " << strerror(errno);
  }
  ~TestCgroup() {
    if (!path_.empty()) rmdir(path_.c_str());
  }
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dsec::bpf
