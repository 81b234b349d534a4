// SPDX-License-Identifier: Apache-2.0
#include "sandbox/microvm/cpl0_probe.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::microvm {

absl::StatusOr<Cpl0Probe> ParseCpl0ProbeOutput(std::string_view output) {
  const absl::string_view text(output.data(), output.size());
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    size_t at = line.find("result workload=cpl0-probe");
    if (at == absl::string_view::npos) continue;
    Cpl0Probe p;
    bool have[4] = {false, false, false, false};
    for (absl::string_view kv : absl::StrSplit(line.substr(at), ' ', absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> f = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      const std::pair<const char*, uint64_t*> keys[] = {{"iterations", &p.iterations},
                                                        {"cpl3_cycles", &p.cpl3_cycles},
                                                        {"ucall_cycles", &p.ucall_cycles},
                                                        {"cpl0_cycles", &p.cpl0_cycles}};
      for (size_t i = 0; i < 4; ++i) {
        if (f.first == keys[i].first) have[i] = absl::SimpleAtoi(f.second, keys[i].second);
      }
    }
    if (!(have[0] && have[1] && have[2] && have[3]) || p.iterations == 0) {
      return absl::InvalidArgumentError(absl::StrCat("malformed cpl0-probe report: ", std::string(line)));
    }
    return p;
  }
  return absl::NotFoundError("no cpl0-probe report in the output");
}

absl::StatusOr<Cpl0Probe> RunCpl0Probe(const std::string& monitor_binary, const std::string& testguest,
                                       int64_t timeout_ms) {
  const int64_t start = MonotonicNowNs();
  std::vector<std::string> argv = {monitor_binary};
  if (!testguest.empty()) {
    argv.push_back("--kernel");
    argv.push_back(testguest);
  }
  for (const std::string& a :
       {std::string("--cmdline"), absl::StrCat("console=ttyS0 testguest.run=cpl0-probe:", kCpl0ProbeIterations),
        std::string("--console"), std::string("none"), std::string("--log-level"), std::string("error"),
        std::string("--timeout-ms"), absl::StrCat(timeout_ms)}) {
    argv.push_back(a);
  }
  SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.out = Stdio::Capture();
  spawn.err = Stdio::SameAsStdout();
  // vm run's own --timeout-ms stops the guest; this bounds the monitor too.
  spawn.timeout_ms = timeout_ms + 5000;
  auto run = RunSubprocess(spawn);
  if (!run.ok()) {
    return absl::UnavailableError(
        absl::StrCat("microvm: cannot run the CPL0 probe (", monitor_binary, "): ", run.status().message()));
  }
  std::string& output = run->out;
  const bool timed_out = run->timed_out;
  auto probe = ParseCpl0ProbeOutput(output);
  if (!probe.ok()) {
    if (output.size() > 1500) output = output.substr(output.size() - 1500);
    return absl::UnavailableError(absl::StrCat(
        "microvm: the CPL0 probe VM gave no result", timed_out ? " (timed out)" : "", ": ",
        probe.status().message(), "; output: ", output));
  }
  probe->wall_ms = static_cast<double>(MonotonicNowNs() - start) / 1e6;
  return probe;
}

std::string EmulatedCpl0Reason(const Cpl0Probe& probe) {
  return absl::StrFormat(
      "microvm tier: guest kernel code is emulated on this host (PVM): %.0f cycles per CPL0 loop "
      "round; a Linux guest needs hardware virtualisation (HOST.md)",
      probe.cycles_per_round());
}

}  // namespace dsec::microvm
