// SPDX-License-Identifier: Apache-2.0
#include "vmm/monitor/monitor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/internal/sysinfo.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/image_pages.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "nlohmann/json.hpp"
#include "vmm/api/control.h"
#include "vmm/jail/monitor_jail.h"
#include "vmm/snapshot/snapshot_format.h"
#include "vmm/vm/vm.h"

namespace dsec::monitor {

namespace {

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
      {"lazy_faults", s.lazy_faults},
      {"lazy_zero_faults", s.lazy_zero_faults},
      {"lazy_prefetched_pages", s.lazy_prefetched_pages},
      {"console",
       {{"bytes_in", s.console_bytes_in},
        {"bytes_written", s.console_bytes_written},
        {"bytes_dropped", s.console_bytes_dropped}}},
      {"testdev", {{"messages", s.testdev_messages}, {"dropped", s.testdev_dropped}}},
      {"vcpu_exits", s.vcpu_exits},
      {"vcpu_rips", s.vcpu_rips},
      {"vcpu_cpls", s.vcpu_cpls},
      {"placement", s.placement ? nlohmann::json{{"qos", s.placement->qos},
                                                  {"mechanism", s.placement->mechanism},
                                                  {"cpus", s.placement->cpus},
                                                  {"vcpu_cpus", s.placement->vcpu_cpus}}
                                : nlohmann::json(nullptr)},
      {"unclaimed_accesses", s.unclaimed_accesses},
  };
}

// What the monitor does before its jail so that no thread needs a call off
// its list later: the CPU count, the time zone (log timestamps would open
// /etc/localtime),
// stdout's buffer (stdio would allocate it and probe the terminal on the
// first test-device line, on the event loop).
void PrepareForJail() {
  ::tzset();
  // absl's mutexes count the CPUs on first contention (glibc opens
  // /sys/devices/system/cpu/online for it): do it now, not on whichever
  // filtered thread contends first.
  (void)absl::base_internal::NumCPUs();
  static char stdout_buffer[4096];
  std::setvbuf(stdout, stdout_buffer, _IOLBF, sizeof(stdout_buffer));
}

// absl's Mutex reads the CPU's nominal frequency on a thread's first
// blocking wait (to pace its priority re-reads). Without Google's
// tsc_freq_khz sysfs file, which upstream kernels lack, absl measures the
// TSC by sleeping 1 ms, 2 ms, ... until two readings agree: 3 ms or more,
// paid at the first contention, which in the monitor is the jail's gate,
// while the vCPU waits to run the guest. Measured on a thread of its own
// while the VM is built, it costs the boot nothing; joined before the jail
// counts the threads (and before any filtered thread could be the first to
// open the sysfs file).
class CpuFrequencyWarmup {
 public:
  CpuFrequencyWarmup()
      : thread_([] { (void)absl::base_internal::NominalCPUFrequency(); }) {}
  ~CpuFrequencyWarmup() { Join(); }
  CpuFrequencyWarmup(const CpuFrequencyWarmup&) = delete;
  CpuFrequencyWarmup& operator=(const CpuFrequencyWarmup&) = delete;
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

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
  static const int64_t t = MonotonicNowNs();
  return t;
}

