// SPDX-License-Identifier: Apache-2.0
// The node's template file: E2B templateIDs -> layer stacks (wire.h
// Template), written by `dsec-vmm template add|rm` and read by the E2B
// server at each create. No HTTP, so the static dsec-vmm can link it.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/e2b/wire.h"

namespace dsec::e2b {

inline constexpr char kDefaultTemplateFile[] = "/var/lib/dsec-vmm/e2b-templates.json";

// wire.h ParseTemplateFile over the file; a missing file has no templates.
absl::StatusOr<std::map<std::string, Template>> ReadTemplateFile(const std::string& path);
// Replaces the file whole (a reader sees the old or the new one).
absl::Status WriteTemplateFile(const std::string& path, const std::map<std::string, Template>& templates);

}  // namespace dsec::e2b
