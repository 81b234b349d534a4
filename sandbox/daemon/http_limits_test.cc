// SPDX-License-Identifier: Apache-2.0
// What one client may cost the daemon (issue 23): ranges, slow and many
// connections, bodies, malformed framing, deep JSON, big env values and
// host paths in errors. Raw sockets on loopback send what an HTTP library
// would not.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "sandbox/daemon/http_server.h"

namespace dsec::daemon {
namespace {

using nlohmann::json;
using container::testing::TempDir;
using testing::ReadResponse;
using testing::SendAll;

constexpr char kJson[] = "application/json";
constexpr char kToken[] = "0123456789abcdef-limits";

class HttpLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeBusyboxSuiteDir("dsec-daemon-limits-", &dir_, &skip_).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Store() { return dir_->path() + "/store"; }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  void TearDown() override {
    client_.reset();
    daemon_.reset();
  }

  // A daemon on a unix socket and, with `tcp`, on 127.0.0.1 (any port).
  void Start(HttpOptions ho = {}, bool tcp = false) {
    client_.reset();
    daemon_.reset();
    static int n = 0;
    if (tcp) {
      ho.tcp_host = "127.0.0.1";
      ho.token = kToken;
    }
    auto d = testing::LocalDaemon::Start(absl::StrCat(dir_->path(), "/run", n++), Store(), {}, ho);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = testing::UnixClient(daemon_->socket());
  }
  ScopedFd Unix() {
    auto fd = testing::ConnectUnix(daemon_->socket());
    EXPECT_TRUE(fd.ok()) << fd.status();
    return fd.ok() ? std::move(*fd) : ScopedFd();
  }
  ScopedFd Tcp(const std::string& source = "127.0.0.1") {
    auto fd = testing::ConnectTcp(daemon_->server().tcp_port(), source);
    EXPECT_TRUE(fd.ok()) << fd.status();
    return fd.ok() ? std::move(*fd) : ScopedFd();
  }
  // Sends `request` on a new unix connection and reads the answer.
  testing::RawResponse Raw(const std::string& request, int timeout_ms = 3000) {
    ScopedFd fd = Unix();
    EXPECT_TRUE(SendAll(fd.get(), request));
    return ReadResponse(fd.get(), timeout_ms);
  }
  std::string Create() {
    auto r = client_->Post("/v1/sandboxes", json{{"tier", "container"}}.dump(), kJson);
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 201) << r->body;
    return testing::JsonOf(r).value("id", "");
  }
  static json ErrorOf(const testing::RawResponse& r) {
    json j = json::parse(r.body, nullptr, false);
    return j.is_discarded() || !j.contains("error") ? json(nullptr) : j["error"];
  }

  static TempDir* dir_;
  static std::string skip_;
  std::unique_ptr<testing::LocalDaemon> daemon_;
  std::unique_ptr<httplib::Client> client_;
};
TempDir* HttpLimitsTest::dir_ = nullptr;
std::string HttpLimitsTest::skip_;

