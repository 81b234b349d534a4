// SPDX-License-Identifier: Apache-2.0
// The API end to end over a unix socket: real container (and fncall)
// sandboxes, files, pause/resume, pack_diff, streaming, limits, auth, the
// socket's reachability from a sandbox; and a dsec-vmmd child killed with
// SIGKILL, then restarted.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "gtest/gtest.h"
#include "sandbox/container/container_tier.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/daemon/http_server.h"
#include "sandbox/fncall/fncall_testing.h"

extern char** environ;

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;

constexpr char kJson[] = "application/json";

std::string Decode(const json& b64) { return Base64Decode(b64.get<std::string>()).value_or("<bad>"); }

class DaemonHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeBusyboxSuiteDir("dsec-daemon-http-", &dir_, &skip_).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Store() { return dir_->path() + "/store"; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    Start({});
  }
  void TearDown() override {
    client_.reset();  // an idle keep-alive connection would hold Stop
    daemon_.reset();
  }

  void Start(ServiceOptions so, HttpOptions ho = {}) {
    client_.reset();
    daemon_.reset();
    static int n = 0;
    so.start_reaper = true;
    auto d = testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/run", n++), Store(), std::move(so), ho);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    socket_ = daemon_->socket();
    client_ = testing::UnixClient(socket_);
  }

  std::string Create(json body = {{"tier", "container"}}) {
    auto r = client_->Post("/v1/sandboxes", body.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 201) << r->body;
    return testing::JsonOf(r).value("id", "");
  }
  json Exec(const std::string& id, json body, int want = 200) {
    auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"), body.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, want) << r->body;
    return testing::JsonOf(r);
  }
  json Sh(const std::string& id, const std::string& script) {
    return Exec(id, {{"argv", {"sh", "-c", script}}});
  }

  static TempDir* dir_;
  static std::string skip_;
  std::unique_ptr<testing::LocalDaemon> daemon_;
  std::unique_ptr<httplib::Client> client_;
  std::string socket_;
};
TempDir* DaemonHttpTest::dir_ = nullptr;
std::string DaemonHttpTest::skip_;

