// SPDX-License-Identifier: Apache-2.0
// dsec-sandbox-init: a container sandbox's PID 1 (init_launch.h starts it,
// init_process.h is what it does). Its descriptors and configuration are
// in init_protocol.h; it takes no arguments, except `--staged-launcher`
// and `--launcher`, which make it a launcher of other inits
// (init_trampoline.h).
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/container/child_process.h"
#include "sandbox/container/init_process.h"
#include "sandbox/container/init_protocol.h"
#include "sandbox/container/init_trampoline.h"
#include "base/fd_passing.h"

namespace {

using namespace dsec::container;

// With a user namespace: join it as its root, make the other namespaces
// inside it (so that it owns them: proc, sysfs and the overlay can then be
// mounted), and fork the sandbox's PID 1 into the new pid namespace as a
// sibling, so that the runtime is its parent. This process reports the
// child's pid and exits; the child returns and carries on as the init.
void EnterUserNamespace() {
  if (::setns(kInitUsernsFd, CLONE_NEWUSER) != 0) FailChild(kInitReportFd, kSetns, errno);
  ::close(kInitUsernsFd);
  if (::setgroups(0, nullptr) != 0 || ::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) {
    FailChild(kInitReportFd, kSetId, errno);
  }
  if (::unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID) != 0) {
    FailChild(kInitReportFd, kUnshare, errno);
  }
  long pid = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
  if (pid < 0) FailChild(kInitReportFd, kClone, errno);
  if (pid > 0) {
    ChildError forked{kForked, static_cast<int32_t>(pid)};
    (void)!::write(kInitReportFd, &forked, sizeof(forked));
    ::_exit(0);
  }
}

// The first control message: the detached overlay, with netns_on_control
// the network namespace to join, with sys_on_control the sysfs to attach,
// with dev_on_control the directory to build /dev in (exactly as many
// descriptors as the configuration says, in that order).
void ReceiveRoot(const InitConfig& config, int* overlay_fd, int* netns_fd, int* sys_fd, int* dev_fd) {
  char byte;
  int fds[4] = {-1, -1, -1, -1};
  const size_t want = 1 + (config.netns_on_control ? 1 : 0) + (config.sys_on_control ? 1 : 0) +
                      (config.dev_on_control ? 1 : 0);
  size_t nfds = 0;
  bool dropped = false;
  const ssize_t n = dsec::ReceiveWithFds(kInitControlFd, &byte, 1, fds, want, &nfds, 0, &dropped);
  if (n != 1 || nfds != want || dropped) FailChild(kInitReportFd, kMountOverlay, EPROTO);
  size_t next = 0;
  *overlay_fd = fds[next++];
  *netns_fd = config.netns_on_control ? fds[next++] : -1;
  *sys_fd = config.sys_on_control ? fds[next++] : -1;
  *dev_fd = config.dev_on_control ? fds[next++] : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], kLauncherFlag) == 0 || std::strcmp(argv[1], kStagedLauncherFlag) == 0)) {
    // A launcher (init_trampoline.h): its socket, and nothing else.
    ::syscall(SYS_close_range, kLauncherSocketFd + 1, ~0u, 0);
    return RunInitLauncher(kLauncherSocketFd, std::strcmp(argv[1], kStagedLauncherFlag) == 0);
  }
  // Exec'd from a descriptor the name would be its number.
  ::prctl(PR_SET_NAME, "dsec-sandbox-init", 0, 0, 0);
  const bool staged = InStage(kInitStageFd);
  InitConfig config;
  if (!ReadInitConfig(kInitConfigFd, &config)) FailChild(kInitReportFd, kReadConfig, EINVAL);
  // Staged, only the descriptors sent reach anything: no host paths.
  if (staged && (config.join_userns || !config.overlay_on_control || !config.cwd.empty())) {
    FailChild(kInitReportFd, kMountOverlay, EINVAL);
  }
  ::close(kInitConfigFd);
  if (!config.cwd.empty() && ::chdir(config.cwd.c_str()) != 0) FailChild(kInitReportFd, kChdir, errno);
  if (config.join_userns) EnterUserNamespace();
  int overlay_fd = -1;
  int sys_fd = -1;
  int dev_fd = -1;
  int netns_fd = config.join_netns ? kInitNetnsFd : -1;
  if (config.overlay_on_control) {
    int received_netns = -1;
    ReceiveRoot(config, &overlay_fd, &received_netns, &sys_fd, &dev_fd);
    if (config.netns_on_control) netns_fd = received_netns;
  }
  SeccompProgram seccomp{config.seccomp};
  InitPlan plan;
  plan.root.merged = config.merged;
  plan.root.hostname = config.hostname;
  plan.root.make_mount_points = true;
  plan.root.overlay_data = config.overlay;
  plan.root.overlay_fd = overlay_fd;
  plan.root.sys_fd = sys_fd;
  plan.root.dev_fd = dev_fd;
  plan.root.bind_dev_nodes = config.join_userns;
  plan.root.staged = staged;
  plan.root.report_fd = kInitReportFd;
  plan.seccomp = seccomp.filter.empty() ? nullptr : &seccomp;
  plan.nofile = config.nofile;
  plan.go_fd = kInitGoFd;
  plan.report_fd = kInitReportFd;
  plan.control_fd = kInitControlFd;
  plan.net_fd = netns_fd;
  RunInit(plan);
}
