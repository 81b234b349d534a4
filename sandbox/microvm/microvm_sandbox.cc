// SPDX-License-Identifier: Apache-2.0
#include "sandbox/microvm/microvm_sandbox.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/clock.h"
#include "base/file_io.h"
#include "devices/pmem/pmem_image_check.h"
#include "sandbox/microvm/jail.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::microvm {

namespace {

constexpr char kTapRecord[] = "tap";

absl::Status ValidateId(const std::string& id) {
  if (id.empty() || id.size() > 64 || id == "." || id == "..") {
    return absl::InvalidArgumentError(absl::StrCat("sandbox id \"", id, "\" must be 1-64 chars"));
  }
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat("sandbox id \"", id, "\" may hold only [A-Za-z0-9_.-]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDaxLayers(const std::vector<std::string>& layers) {
  for (const std::string& layer : layers) {
    ScopedFd fd(::open(layer.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return ErrnoToStatus(absl::StrCat("microvm: layer ", layer));
    std::string why = devices::ErofsDaxIncompatibilityOfFile(fd.get());
    if (!why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "microvm: layer ", layer, " cannot be mapped with DAX (", why,
          "); microVM layers must be uncompressed EROFS (dsec-vmm layer build --compress none)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MicrovmSandbox>> MicrovmSandbox::Create(
    Launcher& launcher, const MicrovmSpec& spec, const MicrovmSandboxOptions& options) {
  DSEC_RETURN_IF_ERROR(ValidateId(spec.id));
  // Host first: on a host that cannot boot the guest every create fails
  // here, at once, with the reason.
  DSEC_RETURN_IF_ERROR(launcher.CheckHost());
  DSEC_RETURN_IF_ERROR(CheckDaxLayers(spec.layers));
  DSEC_ASSIGN_OR_RETURN(container::StateDir state, container::StateDir::Create(options.state_root, spec.id));
  std::unique_ptr<MicrovmSandbox> sb(new MicrovmSandbox(spec.id, std::move(state), options));
  LaunchSpec ls;
  ls.id = spec.id;
  ls.state_dir = sb->state_.path();
  ls.layers = spec.layers;
  ls.memory_mib = spec.memory_mib;
  ls.cpus = spec.cpus;
  ls.pids = spec.pids;
  ls.qos = spec.qos;
  ls.agent_port = options.agent_port;
  ls.join = spec.join;
  ls.snapshot_dir = spec.machine_staging;
  ls.restore_dir = spec.machine;
  sb->staging_ = spec.machine_staging;
  for (const std::string& cg : spec.placement_cgroups) DSEC_RETURN_IF_ERROR(sb->state_.RecordCgroup(cg));
  if (spec.network) {
    // Before a monitor holds the tap: a daemon killed until then takes the
    // tap with it (its descriptor was the only one).
    DSEC_RETURN_IF_ERROR(
        dsec::WriteFile(absl::StrCat(sb->state_.path(), "/", kTapRecord), spec.network->tap_name + "\n", 0600));
    ls.network = spec.network;
  }
  const container::StateDir* st = &sb->state_;
  ls.record_cgroup = [st](const std::string& dir) { return st->RecordCgroup(dir); };
  const int64_t start = MonotonicNowNs();
  DSEC_ASSIGN_OR_RETURN(sb->host_, launcher.Launch(ls));
  if (absl::Status s = sb->state_.RecordInit(sb->host_->pid()); !s.ok()) {
    // It died already: say why.
    absl::Status err = absl::UnavailableError(
        absl::StrCat("microvm: the sandbox stopped at once: ", sb->host_->ExitReport()));
    (void)sb->Destroy();
    return err;
  }
  if (absl::Status s = sb->ConnectUntilBooted(); !s.ok()) {
    (void)sb->Destroy();
    return s;
  }
  if (spec.network && !spec.machine.empty()) {
    // The saved guest's eth0 holds the saved sandbox's address, which this
    // sandbox's tap filter drops: this one's, before anyone runs anything.
    absl::Status s = sb->client_->ConfigureNetwork(
        absl::StrCat(spec.network->address_cidr, ",", spec.network->gateway));
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat("microvm: re-addressing the restored guest's eth0: ", s.message()));
      (void)sb->Destroy();
      return s;
    }
  }
  if (!spec.machine.empty()) {
    // The restored guest's clocks went on from the save (kvmclock as
    // saved): its wall clock lags by however long the machine stood saved
    // (a snapshot restored days later, after a daemon restart). The
    // host's, before anyone runs anything; its monotonic clock stays.
    absl::StatusOr<bool> set = sb->SetGuestWallClock();
    if (!set.ok()) {
      absl::Status s(set.status().code(),
                     absl::StrCat("microvm: setting the restored guest's clock: ", set.status().message()));
      (void)sb->Destroy();
      return s;
    }
    if (!*set) {
      DSEC_LOG(warn, "microvm: sandbox={}: the restored guest's agent cannot set its clock (no \"clock\" "
               "capability): its wall time lags by the time the machine stood saved", sb->id_);
    }
    const std::vector<std::string>& caps = sb->client_->agent_hello().capabilities;
    // Every clone of one save starts with the same CRNG state: without
    // fresh randomness, two children would draw the same keys and tokens.
    if (std::find(caps.begin(), caps.end(), agent::kEntropyCapability) != caps.end()) {
      std::string seed(64, '\0');
      absl::Status s;
      if (getrandom(seed.data(), seed.size(), 0) != static_cast<ssize_t>(seed.size())) {
        s = ErrnoToStatus("getrandom");
      } else {
        s = sb->client_->Reseed(seed);
      }
      if (!s.ok()) {
        s = absl::Status(s.code(), absl::StrCat("microvm: reseeding the restored guest's CRNG: ", s.message()));
        (void)sb->Destroy();
        return s;
      }
    } else {
      DSEC_LOG(warn, "microvm: sandbox={}: the restored guest's agent cannot reseed its CRNG (no \"entropy\" "
               "capability): clones of one save draw the same random bytes until their kernels reseed", sb->id_);
    }
  }
  sb->boot_ms_ = static_cast<double>(MonotonicNowNs() - start) / 1e6;
  return sb;
}

absl::Status MicrovmSandbox::ConnectUntilBooted() {
  const int64_t deadline = MonotonicNowNs() + options_.boot_timeout_ms * 1'000'000;
  int64_t backoff_ms = 2;
  absl::Status last = absl::UnavailableError("no attempt");
  for (int attempt = 1;; ++attempt) {
    if (WaitReadable(host_->exit_fd(), 0)) {
      return absl::UnavailableError(absl::StrCat("microvm: sandbox ", id_,
                                                 " stopped before its agent answered: ", host_->ExitReport()));
    }
    const int64_t left_ms = (deadline - MonotonicNowNs()) / 1'000'000;
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "microvm: the agent of sandbox ", id_, " did not answer within ", options_.boot_timeout_ms,
          " ms (", attempt - 1, " attempts; last: ", last.message(), "); ", host_->ExitReport()));
    }
    auto fd = host_->ConnectAgent(std::min<int64_t>(left_ms, 5000));
    if (fd.ok()) {
      auto client = agent::Client::Connect(std::move(*fd), options_.client);
      if (client.ok()) {
        client_ = std::move(*client);
        return absl::OkStatus();
      }
      last = client.status();
    } else {
      last = fd.status();
    }
    // Not up yet: wait on the host process, so that its exit ends the wait.
    WaitReadable(host_->exit_fd(), std::min<int64_t>(backoff_ms, std::max<int64_t>(1, left_ms)));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 100);
  }
}

