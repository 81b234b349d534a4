// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm bench api`: starts a private node daemon (the dsec-vmmd beside
// this binary) on a temp socket with temp state, trajectory and layer-store
// directories, runs sdk/python/bench/api_bench.py (the measurement, through
// libdsec) with /usr/bin/python3, then stops the daemon and removes the temp
// directory. The figures are the script's output (--json passed through).
#include "cmd/bench_api_commands.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "vmm/monitor/default_paths.h"
#include "base/scoped_fd.h"

#ifndef DSEC_API_BENCH_SCRIPT_PATH
#define DSEC_API_BENCH_SCRIPT_PATH ""
#endif

namespace dsec::cmd {

namespace {

struct Options {
  bool json = false;
  int iterations = 50;
  double rate_seconds = 5.0;
  int concurrency = 4;
  std::string script;  // "" = search
};

std::string DirOf(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Executable(const std::string& p) { return ::access(p.c_str(), X_OK) == 0; }
bool Readable(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

// $DSEC_API_BENCH_SCRIPT, else the checkout around a build directory, else
// the checkout this binary was built from.
std::string FindScript(const std::string& exe) {
  if (const char* env = std::getenv("DSEC_API_BENCH_SCRIPT"); env != nullptr && *env != '\0') return env;
  for (const std::string& c : {DirOf(exe) + "/../sdk/python/bench/api_bench.py",
                               std::string(DSEC_API_BENCH_SCRIPT_PATH)}) {
    if (!c.empty() && Readable(c)) return c;
  }
  return "";
}

// Forks and execs argv with stdout/stderr as given (-1 = inherit), in a new
// session so that a signal to our group does not reach it twice.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env, int out_fd) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setsid();
  if (out_fd >= 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(out_fd, STDERR_FILENO);
  }
  for (const std::string& e : extra_env) ::putenv(const_cast<char*>(e.c_str()));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  fprintf(stderr, "dsec-vmm: bench api: exec %s: %s\n", args[0], strerror(errno));
  ::_exit(127);
}

// Waits for pid up to timeout_ms on its pidfd; returns its wait status or -1.
int WaitFor(pid_t pid, int timeout_ms) {
  ScopedFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (pidfd.get() >= 0) {
    struct pollfd p = {pidfd.get(), POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return -1;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

std::vector<std::string> MountsUnder(const std::string& root) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t pos = 0;
    for (int i = 0; i < 5 && pos != std::string::npos; ++i) {
      size_t next = line.find(' ', pos);
      f.push_back(line.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
      pos = next == std::string::npos ? next : next + 1;
    }
    if (f.size() == 5 && (f[4] == root || f[4].rfind(root + "/", 0) == 0)) out.push_back(f[4]);
  }
  return out;
}

int Run(const Options& o) {
  const std::string exe = SelfExePath();
  const std::string daemon = DirOf(exe) + "/dsec-vmmd";
  if (!Executable(daemon)) {
    fprintf(stderr, "dsec-vmm: bench api needs the daemon %s (build the dsec-vmmd target)\n", daemon.c_str());
    return 2;
  }
  const std::string script = o.script.empty() ? FindScript(exe) : o.script;
  if (script.empty() || !Readable(script)) {
    fprintf(stderr,
            "dsec-vmm: bench api: no sdk/python/bench/api_bench.py (set DSEC_API_BENCH_SCRIPT or "
            "--script)\n");
    return 2;
  }
  if (!Executable("/usr/bin/python3")) {
    fprintf(stderr, "dsec-vmm: bench api needs /usr/bin/python3\n");
    return 2;
  }
  char tmpl[] = "/tmp/dsec-bench-api-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    fprintf(stderr, "dsec-vmm: bench api: mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  const std::string tmp = tmpl;
  std::error_code ec;
  for (const char* d : {"run", "containers", "fncall", "trajectory", "layers", "work"}) {
    std::filesystem::create_directories(tmp + "/" + d, ec);
  }
  const std::string sock = tmp + "/run/api.sock";
  const std::string log = tmp + "/daemon.log";
  ScopedFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_TRUNC, 0600));
  pid_t dpid = Spawn({daemon, "--socket", sock, "--container-state-dir", tmp + "/containers",
                      "--fncall-state-dir", tmp + "/fncall", "--trajectory-dir", tmp + "/trajectory",
                      "--store", tmp + "/layers", "--log-level", "warn"},
                     {}, log_fd.get());
  int rc = 1;
  if (dpid < 0) {
    fprintf(stderr, "dsec-vmm: bench api: fork: %s\n", strerror(errno));
  } else {
    std::vector<std::string> argv = {"/usr/bin/python3", "-B", script, "--socket", sock, "--work",
                                     tmp + "/work", "--iterations", std::to_string(o.iterations),
                                     "--rate-seconds", std::to_string(o.rate_seconds),
                                     "--concurrency", std::to_string(o.concurrency)};
    if (o.json) argv.push_back("--json");
    const std::string pypath = "PYTHONPATH=" + DirOf(DirOf(script));
    pid_t ppid = Spawn(argv, {pypath}, -1);
    if (ppid > 0) {
      int st = WaitFor(ppid, -1);
      rc = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    // The daemon deletes what is left on SIGTERM; SIGKILL after 60 s.
    ::kill(dpid, SIGTERM);
    if (WaitFor(dpid, 60000) < 0) {
      ::kill(dpid, SIGKILL);
      WaitFor(dpid, -1);
    }
  }
  std::vector<std::string> left = MountsUnder(tmp);
  if (!left.empty()) {
    fprintf(stderr, "dsec-vmm: bench api: %zu mounts left under %s (e.g. %s); kept for inspection\n",
            left.size(), tmp.c_str(), left[0].c_str());
    return rc == 0 ? 1 : rc;
  }
  if (rc != 0) {
    std::ifstream in(log);
    std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (tail.size() > 3000) tail = tail.substr(tail.size() - 3000);
    fprintf(stderr, "dsec-vmm: bench api failed; daemon log tail:\n%s\n", tail.c_str());
  }
  std::filesystem::remove_all(tmp, ec);
  return rc;
}

}  // namespace

void RegisterApiBenchCommands(CLI::App* bench, CommandRegistry& registry) {
  CLI::App* cmd = bench->add_subcommand(
      "api", "create + exec + delete through the Python SDK per tier (p50, p99), sustained creates/s");
  auto o = std::make_shared<Options>();
  cmd->add_option("--iterations", o->iterations, "Timed create+exec+delete cycles per tier")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--rate-seconds", o->rate_seconds, "Sustained-create phase per tier")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 3600.0));
  cmd->add_option("--concurrency", o->concurrency, "Clients in the sustained-create phase")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--script", o->script, "api_bench.py (default: the checkout's sdk/python/bench)");
  cmd->add_flag("--json", o->json, "Print one JSON object: {\"tiers\": [{tier, p50_ms, p99_ms, per_s}]}");
  registry.Add(cmd, [o] { return Run(*o); });
}

}  // namespace dsec::cmd
