// SPDX-License-Identifier: Apache-2.0
// dsec-vmmd as a real process: SIGKILL after acknowledged execs, then a
// restart that cleans up what the dead daemon left (mounts, cgroups,
// processes), keeps every acknowledged trajectory record, and replays them
// on resume without running the commands again.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/exec_pump.h"
#include "base/file_io.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "sandbox/container/mount.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/layers/layer_store.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;

constexpr char kJson[] = "application/json";

class Daemon {
 public:
  Daemon(const std::string& dir, const std::string& store, std::vector<std::string> extra = {})
      : dir_(dir), store_(store), extra_(std::move(extra)) {}
  // A graceful stop: a SIGKILLed daemon leaves its made-ahead sandbox
  // inits' cgroups for the next daemon's restart cleanup, and no next
  // daemon comes after a test. (The crash test kills on purpose, and
  // restarts.)
  ~Daemon() { Kill(SIGTERM); }
  bool Start() {
    std::vector<std::string> args = {DSEC_VMMD_BINARY_PATH,
                                     "--socket", Socket(),
                                     "--trajectory-dir", dir_ + "/trj",
                                     "--container-state-dir", dir_ + "/ctr",
                                     "--fncall-state-dir", dir_ + "/fn",
                                     "--store", store_,
                                     "--upper-mib", "16",
                                     "--log-level", "warn"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    auto ready = Pipe::Create();
    if (!ready.ok()) return false;
    SpawnOptions o;
    o.argv = std::move(args);
    o.out = Stdio::Fd(ready->write.get());
    o.err = Stdio::Inherit();
    auto process = Subprocess::Spawn(o);
    ready->write.Reset();  // EOF once the daemon is gone
    if (!process.ok()) return false;
    process_ = std::move(*process);
    // The ready line says the socket listens.
    std::string line;
    char c;
    while (read(ready->read.get(), &c, 1) == 1 && c != '\n') line += c;
    return line.rfind("dsec-vmmd ready", 0) == 0;
  }
  void Kill(int sig) {
    if (!process_.running()) return;
    (void)process_.Signal(sig);
    (void)process_.Wait();
  }
  std::string Socket() const { return dir_ + "/api/api.sock"; }

 private:
  std::string dir_, store_;
  std::vector<std::string> extra_;
  Subprocess process_;
};

// Alive and not a zombie (an orphaned init is reaped by whoever adopts it).
bool Running(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return false;
  auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(DaemonProcessTest, KillNineKeepsAcknowledgedExecsAndRestartCleansUp) {
  auto dir = TempDir::Create("dsec-daemon-proc-");
  ASSERT_TRUE(dir.ok());
  const std::string store = dir->path() + "/store";
  if (absl::Status s = testing::BuildBusyboxLayer(store, dir->path()); !s.ok()) GTEST_SKIP() << s;
  std::string sandbox_id, init_pid, state, qos_cgroup;
  const std::string task = absl::StrCat("kill9-", ::getpid());
  const std::string append = "echo x >> /root/f; wc -l < /root/f";
  const int kExecs = 5;
  {
    Daemon d(dir->path(), store);
    ASSERT_TRUE(d.Start());
    auto c = testing::UnixClient(d.Socket());
    auto r = c->Post("/v1/sandboxes", json{{"tier", "container"}, {"layers", {"bb:1"}}, {"task_id", task}}.dump(),
                     kJson);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    sandbox_id = testing::JsonOf(r)["id"];
    for (int i = 1; i <= kExecs; ++i) {
      auto e = c->Post(absl::StrCat("/v1/sandboxes/", sandbox_id, "/exec"),
                       json{{"argv", {"sh", "-c", append}}}.dump(), kJson);
      ASSERT_TRUE(e);
      ASSERT_EQ(testing::JsonOf(e)["stdout"], absl::StrCat(i, "\n"));
      ASSERT_EQ(testing::JsonOf(e)["seq"], i - 1);  // acknowledged
    }
    // A placed sandbox too: its QoS cgroup must go with the restart.
    auto q = c->Post("/v1/sandboxes", json{{"tier", "container"}, {"layers", {"bb:1"}}, {"qos", "be"}}.dump(),
                     kJson);
    ASSERT_TRUE(q);
    ASSERT_EQ(q->status, 201) << q->body;
    json qj = testing::JsonOf(q);
    if (qj["qos_applied"].get<bool>()) {
      qos_cgroup = qj["placement"]["cgroup"];
      EXPECT_TRUE(Running(static_cast<pid_t>(atoi(ReadAll(absl::StrCat(dir->path(), "/ctr/",
                                                                         qj["id"].get<std::string>(),
                                                                         "/init")).c_str()))));
      EXPECT_NE(ReadAll(qos_cgroup + "/cgroup.procs"), "");
    } else {
      fprintf(stderr, "qos not applied here (%s): its restart cleanup is not checked\n",
              qj["qos_reason"].dump().c_str());
    }
    state = absl::StrCat(dir->path(), "/ctr/", sandbox_id);
    init_pid = ReadAll(state + "/init");
    ASSERT_FALSE(init_pid.empty());
    d.Kill(SIGKILL);
  }
  // The dead daemon's sandbox is still there (its writable layer in the
  // host's mount table only where overlayfs wants it there).
  EXPECT_TRUE(PathExists(state));
  if (!container::OverlayAcceptsDetachedLayers()) {
    EXPECT_NE(ReadAll("/proc/self/mountinfo").find(state), std::string::npos);
  }
  const pid_t init = static_cast<pid_t>(atoi(init_pid.c_str()));
  EXPECT_TRUE(Running(init));

  Daemon d(dir->path(), store);
  ASSERT_TRUE(d.Start());
  auto c = testing::UnixClient(d.Socket());
  auto h = c->Get("/v1/health");
  ASSERT_TRUE(h);
  json health = testing::JsonOf(h);
  EXPECT_EQ(health["recovered"]["container_sandboxes"], 2) << h->body;
  if (!qos_cgroup.empty()) {
    EXPECT_NE(access(qos_cgroup.c_str(), F_OK), 0) << qos_cgroup << " survived the restart";
    const std::string name = qos_cgroup.substr(qos_cgroup.rfind('/') + 1);
    EXPECT_EQ(container::testing::RunHostCommand(
                  {"/bin/sh", "-c", absl::StrCat("find /sys/fs/cgroup -maxdepth 6 -name ", name, " 2>/dev/null; true")})
                  .value_or("?"),
              "");
  }
  // Nothing of it is left: mounts, process, state, cgroups.
  EXPECT_EQ(ReadAll("/proc/self/mountinfo").find(state), std::string::npos);
  EXPECT_FALSE(Running(init));
  EXPECT_NE(access(state.c_str(), F_OK), 0);
  EXPECT_EQ(ReadAll("/proc/self/cgroup").find(sandbox_id), std::string::npos);
  for (const char* h2 : {"memory", "pids", "cpu", "unified"}) {
    // (the daemon's cgroups sit under its own: search the hierarchy)
    std::string found = container::testing::RunHostCommand(
                            {"/bin/sh", "-c", absl::StrCat("find /sys/fs/cgroup/", h2, " -maxdepth 4 -name '*",
                                                      sandbox_id, "*' 2>/dev/null; true")})
                            .value_or("?");
    EXPECT_EQ(found, "") << h2;
    EXPECT_NE(access(absl::StrCat("/sys/fs/cgroup/", h2, "/dsec-ctr-", sandbox_id).c_str(), F_OK), 0);
  }
  // Every acknowledged exec is in the log.
  auto log = c->Get(absl::StrCat("/v1/tasks/", task, "/log"));
  ASSERT_TRUE(log);
  json records = testing::JsonOf(log)["records"];
  ASSERT_EQ(records.size(), static_cast<size_t>(kExecs));
  for (int i = 0; i < kExecs; ++i) {
    EXPECT_EQ(records[i]["seq"], i);
    EXPECT_EQ(Base64Decode(records[i]["stdout_b64"]).value_or(""), absl::StrCat(i + 1, "\n"));
  }
  // Resume: the recorded results come back and nothing runs (the file
  // the commands append to does not grow: it does not even exist).
  auto res = c->Post(absl::StrCat("/v1/tasks/", task, "/resume"), json{{"tier", "container"}, {"layers", {"bb:1"}}}.dump(),
                     kJson);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  EXPECT_EQ(testing::JsonOf(res)["recorded"], kExecs);
  const std::string rid = testing::JsonOf(res)["id"];
  for (int i = 1; i <= kExecs; ++i) {
    auto e = c->Post(absl::StrCat("/v1/sandboxes/", rid, "/exec"), json{{"argv", {"sh", "-c", append}}}.dump(), kJson);
    ASSERT_TRUE(e);
    json j = testing::JsonOf(e);
    EXPECT_TRUE(j["replayed"].get<bool>());
    EXPECT_EQ(j["stdout"], absl::StrCat(i, "\n"));
    auto f = c->Get(absl::StrCat("/v1/sandboxes/", rid, "/files?path=/root/f"));
    ASSERT_TRUE(f);
    EXPECT_EQ(f->status, 404) << "replayed exec " << i << " ran";
  }
  // Past the end of the recording: live, reported, and the non-idempotent
  // execs that could not be re-applied (no checkpoint) are named.
  auto live = c->Post(absl::StrCat("/v1/sandboxes/", rid, "/exec"), json{{"argv", {"sh", "-c", append}}}.dump(), kJson);
  ASSERT_TRUE(live);
  json lj = testing::JsonOf(live);
  EXPECT_FALSE(lj["replayed"].get<bool>());
  EXPECT_EQ(lj["stdout"], "1\n");
  EXPECT_EQ(lj["seq"], kExecs);
  EXPECT_EQ(lj["divergence"]["reason"], "past-end");
  EXPECT_EQ(lj["divergence"]["not_reapplied"].size(), static_cast<size_t>(kExecs));
  c->Delete(absl::StrCat("/v1/sandboxes/", rid));
  c->Delete(absl::StrCat("/v1/tasks/", task));
}

bool LinkExists(const std::string& name) { return access(("/sys/class/net/" + name).c_str(), F_OK) == 0; }

bool NftTableExists(const std::string& name) {
  SpawnOptions o;
  o.argv = {"nft", "list", "table", "ip", name};
  auto r = RunSubprocess(o);
  return r.ok() && r->Succeeded();
}

TEST(DaemonProcessTest, KillNineLeavesNoNetworkBehindARestart) {
  auto dir = TempDir::Create("dsec-daemon-net-");
  ASSERT_TRUE(dir.ok());
  const std::string store = dir->path() + "/store";
  if (absl::Status s = testing::BuildBusyboxLayer(store, dir->path()); !s.ok()) GTEST_SKIP() << s;
  const int x = getpid() % 250;
  const std::string subnet = absl::StrCat("10.249.", x, ".0/24");
  char table[64];
  snprintf(table, sizeof(table), "dsec_vmm_%08x_24", (10u << 24) | (249u << 16) | (static_cast<unsigned>(x) << 8));
  const std::vector<std::string> flags = {"--net-subnet", subnet, "--net-uplink", "none"};
  std::string id, host_if, net_cgroup;
  {
    Daemon d(dir->path(), store, flags);
    ASSERT_TRUE(d.Start());
    auto c = testing::UnixClient(d.Socket());
    auto r = c->Post("/v1/sandboxes",
                     json{{"tier", "container"}, {"layers", {"bb:1"}}, {"network", {{"egress", {{"allow", {"192.0.2.0/24"}}}}}}}
                         .dump(),
                     kJson);
    ASSERT_TRUE(r);
    if (r->status == 503) GTEST_SKIP() << "no sandbox networking here: " << r->body;
    ASSERT_EQ(r->status, 201) << r->body;
    json j = testing::JsonOf(r);
    id = j["id"];
    const std::string addr = j["network"]["address"];
    unsigned a, b, cc, dd;
    ASSERT_EQ(sscanf(addr.c_str(), "%u.%u.%u.%u", &a, &b, &cc, &dd), 4);
    char name[16];
    snprintf(name, sizeof(name), "ds%08x", (a << 24) | (b << 16) | (cc << 8) | dd);
    host_if = name;
    EXPECT_TRUE(LinkExists(host_if));
    EXPECT_TRUE(NftTableExists(table));
    net_cgroup = absl::StrCat("/sys/fs/cgroup/unified/dsec-ctr-", id);
    d.Kill(SIGKILL);
  }
  // The dead daemon's sandbox still runs: its veth and table are there.
  EXPECT_TRUE(LinkExists(host_if));
  EXPECT_TRUE(NftTableExists(table));
  Daemon d(dir->path(), store, flags);
  ASSERT_TRUE(d.Start());
  // The restart removed the sandbox (its namespace, so its veth), the
  // cgroup v2 directory its programs were attached to, and the node
  // network's table (made again on the next networked create).
  EXPECT_FALSE(LinkExists(host_if));
  EXPECT_NE(access(net_cgroup.c_str(), F_OK), 0) << net_cgroup;
  EXPECT_FALSE(NftTableExists(table));
  auto c = testing::UnixClient(d.Socket());
  auto r = c->Post("/v1/sandboxes",
                   json{{"tier", "container"}, {"layers", {"bb:1"}}, {"network", json::object()}}.dump(), kJson);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  EXPECT_TRUE(NftTableExists(table));
  c->Delete(absl::StrCat("/v1/sandboxes/", testing::JsonOf(r)["id"].get<std::string>()));
}

// Issue 23, layers on create: a create's `layers` named any host file,
// relative paths too, and the kernel parsed it as EROFS. Now only store
// references and absolute paths under the store's images or a
// --layer-image-dir are taken, with the path checked as given and with its
// links resolved; errors name no host path but the client's own argument.
// Both container modes.
TEST(DaemonProcessTest, CreateTakesLayerImagesOnlyFromTheStoreOrConfiguredDirs) {
  auto dir = TempDir::Create("dsec-daemon-layers-");
  ASSERT_TRUE(dir.ok());
  const std::string store = dir->path() + "/store";
  if (absl::Status s = testing::BuildBusyboxLayer(store, dir->path()); !s.ok()) GTEST_SKIP() << s;
  auto opened = layers::LayerStore::Create(store);
  ASSERT_TRUE(opened.ok());
  auto bb = opened->Inspect("bb:1");
  ASSERT_TRUE(bb.ok()) << bb.status();
  const std::string images = dir->path() + "/images";
  ASSERT_EQ(::mkdir(images.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(images + "/bb.erofs", ReadAll(bb->image_path), 0444).ok());
  ASSERT_TRUE(WriteFile(images + "/fake.erofs", "not an image", 0444).ok());
  ASSERT_EQ(::symlink("/etc/hostname", (images + "/escape.erofs").c_str()), 0);
  ASSERT_EQ(::symlink(bb->image_path.c_str(), (dir->path() + "/outside.erofs").c_str()), 0);
  Daemon d(dir->path(), store, {"--layer-image-dir", images});
  ASSERT_TRUE(d.Start());
  auto c = testing::UnixClient(d.Socket());
  for (bool userns : {false, true}) {
    SCOPED_TRACE(userns ? "user namespace" : "default");
    auto create = [&](const std::string& layer) {
      return c->Post("/v1/sandboxes",
                     json{{"tier", "container"}, {"user_namespace", userns}, {"layers", {layer}}}.dump(), kJson);
    };
    for (const std::string& refused :
         {std::string("/etc/hostname"), std::string("etc/hostname"), store + "/refs.json",
          store + "/layers/../refs.json", images + "/escape.erofs", images + "/fake.erofs",
          images + "/./bb.erofs", dir->path() + "/outside.erofs", std::string("nosuch:1")}) {
      auto r = create(refused);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400) << refused << ": " << r->body;
      json e = testing::JsonOf(r)["error"];
      EXPECT_EQ(e["code"], "INVALID_ARGUMENT") << refused;
      EXPECT_EQ(e.value("field", "").rfind("layers", 0), 0u) << refused << ": " << r->body;
      // Only the client's own argument may appear.
      std::string message = e.value("message", "");
      const size_t own = message.find(refused);
      if (own != std::string::npos) message.erase(own, refused.size());
      EXPECT_EQ(message.find(dir->path()), std::string::npos) << "a host path: " << r->body;
      if (r->status == 201) c->Delete(absl::StrCat("/v1/sandboxes/", testing::JsonOf(r)["id"].get<std::string>()));
    }
    for (const std::string& taken : {bb->image_path, images + "/bb.erofs", std::string("bb:1")}) {
      auto r = create(taken);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 201) << taken << ": " << r->body;
      c->Delete(absl::StrCat("/v1/sandboxes/", testing::JsonOf(r)["id"].get<std::string>()));
    }
  }
}

}  // namespace
}  // namespace dsec::daemon

