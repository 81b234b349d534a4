// SPDX-License-Identifier: Apache-2.0
// The built dsec-agent as PID 1 without a VM: in fresh mount and PID
// namespaces, chrooted into an EROFS root image (file-backed mount) with a
// busybox EROFS layer, and a prepared /proc/cmdline bound over the real one.
// Exercises the whole guest-mode path except vsock and DAX (checked by
// tests/guest under QEMU): layer mount, overlay, pivot_root, dsec.run,
// dsec.oneshot. reboot(RB_POWER_OFF) in a non-initial PID namespace only
// ends that namespace.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "guest-kernel/agent/agent_testing.h"
#include "guest-kernel/agent/frame_conn.h"
#include "guest-kernel/agent/protocol.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::agent {
namespace {

using testing::TempDir;
using testing::WriteFileOrDie;

// Runs argv to completion, stdout discarded; its exit status (or -1).
int RunTool(const std::vector<std::string>& args) {
  SpawnOptions o;
  o.argv = args;
  o.err = Stdio::Inherit();
  auto r = RunSubprocess(o);
  return r.ok() && r->signal == 0 ? r->exit_code : -1;
}

class Pid1BootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (mounts, namespaces)";
    if (!DSEC_AGENT_STATIC) {
      GTEST_SKIP() << "dsec-agent is not linked statically in this build tree (sanitizers or "
                      "DSEC_STATIC_BINARY=OFF); the root image has no libc";
    }
    if (access("/bin/busybox", X_OK) != 0) GTEST_SKIP() << "/bin/busybox missing (busybox-static)";
    if (RunTool({"mkfs.erofs", "--help"}) < 0) GTEST_SKIP() << "mkfs.erofs missing (erofs-utils)";
    // The root image: only the agent and its mount points.
    std::string stage = dir_.Sub("stage");
    for (const char* d : {"", "/sbin", "/proc", "/sys", "/dev", "/run", "/newroot", "/layers",
                          "/tmp"}) {
      ASSERT_EQ(mkdir((stage + d).c_str(), 0755), 0);
    }
    ASSERT_EQ(RunTool({"cp", DSEC_AGENT_BINARY_PATH, stage + "/sbin/init"}), 0);
    // The layer: busybox and a marker.
    std::string layer = dir_.Sub("layer");
    for (const char* d : {"", "/bin", "/proc", "/sys", "/dev", "/tmp"}) {
      ASSERT_EQ(mkdir((layer + d).c_str(), 0755), 0);
    }
    ASSERT_EQ(RunTool({"cp", "/bin/busybox", layer + "/bin/busybox"}), 0);
    for (const char* a : {"sh", "cat", "echo", "grep", "sed", "ls"}) {
      ASSERT_EQ(symlink("busybox", (layer + "/bin/" + a).c_str()), 0);
    }
    WriteFileOrDie(layer + "/marker.txt", "layer-marker\n");
    ASSERT_EQ(RunTool({"mkfs.erofs", "--quiet", "-T0", "--all-root", dir_.Sub("root.img"), stage}), 0);
    // The layer image lives in a host directory bound onto the image's /tmp
    // (EROFS file-backed mounts need a file on a block filesystem).
    ASSERT_EQ(mkdir(dir_.Sub("hosttmp").c_str(), 0755), 0);
    ASSERT_EQ(RunTool({"mkfs.erofs", "--quiet", "-T0", "--all-root", dir_.Sub("hosttmp/layer.img"),
                   layer}),
              0);
    ASSERT_EQ(mkdir(dir_.Sub("mnt").c_str(), 0755), 0);
  }

  // Boots the agent as PID 1 with `cmdline`; returns its console output.
  // *skip receives a reason if the host cannot do it.
  std::string Boot(const std::string& cmdline, std::string* skip) {
    WriteFileOrDie(dir_.Sub("hosttmp/cmdline"), cmdline + "\n");
    const std::string root_img = dir_.Sub("root.img"), mnt = dir_.Sub("mnt");
    const std::string proc = mnt + "/proc", tmp = mnt + "/tmp", host_tmp = dir_.Sub("hosttmp");
    const std::string cmdline_src = host_tmp + "/cmdline", cmdline_dst = proc + "/cmdline";
    int out[2], err[2];
    DSEC_CHECK(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0);
    ScopedFd out_read(out[0]), out_write(out[1]), err_read(err[0]), err_write(err[1]);
    // A fork that runs code, not base/subprocess.h: the child unshares its
    // mount and PID namespaces, mounts the root image, /proc and the binds,
    // and forks the namespace's PID 1 that chroots before it execs; a
    // spawner of programs has no such steps.
    pid_t child = fork();
    DSEC_CHECK(child >= 0);
    if (child == 0) {
      // Async-signal-safe calls only (the test process has threads).
      auto fail = [&](const char* what) {
        int e = errno;
        ssize_t ignored = write(err_write.get(), what, std::strlen(what));
        ignored = write(err_write.get(), &e, sizeof(e));
        (void)ignored;
        _exit(77);
      };
      if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) fail("unshare");
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("private");
      if (mount(root_img.c_str(), mnt.c_str(), "erofs", MS_RDONLY, nullptr) != 0) fail("erofs");
      if (mount("proc", proc.c_str(), "proc", 0, nullptr) != 0) fail("proc");
      if (mount(host_tmp.c_str(), tmp.c_str(), nullptr, MS_BIND, nullptr) != 0) fail("bind");
      if (mount(cmdline_src.c_str(), cmdline_dst.c_str(), nullptr, MS_BIND, nullptr) != 0) {
        fail("cmdline");
      }
      pid_t init = fork();  // PID 1 of the new namespace
      if (init < 0) fail("fork");
      if (init == 0) {
        dup2(out_write.get(), 1);
        dup2(out_write.get(), 2);
        if (chroot(mnt.c_str()) != 0 || chdir("/") != 0) _exit(78);
        char* const argv[] = {const_cast<char*>("/sbin/init"), nullptr};
        execv("/sbin/init", argv);
        _exit(79);
      }
      int status = 0;
      waitpid(init, &status, 0);
      _exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
    }
    out_write.Reset();
    err_write.Reset();
    std::string output;
    int64_t deadline = DeadlineAfterMs(60'000);
    for (;;) {
      if (!WaitFd(out_read.get(), POLLIN, deadline).ok()) {
        kill(child, SIGKILL);  // ends the namespace, and its PID 1 with it
        break;
      }
      char buf[4096];
      ssize_t n = read(out_read.get(), buf, sizeof(buf));
      if (n <= 0) break;
      output.append(buf, static_cast<size_t>(n));
    }
    int status = 0;
    waitpid(child, &status, 0);
    char why[64] = {};
    ssize_t n = read(err_read.get(), why, sizeof(why) - 1);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77 && n > 0) {
      *skip = absl::StrCat("cannot set up the namespace: ", std::string(why),
                           " failed (EROFS file-backed mounts need Linux 6.12+)");
    }
    return output;
  }

  TempDir dir_{"dsec-agent-pid1"};
};