TEST_F(DaemonHttpTest, CreateExecDeleteAndHealth) {
  struct stat st;
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto h = client_->Get("/v1/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(testing::JsonOf(h)["status"], "ok");
  const std::string id = Create({{"tier", "container"}, {"memory_mib", 128}, {"qos", "ls"}, {"ttl_s", 600}});
  ASSERT_EQ(id.rfind("sb-", 0), 0u);
  json r = Exec(id, {{"argv", {"sh", "-c", "read x; echo out:$x:$FOO; echo err >&2; exit 3"}},
                     {"stdin", "in"}, {"env", {{"FOO", "bar"}}}});
  EXPECT_EQ(r["exit_code"], 3);
  EXPECT_EQ(r["stdout"], "out:in:bar\n");
  EXPECT_EQ(Decode(r["stderr_b64"]), "err\n");
  EXPECT_TRUE(r["signal"].is_null());
  auto g = client_->Get(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(g);
  json sb = testing::JsonOf(g);
  EXPECT_EQ(sb["execs"], 1);
  EXPECT_EQ(sb["qos"], "ls");
  EXPECT_EQ(sb["state"], "running");
  EXPECT_FALSE(sb["expires_unix_ms"].is_null());
  auto list = client_->Get("/v1/sandboxes");
  ASSERT_TRUE(list);
  EXPECT_EQ(testing::JsonOf(list)["sandboxes"].size(), 1u);
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("dsec_exec_seconds_count{tier=\"container\"} 1"), std::string::npos);
  auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 204);
  auto gone = client_->Get(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
  EXPECT_EQ(testing::JsonOf(gone)["error"]["code"], "NOT_FOUND");
}

TEST_F(DaemonHttpTest, BadRequestsGetErrorsNamingTheField) {
  auto r = client_->Post("/v1/sandboxes", json{{"tier", "container"}, {"pids", -1}}.dump(), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(testing::JsonOf(r)["error"]["field"], "pids");
  EXPECT_EQ(testing::JsonOf(r)["error"]["code"], "INVALID_ARGUMENT");
  r = client_->Post("/v1/sandboxes", "{not json", kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = client_->Post("/v1/sandboxes", std::string(2 << 20, ' '), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  r = client_->Post("/v1/sandboxes/sb-0000/exec", json{{"argv", {"true"}}}.dump(), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  auto nr = client_->Get("/v1/nothing");
  ASSERT_TRUE(nr);
  EXPECT_EQ(nr->status, 404);
  EXPECT_EQ(testing::JsonOf(nr)["error"]["code"], "NOT_FOUND");
  EXPECT_EQ(daemon_->service().sandbox_count(), 0);
}

TEST_F(DaemonHttpTest, LimitsGive429) {
  ServiceOptions so;
  so.max_sandboxes = 1;
  so.max_concurrent_execs = 1;
  Start(so);
  const std::string id = Create();
  auto r = client_->Post("/v1/sandboxes", json{{"tier", "container"}}.dump(), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(testing::JsonOf(r)["error"]["code"], "RESOURCE_EXHAUSTED");
  std::thread slow([&] {
    auto c = testing::UnixClient(socket_);
    c->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"), json{{"argv", {"sleep", "2"}}}.dump(), kJson);
  });
  // Wait until the slow exec holds the slot (the gauge says so), then one
  // more exec is refused.
  bool running = false;
  for (int i = 0; i < 5000 && !running; ++i) {
    auto m = client_->Get("/metrics");
    running = m && m->body.find("dsec_execs_running 1") != std::string::npos;
  }
  ASSERT_TRUE(running);
  auto x = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"), json{{"argv", {"true"}}}.dump(), kJson);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->status, 429);
  json busy = testing::JsonOf(x);
  slow.join();
  EXPECT_EQ(busy["error"]["code"], "RESOURCE_EXHAUSTED");
}

// Whether a process with exactly this argv runs on the host.
bool ProcessRuns(const std::string& argv0, const std::string& argv1) {
  const std::string want = argv0 + std::string(1, '\0') + argv1 + std::string(1, '\0');
  auto entries = dsec::ListDirectory("/proc");
  if (!entries.ok()) return false;
  for (const std::string& name : *entries) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in("/proc/" + name + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline == want) return true;
  }
  return false;
}

// A delete does not wait for a running command: it kills it (the exec's
// client gets the killed result) and the sandbox goes at once. Before, the
// delete waited for the command's end (here 10 minutes).
TEST_F(DaemonHttpTest, DeleteEndsARunningExec) {
  const std::string id = Create();
  const std::string seconds = absl::StrCat(600 + ::getpid() % 97);  // an argv no one else runs
  json result;
  std::thread slow([&] {
    auto c = testing::UnixClient(socket_);
    c->set_read_timeout(900, 0);
    auto r = c->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"),
                     json{{"argv", {"sleep", seconds}}, {"timeout_s", 900}}.dump(), kJson);
    if (r) result = testing::JsonOf(r);
  });
  bool running = false;
  for (int i = 0; i < 400 && !running; ++i) {
    running = ProcessRuns("sleep", seconds);
    if (!running) ::usleep(50'000);
  }
  ASSERT_TRUE(running) << "the command never started";
  const auto start = std::chrono::steady_clock::now();
  auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 204) << d->body;
  slow.join();
  EXPECT_LT(waited_s, 60.0);  // not the command's 600+ s
  ASSERT_TRUE(result.is_object() && result["signal"].is_number()) << result.dump();
  EXPECT_EQ(result["signal"], SIGKILL) << result.dump();
  EXPECT_FALSE(ProcessRuns("sleep", seconds));
  auto g = client_->Get(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 404);
}

// The container tier's files go through the sandbox's root on the host,
// not its init: they do not wait behind a running command (they did: a
// long command held every files call until it ended).
TEST_F(DaemonHttpTest, FilesWorkWhileACommandRuns) {
  const std::string id = Create();
  const std::string seconds = absl::StrCat(700 + ::getpid() % 97);
  std::thread slow([&] {
    auto c = testing::UnixClient(socket_);
    c->set_read_timeout(900, 0);
    c->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"),
            json{{"argv", {"sleep", seconds}}, {"timeout_s", 900}}.dump(), kJson);
  });
  bool running = false;
  for (int i = 0; i < 400 && !running; ++i) {
    running = ProcessRuns("sleep", seconds);
    if (!running) ::usleep(50'000);
  }
  ASSERT_TRUE(running) << "the command never started";
  client_->set_read_timeout(60, 0);  // far below the command's 700+ s
  auto put = client_->Put(absl::StrCat("/v1/sandboxes/", id, "/files?path=/work/beside.txt"), "written\n",
                          "application/octet-stream");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 204) << put->body;
  auto get = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files?path=/work/beside.txt"));
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200) << get->body;
  EXPECT_EQ(get->body, "written\n");
  auto list = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files/list?path=/work"));
  ASSERT_TRUE(list);
  EXPECT_NE(list->body.find("beside.txt"), std::string::npos) << list->body;
  // The command still runs; the delete ends it.
  EXPECT_TRUE(ProcessRuns("sleep", seconds));
  auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 204);
  slow.join();
}

TEST_F(DaemonHttpTest, FilesRoundTripAndEscapesAreRefused) {
  const std::string id = Create();
  const std::string secret = dir_->path() + "/host-secret";
  ASSERT_TRUE(container::testing::WriteTreeFile(dir_->path(), "host-secret", "HOST").ok());
  auto put = client_->Put(absl::StrCat("/v1/sandboxes/", id, "/files?path=/work/a/b.txt&mode=0640"),
                          std::string("data\0x", 6), "application/octet-stream");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 204) << put->body;
  auto get = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files?path=/work/a/b.txt"));
  ASSERT_TRUE(get);
  EXPECT_EQ(get->body, std::string("data\0x", 6));
  EXPECT_EQ(Sh(id, "stat -c %a /work/a/b.txt")["stdout"], "640\n");
  auto ls = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files/list?path=/work/a"));
  ASSERT_TRUE(ls);
  json entries = testing::JsonOf(ls)["entries"];
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0]["name"], "b.txt");
  EXPECT_EQ(entries[0]["size"], 6);
  // Escapes: .., an absolute symlink to a host path, a symlinked directory.
  Sh(id, absl::StrCat("ln -s ", secret, " /lnk; ln -s ", dir_->path(), " /dirlnk; ln -s ../../../.. /up"));
  for (const std::string& p : {absl::StrCat("/../../../..", secret), std::string("/lnk"),
                               std::string("/dirlnk/host-secret"), absl::StrCat("/up", secret)}) {
    auto r = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files?path=", p));
    ASSERT_TRUE(r);
    EXPECT_NE(r->body, "HOST") << p;
    EXPECT_EQ(r->status, 404) << p << " " << r->body;
  }
  auto w = client_->Put(absl::StrCat("/v1/sandboxes/", id, "/files?path=/dirlnk/planted"), "x",
                        "application/octet-stream");
  ASSERT_TRUE(w);
  EXPECT_NE(::access((dir_->path() + "/planted").c_str(), F_OK), 0);
  auto rel = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files?path=etc/passwd"));
  ASSERT_TRUE(rel);
  EXPECT_EQ(rel->status, 400);
  EXPECT_EQ(testing::JsonOf(rel)["error"]["field"], "path");
}

