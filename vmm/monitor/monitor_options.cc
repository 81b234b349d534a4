// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/monitor_options.h"

#include <fstream>
#include <set>
#include <sstream>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "base/json_fields.h"
#include "base/status.h"
#include "devices/balloon/balloon_control.h"
#include "sched/placement.h"
#include "vmm/monitor/default_paths.h"
#include "vmm/vm/device_table.h"
#include "vmm/vm/vm_config_json.h"

namespace dsec::monitor {

namespace {

constexpr size_t kMaxConfigFileBytes = 1 << 20;

// The flags --config may not be combined with: everything that describes
// the VM or the process (the file says it).
bool ConflictsWithConfig(const CLI::Option* o) {
  const std::string& n = o->get_name();
  return n != "--config" && n != "--print-config" && n != "--help";
}

absl::Status ReadReclaim(const nlohmann::json& j, const std::string& path, ReclaimRunOptions* r) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j, path));
  DSEC_ASSIGN_OR_RETURN(auto mode, f.OptEnum("mode", {"off", "balloon", "pageout", "both"}));
  if (mode) r->mode = *mode;
  DSEC_ASSIGN_OR_RETURN(auto min_free, f.OptUint("min_free_mib", 0, uint64_t{1} << 20));
  if (min_free) r->knobs.min_free_mib = *min_free;
  DSEC_ASSIGN_OR_RETURN(auto aggr, f.OptNumber("aggressiveness", 0.0, 1.0));
  if (aggr) r->knobs.aggressiveness = *aggr;
  DSEC_ASSIGN_OR_RETURN(auto slowdown, f.OptNumber("max_slowdown", 0.0, 10.0));
  if (slowdown) r->knobs.max_slowdown = *slowdown;
  DSEC_ASSIGN_OR_RETURN(auto interval, f.OptInt("interval_ms", 10, 600'000));
  if (interval) r->interval_ms = *interval;
  return f.RejectUnknown();
}

absl::Status ReadMonitorKeys(const nlohmann::json& j, const std::string& path, MonitorOptions* o) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j, path));
  DSEC_ASSIGN_OR_RETURN(auto control, f.OptString("control", 107));
  if (control) o->control = *control;
  DSEC_ASSIGN_OR_RETURN(auto stats, f.OptString("stats_json", 4096));
  if (stats) o->stats_json = *stats;
  DSEC_ASSIGN_OR_RETURN(auto snapshot_dir, f.OptString("snapshot_dir", 4096));
  if (snapshot_dir) o->snapshot_dir = *snapshot_dir;
  DSEC_ASSIGN_OR_RETURN(auto restore, f.OptString("restore", 4096));
  if (restore) o->restore = *restore;
  DSEC_ASSIGN_OR_RETURN(auto lazy, f.OptBool("lazy_restore"));
  if (lazy) o->lazy_restore = *lazy;
  DSEC_ASSIGN_OR_RETURN(auto prefetch, f.OptString("prefetch", 4096));
  if (prefetch) o->prefetch = *prefetch;
  DSEC_ASSIGN_OR_RETURN(auto record, f.OptString("record_touched", 4096));
  if (record) o->record_touched = *record;
  DSEC_ASSIGN_OR_RETURN(auto level,
                        f.OptEnum("log_level", {"trace", "debug", "info", "warn", "error", "off"}));
  if (level) o->log_level = *level;
  DSEC_ASSIGN_OR_RETURN(auto quiet, f.OptBool("quiet_report"));
  if (quiet) o->quiet_report = *quiet;
  DSEC_ASSIGN_OR_RETURN(auto uid, f.OptUint("uid", 1, 0xfffffffe));
  if (uid) o->jail.uid = static_cast<uid_t>(*uid);
  DSEC_ASSIGN_OR_RETURN(auto gid, f.OptUint("gid", 1, 0xfffffffe));
  if (gid) o->jail.gid = static_cast<gid_t>(*gid);
  DSEC_ASSIGN_OR_RETURN(auto seccomp, f.OptEnum("seccomp", {"kill", "log", "off"}));
  if (seccomp) o->jail.seccomp = *jail::ParseSeccompMode(*seccomp);
  DSEC_ASSIGN_OR_RETURN(auto hooks, f.OptStringList("test_hooks", 16, 4096));
  if (hooks) o->jail.test_hooks = *hooks;
  if (const nlohmann::json* reclaim = f.Raw("reclaim")) {
    DSEC_RETURN_IF_ERROR(ReadReclaim(*reclaim, f.Path("reclaim"), &o->reclaim));
  }
  return f.RejectUnknown();
}

