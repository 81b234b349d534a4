// SPDX-License-Identifier: Apache-2.0
// Real namespaces, cgroups, mounts, seccomp and interpreters (label
// integration; needs root, python3.11, bash, busybox-static, erofs-utils and
// skips naming what is missing).
#include "sandbox/fncall/pool.h"

#include <dirent.h>
#include <signal.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/fncall/fncall_testing.h"
#include "base/file_io.h"
#include "base/scoped_fd.h"

namespace dsec::fncall {
namespace {

using container::testing::TempDir;

// Processes below this test process (zygotes are its children), except
// those under `exclude` (other pools' zygotes) and those themselves.
int CountDescendants(const std::vector<pid_t>& exclude = {}) {
  std::map<int, int> parent;
  DIR* d = ::opendir("/proc");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    auto stat = dsec::ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
    if (!stat.ok()) continue;
    size_t paren = stat->rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<std::string> f = absl::StrSplit(stat->substr(paren + 2), ' ');
    int ppid = 0;
    if (f.size() > 1 && absl::SimpleAtoi(f[1], &ppid)) parent[pid] = ppid;
  }
  ::closedir(d);
  int count = 0;
  const int self = ::getpid();
  for (const auto& [pid, ppid] : parent) {
    if (std::find(exclude.begin(), exclude.end(), pid) != exclude.end()) continue;
    int p = ppid;
    for (int hops = 0; hops < 64 && p > 1; ++hops) {
      if (std::find(exclude.begin(), exclude.end(), p) != exclude.end()) break;
      if (p == self) {
        ++count;
        break;
      }
      auto it = parent.find(p);
      p = it == parent.end() ? 0 : it->second;
    }
  }
  return count;
}

int CountLinesContaining(const std::string& path, const std::string& needle) {
  auto text = dsec::ReadSmallFile(path);
  if (!text.ok()) return -1;
  int n = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StrContains(line, needle)) ++n;
  }
  return n;
}