// The host pid of sandbox `id`'s init: the dsec-sandbox-init process in
// its memory cgroup (0: none).
pid_t InitPidOf(const std::string& id) {
  std::error_code ec;
  for (const auto& d : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = d.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto comm = ReadSmallFile(d.path().string() + "/comm");
    auto cgroup = ReadSmallFile(d.path().string() + "/cgroup");
    if (!comm.ok() || !cgroup.ok() || comm->rfind("dsec-sandbox-in", 0) != 0) continue;
    if (cgroup->find(absl::StrCat("dsec-ctr-", id, "\n")) == std::string::npos) continue;
    return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

// A sandbox whose init dies (here killed from outside; in life, taken by
// its memory cgroup's OOM killer when its memory filled up) is reported
// ended, saying why, and its execs are refused with the reason, until it
// is deleted (before, it stayed "running" and every exec said only that
// its init was gone).
TEST_F(DaemonHttpTest, ASandboxWhoseInitDiesIsReportedEnded) {
  const std::string id = Create();
  EXPECT_EQ(Sh(id, "echo ok")["stdout"], "ok\n");
  const pid_t init = InitPidOf(id);
  ASSERT_GT(init, 0);
  ASSERT_EQ(::kill(init, SIGKILL), 0);
  json got;
  for (int i = 0; i < 200; ++i) {
    auto g = client_->Get(absl::StrCat("/v1/sandboxes/", id));
    ASSERT_TRUE(g);
    got = testing::JsonOf(g);
    if (got["state"] == "ended") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(got["state"], "ended") << got;
  EXPECT_EQ(got["ended_reason"], "its init was killed by signal 9") << got;
  json refused = Exec(id, {{"argv", {"true"}}}, 409);
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("has ended: its init was killed by signal 9"),
            std::string::npos)
      << refused;
  auto put = client_->Put(absl::StrCat("/v1/sandboxes/", id, "/files?path=/x"), "x", "application/octet-stream");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 409) << put->body;
  EXPECT_NE(put->body.find("has ended: its init was killed by signal 9"), std::string::npos) << put->body;
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("state=\"ended\"} 1"), std::string::npos) << metrics->body.substr(0, 2000);
  auto del = client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 204);
}

