// SPDX-License-Identifier: Apache-2.0
// The clone that starts a sandbox init, and the launcher process that
// makes that clone on the runtime's behalf (init_launch.h says why).
//
// Both run where nothing may be allocated: CloneInitProcess in a
// multithreaded runtime and in the single-threaded launcher, its child
// between clone and execve in memory it shares with its parent.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace dsec::container {

// What a launched process finds on kInitConfigFd ... kInitUsernsFd, in that
// order (-1: /dev/null in its place): config, go, report, control, netns,
// userns.
inline constexpr int kInitSources = 6;

// Clones (CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD | `clone_flags`)
// a child that puts sources[i] on kInitConfigFd + i, `stage` (or /dev/null)
// on kInitStageFd and /dev/null on 0-2, closes every other descriptor and execs `binary` (argv {argv0, argv1},
// argv1 may be null; empty environment; or, with `exec_fd`, that file by
// execveat) with every signal blocked; `devnull`, if given, stands for
// /dev/null (a launcher in the stage has none). A
// failure before execve, or of it, is written as a ChildError to
// sources[2] (the report pipe) when there is one. Returns the child's pid
// with *pidfd set, or -errno of the clone. `stack` (at least 16 KiB) is the
// child's until this returns.
pid_t CloneInitProcess(const char* binary, const char* argv0, const char* argv1,
                       const int sources[kInitSources], int stage, uint64_t clone_flags,
                       int* pidfd, char* stack, size_t stack_bytes, int exec_fd = -1,
                       int devnull = -1);

// --- The launcher: `dsec-sandbox-init --launcher` ---------------------------
//
// Started by the runtime with its end of a SOCK_SEQPACKET socketpair on
// kInitConfigFd. Each request is one LauncherRequest with the present
// sources attached (SCM_RIGHTS, in source order); each answer is one
// LauncherReply, with the child's pidfd attached when pid > 0. The child is
// cloned with CLONE_PARENT, so it is the runtime's child (the runtime waits
// for it by pidfd) and the launcher never has one to reap. The launcher
// exits when the runtime's end closes.
//
// The stage (`--staged-launcher`, for inits in new mount namespaces; one
// with `--launcher` serves user-namespace inits, which make their mount
// namespace themselves and need the host's paths): at its start the
// launcher opens its own executable and /dev/null, makes one empty,
// read-only tmpfs (one superblock), leaves the host's mount namespace and
// pivots into that tmpfs, and detaches the host's tree. Its mount
// namespace is then the stage alone, and a child cloned with CLONE_NEWNS
// copies one mount instead of the host's table; it is exec'd from the
// opened executable and finds a descriptor of the stage's root on
// kInitStageFd (a directory: it is staged; else /dev/null). At create the
// init mounts its root over the stage's root and chroots: no pivot_root
// per sandbox, which visits every task on the node (chroot_fs_refs: 26% of
// all CPU time of a create ramp at 10,000 sandboxes, docs/benchmarks.md),
// and no host tree to copy or detach. A staged init reaches the host only
// through descriptors it is sent. A chroot escape stays in the sandbox's
// root (a mount stacked on the namespace's root is its top for ".."); under
// it there is only the empty, read-only stage.

inline constexpr int kLauncherSocketFd = 3;
inline constexpr char kLauncherFlag[] = "--launcher";
inline constexpr char kStagedLauncherFlag[] = "--staged-launcher";
inline constexpr uint32_t kLauncherMagic = 0x314c4344;  // "DCL1"

struct LauncherRequest {
  uint32_t magic = kLauncherMagic;
  uint32_t present = 0;      // bit i: source i is attached
  uint64_t clone_flags = 0;  // CLONE_NEW* only
};

struct LauncherReply {
  int32_t pid = 0;  // > 0: the child; else 0 and err
  int32_t err = 0;  // errno of the clone, or EPROTO for a malformed request
};

// The namespace flags a request may ask for.
uint64_t LauncherAllowedCloneFlags();

// The launcher's loop on `sock` (execs its own executable for every
// child); returns when the runtime's end is closed (0) or on a socket error
// (1), the launcher's exit status. `staged`: it first moves into the stage
// (below); where it cannot, it launches unstaged.
int RunInitLauncher(int sock, bool staged);

}  // namespace dsec::container
