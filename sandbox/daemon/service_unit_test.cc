// SPDX-License-Identifier: Apache-2.0
// Service logic over a fake tier (no sandboxes): validation, limits, the
// registry and the trajectory replay rule.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/errors.h"
#include "sandbox/daemon/exec_stream.h"
#include "sandbox/daemon/http_server.h"
#include "sandbox/daemon/service.h"
#include "sched/fake_sched_core_ops.h"
#include "sched/fake_sysfs.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;

// Runs nothing: answers with argv joined and how often it ran, counted
// across all fake sandboxes (a replay must not increase it).
struct FakeState {
  std::atomic<int> runs{0};
  std::atomic<int> live{0};
  std::atomic<int> isolated{0};  // creates that were handed a QoS isolation
  tier::TierOptions last_options;  // of the last create
  absl::Status create_error;       // what the next creates fail with
  // Machine snapshots (a tier whose traits offer them): what SaveMachine
  // fails with, and what the creates were given.
  absl::Status save_error;
  std::vector<tier::CreateSpec> creates;
  // `spawn`: runs this before it reports its process made; kills counts
  // the sandbox's KillExecs.
  std::function<void()> before_spawn;
  std::atomic<int> kills{0};
  // `meet`: waits up to 500 ms for another `meet` to be running too.
  std::mutex meet_mu;
  std::condition_variable meet_cv;
  int meeting = 0;    // running now; guarded by meet_mu
  int meet_peak = 0;  // most ever running at once; guarded by meet_mu
  // `hold`: runs until `release` or a KillExecs (guarded by meet_mu).
  int holding = 0;
  bool release = false;
};

using tier::ExecOutcome;
using tier::ExecSpec;
using tier::FileEntry;
using tier::TierSandbox;

// Its "machine" is a string: `remember X` sets it, `recall` prints it;
// SaveMachine writes it into the directory, a create from there reads it.
class FakeSandbox : public TierSandbox {
 public:
  explicit FakeSandbox(FakeState* s, std::string machine = "") : s_(s), machine_(std::move(machine)) {
    s_->live++;
  }
  ~FakeSandbox() override { (void)Destroy(); }
  absl::StatusOr<tier::MachineSaved> SaveMachine(const std::string& dest_dir) override {
    DSEC_RETURN_IF_ERROR(s_->save_error);
    DSEC_RETURN_IF_ERROR(dsec::WriteFile(dest_dir + "/memory", machine_, 0400));
    return tier::MachineSaved{machine_.size(), machine_.size(), 0.5};
  }
  absl::StatusOr<ExecOutcome> Exec(const ExecSpec& spec) override {
    ExecOutcome o;
    o.exit_code = 0;
    if (spec.argv.size() == 2 && spec.argv[0] == "remember") {
      machine_ = spec.argv[1];
      return o;
    }
    if (spec.argv.size() == 1 && spec.argv[0] == "spawn") {
      if (s_->before_spawn) s_->before_spawn();
      const int before = s_->kills;
      if (spec.on_spawned) spec.on_spawned();
      o.stdout_data = s_->kills > before ? "killed at spawn" : "ran";
      return o;
    }
    if (spec.argv.size() == 1 && spec.argv[0] == "meet") {
      std::unique_lock<std::mutex> lock(s_->meet_mu);
      s_->meet_peak = std::max(s_->meet_peak, ++s_->meeting);
      s_->meet_cv.notify_all();
      const bool met = s_->meet_cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return s_->meet_peak >= 2; });
      --s_->meeting;
      o.stdout_data = met ? "met" : "alone";
      return o;
    }
    if (spec.argv.size() == 1 && spec.argv[0] == "hold") {
      // Runs until released or killed (KillExecs), 10 s at most.
      std::unique_lock<std::mutex> lock(s_->meet_mu);
      ++s_->holding;
      s_->meet_cv.notify_all();
      const int kills = s_->kills;
      const bool ended = s_->meet_cv.wait_for(lock, std::chrono::seconds(10),
                                              [&] { return s_->release || s_->kills > kills; });
      --s_->holding;
      o.stdout_data = !ended ? "timeout" : s_->release ? "released" : "killed";
      return o;
    }
    if (spec.argv.size() == 1 && spec.argv[0] == "recall") {
      o.stdout_data = machine_;
      return o;
    }
    if (!spec.argv.empty() && spec.argv[0] == "emit") {
      // Each further argument is one piece of live stdout.
      ++s_->runs;
      for (size_t i = 1; i < spec.argv.size(); ++i) {
        if (spec.on_output) spec.on_output(1, spec.argv[i]);
        o.stdout_data += spec.argv[i];
      }
      return o;
    }
    o.stdout_data = absl::StrCat(absl::StrJoin(spec.argv, " "), " run=", ++s_->runs);
    o.stderr_data = "\xff\xfe";  // not UTF-8
    return o;
  }
  absl::Status Pause() override { return absl::OkStatus(); }
  absl::Status Resume() override { return absl::OkStatus(); }
  absl::StatusOr<std::string> ReadFile(const std::string&, uint64_t) override { return absl::NotFoundError("x"); }
  // "/hold": written like a `hold` command (the container tier's writes
  // are made by a process of the sandbox), until released or killed.
  absl::Status WriteFile(const std::string& path, const std::string&, uint32_t) override {
    if (path != "/hold") return absl::OkStatus();
    std::unique_lock<std::mutex> lock(s_->meet_mu);
    ++s_->holding;
    s_->meet_cv.notify_all();
    const int kills = s_->kills;
    const bool ended =
        s_->meet_cv.wait_for(lock, std::chrono::seconds(10), [&] { return s_->release || s_->kills > kills; });
    --s_->holding;
    if (!ended) return absl::DeadlineExceededError("held write: timeout");
    return s_->release ? absl::OkStatus() : absl::AbortedError("held write: killed");
  }
  absl::StatusOr<std::vector<FileEntry>> ListDir(const std::string&) override { return std::vector<FileEntry>{}; }
  absl::StatusOr<std::string> UpperDir() override { return absl::FailedPreconditionError("fake"); }
  bool KillExecs() override {
    std::lock_guard<std::mutex> lock(s_->meet_mu);
    s_->kills++;
    s_->meet_cv.notify_all();
    return true;
  }
  absl::Status Destroy() override {
    if (!destroyed_) s_->live--;
    destroyed_ = true;
    return absl::OkStatus();
  }

 private:
  FakeState* s_;
  std::string machine_;
  bool destroyed_ = false;
};

