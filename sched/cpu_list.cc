// SPDX-License-Identifier: Apache-2.0
#include "sched/cpu_list.h"

#include <algorithm>
#include <charconv>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dsec::sched {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A whole decimal number in [0, kMaxCpuNumber]; no sign, no spaces.
bool ParseNumber(std::string_view s, int* out) {
  if (s.empty() || s.size() > 5) return false;
  int value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return false;
  if (value < 0 || value > kMaxCpuNumber) return false;
  *out = value;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text) {
  std::string_view rest = Trim(text);
  std::vector<int> cpus;
  if (rest.empty()) return cpus;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t dash = item.find('-');
    int first = 0, last = 0;
    bool ok = dash == std::string_view::npos
                  ? ParseNumber(item, &first) && ParseNumber(item, &last)
                  : ParseNumber(item.substr(0, dash), &first) &&
                        ParseNumber(item.substr(dash + 1), &last) && first <= last;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed CPU list \"", std::string(Trim(text)), "\" at \"",
                       std::string(item), "\" (expected e.g. 0-3,5)"));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    absl::StrAppend(&out, cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace dsec::sched
