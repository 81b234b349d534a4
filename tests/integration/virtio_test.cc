// SPDX-License-Identifier: Apache-2.0
// The virtio-mmio devices end to end: the test guest's virtio drivers
// (guest-kernel/README.md, "virtio drivers") against the monitor's rng, blk,
// net (on a tap in a private network namespace) and vsock (on unix sockets)
// on real KVM, with the host side checked byte for byte.
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "devices/blk/blk_spec.h"
#include "devices/net/net_spec.h"
#include "devices/rng/rng_spec.h"
#include "devices/virtio/virtio_device.h"
#include "devices/vsock/vsock_spec.h"
#include "gtest/gtest.h"
#include "base/clock.h"
#include "tests/integration/test_support.h"
#include "tests/integration/virtio_test_util.h"
#include "vmm/vm/virtio_devices.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

using dsec::testing::FirstReportOf;
using dsec::testing::Fnv1a64;
using dsec::testing::FnvHex;
using dsec::testing::kFnvOffsetBasis;
using dsec::testing::ObservedVm;
using dsec::testing::ParseReport;
using dsec::testing::ReportsOf;
using dsec::testing::RunCommand;

constexpr uint64_t kSector = 512;
// An EtherType from the IEEE local experimental range; the guest uses it
// for net-send and the host for the frames it asks the guest to echo.
constexpr uint16_t kTestEtherType = 0x88b5;
constexpr dsec::testing::Mac kHostMac = {0x02, 0x64, 0x73, 0x65, 0x63, 0x01};
// 16 MiB each way: measured on the development host at well over 50 MiB/s
// each way (the guest's vsock driver runs at CPL3, natively), so a fraction
// of a second; the tests print the throughput they saw.
constexpr size_t kEchoBytes = 16u << 20;
constexpr size_t kGuestSendBytes = 16u << 20;

// Variadic because the body is a lambda whose commas the preprocessor sees.
#define RUN_IN_PRIVATE_NETNS(...)                                                   \
  do {                                                                              \
    std::string why;                                                                \
    if (!dsec::testing::RunInPrivateNetns(__VA_ARGS__, &why)) GTEST_SKIP() << why; \
  } while (0)

class VirtioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
    ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed";
  }

  void SkipWithoutTap() {
    std::string why = dsec::testing::TapUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }

  VmConfig Config(const std::string& workload) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "console=ttyS0 testguest.run=" + workload;
    c.mem_mib = 64;
    c.console.kind = ConsoleConfig::Kind::kNone;
    c.timeout_ms = 120'000;  // a hung guest fails the test instead of hanging it
    return c;
  }

  // Boots to the end; the report lines land in *messages.
  VmStats Run(const VmConfig& config, std::vector<std::string>* messages) {
    auto vm = Vm::Create(config);
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return {};
    EXPECT_TRUE((*vm)->Start().ok());
    VmStats stats = (*vm)->Wait();
    *messages = (*vm)->TestMessages();
    return stats;
  }

  // A raw image of `bytes` bytes: zeros (sparse) or `contents`.
  std::string MakeImage(const std::string& name, uint64_t bytes,
                        const std::vector<uint8_t>& contents = {}) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!contents.empty()) {
      out.write(reinterpret_cast<const char*>(contents.data()),
                static_cast<std::streamsize>(contents.size()));
    }
    out.close();
    std::filesystem::resize_file(path, bytes);
    return path;
  }

  static std::vector<uint8_t> ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }

  dsec::testing::TempDir dir_;
};

void ExpectCleanShutdown(const VmStats& stats, const std::vector<std::string>& msgs) {
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u);
  for (const auto& m : msgs) {
    if (m.rfind("error", 0) == 0 || m.rfind("fault", 0) == 0) ADD_FAILURE() << m;
  }
}

// "vsock listening cid=3 port=52" / "net ready mac=..": a two-word kind.
dsec::testing::Report ParseReadyLine(const std::string& line, const std::string& kind) {
  return ParseReport("ready" + line.substr(kind.size()));
}

