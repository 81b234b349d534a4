// SPDX-License-Identifier: Apache-2.0
// The microvm tier in the daemon, over the API's unix socket:
//  - with the real launcher on this host: the CPL0 probe runs the real
//    dsec-vmm; where guest CPL0 code is emulated (PVM) a create fails at
//    once with 503 and the measured reason, and leaves nothing behind;
//  - with the host-mode launcher (the real dsec-agent as a host process):
//    the whole daemon path — create, exec (streamed too), files,
//    pause/resume, pack_diff into the store and a sandbox stacking the new
//    layer, delete, orphan cleanup.
#include <dirent.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "sandbox/container/state_dir.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/daemon/http_server.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/host_agent_launcher.h"
#include "sandbox/microvm/microvm_tier.h"
#include "sandbox/microvm/vm_launcher.h"

namespace dsec::daemon {
namespace {

using container::testing::TempDir;
using nlohmann::json;

constexpr char kJson[] = "application/json";

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    }
    ::closedir(d);
  }
  return out;
}

// Cgroup directories of the tier's sandboxes (dsec-ctr-mvm-<id>) below this
// process's own memory cgroup, where the tier makes them. Other test
// processes of the suite share that cgroup: with `ids`, only those
// sandboxes' (sandboxes of this daemon are "sb-*"; microvm_sandbox_test's
// are not).
// This process's own memory cgroup (v1) and unified (v2) directories.
std::vector<std::string> OwnCgroupDirs() {
  std::ifstream in("/proc/self/cgroup");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[1] == "memory") out.push_back("/sys/fs/cgroup/memory" + f[2]);
    if (f[1].empty() && f[0] == "0") out.push_back("/sys/fs/cgroup/unified" + f[2]);
  }
  return out;
}

std::vector<std::string> MicrovmCgroups(const std::vector<std::string>& ids = {}) {
  std::vector<std::string> out;
  for (const std::string& base : OwnCgroupDirs()) {
    for (const std::string& e : Entries(base)) {
      if (e.rfind("dsec-ctr-mvm-sb-", 0) != 0) continue;
      bool wanted = ids.empty();
      for (const std::string& id : ids) wanted |= e == "dsec-ctr-mvm-" + id;
      if (wanted) out.push_back(base + "/" + e);
    }
  }
  return out;
}

// What is in MicrovmCgroups() now but not in `before` and holds no process
// (a leak; a concurrent test's sandbox holds its VM), re-checked for up to
// 2 s so that one being made or removed by another test is not counted.
// A cgroup's mkdir and rmdir are events (inotify on its parent); a process
// joining one is not (cgroup v1 notifies nothing): the wait between checks
// ends at the next event or after 100 ms.
std::vector<std::string> EmptyCgroupsSince(const std::vector<std::string>& before) {
  ScopedFd changes(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  for (const std::string& dir : OwnCgroupDirs()) {
    if (changes) (void)::inotify_add_watch(changes.get(), dir.c_str(), IN_CREATE | IN_DELETE);
  }
  const int64_t deadline = MonotonicNowNs() + 2'000'000'000;
  std::vector<std::string> leaked;
  for (;;) {
    leaked.clear();
    for (const std::string& c : MicrovmCgroups()) {
      if (std::find(before.begin(), before.end(), c) != before.end()) continue;
      std::ifstream procs(c + "/cgroup.procs");
      std::string pid;
      if (!(procs >> pid)) leaked.push_back(c);
    }
    const int64_t left_ms = (deadline - MonotonicNowNs()) / 1'000'000;
    if (leaked.empty() || left_ms <= 0) break;
    pollfd p{changes.get(), POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 100)));
    char buf[4096];
    while (changes && ::read(changes.get(), buf, sizeof(buf)) > 0) {
    }
  }
  return leaked;
}

// A launcher that counts the VMs it is asked to launch.
class CountingLauncher : public microvm::Launcher {
 public:
  explicit CountingLauncher(std::unique_ptr<microvm::Launcher> real) : real_(std::move(real)) {}
  absl::Status CheckHost() override { return real_->CheckHost(); }
  absl::StatusOr<std::unique_ptr<microvm::AgentHost>> Launch(const microvm::LaunchSpec& spec) override {
    ++launches_;
    return real_->Launch(spec);
  }
  int launches() const { return launches_.load(); }

