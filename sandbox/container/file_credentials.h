// SPDX-License-Identifier: Apache-2.0
// The rights the daemon's file operations in a sandbox run with: those of
// the sandbox's root, never the daemon's. Filesystem ids and capabilities
// are per-thread in Linux (setfsuid(2), capset(2) act on the calling
// thread), so the thread that serves a files request takes the sandbox's
// for the length of the operation and gets its own back afterwards.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "sandbox/container/userns.h"

namespace dsec::container {

struct FileCredentials {
  uid_t fsuid = 0;
  gid_t fsgid = 0;
  // The effective capability set (bit N = capability N) during the
  // operation, within the thread's permitted set.
  uint64_t capabilities = 0;
};

// The sandbox root's: without a user namespace host root with the
// sandbox's capabilities (SafeCapabilities: CHOWN, DAC_OVERRIDE, FOWNER,
// FSETID, ...: no SYS_ADMIN, SYS_PTRACE, SYS_NICE, SYS_RESOURCE, ...); with
// one, its host uid/gid and no capability at all (root in a user namespace
// has none over the host's).
FileCredentials SandboxFileCredentials(const std::optional<UserNamespaceMap>& user_namespace);

// The calling thread runs with `creds` from Create until destruction.
// Threads: made and destroyed on the same thread; not movable.
class ScopedFileCredentials {
 public:
  // Internal (capget/capset) when the thread's credentials cannot be read
  // or lowered; nothing is changed then.
  static absl::StatusOr<std::unique_ptr<ScopedFileCredentials>> Create(const FileCredentials& creds);
  ~ScopedFileCredentials();
  ScopedFileCredentials(const ScopedFileCredentials&) = delete;
  ScopedFileCredentials& operator=(const ScopedFileCredentials&) = delete;

 private:
  ScopedFileCredentials() = default;
  int old_fsuid_ = 0, old_fsgid_ = 0;
  uint32_t old_effective_[2] = {0, 0};
  uint32_t permitted_[2] = {0, 0};
  uint32_t inheritable_[2] = {0, 0};
};

}  // namespace dsec::container
