// SPDX-License-Identifier: Apache-2.0
// virtio-pmem with DAX on real KVM: the test guest maps layer images through
// pmem windows (pmem-dax/), and the host checks sharing, read-only
// enforcement, flush, and the checksum against virtio-blk.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/mmap.h"
#include "base/scoped_fd.h"
#include "devices/pmem/pmem_device.h"
#include "devices/blk/blk_spec.h"
#include "gtest/gtest.h"
#include "pmem-dax/pmem_spec.h"
#include "tests/integration/test_support.h"
#include "vmm/vm/virtio_devices.h"
#include "vmm/vm/vm.h"

namespace dsec::vm {
namespace {

using dsec::testing::FirstReportOf;

constexpr uint64_t kImageBytes = 8ull << 20;

// The test guest's layer checksum (tg_wsum64).
uint64_t WordSum(const std::vector<uint8_t>& data) {
  uint64_t sum = 0;
  for (size_t i = 0; i * 8 < data.size(); ++i) {
    uint64_t w = 0;
    std::memcpy(&w, data.data() + i * 8, std::min<size_t>(8, data.size() - i * 8));
    sum += w * (2 * i + 1);
  }
  return sum;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class PmemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
    image_ = dir_.path() + "/layer.img";
    std::vector<uint8_t> data(kImageBytes);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < data.size(); i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(&data[i], &x, 8);
    }
    std::ofstream(image_, std::ios::binary).write(reinterpret_cast<char*>(data.data()),
                                                  static_cast<std::streamsize>(data.size()));
    original_ = data;
  }

  VmConfig Config(const std::string& workload, bool read_only) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "console=ttyS0 testguest.run=" + workload;
    c.mem_mib = 64;
    c.console.kind = ConsoleConfig::Kind::kNone;
    c.timeout_ms = 60'000;
    c.devices.push_back(pmem::PmemSpec::Make(image_, read_only));
    return c;
  }

  dsec::testing::TempDir dir_;
  std::string image_;
  std::vector<uint8_t> original_;
};

// smaps Rss/Pss (kB) summed over this process's mappings of `path`.
struct MapUse {
  int mappings = 0;
  uint64_t rss_kb = 0;
  uint64_t pss_kb = 0;
};
MapUse SmapsOf(const std::string& path) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  MapUse use;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') != std::string::npos && line.find(' ') != std::string::npos) {
      inside = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(),
                                                          path) == 0;
      if (inside) ++use.mappings;
      continue;
    }
    if (!inside) continue;
    std::istringstream fields(line);
    std::string key;
    uint64_t kb = 0;
    fields >> key >> kb;
    if (key == "Rss:") use.rss_kb += kb;
    if (key == "Pss:") use.pss_kb += kb;
  }
  return use;
}

