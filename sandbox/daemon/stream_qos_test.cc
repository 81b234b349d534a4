// SPDX-License-Identifier: Apache-2.0
// The API end to end over a unix socket, for the two things that need real
// processes and real cgroups: exec/stream delivering output while the
// command runs (slow and vanishing clients included), and qos placing
// sandboxes in sched/ cpusets. "While it runs" is an order the test
// controls, not a time: the command waits at a Gate until the test, having
// seen its output, releases it.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/scoped_fd.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/fncall/fncall_testing.h"
#include "sched/cpu_list.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;
constexpr char kJson[] = "application/json";

// A point where a sandboxed command waits for the test. The command makes
// the FIFO path() and holds it open before it prints anything, then blocks
// reading it (60 s at most: then it exits 9, a failure the test sees);
// Release() writes a line into it from the host, through /proc/<pid>/root
// of whichever process sees the FIFO (the sandbox's root and /tmp; the
// path is unique, so no other process does).
class Gate {
 public:
  Gate() : path_(absl::StrCat("/tmp/dsec-gate-", ::getpid(), "-", next_++)) {}
  // Shell: before the first output, and where the command waits.
  std::string ShellOpen() const { return absl::StrCat("mkfifo ", path_, " && exec 3<>", path_, " || exit 8; "); }
  std::string ShellWait() const { return "read -t 60 x <&3 || exit 9; "; }
  // Python: the same, with `import os, select` done.
  std::string PythonOpen() const {
    return absl::StrCat("import os, select\nos.mkfifo('", path_, "')\ngate = os.open('", path_,
                        "', os.O_RDWR)\n");
  }
  std::string PythonWait() const {
    return "if not select.select([gate], [], [], 60)[0]:\n    raise SystemExit(9)\n";
  }
  // Lets the command go on; false if no process holds the gate open.
  bool Release() const {
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return false;
    bool done = false;
    while (dirent* e = ::readdir(proc)) {
      if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
      // Non-blocking: opens only while a reader holds the FIFO.
      ScopedFd fd(::open(absl::StrCat("/proc/", e->d_name, "/root", path_).c_str(),
                         O_WRONLY | O_NONBLOCK | O_CLOEXEC));
      if (fd && ::write(fd.get(), "go\n", 3) == 3) {
        done = true;
        break;
      }
    }
    ::closedir(proc);
    return done;
  }

 private:
  static inline int next_ = 0;
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What a client saw of one streamed exec.
struct Streamed {
  int status = 0;
  std::string out, err;
  json last;  // the exit (or error) line
};

class StreamQosTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeBusyboxSuiteDir("dsec-daemon-sq-", &dir_, &skip_).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Store() { return dir_->path() + "/store"; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    static int n = 0;
    ServiceOptions so;
    so.start_reaper = false;
    placer_ = QosPlacer::ForHost();
    so.qos = placer_;
    auto d = testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/run", n++), Store(), std::move(so));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    socket_ = daemon_->socket();
    client_ = testing::UnixClient(socket_);
  }
  void TearDown() override {
    client_.reset();
    daemon_.reset();
  }

  json Create(json body) {
    auto r = client_->Post("/v1/sandboxes", body.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 201) << r->body;
    return testing::JsonOf(r);
  }
  json Exec(const std::string& id, json body) {
    auto c = testing::UnixClient(socket_);
    auto r = c->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"), body.dump(), kJson);
    EXPECT_TRUE(r);
    return r ? testing::JsonOf(r) : json(nullptr);
  }

  // POSTs to exec/stream on a connection of its own and parses the NDJSON
  // as it arrives. `on_line` sees each output line first; returning false
  // drops the connection.
  Streamed Stream(const std::string& id, json body,
                  const std::function<bool(const Streamed&)>& on_line = nullptr) {
    Streamed s;
    auto c = testing::UnixClient(socket_);
    httplib::Request req;
    req.method = "POST";
    req.path = absl::StrCat("/v1/sandboxes/", id, "/exec/stream");
    req.body = body.dump();
    req.set_header("Content-Type", kJson);
    std::string pending;
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      pending.append(data, len);
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        json j = json::parse(pending.substr(0, nl), nullptr, false);
        pending.erase(0, nl + 1);
        if (j.contains("stream")) {
          (j["stream"] == "stdout" ? s.out : s.err) += Base64Decode(j["data_b64"]).value_or("<bad>");
          if (on_line && !on_line(s)) return false;
        } else {
          s.last = j;
        }
      }
      return true;
    };
    auto r = c->send(req);
    if (r) s.status = r->status;
    return s;
  }

  static TempDir* dir_;
  static std::string skip_;
  std::shared_ptr<QosPlacer> placer_;
  std::unique_ptr<testing::LocalDaemon> daemon_;
  std::unique_ptr<httplib::Client> client_;
  std::string socket_;
};
TempDir* StreamQosTest::dir_ = nullptr;
std::string StreamQosTest::skip_;

