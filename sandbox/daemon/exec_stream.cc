// SPDX-License-Identifier: Apache-2.0
#include "sandbox/daemon/exec_stream.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "sandbox/daemon/errors.h"

namespace dsec::daemon {

using nlohmann::json;

namespace {

const char* StreamName(int stream) { return stream == 1 ? "stdout" : "stderr"; }

std::string OutputLine(int stream, std::string_view bytes) {
  return json{{"stream", StreamName(stream)}, {"data_b64", Base64Encode(std::string(bytes))}}.dump() +
         "\n";
}

}  // namespace

std::unique_ptr<StreamedExec> StreamedExec::Start(Service* service, std::string id, json body,
                                                  StreamOptions options, std::shared_ptr<ExecControl> control) {
  std::unique_ptr<StreamedExec> s(new StreamedExec(options));
  StreamedExec* raw = s.get();
  s->thread_ = std::thread([raw, service, id = std::move(id), body = std::move(body),
                            control = std::move(control)]() mutable {
    raw->Run(service, id, body, std::move(control));
  });
  return s;
}

StreamedExec::~StreamedExec() {
  Abandon();
  if (thread_.joinable()) thread_.join();
}

void StreamedExec::Run(Service* service, const std::string& id, const json& body,
                       std::shared_ptr<ExecControl> control) {
  ExecObserver observer;
  observer.control = std::move(control);
  observer.on_start = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    cv_.notify_all();
  };
  observer.on_output = [this](int stream, std::string_view bytes) { OnOutput(stream, bytes); };
  absl::StatusOr<json> r = service->Exec(id, body, &observer);
  std::lock_guard<std::mutex> lock(mu_);
  result_ = std::move(r);
  ended_ = true;
  cv_.notify_all();
}

void StreamedExec::OnOutput(int stream, std::string_view bytes) {
  if ((stream != 1 && stream != 2) || bytes.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (abandoned_ || held_[stream]) return;
  if (live_bytes_ + bytes.size() > options_.live_buffer_bytes) {
    // The client is behind: this stream's rest comes from the result.
    held_[stream] = true;
    return;
  }
  if (!live_.empty() && live_.back().stream == stream &&
      live_.back().data.size() < options_.max_line_bytes) {
    live_.back().data.append(bytes);
  } else {
    live_.push_back({stream, std::string(bytes)});
  }
  live_bytes_ += bytes.size();
  accepted_[stream] += bytes.size();
  cv_.notify_all();
}

absl::Status StreamedExec::WaitStarted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ || ended_; });
  if (started_ || result_->ok()) return absl::OkStatus();
  return result_->status();
}

bool StreamedExec::NextLine(std::string* line) { return NextLineWithin(line, -1) == Next::kLine; }

StreamedExec::Next StreamedExec::NextLineWithin(std::string* line, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !live_.empty() || ended_; };
  if (timeout_ms < 0) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
    return Next::kTimeout;
  }
  if (!live_.empty()) {
    Segment& front = live_.front();
    const int stream = front.stream;
    const size_t n = std::min(front.data.size(), options_.max_line_bytes);
    std::string chunk;
    if (n == front.data.size()) {
      chunk = std::move(front.data);
      live_.pop_front();
    } else {
      chunk = front.data.substr(0, n);
      front.data.erase(0, n);
    }
    live_bytes_ -= n;
    lock.unlock();
    *line = OutputLine(stream, chunk);
    return Next::kLine;
  }
  if (!finished_) Finish();
  if (tail_.empty()) return Next::kEnd;
  *line = std::move(tail_.front());
  tail_.pop_front();
  return Next::kLine;
}

void StreamedExec::Finish() {
  finished_ = true;
  const absl::StatusOr<json>& r = *result_;
  if (!r.ok()) {
    json err = {{"code", ErrorCodeName(r.status().code())}, {"message", std::string(r.status().message())}};
    if (auto f = FieldOf(r.status())) err["field"] = *f;
    tail_.push_back(json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    return;
  }
  json result = *r;
  uint64_t deferred = 0;
  for (int stream : {1, 2}) {
    const std::string name = StreamName(stream);
    auto it = result.find(name + "_b64");
    auto bytes = it != result.end() && it->is_string() ? Base64Decode(it->get<std::string>())
                                                       : absl::StatusOr<std::string>(std::string());
    const std::string data = bytes.ok() ? *std::move(bytes) : std::string();
    // What was not streamed live: held back for a slow client, or never
    // offered live (replayed, or a command that could not start).
    for (size_t off = std::min<uint64_t>(accepted_[stream], data.size()); off < data.size();
         off += options_.max_line_bytes) {
      const std::string_view piece = std::string_view(data).substr(off, options_.max_line_bytes);
      tail_.push_back(OutputLine(stream, piece));
      deferred += piece.size();
    }
    result.erase(name);
    result.erase(name + "_b64");
  }
  tail_.push_back(json{{"exit", result}, {"deferred_bytes", deferred}}.dump(
                      -1, ' ', false, json::error_handler_t::replace) +
                  "\n");
}

bool StreamedExec::ExecRunning() {
  std::lock_guard<std::mutex> lock(mu_);
  return started_ && !ended_;
}

void StreamedExec::Abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_ = true;
  live_.clear();
  live_bytes_ = 0;
}

}  // namespace dsec::daemon
