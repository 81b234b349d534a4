// SPDX-License-Identifier: Apache-2.0
// One streamed exec (POST /v1/sandboxes/{id}/exec/stream): the exec runs on
// a thread of its own and hands each piece of output to a bounded buffer;
// the HTTP layer drains the buffer as NDJSON lines, so output reaches the
// client while the command runs. The exec never waits for the client.
//
// The bound: at most `live_buffer_bytes` of output wait unsent. A piece
// that does not fit (the client reads slower than the command writes) is
// not buffered, and neither is the rest of that stream: it is sent from the
// exec's result once the command has ended (the result holds every admitted
// byte anyway), and the final line counts it in "deferred_bytes". So a slow
// client gets all the output, in order per stream, late; nothing admitted
// by the tier's cap is lost. Output a tier never hands out live (a replayed
// exec, a command that could not start) comes the same way.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sandbox/daemon/service.h"

namespace dsec::daemon {

struct StreamOptions {
  size_t live_buffer_bytes = 1u << 20;  // unsent output held at most
  size_t max_line_bytes = 64u << 10;    // output bytes per NDJSON line
};

// Threads: Start on the request's thread; the exec runs on a thread this
// object owns; WaitStarted, NextLine and Abandon from the request's thread
// (cpp-httplib's content provider). The destructor joins the exec thread,
// which ends with the exec (its timeout bounds it) whether or not anyone
// reads: destroy it on a thread that may wait that long.
class StreamedExec {
 public:
  // `control`: the command's ExecObserver::control (null: none).
  static std::unique_ptr<StreamedExec> Start(Service* service, std::string id, nlohmann::json body,
                                             StreamOptions options = {},
                                             std::shared_ptr<ExecControl> control = nullptr);
  ~StreamedExec();
  StreamedExec(const StreamedExec&) = delete;
  StreamedExec& operator=(const StreamedExec&) = delete;

  // Waits until the command starts (OK) or the request fails before it
  // does (that error: answer it as an HTTP error, nothing was streamed).
  absl::Status WaitStarted();
  // Waits for the next NDJSON line (with its "\n"): output
  // {"stream": "stdout"|"stderr", "data_b64"}, then the last line,
  // {"exit": result, "deferred_bytes": n} or {"error": {...}} when the exec
  // failed after starting. False once the last line was taken.
  bool NextLine(std::string* line);
  // NextLine waiting at most `timeout_ms` (< 0: as long as it takes):
  // kTimeout when no line came meanwhile, for a caller that keeps a quiet
  // stream alive (sandbox/e2b sends envd's keepalive events).
  enum class Next { kLine, kEnd, kTimeout };
  Next NextLineWithin(std::string* line, int64_t timeout_ms);
  // The command started and its exec has not returned yet (on a tier
  // without TierTraits::concurrent_execs, it is the one holding its
  // sandbox).
  bool ExecRunning();
  // The client is gone: stop buffering. The exec runs to its end (and is
  // recorded in the trajectory like any other).
  void Abandon();

 private:
  struct Segment {
    int stream;  // 1 stdout, 2 stderr
    std::string data;
  };
  explicit StreamedExec(StreamOptions options) : options_(options) {}
  void Run(Service* service, const std::string& id, const nlohmann::json& body,
           std::shared_ptr<ExecControl> control);
  void OnOutput(int stream, std::string_view bytes);
  // The lines after the exec ended: deferred output, then the last line.
  void Finish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StreamOptions options_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the exec returned
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // tail lines queued
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<nlohmann::json>> result_ ABSL_GUARDED_BY(mu_);
  std::deque<Segment> live_ ABSL_GUARDED_BY(mu_);
  size_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t accepted_[3] ABSL_GUARDED_BY(mu_) = {0, 0, 0};  // per stream, buffered live
  bool held_[3] ABSL_GUARDED_BY(mu_) = {false, false, false};
  std::deque<std::string> tail_ ABSL_GUARDED_BY(mu_);  // lines after the exec ended
};

}  // namespace dsec::daemon