namespace dsec::daemon {
namespace {

// A node made small with its own options (issue 22): two container
// sandboxes' worth of network namespaces. The third create answers 429
// naming the resource and leaves nothing behind; a delete makes room
// again; health shows the headroom; the daemon says what open-file limit
// it runs with.
TEST(DaemonProcessTest, ASmallNodeRefusesWithTheResourceNamedAndRecovers) {
  auto dir = TempDir::Create("dsec-daemon-capacity-");
  ASSERT_TRUE(dir.ok());
  const std::string store = dir->path() + "/store";
  if (absl::Status s = testing::BuildBusyboxLayer(store, dir->path()); !s.ok()) GTEST_SKIP() << s;
  Daemon bad(dir->path(), store, {"--capacity-limit", "sandboxes=3"});
  EXPECT_FALSE(bad.Start()) << "an unknown resource must stop the daemon";
  Daemon d(dir->path(), store, {"--capacity-limit", "netns=66"});  // 64 kept free
  ASSERT_TRUE(d.Start());
  auto c = testing::UnixClient(d.Socket());
  const std::string body = json{{"tier", "container"}, {"layers", {"bb:1"}}}.dump();
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto r = c->Post("/v1/sandboxes", body, kJson);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    ids.push_back(testing::JsonOf(r)["id"]);
  }
  auto full = c->Post("/v1/sandboxes", body, kJson);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 429) << full->body;
  const std::string message = testing::JsonOf(full)["error"].value("message", "");
  EXPECT_NE(message.find("node full: netns: 2 in use + 1 for this container sandbox"), std::string::npos)
      << message;
  auto list = c->Get("/v1/sandboxes");
  ASSERT_TRUE(list);
  EXPECT_EQ(testing::JsonOf(list)["sandboxes"].size(), 2u) << "a refused create made nothing";
  auto health = c->Get("/v1/health");
  ASSERT_TRUE(health);
  json cap = testing::JsonOf(health)["capacity"];
  EXPECT_EQ(cap["resources"]["netns"]["used"], 2) << cap.dump();
  EXPECT_EQ(cap["resources"]["netns"]["free"], 0);
  EXPECT_EQ(cap["sandboxes_more"]["container"]["limited_by"], "netns");
  EXPECT_GT(cap["resources"]["fds"]["used"].get<int64_t>(), 0);
  auto metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("dsec_capacity_refused_total{resource=\"netns\"} 1"), std::string::npos);

  ASSERT_TRUE(c->Delete(absl::StrCat("/v1/sandboxes/", ids[0])));
  auto again = c->Post("/v1/sandboxes", body, kJson);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 201) << again->body;
}

}  // namespace
}  // namespace dsec::daemon

