// SPDX-License-Identifier: Apache-2.0
// One test per attack on the container tier. Each asserts the attack is
// contained and that the host, the runtime and another sandbox are not
// affected; the fixture's teardown asserts nothing is left behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "tests/security/attack_fixture.h"
#include "base/scoped_fd.h"

namespace dsec::container::security {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// `yes` floods stdout: the output is capped, the excess counted, and the
// exec ends at its timeout however fast the writer is.
TEST_F(ContainerAttackTest, YesFloodIsCappedCountedAndReturnsPromptly) {
  Sandbox& sb = NewSandbox("yes");
  Sandbox& other = NewSandbox("yes-other");
  ExecOptions o;
  o.argv = {"yes"};
  o.timeout_ms = 1500;
  o.output_cap_bytes = 64 << 10;
  o.output_rate_bytes_per_s = 1 << 20;
  ExecResult r = Run(sb, o);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal.value_or(0), SIGKILL);
  EXPECT_LE(r.stdout_data.size(), 64u << 10);
  EXPECT_GT(r.stdout_data.size(), 0u);
  EXPECT_GT(r.output_dropped_bytes, 1u << 20) << "yes writes far more than the cap in 1.5 s";
  EXPECT_LT(r.wall_ns, 5 * kSecond);
  // A writer that stops by itself is never blocked by the cap: 200 MB
  // through a 64 KiB cap ends with exit 0 and everything but 64 KiB dropped.
  o.argv = {"head", "-c", "200000000", "/dev/zero"};
  o.timeout_ms = 60000;
  r = Run(sb, o);
  EXPECT_EQ(r.status(), 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.stdout_data.size(), 64u << 10);
  EXPECT_EQ(r.output_dropped_bytes, 200000000u - (64u << 10));
  EXPECT_EQ(Sh(sb, "echo still-usable").stdout_data, "still-usable\n");
  EXPECT_EQ(Sh(other, "echo unaffected").stdout_data, "unaffected\n");
}

// A fork bomb hits the pids limit; the exec returns at its timeout, every
// bomb process is killed and the sandbox stays usable.
TEST_F(ContainerAttackTest, ForkBombIsHeldByThePidsLimit) {
  Sandbox& sb = NewSandbox("forkbomb", [](SandboxConfig& c) { c.limits.pids_max = 48; });
  Sandbox& other = NewSandbox("forkbomb-other");
  // Either the timeout ends it, or the shell itself fails to fork `sleep`
  // at the limit and exits; both must return with the bomb gone.
  ExecResult r = Sh(sb, "bomb() { bomb | bomb & }; bomb; sleep 1000", 3000);
  EXPECT_LT(r.wall_ns, 15 * kSecond);
  std::string pids_dir;
  for (const auto& d : sb.cgroups().dirs()) {
    if (d.find("/pids/") != std::string::npos) pids_dir = d;
  }
  if (!pids_dir.empty()) {
    auto events = dsec::ReadSmallFile(absl::StrCat(pids_dir, "/pids.events"));
    ASSERT_TRUE(events.ok());
    EXPECT_NE(*events, "max 0\n") << "the bomb never reached pids.max";
  }
  ExpectOnlyInit(sb);
  EXPECT_EQ(Sh(sb, "echo alive").stdout_data, "alive\n");
  EXPECT_EQ(Sh(other, "echo unaffected").stdout_data, "unaffected\n");
}

// A memory hog is OOM-killed inside its own cgroup; the runtime (this
// process) and another sandbox carry on.
TEST_F(ContainerAttackTest, MemoryHogIsOomKilledInsideItsCgroup) {
  Sandbox& sb = NewSandbox("memhog", [](SandboxConfig& c) { c.limits.memory_bytes = 48 << 20; });
  Sandbox& other = NewSandbox("memhog-other");
  ExecResult r = Sh(sb, "a=xxxxxxxx; while :; do a=$a$a; done", 30000);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.signal.value_or(0), SIGKILL);
  EXPECT_TRUE(r.oom_killed);
  ASSERT_TRUE(r.cgroup_peak_bytes.has_value());
  EXPECT_LE(*r.cgroup_peak_bytes, 48u << 20);
  EXPECT_EQ(Sh(sb, "echo alive").stdout_data, "alive\n");
  EXPECT_EQ(Sh(other, "echo unaffected").stdout_data, "unaffected\n");
  EXPECT_EQ(::kill(::getpid(), 0), 0);
}

// Block-swapping and extent-sharing ioctls are refused by seccomp with
// EPERM, whatever file they target.
TEST_F(ContainerAttackTest, ExtentSwapCloneAndDedupeIoctlsGetEperm) {
  Sandbox& sb = NewSandbox("ioctl");
  for (const char* op : {"swapext", "ficlone", "ficlonerange", "fideduperange", "blkdiscard"}) {
    ExecResult r = Sh(sb, absl::StrCat("cp /data/victim /tmp/v && attack_probe ioctl ", op, " /tmp/v"));
    EXPECT_EQ(r.stdout_data, "EPERM\n") << op << ": " << r.stderr_data;
  }
  EXPECT_EQ(Sh(sb, "md5sum < /data/victim | cut -c1-8").stdout_data,
            Sh(sb, "head -c 8192 /tmp/v | md5sum | cut -c1-8").stdout_data);
}

