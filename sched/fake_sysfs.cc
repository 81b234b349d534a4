// SPDX-License-Identifier: Apache-2.0
#include "sched/fake_sysfs.h"

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "sched/cpu_list.h"
#include "base/status.h"

namespace dsec::sched::testing {

TempDir::TempDir() {
  char tmpl[] = "/tmp/dsec-sched-test-XXXXXX";
  DSEC_CHECK(::mkdtemp(tmpl) != nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() {
  ::nftw(
      path_.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

void WriteFile(const std::string& root, const std::string& rel, const std::string& text) {
  std::string path = root + "/" + rel;
  for (size_t pos = root.size() + 1; (pos = path.find('/', pos)) != std::string::npos; ++pos) {
    ::mkdir(path.substr(0, pos).c_str(), 0755);
  }
  std::ofstream out(path);
  out << text;
  DSEC_CHECK(out.good());
}

void WriteFakeSysfs(const std::string& root, const FakeMachine& m) {
  const int cores = m.packages * m.cores_per_package;
  std::vector<int> online;
  for (int cpu = 0; cpu < m.TotalCpus(); ++cpu) {
    if (std::find(m.offline.begin(), m.offline.end(), cpu) == m.offline.end()) {
      online.push_back(cpu);
    }
  }
  const std::string cpu_dir = "sys/devices/system/cpu";
  WriteFile(root, cpu_dir + "/online", FormatCpuList(online) + "\n");
  WriteFile(root, cpu_dir + "/possible", absl::StrCat("0-", m.TotalCpus() - 1, "\n"));
  WriteFile(root, cpu_dir + "/isolated", FormatCpuList(m.isolated) + "\n");
  std::vector<std::vector<int>> node_cpus(static_cast<size_t>(m.nodes));
  for (int cpu = 0; cpu < m.TotalCpus(); ++cpu) {
    const int core = cpu % cores;
    const int package = core / m.cores_per_package;
    const bool is_online = std::binary_search(online.begin(), online.end(), cpu);
    const std::string dir = absl::StrCat(cpu_dir, "/cpu", cpu);
    if (cpu != 0) WriteFile(root, dir + "/online", is_online ? "1\n" : "0\n");
    // The kernel removes an offline CPU's topology directory.
    if (!is_online) continue;
    std::vector<int> siblings;
    for (int t = 0; t < m.threads_per_core; ++t) siblings.push_back(core + t * cores);
    WriteFile(root, dir + "/topology/core_id", absl::StrCat(core % m.cores_per_package, "\n"));
    WriteFile(root, dir + "/topology/physical_package_id", absl::StrCat(package, "\n"));
    WriteFile(root, dir + "/topology/thread_siblings_list", FormatCpuList(siblings) + "\n");
    node_cpus[static_cast<size_t>(package % m.nodes)].push_back(cpu);
  }
  if (!m.numa_dir) return;
  std::vector<int> all_nodes;
  for (int n = 0; n < m.nodes; ++n) {
    all_nodes.push_back(n);
    WriteFile(root, absl::StrCat("sys/devices/system/node/node", n, "/cpulist"),
              FormatCpuList(node_cpus[static_cast<size_t>(n)]) + "\n");
  }
  WriteFile(root, "sys/devices/system/node/online", FormatCpuList(all_nodes) + "\n");
  WriteFile(root, "sys/devices/system/node/has_memory", FormatCpuList(all_nodes) + "\n");
}

}  // namespace dsec::sched::testing
