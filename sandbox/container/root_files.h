// SPDX-License-Identifier: Apache-2.0
// File access inside a sandbox's root directory as the host sees it
// (`/proc/<init>/root`), for the daemon's files API. Three walls:
//
// - Paths are resolved by the kernel with openat2(RESOLVE_IN_ROOT |
//   RESOLVE_NO_MAGICLINKS): ".." stops at the root, absolute symlinks are
//   taken relative to it and /proc's magic links are refused, so a sandbox
//   cannot make the daemon reach a host file by planting links.
// - The object found is first opened O_PATH (no open(2) effects: a FIFO
//   cannot block the daemon, a device is never opened) and served only if
//   it is a regular file or directory on the sandbox's own file systems
//   (its overlay root and tmpfs mounts). The sandbox's /proc and /sys are
//   the host kernel's interfaces, not its files: refused, whatever link or
//   bind mount leads there. Only then is it opened for I/O, through its
//   O_PATH descriptor (the same inode, whatever the path says meanwhile).
// - All of it runs with the sandbox root's credentials
//   (file_credentials.h), never the daemon's: what the sandbox's root
//   could not do, the API does not do for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"
#include "sandbox/container/file_credentials.h"
#include "sandbox/tier/tier.h"

namespace dsec::container {

// Errors: InvalidArgument (relative path, NUL; a path that leaves the
// root; an object the API does not serve: a FIFO, socket or device, or
// anything on /proc, /sys or another kernel file system), NotFound,
// ResourceExhausted (file larger than max_bytes, writable layer full),
// FailedPrecondition (a directory where a file is wanted; the sandbox's
// root may not open it), Internal (syscalls). Messages name the path
// inside the sandbox only.
absl::StatusOr<std::string> ReadRootFile(const std::string& root, const std::string& path,
                                         uint64_t max_bytes, const FileCredentials& creds);
// Creates missing parent directories (0755) and the file (truncating it);
// a dangling symlink inside the root gets its target created. The pages
// the data takes are charged to the calling process's memory cgroup: the
// files API writes through OpenRootFileForWrite and a process of the
// sandbox's (container_tier.cc); this is for the runtime's own small files.
absl::Status WriteRootFile(const std::string& root, const std::string& path,
                           const std::string& data, uint32_t mode, const FileCredentials& creds);
// WriteRootFile without the data: the file found or made as it does,
// truncated, with `mode`, opened for writing (O_NONBLOCK). Same errors.
absl::StatusOr<ScopedFd> OpenRootFileForWrite(const std::string& root, const std::string& path, uint32_t mode,
                                              const FileCredentials& creds);
// What WriteRootFile answers when writing `path` failed with `err`
// (ENOSPC, ENOMEM, EFBIG: ResourceExhausted).
absl::Status RootFileWriteError(const std::string& path, int err);
absl::StatusOr<std::vector<tier::FileEntry>> ListRootDir(const std::string& root,
                                                   const std::string& path,
                                                   const FileCredentials& creds);

// A watch (inotify) on the directory `path` inside the root, and with
// `recursive` on every directory below it on the sandbox's own file
// systems (as the walls above: symlinks are not followed below `path`,
// /proc and /sys are left out), at most `max_dirs` of them; directories
// made or moved in later are added as their events come. The watch holds
// the watched inodes only (not the root's mount: a sandbox that goes
// lets its file systems go, and the watch reports it). Errors as above,
// and ResourceExhausted (more than max_dirs directories, or the host's
// inotify limits).
absl::StatusOr<std::unique_ptr<tier::DirWatch>> WatchRootDir(const std::string& root, const std::string& path,
                                                             bool recursive, size_t max_dirs,
                                                             const FileCredentials& creds);

}  // namespace dsec::container
