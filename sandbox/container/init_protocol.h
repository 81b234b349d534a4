// SPDX-License-Identifier: Apache-2.0
// What the runtime and a sandbox's init say to each other over the init's
// control socket (a SOCK_STREAM socketpair made before the init is
// cloned). The init starts every exec process itself, inside the sandbox's
// namespaces and cgroups, and reports when each one has exited:
//
//   runtime -> init   ExecRequestHeader + SCM_RIGHTS {stdin, stdout,
//                     stderr, error, report}, then `body_bytes` of body:
//                     argc argv strings, envc environment strings, pathc
//                     candidate paths for argv[0], then the cwd, each
//                     NUL-terminated.
//   init -> runtime   on the control socket, InitMessage kSpawned (+
//                     SCM_RIGHTS pidfd of the process) or kSpawnFailed
//                     (errno), carrying the request's `seq`; when the
//                     process has been reaped, kExited on that exec's own
//                     report pipe (the write end the init keeps until then).
//
// Each exec's exit goes to its own pipe so that several execs of one
// sandbox run at once without a reader that sorts the init's messages:
// the control socket carries only the answers to requests, one per
// request and in order, and the runtime sends a request and reads its
// answer under one lock (a stale answer, of an exec that gave up waiting
// for it, is told apart by its seq).
//
// The init's parser (ParseExecRequest) allocates nothing and touches only
// the buffers it is given: it runs in the init, whose memory its vfork-style
// exec children share, and it trusts the bytes no more than guest input.
#pragma once

#include <linux/filter.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec::container {

// --- Start-up: what the exec'd init finds (init_launch.h) -------------------

// Descriptors of the sandbox init binary when it starts; 0-2 are /dev/null.
inline constexpr int kInitConfigFd = 3;   // InitConfig (EncodeInitConfig), then EOF
inline constexpr int kInitGoFd = 4;       // one byte once the runtime put it in the cgroups
inline constexpr int kInitReportFd = 5;   // ChildError: step 0 = ready
inline constexpr int kInitControlFd = 6;  // its end of the control socketpair
inline constexpr int kInitNetnsFd = 7;    // network namespace to join (kInitJoinNetns)
inline constexpr int kInitUsernsFd = 8;   // user namespace to join (kInitJoinUserns)
inline constexpr int kInitStageFd = 9;    // a stage (init_trampoline.h), else /dev/null

inline constexpr uint32_t kInitConfigMagic = 0x32494344;  // "DCI2"
inline constexpr uint32_t kInitJoinNetns = 1;             // InitConfig flags
inline constexpr uint32_t kInitJoinUserns = 2;
inline constexpr uint32_t kInitOverlayOnControl = 4;
inline constexpr uint32_t kInitNetnsOnControl = 8;
inline constexpr uint32_t kInitSysOnControl = 16;
inline constexpr uint32_t kInitDevOnControl = 32;
inline constexpr size_t kMaxInitPathBytes = 4096;
inline constexpr size_t kMaxInitOverlayBytes = 16384;
inline constexpr size_t kMaxInitHostnameBytes = 64;
inline constexpr size_t kMaxInitFilterInsns = 4096;  // BPF_MAXINSNS

struct InitConfig {
  std::string merged;    // the overlay, becomes "/"
  std::string hostname;
  uint64_t nofile = 1024;
  std::vector<sock_filter> seccomp;  // empty: no filter
  bool join_netns = false;           // setns(kInitNetnsFd) first; else the clone made one
  // Join the user namespace on kInitUsernsFd as its root, make the mount,
  // uts, ipc, net and pid namespaces inside it, and fork the sandbox's
  // PID 1 there (as a sibling: the runtime stays its parent); the first
  // report is then {kForked, host pid of PID 1}.
  bool join_userns = false;
  // overlayfs mount data: the init mounts `merged` itself (with
  // join_userns, the overlay must be mounted inside the namespace); empty:
  // the runtime mounted it.
  std::string overlay;
  // The root comes as a detached overlay mount: one message on the control
  // socket (any bytes, SCM_RIGHTS: the mount) before the init builds the
  // root, which it attaches at `merged` in its own mount namespace.
  bool overlay_on_control = false;
  // With overlay_on_control: the same message carries a second descriptor,
  // a network namespace the init joins first (a made-ahead init claimed by
  // a sandbox whose network namespace was made, and wired, before it:
  // sandbox/network). Not with join_netns or join_userns.
  bool netns_on_control = false;
  // With overlay_on_control: the same message carries (after the network
  // namespace, if any) a read-only sysfs mount the init attaches at /sys
  // instead of mounting one of its own (mount.h SharedSysfs: one for every
  // sandbox of the node). Not with join_userns.
  bool sys_on_control = false;
  // With overlay_on_control: the same message carries (last) a directory
  // of the sandbox's writable tmpfs, bound, that the init builds /dev in
  // instead of a tmpfs of its own. Not with join_userns.
  bool dev_on_control = false;
  // Directory to chdir into first, as host root; `merged` and the paths
  // in `overlay` may be relative to it. (Root in a user namespace cannot
  // search the 0700 state directories above it; a working directory
  // survives setns and unshare, and resolving from it searches nothing
  // above.)
  std::string cwd;
};

