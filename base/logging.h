// SPDX-License-Identifier: Apache-2.0
// The one logging facade of dsec-vmm, backed by spdlog (fmt-style format
// strings). Context goes into the message as key=value pairs:
//   DSEC_LOG(info, "vm={} device=serial dropped_bytes={}", id, n);
// Sites that a guest or sandbox can trigger use DSEC_LOG_RATELIMITED so that
// a misbehaving guest cannot flood the node's logs.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

// Only fmt's core: a call site checks its format string at compile time and
// packs its arguments; the formatting itself and spdlog are compiled once,
// in logging.cc (with Debian's header-only fmt and spdlog, which a static
// binary needs, including spdlog here cost each including file ~12 s of
// compile time for the formatting engine it instantiated).
#include "fmt/core.h"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace dsec::log {

// DSEC_LOG's levels, named as spdlog names them.
enum class Level : int { trace, debug, info, warn, err, critical };

// The process-wide logger (stderr by default).
spdlog::logger* Get();
// Whether a message of `level` would be written now.
bool Enabled(Level level);
// Formats and writes one message (format errors are written, not thrown).
void Write(Level level, fmt::string_view format, fmt::format_args args);

template <typename... Args>
void Log(Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (!Enabled(level)) return;
  Write(level, format, fmt::make_format_args(args...));
}
// "trace", "debug", "info", "warn", "error", "off"; unknown names keep the level.
void SetLevel(std::string_view level);
// Redirects the logger to a file (tests, daemons). Returns false on failure.
bool LogToFile(const std::string& path);

// Admits at most `per_second` messages per second for one log site and
// counts the rest. Thread-safe and lock-free.
class SiteLimiter {
 public:
  explicit SiteLimiter(uint32_t per_second) : per_second_(per_second) {}
  // True if this message may be logged; *suppressed receives the number of
  // messages dropped since the last admitted one.
  bool Allow(uint64_t* suppressed);
  // Same with an explicit clock (nanoseconds), for tests.
  bool AllowAt(int64_t now_ns, uint64_t* suppressed);

 private:
  const uint32_t per_second_;
  std::atomic<int64_t> window_start_ns_{0};
  std::atomic<uint32_t> in_window_{0};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace dsec::log

#define DSEC_LOG(lvl, ...) ::dsec::log::Log(::dsec::log::Level::lvl, __VA_ARGS__)

// level: trace, debug, info, warn, err, critical.
#define DSEC_LOG_RATELIMITED(lvl, per_second, ...)                              \
  do {                                                                            \
    static ::dsec::log::SiteLimiter dsec_log_site_(per_second);                   \
    uint64_t dsec_log_suppressed_ = 0;                                            \
    if (dsec_log_site_.Allow(&dsec_log_suppressed_)) {                            \
      if (dsec_log_suppressed_ != 0)                                              \
        DSEC_LOG(lvl, "suppressed={} (similar messages dropped by rate limit)", \
                 dsec_log_suppressed_);                                           \
      DSEC_LOG(lvl, __VA_ARGS__);                                               \
    }                                                                             \
  } while (0)