absl::Status MicrovmSandbox::Usable() const {
  if (destroyed_) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id_, " is destroyed"));
  if (paused_) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id_, " is paused"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<agent::Client>> MicrovmSandbox::ConnectClient() {
  if (WaitReadable(host_->exit_fd(), 0)) {
    return absl::UnavailableError(absl::StrCat("microvm: sandbox ", id_, " has stopped: ", host_->ExitReport()));
  }
  DSEC_ASSIGN_OR_RETURN(ScopedFd fd, host_->ConnectAgent(options_.client.io_timeout_ms));
  return agent::Client::Connect(std::move(fd), options_.client);
}

absl::StatusOr<bool> MicrovmSandbox::SetGuestWallClock() {
  std::lock_guard<std::mutex> lock(agent_mu_);
  DSEC_ASSIGN_OR_RETURN(agent::Client * c, Agent());
  const std::vector<std::string>& caps = c->agent_hello().capabilities;
  if (std::find(caps.begin(), caps.end(), agent::kClockCapability) == caps.end()) return false;
  DSEC_RETURN_IF_ERROR(c->SetClock(WallClock::Get().NowNs()));
  return true;
}

absl::StatusOr<agent::Client*> MicrovmSandbox::Agent() {
  DSEC_RETURN_IF_ERROR(Usable());
  if (client_ != nullptr && !client_->broken()) return client_.get();
  client_.reset();
  DSEC_ASSIGN_OR_RETURN(client_, ConnectClient());
  return client_.get();
}