// cgroup directories named dsec-ctr-<prefix>* beside this process's own.
int CountCgroups(const std::string& prefix) {
  auto self = dsec::ReadSmallFile("/proc/self/cgroup");
  if (!self.ok()) return -1;
  int n = 0;
  for (const char* ctl : {"memory", "pids", "cpu,cpuacct"}) {
    for (absl::string_view line : absl::StrSplit(*self, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (f.size() != 3 || f[1] != ctl) continue;
      std::string dir = absl::StrCat("/sys/fs/cgroup/", ctl, f[2]);
      DIR* d = ::opendir(dir.c_str());
      if (!d) continue;
      while (dirent* e = ::readdir(d)) {
        if (absl::StartsWith(e->d_name, absl::StrCat("dsec-ctr-", prefix))) ++n;
      }
      ::closedir(d);
    }
  }
  return n;
}

CallRequest Code(const std::string& code) {
  CallRequest r;
  r.code = code;
  return r;
}

class FncallPoolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root";
      return;
    }
    auto layers = testing::EnsureTestLayers();
    if (!layers.ok()) {
      skip_ = layers.status().ToString();
      return;
    }
    layers_ = new testing::TestLayers(*layers);
    auto dir = TempDir::Create("dsec-fncall-test-");
    if (!dir.ok()) {
      skip_ = dir.status().ToString();
      return;
    }
    dir_ = new TempDir(std::move(*dir));
    // One worker only: every call of these pools lands on the same zygote,
    // the hardest case for isolation.
    auto py = Pool::Create(Config("py", Language::kPython, 1));
    auto sh = Pool::Create(Config("sh", Language::kBash, 1));
    if (!py.ok() || !sh.ok()) {
      skip_ = absl::StrCat("pool: ", py.status().ToString(), " ", sh.status().ToString());
      return;
    }
    python_ = py->release();
    bash_ = sh->release();
  }
  static void TearDownTestSuite() {
    delete python_;
    delete bash_;
    delete dir_;
    delete layers_;
    python_ = bash_ = nullptr;
    dir_ = nullptr;
    layers_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static PoolConfig Config(const std::string& id, Language language, int max_workers) {
    PoolConfig c;
    c.id = absl::StrCat(id, "-", ::getpid());
    c.layers = {layers_->runtime};
    c.language = language;
    c.state_root = absl::StrCat(dir_->path(), "/state");
    c.limits.memory_bytes = 96 << 20;
    c.limits.pids = 32;
    c.limits.timeout_ms = 10000;
    c.limits.output_cap_bytes = 256 << 10;
    c.max_workers = max_workers;
    c.min_idle = 1;
    c.scratch_bytes = 16 << 20;
    c.setup_timeout_ms = 20000;
    return c;
  }
  static CallResult Run(Pool& pool, const std::string& code, CallRequest req = {}) {
    req.code = code;
    auto r = pool.Call(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CallResult{};
  }
  static CallResult Py(const std::string& code, CallRequest req = {}) {
    return Run(*python_, code, std::move(req));
  }
  static CallResult Sh(const std::string& code, CallRequest req = {}) {
    return Run(*bash_, code, std::move(req));
  }

  static inline testing::TestLayers* layers_ = nullptr;
  static inline TempDir* dir_ = nullptr;
  static inline Pool* python_ = nullptr;
  static inline Pool* bash_ = nullptr;
  static inline std::string skip_;
};

TEST_F(FncallPoolTest, PythonCallGetsArgsStdinEnvAndReportsStatus) {
  CallRequest req;
  req.args = {"a b", "c"};
  req.stdin_data = "from stdin\n";
  req.env = {"FOO=bar", "PATH=/bin"};
  CallResult r = Py(
      "import os, sys\nprint(sys.argv[1:], sys.stdin.read().strip(), os.environ['FOO'], "
      "os.getcwd())\nprint('oops', file=sys.stderr)\nsys.exit(3)",
      req);
  EXPECT_EQ(r.stdout_data, "['a b', 'c'] from stdin bar /tmp\n");
  EXPECT_EQ(r.stderr_data, "oops\n");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.killed_by, KilledBy::kNone);
  EXPECT_GT(r.peak_rss_bytes, 0u);
  EXPECT_GT(r.wall_ns, 0);
  CallResult e = Py("raise ValueError('boom')");
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_NE(e.stderr_data.find("ValueError: boom"), std::string::npos) << e.stderr_data;
}

TEST_F(FncallPoolTest, BashCallRunsAScriptWithArgsAndStdin) {
  CallRequest req;
  req.args = {"one", "two"};
  req.stdin_data = "piped";
  CallResult r = Sh("echo \"$1-$2\"; cat; echo; echo err >&2; exit 4", req);
  EXPECT_EQ(r.stdout_data, "one-two\npiped\n");
  EXPECT_EQ(r.stderr_data, "err\n");
  EXPECT_EQ(r.exit_code, 4);
  CallResult k = Sh("kill -TERM $$");
  EXPECT_EQ(k.signal, SIGTERM);
}

TEST_F(FncallPoolTest, FilesWrittenByACallAreGoneForTheNext) {
  Py("open('/tmp/leak', 'w').write('x'); open('/dev/shm/leak', 'w').write('x'); "
     "import os; os.mkdir('/tmp/d'); open('/tmp/d/f', 'w').write('y')");
  EXPECT_EQ(Py("import os; print(sorted(os.listdir('/tmp')), os.listdir('/dev/shm'))").stdout_data,
            "[] []\n");
  // Nothing else is writable: the root, /dev, /proc/sys.
  CallResult ro = Py(
      "import errno\nfor p in ('/etc/x', '/usr/lib/x', '/dev/x', '/x'):\n"
      "    try:\n        open(p, 'w')\n        print('wrote', p)\n"
      "    except OSError as e:\n        print(errno.errorcode[e.errno])");
  EXPECT_EQ(ro.stdout_data, "EROFS\nEROFS\nEROFS\nEROFS\n");
  Sh("echo x > /tmp/sh-leak; mkdir -p /tmp/a/b; touch /dev/shm/s");
  EXPECT_EQ(Sh("ls -A /tmp /dev/shm").stdout_data, "/dev/shm:\n\n/tmp:\n");
}

