// SPDX-License-Identifier: Apache-2.0
// The monitor's seccomp filters, one per thread kind. Each denies by default
// (the whole monitor is killed, SIGSYS) and allows only the system calls that
// kind of thread makes once the guest runs, each listed with why in
// seccomp_filters.cc; ioctl is allowed only for the request numbers the thread
// issues, socket only for AF_UNIX, mmap/mprotect never with PROT_EXEC, signals
// only to this process. Filters are per thread: each thread installs its own
// (InstallThreadFilter) on itself.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::jail {

enum class ThreadKind { kMain, kVcpu, kEventLoop, kControl, kReclaim, kPager };
inline constexpr ThreadKind kAllThreadKinds[] = {ThreadKind::kMain, ThreadKind::kVcpu,
                                                 ThreadKind::kEventLoop, ThreadKind::kControl,
                                                 ThreadKind::kReclaim, ThreadKind::kPager};
std::string_view ThreadKindName(ThreadKind kind);
// "main", "vcpu", "event-loop", "control", "reclaim", "pager"; InvalidArgument else.
absl::StatusOr<ThreadKind> ParseThreadKind(std::string_view name);

// kKill: a call outside the list ends the process. The filter traps
// (SECCOMP_RET_TRAP) into the reporter InstallSigsysReporter installed, which
// writes one line naming the call and the thread kind to stderr and exits
// with status 159 (128 + SIGSYS) at once; without the reporter the process
// dies of SIGSYS.
// kLog: it is allowed and logged by the kernel (audit, dmesg): for finding
// what a new code path needs. kOff: no filter.
enum class SeccompMode { kOff, kLog, kKill };
std::string_view SeccompModeName(SeccompMode mode);
absl::StatusOr<SeccompMode> ParseSeccompMode(std::string_view name);

// What a thread kind may do only in some monitors: the system calls and
// ioctl requests of the VM's device back-ends, which each device kind
// declares with why (virtio::DeviceKind::host_calls) and the monitor adds
// here for the devices it has, so that a VM without a disk has no disk I/O
// calls on its event loop.
struct ExtraSyscall {
  ThreadKind thread = ThreadKind::kEventLoop;
  std::string name;               // as libseccomp names it: "pwritev2"
  bool unix_socket_only = false;  // for socket: AF_UNIX only (required)
  std::string why;
};
struct ExtraIoctl {
  ThreadKind thread = ThreadKind::kEventLoop;
  unsigned long request = 0;
  std::string why;
};
struct FilterExtras {
  std::vector<ExtraSyscall> syscalls;
  std::vector<ExtraIoctl> ioctls;
  // Snapshots (--snapshot-dir): the directory's fd, opened before the jail.
  // The control thread may then create files in that directory only
  // (openat with this dirfd and O_WRONLY|O_CREAT|O_EXCL, never truncating
  // or opening an existing file for writing), write, size and sync them,
  // rename and unlink within it, and read the VM's state (the KVM_GET_*
  // requests of kvm::SnapshotIoctls). -1: none of this.
  int snapshot_dir_fd = -1;
};

// InvalidArgument naming the call for an extra that libseccomp does not
// know, or that no thread of the monitor may ever make (execve, clone,
// ptrace, mount, setuid, bpf, module loading, process_vm_*,
// open_by_handle_at, ...): extras widen a list, never past that line.
absl::Status CheckFilterExtras(const FilterExtras& extras);

// The system call names a kind may make (sorted, unique), with `extras`: for
// the README and the tests.
std::vector<std::string> AllowedSyscalls(ThreadKind kind, const FilterExtras& extras = {});
// The ioctl request numbers a kind may issue (sorted, unique), with `extras`.
std::vector<unsigned long> AllowedIoctls(ThreadKind kind, const FilterExtras& extras = {});

// Installs `kind`'s filter, widened by `extras` (CheckFilterExtras), on the
// calling thread (and sets no_new_privs on it). Calls of another
// architecture ABI (int 0x80, x32) kill the process in every mode but kOff.
// Internal error if the kernel refuses the filter.
absl::Status InstallThreadFilter(ThreadKind kind, SeccompMode mode,
                                 const FilterExtras& extras = {});

// The exit status of a monitor a filter stopped.
inline constexpr int kSeccompExitStatus = 128 + 31;  // 128 + SIGSYS
// Installs the process's SIGSYS handler (before any filter: rt_sigaction is
// on no list): "dsec-monitor: seccomp: system call N is not allowed on a KIND
// thread; stopping", then exit_group(kSeccompExitStatus). Async-signal-safe.
absl::Status InstallSigsysReporter();

}  // namespace dsec::jail
