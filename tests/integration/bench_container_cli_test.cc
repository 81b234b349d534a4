// SPDX-License-Identifier: Apache-2.0
// Runs the real `dsec-vmm bench container --json` with a few iterations
// (label integration: root, real namespaces, cgroups, mounts and crun).
#include <unistd.h>

#include <string>
#include <vector>

#include "base/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

struct Output {
  int status = -1;
  std::string out;
};

// Runs argv with stdout captured (stderr passes through to the test log).
Output RunArgv(const std::vector<std::string>& argv) {
  Output o;
  dsec::SpawnOptions spawn;
  spawn.argv = argv;
  spawn.in = dsec::Stdio::Inherit();
  spawn.out = dsec::Stdio::Capture();
  spawn.err = dsec::Stdio::Inherit();
  spawn.capture_max_bytes = 16 << 20;
  auto r = dsec::RunSubprocess(spawn);
  if (!r.ok()) return o;
  o.out = std::move(r->out);
  o.status = r->signal == 0 ? r->exit_code : -1;
  return o;
}

std::string MissingPrerequisite() {
  if (::geteuid() != 0) return "needs root";
  if (::access("/usr/bin/crun", X_OK) != 0) return "crun missing (apt-get install crun)";
  if (::access("/bin/busybox", X_OK) != 0 && ::access("/usr/bin/busybox", X_OK) != 0) {
    return "busybox missing (apt-get install busybox-static)";
  }
  if (::access("/usr/bin/mkfs.erofs", X_OK) != 0) return "mkfs.erofs missing (apt-get install erofs-utils)";
  return "";
}

// One test, not two: ctest runs discovered tests in parallel, and a check
// for leftovers machine-wide saw the other test's bench still running (its
// mounts and cgroups), failing CI twice.
TEST(ContainerBenchCli, JsonHasSaneFiguresAndNothingIsLeftBehind) {
  if (std::string why = MissingPrerequisite(); !why.empty()) GTEST_SKIP() << why;
  Output o = RunArgv({DSEC_VMM_BINARY_PATH, "bench", "container", "--json", "--iterations", "5",
                  "--sustained", "6", "--idle", "4"});
  ASSERT_EQ(o.status, 0) << o.out;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(o.out);
  } catch (const nlohmann::json::exception& e) {
    FAIL() << "not JSON: " << e.what() << "\n" << o.out;
  }
  for (const char* key : {"create_exec_p50_ms", "create_exec_p99_ms", "crun_p50_ms", "crun_p99_ms",
                          "per_s", "per_s_serial", "per_s_workers", "idle_kib", "ratio",
                          "cli_p50_ms", "create_p50_ms", "exec_p50_ms", "destroy_p50_ms"}) {
    ASSERT_TRUE(j.contains(key)) << key << " missing in " << o.out;
    ASSERT_TRUE(j[key].is_number()) << key << " is not a number in " << o.out;
  }
  const double p50 = j["create_exec_p50_ms"], p99 = j["create_exec_p99_ms"];
  EXPECT_GT(p50, 0.05);  // a sandbox cannot be made and destroyed in 50 us
  EXPECT_LT(p50, 5000);
  EXPECT_GE(p99, p50);
  const double parts = j["create_p50_ms"].get<double>() + j["exec_p50_ms"].get<double>() +
                       j["destroy_p50_ms"].get<double>();
  EXPECT_GT(parts, 0);
  EXPECT_GT(j["crun_p50_ms"].get<double>(), 0.1);
  EXPECT_GE(j["crun_p99_ms"].get<double>(), j["crun_p50_ms"].get<double>());
  EXPECT_NEAR(j["ratio"].get<double>(), j["crun_p50_ms"].get<double>() / p50, 1e-6);
  const double per_s = j["per_s"];
  EXPECT_GT(per_s, 0);
  EXPECT_EQ(per_s, std::max(j["per_s_serial"].get<double>(), j["per_s_workers"].get<double>()));
  // An idle sandbox holds at least an init process and its kernel objects.
  EXPECT_GT(j["idle_kib"].get<double>(), 4);
  EXPECT_LT(j["idle_kib"].get<double>(), 64 * 1024);
  EXPECT_EQ(j["iterations"], 5);
  Output mounts = RunArgv({"/bin/cat", "/proc/self/mountinfo"});
  EXPECT_EQ(mounts.out.find("dsec-bench-ctr-"), std::string::npos) << mounts.out;
  // This bench's own (dsec-bench-ctr-*, dsec-bench-crun-*): other benches
  // may run beside it.
  Output cg = RunArgv({"/usr/bin/find", "/sys/fs/cgroup", "-maxdepth", "4", "-name", "dsec-bench-c*"});
  EXPECT_EQ(cg.out, "");
  Output ctr = RunArgv({"/usr/bin/find", "/sys/fs/cgroup", "-maxdepth", "6", "-name", "dsec-ctr-b*"});
  EXPECT_EQ(ctr.out, "");
}

}  // namespace
