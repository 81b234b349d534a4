// SPDX-License-Identifier: Apache-2.0
// WATCH: a directory of the server's root watched, its changes streamed on
// the request's connection; paths confined to the root; kernel file
// systems left out; the watch's end said and the connection kept.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/mount.h"
#include "gtest/gtest.h"
#include "guest-kernel/agent/test_server.h"

namespace dsec::agent {
namespace {

using testing::RawPeer;
using testing::TempDir;
using testing::TestServer;
using testing::WriteFileOrDie;
using Type = FileEvent::Type;

class WatchTest : public ::testing::Test {
 protected:
  WatchTest() {
    root_ = dir_.Sub("root");
    outside_ = dir_.Sub("outside");
    EXPECT_EQ(mkdir(root_.c_str(), 0755), 0);
    EXPECT_EQ(mkdir(outside_.c_str(), 0755), 0);
    ServerOptions o;
    o.root = root_;
    server_ = std::make_unique<TestServer>(o);
  }

  void Mkdir(const std::string& rel) { ASSERT_EQ(mkdir((root_ + "/" + rel).c_str(), 0755), 0) << rel; }

  static WatchRequest Request(const std::string& path, bool recursive, uint32_t max_dirs = 1024) {
    WatchRequest r;
    r.path = path;
    r.recursive = recursive;
    r.max_dirs = max_dirs;
    return r;
  }

  // Events until (name, type) came, or 5 s; the error that ended the watch otherwise.
  static absl::StatusOr<std::vector<FileEvent>> Until(Client& c, const std::string& name, Type type) {
    std::vector<FileEvent> all;
    for (int i = 0; i < 50; ++i) {
      absl::StatusOr<std::vector<FileEvent>> got = c.NextWatchEvents(100);
      if (!got.ok()) return got.status();
      all.insert(all.end(), got->begin(), got->end());
      for (const FileEvent& e : all) {
        if (e.name == name && e.type == type) return all;
      }
    }
    return absl::DeadlineExceededError("no event " + name);
  }

