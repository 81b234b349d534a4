// SPDX-License-Identifier: Apache-2.0
#include "vmm/jail/privileges.h"

#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace dsec::jail {

namespace {

bool AnyCapability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return true;  // unknown: assume the worst
  for (const auto& d : data) {
    if (d.effective != 0 || d.permitted != 0 || d.inheritable != 0) return true;
  }
  return false;
}

}  // namespace

Credentials CurrentCredentials() {
  Credentials c;
  ::getresuid(&c.ruid, &c.euid, &c.suid);
  ::getresgid(&c.rgid, &c.egid, &c.sgid);
  int n = ::getgroups(0, nullptr);
  c.groups = n > 0 ? static_cast<size_t>(n) : 0;
  c.any_capability = AnyCapability();
  return c;
}

absl::Status DropPrivileges(uid_t uid, gid_t gid) {
  if (uid == 0 || gid == 0) {
    return absl::InvalidArgumentError("the monitor's uid and gid must not be 0");
  }
  if (::geteuid() != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--uid ", uid, ": the monitor must start as root to change its uid"));
  }
  // The bounding set first (it needs CAP_SETPCAP, gone after setresuid):
  // nothing this process could exec would regain a capability.
  if (::prctl(PR_CAPBSET_READ, CAP_SETPCAP) == 1) {
    for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
      if (::prctl(PR_CAPBSET_DROP, cap) != 0 && errno != EINVAL) {
        return ErrnoStatus(absl::StrCat("PR_CAPBSET_DROP ", cap));
      }
    }
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  // Capabilities are cleared by the uid change, not kept.
  if (::prctl(PR_SET_KEEPCAPS, 0) != 0) return ErrnoStatus("PR_SET_KEEPCAPS");
  if (::setgroups(0, nullptr) != 0) return ErrnoStatus("setgroups");
  if (::setresgid(gid, gid, gid) != 0) return ErrnoStatus(absl::StrCat("setresgid ", gid));
  if (::setresuid(uid, uid, uid) != 0) return ErrnoStatus(absl::StrCat("setresuid ", uid));
  if (::prctl(PR_SET_DUMPABLE, 1) != 0) return ErrnoStatus("PR_SET_DUMPABLE");

  const Credentials c = CurrentCredentials();
  if (c.ruid != uid || c.euid != uid || c.suid != uid || c.rgid != gid || c.egid != gid ||
      c.sgid != gid || c.groups != 0 || c.any_capability) {
    return absl::InternalError(absl::StrCat("privilege drop did not hold: uid ", c.ruid, "/",
                                            c.euid, "/", c.suid, " gid ", c.rgid, "/", c.egid,
                                            "/", c.sgid, " groups ", c.groups,
                                            c.any_capability ? " with capabilities" : ""));
  }
  if (::setresuid(0, 0, 0) == 0 || ::setuid(0) == 0) {
    return absl::InternalError("privilege drop did not hold: uid 0 could be regained");
  }
  return absl::OkStatus();
}

}  // namespace dsec::jail