// A tier named "container" by default, taking no options of its own.
class FakeTier : public tier::Tier {
 public:
  explicit FakeTier(FakeState* s, tier::TierTraits traits = ContainerLike()) : s_(s), traits_(std::move(traits)) {}
  static tier::TierTraits ContainerLike() {
    tier::TierTraits t;
    t.name = "container";
    t.default_layers = [](const tier::TierOptions&) { return std::vector<std::string>{"base:bookworm"}; };
    return t;
  }
  const tier::TierTraits& traits() const override { return traits_; }
  absl::StatusOr<std::unique_ptr<TierSandbox>> Create(const tier::CreateSpec& spec) override {
    if (!s_->create_error.ok()) return s_->create_error;
    if (spec.isolation) s_->isolated++;
    s_->last_options = spec.options;
    s_->creates.push_back(spec);
    std::string machine;
    if (!spec.machine.empty()) {
      DSEC_ASSIGN_OR_RETURN(machine, dsec::ReadFile(spec.machine + "/memory"));
    }
    return std::unique_ptr<TierSandbox>(new FakeSandbox(s_, machine));
  }
  absl::StatusOr<int> CleanupOrphans() override { return 0; }
  std::string MetricsText() const override {
    return absl::StrCat("dsec_", traits_.name, "_fake_figure 7\n");
  }

 private:
  FakeState* s_;
  tier::TierTraits traits_;
};

class ServiceUnitTest : public ::testing::Test {
 protected:
  // A `hold` command (or "/hold" write) is running: within 10 s.
  bool OneHolds() {
    std::unique_lock<std::mutex> lock(state_.meet_mu);
    return state_.meet_cv.wait_for(lock, std::chrono::seconds(10), [&] { return state_.holding == 1; });
  }
  void SetUp() override {
    auto dir = container::testing::TempDir::Create("dsec-daemon-unit-");
    ASSERT_TRUE(dir.ok());
    dir_.emplace(std::move(*dir));
  }
  std::unique_ptr<Service> Make(int max_sandboxes = 8, bool reaper = false,
                                std::shared_ptr<QosPlacer> qos = nullptr,
                                const Clock* wall_clock = nullptr,
                                tier::TierTraits traits = FakeTier::ContainerLike()) {
    ServiceOptions o;
    o.wall_clock = wall_clock;
    o.qos = std::move(qos);
    o.max_sandboxes = max_sandboxes;
    o.start_reaper = reaper;
    o.unavailable_tiers.emplace("fullvm", "not built here");
    o.resolve_layers = [](const std::string&, const std::vector<std::string>& refs)
        -> absl::StatusOr<std::vector<std::string>> {
      for (const auto& r : refs) {
        if (r == "missing:1") return absl::NotFoundError("no layer missing:1");
      }
      return std::vector<std::string>{"/fake.erofs"};
    };
    std::vector<std::unique_ptr<tier::Tier>> tiers;
    tiers.push_back(std::make_unique<FakeTier>(&state_, std::move(traits)));
    auto store = trajectory::TrajectoryStore::Open(dir_->path() + "/trj", {});
    EXPECT_TRUE(store.ok());
    return std::make_unique<Service>(o, std::move(tiers), std::move(*store));
  }
  // A "microvm" tier with machine snapshots, a snapshot directory, and
  // layers that resolve to image_ (a file of the temp dir; tests move it).
  std::unique_ptr<Service> MakeMachines() {
    ServiceOptions o;
    o.start_reaper = false;
    o.snapshot_dir = dir_->path() + "/snapshots";
    o.resolve_layers = [this](const std::string&, const std::vector<std::string>&)
        -> absl::StatusOr<std::vector<std::string>> { return std::vector<std::string>{image_}; };
    if (image_.empty()) {
      image_ = dir_->path() + "/a.erofs";
      EXPECT_TRUE(dsec::WriteFile(image_, "a").ok());
    }
    tier::TierTraits t = FakeTier::ContainerLike();
    t.name = "microvm";
    t.machine_snapshots = true;
    std::vector<std::unique_ptr<tier::Tier>> tiers;
    tiers.push_back(std::make_unique<FakeTier>(&state_, t));
    auto store = trajectory::TrajectoryStore::Open(dir_->path() + "/trj", {});
    EXPECT_TRUE(store.ok());
    return std::make_unique<Service>(o, std::move(tiers), std::move(*store));
  }
  std::string Machines() const { return dir_->path() + "/snapshots/machines"; }
  // The entries of a directory ("" if it is missing), sorted.
  static std::string Entries(const std::string& dir) {
    absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir);
    if (!names.ok()) return "";
    std::sort(names->begin(), names->end());
    return absl::StrJoin(*names, ",");
  }
  std::string Recall(Service& svc, const json& id) {
    absl::StatusOr<json> r = svc.Exec(id, {{"argv", {"recall"}}});
    return r.ok() ? (*r)["stdout"].get<std::string>() : r.status().ToString();
  }

  FakeState state_;
  std::optional<container::testing::TempDir> dir_;
  std::string image_;
};

std::string FieldName(const absl::StatusOr<json>& r) { return dsec::FieldOf(r.status()).value_or(""); }

