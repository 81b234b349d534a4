// SPDX-License-Identifier: Apache-2.0
// Pure parts of sandbox/microvm: the monitor's argv and kernel command
// line, the jail's mount plan, the CPL0 probe's report parsing.
#include <sys/mount.h>
#include <sys/wait.h>

#include <algorithm>
#include <set>

#include "gtest/gtest.h"
#include "sandbox/microvm/cpl0_probe.h"
#include "sandbox/microvm/jail.h"
#include "sandbox/microvm/vm_launcher.h"
#include "sandbox/microvm/vm_process.h"

namespace dsec::microvm {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(LinuxCmdline, NamesRootImageLayersUpperAndPort) {
  EXPECT_EQ(LinuxCmdline(2, 128, 1024, "quiet"),
            "console=ttyS0 root=/dev/pmem0 rootfstype=erofs ro dsec.layers=/dev/pmem1,/dev/pmem2 "
            "dsec.upper=tmpfs:128 dsec.port=1024 quiet");
  EXPECT_EQ(LinuxCmdline(0, 64, 7), "console=ttyS0 root=/dev/pmem0 rootfstype=erofs ro dsec.upper=tmpfs:64 dsec.port=7");
}

TEST(VmArgv, ConfigFileCarriesEveryDeviceAndFile) {
  VmPlan plan;
  plan.monitor_binary = "/b/dsec-monitor";
  plan.kernel = "/k/vmlinux";
  plan.cmdline = "console=ttyS0";
  plan.pmems = {"/i/root.erofs", "/i/base.erofs"};
  plan.mem_mib = 300;
  plan.vcpus = 2;
  plan.qos = "ls";
  plan.console_cap_bytes = 4096;
  plan.timeout_ms = 9000;
  VmFiles f = VmFilesIn("/run/x/sb-1");
  EXPECT_EQ(VmArgv(plan, f),
            (std::vector<std::string>{"/b/dsec-monitor", "--config", "/run/x/sb-1/vm/config.json"}));
  // What the file holds, read back the way the monitor reads it.
  nlohmann::json j = monitor::MonitorOptionsToJson(VmMonitorOptions(plan, f));
  auto o = monitor::MonitorOptionsFromJson(j);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config.kernel_path, "/k/vmlinux");
  EXPECT_EQ(o->config.cmdline, "console=ttyS0");
  EXPECT_EQ(o->config.mem_mib, 300u);
  EXPECT_EQ(o->config.vcpus, 2u);
  ASSERT_TRUE(o->config.qos.has_value());
  EXPECT_EQ(o->config.timeout_ms, 9000u);
  EXPECT_EQ(o->config.console.path, "/run/x/sb-1/vm/console.log");
  EXPECT_EQ(o->config.console.cap_bytes, 4096u);
  ASSERT_EQ(j["devices"].size(), 4u);
  EXPECT_EQ(j["devices"][0], (nlohmann::json{{"type", "pmem"}, {"path", "/i/root.erofs"}, {"read_only", true}}));
  EXPECT_EQ(j["devices"][1]["path"], "/i/base.erofs");
  EXPECT_EQ(j["devices"][2], (nlohmann::json{{"type", "vsock"}, {"guest_cid", 3}, {"socket", "/run/x/sb-1/vm/vsock.sock"}}));
  EXPECT_EQ(j["devices"][3]["type"], "balloon");
  EXPECT_EQ(o->control, "/run/x/sb-1/vm/control.sock");
  EXPECT_EQ(o->stats_json, "/run/x/sb-1/vm/stats.json");
  EXPECT_EQ(o->log_level, "warn");
}

TEST(VmArgv, ANetworkIsANicOnTheInheritedTapAndDsecNet) {
  VmPlan plan;
  plan.kernel = "/k/vmlinux";
  plan.tap_fd = 17;
  plan.mac = "02:00:0a:c9:00:02";
  nlohmann::json j = monitor::MonitorOptionsToJson(VmMonitorOptions(plan, VmFilesIn("/run/x/sb-2")));
  ASSERT_TRUE(monitor::MonitorOptionsFromJson(j).ok());
  ASSERT_FALSE(j["devices"].empty());
  EXPECT_EQ(j["devices"].back(),
            (nlohmann::json{{"type", "net"}, {"tap_fd", 17}, {"mac", "02:00:0a:c9:00:02"}}));
  LaunchNetwork net{"ds0ac90002", 17, "02:00:0a:c9:00:02", "10.201.0.2/16", "10.201.0.1"};
  EXPECT_EQ(NetCmdlineParameter(net), "dsec.net=10.201.0.2/16,10.201.0.1");
}

