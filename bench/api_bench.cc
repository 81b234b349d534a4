// SPDX-License-Identifier: Apache-2.0
#include "bench/api_bench.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/mount.h"
#include "base/scoped_fd.h"
#include "base/subprocess.h"

#ifndef DSEC_API_BENCH_SCRIPT_PATH
#define DSEC_API_BENCH_SCRIPT_PATH ""
#endif

namespace dsec::bench {

namespace {

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

}  // namespace

int RunApiBench(const ApiBenchOptions& o) {
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
  for (const char* d : {"run", "containers", "fncall", "trajectory", "layers", "work"}) {
    (void)MakeDirs(tmp + "/" + d);
  }
  const std::string sock = tmp + "/run/api.sock";
  const std::string log = tmp + "/daemon.log";
  ScopedFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_TRUNC, 0600));
  // Both children get sessions of their own, so that a signal to our group
  // does not reach them twice.
  SpawnOptions daemon_spawn;
  daemon_spawn.argv = {daemon, "--socket", sock, "--container-state-dir", tmp + "/containers",
                       "--fncall-state-dir", tmp + "/fncall", "--trajectory-dir", tmp + "/trajectory",
                       "--store", tmp + "/layers", "--log-level", "warn"};
  daemon_spawn.out = log_fd ? Stdio::Fd(log_fd.get()) : Stdio::Null();
  daemon_spawn.err = Stdio::SameAsStdout();
  daemon_spawn.new_session = true;
  auto daemon_process = Subprocess::Spawn(daemon_spawn);
  int rc = 1;
  if (!daemon_process.ok()) {
    fprintf(stderr, "dsec-vmm: bench api: %s\n", std::string(daemon_process.status().message()).c_str());
  } else {
    SpawnOptions py;
    py.argv = {"/usr/bin/python3", "-B", script, "--socket", sock, "--work",
               tmp + "/work", "--iterations", std::to_string(o.iterations),
               "--rate-seconds", std::to_string(o.rate_seconds),
               "--concurrency", std::to_string(o.concurrency)};
    if (o.json) py.argv.push_back("--json");
    py.env = {"PYTHONPATH=" + DirOf(DirOf(script))};
    py.in = Stdio::Inherit();
    py.out = Stdio::Inherit();
    py.err = Stdio::Inherit();
    py.new_session = true;
    auto measured = RunSubprocess(py);
    if (!measured.ok()) {
      fprintf(stderr, "dsec-vmm: bench api: %s\n", std::string(measured.status().message()).c_str());
    } else {
      rc = measured->signal == 0 ? measured->exit_code : 1;
    }
    // The daemon deletes what is left on SIGTERM; SIGKILL after 60 s.
    (void)daemon_process->Signal(SIGTERM);
    (void)daemon_process->Wait(60'000);
  }
  std::vector<std::string> left = MountPointsBelow(tmp).value_or(std::vector<std::string>{});
  if (!left.empty()) {
    fprintf(stderr, "dsec-vmm: bench api: %zu mounts left under %s (e.g. %s); kept for inspection\n",
            left.size(), tmp.c_str(), left[0].c_str());
    return rc == 0 ? 1 : rc;
  }
  if (rc != 0) {
    fprintf(stderr, "dsec-vmm: bench api failed; daemon log tail:\n%s\n", FileTail(log, 3000).c_str());
  }
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  return rc;
}

}  // namespace dsec::bench
