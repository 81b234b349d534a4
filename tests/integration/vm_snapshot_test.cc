// SPDX-License-Identifier: Apache-2.0
// microVM snapshots on real KVM (vmm/vm/vm_snapshot.cc): the test guest's
// `snap` workload (4 MiB of xorshift data summed every 10 ticks, a tick
// counter in registers and on the stack) is paused, saved, and restored into
// new VMs. Checked: the restored state equals the saved one (registers,
// memory, devices) before it runs; the restored guest goes on from the tick
// it was at with its data intact and ends as the original would; clones
// restored from one snapshot are independent and leave the snapshot
// unchanged; and snapshots that are damaged, hostile, or from a CPU with
// features this host lacks are refused before anything runs.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "tests/integration/test_support.h"
#include "vmm/snapshot/snapshot_format.h"
#include "devices/balloon/balloon_control.h"
#include "vmm/vm/virtio_devices.h"
#include "vmm/vm/vm.h"
#include "vmm/vm/vm_config_json.h"

namespace dsec::vm {
namespace {


std::string ReadAll(const std::string& path);

class VmSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = dsec::testing::KvmUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
    char tmpl[] = "/tmp/dsec-snapshot-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    if (!root_.empty()) {
      std::string cmd = "rm -rf '" + root_ + "'";
      (void)std::system(cmd.c_str());
    }
  }
  VmConfig Config(const std::string& workload) {
    VmConfig c;
    c.kernel_path = dsec::testing::TestGuestPath();
    c.cmdline = "testguest.run=" + workload;
    c.mem_mib = 64;
    c.console.kind = ConsoleConfig::Kind::kNone;
    c.timeout_ms = 120'000;
    return c;
  }
  // A fresh directory under the test's root.
  std::string Dir(const std::string& name) {
    std::string d = root_ + "/" + name;
    EXPECT_EQ(::mkdir(d.c_str(), 0700), 0) << d;
    return d;
  }
  // Runs `snap:TICKS` until it reported tick `at` or later, pauses it and
  // saves it into `dir`. Returns the VM (paused), or null on failure.
  std::unique_ptr<Vm> RunAndSnapshot(const std::string& dir, int ticks, int at,
                                     uint64_t* tick_at_snapshot) {
    auto vm = Vm::Create(Config(absl::StrCat("snap:", ticks)));
    EXPECT_TRUE(vm.ok()) << vm.status();
    if (!vm.ok()) return nullptr;
    EXPECT_TRUE((*vm)->Start().ok());
    const bool reached = WaitFor(
        **vm, [&] { return LastTick((*vm)->TestMessages()) >= static_cast<uint64_t>(at); },
                                 60'000);
    EXPECT_TRUE(reached) << "the guest did not reach tick " << at;
    if (!reached) return nullptr;
    EXPECT_TRUE((*vm)->Pause().ok());
    *tick_at_snapshot = LastTick((*vm)->TestMessages());
    ScopedFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    absl::StatusOr<SnapshotResult> r = (*vm)->SaveSnapshot(dfd.get());
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return nullptr;
    EXPECT_EQ(r->memory_bytes, 64ull << 20);
    // The guest wrote its 4 MiB buffer, page tables and its image: some
    // data, far less than all of RAM (untouched pages stay holes).
    EXPECT_GE(r->memory_bytes_written, 4ull << 20);
    EXPECT_LT(r->memory_bytes_written, 64ull << 20);
    return std::move(*vm);
  }

  template <typename Pred>
  static bool WaitFor(Vm& vm, Pred pred, int deadline_ms) {
    const int64_t end = MonotonicNowNs() + int64_t{deadline_ms} * 1'000'000;
    while (!pred()) {
      if (MonotonicNowNs() >= end) return false;
      pollfd p{vm.stop_requested_fd(), POLLIN, 0};
      ::poll(&p, 1, 5);
    }
    return true;
  }
  // The highest "snap tick=K" reported so far (0: none).
  static uint64_t LastTick(const std::vector<std::string>& messages) {
    uint64_t last = 0;
    for (const std::string& line : messages) {
      if (line.rfind("snap tick=", 0) != 0) continue;
      uint64_t k = 0;
      if (absl::SimpleAtoi(dsec::testing::ParseReport(line).Get("tick"), &k)) {
        last = std::max(last, k);
      }
    }
    return last;
  }

  // Config(workload) with `devices` (the JSON form), created and started.
  absl::StatusOr<std::unique_ptr<Vm>> StartWith(const std::string& workload,
                                                nlohmann::json devices) {
    nlohmann::json j = VmConfigToJson(Config(workload));
    j["devices"] = std::move(devices);
    DSEC_ASSIGN_OR_RETURN(VmConfig config, VmConfigFromJson(j));
    DSEC_ASSIGN_OR_RETURN(std::unique_ptr<Vm> vm, Vm::Create(config));
    DSEC_RETURN_IF_ERROR(vm->Start());
    return vm;
  }
  // Stops `vm` (its snapshot taken) and reads the manifest in `dir`.
  static absl::StatusOr<snapshot::Manifest> StopAndRead(Vm& vm, const std::string& dir) {
    vm.RequestStop(StopReason::kHostRequest, "test: snapshot taken");
    vm.Wait();
    return snapshot::ParseManifest(ReadAll(dir + "/manifest.json"));
  }
  // Pauses `vm` and saves it into `dir`.
  static absl::StatusOr<SnapshotResult> PauseAndSave(Vm& vm, const std::string& dir) {
    DSEC_RETURN_IF_ERROR(vm.Pause());
    ScopedFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return vm.SaveSnapshot(dfd.get());
  }
  static bool HasLine(const Vm& vm, const std::string& prefix) {
    for (const std::string& m : vm.TestMessages()) {
      if (m.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
  static VmConfig Host(uint64_t timeout_ms = 120'000) {
    VmConfig host;
    host.console.kind = ConsoleConfig::Kind::kNone;
    host.timeout_ms = timeout_ms;
    return host;
  }

  std::string root_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteManifest(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/manifest.json";
  ::chmod(path.c_str(), 0600);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

TEST_F(VmSnapshotTest, RestoredStateEqualsTheSavedOneAndTheGuestGoesOn) {
  const std::string dir = Dir("snap");
  uint64_t at = 0;
  std::unique_ptr<Vm> original = RunAndSnapshot(dir, 300, 30, &at);
  ASSERT_NE(original, nullptr);
  // What was saved (the paused original's PIT still raises ticks into its
  // irqchip: its state now is not the snapshot's).
  absl::StatusOr<snapshot::Manifest> saved =
      snapshot::ParseManifest(ReadAll(dir + "/manifest.json"));
  ASSERT_TRUE(saved.ok()) << saved.status();

  const VmConfig host = Host(120'000);
  absl::StatusOr<std::unique_ptr<Vm>> restored = Vm::Restore(dir, host);
  ASSERT_TRUE(restored.ok()) << restored.status();

  // Before it runs, the restored VM holds what was saved.
  absl::StatusOr<snapshot::Manifest> now = (*restored)->CaptureState();
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_EQ(now->vcpus.size(), saved->vcpus.size());
  for (size_t i = 0; i < saved->vcpus.size(); ++i) {
    const snapshot::VcpuState& a = saved->vcpus[i];
    const snapshot::VcpuState& b = now->vcpus[i];
    EXPECT_EQ(std::memcmp(&a.regs, &b.regs, sizeof(a.regs)), 0) << "vcpu " << i << " registers";
    EXPECT_EQ(std::memcmp(&a.sregs, &b.sregs, sizeof(a.sregs)), 0)
        << "vcpu " << i << " special registers";
    EXPECT_EQ(std::memcmp(a.fpu.bytes, b.fpu.bytes, sizeof(a.fpu.bytes)), 0) << "vcpu " << i;
    EXPECT_EQ(a.mp_state, b.mp_state);
    EXPECT_EQ(a.cpuid.size(), b.cpuid.size());
    // Every MSR reads back as saved but the counters, which count on from
    // the saved value: the time stamp counter, and where KVM lists them
    // (KVM with SVM/VMX, as in the nested bed) Hyper-V's vCPU run time
    // (the vCPU thread's run time plus an offset the restore set) and
    // reference time counter (from the KVM clock).
    for (const kvm::MsrEntry& m : a.msrs) {
      // IA32_TSC, HV_X64_MSR_VP_RUNTIME, HV_X64_MSR_TIME_REF_COUNT
      const bool counter = m.index == 0x10 || m.index == 0x40000010 || m.index == 0x40000020;
      for (const kvm::MsrEntry& n : b.msrs) {
        if (n.index != m.index) continue;
        if (counter) {
          EXPECT_GE(n.data, m.data) << "counter MSR 0x" << std::hex << m.index << " went back";
        } else {
          EXPECT_EQ(n.data, m.data) << "MSR 0x" << std::hex << m.index;
        }
      }
    }
  }
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(std::memcmp(saved->irqchips[c].bytes, now->irqchips[c].bytes,
                          sizeof(saved->irqchips[c].bytes)),
              0)
        << "irqchip " << c;
  }
  // Device state, but for the PIT's elapsed run time (the clock runs on).
  auto without_time = [](nlohmann::json d) {
    for (auto& c : d["pit"]["counters"]) c.erase("run_ns");
    return d;
  };
  EXPECT_EQ(without_time(saved->devices), without_time(now->devices));
  // Guest RAM, byte for byte.
  const auto a = original->memory().regions();
  const auto b = (*restored)->memory().regions();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size, b[i].size);
    EXPECT_EQ(std::memcmp(a[i].host, b[i].host, a[i].size), 0) << "RAM region " << i;
  }
  original->RequestStop(StopReason::kHostRequest, "test: snapshot taken");
  original->Wait();
  original.reset();

  // Run: the guest goes on from where it was, with its data intact.
  ASSERT_TRUE((*restored)->Start().ok());
  VmStats stats = (*restored)->Wait();
  const std::vector<std::string> messages = (*restored)->TestMessages();
  std::string all;
  for (const auto& m : messages) all += m + "\n";
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail << "\n" << all;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u) << all;
  int tick_lines = 0;
  for (const std::string& line : messages) {
    EXPECT_NE(line.rfind("snap ready", 0), 0u)
        << "the restored guest started its workload again:\n" << all;
    if (line.rfind("snap tick=", 0) != 0) continue;
    ++tick_lines;
    auto r = dsec::testing::ParseReport(line);
    uint64_t k = 0;
    ASSERT_TRUE(absl::SimpleAtoi(r.Get("tick"), &k)) << all;
    EXPECT_GT(k, at) << "tick " << k << " was reported before the snapshot (at " << at << ")";
    EXPECT_EQ(r.Get("ok"), "1") << all;
  }
  EXPECT_GT(tick_lines, 0) << all;
  auto result = dsec::testing::FirstReportOf(messages, "result");
  ASSERT_TRUE(result.has_value()) << all;
  EXPECT_EQ(result->Get("workload"), "snap");
  EXPECT_EQ(result->Get("ticks"), "300");
  EXPECT_EQ(result->Get("mismatches"), "0");
}

TEST_F(VmSnapshotTest, ClonesAreIndependentAndLeaveTheSnapshotAlone) {
  const std::string dir = Dir("snap");
  uint64_t at = 0;
  std::unique_ptr<Vm> original = RunAndSnapshot(dir, 100, 10, &at);
  ASSERT_NE(original, nullptr);
  original.reset();
  const std::string memory_before = ReadAll(dir + "/memory");
  const VmConfig host = Host(120'000);
  auto a = Vm::Restore(dir, host);
  auto b = Vm::Restore(dir, host);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // A write in one clone is seen by it alone, and not by the file.
  const uint64_t gpa = 60ull << 20;
  const uint64_t marker = 0x636c6f6e65414141ull;
  ASSERT_TRUE((*a)->memory().WriteObj(gpa, marker).ok());
  EXPECT_EQ(*(*a)->memory().ReadObj<uint64_t>(gpa), marker);
  EXPECT_NE(*(*b)->memory().ReadObj<uint64_t>(gpa), marker);
  // Both run to the end on their own.
  ASSERT_TRUE((*a)->Start().ok());
  ASSERT_TRUE((*b)->Start().ok());
  for (std::unique_ptr<Vm>* vm : {&*a, &*b}) {
    VmStats stats = (*vm)->Wait();
    EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
    EXPECT_EQ(stats.stop.guest_exit_code, 0u);
    auto result = dsec::testing::FirstReportOf((*vm)->TestMessages(), "result");
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->Get("mismatches"), "0");
  }
  EXPECT_TRUE(ReadAll(dir + "/memory") == memory_before) << "a clone changed the snapshot file";
  struct stat st;
  ASSERT_EQ(::stat((dir + "/memory").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0400u);
}

TEST_F(VmSnapshotTest, ALazyRestoreGoesOnAndTheNextPrefetchesWhatItTouched) {
  const std::string dir = Dir("snap");
  uint64_t at = 0;
  std::unique_ptr<Vm> original = RunAndSnapshot(dir, 100, 10, &at);
  ASSERT_NE(original, nullptr);
  original.reset();
  const std::string memory_before = ReadAll(dir + "/memory");
  const VmConfig host = Host(120'000);
  RestoreOptions lazy;
  lazy.lazy = true;

  // Guest RAM as the pager fills it is the snapshot's, byte for byte.
  {
    auto c = Vm::Restore(dir, host, lazy);
    if (!c.ok() && absl::IsFailedPrecondition(c.status()) &&
        absl::StrContains(c.status().message(), "userfaultfd")) {
      GTEST_SKIP() << c.status();
    }
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->lazy());
    absl::StatusOr<snapshot::Manifest> m = snapshot::ParseManifest(ReadAll(dir + "/manifest.json"));
    ASSERT_TRUE(m.ok()) << m.status();
    const auto regions = (*c)->memory().regions();
    ASSERT_EQ(regions.size(), m->regions.size());
    for (size_t i = 0; i < regions.size(); ++i) {
      EXPECT_EQ(std::memcmp(regions[i].host, memory_before.data() + m->regions[i].offset,
                            regions[i].size),
                0)
          << "RAM region " << i;
    }
  }

  // The first lazy restore runs to the end; the pages it touched are a
  // part of RAM.
  auto a = Vm::Restore(dir, host, lazy);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Start().ok());
  VmStats first = (*a)->Wait();
  EXPECT_EQ(first.stop.reason, StopReason::kGuestShutdown) << first.stop.detail;
  auto result = dsec::testing::FirstReportOf((*a)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("mismatches"), "0");
  EXPECT_EQ(result->Get("ticks"), "100");
  for (const std::string& line : (*a)->TestMessages()) {
    EXPECT_NE(line.rfind("snap ready", 0), 0u) << "the restored guest started over";
  }
  const std::vector<snapshot::Extent> touched = (*a)->TouchedPages();
  uint64_t touched_bytes = 0;
  for (const snapshot::Extent& e : touched) touched_bytes += e.length;
  EXPECT_GT(first.lazy_faults, 0u);
  EXPECT_EQ(first.lazy_prefetched_pages, 0u);
  EXPECT_EQ(touched_bytes, first.lazy_faults * 4096);
  EXPECT_LT(touched_bytes, 64ull << 20);

  // The next one prefetches them: it faults less, and goes on the same.
  RestoreOptions again = lazy;
  again.prefetch = touched;
  auto b = Vm::Restore(dir, host, again);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->Start().ok());
  VmStats second = (*b)->Wait();
  EXPECT_EQ(second.stop.reason, StopReason::kGuestShutdown) << second.stop.detail;
  result = dsec::testing::FirstReportOf((*b)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->Get("mismatches"), "0");
  EXPECT_EQ(second.lazy_prefetched_pages * 4096, touched_bytes);
  EXPECT_LT(second.lazy_faults, first.lazy_faults)
      << "prefetching " << touched_bytes << " bytes saved no faults";

  // What the clones wrote stayed theirs.
  EXPECT_TRUE(ReadAll(dir + "/memory") == memory_before) << "a lazy clone changed the snapshot file";

  // A snapshot of a lazy clone reads the pages it never touched from the
  // source instead of faulting them in, and restores like any other.
  {
    auto d = Vm::Restore(dir, host, lazy);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE((*d)->Start().ok());
    ASSERT_TRUE((*d)->Pause().ok());
    auto served = [&] {
      uint64_t n = 0;
      for (const snapshot::Extent& e : (*d)->TouchedPages()) n += e.length;
      return n;
    };
    const uint64_t before = served();
    const std::string again_dir = Dir("again");
    ScopedFd dfd(::open(again_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    absl::StatusOr<SnapshotResult> r = (*d)->SaveSnapshot(dfd.get());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(served(), before) << "the snapshot faulted the clone's memory in";
    (*d)->RequestStop(StopReason::kHostRequest, "test: snapshot taken");
    (*d)->Wait();
    auto e = Vm::Restore(again_dir, host);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*e)->Start().ok());
    VmStats es = (*e)->Wait();
    EXPECT_EQ(es.stop.reason, StopReason::kGuestShutdown) << es.stop.detail;
    result = dsec::testing::FirstReportOf((*e)->TestMessages(), "result");
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->Get("mismatches"), "0");
    EXPECT_EQ(result->Get("ticks"), "100");
    for (const std::string& line : (*e)->TestMessages()) {
      EXPECT_NE(line.rfind("snap ready", 0), 0u) << "the guest started over";
    }
  }

  // Prefetch runs are checked: outside RAM, or without a lazy restore.
  RestoreOptions outside = lazy;
  outside.prefetch = {{64ull << 20, 4096}};
  auto refused = Vm::Restore(dir, host, outside);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  RestoreOptions eager;
  eager.prefetch = touched;
  refused = Vm::Restore(dir, host, eager);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
}