TEST_F(PmemTest, TwoVmsShareOneCopyOfTheImage) {
  // Drop the image from the page cache so that residency comes from the guests.
  {
    ScopedFd fd(::open(image_.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::fdatasync(fd.get()), 0);
    ASSERT_EQ(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED), 0);
  }
  std::vector<std::unique_ptr<Vm>> vms;
  for (int i = 0; i < 2; ++i) {
    auto vm = Vm::Create(Config("pmem-read", true));
    ASSERT_TRUE(vm.ok()) << vm.status();
    ASSERT_TRUE((*vm)->Start().ok());
    vms.push_back(std::move(*vm));
  }
  const std::string want = absl::StrFormat("0x%x", WordSum(original_));
  for (auto& vm : vms) {
    VmStats stats = vm->Wait();
    ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
    ASSERT_EQ(stats.stop.guest_exit_code, 0u);
    auto result = FirstReportOf(vm->TestMessages(), "result");
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->Get("checksum"), want);
    EXPECT_EQ(result->GetU64("bytes"), kImageBytes);
  }
  // Both VMs still map the file (until destroyed): the host holds one copy.
  std::vector<unsigned char> vec(kImageBytes / 4096);
  {
    ScopedFd fd(::open(image_.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    auto map = Mmap::File(fd.get(), kImageBytes, PROT_READ, MAP_SHARED);
    ASSERT_TRUE(map.ok()) << map.status();
    ASSERT_EQ(::mincore(map->data(), kImageBytes, vec.data()), 0);
  }
  size_t resident = 0;
  for (unsigned char c : vec) resident += c & 1;
  EXPECT_EQ(resident, vec.size());  // every page of the one page-cache copy

  MapUse use = SmapsOf(image_);
  ASSERT_EQ(use.mappings, 2);
  const uint64_t image_kb = kImageBytes / 1024;
  // Each mapping shows the whole image resident, but proportionally the two
  // together account for one copy: the pages are shared, not duplicated.
  EXPECT_GE(use.rss_kb, 2 * image_kb * 95 / 100);
  EXPECT_LE(use.pss_kb, image_kb * 105 / 100);
  EXPECT_GE(use.pss_kb, image_kb * 95 / 100);
}

TEST_F(PmemTest, GuestWriteToReadOnlyLayerIsCountedAndRefused) {
  auto vm = Vm::Create(Config("pmem-write:4096", true));
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  VmStats stats = (*vm)->Wait();
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto result = FirstReportOf((*vm)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->GetU64("matched"), 0u);  // the guest read back the file's bytes
  EXPECT_EQ(result->GetU64("flush"), 0u);    // flush on a read-only layer succeeds
  EXPECT_NE(result->GetU64("bad_type"), 0u);  // unknown request type: error status
  EXPECT_EQ((*vm)->virtio()->Find<const pmem::PmemLayer>()->refused_writes(), 512u);
  vm->reset();
  EXPECT_EQ(ReadFile(image_), original_);
}

TEST_F(PmemTest, FlushOnWritableLayerReachesTheFile) {
  auto vm = Vm::Create(Config("pmem-write:8192", false));
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  VmStats stats = (*vm)->Wait();
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto result = FirstReportOf((*vm)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->GetU64("matched"), 512u);
  EXPECT_EQ(result->GetU64("flush"), 0u);
  const devices::PmemMetrics& m =
      (*vm)->virtio()->Find<const pmem::PmemLayer>()->metrics();
  EXPECT_EQ(m.flush_requests.load(), 1u);
  EXPECT_EQ(m.syncs.load(), 1u);  // one fdatasync of the backing file
  EXPECT_EQ(m.flush_errors.load(), 0u);
  vm->reset();
  std::vector<uint8_t> now = ReadFile(image_);
  ASSERT_EQ(now.size(), original_.size());
  for (uint64_t i = 0; i < 512; ++i) {
    uint64_t w;
    std::memcpy(&w, &now[8192 + 8 * i], 8);
    ASSERT_EQ(w, 0x706d656d00000000ull | (8192 + 8 * i)) << i;
  }
  EXPECT_TRUE(std::equal(now.begin(), now.begin() + 8192, original_.begin()));
  EXPECT_TRUE(std::equal(now.begin() + 12288, now.end(), original_.begin() + 12288));
}

TEST_F(PmemTest, BlkReadReportsTheSameChecksum) {
  VmConfig c = Config("blk-read", true);
  c.devices = {devices::BlkSpec::Make(image_, true)};
  c.mem_mib = 64;
  auto vm = Vm::Create(c);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  VmStats stats = (*vm)->Wait();
  ASSERT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  auto result = FirstReportOf((*vm)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("checksum"), absl::StrFormat("0x%x", WordSum(original_)));
}

TEST_F(PmemTest, MissingOrEmptyImageFailsVmRunWithOneLine) {
  const std::string empty = dir_.path() + "/empty.img";
  std::ofstream(empty).close();
  const std::string missing = dir_.path() + "/missing.img";
  for (const auto& [arg, path] : {std::pair{missing + ",ro", missing}, std::pair{empty, empty}}) {
    auto r = dsec::testing::RunCommand({dsec::testing::VmmBinaryPath(), "vm", "run", "--pmem",
                                        arg, "--console", "none", "--timeout-ms", "10000"});
    EXPECT_EQ(r.exit_status, 2) << arg << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("pmem " + path), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace dsec::vm
