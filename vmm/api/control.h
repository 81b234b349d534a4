// SPDX-License-Identifier: Apache-2.0
// The monitor's control API (`--control PATH`): a unix stream socket (mode 0600, unlinked at exit)
// on which a client sends one JSON request per line and gets one JSON line
// back. Requests:
//   {"op":"stats"}                      balloon, guest statistics, reclaim
//                                       metrics, monitor memory
//   {"op":"balloon","target_mib":N}     sets the balloon target
//   {"op":"pause"} / {"op":"resume"}    stops / restarts every vCPU (idempotent)
// Every response has "ok"; an error is
//   {"ok":false,"error":{"code":"INVALID_ARGUMENT","message":"..."}}.
// ControlCall is the one client (`dsec-vmm vm ctl`, the microvm tier).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "base/eventfd.h"
#include "base/scoped_fd.h"

namespace dsec::api {

// A request line longer than this (newline excluded) is refused and the
// connection closed.
inline constexpr size_t kMaxControlRequestBytes = 4096;

struct ControlRequest {
  enum class Op { kStats, kBalloon, kPause, kResume, kSnapshot };
  Op op = Op::kStats;
  uint64_t target_mib = 0;  // kBalloon
  bool diff = false;        // kSnapshot: only what changed since the restore
};

// Parses one request line (pure). InvalidArgument, with a message that names
// the problem, for: not JSON, not an object, "op" missing or unknown,
// target_mib missing, negative, not an integer or above 2^20, unknown keys.
absl::StatusOr<ControlRequest> ParseControlRequest(std::string_view line);

// {"ok":false,"error":{"code":...,"message":...}}
nlohmann::json ControlErrorJson(const absl::Status& status);

// Answers a parsed request: a JSON object with "ok":true, or an error status.
using ControlHandler = std::function<absl::StatusOr<nlohmann::json>(const ControlRequest&)>;

// One request line in, one response line out (no newline).
std::string HandleControlLine(std::string_view line, const ControlHandler& handler);

// The socket and its thread. The handler runs on that thread (never on a
// vCPU or the device event loop); it must only use thread-safe interfaces.
// Clients are served concurrently up to a limit, non-blocking: a client that
// does not read its responses is dropped, never waited for.
class ControlServer {
 public:
  static constexpr int kMaxClients = 8;

  // AlreadyExists if PATH is in use (a live socket or another file); a stale
  // socket left by a dead monitor is replaced.
  // `on_thread_start` runs first on the server's thread (the monitor's jail);
  // if it fails the thread serves nobody and ends.
  static absl::StatusOr<std::unique_ptr<ControlServer>> Start(
      const std::string& path, ControlHandler handler,
      std::function<absl::Status()> on_thread_start = {});
  // Stops and joins the thread, closes every connection, unlinks PATH.
  ~ControlServer();

  const std::string& path() const { return path_; }

 private:
  ControlServer(std::string path, ScopedFd listen_fd, EventFd stop, ControlHandler handler,
                dev_t dev, ino_t ino)
      : path_(std::move(path)), listen_fd_(std::move(listen_fd)), stop_(std::move(stop)),
        handler_(std::move(handler)), dev_(dev), ino_(ino) {}
  void Run();

  const std::string path_;
  ScopedFd listen_fd_;
  EventFd stop_;
  ControlHandler handler_;
  dev_t dev_;
  ino_t ino_;
  std::thread thread_;
};

// Client: sends `request` as one line to the socket at `path` and returns the
// parsed response (an answer with "ok": false is returned as it is).
// Unavailable if nothing listens there or the monitor closed without an
// answer, DeadlineExceeded when the whole exchange takes over `timeout_ms`.
absl::StatusOr<nlohmann::json> ControlCall(const std::string& path,
                                           const nlohmann::json& request, int64_t timeout_ms);

}  // namespace dsec::api
