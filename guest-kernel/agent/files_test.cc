// SPDX-License-Identifier: Apache-2.0
// File requests confined to the server's root, escape attempts included.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "base/mount.h"
#include "gtest/gtest.h"
#include "guest-kernel/agent/test_server.h"

namespace dsec::agent {
namespace {

using testing::ReadFileOrDie;
using testing::TempDir;
using testing::TestServer;
using testing::WriteFileOrDie;

class FilesTest : public ::testing::Test {
 protected:
  FilesTest() {
    root_ = dir_.Sub("root");
    outside_ = dir_.Sub("outside");
    EXPECT_EQ(mkdir(root_.c_str(), 0755), 0);
    EXPECT_EQ(mkdir(outside_.c_str(), 0755), 0);
    WriteFileOrDie(outside_ + "/secret", "outside secret\n");
    ServerOptions o;
    o.root = root_;
    server_ = std::make_unique<TestServer>(o);
    client_ = server_->Connect();
  }

  // The escape was refused: an error, or (for in-root semantics) the
  // in-root file; never the outside content.
  void ExpectNoEscape(const std::string& path) {
    auto got = client_->ReadFile(path, 1 << 20);
    if (got.ok()) {
      EXPECT_NE(*got, "outside secret\n") << path;
      EXPECT_NE(*got, ReadFileOrDie("/etc/passwd")) << path;
    }
    EXPECT_FALSE(client_->broken());
  }

