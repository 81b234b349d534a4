// SPDX-License-Identifier: Apache-2.0
// Directory watches (Service::WatchDir) on real container sandboxes, in
// the tier's default mode and with user_namespace: the events of commands
// run in the sandbox, named relative to the watched directory; recursion
// into directories made and moved later; links and kernel file systems
// left out; the limits; the end of a watch when its directory or its
// sandbox goes.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;
using Type = tier::FileEvent::Type;

constexpr char kJson[] = "application/json";

std::string TypeName(Type t) {
  switch (t) {
    case Type::kCreate: return "create";
    case Type::kWrite: return "write";
    case Type::kRemove: return "remove";
    case Type::kRename: return "rename";
    case Type::kChmod: return "chmod";
  }
  return "?";
}

class DaemonWatchTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    auto dir = TempDir::Create("dsec-daemon-watch-");
    ASSERT_TRUE(dir.ok());
    dir_ = new TempDir(std::move(*dir));
    absl::Status s = testing::BuildBusyboxLayer(dir_->path() + "/store", dir_->path());
    if (!s.ok()) skip_ = absl::StrCat("busybox layer: ", s.ToString());
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ServiceOptions o;
    o.max_dir_watches_per_sandbox = 3;
    o.max_dir_watches = 4;
    Start(o);
    id_ = Create();
    ASSERT_FALSE(id_.empty());
  }
  void TearDown() override {
    for (const std::string& id : ids_) client_->Delete(absl::StrCat("/v1/sandboxes/", id));
    client_.reset();
    daemon_.reset();
  }

  void Start(const ServiceOptions& o) {
    static int n = 0;
    auto d = testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/run", n++), dir_->path() + "/store", o);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = testing::UnixClient(daemon_->socket());
    client_->set_read_timeout(20, 0);
  }
  std::string Create() {
    auto r = client_->Post("/v1/sandboxes", json{{"tier", "container"}, {"user_namespace", GetParam()}}.dump(),
                           kJson);
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 201) << r->body;
    const std::string id = testing::JsonOf(r).value("id", "");
    if (!id.empty()) ids_.push_back(id);
    return id;
  }
  json Sh(const std::string& script, const std::string& id = "") {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id.empty() ? id_ : id, "/exec"),
                           json{{"argv", {"sh", "-c", script}}}.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    json j = testing::JsonOf(r);
    EXPECT_EQ(j["exit_code"], 0) << r->body;
    return j;
  }
  absl::StatusOr<std::shared_ptr<tier::DirWatch>> Watch(const std::string& path, bool recursive) {
    return daemon_->service().WatchDir(id_, path, recursive);
  }
  // "type name" of each event until one named `until` of type `type`
  // comes (included), or 10 s pass (then the list ends with "TIMEOUT").
  static std::vector<std::string> Until(tier::DirWatch& w, Type type, const std::string& until) {
    std::vector<std::string> seen;
    const int64_t deadline = MonotonicNowMs() + 10'000;
    while (MonotonicNowMs() < deadline) {
      auto evs = w.Next(deadline - MonotonicNowMs());
      if (!evs.ok()) {
        seen.push_back(absl::StrCat("ERROR ", evs.status().ToString()));
        return seen;
      }
      for (const tier::FileEvent& e : *evs) {
        seen.push_back(absl::StrCat(TypeName(e.type), " ", e.name));
        if (e.type == type && e.name == until) return seen;
      }
    }
    seen.push_back("TIMEOUT");
    return seen;
  }
  static bool Has(const std::vector<std::string>& seen, const std::string& what) {
    return std::find(seen.begin(), seen.end(), what) != seen.end();
  }

  static TempDir* dir_;
  static std::string skip_;
  std::unique_ptr<testing::LocalDaemon> daemon_;
  std::unique_ptr<httplib::Client> client_;
  std::string id_;
  std::vector<std::string> ids_;
};
TempDir* DaemonWatchTest::dir_ = nullptr;
std::string DaemonWatchTest::skip_;

