// SPDX-License-Identifier: Apache-2.0
// dsec-agent: the in-guest agent (README.md). As PID 1 it sets up the
// guest's root and serves on vsock (pid1.h); otherwise it serves the same
// protocol on a unix socket without mounting anything:
//
//   dsec-agent --listen-unix PATH --root DIR [--upper DIR]
//              [--max-connections N] [--max-execs N]
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "guest-kernel/agent/pid1.h"
#include "guest-kernel/agent/server.h"
#include "base/eventfd.h"
#include "base/scoped_fd.h"

namespace {

constexpr char kUsage[] =
    "usage: dsec-agent --listen-unix PATH --root DIR [--upper DIR]\n"
    "                  [--max-connections N] [--max-execs N]\n"
    "As PID 1 (guest mode) it takes no arguments: see guest-kernel/agent/README.md.\n";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "dsec-agent: %s\n", msg.c_str());
  return 2;
}

int RunHostMode(int argc, char** argv) {
  std::string listen_path;
  dsec::agent::ServerOptions options;
  options.root.clear();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--listen-unix" && value(&listen_path)) {
    } else if (arg == "--root" && value(&options.root)) {
    } else if (arg == "--upper" && value(&options.upper)) {
    } else if (arg == "--max-connections" && value(&v) &&
               absl::SimpleAtoi(v, &options.max_connections) && options.max_connections > 0) {
    } else if (arg == "--max-execs" && value(&v) &&
               absl::SimpleAtoi(v, &options.max_concurrent_execs) &&
               options.max_concurrent_execs > 0) {
    } else {
      std::fputs(kUsage, stderr);
      return Fail(std::string("bad argument: ") + std::string(arg));
    }
  }
  if (listen_path.empty() || options.root.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<dsec::EventFd> stop = dsec::EventFd::Create();
  if (!stop.ok()) return Fail(stop.status().ToString());
  const int stop_fd = stop->fd();
  options.on_shutdown = [&stop] { (void)stop->Signal(); };
  absl::StatusOr<std::unique_ptr<dsec::agent::Server>> server =
      dsec::agent::Server::Create(options);
  if (!server.ok()) return Fail(server.status().ToString());

  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (listen_path.size() >= sizeof(addr.sun_path)) return Fail("socket path too long");
  std::memcpy(addr.sun_path, listen_path.data(), listen_path.size());
  dsec::ScopedFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener) return Fail(std::string("socket: ") + std::strerror(errno));
  struct stat st;
  if (lstat(listen_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(listen_path.c_str());
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener.get(), 64) != 0) {
    return Fail("listen " + listen_path + ": " + std::strerror(errno));
  }
  std::printf("dsec-agent: listening unix=%s\n", listen_path.c_str());
  std::fflush(stdout);

  for (;;) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Fail(std::string("poll: ") + std::strerror(errno));
    }
    if (fds[1].revents != 0) break;
    if (fds[0].revents != 0) {
      int fd = accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) (*server)->ServeConnection(dsec::ScopedFd(fd));
    }
  }
  std::printf("dsec-agent: shutdown\n");
  std::fflush(stdout);
  server->reset();  // stops and joins every connection
  unlink(listen_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (getpid() == 1) dsec::agent::RunPid1();
  return RunHostMode(argc, argv);
}