TEST_F(FncallPoolTest, EnvAndMonkeyPatchesDoNotLeak) {
  Py("import os, json, builtins, sys\nos.environ['LEAK'] = '1'\nos.putenv('LEAK2', '1')\n"
     "json.dumps = lambda *a, **k: 'patched'\nbuiltins.len = lambda x: -1\n"
     "sys.modules['leaked_module'] = object()\nimport math\nmath.pi = 3");
  CallResult r = Py(
      "import os, json, math, sys\nprint('LEAK' in os.environ, 'LEAK2' in os.environ, "
      "json.dumps(1), len('ab'), 'leaked_module' in sys.modules, math.pi > 3.14)");
  EXPECT_EQ(r.stdout_data, "False False 1 2 False True\n");
  Sh("export LEAK=1; alias ls=false");
  EXPECT_EQ(Sh("echo \"[${LEAK:-}]\"").stdout_data, "[]\n");
}

TEST_F(FncallPoolTest, BackgroundProcessesDieWithTheirCall) {
  CallResult r = Py(
      "import subprocess, os\nsubprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
      "if os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(1000)\nprint('ok')");
  EXPECT_EQ(r.stdout_data, "ok\n");
  // Only the zygote (1) and the call itself are in the worker's namespace.
  EXPECT_EQ(Py("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == "
               "[1, os.getpid()])")
                .stdout_data,
            "True\n");
  Sh("sleep 1000 & setsid sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 & echo started");
  // The zygote and this shell (the glob forks nothing).
  EXPECT_EQ(Sh("set -- /proc/[0-9]*; echo $# $1").stdout_data, "2 /proc/1\n");
}

