// SPDX-License-Identifier: Apache-2.0
// Where the monitor's default artefacts are: the test guest it boots without
// --kernel, and the monitor binary that other programs spawn.
#pragma once

#include <string>

namespace dsec::monitor {

// The test guest built next to the running binary (build/guest-kernel/
// testguest/testguest.elf beside build/dsec-monitor or build/dsec-vmm), or
// the path configured at build time; "" if neither exists.
std::string DefaultTestGuestPath();

// The monitor binary: `dsec-monitor` beside the running binary, or the
// path configured at build time; "" if neither exists.
std::string MonitorBinaryPath();

}  // namespace dsec::monitor