TEST_F(DaemonHttpTest, PauseFreezesAndResumeThaws) {
  const std::string id = Create();
  auto p = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/pause"), "", kJson);
  ASSERT_TRUE(p);
  EXPECT_EQ(testing::JsonOf(p)["state"], "paused");
  std::ifstream st(absl::StrCat("/sys/fs/cgroup/freezer/", container::FreezerCgroupName(id), "/freezer.state"));
  std::string state;
  if (st >> state) {
    EXPECT_EQ(state, "FROZEN");
  }
  json refused = Exec(id, {{"argv", {"true"}}}, 409);
  EXPECT_EQ(refused["error"]["code"], "FAILED_PRECONDITION");
  auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/resume"), "", kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(testing::JsonOf(r)["state"], "running");
  EXPECT_EQ(Sh(id, "echo ok")["stdout"], "ok\n");
}

TEST_F(DaemonHttpTest, ASandboxOpensOnlyTheDevicesItsPolicyAllows) {
  const std::string id = Create();
  std::ifstream procs(absl::StrCat("/sys/fs/cgroup/unified/dsec-ctr-", id, "/cgroup.procs"));
  pid_t init = 0;
  if (!(procs >> init)) {
    GTEST_SKIP() << "no hybrid cgroup v2 directory for the sandbox here (a pure v2 host, or no device program)";
  }
  // The host puts a tun node (c 10:200: anyone may open it, no capability
  // needed) into the sandbox's /dev, the only mount of it without nodev:
  // the device program refuses it. The nodes the sandbox's /dev is made
  // with still work.
  const std::string node = absl::StrCat("/proc/", init, "/root/dev/tun");
  ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, makedev(10, 200)), 0) << strerror(errno);
  ASSERT_EQ(::chmod(node.c_str(), 0666), 0);
  json r = Sh(id, "(exec 3</dev/tun) && echo opened || echo refused; echo x > /dev/null && head -c 4 /dev/zero | wc -c");
  EXPECT_NE(Decode(r["stderr_b64"]).find("Operation not permitted"), std::string::npos) << r.dump();
  EXPECT_EQ(r["stdout"], "refused\n4\n");
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("dsec_container_device_policy 1"), std::string::npos);
}

