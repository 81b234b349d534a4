// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/watch_stream.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sandbox/daemon/errors.h"

namespace dsec::daemon {

namespace {

std::string Line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

bool WatchLines::Next(std::string* out) {
  if (ended_) return false;
  if (!started_) {
    started_ = true;
    out->append(Line({{"watching", {{"path", path_}, {"recursive", recursive_}}}}));
    return true;
  }
  absl::StatusOr<std::vector<FileEvent>> events = watch_->Next(keepalive_ms_);
  if (!events.ok()) {
    ended_ = true;
    out->append(Line(ErrorJson(events.status())));
    return true;
  }
  if (events->empty()) {
    out->append("{}\n");
    return true;
  }
  for (const FileEvent& e : *events) {
    out->append(Line({{"event", {{"name", e.name}, {"type", FileEventTypeName(e.type)}}}}));
  }
  return true;
}

absl::Status WatchStreams::Add(const std::shared_ptr<DirWatch>& watch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::UnavailableError("the API server is stopping");
  std::erase_if(open_, [](const std::weak_ptr<DirWatch>& w) { return w.expired(); });
  if (open_.size() >= static_cast<size_t>(max_open_)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(max_open_, " watch streams are open on this API, the most it serves at once (each holds a worker)"));
  }
  open_.push_back(watch);
  return absl::OkStatus();
}

void WatchStreams::CloseAll() {
  std::vector<std::weak_ptr<DirWatch>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    open.swap(open_);
  }
  for (const std::weak_ptr<DirWatch>& w : open) {
    if (std::shared_ptr<DirWatch> live = w.lock()) live->Close();
  }
  // Each stream's worker writes its error line and lets its watch go.
  // Until then the caller must not shut the connections (the line would
  // be lost); a stream whose client stopped reading is not waited for
  // past the deadline.
  const auto deadline = std::chrono::steady_clock::now() + kCloseWait;
  for (const std::weak_ptr<DirWatch>& w : open) {
    while (!w.expired() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

}  // namespace dsec::daemon