// Case 1: 40 ranges of a 16 MiB file once made a 671 MB answer.
TEST_F(HttpLimitsTest, RangesAreBoundedAndCoalesced) {
  Start();
  const std::string id = Create();
  std::string data(16 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 26);
  auto put = client_->Put(absl::StrCat("/v1/sandboxes/", id, "/files?path=/big"), data, "application/octet-stream");
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 204) << put->body;
  auto get = [&](const std::string& range) {
    return Raw(absl::StrCat("GET /v1/sandboxes/", id, "/files?path=/big HTTP/1.1\r\nHost: x\r\nRange: ", range,
                            "\r\nConnection: close\r\n\r\n"),
               20000);
  };
  std::string forty = "bytes=0-";
  for (int i = 1; i < 40; ++i) forty += ",0-";
  testing::RawResponse many = get(forty);
  EXPECT_EQ(many.status, 416) << many.head;
  EXPECT_LT(many.content_length, 4096u);
  EXPECT_EQ(ErrorOf(many)["code"], "INVALID_ARGUMENT") << many.body;
  EXPECT_NE(ErrorOf(many)["message"].get<std::string>().find("16"), std::string::npos) << many.body;

  // Overlapping and touching ranges become one.
  testing::RawResponse merged = get("bytes=0-99,50-149,150-199");
  EXPECT_EQ(merged.status, 206) << merged.head;
  EXPECT_NE(merged.head.find("Content-Range: bytes 0-199/16777216"), std::string::npos) << merged.head;
  EXPECT_EQ(merged.body, data.substr(0, 200));
  // Disjoint ones are parts of a multipart answer no larger than they are.
  testing::RawResponse parts = get("bytes=10-19,-5");
  EXPECT_EQ(parts.status, 206) << parts.head;
  EXPECT_NE(parts.head.find("multipart/byteranges"), std::string::npos) << parts.head;
  EXPECT_NE(parts.body.find(data.substr(10, 10)), std::string::npos);
  EXPECT_NE(parts.body.find("Content-Range: bytes 16777211-16777215/16777216"), std::string::npos) << parts.body;
  EXPECT_LT(parts.content_length, 1024u);
  testing::RawResponse past = get("bytes=16777216-");
  EXPECT_EQ(past.status, 416) << past.head;
  EXPECT_NE(past.head.find("Content-Range: bytes */16777216"), std::string::npos) << past.head;
}

