// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/seccomp_policy.h"

#include <errno.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::container {

namespace {

// Request numbers from the kernel's uapi headers that Debian's userspace
// headers do not all carry (xfs_fs.h, ext4.h are not in linux-libc-dev).
// XFS_IOC_SWAPEXT = _IOWR('X', 109, struct xfs_swapext); covered by the
// whole 'X' type below, listed for the record.
constexpr uint32_t kXfsIocSwapext = 0xc0c0586d;
constexpr uint32_t kExt4IocMoveExt = 0xc028660f;   // _IOWR('f', 15, struct move_extent)
constexpr uint32_t kExt4IocSwapBoot = 0x00006611;  // _IO('f', 17)

constexpr int kDeniedSyscalls[] = {
    SCMP_SYS(kexec_load), SCMP_SYS(kexec_file_load), SCMP_SYS(init_module),
    SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(bpf), SCMP_SYS(perf_event_open),
    SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(mount),
    SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(move_mount), SCMP_SYS(open_tree),
    SCMP_SYS(fsopen), SCMP_SYS(fsconfig), SCMP_SYS(fsmount), SCMP_SYS(fspick),
    SCMP_SYS(mount_setattr), SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv),
    SCMP_SYS(process_vm_writev), SCMP_SYS(unshare), SCMP_SYS(setns), SCMP_SYS(userfaultfd),
    SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register),
    SCMP_SYS(reboot), SCMP_SYS(swapon), SCMP_SYS(swapoff), SCMP_SYS(acct),
    SCMP_SYS(settimeofday), SCMP_SYS(clock_settime), SCMP_SYS(clock_adjtime),
    SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at), SCMP_SYS(quotactl),
    SCMP_SYS(quotactl_fd), SCMP_SYS(syslog), SCMP_SYS(iopl), SCMP_SYS(ioperm),
    SCMP_SYS(lookup_dcookie), SCMP_SYS(vhangup), SCMP_SYS(fanotify_init), SCMP_SYS(pidfd_getfd),
    SCMP_SYS(uselib),
};

// Exact ioctl requests denied (low 32 bits).
constexpr uint32_t kDeniedIoctls[] = {
    kXfsIocSwapext, FICLONE, FICLONERANGE, FIDEDUPERANGE, kExt4IocMoveExt, kExt4IocSwapBoot,
    TIOCSTI,
};
// Whole ioctl types (bits 8..15) denied: block devices, XFS, btrfs, f2fs.
constexpr uint32_t kDeniedIoctlTypes[] = {0x12, 'X', 0x94, 0xf5};

constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUTS,    CLONE_NEWIPC,
                                        CLONE_NEWUSER, CLONE_NEWPID,   CLONE_NEWNET,
                                        CLONE_NEWCGROUP, 0x00000080 /* CLONE_NEWTIME */};

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

absl::Status Rc(int rc, std::string_view what) {
  if (rc == 0) return absl::OkStatus();
  return ErrnoStatus(absl::StrCat("libseccomp ", std::string(what)), -rc);
}

}  // namespace

absl::StatusOr<SeccompProgram> BuildDefaultSeccompProgram() {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return absl::InternalError("seccomp_init failed");
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  // Other ABIs (i386 via int 0x80, x32) would bypass per-syscall rules:
  // the default bad-arch action kills them.
  for (int nr : kDeniedSyscalls) {
    DSEC_RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), eperm, nr, 0), "rule"));
  }
  for (uint32_t req : kDeniedIoctls) {
    DSEC_RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(ioctl), 1,
                                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, req)),
                            "ioctl rule"));
  }
  for (uint32_t type : kDeniedIoctlTypes) {
    DSEC_RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(ioctl), 1,
                                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xff00u, type << 8)),
                            "ioctl type rule"));
  }
  for (uint64_t flag : kNamespaceFlags) {
    DSEC_RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(clone), 1,
                                             SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)),
                            "clone rule"));
  }
  DSEC_RETURN_IF_ERROR(
      Rc(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3"));

  // Export the BPF through a memfd and keep it in memory.
  ScopedFd mem(::memfd_create("dsec-seccomp", MFD_CLOEXEC));
  if (!mem) return ErrnoStatus("memfd_create");
  DSEC_RETURN_IF_ERROR(Rc(seccomp_export_bpf(ctx.get(), mem.get()), "export"));
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0) {
    return absl::InternalError(absl::StrCat("seccomp export produced ", size, " bytes"));
  }
  SeccompProgram program;
  program.filter.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), program.filter.data(), static_cast<size_t>(size), 0) != size) {
    return ErrnoStatus("pread seccomp program");
  }
  return program;
}

}  // namespace dsec::container
