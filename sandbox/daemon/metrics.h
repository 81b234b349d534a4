// SPDX-License-Identifier: Apache-2.0
// The daemon's counters and latency histograms, rendered in Prometheus text
// format. Thread-safe (atomics; histograms under a mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace dsec::daemon {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds_ms);
  void Observe(double ms);
  // name_bucket{le=..} lines, _sum, _count, with `labels` (may be "").
  std::string Render(const std::string& name, const std::string& labels) const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bound, plus +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  // One histogram and counter per tier the node offers.
  explicit Metrics(const std::vector<std::string>& tiers);
  std::map<std::string, Histogram> create_ms;  // per tier
  std::map<std::string, Histogram> exec_ms;    // per tier
  std::map<std::string, std::atomic<uint64_t>> execs_total;  // per tier
  std::atomic<uint64_t> dropped_output_bytes{0};
  std::atomic<uint64_t> replayed_execs{0};
  std::atomic<uint64_t> rejected_limit{0};  // 429s
  std::atomic<uint64_t> unrecorded_execs{0};  // trajectory append refused (quota)
};

}  // namespace dsec::daemon
