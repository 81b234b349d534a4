// SPDX-License-Identifier: Apache-2.0
// User namespaces for container sandboxes (the option of SandboxConfig):
// root inside is an unprivileged id range on the host.
//
// How the pieces fit (sandbox.cc): the runtime makes a user namespace with
// the sandbox's mapping first, so that it can make idmapped copies of the
// layers and of the writable layer (Mount::Idmapped) before the init
// exists; the init joins it, makes its other namespaces inside it, and
// mounts the overlay itself. Files keep their ids on disk as the sandbox
// sees them (root's files are uid 0 in the upper layer), so pack_diff and
// the shared layer mounts work as without the option.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec::container {

// Ids 0 .. count-1 inside are host_uid .. host_uid+count-1 (and the same
// for gids).
struct UserNamespaceMap {
  uint32_t host_uid = 1u << 20;
  uint32_t host_gid = 1u << 20;
  uint32_t count = 65536;
};

// InvalidArgument unless 1 <= count, the ranges fit below 2^32 - 1, and
// neither starts at 0 (root inside must not be root outside).
absl::Status ValidateUserNamespaceMap(const UserNamespaceMap& map);

// A user namespace with `map`, held by the returned descriptor (a child
// made it and is gone). Errors: InvalidArgument, Internal (with the step).
// Threads: any (the child shares no state with the caller but its stack).
absl::StatusOr<ScopedFd> MakeUserNamespace(const UserNamespaceMap& map);

// The uid_map / gid_map line for `host` (the format of user_namespaces(7)).
std::string IdMapLine(uint32_t host, uint32_t count);

}  // namespace dsec::container
