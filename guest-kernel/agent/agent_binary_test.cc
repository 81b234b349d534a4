// SPDX-License-Identifier: Apache-2.0
// The built dsec-agent binary in host mode (--listen-unix), driven by the
// real Client.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "guest-kernel/agent/agent_testing.h"
#include "guest-kernel/agent/client.h"
#include "base/exec_pump.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::agent {
namespace {

using testing::ReadFileOrDie;
using testing::TempDir;
using testing::WriteFileOrDie;

// The agent binary with its stdout on a pipe this test reads as it comes
// (the "listening" line); killed and reaped by Subprocess if the test did
// not wait for it.
class AgentProcess {
 public:
  explicit AgentProcess(const std::vector<std::string>& args) {
    auto pipe = Pipe::Create();
    DSEC_CHECK(pipe.ok());
    stdout_ = std::move(pipe->read);
    SpawnOptions o;
    o.argv = {DSEC_AGENT_BINARY_PATH};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.out = Stdio::Fd(pipe->write.get());
    o.err = Stdio::Inherit();
    auto process = Subprocess::Spawn(o);
    DSEC_CHECK(process.ok());
    process_ = std::move(*process);
  }

  // Reads stdout until a line containing `needle`; false at EOF or timeout.
  bool WaitForLine(const std::string& needle, int64_t timeout_ms) {
    int64_t deadline = DeadlineAfterMs(timeout_ms);
    for (;;) {
      if (buffer_.find(needle) != std::string::npos) return true;
      if (!WaitFd(stdout_.get(), POLLIN, deadline).ok()) return false;
      char buf[4096];
      ssize_t n = read(stdout_.get(), buf, sizeof(buf));
      if (n <= 0) return false;
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }

  // Waits for the exit; the wait status, or -1 on timeout.
  int WaitExit(int64_t timeout_ms) {
    if (!WaitFd(process_.pidfd(), POLLIN, DeadlineAfterMs(timeout_ms)).ok()) return -1;
    auto ended = process_.Wait();
    return ended.ok() ? ended->wait_status : -1;
  }

  const std::string& output() const { return buffer_; }

 private:
  Subprocess process_;
  ScopedFd stdout_;
  std::string buffer_;
};

TEST(AgentBinaryTest, ServesTheProtocolInHostModeAndShutsDown) {
  TempDir dir;
  const std::string sock = dir.Sub("agent.sock");
  const std::string root = dir.Sub("root");
  const std::string upper = dir.Sub("upper");
  ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(upper.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(dir.Sub("dest").c_str(), 0755), 0);
  WriteFileOrDie(upper + "/changed.txt", "changed\n", 0600);
  AgentProcess agent({"--listen-unix", sock, "--root", root, "--upper", upper});
  ASSERT_TRUE(agent.WaitForLine("dsec-agent: listening unix=" + sock, 30'000)) << agent.output();

  auto fd = ConnectUnix(sock, 10'000);
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto client = Client::Connect(*std::move(fd));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->agent_hello().software, "dsec-agent");

  std::string out;
  ExecRequest r;
  r.argv = {"sh", "-c", "echo from-agent; pwd"};
  auto done = (*client)->Exec(r, [&](int stream, std::string_view d) {
    if (stream == 1) out.append(d);
  });
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->exit_code, 0);
  EXPECT_EQ(out, "from-agent\n" + root + "\n");

  ASSERT_TRUE((*client)->WriteFile("hello.txt", "hi\n", 0600).ok());
  EXPECT_EQ(ReadFileOrDie(root + "/hello.txt"), "hi\n");
  auto back = (*client)->ReadFile("/hello.txt", 100);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "hi\n");
  auto list = (*client)->ListDir("/");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);

  auto stats = (*client)->PackDiff(dir.Sub("dest"));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->entries, 2u);
  EXPECT_EQ(ReadFileOrDie(dir.Sub("dest/changed.txt")), "changed\n");

  ASSERT_TRUE((*client)->Shutdown().ok());
  int status = agent.WaitExit(30'000);
  ASSERT_NE(status, -1) << "agent did not exit after SHUTDOWN";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(access(sock.c_str(), F_OK), 0) << "socket left behind";
}

TEST(AgentBinaryTest, RefusesBadArguments) {
  AgentProcess agent({"--listen-unix"});
  int status = agent.WaitExit(30'000);
  ASSERT_NE(status, -1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
}

// Stands in for the monitor's vsock unix socket (devices/vsock/README.md):
// accepts one client, reads its "CONNECT <port>" line and, for the expected
// port, answers "OK <host port>" and relays bytes to the agent's socket;
// for any other port it closes the socket, as the monitor does on RST.
class FakeMonitor {
 public:
  FakeMonitor(const std::string& path, uint32_t port, const std::string& agent_sock)
      : port_(port), agent_sock_(agent_sock) {
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    listener_ = ScopedFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    DSEC_CHECK(bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    DSEC_CHECK(listen(listener_.get(), 4) == 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeMonitor() { thread_.join(); }

 private:
  void Serve() {
    ScopedFd client(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client) return;
    std::string line;
    char c;
    while (line.size() < 64 && read(client.get(), &c, 1) == 1 && c != '\n') line += c;
    if (line != "CONNECT " + std::to_string(port_)) return;  // refused: close
    auto agent = ConnectUnix(agent_sock_, 10'000);
    if (!agent.ok()) return;
    const char ok[] = "OK 1073741824\n";
    if (write(client.get(), ok, sizeof(ok) - 1) != sizeof(ok) - 1) return;
    Relay(client.get(), agent->get());
  }

  static void Relay(int a, int b) {
    char buf[65536];
    for (;;) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 60'000) <= 0) return;
      for (int i = 0; i < 2; ++i) {
        if (p[i].revents == 0) continue;
        ssize_t n = read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) return;
        int to = i == 0 ? b : a;
        for (ssize_t off = 0; off < n;) {
          ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
          if (w <= 0) return;
          off += w;
        }
      }
    }
  }

  const uint32_t port_;
  const std::string agent_sock_;
  ScopedFd listener_;
  std::thread thread_;
};

TEST(AgentBinaryTest, ConnectsThroughTheMonitorsVsockSocket) {
  TempDir dir;
  const std::string agent_sock = dir.Sub("agent.sock");
  AgentProcess agent({"--listen-unix", agent_sock, "--root", dir.path()});
  ASSERT_TRUE(agent.WaitForLine("listening", 30'000)) << agent.output();
  {
    FakeMonitor monitor(dir.Sub("vm.vsock"), 1024, agent_sock);
    auto client = ConnectVsock(dir.Sub("vm.vsock"), 1024);
    ASSERT_TRUE(client.ok()) << client.status();
    std::string out;
    ExecRequest r;
    r.argv = {"echo", "via vsock"};
    auto done = (*client)->Exec(r, [&](int, std::string_view d) { out.append(d); });
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(out, "via vsock\n");
  }
  {
    FakeMonitor monitor(dir.Sub("vm2.vsock"), 1024, agent_sock);
    auto refused = ConnectVsockUnix(dir.Sub("vm2.vsock"), 5555, 10'000);
    EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  }
}

}  // namespace
}  // namespace dsec::agent