 private:
  std::unique_ptr<microvm::Launcher> real_;
  std::atomic<int> launches_{0};
};

class MicrovmDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "needs root";
    }
    auto dir = TempDir::Create("dsec-mvm-daemon-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(*dir));
    state_root_ = dir_->path() + "/microvm";
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Stop();
    server_.reset();
    service_.reset();
  }

  void Start(microvm::MicrovmTierOptions o, LayerResolver resolver, const std::string& store,
             std::shared_ptr<QosPlacer> qos = nullptr) {
    o.state_root = state_root_;
    std::vector<std::unique_ptr<tier::Tier>> tiers;
    tiers.push_back(std::make_unique<microvm::MicrovmTier>(std::move(o)));
    ServiceOptions so;
    so.resolve_layers = std::move(resolver);
    so.layer_store = store;
    so.start_reaper = false;
    so.qos = std::move(qos);
    service_ = std::make_unique<Service>(so, std::move(tiers), nullptr);
    HttpOptions ho;
    ho.socket_path = dir_->path() + "/api/api.sock";
    auto server = HttpServer::Start(service_.get(), ho);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = testing::UnixClient(ho.socket_path);
  }

  std::unique_ptr<TempDir> dir_;
  std::string state_root_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(MicrovmDaemonTest, OnAHostWithEmulatedCpl0CreateFailsFastWith503) {
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    GTEST_SKIP() << "this host has no usable /dev/kvm";
  }
  auto probe = microvm::RunCpl0Probe(DSEC_MONITOR_BINARY_PATH, DSEC_TESTGUEST_ELF_PATH);
  ASSERT_TRUE(probe.ok()) << probe.status();
  if (!probe->emulated()) {
    GTEST_SKIP() << "this host runs guest CPL0 code on hardware (" << probe->cycles_per_round()
                 << " cycles per round): the Linux boot test (tests/integration/linux_boot_test) covers it";
  }
  microvm::MicrovmTierOptions o;
  microvm::VmLauncherOptions vm;
  vm.monitor_binary = DSEC_MONITOR_BINARY_PATH;
  vm.testguest = DSEC_TESTGUEST_ELF_PATH;
  // The real launcher, counted: the probe decides, no VM is launched.
  auto launcher = std::make_shared<CountingLauncher>(std::make_unique<microvm::VmLauncher>(vm));
  o.launcher = launcher;
  // Resolving the default layers may build base:bookworm (minutes): a tier
  // the host cannot run must fail before that.
  auto resolved = std::make_shared<int>(0);
  Start(o, [resolved](const std::string&, const std::vector<std::string>&) {
    ++*resolved;
    return absl::StatusOr<std::vector<std::string>>(std::vector<std::string>{});
  }, "");
  const std::vector<std::string> cgroups_before = MicrovmCgroups();

  auto r = client_->Post("/v1/sandboxes", json{{"tier", "microvm"}}.dump(), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  const json body = testing::JsonOf(r);
  const std::string message = body.is_object() && body.contains("error") && body["error"].is_object()
                                  ? body["error"].value("message", "")
                                  : r->body;
  EXPECT_NE(message.find("microvm tier: guest kernel code is emulated on this host (PVM): "), std::string::npos)
      << message;
  EXPECT_NE(message.find(" cycles per CPL0 loop round; a Linux guest needs hardware virtualisation (HOST.md)"),
            std::string::npos)
      << message;
  EXPECT_EQ(*resolved, 0) << "layers were resolved for a tier this host cannot run";
  EXPECT_EQ(launcher->launches(), 0) << "a VM was launched: the probe must decide before any boot";
  std::printf("microvm create on this host: 503: %s\n", message.c_str());

  // A second create answers from the cached probe: the same measured
  // figure (a probe run again measures another), still no launch.
  auto r2 = client_->Post("/v1/sandboxes", json{{"tier", "microvm"}}.dump(), kJson);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 503);
  const json body2 = testing::JsonOf(r2);
  EXPECT_EQ(body2.is_object() && body2.contains("error") ? body2["error"].value("message", "") : r2->body, message);
  EXPECT_EQ(launcher->launches(), 0);

  // Nothing behind: no sandbox, no state, no cgroup.
  auto list = client_->Get("/v1/sandboxes");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->body.find("sb-"), std::string::npos) << list->body;
  EXPECT_TRUE(Entries(state_root_).empty());
  EXPECT_TRUE(EmptyCgroupsSince(cgroups_before).empty());

  // Health reports the tier as unusable, with the reason.
  auto h = client_->Get("/v1/health");
  ASSERT_TRUE(h);
  json health = testing::JsonOf(h);
  EXPECT_EQ(health["tiers"]["microvm"], false) << health.dump();
  EXPECT_EQ(health["tiers_unavailable"]["microvm"], message) << health.dump();
}