absl::StatusOr<std::unique_ptr<agent::Client>> MicrovmSandbox::TakeExecClient() {
  DSEC_RETURN_IF_ERROR(Usable());
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    while (!idle_exec_.empty()) {
      std::unique_ptr<agent::Client> c = std::move(idle_exec_.back());
      idle_exec_.pop_back();
      if (c->broken()) continue;
      running_exec_.insert(c.get());
      return c;
    }
  }
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<agent::Client> c, ConnectClient());
  std::lock_guard<std::mutex> lock(exec_mu_);
  running_exec_.insert(c.get());
  return c;
}

void MicrovmSandbox::GiveBackExecClient(std::unique_ptr<agent::Client> c) {
  // Idle connections kept for the next execs: a few (each is a thread of
  // the agent's while it lasts).
  constexpr size_t kMaxIdle = 4;
  std::lock_guard<std::mutex> lock(exec_mu_);
  running_exec_.erase(c.get());
  // One interrupted as it ended well is cut all the same: not kept.
  const bool cut = interrupted_.erase(c.get()) != 0;
  if (!cut && !c->broken() && idle_exec_.size() < kMaxIdle) idle_exec_.push_back(std::move(c));
}

bool MicrovmSandbox::KillExecs() {
  std::lock_guard<std::mutex> lock(exec_mu_);
  for (agent::Client* c : running_exec_) {
    c->Interrupt();
    interrupted_.insert(c);
  }
  return true;
}

absl::StatusOr<agent::ExecDone> MicrovmSandbox::Exec(const agent::ExecRequest& request,
                                                     const agent::OutputCallback& on_chunk,
                                                     std::string_view stdin_data, ExecControl* control,
                                                     const std::function<void()>& on_started) {
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<agent::Client> owned, TakeExecClient());
  struct GiveBack {
    MicrovmSandbox* sb;
    std::unique_ptr<agent::Client>* c;
    ~GiveBack() { sb->GiveBackExecClient(std::move(*c)); }
  } give_back{this, &owned};
  agent::Client* c = owned.get();
  const int64_t start_ns = MonotonicNowNs();
  if (on_started) on_started();
  absl::StatusOr<agent::ExecDone> done = RunExec(c, request, on_chunk, stdin_data, control);
  if (!done.ok()) {
    std::lock_guard<std::mutex> lock(exec_mu_);
    if (interrupted_.erase(c) != 0) {
      // Cut by KillExecs: the agent killed the command's tree, as a
      // caller's kill of a container command (signal 9).
      agent::ExecDone killed;
      killed.signal = 9;
      killed.duration_ms = (MonotonicNowNs() - start_ns) / 1'000'000;
      return killed;
    }
  }
  return done;
}

absl::StatusOr<agent::ExecDone> MicrovmSandbox::RunExec(agent::Client* c, const agent::ExecRequest& request,
                                                        const agent::OutputCallback& on_chunk,
                                                        std::string_view stdin_data, ExecControl* control) {
  if (control == nullptr) return c->Exec(request, on_chunk, stdin_data);
  if (control->stdin_open() && !request.stdin) {
    return absl::InvalidArgumentError("exec: a streamed stdin needs request.stdin");
  }
  struct Ended {
    ExecControl* c;
    ~Ended() { c->MarkEnded(); }
  } ended{control};
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<agent::ExecStream> stream, c->StartExec(request));
  bool stdin_open = request.stdin;
  if (stdin_open) {
    DSEC_RETURN_IF_ERROR(stream->WriteStdin(stdin_data));
    if (!control->stdin_open()) {
      DSEC_RETURN_IF_ERROR(stream->CloseStdin());
      stdin_open = false;
    }
  }
  control->MarkStarted();
  // The agent's frames and the control's requests, one after the other: a
  // request waits at most one slice.
  constexpr int64_t kSliceMs = 25;
  constexpr size_t kTakeAtMost = 256 << 10;
  for (;;) {
    ExecControl::Taken t = control->Take(kTakeAtMost);
    if (stdin_open && !t.stdin_bytes.empty()) DSEC_RETURN_IF_ERROR(stream->WriteStdin(t.stdin_bytes));
    if (stdin_open && t.close_stdin) {
      DSEC_RETURN_IF_ERROR(stream->CloseStdin());
      stdin_open = false;
    }
    for (int sig : t.signals) DSEC_RETURN_IF_ERROR(stream->Signal(sig));
    absl::StatusOr<agent::ExecEvent> ev = stream->Next(kSliceMs);
    if (absl::IsDeadlineExceeded(ev.status()) && !c->broken()) continue;
    if (!ev.ok()) return ev.status();
    if (ev->kind == agent::ExecEvent::Kind::kDone) return ev->done;
    if (on_chunk) on_chunk(ev->stream, ev->data);
  }
}