// Releases `gate` at the first output line, after noting what the client
// had then: the command cannot have finished before.
struct ReleaseAtFirstLine {
  explicit ReleaseAtFirstLine(const Gate& g) : gate(g) {}
  bool operator()(const Streamed& now) {
    if (released) return true;
    out = now.out;
    err = now.err;
    ended = !now.last.is_null();
    released = gate.Release();
    return true;
  }
  const Gate& gate;
  bool released = false;
  std::string out, err;  // what the client had at the first line
  bool ended = false;
};

TEST_F(StreamQosTest, ContainerOutputArrivesWhileTheCommandRuns) {
  const std::string id = Create({{"tier", "container"}, {"task_id", "stream-ct"}})["id"];
  Gate gate;
  ReleaseAtFirstLine first(gate);
  Streamed s = Stream(id, {{"argv", {"sh", "-c", absl::StrCat(gate.ShellOpen(), "echo first; ", gate.ShellWait(),
                                                              "echo second >&2; exit 4")}}},
                      std::ref(first));
  ASSERT_EQ(s.status, 200);
  // The first line reached the client while the command waited for it.
  ASSERT_TRUE(first.released) << "no process held the gate: " << s.last;
  EXPECT_EQ(first.out, "first\n");
  EXPECT_EQ(first.err, "");
  EXPECT_FALSE(first.ended);
  EXPECT_EQ(s.out, "first\n");
  EXPECT_EQ(s.err, "second\n");
  EXPECT_EQ(s.last["exit"]["exit_code"], 4);
  EXPECT_EQ(s.last["deferred_bytes"], 0);
  // Recorded like a plain exec: the same result in the trajectory.
  EXPECT_EQ(s.last["exit"]["seq"], 0);
  auto log = client_->Get("/v1/tasks/stream-ct/log");
  ASSERT_TRUE(log);
  json rec = testing::JsonOf(log)["records"][0];
  EXPECT_EQ(Base64Decode(rec["stdout_b64"]).value_or(""), "first\n");
  EXPECT_EQ(Base64Decode(rec["stderr_b64"]).value_or(""), "second\n");
  EXPECT_EQ(rec["exit_code"], 4);
  client_->Delete(absl::StrCat("/v1/sandboxes/", id));
  client_->Delete("/v1/tasks/stream-ct");
}

TEST_F(StreamQosTest, FncallOutputArrivesWhileTheCallRuns) {
  if (!fncall::testing::EnsureTestLayers().ok()) GTEST_SKIP() << "no fncall test layers";
  const std::string id = Create({{"tier", "fncall"}})["id"];
  Gate gate;
  ReleaseAtFirstLine first(gate);
  Streamed s = Stream(id, {{"code", absl::StrCat(gate.PythonOpen(), "print('first', flush=True)\n",
                                                 gate.PythonWait(), "print('second')")}},
                      std::ref(first));
  ASSERT_EQ(s.status, 200);
  ASSERT_TRUE(first.released) << "no process held the gate: " << s.last;
  EXPECT_EQ(first.out, "first\n");
  EXPECT_FALSE(first.ended);
  EXPECT_EQ(s.out, "first\nsecond\n");
  EXPECT_EQ(s.last["exit"]["exit_code"], 0);
}

TEST_F(StreamQosTest, YesFloodIsCappedAndTheExecReturns) {
  const std::string id = Create({{"tier", "container"}})["id"];
  Streamed s = Stream(id, {{"argv", {"sh", "-c", "yes | head -c 20000000"}}});
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.last["exit"]["exit_code"], 0);
  const uint64_t dropped = s.last["exit"]["stdout_dropped"];
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(s.out.size(), 4u << 20);  // the daemon's per-exec cap
  EXPECT_EQ(s.out.size() + dropped, 20000000u);
  EXPECT_EQ(s.last["exit"]["stderr_dropped"], 0);
  EXPECT_EQ(s.out.find_first_not_of("y\n"), std::string::npos);
}

TEST_F(StreamQosTest, SlowClientDoesNotHoldTheExecAndLosesNothing) {
  const std::string id = Create({{"tier", "container"}})["id"];
  bool waited = false;
  json after;
  // At the first line the client stops reading until another exec on the
  // sandbox has seen the streamed command finish all its output.
  Streamed s = Stream(id, {{"argv", {"sh", "-c", "echo go; yes | head -c 3000000; echo end >&2; touch /tmp/end"}}},
                      [&](const Streamed&) {
                        if (!waited) {
                          after = Exec(id, {{"argv", {"sh", "-c",
                                                      "while [ ! -e /tmp/end ]; do sleep 0.01; done; echo after"}}});
                        }
                        waited = true;
                        return true;
                      });
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(after["stdout"], "after\n");
  EXPECT_EQ(s.out.size(), 3u + 3000000u);
  EXPECT_EQ(s.err, "end\n");
  EXPECT_EQ(s.last["exit"]["exit_code"], 0);
  // More than the live buffer and the socket hold was sent after the end.
  EXPECT_GT(s.last["deferred_bytes"].get<uint64_t>(), 0u) << s.last;
}

