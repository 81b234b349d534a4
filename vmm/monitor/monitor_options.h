// SPDX-License-Identifier: Apache-2.0
// The monitor's configuration: the VM (vm::VmConfig) plus the process's own
// settings (control socket, stats file, log level, reclaim). Two ways fill
// it, never both: the command-line flags, or `--config FILE` (JSON: the
// VmConfig keys of vmm/vm/vm_config_json.h plus a "monitor" object).
// `--print-config` prints the JSON that the flags amount to, so that any
// command line can become a config file.
//
//   "monitor": {"control": "/s/control.sock", "stats_json": "/s/stats.json",
//               "log_level": "warn", "quiet_report": false,
//               "reclaim": {"mode": "off", "min_free_mib": 64,
//                           "aggressiveness": 0.5, "max_slowdown": 0.05,
//                           "interval_ms": 500}}
#pragma once

#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "vmm/jail/monitor_jail.h"
#include "vmm/monitor/vm_reclaim.h"
#include "vmm/vm/vm_config.h"

namespace dsec::monitor {

struct MonitorOptions {
  vm::VmConfig config;
  std::string control;     // control socket path ("" = none)
  std::string stats_json;  // written at exit ("" = none)
  // Snapshots: the directory the control socket's "snapshot" writes into
  // ("" = snapshots off), and a snapshot directory to start from instead of
  // booting ("" = boot; the guest-visible settings are then the snapshot's).
  std::string snapshot_dir;
  std::string restore;
  // With restore: guest RAM filled on first touch through userfaultfd
  // (vm::RestoreOptions::lazy), the pages listed in `prefetch` (a file
  // `record_touched` wrote, snapshot::ParseTouched) copied in first; at
  // exit the pages this restore touched are written to `record_touched`.
  bool lazy_restore = false;
  std::string prefetch;
  std::string record_touched;
  std::string log_level = "warn";
  bool quiet_report = false;  // do not print test-device messages
  ReclaimRunOptions reclaim;
  // The jail (vmm/jail): uid/gid to drop to, the seccomp mode, test hooks.
  jail::JailOptions jail;
};

// The raw command line, as CLI11 fills it.
struct MonitorFlags {
  MonitorOptions options;  // scalar flags land here directly
  std::string config_file;
  bool print_config = false;
  std::string console = "stdio";
  std::string boot = "auto";
  std::string pit = "user";
  std::string qos;
  int64_t uid = -1;  // -1: keep
  int64_t gid = -1;
  std::string seccomp{jail::SeccompModeName(jail::kDefaultSeccompMode)};
  // Device flags from the device table: values of flags that take one,
  // and how often each value-less flag was given.
  std::map<std::string, std::vector<std::string>, std::less<>> device_values;
  std::map<std::string, int, std::less<>> device_counts;
};

// Adds every flag to `app`, the device flags from vm::DeviceKinds().
// `--config` excludes all the others but `--print-config`.
void AddMonitorFlags(CLI::App& app, MonitorFlags& flags);

// The options the flags or the config file describe, with the defaults the
// monitor applies (the test guest when no kernel is named). InvalidArgument
// naming the flag or field for bad input; NotFound for an unreadable file.
absl::StatusOr<MonitorOptions> ResolveMonitorOptions(const MonitorFlags& flags);

// What the configured devices' back-ends add to the jail's per-thread
// seccomp lists: each device kind's host_calls() once, however many devices
// of the kind there are, each call's why prefixed with the kind's name.
// Filled in by ResolveMonitorOptions.
jail::FilterExtras DeviceFilterExtras(const virtio::DeviceSpecs& devices);

// The JSON form (a config file) and back.
nlohmann::json MonitorOptionsToJson(const MonitorOptions& options);
absl::StatusOr<MonitorOptions> MonitorOptionsFromJson(const nlohmann::json& j);

}  // namespace dsec::monitor