TEST_P(DaemonWatchTest, CommandsChangesComeNamedRelativeToTheDirectory) {
  Sh("mkdir -p /w");
  auto w = Watch("/w", false);
  ASSERT_TRUE(w.ok()) << w.status();
  // Nothing yet: an empty answer when the time is up.
  auto none = (*w)->Next(50);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  Sh("echo a > /w/f && chmod 600 /w/f && mv /w/f /w/g && rm /w/g");
  const std::vector<std::string> seen = Until(**w, Type::kRemove, "g");
  const std::string all = absl::StrJoin(seen, ", ");
  for (const std::string e : {"create f", "write f", "chmod f", "rename f", "create g", "remove g"}) {
    EXPECT_TRUE(Has(seen, e)) << e << " missing in: " << all;
  }
  // In the order they happened.
  auto at = [&seen](const std::string& e) { return std::find(seen.begin(), seen.end(), e) - seen.begin(); };
  EXPECT_LT(at("create f"), at("chmod f")) << all;
  EXPECT_LT(at("rename f"), at("remove g")) << all;
  // Not recursive: a subdirectory's own changes are not seen, its making is.
  Sh("mkdir /w/sub && echo x > /w/sub/inner && echo y > /w/last");
  const std::vector<std::string> more = Until(**w, Type::kCreate, "last");
  EXPECT_TRUE(Has(more, "create sub")) << absl::StrJoin(more, ", ");
  EXPECT_FALSE(Has(more, "create sub/inner")) << absl::StrJoin(more, ", ");
}

TEST_P(DaemonWatchTest, RecursiveWatchFollowsNewAndMovedDirectoriesButNotLinks) {
  Sh("mkdir -p /w/a/b /elsewhere && ln -s /elsewhere /w/link");
  auto w = Watch("/w", true);
  ASSERT_TRUE(w.ok()) << w.status();
  Sh("echo 1 > /w/a/b/old");
  EXPECT_TRUE(Has(Until(**w, Type::kCreate, "a/b/old"), "create a/b/old"));
  // A directory made later is watched from its create event on.
  Sh("mkdir /w/new");
  EXPECT_TRUE(Has(Until(**w, Type::kCreate, "new"), "create new"));
  Sh("echo 2 > /w/new/x");
  EXPECT_TRUE(Has(Until(**w, Type::kCreate, "new/x"), "create new/x"));
  // A directory moved inside the tree keeps its watches under its new name.
  Sh("mv /w/a /w/c");
  EXPECT_TRUE(Has(Until(**w, Type::kCreate, "c"), "create c"));
  Sh("echo 3 > /w/c/b/z");
  EXPECT_TRUE(Has(Until(**w, Type::kCreate, "c/b/z"), "create c/b/z"));
  // One moved out is no longer watched; one moved in is.
  Sh("mv /w/c /moved-out && echo 4 > /moved-out/b/gone && mkdir -p /from/d && mv /from /w/in");
  std::vector<std::string> seen = Until(**w, Type::kCreate, "in");
  EXPECT_FALSE(Has(seen, "create c/b/gone")) << absl::StrJoin(seen, ", ");
  Sh("echo 5 > /w/in/d/deep");
  EXPECT_TRUE(Has(Until(**w, Type::kCreate, "in/d/deep"), "create in/d/deep"));
  // The link is not followed: a change at its target is not the tree's.
  Sh("echo 6 > /elsewhere/q && echo 7 > /w/sentinel");
  seen = Until(**w, Type::kCreate, "sentinel");
  EXPECT_TRUE(Has(seen, "create sentinel")) << absl::StrJoin(seen, ", ");
  EXPECT_FALSE(Has(seen, "create link/q")) << absl::StrJoin(seen, ", ");
}

