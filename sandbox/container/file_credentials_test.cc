// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/file_credentials.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <future>
#include <thread>
#include <utility>

#include "gtest/gtest.h"

namespace dsec::container {
namespace {

uint64_t Effective() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return ~0ull;
  return data[0].effective | (static_cast<uint64_t>(data[1].effective) << 32);
}

uid_t FsUid() { return static_cast<uid_t>(::syscall(SYS_setfsuid, -1)); }

TEST(FileCredentialsTest, SandboxRootsRightsPerMode) {
  FileCredentials plain = SandboxFileCredentials(std::nullopt);
  EXPECT_EQ(plain.fsuid, 0u);
  EXPECT_NE(plain.capabilities & (1ull << CAP_DAC_OVERRIDE), 0u);
  EXPECT_EQ(plain.capabilities & (1ull << CAP_SYS_ADMIN), 0u);
  EXPECT_EQ(plain.capabilities & (1ull << CAP_SYS_PTRACE), 0u);
  EXPECT_EQ(plain.capabilities & (1ull << CAP_SYS_NICE), 0u);
  UserNamespaceMap map;
  map.host_uid = 0x10000000;
  map.host_gid = 0x10000000;
  FileCredentials userns = SandboxFileCredentials(map);
  EXPECT_EQ(userns.fsuid, 0x10000000u);
  EXPECT_EQ(userns.fsgid, 0x10000000u);
  EXPECT_EQ(userns.capabilities, 0u);
}

// The thread takes the sandbox's rights and gets its own back; the
// process's other threads keep theirs meanwhile. (A thread started while
// they are lowered would inherit them: file operations start none.)
TEST(FileCredentialsTest, LowersThisThreadOnlyAndRestores) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (capabilities to lower)";
  const uint64_t before = Effective();
  ASSERT_NE(before & (1ull << CAP_SYS_ADMIN), 0u);
  std::promise<void> lowered;
  std::promise<std::pair<uint64_t, uid_t>> seen;
  std::thread other([&] {
    lowered.get_future().wait();
    seen.set_value({Effective(), FsUid()});
  });
  {
    FileCredentials c;
    c.fsuid = 0x10000000;
    c.fsgid = 0x10000000;
    c.capabilities = 1ull << CAP_CHOWN;
    auto scoped = ScopedFileCredentials::Create(c);
    ASSERT_TRUE(scoped.ok()) << scoped.status();
    EXPECT_EQ(Effective(), (1ull << CAP_CHOWN));
    EXPECT_EQ(FsUid(), 0x10000000u);
    lowered.set_value();
    auto [other_caps, other_fsuid] = seen.get_future().get();
    EXPECT_EQ(other_caps, before);
    EXPECT_EQ(other_fsuid, 0u);
  }
  other.join();
  EXPECT_EQ(Effective(), before);
  EXPECT_EQ(FsUid(), 0u);
}

}  // namespace
}  // namespace dsec::container
