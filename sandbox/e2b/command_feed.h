// SPDX-License-Identifier: Apache-2.0
// One command started through process.Process/Start as every client
// attached to it sees it: the Start stream's and each Connect's
// (commands.connect, a client reattaching to a running command). The
// node's streamed exec has one reader; whichever attached client asks for
// its next line while none is being read becomes that reader for a while
// and hands each line to every attached client's queue. A client that
// attaches gets the lines from then on (and what the exec buffered while
// no client was attached: at most its live buffer, the rest with the end).
// A slow client's queue is bounded: output lines beyond it are dropped
// for that client alone (counted), never the end.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "sandbox/daemon/exec_stream.h"

namespace dsec::e2b {

// Threads: any; every method is thread-safe.
class CommandFeed {
 public:
  explicit CommandFeed(std::shared_ptr<daemon::StreamedExec> stream, size_t max_queued_bytes = 1u << 20)
      : stream_(std::move(stream)), max_queued_bytes_(max_queued_bytes) {}

  // A new client; its handle for NextLine and Detach.
  int Attach();
  void Detach(int client);
  enum class Next { kLine, kEnd, kTimeout, kClosed };
  // The client's next NDJSON line of the exec (daemon::StreamedExec's
  // lines), waiting at most timeout_ms (< 0: as long as it takes);
  // kClosed once Close was called (within a read slice, 100 ms).
  Next NextLine(int client, std::string* line, int64_t timeout_ms);
  // Its clients stop waiting (the server stops); the command runs on.
  void Close();
  // Output lines dropped for this client (its queue was full).
  uint64_t dropped(int client);
  // The command's exec has returned (it no longer runs).
  bool ended() { return !stream_->ExecRunning(); }

 private:
  struct Client {
    std::deque<std::string> lines;
    size_t bytes = 0;
    uint64_t dropped = 0;
  };
  void Deliver(const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<daemon::StreamedExec> stream_;
  const size_t max_queued_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Client> clients_ ABSL_GUARDED_BY(mu_);
  int next_client_ ABSL_GUARDED_BY(mu_) = 0;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;  // a client reads the exec now
  bool end_ ABSL_GUARDED_BY(mu_) = false;      // the exec's last line was handed out
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dsec::e2b