// Kernel-internal /proc files are masked: reads fail or return nothing,
// and the sysrq trigger goes nowhere.
TEST_F(ContainerAttackTest, KpagecgroupAndOtherKernelFilesAreMasked) {
  Sandbox& sb = NewSandbox("kpage");
  for (const char* path : {"/proc/kpagecgroup", "/proc/kpageflags", "/proc/kpagecount",
                           "/proc/kcore", "/proc/timer_list", "/proc/keys"}) {
    ExecResult r = Cmd(sb, {"attack_probe", "read", path});
    EXPECT_TRUE(r.stdout_data == "read 0\n" || r.stdout_data == "ENOENT\n" ||
                r.stdout_data == "EACCES\n" || r.stdout_data == "EPERM\n")
        << path << ": " << r.stdout_data;
  }
  EXPECT_NE(Sh(sb, "echo 1 > /proc/sys/kernel/sysrq && echo wrote").stdout_data, "wrote\n");
  EXPECT_EQ(Sh(sb, "ls /sys/firmware | wc -l").stdout_data, "0\n");
  EXPECT_NE(Sh(sb, "touch /sys/x && echo wrote").stdout_data, "wrote\n");
}

// Overwriting /bin/sh (busybox) changes only that sandbox; a sandbox on the
// same layers still sees the original, the image is unchanged, and Reset
// restores it.
TEST_F(ContainerAttackTest, OverwritingBinShAffectsOnlyThatSandboxAndResetRestoresIt) {
  auto before = testing::HashFile(image());
  ASSERT_TRUE(before.ok());
  Sandbox& sb = NewSandbox("overwrite");
  Sandbox& other = NewSandbox("overwrite-other");
  // /bin/sh is a symlink to the running busybox (ETXTBSY to write through):
  // replace the link itself, as an agent would.
  ExecResult w = Sh(sb, "cp /bin/busybox /tmp/sh && rm /bin/sh && "
                        "printf '#!/tmp/sh\\necho pwned\\n' > /bin/sh && chmod 755 /bin/sh");
  ASSERT_EQ(w.status(), 0) << w.stderr_data;
  EXPECT_EQ(Cmd(sb, {"/bin/sh", "-c", "echo hi"}).stdout_data, "pwned\n");
  EXPECT_EQ(Cmd(other, {"/bin/sh", "-c", "echo hi"}).stdout_data, "hi\n");
  ASSERT_TRUE(sb.Reset().ok());
  EXPECT_EQ(Cmd(sb, {"/bin/sh", "-c", "echo hi"}).stdout_data, "hi\n");
  auto after = testing::HashFile(image());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*before, *after);
}

// A process that leaves the exec's process group (setsid) or double-forks
// is killed with the rest when the timeout hits.
TEST_F(ContainerAttackTest, TimeoutKillsProcessesThatEscapedTheGroup) {
  Sandbox& sb = NewSandbox("escape");
  ExecResult r = Sh(sb, "setsid sleep 1000 & (sleep 1001 &) ; sleep 1002", 1000);
  EXPECT_TRUE(r.timed_out);
  EXPECT_GE(r.stray_processes_killed, 1);
  ExpectOnlyInit(sb);
  ExecResult ps = Sh(sb, "ps -o args | grep -cE '^sleep 100[0-2]$'");
  EXPECT_EQ(ps.stdout_data, "0\n");
}

// The sandbox's init starts every exec and reports its exit status, so an
// agent that could rewrite it could forge results (an exit 0 for a failed
// test run). Its processes share the init's uid and capabilities; the init
// is not dumpable, so its memory, descriptors and environment stay closed
// to them, and signals from inside cannot stop or kill it.
TEST_F(ContainerAttackTest, InitCannotBeRewrittenOrStoppedFromInside) {
  Sandbox& sb = NewSandbox("init");
  // (fd numbers can be listed, as for any process; what they are cannot.)
  for (const char* probe : {"exec 3<>/proc/1/mem", "exec 3</proc/1/mem", "readlink /proc/1/fd/0",
                            "exec 3</proc/1/fd/0", "cat /proc/1/environ", "readlink /proc/1/exe",
                            "ls /proc/1/root/", "cat /proc/1/maps"}) {
    ExecResult r = Sh(sb, absl::StrCat("(", probe, ") >/dev/null 2>&1 && echo open || echo denied"));
    EXPECT_EQ(r.stdout_data, "denied\n") << probe;
  }
  // Stop, kill and every other signal from inside: the init is unaffected
  // and still starts processes (a stopped init could not) and reports
  // their real status.
  Sh(sb, "kill -STOP 1; kill -KILL 1; kill -TERM 1; kill -SEGV 1; kill -CHLD 1; true");
  ExecResult r = Sh(sb, "echo alive; exit 7");
  EXPECT_EQ(r.stdout_data, "alive\n");
  EXPECT_EQ(r.status(), 7);
  ExpectOnlyInit(sb);
}

