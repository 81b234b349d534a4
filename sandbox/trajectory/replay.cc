// SPDX-License-Identifier: Apache-2.0
#include "sandbox/trajectory/replay.h"

#include <utility>

namespace dsec::trajectory {

std::vector<std::string> DiffRequest(const ExecRequest& recorded, const ExecRequest& request) {
  std::vector<std::string> fields;
  if (recorded.argv != request.argv) fields.push_back("argv");
  if (recorded.cwd != request.cwd) fields.push_back("cwd");
  if (recorded.env_digest != request.env_digest) fields.push_back("env");
  if (recorded.stdin_digest != request.stdin_digest) fields.push_back("stdin");
  return fields;
}

RestorePlan PlanRestore(const std::vector<Record>& execs, const std::vector<Record>& checkpoints,
                        uint64_t prefix) {
  RestorePlan plan;
  plan.prefix = prefix;
  // Checkpoints are in log order; a later one with the same or a larger
  // prefix (<= the target) is the better base.
  for (const Record& c : checkpoints) {
    if (c.kind != RecordKind::kCheckpoint || c.seq > prefix) continue;
    if (!plan.checkpoint_layer || c.seq >= plan.checkpoint_prefix) {
      plan.checkpoint_layer = c.layer;
      plan.checkpoint_prefix = c.seq;
    }
  }
  for (uint64_t s = plan.checkpoint_prefix; s < prefix && s < execs.size(); ++s) {
    if (execs[s].request.idempotent) {
      plan.rerun.push_back(execs[s]);
    } else {
      plan.not_reapplied.push_back(s);
    }
  }
  return plan;
}

Replayer::Replayer(std::vector<Record> execs, std::vector<Record> checkpoints)
    : execs_(std::move(execs)), checkpoints_(std::move(checkpoints)) {}

std::optional<Record> Replayer::Next(const ExecRequest& request) {
  if (divergence_) return std::nullopt;
  if (pos_ >= execs_.size()) {
    divergence_ = Divergence{pos_, "past-end", {}};
    return std::nullopt;
  }
  std::vector<std::string> fields = DiffRequest(execs_[pos_].request, request);
  if (!fields.empty()) {
    divergence_ = Divergence{pos_, "differs", std::move(fields)};
    return std::nullopt;
  }
  return execs_[pos_++];
}

}  // namespace dsec::trajectory
