// SPDX-License-Identifier: Apache-2.0
// The E2B API's wire protocol against a real daemon (in this process, over
// a busybox layer) on loopback: authentication, the Connect framing of
// process.Process/Start (well-formed, malformed, huge, the wrong codec), a
// client that stops reading, and the 501s. Whatever a client sends, the
// daemon keeps answering.
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <filesystem>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/e2b/connect.h"
#include "sandbox/e2b/server.h"

namespace dsec::e2b {
namespace {

using nlohmann::json;

// A directory of the test's own, removed with what it holds.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dsec-e2b-protocol-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};
constexpr char kKey[] = "e2b_00112233445566778899aabbccddeeff00112233";

struct Frame {
  uint8_t flags;
  json message;
};

// The envelopes of a streamed answer's body (its chunks already joined).
std::vector<Frame> Frames(const std::string& body) {
  std::vector<Frame> out;
  size_t off = 0;
  while (off + 5 <= body.size()) {
    uint32_t n = 0;
    for (int i = 1; i <= 4; ++i) n = (n << 8) | static_cast<uint8_t>(body[off + i]);
    if (off + 5 + n > body.size()) break;
    out.push_back({static_cast<uint8_t>(body[off]), json::parse(body.substr(off + 5, n), nullptr, false)});
    off += 5 + n;
  }
  EXPECT_EQ(off, body.size()) << "trailing bytes after the envelopes";
  return out;
}

class E2bProtocolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_FALSE(dir_->path().empty());
    absl::Status s = daemon::testing::BuildBusyboxLayer(dir_->path() + "/store", dir_->path());
    if (!s.ok()) skip_ = absl::StrCat("busybox layer: ", s.ToString());
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    static int n = 0;
    auto d = daemon::testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/run", n++), dir_->path() + "/store",
                                                 daemon::ServiceOptions{});
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    E2bOptions o;
    o.api_keys = {kKey};
    o.templates["bb"] = Template{"bb", "container", {"bb:1"}, std::nullopt, std::nullopt, std::nullopt};
    o.max_watch_streams = 2;  // StopEndsOpenStreamsAtOnce
    auto s = E2bServer::Start(&daemon_->service(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    daemon_.reset();
  }

  // A sandbox through the API: its id and envd token.
  std::pair<std::string, std::string> NewSandbox() {
    auto r = client_->Post("/v2/sandboxes", {{"X-API-KEY", kKey}}, R"({"templateID":"bb","timeout":300})",
                           "application/json");
    EXPECT_TRUE(r) << "no answer";
    if (!r) return {};
    EXPECT_EQ(r->status, 201) << r->body;
    json j = json::parse(r->body, nullptr, false);
    return {j.value("sandboxID", ""), j.value("envdAccessToken", "")};
  }
  httplib::Headers Envd(const std::pair<std::string, std::string>& sb) {
    return {{"E2b-Sandbox-Id", sb.first}, {"X-Access-Token", sb.second}};
  }
  httplib::Result Start(const std::pair<std::string, std::string>& sb, const std::string& body,
                        const std::string& type = "application/connect+json") {
    return client_->Post("/process.Process/Start", Envd(sb), body, type.c_str());
  }
  static std::string StartBody(const std::string& script) {
    return EncodeEnvelope(0, json{{"process", {{"cmd", "/bin/sh"}, {"args", {"-c", script}}}}}.dump());
  }
  // A streaming call on a raw connection of its own (read as it comes,
  // with ReadUntil): the request sent, the socket returned.
  absl::StatusOr<ScopedFd> OpenStream(const std::pair<std::string, std::string>& sb, const std::string& method,
                                      const std::string& message) {
    DSEC_ASSIGN_OR_RETURN(ScopedFd fd, daemon::testing::ConnectTcp(server_->port()));
    const std::string body = EncodeEnvelope(0, message);
    if (!daemon::testing::SendAll(
            fd.get(), absl::StrCat("POST ", method, " HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ", sb.first,
                                   "\r\nX-Access-Token: ", sb.second,
                                   "\r\nContent-Type: application/connect+json\r\nConnection: close\r\n",
                                   "Content-Length: ", body.size(), "\r\n\r\n", body))) {
      return absl::InternalError("sending the request failed");
    }
    return fd;
  }
  // Appends what `fd` brings to *got until it holds `what` (20 s at most,
  // or the end of the connection); whether it does.
  static bool ReadUntil(int fd, std::string* got, const std::string& what) {
    char buf[4096];
    for (int i = 0; i < 400 && !absl::StrContains(*got, what); ++i) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      got->append(buf, static_cast<size_t>(n));
    }
    return absl::StrContains(*got, what);
  }
  // The daemon still serves: a command runs to its end.
  void ExpectServing(const std::pair<std::string, std::string>& sb) {
    auto r = Start(sb, StartBody("echo still"));
    ASSERT_TRUE(r);
    std::vector<Frame> f = Frames(r->body);
    ASSERT_GE(f.size(), 3u);
    EXPECT_EQ(f[1].message["event"]["data"]["stdout"], "c3RpbGwK");  // "still\n"
  }