TEST_F(ServiceUnitTest, ValidationErrorsNameTheField) {
  auto svc = Make();
  EXPECT_EQ(FieldName(svc->Create(json::object())), "tier");
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"memory_mib", "big"}})), "memory_mib");
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"memory_mib", 1}})), "memory_mib");
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"qos", "fast"}})), "qos");
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"task_id", "../x"}})), "task_id");
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"bogus", 1}})), "bogus");
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"layers", {"missing:1"}}})), "layers");
  // A tier the node lists as unavailable is 503 with the reason; one it does
  // not know is bad input naming the tiers it offers.
  auto fullvm = svc->Create({{"tier", "fullvm"}});
  EXPECT_EQ(fullvm.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(fullvm.status().message().find("not built here"), absl::string_view::npos);
  auto fncall = svc->Create({{"tier", "fncall"}});
  EXPECT_EQ(FieldName(fncall), "tier");
  EXPECT_NE(fncall.status().message().find("one of container"), absl::string_view::npos) << fncall.status();
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"lang", "python"}})), "lang");
  EXPECT_EQ(FieldName(svc->Create({{"tier", "container"}, {"user_namespace", "yes"}})), "user_namespace");
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string id = (*sb)["id"];
  EXPECT_EQ(FieldName(svc->Exec(id, json::object())), "argv");
  EXPECT_EQ(FieldName(svc->Exec(id, {{"argv", {"true"}}, {"timeout_s", 0}})), "timeout_s");
  EXPECT_EQ(FieldName(svc->Exec(id, {{"argv", {"true"}}, {"cwd", "rel"}})), "cwd");
  EXPECT_EQ(FieldName(svc->Exec(id, {{"argv", {"true"}}, {"stdin_b64", "!!"}})), "stdin_b64");
  EXPECT_EQ(FieldName(svc->Exec(id, {{"argv", {"true"}}, {"env", {{"A=B", "x"}}}})), "env");
  EXPECT_EQ(svc->Exec("sb-nope", {{"argv", {"true"}}}).status().code(), absl::StatusCode::kNotFound);
  // Nothing was left behind by the refused requests.
  EXPECT_EQ(svc->sandbox_count(), 1);
  EXPECT_EQ(state_.live.load(), 1);
}