TEST_F(DaemonHttpTest, PackDiffMakesALayerOthersCanUse) {
  const std::string id = Create();
  Sh(id, "mkdir -p /data && echo packed > /data/x");
  const std::string name = absl::StrCat("pd", ::getpid());
  auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/pack_diff"),
                         json{{"name", name}, {"version", "1"}}.dump(), kJson);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  json layer = testing::JsonOf(r);
  EXPECT_EQ(layer["layer"], name + ":1");
  EXPECT_EQ(layer["digest"].get<std::string>().rfind("sha256:", 0), 0u);
  auto layers = client_->Get("/v1/layers");
  ASSERT_TRUE(layers);
  EXPECT_NE(layers->body.find(name), std::string::npos);
  const std::string id2 = Create({{"tier", "container"}, {"layers", {name + ":1"}}});
  EXPECT_EQ(Sh(id2, "cat /data/x")["stdout"], "packed\n");
  auto in_use = client_->Delete(absl::StrCat("/v1/layers/", name, ":1"));
  ASSERT_TRUE(in_use);
  EXPECT_EQ(in_use->status, 409);
  client_->Delete(absl::StrCat("/v1/sandboxes/", id2));
  auto removed = client_->Delete(absl::StrCat("/v1/layers/", name, ":1"));
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->status, 204) << removed->body;
}

// user_namespace: each such sandbox gets a host id range of its own; files,
// exec and pack_diff work as without it.
TEST_F(DaemonHttpTest, UserNamespaceSandboxesGetTheirOwnHostIds) {
  auto bad = client_->Post("/v1/sandboxes", json{{"tier", "fncall"}, {"user_namespace", true}}.dump(), kJson);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(testing::JsonOf(bad)["error"]["field"], "user_namespace");
  const std::string a = Create({{"tier", "container"}, {"user_namespace", true}});
  const std::string b = Create({{"tier", "container"}, {"user_namespace", true}});
  auto info = client_->Get(absl::StrCat("/v1/sandboxes/", a));
  ASSERT_TRUE(info);
  EXPECT_EQ(testing::JsonOf(info)["user_namespace"], true);
  std::string map_a = Sh(a, "id -u; cat /proc/self/uid_map")["stdout"];
  std::string map_b = Sh(b, "cat /proc/self/uid_map")["stdout"];
  EXPECT_EQ(map_a.substr(0, 2), "0\n");
  EXPECT_NE(map_a.substr(2), map_b) << "two sandboxes share host ids";
  EXPECT_EQ(map_a.find("         0          0 "), std::string::npos) << map_a;
  // Files through the API are root's inside.
  auto put = client_->Put(absl::StrCat("/v1/sandboxes/", a, "/files?path=/work/in.txt&mode=0600"), "hello",
                          "application/octet-stream");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 204) << put->body;
  EXPECT_EQ(Sh(a, "stat -c '%u %a' /work/in.txt; cat /work/in.txt")["stdout"], "0 600\nhello");
  Sh(a, "mkdir -p /data && echo packed > /data/x && chown 1000 /data/x");
  auto get = client_->Get(absl::StrCat("/v1/sandboxes/", a, "/files?path=/data/x"));
  ASSERT_TRUE(get);
  EXPECT_EQ(get->body, "packed\n");
  const std::string name = absl::StrCat("uns", ::getpid());
  auto r = client_->Post(absl::StrCat("/v1/sandboxes/", a, "/pack_diff"),
                         json{{"name", name}, {"version", "1"}}.dump(), kJson);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string plain = Create({{"tier", "container"}, {"layers", {name + ":1"}}});
  EXPECT_EQ(Sh(plain, "stat -c %u /data/x; cat /data/x /work/in.txt")["stdout"], "1000\npacked\nhello");
  for (const std::string& id : {a, b, plain}) client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  client_->Delete(absl::StrCat("/v1/layers/", name, ":1"));
}

// Joins a client's thread when the test leaves early: the daemon is
// stopped first (its Stop ends every watch stream and command, so the
// thread returns).
struct StopThenJoin {
  std::unique_ptr<httplib::Client>* client;
  std::unique_ptr<testing::LocalDaemon>* daemon;
  std::thread* t;
  ~StopThenJoin() {
    if (!t->joinable()) return;
    client->reset();
    daemon->reset();
    t->join();
  }
};

