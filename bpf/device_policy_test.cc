// SPDX-License-Identifier: Apache-2.0
// The cgroup_device program in the real kernel: a cgroup v2 directory of
// the test's own, device nodes the test makes in a temporary directory
// (null 1:3, mem 1:1, zero 1:5), and a forked child that joins the cgroup
// and opens or makes them. The verdicts, exact counters, run-time rules and
// detachment on destruction. The child never reads or writes a device.
#include "bpf/device_policy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "bpf/test_cgroup.h"
#include "gtest/gtest.h"

namespace dsec::bpf {
namespace {

// What the child does: open `path` with `flags`, or mknod a character node
// `dev` at `path`.
struct Op {
  std::string path;
  int flags = O_RDONLY;
  bool mknod = false;
  dev_t dev = 0;
};

Op Open(std::string path, int flags) { return Op{std::move(path), flags, false, 0}; }
Op Mknod(std::string path, unsigned major, unsigned minor) {
  return Op{std::move(path), 0, true, makedev(major, minor)};
}

DeviceRule Rule(const std::string& text) {
  auto r = ParseDeviceRule(text);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : DeviceRule{};
}

class DevicePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (BPF, cgroups, mknod)";
    cgroup_dir_ = std::make_unique<TestCgroup>("device");
    if (cgroup_dir_->path().empty()) GTEST_SKIP() << "no cgroup v2 hierarchy mounted";
    cgroup_ = cgroup_dir_->path();
    char tmpl[] = "/tmp/dsec-device-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    dir_ = tmpl;
    for (const auto& [name, major, minor] : {std::tuple{"null", 1, 3}, {"mem", 1, 1}, {"zero", 1, 5}}) {
      const std::string path = Node(name);
      ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0600, makedev(major, minor)), 0)
          << path << ": " << strerror(errno);
      nodes_.push_back(path);
    }
    auto policy = DevicePolicy::Load();
    if (!policy.ok()) GTEST_SKIP() << policy.status();
    policy_ = std::move(*policy);
    if (absl::Status s = policy_->AttachToCgroup(cgroup_); !s.ok()) GTEST_SKIP() << s;
  }

  void TearDown() override {
    policy_.reset();
    if (!dir_.empty()) {
      for (const std::string& n : nodes_) unlink(n.c_str());
      for (const char* made : {"made-null", "made-mem"}) unlink(Node(made).c_str());
      rmdir(dir_.c_str());
    }
    cgroup_dir_.reset();  // after the policy and the child are gone
  }

  std::string Node(const std::string& name) const { return absl::StrCat(dir_, "/", name); }

  // Runs `ops` in a child that has joined the test's cgroup; one errno per
  // op (0 = it worked).
  std::vector<int> InChild(const std::vector<Op>& ops) {
    ScopedFd procs(open((cgroup_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    EXPECT_TRUE(procs.valid()) << strerror(errno);
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    ScopedFd rd(p[0]), wr(p[1]);
    const pid_t pid = fork();
    EXPECT_GE(pid, 0) << strerror(errno);
    if (pid == 0) {
      // Only async-signal-safe calls from here: the test may have threads.
      if (write(procs.get(), "0", 1) != 1) _exit(2);
      for (const Op& op : ops) {
        int err = 0;
        if (op.mknod) {
          if (mknod(op.path.c_str(), S_IFCHR | 0600, op.dev) != 0) err = errno;
        } else {
          const int fd = open(op.path.c_str(), op.flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
          if (fd < 0)
            err = errno;
          else
            close(fd);
        }
        if (write(wr.get(), &err, sizeof(err)) != sizeof(err)) _exit(3);
      }
      _exit(0);
    }
    wr.Reset();
    std::vector<int> results;
    int err;
    while (read(rd.get(), &err, sizeof(err)) == sizeof(err)) results.push_back(err);
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    EXPECT_EQ(results.size(), ops.size());
    return results;
  }

  DeviceCounters Counters() {
    auto c = policy_->Counters();
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : DeviceCounters{};
  }

  std::unique_ptr<TestCgroup> cgroup_dir_;
  std::string cgroup_, dir_;
  std::vector<std::string> nodes_;
  std::unique_ptr<DevicePolicy> policy_;
};

TEST_F(DevicePolicyTest, NothingAllowedRefusesEveryDevice) {
  EXPECT_EQ(
      InChild({Open(Node("null"), O_RDONLY), Open(Node("zero"), O_RDWR), Mknod(Node("made-null"), 1, 3)}),
      (std::vector<int>{EPERM, EPERM, EPERM}));
  const DeviceCounters c = Counters();
  EXPECT_EQ(c.allowed, 0u);
  EXPECT_EQ(c.denied, 3u);
}

TEST_F(DevicePolicyTest, AnAllowedNodeOpensAndDevMemIsRefused) {
  ASSERT_TRUE(policy_->Allow(Rule("c 1:3 rw")).ok());
  EXPECT_EQ(InChild({Open(Node("null"), O_RDWR), Open(Node("mem"), O_RDONLY), Open(Node("zero"), O_RDONLY)}),
            (std::vector<int>{0, EPERM, EPERM}));
  const DeviceCounters c = Counters();
  EXPECT_EQ(c.allowed, 1u);
  EXPECT_EQ(c.denied, 2u);
}

TEST_F(DevicePolicyTest, AccessBitsAreCheckedAndGrowAtRunTime) {
  ASSERT_TRUE(policy_->Allow(Rule("c 1:3 r")).ok());
  EXPECT_EQ(InChild({Open(Node("null"), O_RDONLY), Open(Node("null"), O_WRONLY), Open(Node("null"), O_RDWR),
                     Mknod(Node("made-null"), 1, 3)}),
            (std::vector<int>{0, EPERM, EPERM, EPERM}));
  ASSERT_TRUE(policy_->Allow(Rule("c 1:3 wm")).ok());  // adds to the r granted before
  EXPECT_EQ(
      InChild({Open(Node("null"), O_RDWR), Mknod(Node("made-null"), 1, 3), Mknod(Node("made-mem"), 1, 1)}),
      (std::vector<int>{0, 0, EPERM}));
  const DeviceCounters c = Counters();
  EXPECT_EQ(c.allowed, 3u);
  EXPECT_EQ(c.denied, 4u);
}

TEST_F(DevicePolicyTest, WildcardRulesMatchEveryNumberAndType) {
  ASSERT_TRUE(policy_->Allow(Rule("c 1:* r")).ok());
  ASSERT_TRUE(policy_->Allow(Rule("a *:* m")).ok());
  const std::vector<int> got =
      InChild({Open(Node("zero"), O_RDONLY), Open(Node("null"), O_RDONLY), Open(Node("zero"), O_WRONLY),
               Mknod(Node("made-mem"), 1, 1), Open(Node("mem"), O_RDONLY)});
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 0);
  EXPECT_EQ(got[2], EPERM);
  EXPECT_EQ(got[3], 0);
  // Allowed by the cgroup; a kernel without /dev/mem support fails the open
  // itself (ENXIO), so only the cgroup's verdict is asserted.
  EXPECT_NE(got[4], EPERM);
  const DeviceCounters c = Counters();
  EXPECT_EQ(c.allowed, 4u);
  EXPECT_EQ(c.denied, 1u);
}

TEST_F(DevicePolicyTest, DefaultSandboxDevicesAllowTheSandboxDevButNotDevMem) {
  for (const DeviceRule& r : DefaultSandboxDevices())
    ASSERT_TRUE(policy_->Allow(r).ok()) << FormatDeviceRule(r);
  // One node per default rule (pts: slave 0); opening some of them fails
  // for the device's own reasons (no controlling tty, no such pty), never
  // with the cgroup's EPERM.
  const std::vector<std::tuple<std::string, unsigned, unsigned>> defaults = {
      {"d-null", 1, 3},    {"d-zero", 1, 5}, {"d-full", 1, 7}, {"d-random", 1, 8},
      {"d-urandom", 1, 9}, {"d-tty", 5, 0},  {"d-ptmx", 5, 2}, {"d-pts0", 136, 0}};
  std::vector<Op> ops;
  for (const auto& [name, major, minor] : defaults) {
    const std::string path = Node(name);
    ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0600, makedev(major, minor)), 0) << strerror(errno);
    nodes_.push_back(path);
    ops.push_back(Open(path, O_RDWR));
  }
  ops.push_back(Open(Node("mem"), O_RDONLY));
  const std::vector<int> got = InChild(ops);
  ASSERT_EQ(got.size(), ops.size());
  for (size_t i = 0; i + 1 < got.size(); ++i) EXPECT_NE(got[i], EPERM) << ops[i].path;
  EXPECT_EQ(got.back(), EPERM);
  const DeviceCounters c = Counters();
  EXPECT_EQ(c.allowed, defaults.size());
  EXPECT_EQ(c.denied, 1u);
}

