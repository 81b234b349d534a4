// SPDX-License-Identifier: Apache-2.0
// Guest mode: dsec-agent as the guest's PID 1 (README.md, "PID 1"). Mounts
// the pseudo filesystems, stacks the EROFS layers and a tmpfs upper with
// overlayfs, pivots into it, optionally runs the dsec.run command, then
// serves the protocol on vsock and reaps orphans forever.
//
// Everything here is side effects on the guest; the decisions are made by
// the pure functions of boot_plan.h, which the host tests.
#pragma once

namespace dsec::agent {

// Never returns (PID 1 must not exit: the kernel would panic).
[[noreturn]] void RunPid1();

}  // namespace dsec::agent