// What every configuration gets whichever way it came: the default kernel,
// and the checks that span the VM and the process.
absl::Status Finish(MonitorOptions* o) {
  if (o->config.kernel_path.empty()) {
    o->config.kernel_path = DefaultTestGuestPath();
    if (o->config.kernel_path.empty()) {
      return absl::InvalidArgumentError(
          "no --kernel given and the test guest was not found next to the binary (build it "
          "with tools/setup.sh)");
    }
  }
  if (o->lazy_restore && o->restore.empty()) {
    return absl::InvalidArgumentError("--lazy is for --restore");
  }
  if ((!o->prefetch.empty() || !o->record_touched.empty()) && !o->lazy_restore) {
    return absl::InvalidArgumentError("--prefetch and --record-touched are for --lazy");
  }
  o->jail.extras = DeviceFilterExtras(o->config.devices);
  DSEC_RETURN_IF_ERROR(jail::ValidateJailOptions(o->jail));
  if (o->jail.uid.has_value() && o->config.qos.has_value()) {
    // Placement writes cgroup files and removes the sandbox's cgroup at
    // exit: root's work.
    return absl::InvalidArgumentError(
        "--qos needs a monitor that keeps uid 0 (cgroup placement): drop --uid/--gid");
  }
  if (o->jail.uid.has_value()) o->reclaim.try_damon = false;
  DSEC_ASSIGN_OR_RETURN(ReclaimMode mode, ParseReclaimMode(o->reclaim.mode));
  if (mode == ReclaimMode::kBalloon || mode == ReclaimMode::kBoth) {
    // The controller drives whichever device offers a BalloonControl.
    bool balloon = false;
    for (const auto& d : o->config.devices) {
      balloon = balloon || d->kind().control_type() == typeid(devices::BalloonControl);
    }
    if (!balloon) {
      return absl::InvalidArgumentError(
          absl::StrCat("--reclaim ", o->reclaim.mode, " needs --balloon"));
    }
  }
  return absl::OkStatus();
}

jail::ThreadKind JailThread(virtio::HostThread thread) {
  switch (thread) {
    case virtio::HostThread::kVcpu:
      return jail::ThreadKind::kVcpu;
    case virtio::HostThread::kMain:
      return jail::ThreadKind::kMain;
    case virtio::HostThread::kEventLoop:
      break;
  }
  return jail::ThreadKind::kEventLoop;
}

absl::StatusOr<MonitorOptions> FromFlags(const MonitorFlags& flags) {
  MonitorOptions o = flags.options;
  vm::VmConfig& c = o.config;
  if (flags.console == "stdio") {
    c.console.kind = vm::ConsoleConfig::Kind::kStdio;
  } else if (flags.console == "none") {
    c.console.kind = vm::ConsoleConfig::Kind::kNone;
  } else {
    c.console.kind = vm::ConsoleConfig::Kind::kFile;
    c.console.path = flags.console;
  }
  c.pit = flags.pit == "kernel" ? vm::PitChoice::kKernel : vm::PitChoice::kUser;
  c.boot = flags.boot == "linux64" ? vm::BootProtocolChoice::kLinux64
           : flags.boot == "pvh"   ? vm::BootProtocolChoice::kPvh
                                   : vm::BootProtocolChoice::kAuto;
  if (!flags.qos.empty()) {
    DSEC_ASSIGN_OR_RETURN(sched::QosClass q, sched::ParseQosClass(flags.qos));
    c.qos = q;
  }
  if (flags.uid >= 0) o.jail.uid = static_cast<uid_t>(flags.uid);
  if (flags.gid >= 0) o.jail.gid = static_cast<gid_t>(flags.gid);
  DSEC_ASSIGN_OR_RETURN(o.jail.seccomp, jail::ParseSeccompMode(flags.seccomp));
  // Devices in table order, each kind's in command-line order.
  for (const virtio::DeviceKind* kind : vm::DeviceKinds()) {
    virtio::DeviceFlagValues values;
    for (const virtio::DeviceFlag& f : kind->flags()) {
      const std::string name(f.name);
      if (f.value_name.empty()) {
        auto it = flags.device_counts.find(name);
        if (it != flags.device_counts.end() && it->second > 0) values[name].assign(it->second, "");
      } else if (auto it = flags.device_values.find(name); it != flags.device_values.end()) {
        if (!it->second.empty()) values[name] = it->second;
      }
    }
    DSEC_ASSIGN_OR_RETURN(virtio::DeviceSpecs specs, kind->FromFlags(values));
    for (auto& s : specs) c.devices.push_back(std::move(s));
  }
  return o;
}

