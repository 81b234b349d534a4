// SPDX-License-Identifier: Apache-2.0
#include "sandbox/trajectory/replay.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dsec::trajectory {
namespace {

ExecRequest Req(std::string cmd, bool idempotent = false) {
  ExecRequest q;
  q.argv = {"sh", "-c", std::move(cmd)};
  q.cwd = "/work";
  q.env_digest = DigestEnv({"HOME=/root"});
  q.stdin_digest = DigestBytes("");
  q.idempotent = idempotent;
  return q;
}

Record Exec(uint64_t seq, ExecRequest q, std::string out) {
  Record r;
  r.kind = RecordKind::kExec;
  r.seq = seq;
  r.request = std::move(q);
  r.result.stdout_data = std::move(out);
  r.result.exit_code = 0;
  return r;
}

Record Checkpoint(uint64_t prefix, std::string layer) {
  Record r;
  r.kind = RecordKind::kCheckpoint;
  r.seq = prefix;
  r.layer = std::move(layer);
  return r;
}

std::vector<Record> Recording() {
  return {Exec(0, Req("git clone repo"), "cloned\n"), Exec(1, Req("ls", true), "repo\n"),
          Exec(2, Req("echo x >> log"), ""), Exec(3, Req("make", true), "built\n"),
          Exec(4, Req("git push"), "pushed\n")};
}

TEST(ReplayTest, MatchingCommandsReplayRecordedResults) {
  Replayer r(Recording(), {});
  for (uint64_t i = 0; i < 5; ++i) {
    auto rec = r.Next(Recording()[i].request);
    ASSERT_TRUE(rec.has_value()) << i;
    EXPECT_EQ(rec->seq, i);
    EXPECT_EQ(rec->result.stdout_data, Recording()[i].result.stdout_data);
  }
  EXPECT_FALSE(r.live());
  EXPECT_EQ(r.replayed(), 5u);
  // The next command is new: live, past the end.
  EXPECT_FALSE(r.Next(Req("git status")).has_value());
  ASSERT_TRUE(r.live());
  EXPECT_EQ(r.divergence()->seq, 5u);
  EXPECT_EQ(r.divergence()->reason, "past-end");
  // Once live, always live, even for a command that matches the recording.
  EXPECT_FALSE(r.Next(Recording()[0].request).has_value());
}

TEST(ReplayTest, FirstDifferenceGoesLiveAndNamesTheFields) {
  Replayer r(Recording(), {});
  ASSERT_TRUE(r.Next(Req("git clone repo")).has_value());
  ExecRequest changed = Req("ls -la", true);
  changed.cwd = "/tmp";
  EXPECT_FALSE(r.Next(changed).has_value());
  ASSERT_TRUE(r.live());
  EXPECT_EQ(r.divergence()->seq, 1u);
  EXPECT_EQ(r.divergence()->reason, "differs");
  EXPECT_EQ(r.divergence()->fields, (std::vector<std::string>{"argv", "cwd"}));
  // Only env or stdin differing also counts.
  Replayer e(Recording(), {});
  ExecRequest env = Req("git clone repo");
  env.env_digest = DigestEnv({"HOME=/tmp"});
  EXPECT_FALSE(e.Next(env).has_value());
  EXPECT_EQ(e.divergence()->fields, (std::vector<std::string>{"env"}));
  // The idempotent mark is not part of matching.
  Replayer m(Recording(), {});
  EXPECT_TRUE(m.Next(Req("git clone repo", true)).has_value());
}

TEST(ReplayTest, PlanUsesLatestCheckpointAndRerunsOnlyIdempotentCommands) {
  std::vector<Record> cps = {Checkpoint(1, "ckpt:1"), Checkpoint(4, "ckpt:4")};
  // Diverging at 4: checkpoint 4 holds exactly that prefix.
  RestorePlan at4 = PlanRestore(Recording(), cps, 4);
  EXPECT_EQ(at4.checkpoint_layer, "ckpt:4");
  EXPECT_EQ(at4.checkpoint_prefix, 4u);
  EXPECT_TRUE(at4.rerun.empty());
  EXPECT_TRUE(at4.not_reapplied.empty());
  // Diverging at 3: checkpoint 1, then `ls` (1, idempotent) re-run and the
  // append (2) reported as not re-applied.
  RestorePlan at3 = PlanRestore(Recording(), cps, 3);
  EXPECT_EQ(at3.checkpoint_layer, "ckpt:1");
  ASSERT_EQ(at3.rerun.size(), 1u);
  EXPECT_EQ(at3.rerun[0].seq, 1u);
  EXPECT_EQ(at3.not_reapplied, (std::vector<uint64_t>{2}));
  // No checkpoint: everything from the start.
  RestorePlan none = PlanRestore(Recording(), {}, 5);
  EXPECT_FALSE(none.checkpoint_layer.has_value());
  EXPECT_EQ(none.rerun.size(), 2u);
  EXPECT_EQ(none.not_reapplied, (std::vector<uint64_t>{0, 2, 4}));
  // A later checkpoint with the same prefix wins (re-taken after a branch).
  RestorePlan same = PlanRestore(Recording(), {Checkpoint(2, "a"), Checkpoint(2, "b")}, 2);
  EXPECT_EQ(same.checkpoint_layer, "b");
}

TEST(ReplayTest, ReplayerPlanMatchesDivergencePoint) {
  Replayer r(Recording(), {Checkpoint(2, "ckpt:2")});
  ASSERT_TRUE(r.Next(Req("git clone repo")).has_value());
  ASSERT_TRUE(r.Next(Req("ls", true)).has_value());
  ASSERT_TRUE(r.Next(Req("echo x >> log")).has_value());
  EXPECT_FALSE(r.Next(Req("make test", true)).has_value());
  RestorePlan plan = r.Plan();
  EXPECT_EQ(plan.prefix, 3u);
  EXPECT_EQ(plan.checkpoint_layer, "ckpt:2");
  EXPECT_TRUE(plan.rerun.empty());
  EXPECT_EQ(plan.not_reapplied, (std::vector<uint64_t>{2}));
}

}  // namespace
}  // namespace dsec::trajectory
