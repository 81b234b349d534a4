// SPDX-License-Identifier: Apache-2.0
// Real mounts, namespaces and cgroups (label integration; needs root,
// busybox-static and erofs-utils, and skips naming what is missing).
#include "sandbox/container/sandbox.h"

#include <signal.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string_view>
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "sandbox/container/init_launch.h"
#include "sandbox/container/init_trampoline.h"
#include "base/fd_passing.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/container/test_image.h"
#include "sandbox/container/upper_store.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"

namespace dsec::container {
namespace {

using testing::TempDir;

class SandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root";
      return;
    }
    auto dir = TempDir::Create("dsec-ctr-test-");
    if (!dir.ok()) {
      skip_ = dir.status().ToString();
      return;
    }
    dir_ = new TempDir(std::move(*dir));
    const std::string base = absl::StrCat(dir_->path(), "/base");
    const std::string top = absl::StrCat(dir_->path(), "/top");
    absl::Status s = testing::BuildBusyboxTree(base);
    if (s.ok()) s = testing::WriteTreeFile(base, "etc/motd", "from base\n");
    if (s.ok()) s = testing::WriteTreeFile(base, "etc/shadowed", "base\n");
    if (s.ok()) s = testing::WriteTreeFile(top, "etc/shadowed", "top\n");
    if (s.ok()) s = testing::MakeErofs(base, absl::StrCat(dir_->path(), "/base.erofs"));
    if (s.ok()) s = testing::MakeErofs(top, absl::StrCat(dir_->path(), "/top.erofs"));
    if (!s.ok()) skip_ = s.ToString();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static SandboxConfig Config(const std::string& id) {
    SandboxConfig c;
    c.id = absl::StrCat(id, "-", ::getpid());
    c.layers = {absl::StrCat(dir_->path(), "/base.erofs"), absl::StrCat(dir_->path(), "/top.erofs")};
    c.state_root = absl::StrCat(dir_->path(), "/state");
    c.limits.memory_bytes = 128 << 20;
    c.limits.pids_max = 64;
    c.upper_size_bytes = 16 << 20;
    return c;
  }
  static ExecResult Run(Sandbox& sb, std::vector<std::string> argv, std::string in = "") {
    ExecOptions o;
    o.argv = std::move(argv);
    o.stdin_data = std::move(in);
    o.timeout_ms = 20000;
    auto r = sb.Exec(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ExecResult{};
  }
  static ExecResult Sh(Sandbox& sb, const std::string& script) {
    return Run(sb, {"/bin/sh", "-c", script});
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::string skip_;
};

TEST_F(SandboxTest, RunsACommandAndReportsItsExitCode) {
  auto sb = Sandbox::Create(Config("basic"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecResult r = Sh(**sb, "echo hello; echo oops >&2; exit 7");
  EXPECT_EQ(r.stdout_data, "hello\n");
  EXPECT_EQ(r.stderr_data, "oops\n");
  ASSERT_TRUE(r.exit_code.has_value());
  EXPECT_EQ(*r.exit_code, 7);
  EXPECT_FALSE(r.timed_out);
  EXPECT_GT(r.peak_rss_bytes, 0u);
}

TEST_F(SandboxTest, PassesStdinEnvCwdAndUsesPath) {
  auto sb = Sandbox::Create(Config("io"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecOptions o;
  o.argv = {"sh", "-c", "cat; echo \"$FOO\"; pwd"};
  o.env = {"PATH=/bin", "FOO=bar"};
  o.cwd = "/etc";
  o.stdin_data = "piped\n";
  auto r = (*sb)->Exec(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_data, "piped\nbar\n/etc\n");
  EXPECT_EQ(r->status(), 0);
}

// Ids that would escape the state root, or take the init pool's names,
// are refused.
TEST_F(SandboxTest, BadIdsAreRefused) {
  for (const std::string& id : std::vector<std::string>{"", ".", "..", ".slot-1-0", ".dead-1-0", "a/b",
                                                      std::string(65, 'x')}) {
    SandboxConfig c = Config("x");
    c.id = id;
    auto sb = Sandbox::Create(c);
    ASSERT_FALSE(sb.ok()) << id;
    EXPECT_EQ(sb.status().code(), absl::StatusCode::kInvalidArgument) << id << ": " << sb.status();
  }
}

// The working directory is entered as the exec's uid: a uid cannot start in
// a directory closed to it (root's capabilities are gone by then), and the
// init serves the execs that come after.
TEST_F(SandboxTest, AnExecsUidEntersOnlyDirectoriesOpenToIt) {
  auto sb = Sandbox::Create(Config("cwd-uid"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ASSERT_EQ(Sh(**sb, "mkdir -m 0700 /closed && echo s > /closed/secret && echo ok").stdout_data,
            "ok\n");
  ExecOptions o;
  o.argv = {"cat", "secret"};
  o.cwd = "/closed";
  o.uid = 1000;
  o.gid = 1000;
  auto denied = (*sb)->Exec(o);
  ASSERT_FALSE(denied.ok()) << denied->stdout_data;
  EXPECT_TRUE(absl::StrContains(denied.status().message(), "chdir")) << denied.status();
  o.cwd = "/";
  o.argv = {"id", "-u"};
  auto open = (*sb)->Exec(o);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->stdout_data, "1000\n");
  o.uid = 0;
  o.gid = 0;
  o.cwd = "/closed";
  o.argv = {"cat", "secret"};
  auto root = (*sb)->Exec(o);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->stdout_data, "s\n");
}

TEST_F(SandboxTest, OutputCallbackSeesWhatTheCapAdmitsAndDropsArePerStream) {
  auto sb = Sandbox::Create(Config("onout"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecOptions o;
  o.argv = {"sh", "-c", "echo out; echo err >&2; head -c 5000 /dev/zero | tr '\\0' e >&2"};
  o.output_cap_bytes = 1000;
  std::string seen[3];
  o.on_output = [&](int stream, std::string_view bytes) {
    ASSERT_TRUE(stream == 1 || stream == 2);
    seen[stream].append(bytes);
  };
  auto r = (*sb)->Exec(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(seen[1], r->stdout_data);
  EXPECT_EQ(seen[2], r->stderr_data);
  EXPECT_EQ(r->stdout_data, "out\n");
  EXPECT_EQ(r->stdout_data.size() + r->stderr_data.size(), 1000u);
  EXPECT_EQ(r->stdout_dropped, 0u);
  EXPECT_EQ(r->stderr_dropped, 4u + 5000u + 4u - 1000u);
  EXPECT_EQ(r->output_dropped_bytes, r->stdout_dropped + r->stderr_dropped);
}

TEST_F(SandboxTest, MissingCommandIsNotFound) {
  auto sb = Sandbox::Create(Config("missing"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecOptions o;
  o.argv = {"no-such-command"};
  auto r = (*sb)->Exec(o);
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
}

TEST_F(SandboxTest, UpperLayerShadowsLowerAndRootIsTheOverlay) {
  auto sb = Sandbox::Create(Config("layers"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(Sh(**sb, "cat /etc/shadowed /etc/motd").stdout_data, "top\nfrom base\n");
  EXPECT_EQ(Sh(**sb, "hostname").stdout_data, "sandbox\n");
  // PID namespace: the shell is not PID 1 (init is), and few processes exist.
  EXPECT_EQ(Sh(**sb, "cat /proc/1/cmdline >/dev/null && echo $$ | grep -qv '^1$' && echo ok")
                .stdout_data,
            "ok\n");
  // Only lo in the net namespace.
  EXPECT_EQ(Sh(**sb, "ls /sys/class/net").stdout_data, "lo\n");
}

TEST_F(SandboxTest, EachSandboxHasItsOwnNetworkNamespaceWithLoUp) {
  // More sandboxes than the namespace pool holds by default, so that both
  // pooled namespaces and cloned ones (on a miss) are covered.
  std::vector<std::unique_ptr<Sandbox>> sbs;
  std::set<std::string> namespaces;
  char host[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/net", host, sizeof(host) - 1), 0);
  for (int i = 0; i < 6; ++i) {
    auto sb = Sandbox::Create(Config(absl::StrCat("net", i)));
    ASSERT_TRUE(sb.ok()) << sb.status();
    // (Through netlink: /sys shows the node's shared sysfs, mount.h.)
    EXPECT_NE(Sh(**sb, "ip -o link show lo").stdout_data.find("UP"), std::string::npos) << "lo not up";
    std::string ns = Sh(**sb, "readlink /proc/self/ns/net").stdout_data;
    EXPECT_NE(ns, std::string(host) + "\n");
    EXPECT_TRUE(namespaces.insert(ns).second) << "two sandboxes share " << ns;
    sbs.push_back(std::move(*sb));
  }
}

TEST_F(SandboxTest, ExecProcessesRunWithReducedCapabilitiesAndNoNewPrivs) {
  auto sb = Sandbox::Create(Config("caps"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecResult r = Sh(**sb, "grep -E '^(CapBnd|CapEff|NoNewPrivs|Seccomp):' /proc/self/status");
  EXPECT_NE(r.stdout_data.find("NoNewPrivs:\t1"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("Seccomp:\t2"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("CapBnd:\t00000000800405fb"), std::string::npos) << r.stdout_data;
}

TEST_F(SandboxTest, ResetDropsWritesAndKeepsTheSandboxUsable) {
  auto sb = Sandbox::Create(Config("reset"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  Sh(**sb, "echo scribble > /etc/motd; touch /new");
  EXPECT_EQ(Sh(**sb, "cat /etc/motd; ls /new").stdout_data, "scribble\n/new\n");
  ASSERT_TRUE((*sb)->Reset().ok());
  ExecResult r = Sh(**sb, "cat /etc/motd; ls /new 2>/dev/null; echo done");
  EXPECT_EQ(r.stdout_data, "from base\ndone\n");
}

// Every new mount namespace copies the host's mount table: a sandbox that
// left mounts there would make each later create, and each sandbox's
// namespace, cost more with every sandbox alive (issue 22).
TEST_F(SandboxTest, ASandboxLeavesNoMountInTheHostsTable) {
  if (!OverlayAcceptsDetachedLayers()) {
    GTEST_SKIP() << "overlayfs here wants its layers and upper in the mount namespace (before Linux 6.15)";
  }
  auto sb = Sandbox::Create(Config("nomount"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto mountinfo = dsec::ReadSmallFile("/proc/self/mountinfo");
  ASSERT_TRUE(mountinfo.ok());
  EXPECT_EQ(mountinfo->find(dir_->path()), std::string::npos) << *mountinfo;
  // The writable layer is reached through the process's mount holder
  // (no descriptor of its own), or the detached tmpfs's descriptor.
  const std::string& upper_dir = (*sb)->upper_dir();
  EXPECT_TRUE(upper_dir.rfind("/proc/self/fd/", 0) == 0 ||
              (MountHolder::Default() != nullptr && upper_dir.find("/root/tmp/upper-") != std::string::npos))
      << upper_dir;
  Sh(**sb, "echo written > /etc/motd");
  auto upper = dsec::ReadSmallFile(absl::StrCat((*sb)->upper_dir(), "/etc/motd"));
  ASSERT_TRUE(upper.ok()) << upper.status();
  EXPECT_EQ(*upper, "written\n");
}

// One read-only sysfs for every sandbox (mount.h CloneSharedSysfs): a
// sysfs of its own per sandbox was a superblock more, and its mount
// compared against every sysfs superblock on the node.
TEST_F(SandboxTest, SandboxesShareOneReadOnlySysfs) {
  if (!CloneSharedSysfs().ok()) GTEST_SKIP() << CloneSharedSysfs().status();
  auto a = Sandbox::Create(Config("sys-a"));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Sandbox::Create(Config("sys-b"));
  ASSERT_TRUE(b.ok()) << b.status();
  const std::string dev_a = Sh(**a, "stat -c %d /sys").stdout_data;
  EXPECT_FALSE(dev_a.empty());
  EXPECT_EQ(dev_a, Sh(**b, "stat -c %d /sys").stdout_data);
  ExecResult w = Sh(**a, "echo 1 > /sys/kernel/profiling; echo rc=$?");
  EXPECT_NE(w.stdout_data.find("rc=1"), std::string::npos) << w.stdout_data << w.stderr_data;
  EXPECT_EQ(Sh(**a, "ls /sys/firmware | wc -l").stdout_data, "0\n");
  EXPECT_NE(Sh(**a, "ls /sys/devices/system/cpu").stdout_data.find("online"), std::string::npos);
}

// /dev is a directory of the sandbox's writable tmpfs, bound with devices
// allowed, not a tmpfs of its own: one superblock less per sandbox (each is
// a memory-cgroup-aware shrinker, docs/benchmarks.md, bench density).
TEST_F(SandboxTest, DevIsADirectoryOfTheWritableTmpfs) {
  auto sb = Sandbox::Create(Config("devdir"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  struct stat upper {};
  ASSERT_EQ(::stat((*sb)->upper_dir().c_str(), &upper), 0) << (*sb)->upper_dir();
  EXPECT_EQ(Sh(**sb, "stat -c %d /dev").stdout_data, absl::StrCat(upper.st_dev, "\n"));
  EXPECT_EQ(Sh(**sb, "stat -c %d /dev/shm").stdout_data, absl::StrCat(upper.st_dev, "\n"));
  // Its nodes work (devices allowed on this bind), /dev/shm takes files but
  // runs nothing, and the nodes cannot be replaced from inside.
  EXPECT_EQ(Sh(**sb, "head -c 5 /dev/urandom | wc -c; echo x > /dev/null && echo null-ok").stdout_data,
            "5\nnull-ok\n");
  EXPECT_EQ(Sh(**sb, "echo data > /dev/shm/f && cat /dev/shm/f").stdout_data, "data\n");
  ExecResult run = Sh(**sb, "cp /bin/busybox /dev/shm/bb && /dev/shm/bb true; echo rc=$?");
  EXPECT_NE(run.stdout_data.find("rc=126"), std::string::npos) << run.stdout_data << run.stderr_data;
  ExecResult swap = Sh(**sb, "mknod /dev/sda b 8 0; echo rc=$?");
  EXPECT_EQ(swap.stdout_data.find("rc=0"), std::string::npos) << swap.stdout_data;
  // The directory is outside the overlay's upper directory: nothing of /dev
  // shows in the writable layer (what pack_diff would pack).
  EXPECT_FALSE(dsec::PathExists(absl::StrCat((*sb)->upper_dir(), "/dev/shm/f")));
}

// Where the memory limit bounds the writable layer at least as tightly as
// its size (the daemon's defaults: 512 MiB of memory, a 1 GiB layer), the
// layer is a directory of one shared tmpfs (upper_store.h) rather than a
// tmpfs of its own: one superblock less per sandbox, and no mount to make
// at create or to undo at delete.
TEST_F(SandboxTest, WritableLayersWithinTheMemoryLimitShareOneStore) {
  UpperStore* store = UpperStore::Default();
  if (store == nullptr) GTEST_SKIP() << "no shared store for writable layers here (log says why)";
  SandboxConfig ca = Config("store-a");
  ca.upper_size_bytes = ca.limits.memory_bytes;
  SandboxConfig cb = Config("store-b");
  cb.upper_size_bytes = 4 * cb.limits.memory_bytes;
  const int64_t held_before = store->held();
  auto a = Sandbox::Create(ca);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Sandbox::Create(cb);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*a)->upper_in_store());
  ASSERT_TRUE((*b)->upper_in_store());
  EXPECT_EQ(store->held(), held_before + 2);
  struct stat ua {}, ub {};
  ASSERT_EQ(::stat((*a)->upper_dir().c_str(), &ua), 0) << (*a)->upper_dir();
  ASSERT_EQ(::stat((*b)->upper_dir().c_str(), &ub), 0) << (*b)->upper_dir();
  EXPECT_EQ(ua.st_dev, store->device());
  EXPECT_EQ(ub.st_dev, store->device());
  EXPECT_NE((*a)->upper_dir(), (*b)->upper_dir());
  // /dev is a directory of the store too; its nodes work.
  EXPECT_EQ(Sh(**a, "stat -c %d /dev").stdout_data, absl::StrCat(store->device(), "\n"));
  EXPECT_EQ(Sh(**a, "echo x > /dev/null && head -c 3 /dev/zero | wc -c").stdout_data, "3\n");
  // One sandbox's writes are its own: invisible in the other's root, and
  // in the other's part of the store.
  Sh(**a, "echo mine > /etc/owner-a && mkdir -p /work/x && echo f > /work/x/f");
  EXPECT_EQ(Sh(**a, "cat /etc/owner-a").stdout_data, "mine\n");
  EXPECT_EQ(Sh(**b, "cat /etc/owner-a 2>/dev/null; ls /work 2>/dev/null | wc -l").stdout_data, "0\n");
  EXPECT_TRUE(dsec::PathExists(absl::StrCat((*a)->upper_dir(), "/work/x/f")));
  EXPECT_FALSE(dsec::PathExists(absl::StrCat((*b)->upper_dir(), "/etc/owner-a")));
  // What the sandbox writes there is charged to its memory cgroup (the
  // bound that replaces the tmpfs's size).
  const std::optional<uint64_t> before = (*a)->cgroups().MemoryUsageBytes();
  ASSERT_TRUE(before.has_value());
  Sh(**a, "dd if=/dev/zero of=/eight bs=64k count=128 2>/dev/null; sync");
  const std::optional<uint64_t> after = (*a)->cgroups().MemoryUsageBytes();
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(*after, *before + (7u << 20)) << *before << " -> " << *after;
  // A reset starts from an empty layer in a new directory; a destroy
  // removes the directory.
  const std::string old_upper = (*a)->upper_dir();
  ASSERT_TRUE((*a)->Reset().ok());
  EXPECT_FALSE(dsec::PathExists(old_upper)) << old_upper;
  EXPECT_EQ(Sh(**a, "cat /etc/owner-a 2>/dev/null | wc -l").stdout_data, "0\n");
  EXPECT_EQ(store->held(), held_before + 2);
  const std::string upper_a = (*a)->upper_dir(), upper_b = (*b)->upper_dir();
  ASSERT_TRUE((*a)->Destroy().ok());
  ASSERT_TRUE((*b)->Destroy().ok());
  EXPECT_FALSE(dsec::PathExists(upper_a)) << upper_a;
  EXPECT_FALSE(dsec::PathExists(upper_b)) << upper_b;
  EXPECT_EQ(store->held(), held_before);
}

// A write past the memory limit into a layer in the store stops at the
// limit: the store has no size of its own per sandbox, and its pages cannot
// go to swap (noswap).
TEST_F(SandboxTest, AWritableLayerInTheStoreStopsAtTheMemoryLimit) {
  UpperStore* store = UpperStore::Default();
  if (store == nullptr) GTEST_SKIP() << "no shared store for writable layers here (log says why)";
  SandboxConfig c = Config("store-full");
  c.limits.memory_bytes = 32 << 20;
  c.upper_size_bytes = 64 << 20;
  auto sb = Sandbox::Create(c);
  ASSERT_TRUE(sb.ok()) << sb.status();
  ASSERT_TRUE((*sb)->upper_in_store());
  ExecOptions o;
  o.argv = {"/bin/sh", "-c", "dd if=/dev/zero of=/big bs=64k count=768 2>/dev/null; echo rc=$?"};
  o.timeout_ms = 20000;
  absl::StatusOr<ExecResult> r = (*sb)->Exec(o);  // may be the OOM killer's victim: not checked
  struct stat st {};
  ASSERT_EQ(::stat(absl::StrCat((*sb)->upper_dir(), "/big").c_str(), &st), 0);
  EXPECT_LE(static_cast<uint64_t>(st.st_size), c.limits.memory_bytes)
      << (r.ok() ? r->stdout_data : r.status().ToString());
  EXPECT_GT((*sb)->cgroups().OomKills() + (r.ok() && r->stdout_data.find("rc=0") == std::string::npos ? 1 : 0),
            0u);
}

// The init is out of reach of its memory cgroup's OOM killer where the
// runtime may put it there (CAP_SYS_RESOURCE; not on every host: then it
// stays at 0, said once in the log), and the processes it starts never
// are: they start at 0, so that a sandbox that fills its memory has
// something the killer may take.
TEST_F(SandboxTest, TheInitIsShieldedFromTheOomKillerAndItsProcessesAreNot) {
  auto sb = Sandbox::Create(Config("oom-shield"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto status = dsec::ReadSmallFile("/proc/self/status");
  ASSERT_TRUE(status.ok());
  const size_t at = status->find("CapEff:\t");
  ASSERT_NE(at, std::string::npos);
  const uint64_t eff = std::stoull(status->substr(at + 8, 16), nullptr, 16);
  // Without the capability nothing is shielded and every score is the
  // default 0: nothing here could tell the toggling apart.
  if (((eff >> CAP_SYS_RESOURCE) & 1) == 0) {
    GTEST_SKIP() << "no CAP_SYS_RESOURCE here: the runtime cannot shield the init (ShieldInitFromOom)";
  }
  ExecResult r = Sh(**sb, "cat /proc/self/oom_score_adj /proc/1/oom_score_adj");
  EXPECT_EQ(r.stdout_data, "0\n-1000\n") << r.stderr_data;
  // Twice: the init went back behind its shield after the first.
  EXPECT_EQ(Sh(**sb, "cat /proc/self/oom_score_adj").stdout_data, "0\n");
}

// A copy (exec.h copy_to_fd) writes the data into a descriptor of the
// runtime's from inside the sandbox: the file has it whole, its pages are
// the sandbox's (its memory cgroup's peak holds them), and a write that
// fails is its errno.
TEST_F(SandboxTest, ACopyWritesIntoTheRuntimesDescriptorFromInsideTheSandbox) {
  auto sb = Sandbox::Create(Config("copy"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string path = absl::StrCat((*sb)->upper_dir(), "/copied");
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid());
  ExecOptions o;
  o.argv = {"(copy)"};
  o.copy_to_fd = fd.get();
  o.stdin_data = std::string(8 << 20, 'c');
  absl::StatusOr<ExecResult> r = (*sb)->Exec(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), 0);
  EXPECT_EQ(Sh(**sb, "wc -c < /copied").stdout_data, absl::StrCat(8 << 20, "\n"));
  ASSERT_TRUE(r->cgroup_peak_bytes.has_value());
  EXPECT_GE(*r->cgroup_peak_bytes, uint64_t{8} << 20);
  // Read-only: the copy's write fails with EBADF, its exit status.
  ScopedFd ro(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(ro.valid());
  o.copy_to_fd = ro.get();
  o.stdin_data = std::string(1, 'x');
  r = (*sb)->Exec(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, EBADF);
}

// A memory limit above the layer's size would not bound it: such a layer
// gets a tmpfs of its own, full at its size.
TEST_F(SandboxTest, AMemoryLimitAboveTheLayersSizeGetsATmpfsOfItsOwn) {
  SandboxConfig c = Config("own-tmpfs");
  ASSERT_GT(c.limits.memory_bytes, c.upper_size_bytes);
  auto sb = Sandbox::Create(c);
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_FALSE((*sb)->upper_in_store());
  if (UpperStore* store = UpperStore::Default(); store != nullptr) {
    struct stat st {};
    ASSERT_EQ(::stat((*sb)->upper_dir().c_str(), &st), 0);
    EXPECT_NE(st.st_dev, store->device());
  }
  ExecResult w = Sh(**sb, "dd if=/dev/zero of=/big bs=64k count=512 2>&1; echo rc=$?");
  EXPECT_EQ(w.stdout_data.find("rc=0"), std::string::npos) << w.stdout_data;
  EXPECT_NE(w.stdout_data.find("No space left"), std::string::npos) << w.stdout_data;
}

TEST_F(SandboxTest, DestroyRemovesMountsCgroupsAndStateDir) {
  auto sb = Sandbox::Create(Config("destroy"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string state = (*sb)->state_dir();
  const std::vector<std::string> cgroups = (*sb)->cgroups().dirs();
  ASSERT_FALSE(cgroups.empty());
  pid_t init = (*sb)->init_pid();
  ASSERT_TRUE((*sb)->Destroy().ok());
  auto mountinfo = dsec::ReadSmallFile("/proc/self/mountinfo");
  ASSERT_TRUE(mountinfo.ok());
  EXPECT_EQ(mountinfo->find(state), std::string::npos);
  for (const auto& d : cgroups) EXPECT_FALSE(dsec::PathExists(d)) << d;
  EXPECT_FALSE(dsec::PathExists(state));
  EXPECT_FALSE(ProcessIdentity(init).has_value());
}

TEST_F(SandboxTest, CleanupRemovesTheSandboxOfAKilledRuntime) {
  SandboxConfig config = Config("orphan");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  ScopedFd ready_r(ready[0]), ready_w(ready[1]);
  pid_t runtime = ::fork();
  if (runtime == 0) {
    // A stand-in runtime process: holds a sandbox with a running command.
    ready_r.Reset();
    auto sb = Sandbox::Create(config);
    if (!sb.ok()) ::_exit(1);
    ExecOptions o;
    o.argv = {"sh", "-c", "echo started; sleep 1000 & sleep 1000"};
    o.timeout_ms = 600000;
    char one = 1;
    (void)!::write(ready_w.get(), &one, 1);
    (void)(*sb)->Exec(o);
    ::_exit(0);
  }
  ready_w.Reset();
  char c = 0;
  ASSERT_EQ(::read(ready_r.get(), &c, 1), 1);
  ready_r.Reset();
  const std::string state = absl::StrCat(config.state_root, "/", config.id);
  auto init_record = dsec::ReadSmallFile(absl::StrCat(state, "/init"));
  auto cgroup_record = dsec::ReadSmallFile(absl::StrCat(state, "/cgroups"));
  ASSERT_TRUE(init_record.ok() && cgroup_record.ok());
  // A live owner's sandbox is left alone.
  auto none = CleanupOrphans(config.state_root);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0);
  ASSERT_EQ(::kill(runtime, SIGKILL), 0);
  ASSERT_EQ(::waitpid(runtime, nullptr, 0), runtime);

  auto removed = CleanupOrphans(config.state_root);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 1);
  EXPECT_FALSE(dsec::PathExists(state));
  auto mountinfo = dsec::ReadSmallFile("/proc/self/mountinfo");
  EXPECT_EQ(mountinfo->find(state), std::string::npos);
  for (absl::string_view d : absl::StrSplit(*cgroup_record, '\n', absl::SkipEmpty())) {
    EXPECT_FALSE(dsec::PathExists(std::string(d))) << d;
  }
  int init_pid = std::stoi(init_record->substr(0, init_record->find(' ')));
  auto now = ProcessIdentity(init_pid);
  EXPECT_TRUE(!now || *now != *init_record) << "init survived cleanup";
}

// Execs are started by the sandbox's init (init_process.h): nothing else
// of the runtime lives in the sandbox, execs keep working after timeouts
// and failed starts, and nothing stays behind them.
TEST_F(SandboxTest, InitStartsEveryExecAndIsTheOnlyProcessLeft) {
  auto sb = Sandbox::Create(Config("init-execs"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto expect_only_init = [&] {
    for (const std::string& d : (*sb)->cgroups().dirs()) {
      auto procs = dsec::ReadSmallFile(absl::StrCat(d, "/cgroup.procs"));
      ASSERT_TRUE(procs.ok());
      EXPECT_EQ(*procs, absl::StrCat((*sb)->init_pid(), "\n")) << d;
    }
  };
  // `echo` and the glob are shell builtins: init and the shell itself.
  ExecResult r = Sh(**sb, "set -- /proc/[0-9]*; echo $# $PPID");
  EXPECT_EQ(r.stdout_data, "2 1\n");
  expect_only_init();
  ExecOptions slow;
  slow.argv = {"sleep", "30"};
  slow.timeout_ms = 200;
  auto t = (*sb)->Exec(slow);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->timed_out);
  EXPECT_EQ(t->signal, SIGKILL);
  for (int i = 0; i < 3; ++i) {
    ExecOptions missing;
    missing.argv = {"no-such-command"};
    EXPECT_TRUE(absl::IsNotFound((*sb)->Exec(missing).status()));
    ExecOptions bad_cwd;
    bad_cwd.argv = {"true"};
    bad_cwd.cwd = "/no/such/dir";
    EXPECT_TRUE(absl::IsNotFound((*sb)->Exec(bad_cwd).status()));
    EXPECT_EQ(Sh(**sb, absl::StrCat("echo round ", i)).stdout_data, absl::StrCat("round ", i, "\n"));
  }
  ExecResult after = Sh(**sb, "echo still; exit 3");
  EXPECT_EQ(after.stdout_data, "still\n");
  EXPECT_EQ(after.status(), 3);
  expect_only_init();
  ASSERT_TRUE((*sb)->Reset().ok());
  EXPECT_EQ(Sh(**sb, "echo reset").stdout_data, "reset\n");
  expect_only_init();
}

// The request crosses a socket to the init: large argv and environments
// (past the init's standing buffer) arrive intact, and what cannot be
// sent is refused before anything starts.
TEST_F(SandboxTest, LargeRequestsArriveWholeAndOversizedOnesAreRefused) {
  auto sb = Sandbox::Create(Config("big-exec"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ExecOptions big;
  big.argv = {"sh", "-c", "echo ${#BIG} $#", "sh"};
  for (int i = 0; i < 2000; ++i) big.argv.push_back(std::string(100, 'a'));
  big.env = {"PATH=/bin", absl::StrCat("BIG=", std::string(100 << 10, 'b'))};
  auto r = (*sb)->Exec(big);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_data, absl::StrCat(100 << 10, " 2000\n"));
  ExecOptions huge;
  huge.argv = {"true", std::string(17 << 20, 'x')};
  EXPECT_TRUE(absl::IsInvalidArgument((*sb)->Exec(huge).status()));
  ExecOptions nul;
  nul.argv = {"echo", std::string("a\0b", 3)};
  EXPECT_TRUE(absl::IsInvalidArgument((*sb)->Exec(nul).status()));
  EXPECT_EQ(Sh(**sb, "echo fine").stdout_data, "fine\n");
}

// The init is its own small program (init_launch.h), not a copy of the
// runtime: its memory does not grow with the runtime's.
TEST_F(SandboxTest, InitIsTheSmallSandboxInitProgram) {
  auto sb = Sandbox::Create(Config("init-exe"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto binary = FindSandboxInit("");
  ASSERT_TRUE(binary.ok()) << binary.status();
  char exe[4096] = {};
  ASSERT_GT(::readlink(absl::StrCat("/proc/", (*sb)->init_pid(), "/exe").c_str(), exe,
                       sizeof(exe) - 1), 0);
  char want[4096] = {};
  ASSERT_NE(::realpath(binary->c_str(), want), nullptr);
  EXPECT_STREQ(exe, want);
  auto status = dsec::ReadSmallFile(absl::StrCat("/proc/", (*sb)->init_pid(), "/status"));
  ASSERT_TRUE(status.ok());
  size_t at = status->find("RssAnon:");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stoul(status->substr(at + 8)), 1024u) << status->substr(at, 40);  // KiB
  EXPECT_EQ(Sh(**sb, "echo ok").stdout_data, "ok\n");
}

namespace {

// A /proc/<pid>/status field's first number ("PPid:", ...), or -1.
long StatusField(pid_t pid, const std::string& field) {
  auto status = dsec::ReadSmallFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return -1;
  size_t at = status->find(field);
  if (at == std::string::npos) return -1;
  return std::stol(status->substr(at + field.size()));
}

size_t OpenDescriptors(pid_t pid) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"))) {
    (void)e;
    ++n;
  }
  return n;
}

}  // namespace

// Inits are cloned by the launcher (init_launch.h), whose descriptor table
// stays small however many descriptors the runtime holds (a launch copies
// the cloner's table), and they are still the runtime's children.
TEST_F(SandboxTest, InitsComeFromALauncherThatHoldsFewDescriptors) {
  std::vector<ScopedFd> held;
  for (int i = 0; i < 2000; ++i) {
    held.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(held.back().valid());
  }
  auto sb = Sandbox::Create(Config("launcher-fds"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto binary = FindSandboxInit("");
  ASSERT_TRUE(binary.ok()) << binary.status();
  const pid_t launcher = InitLauncherPid(*binary);
  ASSERT_GT(launcher, 0);
  EXPECT_EQ(StatusField(launcher, "PPid:"), ::getpid());
  EXPECT_LE(OpenDescriptors(launcher), 7u);  // 0-2, its socket, its executable, /dev/null, the stage
  // Its mount namespace is the stage alone, which the inits copy.
  auto mounts = dsec::ReadSmallFile(absl::StrCat("/proc/", launcher, "/mountinfo"));
  ASSERT_TRUE(mounts.ok());
  EXPECT_EQ(std::count(mounts->begin(), mounts->end(), '\n'), 1) << *mounts;
  EXPECT_NE(mounts->find(" / / ro,"), std::string::npos) << *mounts;
  auto comm = dsec::ReadSmallFile(absl::StrCat("/proc/", (*sb)->init_pid(), "/comm"));
  ASSERT_TRUE(comm.ok());
  EXPECT_EQ(*comm, "dsec-sandbox-in\n");
  EXPECT_EQ(StatusField((*sb)->init_pid(), "PPid:"), ::getpid());
  EXPECT_LE(OpenDescriptors((*sb)->init_pid()), 12u);
  // Nor a descriptor table sized for ours (a table never shrinks).
  EXPECT_LE(StatusField((*sb)->init_pid(), "FDSize:"), 64);
  EXPECT_EQ(Sh(**sb, "echo ok").stdout_data, "ok\n");
  ASSERT_TRUE((*sb)->Destroy().ok());
}

// A launcher killed from outside is replaced by the next create, which
// succeeds; the dead one is reaped.
TEST_F(SandboxTest, ALauncherKilledFromOutsideIsReplacedByTheNextCreate) {
  auto first = Sandbox::Create(Config("launcher-a"));
  ASSERT_TRUE(first.ok()) << first.status();
  auto binary = FindSandboxInit("");
  ASSERT_TRUE(binary.ok()) << binary.status();
  const pid_t launcher = InitLauncherPid(*binary);
  ASSERT_GT(launcher, 0);
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(launcher), &info, WEXITED | WNOWAIT), 0);
  auto second = Sandbox::Create(Config("launcher-b"));
  ASSERT_TRUE(second.ok()) << second.status();
  const pid_t replacement = InitLauncherPid(*binary);
  EXPECT_GT(replacement, 0);
  EXPECT_NE(replacement, launcher);
  // Reaped: no longer our child.
  EXPECT_NE(::waitid(P_PID, static_cast<id_t>(launcher), &info, WEXITED | WNOHANG | WNOWAIT), 0);
  EXPECT_EQ(Sh(**second, "echo ok").stdout_data, "ok\n");
  EXPECT_EQ(Sh(**first, "echo ok").stdout_data, "ok\n");
  ASSERT_TRUE((*second)->Destroy().ok());
  ASSERT_TRUE((*first)->Destroy().ok());
}

// The sandbox's mount namespace holds its root over the launcher's stage
// (init_trampoline.h) and nothing of the host's. Seen from a copy of that
// namespace (so the sandbox is left alone) with its root unmounted: the
// namespace's own root is an empty, read-only tmpfs where nothing can be
// made. And the classic chroot escape (chroot below, then ".." from
// outside the new root), made inside the sandbox's namespace with every
// capability, stays in the sandbox's root.
TEST_F(SandboxTest, UnderTheSandboxsRootIsOnlyTheEmptyReadOnlyStage) {
  auto sb = Sandbox::Create(Config("stage"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ScopedFd ns(::open(absl::StrCat("/proc/", (*sb)->init_pid(), "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(ns.valid());
  // The host's /proc: the sandbox's shows only its own pid namespace.
  ScopedFd host_proc(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(host_proc.valid());
  auto in_child = [&](bool escape) {
    const pid_t child = ::fork();
    if (child < 0) return -1;
    if (child == 0) {
      // The namespace's root, followed down: the sandbox's root.
      if (::setns(ns.get(), CLONE_NEWNS) != 0) ::_exit(10);
      struct stat st{};
      if (::stat("/bin/sh", &st) != 0) ::_exit(11);
      if (escape) {
        if (::chroot("/dev") != 0) ::_exit(12);
        for (int i = 0; i < 16; ++i) {
          if (::chdir("..") != 0) ::_exit(13);
        }
        ::_exit(::stat("bin/sh", &st) == 0 ? 0 : 14);  // still the sandbox's root
      }
      if (::unshare(CLONE_NEWNS) != 0) ::_exit(20);
      const int copy = ::openat(host_proc.get(), "self/ns/mnt", O_RDONLY | O_CLOEXEC);
      if (copy < 0) ::_exit(21);
      if (::umount2("/", MNT_DETACH) != 0) ::_exit(22);  // no stage: the root cannot go
      if (::setns(copy, CLONE_NEWNS) != 0) ::_exit(23);
      struct statfs fs{};
      if (::statfs("/", &fs) != 0) ::_exit(24);
      if (fs.f_type != TMPFS_MAGIC) ::_exit(25);
      if ((fs.f_flags & ST_RDONLY) == 0) ::_exit(26);
      DIR* dir = ::opendir("/");
      if (dir == nullptr) ::_exit(27);
      int entries = 0;
      while (dirent* e = ::readdir(dir)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++entries;
      }
      if (entries != 0) ::_exit(28);
      if (::mkdir("/x", 0700) == 0 || errno != EROFS) ::_exit(29);
      ::_exit(0);
    }
    int status = 0;
    if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  };
  EXPECT_EQ(in_child(true), 0);
  EXPECT_EQ(in_child(false), 0);
  EXPECT_EQ(Sh(**sb, "echo ok; ls /proc/self/fd > /dev/null && echo proc").stdout_data, "ok\nproc\n");
}

// The launcher answers a malformed request (wrong magic, descriptors that
// do not match its mask, flags beyond new namespaces, a short message)
// with EPROTO and no child, and exits 0 when the runtime's end closes.
TEST(InitLauncherProtocolTest, RefusesMalformedRequestsAndExitsWithItsRuntime) {
  auto binary = FindSandboxInit("");
  ASSERT_TRUE(binary.ok()) << binary.status();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  ScopedFd ours(sv[0]), theirs(sv[1]);
  const int sources[kInitSources] = {theirs.get(), -1, -1, -1, -1, -1};
  std::vector<char> stack(64 << 10);
  int pidfd_raw = -1;
  const pid_t pid = CloneInitProcess(binary->c_str(), "dsec-sandbox-init", kLauncherFlag, sources, -1, 0,
                                     &pidfd_raw, stack.data(), stack.size());
  ASSERT_GT(pid, 0);
  ScopedFd pidfd(pidfd_raw);
  theirs.Reset();
  auto ask = [&](const void* data, size_t len, const int* fds, size_t nfds) {
    EXPECT_EQ(dsec::SendWithFds(ours.get(), data, len, fds, nfds), static_cast<ssize_t>(len));
    LauncherReply reply;
    int got_fd = -1;
    size_t got = 0;
    EXPECT_EQ(dsec::ReceiveWithFds(ours.get(), &reply, sizeof(reply), &got_fd, 1, &got),
              static_cast<ssize_t>(sizeof(reply)));
    EXPECT_EQ(got, 0u);
    if (got == 1) ::close(got_fd);
    return reply;
  };
  LauncherRequest bad_magic;
  bad_magic.magic = 0;
  LauncherRequest missing_fd;
  missing_fd.present = 1;
  LauncherRequest user_ns;
  user_ns.clone_flags = CLONE_NEWUSER;
  ScopedFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int extra = null.get();
  LauncherRequest unasked_fd;  // present = 0, one attached
  for (auto [req, fds, nfds] : {std::tuple{&bad_magic, &extra, size_t{0}},
                                std::tuple{&missing_fd, &extra, size_t{0}},
                                std::tuple{&user_ns, &extra, size_t{0}},
                                std::tuple{&unasked_fd, &extra, size_t{1}}}) {
    LauncherReply r = ask(req, sizeof(*req), fds, nfds);
    EXPECT_EQ(r.pid, 0);
    EXPECT_EQ(r.err, EPROTO);
  }
  LauncherReply r = ask("abc", 3, nullptr, 0);
  EXPECT_EQ(r.err, EPROTO);
  ours.Reset();
  siginfo_t info{};
  ASSERT_EQ(::waitid(static_cast<idtype_t>(3) /* P_PIDFD */, static_cast<id_t>(pidfd.get()), &info,
                     WEXITED),
            0);
  EXPECT_EQ(info.si_code, CLD_EXITED);
  EXPECT_EQ(info.si_status, 0);
}

// A missing or broken init binary fails the create with the reason and
// leaves nothing behind.
TEST_F(SandboxTest, BadInitBinaryFailsTheCreateCleanly) {
  SandboxConfig missing = Config("init-missing");
  missing.init_binary = absl::StrCat(dir_->path(), "/no-such-init");
  auto r = Sandbox::Create(missing);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  const std::string junk = absl::StrCat(dir_->path(), "/junk-init");
  ASSERT_TRUE(testing::WriteTreeFile(dir_->path(), "junk-init", "not a program\n", 0755).ok());
  SandboxConfig broken = Config("init-broken");
  broken.init_binary = junk;
  r = Sandbox::Create(broken);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("execve"), std::string::npos) << r.status();
  for (const SandboxConfig* c : {&missing, &broken}) {
    EXPECT_FALSE(dsec::PathExists(absl::StrCat(c->state_root, "/", c->id)));
    auto info = dsec::ReadSmallFile("/proc/self/mountinfo");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->find(c->id), std::string::npos);
  }
}

// A sandbox whose init died (killed from the host, say) fails its execs
// with FailedPrecondition instead of hanging, and still destroys cleanly.
TEST_F(SandboxTest, ExecsFailCleanlyOnceTheInitIsGone) {
  auto sb = Sandbox::Create(Config("init-gone"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  ASSERT_EQ(::kill((*sb)->init_pid(), SIGKILL), 0);
  // The kill is asynchronous; the next exec finds the init gone either on
  // send or while waiting for its answer.
  ExecOptions t;
  t.argv = {"true"};
  for (int i = 0; i < 2; ++i) {
    auto r = (*sb)->Exec(t);
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  }
  EXPECT_TRUE((*sb)->Destroy().ok());
}

// Several execs of one sandbox run at once: each waits for a file that a
// later exec makes (with execs one at a time, the first would wait until
// its timeout), and each gets its own output and status.
TEST_F(SandboxTest, ExecsRunAtOnceEachWithItsOwnOutputAndStatus) {
  auto sb = Sandbox::Create(Config("concurrent"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  constexpr int kWaiters = 4;
  std::vector<ExecResult> results(kWaiters);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      results[i] = Sh(**sb, absl::StrCat("while [ ! -e /tmp/go ]; do sleep 0.01; done; echo waiter ", i,
                                         "; echo err ", i, " >&2; exit ", i));
    });
  }
  ExecResult go = Sh(**sb, "touch /tmp/go; echo go");
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(go.stdout_data, "go\n");
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_FALSE(results[i].timed_out) << i;
    EXPECT_EQ(results[i].stdout_data, absl::StrCat("waiter ", i, "\n"));
    EXPECT_EQ(results[i].stderr_data, absl::StrCat("err ", i, "\n"));
    ASSERT_TRUE(results[i].exit_code.has_value()) << i;
    EXPECT_EQ(*results[i].exit_code, i);
  }
  EXPECT_EQ(Sh(**sb, "echo after").stdout_data, "after\n");
}

// Stdin stays open through the exec's control: a line written after the
// command answered the first one reaches it, and closing stdin ends it.
TEST_F(SandboxTest, StdinStreamsThroughTheExecsControlUntilItIsClosed) {
  auto sb = Sandbox::Create(Config("stdin-stream"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto control = ExecControl::Create(/*stdin_open=*/true);
  ASSERT_TRUE(control.ok()) << control.status();
  ExecOptions o;
  o.argv = {"sh", "-c", "while read l; do echo \"got $l\"; done; echo eof"};
  o.stdin_data = "first\n";
  o.control = *control;
  o.timeout_ms = 20000;
  std::string seen;
  bool sent = false;
  o.on_output = [&](int, std::string_view bytes) {
    seen.append(bytes);
    if (!sent && absl::StrContains(seen, "got first\n")) {
      sent = true;
      EXPECT_TRUE((*control)->WriteStdin("second\n").ok());
      EXPECT_TRUE((*control)->CloseStdin().ok());
    }
  };
  auto r = (*sb)->Exec(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_data, "got first\ngot second\neof\n");
  EXPECT_EQ(r->status(), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition((*control)->WriteStdin("late\n")));
}

// A signal through one exec's control reaches that command alone: SIGKILL
// ends it (not as a timeout), SIGTERM reaches the other's trap.
TEST_F(SandboxTest, ASignalReachesOneExecAndLeavesTheOthers) {
  auto sb = Sandbox::Create(Config("signal-one"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto killed = ExecControl::Create(false);
  auto trapped = ExecControl::Create(false);
  ASSERT_TRUE(killed.ok() && trapped.ok());
  auto run = [&](std::shared_ptr<ExecControl> c, std::string script) {
    ExecOptions o;
    o.argv = {"sh", "-c", std::move(script)};
    o.control = std::move(c);
    o.timeout_ms = 20000;
    auto r = (*sb)->Exec(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ExecResult{};
  };
  ExecResult r1, r2;
  std::thread t1([&] { r1 = run(*killed, "sleep 30"); });
  std::thread t2([&] { r2 = run(*trapped, "trap 'echo term; exit 3' TERM; while :; do sleep 0.05; done"); });
  for (int i = 0; i < 2000 && !((*killed)->running() && (*trapped)->running()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE((*killed)->Signal(SIGKILL).ok());
  t1.join();
  EXPECT_FALSE(r1.timed_out);
  EXPECT_EQ(r1.signal, SIGKILL);
  EXPECT_TRUE((*trapped)->running());
  // The trap is set once the shell runs its loop.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE((*trapped)->Signal(SIGTERM).ok());
  t2.join();
  EXPECT_EQ(r2.stdout_data, "term\n");
  EXPECT_EQ(r2.exit_code, 3);
  EXPECT_FALSE((*trapped)->running());
}

// A SIGKILL through the control is one command killed by its client: its
// process group goes, a process it moved out of the group (setsid) stays;
// the timeout's kill takes that one too.
TEST_F(SandboxTest, AControlsSigkillEndsTheGroupAndLeavesStrays) {
  auto sb = Sandbox::Create(Config("kill-one"));
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto control = ExecControl::Create(false);
  ASSERT_TRUE(control.ok());
  ExecOptions o;
  // "go" once the stray leads a session of its own (field 6 of its stat).
  o.argv = {"sh", "-c",
            "setsid sleep 301 & p=$!; while [ \"$(cut -d' ' -f6 /proc/$p/stat)\" != \"$p\" ]; do sleep 0.01; done; "
            "echo go; sleep 302"};
  o.control = *control;
  o.timeout_ms = 20000;
  std::string seen;
  o.on_output = [&](int stream, std::string_view bytes) {
    if (stream != 1) return;
    seen.append(bytes);
    if (seen == "go\n") {
      EXPECT_TRUE((*control)->Signal(SIGKILL).ok());
    }
  };
  auto r = (*sb)->Exec(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->stray_processes_killed, 0);
  const std::string procs = "for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null; echo; done";
  ExecResult ps = Sh(**sb, procs);
  EXPECT_TRUE(absl::StrContains(ps.stdout_data, std::string("sleep\0" "301", 9))) << ps.stdout_data;
  EXPECT_FALSE(absl::StrContains(ps.stdout_data, std::string("sleep\0" "302", 9))) << ps.stdout_data;
  // A timeout, alone in the sandbox, takes the stray too.
  ExecOptions t;
  t.argv = {"sleep", "303"};
  t.timeout_ms = 200;
  auto timed = (*sb)->Exec(t);
  ASSERT_TRUE(timed.ok()) << timed.status();
  EXPECT_TRUE(timed->timed_out);
  EXPECT_GE(timed->stray_processes_killed, 1);
  ps = Sh(**sb, procs);
  EXPECT_FALSE(absl::StrContains(ps.stdout_data, std::string("sleep\0" "301", 9))) << ps.stdout_data;
}

// The state root's tmpfs holds 10,000 sandboxes' records and more (three
// pages each); a smaller one left by an earlier runtime is grown, its
// flags kept; a directory of a tmpfs is not a mount of its own: left.
TEST(StateRootTmpfsTest, IsLargeEnoughForTensOfThousandsAndASmallOneIsGrown) {
  char tmpl[] = "/tmp/dsec-stateroot-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string base = tmpl;
  auto size_of = [](const std::string& p) -> uint64_t {
    struct statfs fs {};
    if (::statfs(p.c_str(), &fs) != 0 || fs.f_type != TMPFS_MAGIC) return 0;
    return static_cast<uint64_t>(fs.f_blocks) * static_cast<uint64_t>(fs.f_bsize);
  };
  const std::string fresh = base + "/fresh", old = base + "/old";
  ASSERT_EQ(::mkdir(fresh.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(old.c_str(), 0700), 0);
  auto mounted = MountStateRootTmpfs(fresh);
  ASSERT_TRUE(mounted.ok()) << mounted.status();
  EXPECT_TRUE(*mounted);
  EXPECT_EQ(size_of(fresh), kStateRootTmpfsBytes);
  EXPECT_GE(kStateRootTmpfsBytes / (3 * 4096), 10'000u * 8);
  ASSERT_EQ(::mount("tmpfs", old.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=64m"), 0);
  ASSERT_EQ(::mkdir((old + "/sub").c_str(), 0700), 0);
  auto sub = MountStateRootTmpfs(old + "/sub");
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_FALSE(*sub);
  EXPECT_EQ(size_of(old), 64u << 20);  // its directory is not the mount: left alone
  auto grown = MountStateRootTmpfs(old);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_FALSE(*grown);
  EXPECT_EQ(size_of(old), kStateRootTmpfsBytes);
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(old.c_str(), &vfs), 0);
  EXPECT_TRUE((vfs.f_flag & ST_NOSUID) && (vfs.f_flag & ST_NODEV) && (vfs.f_flag & ST_NOEXEC)) << vfs.f_flag;
  EXPECT_TRUE(dsec::PathExists(old + "/sub"));  // remounted, not replaced
  EXPECT_EQ(::umount2(fresh.c_str(), MNT_DETACH), 0);
  EXPECT_EQ(::umount2(old.c_str(), MNT_DETACH), 0);
  EXPECT_TRUE(RemoveTree(base).ok());
}

}  // namespace
}  // namespace dsec::container