// A command's timeout counts only the time its sandbox ran: paused for
// longer than the whole timeout, it still finishes after the resume.
TEST_F(DaemonHttpTest, ACommandsTimeoutStandsStillWhileItsSandboxIsPaused) {
  const std::string id = Create();
  json result;
  std::thread t([&] {
    auto c = testing::UnixClient(socket_);
    c->set_read_timeout(60, 0);
    auto r = c->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"),
                     json{{"argv", {"sh", "-c", "sleep 1; echo done"}}, {"timeout_s", 3}}.dump(), kJson);
    if (r) result = testing::JsonOf(r);
  });
  StopThenJoin join_t{&client_, &daemon_, &t};
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto p = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/pause"));
  ASSERT_TRUE(p);
  ASSERT_EQ(p->status, 200) << p->body;
  std::this_thread::sleep_for(std::chrono::seconds(4));  // past the 3 s on the host's clock
  auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/resume"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  t.join();
  EXPECT_EQ(result.value("stdout", ""), "done\n") << result.dump();
  EXPECT_EQ(result["exit_code"], json(0)) << result.dump();
  EXPECT_EQ(result["timed_out"], json(false)) << result.dump();
  // Its duration is the time it could run.
  EXPECT_TRUE(result["duration_ms"].is_number() && result["duration_ms"].get<double>() < 3e3) << result.dump();
}

TEST_F(DaemonHttpTest, StreamingExecSendsOutputLinesThenExit) {
  const std::string id = Create();
  std::string body;
  auto r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec/stream"),
                         json{{"argv", {"sh", "-c", "echo one; echo two >&2; exit 5"}}}.dump(), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/x-ndjson");
  std::string out, err;
  json exit;
  for (absl::string_view line : absl::StrSplit(r->body, '\n', absl::SkipEmpty())) {
    json j = json::parse(std::string(line));
    if (j.contains("exit")) {
      exit = j["exit"];
    } else {
      (j["stream"] == "stdout" ? out : err) += Decode(j["data_b64"]);
    }
  }
  EXPECT_EQ(out, "one\n");
  EXPECT_EQ(err, "two\n");
  EXPECT_EQ(exit["exit_code"], 5);
  EXPECT_FALSE(exit.contains("stdout"));
}

// GET .../files/watch, read line by line on a client of its own until
// `until` says so (or the stream ends); `on_line` sees each line.
struct WatchClient {
  std::vector<json> lines;
  int status = 0;
  std::mutex mu;
  std::condition_variable cv;

  void Run(const std::string& socket, const std::string& target, const std::function<bool(const json&)>& until) {
    auto c = testing::UnixClient(socket);
    c->set_read_timeout(30, 0);
    std::string buf;
    auto r = c->Get(target, [&](const char* data, size_t len) {
      buf.append(data, len);
      for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
        json j = json::parse(buf.substr(0, nl));
        buf.erase(0, nl + 1);
        bool stop = false;
        {
          std::lock_guard<std::mutex> lock(mu);
          lines.push_back(j);
          stop = until(j);
        }
        cv.notify_all();
        if (stop) return false;
      }
      return true;
    });
    std::lock_guard<std::mutex> lock(mu);
    status = r ? r->status : -1;
    if (r && r->status != 200 && !r->body.empty()) lines.push_back(json::parse(r->body));
    cv.notify_all();
  }
  bool WaitFor(const std::function<bool(const json&)>& pred, int seconds = 10) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(seconds), [&] {
      return std::any_of(lines.begin(), lines.end(), pred);
    });
  }
};

bool IsEvent(const json& j, const std::string& type, const std::string& name) {
  return j.contains("event") && j["event"]["type"] == type && j["event"]["name"] == name;
}