absl::StatusOr<MonitorOptions> FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--config ", path, ": cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, ": larger than ", kMaxConfigFileBytes, " bytes"));
  }
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": not JSON"));
  absl::StatusOr<MonitorOptions> o = MonitorOptionsFromJson(j);
  if (!o.ok()) return Annotate(o.status(), absl::StrCat("--config ", path));
  return o;
}

}  // namespace

jail::FilterExtras DeviceFilterExtras(const virtio::DeviceSpecs& devices) {
  jail::FilterExtras out;
  std::set<const virtio::DeviceKind*> seen;
  for (const auto& spec : devices) {
    const virtio::DeviceKind& kind = spec->kind();
    if (!seen.insert(&kind).second) continue;
    const virtio::HostCalls calls = kind.host_calls();
    for (const virtio::SyscallUse& c : calls.syscalls) {
      out.syscalls.push_back({JailThread(c.thread), std::string(c.name), c.unix_socket_only,
                              absl::StrCat(std::string(kind.name()), ": ", std::string(c.why))});
    }
    for (const virtio::IoctlUse& c : calls.ioctls) {
      out.ioctls.push_back({JailThread(c.thread), c.request,
                            absl::StrCat(std::string(kind.name()), ": ", std::string(c.why))});
    }
  }
  return out;
}

absl::StatusOr<MonitorOptions> MonitorOptionsFromJson(const nlohmann::json& j) {
  MonitorOptions o;
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j));
  DSEC_RETURN_IF_ERROR(vm::ReadVmConfig(f, &o.config));
  if (const nlohmann::json* m = f.Raw("monitor")) {
    DSEC_RETURN_IF_ERROR(ReadMonitorKeys(*m, f.Path("monitor"), &o));
  }
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return o;
}

nlohmann::json MonitorOptionsToJson(const MonitorOptions& o) {
  nlohmann::json j = vm::VmConfigToJson(o.config);
  j["monitor"] = {{"control", o.control},
                  {"stats_json", o.stats_json},
                  {"snapshot_dir", o.snapshot_dir},
                  {"restore", o.restore},
                  {"lazy_restore", o.lazy_restore},
                  {"prefetch", o.prefetch},
                  {"record_touched", o.record_touched},
                  {"log_level", o.log_level},
                  {"quiet_report", o.quiet_report},
                  {"reclaim",
                   {{"mode", o.reclaim.mode},
                    {"min_free_mib", o.reclaim.knobs.min_free_mib},
                    {"aggressiveness", o.reclaim.knobs.aggressiveness},
                    {"max_slowdown", o.reclaim.knobs.max_slowdown},
                    {"interval_ms", o.reclaim.interval_ms}}},
                  {"seccomp", std::string(jail::SeccompModeName(o.jail.seccomp))}};
  if (o.jail.uid) j["monitor"]["uid"] = *o.jail.uid;
  if (o.jail.gid) j["monitor"]["gid"] = *o.jail.gid;
  if (!o.jail.test_hooks.empty()) j["monitor"]["test_hooks"] = o.jail.test_hooks;
  return j;
}

absl::StatusOr<MonitorOptions> ResolveMonitorOptions(const MonitorFlags& flags) {
  absl::StatusOr<MonitorOptions> o =
      flags.config_file.empty() ? FromFlags(flags) : FromFile(flags.config_file);
  if (!o.ok()) return o.status();
  DSEC_RETURN_IF_ERROR(Finish(&*o));
  return o;
}

