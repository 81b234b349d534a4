// SPDX-License-Identifier: Apache-2.0
// Network namespaces held by descriptors.
#pragma once

#include "absl/status/statusor.h"
#include "base/scoped_fd.h"

namespace dsec {

// Makes one network namespace on the calling thread, brings its loopback
// up, and returns the calling thread to the namespace it was in. Returns
// the new namespace's fd (it lives as long as a descriptor or a process
// holds it). Internal with the failing step on error.
absl::StatusOr<ScopedFd> MakeNetns();

}  // namespace dsec
