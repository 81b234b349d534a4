// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/seccomp_policy.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>

#include "gtest/gtest.h"
#include "base/scoped_fd.h"

namespace dsec::container {
namespace {

// Runs `probe` in a forked child under the default profile; returns the
// errno it reports (0 = the call succeeded), or -1 if the child died.
int ErrnoUnderProfile(const std::function<long()>& probe) {
  auto program = BuildDefaultSeccompProgram();
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || LoadSeccompProgram(*program) != 0) {
      ::_exit(250);
    }
    errno = 0;
    long rc = probe();
    ::_exit(rc < 0 ? (errno & 0xff) : 0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 250) return -1;
  return WEXITSTATUS(status);
}

TEST(SeccompPolicyTest, CompilesToANonEmptyProgram) {
  auto program = BuildDefaultSeccompProgram();
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_GT(program->filter.size(), 20u);
}

TEST(SeccompPolicyTest, DeniesCloneAndDedupeIoctlsEvenWithHighBitsSet) {
  EXPECT_EQ(ErrnoUnderProfile([] { return ::ioctl(1, FICLONE, 0); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::ioctl(1, FIDEDUPERANGE, nullptr); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] {
              return ::syscall(SYS_ioctl, 1, 0xffffffff00000000ul | FICLONERANGE, nullptr);
            }),
            EPERM);
  // XFS_IOC_SWAPEXT and a block-device ioctl (BLKDISCARD).
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_ioctl, 1, 0xc0c0586dul, nullptr); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::ioctl(1, BLKDISCARD, nullptr); }), EPERM);
}

TEST(SeccompPolicyTest, OrdinaryIoctlsStillWork) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ScopedFd read_end(fds[0]), write_end(fds[1]);
  int rfd = read_end.get();
  EXPECT_EQ(ErrnoUnderProfile([rfd] {
              int n = 0;
              return ::ioctl(rfd, FIONREAD, &n);
            }),
            0);
}

TEST(SeccompPolicyTest, DeniesNamespaceAndKernelSyscalls) {
  EXPECT_EQ(ErrnoUnderProfile([] { return ::unshare(CLONE_NEWUSER); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0); }),
            EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_clone3, nullptr, 0); }), ENOSYS);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::mount("none", "/tmp", "tmpfs", 0, nullptr); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_bpf, 0, nullptr, 0); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_keyctl, 0, 0, 0, 0, 0); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0); }),
            EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_ptrace, 0, 0, 0, 0); }), EPERM);
  EXPECT_EQ(ErrnoUnderProfile([] { return ::syscall(SYS_io_uring_setup, 1, nullptr); }), EPERM);
}

TEST(SeccompPolicyTest, PlainForkStillWorks) {
  EXPECT_EQ(ErrnoUnderProfile([] {
              pid_t p = ::fork();
              if (p == 0) ::_exit(0);
              return p < 0 ? -1L : static_cast<long>(::waitpid(p, nullptr, 0) > 0 ? 0 : -1);
            }),
            0);
}

}  // namespace
}  // namespace dsec::container