class MicrovmDaemonPathTest : public MicrovmDaemonTest {
 protected:
  void SetUp() override {
    MicrovmDaemonTest::SetUp();
    if (IsSkipped()) return;
    if (::access(DSEC_AGENT_BINARY_PATH, X_OK) != 0) {
      GTEST_SKIP() << "dsec-agent not built";
    }
    store_ = dir_->path() + "/store";
    absl::Status s = testing::BuildBusyboxLayer(store_, dir_->path());
    if (!s.ok()) {
      GTEST_SKIP() << "busybox layer: " << s;
    }
    microvm::MicrovmTierOptions o;
    o.launcher = std::make_shared<microvm::HostAgentLauncher>(
        microvm::HostAgentLauncherOptions{DSEC_AGENT_BINARY_PATH});
    placer_ = QosPlacer::ForHost();
    Start(o, testing::StoreResolver(store_, ""), store_, placer_);
  }

  std::string Create(json body) {
    auto r = client_->Post("/v1/sandboxes", body.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 201) << r->body;
    return testing::JsonOf(r).value("id", "");
  }
  json Exec(const std::string& id, json body) {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"), body.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << r->body;
    return testing::JsonOf(r);
  }

  std::string store_;
  std::shared_ptr<QosPlacer> placer_;
};

TEST_F(MicrovmDaemonPathTest, CreateExecFilesPausePackDiffDelete) {
  auto h = client_->Get("/v1/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(testing::JsonOf(h)["tiers"]["microvm"], true);

  const std::string id = Create({{"tier", "microvm"}, {"memory_mib", 256}});
  ASSERT_FALSE(id.empty());
  json out = Exec(id, {{"argv", {"sh", "-c", "echo out; echo err >&2; exit 4"}}});
  EXPECT_EQ(out["exit_code"], 4) << out.dump();
  EXPECT_EQ(out["stdout"], "out\n");
  EXPECT_EQ(out["stderr"], "err\n");
  EXPECT_EQ(out["timed_out"], false);
  json slow = Exec(id, {{"argv", {"sleep", "30"}}, {"timeout_s", 1}});
  EXPECT_EQ(slow["timed_out"], true) << slow.dump();
  EXPECT_EQ(slow["killed_by"], "timeout");
  json missing = Exec(id, {{"argv", {"no-such-command-dsec"}}});
  EXPECT_EQ(missing["exit_code"], 127) << missing.dump();

  // Streamed exec: the tier hands chunks on as the agent sends them.
  auto st = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec/stream"),
                          json{{"argv", {"sh", "-c", "echo one; echo two >&2; exit 5"}}}.dump(), kJson);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->status, 200) << st->body;
  // NDJSON: output chunks (base64 of "one\n" on stdout, "two\n" on stderr), then the exit.
  EXPECT_NE(st->body.find(R"({"data_b64":"b25lCg==","stream":"stdout"})"), std::string::npos) << st->body;
  EXPECT_NE(st->body.find(R"({"data_b64":"dHdvCg==","stream":"stderr"})"), std::string::npos) << st->body;
  EXPECT_NE(st->body.find(R"("exit_code":5)"), std::string::npos) << st->body;

  // Files through the agent, confined to the sandbox's root.
  auto put = client_->Put(absl::StrCat("/v1/sandboxes/", id, "/files?path=/root/made.txt"),
                          "made in a microvm\n", "application/octet-stream");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 204) << put->body;
  auto get = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files?path=/root/made.txt"));
  ASSERT_TRUE(get);
  EXPECT_EQ(get->body, "made in a microvm\n");
  auto ls = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files/list?path=/root"));
  ASSERT_TRUE(ls);
  EXPECT_NE(ls->body.find("made.txt"), std::string::npos) << ls->body;

  auto paused = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/pause"), "", kJson);
  ASSERT_TRUE(paused);
  EXPECT_EQ(testing::JsonOf(paused)["state"], "paused") << paused->body;
  auto resumed = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/resume"), "", kJson);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(testing::JsonOf(resumed)["state"], "running") << resumed->body;
  EXPECT_EQ(Exec(id, {{"argv", {"echo", "again"}}})["stdout"], "again\n");

  // pack_diff: the daemon's own path (UpperDir, pause, layers::PackDiff).
  const std::string name = absl::StrCat("mvm", ::getpid());
  auto pd = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/pack_diff"),
                          json{{"name", name}, {"version", "1"}}.dump(), kJson);
  ASSERT_TRUE(pd);
  ASSERT_EQ(pd->status, 201) << pd->body;
  const std::string id2 = Create({{"tier", "microvm"}, {"layers", {name + ":1"}}});
  ASSERT_FALSE(id2.empty());
  auto get2 = client_->Get(absl::StrCat("/v1/sandboxes/", id2, "/files?path=/root/made.txt"));
  ASSERT_TRUE(get2);
  EXPECT_EQ(get2->status, 200);
  EXPECT_EQ(get2->body, "made in a microvm\n") << "the new layer holds the sandbox's file";

  for (const std::string& s : {id, id2}) {
    auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", s));
    ASSERT_TRUE(d);
    EXPECT_EQ(d->status, 204) << d->body;
  }
  EXPECT_TRUE(Entries(state_root_).empty());
  EXPECT_TRUE(MicrovmCgroups({id, id2}).empty());
}

