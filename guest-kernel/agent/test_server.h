// SPDX-License-Identifier: Apache-2.0
// Test-only: an in-process Server and clients connected to it through
// socketpairs.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "guest-kernel/agent/agent_testing.h"
#include "guest-kernel/agent/client.h"
#include "guest-kernel/agent/frame_conn.h"
#include "guest-kernel/agent/messages.h"
#include "guest-kernel/agent/server.h"
#include "base/status.h"

namespace dsec::agent::testing {

class TestServer {
 public:
  explicit TestServer(ServerOptions options) {
    auto s = Server::Create(std::move(options));
    DSEC_CHECK_OK(s.status());
    server_ = *std::move(s);
  }

  Server& server() { return *server_; }

  // A raw socket whose other end the server serves.
  ScopedFd RawConnection() {
    auto [ours, theirs] = SocketPair();
    server_->ServeConnection(std::move(theirs));
    return std::move(ours);
  }

  std::unique_ptr<Client> Connect(ClientOptions options = {}) {
    auto c = Client::Connect(RawConnection(), options);
    DSEC_CHECK_OK(c.status());
    return *std::move(c);
  }

 private:
  std::unique_ptr<Server> server_;
};

// A hand-driven peer for protocol tests: sends arbitrary bytes and frames.
class RawPeer {
 public:
  explicit RawPeer(ScopedFd fd) : conn_(std::move(fd)) {}

  void SendBytes(std::string_view bytes) {
    ASSERT_EQ(send(conn_.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  void Send(const Frame& f) { ASSERT_TRUE(conn_.Write(f, DeadlineAfterMs(10'000)).ok()); }
  absl::StatusOr<Frame> Read(int64_t timeout_ms = 20'000) {
    return conn_.Read(DeadlineAfterMs(timeout_ms));
  }
  void Handshake() {
    Hello h;
    h.software = "raw-test";
    Send(ToFrame(h));
    auto f = Read();
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->type, MsgType::kHello);
  }
  // The server must answer with ERROR `code` and then close the connection.
  void ExpectErrorThenClose(absl::StatusCode code) {
    auto f = Read();
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->type, MsgType::kError) << TypeName(f->type);
    auto err = Decode<ErrorMsg>(*f);
    ASSERT_TRUE(err.ok());
    EXPECT_EQ(err->code, code) << err->message;
    auto eof = Read();
    EXPECT_TRUE(absl::IsUnavailable(eof.status())) << eof.status();
  }
  FrameConn& conn() { return conn_; }

 private:
  FrameConn conn_;
};

}  // namespace dsec::agent::testing
