// SPDX-License-Identifier: Apache-2.0
#include "sandbox/fncall/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sandbox/container/state_dir.h"
#include "sched/isolation.h"
#include "sandbox/network/sandbox_network.h"
#include "base/clone3.h"
#include "base/exec_pump.h"
#include "base/file_io.h"
#include "base/fd_passing.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::fncall {

namespace {

constexpr char kZygotePath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
// Memory the zygote may use while it starts, before its baseline is known.
constexpr uint64_t kStartupHeadroom = 128ull << 20;
// How long a killed call's zygote gets to report, and how often a running
// call's pids/OOM counters are looked at.
constexpr int64_t kKillGraceNs = 5'000'000'000;
constexpr int64_t kCheckIntervalNs = 20'000'000;

int64_t NowNs() { return MonotonicClock::Get().NowNs(); }

absl::Status MkdirMode(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoToStatus(absl::StrCat("mkdir ", path));
  }
  if (::chmod(path.c_str(), mode) != 0) return ErrnoToStatus(absl::StrCat("chmod ", path));
  return absl::OkStatus();
}

// Sends `frame` with `fds` attached to its first byte.
absl::Status SendFrameWithFds(int sock, const std::string& frame, const int (&fds)[3]) {
  ssize_t n = SendWithFds(sock, frame.data(), frame.size(), fds, 3);
  if (n < 0) return ErrnoToStatus("fncall: send call");
  size_t sent = static_cast<size_t>(n);
  while (sent < frame.size()) {
    n = ::send(sock, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus("fncall: send call");
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

const char* KilledByName(KilledBy k) {
  switch (k) {
    case KilledBy::kNone: return "none";
    case KilledBy::kTimeout: return "timeout";
    case KilledBy::kMemory: return "memory";
    case KilledBy::kOutputCap: return "output-cap";
    case KilledBy::kPids: return "pids";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Start(const WorkerOptions& options) {
  std::unique_ptr<Worker> w(new Worker(options));
  // Any error below destroys `w`, which undoes what was done.
  absl::Status s = w->Launch();
  if (!s.ok()) {
    (void)w->Destroy();
    return s;
  }
  return w;
}

absl::Status Worker::Launch() {
  const WorkerOptions& o = options_;
  DSEC_RETURN_IF_ERROR(MkdirMode(o.dir, 0700));
  scratch_dir_ = absl::StrCat(o.dir, "/scratch");
  DSEC_RETURN_IF_ERROR(MkdirMode(scratch_dir_, 0755));
  DSEC_ASSIGN_OR_RETURN(scratch_, container::Mount::Tmpfs(scratch_dir_, o.scratch_bytes));
  DSEC_RETURN_IF_ERROR(MkdirMode(absl::StrCat(scratch_dir_, "/tmp"), 01777));
  DSEC_RETURN_IF_ERROR(MkdirMode(absl::StrCat(scratch_dir_, "/shm"), 01777));

  container::ResourceLimits limits;
  limits.memory_bytes = o.limits.memory_bytes + kStartupHeadroom;
  limits.pids_max = o.limits.pids + 1;
  auto record = o.record_cgroup ? o.record_cgroup
                                : [](const std::string&) { return absl::OkStatus(); };
  DSEC_ASSIGN_OR_RETURN(cgroups_, container::ContainerCgroups::Create(o.id, limits,
                                                                     o.isolation != nullptr, record));

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoToStatus("socketpair");
  }
  control_ = ScopedFd(sv[0]);
  ScopedFd zygote_end(sv[1]);
  DSEC_ASSIGN_OR_RETURN(Pipe go, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe report, Pipe::Create());

  ZygotePlan plan;
  plan.root.merged = o.root;
  plan.root.hostname = o.hostname;
  plan.root.binds = {{absl::StrCat(scratch_dir_, "/tmp"), "/tmp"},
                     {absl::StrCat(scratch_dir_, "/shm"), "/dev/shm"}};
  plan.root.read_only_dev = true;
  plan.root.report_fd = report.write.get();
  plan.language = o.language;
  plan.interpreter = o.interpreter;
  plan.seccomp = o.seccomp;
  plan.control_fd = zygote_end.get();
  plan.go_fd = go.read.get();
  plan.report_fd = report.write.get();
  plan.env = {kZygotePath, "HOME=/tmp", "LC_ALL=C.UTF-8",
              absl::StrCat("DSEC_FNCALL_WORKER_SEQ=", o.sequence)};
  if (o.language == Language::kPython) {
    plan.argv = {o.interpreter, "-I", "-B", "-c", PythonZygoteScript(),
                 absl::StrCat(zygote_end.get()), absl::StrJoin(o.preload, ",")};
  }
  plan.Finalize();

  int pidfd = -1;
  long pid = Clone3(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET, &pidfd);
  if (pid < 0) return ErrnoToStatus("clone3 fncall worker");
  if (pid == 0) RunZygote(plan);
  pid_ = static_cast<pid_t>(pid);
  pidfd_ = ScopedFd(pidfd);
  zygote_end.Reset();
  go.read.Reset();
  report.write.Reset();

  DSEC_RETURN_IF_ERROR(cgroups_.AddProcess(pid_));
  if (o.isolation != nullptr) DSEC_RETURN_IF_ERROR(o.isolation->AddProcess(pid_));
  if (o.network != nullptr) DSEC_RETURN_IF_ERROR(JoinNetwork(record));
  char one = 1;
  if (::write(go.write.get(), &one, 1) != 1) return ErrnoToStatus("fncall: start worker");
  go.write.Reset();

  const int64_t deadline = NowNs() + o.setup_timeout_ms * 1'000'000;
  // The report pipe: a ChildError, or EOF once the zygote exec'd (python)
  // or closed it (bash).
  container::ChildError e{};
  size_t got = 0;
  while (true) {
    int64_t left_ms = (deadline - NowNs()) / 1'000'000;
    if (left_ms <= 0) return absl::DeadlineExceededError("fncall worker: setup timed out");
    pollfd p{report.read.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (n < 0 && errno != EINTR) return ErrnoToStatus("poll");
    if (n <= 0) continue;
    ssize_t r = ::read(report.read.get(), reinterpret_cast<char*>(&e) + got, sizeof(e) - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
    if (got == sizeof(e)) {
      return ErrnoToStatus(absl::StrCat("fncall worker setup: ", ZygoteStepName(e.step)), e.err);
    }
  }
  auto ready = ReadFrame(deadline);
  if (!ready.ok()) return Annotate(ready.status(), "fncall worker setup");
  if (ready->size() != 2 || (*ready)[0] != "ready") {
    return absl::InternalError("fncall worker: zygote sent something other than ready");
  }
  baseline_bytes_ = cgroups_.MemoryUsageBytes().value_or(0);
  oom_kills_ = cgroups_.OomKills();
  pids_hits_ = cgroups_.PidsLimitHits();
  DSEC_RETURN_IF_ERROR(ApplyLimits(o.limits));
  DSEC_LOG(debug, "fncall: worker {} ready pid={} baseline={}", o.id, pid_, baseline_bytes_);
  return absl::OkStatus();
}

absl::Status Worker::JoinNetwork(const std::function<absl::Status(const std::string&)>& record) {
  // Before the zygote runs anything: its calls (its forks) inherit the
  // cgroup, and find eth0 up when they start.
  DSEC_ASSIGN_OR_RETURN(std::string v2_dir, container::Cgroup2DirFor(cgroups_, options_.id, pid_, record, &made_v2_));
  ScopedFd netns(::open(absl::StrCat("/proc/", pid_, "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns.valid()) return ErrnoToStatus("open the fncall worker's network namespace");
  DSEC_ASSIGN_OR_RETURN(network_, options_.network->Join(netns.get(), v2_dir));
  return absl::OkStatus();
}

absl::Status Worker::ApplyLimits(const CallLimits& limits) {
  uint64_t memory = limits.memory_bytes == 0 ? 0 : limits.memory_bytes + baseline_bytes_;
  if (memory != 0 && memory != memory_limit_) {
    DSEC_RETURN_IF_ERROR(cgroups_.SetMemoryLimit(memory));
    memory_limit_ = memory;
  }
  uint64_t pids = limits.pids == 0 ? 0 : limits.pids + 1;
  if (pids != pids_limit_) {
    DSEC_RETURN_IF_ERROR(cgroups_.SetPidsMax(pids));
    pids_limit_ = pids;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Worker::ReadFrame(int64_t deadline_ns) {
  while (true) {
    DSEC_ASSIGN_OR_RETURN(auto frame, reader_.Next());
    if (frame) return std::move(*frame);
    int64_t left_ms = (deadline_ns - NowNs() + 999'999) / 1'000'000;
    if (left_ms <= 0) return absl::DeadlineExceededError("zygote did not answer in time");
    pollfd p{control_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (n < 0 && errno != EINTR) return ErrnoToStatus("poll");
    if (n <= 0) continue;
    char buf[4096];
    ssize_t r = ::recv(control_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      siginfo_t info{};
      std::string how = "the zygote exited";
      // EOF can come before the exit is complete: give it a moment.
      pollfd exited{pidfd_.get(), POLLIN, 0};
      if (pidfd_) (void)::poll(&exited, 1, 1000);
      if (pidfd_ && ::waitid(static_cast<idtype_t>(3), static_cast<id_t>(pidfd_.get()), &info,
                             WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid != 0) {
        how = info.si_code == CLD_EXITED ? absl::StrCat("the zygote exited with ", info.si_status)
                                         : absl::StrCat("the zygote was killed by signal ",
                                                        info.si_status);
      }
      return absl::InternalError(how);
    }
    reader_.Append(std::string_view(buf, static_cast<size_t>(r)));
  }
}

absl::StatusOr<ScopedFd> Worker::CallChild(int64_t deadline_ns) {
  // The zygote says "forked" once the child that takes the next call
  // exists. Between calls that child is the zygote's only child: all a
  // call leaves behind is killed and reaped before "done".
  DSEC_ASSIGN_OR_RETURN(auto forked, ReadFrame(deadline_ns));
  if (forked.size() != 1 || forked[0] != "forked") {
    return absl::InternalError("fncall: zygote sent something other than forked");
  }
  const std::string path = absl::StrCat("/proc/", pid_, "/task/", pid_, "/children");
  DSEC_ASSIGN_OR_RETURN(std::string text, dsec::ReadSmallFile(path));
  std::vector<std::string> pids = absl::StrSplit(text, ' ', absl::SkipWhitespace());
  pid_t child = 0;
  if (pids.size() != 1 || !absl::SimpleAtoi(pids[0], &child) || child <= 0) {
    return absl::InternalError(
        absl::StrCat("fncall: the zygote has ", pids.size(), " children between calls, not 1"));
  }
  ScopedFd fd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  if (!fd) return ErrnoToStatus("fncall: pidfd_open of the call child");
  return fd;
}

absl::StatusOr<CallResult> Worker::Call(const CallRequest& request,
                                        const std::vector<std::string>& env,
                                        const CallLimits& limits, bool* delivered) {
  *delivered = false;
  if (broken_ || destroyed_) return absl::FailedPreconditionError("fncall worker is broken");
  std::vector<std::string> fields = {"call", request.code, request.cwd.empty() ? "/tmp" : request.cwd,
                                     absl::StrCat(request.args.size())};
  fields.insert(fields.end(), request.args.begin(), request.args.end());
  fields.push_back(absl::StrCat(env.size()));
  fields.insert(fields.end(), env.begin(), env.end());
  std::string frame = EncodeFrame(fields);
  if (frame.size() - 4 > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("call of ", frame.size(), " bytes exceeds ", kMaxFrameBytes));
  }
  for (const std::string& e : env) {
    if (e.find('=') == std::string::npos || e.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("env entry \"", e, "\" is not KEY=VALUE"));
    }
  }
  broken_ = true;  // until the call completes cleanly
  DSEC_RETURN_IF_ERROR(ApplyLimits(limits));
  DSEC_ASSIGN_OR_RETURN(Pipe in, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe out, Pipe::Create());
  DSEC_ASSIGN_OR_RETURN(Pipe err, Pipe::Create());
  // Counters as the last call left them (read at its end): two file reads
  // fewer on every call's clock. The usage is read now: page cache the
  // zygote held may have been reclaimed since it became ready.
  cgroups_.ResetPeak();
  const uint64_t oom_before = oom_kills_;
  const uint64_t pids_before = pids_hits_;
  const uint64_t usage_before = cgroups_.MemoryUsageBytes().value_or(baseline_bytes_);

  const Clock& clock = MonotonicClock::Get();
  const int64_t start = clock.NowNs();
  const int64_t deadline = start + std::max<int64_t>(limits.timeout_ms, 1) * 1'000'000;
  DSEC_ASSIGN_OR_RETURN(ScopedFd child, CallChild(start + kKillGraceNs));
  const int fds[3] = {in.read.get(), out.write.get(), err.write.get()};
  DSEC_RETURN_IF_ERROR(SendFrameWithFds(control_.get(), frame, fds));
  *delivered = true;
  in.read.Reset();
  out.write.Reset();
  err.write.Reset();

  CallResult result;
  ExecPumpOptions pump_options;
  pump_options.clock = &clock;
  pump_options.output_cap_bytes = limits.output_cap_bytes;
  pump_options.output_rate_bytes_per_s = limits.output_rate_bytes_per_s;
  pump_options.kill_at_cap = true;
  pump_options.deadline_ns = deadline;
  pump_options.exit_grace_ns = kKillGraceNs;
  // After "done" every process of the call is gone and the pipes are at
  // EOF once read: the bound only keeps a broken zygote from hanging us.
  pump_options.drain_after_exit_ns = kKillGraceNs;
  StringOutputSink sink(&result.stdout_data, &result.stderr_data, request.on_output);
  ExecPump pump(pump_options, std::move(in.write), std::move(out.read), std::move(err.read), &sink,
                [&child] {
                  // Only the call's own process: once it is gone the zygote, PID 1
                  // of the namespace, kills everything else in it (kill(-1),
                  // atomic against forks), reaps, and reports. A sweep of the
                  // cgroup from here could also hit the child the zygote
                  // pre-forks for the next call right after it reports, which
                  // would then die before it gets its call.
                  if (::syscall(SYS_pidfd_send_signal, child.get(), SIGKILL, nullptr, 0) != 0 &&
                      errno != ESRCH) {
                    DSEC_LOG(warn, "fncall: killing a call: pidfd_send_signal: {}",
                             std::strerror(errno));
                  }
                });
  pump.AppendStdin(request.stdin_data);
  pump.CloseStdin();
  // The zygote's "done" frame is the call's exit; until then the cgroup's
  // pids and OOM counters are looked at every kCheckIntervalNs.
  std::optional<std::vector<std::string>> done;
  KilledBy limit_kill = KilledBy::kNone;
  int64_t next_check = start + kCheckIntervalNs;
  pump.Watch(
      [&](int64_t) {
        return ExecPump::Interest{done ? -1 : control_.get(), POLLIN,
                                  done || pump.killed() ? kExecNoDeadline : next_check};
      },
      [&](short revents, int64_t now) -> absl::Status {
        if (revents != 0) {
          char buf[512];
          ssize_t r = ::recv(control_.get(), buf, sizeof(buf), MSG_DONTWAIT);
          if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            return absl::InternalError("the worker's zygote died during it");
          }
          if (r > 0) reader_.Append(std::string_view(buf, static_cast<size_t>(r)));
          DSEC_ASSIGN_OR_RETURN(done, reader_.Next());
          if (done) pump.MarkExited();
        }
        if (!done && !pump.killed() && now >= next_check) {
          next_check = now + kCheckIntervalNs;
          KilledBy why = KilledBy::kNone;
          if (cgroups_.PidsLimitHits() > pids_before) why = KilledBy::kPids;
          else if (cgroups_.OomKills() > oom_before) why = KilledBy::kMemory;
          if (why != KilledBy::kNone && pump.Kill()) limit_kill = why;
        }
        return absl::OkStatus();
      });
  if (absl::Status s = pump.Run(); !s.ok()) return Annotate(s, "fncall call");
  switch (pump.kill_reason()) {
    case ExecKill::kNone: break;
    case ExecKill::kTimeout: result.killed_by = KilledBy::kTimeout; break;
    case ExecKill::kOutput: result.killed_by = KilledBy::kOutputCap; break;
    case ExecKill::kCaller: result.killed_by = limit_kill; break;
  }
  result.stdout_dropped = pump.dropped_bytes(1);
  result.stderr_dropped = pump.dropped_bytes(2);
  const std::vector<std::string>& d = *done;
  int value = 0;
  long long rss_kib = 0;
  if (d.size() != 4 || d[0] != "done" || (d[1] != "exit" && d[1] != "signal") ||
      !absl::SimpleAtoi(d[2], &value) || !absl::SimpleAtoi(d[3], &rss_kib)) {
    return absl::InternalError("fncall: malformed done frame from the zygote");
  }
  if (d[1] == "exit") result.exit_code = value;
  else result.signal = value;
  result.peak_rss_bytes = static_cast<uint64_t>(std::max<long long>(rss_kib, 0)) * 1024;
  result.wall_ns = clock.NowNs() - start;
  result.output_dropped_bytes = pump.dropped_bytes();
  if (auto peak = cgroups_.PeakMemoryBytes(); peak) {
    result.peak_memory_bytes = *peak > usage_before ? *peak - usage_before : 0;
  }
  oom_kills_ = cgroups_.OomKills();
  pids_hits_ = cgroups_.PidsLimitHits();
  result.oom_killed = oom_kills_ > oom_before;
  result.pids_limited = pids_hits_ > pids_before;
  if (result.killed_by == KilledBy::kNone) {
    if (result.oom_killed) result.killed_by = KilledBy::kMemory;
    else if (result.pids_limited) result.killed_by = KilledBy::kPids;
  }
  broken_ = false;
  return result;
}

absl::Status Worker::WipeScratch() {
  for (const char* sub : {"/tmp", "/shm"}) {
    std::error_code ec;
    std::filesystem::directory_iterator it(absl::StrCat(scratch_dir_, sub), ec), end;
    if (ec) return absl::InternalError(absl::StrCat("fncall: list scratch: ", ec.message()));
    for (; it != end; it.increment(ec)) {
      if (ec) break;
      std::filesystem::remove_all(it->path(), ec);
      if (ec) break;
    }
    if (ec) {
      broken_ = true;
      return absl::InternalError(absl::StrCat("fncall: wipe scratch: ", ec.message()));
    }
  }
  return absl::OkStatus();
}

Worker::~Worker() {
  if (absl::Status s = Destroy(); !s.ok()) {
    DSEC_LOG(warn, "fncall: worker {} destroy: {}", options_.id, s.ToString());
  }
}

absl::Status Worker::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  broken_ = true;
  control_.Reset();
  if (pidfd_) {
    // SIGKILL to a pid namespace's init kills every process in it.
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    siginfo_t info{};
    while (::waitid(static_cast<idtype_t>(3), static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
    pidfd_.Reset();
  }
  // Its address, veth and programs; then the cgroups, emptied by the kill.
  network_.reset();
  absl::Status first = cgroups_.Remove();
  if (!made_v2_.empty()) {
    absl::Status v2 = container::KillAndRemoveCgroup(made_v2_);
    if (first.ok()) first = v2;
    if (v2.ok()) made_v2_.clear();
  }
  absl::Status s = scratch_.Unmount();
  if (first.ok()) first = s;
  if (first.ok() && !options_.dir.empty()) first = container::RemoveTree(options_.dir);
  return first;
}

}  // namespace dsec::fncall
