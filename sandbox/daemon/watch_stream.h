// SPDX-License-Identifier: Apache-2.0
// The node API's directory watch (GET /v1/sandboxes/{id}/files/watch): a
// Service::WatchDir turned into NDJSON lines for a chunked response, and
// the open streams of one HttpServer, bounded (each holds an HTTP worker)
// and ended at once when the server stops.
#pragma once

#include <cstdint>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/dir_watch.h"

namespace dsec::daemon {

// One stream's lines (docs/api.yaml, files/watch): {"watching": {path,
// recursive}} first, then {"event": {name, type}} per change, {} when
// nothing came for keepalive_ms (a client behind a read timeout keeps the
// stream; a gone client is found by the write), and at the end one
// {"error": {...}} line: NOT_FOUND (the directory went), UNAVAILABLE (the
// sandbox or the server went), RESOURCE_EXHAUSTED (events lost, too many
// directories). Threads: one (the HTTP worker's).
class WatchLines {
 public:
  WatchLines(std::shared_ptr<DirWatch> watch, std::string path, bool recursive, int64_t keepalive_ms)
      : watch_(std::move(watch)), path_(std::move(path)), recursive_(recursive), keepalive_ms_(keepalive_ms) {}
  // Appends the next lines to *out (waiting up to keepalive_ms); false
  // once the last line has been given.
  bool Next(std::string* out);

 private:
  const std::shared_ptr<DirWatch> watch_;
  const std::string path_;
  const bool recursive_;
  const int64_t keepalive_ms_;
  bool started_ = false;
  bool ended_ = false;
};

class WatchStreams {
 public:
  explicit WatchStreams(int max_open) : max_open_(max_open) {}
  // Lists a stream's watch: ResourceExhausted with max_open streams open,
  // Unavailable once CloseAll ran.
  absl::Status Add(const std::shared_ptr<DirWatch>& watch);
  // Closes every listed watch (their streams end with their error line)
  // and refuses new ones: before the server's connections are shut and
  // its workers joined. Returns once every stream has let its watch go
  // (its last line written), or after kCloseWait.
  void CloseAll();
  static constexpr std::chrono::milliseconds kCloseWait{2000};

 private:
  const int max_open_;
  std::mutex mu_;
  std::vector<std::weak_ptr<DirWatch>> open_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dsec::daemon
