// SPDX-License-Identifier: Apache-2.0
#include "base/logging.h"

#include <time.h>

#include <mutex>

#include "base/clock.h"
#include "fmt/format.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace dsec::log {

namespace {

constexpr int64_t kNsPerSecond = 1'000'000'000;

std::shared_ptr<spdlog::logger>& Holder() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_logger_mt("dsec");
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return logger;
}

spdlog::level::level_enum ToSpdlog(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::err: return spdlog::level::err;
    case Level::critical: return spdlog::level::critical;
  }
  return spdlog::level::critical;
}

}  // namespace

spdlog::logger* Get() { return Holder().get(); }

bool Enabled(Level level) { return Get()->should_log(ToSpdlog(level)); }

void Write(Level level, fmt::string_view format, fmt::format_args args) {
  std::string message;
  try {
    message = fmt::vformat(format, args);
  } catch (const std::exception& e) {
    message = std::string("log format error: ") + e.what() + ": " + std::string(format.data(), format.size());
  }
  Get()->log(ToSpdlog(level), spdlog::string_view_t(message));
}

void SetLevel(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  // from_str returns "off" for unknown names; only accept "off" when asked.
  if (parsed == spdlog::level::off && level != "off") return;
  Get()->set_level(parsed);
}

bool LogToFile(const std::string& path) {
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
    auto& holder = Holder();
    auto logger = std::make_shared<spdlog::logger>("dsec-file", sink);
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %L %v");
    logger->set_level(holder->level());
    holder = logger;
    return true;
  } catch (const spdlog::spdlog_ex&) {
    return false;
  }
}

bool SiteLimiter::Allow(uint64_t* suppressed) { return AllowAt(MonotonicNowNs(), suppressed); }

bool SiteLimiter::AllowAt(int64_t now_ns, uint64_t* suppressed) {
  *suppressed = 0;
  int64_t start = window_start_ns_.load(std::memory_order_relaxed);
  if (now_ns - start >= kNsPerSecond) {
    // New one-second window; one thread wins the reset, the others count
    // against the new window.
    if (window_start_ns_.compare_exchange_strong(start, now_ns, std::memory_order_relaxed)) {
      in_window_.store(0, std::memory_order_relaxed);
    }
  }
  if (in_window_.fetch_add(1, std::memory_order_relaxed) < per_second_) {
    *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
    return true;
  }
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace dsec::log