// Header + merged + hostname + filter, native byte order.
std::string EncodeInitConfig(const InitConfig& config);
// Reads one config from `fd` (blocking). False on a short read or any
// field out of bounds. Runs in the fresh init process (may allocate).
bool ReadInitConfig(int fd, InitConfig* config);

// --- Execs ---------------------------------------------------------------

inline constexpr uint32_t kExecRequestMagic = 0x31455344;  // "DSE1"
// The kernel caps argv + envp at a quarter of the stack limit (2 MiB with
// the default 8 MiB stack); 16 MiB leaves room for larger stack limits.
inline constexpr uint32_t kMaxExecRequestBytes = 16u << 20;
inline constexpr int kExecRequestFds = 5;  // stdin, stdout, stderr, error, report
// Exec processes a sandbox's init tracks at once (each holds its report
// pipe); the runtime refuses execs beyond it (exec.h).
inline constexpr int kMaxInitTracked = 64;

// Flags of ExecRequestHeader.
inline constexpr uint32_t kExecKillGroupOnExit = 1;
// Not an exec: the init forks a copy of itself (its own memory, so that
// it neither waits for the copy nor shares its memory with it) that copies
// its stdin (a memory file, or anything read(2) takes) to its stdout until
// EOF and exits 0, or exits with the errno of the read or write that
// failed. Used to write a file the runtime
// opened (stdout) with data it streams in (stdin), so that the pages the
// file takes are allocated, and charged, inside the sandbox's memory
// cgroup rather than the runtime's (sandbox/container/README.md). The
// copy makes itself the OOM killer's first choice (oom_score_adj 1000)
// before it reads: a file that does not fit in the sandbox's memory ends
// the copy, not the sandbox's own processes. argv, paths and cwd are not
// used.
inline constexpr uint32_t kExecCopyStdinToStdout = 2;

struct ExecRequestHeader {
  uint32_t magic = kExecRequestMagic;
  uint32_t body_bytes = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t argc = 0;
  uint32_t envc = 0;
  uint32_t pathc = 0;
  uint32_t flags = 0;
  uint32_t seq = 0;  // echoed in the answer
};

// What the runtime asks for (runtime side only: allocates).
struct ExecSpec {
  std::vector<std::string> argv;        // argv[0] as given
  std::vector<std::string> env;         // KEY=VALUE
  std::vector<std::string> exec_paths;  // candidate paths for argv[0], tried in order
  std::string cwd = "/";
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool kill_group_on_exit = true;
  bool copy_stdin_to_stdout = false;  // kExecCopyStdinToStdout
};

// Header and body for `spec`. InvalidArgument if a string holds a NUL,
// argv or exec_paths is empty, or the body would exceed
// kMaxExecRequestBytes.
absl::StatusOr<std::string> EncodeExecRequest(const ExecSpec& spec, ExecRequestHeader* header);

// The request as the init uses it: pointers into the body.
struct ParsedExecRequest {
  char* const* argv = nullptr;   // NULL-terminated
  char* const* envp = nullptr;   // NULL-terminated
  char* const* paths = nullptr;  // `npaths` entries
  uint32_t npaths = 0;
  const char* cwd = nullptr;
};

// Pointer slots ParseExecRequest needs for `header`.
size_t ExecRequestPointerSlots(const ExecRequestHeader& header);

// Validates `header` against a body of `len` bytes (magic, counts, every
// string NUL-terminated inside the body, nothing after the cwd, no more
// strings than bytes) and fills `out` with pointers into `body`, using
// `slots` (room for ExecRequestPointerSlots(header) pointers).
// Allocates nothing. False on any mismatch.
bool ParseExecRequest(const ExecRequestHeader& header, char* body, size_t len, char** slots,
                      size_t nslots, ParsedExecRequest* out);

enum InitMessageType : uint32_t {
  kInitSpawned = 1,      // pid; a pidfd of the process rides along
  kInitSpawnFailed = 2,  // value = errno of the clone or a malformed request (EINVAL)
  kInitExited = 3,       // pid reaped: value = wait status, maxrss_kib, group_left
};

struct InitMessage {
  uint32_t type = 0;
  int32_t pid = 0;          // in the sandbox's pid namespace
  int32_t value = 0;
  uint32_t group_left = 0;  // kInitExited: members of its process group were left (and SIGKILLed)
  uint32_t seq = 0;         // kSpawned, kSpawnFailed: the request's
  uint64_t maxrss_kib = 0;  // kInitExited: the process's peak RSS (rusage)
};

}  // namespace dsec::container
