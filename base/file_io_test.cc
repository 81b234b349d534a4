// SPDX-License-Identifier: Apache-2.0
#include "base/file_io.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace dsec {
namespace {

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dsec-file-io-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    // Only what the tests made.
    for (const char* p : {"/a/b/c/f", "/f", "/big"}) ::unlink((dir_ + p).c_str());
    for (const char* p : {"/a/b/c", "/a/b", "/a", ""}) ::rmdir((dir_ + p).c_str());
  }
  std::string dir_;
};

TEST_F(FileIoTest, WritesReadsAndAppendsWholeFiles) {
  const std::string f = dir_ + "/f";
  ASSERT_TRUE(WriteFile(f, "one\n", 0600).ok());
  ASSERT_TRUE(WriteFile(f, "two\n", 0600, /*append=*/true).ok());
  EXPECT_EQ(ReadFile(f).value_or(""), "one\ntwo\n");
  struct stat st;
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(WriteFile(f, "three").ok());  // truncates
  EXPECT_EQ(ReadFile(f).value_or(""), "three");
  EXPECT_TRUE(absl::IsNotFound(ReadFile(dir_ + "/missing").status()));
  EXPECT_TRUE(absl::IsNotFound(WriteFile(dir_ + "/no/such/dir", "x")));
}

TEST_F(FileIoTest, ReadFileHasNoSmallFileCap) {
  const std::string big(3 << 20, 'x');
  ASSERT_TRUE(WriteFile(dir_ + "/big", big).ok());
  EXPECT_EQ(ReadFile(dir_ + "/big").value_or("").size(), big.size());
  EXPECT_TRUE(absl::IsInvalidArgument(ReadSmallFile(dir_ + "/big").status()));
}

TEST_F(FileIoTest, MakeDirsCreatesEveryMissingLevelAndListsSorted) {
  ASSERT_TRUE(MakeDirs(dir_ + "/a/b/c", 0700).ok());
  ASSERT_TRUE(MakeDirs(dir_ + "/a/b/c/").ok());  // exists: fine
  ASSERT_TRUE(WriteFile(dir_ + "/a/b/c/f", "").ok());
  ASSERT_TRUE(WriteFile(dir_ + "/f", "").ok());
  auto names = ListDirectory(dir_);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "f"}));
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/a/b").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_FALSE(MakeDirs(dir_ + "/f/sub").ok());  // a file in the way
  EXPECT_TRUE(absl::IsNotFound(ListDirectory(dir_ + "/missing").status()));
}

}  // namespace
}  // namespace dsec