TEST_F(FncallPoolTest, TimeoutKillsTheCallAndEverythingItSpawned) {
  CallRequest req;
  req.timeout_ms = 300;
  CallResult r = Py("import os, time\nif os.fork() == 0:\n    os.setsid()\nwhile True: pass", req);
  EXPECT_EQ(r.killed_by, KilledBy::kTimeout);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LT(r.wall_ns, 5'000'000'000);
  CallResult s = Sh("sleep 100 & sleep 100", req);
  EXPECT_EQ(s.killed_by, KilledBy::kTimeout);
  EXPECT_EQ(Py("import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))").stdout_data,
            "2\n");
}

TEST_F(FncallPoolTest, MemoryLimitKillsTheCall) {
  CallRequest req;
  req.memory_bytes = 32 << 20;
  CallResult r = Py("x = bytearray(200 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
                    "print('survived')",
                    req);
  EXPECT_EQ(r.killed_by, KilledBy::kMemory);
  EXPECT_TRUE(r.oom_killed);
  EXPECT_EQ(r.stdout_data, "");
  // The zygote survives its call's OOM: the next call runs.
  CallResult ok = Py("x = bytearray(8 << 20); print(len(x))");
  EXPECT_EQ(ok.stdout_data, "8388608\n");
  ASSERT_TRUE(ok.peak_memory_bytes.has_value());
  EXPECT_GE(*ok.peak_memory_bytes, 8u << 20);
}

TEST_F(FncallPoolTest, OutputCapKillsTheCallAndCountsDroppedBytes) {
  CallRequest req;
  req.output_cap_bytes = 64 << 10;
  CallResult r = Py("import sys\nwhile True: sys.stdout.write('x' * 65536)", req);
  EXPECT_EQ(r.killed_by, KilledBy::kOutputCap);
  EXPECT_EQ(r.stdout_data.size(), 64u << 10);
  EXPECT_GT(r.output_dropped_bytes, 0u);
  // Over the rate limit: dropped and counted, the call is not killed.
  CallRequest rate;
  rate.output_rate_bytes_per_s = 1;  // burst 64 KiB
  CallResult d = Py("print('y' * 200000)", rate);
  EXPECT_EQ(d.killed_by, KilledBy::kNone);
  EXPECT_EQ(d.exit_code, 0) << d.signal.value_or(0) << " " << d.stderr_data;
  EXPECT_EQ(d.stdout_data.size(), 64u << 10);
  EXPECT_EQ(d.output_dropped_bytes, 200001u - (64u << 10));
}

TEST_F(FncallPoolTest, OutputCallbackSeesEachStreamAsItIsReadAndDropsArePerStream) {
  CallRequest req;
  std::string seen[3];
  int calls = 0;
  req.on_output = [&](int stream, std::string_view bytes) {
    ASSERT_TRUE(stream == 1 || stream == 2);
    seen[stream].append(bytes);
    ++calls;
  };
  req.output_rate_bytes_per_s = 1;  // burst 64 KiB, then drops (the call goes on)
  CallResult r = Py("import sys\nprint('out', flush=True)\nsys.stderr.write('e' * 100000)", req);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_GE(calls, 2);
  EXPECT_EQ(seen[1], r.stdout_data);
  EXPECT_EQ(seen[2], r.stderr_data);
  EXPECT_EQ(r.stdout_data, "out\n");
  EXPECT_EQ(r.stdout_dropped, 0u);
  EXPECT_EQ(r.stderr_dropped, 100000u + 4u - (64u << 10));
  EXPECT_EQ(r.output_dropped_bytes, r.stdout_dropped + r.stderr_dropped);
}

TEST_F(FncallPoolTest, PidsLimitKillsAForkBomb) {
  CallRequest req;
  req.pids = 8;
  CallResult r = Sh("while true; do sleep 100 & done", req);
  EXPECT_EQ(r.killed_by, KilledBy::kPids);
  EXPECT_TRUE(r.pids_limited);
  EXPECT_EQ(Sh("echo fine").stdout_data, "fine\n");
}

TEST_F(FncallPoolTest, WorkerIsMaskedLockedDownAndSeesNothingOfTheHost) {
  CallResult r = Py(R"(
import os, fcntl, errno, ctypes
masked = [p for p in ('/proc/kpagecgroup', '/proc/kpageflags', '/proc/kpagecount', '/proc/kcore',
                      '/proc/timer_list', '/proc/sched_debug', '/proc/kallsyms') if os.path.exists(p)]
print('/proc/kpagecgroup' in masked, all(open(p, 'rb').read(16) == b'' for p in masked))
st = open('/proc/self/status').read()
print([l.split(':')[1].strip() for l in st.splitlines()
       if l.split(':')[0] in ('CapBnd', 'NoNewPrivs', 'Seccomp')])
a = os.open('/tmp/a', os.O_CREAT | os.O_RDWR); b = os.open('/tmp/b', os.O_CREAT | os.O_RDWR)
for req in (0x40049409, 0xc0c0586d):  # FICLONE, XFS_IOC_SWAPEXT
    try:
        fcntl.ioctl(a, req, b)
    except OSError as e:
        print(errno.errorcode[e.errno])
try:
    open('/proc/1/mem', 'rb')
except OSError as e:
    print('zygote mem', errno.errorcode[e.errno])
print('shmget', ctypes.CDLL(None).shmget(0, 4096, 0o1600))
print(os.uname().nodename, os.listdir('/sys/class/net'))
)");
  EXPECT_EQ(r.stdout_data,
            "True True\n['00000000800405fb', '1', '2']\nEPERM\nEPERM\nzygote mem EACCES\n"
            "shmget -1\nfncall ['lo']\n")
      << r.stderr_data;
}

TEST_F(FncallPoolTest, ControlSocketsOutsideAreUnreachable) {
  // A filesystem and an abstract unix socket bound by the test (standing in
  // for the node's control socket).
  std::string path = absl::StrCat(dir_->path(), "/control.sock");
  std::string abstract = absl::StrCat("dsec-fncall-test-", ::getpid());
  ScopedFd fs(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ScopedFd ab(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  ASSERT_EQ(::bind(fs.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fs.get(), 4), 0);
  sockaddr_un b{};
  b.sun_family = AF_UNIX;
  std::memcpy(b.sun_path + 1, abstract.data(), abstract.size());
  socklen_t blen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
  ASSERT_EQ(::bind(ab.get(), reinterpret_cast<sockaddr*>(&b), blen), 0);
  ASSERT_EQ(::listen(ab.get(), 4), 0);
  CallRequest req;
  req.args = {path, abstract};
  CallResult r = Py(R"(
import socket, sys, errno, os
for addr in (sys.argv[1], '\0' + sys.argv[2]):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(addr)
        print('connected')
    except OSError as e:
        print(errno.errorcode[e.errno])
print(os.path.exists('/run/dsec-vmm'), os.path.exists(sys.argv[1].rsplit('/', 1)[0]))
)",
                    req);
  EXPECT_EQ(r.stdout_data, "ENOENT\nECONNREFUSED\nFalse False\n") << r.stderr_data;
  ::unlink(path.c_str());
}

TEST_F(FncallPoolTest, ACallCannotReachACallInAnotherWorker) {
  auto pool = Pool::Create(Config("peer", Language::kPython, 2));
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitReady(2, 20000).ok());
  const std::string name = absl::StrCat("dsec-fncall-peer-", ::getpid());
  CallRequest holder;
  holder.code =
      "import socket, sys, time\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0' + sys.argv[1])\n"
      "s.listen(1)\nopen('/tmp/peer-file', 'w').write('x')\ntime.sleep(3)\nprint('held')";
  holder.args = {name};
  std::thread a([&] {
    auto r = (*pool)->Call(holder);
    EXPECT_TRUE(r.ok() && r->stdout_data == "held\n");
  });
  // While the holder runs (3 s) in the other worker, try for 2 s to reach
  // its socket, its file or its processes.
  CallRequest prober;
  prober.code = R"(
import socket, sys, time, os
seen = set()
deadline = time.time() + 2
while time.time() < deadline:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect('\0' + sys.argv[1])
        seen.add('connected')
    except OSError:
        pass
    if os.path.exists('/tmp/peer-file'):
        seen.add('file')
    if sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) != [1, os.getpid()]:
        seen.add('process')
    time.sleep(0.01)
print(sorted(seen))
)";
  prober.args = {name};
  auto r = (*pool)->Call(prober);
  a.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_data, "[]\n") << r->stderr_data;
}