namespace dsec::daemon {
namespace {

// A counter or gauge of /metrics (-1 when absent).
int64_t Metric(httplib::Client& c, const std::string& name) {
  auto m = c.Get("/metrics");
  if (!m) return -1;
  const std::string key = "\n" + name + " ";
  const size_t at = m->body.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(m->body.c_str() + at + key.size(), nullptr, 10);
}

// A fork's children go through the made-ahead inits (the daemon's default
// pool of 2), as /metrics counts them: each child takes one or finds none,
// and the pool goes back to its size once the fork is done. (How many the
// pool makes while the source is packed depends on the machine's speed;
// InitPoolTest.ExpectedCreatesFindSlotsAndUnusedOnesGo checks Expect.)
TEST(DaemonProcessTest, AForksChildrenGoThroughTheMadeAheadInits) {
  auto dir = TempDir::Create("dsec-daemon-forkpool-");
  ASSERT_TRUE(dir.ok());
  const std::string store = dir->path() + "/store";
  if (absl::Status s = testing::BuildBusyboxLayer(store, dir->path()); !s.ok()) GTEST_SKIP() << s;
  Daemon d(dir->path(), store, {"--snapshot-dir", dir->path() + "/snapshots"});
  ASSERT_TRUE(d.Start());
  auto c = testing::UnixClient(d.Socket());
  const int64_t deadline = MonotonicNowMs() + 20'000;
  auto two_ready = [&] {
    while (Metric(*c, "dsec_container_init_pool_ready") < 2 && MonotonicNowMs() < deadline) ::usleep(20'000);
    return Metric(*c, "dsec_container_init_pool_ready") == 2;
  };
  ASSERT_TRUE(two_ready()) << "the pool was not filled";
  auto r = c->Post("/v1/sandboxes", json{{"tier", "container"}, {"layers", {"bb:1"}}}.dump(), kJson);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string src = testing::JsonOf(r)["id"];
  ASSERT_TRUE(two_ready()) << "the pool was not refilled";
  const int64_t taken = Metric(*c, "dsec_container_init_pool_taken_total");
  const int64_t misses = Metric(*c, "dsec_container_init_pool_misses_total");
  EXPECT_EQ(taken, 1) << "the source found no ready init";
  ASSERT_EQ(misses, 0);

  auto f = c->Post(absl::StrCat("/v1/sandboxes/", src, "/fork"), json{{"count", 6}}.dump(), kJson);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->status, 201) << f->body;
  const int64_t took = Metric(*c, "dsec_container_init_pool_taken_total") - taken;
  const int64_t missed = Metric(*c, "dsec_container_init_pool_misses_total") - misses;
  EXPECT_EQ(took + missed, 6) << "took " << took << ", missed " << missed;
  EXPECT_GE(took, 2) << "the two ready inits were not taken";
  // Back to 2 ready (refilled, and any made for the fork and not taken
  // removed) within InitPool::kExpectMs and a refill.
  int64_t ready = -1;
  while (MonotonicNowMs() < deadline + 5'000) {
    ready = Metric(*c, "dsec_container_init_pool_ready");
    if (ready == 2) break;
    ::usleep(50'000);
  }
  EXPECT_EQ(ready, 2);
}

}  // namespace
}  // namespace dsec::daemon