TEST_F(StreamQosTest, ClientThatDisconnectsLeavesTheDaemonAndSandboxUsable) {
  const std::string id = Create({{"tier", "container"}})["id"];
  Gate gate;
  // The client goes at the first line; the command, held at the gate until
  // then, has its bulk of output still to write.
  Streamed s = Stream(id, {{"argv", {"sh", "-c", absl::StrCat(gate.ShellOpen(), "echo one; ", gate.ShellWait(),
                                                              "yes | head -c 5000000; echo two")}}},
                      [](const Streamed&) { return false; });
  EXPECT_EQ(s.out, "one\n");
  EXPECT_TRUE(s.last.is_null());
  EXPECT_TRUE(gate.Release()) << "the exec ended with its client";
  // The abandoned exec runs on to its end; the sandbox takes the next one.
  json r = Exec(id, {{"argv", {"sh", "-c", "echo ok"}}});
  EXPECT_EQ(r["stdout"], "ok\n");
  auto h = client_->Get("/v1/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(testing::JsonOf(h)["status"], "ok");
  // The abandoned exec's thread gives its slot back just after it lets the
  // sandbox go, which under load can be after the next exec has answered:
  // the gauge settles within a deadline rather than at once.
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    auto m = client_->Get("/metrics");
    ASSERT_TRUE(m);
    body = m->body;
  } while (body.find("dsec_execs_running 0") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_NE(body.find("dsec_execs_running 0"), std::string::npos);
  EXPECT_NE(body.find("dsec_execs_total{tier=\"container\"} 2"), std::string::npos);
}

// The pid (host view) of the process in `cgroup` whose command line holds
// `marker`, or 0.
pid_t FindInCgroup(const std::string& cgroup, const std::string& marker) {
  std::istringstream procs(ReadAll(cgroup + "/cgroup.procs"));
  for (pid_t pid; procs >> pid;) {
    std::string cmdline = ReadAll(absl::StrCat("/proc/", pid, "/cmdline"));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) return pid;
  }
  return 0;
}