// A virtio-rng device rate-limited to 64 KiB/s serves the guest's 256 KiB
// in 4 s: snapshotted in the middle, the driver's queue (a request waiting
// for the rate limit) and the transport go into the snapshot, and the
// restored guest's driver gets the rest of its bytes.
TEST_F(VmSnapshotTest, AVirtioRngMidRequestGoesOnAfterRestore) {
  auto vm = StartWith("rng:262144",
                      {{{"type", "rng"}, {"rate_bytes_per_s", 65536}, {"burst_bytes", 4096}}});
  ASSERT_TRUE(vm.ok()) << vm.status();
  // About a third of the way: the guest is waiting for entropy.
  pollfd p{(*vm)->stop_requested_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 1500), 0) << "the guest ended before the snapshot";
  const std::string dir = Dir("rng");
  absl::StatusOr<SnapshotResult> r = PauseAndSave(**vm, dir);
  ASSERT_TRUE(r.ok()) << r.status();
  // The transport's state is in the snapshot: the driver had set it going.
  absl::StatusOr<snapshot::Manifest> m = StopAndRead(**vm, dir);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->devices["virtio"].size(), 1u);
  EXPECT_EQ(m->devices["virtio"][0]["name"], "virtio-rng0");
  EXPECT_EQ(m->devices["virtio"][0]["state"]["active"], true) << m->devices.dump();
  EXPECT_GT(m->devices["virtio"][0]["state"]["queues"][0]["used_idx"].get<int>(), 0);

  const VmConfig host = Host(120'000);
  auto restored = Vm::Restore(dir, host);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE((*restored)->Start().ok());
  VmStats stats = (*restored)->Wait();
  std::string all;
  for (const auto& line : (*restored)->TestMessages()) all += line + "\n";
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail << "\n" << all;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u) << all;
  auto result = dsec::testing::FirstReportOf((*restored)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value()) << all;
  EXPECT_EQ(result->Get("workload"), "rng");
  EXPECT_EQ(result->Get("bytes"), "262144") << all;
  EXPECT_EQ(result->Get("distinct"), "256") << all;
}

