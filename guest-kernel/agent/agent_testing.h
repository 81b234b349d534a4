// SPDX-License-Identifier: Apache-2.0
// Test support for the agent's tests: unique temp directories that remove
// themselves, small file helpers, and a server wired to clients through
// socketpairs.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "guest-kernel/agent/client.h"
#include "base/scoped_fd.h"

namespace dsec::agent::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents when
// the object goes away (mount points inside must be unmounted first).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "dsec-agent-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

void RemoveTree(const std::string& path);
void WriteFileOrDie(const std::string& path, const std::string& data, int mode = 0644);
std::string ReadFileOrDie(const std::string& path);

// A connected AF_UNIX stream pair.
std::pair<ScopedFd, ScopedFd> SocketPair();

}  // namespace dsec::agent::testing