TEST_F(FncallPoolTest, ConcurrentCallersAllGetTheirOwnResults) {
  auto pool = Pool::Create(Config("conc", Language::kPython, 4));
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        CallRequest req;
        req.code = "import sys; open('/tmp/f', 'x').write('1'); print(int(sys.argv[1]) * 2)";
        req.args = {absl::StrCat(t * 100 + i)};
        auto r = (*pool)->Call(req);
        if (r.ok() && r->stdout_data == absl::StrCat((t * 100 + i) * 2, "\n")) ++good;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 80);
  EXPECT_LE((*pool)->Stats().max_workers, 4);
}

TEST_F(FncallPoolTest, ThousandCallsLeaveNoProcessMountOrCgroupBehind) {
  PoolConfig config = Config("leak", Language::kPython, 2);
  const std::string state = absl::StrCat(config.state_root, "/", config.id);
  // The suite's shared pools keep their own zygotes: let them settle and
  // leave them out.
  ASSERT_TRUE(python_->WaitReady(1, 20000).ok());
  ASSERT_TRUE(bash_->WaitReady(1, 20000).ok());
  auto others = [] {
    std::vector<pid_t> pids = python_->WorkerPids();
    for (pid_t p : bash_->WorkerPids()) pids.push_back(p);
    return pids;
  };
  const int procs_before = CountDescendants(others());
  const int cgroups_before = CountCgroups(config.id);
  ASSERT_EQ(cgroups_before, 0);
  {
    auto pool = Pool::Create(config);
    ASSERT_TRUE(pool.ok()) << pool.status();
    int ok = 0;
    for (int i = 0; i < 1000; ++i) {
      CallRequest req;
      req.code = i % 2 ? "print(1)" : "import os\nif os.fork() == 0:\n    import time; time.sleep(99)\nprint(1)";
      auto r = (*pool)->Call(req);
      if (r.ok() && r->stdout_data == "1\n") ++ok;
    }
    EXPECT_EQ(ok, 1000);
    // While the pool lives: each worker is its zygote plus one waiting child.
    PoolStats s = (*pool)->Stats();
    EXPECT_LE(CountDescendants(others()) - procs_before, 2 * (s.idle + s.busy + s.starting));
    EXPECT_GT(CountLinesContaining("/proc/self/mountinfo", state), 0);
    ASSERT_TRUE((*pool)->Destroy().ok());
  }
  EXPECT_EQ(CountDescendants(others()), procs_before);
  EXPECT_EQ(CountLinesContaining("/proc/self/mountinfo", state), 0);
  EXPECT_EQ(CountCgroups(config.id), 0);
  EXPECT_FALSE(dsec::PathExists(state));
}

