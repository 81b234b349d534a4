// SPDX-License-Identifier: Apache-2.0
// The container tier's default seccomp profile, compiled once with
// libseccomp into a classic BPF program that a freshly forked child can load
// with one syscall (no allocation after fork).
#pragma once

#include <linux/filter.h>

#include <vector>

#include "absl/status/statusor.h"

namespace dsec::container {

// Allow by default; deny with EPERM:
//  - extent-swapping, cloning and dedupe ioctls (XFS_IOC_SWAPEXT and every
//    XFS 'X' ioctl, FICLONE/FICLONERANGE/FIDEDUPERANGE and the btrfs 0x94
//    family, EXT4_IOC_MOVE_EXT/SWAP_BOOT, f2fs 0xf5), every block-device
//    ioctl (type 0x12: BLKDISCARD, BLKZEROOUT, ...) and TIOCSTI. The ioctl
//    request is compared on its low 32 bits, as the kernel reads it;
//  - kexec, module loading, bpf, perf_event_open, keyrings, mount and the
//    new mount API, pivot_root, chroot is allowed (it cannot leave the
//    sandbox root), ptrace and process_vm_*, unshare/setns and clone with
//    namespace flags, userfaultfd, io_uring, reboot, swapon/off, acct,
//    clock setting, open_by_handle_at, quotactl, syslog, iopl/ioperm.
//  - clone3 gets ENOSYS (its flags are in memory seccomp cannot read), so
//    libc falls back to clone, whose flags are checked.
// ptrace is denied outright rather than allowed within the sandbox: debuggers
// are rare in agent tasks and ptrace is a large kernel attack surface.
struct SeccompProgram {
  std::vector<sock_filter> filter;
  sock_fprog prog() const {
    return sock_fprog{static_cast<unsigned short>(filter.size()),
                      const_cast<sock_filter*>(filter.data())};
  }
};

absl::StatusOr<SeccompProgram> BuildDefaultSeccompProgram();

// Loads `program` on the calling thread (no_new_privs must be set).
// Async-signal-safe: returns 0 or an errno. (Defined in child_process.cc.)
int LoadSeccompProgram(const SeccompProgram& program);

}  // namespace dsec::container
