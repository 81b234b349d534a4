// SPDX-License-Identifier: Apache-2.0
// WaitCgroupEvent against a real cgroup v2 directory (the unified
// hierarchy, pure or hybrid): a child process in it is frozen, thawed and
// killed, and each state is waited for through cgroup.events.
#include "sandbox/container/cgroup_events.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/exec_pump.h"
#include "base/file_io.h"
#include "gtest/gtest.h"

namespace dsec::container {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// The v2 hierarchy's root, or "" where this host has none.
std::string V2Root() {
  for (const char* root : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    if (PathExists(absl::StrCat(root, "/cgroup.procs")) && PathExists(absl::StrCat(root, "/cgroup.subtree_control"))) {
      return root;
    }
  }
  return "";
}

// A cgroup of the test's own, removed (its process killed first) however
// the test ends.
class TestCgroup {
 public:
  explicit TestCgroup(std::string dir) : dir_(std::move(dir)) { ::mkdir(dir_.c_str(), 0755); }
  ~TestCgroup() {
    if (child_ > 0) {
      (void)WriteSmallFile(dir_ + "/cgroup.freeze", "0");
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    // Empty once the child is reaped; a moment later for the kernel.
    (void)WaitCgroupEvent(dir_, "populated", "0", MonotonicNowNs() + 5 * kSecond);
    ::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }
  pid_t child_ = -1;

 private:
  std::string dir_;
};

TEST(CgroupEventsTest, WaitsForFrozenAndEmptyThroughTheNotification) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (cgroups)";
  const std::string root = V2Root();
  if (root.empty()) GTEST_SKIP() << "this host has no cgroup v2 hierarchy";
  TestCgroup cg(absl::StrCat(root, "/dsec-evt-test-", ::getpid()));
  ASSERT_TRUE(HasCgroupEvents(cg.dir())) << cg.dir();
  EXPECT_FALSE(HasCgroupEvents("/tmp"));
  if (!PathExists(cg.dir() + "/cgroup.freeze")) GTEST_SKIP() << "no cgroup.freeze (kernel before 5.2)";

  auto ready = Pipe::Create();
  ASSERT_TRUE(ready.ok()) << ready.status();
  // A fork that runs code (it waits, then pauses), not a program.
  cg.child_ = ::fork();
  ASSERT_GE(cg.child_, 0);
  if (cg.child_ == 0) {
    char c;
    (void)::read(ready->read.get(), &c, 1);  // until the parent has moved it
    for (;;) ::pause();
  }
  ready->read.Reset();
  ASSERT_TRUE(WriteSmallFile(cg.dir() + "/cgroup.procs", std::to_string(cg.child_)).ok());
  ASSERT_EQ(::write(ready->write.get(), "x", 1), 1);
  ready->write.Reset();
  EXPECT_TRUE(WaitCgroupEvent(cg.dir(), "populated", "1", MonotonicNowNs() + 5 * kSecond).ok());

  // A state not reached by the deadline: DeadlineExceeded, not a hang.
  absl::Status late = WaitCgroupEvent(cg.dir(), "frozen", "1", MonotonicNowNs());
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;

  ASSERT_TRUE(WriteSmallFile(cg.dir() + "/cgroup.freeze", "1").ok());
  absl::Status frozen = WaitCgroupEvent(cg.dir(), "frozen", "1", MonotonicNowNs() + 5 * kSecond);
  EXPECT_TRUE(frozen.ok()) << frozen;
  ASSERT_TRUE(WriteSmallFile(cg.dir() + "/cgroup.freeze", "0").ok());
  EXPECT_TRUE(WaitCgroupEvent(cg.dir(), "frozen", "0", MonotonicNowNs() + 5 * kSecond).ok());

  ASSERT_EQ(::kill(cg.child_, SIGKILL), 0);
  ASSERT_EQ(::waitpid(cg.child_, nullptr, 0), cg.child_);
  cg.child_ = -1;
  absl::Status empty = WaitCgroupEvent(cg.dir(), "populated", "0", MonotonicNowNs() + 5 * kSecond);
  EXPECT_TRUE(empty.ok()) << empty;

  EXPECT_EQ(WaitCgroupEvent("/tmp/dsec-no-such-cgroup", "populated", "0", MonotonicNowNs() + kSecond).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsec::container