TEST_F(FncallPoolTest, WorkerThatCrashesDuringSetupIsReplaced) {
  PoolConfig config = Config("crash", Language::kPython, 3);
  config.layers = {layers_->runtime, layers_->crash};
  config.preload = {"json", "dsec_crash_on_even"};  // even-numbered zygotes die
  auto pool = Pool::Create(config);
  ASSERT_TRUE(pool.ok()) << pool.status();
  for (int i = 0; i < 10; ++i) {
    auto r = (*pool)->Call(Code("print('served')"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->stdout_data, "served\n");
  }
  PoolStats s = (*pool)->Stats();
  EXPECT_GE(s.setup_failures, 1u);
  EXPECT_GE(s.workers_started, 1u);
}

TEST_F(FncallPoolTest, SetupThatAlwaysFailsIsAnErrorNotAHang) {
  PoolConfig config = Config("broken", Language::kPython, 2);
  config.preload = {"no_such_module_for_fncall"};
  config.max_setup_failures = 2;
  auto pool = Pool::Create(config);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto r = (*pool)->Call(Code("print(1)"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("zygote exited with 1"), std::string::npos) << r.status();
}

TEST_F(FncallPoolTest, ZygoteKilledWhileIdleIsReplacedTransparently) {
  auto pool = Pool::Create(Config("killed", Language::kBash, 2));
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_TRUE((*pool)->WaitReady(1, 20000).ok());
  for (pid_t pid : (*pool)->WorkerPids()) {
    ScopedFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0), 0);
    pollfd p{fd.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10000), 1);  // dead (a zombie until its pool reaps it)
  }
  auto r = (*pool)->Call(Code("echo alive"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_data, "alive\n");
  EXPECT_GE((*pool)->Stats().workers_replaced, 1u);
}

TEST_F(FncallPoolTest, RejectsBadConfigAndRequests) {
  PoolConfig c = Config("bad id!", Language::kPython, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(Pool::Create(c).status()));
  c = Config("nolayer", Language::kPython, 1);
  c.layers = {"/nonexistent.erofs"};
  EXPECT_FALSE(Pool::Create(c).ok());
  CallRequest req;
  req.code = "print(1)";
  req.cwd = "relative";
  EXPECT_TRUE(absl::IsInvalidArgument(python_->Call(req).status()));
  req.cwd = "/tmp";
  req.env = {"NOEQUALS"};
  EXPECT_TRUE(absl::IsInvalidArgument(python_->Call(req).status()));
}

}  // namespace
}  // namespace dsec::fncall
