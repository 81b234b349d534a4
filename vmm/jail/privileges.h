// SPDX-License-Identifier: Apache-2.0
// Dropping the monitor's root: to a uid/gid of its own, no supplementary
// groups, no capabilities (effective, permitted, inheritable, ambient; the
// bounding set too when the process may change it).
#pragma once

#include <sys/types.h>

#include "absl/status/status.h"

namespace dsec::jail {

struct Credentials {
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
  size_t groups = 0;            // supplementary groups
  bool any_capability = false;  // any bit in effective/permitted/inheritable
};
Credentials CurrentCredentials();

// Drops to uid/gid (both non-zero). Must run while this is the only thread
// whose credentials matter, before any seccomp filter is installed: glibc
// applies setresuid/setresgid/setgroups to every thread of the process.
// After the change the process is made dumpable again, so that /proc/self
// stays owned by the new uid (the monitor reads its own statistics there);
// only the same uid could attach to it, and each monitor has its own uid.
// Checks the result (and that uid 0 cannot be regained): Internal if any
// step did not hold, PermissionDenied if not root to begin with.
absl::Status DropPrivileges(uid_t uid, gid_t gid);

}  // namespace dsec::jail