// A vsock device: its connections' host ends are not carried, so the
// restored device tells the guest (TRANSPORT_RESET); the restore gives the
// clone a socket path of its own, and a different guest CID is refused.
TEST_F(VmSnapshotTest, ARestoredVsockResetsTheGuestsConnections) {
  auto vm = StartWith("vsock-echo:5000", {{{"type", "vsock"}, {"guest_cid", 7}, {"socket", root_ + "/v1.sock"}}});
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE(WaitFor(**vm, [&] { return HasLine(**vm, "vsock listening"); }, 60'000)) << "the guest did not listen";
  const std::string dir = Dir("vsock");
  absl::StatusOr<SnapshotResult> r = PauseAndSave(**vm, dir);
  ASSERT_TRUE(r.ok()) << r.status();

  // While the original runs on (its socket in use), a clone with its own.
  const VmConfig host = Host(60'000);
  nlohmann::json other = VmConfigToJson(host);
  other["devices"] = {{{"type", "vsock"}, {"guest_cid", 9}, {"socket", root_ + "/v2.sock"}}};
  absl::StatusOr<VmConfig> wrong_cid = VmConfigFromJson(other);
  ASSERT_TRUE(wrong_cid.ok()) << wrong_cid.status();
  auto refused = Vm::Restore(dir, *wrong_cid);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("guest CID"), std::string::npos) << refused.status();
  other["devices"][0]["guest_cid"] = 7;
  absl::StatusOr<VmConfig> own = VmConfigFromJson(other);
  ASSERT_TRUE(own.ok()) << own.status();
  auto restored = Vm::Restore(dir, *own);
  ASSERT_TRUE(restored.ok()) << restored.status();
  (*vm)->RequestStop(StopReason::kHostRequest, "test: snapshot taken");
  (*vm)->Wait();
  ASSERT_TRUE((*restored)->Start().ok());
  VmStats stats = (*restored)->Wait();
  std::string all;
  for (const auto& line : (*restored)->TestMessages()) all += line + "\n";
  // The guest learnt that its transport was reset, which ends this
  // workload with its error line.
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail << "\n" << all;
  EXPECT_NE(all.find("vsock-transport-reset"), std::string::npos) << all;
}

// A VM with a read-only virtio-pmem layer: restored with the same image it
// runs on; restored with a layer of another size (another placement of the
// window the guest knows), refused naming the device.
TEST_F(VmSnapshotTest, APmemLayerMustBeTheSameAtRestore) {
  auto image = [&](const std::string& name, size_t mib) {
    const std::string path = root_ + "/" + name;
    std::ofstream(path, std::ios::binary) << std::string(mib << 20, 'L');
    return path;
  };
  const std::string layer = image("layer.img", 2);
  auto vm = StartWith("snap:200", {{{"type", "pmem"}, {"path", layer}, {"read_only", true}}});
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE(WaitFor(**vm, [&] { return LastTick((*vm)->TestMessages()) >= 10; }, 60'000));
  ASSERT_TRUE((*vm)->Pause().ok());
  const std::string dir = Dir("pmem");
  ScopedFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE((*vm)->SaveSnapshot(dfd.get()).ok());
  (*vm)->RequestStop(StopReason::kHostRequest, "test: snapshot taken");
  (*vm)->Wait();

  const VmConfig host = Host(60'000);
  nlohmann::json other = VmConfigToJson(host);
  other["devices"] = {{{"type", "pmem"}, {"path", image("bigger.img", 4)}, {"read_only", true}}};
  absl::StatusOr<VmConfig> bigger = VmConfigFromJson(other);
  ASSERT_TRUE(bigger.ok()) << bigger.status();
  auto refused = Vm::Restore(dir, *bigger);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("virtio-pmem"), std::string::npos) << refused.status();

  auto restored = Vm::Restore(dir, host);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE((*restored)->Start().ok());
  VmStats stats = (*restored)->Wait();
  EXPECT_EQ(stats.stop.reason, StopReason::kGuestShutdown) << stats.stop.detail;
  EXPECT_EQ(stats.stop.guest_exit_code, 0u);
}

// A diff snapshot of a clone: only the pages it wrote since its restore,
// its parent named beside it; restored, the chain (full, then the diff) is
// the clone's state; a parent replaced by another snapshot is refused.
TEST_F(VmSnapshotTest, ADiffSnapshotOfACloneHoldsWhatItChangedAndRestores) {
  const std::string base = Dir("base");
  uint64_t at = 0;
  std::unique_ptr<Vm> original = RunAndSnapshot(base, 300, 10, &at);
  ASSERT_NE(original, nullptr);
  original->RequestStop(StopReason::kHostRequest, "test: snapshot taken");
  original->Wait();
  original.reset();

  const VmConfig host = Host(120'000);
  auto clone = Vm::Restore(base, host);
  ASSERT_TRUE(clone.ok()) << clone.status();
  // Not restored: no diff.
  {
    auto fresh = Vm::Create(Config("snap:10"));
    ASSERT_TRUE(fresh.ok());
    const std::string d = Dir("nodiff");
    ScopedFd dfd(::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE((*fresh)->Start().ok());
    ASSERT_TRUE((*fresh)->Pause().ok());
    EXPECT_EQ((*fresh)->SaveSnapshot(dfd.get(), true).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  ASSERT_TRUE((*clone)->Start().ok());
  ASSERT_TRUE(WaitFor(**clone, [&] { return LastTick((*clone)->TestMessages()) >= at + 30; },
                      60'000));
  ASSERT_TRUE((*clone)->Pause().ok());
  const uint64_t at_diff = LastTick((*clone)->TestMessages());
  const std::string diff = Dir("diff1");
  ScopedFd dfd(::open(diff.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  absl::StatusOr<SnapshotResult> r = (*clone)->SaveSnapshot(dfd.get(), true);
  ASSERT_TRUE(r.ok()) << r.status();
  // The clone wrote its stack, tick counter and output lines, not its 4 MiB
  // buffer: far less than the full snapshot's data.
  EXPECT_GT(r->memory_bytes_written, 0u);
  EXPECT_LT(r->memory_bytes_written, 1ull << 20) << "the diff holds pages the clone did not write";
  absl::StatusOr<snapshot::Manifest> m = snapshot::ParseManifest(ReadAll(diff + "/manifest.json"));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->parent.has_value());
  EXPECT_EQ(m->parent->name, "base");
  (*clone)->RequestStop(StopReason::kHostRequest, "test: diff taken");
  (*clone)->Wait();

  auto again = Vm::Restore(diff, host);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Start().ok());
  VmStats stats = (*again)->Wait();
  std::string all;
  for (const auto& line : (*again)->TestMessages()) all += line + "\n";
  EXPECT_EQ(stats.stop.guest_exit_code, 0u) << stats.stop.detail << "\n" << all;
  for (const std::string& line : (*again)->TestMessages()) {
    if (line.rfind("snap tick=", 0) != 0) continue;
    uint64_t k = dsec::testing::ParseReport(line).GetU64("tick");
    EXPECT_GT(k, at_diff) << "restored from the diff, the guest reported tick " << k;
  }
  auto result = dsec::testing::FirstReportOf((*again)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value()) << all;
  EXPECT_EQ(result->Get("mismatches"), "0") << all;

  // Another snapshot under the parent's name: refused.
  const std::string other = Dir("other");
  uint64_t at2 = 0;
  ASSERT_NE(RunAndSnapshot(other, 300, 5, &at2), nullptr);
  ASSERT_EQ(std::system(("rm -rf '" + base + "' && mv '" + other + "' '" + base + "'").c_str()), 0);
  auto refused = Vm::Restore(diff, host);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not the snapshot it was taken from"),
            std::string::npos)
      << refused.status();
}

// A balloon holding 32 MiB of the guest's pages at the snapshot: the
// restored device knows them (the guest deflates them all, none refused),
// and releasing pages of restored RAM drops private copies, never the
// shared snapshot file.
TEST_F(VmSnapshotTest, AnInflatedBalloonIsRestoredWithItsPages) {
  constexpr uint64_t kPages = (32ull << 20) / 4096;
  auto vm = StartWith("balloon-cycle:48", {{{"type", "balloon"}, {"target_mib", 32}}});
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE(WaitFor(**vm, [&] { return HasLine(**vm, "balloon reached"); }, 60'000)) << "the guest did not inflate";
  const std::string dir = Dir("balloon");
  absl::StatusOr<SnapshotResult> r = PauseAndSave(**vm, dir);
  ASSERT_TRUE(r.ok()) << r.status();
  (*vm)->RequestStop(StopReason::kHostRequest, "test: snapshot taken");
  (*vm)->Wait();
  const std::string memory_before = ReadAll(dir + "/memory");

  const VmConfig host = Host(60'000);
  auto restored = Vm::Restore(dir, host);
  ASSERT_TRUE(restored.ok()) << restored.status();
  devices::BalloonControl* balloon = (*restored)->virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(balloon, nullptr);
  EXPECT_EQ(balloon->balloon_pages(), kPages);
  ASSERT_TRUE((*restored)->Start().ok());
  balloon->SetTargetPages(0);
  VmStats stats = (*restored)->Wait();
  std::string all;
  for (const auto& line : (*restored)->TestMessages()) all += line + "\n";
  EXPECT_EQ(stats.stop.guest_exit_code, 0u) << stats.stop.detail << "\n" << all;
  auto result = dsec::testing::FirstReportOf((*restored)->TestMessages(), "result");
  ASSERT_TRUE(result.has_value()) << all;
  EXPECT_EQ(result->GetU64("deflated"), kPages) << all;
  EXPECT_EQ(result->GetU64("retouched"), kPages) << all;
  EXPECT_EQ(balloon->metrics().refused_total(), 0u);
  EXPECT_EQ(balloon->balloon_pages(), 0u);
  EXPECT_TRUE(ReadAll(dir + "/memory") == memory_before) << "the balloon changed the snapshot file";
}

// The balloon keeps the guest's statistics buffer popped between requests:
// the snapshot carries it as held (not a request to wait out), and the
// restored device answers a statistics request with it.
TEST_F(VmSnapshotTest, TheBalloonsHeldStatisticsBufferIsCarried) {
  auto vm = StartWith("idle:0", {{{"type", "balloon"}, {"target_mib", 0}}});
  ASSERT_TRUE(vm.ok()) << vm.status();
  devices::BalloonControl* b = (*vm)->virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(WaitFor(**vm, [&] { return b->GetStats().has_value(); }, 30'000))
      << "no statistics from the guest";
  const std::string dir = Dir("stats");
  absl::StatusOr<SnapshotResult> r = PauseAndSave(**vm, dir);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<snapshot::Manifest> m = StopAndRead(**vm, dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const nlohmann::json& t = m->devices["virtio"][0]["state"];
  EXPECT_EQ(t["queues"][2]["held"], 1) << t.dump();
  EXPECT_FALSE(t["device"]["stats_head"].is_null()) << t.dump();

  const VmConfig host = Host(60'000);
  auto restored = Vm::Restore(dir, host);
  ASSERT_TRUE(restored.ok()) << restored.status();
  devices::BalloonControl* rb = (*restored)->virtio()->Find<devices::BalloonControl>();
  ASSERT_NE(rb, nullptr);
  ASSERT_TRUE((*restored)->Start().ok());
  EXPECT_FALSE(rb->GetStats().has_value());  // samples start again
  rb->RequestStats();
  EXPECT_TRUE(WaitFor(**restored, [&] { return rb->GetStats().has_value(); }, 30'000))
      << "the restored balloon got no statistics";
  (*restored)->RequestStop(StopReason::kHostRequest, "test");
  (*restored)->Wait();
}

TEST_F(VmSnapshotTest, RefusesWhatItCannotSave) {
  // Running (not paused).
  auto vm = Vm::Create(Config("snap:1000"));
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)->Start().ok());
  const std::string dir = Dir("snap");
  ScopedFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  absl::StatusOr<SnapshotResult> r = (*vm)->SaveSnapshot(dfd.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("paused"), std::string::npos) << r.status();
  // A directory that already holds a snapshot: refused, the first intact.
  ASSERT_TRUE((*vm)->Pause().ok());
  ASSERT_TRUE((*vm)->SaveSnapshot(dfd.get()).ok());
  const std::string manifest = ReadAll(dir + "/manifest.json");
  r = (*vm)->SaveSnapshot(dfd.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists) << r.status();
  EXPECT_EQ(ReadAll(dir + "/manifest.json"), manifest);
  (*vm)->RequestStop(StopReason::kHostRequest, "test");
  (*vm)->Wait();
  // The in-kernel PIT's state is not saved: such a VM is refused, named.
  VmConfig kernel_pit = Config("snap:1000");
  kernel_pit.pit = PitChoice::kKernel;
  auto kvm_pit = Vm::Create(kernel_pit);
  ASSERT_TRUE(kvm_pit.ok()) << kvm_pit.status();
  absl::StatusOr<snapshot::Manifest> m = (*kvm_pit)->CaptureState();
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("in-kernel PIT"), std::string::npos) << m.status();
  // A virtio device whose state is not saved yet (a disk): refused, named.
  const std::string disk = root_ + "/disk.img";
  ASSERT_EQ(::truncate(disk.c_str(), 0), -1);  // not there yet
  { std::ofstream(disk, std::ios::binary) << std::string(1 << 20, '\0'); }
  nlohmann::json j = VmConfigToJson(Config("snap:1000"));
  j["devices"] = {{{"type", "disk"}, {"path", disk}, {"read_only", true}}};
  absl::StatusOr<VmConfig> with_disk = VmConfigFromJson(j);
  ASSERT_TRUE(with_disk.ok()) << with_disk.status();
  auto dvm = Vm::Create(*with_disk);
  ASSERT_TRUE(dvm.ok()) << dvm.status();
  m = (*dvm)->CaptureState();
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
  EXPECT_NE(m.status().message().find("virtio-blk0"), std::string::npos) << m.status();
}

TEST_F(VmSnapshotTest, DamagedAndHostileSnapshotsAreRefusedBeforeAnythingRuns) {
  const std::string good = Dir("good");
  uint64_t at = 0;
  ASSERT_NE(RunAndSnapshot(good, 1000, 10, &at), nullptr);
  const std::string manifest = ReadAll(good + "/manifest.json");
  const std::string body = manifest.substr(manifest.find('\n') + 1);
  absl::StatusOr<snapshot::Manifest> parsed = snapshot::ParseManifest(manifest);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  VmConfig host;
  host.console.kind = ConsoleConfig::Kind::kNone;

  // A copy of the good snapshot, with `edit` applied.
  int n = 0;
  auto copy = [&](const std::function<void(const std::string&)>& edit) {
    const std::string d = Dir(absl::StrCat("bad", n++));
    std::string cmd = "cp -a '" + good + "/memory' '" + good + "/manifest.json' '" + d + "/'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    edit(d);
    return d;
  };
  struct Case {
    std::string what;
    std::function<void(const std::string&)> edit;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"a flipped byte",
       [&](const std::string& d) {
         std::string t = manifest;
         t[t.size() / 2] ^= 0x20;
         WriteManifest(d, t);
       },
       absl::StatusCode::kInvalidArgument, "CRC-32"},
      {"a truncated manifest",
       [&](const std::string& d) { WriteManifest(d, manifest.substr(0, manifest.size() / 2)); },
       absl::StatusCode::kInvalidArgument, "truncated"},
      {"another version",
       [&](const std::string& d) {
         std::string t = manifest;
         t.replace(t.find("\"version\":1"), 11, "\"version\":9");
         WriteManifest(d, t);
       },
       absl::StatusCode::kFailedPrecondition, "version 9 is not supported"},
      {"a short memory file",
       [&](const std::string& d) {
         ::chmod((d + "/memory").c_str(), 0600);
         EXPECT_EQ(::truncate((d + "/memory").c_str(), (64ll << 20) - 4096), 0);
       },
       absl::StatusCode::kInvalidArgument, "want a regular file of"},
      {"no memory file",
       [&](const std::string& d) { ::unlink((d + "/memory").c_str()); },
       absl::StatusCode::kNotFound, "memory"},
      {"a region past the file's end",
       [&](const std::string& d) {
         snapshot::Manifest m = *parsed;
         m.regions[0].offset = 1ull << 30;
         m.memory_file_bytes = 2ull << 30;
         WriteManifest(d, snapshot::SerializeManifest(m));
       },
       absl::StatusCode::kInvalidArgument, "memory"},
      {"more vCPU states than the VM has",
       [&](const std::string& d) {
         snapshot::Manifest m = *parsed;
         m.vcpus.push_back(m.vcpus[0]);
         m.vcpus.back().id = 1;
         WriteManifest(d, snapshot::SerializeManifest(m));
       },
       absl::StatusCode::kInvalidArgument, "vCPU states"},
      {"a device the VM does not have",
       [&](const std::string& d) {
         snapshot::Manifest m = *parsed;
         m.devices["gpu"] = nlohmann::json::object();
         WriteManifest(d, snapshot::SerializeManifest(m));
       },
       absl::StatusCode::kInvalidArgument, "gpu"},
      {"a device state out of range",
       [&](const std::string& d) {
         snapshot::Manifest m = *parsed;
         m.devices["pit"]["counters"][0]["mode"] = 9;
         WriteManifest(d, snapshot::SerializeManifest(m));
       },
       absl::StatusCode::kInvalidArgument, "pit.counters[0].mode"},
  };
  for (const Case& c : cases) {
    const std::string d = copy(c.edit);
    absl::StatusOr<std::unique_ptr<Vm>> vm = Vm::Restore(d, host);
    ASSERT_FALSE(vm.ok()) << c.what << " was restored";
    EXPECT_EQ(vm.status().code(), c.code) << c.what << ": " << vm.status();
    EXPECT_NE(vm.status().message().find(c.says), std::string::npos) << c.what << ": "
                                                                        << vm.status();
  }
  // The good one still restores: each case failed for its edit alone.
  EXPECT_TRUE(Vm::Restore(good, host).ok());
}

TEST_F(VmSnapshotTest, CpuFeaturesThisHostLacksAreNamed) {
  const std::string good = Dir("good");
  uint64_t at = 0;
  ASSERT_NE(RunAndSnapshot(good, 1000, 10, &at), nullptr);
  absl::StatusOr<snapshot::Manifest> m = snapshot::ParseManifest(ReadAll(good + "/manifest.json"));
  ASSERT_TRUE(m.ok()) << m.status();
  // A feature bit of leaf 7 EBX that this guest did not see (so this host's
  // KVM does not offer it): claim the guest saw it.
  kvm::CpuidEntry* leaf7 = nullptr;
  for (auto& e : m->vcpus[0].cpuid) {
    if (e.function == 7 && e.index == 0) leaf7 = &e;
  }
  if (leaf7 == nullptr) GTEST_SKIP() << "this host's KVM offers no CPUID leaf 7";
  int bit = -1;
  for (int b = 0; b < 32; ++b) {
    if ((leaf7->ebx & (1u << b)) == 0) {
      bit = b;
      break;
    }
  }
  if (bit < 0) GTEST_SKIP() << "this host offers every leaf-7 EBX feature";
  leaf7->ebx |= 1u << bit;
  const std::string d = Dir("foreign");
  std::string cmd = "cp -a '" + good + "/memory' '" + d + "/'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  WriteManifest(d, snapshot::SerializeManifest(*m));
  VmConfig host;
  host.console.kind = ConsoleConfig::Kind::kNone;
  auto vm = Vm::Restore(d, host);
  ASSERT_FALSE(vm.ok());
  EXPECT_EQ(vm.status().code(), absl::StatusCode::kFailedPrecondition) << vm.status();
  EXPECT_NE(vm.status().message().find(absl::StrCat("leaf 0x7.0 ebx bit ", bit)),
            std::string::npos)
      << vm.status();
}

}  // namespace
}  // namespace dsec::vm
