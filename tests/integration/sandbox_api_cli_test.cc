// SPDX-License-Identifier: Apache-2.0
// `dsec-vmm sandbox fork|snapshot|snapshots|snapshot-rm` against a real
// dsec-vmmd: the static dsec-vmm execs dsec-vmmctl, which calls the API.
// Answers are JSON on stdout; an error answer is exit 1 with its message,
// no daemon is exit 5.
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/exec_pump.h"
#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sandbox/container/test_image.h"
#include "sandbox/daemon/daemon_testing.h"
#include "tests/integration/test_support.h"

namespace {

using nlohmann::json;
using dsec::testing::RunCommand;

class SandboxApiCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dsec::container::testing::TempDir* dir = nullptr;
    std::string skip;
    ASSERT_TRUE(dsec::daemon::testing::MakeBusyboxSuiteDir("dsec-api-cli-", &dir, &skip).ok());
    dir_.reset(dir);
    if (!skip.empty()) GTEST_SKIP() << skip;
    vmm_ = dsec::testing::VmmBinaryPath();
    const std::string vmmd = vmm_.substr(0, vmm_.rfind('/')) + "/dsec-vmmd";
    socket_ = dir_->path() + "/api/api.sock";
    auto ready = dsec::Pipe::Create();
    ASSERT_TRUE(ready.ok());
    dsec::SpawnOptions o;
    o.argv = {vmmd, "--socket", socket_, "--trajectory-dir", dir_->path() + "/trj",
              "--container-state-dir", dir_->path() + "/ctr", "--fncall-state-dir",
              dir_->path() + "/fn", "--microvm-state-dir", dir_->path() + "/mv", "--store",
              dir_->path() + "/store", "--snapshot-dir", dir_->path() + "/snapshots",
              "--upper-mib", "16", "--log-level", "warn"};
    o.out = dsec::Stdio::Fd(ready->write.get());
    o.err = dsec::Stdio::Inherit();
    auto p = dsec::Subprocess::Spawn(o);
    ready->write.Reset();
    ASSERT_TRUE(p.ok()) << p.status();
    daemon_ = std::move(*p);
    std::string line;
    char c;
    while (::read(ready->read.get(), &c, 1) == 1 && c != '\n') line += c;
    ASSERT_EQ(line.rfind("dsec-vmmd ready", 0), 0u) << line;
    client_ = dsec::daemon::testing::UnixClient(socket_);
  }
  void TearDown() override {
    client_.reset();
    if (daemon_.running()) {
      (void)daemon_.Signal(SIGTERM);
      (void)daemon_.Wait();
    }
  }
  dsec::testing::CommandResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {vmm_, "sandbox"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--socket");
    argv.push_back(socket_);
    return RunCommand(argv);
  }

  std::unique_ptr<dsec::container::testing::TempDir> dir_;
  std::string vmm_, socket_;
  dsec::Subprocess daemon_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(SandboxApiCliTest, ForksAndSnapshotsThroughTheDaemon) {
  auto r = client_->Post("/v1/sandboxes",
                         json{{"tier", "container"}, {"layers", {"bb:1"}}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string id = dsec::daemon::testing::JsonOf(r)["id"];
  r = client_->Post(absl::StrCat("/v1/sandboxes/", id, "/exec"),
                    json{{"argv", {"sh", "-c", "echo kept > /state"}}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;

  auto snap = Cli({"snapshot", id});
  ASSERT_EQ(snap.exit_status, 0) << snap.out << snap.err;
  const json s = json::parse(snap.out, nullptr, false);
  ASSERT_TRUE(s.is_object()) << snap.out;
  const std::string sid = s.value("id", "");
  EXPECT_EQ(sid.rfind("snap-", 0), 0u) << snap.out;

  auto list = Cli({"snapshots"});
  EXPECT_EQ(list.exit_status, 0) << list.err;
  EXPECT_NE(list.out.find(sid), std::string::npos) << list.out;

  auto fork = Cli({"fork", id, "--count", "2"});
  ASSERT_EQ(fork.exit_status, 0) << fork.out << fork.err;
  const json f = json::parse(fork.out, nullptr, false);
  ASSERT_TRUE(f.is_object()) << fork.out;
  EXPECT_EQ(f["sandboxes"].size(), 2u) << fork.out;

  EXPECT_EQ(Cli({"snapshot-rm", sid}).exit_status, 0);
  auto again = Cli({"snapshot-rm", sid});
  EXPECT_EQ(again.exit_status, 1) << again.out << again.err;
  EXPECT_NE(again.err.find("no snapshot"), std::string::npos) << again.err;

  auto missing = Cli({"fork", "sb-0000000000000000"});
  EXPECT_EQ(missing.exit_status, 1) << missing.err;
  EXPECT_NE(missing.err.find("404"), std::string::npos) << missing.err;
  auto bad = Cli({"fork", "../etc"});
  EXPECT_EQ(bad.exit_status, 2) << bad.err;
}

TEST_F(SandboxApiCliTest, NoDaemonIsExitFive) {
  auto r = RunCommand({vmm_, "sandbox", "snapshots", "--socket", dir_->path() + "/nothing.sock"});
  EXPECT_EQ(r.exit_status, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("no answer"), std::string::npos) << r.err;
}

}  // namespace
