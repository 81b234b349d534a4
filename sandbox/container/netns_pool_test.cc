// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/netns_pool.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "base/netns.h"
#include "gtest/gtest.h"

namespace dsec::container {
namespace {

ino_t NsInode(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

ino_t OwnNetnsInode() {
  struct stat st {};
  return ::stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}

// In a forked child: joins `fd` and reports whether lo is up (1), down (0)
// or the check failed (2).
int LoopbackStateIn(int fd) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setns(fd, CLONE_NEWNET) != 0) ::_exit(2);
    int s = ::socket(AF_INET, SOCK_DGRAM, 0);
    ifreq req{};
    std::memcpy(req.ifr_name, "lo", 3);
    if (s < 0 || ::ioctl(s, SIOCGIFFLAGS, &req) != 0) ::_exit(2);
    ::_exit((req.ifr_flags & IFF_UP) ? 1 : 0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

class NetnsPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_SYS_ADMIN) for network namespaces";
  }
};

TEST_F(NetnsPoolTest, MakeNetnsGivesAFreshNamespaceWithLoUpAndLeavesTheCallerHome) {
  const ino_t home = OwnNetnsInode();
  ASSERT_NE(home, 0u);
  absl::StatusOr<ScopedFd> fd = dsec::MakeNetns();
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_NE(NsInode(fd->get()), home);
  EXPECT_EQ(OwnNetnsInode(), home) << "the calling thread did not return to its namespace";
  EXPECT_EQ(LoopbackStateIn(fd->get()), 1);
}

TEST_F(NetnsPoolTest, HandsOutEachNamespaceOnceAndRefills) {
  NetnsPool pool(2);
  std::set<ino_t> seen;
  std::vector<ScopedFd> held;  // open until the end: inodes cannot be reused
  // Take until 6 distinct namespaces came from the pool; the refill thread
  // makes them meanwhile (misses are allowed, they are counted).
  for (int i = 0; i < 100000 && seen.size() < 6; ++i) {
    ScopedFd fd = pool.Take();
    if (!fd) {
      std::this_thread::yield();
      continue;
    }
    EXPECT_TRUE(seen.insert(NsInode(fd.get())).second) << "a namespace was handed out twice";
    held.push_back(std::move(fd));
  }
  EXPECT_EQ(seen.size(), 6u) << pool.last_error();
  EXPECT_EQ(seen.count(OwnNetnsInode()), 0u);
  NetnsPoolStats st = pool.stats();
  EXPECT_EQ(st.taken, 6u);
  EXPECT_GE(st.made, 6u);
  EXPECT_EQ(st.failures, 0u);
}

TEST_F(NetnsPoolTest, TargetZeroIsOffAndAlwaysMisses) {
  NetnsPool pool(0);
  EXPECT_FALSE(pool.Take().valid());
  EXPECT_EQ(pool.stats().made, 0u);
  EXPECT_EQ(pool.stats().misses, 0u);
}

}  // namespace
}  // namespace dsec::container