TEST_F(MicrovmDaemonPathTest, AQosSandboxRunsInItsPlacement) {
  if (!placer_->available()) {
    GTEST_SKIP() << "no QoS placement on this host: " << placer_->status();
  }
  auto r = client_->Post("/v1/sandboxes", json{{"tier", "microvm"}, {"qos", "be"}}.dump(), kJson);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  json sb = testing::JsonOf(r);
  ASSERT_TRUE(sb["qos_applied"].get<bool>()) << sb;
  const std::string id = sb["id"];
  const std::string cgroup = sb["placement"].value("cgroup", "");
  ASSERT_FALSE(cgroup.empty()) << sb;
  std::ifstream init(state_root_ + "/" + id + "/init");
  pid_t pid = 0;
  init >> pid;
  ASSERT_GT(pid, 0);
  // The agent host process (the monitor, with the real launcher) is in
  // the placement's cgroup; the monitor then places nothing itself.
  std::ifstream procs(cgroup + "/cgroup.procs");
  bool inside = false;
  for (pid_t p; procs >> p;) inside |= p == pid;
  EXPECT_TRUE(inside) << pid << " not in " << cgroup;
  EXPECT_EQ(Exec(id, {{"argv", {"echo", "placed"}}})["stdout"], "placed\n");
  auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 204) << d->body;
  EXPECT_TRUE(Entries(state_root_).empty());
  EXPECT_TRUE(MicrovmCgroups({id}).empty());
}

TEST_F(MicrovmDaemonPathTest, CleanupOrphansRemovesWhatADeadDaemonLeft) {
  const std::string id = Create({{"tier", "microvm"}});
  ASSERT_FALSE(id.empty());
  const std::string state = state_root_ + "/" + id;
  const std::string init = [&] {
    std::ifstream in(state + "/init");
    std::string s;
    std::getline(in, s);
    return s;
  }();
  const pid_t pid = static_cast<pid_t>(std::stol(init));
  {
    std::ofstream owner(state + "/owner", std::ios::trunc);
    owner << "2147483646 1";
  }
  // A second tier object over the same root, as a restarted daemon has.
  microvm::MicrovmTierOptions o;
  o.state_root = state_root_;
  o.launcher = std::make_shared<microvm::HostAgentLauncher>(
      microvm::HostAgentLauncherOptions{DSEC_AGENT_BINARY_PATH});
  microvm::MicrovmTier restarted(o);
  auto removed = restarted.CleanupOrphans();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 1);
  EXPECT_NE(container::ProcessIdentity(pid).value_or(""), init);
  EXPECT_TRUE(Entries(state_root_).empty());
  EXPECT_TRUE(MicrovmCgroups({id}).empty());
  // The first daemon's object notices its sandbox is gone.
  auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(d);
}

}  // namespace
}  // namespace dsec::daemon
