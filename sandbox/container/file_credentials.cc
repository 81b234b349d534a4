// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/file_credentials.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/logging.h"
#include "base/status.h"
#include "sandbox/container/child_process.h"

namespace dsec::container {

namespace {

// Raw syscalls, which act on the calling thread only (libcap-style
// wrappers may change every thread of the process).
int CapGet(__user_cap_data_struct data[2]) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  return static_cast<int>(::syscall(SYS_capget, &header, data));
}
int CapSet(const __user_cap_data_struct data[2]) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  return static_cast<int>(::syscall(SYS_capset, &header, data));
}

}  // namespace

FileCredentials SandboxFileCredentials(const std::optional<UserNamespaceMap>& user_namespace) {
  FileCredentials c;
  if (user_namespace) {
    c.fsuid = user_namespace->host_uid;
    c.fsgid = user_namespace->host_gid;
    c.capabilities = 0;
  } else {
    c.capabilities = SafeCapabilities();
  }
  return c;
}

absl::StatusOr<std::unique_ptr<ScopedFileCredentials>> ScopedFileCredentials::Create(
    const FileCredentials& creds) {
  std::unique_ptr<ScopedFileCredentials> s(new ScopedFileCredentials());
  __user_cap_data_struct data[2]{};
  if (CapGet(data) != 0) return ErrnoToStatus("capget");
  for (int i = 0; i < 2; ++i) {
    s->old_effective_[i] = data[i].effective;
    s->permitted_[i] = data[i].permitted;
    s->inheritable_[i] = data[i].inheritable;
  }
  // setfsuid/setfsgid return the previous id and cannot report failure:
  // read the new one back.
  s->old_fsgid_ = static_cast<int>(::syscall(SYS_setfsgid, creds.fsgid));
  s->old_fsuid_ = static_cast<int>(::syscall(SYS_setfsuid, creds.fsuid));
  const bool ids_taken = static_cast<uid_t>(::syscall(SYS_setfsuid, -1)) == creds.fsuid &&
                         static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) == creds.fsgid;
  // Leaving fsuid 0 has already cleared the file capabilities from the
  // effective set; the rest go here. The permitted set stays, so the
  // destructor can raise them again.
  data[0].effective = static_cast<uint32_t>(creds.capabilities) & data[0].permitted;
  data[1].effective = static_cast<uint32_t>(creds.capabilities >> 32) & data[1].permitted;
  const int capset_rc = ids_taken ? CapSet(data) : -1;
  const int err = errno;
  if (!ids_taken || capset_rc != 0) {
    ::syscall(SYS_setfsuid, s->old_fsuid_);
    ::syscall(SYS_setfsgid, s->old_fsgid_);
    if (!ids_taken) return absl::InternalError("setfsuid/setfsgid to the sandbox's ids refused");
    return ErrnoToStatus("capset", err);
  }
  return s;
}

ScopedFileCredentials::~ScopedFileCredentials() {
  // Back to fsuid 0 first (that raises the file capabilities again), then
  // the exact effective set this thread had.
  ::syscall(SYS_setfsuid, old_fsuid_);
  ::syscall(SYS_setfsgid, old_fsgid_);
  __user_cap_data_struct data[2]{};
  for (int i = 0; i < 2; ++i) {
    data[i].effective = old_effective_[i];
    data[i].permitted = permitted_[i];
    data[i].inheritable = inheritable_[i];
  }
  // Raising within the unchanged permitted set cannot fail; a thread left
  // with fewer capabilities would only fail later calls, never widen them.
  if (CapSet(data) != 0) DSEC_LOG(err, "container: restoring capabilities: {}", strerror(errno));
}

}  // namespace dsec::container