// The node's control socket (a unix socket on the host) cannot be reached:
// its path does not exist inside, and abstract sockets live in the host's
// net namespace.
TEST_F(ContainerAttackTest, NodeControlSocketIsUnreachable) {
  const std::string path = absl::StrCat(dir(), "/control.sock");
  const std::string abstract = absl::StrCat("dsec-test-control-", ::getpid());
  ScopedFd named(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  ScopedFd hidden(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size());
  ASSERT_EQ(::bind(named.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(named.get(), 4), 0);
  sockaddr_un b{};
  b.sun_family = AF_UNIX;
  std::memcpy(b.sun_path + 1, abstract.data(), abstract.size());
  socklen_t blen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
  ASSERT_EQ(::bind(hidden.get(), reinterpret_cast<sockaddr*>(&b), blen), 0);
  ASSERT_EQ(::listen(hidden.get(), 4), 0);

  Sandbox& sb = NewSandbox("socket");
  EXPECT_EQ(Cmd(sb, {"attack_probe", "connect-unix", path}).stdout_data,
            "ENOENT\n");
  EXPECT_EQ(Cmd(sb, {"attack_probe", "connect-abstract", abstract}).stdout_data,
            "ECONNREFUSED\n");
  EXPECT_NE(Sh(sb, absl::StrCat("ls ", dir())).status(), 0);
  // Nothing ever connected.
  EXPECT_LT(::accept4(named.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  EXPECT_LT(::accept4(hidden.get(), nullptr, nullptr, SOCK_CLOEXEC), 0);
  // The probe itself works: on the host it reaches the same socket.
  ::unlink(path.c_str());
}

// Writes, deletes and remount attempts never reach a lower layer file.
TEST_F(ContainerAttackTest, WritesNeverReachALowerLayer) {
  auto before = testing::HashFile(image());
  ASSERT_TRUE(before.ok());
  Sandbox& sb = NewSandbox("lower");
  Sh(sb, "echo x >> /etc/motd; rm -f /data/victim; dd if=/dev/zero of=/bin/busybox bs=1k count=1 "
         "conv=notrunc 2>/dev/null; mount -o remount,rw / 2>/dev/null; sync");
  ExecResult r = Sh(sb, "cat /etc/motd; ls /data");
  EXPECT_EQ(r.stdout_data, "original motd\nx\n");
  ASSERT_TRUE(sb.Destroy().ok());
  auto after = testing::HashFile(image());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*before, *after);
  Sandbox& fresh = NewSandbox("lower-fresh");
  EXPECT_EQ(Sh(fresh, "cat /etc/motd; wc -c < /data/victim").stdout_data, "original motd\n8192\n");
}

// Two sandboxes see neither each other's files, nor processes, nor network.
TEST_F(ContainerAttackTest, TwoSandboxesAreIsolated) {
  Sandbox& a = NewSandbox("iso-a");
  Sandbox& b = NewSandbox("iso-b");
  Sh(a, "echo secret > /tmp/secret");
  EXPECT_EQ(Sh(b, "cat /tmp/secret 2>/dev/null || echo absent").stdout_data, "absent\n");
  // Processes: a long sleep in A is invisible from B; B's ps lists only
  // its init and the ps pipeline.
  // Detached (setsid) so it outlives the exec; the loop waits until it is.
  Sh(a, "setsid sh -c 'echo $$ > /tmp/sleeper; exec sleep 1000' >/dev/null 2>&1 & "
        "while [ ! -s /tmp/sleeper ]; do :; done");
  EXPECT_EQ(Sh(b, "ps -o args | grep -cx 'sleep 1000'").stdout_data, "0\n");
  EXPECT_EQ(Sh(a, "ps -o args | grep -cx 'sleep 1000'").stdout_data, "1\n");
  // Network: each has its own namespace (lo only); a listener in A is not
  // reachable from B's loopback.
  std::string na = Sh(a, "readlink /proc/self/ns/net").stdout_data;
  std::string nb = Sh(b, "readlink /proc/self/ns/net").stdout_data;
  EXPECT_NE(na, nb);
  char host_ns[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/net", host_ns, sizeof(host_ns) - 1), 0);
  EXPECT_NE(na, absl::StrCat(host_ns, "\n"));
  Sh(a, "setsid nc -l -p 7777 >/dev/null 2>&1 & "
        "while ! netstat -ltn | grep -q ':7777 '; do :; done");
  EXPECT_EQ(Sh(b, "echo hi | nc -w 1 127.0.0.1 7777 && echo connected || echo refused").stdout_data,
            "refused\n");
  // The listener was there all along: A's own loopback reaches it.
  EXPECT_EQ(Sh(a, "echo hi | nc -w 1 127.0.0.1 7777 && echo connected || echo refused").stdout_data,
            "connected\n");
}

}  // namespace
}  // namespace dsec::container::security
