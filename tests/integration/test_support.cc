// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/test_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "base/scoped_fd.h"

extern char** environ;

namespace dsec::testing {

std::string TestGuestPath() { return DSEC_TESTGUEST_ELF_PATH; }
std::string VmmBinaryPath() { return DSEC_VMM_BINARY_PATH; }
std::string MonitorBinaryPath() { return DSEC_MONITOR_BINARY_PATH; }

std::string KvmUnavailableReason() {
  ScopedFd fd(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return "this host has no usable /dev/kvm";
  return "";
}

std::string Report::Get(const std::string& key) const {
  auto it = fields.find(key);
  return it == fields.end() ? "" : it->second;
}

uint64_t Report::GetU64(const std::string& key) const {
  std::string v = Get(key);
  if (v.empty()) return 0;
  return std::strtoull(v.c_str(), nullptr, 0);
}

Report ParseReport(const std::string& line) {
  Report r;
  size_t pos = line.find(' ');
  r.kind = line.substr(0, pos);
  while (pos != std::string::npos) {
    size_t start = pos + 1;
    size_t eq = line.find('=', start);
    if (eq == std::string::npos) break;
    std::string key = line.substr(start, eq - start);
    if (key == "text") {  // free text runs to the end of the line
      r.fields[key] = line.substr(eq + 1);
      break;
    }
    pos = line.find(' ', eq);
    r.fields[key] = line.substr(eq + 1, pos == std::string::npos ? pos : pos - eq - 1);
  }
  return r;
}

std::vector<Report> ReportsOf(const std::vector<std::string>& lines, const std::string& kind) {
  std::vector<Report> out;
  for (const auto& l : lines) {
    Report r = ParseReport(l);
    if (r.kind == kind) out.push_back(std::move(r));
  }
  return out;
}

std::optional<Report> FirstReportOf(const std::vector<std::string>& lines,
                                    const std::string& kind) {
  auto all = ReportsOf(lines, kind);
  if (all.empty()) return std::nullopt;
  return all.front();
}

CommandResult RunCommand(const std::vector<std::string>& argv, size_t max_bytes) {
  CommandResult result;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  ScopedFd out_r(out_pipe[0]), out_w(out_pipe[1]), err_r(err_pipe[0]), err_w(err_pipe[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  out_w.Reset();
  err_w.Reset();
  if (rc != 0) return result;
  pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
  std::string* bufs[2] = {&result.out, &result.err};
  int open_count = 2;
  char buf[65536];
  while (open_count > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        fds[i].fd = -1;
        --open_count;
      } else if (bufs[i]->size() < max_bytes) {
        bufs[i]->append(buf, static_cast<size_t>(n));
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return result;
}

int CountOpenFds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

int CountThreads() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/dsec-test-XXXXXX";
  if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

}  // namespace dsec::testing
