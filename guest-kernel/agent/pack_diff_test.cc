// SPDX-License-Identifier: Apache-2.0
// pack_diff: the agent's walker, the stream and the host's materialiser,
// round trip and hostile streams.
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "guest-kernel/agent/pack_diff_stream.h"
#include "guest-kernel/agent/sys_util.h"
#include "guest-kernel/agent/test_server.h"

namespace dsec::agent {
namespace {

using testing::ReadFileOrDie;
using testing::TempDir;
using testing::TestServer;
using testing::WriteFileOrDie;

std::string Hex(const std::string& s) {
  std::string out;
  for (unsigned char c : s) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

// Everything MaterializeDiff promises to reproduce, per path; hard links as
// the name of the first path (in sorted order) of the same inode. Not the
// atime (reading a file to send it may update it).
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, struct stat> stats;
  static std::map<std::string, struct stat>* current;
  current = &stats;
  static size_t root_len;
  root_len = root.size();
  nftw(
      root.c_str(),
      [](const char* p, const struct stat* st, int, struct FTW*) {
        std::string rel = std::string(p).substr(root_len);
        (*current)[rel.empty() ? "." : rel] = *st;
        return 0;
      },
      64, FTW_PHYS);
  std::map<std::pair<dev_t, ino_t>, std::string> first;
  std::map<std::string, std::string> out;
  for (const auto& [rel, st] : stats) {
    std::string full = rel == "." ? root : root + rel;
    std::string d =
        absl::StrCat("mode=", absl::Hex(st.st_mode), " uid=", st.st_uid, " gid=", st.st_gid,
                     " mtime=", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
    if (S_ISREG(st.st_mode))
      absl::StrAppend(&d, " data=", Hex(ReadFileOrDie(full)).substr(0, 64), " size=", st.st_size);
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      absl::StrAppend(&d, " rdev=", major(st.st_rdev), ":", minor(st.st_rdev));
    }
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = readlink(full.c_str(), target, sizeof(target));
      absl::StrAppend(&d, " target=", std::string(target, n > 0 ? n : 0));
    }
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
      auto [it, fresh] = first.emplace(std::make_pair(st.st_dev, st.st_ino), rel);
      absl::StrAppend(&d, " inode-of=", it->second, " nlink=", st.st_nlink);
    }
    auto xattrs = ListXattrs(full);
    EXPECT_TRUE(xattrs.ok());
    std::vector<std::string> xs;
    for (const auto& x : *xattrs) xs.push_back(absl::StrCat(x.name, "=", Hex(x.value)));
    std::sort(xs.begin(), xs.end());
    for (const auto& x : xs) absl::StrAppend(&d, " ", x);
    out[rel] = d;
  }
  return out;
}

void SetTimes(const std::string& path, int64_t sec, int64_t nsec) {
  timespec ts[2] = {{sec - 100, 5}, {sec, nsec}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW), 0) << path;
}

class PackDiffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upper_ = dir_.Sub("upper");
    dest_ = dir_.Sub("dest");
    ASSERT_EQ(mkdir(upper_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(dest_.c_str(), 0755), 0);
    if (setxattr(upper_.c_str(), "trusted.dsec-probe", "1", 1, 0) != 0 ||
        setxattr(upper_.c_str(), "user.dsec-probe", "1", 1, 0) != 0) {
      GTEST_SKIP() << "the temp filesystem lacks trusted.*/user.* xattrs: " << std::strerror(errno);
    }
    removexattr(upper_.c_str(), "trusted.dsec-probe");
  }

  void BuildUpper() {
    const std::string u = upper_;
    auto mk = [](const std::string& p, mode_t m) { ASSERT_EQ(mkdir(p.c_str(), m), 0) << p; };
    mk(u + "/bin", 0755);
    mk(u + "/etc", 0750);
    mk(u + "/opaque", 0755);
    mk(u + "/tmp", 0755);
    mk(u + "/deep", 0755);
    mk(u + "/deep/a", 0755);
    mk(u + "/deep/a/b", 0700);
    std::string big;
    for (int i = 0; i < 600'000; ++i) big.push_back(static_cast<char>(i % 251));
    WriteFileOrDie(u + "/bin/tool", big, 04755);
    ASSERT_EQ(link((u + "/bin/tool").c_str(), (u + "/bin/tool-alias").c_str()), 0);
    ASSERT_EQ(link((u + "/bin/tool").c_str(), (u + "/etc/tool-copy").c_str()), 0);
    WriteFileOrDie(u + "/bin/sgid", "#!/bin/sh\n", 02711);
    WriteFileOrDie(u + "/etc/conf", "a=1\n", 0640);
    ASSERT_EQ(chown((u + "/etc/conf").c_str(), 1234, 5678), 0);
    ASSERT_EQ(chmod((u + "/etc/conf").c_str(), 0640), 0);
    ASSERT_EQ(setxattr((u + "/etc/conf").c_str(), "user.bin", "\x00\x01\xff", 3, 0), 0);
    ASSERT_EQ(chown((u + "/etc").c_str(), 1234, 5678), 0);
    WriteFileOrDie(u + "/etc/empty", "", 0600);
    ASSERT_EQ(mknod((u + "/deleted").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
    ASSERT_EQ(link((u + "/deleted").c_str(), (u + "/deleted-too").c_str()), 0);
    ASSERT_EQ(setxattr((u + "/opaque").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    WriteFileOrDie(u + "/opaque/inner", "inner\n");
    ASSERT_EQ(chmod((u + "/tmp").c_str(), 01777), 0);
    ASSERT_EQ(symlink("bin/tool", (u + "/lnk-rel").c_str()), 0);
    // A dangling absolute target; xattr calls below never follow it.
    ASSERT_EQ(symlink("/nonexistent/dsec-link-target", (u + "/lnk-abs").c_str()), 0);
    ASSERT_EQ(lchown((u + "/lnk-abs").c_str(), 42, 43), 0);
    ASSERT_EQ(lsetxattr((u + "/lnk-abs").c_str(), "trusted.link", "L", 1, XATTR_CREATE), 0);
    ASSERT_EQ(mkfifo((u + "/fifo").c_str(), 0640), 0);
    WriteFileOrDie(u + "/deep/a/b/file", "deep\n", 0444);
    ASSERT_EQ(setxattr(u.c_str(), "user.root", "R", 1, 0), 0);
    // Timestamps last, leaves before their directories.
    int64_t t = 1'600'000'000;
    for (const char* p : {"/bin/tool", "/bin/sgid", "/etc/conf", "/etc/empty", "/deleted",
                          "/opaque/inner", "/lnk-rel", "/lnk-abs", "/fifo", "/deep/a/b/file"}) {
      SetTimes(u + p, ++t, 123'456'789);
    }
    for (const char* p : {"/deep/a/b", "/deep/a", "/deep", "/bin", "/etc", "/opaque", "/tmp", ""}) {
      SetTimes(u + p, ++t, 987'654'321);
    }
  }

  TempDir dir_;
  std::string upper_, dest_;
};

TEST_F(PackDiffTest, RoundTripsTheUpperDirectoryExactly) {
  BuildUpper();
  // As PID 1 does: the upper is reached through a descriptor.
  ScopedFd upper_fd(open(upper_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(upper_fd.valid());
  ServerOptions o;
  o.root = dir_.path();
  o.upper = FdPath(upper_fd.get());
  TestServer ts(o);
  auto client = ts.Connect();
  auto before = Snapshot(upper_);
  auto stats = client->PackDiff(dest_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->entries, before.size());
  EXPECT_EQ(stats->hardlinks, 3u);
  EXPECT_EQ(stats->whiteouts, 1u);
  EXPECT_EQ(stats->data_bytes, 600'000u + 10 + 4 + 6 + 5);
  auto after = Snapshot(dest_);
  EXPECT_EQ(before.size(), after.size());
  for (const auto& [path, desc] : before) {
    auto it = after.find(path);
    ASSERT_NE(it, after.end()) << path << " missing";
    EXPECT_EQ(it->second, desc) << path;
  }
  EXPECT_TRUE(ReadFileOrDie(dest_ + "/bin/tool") == ReadFileOrDie(upper_ + "/bin/tool"));
  // The connection carries on after the stream.
  EXPECT_TRUE(client->ListDir("").ok());
}

TEST_F(PackDiffTest, WithoutAnUpperDirectoryIsRefused) {
  ServerOptions o;
  o.root = dir_.path();
  TestServer ts(o);
  auto client = ts.Connect();
  EXPECT_TRUE(absl::IsFailedPrecondition(client->PackDiff(dest_).status()));
  EXPECT_FALSE(client->broken());
  EXPECT_TRUE(client->ListDir("").ok());
}

// A recorded stream, for hostile input.
class VectorSource : public FrameSource {
 public:
  explicit VectorSource(std::deque<Frame> frames) : frames_(std::move(frames)) {}
  absl::StatusOr<Frame> NextFrame() override {
    if (frames_.empty()) return absl::UnavailableError("end of recorded stream");
    Frame f = std::move(frames_.front());
    frames_.pop_front();
    return f;
  }

 private:
  std::deque<Frame> frames_;
};

DiffEntry Entry(const std::string& path, DiffType type, uint64_t size = 0) {
  DiffEntry e;
  e.path = path;
  e.type = type;
  e.mode = type == DiffType::kDir ? 0755 : 0644;
  e.size = size;
  return e;
}

DiffEnd EndOf(uint64_t entries) {
  DiffEnd end;
  end.entries = entries;
  return end;
}

absl::Status Materialize(const std::string& dest, std::deque<Frame> frames,
                         MaterializeOptions options = {}) {
  VectorSource src(std::move(frames));
  return MaterializeDiff(src, dest, options).status();
}

TEST_F(PackDiffTest, MaterializeRefusesPathsThatLeaveTheDestination) {
  for (const char* bad :
       {"../escape", "/etc/dsec-escape", "a/../../escape", "a//b", "./a", "a/.", ""}) {
    auto s = Materialize(dest_, {ToFrame(Entry(bad, DiffType::kFile))});
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad << ": " << s;
  }
  EXPECT_NE(access(dir_.Sub("escape").c_str(), F_OK), 0);
  EXPECT_NE(access("/etc/dsec-escape", F_OK), 0);
}

TEST_F(PackDiffTest, MaterializeDoesNotFollowSymlinksOfTheStream) {
  DiffEntry link = Entry("a", DiffType::kSymlink);
  link.target = dir_.path();
  DiffEntry file = Entry("a/planted", DiffType::kFile);
  auto s = Materialize(dest_, {ToFrame(link), ToFrame(file)});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(access(dir_.Sub("planted").c_str(), F_OK), 0);
  // A hard link may only name an earlier entry of the stream.
  TempDir d2;
  DiffEntry hl = Entry("x", DiffType::kHardlink);
  hl.link = "../../../etc/passwd";
  EXPECT_TRUE(absl::IsInvalidArgument(Materialize(d2.path(), {ToFrame(hl)})));
  DiffEntry dir = Entry("d", DiffType::kDir);
  DiffEntry hl2 = Entry("y", DiffType::kHardlink);
  hl2.link = "d";
  TempDir d3;
  EXPECT_TRUE(absl::IsInvalidArgument(Materialize(d3.path(), {ToFrame(dir), ToFrame(hl2)})));
}

TEST_F(PackDiffTest, MaterializeRefusesMalformedStreams) {
  DiffEntry f = Entry("f", DiffType::kFile, 3);
  // More data than announced.
  EXPECT_FALSE(Materialize(dir_.Sub("dest"), {ToFrame(f), DataFrame(MsgType::kData, "abcd")}).ok());
  // Another frame where data is due.
  TempDir a;
  EXPECT_FALSE(Materialize(a.path(), {ToFrame(f), ToFrame(DiffEnd{})}).ok());
  // The same name twice.
  TempDir b;
  EXPECT_TRUE(absl::IsAlreadyExists(Materialize(
      b.path(), {ToFrame(Entry("d", DiffType::kDir)), ToFrame(Entry("d", DiffType::kDir))})));
  // DIFF_END that does not match what came.
  TempDir c;
  EXPECT_TRUE(absl::IsInvalidArgument(
      Materialize(c.path(), {ToFrame(Entry("d", DiffType::kDir)), ToFrame(EndOf(5))})));
  // The root entry anywhere but first.
  TempDir d;
  EXPECT_TRUE(absl::IsInvalidArgument(Materialize(
      d.path(), {ToFrame(Entry("d", DiffType::kDir)), ToFrame(Entry(".", DiffType::kDir))})));
  // Device nodes other than whiteouts, unless allowed.
  TempDir e;
  DiffEntry dev = Entry("sda", DiffType::kBlockDev);
  dev.rdev_major = 8;
  EXPECT_TRUE(absl::IsInvalidArgument(Materialize(e.path(), {ToFrame(dev)})));
  MaterializeOptions allow;
  allow.allow_device_nodes = true;
  EXPECT_TRUE(Materialize(e.path(), {ToFrame(dev), ToFrame(EndOf(1))}, allow).ok());
  // Limits.
  TempDir g;
  MaterializeOptions small;
  small.max_entries = 1;
  EXPECT_TRUE(absl::IsResourceExhausted(Materialize(
      g.path(), {ToFrame(Entry("a", DiffType::kDir)), ToFrame(Entry("b", DiffType::kDir))},
      small)));
  TempDir h;
  small.max_entries = 10;
  small.max_data_bytes = 2;
  EXPECT_TRUE(absl::IsResourceExhausted(Materialize(h.path(), {ToFrame(f)}, small)));
  // A stream that just stops.
  TempDir i;
  EXPECT_FALSE(Materialize(i.path(), {ToFrame(Entry("d", DiffType::kDir))}).ok());
}

TEST_F(PackDiffTest, MaterializeEndsWithTheAgentsError) {
  auto s =
      Materialize(dest_, {ToFrame(Entry("d", DiffType::kDir)),
                          ToFrame(ErrorFromStatus(absl::PermissionDeniedError("walk failed")))});
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find("walk failed"), absl::string_view::npos);
}

}  // namespace
}  // namespace dsec::agent
