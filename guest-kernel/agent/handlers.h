// SPDX-License-Identifier: Apache-2.0
// Request handlers of the agent server (internal to dsec_agent_server).
//
// Return convention: a request that fails is answered with an ERROR frame and
// the handler returns OK (the connection stays). A non-OK return means the
// connection must close: InvalidArgument for a protocol violation (the
// caller sends ERROR first), anything else for a broken connection or a
// server stop.
#pragma once

#include <atomic>

#include "absl/status/status.h"
#include "guest-kernel/agent/child.h"
#include "guest-kernel/agent/frame_conn.h"
#include "guest-kernel/agent/messages.h"
#include "guest-kernel/agent/server.h"

namespace dsec::agent {

struct HandlerEnv {
  const ServerOptions& options;
  int root_fd;  // O_PATH descriptor of options.root
  int stop_fd;  // readable when the server stops
  ChildLauncher& launcher;
  std::atomic<size_t>& active_execs;
  ServerMetrics& metrics;

  int64_t WriteDeadline() const { return DeadlineAfterMs(options.write_stall_timeout_ms); }
};

// Sends `status` as an ERROR reply; non-OK only if the connection broke.
absl::Status SendRequestError(const HandlerEnv& env, FrameConn& conn, const absl::Status& status);

absl::Status HandleExec(HandlerEnv& env, FrameConn& conn, const ExecRequest& request);
absl::Status HandleFileRead(HandlerEnv& env, FrameConn& conn, const FileReadRequest& request);
absl::Status HandleFileWrite(HandlerEnv& env, FrameConn& conn, const FileWriteRequest& request);
absl::Status HandleListDir(HandlerEnv& env, FrameConn& conn, const ListDirRequest& request);
absl::Status HandlePackDiff(HandlerEnv& env, FrameConn& conn);
// WATCH: holds the connection while the watch lasts (watch.cc).
absl::Status HandleWatch(HandlerEnv& env, FrameConn& conn, const WatchRequest& request);

}  // namespace dsec::agent
