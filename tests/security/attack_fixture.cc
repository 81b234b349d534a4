// SPDX-License-Identifier: Apache-2.0
#include "tests/security/attack_fixture.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sandbox/container/state_dir.h"
#include "base/file_io.h"

namespace dsec::container::security {

void ContainerAttackTest::SetUpTestSuite() {
  if (::geteuid() != 0) {
    skip_ = "needs root (mounts, namespaces, cgroups)";
    return;
  }
  auto dir = testing::TempDir::Create("dsec-sec-");
  if (!dir.ok()) {
    skip_ = dir.status().ToString();
    return;
  }
  dir_ = new testing::TempDir(std::move(*dir));
  const std::string tree = absl::StrCat(dir_->path(), "/tree");
  absl::Status s = testing::BuildBusyboxTree(tree);
  if (s.ok()) {
    s = testing::RunHostCommand(
            {"/bin/cp", DSEC_ATTACK_PROBE_PATH, absl::StrCat(tree, "/bin/attack_probe")})
            .status();
  }
  if (s.ok()) s = testing::WriteTreeFile(tree, "etc/motd", "original motd\n");
  if (s.ok()) s = testing::WriteTreeFile(tree, "data/victim", std::string(8192, 'v'));
  image_ = absl::StrCat(dir_->path(), "/base.erofs");
  if (s.ok()) s = testing::MakeErofs(tree, image_);
  if (!s.ok()) skip_ = s.ToString();
#ifdef DSEC_ATTACK_NETWORK
  if (skip_.empty()) {
    network::NodeNetworkOptions o;
    o.subnet = absl::StrCat("10.245.", ::getpid() % 250, ".0/24");
    o.policies_ahead = 2;
    o.netns_ahead = 2;
    auto node = network::NodeNetwork::Create(o);
    if (node.ok()) {
      node_ = node->release();
    } else {
      skip_ = absl::StrCat("no sandbox networking here: ", node.status().ToString());
    }
  }
#endif
}

void ContainerAttackTest::TearDownTestSuite() {
#ifdef DSEC_ATTACK_NETWORK
  delete node_;
  node_ = nullptr;
#endif
  delete dir_;
  dir_ = nullptr;
}

void ContainerAttackTest::SetUp() {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
}

Sandbox& ContainerAttackTest::NewSandbox(const std::string& name,
                                         const std::function<void(SandboxConfig&)>& tweak) {
  SandboxConfig c;
  c.id = absl::StrCat(name, "-", ::getpid());
  c.layers = {image_};
  c.state_root = absl::StrCat(dir_->path(), "/state");
  c.limits.memory_bytes = 96 << 20;
  c.limits.pids_max = 64;
  c.upper_size_bytes = 32 << 20;
#ifdef DSEC_ATTACK_USERNS
  // The same attacks against sandboxes in a user namespace (the test's
  // second build, container_attack_userns_test).
  c.user_namespace = UserNamespaceMap{0x30000000u, 0x30000000u, 65536};
#endif
  if (tweak) tweak(c);
#ifdef DSEC_ATTACK_NETWORK
  auto net = network::SandboxNetwork::CreateAhead(node_, network::NetworkSpec{});
  if (!net.ok()) {
    ADD_FAILURE() << net.status();
    std::abort();
  }
  c.netns_fd = (*net)->netns_fd();
#endif
  auto sb = Sandbox::Create(std::move(c));
  if (!sb.ok()) {
    ADD_FAILURE() << sb.status();
    std::abort();  // later steps would dereference it; the process ends here
  }
#ifdef DSEC_ATTACK_NETWORK
  std::string v2;
  for (const std::string& d : (*sb)->cgroups().dirs()) {
    if (dsec::PathExists(d + "/cgroup.controllers")) v2 = d;
  }
  absl::Status attached = v2.empty() ? absl::UnavailableError("no v2 cgroup") : (*net)->AttachTo(v2);
  if (!attached.ok()) {
    ADD_FAILURE() << attached;
    std::abort();
  }
  host_ends_.push_back((*net)->host_interface());
  networks_.push_back(std::move(*net));
#endif
  records_.push_back({(*sb)->state_dir(), (*sb)->cgroups().dirs(), (*sb)->init_pid()});
  sandboxes_.push_back(std::move(*sb));
  return *sandboxes_.back();
}

ExecResult ContainerAttackTest::Run(Sandbox& sb, const ExecOptions& options) {
  auto r = sb.Exec(options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ExecResult{};
}

ExecResult ContainerAttackTest::Cmd(Sandbox& sb, std::vector<std::string> argv) {
  ExecOptions o;
  o.argv = std::move(argv);
  return Run(sb, o);
}

ExecResult ContainerAttackTest::Sh(Sandbox& sb, const std::string& script, int64_t timeout_ms) {
  ExecOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.timeout_ms = timeout_ms;
  return Run(sb, o);
}

std::vector<pid_t> ContainerAttackTest::CgroupMembers(const Sandbox& sb) {
  std::vector<pid_t> pids;
  for (const std::string& d : sb.cgroups().dirs()) {
    auto text = dsec::ReadSmallFile(absl::StrCat(d, "/cgroup.procs"));
    if (!text.ok()) continue;
    for (absl::string_view s : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      int p = 0;
      if (absl::SimpleAtoi(s, &p) && std::find(pids.begin(), pids.end(), p) == pids.end()) {
        pids.push_back(p);
      }
    }
  }
  return pids;
}

namespace {

// The state letter of /proc/PID/stat ('R', 'S', 'Z', ...); 0 if it is gone.
char ProcState(pid_t pid) {
  auto stat = dsec::ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return 0;
  const size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() ? (*stat)[paren + 2] : 0;
}

}  // namespace

void ContainerAttackTest::ExpectOnlyInit(const Sandbox& sb) {
  std::vector<pid_t> members = CgroupMembers(sb);
  EXPECT_NE(std::find(members.begin(), members.end(), sb.init_pid()), members.end())
      << "init is gone";
  for (pid_t p : members) {
    if (p == sb.init_pid()) continue;
    // A killed process the sandbox's init has not reaped yet is dead (a
    // zombie holds no memory and runs nothing); the cgroup v1 hierarchies
    // here may still list it. A living one is an escape.
    const char state = ProcState(p);
    if (state == 0 || state == 'Z' || state == 'X') continue;
    ADD_FAILURE() << "pid " << p << " (state " << state << ") survived the exec (init "
                  << sb.init_pid() << ")";
  }
}

void ContainerAttackTest::TearDown() {
  for (auto& sb : sandboxes_) {
    absl::Status s = sb->Destroy();
    EXPECT_TRUE(s.ok()) << s;
  }
  sandboxes_.clear();
#ifdef DSEC_ATTACK_NETWORK
  networks_.clear();
  for (const std::string& h : host_ends_) EXPECT_FALSE(dsec::PathExists("/sys/class/net/" + h)) << h;
  host_ends_.clear();
  EXPECT_EQ(node_->sandboxes(), 0u);
#endif
  // Nothing of any sandbox may be left on the host.
  auto mountinfo = dsec::ReadSmallFile("/proc/self/mountinfo");
  ASSERT_TRUE(mountinfo.ok());
  auto loops = testing::RunHostCommand({"/sbin/losetup", "-a"});
  for (const Record& r : records_) {
    EXPECT_EQ(mountinfo->find(r.state_dir), std::string::npos) << "mount left in " << r.state_dir;
    EXPECT_FALSE(dsec::PathExists(r.state_dir)) << r.state_dir;
    for (const std::string& cg : r.cgroups) {
      EXPECT_FALSE(dsec::PathExists(cg)) << cg;
    }
    EXPECT_FALSE(ProcessIdentity(r.init).has_value()) << "init " << r.init << " left";
  }
  if (loops.ok()) {
    EXPECT_EQ(loops->find(dir_->path()), std::string::npos) << *loops;
  }
  records_.clear();
}

}  // namespace dsec::container::security
