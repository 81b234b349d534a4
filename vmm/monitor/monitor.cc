// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/monitor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "nlohmann/json.hpp"
#include "sched/placement.h"
#include "vmm/api/control.h"
#include "vmm/monitor/default_paths.h"
#include "vmm/monitor/device_args.h"
#include "vmm/vm/vm.h"

namespace dsec::monitor {

namespace {

int64_t MonotonicNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

nlohmann::json StatsToJson(const vm::VmStats& s) {
  return nlohmann::json{
      {"stop_reason", std::string(vm::StopReasonName(s.stop.reason))},
      {"guest_exit_code", s.stop.guest_exit_code},
      {"detail", s.stop.detail},
      {"monotonic_ns",
       {{"main", MainEntryNs()},
        {"create", s.timestamps.create_ns},
        {"kvm_ready", s.timestamps.kvm_ready_ns},
        {"memory_ready", s.timestamps.memory_ready_ns},
        {"loaded", s.timestamps.loaded_ns},
        {"vcpus_ready", s.timestamps.vcpus_ready_ns},
        {"first_run", s.timestamps.first_run_ns},
        {"first_insn", s.timestamps.first_insn_ns},
        {"first_user", s.timestamps.first_user_ns},
        {"workload_done", s.timestamps.workload_done_ns},
        {"stop", s.timestamps.stop_ns}}},
      {"guest_mem_bytes", s.guest_mem_bytes},
      {"guest_resident_bytes", s.guest_resident_bytes},
      {"vmm_rss_bytes", s.vmm_rss_bytes},
      {"vmm_peak_rss_bytes", s.vmm_peak_rss_bytes},
      {"vmm_private_dirty_bytes", s.vmm_private_dirty_bytes},
      {"console",
       {{"bytes_in", s.console_bytes_in},
        {"bytes_written", s.console_bytes_written},
        {"bytes_dropped", s.console_bytes_dropped}}},
      {"testdev", {{"messages", s.testdev_messages}, {"dropped", s.testdev_dropped}}},
      {"vcpu_exits", s.vcpu_exits},
      {"placement", s.placement ? nlohmann::json{{"qos", s.placement->qos},
                                                  {"mechanism", s.placement->mechanism},
                                                  {"cpus", s.placement->cpus},
                                                  {"vcpu_cpus", s.placement->vcpu_cpus}}
                                : nlohmann::json(nullptr)},
      {"unclaimed_accesses", s.unclaimed_accesses},
  };
}

// "PATH" or "PATH,ro" (a path containing a comma is taken whole unless it
// ends in ",ro").
absl::StatusOr<vm::PmemConfig> ParsePmemArg(const std::string& arg) {
  vm::PmemConfig pmem;
  pmem.path = arg;
  constexpr std::string_view kRo = ",ro";
  if (arg.size() > kRo.size() && arg.compare(arg.size() - kRo.size(), kRo.size(), kRo) == 0) {
    pmem.path = arg.substr(0, arg.size() - kRo.size());
    pmem.read_only = true;
  }
  if (pmem.path.empty()) return absl::InvalidArgumentError("--pmem: empty path");
  return pmem;
}

int UsageError(const absl::Status& status) {
  std::fprintf(stderr, "dsec-monitor: %s\n", std::string(status.message()).c_str());
  return kExitUsage;
}

}  // namespace

int ExitStatusFor(const vm::StopInfo& stop) {
  switch (stop.reason) {
    case vm::StopReason::kGuestShutdown:
      return stop.guest_exit_code == 0 ? kExitGuestOk : kExitGuestError;
    case vm::StopReason::kReset:
      return kExitReset;
    case vm::StopReason::kTripleFault:
      return kExitTripleFault;
    case vm::StopReason::kInternalError:
      return kExitInternal;
    case vm::StopReason::kTimeout:
      return kExitTimeout;
    case vm::StopReason::kHostRequest:
      return kExitSignal;
  }
  return kExitInternal;
}

int64_t MainEntryNs() {
  static const int64_t t = MonotonicNow();
  return t;
}

int RunMonitor(MonitorOptions& opts) {
  log::SetLevel(opts.log_level);
  vm::VmConfig& config = opts.config;
  if (opts.console == "stdio") {
    config.console.kind = vm::ConsoleConfig::Kind::kStdio;
  } else if (opts.console == "none") {
    config.console.kind = vm::ConsoleConfig::Kind::kNone;
  } else {
    config.console.kind = vm::ConsoleConfig::Kind::kFile;
    config.console.path = opts.console;
  }
  config.pit = opts.pit == "kernel" ? vm::PitChoice::kKernel : vm::PitChoice::kUser;
  if (!opts.qos.empty()) {
    auto qos = sched::ParseQosClass(opts.qos);
    if (!qos.ok()) return UsageError(qos.status());
    config.qos = *qos;
  }
  if (opts.boot == "linux64") {
    config.boot = vm::BootProtocolChoice::kLinux64;
  } else if (opts.boot == "pvh") {
    config.boot = vm::BootProtocolChoice::kPvh;
  }
  for (const auto& arg : opts.disks) {
    auto disk = ParseDiskArg(arg);
    if (!disk.ok()) return UsageError(disk.status());
    config.disks.push_back(*disk);
  }
  for (const auto& arg : opts.nets) {
    auto net = ParseNetArg(arg);
    if (!net.ok()) return UsageError(net.status());
    config.nets.push_back(*net);
  }
  for (const auto& arg : opts.pmems) {
    auto pmem = ParsePmemArg(arg);
    if (!pmem.ok()) return UsageError(pmem.status());
    config.pmems.push_back(*pmem);
  }
  if (!opts.vsock.empty()) {
    auto vsock = ParseVsockArg(opts.vsock);
    if (!vsock.ok()) return UsageError(vsock.status());
    config.vsock = *vsock;
  }
  auto reclaim_mode = ParseReclaimMode(opts.reclaim.mode);
  if (!reclaim_mode.ok()) return UsageError(reclaim_mode.status());
  if ((*reclaim_mode == ReclaimMode::kBalloon || *reclaim_mode == ReclaimMode::kBoth) &&
      !config.balloon) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("--reclaim ", opts.reclaim.mode, " needs --balloon")));
  }
  if (config.kernel_path.empty()) {
    config.kernel_path = DefaultTestGuestPath();
    if (config.kernel_path.empty()) {
      std::fprintf(stderr,
                   "dsec-monitor: no --kernel given and the test guest was not found next to "
                   "the binary (build it with tools/setup.sh)\n");
      return kExitUsage;
    }
  }

  // SIGINT/SIGTERM become a clean stop: block them in every thread (the VM's
  // threads inherit this mask) and read them from a signalfd here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ScopedFd sigfd(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));

  auto created = vm::Vm::Create(config);
  if (!created.ok()) {
    std::fprintf(stderr, "dsec-monitor: %s\n", std::string(created.status().message()).c_str());
    return created.status().code() == absl::StatusCode::kInvalidArgument ||
                   created.status().code() == absl::StatusCode::kNotFound ||
                   created.status().code() == absl::StatusCode::kPermissionDenied
               ? kExitUsage
               : kExitInternal;
  }
  std::unique_ptr<vm::Vm> machine = std::move(*created);
  if (!opts.quiet_report) {
    machine->SetTestMessageCallback([](std::string_view msg) {
      std::printf("testguest: %.*s\n", static_cast<int>(msg.size()), msg.data());
      std::fflush(stdout);
    });
  }
  if (absl::Status s = machine->Start(); !s.ok()) {
    std::fprintf(stderr, "dsec-monitor: starting the VM: %s\n", std::string(s.message()).c_str());
    machine->Wait();
    return kExitInternal;
  }
  // The reclaim controller (its own thread) and the control socket (its own
  // thread): neither runs on a vCPU or the device event loop.
  std::unique_ptr<VmReclaim> reclaim;
  if (*reclaim_mode != ReclaimMode::kOff) {
    auto started = VmReclaim::Start(*machine, opts.reclaim);
    if (!started.ok()) {
      std::fprintf(stderr, "dsec-monitor: reclaim: %s\n", std::string(started.status().message()).c_str());
      machine->RequestStop(vm::StopReason::kInternalError, "reclaim controller failed to start");
      machine->Wait();
      return started.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                           : kExitInternal;
    }
    reclaim = std::move(*started);
  }
  std::unique_ptr<api::ControlServer> control;
  if (!opts.control.empty()) {
    vm::Vm* m = machine.get();
    VmReclaim* r = reclaim.get();
    auto server = api::ControlServer::Start(
        opts.control, [m, r](const api::ControlRequest& req) { return HandleVmControl(*m, r, req); });
    if (!server.ok()) {
      std::fprintf(stderr, "dsec-monitor: --control: %s\n", std::string(server.status().message()).c_str());
      reclaim.reset();
      machine->RequestStop(vm::StopReason::kInternalError, "control socket failed");
      machine->Wait();
      return kExitUsage;
    }
    control = std::move(*server);
  }
  pollfd fds[2] = {{machine->stop_requested_fd(), POLLIN, 0}, {sigfd.get(), POLLIN, 0}};
  for (;;) {
    int n = ::poll(fds, sigfd.valid() ? 2 : 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (fds[0].revents & POLLIN) break;
    if (sigfd.valid() && (fds[1].revents & POLLIN)) {
      signalfd_siginfo info;
      if (::read(sigfd.get(), &info, sizeof(info)) == sizeof(info)) {
        machine->RequestStop(vm::StopReason::kHostRequest,
                             absl::StrCat("signal ", info.ssi_signo));
      }
    }
  }
  control.reset();  // closes the socket and unlinks its path
  if (reclaim != nullptr) reclaim->Stop();
  vm::VmStats stats = machine->Wait();
  nlohmann::json reclaim_json = nullptr;
  if (reclaim != nullptr) {
    reclaim_json = reclaim->MetricsJson();
    reclaim.reset();
    // One line, for scripts and `bench reclaim`.
    std::fprintf(stderr, "dsec-monitor: reclaim %s\n", reclaim_json.dump().c_str());
  }
  std::fprintf(stderr, "dsec-monitor: vm stopped: reason=%s exit_code=%u detail=\"%s\"\n",
               std::string(vm::StopReasonName(stats.stop.reason)).c_str(),
               stats.stop.guest_exit_code, stats.stop.detail.c_str());
  if (stats.console_bytes_dropped > 0) {
    std::fprintf(stderr, "dsec-monitor: console: %llu bytes from the guest dropped (cap %llu bytes, "
                         "rate %llu bytes/s)\n",
                 static_cast<unsigned long long>(stats.console_bytes_dropped),
                 static_cast<unsigned long long>(config.console.cap_bytes),
                 static_cast<unsigned long long>(config.console.rate_bytes_per_s));
  }
  if (!opts.stats_json.empty()) {
    std::ofstream out(opts.stats_json);
    nlohmann::json j = StatsToJson(stats);
    j["reclaim"] = reclaim_json;
    out << j.dump(2) << "\n";
    if (!out) std::fprintf(stderr, "dsec-monitor: could not write %s\n", opts.stats_json.c_str());
  }
  return ExitStatusFor(stats.stop);
}