absl::StatusOr<std::string> MicrovmSandbox::ReadFile(const std::string& path, uint64_t max_bytes,
                                                     agent::FileReadDone* info) {
  std::lock_guard<std::mutex> lock(agent_mu_);
  DSEC_ASSIGN_OR_RETURN(agent::Client * c, Agent());
  return c->ReadFile(path, max_bytes, info);
}

absl::Status MicrovmSandbox::WriteFile(const std::string& path, std::string_view data, uint32_t mode) {
  std::lock_guard<std::mutex> lock(agent_mu_);
  DSEC_ASSIGN_OR_RETURN(agent::Client * c, Agent());
  return c->WriteFile(path, data, mode);
}

absl::StatusOr<std::vector<agent::DirEntry>> MicrovmSandbox::ListDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(agent_mu_);
  DSEC_ASSIGN_OR_RETURN(agent::Client * c, Agent());
  return c->ListDir(path);
}

namespace {

// A DirWatch over an agent connection that holds a WATCH.
class AgentDirWatch final : public DirWatch {
 public:
  explicit AgentDirWatch(std::unique_ptr<agent::Client> c) : c_(std::move(c)) {}

  absl::StatusOr<std::vector<FileEvent>> Next(int64_t timeout_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.ok() && closed_) failed_ = absl::UnavailableError("the watch was closed: its sandbox went");
    if (!failed_.ok()) return failed_;
    absl::StatusOr<std::vector<FileEvent>> events = c_->NextWatchEvents(timeout_ms);
    if (events.ok()) return events;
    if (closed_) {
      failed_ = absl::UnavailableError("the watch was closed: its sandbox went");
    } else if (c_->broken()) {
      failed_ = absl::UnavailableError(
          absl::StrCat("the guest's agent ended the watch (the guest stopped?): ", events.status().message()));
    } else {
      failed_ = events.status();  // the agent's own end: NotFound, ResourceExhausted
    }
    return failed_;
  }

  void Close() override {
    closed_ = true;
    c_->Interrupt();
  }

 private:
  const std::unique_ptr<agent::Client> c_;
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<DirWatch>> MicrovmSandbox::WatchDir(const std::string& path, bool recursive,
                                                                   size_t max_dirs) {
  DSEC_RETURN_IF_ERROR(Usable());
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<agent::Client> c, ConnectClient());
  const std::vector<std::string>& caps = c->agent_hello().capabilities;
  if (std::find(caps.begin(), caps.end(), "watch") == caps.end()) {
    return absl::UnimplementedError("the guest's agent cannot watch directories (a dsec-agent without WATCH)");
  }
  agent::WatchRequest req;
  req.path = path;
  req.recursive = recursive;
  req.max_dirs = static_cast<uint32_t>(std::clamp<size_t>(max_dirs, 1, agent::kMaxWatchDirs));
  DSEC_RETURN_IF_ERROR(c->Watch(req).status());
  return std::make_unique<AgentDirWatch>(std::move(c));
}

absl::Status MicrovmSandbox::Pause() {
  if (destroyed_) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id_, " is destroyed"));
  if (paused_) return absl::OkStatus();
  DSEC_RETURN_IF_ERROR(host_->Pause());
  exec_clock_.Pause();
  paused_ = true;
  return absl::OkStatus();
}

absl::Status MicrovmSandbox::Resume() {
  if (destroyed_) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id_, " is destroyed"));
  if (!paused_) return absl::OkStatus();
  DSEC_RETURN_IF_ERROR(host_->Resume());
  exec_clock_.Resume();
  paused_ = false;
  // The guest's clocks stood still while paused (Vm::Pause), so its wall
  // clock lags by the pause: the host's, as after a restore. The sandbox
  // runs either way; a guest that cannot be told keeps the lag.
  absl::StatusOr<bool> set = SetGuestWallClock();
  if (!set.ok()) {
    DSEC_LOG(warn, "microvm: sandbox={}: after the resume, the guest's wall clock lags by the pause: {}", id_,
             set.status().ToString());
  }
  return absl::OkStatus();
}

absl::StatusOr<MachineSaveInfo> MicrovmSandbox::SaveMachine(const std::string& dest_dir) {
  if (destroyed_) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id_, " is destroyed"));
  if (staging_.empty()) {
    return absl::FailedPreconditionError("this microVM was started without a directory to save it into");
  }
  return host_->SaveMachine(dest_dir);
}

