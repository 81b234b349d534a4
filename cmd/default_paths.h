// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

namespace dsec::cmd {

// The test guest built next to this binary (build/guest-kernel/testguest/
// testguest.elf beside build/dsec-vmm), or the path configured at build
// time; "" if neither exists.
std::string DefaultTestGuestPath();
// This executable (/proc/self/exe).
std::string SelfExePath();

}  // namespace dsec::cmd
