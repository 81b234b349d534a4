// SPDX-License-Identifier: Apache-2.0
// dsec-sandbox-init: a container sandbox's PID 1 (init_launch.h starts it,
// init_process.h is what it does). Its descriptors and configuration are
// in init_protocol.h; it takes no arguments.
#include <unistd.h>

#include <cerrno>

#include "sandbox/container/child_process.h"
#include "sandbox/container/init_process.h"
#include "sandbox/container/init_protocol.h"

int main() {
  using namespace dsec::container;
  InitConfig config;
  if (!ReadInitConfig(kInitConfigFd, &config)) FailChild(kInitReportFd, kControl, EINVAL);
  ::close(kInitConfigFd);
  SeccompProgram seccomp{config.seccomp};
  InitPlan plan;
  plan.root.merged = config.merged;
  plan.root.hostname = config.hostname;
  plan.root.make_mount_points = true;
  plan.root.report_fd = kInitReportFd;
  plan.seccomp = seccomp.filter.empty() ? nullptr : &seccomp;
  plan.nofile = config.nofile;
  plan.go_fd = kInitGoFd;
  plan.report_fd = kInitReportFd;
  plan.control_fd = kInitControlFd;
  plan.net_fd = config.join_netns ? kInitNetnsFd : -1;
  RunInit(plan);
}
