// SPDX-License-Identifier: Apache-2.0
// The unix host side with real unix sockets in a temp dir, driven by
// synthetic guest packets.
#include "devices/vsock/unix_backend.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "base/status.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kGuestCid = 3;

std::string AsString(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

ScopedFd UnixSocket() {
  return ScopedFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
}

sockaddr_un Addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

class UnixBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsec-vsock-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop.ok());
    loop_ = std::move(*loop);
    options_.path = dir_ + "/vm.sock";
    options_.guest_cid = kGuestCid;
    options_.clock = &clock_;
  }
  void TearDown() override {
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }
  void StartBackend() {
    auto b = UnixVsockBackend::Create(loop_.get(), options_);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
    backend_->SetRxReadyCallback([this] { ++rx_ready_calls_; });
  }

  // Runs the loop until `pred` holds; fails after 10 s of real time.
  template <typename Pred>
  bool RunUntil(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (!loop_->RunOnce(20).ok()) return false;
    }
    return true;
  }

  // One non-blocking pass of the loop: handles whatever is ready now.
  void Poll() {
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(loop_->RunOnce(0).ok());
  }

  void Guest(VsockOp op, uint32_t guest_port, uint32_t host_port, const std::string& data = "",
             uint32_t flags = 0) {
    VsockPacket p;
    p.hdr.src_cid = kGuestCid;
    p.hdr.dst_cid = kVsockHostCid;
    p.hdr.src_port = guest_port;
    p.hdr.dst_port = host_port;
    p.hdr.op = op;
    p.hdr.flags = flags;
    p.hdr.len = static_cast<uint32_t>(data.size());
    p.hdr.buf_alloc = guest_buf_alloc_;
    p.hdr.fwd_cnt = guest_fwd_cnt_;
    p.payload.assign(data.begin(), data.end());
    ASSERT_TRUE(ValidateTxHeader(p.hdr, kGuestCid, p.payload.size()).ok());
    backend_->HandleGuestPacket(p);
  }

  // Pops the next packet for the guest, running the loop until there is one.
  VsockPacket NextPacket() {
    EXPECT_TRUE(RunUntil([&] { return backend_->HasRxPacket(); }));
    auto p = backend_->PopRxPacket(kVsockMaxPayload);
    EXPECT_TRUE(p.has_value());
    return p ? *p : VsockPacket{};
  }

  ScopedFd ConnectClient(const std::string& path) {
    ScopedFd fd = UnixSocket();
    sockaddr_un a = Addr(path);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }
  ScopedFd Listen(const std::string& path) {
    ScopedFd fd = UnixSocket();
    sockaddr_un a = Addr(path);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd.get(), 8), 0);
    return fd;
  }
  static void Write(int fd, const std::string& s) {
    ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // Reads from a non-blocking socket until `n` bytes arrived (running the
  // loop meanwhile) or EOF; *eof reports which.
  std::string ReadN(int fd, size_t n, bool* eof = nullptr) {
    std::string out;
    bool closed = false;
    RunUntil([&] {
      char buf[65536];
      ssize_t r;
      while ((r = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
        out.append(buf, static_cast<size_t>(r));
      }
      if (r == 0) closed = true;
      return closed || out.size() >= n;
    });
    if (eof) *eof = closed;
    return out;
  }
  bool WaitEof(int fd) {
    bool eof = false;
    ReadN(fd, SIZE_MAX, &eof);
    return eof;
  }

  // Host connect + REQUEST/RESPONSE + "OK" line; returns the host port.
  uint32_t EstablishHostConnect(int client, uint32_t guest_port) {
    Write(client, "CONNECT " + std::to_string(guest_port) + "\n");
    VsockPacket req = NextPacket();
    EXPECT_EQ(req.hdr.op, VsockOp::kRequest);
    EXPECT_EQ(req.hdr.dst_port, guest_port);
    Guest(VsockOp::kResponse, guest_port, req.hdr.src_port);
    const std::string ok = "OK " + std::to_string(req.hdr.src_port) + "\n";
    EXPECT_EQ(ReadN(client, ok.size()), ok);
    return req.hdr.src_port;
  }

  std::string dir_;
  std::unique_ptr<EventLoop> loop_;
  FakeClock clock_;
  UnixVsockBackendOptions options_;
  std::unique_ptr<UnixVsockBackend> backend_;
  int rx_ready_calls_ = 0;
  uint32_t guest_buf_alloc_ = 256 * 1024;
  uint32_t guest_fwd_cnt_ = 0;
};

TEST_F(UnixBackendTest, RefusesSecondBackendOnSamePath) {
  StartBackend();
  auto second = UnixVsockBackend::Create(loop_.get(), options_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(UnixBackendTest, RefusesReservedGuestCid) {
  options_.guest_cid = 2;
  EXPECT_EQ(UnixVsockBackend::Create(loop_.get(), options_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(UnixBackendTest, HostConnectHandshakeDataBothWaysAndShutdown) {
  StartBackend();
  ScopedFd client = ConnectClient(options_.path);
  // Data right behind the CONNECT line belongs to the stream.
  Write(client.get(), "CONNECT 52\nping");
  VsockPacket req = NextPacket();
  ASSERT_EQ(req.hdr.op, VsockOp::kRequest);
  EXPECT_EQ(req.hdr.src_cid, kVsockHostCid);
  EXPECT_EQ(req.hdr.dst_cid, kGuestCid);
  EXPECT_EQ(req.hdr.dst_port, 52u);
  EXPECT_GE(req.hdr.src_port, 1u << 30);
  EXPECT_GT(rx_ready_calls_, 0);
  const uint32_t host_port = req.hdr.src_port;
  EXPECT_FALSE(backend_->HasRxPacket());  // no data before the guest answers

  Guest(VsockOp::kResponse, 52, host_port);
  const std::string ok = "OK " + std::to_string(host_port) + "\n";
  EXPECT_EQ(ReadN(client.get(), ok.size()), ok);
  VsockPacket data = NextPacket();
  ASSERT_EQ(data.hdr.op, VsockOp::kRw);
  EXPECT_EQ(AsString(data.payload), "ping");

  Guest(VsockOp::kRw, 52, host_port, "pong");
  EXPECT_EQ(ReadN(client.get(), 4), "pong");

  ASSERT_EQ(::shutdown(client.get(), SHUT_WR), 0);
  VsockPacket shut = NextPacket();
  ASSERT_EQ(shut.hdr.op, VsockOp::kShutdown);
  EXPECT_EQ(shut.hdr.flags, kVsockShutdownSend);
  EXPECT_EQ(shut.hdr.fwd_cnt, 4u);  // the host took "pong"

  Guest(VsockOp::kShutdown, 52, host_port, "", kVsockShutdownBoth);
  EXPECT_EQ(NextPacket().hdr.op, VsockOp::kRst);
  EXPECT_TRUE(WaitEof(client.get()));
  EXPECT_EQ(backend_->connection_count(), 0u);
  EXPECT_EQ(backend_->metrics().host_connects, 1u);
}

TEST_F(UnixBackendTest, GuestRstOnRequestClosesHostClient) {
  StartBackend();
  ScopedFd client = ConnectClient(options_.path);
  Write(client.get(), "CONNECT 7\n");
  VsockPacket req = NextPacket();
  Guest(VsockOp::kRst, 7, req.hdr.src_port);
  EXPECT_TRUE(WaitEof(client.get()));
  EXPECT_EQ(backend_->connection_count(), 0u);
}

TEST_F(UnixBackendTest, BadConnectLineClosesClient) {
  StartBackend();
  ScopedFd client = ConnectClient(options_.path);
  Write(client.get(), "CONNECT fifty\n");
  EXPECT_TRUE(WaitEof(client.get()));
  EXPECT_EQ(backend_->metrics().clients_rejected, 1u);
  EXPECT_FALSE(backend_->HasRxPacket());
}

TEST_F(UnixBackendTest, SilentClientIsDroppedAfterHandshakeTimeout) {
  StartBackend();
  ScopedFd client = ConnectClient(options_.path);
  Write(client.get(), "CONN");
  ASSERT_TRUE(RunUntil([&] { return backend_->pending_clients() == 1; }));
  clock_.AdvanceNs(options_.handshake_timeout_ns);
  backend_->CheckTimeouts();
  EXPECT_TRUE(WaitEof(client.get()));
}

TEST_F(UnixBackendTest, GuestThatNeverAnswersIsResetAndClientClosed) {
  StartBackend();
  ScopedFd client = ConnectClient(options_.path);
  Write(client.get(), "CONNECT 9\n");
  ASSERT_EQ(NextPacket().hdr.op, VsockOp::kRequest);
  clock_.AdvanceNs(options_.connection.connect_timeout_ns);
  backend_->CheckTimeouts();
  EXPECT_EQ(NextPacket().hdr.op, VsockOp::kRst);
  EXPECT_TRUE(WaitEof(client.get()));
  EXPECT_EQ(backend_->connection_count(), 0u);
}

TEST_F(UnixBackendTest, GuestConnectReachesListenerAtPathUnderscorePort) {
  StartBackend();
  ScopedFd listener = Listen(options_.path + "_1234");
  Guest(VsockOp::kRequest, 5000, 1234);
  VsockPacket resp = NextPacket();
  ASSERT_EQ(resp.hdr.op, VsockOp::kResponse);
  EXPECT_EQ(resp.hdr.src_port, 1234u);
  EXPECT_EQ(resp.hdr.dst_port, 5000u);
  ScopedFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  ASSERT_TRUE(server.valid());

  Guest(VsockOp::kRw, 5000, 1234, "hi");
  EXPECT_EQ(ReadN(server.get(), 2), "hi");
  Write(server.get(), "yo");
  VsockPacket data = NextPacket();
  ASSERT_EQ(data.hdr.op, VsockOp::kRw);
  EXPECT_EQ(AsString(data.payload), "yo");

  server.Reset();  // the service closes: EOF on read, EPIPE on write
  VsockPacket shut = NextPacket();
  ASSERT_EQ(shut.hdr.op, VsockOp::kShutdown);
  Guest(VsockOp::kRst, 5000, 1234);
  EXPECT_EQ(backend_->connection_count(), 0u);
  EXPECT_EQ(backend_->metrics().guest_connects, 1u);
}

TEST_F(UnixBackendTest, GuestConnectWithNoListenerGetsRst) {
  StartBackend();
  Guest(VsockOp::kRequest, 5000, 80);
  VsockPacket rst = NextPacket();
  EXPECT_EQ(rst.hdr.op, VsockOp::kRst);
  EXPECT_EQ(rst.hdr.src_port, 80u);
  EXPECT_EQ(rst.hdr.dst_port, 5000u);
  EXPECT_EQ(rst.hdr.dst_cid, kGuestCid);
  EXPECT_EQ(backend_->metrics().guest_connect_refused, 1u);
  EXPECT_EQ(backend_->connection_count(), 0u);
}

TEST_F(UnixBackendTest, PacketForUnknownStreamGetsRstButRstGetsNothing) {
  StartBackend();
  Guest(VsockOp::kRw, 5000, 80, "x");
  EXPECT_EQ(NextPacket().hdr.op, VsockOp::kRst);
  Guest(VsockOp::kRst, 5000, 80);
  EXPECT_FALSE(backend_->HasRxPacket());
}

TEST_F(UnixBackendTest, ConnectionLimitRefusesWithRst) {
  options_.max_connections = 1;
  StartBackend();
  ScopedFd listener = Listen(options_.path + "_1");
  Guest(VsockOp::kRequest, 5000, 1);
  EXPECT_EQ(NextPacket().hdr.op, VsockOp::kResponse);
  Guest(VsockOp::kRequest, 5001, 1);
  EXPECT_EQ(NextPacket().hdr.op, VsockOp::kRst);
  EXPECT_EQ(backend_->connection_count(), 1u);
  EXPECT_EQ(backend_->metrics().limit_refusals, 1u);
}

TEST_F(UnixBackendTest, SlowHostReaderExhaustsGuestCreditInsteadOfBuffering) {
  options_.connection.buf_alloc = 128 * 1024;
  StartBackend();
  ScopedFd listener = Listen(options_.path + "_7");
  Guest(VsockOp::kRequest, 5000, 7);
  ASSERT_EQ(NextPacket().hdr.op, VsockOp::kResponse);
  ScopedFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  ASSERT_TRUE(server.valid());

  // The guest sends as long as its credit allows; the server does not read.
  uint32_t sent = 0, host_fwd = 0;
  const std::string chunk(16 * 1024, 'd');
  for (int i = 0; i < 1000; ++i) {
    Poll();
    while (backend_->HasRxPacket()) {
      auto p = backend_->PopRxPacket(kVsockMaxPayload);
      ASSERT_TRUE(p.has_value());
      ASSERT_EQ(p->hdr.op, VsockOp::kCreditUpdate);
      host_fwd = p->hdr.fwd_cnt;
    }
    const uint32_t credit = VsockCredit(options_.connection.buf_alloc, sent, host_fwd);
    if (credit == 0) break;
    const size_t n = std::min<size_t>(credit, chunk.size());
    Guest(VsockOp::kRw, 5000, 7, chunk.substr(0, n));
    sent += static_cast<uint32_t>(n);
  }
  const VsockConnection* conn = backend_->FindConnection(7, 5000);
  ASSERT_NE(conn, nullptr);
  // The host socket is full, the guest has no credit left and the backend
  // holds at most buf_alloc bytes.
  EXPECT_EQ(VsockCredit(options_.connection.buf_alloc, sent, host_fwd), 0u);
  EXPECT_GT(conn->buffered_to_host(), 0u);
  EXPECT_LE(conn->buffered_to_host(), options_.connection.buf_alloc);
  EXPECT_FALSE(backend_->HasRxPacket());
  EXPECT_EQ(conn->state(), VsockConnection::State::kConnected);

  // The server drains everything; the guest is told it may send again.
  std::string got = ReadN(server.get(), sent);
  EXPECT_EQ(got.size(), sent);
  VsockPacket update = NextPacket();
  EXPECT_EQ(update.hdr.op, VsockOp::kCreditUpdate);
  EXPECT_EQ(update.hdr.fwd_cnt, sent);
}

TEST_F(UnixBackendTest, HostFloodIsBoundedByGuestCredit) {
  guest_buf_alloc_ = 4096;
  StartBackend();
  ScopedFd client = ConnectClient(options_.path);
  const uint32_t host_port = EstablishHostConnect(client.get(), 52);
  // The client writes until its socket pushes back.
  const std::string chunk(64 * 1024, 'h');
  size_t written = 0;
  while (true) {
    ssize_t n = ::send(client.get(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
    Poll();
  }
  ASSERT_EQ(errno, EAGAIN);
  size_t to_guest = 0;
  while (backend_->HasRxPacket()) {
    auto p = backend_->PopRxPacket(kVsockMaxPayload);
    ASSERT_EQ(p->hdr.op, VsockOp::kRw);
    to_guest += p->payload.size();
    Poll();
  }
  EXPECT_EQ(to_guest, 4096u);  // exactly the guest's credit
  const VsockConnection* conn = backend_->FindConnection(host_port, 52);
  ASSERT_NE(conn, nullptr);
  EXPECT_EQ(conn->buffered_to_guest(), 0u);  // nothing read ahead of credit
  EXPECT_GT(written, 4096u);

  // The guest consumed it and reports so: the next 4096 bytes flow.
  guest_fwd_cnt_ = 4096;
  Guest(VsockOp::kCreditUpdate, 52, host_port);
  VsockPacket more = NextPacket();
  EXPECT_EQ(more.hdr.op, VsockOp::kRw);
  EXPECT_EQ(more.payload.size(), 4096u);
}

TEST_F(UnixBackendTest, ResetConnectionsClosesHostSocketsWithoutRst) {
  StartBackend();
  ScopedFd client = ConnectClient(options_.path);
  EstablishHostConnect(client.get(), 52);
  backend_->ResetConnections();
  EXPECT_FALSE(backend_->HasRxPacket());
  EXPECT_EQ(backend_->connection_count(), 0u);
  EXPECT_TRUE(WaitEof(client.get()));
}

TEST_F(UnixBackendTest, DestructorUnlinksSocketPath) {
  StartBackend();
  EXPECT_TRUE(std::filesystem::exists(options_.path));
  backend_.reset();
  EXPECT_FALSE(std::filesystem::exists(options_.path));
}

}  // namespace
}  // namespace dsec::devices
