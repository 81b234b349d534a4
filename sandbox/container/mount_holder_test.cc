// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/mount_holder.h"

#include <sys/stat.h>

#include "base/file_io.h"
#include "gtest/gtest.h"
#include "sandbox/container/mount.h"

namespace dsec::container {
namespace {

TEST(MountHolder, HoldsMountsOutOfTheHostsTableWithoutADescriptor) {
  auto holder = MountHolder::Start();
  if (!holder.ok()) GTEST_SKIP() << holder.status();
  auto tmpfs = DetachedMount::Tmpfs(1 << 20, false);
  ASSERT_TRUE(tmpfs.ok()) << tmpfs.status();
  const std::string name = "held-" + std::to_string(::getpid());
  auto path = (*holder)->Attach(tmpfs->fd(), name);
  ASSERT_TRUE(path.ok()) << path.status();
  tmpfs->Reset();  // the holder keeps it
  ASSERT_TRUE(WriteFile(*path + "/f", "through the holder", 0600).ok());
  auto back = ReadSmallFile(*path + "/f");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "through the holder");
  EXPECT_EQ((*holder)->held(), 1);
  auto mountinfo = ReadSmallFile("/proc/self/mountinfo");
  ASSERT_TRUE(mountinfo.ok());
  EXPECT_EQ(mountinfo->find(name), std::string::npos) << "a mount in the host's table";
  EXPECT_EQ(mountinfo->find("dsec-holder"), std::string::npos);

  auto again = DetachedMount::Tmpfs(1 << 20, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*holder)->Attach(again->fd(), name).status().code(), absl::StatusCode::kAlreadyExists);
  for (const char* bad : {"", ".", "..", "a/b"}) {
    EXPECT_EQ((*holder)->Attach(again->fd(), bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }

  ASSERT_TRUE((*holder)->Detach(name).ok());
  struct stat st {};
  EXPECT_NE(::stat((*path + "/f").c_str(), &st), 0);
  EXPECT_EQ((*holder)->held(), 0);
  EXPECT_TRUE((*holder)->Detach(name).ok()) << "detaching what is not held is not an error";

  // What is held when the holder goes, goes with it.
  auto last = DetachedMount::Tmpfs(1 << 20, false);
  ASSERT_TRUE(last.ok());
  auto held = (*holder)->Attach(last->fd(), "last");
  ASSERT_TRUE(held.ok()) << held.status();
  last->Reset();
  holder->reset();
  EXPECT_NE(::stat(held->c_str(), &st), 0);
}

}  // namespace
}  // namespace dsec::container