  TempDir dir_;
  std::string root_;
  std::string outside_;
  std::unique_ptr<TestServer> server_;
};

TEST_F(WatchTest, StreamsChangesBelowTheDirectoryAndFollowsNewOnes) {
  Mkdir("w");
  Mkdir("w/a");
  auto c = server_->Connect();
  EXPECT_NE(std::find(c->agent_hello().capabilities.begin(), c->agent_hello().capabilities.end(), "watch"),
            c->agent_hello().capabilities.end());
  auto dirs = c->Watch(Request("/w", /*recursive=*/true));
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ(*dirs, 2u);
  WriteFileOrDie(root_ + "/w/a/f", "x");
  auto evs = Until(*c, "a/f", Type::kWrite);
  ASSERT_TRUE(evs.ok()) << evs.status();
  EXPECT_EQ((*evs)[0].name, "a/f");
  EXPECT_EQ((*evs)[0].type, Type::kCreate);
  Mkdir("w/b");
  ASSERT_TRUE(Until(*c, "b", Type::kCreate).ok());
  WriteFileOrDie(root_ + "/w/b/g", "y");
  ASSERT_TRUE(Until(*c, "b/g", Type::kCreate).ok());
  ASSERT_EQ(rename((root_ + "/w/b").c_str(), (root_ + "/w/c").c_str()), 0);
  ASSERT_TRUE(Until(*c, "c", Type::kCreate).ok());
  ASSERT_EQ(unlink((root_ + "/w/c/g").c_str()), 0);
  ASSERT_TRUE(Until(*c, "c/g", Type::kRemove).ok());
  // Nothing else runs on a watch's connection.
  EXPECT_TRUE(absl::IsFailedPrecondition(c->ListDir("/").status()));
  // A quiet watch answers empty in time.
  auto quiet = c->NextWatchEvents(50);
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->empty());
}

// A call takes every batch the agent sent meanwhile (the agent sends one
// WATCH_EVENTS frame per read of its inotify queue), as a local inotify
// read would; an end behind events comes on the call after them.
TEST_F(WatchTest, OneCallTakesEveryBatchThatCameAndTheEndAfterThem) {
  Mkdir("w");
  auto c = server_->Connect();
  ASSERT_TRUE(c->Watch(Request("/w", false)).ok());
  for (int i = 0; i < 20; ++i) {
    WriteFileOrDie(root_ + "/w/f" + std::to_string(i), "x");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto got = c->NextWatchEvents(0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::count_if(got->begin(), got->end(), [](const FileEvent& e) { return e.type == Type::kCreate; }), 20);

  Mkdir("v");
  auto v = server_->Connect();
  ASSERT_TRUE(v->Watch(Request("/v", false)).ok());
  WriteFileOrDie(root_ + "/v/a", "x");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(unlink((root_ + "/v/a").c_str()), 0);
  ASSERT_EQ(rmdir((root_ + "/v").c_str()), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto events = v->NextWatchEvents(0);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_FALSE(events->empty());
  auto end = v->NextWatchEvents(0);
  EXPECT_TRUE(absl::IsNotFound(end.status())) << end.status();
  EXPECT_TRUE(v->ListDir("/").ok());  // the connection serves requests again
}

TEST_F(WatchTest, PathsStayInsideTheRoot) {
  Mkdir("w");
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/w/abs").c_str()), 0);
  ASSERT_EQ(symlink("../../outside", (root_ + "/w/rel").c_str()), 0);
  for (const std::string& p : {std::string("/../outside"), std::string("/w/abs"), std::string("/w/rel"),
                               std::string("/w/nothing")}) {
    auto c = server_->Connect();
    auto dirs = c->Watch(Request(p, true));
    EXPECT_TRUE(absl::IsNotFound(dirs.status())) << p << ": " << dirs.status();
    EXPECT_TRUE(c->ListDir("/").ok()) << p;  // the refused WATCH left the connection usable
  }
  // A recursive watch of the root does not follow the links out.
  auto c = server_->Connect();
  auto dirs = c->Watch(Request("/", true));
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ(*dirs, 2u);  // / and /w
  WriteFileOrDie(outside_ + "/planted", "z");
  WriteFileOrDie(root_ + "/w/mark", "m");
  auto evs = Until(*c, "w/mark", Type::kCreate);
  ASSERT_TRUE(evs.ok()) << evs.status();
  for (const FileEvent& e : *evs) EXPECT_EQ(e.name.find("planted"), std::string::npos) << e.name;
}

TEST_F(WatchTest, KernelFileSystemsAreNotWatched) {
  Mkdir("proc");
  auto procfs = Mount::Create("proc", root_ + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  if (!procfs.ok()) GTEST_SKIP() << "cannot mount procfs in the test root: " << procfs.status();
  auto c = server_->Connect();
  auto refused = c->Watch(Request("/proc/self", false));
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("kernel file system"), std::string::npos);
  // A recursive watch of the root leaves /proc's thousands of directories out.
  auto dirs = c->Watch(Request("/", true, 8));
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ(*dirs, 1u);
}

TEST_F(WatchTest, TheWatchsEndIsSaidAndTheConnectionServesAgain) {
  Mkdir("w");
  Mkdir("w/a");
  Mkdir("w/b");
  auto c = server_->Connect();
  auto over = c->Watch(Request("/w", true, 2));
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_NE(over.status().message().find("more than 2 directories"), std::string::npos) << over.status();

  auto dirs = c->Watch(Request("/w/a", false));
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  ASSERT_EQ(rmdir((root_ + "/w/a").c_str()), 0);
  absl::Status end;
  for (int i = 0; i < 50 && end.ok(); ++i) end = c->NextWatchEvents(100).status();
  EXPECT_TRUE(absl::IsNotFound(end)) << end;
  EXPECT_NE(end.message().find("removed or moved"), std::string::npos) << end;
  auto list = c->ListDir("/w");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 1u);
  // Growing past its bound ends a watch too.
  dirs = c->Watch(Request("/w", true, 3));
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  Mkdir("w/c");
  Mkdir("w/d");
  end = absl::OkStatus();
  for (int i = 0; i < 50 && end.ok(); ++i) end = c->NextWatchEvents(100).status();
  EXPECT_TRUE(absl::IsResourceExhausted(end)) << end;
}

TEST_F(WatchTest, TheHostEndsAWatchByClosingAndMayNotSpeakDuringIt) {
  Mkdir("w");
  {
    auto c = server_->Connect();
    ASSERT_TRUE(c->Watch(Request("/w", false)).ok());
    EXPECT_EQ(server_->server().active_connections(), 1u);
  }
  EXPECT_TRUE(server_->server().WaitIdle(5'000));
  EXPECT_EQ(server_->server().metrics().watches.load(), 1u);

  RawPeer peer(server_->RawConnection());
  peer.Handshake();
  peer.Send(ToFrame(Request("/w", false)));
  auto started = peer.Read();
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_EQ(started->type, MsgType::kWatchStarted);
  ListDirRequest list;
  list.path = "/";
  peer.Send(ToFrame(list));
  peer.ExpectErrorThenClose(absl::StatusCode::kInvalidArgument);
  // A malformed WATCH is a protocol error too.
  RawPeer bad(server_->RawConnection());
  bad.Handshake();
  Frame f;
  f.type = MsgType::kWatch;
  f.payload = R"({"path":"/w","max_dirs":0})";
  bad.Send(f);
  bad.ExpectErrorThenClose(absl::StatusCode::kInvalidArgument);
}

TEST_F(WatchTest, StoppingTheServerEndsItsWatches) {
  Mkdir("w");
  auto c = server_->Connect();
  ASSERT_TRUE(c->Watch(Request("/w", true)).ok());
  server_.reset();  // joins the watch's thread
  absl::Status end;
  for (int i = 0; i < 50 && end.ok(); ++i) end = c->NextWatchEvents(100).status();
  EXPECT_TRUE(absl::IsUnavailable(end)) << end;
}

}  // namespace
}  // namespace dsec::agent