TEST_F(Pid1BootTest, BuildsTheOverlayRootRunsTheCommandAndPowersOff) {
  // Runs in the new root: the layer's marker, the overlay as /, a write.
  std::string cmd =
      "echo \"dsec-test: marker=$(cat /marker.txt)\"; "
      "grep -E ' (erofs|overlay) ' /proc/mounts | sed 's/^/dsec-test: mount /'; "
      "echo written > /w.txt && echo \"dsec-test: write=$(cat /w.txt)\"; exit 3";
  std::string skip;
  std::string out = Boot(absl::StrCat("console=ttyS0 dsec.layers=/tmp/layer.img "
                                      "dsec.upper=tmpfs:16 dsec.run=",
                                      Base64Encode(cmd), " dsec.oneshot=1"),
                         &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  // The console lines the QEMU test (tests/guest) asserts, in order.
  std::vector<std::string> expected = {
      "dsec-agent: pid 1 started\n",
      "dsec-agent: layer /tmp/layer.img at /layers/0 dax=",  // no DAX on a file
      "dsec-agent: root ready\n",
      "dsec-test: marker=layer-marker\n",
      "dsec-test: mount /tmp/layer.img /run/dsec/layers/0 erofs ro",
      "dsec-test: mount overlay / overlay ",
      "dsec-test: write=written\n",
      "dsec-agent: run exit=3\n",
      "dsec-agent: powering off\n",
  };
  size_t pos = 0;
  for (const std::string& line : expected) {
    size_t at = out.find(line, pos);
    ASSERT_NE(at, std::string::npos) << "missing, in order: " << line << "\n--- console:\n" << out;
    pos = at + line.size();
  }
  EXPECT_EQ(out.find("error"), std::string::npos) << out;
}

TEST_F(Pid1BootTest, WithoutLayersTheRootImageIsTheLowerLayer) {
  std::string skip;
  std::string out = Boot(absl::StrCat("dsec.run=", Base64Encode("exit 0"), " dsec.oneshot=1 "
                                      "dsec.bogus=1"),
                         &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  // The root image has no /bin/sh: the overlay comes up, the run fails.
  EXPECT_NE(out.find("dsec-agent: warning: unknown parameter dsec.bogus"), std::string::npos) << out;
  EXPECT_NE(out.find("dsec-agent: root ready"), std::string::npos) << out;
  EXPECT_EQ(out.find("dsec-agent: layer"), std::string::npos) << out;
  EXPECT_NE(out.find("dsec-agent: run exit=127"), std::string::npos) << out;
  EXPECT_NE(out.find("dsec-agent: powering off"), std::string::npos) << out;
}

}  // namespace
}  // namespace dsec::agent