TEST_F(DaemonHttpTest, WatchStreamsADirectorysChangesAsNdjsonLines) {
  HttpOptions ho;
  ho.watch_keepalive_ms = 200;
  ho.max_watch_streams = 1;
  Start({}, ho);
  const std::string id = Create();
  Sh(id, "mkdir -p /w");
  const std::string base = absl::StrCat("/v1/sandboxes/", id, "/files/watch?path=");
  // Request errors come as plain HTTP errors.
  auto missing = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files/watch"));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400) << missing->body;
  auto bad = client_->Get(base + "/w&recursive=maybe");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto nodir = client_->Get(base + "/no/such");
  ASSERT_TRUE(nodir);
  EXPECT_EQ(nodir->status, 404) << nodir->body;

  WatchClient w;
  std::thread t([&] { w.Run(socket_, base + "/w&recursive=true", [](const json& j) { return IsEvent(j, "create", "sub/b"); }); });
  StopThenJoin join_t{&client_, &daemon_, &t};
  ASSERT_TRUE(w.WaitFor([](const json& j) { return j.contains("watching"); }));
  // One stream is this server's most: a second is refused.
  auto second = client_->Get(base + "/w");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 429) << second->body;
  Sh(id, "touch /w/a && mkdir /w/sub && sleep 0.2 && echo x > /w/sub/b");
  t.join();  // the client stopped reading: its request ends cancelled
  ASSERT_FALSE(w.lines.empty());
  EXPECT_EQ(w.lines.front()["watching"]["path"], "/w");
  EXPECT_EQ(w.lines.front()["watching"]["recursive"], true);
  EXPECT_TRUE(std::any_of(w.lines.begin(), w.lines.end(), [](const json& j) { return IsEvent(j, "create", "a"); }));
  EXPECT_TRUE(std::any_of(w.lines.begin(), w.lines.end(), [](const json& j) { return IsEvent(j, "create", "sub"); }));

  // A quiet stream keeps alive; the sandbox's delete ends it with its error
  // line. The client that went above frees its stream at the server's next
  // write (a keepalive within 200 ms): until then a new one is refused.
  WatchClient quiet;
  std::thread q([&] {
    for (int i = 0; i < 50; ++i) {
      quiet.Run(socket_, base + "/w", [](const json&) { return false; });
      if (quiet.status != 429) return;
      std::lock_guard<std::mutex> lock(quiet.mu);
      quiet.lines.clear();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  StopThenJoin join_q{&client_, &daemon_, &q};
  ASSERT_TRUE(quiet.WaitFor([](const json& j) { return j.is_object() && j.empty(); }, 20)) << "no keepalive";
  auto del = client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 204);
  q.join();
  ASSERT_FALSE(quiet.lines.empty());
  EXPECT_EQ(quiet.lines.back()["error"]["code"], "UNAVAILABLE") << quiet.lines.back();
}

TEST_F(DaemonHttpTest, StoppingTheServerEndsOpenWatchStreams) {
  const std::string id = Create();
  Sh(id, "mkdir -p /w");
  WatchClient w;
  std::thread t([&] {
    w.Run(socket_, absl::StrCat("/v1/sandboxes/", id, "/files/watch?path=/w"), [](const json&) { return false; });
  });
  StopThenJoin join_t{&client_, &daemon_, &t};
  ASSERT_TRUE(w.WaitFor([](const json& j) { return j.contains("watching"); }));
  const auto t0 = std::chrono::steady_clock::now();
  client_.reset();
  daemon_.reset();  // the keepalive is 15 s: without closing the watch, Stop would wait on its worker
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_FALSE(w.lines.empty());
  EXPECT_EQ(w.lines.back()["error"]["code"], "UNAVAILABLE") << w.lines.back();
}

TEST_F(DaemonHttpTest, FncallSandboxRunsCodeAndHasNoFiles) {
  if (!fncall::testing::EnsureTestLayers().ok()) GTEST_SKIP() << "no fncall test layers";
  const std::string id = Create({{"tier", "fncall"}});
  json r = Exec(id, {{"code", "import sys; print('py', sys.argv[1:], sys.stdin.read())"},
                     {"argv", {"a"}}, {"stdin", "in"}});
  EXPECT_EQ(r["exit_code"], 0);
  EXPECT_EQ(r["stdout"], "py ['a'] in\n");
  auto f = client_->Get(absl::StrCat("/v1/sandboxes/", id, "/files?path=/etc/passwd"));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->status, 409);
}

