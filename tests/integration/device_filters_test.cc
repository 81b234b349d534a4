// SPDX-License-Identifier: Apache-2.0
// The jail's event-loop filter as the monitor composes it from a VM's
// devices (monitor::DeviceFilterExtras, vmm/jail), around the devices' real
// back-ends on a thread that has nothing else: the disk's declared calls
// carry both of its back-ends (made, used and torn down as a VM does on its
// event loop) and the balloon's its hole punching, while the same work on
// the filter of a VM without that device is stopped at its first call. No
// KVM needed; each case runs in a forked child (filters are per process
// tree and cannot be removed).
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/event_loop.h"
#include "base/logging.h"
#include "base/scoped_fd.h"
#include "devices/balloon/balloon_backend.h"
#include "devices/balloon/balloon_spec.h"
#include "devices/blk/blk_backend.h"
#include "devices/blk/blk_spec.h"
#include "devices/rng/rng_spec.h"
#include "gtest/gtest.h"
#include "platform/memory/memfd_guest_memory.h"
#include "tests/integration/test_support.h"
#include "vmm/jail/seccomp_filters.h"
#include "vmm/monitor/monitor_options.h"

namespace dsec {
namespace {

constexpr int kSetupFailed = 90;

// Runs `work` in a child after `setup` (unfiltered: what the monitor does
// before its jail) and the event-loop filter composed from `devices`. The
// child's exit status: work's result, or jail::kSeccompExitStatus when the
// filter stopped it.
int RunOnFilteredLoop(const virtio::DeviceSpecs& devices, const std::function<bool()>& setup,
                      const std::function<int()>& work) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Log lines must not need calls of their own (the monitor prepares the
    // same way: time zone read, nothing below warnings).
    ::tzset();
    log::SetLevel("error");
    const jail::FilterExtras extras = monitor::DeviceFilterExtras(devices);
    if (!setup() || !jail::InstallSigsysReporter().ok() ||
        !jail::InstallThreadFilter(jail::ThreadKind::kEventLoop, jail::SeccompMode::kKill, extras)
             .ok()) {
      ::_exit(kSetupFailed);
    }
    ::_exit(work());
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class DeviceFiltersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    image_ = dir_.path() + "/disk.img";
    ScopedFd fd(::open(image_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::ftruncate(fd.get(), 1 << 20), 0);
  }

  // A disk's life on the event loop: the back-end made at activation, a
  // write, a read, a flush and a discard, then its teardown.
  int DiskWork(const virtio::DeviceSpecs& devices, devices::BlkBackendKind kind) {
    std::unique_ptr<EventLoop> loop;
    ScopedFd fd;
    auto setup = [&] {
      auto l = EventLoop::Create();
      if (!l.ok()) return false;
      loop = std::move(*l);
      fd.Reset(::open(image_.c_str(), O_RDWR | O_CLOEXEC));
      return fd.valid();
    };
    auto work = [&]() -> int {
      auto backend = devices::CreateBlkBackend(kind, fd.get(), loop.get(), 8);
      if (!backend.ok()) return 2;
      std::vector<uint8_t> out(4096, 0xab), in(4096, 0);
      int done = 0, failed = 0;
      auto count = [&](int64_t r) {
        ++done;
        // A file system without hole punching is no matter of the filter.
        if (r < 0 && r != -EOPNOTSUPP) ++failed;
      };
      (*backend)->Write(0, {{out.data(), out.size()}}, count);
      (*backend)->Drain();
      (*backend)->Read(0, {{in.data(), in.size()}}, count);
      (*backend)->Flush(count);
      (*backend)->Discard(1 << 16, 1 << 16, count);
      (*backend)->Drain();
      backend->reset();
      if (done != 4 || failed != 0) return 3;
      return in == out ? 0 : 4;
    };
    return RunOnFilteredLoop(devices, setup, work);
  }

  dsec::testing::TempDir dir_;
  std::string image_;
};

TEST_F(DeviceFiltersTest, TheDisksCallsCarryBothOfItsBackEnds) {
  const virtio::DeviceSpecs disk = {devices::BlkSpec::Make(image_)};
  EXPECT_EQ(DiskWork(disk, devices::BlkBackendKind::kSync), 0);
  const int uring = DiskWork(disk, devices::BlkBackendKind::kIoUring);
  if (uring == 2) GTEST_SKIP() << "io_uring is unavailable on this host";
  EXPECT_EQ(uring, 0);
}

TEST_F(DeviceFiltersTest, AVmWithoutADiskCannotDoDiskIo) {
  const virtio::DeviceSpecs rng = {devices::RngDeviceKind().FromFlags({{"rng", {""}}})->front()};
  EXPECT_EQ(DiskWork(rng, devices::BlkBackendKind::kSync), jail::kSeccompExitStatus);
  EXPECT_EQ(DiskWork(rng, devices::BlkBackendKind::kIoUring), jail::kSeccompExitStatus);
}

TEST_F(DeviceFiltersTest, TheBalloonPunchesHolesOnlyInAVmThatHasOne) {
  std::unique_ptr<memory::MemfdGuestMemory> memory;
  std::unique_ptr<devices::MemfdBalloonBackend> backend;
  auto setup = [&] {
    auto m = memory::MemfdGuestMemory::Create({{0, 4 << 20}}, {});
    if (!m.ok()) return false;
    memory = std::move(*m);
    auto b = devices::MemfdBalloonBackend::ForGuestMemory(*memory);
    if (!b.ok()) return false;
    backend = std::move(*b);
    return true;
  };
  auto work = [&]() -> int {
    // Pages the guest touched, then gave to the balloon.
    if (!memory->Fill(1 << 20, 0x5a, 1 << 16).ok()) return 2;
    auto released = backend->Release(1 << 20, 1 << 16);
    return released.ok() ? 0 : 3;
  };
  EXPECT_EQ(RunOnFilteredLoop({devices::BalloonSpec::Make()}, setup, work), 0);
  const virtio::DeviceSpecs none;
  EXPECT_EQ(RunOnFilteredLoop(none, setup, work), jail::kSeccompExitStatus);
}

}  // namespace
}  // namespace dsec
