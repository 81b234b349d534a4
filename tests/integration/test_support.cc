// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/test_support.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "base/file_io.h"
#include "base/scoped_fd.h"
#include "base/subprocess.h"

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
  SpawnOptions o;
  o.argv = argv;
  o.out = Stdio::Capture();
  o.err = Stdio::Capture();
  o.capture_max_bytes = max_bytes;
  auto r = RunSubprocess(o);
  if (!r.ok()) return result;
  result.exit_status = r->signal == 0 ? r->exit_code : -1;
  result.term_signal = r->signal;
  result.out = std::move(r->out);
  result.err = std::move(r->err);
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

namespace {

// The state letter of a /proc/.../stat text: the first field after the
// parenthesised name (which may hold spaces and parentheses).
char StatState(const std::string& stat) {
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

}  // namespace

char ThreadState(pid_t tid) {
  return StatState(ReadSmallFile("/proc/self/task/" + std::to_string(tid) + "/stat").value_or(""));
}

std::vector<std::string> RunnableThreads(pid_t pid) {
  std::vector<std::string> out;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  for (const std::string& tid : ListDirectory(task_dir).value_or(std::vector<std::string>{})) {
    const std::string stat = ReadSmallFile(task_dir + "/" + tid + "/stat").value_or("");
    if (StatState(stat) == 'R') out.push_back(stat.substr(0, stat.rfind(')') + 1));
  }
  return out;
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