int RunMonitor(const MonitorOptions& opts) {
  log::SetLevel(opts.log_level);
  const vm::VmConfig& config = opts.config;
  absl::StatusOr<ReclaimMode> reclaim_mode = ParseReclaimMode(opts.reclaim.mode);
  if (!reclaim_mode.ok()) return UsageError(reclaim_mode.status());

  // SIGINT/SIGTERM become a clean stop: block them in every thread (the VM's
  // threads inherit this mask) and read them from a signalfd here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ScopedFd sigfd(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));

  // Everything the monitor opens, it opens before the jail: the stats file
  // too (a dropped uid could not create it).
  const bool jailed = opts.jail.uid.has_value() || opts.jail.seccomp != jail::SeccompMode::kOff;
  // Snapshots go into a directory opened now; once jailed, the control
  // thread may create files in it and nowhere else (vmm/jail).
  ScopedFd snapshot_dir;
  if (!opts.snapshot_dir.empty()) {
    snapshot_dir.Reset(::open(opts.snapshot_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!snapshot_dir.valid()) {
      std::fprintf(stderr, "dsec-monitor: --snapshot-dir %s: %s\n", opts.snapshot_dir.c_str(),
                   std::strerror(errno));
      return kExitUsage;
    }
  }
  jail::JailOptions jail_options = opts.jail;
  jail_options.extras.snapshot_dir_fd = snapshot_dir.get();
  jail::MonitorJail monitor_jail(jail_options);
  if (jailed) PrepareForJail();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> stats_file(nullptr, &std::fclose);
  if (!opts.stats_json.empty()) {
    stats_file.reset(std::fopen(opts.stats_json.c_str(), "we"));
    if (stats_file == nullptr) {
      std::fprintf(stderr, "dsec-monitor: --stats-json %s: %s\n", opts.stats_json.c_str(),
                   std::strerror(errno));
      return kExitUsage;
    }
  }

  // A lazy restore's files, before the jail: the list to prefetch (read
  // now) and the one to write at exit (opened now).
  vm::RestoreOptions restore_options;
  restore_options.lazy = opts.lazy_restore;
  if (!opts.prefetch.empty()) {
    absl::StatusOr<std::string> text =
        snapshot::ReadBoundedFile(opts.prefetch, snapshot::kMaxTouchedBytes);
    absl::StatusOr<std::vector<snapshot::Extent>> runs =
        text.ok() ? snapshot::ParseTouched(*text) : text.status();
    if (!runs.ok()) {
      std::fprintf(stderr, "dsec-monitor: --prefetch %s: %s\n", opts.prefetch.c_str(),
                   std::string(runs.status().message()).c_str());
      return kExitUsage;
    }
    restore_options.prefetch = *std::move(runs);
  }
  // Holds an empty list from now on, so that a monitor that never gets to
  // write its own (a failed start, a kill) leaves a list a later
  // --prefetch reads; the list at exit is never shorter, and is written
  // over it from the start.
  ScopedFd touched_file;
  if (!opts.record_touched.empty()) {
    touched_file.Reset(::open(opts.record_touched.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    const std::string empty = snapshot::SerializeTouched({});
    if (!touched_file.valid() ||
        ::write(touched_file.get(), empty.data(), empty.size()) != static_cast<ssize_t>(empty.size())) {
      std::fprintf(stderr, "dsec-monitor: --record-touched %s: %s\n", opts.record_touched.c_str(),
                   std::strerror(errno));
      return kExitUsage;
    }
  }

  CpuFrequencyWarmup frequency_warmup;
  auto created = opts.restore.empty() ? vm::Vm::Create(config)
                                      : vm::Vm::Restore(opts.restore, config, restore_options);
  if (!created.ok()) {
    std::fprintf(stderr, "dsec-monitor: %s%s\n", opts.restore.empty() ? "" : "--restore: ",
                 std::string(created.status().message()).c_str());
    return created.status().code() == absl::StatusCode::kInvalidArgument ||
                   created.status().code() == absl::StatusCode::kFailedPrecondition ||
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
  vm::Vm* m = machine.get();
  vm::VmThreadHook vm_hook;
  if (jailed) {
    vm_hook = [&monitor_jail](vm::VmThread t) {
      return monitor_jail.EnterThread(t == vm::VmThread::kVcpu    ? jail::ThreadKind::kVcpu
                                      : t == vm::VmThread::kPager ? jail::ThreadKind::kPager
                                                                  : jail::ThreadKind::kEventLoop);
    };
  }
  // The control and reclaim threads: a failure there stops the VM.
  auto side_hook = [&monitor_jail, m, jailed](jail::ThreadKind kind) -> std::function<absl::Status()> {
    if (!jailed) return {};
    return [&monitor_jail, m, kind] {
      absl::Status s = monitor_jail.EnterThread(kind);
      if (!s.ok()) m->RequestStop(vm::StopReason::kInternalError, s.ToString());
      return s;
    };
  };
  if (absl::Status s = machine->Start(vm_hook); !s.ok()) {
    std::fprintf(stderr, "dsec-monitor: starting the VM: %s\n", std::string(s.message()).c_str());
    monitor_jail.Abort(s);
    machine->Wait();
    return kExitInternal;
  }
  // The reclaim controller (its own thread) and the control socket (its own
  // thread): neither runs on a vCPU or the device event loop.
  std::unique_ptr<VmReclaim> reclaim;
  if (*reclaim_mode != ReclaimMode::kOff) {
    auto started = VmReclaim::Start(*machine, opts.reclaim, side_hook(jail::ThreadKind::kReclaim));
    if (!started.ok()) {
      monitor_jail.Abort(started.status());
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
    VmReclaim* r = reclaim.get();
    const int snap_fd = snapshot_dir.get();
    auto server = api::ControlServer::Start(
        opts.control,
        [m, r, snap_fd](const api::ControlRequest& req) {
          return HandleVmControl(*m, r, req, snap_fd);
        },
        side_hook(jail::ThreadKind::kControl));
    if (!server.ok()) {
      monitor_jail.Abort(server.status());
      std::fprintf(stderr, "dsec-monitor: --control: %s\n", std::string(server.status().message()).c_str());
      reclaim.reset();
      machine->RequestStop(vm::StopReason::kInternalError, "control socket failed");
      machine->Wait();
      return kExitUsage;
    }
    control = std::move(*server);
  }
  frequency_warmup.Join();
  if (jailed) {
    // Every thread waits at the gate: drop to the uid, filter them all.
    const int threads = static_cast<int>(machine->vcpu_count()) + 1 + (reclaim ? 1 : 0) +
                        (control ? 1 : 0) + (machine->lazy() ? 1 : 0);
    if (absl::Status s = monitor_jail.Lock(threads, machine->stop_requested_fd()); !s.ok()) {
      std::fprintf(stderr, "dsec-monitor: jail: %s\n", std::string(s.message()).c_str());
      machine->RequestStop(vm::StopReason::kInternalError, absl::StrCat("jail: ", s.message()));
    }
  }
  // Start-up is over (flags, devices, jail, seccomp compiled): unmap the
  // executable's read-only pages; what the running VM uses faults back in
  // from the shared page cache (base/image_pages.h). Not fatal: a failure
  // only leaves the pages mapped.
  size_t image_released = 0;
  if (absl::StatusOr<ImagePagesReleased> r = UnmapImageReadOnlyPages(); r.ok()) {
    image_released = r->bytes;
  } else {
    DSEC_LOG(debug, "component=monitor start-up pages stay mapped: {}", r.status().ToString());
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
  if (stats.stop.reason == vm::StopReason::kTimeout) {
    // A guest that hung: where its vCPUs were (symbolise with the kernel's
    // System.map or `nm vmlinux`).
    for (size_t i = 0; i < stats.vcpu_rips.size(); ++i) {
      std::fprintf(stderr, "dsec-monitor: vcpu %zu at rip=0x%llx cpl=%d\n", i,
                   static_cast<unsigned long long>(stats.vcpu_rips[i]), stats.vcpu_cpls[i]);
    }
  }
  if (stats.console_bytes_dropped > 0) {
    std::fprintf(stderr, "dsec-monitor: console: %llu bytes from the guest dropped (cap %llu bytes, "
                         "rate %llu bytes/s)\n",
                 static_cast<unsigned long long>(stats.console_bytes_dropped),
                 static_cast<unsigned long long>(config.console.cap_bytes),
                 static_cast<unsigned long long>(config.console.rate_bytes_per_s));
  }
  if (touched_file.valid()) {
    const std::string text = snapshot::SerializeTouched(machine->TouchedPages());
    size_t done = 0;
    bool ok = ::lseek(touched_file.get(), 0, SEEK_SET) == 0;
    while (ok && done < text.size()) {
      const ssize_t n = ::write(touched_file.get(), text.data() + done, text.size() - done);
      ok = n > 0;
      if (ok) done += static_cast<size_t>(n);
    }
    if (!ok) std::fprintf(stderr, "dsec-monitor: could not write %s\n", opts.record_touched.c_str());
  }
  if (stats_file != nullptr) {
    nlohmann::json j = StatsToJson(stats);
    j["reclaim"] = reclaim_json;
    j["image_pages_released_bytes"] = image_released;
    const jail::Credentials& c = monitor_jail.credentials();
    j["jail"] = jailed ? nlohmann::json{{"seccomp", std::string(jail::SeccompModeName(opts.jail.seccomp))},
                                        {"uid", c.euid},
                                        {"gid", c.egid},
                                        {"capabilities", c.any_capability}}
                       : nlohmann::json(nullptr);
    const std::string text = j.dump(2) + "\n";
    if (std::fwrite(text.data(), 1, text.size(), stats_file.get()) != text.size() ||
        std::fclose(stats_file.release()) != 0) {
      std::fprintf(stderr, "dsec-monitor: could not write %s\n", opts.stats_json.c_str());
    }
  }
  return ExitStatusFor(stats.stop);
}

}  // namespace dsec::monitor
