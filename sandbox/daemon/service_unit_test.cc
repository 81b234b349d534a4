// SPDX-License-Identifier: Apache-2.0
// Service logic over a fake tier (no sandboxes): validation, limits, the
// registry and the trajectory replay rule.
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/errors.h"
#include "sandbox/daemon/http_server.h"
#include "sandbox/daemon/service.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;

// Runs nothing: answers with argv joined and how often it ran, counted
// across all fake sandboxes (a replay must not increase it).
struct FakeState {
  std::atomic<int> runs{0};
  std::atomic<int> live{0};
};

class FakeSandbox : public TierSandbox {
 public:
  explicit FakeSandbox(FakeState* s) : s_(s) { s_->live++; }
  ~FakeSandbox() override { (void)Destroy(); }
  absl::StatusOr<ExecOutcome> Exec(const ExecSpec& spec) override {
    ExecOutcome o;
    o.exit_code = 0;
    o.stdout_data = absl::StrCat(absl::StrJoin(spec.argv, " "), " run=", ++s_->runs);
    o.stderr_data = "\xff\xfe";  // not UTF-8
    return o;
  }
  absl::Status Pause() override { return absl::OkStatus(); }
  absl::Status Resume() override { return absl::OkStatus(); }
  absl::StatusOr<std::string> ReadFile(const std::string&, uint64_t) override { return absl::NotFoundError("x"); }
  absl::Status WriteFile(const std::string&, const std::string&, uint32_t) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<FileEntry>> ListDir(const std::string&) override { return std::vector<FileEntry>{}; }
  absl::StatusOr<std::string> UpperDir() override { return absl::FailedPreconditionError("fake"); }
  absl::Status Destroy() override {
    if (!destroyed_) s_->live--;
    destroyed_ = true;
    return absl::OkStatus();
  }

 private:
  FakeState* s_;
  bool destroyed_ = false;
};

class FakeTier : public Tier {
 public:
  explicit FakeTier(FakeState* s) : s_(s) {}
  std::string name() const override { return "container"; }
  absl::StatusOr<std::unique_ptr<TierSandbox>> Create(const CreateSpec&) override {
    return std::unique_ptr<TierSandbox>(new FakeSandbox(s_));
  }
  absl::StatusOr<int> CleanupOrphans() override { return 0; }

 private:
  FakeState* s_;
};

class ServiceUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = container::testing::TempDir::Create("dsec-daemon-unit-");
    ASSERT_TRUE(dir.ok());
    dir_.emplace(std::move(*dir));
  }
  std::unique_ptr<Service> Make(int max_sandboxes = 8, bool reaper = false) {
    ServiceOptions o;
    o.max_sandboxes = max_sandboxes;
    o.start_reaper = reaper;
    o.resolve_layers = [](const std::string&, const std::string&, const std::vector<std::string>& refs)
        -> absl::StatusOr<std::vector<std::string>> {
      for (const auto& r : refs) {
        if (r == "missing:1") return absl::NotFoundError("no layer missing:1");
      }
      return std::vector<std::string>{"/fake.erofs"};
    };
    std::map<std::string, std::unique_ptr<Tier>> tiers;
    tiers["container"] = std::make_unique<FakeTier>(&state_);
    auto store = trajectory::TrajectoryStore::Open(dir_->path() + "/trj", {});
    EXPECT_TRUE(store.ok());
    return std::make_unique<Service>(o, std::move(tiers), std::move(*store));
  }
  FakeState state_;
  std::optional<container::testing::TempDir> dir_;
};

std::string FieldOf(const absl::StatusOr<json>& r) { return ErrorField(r.status()).value_or(""); }