std::string StatusField(pid_t pid, const std::string& field) {
  for (absl::string_view line : absl::StrSplit(ReadAll(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::StartsWith(line, field + ":")) {
      return std::string(absl::StripAsciiWhitespace(line.substr(field.size() + 1)));
    }
  }
  return "";
}

TEST_F(StreamQosTest, LsAndBeSandboxesRunInTheirPlacedCpusets) {
  if (!placer_->available()) GTEST_SKIP() << "no QoS placement on this host: " << placer_->status();
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  json ls = Create({{"tier", "container"}, {"qos", "ls"}});
  json be = Create({{"tier", "container"}, {"qos", "be"}});
  ASSERT_TRUE(ls["qos_applied"].get<bool>()) << ls;
  ASSERT_TRUE(be["qos_applied"].get<bool>()) << be;
  const std::vector<int> ls_cpus = ls["placement"]["cpus"];
  const std::vector<int> be_cpus = be["placement"]["cpus"];
  if (online >= 2) {
    // With two or more cores LS and BE never share one (no SMT here: a
    // core is a CPU; SMT siblings are covered by the fake-topology test).
    for (int c : be_cpus) EXPECT_EQ(std::count(ls_cpus.begin(), ls_cpus.end(), c), 0) << c;
  }
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("dsec_sandboxes_qos{qos=\"ls\",applied=\"true\"} 1"), std::string::npos);
  EXPECT_NE(m->body.find("dsec_sandboxes_qos{qos=\"be\",applied=\"true\"} 1"), std::string::npos);

  std::vector<std::string> cgroups;
  for (const json* sb : {&ls, &be}) {
    const std::string id = (*sb)["id"];
    const std::string cgroup = (*sb)["placement"]["cgroup"];
    const std::vector<int> cpus = (*sb)["placement"]["cpus"];
    cgroups.push_back(cgroup);
    EXPECT_EQ(ReadAll(cgroup + "/cpuset.cpus"), sched::FormatCpuList(cpus) + "\n");
    // While the command runs (it said so on the stream), look at it from
    // the host: it is in the sandbox's cpuset, allowed only the placed CPUs.
    pid_t pid = 0;
    std::string cgroup_line, allowed;
    Gate gate;
    bool released = false;
    Streamed s = Stream(id, {{"argv", {"sh", "-c", absl::StrCat(gate.ShellOpen(), "echo qos-marker; ",
                                                                gate.ShellWait())}}},
                        [&](const Streamed&) {
                          pid = FindInCgroup(cgroup, "echo qos-marker");
                          if (pid != 0) {
                            cgroup_line = ReadAll(absl::StrCat("/proc/", pid, "/cgroup"));
                            allowed = StatusField(pid, "Cpus_allowed_list");
                          }
                          released = gate.Release();
                          return true;
                        });
    EXPECT_TRUE(released);
    EXPECT_EQ(s.last["exit"]["exit_code"], 0) << s.last;
    EXPECT_EQ(s.out, "qos-marker\n");
    ASSERT_NE(pid, 0) << "no exec process in " << cgroup;
    const std::string name = cgroup.substr(cgroup.rfind('/') + 1);
    bool in_cpuset = false;
    for (absl::string_view line : absl::StrSplit(cgroup_line, '\n')) {
      if (line.find(":cpuset:") != std::string::npos && absl::EndsWith(line, "/" + name)) in_cpuset = true;
    }
    EXPECT_TRUE(in_cpuset) << cgroup_line;
    EXPECT_EQ(allowed, sched::FormatCpuList(cpus));
    // The sandbox's init (which starts every exec) stays in it too, its
    // whole life.
    std::istringstream procs(ReadAll(cgroup + "/cgroup.procs"));
    int members = 0;
    for (pid_t p; procs >> p;) ++members;
    EXPECT_GE(members, 1);
  }
  for (const json* sb : {&ls, &be}) {
    auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", (*sb)["id"].get<std::string>()));
    ASSERT_TRUE(d);
    EXPECT_EQ(d->status, 204);
  }
  // Delete removed the cpuset cgroups (and their cpu twins, same name).
  for (const std::string& cg : cgroups) {
    EXPECT_NE(::access(cg.c_str(), F_OK), 0) << cg;
    const std::string name = cg.substr(cg.rfind('/') + 1);
    auto found = container::testing::RunHostCommand(
        {"/bin/sh", "-c", absl::StrCat("find /sys/fs/cgroup -maxdepth 6 -name ", name, " 2>/dev/null; true")});
    EXPECT_EQ(found.value_or("?"), "") << name;
  }
  // The placement was released: a new LS sandbox gets the same CPUs.
  json ls2 = Create({{"tier", "container"}, {"qos", "ls"}});
  EXPECT_EQ(ls2["placement"]["cpus"], json(ls_cpus));
  client_->Delete(absl::StrCat("/v1/sandboxes/", ls2["id"].get<std::string>()));
}

TEST_F(StreamQosTest, FncallSandboxWithQosGetsAPlacedPoolOfItsOwn) {
  if (!placer_->available()) GTEST_SKIP() << "no QoS placement on this host: " << placer_->status();
  if (!fncall::testing::EnsureTestLayers().ok()) GTEST_SKIP() << "no fncall test layers";
  json sb = Create({{"tier", "fncall"}, {"qos", "be"}});
  ASSERT_TRUE(sb["qos_applied"].get<bool>()) << sb;
  const std::string cgroup = sb["placement"]["cgroup"];
  const std::vector<int> cpus = sb["placement"]["cpus"];
  // The call reports its own CPU set; meanwhile, from the host, every
  // process of the pool's cpuset (zygote, call) is confined to it.
  std::vector<std::string> allowed;
  Gate gate;
  bool released = false;
  Streamed s = Stream(sb["id"].get<std::string>(),
                      {{"code", absl::StrCat(gate.PythonOpen(),
                                             "print(','.join(map(str, sorted(os.sched_getaffinity(0)))), "
                                             "flush=True)\n",
                                             gate.PythonWait())}},
                      [&](const Streamed&) {
                        std::istringstream procs(ReadAll(cgroup + "/cgroup.procs"));
                        for (pid_t p; procs >> p;) allowed.push_back(StatusField(p, "Cpus_allowed_list"));
                        released = gate.Release();
                        return true;
                      });
  EXPECT_TRUE(released);
  EXPECT_EQ(s.last["exit"]["exit_code"], 0) << s.last;
  EXPECT_EQ(s.out, sched::FormatCpuList(cpus) + "\n");  // one CPU here: "N"
  ASSERT_FALSE(allowed.empty()) << "nothing in " << cgroup;
  for (const std::string& a : allowed) EXPECT_EQ(a, sched::FormatCpuList(cpus));
  auto d = client_->Delete(absl::StrCat("/v1/sandboxes/", sb["id"].get<std::string>()));
  ASSERT_TRUE(d);
  EXPECT_NE(::access(cgroup.c_str(), F_OK), 0) << cgroup;
}

}  // namespace
}  // namespace dsec::daemon