void AddMonitorFlags(CLI::App& app, MonitorOptions& opts) {
  opts.config.cmdline = "console=ttyS0";
  app.add_option("--kernel", opts.config.kernel_path,
                  "ELF vmlinux, bzImage or PVH ELF (default: the test guest)");
  app.add_option("--initrd", opts.config.initrd_path, "Initial ramdisk");
  app.add_option("--cmdline", opts.config.cmdline, "Kernel command line")
      ->capture_default_str();
  app.add_option("--mem-mib", opts.config.mem_mib, "Guest RAM in MiB")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  app.add_option("--vcpus", opts.config.vcpus, "vCPUs")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--console", opts.console, "stdio, none, or a file path")
      ->capture_default_str();
  app.add_option("--console-cap-bytes", opts.config.console.cap_bytes,
                  "Total console bytes written; the rest is dropped and counted (0: no cap)")
      ->capture_default_str();
  app.add_option("--console-rate-bytes", opts.config.console.rate_bytes_per_s,
                  "Sustained console bytes per second (0: unlimited)")
      ->capture_default_str();
  app.add_option("--boot", opts.boot, "Boot protocol")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "linux64", "pvh"}));
  app.add_option("--pit", opts.pit,
                  "8254 PIT: user (in the monitor) or kernel (KVM's; slow VM teardown)")
      ->capture_default_str()
      ->check(CLI::IsMember({"user", "kernel"}));
  app.add_flag("--acpi,!--no-acpi", opts.config.acpi,
               "ACPI tables and PM1 registers, how a Linux guest powers off (--no-acpi: the MP "
               "table only)")
      ->capture_default_str();
  app.add_option("--qos", opts.qos,
                  "CPU placement: ls (whole cores, isolated) or be (packed); default none")
      ->check(CLI::IsMember({"ls", "be"}));
  app.add_option("--timeout-ms", opts.config.timeout_ms, "Stop the VM after this long (0: never)")
      ->capture_default_str();
  app.add_option("--stats-json", opts.stats_json,
                  "Write stop reason, boot timestamps and memory figures here");
  app.add_option("--log-level", opts.log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.add_flag("--quiet-report", opts.quiet_report, "Do not print test-device messages");
  app.add_flag("--rng", opts.config.rng, "Add a virtio-rng device (host getrandom)");
  CLI::Option* balloon =
      app.add_flag("--balloon", opts.config.balloon,
                    "Add a virtio-balloon device (inflated guest pages are released on the host)");
  app.add_option("--balloon-target-mib", opts.config.balloon_target_mib,
                  "Initial balloon target in MiB (needs --balloon)")
      ->capture_default_str()
      ->needs(balloon);
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
  app.add_option("--control", opts.control,
                  "Control socket (unix, 0600, removed at exit): one JSON request per line, "
                  "see `vm ctl`");
  app.add_option("--disk", opts.disks, "virtio-blk disk: PATH[,ro] (repeatable)");
  app.add_option("--net", opts.nets, "virtio-net on an existing tap: TAP[,mac=..] (repeatable)");
  app.add_option("--vsock", opts.vsock,
                  "virtio-vsock: CID,SOCKET (host clients connect to SOCKET and send "
                  "'CONNECT <port>\\n'; guest connections to port P reach SOCKET_P)");
  app.add_option("--pmem", opts.pmems,
                  "virtio-pmem layer mapped into the guest (DAX): PATH[,ro] (repeatable; ro: "
                  "read-only memslot, guest writes refused)");
}

}  // namespace dsec::monitor