  static TempDir* dir_;
  static inline std::string skip_;
  std::unique_ptr<daemon::testing::LocalDaemon> daemon_;
  std::unique_ptr<E2bServer> server_;
  std::unique_ptr<httplib::Client> client_;
};
TempDir* E2bProtocolTest::dir_ = nullptr;

TEST_F(E2bProtocolTest, ControlPlaneNeedsAConfiguredKey) {
  auto r = client_->Post("/v2/sandboxes", R"({"templateID":"bb"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client_->Post("/v2/sandboxes", {{"X-API-KEY", std::string(kKey) + "0"}}, R"({"templateID":"bb"})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["code"], 401);
  auto sb = NewSandbox();
  EXPECT_TRUE(absl::StartsWith(sb.first, "sb-"));
  EXPECT_EQ(sb.second.size(), 48u);
}

TEST_F(E2bProtocolTest, EnvdNeedsTheSandboxsTokenAndALiveSandbox) {
  auto sb = NewSandbox();
  auto r = client_->Post("/process.Process/List", {{"E2b-Sandbox-Id", sb.first}}, "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client_->Post("/process.Process/List", {{"E2b-Sandbox-Id", sb.first}, {"X-Access-Token", kKey}}, "{}",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);  // an API key is not a sandbox's token
  r = client_->Post("/process.Process/List", Envd(sb), "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["processes"], json::array());
  r = client_->Post("/process.Process/List", {{"E2b-Sandbox-Id", "sb-0000000000000000"}, {"X-Access-Token", "x"}},
                    "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502);  // E2B's "sandbox not found" at its edge
  // The host-name form of routing: <port>-<id>.<domain>.
  r = client_->Post("/process.Process/List",
                    {{"Host", absl::StrCat("49983-", sb.first, ".e2b.local")}, {"X-Access-Token", sb.second}}, "{}",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(E2bProtocolTest, StartStreamsStartDataEndAndEndOfStream) {
  auto sb = NewSandbox();
  auto r = Start(sb, StartBody("echo out; echo err >&2; exit 4"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/connect+json");
  std::vector<Frame> f = Frames(r->body);
  ASSERT_GE(f.size(), 4u) << r->body;
  EXPECT_GT(f[0].message["event"]["start"]["pid"].get<int>(), 0);
  std::string out, err;
  for (size_t i = 1; i + 2 < f.size(); ++i) {
    const json& d = f[i].message["event"]["data"];
    if (d.contains("stdout")) out += d["stdout"].get<std::string>();
    if (d.contains("stderr")) err += d["stderr"].get<std::string>();
  }
  EXPECT_EQ(out, "b3V0Cg==");  // "out\n"
  EXPECT_EQ(err, "ZXJyCg==");  // "err\n"
  const json& end = f[f.size() - 2].message["event"]["end"];
  EXPECT_EQ(end["exitCode"], 4);
  EXPECT_EQ(end["exited"], true);
  EXPECT_EQ(f.back().flags, kFlagEndStream);
  EXPECT_EQ(f.back().message, json::object());
}

TEST_F(E2bProtocolTest, AQuietCommandGetsKeepaliveEvents) {
  auto sb = NewSandbox();
  httplib::Headers h = Envd(sb);
  h.emplace("Keepalive-Ping-Interval", "1");
  auto r = client_->Post("/process.Process/Start", h, StartBody("sleep 2.5; echo x"), "application/connect+json");
  ASSERT_TRUE(r);
  std::vector<Frame> f = Frames(r->body);
  int keepalives = 0;
  for (const Frame& fr : f) keepalives += fr.message.contains("event") && fr.message["event"].contains("keepalive");
  EXPECT_GE(keepalives, 1) << r->body;
  ASSERT_GE(f.size(), 2u);
  EXPECT_EQ(f[f.size() - 2].message["event"]["end"]["exitCode"], 0);
}

TEST_F(E2bProtocolTest, MalformedEnvelopesEndTheStreamWithAnError) {
  auto sb = NewSandbox();
  const std::string ok = StartBody("true");
  const std::pair<std::string, const char*> cases[] = {
      {"", "invalid_argument"},
      {std::string("\0\0\0", 3), "invalid_argument"},
      {ok + "x", "invalid_argument"},                       // trailing bytes
      {ok.substr(0, ok.size() - 1), "invalid_argument"},    // cut short
      {EncodeEnvelope(kFlagCompressed, "{}"), "unimplemented"},
      {EncodeEnvelope(kFlagEndStream, "{}"), "invalid_argument"},
      {EncodeEnvelope(0x40, "{}"), "invalid_argument"},
      {EncodeEnvelope(0, "{not json"), "invalid_argument"},
      {EncodeEnvelope(0, "[1,2]"), "invalid_argument"},
      {EncodeEnvelope(0, std::string(100, '[') + std::string(100, ']')), "invalid_argument"},  // too deep
      {EncodeEnvelope(0, R"({"process":{"cmd":7}})"), "invalid_argument"},
      {EncodeEnvelope(0, R"({"process":{"cmd":"sh"},"pty":{}})"), "unimplemented"},
  };
  for (const auto& [body, code] : cases) {
    auto r = Start(sb, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    std::vector<Frame> f = Frames(r->body);
    ASSERT_EQ(f.size(), 1u) << r->body;
    EXPECT_EQ(f[0].flags, kFlagEndStream);
    EXPECT_EQ(f[0].message["error"]["code"], code) << f[0].message.dump();
  }
  ExpectServing(sb);
}

TEST_F(E2bProtocolTest, HugeFramesAreRefusedWithoutBeingRead) {
  auto sb = NewSandbox();
  // An envelope declaring 4 GiB in a small body.
  auto r = Start(sb, std::string("\x00\xff\xff\xff\xff{}", 7));
  ASSERT_TRUE(r);
  std::vector<Frame> f = Frames(r->body);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message["error"]["code"], "resource_exhausted");
  // A body declared at 1 GiB: refused on its head (413), never read.
  auto fd = daemon::testing::ConnectTcp(server_->port());
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_TRUE(daemon::testing::SendAll(
      fd->get(), absl::StrCat("POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ", sb.first,
                              "\r\nX-Access-Token: ", sb.second,
                              "\r\nContent-Type: application/connect+json\r\nContent-Length: 1073741824\r\n\r\n")));
  daemon::testing::RawResponse resp = daemon::testing::ReadResponse(fd->get(), 30000);
  EXPECT_EQ(resp.status, 413);
  // Over the upload limit on POST /files too.
  auto fd2 = daemon::testing::ConnectTcp(server_->port());
  ASSERT_TRUE(fd2.ok());
  ASSERT_TRUE(daemon::testing::SendAll(
      fd2->get(), absl::StrCat("POST /files?path=/x HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ", sb.first,
                               "\r\nX-Access-Token: ", sb.second, "\r\nContent-Length: 4294967296\r\n\r\n")));
  EXPECT_EQ(daemon::testing::ReadResponse(fd2->get(), 30000).status, 413);
  ExpectServing(sb);
}

TEST_F(E2bProtocolTest, OnlyTheJsonCodecIsOffered) {
  auto sb = NewSandbox();
  auto r = Start(sb, StartBody("true"), "application/connect+proto");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
  r = client_->Post("/filesystem.Filesystem/Stat", Envd(sb), "\x0a\x01/", "application/proto");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
}

TEST_F(E2bProtocolTest, AClientThatStopsReadingHoldsNeitherTheCommandNorTheSandbox) {
  auto sb = NewSandbox();
  // 3 MB of output (under the 4 MiB cap) to a client that never reads:
  // the exec still ends, so the sandbox is free for the next command.
  auto fd = daemon::testing::ConnectTcp(server_->port());
  ASSERT_TRUE(fd.ok());
  int small = 4096;
  ASSERT_EQ(::setsockopt(fd->get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  const std::string body = StartBody("yes 0123456789012345678901234567890123456789 | head -c 3000000; echo done");
  ASSERT_TRUE(daemon::testing::SendAll(
      fd->get(), absl::StrCat("POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ", sb.first,
                              "\r\nX-Access-Token: ", sb.second, "\r\nContent-Type: application/connect+json\r\n",
                              "Content-Length: ", body.size(), "\r\n\r\n", body)));
  const auto t0 = std::chrono::steady_clock::now();
  ExpectServing(sb);  // waits for the sandbox: the stalled command's exec ended
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  fd->Reset();  // the stalled stream's worker sees the peer gone
  ExpectServing(sb);
}

// Two clients of one command: the Start stream's and a Connect's (by
// pid, once the command is listed). Both get the output after the Connect
// attached and the end; the Connect's first bytes prove it attached before
// the command may end.
TEST_F(E2bProtocolTest, AConnectedClientGetsTheRestOfARunningCommand) {
  auto sb = NewSandbox();
  std::string started;
  // A client of its own (an httplib::Client serves one request at a time).
  std::thread starter([&, port = server_->port()] {
    httplib::Client own("127.0.0.1", port);
    own.set_read_timeout(60, 0);
    auto r = own.Post("/process.Process/Start", Envd(sb),
                      StartBody("while [ ! -e /tmp/go ]; do echo tick; sleep 0.05; done; echo done; exit 5"),
                      "application/connect+json");
    if (r) started = r->body;
  });
  struct Join {
    std::thread* t;
    ~Join() {
      if (t->joinable()) t->join();
    }
  } join{&starter};
  uint32_t pid = 0;
  for (int i = 0; i < 600 && pid == 0; ++i) {
    auto l = client_->Post("/process.Process/List", Envd(sb), "{}", "application/json");
    if (l && l->status == 200) {
      json procs = json::parse(l->body)["processes"];
      if (!procs.empty()) pid = procs[0]["pid"].get<uint32_t>();
    }
    if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(pid, 0u);
  auto fd = OpenStream(sb, "/process.Process/Connect", json{{"process", {{"pid", pid}}}}.dump());
  ASSERT_TRUE(fd.ok()) << fd.status();
  std::string got;
  auto read_until = [&](const std::string& what) { return ReadUntil(fd->get(), &got, what); };
  ASSERT_TRUE(read_until("\"stdout\"")) << got;  // attached: output flows to it
  auto go = Start(sb, StartBody("touch /tmp/go"));
  ASSERT_TRUE(go);
  EXPECT_TRUE(read_until("\"exitCode\":5")) << got;
  // What each client saw, from its envelopes (the raw answer dechunked).
  auto output_of = [](const std::vector<Frame>& frames) {
    std::string out;
    for (const Frame& f : frames) {
      const json d = f.message.is_object() ? f.message.value("event", json::object()).value("data", json::object())
                                           : json::object();
      if (d.is_object() && d.contains("stdout")) {
        std::string bytes;
        EXPECT_TRUE(absl::Base64Unescape(d["stdout"].get<std::string>(), &bytes));
        out += bytes;
      }
    }
    return out;
  };
  std::string dechunked;
  for (size_t off = got.find("\r\n\r\n") + 4; off < got.size();) {
    const size_t eol = got.find("\r\n", off);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(got.substr(off, eol - off), nullptr, 16);
    if (n == 0 || eol + 2 + n > got.size()) break;
    dechunked += got.substr(eol + 2, n);
    off = eol + 2 + n + 2;
  }
  EXPECT_TRUE(absl::EndsWith(output_of(Frames(dechunked)), "tick\ndone\n")) << dechunked;
  starter.join();  // its command ended
  EXPECT_TRUE(absl::EndsWith(output_of(Frames(started)), "tick\ndone\n")) << started;
  EXPECT_TRUE(absl::StrContains(started, "\"exitCode\":5")) << started;
  // Ended: no longer listed, and a Connect to it is not_found.
  auto l = client_->Post("/process.Process/List", Envd(sb), "{}", "application/json");
  ASSERT_TRUE(l);
  EXPECT_EQ(json::parse(l->body)["processes"].size(), 0u) << l->body;
}

TEST_F(E2bProtocolTest, WhatIsMissingIsNamed) {
  auto sb = NewSandbox();
  auto r = client_->Post(absl::StrCat("/sandboxes/", sb.first, "/snapshots"), {{"X-API-KEY", kKey}}, "{}",
                         "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501);
  EXPECT_TRUE(absl::StrContains(r->body, "snapshots")) << r->body;
  r = client_->Post("/v2/sandboxes", {{"X-API-KEY", kKey}}, R"({"templateID":"bb","autoPause":true})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501);
  EXPECT_TRUE(absl::StrContains(r->body, "autoPause")) << r->body;
  r = client_->Post("/process.Process/SendSignal", Envd(sb), R"({"process":{"pid":77},"signal":"SIGNAL_SIGKILL"})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);  // not a running command here
  r = client_->Post("/process.Process/SendInput", Envd(sb), R"({"process":{"pid":77},"input":{"stdin":"aGkK"}})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = client_->Post("/process.Process/SendInput", Envd(sb), R"({"process":{"pid":77},"input":{"stdin":"!"}})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = client_->Post("/process.Process/SendInput", Envd(sb), R"({"process":{"pid":77},"input":{"pty":"aGkK"}})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501);
  r = client_->Post("/process.Process/CloseStdin", Envd(sb), R"({"process":{"pid":77}})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  // Connect to a command not running here ends its stream not_found.
  auto c = client_->Post("/process.Process/Connect", Envd(sb), EncodeEnvelope(0, R"({"process":{"pid":77}})"),
                         "application/connect+json");
  ASSERT_TRUE(c);
  std::vector<Frame> cf = Frames(c->body);
  ASSERT_FALSE(cf.empty());
  EXPECT_TRUE(absl::StrContains(cf.back().message.dump(), "not_found")) << c->body;
  r = client_->Post("/filesystem.Filesystem/CreateWatcher", Envd(sb), R"({"path":"/","includeEntry":true})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501);
  EXPECT_EQ(json::parse(r->body)["code"], "unimplemented");
  EXPECT_TRUE(absl::StrContains(r->body, "includeEntry")) << r->body;
}

// A server that stops ends its open streams at once: a silent command's
// (without a keepalive) and a directory watch's would otherwise hold its
// stop until the command ended or the next keepalive.
TEST_F(E2bProtocolTest, StopEndsOpenStreamsAtOnce) {
  auto sb = NewSandbox();
  ASSERT_TRUE(Start(sb, StartBody("mkdir -p /w")));
  auto open_stream = [&](const std::string& method, const std::string& message) {
    return OpenStream(sb, method, message);
  };
  auto read_until = [](int fd, std::string* got, const std::string& what) { return ReadUntil(fd, got, what); };
  auto watch = open_stream("/filesystem.Filesystem/WatchDir", R"({"path":"/w"})");
  ASSERT_TRUE(watch.ok()) << watch.status();
  auto command = open_stream("/process.Process/Start",
                             json{{"process", {{"cmd", "/bin/sh"}, {"args", {"-c", "sleep 120"}}}}}.dump());
  ASSERT_TRUE(command.ok()) << command.status();
  std::string watch_got, command_got;
  ASSERT_TRUE(read_until(watch->get(), &watch_got, R"("start":{})")) << watch_got;
  // Two watch streams at once here (max_watch_streams): a third is refused.
  auto second = open_stream("/filesystem.Filesystem/WatchDir", R"({"path":"/"})");
  ASSERT_TRUE(second.ok()) << second.status();
  std::string second_got;
  ASSERT_TRUE(read_until(second->get(), &second_got, R"("start":{})")) << second_got;
  auto third = open_stream("/filesystem.Filesystem/WatchDir", R"({"path":"/"})");
  ASSERT_TRUE(third.ok()) << third.status();
  std::string third_got;
  EXPECT_TRUE(read_until(third->get(), &third_got, R"("code":"resource_exhausted")")) << third_got;
  ASSERT_TRUE(read_until(command->get(), &command_got, R"("start":{"pid")")) << command_got;
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(5)) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  EXPECT_TRUE(read_until(watch->get(), &watch_got, R"("code":"unavailable")")) << watch_got;
  EXPECT_TRUE(read_until(command->get(), &command_got, "stopping")) << command_got;
  // As the daemon does after its front ends stop: the command ends with
  // its sandbox (else the server's records would wait for it).
  EXPECT_TRUE(daemon_->service().Delete(sb.first).ok());
}

// The polled watcher: CreateWatcher, GetWatcherEvents (what came since the
// last call), RemoveWatcher; errors for a bad id and a missing directory.
TEST_F(E2bProtocolTest, APolledWatcherGetsADirectorysChanges) {
  auto sb = NewSandbox();
  auto call = [&](const std::string& method, const json& body) {
    auto r = client_->Post(absl::StrCat("/filesystem.Filesystem/", method), Envd(sb), body.dump(), "application/json");
    EXPECT_TRUE(r) << method;
    return r;
  };
  ASSERT_EQ(call("MakeDir", {{"path", "/w"}})->status, 200);
  auto missing = call("CreateWatcher", {{"path", "/nope"}});
  EXPECT_EQ(missing->status, 404) << missing->body;
  auto c = call("CreateWatcher", {{"path", "/w"}, {"recursive", true}});
  ASSERT_EQ(c->status, 200) << c->body;
  const std::string wid = json::parse(c->body)["watcherId"];
  auto none = call("GetWatcherEvents", {{"watcherId", wid}});
  ASSERT_EQ(none->status, 200) << none->body;
  EXPECT_EQ(json::parse(none->body)["events"].size(), 0u) << none->body;
  // Events come as the commands run: polled, bounded.
  auto poll_for = [&](const std::string& name) {
    json events = json::array();
    for (int i = 0; i < 100; ++i) {
      auto g = call("GetWatcherEvents", {{"watcherId", wid}});
      EXPECT_EQ(g->status, 200) << g->body;
      const json answer = json::parse(g->body);
      for (const json& e : answer["events"]) events.push_back(e);
      if (absl::StrContains(events.dump(), absl::StrCat(R"("name":")", name, R"(")"))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return events;
  };
  ASSERT_TRUE(Start(sb, StartBody("mkdir /w/d")));
  json events = poll_for("d");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0], (json{{"name", "d"}, {"type", "EVENT_TYPE_CREATE"}})) << events;
  // Recursive: the new directory is watched too.
  ASSERT_TRUE(Start(sb, StartBody("echo x > /w/d/f")));
  events = poll_for("d/f");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0], (json{{"name", "d/f"}, {"type", "EVENT_TYPE_CREATE"}})) << events;
  EXPECT_EQ(call("RemoveWatcher", {{"watcherId", wid}})->status, 200);
  auto gone = call("GetWatcherEvents", {{"watcherId", wid}});
  EXPECT_EQ(gone->status, 404) << gone->body;
  EXPECT_EQ(call("RemoveWatcher", {{"watcherId", wid}})->status, 404);
  EXPECT_EQ(call("GetWatcherEvents", json::object())->status, 400);
}

// WatchDir: the start event, then the events, and the stream's end with
// not_found when the directory goes.
TEST_F(E2bProtocolTest, AWatchStreamEndsWhenItsDirectoryGoes) {
  auto sb = NewSandbox();
  ASSERT_TRUE(Start(sb, StartBody("mkdir -p /w")));
  auto fd = OpenStream(sb, "/filesystem.Filesystem/WatchDir", R"({"path":"/w"})");
  ASSERT_TRUE(fd.ok()) << fd.status();
  std::string got;
  auto read_until = [&](const std::string& what) { return ReadUntil(fd->get(), &got, what); };
  ASSERT_TRUE(read_until(R"("start":{})")) << got;
  ASSERT_TRUE(Start(sb, StartBody("echo 1 > /w/one")));
  EXPECT_TRUE(read_until(R"({"filesystem":{"name":"one","type":"EVENT_TYPE_CREATE"}})")) << got;
  ASSERT_TRUE(Start(sb, StartBody("rm -rf /w")));
  EXPECT_TRUE(read_until(R"("code":"not_found")")) << got;
  // The daemon still answers.
  auto l = client_->Post("/filesystem.Filesystem/ListDir", Envd(sb), R"({"path":"/"})", "application/json");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->status, 200);
}

TEST_F(E2bProtocolTest, FilesUploadAndDownload) {
  auto sb = NewSandbox();
  httplib::MultipartFormDataItems items = {{"file", "hello\n", "/w/a.txt", "application/octet-stream"}};
  auto r = client_->Post("/files", Envd(sb), items);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)[0]["path"], "/w/a.txt");
  r = client_->Get("/files?path=/w/a.txt", Envd(sb));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello\n");
  r = client_->Get("/files?path=/w/none", Envd(sb));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = client_->Post("/filesystem.Filesystem/ListDir", Envd(sb), R"({"path":"/w"})", "application/json");
  ASSERT_TRUE(r);
  json list = json::parse(r->body);
  ASSERT_EQ(list["entries"].size(), 1u) << r->body;
  EXPECT_EQ(list["entries"][0]["path"], "/w/a.txt");
  EXPECT_EQ(list["entries"][0]["size"], "6");
}

// metadata.dsec_task_id makes the sandbox a task's: its commands go to the
// node's trajectory log, as on the node API.
TEST_F(E2bProtocolTest, ATaskSandboxRecordsItsCommandsInTheTrajectory) {
  const std::string task = absl::StrCat("e2b-task-", ::getpid());
  auto r = client_->Post("/v2/sandboxes", {{"X-API-KEY", kKey}},
                         json{{"templateID", "bb"}, {"metadata", {{"dsec_task_id", task}}}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  json j = json::parse(r->body);
  auto sb = std::make_pair(j["sandboxID"].get<std::string>(), j["envdAccessToken"].get<std::string>());
  auto s = Start(sb, StartBody("echo recorded"));
  ASSERT_TRUE(s);
  auto log = daemon_->service().TaskLog(task);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_TRUE(absl::StrContains(log->dump(), "echo recorded")) << log->dump();
  // Its trajectory records stdin given with the start only: stdin: true
  // ends the stream unimplemented, naming it.
  s = Start(sb, EncodeEnvelope(0, json{{"process", {{"cmd", "/bin/cat"}}}, {"stdin", true}}.dump()));
  ASSERT_TRUE(s);
  std::vector<Frame> f = Frames(s->body);
  ASSERT_FALSE(f.empty());
  EXPECT_TRUE(absl::StrContains(f.back().message.dump(), "unimplemented")) << s->body;
  EXPECT_TRUE(absl::StrContains(f.back().message.dump(), "stdin")) << s->body;
  r = client_->Post("/v2/sandboxes", {{"X-API-KEY", kKey}},
                    json{{"templateID", "bb"}, {"metadata", {{"dsec_task_id", "bad task/id"}}}}.dump(),
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  // The trajectory's one live sandbox per task: a second is refused.
  r = client_->Post("/v2/sandboxes", {{"X-API-KEY", kKey}},
                    json{{"templateID", "bb"}, {"metadata", {{"dsec_task_id", task}}}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409) << r->body;
  EXPECT_TRUE(client_->Delete(absl::StrCat("/sandboxes/", sb.first), {{"X-API-KEY", kKey}}));
  (void)daemon_->service().DeleteTask(task);
}

TEST_F(E2bProtocolTest, TimeoutMovesTheNodesTtl) {
  auto sb = NewSandbox();
  auto r = client_->Post(absl::StrCat("/sandboxes/", sb.first, "/timeout"), {{"X-API-KEY", kKey}},
                         R"({"timeout":0})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  // The node's reaper takes it within its 1 s tick; poll the answer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto g = client_->Get(absl::StrCat("/sandboxes/", sb.first), {{"X-API-KEY", kKey}});
    ASSERT_TRUE(g);
    status = g->status;
    if (status == 404) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling an outcome, not synchronising
  }
  EXPECT_EQ(status, 404);
}

// docs/e2b.md's endpoint table, row by row: `no` rows answer 501 (a
// Connect stream: `unimplemented`), the others reach a handler that is not
// a 501 and not "no route". The requests carry {} bodies: a handler may
// refuse them, but it must exist.
TEST_F(E2bProtocolTest, CompatibilityTableIsTrue) {
  std::ifstream in(std::string(DSEC_SOURCE_DIR) + "/docs/e2b.md");
  ASSERT_TRUE(in) << "docs/e2b.md";
  auto live = NewSandbox();
  auto doomed = NewSandbox();  // for the DELETE row
  const std::regex row(R"(^\| `(GET|POST|PUT|PATCH|DELETE) (/[^`]*)` \| (yes|partly|no) \|)");
  bool data_plane = false;
  int rows = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "Data plane")) data_plane = true;
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    ++rows;
    const std::string method = m[1], status = m[3];
    std::string path = m[2];
    const std::string id = method == "DELETE" ? doomed.first : live.first;
    path = std::regex_replace(path, std::regex(R"(\{id\})"), id);
    path = std::regex_replace(path, std::regex(R"(\{[a-z]+\})"), "x");
    httplib::Headers h = data_plane ? Envd(live) : httplib::Headers{{"X-API-KEY", kKey}};
    const bool stream = absl::EndsWith(path, "/Start") || absl::EndsWith(path, "/Connect") ||
                        absl::EndsWith(path, "/WatchDir");
    const std::string type = stream ? "application/connect+json" : "application/json";
    const std::string body = stream ? EncodeEnvelope(0, "{}") : "{}";
    httplib::Request req;
    req.method = method;
    req.path = path;
    req.headers = h;
    if (method != "GET" && method != "DELETE") {
      req.body = body;
      req.set_header("Content-Type", type);
    }
    auto r = client_->send(req);
    ASSERT_TRUE(r) << line;
    const bool unimplemented_stream =
        r->status == 200 && stream && absl::StrContains(r->body, R"("code":"unimplemented")");
    if (status == "no") {
      EXPECT_TRUE(r->status == 501 || unimplemented_stream) << line << " -> " << r->status << " " << r->body;
    } else {
      EXPECT_NE(r->status, 501) << line << " -> " << r->body;
      EXPECT_FALSE(unimplemented_stream) << line << " -> " << r->body;
      EXPECT_FALSE(absl::StrContains(r->body, "no route")) << line << " -> " << r->body;
    }
  }
  EXPECT_GT(rows, 40);
}

}  // namespace
}  // namespace dsec::e2b