TEST_F(DaemonHttpTest, TcpNeedsTheToken) {
  HttpOptions ho;
  ho.tcp_host = "0.0.0.0";
  ho.token = "0123456789abcdef-token";
  Start({}, ho);
  const int port = daemon_->server().tcp_port();
  ASSERT_GT(port, 0);
  httplib::Client c("127.0.0.1", port);
  auto none = c.Get("/v1/health");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(testing::JsonOf(none)["error"]["code"], "UNAUTHENTICATED");
  auto wrong = c.Get("/v1/health", {{"Authorization", "Bearer 0123456789abcdef-tokem"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto ok = c.Get("/v1/health", {{"Authorization", "Bearer 0123456789abcdef-token"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);

  // From inside a sandbox neither the socket nor the TCP port is reachable.
  std::string host_ip = "127.0.0.1";
  struct ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (auto* i = ifs; i; i = i->ifa_next) {
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && std::string(i->ifa_name) != "lo") {
        char buf[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
        host_ip = buf;
        break;
      }
    }
    freeifaddrs(ifs);
  }
  const std::string id = Create();
  json r = Sh(id, absl::StrCat("test -e ", socket_, " && echo SOCKET-VISIBLE; ",
                               "nc -U ", socket_, " </dev/null && echo UNIX-CONNECTED; ",
                               "for h in 127.0.0.1 ", host_ip, "; do wget -q -T 2 -O - http://$h:", port,
                               "/v1/health && echo TCP-REACHED; done; echo done"));
  EXPECT_EQ(r["stdout"], "done\n") << r["stderr"];
  // The same probe from the host does reach the port (the check can fail).
  ASSERT_TRUE(c.Get("/v1/health"));
}

TEST_F(DaemonHttpTest, TaskResumeRestoresCheckpointAndReplaysWithoutRunning) {
  const std::string task = absl::StrCat("http-task-", ::getpid());
  const std::string id = Create({{"tier", "container"}, {"task_id", task}});
  const std::string append = "echo x >> /root/f; wc -l < /root/f";
  EXPECT_EQ(Sh(id, append)["stdout"], "1\n");
  EXPECT_EQ(Sh(id, append)["seq"], 1);
  auto pd = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/pack_diff"),
                          json{{"name", task}, {"version", "ck2"}}.dump(), kJson);
  ASSERT_TRUE(pd);
  ASSERT_EQ(pd->status, 201) << pd->body;
  EXPECT_EQ(Sh(id, append)["stdout"], "3\n");
  client_->Delete(absl::StrCat("/v1/sandboxes/", id));

  auto res = client_->Post(absl::StrCat("/v1/tasks/", task, "/resume"), json{{"tier", "container"}}.dump(), kJson);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  EXPECT_EQ(testing::JsonOf(res)["recorded"], 3);
  const std::string rid = testing::JsonOf(res)["id"];
  for (const char* want : {"1\n", "2\n"}) {
    json r = Sh(rid, append);
    EXPECT_TRUE(r["replayed"].get<bool>());
    EXPECT_EQ(r["stdout"], want);
  }
  // Nothing ran: the fresh sandbox has no /root/f.
  auto f = client_->Get(absl::StrCat("/v1/sandboxes/", rid, "/files?path=/root/f"));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->status, 404);
  // A different third command goes live on the checkpoint (2 lines).
  json live = Sh(rid, "echo y >> /root/f; wc -l < /root/f");
  EXPECT_FALSE(live["replayed"].get<bool>());
  EXPECT_EQ(live["stdout"], "3\n");
  EXPECT_EQ(live["seq"], 2);
  EXPECT_EQ(live["divergence"]["seq"], 2);
  EXPECT_EQ(live["divergence"]["reason"], "differs");
  EXPECT_TRUE(live["divergence"]["not_reapplied"].empty());
  auto log = client_->Get(absl::StrCat("/v1/tasks/", task, "/log"));
  ASSERT_TRUE(log);
  json lj = testing::JsonOf(log);
  ASSERT_EQ(lj["records"].size(), 3u);
  EXPECT_EQ(lj["records"][2]["argv"][2], "echo y >> /root/f; wc -l < /root/f");
  ASSERT_EQ(lj["checkpoints"].size(), 1u);
  EXPECT_EQ(lj["checkpoints"][0]["prefix"], 2);
  client_->Delete(absl::StrCat("/v1/sandboxes/", rid));
  auto del = client_->Delete(absl::StrCat("/v1/tasks/", task));
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 204);
}

}  // namespace
}  // namespace dsec::daemon
