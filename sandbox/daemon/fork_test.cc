// SPDX-License-Identifier: Apache-2.0
// POST /v1/sandboxes/{id}/fork through the API (issue 20, the container
// tier's file-system fork), in the container tier's default mode and with
// user_namespace: children start from the source's files, each with its own
// writable layer, the source runs on, and bad requests are refused before
// anything is made.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/file_io.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/layers/layer_store.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;

constexpr char kJson[] = "application/json";

class DaemonForkTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeBusyboxSuiteDir("dsec-daemon-fork-", &dir_, &skip_).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Store() { return dir_->path() + "/store"; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    static int n = 0;
    run_dir_ = absl::StrCat(dir_->path(), "/run", n++);
    auto d = testing::LocalDaemon::Start(run_dir_, Store(), ServiceOptions{});
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = testing::UnixClient(daemon_->socket());
  }
  void TearDown() override {
    if (client_) {
      auto list = client_->Get("/v1/sandboxes");
      if (list) {
        for (const json& sb : testing::JsonOf(list)["sandboxes"]) {
          client_->Delete(absl::StrCat("/v1/sandboxes/", sb["id"].get<std::string>()));
        }
      }
    }
    client_.reset();
    daemon_.reset();
  }

  std::string NewSandbox(json body) {
    body["tier"] = body.value("tier", "container");
    if (body["tier"] == "container") body["user_namespace"] = GetParam();
    auto r = client_->Post("/v1/sandboxes", body.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 201) << r->body;
    return testing::JsonOf(r).value("id", "");
  }
  std::string Sh(const std::string& id, const std::string& script) {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"),
                           json{{"argv", {"sh", "-c", script}}}.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 200) << r->body;
    return testing::JsonOf(r).value("stdout", "");
  }
  httplib::Result Fork(const std::string& id, const json& body) {
    return client_->Post(absl::StrCat("/v1/sandboxes/", id, "/fork"), body.dump(), kJson);
  }
  size_t LiveSandboxes() {
    auto r = client_->Get("/v1/sandboxes");
    return r ? testing::JsonOf(r)["sandboxes"].size() : 0;
  }

  httplib::Result Post(const std::string& path, const json& body) {
    return client_->Post(path, body.dump(), kJson);
  }

  static TempDir* dir_;
  static std::string skip_;
  std::string run_dir_;
  std::unique_ptr<testing::LocalDaemon> daemon_;
  std::unique_ptr<httplib::Client> client_;
};
TempDir* DaemonForkTest::dir_ = nullptr;
std::string DaemonForkTest::skip_;