TEST_F(DevicePolicyTest, DestroyingThePolicyDetachesIt) {
  EXPECT_EQ(InChild({Open(Node("zero"), O_RDONLY)}), (std::vector<int>{EPERM}));
  policy_.reset();
  EXPECT_EQ(InChild({Open(Node("zero"), O_RDONLY)}), (std::vector<int>{0}));
}

TEST_F(DevicePolicyTest, AttachingTwiceOrToAMissingCgroupIsAClearError) {
  EXPECT_EQ(policy_->AttachToCgroup(cgroup_).code(), absl::StatusCode::kFailedPrecondition);
  auto other = DevicePolicy::Load();
  ASSERT_TRUE(other.ok()) << other.status();
  absl::Status s = (*other)->AttachToCgroup(cgroup_ + "/no-such-dir");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(s.message()).find("no-such-dir"), std::string::npos);
}

TEST_F(DevicePolicyTest, OneLoadedPolicyServesMoreCgroupsEachDetachedOnItsOwn) {
  // A second cgroup gets the same program and rules through an attachment.
  ASSERT_TRUE(policy_->Allow(Rule("c 1:3 rw")).ok());
  TestCgroup second("device-second");
  ASSERT_FALSE(second.path().empty());
  auto attachment = policy_->Attach(second.path());
  ASSERT_TRUE(attachment.ok()) << attachment.status();
  const std::string first = cgroup_;
  cgroup_ = second.path();
  EXPECT_EQ(InChild({Open(Node("null"), O_RDWR), Open(Node("zero"), O_RDONLY)}), (std::vector<int>{0, EPERM}));
  attachment->reset();  // that cgroup only is free again
  EXPECT_EQ(InChild({Open(Node("zero"), O_RDONLY)}), (std::vector<int>{0}));
  cgroup_ = first;
  EXPECT_EQ(InChild({Open(Node("zero"), O_RDONLY)}), (std::vector<int>{EPERM}));
  EXPECT_EQ(policy_->Attach(first + "/no-such-dir").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DevicePolicyTest, RulesWithoutAccessAreRefused) {
  DeviceRule r = Rule("c 1:3 r");
  r.access = 0;
  EXPECT_EQ(policy_->Allow(r).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsec::bpf
