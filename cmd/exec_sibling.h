// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

namespace dsec::cmd {

// Replaces this process with the binary `name` beside /proc/self/exe (the
// daemon dsec-vmmd, the monitor dsec-monitor), passing `args`. Returns only
// on failure: 2 when the binary is missing (one line on stderr naming the
// target that builds it), 125 when execv fails.
int ExecSibling(const std::string& name, const std::vector<std::string>& args);

}  // namespace dsec::cmd