TEST_P(DaemonWatchTest, BadPathsAreRefusedWithTheReason) {
  Sh("echo f > /file");
  auto missing = Watch("/no/such", false);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  auto file = Watch("/file", false);
  EXPECT_TRUE(absl::IsNotFound(file.status())) << file.status();
  for (const std::string p : {"/proc", "/sys/kernel", "relative"}) {
    auto r = Watch(p, false);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << p << ": " << r.status();
  }
  // A recursive watch from / leaves /proc and /sys out instead of failing.
  auto root = Watch("/", true);
  ASSERT_TRUE(root.ok()) << root.status();
  Sh("echo x > /tmp/seen-under-tmp");
  EXPECT_TRUE(Has(Until(**root, Type::kCreate, "tmp/seen-under-tmp"), "create tmp/seen-under-tmp"));
  auto nobody = daemon_->service().WatchDir("sb-doesnotexist", "/", false);
  EXPECT_TRUE(absl::IsNotFound(nobody.status())) << nobody.status();
}

TEST_P(DaemonWatchTest, TheEndOfTheDirectoryOrTheSandboxEndsTheWatch) {
  Sh("mkdir -p /w");
  auto w = Watch("/w", true);
  ASSERT_TRUE(w.ok()) << w.status();
  Sh("rm -rf /w");
  std::vector<std::string> seen = Until(**w, Type::kCreate, "never");
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(absl::StrContains(seen.back(), "NOT_FOUND")) << absl::StrJoin(seen, ", ");
  // Ended for good.
  EXPECT_TRUE(absl::IsNotFound((*w)->Next(0).status()));

  // A delete ends a watch that waits, at once.
  auto waiting = Watch("/", false);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  absl::Status ended;
  int64_t took_ms = 0;
  std::thread reader([&] {
    const int64_t t0 = MonotonicNowMs();
    absl::StatusOr<std::vector<tier::FileEvent>> r;
    do {
      r = (*waiting)->Next(30'000);
    } while (r.ok());
    ended = r.status();
    took_ms = MonotonicNowMs() - t0;
  });
  auto del = client_->Delete(absl::StrCat("/v1/sandboxes/", id_));
  reader.join();
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 204) << del->body;
  EXPECT_TRUE(absl::IsUnavailable(ended)) << ended;
  EXPECT_LT(took_ms, 20'000);
}

TEST_P(DaemonWatchTest, LimitsRefuseByNameAndFreeWhenAWatchGoes) {
  // Per sandbox (3 here), then per node (4 here).
  std::vector<std::shared_ptr<tier::DirWatch>> held;
  for (int i = 0; i < 3; ++i) {
    auto w = Watch("/", false);
    ASSERT_TRUE(w.ok()) << i << ": " << w.status();
    held.push_back(*w);
  }
  auto fourth = Watch("/", false);
  EXPECT_TRUE(absl::IsResourceExhausted(fourth.status())) << fourth.status();
  EXPECT_TRUE(absl::StrContains(fourth.status().message(), "most a sandbox")) << fourth.status();
  const std::string other = Create();
  ASSERT_FALSE(other.empty());
  auto on_other = daemon_->service().WatchDir(other, "/", false);
  ASSERT_TRUE(on_other.ok()) << on_other.status();
  auto fifth = daemon_->service().WatchDir(other, "/", false);
  EXPECT_TRUE(absl::IsResourceExhausted(fifth.status())) << fifth.status();
  EXPECT_TRUE(absl::StrContains(fifth.status().message(), "the node")) << fifth.status();
  // A watch that goes frees its place.
  held.pop_back();
  auto again = Watch("/", false);
  EXPECT_TRUE(again.ok()) << again.status();

  // More directories than a recursive watch holds (1024).
  Sh("mkdir -p /many && cd /many && i=0; while [ $i -lt 1030 ]; do mkdir d$i; i=$((i+1)); done");
  held.clear();
  auto many = Watch("/many", true);
  EXPECT_TRUE(absl::IsResourceExhausted(many.status())) << many.status();
  EXPECT_TRUE(absl::StrContains(many.status().message(), "1024")) << many.status();
  auto flat = Watch("/many", false);
  EXPECT_TRUE(flat.ok()) << flat.status();
}

INSTANTIATE_TEST_SUITE_P(Modes, DaemonWatchTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "UserNamespace" : "Default";
                         });

}  // namespace
}  // namespace dsec::daemon
