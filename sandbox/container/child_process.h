// SPDX-License-Identifier: Apache-2.0
// Code that runs in sandbox processes: fncall workers (fresh clones of a
// possibly multi-threaded runtime) and the container init
// (init_process.h). Everything here is async-signal-safe: plans are built
// (all strings and arrays allocated) before the clone, the children only
// make syscalls.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sandbox/container/seccomp_policy.h"

namespace dsec::container {

// Steps of a child's setup, reported with its errno when one fails.
enum ChildStep : int32_t {
  kReady = 0,
  kWaitGo,
  kUnshareCgroup,
  kMakePrivate,
  kMkdir,
  kMountDev,
  kMknod,
  kMountDevpts,
  kMountShm,
  kPivotRoot,
  kUmountOld,
  kMountProc,
  kMaskPath,
  kMountSys,
  kHostname,
  kLoopbackUp,
  kNoNewPrivs,
  kDropCaps,
  kSeccomp,
  kSetns,
  kClone,
  kSetsid,
  kStdio,
  kChdir,
  kRlimit,
  kSetId,
  kExec,
  kControl,
  kForked,      // not a failure: err is the host pid of the sandbox's PID 1
  kUnshare,
  kMountOverlay,
  kReadConfig,
  kStepCount,
};

// A failure in a child, reported over a pipe: which step and errno.
struct ChildError {
  int32_t step = 0;
  int32_t err = 0;
};
// Human-readable name of an init or exec step.
const char* ChildStepName(int32_t step);

// Capabilities a sandbox process keeps (Docker's default set without
// MKNOD, NET_RAW and AUDIT_WRITE): CHOWN, DAC_OVERRIDE, FOWNER, FSETID,
// KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, SETFCAP.
uint64_t SafeCapabilities();

// Reports `step`/`err` as a ChildError on `fd` and exits the child (127).
[[noreturn]] void FailChild(int fd, int32_t step, int err);

struct RootPlan {
  std::string merged;  // directory that becomes "/" (a mount point)
  std::string hostname;
  // Host directories bound (recursively, nosuid, nodev) onto paths relative
  // to the new root once /dev is built, before pivot_root.
  std::vector<std::pair<std::string, std::string>> binds;
  bool read_only_dev = false;  // remount /dev read-only once built
  // mkdir proc, sys, dev and tmp (1777) in `merged` first (they may be
  // missing from the layers; the overlay's upper takes them).
  bool make_mount_points = false;
  // Mount overlayfs with this data on `merged` first (empty: it is there).
  std::string overlay_data;
  // Or attach this detached mount (closed after) on `merged` first.
  int overlay_fd = -1;
  // A read-only sysfs mount to attach at /sys (closed after) instead of
  // mounting one: -1, a sysfs of the sandbox's own.
  int sys_fd = -1;
  // A bound directory (of the writable tmpfs) to attach at /dev (closed
  // after) and build /dev in, instead of a tmpfs of its own.
  int dev_fd = -1;
  // In a user namespace mknod is refused: bind the host's device nodes
  // into /dev instead of making them.
  bool bind_dev_nodes = false;
  // The process is in a stage (InStage): the overlay (overlay_fd)
  // goes over the stage's root instead of on `merged`, and the switch into
  // it is a chroot (the host's tree is gone from the namespace already).
  bool staged = false;
  int report_fd = -1;          // ChildError on failure
};

// Whether `stage_fd` says this process was cloned into a staged launcher's
// mount namespace (init_trampoline.h: a directory, else /dev/null);
// closes it.
bool InStage(int stage_fd);

// The root-building part of RunInit (init_process.h), for a process already in new mount,
// pid, uts, ipc and net namespaces and in its cgroups: unshares the cgroup
// namespace, makes mounts private, builds /dev, applies `binds`, pivots into
// `merged`, mounts the masked /proc and read-only /sys, sets the hostname
// and brings lo up. Async-signal-safe; on failure reports and exits.
void BuildSandboxRoot(const RootPlan& plan);

// Drops capabilities to SafeCapabilities(), takes uid/gid if non-zero, sets
// no_new_privs and loads `seccomp` (if set). 0 or an errno; `*step` names
// the step that failed. Async-signal-safe.
int LockDownProcess(const SeccompProgram* seccomp, uid_t uid, gid_t gid, int32_t* step);

}  // namespace dsec::container