// Case 2: 200 connections sending one header byte a second held all 64
// workers; now heads are read off the workers, each within its deadline.
TEST_F(HttpLimitsTest, SlowClientsDoNotStallTheApi) {
  HttpOptions ho;
  ho.threads = 4;
  ho.header_timeout_ms = 2000;
  ho.max_connections_per_client = 100;
  Start(ho, /*tcp=*/true);
  const std::string head = "GET /v1/health HTTP/1.1\r\nHost: slow\r\n\r\n";
  std::vector<ScopedFd> slow;
  for (int i = 0; i < 40; ++i) slow.push_back(Tcp());
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    for (size_t b = 0; b < head.size() && !stop; ++b) {
      for (auto& fd : slow) (void)::send(fd.get(), &head[b], 1, MSG_NOSIGNAL);
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, 250);  // one byte per connection every 250 ms
    }
  });
  // A slow one reads its answer as it comes (the server drains a refused
  // connection for 2 s, then closes it).
  testing::RawResponse late;
  std::thread reader([&] { late = ReadResponse(slow[0].get(), 15000); });
  // Another client of the same listener is answered at once.
  for (int i = 0; i < 5; ++i) {
    ScopedFd fd = Tcp("127.0.0.2");
    ASSERT_TRUE(SendAll(fd.get(), absl::StrCat("GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                                               kToken, "\r\n\r\n")));
    testing::RawResponse h = ReadResponse(fd.get(), 1500);
    EXPECT_EQ(h.status, 200) << "request " << i << " waited " << h.elapsed_ms << " ms";
  }
  // The slow ones are answered 408 once their head's deadline passes
  // (under load too: the listener's backlog holds the burst of 40).
  reader.join();
  stop = true;
  dripper.join();
  EXPECT_EQ(late.status, 408) << late.head;
  EXPECT_EQ(ErrorOf(late)["code"], "DEADLINE_EXCEEDED") << late.body;
}

// Case 2: a cap of open connections per client address.
TEST_F(HttpLimitsTest, ConnectionsPerClientAreCapped) {
  HttpOptions ho;
  ho.max_connections_per_client = 4;
  Start(ho, /*tcp=*/true);
  // Five connections, each with the start of a request: which one the
  // server takes last depends on the order its workers pick them up, so
  // the test waits for whichever is answered, and that must be one 429.
  std::vector<ScopedFd> conns;
  for (int i = 0; i < 5; ++i) {
    conns.push_back(Tcp());
    ASSERT_TRUE(SendAll(conns.back().get(), "GET /v1/health HTTP/1.1\r\n"));
  }
  std::vector<pollfd> polled;
  for (const ScopedFd& c : conns) polled.push_back({c.get(), POLLIN, 0});
  ASSERT_EQ(::poll(polled.data(), polled.size(), 5000), 1) << "one connection refused, at once";
  size_t refused_at = 0;
  while (polled[refused_at].revents == 0) ++refused_at;
  testing::RawResponse refused = ReadResponse(conns[refused_at].get(), 2000);
  EXPECT_EQ(refused.status, 429) << refused.head;
  EXPECT_EQ(ErrorOf(refused)["code"], "RESOURCE_EXHAUSTED") << refused.body;
  std::vector<ScopedFd> held;
  for (size_t i = 0; i < conns.size(); ++i) {
    if (i != refused_at) held.push_back(std::move(conns[i]));
  }
  // Another address is a client of its own.
  ScopedFd other = Tcp("127.0.0.2");
  ASSERT_TRUE(SendAll(other.get(), absl::StrCat("GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                                                kToken, "\r\n\r\n")));
  EXPECT_EQ(ReadResponse(other.get(), 2000).status, 200);
  // A held connection that completes its request is served.
  ASSERT_TRUE(SendAll(held[0].get(), absl::StrCat("Authorization: Bearer ", kToken, "\r\n\r\n")));
  EXPECT_EQ(ReadResponse(held[0].get(), 2000).status, 200);
}

// A connection opened ahead of its request (client pools do) is closed
// without an answer when it stays idle: a 408 there would be read as the
// answer to the next request sent on it.
TEST_F(HttpLimitsTest, IdleConnectionsCloseWithoutAnAnswer) {
  HttpOptions ho;
  ho.keep_alive_timeout_ms = 500;
  ho.header_timeout_ms = 500;
  Start(ho);
  ScopedFd fd = Unix();
  pollfd p{fd.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 3000), 1) << "not closed";
  char c;
  EXPECT_EQ(::recv(fd.get(), &c, 1, 0), 0) << "an answer on an idle connection";
  // The same after a request, kept alive.
  ScopedFd kept = Unix();
  ASSERT_TRUE(SendAll(kept.get(), "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(ReadResponse(kept.get(), 2000).status, 200);
  pollfd q{kept.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&q, 1, 3000), 1) << "not closed";
  EXPECT_EQ(::recv(kept.get(), &c, 1, 0), 0);
}

// Case 2: a body trickling in is cut at its deadline, whatever the pace.
TEST_F(HttpLimitsTest, SlowBodyMeetsItsDeadline) {
  HttpOptions ho;
  ho.body_timeout_ms = 1500;
  Start(ho);
  ScopedFd fd = Unix();
  ASSERT_TRUE(SendAll(fd.get(), "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    for (int i = 0; i < 40 && !stop; ++i) {
      if (::send(fd.get(), " ", 1, MSG_NOSIGNAL) != 1) return;
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, 200);
    }
  });
  testing::RawResponse r = ReadResponse(fd.get(), 5000);
  stop = true;
  dripper.join();
  EXPECT_EQ(r.status, 408) << r.head;
  EXPECT_EQ(ErrorOf(r)["code"], "DEADLINE_EXCEEDED") << r.body;
}

// Case 3: bodies are refused on their declared length, before a byte of
// them is read, and a chunked one as soon as it passes the limit.
TEST_F(HttpLimitsTest, OversizedBodiesAreRefusedBeforeTheyAreRead) {
  Start();
  for (const std::string& req :
       {std::string("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n"),
        std::string("PUT /v1/sandboxes/sb-0/files?path=/x HTTP/1.1\r\nHost: x\r\nContent-Length: 67108866\r\n\r\n"),
        std::string("POST /v1/sandboxes/sb-0/pause HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n")}) {
    testing::RawResponse r = Raw(req, 2000);
    EXPECT_EQ(r.status, 413) << req << r.head;
    EXPECT_EQ(ErrorOf(r)["code"], "RESOURCE_EXHAUSTED") << r.body;
  }
  // Chunked: 1.5 MiB in 64 KiB chunks, then nothing (no last chunk).
  ScopedFd fd = Unix();
  ASSERT_TRUE(SendAll(fd.get(), "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = absl::StrCat("10000\r\n", std::string(65536, ' '), "\r\n");
  for (int i = 0; i < 24; ++i) {
    if (!SendAll(fd.get(), chunk)) break;  // refused and closed under us
  }
  testing::RawResponse r = ReadResponse(fd.get(), 3000);
  EXPECT_EQ(r.status, 413) << r.head;
  EXPECT_EQ(ErrorOf(r)["code"], "RESOURCE_EXHAUSTED") << r.body;
}

// Case 4: a Content-Length that is no length is answered at once.
TEST_F(HttpLimitsTest, MalformedFramingIsAnswered400AtOnce) {
  Start();
  for (const std::string& framing :
       {std::string("Content-Length: -5\r\n"), std::string("Content-Length: 147573952589676412928\r\n"),
        std::string("Content-Length: 5\r\nContent-Length: 6\r\n"), std::string("Content-Length: 0x10\r\n"),
        std::string("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
        std::string("Transfer-Encoding: gzip, chunked\r\n")}) {
    testing::RawResponse r = Raw(absl::StrCat("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n", framing, "\r\n"), 2000);
    EXPECT_EQ(r.status, 400) << framing << r.head;
    EXPECT_EQ(ErrorOf(r)["code"], "INVALID_ARGUMENT") << r.body;
  }
}

// Case 5: a 500k-deep array is refused before the parser builds it.
TEST_F(HttpLimitsTest, DeeplyNestedJsonIsRefused) {
  Start();
  const std::string deep = std::string(500000, '[') + std::string(500000, ']');
  auto r = client_->Post("/v1/sandboxes", deep, kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  json err = testing::JsonOf(r)["error"];
  EXPECT_EQ(err["code"], "INVALID_ARGUMENT");
  EXPECT_NE(err["message"].get<std::string>().find("nested deeper than 64"), std::string::npos) << r->body;
  // 64 levels are fine (this body fails later, on its fields).
  const std::string ok = absl::StrCat("{\"tier\":\"container\",\"x\":", std::string(63, '['), std::string(63, ']'), "}");
  auto r2 = client_->Post("/v1/sandboxes", ok, kJson);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 400);
  EXPECT_EQ(testing::JsonOf(r2)["error"]["message"].get<std::string>().find("nested"), std::string::npos)
      << r2->body;
}

// Case 6: an env value the kernel would refuse is the client's error.
TEST_F(HttpLimitsTest, OversizedEnvIs400NamingTheLimit) {
  Start();
  const std::string id = Create();
  auto exec = [&](const json& env) {
    return client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"),
                         json{{"argv", {"true"}}, {"env", env}}.dump(), kJson);
  };
  auto big = exec({{"BIG", std::string(900 * 1000, 'x')}});
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400) << big->body;
  EXPECT_EQ(testing::JsonOf(big)["error"]["field"], "env.BIG");
  EXPECT_NE(testing::JsonOf(big)["error"]["message"].get<std::string>().find("131072"), std::string::npos);
  json many;
  for (int i = 0; i < 5; ++i) many[absl::StrCat("V", i)] = std::string(100 * 1000, 'y');
  auto total = exec(many);
  ASSERT_TRUE(total);
  EXPECT_EQ(total->status, 400) << total->body;
  EXPECT_EQ(testing::JsonOf(total)["error"]["field"], "env");
  EXPECT_NE(testing::JsonOf(total)["error"]["message"].get<std::string>().find("262144"), std::string::npos);
  auto fine = exec({{"SMALL", std::string(100 * 1000, 'z')}});
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200) << fine->body;
}

// Case 7: errors from the host side say what failed, not where on the host.
TEST_F(HttpLimitsTest, ErrorsDoNotShowHostPaths) {
  Start();
  auto r = client_->Post("/v1/sandboxes", json{{"tier", "container"}, {"cpus", 0.001}}.dump(), kJson);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(testing::JsonOf(r)["error"]["field"], "cpus") << r->body;
  for (const char* host : {"/sys/", "/proc/", dir_->path().c_str()}) {
    EXPECT_EQ(r->body.find(host), std::string::npos) << r->body;
  }
  EXPECT_EQ(daemon_->service().sandbox_count(), 0);
}

}  // namespace
}  // namespace dsec::daemon