void AddMonitorFlags(CLI::App& app, MonitorFlags& flags) {
  MonitorOptions& opts = flags.options;
  opts.config.cmdline = "console=ttyS0";
  app.add_option("--kernel", opts.config.kernel_path,
                 "ELF vmlinux, bzImage or PVH ELF (default: the test guest)");
  app.add_option("--initrd", opts.config.initrd_path, "Initial ramdisk");
  app.add_option("--cmdline", opts.config.cmdline, "Kernel command line")->capture_default_str();
  app.add_option("--mem-mib", opts.config.mem_mib, "Guest RAM in MiB")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  app.add_option("--vcpus", opts.config.vcpus, "vCPUs")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--console", flags.console, "stdio, none, or a file path")->capture_default_str();
  app.add_option("--console-cap-bytes", opts.config.console.cap_bytes,
                 "Total console bytes written; the rest is dropped and counted (0: no cap)")
      ->capture_default_str();
  app.add_option("--console-rate-bytes", opts.config.console.rate_bytes_per_s,
                 "Sustained console bytes per second (0: unlimited)")
      ->capture_default_str();
  app.add_option("--boot", flags.boot, "Boot protocol")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "linux64", "pvh"}));
  app.add_option("--pit", flags.pit, "8254 PIT: user (in the monitor) or kernel (KVM's; slow VM teardown)")
      ->capture_default_str()
      ->check(CLI::IsMember({"user", "kernel"}));
  app.add_flag("--acpi,!--no-acpi", opts.config.acpi,
               "ACPI tables and PM1 registers, how a Linux guest powers off (--no-acpi: the MP "
               "table only)")
      ->capture_default_str();
  app.add_option("--qos", flags.qos, "CPU placement: ls (whole cores, isolated) or be (packed); default none")
      ->check(CLI::IsMember({"ls", "be"}));
  app.add_option("--timeout-ms", opts.config.timeout_ms, "Stop the VM after this long (0: never)")
      ->capture_default_str();
  app.add_option("--stats-json", opts.stats_json, "Write stop reason, boot timestamps and memory figures here");
  app.add_option("--log-level", opts.log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.add_flag("--quiet-report", opts.quiet_report, "Do not print test-device messages");
  app.add_option("--reclaim", opts.reclaim.mode,
                 "Reclaim controller: off, balloon (needs --balloon), pageout (MADV_PAGEOUT of "
                 "cold guest RAM where swap/zram exists), both (needs --balloon)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "balloon", "pageout", "both"}));
  app.add_option("--reclaim-min-free-mib", opts.reclaim.knobs.min_free_mib,
                 "Free guest memory the balloon always leaves")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 20));
  app.add_option("--reclaim-aggressiveness", opts.reclaim.knobs.aggressiveness,
                 "Share of excess free / cold memory reclaimed per tick (0..1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--reclaim-max-slowdown", opts.reclaim.knobs.max_slowdown,
                 "Pause pageout while the estimated refault slowdown is above this fraction")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--reclaim-interval-ms", opts.reclaim.interval_ms, "Controller tick period")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{600'000}));
  app.add_option("--snapshot-dir", opts.snapshot_dir,
                 "Directory the control socket's \"snapshot\" writes a snapshot into (memory, "
                 "manifest.json; one at a time)");
  app.add_option("--restore", opts.restore,
                 "Start from the snapshot in this directory instead of booting (its memory is "
                 "mapped copy-on-write; guest settings are the snapshot's)");
  app.add_flag("--lazy", opts.lazy_restore,
               "With --restore: guest RAM filled page by page on first touch (userfaultfd) from "
               "the snapshot, not mapped copy-on-write");
  app.add_option("--prefetch", opts.prefetch,
                 "With --lazy: copy in first the pages listed in this file (--record-touched "
                 "of an earlier restore)");
  app.add_option("--record-touched", opts.record_touched,
                 "With --lazy: at exit, write the pages this restore touched to this file");
  app.add_option("--control", opts.control,
                 "Control socket (unix, 0600, removed at exit): one JSON request per line, see `vm ctl`");
  app.add_option("--uid", flags.uid,
                 "Once the VM is built, run as this uid (with --gid), no capabilities")
      ->check(CLI::Range(int64_t{1}, int64_t{0xfffffffe}));
  app.add_option("--gid", flags.gid, "The gid for --uid")
      ->check(CLI::Range(int64_t{1}, int64_t{0xfffffffe}));
  app.add_option("--seccomp", flags.seccomp,
                 "Per-thread seccomp filters: kill (a call off the list kills the monitor), log, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"kill", "log", "off"}));
  // For tests only (vmm/jail/monitor_jail.h): not in --help.
  app.add_option("--test-hook", flags.options.jail.test_hooks)->group("");
  // One option per device flag of the device table.
  for (const virtio::DeviceKind* kind : vm::DeviceKinds()) {
    for (const virtio::DeviceFlag& f : kind->flags()) {
      const std::string name(f.name);
      const std::string flag = "--" + name;
      const std::string help(f.help);
      if (f.value_name.empty()) {
        app.add_flag(flag, flags.device_counts[name], help);
      } else {
        app.add_option(flag, flags.device_values[name], help)->type_name(std::string(f.value_name));
      }
    }
  }
  CLI::Option* config = app.add_option(
      "--config", flags.config_file,
      "The whole configuration as a JSON file (vmm/monitor/README.md): instead of the other flags");
  app.add_flag("--print-config", flags.print_config,
               "Print the configuration (JSON, the --config form) and exit without booting");
  for (CLI::Option* o : app.get_options()) {
    if (ConflictsWithConfig(o)) config->excludes(o);
  }
}

}  // namespace dsec::monitor
