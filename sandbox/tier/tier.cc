// SPDX-License-Identifier: Apache-2.0
#include "sandbox/tier/tier.h"

#include "absl/strings/str_cat.h"

namespace dsec::tier {

std::optional<ExecOutcome> ShellOutcomeOf(const absl::Status& start_error) {
  if (!absl::IsNotFound(start_error) && !absl::IsPermissionDenied(start_error)) return std::nullopt;
  ExecOutcome out;
  out.exit_code = absl::IsNotFound(start_error) ? 127 : 126;
  out.stderr_data = absl::StrCat("dsec: ", start_error.message(), "\n");
  return out;
}

absl::StatusOr<MachineSaved> TierSandbox::SaveMachine(const std::string& /*dest_dir*/) {
  return absl::UnimplementedError("this tier's sandboxes cannot be saved whole (memory and processes)");
}

absl::StatusOr<std::unique_ptr<DirWatch>> TierSandbox::WatchDir(const std::string& /*path*/, bool /*recursive*/) {
  return absl::UnimplementedError("this tier's sandboxes cannot watch directories");
}

}  // namespace dsec::tier
