// SPDX-License-Identifier: Apache-2.0
// A watch on one directory of a sandbox: the interface a tier's watch
// implements (sandbox/tier TierSandbox::WatchDir, the container tier's
// inotify) and front ends read (sandbox/e2b's files.watchDir through the
// daemon's Service::WatchDir), as base/exec_control.h is for a running
// command.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace dsec {

// One change under a watched directory (a tier's TierSandbox::WatchDir, sandbox/tier).
struct FileEvent {
  enum class Type { kCreate, kWrite, kRemove, kRename, kChmod };
  std::string name;  // relative to the watched directory ("a/b" below it)
  Type type = Type::kCreate;
};

// A change type's name on the wire (the agent's WATCH_EVENTS, the node
// API's files/watch): create, write, remove, rename, chmod; and back.
inline constexpr std::pair<FileEvent::Type, const char*> kFileEventTypeNames[] = {
    {FileEvent::Type::kCreate, "create"}, {FileEvent::Type::kWrite, "write"},
    {FileEvent::Type::kRemove, "remove"}, {FileEvent::Type::kRename, "rename"},
    {FileEvent::Type::kChmod, "chmod"},
};
inline const char* FileEventTypeName(FileEvent::Type type) {
  for (const auto& [t, name] : kFileEventTypeNames) {
    if (t == type) return name;
  }
  return "create";
}
inline std::optional<FileEvent::Type> FileEventTypeFromName(std::string_view name) {
  for (const auto& [t, n] : kFileEventTypeNames) {
    if (name == n) return t;
  }
  return std::nullopt;
}

// A watch on one directory of a sandbox, independent of the sandbox's
// lock once made (it holds no reference to the sandbox). Threads: Next
// from one thread at a time, Close from any.
class DirWatch {
 public:
  virtual ~DirWatch() = default;
  // The events that came since the last call, waiting up to timeout_ms
  // (< 0: without limit) for the first; empty when none came in time (or,
  // before it, only events a watch does not report: callers loop). An
  // error ends the watch (every later call returns it): Unavailable
  // (closed: the sandbox went), NotFound (the watched directory was
  // removed or moved away), ResourceExhausted (events were lost, or more
  // directories than a watch may hold).
  virtual absl::StatusOr<std::vector<FileEvent>> Next(int64_t timeout_ms) = 0;
  // Next returns Unavailable from now on (a waiting one at once).
  virtual void Close() = 0;
};

}  // namespace dsec