std::string MacText(const dsec::testing::Mac& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

// --- rng ------------------------------------------------------------------------

TEST_F(VirtioTest, RngFillsRequestsWithEveryByteValue) {
  VmConfig config = Config("rng:65536");
  config.devices.push_back(devices::RngSpec::Make());
  std::vector<std::string> msgs;
  VmStats stats = Run(config, &msgs);
  ExpectCleanShutdown(stats, msgs);
  auto r = FirstReportOf(msgs, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Get("workload"), "rng");
  EXPECT_EQ(r->GetU64("bytes"), 65536u);
  EXPECT_GE(r->GetU64("requests"), 16u);  // at most 4 KiB each
  EXPECT_EQ(r->GetU64("distinct"), 256u);
  EXPECT_GE(r->GetU64("irqs"), 1u);
}

// --- blk ------------------------------------------------------------------------

TEST_F(VirtioTest, BlkWritesReachTheFileAndReadBack) {
  constexpr uint64_t kImageBytes = 4u << 20;
  constexpr uint64_t kSectors = 300;
  std::string image = MakeImage("disk.img", kImageBytes);
  VmConfig config = Config(absl::StrCat("blk-test:", kSectors));
  config.devices.push_back(devices::BlkSpec::Make(image, false));
  std::vector<std::string> msgs;
  VmStats stats = Run(config, &msgs);
  ExpectCleanShutdown(stats, msgs);
  auto r = FirstReportOf(msgs, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Get("workload"), "blk-test");
  EXPECT_EQ(r->GetU64("capacity"), kImageBytes / kSector);
  EXPECT_EQ(r->GetU64("written"), kSectors);
  EXPECT_EQ(r->GetU64("verified"), kSectors);
  EXPECT_EQ(r->Get("flush"), "ok");
  EXPECT_EQ(r->Get("id"), "dsec-disk0");
  EXPECT_GE(r->GetU64("irqs"), 1u);

  // The host sees what the guest wrote: sector n holds the LE u64
  // 0x6473656300000000 | n repeated, and nothing past the last sector.
  std::vector<uint8_t> file = ReadFile(image);
  ASSERT_EQ(file.size(), kImageBytes);
  int64_t first_bad = -1;
  for (uint64_t n = 0; n < kSectors && first_bad < 0; ++n) {
    const uint64_t want = 0x6473656300000000ull | n;
    for (uint64_t off = 0; off < kSector; off += 8) {
      uint64_t got;
      std::memcpy(&got, &file[n * kSector + off], 8);
      if (got != want) {
        first_bad = static_cast<int64_t>(n);
        break;
      }
    }
  }
  EXPECT_EQ(first_bad, -1) << "sector " << first_bad << " does not hold the guest's pattern";
  uint64_t s0, s299;
  std::memcpy(&s0, &file[0], 8);
  std::memcpy(&s299, &file[299 * kSector + kSector - 8], 8);
  EXPECT_EQ(s0, 0x6473656300000000ull);
  EXPECT_EQ(s299, 0x6473656300000000ull | 299);
  auto nonzero = std::find_if(file.begin() + kSectors * kSector, file.end(),
                              [](uint8_t b) { return b != 0; });
  EXPECT_TRUE(nonzero == file.end())
      << "byte " << (nonzero - file.begin()) << " past the written sectors changed";
}

TEST_F(VirtioTest, ReadOnlyDiskRefusesWrites) {
  constexpr uint64_t kImageBytes = 1u << 20;
  std::vector<uint8_t> contents = dsec::testing::PseudoRandomBytes(kImageBytes, 0x5eed);
  std::string image = MakeImage("ro.img", kImageBytes, contents);
  // A fixed old mtime: a write of the same bytes would not change the
  // contents, but it would move the mtime.
  timespec old_times[2] = {{1'000'000'000, 0}, {1'000'000'000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, image.c_str(), old_times, 0), 0);
  const uint64_t before = Fnv1a64(kFnvOffsetBasis, contents.data(), contents.size());

  VmConfig config = Config("blk-write-ro");
  config.devices.push_back(devices::BlkSpec::Make(image, true));
  std::vector<std::string> msgs;
  VmStats stats = Run(config, &msgs);
  ExpectCleanShutdown(stats, msgs);
  auto r = FirstReportOf(msgs, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Get("workload"), "blk-write-ro");
  EXPECT_EQ(r->GetU64("status"), 1u);  // VIRTIO_BLK_S_IOERR
  EXPECT_EQ(r->GetU64("ro"), 1u);      // VIRTIO_BLK_F_RO offered

  std::vector<uint8_t> after = ReadFile(image);
  EXPECT_EQ(Fnv1a64(kFnvOffsetBasis, after.data(), after.size()), before);
  struct stat st;
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1'000'000'000);
}

// --- vsock ----------------------------------------------------------------------

// A VM stopped by its host while the guest's vsock device is active (the
// guest never resets it) is torn down cleanly: the device is reset before
// its back-end goes (the mmio bus keeps the transport past it).
TEST_F(VirtioTest, AHostStopWithAnActiveVsockTearsDownCleanly) {
  VmConfig config = Config("vsock-echo:53");
  config.devices.push_back(devices::VsockSpec::Make(3, dir_.path() + "/stop.sock"));
  auto vm = Vm::Create(config);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  const int64_t deadline = dsec::testing::DeadlineAfterMs(30'000);
  auto listening = [&] {
    for (const std::string& m : (*vm)->TestMessages()) {
      if (m.rfind("vsock listening", 0) == 0) return true;
    }
    return false;
  };
  while (!listening() && dsec::MonotonicNowNs() < deadline) ::usleep(2000);
  ASSERT_TRUE(listening()) << "no `vsock listening` line";
  (*vm)->RequestStop(StopReason::kHostRequest, "test");
  EXPECT_EQ((*vm)->Wait().stop.reason, StopReason::kHostRequest);
  vm->reset();  // before the fix: a use of the freed back-end here
}

TEST_F(VirtioTest, VsockHostToGuestEcho) {
  constexpr uint32_t kPort = 52;
  const std::string sock = dir_.path() + "/v.sock";
  VmConfig config = Config(absl::StrCat("vsock-echo:", kPort));
  config.devices.push_back(devices::VsockSpec::Make(3, sock));
  auto vm = ObservedVm::Start(config);
  ASSERT_TRUE(vm.ok()) << vm.status();
  auto ready = (*vm)->WaitForLine("vsock listening", 30'000);
  ASSERT_TRUE(ready.has_value()) << "no `vsock listening` line";
  EXPECT_EQ(ParseReadyLine(*ready, "vsock listening").GetU64("cid"), 3u);
  EXPECT_EQ(ParseReadyLine(*ready, "vsock listening").GetU64("port"), kPort);

  auto stream = dsec::testing::ConnectVsock(sock, kPort, 10'000);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const int fd = stream->get();
  const std::vector<uint8_t> sent = dsec::testing::PseudoRandomBytes(kEchoBytes, 0xd5ec);
  const int64_t deadline = dsec::testing::DeadlineAfterMs(100'000);
  const int64_t t0 = dsec::MonotonicNowNs();

  // Both directions at once: the guest returns bytes only as fast as it
  // can take new ones (256 KiB of credit), so a writer that waited for the
  // reader, or the reverse, would stall.
  size_t written = 0;
  std::thread writer([&] {
    written = dsec::testing::WriteAll(fd, sent.data(), sent.size(), deadline);
    ::shutdown(fd, SHUT_WR);
  });
  std::vector<uint8_t> echoed(kEchoBytes);
  size_t got = dsec::testing::ReadFull(fd, echoed.data(), echoed.size(), deadline);
  const int64_t t1 = dsec::MonotonicNowNs();
  if (got != echoed.size()) ::shutdown(fd, SHUT_RDWR);  // unblock the writer
  writer.join();
  EXPECT_EQ(written, sent.size());
  ASSERT_EQ(got, sent.size());
  auto diff = std::mismatch(sent.begin(), sent.end(), echoed.begin());
  EXPECT_TRUE(diff.first == sent.end()) << "echo differs at byte " << (diff.first - sent.begin());
  // The guest shuts its side down once everything is back.
  EXPECT_TRUE(dsec::testing::ReadToEof(fd, dsec::testing::DeadlineAfterMs(10'000)));
  stream->Reset();

  VmStats stats = (*vm)->Wait();
  std::vector<std::string> msgs = (*vm)->Messages();
  ExpectCleanShutdown(stats, msgs);
  auto r = FirstReportOf(msgs, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Get("workload"), "vsock-echo");
  EXPECT_EQ(r->GetU64("bytes"), kEchoBytes);
  EXPECT_EQ(r->Get("fnv"), FnvHex(Fnv1a64(kFnvOffsetBasis, sent.data(), sent.size())));
  EXPECT_EQ(r->GetU64("cid"), 3u);
  EXPECT_GE(r->GetU64("peer_port"), 1u << 30);  // the monitor's host ports
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  std::cout << "[ vsock echo ] " << kEchoBytes << " bytes each way in " << secs << " s ("
            << static_cast<double>(kEchoBytes) / (1 << 20) / secs << " MiB/s each way)\n";
}

TEST_F(VirtioTest, VsockGuestToHost) {
  constexpr uint32_t kPort = 5000;
  const std::string sock = dir_.path() + "/v.sock";
  auto listener = dsec::testing::ListenUnix(absl::StrCat(sock, "_", kPort));
  ASSERT_TRUE(listener.ok()) << listener.status();
  VmConfig config = Config(absl::StrCat("vsock-send:", kPort, ",", kGuestSendBytes));
  config.devices.push_back(devices::VsockSpec::Make(3, sock));
  auto vm = ObservedVm::Start(config);
  ASSERT_TRUE(vm.ok()) << vm.status();

  pollfd fds[2] = {{listener->get(), POLLIN, 0}, {(*vm)->vm().stop_requested_fd(), POLLIN, 0}};
  ASSERT_EQ(::poll(fds, 2, 30'000), 1) << "the guest did not connect";
  ASSERT_TRUE(fds[0].revents & POLLIN) << "the VM stopped before connecting";
  ScopedFd conn(::accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(conn.valid()) << std::strerror(errno);

  const int64_t deadline = dsec::testing::DeadlineAfterMs(100'000);
  const int64_t t0 = dsec::MonotonicNowNs();
  std::vector<uint8_t> data(kGuestSendBytes);
  size_t got = dsec::testing::ReadFull(conn.get(), data.data(), data.size(), deadline);
  const int64_t t1 = dsec::MonotonicNowNs();
  ASSERT_EQ(got, kGuestSendBytes);
  size_t first_bad = data.size();
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != static_cast<uint8_t>((i * 7 + 3) & 0xff)) {
      first_bad = i;
      break;
    }
  }
  EXPECT_EQ(first_bad, data.size()) << "pattern broken at byte " << first_bad;
  EXPECT_EQ(dsec::testing::WriteAll(conn.get(), data.data(), data.size(), deadline), data.size());
  ::shutdown(conn.get(), SHUT_WR);
  EXPECT_TRUE(dsec::testing::ReadToEof(conn.get(), dsec::testing::DeadlineAfterMs(10'000)));
  conn.Reset();

  VmStats stats = (*vm)->Wait();
  std::vector<std::string> msgs = (*vm)->Messages();
  ExpectCleanShutdown(stats, msgs);
  auto r = FirstReportOf(msgs, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Get("workload"), "vsock-send");
  EXPECT_EQ(r->GetU64("port"), kPort);
  EXPECT_EQ(r->GetU64("sent"), kGuestSendBytes);
  EXPECT_EQ(r->GetU64("received"), kGuestSendBytes);
  EXPECT_EQ(r->Get("received_fnv"), FnvHex(Fnv1a64(kFnvOffsetBasis, data.data(), data.size())));
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  std::cout << "[ vsock send ] " << kGuestSendBytes << " bytes guest->host in " << secs << " s ("
            << static_cast<double>(kGuestSendBytes) / (1 << 20) / secs << " MiB/s)\n";
}

// --- net ------------------------------------------------------------------------

TEST_F(VirtioTest, NetFrameGuestToTapAndBack) {
  SkipWithoutTap();
  constexpr size_t kFrames = 32;
  constexpr size_t kFrameBytes = 100;
  const std::string tap = dsec::testing::UniqueTapName();
  RUN_IN_PRIVATE_NETNS([&] {
    ASSERT_TRUE(dsec::testing::CreateTap(tap).ok());
    VmConfig config = Config(absl::StrCat("net-echo:", kFrames));
    config.devices.push_back(devices::NetSpec::Make(tap));
    auto vm = ObservedVm::Start(config);
    ASSERT_TRUE(vm.ok()) << vm.status();
    // Up only now that the monitor is attached, so that the tap's qdisc is
    // in place before the first frame (see BringUp).
    ASSERT_TRUE(dsec::testing::BringUp(tap).ok());
    auto pkt = dsec::testing::PacketSocket(tap);
    ASSERT_TRUE(pkt.ok()) << pkt.status();
    auto ready = (*vm)->WaitForLine("net ready", 30'000);
    ASSERT_TRUE(ready.has_value()) << "no `net ready` line";
    auto guest_mac = dsec::testing::ParseMacText(ParseReadyLine(*ready, "net ready").Get("mac"));
    ASSERT_TRUE(guest_mac.has_value()) << *ready;

    std::vector<std::vector<uint8_t>> sent;
    for (size_t i = 0; i < kFrames; ++i) {
      std::vector<uint8_t> f(kFrameBytes);
      std::copy(guest_mac->begin(), guest_mac->end(), f.begin());
      std::copy(kHostMac.begin(), kHostMac.end(), f.begin() + 6);
      f[12] = kTestEtherType >> 8;
      f[13] = kTestEtherType & 0xff;
      for (size_t j = 14; j < f.size(); ++j) f[j] = static_cast<uint8_t>(i * 31 + j);
      ASSERT_EQ(::send(pkt->get(), f.data(), f.size(), 0), static_cast<ssize_t>(f.size()))
          << std::strerror(errno);
      sent.push_back(std::move(f));
    }
    auto frames = dsec::testing::ReceiveFrames(pkt->get(), kTestEtherType, kFrames, 30'000,
                                               (*vm)->vm().stop_requested_fd());
    ASSERT_EQ(frames.size(), kFrames) << dsec::testing::NetDiagnostics((*vm)->vm(), 0, tap);
    for (size_t i = 0; i < kFrames; ++i) {
      const auto& b = frames[i].bytes;
      ASSERT_EQ(b.size(), kFrameBytes) << "frame " << i;
      EXPECT_TRUE(std::equal(kHostMac.begin(), kHostMac.end(), b.begin())) << "frame " << i;
      EXPECT_TRUE(std::equal(guest_mac->begin(), guest_mac->end(), b.begin() + 6)) << "frame " << i;
      EXPECT_TRUE(std::equal(sent[i].begin() + 12, sent[i].end(), b.begin() + 12))
          << "payload of frame " << i;
    }

    VmStats stats = (*vm)->Wait();
    std::vector<std::string> msgs = (*vm)->Messages();
    ExpectCleanShutdown(stats, msgs);
    auto r = FirstReportOf(msgs, "result");
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->Get("workload"), "net-echo");
    EXPECT_EQ(r->GetU64("frames"), kFrames);
    EXPECT_EQ(r->GetU64("short"), 0u);
    EXPECT_EQ(r->Get("mac"), MacText(*guest_mac));
  });
  EXPECT_EQ(::if_nametoindex(tap.c_str()), 0u) << tap << " leaked into the host namespace";
}

TEST_F(VirtioTest, NetSendBroadcastsReachTheTap) {
  SkipWithoutTap();
  constexpr size_t kFrames = 16;
  const std::string tap = dsec::testing::UniqueTapName();
  RUN_IN_PRIVATE_NETNS([&] {
    ASSERT_TRUE(dsec::testing::CreateTap(tap).ok());
    ASSERT_TRUE(dsec::testing::BringUp(tap).ok());  // the guest sends as soon as it boots
    auto pkt = dsec::testing::PacketSocket(tap);
    ASSERT_TRUE(pkt.ok()) << pkt.status();
    VmConfig config = Config(absl::StrCat("net-send:", kFrames));
    config.devices.push_back(devices::NetSpec::Make(tap));
    auto vm = ObservedVm::Start(config);
    ASSERT_TRUE(vm.ok()) << vm.status();
    auto frames = dsec::testing::ReceiveFrames(pkt->get(), kTestEtherType, kFrames, 30'000,
                                               (*vm)->vm().stop_requested_fd());
    VmStats stats = (*vm)->Wait();
    std::vector<std::string> msgs = (*vm)->Messages();
    ExpectCleanShutdown(stats, msgs);
    auto r = FirstReportOf(msgs, "result");
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->Get("workload"), "net-send");
    EXPECT_EQ(r->GetU64("sent"), kFrames);
    auto guest_mac = dsec::testing::ParseMacText(r->Get("mac"));
    ASSERT_TRUE(guest_mac.has_value()) << r->Get("mac");

    ASSERT_EQ(frames.size(), kFrames);
    for (size_t n = 0; n < kFrames; ++n) {
      const auto& b = frames[n].bytes;
      ASSERT_EQ(b.size(), 60u) << "frame " << n;  // ETH_ZLEN
      EXPECT_TRUE(std::all_of(b.begin(), b.begin() + 6, [](uint8_t x) { return x == 0xff; }));
      EXPECT_TRUE(std::equal(guest_mac->begin(), guest_mac->end(), b.begin() + 6));
      std::string text = absl::StrCat("dsec-net ", n);
      EXPECT_EQ(std::string(b.begin() + 14, b.begin() + 14 + text.size()), text);
      EXPECT_TRUE(std::all_of(b.begin() + 14 + text.size(), b.end(), [](uint8_t x) { return x == 0; }))
          << "padding of frame " << n;
    }
  });
  EXPECT_EQ(::if_nametoindex(tap.c_str()), 0u) << tap << " leaked into the host namespace";
}

// --- transport ------------------------------------------------------------------

TEST_F(VirtioTest, ScribbledRingMarksOnlyThatDeviceNeedsReset) {
  VmConfig config = Config("virtio-scribble:0");
  config.devices.push_back(devices::RngSpec::Make());
  config.devices.push_back(devices::BlkSpec::Make(MakeImage("disk.img", 1u << 20), false));

  // The guest resets the device as soon as it sees DEVICE_NEEDS_RESET, and
  // only then reports, so the bit is visible on the host only while the VM
  // runs. To look at it without a race: hold the event loop (which runs the
  // device side) in the callback for the last boot report line, let the
  // guest set up the rng and publish its bad ring entry (its vCPU needs no
  // loop for that), pause the vCPU, release the loop so that the device
  // activates, finds the entry and reports itself broken, read both
  // transports, resume.
  absl::Notification loop_held, release_loop;
  bool held = false;  // event-loop thread only
  auto vm = Vm::Create(config);
  ASSERT_TRUE(vm.ok()) << vm.status();
  // Also on an early return, so the loop is never left waiting.
  auto unblock = absl::MakeCleanup([&] {
    if (!release_loop.HasBeenNotified()) release_loop.Notify();
  });
  (*vm)->SetTestMessageCallback([&](std::string_view line) {
    if (held || line.substr(0, 5) != "cpus ") return;
    held = true;
    loop_held.Notify();
    release_loop.WaitForNotificationWithTimeout(absl::Seconds(30));
  });
  const virtio::MmioTransport& rng = (*vm)->virtio()->transport(0);
  const virtio::MmioTransport& blk = (*vm)->virtio()->transport(1);
  ASSERT_TRUE((*vm)->Start().ok());

  ASSERT_TRUE(loop_held.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "no `cpus` report line";
  ASSERT_TRUE(dsec::testing::SpinUntil(
      [&] { return dsec::testing::GuestPublishedScribble((*vm)->memory(), config.mem_mib << 20); }, 30'000))
      << "the guest never published its scribbled ring entry";
  ASSERT_TRUE((*vm)->Pause().ok());
  std::move(unblock).Invoke();
  const bool flagged =
      dsec::testing::SpinUntil([&] { return (rng.status() & virtio::kStatusDeviceNeedsReset) != 0; }, 10'000);
  const uint32_t rng_status = rng.status();
  const uint32_t blk_status = blk.status();
  ASSERT_TRUE((*vm)->Resume().ok());
  VmStats stats = (*vm)->Wait();

  EXPECT_TRUE(flagged) << "rng status stayed 0x" << std::hex << rng_status;
  EXPECT_TRUE(rng_status & virtio::kStatusDriverOk) << std::hex << rng_status;
  EXPECT_FALSE(blk_status & virtio::kStatusDeviceNeedsReset) << std::hex << blk_status;
  std::vector<std::string> msgs = (*vm)->TestMessages();
  ExpectCleanShutdown(stats, msgs);
  auto r = FirstReportOf(msgs, "result");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Get("workload"), "virtio-scribble");
  EXPECT_EQ(r->GetU64("device_id"), 4u);
  EXPECT_EQ(r->GetU64("needs_reset"), 1u);
  EXPECT_TRUE(r->GetU64("status") & virtio::kStatusDeviceNeedsReset) << r->Get("status");
  // The guest's reset cleared the flag; the untouched disk never had it.
  EXPECT_EQ(rng.status(), 0u);
  EXPECT_FALSE(blk.status() & virtio::kStatusDeviceNeedsReset);
}

TEST_F(VirtioTest, VirtioListMatchesTheCommandLine) {
  SkipWithoutTap();
  const std::string tap = dsec::testing::UniqueTapName();
  RUN_IN_PRIVATE_NETNS([&] {
    ASSERT_TRUE(dsec::testing::CreateTap(tap).ok());
    ASSERT_TRUE(dsec::testing::BringUp(tap).ok());
    VmConfig config = Config("virtio-list");
    config.devices.push_back(devices::RngSpec::Make());
    config.devices.push_back(devices::BlkSpec::Make(MakeImage("disk.img", 1u << 20), false));
    config.devices.push_back(devices::NetSpec::Make(tap));
    config.devices.push_back(devices::VsockSpec::Make(3, dir_.path() + "/v.sock"));
    auto vm = Vm::Create(config);
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->Start().ok());
    VmStats stats = (*vm)->Wait();
    std::vector<std::string> msgs = (*vm)->TestMessages();
    ExpectCleanShutdown(stats, msgs);

    const uint32_t kIds[] = {4, 2, 1, 19};  // rng, blk, net, vsock: creation order
    auto list = ReportsOf(msgs, "virtio");
    ASSERT_EQ(list.size(), 4u);
    std::string expected_cmdline;
    for (size_t i = 0; i < 4; ++i) {
      const uint64_t addr = 0xd0000000ull + i * 0x1000;
      EXPECT_EQ(list[i].GetU64("slot"), i);
      EXPECT_EQ(list[i].GetU64("addr"), addr) << list[i].Get("addr");
      EXPECT_EQ(list[i].GetU64("irq"), 5 + i);
      EXPECT_EQ(list[i].GetU64("device_id"), kIds[i]) << "slot " << i;
      EXPECT_EQ(list[i].GetU64("version"), 2u);
      absl::StrAppend(&expected_cmdline,
                      absl::StrFormat(" virtio_mmio.device=4K@0x%x:%d", addr, 5 + i));
    }
    EXPECT_NE((*vm)->cmdline().find(expected_cmdline), std::string::npos) << (*vm)->cmdline();
    auto cmdline = FirstReportOf(msgs, "cmdline");
    ASSERT_TRUE(cmdline.has_value());
    EXPECT_EQ(cmdline->Get("text"), (*vm)->cmdline());
    auto r = FirstReportOf(msgs, "result");
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->GetU64("count"), 4u);
  });
  EXPECT_EQ(::if_nametoindex(tap.c_str()), 0u) << tap << " leaked into the host namespace";
}

// --- the binary's device arguments ------------------------------------------------

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST_F(VirtioTest, MissingDiskFileIsOneUsageLine) {
  const std::string missing = dir_.path() + "/no-such-disk.img";
  auto r = RunCommand({dsec::testing::VmmBinaryPath(), "vm", "run", "--disk", missing,
                       "--cmdline", "testguest.run=virtio-list"});
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(missing)) << "the monitor created the missing disk";
}

TEST_F(VirtioTest, VsockHostCidIsOneUsageLine) {
  const std::string sock = dir_.path() + "/v.sock";
  auto r = RunCommand({dsec::testing::VmmBinaryPath(), "vm", "run", "--vsock",
                       absl::StrCat("2,", sock), "--cmdline", "testguest.run=virtio-list"});
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--vsock"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(sock)) << "the socket was created for a rejected CID";
}

TEST_F(VirtioTest, MissingTapIsOneUsageLineAndNothingIsCreated) {
  SkipWithoutTap();
  const std::string tap = dsec::testing::UniqueTapName();
  // In a private namespace too: if the monitor did create the tap, it would
  // not be in the host's.
  RUN_IN_PRIVATE_NETNS([&] {
    auto r = RunCommand({dsec::testing::VmmBinaryPath(), "vm", "run", "--net", tap,
                         "--cmdline", "testguest.run=virtio-list"});
    EXPECT_EQ(r.exit_status, 2) << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(tap), std::string::npos) << r.err;
    EXPECT_EQ(::if_nametoindex(tap.c_str()), 0u) << "the monitor created " << tap;
  });
  EXPECT_EQ(::if_nametoindex(tap.c_str()), 0u);
}

}  // namespace
}  // namespace dsec::vm
