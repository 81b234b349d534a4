// SPDX-License-Identifier: Apache-2.0
// Replay of a recorded trajectory when a preempted task resumes.
//
// The rule (docs in README.md):
// - The client sends its commands again, in order. While each one matches
//   the recorded exec at the same position (same argv, cwd, env digest and
//   stdin digest), the recorded result is returned and nothing runs.
// - At the first command that differs, or the first one past the end of the
//   recording, the session goes live for good, and the client is told where
//   and why (Divergence).
// - Going live needs the sandbox's files as they were after the matched
//   prefix of n execs. RestorePlan gives them: the latest checkpoint (a
//   pack_diff layer) whose prefix is <= n becomes a layer of the fresh
//   sandbox; the recorded execs between that checkpoint and n are re-run
//   if they are marked idempotent, and listed as not re-applied otherwise
//   (their effects on files are lost: the client learns which).
// - If n is shorter than the recording, the log gets a branch record at n,
//   so the superseded tail is no longer part of the trajectory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/trajectory/record.h"

namespace dsec::trajectory {

struct Divergence {
  uint64_t seq = 0;  // position of the first live command
  // "past-end": the recording had no more execs. "differs": it had one,
  // with the fields listed in `fields` (argv, cwd, env, stdin) different.
  std::string reason;
  std::vector<std::string> fields;
};

struct RestorePlan {
  uint64_t prefix = 0;  // execs whose file effects the sandbox must hold
  // Checkpoint layer to add to the sandbox, and the prefix it holds.
  std::optional<std::string> checkpoint_layer;
  uint64_t checkpoint_prefix = 0;
  std::vector<Record> rerun;           // idempotent execs to run again, in order
  std::vector<uint64_t> not_reapplied;  // non-idempotent execs skipped
};

// Which fields of `request` differ from the recorded exec (empty = match).
std::vector<std::string> DiffRequest(const ExecRequest& recorded, const ExecRequest& request);

// The plan to reconstruct the files after the first `prefix` execs.
RestorePlan PlanRestore(const std::vector<Record>& execs, const std::vector<Record>& checkpoints,
                        uint64_t prefix);

// Walks a recording as the resumed client re-sends commands. Not
// thread-safe; one per resumed session.
class Replayer {
 public:
  Replayer(std::vector<Record> execs, std::vector<Record> checkpoints);

  // The recorded result for `request` (the session stays in replay), or
  // nullopt once live (the first such call sets divergence()).
  std::optional<Record> Next(const ExecRequest& request);

  bool live() const { return divergence_.has_value(); }
  const std::optional<Divergence>& divergence() const { return divergence_; }
  uint64_t replayed() const { return pos_; }
  // Valid once live(): how to rebuild the files for the live part.
  RestorePlan Plan() const { return PlanRestore(execs_, checkpoints_, pos_); }

 private:
  std::vector<Record> execs_;
  std::vector<Record> checkpoints_;
  uint64_t pos_ = 0;
  std::optional<Divergence> divergence_;
};

}  // namespace dsec::trajectory