absl::StatusOr<std::string> MicrovmSandbox::PackDiffDir() {
  if (destroyed_) return absl::FailedPreconditionError(absl::StrCat("sandbox ", id_, " is destroyed"));
  // The agent walks the upper directory: the guest must run meanwhile.
  const bool was_paused = paused_;
  if (was_paused) DSEC_RETURN_IF_ERROR(Resume());
  auto repause = [this, was_paused](absl::Status s) {
    if (was_paused) {
      absl::Status p = Pause();
      if (s.ok()) s = p;
    }
    return s;
  };
  if (!diff_dir_.empty()) {
    if (absl::Status s = container::RemoveTree(diff_dir_); !s.ok()) return repause(s);
    diff_dir_.clear();
  }
  const std::string dir = absl::StrCat(state_.path(), "/diff-", ++diff_seq_);
  if (::mkdir(dir.c_str(), 0700) != 0) return repause(ErrnoToStatus(absl::StrCat("mkdir ", dir)));
  diff_dir_ = dir;
  absl::Status s;
  {
    std::lock_guard<std::mutex> lock(agent_mu_);
    absl::StatusOr<agent::Client*> c = Agent();
    s = c.status();
    if (s.ok()) s = (*c)->PackDiff(dir).status();
  }
  if (!s.ok()) {
    (void)container::RemoveTree(dir);
    diff_dir_.clear();
    return repause(s);
  }
  DSEC_RETURN_IF_ERROR(repause(absl::OkStatus()));
  return dir;
}

absl::Status MicrovmSandbox::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  if (client_ != nullptr && !client_->broken() && !paused_ && host_ != nullptr &&
      !WaitReadable(host_->exit_fd(), 0)) {
    // Bounded by the client's io timeout; the tmpfs upper dies with the
    // VM anyway, so a failure here only costs the clean guest stop.
    if (absl::Status s = client_->Shutdown(); !s.ok()) {
      DSEC_LOG(warn, "microvm: sandbox={} agent shutdown: {}", id_, s.ToString());
    }
  }
  client_.reset();
  {
    // No exec runs now (Destroy comes alone): the idle connections go.
    std::lock_guard<std::mutex> lock(exec_mu_);
    idle_exec_.clear();
  }
  absl::Status first;
  if (host_ != nullptr) first = host_->Stop(0);
  host_.reset();
  absl::Status rm = state_.Remove();
  // A save that was under way when the monitor died left its files here.
  if (!staging_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(staging_, ec);
    if (ec && rm.ok()) rm = absl::InternalError(absl::StrCat("removing ", staging_, ": ", ec.message()));
  }
  return first.ok() ? rm : first;
}

MicrovmSandbox::~MicrovmSandbox() {
  if (absl::Status s = Destroy(); !s.ok()) DSEC_LOG(warn, "microvm: sandbox={} destroy: {}", id_, s.ToString());
}

void MicrovmSandbox::AbandonForTesting(std::unique_ptr<MicrovmSandbox> sandbox) {
  (void)sandbox.release();  // deliberately leaked, as by a killed daemon
}

absl::StatusOr<int> CleanupOrphans(const std::string& root,
                                   const std::function<absl::Status(const std::string& tap)>& remove_tap) {
  container::OrphanCleanupOptions o;
  o.tier = "microvm";
  o.init_cmdline_names_dir = true;
  // sched/ may have made vCPU cgroups below the monitor's.
  o.remove_cgroup = RemoveCgroupTree;
  // Its monitor is dead, so its copy of the tap closed; the daemon's went
  // with the daemon. A tap left all the same is the caller's to remove:
  // only a name of the "ds<8 hex digits>" scheme is handed on.
  if (remove_tap) {
    o.after_kill = [&remove_tap](const std::string&, const std::string& dir) -> absl::Status {
      absl::StatusOr<std::string> tap = ReadSmallFile(absl::StrCat(dir, "/", kTapRecord));
      if (!tap.ok()) return absl::OkStatus();
      const std::string name(absl::StripAsciiWhitespace(*tap));
      if (name.size() != 10 || name.rfind("ds", 0) != 0 ||
          name.find_first_not_of("0123456789abcdef", 2) != std::string::npos) {
        return absl::InternalError(absl::StrCat("microvm: ", dir, "/", kTapRecord, " names no sandbox tap: ", name));
      }
      return remove_tap(name);
    };
  }
  return container::CleanupOrphans(root, o);
}

}  // namespace dsec::microvm