TEST_P(DaemonForkTest, ChildrenStartFromTheSourcesFilesAndStayIndependent) {
  const std::string src = NewSandbox(json{{"memory_mib", 96}, {"pids", 64}});
  ASSERT_FALSE(src.empty());
  // Files of this sandbox alone: the store would reuse an identical layer.
  ASSERT_EQ(Sh(src, absl::StrCat("mkdir -p /work && echo prepared > /work/state && echo ", src,
                                 " > /work/id && rm /etc/hostname; echo ok")),
            "ok\n");

  auto r = Fork(src, json{{"count", 3}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  json out = testing::JsonOf(r);
  EXPECT_EQ(out["source"], src);
  EXPECT_EQ(out["forked"], "files");
  EXPECT_NE(out["processes"].get<std::string>().find("not carried"), std::string::npos);
  ASSERT_TRUE(out["pause_ms"].is_number()) << r->body;  // the source's stand-still for the copy
  EXPECT_GE(out["pause_ms"].get<double>(), 0.0);
  ASSERT_EQ(out["sandboxes"].size(), 3u);
  std::vector<std::string> kids;
  std::set<std::string> distinct;
  for (const json& c : out["sandboxes"]) {
    kids.push_back(c["id"]);
    distinct.insert(c["id"].get<std::string>());
    EXPECT_EQ(c["tier"], "container");
    EXPECT_EQ(c["memory_mib"], 96) << c.dump();
    EXPECT_EQ(c["pids"], 64) << c.dump();
    EXPECT_EQ(c["user_namespace"], GetParam()) << c.dump();
  }
  EXPECT_EQ(distinct.size(), 3u);
  EXPECT_EQ(distinct.count(src), 0u);
  // The layer is in the store, listed like any other.
  auto layers = client_->Get("/v1/layers");
  ASSERT_TRUE(layers);
  EXPECT_NE(layers->body.find(absl::StrCat("fork-", src)), std::string::npos) << layers->body;

  // Each child has the source's files, deletions included.
  for (const std::string& k : kids) {
    EXPECT_EQ(Sh(k, "cat /work/state; test -e /etc/hostname && echo present || echo gone"),
              "prepared\ngone\n");
  }
  // A write in one child is seen by none of the others nor by the source;
  // the source's later writes reach no child.
  EXPECT_EQ(Sh(kids[0], "echo mine > /work/state && cat /work/state"), "mine\n");
  EXPECT_EQ(Sh(kids[1], "cat /work/state"), "prepared\n");
  EXPECT_EQ(Sh(src, "cat /work/state; echo later > /work/after; echo ok"), "prepared\nok\n");
  EXPECT_EQ(Sh(kids[2], "cat /work/after 2>/dev/null || echo absent"), "absent\n");

  // The source goes; the children run on.
  ASSERT_TRUE(client_->Delete(absl::StrCat("/v1/sandboxes/", src)));
  EXPECT_EQ(Sh(kids[1], "cat /work/state"), "prepared\n");
  // A child forks too (a fork of a fork stacks one layer more).
  auto again = Fork(kids[0], json{{"count", 1}});
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 201) << again->body;
  const std::string grandchild = testing::JsonOf(again)["sandboxes"][0]["id"];
  EXPECT_EQ(Sh(grandchild, "cat /work/state"), "mine\n");
}

// A fork while the source writes and other clients work: each child gets
// the files of one moment (a file replaced by rename is whole, never torn
// or missing), holds still (processes are not carried), the source's
// writer goes on, and another sandbox's execs all answer meanwhile.
TEST_P(DaemonForkTest, AForkUnderLoadCopiesOneMomentAndDisturbsNoOne) {
  const std::string src = NewSandbox(json{{"memory_mib", 96}, {"pids", 64}});
  const std::string other = NewSandbox(json::object());
  ASSERT_FALSE(src.empty());
  ASSERT_FALSE(other.empty());
  ASSERT_EQ(Sh(src, "mkdir -p /work && echo 0 > /work/n || exit 1; "
                    "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /work/n.tmp; mv /work/n.tmp /work/n; done' "
                    "</dev/null >/dev/null 2>&1 & "
                    // Until the writer has written: it left the exec's
                    // process group (which goes when the exec ends) by then.
                    "while [ \"$(cat /work/n)\" = 0 ]; do sleep 0.05; done; echo started"),
            "started\n");
  auto value_of = [this](const std::string& id) {
    const std::string out = Sh(id, "cat /work/n");
    int64_t v = -1;
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &v) ? v : int64_t{-1};
  };

  std::atomic<bool> stop{false};
  std::atomic<int> execs{0}, failures{0};
  std::thread load([&] {
    auto c = testing::UnixClient(daemon_->socket());
    while (!stop.load()) {
      auto r = c->Post(absl::StrCat("/v1/sandboxes/", other, "/exec"),
                       json{{"argv", {"sh", "-c", "echo x"}}}.dump(), kJson);
      if (r && r->status == 200 && testing::JsonOf(r).value("stdout", "") == "x\n") {
        execs.fetch_add(1);
      } else {
        failures.fetch_add(1);
      }
    }
  });

  int64_t last = 0;
  for (int round = 0; round < 3; ++round) {
    auto r = Fork(src, json{{"count", 2}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    for (const json& c : testing::JsonOf(r)["sandboxes"]) {
      const std::string kid = c["id"];
      const int64_t at_fork = value_of(kid);
      EXPECT_GE(at_fork, 0) << "round " << round << ": /work/n torn or missing in " << kid;
      EXPECT_GE(at_fork, last) << "a child went back in time";
      last = std::max(last, at_fork);
      ::usleep(200'000);
      EXPECT_EQ(value_of(kid), at_fork) << "the child " << kid << " has a writer: processes were carried";
      ASSERT_TRUE(client_->Delete(absl::StrCat("/v1/sandboxes/", kid)));
    }
    // The source's writer runs on past the fork.
    const int64_t before = value_of(src);
    ::usleep(200'000);
    EXPECT_GT(value_of(src), before) << "round " << round << ": the source's writer stopped";
  }
  stop = true;
  load.join();
  EXPECT_GT(execs.load(), 0);
  EXPECT_EQ(failures.load(), 0) << "execs on another sandbox failed during the forks";
}

// POST /v1/sandboxes/{id}/snapshot, create with {"snapshot": id}, the
// snapshot list, and delete: sandboxes made from a snapshot start from the
// files it held, whatever the source did after; records outlive the daemon.
TEST_P(DaemonForkTest, SnapshotsMakeSandboxesAndOutliveTheDaemon) {
  const std::string src = NewSandbox(json{{"memory_mib", 80}});
  ASSERT_FALSE(src.empty());
  ASSERT_EQ(Sh(src, absl::StrCat("mkdir -p /work && echo saved > /work/state && echo ", src,
                                 " > /work/id; echo ok")),
            "ok\n");
  auto r = Post(absl::StrCat("/v1/sandboxes/", src, "/snapshot"), json::object());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  json snap = testing::JsonOf(r);
  const std::string sid = snap.value("id", "");
  EXPECT_EQ(sid.rfind("snap-", 0), 0u) << r->body;
  EXPECT_EQ(snap["source"], src);
  EXPECT_EQ(snap["captured"], "files");
  EXPECT_NE(snap["processes"].get<std::string>().find("not carried"), std::string::npos);
  EXPECT_FALSE(snap.contains("create")) << "the record's internals are not the API's";
  // The source runs on and changes; the snapshot does not.
  EXPECT_EQ(Sh(src, "echo later > /work/state; cat /work/state"), "later\n");
  // Its layer is pinned: a layer rm of it is refused, naming the pin, and
  // loses nothing.
  const std::string snap_pin = absl::StrCat("pin-", sid, ":layer");
  auto rm = client_->Delete(absl::StrCat("/v1/layers/", snap["layer"].get<std::string>()));
  ASSERT_TRUE(rm);
  EXPECT_EQ(rm->status, 409) << rm->body;
  EXPECT_NE(rm->body.find(snap_pin), std::string::npos) << rm->body;

  auto listed = client_->Get("/v1/snapshots");
  ASSERT_TRUE(listed);
  EXPECT_NE(listed->body.find(sid), std::string::npos) << listed->body;
  auto one = client_->Get(absl::StrCat("/v1/snapshots/", sid));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200) << one->body;

  // Two sandboxes from it: the snapshot's files and settings, each its own.
  std::vector<std::string> made;
  for (int i = 0; i < 2; ++i) {
    auto c = Post("/v1/sandboxes", json{{"snapshot", sid}, {"ttl_s", 600}});
    ASSERT_TRUE(c);
    ASSERT_EQ(c->status, 201) << c->body;
    json d = testing::JsonOf(c);
    EXPECT_EQ(d["memory_mib"], 80) << d.dump();
    EXPECT_EQ(d["user_namespace"], GetParam()) << d.dump();
    made.push_back(d["id"]);
  }
  EXPECT_EQ(Sh(made[0], "cat /work/state; echo mine > /work/state"), "saved\n");
  EXPECT_EQ(Sh(made[1], "cat /work/state"), "saved\n");

  // Bad creates: fields the snapshot decides, an unknown snapshot.
  auto bad = Post("/v1/sandboxes", json{{"snapshot", sid}, {"layers", {"bb:1"}}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("layers"), std::string::npos) << bad->body;
  bad = Post("/v1/sandboxes", json{{"snapshot", "snap-0000000000000000"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  bad = Post("/v1/sandboxes", json{{"snapshot", "../../etc/passwd"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;

  // The daemon restarts: the snapshot is still there and still makes
  // sandboxes. A layer pin of a snapshot that was never recorded (a daemon
  // killed mid-snapshot) goes; one of a recorded snapshot stays.
  client_.reset();
  daemon_.reset();
  const std::string orphan_pin = "pin-snap-00000000000000ab:image-0";
  const std::string live_pin = absl::StrCat("pin-", sid, ":image-0");
  absl::StatusOr<layers::LayerStore> store = layers::LayerStore::Create(Store());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(store->Tag("bb:1", "pin-snap-00000000000000ab", "image-0").ok());
  ASSERT_TRUE(store->Tag("bb:1", absl::StrCat("pin-", sid), "image-0").ok());
  ASSERT_TRUE(store->Tag("bb:1", "pin-mine", "1").ok());  // someone's own tag
  auto d = testing::LocalDaemon::Start(run_dir_, Store(), ServiceOptions{});
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  client_ = testing::UnixClient(daemon_->socket());
  absl::StatusOr<layers::LayerInfo> bb = store->Inspect("bb:1");
  ASSERT_TRUE(bb.ok()) << bb.status();
  EXPECT_EQ(std::count(bb->tags.begin(), bb->tags.end(), orphan_pin), 0) << "an orphan pin stayed";
  EXPECT_EQ(std::count(bb->tags.begin(), bb->tags.end(), live_pin), 1) << "a live snapshot's pin went";
  EXPECT_EQ(std::count(bb->tags.begin(), bb->tags.end(), "pin-mine:1"), 1) << "a tag not the daemon's went";
  ASSERT_TRUE(store->Untag(live_pin).ok());
  ASSERT_TRUE(store->Untag("pin-mine:1").ok());
  auto after = Post("/v1/sandboxes", json{{"snapshot", sid}});
  ASSERT_TRUE(after);
  ASSERT_EQ(after->status, 201) << after->body;
  EXPECT_EQ(Sh(testing::JsonOf(after)["id"], "cat /work/state"), "saved\n");

  // Deleted, it is gone from the list, makes nothing, and its layer's tag
  // goes with it.
  auto del = client_->Delete(absl::StrCat("/v1/snapshots/", sid));
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 204) << del->body;
  auto gone = client_->Get(absl::StrCat("/v1/snapshots/", sid));
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404) << gone->body;
  bad = Post("/v1/sandboxes", json{{"snapshot", sid}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto layers = client_->Get("/v1/layers");
  ASSERT_TRUE(layers);
  EXPECT_EQ(layers->body.find(snap["layer"].get<std::string>()), std::string::npos) << layers->body;
  EXPECT_EQ(layers->body.find(snap_pin), std::string::npos) << "the snapshot's pin stayed: " << layers->body;
}

TEST_P(DaemonForkTest, SnapshotsOfStatelessTiersAreRefused) {
  const std::string fn = NewSandbox(json{{"tier", "fncall"}, {"lang", "python"}});
  if (fn.empty()) GTEST_SKIP() << "no fncall sandbox here";
  auto r = Post(absl::StrCat("/v1/sandboxes/", fn, "/snapshot"), json::object());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("nothing to snapshot"), std::string::npos) << r->body;
  r = Post(absl::StrCat("/v1/sandboxes/", fn, "/snapshot"), json{{"memory", true}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  auto listed = client_->Get("/v1/snapshots");
  ASSERT_TRUE(listed);
  EXPECT_EQ(testing::JsonOf(listed)["snapshots"].size(), 0u) << listed->body;
}

TEST_P(DaemonForkTest, BadRequestsAreRefusedBeforeAnythingIsMade) {
  const std::string src = NewSandbox(json::object());
  ASSERT_FALSE(src.empty());
  const size_t live = LiveSandboxes();
  auto expect = [&](const std::string& id, const json& body, int status, const std::string& says) {
    auto r = Fork(id, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body.dump() << " -> " << r->body;
    EXPECT_NE(r->body.find(says), std::string::npos) << r->body;
  };
  expect(src, json{{"count", 0}}, 400, "count");
  expect(src, json{{"count", 65}}, 400, "count");
  expect(src, json{{"count", "two"}}, 400, "count");
  expect(src, json{{"count", 1}, {"processes", true}}, 400, "processes");
  expect(src, json::array(), 400, "");
  expect("sb-0000000000000000", json{{"count", 1}}, 404, "sb-0000000000000000");
  EXPECT_EQ(LiveSandboxes(), live);
  auto layers = client_->Get("/v1/layers");
  ASSERT_TRUE(layers);
  EXPECT_EQ(layers->body.find(absl::StrCat("fork-", src)), std::string::npos) << layers->body;
  EXPECT_EQ(Sh(src, "echo alive"), "alive\n");
}

// A fork that would pass the node's sandbox limit makes none of its
// children and leaves no layer behind.
TEST_P(DaemonForkTest, AForkOverTheNodesLimitTakesItsChildrenBack) {
  daemon_.reset();
  ServiceOptions so;
  so.max_sandboxes = 3;
  static int n = 0;
  auto d = testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/limit", n++), Store(), so);
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  client_ = testing::UnixClient(daemon_->socket());
  const std::string src = NewSandbox(json::object());
  ASSERT_FALSE(src.empty());
  ASSERT_EQ(Sh(src, absl::StrCat("echo ", src, " > /id; echo ok")), "ok\n");  // a layer of its own
  auto r = Fork(src, json{{"count", 3}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  // Children are made a few at once: whichever came last hit the limit.
  EXPECT_NE(r->body.find(" of 3"), std::string::npos) << r->body;
  EXPECT_EQ(LiveSandboxes(), 1u);
  auto layers = client_->Get("/v1/layers");
  ASSERT_TRUE(layers);
  EXPECT_EQ(layers->body.find(absl::StrCat("fork-", src)), std::string::npos) << layers->body;
  auto ok = Fork(src, json{{"count", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 201) << ok->body;
}

// With task_ids, each child's trajectory starts with the source's: a
// resumed child replays the source's commands without running them, then
// goes live on the forked files; the source's log is left as it was.
TEST_P(DaemonForkTest, ChildTasksReplayTheSourcesPrefix) {
  const std::string parent = absl::StrCat("fork-parent-", ::getpid(), "-", GetParam());
  const std::string kid_task = absl::StrCat("fork-kid-", ::getpid(), "-", GetParam());
  const std::string other_task = kid_task + "-b";
  const std::string src = NewSandbox(json{{"task_id", parent}});
  ASSERT_FALSE(src.empty());
  const std::string append = "echo x >> /root/f; wc -l < /root/f";
  ASSERT_EQ(Sh(src, append), "1\n");
  ASSERT_EQ(Sh(src, append), "2\n");

  auto r = Fork(src, json{{"count", 2}, {"task_ids", {kid_task, other_task}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  json out = testing::JsonOf(r);
  EXPECT_EQ(out["fork_seq"], 2);
  const std::string kid = out["sandboxes"][0]["id"];
  EXPECT_EQ(out["sandboxes"][0]["task_id"], kid_task);
  EXPECT_EQ(out["sandboxes"][1]["task_id"], other_task);
  // The child's log: the source's two execs, then the fork's checkpoint.
  auto log = client_->Get(absl::StrCat("/v1/tasks/", kid_task, "/log"));
  ASSERT_TRUE(log);
  json lj = testing::JsonOf(log);
  ASSERT_EQ(lj["records"].size(), 2u) << log->body;
  ASSERT_EQ(lj["checkpoints"].size(), 1u) << log->body;
  EXPECT_EQ(lj["checkpoints"][0]["prefix"], 2);
  EXPECT_EQ(lj["checkpoints"][0]["layer"], out["layer"]);
  // A child's own exec continues its log at seq 2, on the forked files.
  auto live = client_->Post(absl::StrCat("/v1/sandboxes/", kid, "/exec"),
                            json{{"argv", {"sh", "-c", append}}}.dump(), kJson);
  ASSERT_TRUE(live);
  EXPECT_EQ(testing::JsonOf(live)["stdout"], "3\n");
  EXPECT_EQ(testing::JsonOf(live)["seq"], 2);
  ASSERT_TRUE(client_->Delete(absl::StrCat("/v1/sandboxes/", kid)));

  // Resumed (after a preemption, say): the prefix replays, nothing runs.
  auto res = client_->Post(absl::StrCat("/v1/tasks/", kid_task, "/resume"),
                           json{{"tier", "container"}, {"user_namespace", GetParam()}}.dump(), kJson);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  const std::string rid = testing::JsonOf(res)["id"];
  for (const char* want : {"1\n", "2\n", "3\n"}) {
    auto again = client_->Post(absl::StrCat("/v1/sandboxes/", rid, "/exec"),
                               json{{"argv", {"sh", "-c", append}}}.dump(), kJson);
    ASSERT_TRUE(again);
    json a = testing::JsonOf(again);
    EXPECT_TRUE(a["replayed"].get<bool>()) << a.dump();
    EXPECT_EQ(a["stdout"], want);
  }
  // Diverging after the prefix goes live on the fork's files (2 lines).
  EXPECT_EQ(Sh(rid, "wc -l < /root/f"), "2\n");
  // The source's log is its own: two execs, no checkpoint.
  auto plog = client_->Get(absl::StrCat("/v1/tasks/", parent, "/log"));
  ASSERT_TRUE(plog);
  EXPECT_EQ(testing::JsonOf(plog)["records"].size(), 2u);
  EXPECT_TRUE(testing::JsonOf(plog)["checkpoints"].empty());
  for (const std::string& t : {parent, kid_task, other_task}) {
    auto list = client_->Get("/v1/sandboxes");
    for (const json& sb : testing::JsonOf(list)["sandboxes"]) {
      if (sb["task_id"] == t) client_->Delete(absl::StrCat("/v1/sandboxes/", sb["id"].get<std::string>()));
    }
    client_->Delete(absl::StrCat("/v1/tasks/", t));
  }
}

TEST_P(DaemonForkTest, TaskIdsAreCheckedAndAForkOntoAUsedTaskLeavesNothing) {
  const std::string src = NewSandbox(json::object());
  ASSERT_FALSE(src.empty());
  const std::string used = absl::StrCat("fork-used-", ::getpid(), "-", GetParam());
  const std::string fresh = used + "-fresh";
  auto expect = [&](const json& body, int status, const std::string& says) {
    auto r = Fork(src, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body.dump() << " -> " << r->body;
    EXPECT_NE(r->body.find(says), std::string::npos) << r->body;
  };
  expect(json{{"count", 2}, {"task_ids", {"a"}}}, 400, "task_ids");
  expect(json{{"count", 2}, {"task_ids", {"a", "a"}}}, 400, "task_ids[1]");
  expect(json{{"count", 1}, {"task_ids", {"../x"}}}, 400, "task_ids[0]");
  // A task with a trajectory of its own is not overwritten: the fork is
  // refused whole (the other child, made beside it, goes too).
  const std::string owner = NewSandbox(json{{"task_id", used}});
  ASSERT_EQ(Sh(owner, "echo mine"), "mine\n");
  ASSERT_TRUE(client_->Delete(absl::StrCat("/v1/sandboxes/", owner)));
  const size_t live = LiveSandboxes();
  expect(json{{"count", 2}, {"task_ids", {fresh, used}}}, 409, "already has a trajectory");
  EXPECT_EQ(LiveSandboxes(), live);
  auto kept = client_->Get(absl::StrCat("/v1/tasks/", used, "/log"));
  ASSERT_TRUE(kept);
  EXPECT_EQ(testing::JsonOf(kept)["records"].size(), 1u) << kept->body;
  auto gone = client_->Get(absl::StrCat("/v1/tasks/", fresh, "/log"));
  ASSERT_TRUE(gone);
  EXPECT_TRUE(gone->status == 404 || testing::JsonOf(gone)["records"].empty()) << gone->body;
  client_->Delete(absl::StrCat("/v1/tasks/", used));
  client_->Delete(absl::StrCat("/v1/tasks/", fresh));
}

TEST_P(DaemonForkTest, AFncallSandboxHasNothingToFork) {
  const std::string fn = NewSandbox(json{{"tier", "fncall"}, {"lang", "python"}});
  if (fn.empty()) GTEST_SKIP() << "no fncall sandbox here";
  auto r = Fork(fn, json{{"count", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("nothing to fork"), std::string::npos) << r->body;
}

INSTANTIATE_TEST_SUITE_P(BothModes, DaemonForkTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "UserNamespace" : "HostIds";
                         });

}  // namespace
}  // namespace dsec::daemon