TEST_F(ServiceUnitTest, ValidationErrorsNameTheField) {
  auto svc = Make();
  EXPECT_EQ(FieldOf(svc->Create(json::object())), "tier");
  EXPECT_EQ(FieldOf(svc->Create({{"tier", "container"}, {"memory_mib", "big"}})), "memory_mib");
  EXPECT_EQ(FieldOf(svc->Create({{"tier", "container"}, {"memory_mib", 1}})), "memory_mib");
  EXPECT_EQ(FieldOf(svc->Create({{"tier", "container"}, {"qos", "fast"}})), "qos");
  EXPECT_EQ(FieldOf(svc->Create({{"tier", "container"}, {"task_id", "../x"}})), "task_id");
  EXPECT_EQ(FieldOf(svc->Create({{"tier", "container"}, {"bogus", 1}})), "bogus");
  EXPECT_EQ(FieldOf(svc->Create({{"tier", "container"}, {"layers", {"missing:1"}}})), "layers");
  EXPECT_EQ(svc->Create({{"tier", "microvm"}}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(svc->Create({{"tier", "fncall"}}).status().code(), absl::StatusCode::kUnavailable);
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string id = (*sb)["id"];
  EXPECT_EQ(FieldOf(svc->Exec(id, json::object())), "argv");
  EXPECT_EQ(FieldOf(svc->Exec(id, {{"argv", {"true"}}, {"timeout_s", 0}})), "timeout_s");
  EXPECT_EQ(FieldOf(svc->Exec(id, {{"argv", {"true"}}, {"cwd", "rel"}})), "cwd");
  EXPECT_EQ(FieldOf(svc->Exec(id, {{"argv", {"true"}}, {"stdin_b64", "!!"}})), "stdin_b64");
  EXPECT_EQ(FieldOf(svc->Exec(id, {{"argv", {"true"}}, {"env", {{"A=B", "x"}}}})), "env");
  EXPECT_EQ(svc->Exec("sb-nope", {{"argv", {"true"}}}).status().code(), absl::StatusCode::kNotFound);
  // Nothing was left behind by the refused requests.
  EXPECT_EQ(svc->sandbox_count(), 1);
  EXPECT_EQ(state_.live.load(), 1);
}

TEST_F(ServiceUnitTest, SandboxLimitIsResourceExhausted) {
  auto svc = Make(2);
  ASSERT_TRUE(svc->Create({{"tier", "container"}}).ok());
  ASSERT_TRUE(svc->Create({{"tier", "container"}}).ok());
  auto third = svc->Create({{"tier", "container"}});
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(HttpStatusFor(third.status().code()), 429);
  svc->DestroyAll();
  EXPECT_EQ(state_.live.load(), 0);
}

TEST_F(ServiceUnitTest, ExecResultCarriesBytesAndValidText) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok());
  auto r = svc->Exec((*sb)["id"], {{"argv", {"echo", "hi"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["stdout"], "echo hi run=1");
  EXPECT_EQ((*r)["stderr"], "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ((*r)["stderr_b64"], "//4=");
  EXPECT_TRUE((*r)["seq"].is_null());
  EXPECT_FALSE((*r)["replayed"].get<bool>());
}

TEST_F(ServiceUnitTest, ResumeReplaysThenGoesLiveAndBranches) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}, {"task_id", "t1"}});
  ASSERT_TRUE(sb.ok());
  const std::string id = (*sb)["id"];
  for (const char* a : {"a", "b", "c"}) {
    auto r = svc->Exec(id, {{"argv", {"echo", a}}});
    ASSERT_TRUE(r.ok());
  }
  // A second sandbox of the same task while one lives: conflict.
  EXPECT_EQ(svc->Create({{"tier", "container"}, {"task_id", "t1"}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(svc->Delete(id).ok());
  EXPECT_EQ(state_.runs.load(), 3);

  auto resumed = svc->ResumeTask("t1", {{"tier", "container"}});
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)["recorded"], 3);
  const std::string rid = (*resumed)["id"];
  auto r0 = svc->Exec(rid, {{"argv", {"echo", "a"}}});
  ASSERT_TRUE(r0.ok());
  EXPECT_TRUE((*r0)["replayed"].get<bool>());
  EXPECT_EQ((*r0)["stdout"], "echo a run=1");
  EXPECT_EQ((*r0)["seq"], 0);
  EXPECT_EQ(state_.runs.load(), 3);  // nothing ran
  auto r1 = svc->Exec(rid, {{"argv", {"echo", "X"}}});
  ASSERT_TRUE(r1.ok());
  EXPECT_FALSE((*r1)["replayed"].get<bool>());
  EXPECT_EQ((*r1)["stdout"], "echo X run=4");
  EXPECT_EQ((*r1)["seq"], 1);
  EXPECT_EQ((*r1)["divergence"]["seq"], 1);
  EXPECT_EQ((*r1)["divergence"]["reason"], "differs");
  EXPECT_EQ((*r1)["divergence"]["fields"], json({"argv"}));
  // Later execs are live too, even if they match the old recording.
  auto r2 = svc->Exec(rid, {{"argv", {"echo", "c"}}});
  ASSERT_TRUE(r2.ok());
  EXPECT_FALSE((*r2)["replayed"].get<bool>());
  EXPECT_TRUE((*r2)["divergence"].is_null());
  auto log = svc->TaskLog("t1");
  ASSERT_TRUE(log.ok());
  ASSERT_EQ((*log)["records"].size(), 3u);
  EXPECT_EQ((*log)["records"][1]["argv"], json({"echo", "X"}));
  EXPECT_EQ((*log)["records"][2]["argv"], json({"echo", "c"}));
  EXPECT_EQ(svc->DeleteTask("t1").code(), absl::StatusCode::kFailedPrecondition);  // live sandbox
  ASSERT_TRUE(svc->Delete(rid).ok());
  EXPECT_TRUE(svc->DeleteTask("t1").ok());
  EXPECT_EQ(svc->TaskLog("t1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(svc->ResumeTask("t1", {{"tier", "container"}}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ServiceUnitTest, MetricsAndHealth) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok());
  ASSERT_TRUE(svc->Exec((*sb)["id"], {{"argv", {"x"}}}).ok());
  std::string m = svc->MetricsText();
  EXPECT_NE(m.find("dsec_sandboxes{tier=\"container\",state=\"running\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("dsec_execs_total{tier=\"container\"} 1"), std::string::npos);
  EXPECT_NE(m.find("dsec_create_seconds_count{tier=\"container\"} 1"), std::string::npos);
  json h = svc->Health();
  EXPECT_EQ(h["sandboxes"], 1);
  EXPECT_EQ(h["tiers"]["microvm"], false);
}

TEST_F(ServiceUnitTest, TtlReaperDestroysExpiredSandboxes) {
  auto svc = Make(8, /*reaper=*/true);
  auto sb = svc->Create({{"tier", "container"}, {"ttl_s", 1}});
  ASSERT_TRUE(sb.ok());
  auto keep = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(keep.ok());
  const int64_t expires = (*sb)["expires_unix_ms"];
  EXPECT_EQ(expires, (*sb)["created_unix_ms"].get<int64_t>() + 1000);
  // The reaper runs every second: the sandbox is gone within ~2 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (svc->sandbox_count() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(svc->sandbox_count(), 1);
  EXPECT_EQ(svc->Get((*sb)["id"]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(svc->Get((*keep)["id"]).ok());
  EXPECT_EQ(state_.live.load(), 1);
}

TEST(HttpAuth, TokenComparison) {
  EXPECT_TRUE(TokenMatches("Bearer abcdefghijklmnop", "abcdefghijklmnop"));
  EXPECT_FALSE(TokenMatches("Bearer abcdefghijklmnoq", "abcdefghijklmnop"));
  EXPECT_FALSE(TokenMatches("Bearer abcdefghijklmno", "abcdefghijklmnop"));
  EXPECT_FALSE(TokenMatches("abcdefghijklmnop", "abcdefghijklmnop"));
  EXPECT_FALSE(TokenMatches("", ""));
}

TEST(Utf8, InvalidSequencesAreReplaced) {
  EXPECT_EQ(ToValidUtf8("h\xc3\xa9llo"), "h\xc3\xa9llo");
  EXPECT_EQ(ToValidUtf8("a\xc0\x80"), "a\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(ToValidUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

}  // namespace
}  // namespace dsec::daemon