  TempDir dir_;
  std::string root_, outside_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(FilesTest, WritesAndReadsBackBinaryDataWithTheExactMode) {
  std::string data;
  for (int i = 0; i < 700'000; ++i) data.push_back(static_cast<char>(i * 131 + (i >> 9)));
  ASSERT_TRUE(client_->WriteFile("blob.bin", data, 0640).ok());
  struct stat st;
  ASSERT_EQ(stat((root_ + "/blob.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_TRUE(ReadFileOrDie(root_ + "/blob.bin") == data);
  FileReadDone info;
  auto back = client_->ReadFile("/blob.bin", 1 << 20, &info);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == data);
  EXPECT_EQ(info.size, data.size());
  EXPECT_FALSE(info.truncated);
  // Overwrite truncates; an empty file works.
  ASSERT_TRUE(client_->WriteFile("blob.bin", "", 0600).ok());
  EXPECT_EQ(*client_->ReadFile("blob.bin", 10), "");
}

TEST_F(FilesTest, ReadStopsAtMaxBytesAndSaysSo) {
  WriteFileOrDie(root_ + "/ten", "0123456789");
  FileReadDone info;
  auto got = client_->ReadFile("ten", 4, &info);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "0123");
  EXPECT_TRUE(info.truncated);
  EXPECT_EQ(info.size, 10u);
  ASSERT_TRUE(client_->ReadFile("ten", 10, &info).ok());
  EXPECT_FALSE(info.truncated);
}

TEST_F(FilesTest, RefusesWhatIsNotARegularFile) {
  ASSERT_EQ(mkdir((root_ + "/d").c_str(), 0755), 0);
  ASSERT_EQ(mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(client_->ReadFile("d", 10).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->ReadFile("fifo", 10).status()));
  // Opening a FIFO without a reader for writing must not block the agent.
  EXPECT_FALSE(client_->WriteFile("fifo", "x").ok());
  EXPECT_TRUE(absl::IsNotFound(client_->ReadFile("missing", 10).status()));
  // A file write makes its missing parents (as the container tier does).
  ASSERT_TRUE(client_->WriteFile("no/such/dir/f", "x").ok());
  EXPECT_EQ(ReadFileOrDie(root_ + "/no/such/dir/f"), "x");
  // ... but not through a file, and never outside the root.
  EXPECT_FALSE(client_->WriteFile("no/such/dir/f/g", "x").ok());
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/out").c_str()), 0);
  // (the symlink's target does not exist inside the root: refused)
  EXPECT_FALSE(client_->WriteFile("out/made/f", "y").ok());
  EXPECT_NE(access((outside_ + "/made").c_str(), F_OK), 0) << "a parent was made outside the root";
  ASSERT_TRUE(client_->WriteFile("../../up/f", "z").ok());
  EXPECT_EQ(ReadFileOrDie(root_ + "/up/f"), "z");
  EXPECT_TRUE(absl::IsInvalidArgument(client_->ReadFile("", 10).status()));
  EXPECT_FALSE(client_->broken());
}

TEST_F(FilesTest, DotDotStopsAtTheRoot) {
  ExpectNoEscape("../outside/secret");
  ExpectNoEscape("../../../../../../" + outside_ + "/secret");
  ExpectNoEscape("/../../etc/passwd");
  // Writes cannot climb out either.
  // (in-root semantics: the write lands in <root>/outside, made for it)
  auto s = client_->WriteFile("../outside/planted", "x");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_NE(access((outside_ + "/planted").c_str(), F_OK), 0);
  EXPECT_EQ(access((root_ + "/outside/planted").c_str(), F_OK), 0);
  EXPECT_TRUE(absl::IsNotFound(client_->ReadFile("../outside/secret", 100).status()));
}

TEST_F(FilesTest, SymlinksResolveInsideTheRoot) {
  ASSERT_EQ(symlink((outside_ + "/secret").c_str(), (root_ + "/abs").c_str()), 0);
  ASSERT_EQ(symlink("../outside/secret", (root_ + "/rel").c_str()), 0);
  ASSERT_EQ(symlink("/etc/passwd", (root_ + "/passwd").c_str()), 0);
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/outdir").c_str()), 0);
  ExpectNoEscape("abs");
  ExpectNoEscape("rel");
  ExpectNoEscape("passwd");
  ExpectNoEscape("outdir/secret");
  EXPECT_TRUE(absl::IsNotFound(client_->ReadFile("passwd", 100).status()));
  // An absolute symlink means the root's own file (chroot semantics).
  ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
  WriteFileOrDie(root_ + "/etc/passwd", "in-root passwd\n");
  auto got = client_->ReadFile("passwd", 100);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "in-root passwd\n");
  // Writing through a symlink that points outside creates nothing outside.
  ASSERT_EQ(symlink((outside_ + "/planted").c_str(), (root_ + "/plant").c_str()), 0);
  (void)client_->WriteFile("plant", "x");
  (void)client_->WriteFile("outdir/planted2", "x");
  EXPECT_NE(access((outside_ + "/planted").c_str(), F_OK), 0);
  EXPECT_NE(access((outside_ + "/planted2").c_str(), F_OK), 0);
  EXPECT_EQ(ReadFileOrDie(outside_ + "/secret"), "outside secret\n");
  // Listing through the symlinked directory lists nothing outside.
  auto list = client_->ListDir("outdir");
  EXPECT_FALSE(list.ok());
}

TEST_F(FilesTest, ProcMagicLinksAreRefused) {
  std::string proc = root_ + "/proc";
  ASSERT_EQ(mkdir(proc.c_str(), 0755), 0);
  auto procfs = Mount::Create("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  if (!procfs.ok()) GTEST_SKIP() << "cannot mount procfs in the test root: " << procfs.status();
  ExpectNoEscape("proc/self/root/etc/passwd");
  ExpectNoEscape("proc/self/cwd/../outside/secret");
  ExpectNoEscape("proc/1/root/etc/passwd");
  EXPECT_FALSE(client_->ReadFile("proc/self/root/etc/passwd", 100).ok());
  EXPECT_FALSE(client_->ListDir("proc/self/root").ok());
  // Plain procfs files still read: only magic links are refused.
  auto own = client_->ReadFile("proc/self/stat", 4096);
  EXPECT_TRUE(own.ok()) << own.status();
}

TEST_F(FilesTest, ListsEntriesSortedAcrossSeveralFrames) {
  ASSERT_EQ(mkdir((root_ + "/many").c_str(), 0755), 0);
  for (int i = 0; i < 1300; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "/many/f%04d", i);
    WriteFileOrDie(root_ + name, std::string(i % 7, 'x'), 0600);
  }
  ASSERT_EQ(symlink("f0001", (root_ + "/many/link").c_str()), 0);
  ASSERT_EQ(mkdir((root_ + "/many/sub").c_str(), 0700), 0);
  auto list = client_->ListDir("many");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1302u);
  EXPECT_EQ((*list)[0].name, "f0000");
  EXPECT_EQ((*list)[3].type, EntryType::kFile);
  EXPECT_EQ((*list)[3].size, 3u);
  EXPECT_EQ((*list)[3].mode, 0600u);
  EXPECT_EQ((*list)[1300].name, "link");
  EXPECT_EQ((*list)[1300].type, EntryType::kSymlink);
  EXPECT_EQ((*list)[1301].name, "sub");
  EXPECT_EQ((*list)[1301].type, EntryType::kDir);
  // ".." at the root lists the root itself.
  auto top = client_->ListDir("../..");
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 1u);
  EXPECT_EQ((*top)[0].name, "many");
  EXPECT_TRUE(absl::IsNotFound(client_->ListDir("nothere").status()));
}

}  // namespace
}  // namespace dsec::agent
