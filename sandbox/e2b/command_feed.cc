// SPDX-License-Identifier: Apache-2.0
#include "sandbox/e2b/command_feed.h"

#include <algorithm>
#include <chrono>

#include "nlohmann/json.hpp"

namespace dsec::e2b {

namespace {

// An output line ({"stream", "data_b64"}), as opposed to the exec's last
// line ({"exit"} or {"error"}), which no client may miss.
bool IsOutputLine(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("stream");
}

// How long one reader holds the exec before it lets the others look at
// their queues (and at their own deadlines).
constexpr int64_t kReadSliceMs = 100;

}  // namespace

int CommandFeed::Attach() {
  std::lock_guard<std::mutex> lock(mu_);
  const int id = next_client_++;
  clients_[id];
  return id;
}

void CommandFeed::Detach(int client) {
  std::lock_guard<std::mutex> lock(mu_);
  clients_.erase(client);
}

uint64_t CommandFeed::dropped(int client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.dropped;
}

void CommandFeed::Deliver(const std::string& line) {
  bool output = false;
  bool looked = false;
  for (auto& [id, c] : clients_) {
    if (c.bytes + line.size() > max_queued_bytes_) {
      if (!looked) {
        output = IsOutputLine(line);
        looked = true;
      }
      if (output) {
        ++c.dropped;
        continue;
      }
    }
    c.lines.push_back(line);
    c.bytes += line.size();
  }
}

void CommandFeed::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

CommandFeed::Next CommandFeed::NextLine(int client, std::string* line, int64_t timeout_ms) {
  const auto deadline = timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                                       : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto it = clients_.find(client);
    if (it == clients_.end()) return Next::kEnd;
    Client& c = it->second;
    if (!c.lines.empty()) {
      *line = std::move(c.lines.front());
      c.lines.pop_front();
      c.bytes -= line->size();
      return Next::kLine;
    }
    if (end_) return Next::kEnd;
    if (closed_) return Next::kClosed;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return Next::kTimeout;
    if (reading_) {
      if (timeout_ms < 0) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, deadline);
      }
      continue;
    }
    // This client reads the exec for a slice, then looks again.
    reading_ = true;
    const int64_t left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    lock.unlock();
    std::string got;
    const daemon::StreamedExec::Next next =
        stream_->NextLineWithin(&got, std::min<int64_t>(std::max<int64_t>(left_ms, 0), kReadSliceMs));
    lock.lock();
    reading_ = false;
    if (next == daemon::StreamedExec::Next::kLine) Deliver(got);
    if (next == daemon::StreamedExec::Next::kEnd) end_ = true;
    cv_.notify_all();
  }
}

}  // namespace dsec::e2b