// A failed host-side operation is answered without the daemon's paths
// (they go to the log), keeping its code.
TEST_F(ServiceUnitTest, HostPathsOfTierErrorsStayInTheLog) {
  auto svc = Make();
  state_.create_error = absl::InvalidArgumentError(
      "write \"100\" to /sys/fs/cgroup/cpu/dsec-ctr-sb-1/cpu.cfs_quota_us: Invalid argument (errno 22)");
  auto r = svc->Create({{"tier", "container"}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_EQ(r.status().message(), "write \"100\" to <host path>: Invalid argument (errno 22)");
  EXPECT_EQ(svc->sandbox_count(), 0);
}

// A tier that cannot watch directories (TierSandbox's default) is named
// in the refusal; an unknown sandbox is not found.
TEST_F(ServiceUnitTest, WatchDirOnATierThatCannotWatchNamesIt) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  auto w = svc->WatchDir((*sb)["id"], "/", true);
  EXPECT_TRUE(absl::IsUnimplemented(w.status())) << w.status();
  EXPECT_EQ(w.status().message(), "the container tier cannot watch directories");
  EXPECT_TRUE(absl::IsNotFound(svc->WatchDir("sb-0000000000000000", "/", false).status()));
  svc->DestroyAll();
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

// A node made small (two network namespaces' worth): the third create is
// refused with the resource named and nothing made; a failed create or a
// delete gives its share back.
TEST_F(ServiceUnitTest, AFullNodeRefusesWithTheResourceNamedAndRecovers) {
  CapacityOptions o;
  o.read = [] {
    HostReadings h;
    h[Resource::kNetns] = {std::nullopt, 1000, "fake"};
    return h;
  };
  o.limits[Resource::kNetns] = 66;  // 64 kept free
  auto capacity = std::make_shared<NodeCapacity>(std::move(o));
  tier::TierTraits traits = FakeTier::ContainerLike();
  traits.footprint.netns = 1;
  ServiceOptions so;
  so.start_reaper = false;
  so.capacity = capacity;
  so.resolve_layers = [](const std::string&, const std::vector<std::string>&)
      -> absl::StatusOr<std::vector<std::string>> { return std::vector<std::string>{"/fake.erofs"}; };
  std::vector<std::unique_ptr<tier::Tier>> tiers;
  tiers.push_back(std::make_unique<FakeTier>(&state_, traits));
  auto svc = std::make_unique<Service>(so, std::move(tiers), nullptr);
  std::vector<std::string> ids;

  state_.create_error = absl::InternalError("tier failed");
  EXPECT_FALSE(svc->Create({{"tier", "container"}}).ok());  // its reservation goes back
  state_.create_error = absl::OkStatus();
  for (int i = 0; i < 2; ++i) {
    auto r = svc->Create({{"tier", "container"}});
    ASSERT_TRUE(r.ok()) << r.status();
    ids.push_back((*r)["id"]);
  }
  auto full = svc->Create({{"tier", "container"}});
  ASSERT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(HttpStatusFor(full.status().code()), 429);
  EXPECT_NE(full.status().message().find("netns: 2 in use + 1 for this container sandbox"), std::string::npos)
      << full.status();
  EXPECT_EQ(state_.live.load(), 2);
  json health = svc->Health();
  EXPECT_EQ(health["capacity"]["resources"]["netns"]["used"], 2);
  EXPECT_EQ(health["capacity"]["resources"]["netns"]["refused"], 1);
  EXPECT_EQ(health["capacity"]["sandboxes_more"]["container"]["sandboxes"], 0);
  EXPECT_NE(svc->MetricsText().find("dsec_capacity_refused_total{resource=\"netns\"} 1"), std::string::npos);
  ASSERT_TRUE(svc->Delete(ids[0]).ok());
  EXPECT_TRUE(svc->Create({{"tier", "container"}}).ok());
  svc->DestroyAll();
  EXPECT_EQ(svc->Health()["capacity"]["resources"]["netns"]["used"], 0);
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
  EXPECT_EQ(h["tiers"]["container"], true);
  EXPECT_EQ(h["tiers"]["fullvm"], false);
  EXPECT_EQ(h["tiers_unavailable"]["fullvm"], "not built here");
  EXPECT_FALSE(h["tiers"].contains("microvm")) << "only the tiers this node registers";
}

// A second fake tier that runs scripts and takes a "lang"; the first one
// gets a shown option of its own ("flag", neutral false).
TEST_F(ServiceUnitTest, TierOptionsComeFromTheTiersTraits) {
  tier::TierTraits script;
  script.name = "script";
  tier::OptionSpec lang;
  lang.name = "lang";
  lang.choices = {"a", "b"};
  lang.default_value = "a";
  script.options = {lang};
  script.exec_form = tier::TierTraits::ExecForm::kCode;
  script.default_layers = [](const tier::TierOptions& o) {
    return std::vector<std::string>{tier::OptionString(o, "lang") + ":1"};
  };
  script.recorded_command = [](const tier::TierOptions& o, const ExecSpec& spec) {
    return std::vector<std::string>{tier::OptionString(o, "lang"), "-c", spec.code};
  };
  tier::TierTraits container = FakeTier::ContainerLike();
  tier::OptionSpec flag;
  flag.name = "flag";
  flag.type = tier::OptionSpec::Type::kBool;
  flag.default_value = false;
  flag.neutral = false;
  flag.shown = true;
  container.options = {flag};
  FakeState other;
  ServiceOptions o;
  o.start_reaper = false;
  o.resolve_layers = [](const std::string&, const std::vector<std::string>&)
      -> absl::StatusOr<std::vector<std::string>> { return std::vector<std::string>{"/fake.erofs"}; };
  std::vector<std::unique_ptr<tier::Tier>> tiers;
  tiers.push_back(std::make_unique<FakeTier>(&state_, container));
  tiers.push_back(std::make_unique<FakeTier>(&other, script));
  auto store = trajectory::TrajectoryStore::Open(dir_->path() + "/trj", {});
  ASSERT_TRUE(store.ok());
  Service svc(o, std::move(tiers), std::move(*store));

  auto sb = svc.Create({{"tier", "script"}, {"lang", "b"}, {"flag", false}, {"task_id", "opt"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(other.last_options, json({{"lang", "b"}})) << "the tier gets its own options only";
  EXPECT_EQ((*sb)["layers"], json({"b:1"})) << "the tier's default layers, from its options";
  EXPECT_EQ((*sb)["flag"], false) << "a shown option appears for every sandbox";
  EXPECT_FALSE(sb->contains("lang")) << "an option not shown stays out of GET";
  auto r = svc.Exec((*sb)["id"], {{"code", "x"}});
  ASSERT_TRUE(r.ok()) << r.status();
  auto log = svc.TaskLog("opt");
  ASSERT_TRUE(log.ok());
  EXPECT_EQ((*log)["records"][0]["argv"], json({"b", "-c", "x"})) << "recorded as the tier says";
  EXPECT_EQ(FieldName(svc.Exec((*sb)["id"], {{"argv", {"x"}}})), "code");

  auto flagged = svc.Create({{"tier", "container"}, {"flag", true}});
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  EXPECT_EQ((*flagged)["flag"], true);
  EXPECT_EQ(state_.last_options, json({{"flag", true}}));
  EXPECT_EQ(FieldName(svc.Create({{"tier", "container"}, {"lang", "a"}})), "lang");
  auto refused = svc.Create({{"tier", "script"}, {"flag", true}});
  EXPECT_EQ(FieldName(refused), "flag");
  EXPECT_EQ(refused.status().message(), "the script tier takes no flag");
  EXPECT_EQ(FieldName(svc.Create({{"tier", "script"}, {"lang", "c"}})), "lang");
  EXPECT_EQ(FieldName(svc.Create({{"tier", "script"}, {"colour", "red"}})), "colour");

  // Metrics: per registered tier, and each tier's own lines.
  const std::string m = svc.MetricsText();
  EXPECT_NE(m.find("dsec_sandboxes{tier=\"script\",state=\"running\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("dsec_execs_total{tier=\"script\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("dsec_script_fake_figure 7\n"), std::string::npos) << m;
  EXPECT_NE(m.find("dsec_container_fake_figure 7\n"), std::string::npos) << m;
  svc.DestroyAll();
}

TEST_F(ServiceUnitTest, TtlReaperDestroysExpiredSandboxes) {
  // Wall time from a fake clock; the reaper's pass is called directly.
  FakeClock clock(1'700'000'000'000'000'000);
  auto svc = Make(8, /*reaper=*/false, nullptr, &clock);
  auto sb = svc->Create({{"tier", "container"}, {"ttl_s", 1}});
  ASSERT_TRUE(sb.ok());
  auto keep = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(keep.ok());
  const int64_t expires = (*sb)["expires_unix_ms"];
  EXPECT_EQ((*sb)["created_unix_ms"].get<int64_t>(), 1'700'000'000'000);
  EXPECT_EQ(expires, (*sb)["created_unix_ms"].get<int64_t>() + 1000);
  clock.AdvanceNs(999'000'000);
  EXPECT_EQ(svc->ReapExpired(), 0) << "not before its TTL";
  EXPECT_EQ(svc->sandbox_count(), 2);
  clock.AdvanceNs(1'000'000);
  EXPECT_EQ(svc->ReapExpired(), 1);
  EXPECT_EQ(svc->sandbox_count(), 1);
  EXPECT_EQ(svc->Get((*sb)["id"]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(svc->Get((*keep)["id"]).ok());
  EXPECT_EQ(state_.live.load(), 1);
}

// A placer over a fake machine. Core scheduling through fake prctl ops
// stands in for the isolation (no cgroups are touched); the placement is
// the real engine's.
std::shared_ptr<QosPlacer> FakeMachinePlacer(const sched::testing::FakeMachine& m,
                                            sched::testing::FakeSchedCoreOps* ops) {
  sched::testing::TempDir root;
  sched::testing::WriteFakeSysfs(root.path(), m);
  sched::CgroupLayout layout;  // unused: core scheduling works
  return QosPlacer::Create(sched::Topology::Read(root.path()),
                           sched::Isolator::CreateWith({}, *ops, layout, "0::/\n"));
}

std::vector<int> CpusOf(const json& sb) {
  return sb["placement"].is_null() ? std::vector<int>{} : sb["placement"]["cpus"].get<std::vector<int>>();
}

TEST_F(ServiceUnitTest, QosPlacesLsOnWholeCoresAndBeOffThem) {
  // One package, 4 cores, SMT-2: cpu N and N+4 are siblings.
  sched::testing::FakeSchedCoreOps ops;
  auto svc = Make(8, false, FakeMachinePlacer({.cores_per_package = 4, .threads_per_core = 2}, &ops));
  auto ls = svc->Create({{"tier", "container"}, {"qos", "ls"}});
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_TRUE((*ls)["qos_applied"].get<bool>()) << *ls;
  EXPECT_EQ(CpusOf(*ls), (std::vector<int>{0, 4}));  // a whole core, both siblings
  auto be = svc->Create({{"tier", "container"}, {"qos", "be"}});
  ASSERT_TRUE(be.ok());
  EXPECT_TRUE((*be)["qos_applied"].get<bool>());
  EXPECT_EQ(CpusOf(*be), (std::vector<int>{3}));  // from the far end, no LS sibling
  auto ls2 = svc->Create({{"tier", "container"}, {"qos", "ls"}, {"cpus", 2}});
  ASSERT_TRUE(ls2.ok());
  EXPECT_EQ(CpusOf(*ls2), (std::vector<int>{1, 5}));
  // 4 CPUs on whole cores: only core 2 is free (core 3 holds BE). The
  // create still succeeds, unplaced, and says why.
  auto big = svc->Create({{"tier", "container"}, {"qos", "ls"}, {"cpus", 4}});
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_FALSE((*big)["qos_applied"].get<bool>());
  EXPECT_TRUE((*big)["placement"].is_null());
  EXPECT_NE((*big)["qos_reason"].get<std::string>().find("whole physical cores"), std::string::npos)
      << (*big)["qos_reason"];
  auto none = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)["qos_applied"].get<bool>());
  EXPECT_TRUE((*none)["qos_reason"].is_null());
  EXPECT_EQ(state_.isolated.load(), 3);
  const std::string m = svc->MetricsText();
  EXPECT_NE(m.find("dsec_sandboxes_qos{qos=\"ls\",applied=\"true\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("dsec_sandboxes_qos{qos=\"ls\",applied=\"false\"} 1"), std::string::npos);
  EXPECT_NE(m.find("dsec_sandboxes_qos{qos=\"be\",applied=\"true\"} 1"), std::string::npos);
  EXPECT_NE(m.find("dsec_sandboxes_qos{qos=\"none\",applied=\"false\"} 1"), std::string::npos);
  EXPECT_NE(m.find("dsec_qos_placement_available 1"), std::string::npos);
  // Delete releases the core: the next LS sandbox gets it.
  ASSERT_TRUE(svc->Delete((*ls)["id"]).ok());
  auto again = svc->Create({{"tier", "container"}, {"qos", "ls"}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(CpusOf(*again), (std::vector<int>{0, 4}));
  auto got = svc->Get((*again)["id"]);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["placement"]["qos"], "ls");
  EXPECT_EQ((*got)["placement"]["mechanism"], "core-sched");
}

TEST_F(ServiceUnitTest, QosOnTwoCoresWithoutSmtSeparatesLsAndBe) {
  // The CI host's shape: LS takes cpu0, BE cpu1; a second LS finds no
  // whole core free of BE and runs unplaced; BE sandboxes share cpu1.
  sched::testing::FakeSchedCoreOps ops;
  auto svc = Make(8, false, FakeMachinePlacer({.cores_per_package = 2}, &ops));
  auto ls = svc->Create({{"tier", "container"}, {"qos", "ls"}});
  auto be = svc->Create({{"tier", "container"}, {"qos", "be"}});
  auto ls2 = svc->Create({{"tier", "container"}, {"qos", "ls"}});
  auto be2 = svc->Create({{"tier", "container"}, {"qos", "be"}});
  ASSERT_TRUE(ls.ok() && be.ok() && ls2.ok() && be2.ok());
  EXPECT_EQ(CpusOf(*ls), std::vector<int>{0});
  EXPECT_EQ(CpusOf(*be), std::vector<int>{1});
  EXPECT_FALSE((*ls2)["qos_applied"].get<bool>());
  EXPECT_EQ(CpusOf(*be2), std::vector<int>{1});
}

TEST_F(ServiceUnitTest, QosUnavailableIsReportedNotFatal) {
  auto svc = Make(8, false, QosPlacer::Unavailable("no cpuset controller here"));
  auto sb = svc->Create({{"tier", "container"}, {"qos", "be"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_FALSE((*sb)["qos_applied"].get<bool>());
  EXPECT_EQ((*sb)["qos_reason"], "no cpuset controller here");
  EXPECT_EQ(svc->Health()["qos"]["available"], false);
  auto plain = Make();  // no placer at all
  auto p = plain->Create({{"tier", "container"}, {"qos", "ls"}});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE((*p)["qos_reason"].is_null());
  EXPECT_EQ(state_.isolated.load(), 0);
}

// Drains a streamed exec: the output lines' bytes, and the last line.
struct Drained {
  std::string out;
  std::vector<std::string> pieces;
  json last;
};
Drained DrainStream(StreamedExec& s) {
  Drained d;
  std::string line;
  while (s.NextLine(&line)) {
    EXPECT_EQ(line.back(), '\n');
    json j = json::parse(line);
    if (j.contains("stream")) {
      d.pieces.push_back(Base64Decode(j["data_b64"]).value_or("<bad>"));
      d.out += d.pieces.back();
    } else {
      d.last = j;
    }
  }
  return d;
}

TEST_F(ServiceUnitTest, StreamedExecSendsLiveOutputThenTheResult) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}, {"task_id", "st"}});
  ASSERT_TRUE(sb.ok());
  auto s = StreamedExec::Start(svc.get(), (*sb)["id"], {{"argv", {"emit", "ab", "cd"}}});
  ASSERT_TRUE(s->WaitStarted().ok());
  Drained d = DrainStream(*s);
  EXPECT_EQ(d.out, "abcd");
  EXPECT_EQ(d.last["exit"]["exit_code"], 0);
  EXPECT_EQ(d.last["exit"]["seq"], 0);
  EXPECT_EQ(d.last["deferred_bytes"], 0);
  EXPECT_FALSE(d.last["exit"].contains("stdout_b64"));
  // Recorded as the plain exec records it.
  auto log = svc->TaskLog("st");
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(Base64Decode((*log)["records"][0]["stdout_b64"]).value_or(""), "abcd");
}

TEST_F(ServiceUnitTest, StreamedExecDefersWhatTheBoundHoldsBack) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok());
  // Nobody reads until the exec is over: 5 bytes fit the live buffer,
  // the rest of stdout comes from the result, in order, after the end.
  StreamOptions o;
  o.live_buffer_bytes = 5;
  o.max_line_bytes = 4;
  auto s = StreamedExec::Start(svc.get(), (*sb)["id"], {{"argv", {"emit", "abc", "de", "fghij", "k"}}}, o);
  ASSERT_TRUE(s->WaitStarted().ok());
  ASSERT_TRUE(svc->Exec((*sb)["id"], {{"argv", {"true"}}}).ok());  // waits for the streamed one
  Drained d = DrainStream(*s);
  EXPECT_EQ(d.out, "abcdefghijk");
  EXPECT_EQ(d.pieces, (std::vector<std::string>{"abcd", "e", "fghi", "jk"}));
  EXPECT_EQ(d.last["deferred_bytes"], 6);
}

TEST_F(ServiceUnitTest, StreamedExecErrorsBeforeAndAfterTheStart) {
  auto svc = Make();
  auto bad = StreamedExec::Start(svc.get(), "sb-none", {{"argv", {"x"}}});
  EXPECT_EQ(bad->WaitStarted().code(), absl::StatusCode::kNotFound);
  auto sb = svc->Create({{"tier", "container"}, {"task_id", "rp"}});
  ASSERT_TRUE(sb.ok());
  ASSERT_TRUE(svc->Exec((*sb)["id"], {{"argv", {"echo", "r"}}}).ok());
  ASSERT_TRUE(svc->Delete((*sb)["id"]).ok());
  // A replayed exec streams its recorded output (deferred: never live).
  auto resumed = svc->ResumeTask("rp", {{"tier", "container"}});
  ASSERT_TRUE(resumed.ok());
  auto s = StreamedExec::Start(svc.get(), (*resumed)["id"], {{"argv", {"echo", "r"}}});
  ASSERT_TRUE(s->WaitStarted().ok());
  Drained d = DrainStream(*s);
  EXPECT_EQ(d.out, "echo r run=1\xff\xfe");  // stdout, then the fake's stderr
  EXPECT_TRUE(d.last["exit"]["replayed"].get<bool>());
  EXPECT_EQ(d.last["deferred_bytes"], 12 + 2);  // the fake's stdout and its 2 stderr bytes
}

TEST_F(ServiceUnitTest, AMachineForkContinuesEveryChildFromTheSavedMachine) {
  auto svc = MakeMachines();
  auto src = svc->Create({{"tier", "microvm"}, {"memory_mib", 300}});
  ASSERT_TRUE(src.ok()) << src.status();
  const json sid = (*src)["id"];
  ASSERT_TRUE(svc->Exec(sid, {{"argv", {"remember", "state-1"}}}).ok());
  // Each sandbox got a staging directory of its own for saves.
  ASSERT_EQ(state_.creates.size(), 1u);
  EXPECT_EQ(state_.creates[0].machine_staging, Machines() + "/staging/" + sid.get<std::string>());
  EXPECT_TRUE(state_.creates[0].machine.empty());

  // A tag that moves after the source was made does not reach the children:
  // they map the very images the source did.
  const std::string source_image = image_;
  image_ = dir_->path() + "/b.erofs";
  ASSERT_TRUE(dsec::WriteFile(image_, "b").ok());
  auto fork = svc->Fork(sid, {{"count", 3}});
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ((*fork)["forked"], "machine");
  EXPECT_NE((*fork)["processes"].get<std::string>().find("carried"), std::string::npos);
  EXPECT_TRUE((*fork)["layer"].is_null());
  ASSERT_EQ((*fork)["sandboxes"].size(), 3u);
  ASSERT_EQ(state_.creates.size(), 4u);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_FALSE(state_.creates[i].machine.empty());
    EXPECT_EQ(state_.creates[i].images, std::vector<std::string>{source_image});
    EXPECT_EQ(state_.creates[i].memory_mib, 300u);
  }
  // The saved machine went once the children had started from it; what
  // is left is each sandbox's staging directory.
  EXPECT_EQ(Entries(Machines()), "staging");
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(Entries(Machines() + "/staging"), ',')).size(), 4u);

  // Each child continues from the source's state, on its own from there.
  std::vector<json> children;
  for (const json& c : (*fork)["sandboxes"]) children.push_back(c["id"]);
  for (const json& c : children) EXPECT_EQ(Recall(*svc, c), "state-1");
  ASSERT_TRUE(svc->Exec(children[0], {{"argv", {"remember", "child-0"}}}).ok());
  ASSERT_TRUE(svc->Exec(sid, {{"argv", {"remember", "source-2"}}}).ok());
  EXPECT_EQ(Recall(*svc, children[0]), "child-0");
  EXPECT_EQ(Recall(*svc, children[1]), "state-1");
  EXPECT_EQ(Recall(*svc, sid), "source-2");
  // A child forks again.
  auto grandchildren = svc->Fork(children[0], {{"count", 1}});
  ASSERT_TRUE(grandchildren.ok()) << grandchildren.status();
  EXPECT_EQ(Recall(*svc, (*grandchildren)["sandboxes"][0]["id"]), "child-0");
  svc->DestroyAll();
}

TEST_F(ServiceUnitTest, AMachineForkThatFailsLeavesNothing) {
  auto svc = MakeMachines();
  auto src = svc->Create({{"tier", "microvm"}});
  ASSERT_TRUE(src.ok()) << src.status();
  const json sid = (*src)["id"];
  // The children cannot be made: the saved machine goes with the fork.
  state_.create_error = absl::ResourceExhaustedError("no room");
  auto fork = svc->Fork(sid, {{"count", 2}});
  EXPECT_FALSE(fork.ok());
  EXPECT_EQ(svc->List()["sandboxes"].size(), 1u);
  EXPECT_EQ(Entries(Machines()), "staging");
  EXPECT_EQ(Entries(Machines() + "/staging"), sid.get<std::string>());
  state_.create_error = absl::OkStatus();

  // A save the tier refuses (a microVM started without staging, say) falls back to
  // the files, which need a layer store this daemon lacks: the answer says
  // so and no machine is left behind.
  state_.save_error = absl::FailedPreconditionError("this microVM was started without a directory to save it into");
  fork = svc->Fork(sid, {{"count", 1}});
  EXPECT_TRUE(absl::IsUnavailable(fork.status())) << fork.status();
  EXPECT_NE(fork.status().message().find("layer store"), std::string::npos) << fork.status();
  auto snap = svc->Snapshot(sid, json::object());
  EXPECT_TRUE(absl::IsUnavailable(snap.status())) << snap.status();
  EXPECT_EQ(Entries(Machines()), "staging");
  svc->DestroyAll();
}

TEST_F(ServiceUnitTest, AMachineSnapshotOutlivesTheDaemonAndGoesWithItsDelete) {
  std::string snapshot_id;
  {
    auto svc = MakeMachines();
    auto src = svc->Create({{"tier", "microvm"}, {"pids", 77}});
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_TRUE(svc->Exec((*src)["id"], {{"argv", {"remember", "saved"}}}).ok());
    auto snap = svc->Snapshot((*src)["id"], json::object());
    ASSERT_TRUE(snap.ok()) << snap.status();
    EXPECT_EQ((*snap)["captured"], "machine");
    EXPECT_EQ((*snap)["memory_bytes"], 5);
    EXPECT_TRUE((*snap)["layer"].is_null());
    snapshot_id = (*snap)["id"];
    EXPECT_EQ(Entries(Machines() + "/" + snapshot_id), "memory");
    // No layer store: nothing to keep from its gc.
    EXPECT_EQ((*snap)["pins"], json::array());
    // A daemon killed with a sandbox alive leaves its staging directory,
    // and one killed mid-fork or mid-snapshot a machine no record names.
    for (const char* orphan : {"/fork-sb-1-2", "/snap-00000000000000aa"}) {
      ASSERT_TRUE(dsec::MakeDirs(Machines() + orphan, 0700).ok());
      ASSERT_TRUE(dsec::WriteFile(Machines() + orphan + "/memory", "x").ok());
    }
    svc.release();
  }
  auto svc = MakeMachines();
  EXPECT_EQ(Entries(Machines()), snapshot_id)
      << "the killed daemon's staging, or a machine no snapshot names, was not removed";
  image_ = dir_->path() + "/moved.erofs";
  ASSERT_TRUE(dsec::WriteFile(image_, "m").ok());
  auto made = svc->Create({{"snapshot", snapshot_id}, {"ttl_s", 600}});
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(Recall(*svc, (*made)["id"]), "saved");
  EXPECT_EQ(state_.creates.back().pids, 77u);
  EXPECT_EQ(state_.creates.back().images, std::vector<std::string>{dir_->path() + "/a.erofs"});
  // An image the machine stands on that is gone is named.
  ASSERT_EQ(::unlink((dir_->path() + "/a.erofs").c_str()), 0);
  auto gone = svc->Create({{"snapshot", snapshot_id}});
  EXPECT_TRUE(absl::IsFailedPrecondition(gone.status())) << gone.status();
  EXPECT_NE(gone.status().message().find("layer gc"), std::string::npos) << gone.status();
  ASSERT_TRUE(svc->DeleteSnapshot(snapshot_id).ok());
  EXPECT_EQ(Entries(Machines()), "staging");
  EXPECT_FALSE(svc->Create({{"snapshot", snapshot_id}}).ok());
  svc->DestroyAll();
}

TEST_F(ServiceUnitTest, AKillBeforeTheCommandsProcessExistsReachesItOnceItDoes) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string id = (*sb)["id"];
  // The kill comes after the exec started, before its process was made
  // (an E2B client killing a command it just started).
  state_.before_spawn = [&] { EXPECT_TRUE(svc->KillExecs(id).ok()); };
  auto r = svc->Exec(id, {{"argv", {"spawn"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["stdout"], "killed at spawn");
  // It does not linger for the next exec, nor does a kill between execs.
  state_.before_spawn = nullptr;
  r = svc->Exec(id, {{"argv", {"spawn"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["stdout"], "ran");
  EXPECT_TRUE(svc->KillExecs(id).ok());
  r = svc->Exec(id, {{"argv", {"spawn"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["stdout"], "ran");
}

// Two `meet` execs on one sandbox, each on its own thread: what each said.
std::vector<std::string> MeetTwice(Service& svc, const std::string& id) {
  std::vector<std::string> said(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      auto r = svc.Exec(id, {{"argv", {"meet"}}});
      said[i] = r.ok() ? std::string((*r)["stdout"]) : r.status().ToString();
    });
  }
  for (std::thread& t : threads) t.join();
  return said;
}

TEST_F(ServiceUnitTest, ExecsOverlapOnATierWithConcurrentExecsButNotOnATasksSandbox) {
  tier::TierTraits traits = FakeTier::ContainerLike();
  traits.concurrent_execs = true;
  auto svc = Make(8, false, nullptr, nullptr, traits);
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(MeetTwice(*svc, (*sb)["id"]), (std::vector<std::string>{"met", "met"}));
  // A task's execs go one at a time: neither meets the other.
  state_.meet_peak = 0;
  auto task = svc->Create({{"tier", "container"}, {"task_id", "overlap-1"}});
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(MeetTwice(*svc, (*task)["id"]), (std::vector<std::string>{"alone", "alone"}));
  // A pause waits for the running execs and then holds the next ones off.
  ASSERT_TRUE(svc->Pause((*sb)["id"]).ok());
  auto paused = svc->Exec((*sb)["id"], {{"argv", {"meet"}}});
  EXPECT_TRUE(absl::IsFailedPrecondition(paused.status())) << paused.status();
  svc->DestroyAll();
}

// A write that its sandbox holds up (the container tier's writer is the
// sandbox's process, which the sandbox can stop) does not hold up a delete:
// it goes like a command, and the delete's kill of the sandbox's commands
// ends it (before, it held kill_mu, which that kill needs first).
TEST_F(ServiceUnitTest, AWriteItsSandboxHoldsUpDoesNotHoldUpADelete) {
  tier::TierTraits traits = FakeTier::ContainerLike();
  traits.concurrent_execs = true;
  traits.files_beside_exec = true;
  auto svc = Make(8, false, nullptr, nullptr, traits);
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string id = (*sb)["id"];
  absl::Status written;
  std::thread write([&] { written = svc->WriteFile(id, "/hold", "", "x"); });
  ASSERT_TRUE(OneHolds());
  // Beside it, commands still run.
  auto r = svc->Exec(id, {{"argv", {"echo", "beside"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(svc->Delete(id).ok());
  write.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(absl::IsAborted(written)) << written;
}

// On a tier whose execs overlap, pause, resume and delete do not wait for
// a running command: it is frozen (and thawed) with the sandbox, and a
// delete of the paused sandbox ends it. Elsewhere a pause waits for it.
TEST_F(ServiceUnitTest, PauseAndDeleteDoNotWaitForRunningCommandsWhereExecsOverlap) {
  tier::TierTraits traits = FakeTier::ContainerLike();
  traits.concurrent_execs = true;
  auto svc = Make(8, false, nullptr, nullptr, traits);
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  const std::string id = (*sb)["id"];
  std::string held;
  std::thread exec([&] {
    auto r = svc->Exec(id, {{"argv", {"hold"}}});
    held = r.ok() ? (*r)["stdout"].get<std::string>() : r.status().ToString();
  });
  ASSERT_TRUE(OneHolds());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(svc->Pause(id).ok());
  ASSERT_TRUE(svc->Resume(id).ok());
  ASSERT_TRUE(svc->Pause(id).ok());
  ASSERT_TRUE(svc->Delete(id).ok());  // paused, a command running: it ends it
  exec.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(held, "killed");

  // A tier whose execs go one at a time: the pause waits for the command.
  auto one = Make();
  auto sb2 = one->Create({{"tier", "container"}});
  ASSERT_TRUE(sb2.ok()) << sb2.status();
  const std::string id2 = (*sb2)["id"];
  state_.release = false;
  std::thread exec2([&] { (void)one->Exec(id2, {{"argv", {"hold"}}}); });
  ASSERT_TRUE(OneHolds());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::lock_guard<std::mutex> lock(state_.meet_mu);
    state_.release = true;
    state_.meet_cv.notify_all();
  });
  ASSERT_TRUE(one->Pause(id2).ok());
  {
    std::lock_guard<std::mutex> lock(state_.meet_mu);
    EXPECT_TRUE(state_.release);  // it waited for the command's end
    EXPECT_EQ(state_.holding, 0);
  }
  releaser.join();
  exec2.join();
  one->DestroyAll();
}

TEST_F(ServiceUnitTest, ExecsGoOneAtATimeOnATierWithoutConcurrentExecs) {
  auto svc = Make();
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ(MeetTwice(*svc, (*sb)["id"]), (std::vector<std::string>{"alone", "alone"}));
  svc->DestroyAll();
}

TEST_F(ServiceUnitTest, AnExecControlIsRefusedWhereTheTierOrATaskCannotHonourIt) {
  auto control = ExecControl::Create(true);
  ASSERT_TRUE(control.ok());
  ExecObserver observer;
  observer.control = *control;
  {
    auto svc = Make();
    auto sb = svc->Create({{"tier", "container"}});
    ASSERT_TRUE(sb.ok()) << sb.status();
    auto r = svc->Exec((*sb)["id"], {{"argv", {"true"}}}, &observer);
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("container tier"), std::string::npos) << r.status();
    svc->DestroyAll();
  }
  tier::TierTraits traits = FakeTier::ContainerLike();
  traits.exec_control = true;
  auto svc = Make(8, false, nullptr, nullptr, traits);
  auto task = svc->Create({{"tier", "container"}, {"task_id", "control-1"}});
  ASSERT_TRUE(task.ok()) << task.status();
  auto r = svc->Exec((*task)["id"], {{"argv", {"true"}}}, &observer);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  auto sb = svc->Create({{"tier", "container"}});
  ASSERT_TRUE(sb.ok()) << sb.status();
  r = svc->Exec((*sb)["id"], {{"argv", {"true"}}}, &observer);
  EXPECT_TRUE(r.ok()) << r.status();
  svc->DestroyAll();
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