TEST(VmJailSteps, BindsOnlyWhatTheMonitorNeedsThenPivots) {
  VmPlan plan;
  plan.monitor_binary = "/b/dsec-monitor";
  plan.kernel = "/k/vmlinux";
  plan.pmems = {"/i/root.erofs", "/i/root.erofs"};
  VmFiles f = VmFilesIn("/s/sb-1");
  std::vector<MountStep> steps = VmJailSteps(plan, f, false);
  std::vector<std::string> binds;
  int pivots = 0;
  size_t pivot_at = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const MountStep& s = steps[i];
    if (s.kind == MountStep::Kind::kMount && (s.flags & MS_BIND) && !(s.flags & MS_REMOUNT)) {
      binds.push_back(s.source + " -> " + s.target);
    }
    if (s.kind == MountStep::Kind::kPivot) {
      ++pivots;
      pivot_at = i;
      EXPECT_EQ(s.target, "/s/sb-1/jail");
    }
    EXPECT_NE(s.target, "/s/sb-1/jail/sys/fs/cgroup") << "no cgroup tree without --qos";
    EXPECT_NE(s.target, "/s/sb-1/jail/usr") << "a static monitor needs no /usr";
  }
  EXPECT_EQ(pivots, 1);
  EXPECT_GT(pivot_at, 0u);
  EXPECT_TRUE(Contains(binds, "/dev/kvm -> /s/sb-1/jail/dev/kvm"));
  EXPECT_TRUE(Contains(binds, "/b/dsec-monitor -> /s/sb-1/jail/b/dsec-monitor"));
  EXPECT_TRUE(Contains(binds, "/k/vmlinux -> /s/sb-1/jail/k/vmlinux"));
  EXPECT_TRUE(Contains(binds, "/s/sb-1/vm -> /s/sb-1/jail/s/sb-1/vm"));
  EXPECT_EQ(std::count(binds.begin(), binds.end(), "/i/root.erofs -> /s/sb-1/jail/i/root.erofs"), 1)
      << "an image used twice is bound once";
  // The last step makes the new root read-only.
  EXPECT_EQ(steps.back().target, "/");
  EXPECT_TRUE(steps.back().flags & MS_RDONLY);

  plan.qos = "be";
  bool cgroup = false, usr = false;
  for (const MountStep& s : VmJailSteps(plan, f, true)) {
    cgroup |= s.target == "/s/sb-1/jail/sys/fs/cgroup";
    usr |= s.target == "/s/sb-1/jail/usr";
  }
  EXPECT_TRUE(cgroup);
  EXPECT_TRUE(usr);
}

TEST(MkdirAllSteps, MakesEveryComponentBelowTheRoot) {
  std::vector<MountStep> s = MkdirAllSteps("/j", "/a/b/c");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].target, "/j/a");
  EXPECT_EQ(s[2].target, "/j/a/b/c");
}

TEST(DescribeWaitStatus, NamesExitAndSignal) {
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(2, 0)), "exited with status 2");
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(0, 9)), "killed by signal 9");
}

TEST(Cpl0Probe, ParsesTheTestGuestReport) {
  auto p = ParseCpl0ProbeOutput(
      "testguest: cpus count=1\n"
      "testguest: result workload=cpl0-probe iterations=20000 cpl3_cycles=12688 ucall_cycles=104702 "
      "cpl0_cycles=58000000\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->iterations, 20000u);
  EXPECT_EQ(p->cpl3_cycles, 12688u);
  EXPECT_EQ(p->ucall_cycles, 104702u);
  EXPECT_EQ(p->cpl0_cycles, 58000000u);
  EXPECT_DOUBLE_EQ(p->cycles_per_round(), 2900);
  EXPECT_TRUE(p->emulated());
  EXPECT_EQ(EmulatedCpl0Reason(*p),
            "microvm tier: guest kernel code is emulated on this host (PVM): 2900 cycles per CPL0 "
            "loop round; a Linux guest needs hardware virtualisation (HOST.md)");
}

TEST(Cpl0Probe, HardwareVirtualisationIsNotEmulated) {
  auto p = ParseCpl0ProbeOutput(
      "result workload=cpl0-probe iterations=20000 cpl3_cycles=20000 ucall_cycles=900 cpl0_cycles=41000");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->emulated());
}

TEST(Cpl0Probe, RejectsMissingOrMalformedReports) {
  EXPECT_TRUE(absl::IsNotFound(ParseCpl0ProbeOutput("testguest: result workload=spin").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParseCpl0ProbeOutput("result workload=cpl0-probe iterations=0 cpl3_cycles=1 ucall_cycles=1 cpl0_cycles=1")
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ParseCpl0ProbeOutput("result workload=cpl0-probe iterations=5 cpl3_cycles=x").status()));
}

}  // namespace
TEST(UidPool, LeasesDistinctIdsRoundRobinAndReleasesThem) {
  UidPool pool(5000, 3);
  auto a = pool.Acquire();
  auto b = pool.Acquire();
  auto c = pool.Acquire();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::set<uint32_t> ids = {(*a)->uid(), (*b)->uid(), (*c)->uid()};
  EXPECT_EQ(ids, (std::set<uint32_t>{5000, 5001, 5002}));
  EXPECT_EQ(pool.leased(), 3u);
  auto full = pool.Acquire();
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  const uint32_t freed = (*b)->uid();
  b->reset();
  EXPECT_EQ(pool.leased(), 2u);
  auto again = pool.Acquire();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->uid(), freed);  // the only free one
  a->reset();
  c->reset();
  again->reset();
  EXPECT_EQ(pool.leased(), 0u);
  // Round robin: the next lease is not the one just released.
  auto x = pool.Acquire();
  ASSERT_TRUE(x.ok());
  const uint32_t first = (*x)->uid();
  x->reset();
  auto y = pool.Acquire();
  ASSERT_TRUE(y.ok());
  EXPECT_NE((*y)->uid(), first);
}

}  // namespace dsec::microvm
