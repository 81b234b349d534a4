// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/userns.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::container {

namespace {

// The child only holds the namespace open until the runtime has written
// its maps and opened it, then is SIGKILLed. It shares the runtime's
// memory (CLONE_VM) and runs with every signal blocked (SIGKILL aside), so
// it makes raw system calls only (glibc's pause() would mark the runtime
// thread's cancellation state) and holds none of the runtime's descriptors.
int HoldNamespace(void*) {
  ::syscall(SYS_close_range, 0, ~0u, 0);
  while (true) ::syscall(SYS_pause);
}

}  // namespace

std::string IdMapLine(uint32_t host, uint32_t count) { return absl::StrCat("0 ", host, " ", count, "\n"); }

absl::Status ValidateUserNamespaceMap(const UserNamespaceMap& m) {
  constexpr uint64_t kLimit = std::numeric_limits<uint32_t>::max();  // (uid_t)-1 is no id
  if (m.count == 0) return absl::InvalidArgumentError("user namespace: count must be at least 1");
  if (m.host_uid == 0 || m.host_gid == 0) {
    return absl::InvalidArgumentError("user namespace: root inside must not map to host uid/gid 0");
  }
  if (uint64_t{m.host_uid} + m.count > kLimit || uint64_t{m.host_gid} + m.count > kLimit) {
    return absl::InvalidArgumentError("user namespace: the id range does not fit below 2^32-1");
  }
  return absl::OkStatus();
}

absl::StatusOr<ScopedFd> MakeUserNamespace(const UserNamespaceMap& map) {
  DSEC_RETURN_IF_ERROR(ValidateUserNamespaceMap(map));
  std::vector<char> stack(16 << 10);
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  int pid = ::clone(&HoldNamespace, stack.data() + stack.size(), CLONE_NEWUSER | CLONE_VM | SIGCHLD,
                    nullptr);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return ErrnoToStatus("user namespace: clone", clone_errno);
  const std::string proc = absl::StrCat("/proc/", pid);
  absl::Status s = dsec::WriteSmallFile(proc + "/uid_map", IdMapLine(map.host_uid, map.count));
  if (s.ok()) s = dsec::WriteSmallFile(proc + "/gid_map", IdMapLine(map.host_gid, map.count));
  ScopedFd ns;
  if (s.ok()) {
    ns.Reset(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) s = ErrnoToStatus("user namespace: open " + proc + "/ns/user");
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (!s.ok()) return Annotate(s, "user namespace");
  return ns;
}

}  // namespace dsec::container
