// SPDX-License-Identifier: Apache-2.0
#include "sandbox/layers/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"

namespace dsec::layers {
namespace {

constexpr size_t kStderrCap = 16 * 1024;

// posix_spawn attribute/file-action objects with guaranteed destruction.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

}  // namespace

std::string CommandResult::Describe() const {
  if (signal != 0) return absl::StrCat("killed by signal ", signal);
  return absl::StrCat("exited ", exit_code, stderr_tail.empty() ? "" : ": ", stderr_tail);
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::string> full_env = env;
  bool has_path = false;
  for (const auto& e : env) has_path |= e.rfind("PATH=", 0) == 0;
  if (!has_path) {
    const char* path = getenv("PATH");
    full_env.push_back(absl::StrCat("PATH=", path != nullptr ? path : "/usr/sbin:/usr/bin:/sbin:/bin"));
  }
  std::vector<char*> cenv;
  for (const auto& e : full_env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  ScopedFd read_end(fds[0]);
  ScopedFd write_end(fds[1]);

  SpawnSetup setup;
  posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&setup.actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&setup.actions, write_end.get(), 2);
  // Children start with default signal dispositions and an empty mask.
  sigset_t all;
  sigfillset(&all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&setup.attr, &all);
  posix_spawnattr_setsigmask(&setup.attr, &none);
  posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  pid_t pid = -1;
  int rc = posix_spawnp(&pid, cargv[0], &setup.actions, &setup.attr, cargv.data(), cenv.data());
  if (rc != 0) {
    return ErrnoToStatus(absl::StrCat("posix_spawnp ", argv[0]), rc);
  }
  write_end.Reset();

  CommandResult result;
  char buf[4096];
  for (;;) {
    ssize_t n = read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.stderr_tail.append(buf, static_cast<size_t>(n));
    if (result.stderr_tail.size() > kStderrCap) {
      result.stderr_tail.erase(0, result.stderr_tail.size() - kStderrCap);
    }
  }
  while (!result.stderr_tail.empty() && result.stderr_tail.back() == '\n') {
    result.stderr_tail.pop_back();
  }

  int status = 0;
  struct rusage usage {};
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) return ErrnoStatus("wait4");
  }
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else {
    result.exit_code = WEXITSTATUS(status);
  }
  result.write_bytes = static_cast<uint64_t>(usage.ru_oublock) * 512;
  return result;
}

absl::StatusOr<CommandResult> RunCommandChecked(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env) {
  DSEC_ASSIGN_OR_RETURN(CommandResult r, RunCommand(argv, env));
  if (!r.Succeeded()) return absl::InternalError(absl::StrCat(argv[0], " ", r.Describe()));
  return r;
}

}  // namespace dsec::layers
