// SPDX-License-Identifier: Apache-2.0
// Connection handling: handshake, protocol errors, limits, shutdown.
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <future>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "guest-kernel/agent/test_server.h"

namespace dsec::agent {
namespace {

using testing::RawPeer;
using testing::TempDir;
using testing::TestServer;

ServerOptions RootedAt(const TempDir& dir) {
  ServerOptions o;
  o.root = dir.path();
  return o;
}

ExecDone Exited(int code) {
  ExecDone d;
  d.exit_code = code;
  return d;
}

FileWriteRequest WriteOf(const std::string& path, uint64_t size) {
  FileWriteRequest w;
  w.path = path;
  w.size = size;
  return w;
}

std::string Header(uint32_t len, uint8_t type) {
  return {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
          static_cast<char>((len >> 16) & 0xff), static_cast<char>(len >> 24),
          static_cast<char>(type)};
}

TEST(ServerTest, HandshakeAnnouncesVersionAndCapabilities) {
  TempDir dir;
  TestServer ts(RootedAt(dir));
  auto client = ts.Connect();
  EXPECT_EQ(client->agent_hello().version, kProtocolVersion);
  EXPECT_EQ(client->agent_hello().software, "dsec-agent");
  EXPECT_EQ(client->agent_hello().max_frame_bytes, kMaxFramePayload);
  EXPECT_EQ(client->agent_hello().capabilities.size(), std::size(kCapabilities));
}

TEST(ServerTest, RefusesAnotherProtocolVersion) {
  TempDir dir;
  TestServer ts(RootedAt(dir));
  RawPeer peer(ts.RawConnection());
  Hello h;
  h.version = kProtocolVersion + 1;
  peer.Send(ToFrame(h));
  peer.ExpectErrorThenClose(absl::StatusCode::kFailedPrecondition);
}

TEST(ServerTest, MalformedFramesCloseOnlyThatConnection) {
  TempDir dir;
  TestServer ts(RootedAt(dir));
  auto good = ts.Connect();
  struct Case {
    const char* what;
    bool handshake;
    std::string bytes;
  };
  const Case cases[] = {
      {"request before HELLO", false, EncodeFrame(EmptyFrame(MsgType::kPackDiff))},
      {"oversized length", true, Header(kMaxFramePayload + 1, 0x10)},
      {"huge length", true, Header(0xffffffffu, 0x10)},
      {"unknown type", true, Header(0, 0x7e)},
      {"EXEC with broken JSON", true, EncodeFrame(Frame{MsgType::kExec, "{\"argv\": [\"ls\""})},
      {"EXEC with a JSON type error", true,
       EncodeFrame(Frame{MsgType::kExec, "{\"argv\": \"ls\"}"})},
      {"a reply type sent to the agent", true, EncodeFrame(ToFrame(Exited(0)))},
      {"FILE_WRITE with too much data", true,
       EncodeFrame(ToFrame(WriteOf("f", 1))) + EncodeFrame(DataFrame(MsgType::kData, "toolong"))},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RawPeer peer(ts.RawConnection());
    if (c.handshake) peer.Handshake();
    peer.SendBytes(c.bytes);
    peer.ExpectErrorThenClose(absl::StatusCode::kInvalidArgument);
  }
  // The server and the other connection carry on.
  std::string out;
  ExecRequest r;
  r.argv = {"echo", "alive"};
  auto done = good->Exec(r, [&](int, std::string_view d) { out.append(d); });
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(out, "alive\n");
  EXPECT_GE(ts.server().metrics().protocol_errors.load(), std::size(cases));
}

TEST(ServerTest, TruncatedFrameAtCloseIsHandled) {
  TempDir dir;
  TestServer ts(RootedAt(dir));
  {
    RawPeer peer(ts.RawConnection());
    peer.Handshake();
    peer.SendBytes(Header(100, 0x10) + "{\"ar");
  }  // closed mid-frame
  auto client = ts.Connect();
  EXPECT_TRUE(client->ListDir("").ok());
}

TEST(ServerTest, StaleStdinBetweenRequestsIsIgnored) {
  TempDir dir;
  TestServer ts(RootedAt(dir));
  RawPeer peer(ts.RawConnection());
  peer.Handshake();
  peer.Send(DataFrame(MsgType::kStdin, "late"));
  peer.Send(EmptyFrame(MsgType::kStdinClose));
  peer.Send(ToFrame(SignalRequest{15}));
  peer.Send(ToFrame(ListDirRequest()));
  auto f = peer.Read();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->type, MsgType::kDirEntries);
}

TEST(ServerTest, RefusesConnectionsOverTheLimit) {
  TempDir dir;
  ServerOptions o = RootedAt(dir);
  o.max_connections = 1;
  TestServer ts(o);
  auto first = ts.Connect();
  RawPeer second(ts.RawConnection());
  second.ExpectErrorThenClose(absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ts.server().metrics().connections_refused.load(), 1u);
  first.reset();
  ASSERT_TRUE(ts.server().WaitIdle(20'000));
  auto third = ts.Connect();
  EXPECT_TRUE(third->ListDir("").ok());
}

TEST(ServerTest, ShutdownIsAcknowledgedThenReported) {
  TempDir dir;
  std::promise<void> called;
  ServerOptions o = RootedAt(dir);
  o.on_shutdown = [&] { called.set_value(); };
  TestServer ts(o);
  auto client = ts.Connect();
  ASSERT_TRUE(client->Shutdown().ok());
  EXPECT_EQ(called.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(absl::IsFailedPrecondition(client->ListDir("").status()));
}

TEST(ServerTest, NetworkGoesToTheConfiguratorAndItsErrorComesBack) {
  TempDir dir;
  // Without a configurator (not a guest's PID 1): refused, and the
  // connection serves on.
  {
    TestServer ts(RootedAt(dir));
    auto client = ts.Connect();
    absl::Status s = client->ConfigureNetwork("10.201.0.7/16,10.201.0.1");
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("manages no network"), std::string::npos) << s;
    EXPECT_TRUE(client->ListDir("").ok());
  }
  std::vector<std::string> asked;
  ServerOptions o = RootedAt(dir);
  o.configure_network = [&asked](const std::string& net) {
    asked.push_back(net);
    if (net == "bad") return absl::InvalidArgumentError("network: malformed \"bad\"");
    return absl::OkStatus();
  };
  TestServer ts(o);
  auto client = ts.Connect();
  EXPECT_TRUE(client->ConfigureNetwork("10.201.0.7/16,10.201.0.1").ok());
  absl::Status bad = client->ConfigureNetwork("bad");
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("malformed"), std::string::npos) << bad;
  EXPECT_TRUE(client->ListDir("").ok());
  EXPECT_EQ(asked, (std::vector<std::string>{"10.201.0.7/16,10.201.0.1", "bad"}));
  // A NETWORK frame without its field is a protocol error: that connection
  // closes.
  RawPeer peer(ts.RawConnection());
  peer.Handshake();
  Frame f;
  f.type = MsgType::kNetwork;
  f.payload = "{}";
  peer.Send(f);
  peer.ExpectErrorThenClose(absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(asked.size(), 2u);
}

// CLOCK reaches the PID 1's setter with the host's value; without one
// (host mode: the host's own clock) it is refused and nothing is set; an
// implausible value is refused before the setter.
TEST(ServerTest, ClockIsSetOnlyThroughPid1sSetter) {
  TempDir dir;
  constexpr int64_t kWhen = 1'796'000'000'123'456'789;  // 2026-12
  {
    TestServer ts(RootedAt(dir));
    auto client = ts.Connect();
    absl::Status s = client->SetClock(kWhen);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("sets no clock"), std::string::npos) << s;
    EXPECT_TRUE(client->ListDir("").ok());
  }
  std::vector<int64_t> set;
  ServerOptions o = RootedAt(dir);
  o.set_clock = [&set](int64_t ns) {
    set.push_back(ns);
    return absl::OkStatus();
  };
  TestServer ts(o);
  auto client = ts.Connect();
  EXPECT_NE(std::find(client->agent_hello().capabilities.begin(), client->agent_hello().capabilities.end(),
                      "clock"),
            client->agent_hello().capabilities.end());
  EXPECT_TRUE(client->SetClock(kWhen).ok());
  EXPECT_EQ(set, std::vector<int64_t>{kWhen});
  // 1970 is no wall clock a host would send: a protocol error, nothing set.
  RawPeer peer(ts.RawConnection());
  peer.Handshake();
  Frame f;
  f.type = MsgType::kClock;
  f.payload = R"({"unix_ns":5})";
  peer.Send(f);
  peer.ExpectErrorThenClose(absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(set.size(), 1u);
}

// ENTROPY reaches PID 1's reseed hook with the host's bytes; without one
// (host mode: the host's own CRNG) it is refused and nothing is done; a
// seed out of bounds is refused before the hook.
TEST(ServerTest, EntropyGoesOnlyToPid1sReseed) {
  TempDir dir;
  const std::string seed(48, '\x42');
  {
    TestServer ts(RootedAt(dir));
    auto client = ts.Connect();
    absl::Status s = client->Reseed(seed);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("reseeds no CRNG"), std::string::npos) << s;
    EXPECT_TRUE(client->ListDir("").ok());
  }
  std::vector<std::string> got;
  ServerOptions o = RootedAt(dir);
  o.reseed = [&got](const std::string& s) {
    got.push_back(s);
    return absl::OkStatus();
  };
  TestServer ts(o);
  auto client = ts.Connect();
  const auto& caps = client->agent_hello().capabilities;
  EXPECT_NE(std::find(caps.begin(), caps.end(), "entropy"), caps.end());
  EXPECT_TRUE(client->Reseed(seed).ok());
  EXPECT_EQ(got, std::vector<std::string>{seed});
  RawPeer peer(ts.RawConnection());
  peer.Handshake();
  peer.Send(ToFrame(EntropyRequest{std::string(8, 'x')}));
  peer.ExpectErrorThenClose(absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.size(), 1u);
}

TEST(ServerTest, StoppingTheServerKillsRunningCommands) {
  TempDir dir;
  auto ts = std::make_unique<TestServer>(RootedAt(dir));
  auto client = ts->Connect();
  ExecRequest r;
  r.argv = {"sh", "-c", "echo $$; exec sleep 1000"};
  auto stream = client->StartExec(r);
  ASSERT_TRUE(stream.ok());
  auto ev = (*stream)->Next(20'000);
  ASSERT_TRUE(ev.ok()) << ev.status();
  int pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ev->data), &pid)) << ev->data;
  long fd = syscall(SYS_pidfd_open, pid, 0);
  ASSERT_GE(fd, 0);
  ScopedFd pidfd(static_cast<int>(fd));
  ts.reset();  // joins the connection thread, which kills the command
  pollfd p = {pidfd.get(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 10'000), 1);
  auto after = (*stream)->Next(20'000);
  EXPECT_FALSE(after.ok());
}

}  // namespace
}  // namespace dsec::agent
