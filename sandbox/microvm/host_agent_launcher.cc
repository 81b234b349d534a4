// SPDX-License-Identifier: Apache-2.0
#include "sandbox/microvm/host_agent_launcher.h"

#include "base/file_io.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/boot_plan.h"
#include "guest-kernel/agent/client.h"
#include "sandbox/microvm/jail.h"
#include "sandbox/microvm/vm_process.h"
#include "base/status.h"

namespace dsec::microvm {

namespace {

std::set<pid_t> CgroupProcs(const container::ContainerCgroups& cg) {
  std::set<pid_t> out;
  for (const std::string& d : cg.dirs()) {
    std::ifstream in(d + "/cgroup.procs");
    pid_t p;
    while (in >> p) out.insert(p);
  }
  return out;
}

class HostAgentHost : public AgentHost {
 public:
  HostAgentHost(std::unique_ptr<container::ContainerCgroups> cgroups,
                std::unique_ptr<JailedProcess> process, std::string socket, std::string log)
      : cgroups_(std::move(cgroups)), process_(std::move(process)), socket_(std::move(socket)),
        log_(std::move(log)) {}
  ~HostAgentHost() override { (void)Stop(0); }

  pid_t pid() const override { return process_->pid(); }
  int exit_fd() const override { return process_->exit_fd(); }
  absl::StatusOr<ScopedFd> ConnectAgent(int64_t timeout_ms) override {
    return agent::ConnectUnix(socket_, timeout_ms);
  }
  std::string ExitReport() override {
    std::string out = "dsec-agent ";
    if (process_->Exited()) {
      auto st = process_->WaitExit(0);
      out += st.ok() ? DescribeWaitStatus(*st) : "has exited";
    } else {
      out += "is still running";
    }
    std::string log = FileTail(log_, 1500);
    if (!log.empty()) absl::StrAppend(&out, "; log: ", log);
    return out;
  }
  absl::Status Pause() override {
    // Twice: a process forked while the first sweep ran is caught by the
    // second.
    for (int sweep = 0; sweep < 2; ++sweep) {
      for (pid_t p : CgroupProcs(*cgroups_)) ::kill(p, SIGSTOP);
    }
    // The agent is our child: wait until it has really stopped.
    siginfo_t info{};
    while (::waitid(static_cast<idtype_t>(3) /* P_PIDFD */, static_cast<id_t>(process_->exit_fd()),
                    &info, WSTOPPED | WEXITED | WNOWAIT) != 0 &&
           errno == EINTR) {
    }
    return absl::OkStatus();
  }
  absl::Status Resume() override {
    for (pid_t p : CgroupProcs(*cgroups_)) ::kill(p, SIGCONT);
    return absl::OkStatus();
  }
  absl::Status Stop(int64_t grace_ms) override {
    if (stopped_) return absl::OkStatus();
    stopped_ = true;
    (void)Resume();  // a stopped process does not die of SIGTERM
    if (grace_ms > 0) WaitReadable(process_->exit_fd(), grace_ms);
    absl::Status first = process_->Kill();
    // Commands the agent started (own sessions) die with the cgroups, and
    // with the last of them the mount namespace and its mounts.
    absl::Status s = cgroups_->Remove();
    return first.ok() ? s : first;
  }

 private:
  std::unique_ptr<container::ContainerCgroups> cgroups_;
  std::unique_ptr<JailedProcess> process_;
  const std::string socket_;
  const std::string log_;
  bool stopped_ = false;
};

absl::Status Mkdir(const std::string& path, mode_t mode = 0755) {
  if (::mkdir(path.c_str(), mode) != 0) return ErrnoToStatus(absl::StrCat("mkdir ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status HostAgentLauncher::CheckHost() {
  if (::access(options_.agent_binary.c_str(), X_OK) != 0) {
    return absl::UnavailableError(
        absl::StrCat("host-mode agent ", options_.agent_binary, " not found (build dsec-agent)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AgentHost>> HostAgentLauncher::Launch(const LaunchSpec& spec) {
  if (!spec.restore_dir.empty()) {
    return absl::UnimplementedError("the host-mode agent is a host process: there is no machine to restore");
  }
  const std::string& st = spec.state_dir;
  const std::string root = st + "/root", upper_base = st + "/upper", upper = upper_base + "/upper",
                    work = upper_base + "/work", socket = st + "/agent.sock", log_path = st + "/agent.log";
  for (const std::string& d : {root, upper_base, upper, work, st + "/layers"}) DSEC_RETURN_IF_ERROR(Mkdir(d));

  JailSpec spec_j;
  spec_j.namespaces = CLONE_NEWNS;
  spec_j.steps.push_back(MountStep::Mount("", "/", "", MS_REC | MS_PRIVATE));
  std::vector<std::string> lowers;  // uppermost first
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const std::string dir = absl::StrCat(st, "/layers/", i);
    DSEC_RETURN_IF_ERROR(Mkdir(dir));
    spec_j.steps.push_back(MountStep::Mount(spec.layers[i], dir, "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID));
    lowers.insert(lowers.begin(), dir);
  }
  if (lowers.empty()) {
    DSEC_RETURN_IF_ERROR(Mkdir(st + "/layers/empty"));
    lowers.push_back(st + "/layers/empty");
  }
  spec_j.steps.push_back(MountStep::Mount("overlay", root, "overlay", 0, agent::OverlayOptions(lowers, upper, work)));
  spec_j.argv = {options_.agent_binary, "--listen-unix", socket, "--root", root, "--upper", upper};
  spec_j.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"};
  // The guest's PID 1 has every capability inside the VM (it reads
  // trusted.overlay.* xattrs for pack_diff): so has the stand-in.
  spec_j.drop_capabilities = false;
  // It holds the tap as a monitor would (the stand-in has no NIC to use
  // it with): the tap lives until both it and the daemon let go.
  if (spec.network) spec_j.keep_fds.push_back(spec.network->tap_fd);

  container::ResourceLimits limits;
  limits.memory_bytes = spec.memory_mib << 20;
  limits.pids_max = spec.pids;
  if (spec.cpus > 0) {
    limits.cpu_quota_us = static_cast<int64_t>(spec.cpus * static_cast<double>(limits.cpu_period_us));
  }
  auto record = [&spec](const std::string& dir) {
    return spec.record_cgroup ? spec.record_cgroup(dir) : absl::OkStatus();
  };
  DSEC_ASSIGN_OR_RETURN(container::ContainerCgroups cg,
                        container::ContainerCgroups::Create(absl::StrCat("mvm-", spec.id), limits,
                                                            /*skip_cpu=*/spec.join != nullptr, record));
  auto cgroups = std::make_unique<container::ContainerCgroups>(std::move(cg));
  ScopedFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return ErrnoToStatus(absl::StrCat("open ", log_path));
  spec_j.stdout_fd = log.get();
  spec_j.stderr_fd = log.get();
  spec_j.cgroups = cgroups.get();
  spec_j.join = spec.join;
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<JailedProcess> process, JailedProcess::Start(spec_j));
  return std::unique_ptr<AgentHost>(new HostAgentHost(std::move(cgroups), std::move(process), socket, log_path));
}

}  // namespace dsec::microvm
