// SPDX-License-Identifier: Apache-2.0
// The control socket's request parsing and line handling (pure), and one
// round trip over a real unix socket in a temp directory.
#include "vmm/api/control.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "base/scoped_fd.h"

namespace dsec::api {
namespace {

TEST(ParseControlRequestTest, AcceptsStatsAndBalloon) {
  auto s = ParseControlRequest(R"({"op":"stats"})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->op, ControlRequest::Op::kStats);
  auto b = ParseControlRequest(R"({"op":"balloon","target_mib":96})");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->op, ControlRequest::Op::kBalloon);
  EXPECT_EQ(b->target_mib, 96u);
  EXPECT_EQ(ParseControlRequest(R"({"op":"balloon","target_mib":0})")->target_mib, 0u);
}

TEST(ParseControlRequestTest, AcceptsPauseAndResumeWithoutArguments) {
  auto p = ParseControlRequest(R"({"op":"pause"})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->op, ControlRequest::Op::kPause);
  auto r = ParseControlRequest(R"({"op":"resume"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->op, ControlRequest::Op::kResume);
  auto extra = ParseControlRequest(R"({"op":"pause","target_mib":1})");
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("pause: unknown key"), std::string::npos)
      << extra.status();
}

TEST(ParseControlRequestTest, AcceptsSnapshotWithAnOptionalDiff) {
  auto full = ParseControlRequest(R"({"op":"snapshot"})");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->op, ControlRequest::Op::kSnapshot);
  EXPECT_FALSE(full->diff);
  auto diff = ParseControlRequest(R"({"op":"snapshot","diff":true})");
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->diff);
  EXPECT_NE(ParseControlRequest(R"({"op":"snapshot","diff":1})").status().message().find("diff"),
            std::string::npos);
  EXPECT_NE(ParseControlRequest(R"({"op":"snapshot","dir":"/etc"})").status().message().find(
                "unknown key"),
            std::string::npos);
}

TEST(ParseControlRequestTest, RejectsBadRequestsWithAReason) {
  struct Case {
    const char* line;
    const char* want;  // in the message
  } cases[] = {
      {"", "not valid JSON"},
      {"{\"op\":", "not valid JSON"},
      {"[1,2]", "JSON object"},
      {"{}", "needs \"op\""},
      {R"({"op":7})", "needs \"op\""},
      {R"({"op":"reboot"})", "unknown op \"reboot\""},
      {R"({"op":"stats","x":1})", "unknown key \"x\""},
      {R"({"op":"balloon"})", "\"target_mib\" is required"},
      {R"({"op":"balloon","target_mib":"5"})", "must be an integer"},
      {R"({"op":"balloon","target_mib":1.5})", "must be an integer"},
      {R"({"op":"balloon","target_mib":-1})", "must be >= 0"},
      {R"({"op":"balloon","target_mib":1048577})", "must be <= 1048576"},
      {R"({"op":"balloon","target_mib":18446744073709551615})", "must be <= 1048576"},
      {R"({"op":"balloon","target_mib":1,"force":true})", "unknown key \"force\""},
  };
  for (const Case& c : cases) {
    auto r = ParseControlRequest(c.line);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_NE(std::string(r.status().message()).find(c.want), std::string::npos)
        << c.line << " -> " << r.status();
  }
}

TEST(HandleControlLineTest, ErrorsAreJsonWithCodeAndMessage) {
  int calls = 0;
  ControlHandler h = [&](const ControlRequest& r) -> absl::StatusOr<nlohmann::json> {
    ++calls;
    if (r.op == ControlRequest::Op::kBalloon) return absl::FailedPreconditionError("no balloon");
    return nlohmann::json{{"ok", true}, {"x", 1}};
  };
  nlohmann::json ok = nlohmann::json::parse(HandleControlLine("{\"op\":\"stats\"}\r", h));
  EXPECT_EQ(ok["ok"], true);
  EXPECT_EQ(ok["x"], 1);
  nlohmann::json bad = nlohmann::json::parse(HandleControlLine("nope", h));
  EXPECT_EQ(bad["ok"], false);
  EXPECT_EQ(bad["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(calls, 1);  // a malformed request never reaches the handler
  nlohmann::json pre =
      nlohmann::json::parse(HandleControlLine(R"({"op":"balloon","target_mib":1})", h));
  EXPECT_EQ(pre["error"]["code"], "FAILED_PRECONDITION");
  EXPECT_EQ(pre["error"]["message"], "no balloon");
}

class ControlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsec-ctl-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/ctl.sock";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(ControlServerTest, AnswersOverTheSocketAndRemovesIt) {
  {
    auto server = ControlServer::Start(path_, [](const ControlRequest& r) -> absl::StatusOr<nlohmann::json> {
      return nlohmann::json{{"ok", true}, {"target", r.target_mib}};
    });
    ASSERT_TRUE(server.ok()) << server.status();
    struct stat st;
    ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    auto resp = ControlCall(path_, {{"op", "balloon"}, {"target_mib", 12}}, 5000);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ((*resp)["target"], 12);
    auto err = ControlCall(path_, {{"op", "what"}}, 5000);
    ASSERT_TRUE(err.ok()) << err.status();
    EXPECT_EQ((*err)["ok"], false);
    // A second server on the same live path is refused.
    auto second = ControlServer::Start(path_, [](const ControlRequest&) -> absl::StatusOr<nlohmann::json> {
      return nlohmann::json{};
    });
    EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  }
  struct stat st;
  EXPECT_NE(::lstat(path_.c_str(), &st), 0) << "socket left behind";
  EXPECT_EQ(ControlCall(path_, {{"op", "stats"}}, 1000).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(ControlServerTest, RefusesOverlongRequestAndClosesTheConnection) {
  auto server = ControlServer::Start(path_, [](const ControlRequest&) -> absl::StatusOr<nlohmann::json> {
    return nlohmann::json{{"ok", true}};
  });
  ASSERT_TRUE(server.ok()) << server.status();
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string junk(3 * kMaxControlRequestBytes, 'x');
  (void)::send(fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL);
  std::string in;
  char buf[4096];
  for (;;) {
    ssize_t r = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (r <= 0) break;  // closed by the server after the error line
    in.append(buf, static_cast<size_t>(r));
  }
  ASSERT_FALSE(in.empty());
  nlohmann::json j = nlohmann::json::parse(in.substr(0, in.find('\n')));
  EXPECT_EQ(j["ok"], false);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("longer than"), std::string::npos);
  // The server still answers others.
  auto resp = ControlCall(path_, {{"op", "stats"}}, 5000);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ((*resp)["ok"], true);
}

}  // namespace
}  // namespace dsec::api
