// SPDX-License-Identifier: Apache-2.0
// Test support: EROFS layers for fncall pools made from the host's own
// python3.11, bash and busybox-static (no network), built once per build
// directory and shared by every test process.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dsec::fncall::testing {

struct TestLayers {
  std::string runtime;  // busybox, bash, python3.11 + stdlib + libraries
  std::string crash;    // dsec_crash_on_even.py (kills even workers' zygotes)
};

// Builds the layers on first use (a few seconds); Unavailable naming the
// missing host package otherwise.
absl::StatusOr<TestLayers> EnsureTestLayers();

}  // namespace dsec::fncall::testing
