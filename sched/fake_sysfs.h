// SPDX-License-Identifier: Apache-2.0
// Test support: fake sysfs trees shaped like real machines, in a temporary
// directory that is removed with everything in it.
#pragma once

#include <string>
#include <vector>

namespace dsec::sched::testing {

// A temporary directory, removed recursively on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Creates parent directories as needed and writes `text` to `root`/`rel`.
void WriteFile(const std::string& root, const std::string& rel, const std::string& text);

// The shape of a machine. CPUs are numbered the way x86 Linux enumerates
// them: all first hardware threads of every core (package by package), then
// all second threads, so cpu N and cpu N + packages*cores_per_package are
// siblings (e.g. 2 sockets x 4 cores x SMT-2: cpu0 and cpu8 share a core).
struct FakeMachine {
  int packages = 1;
  int cores_per_package = 2;
  int threads_per_core = 1;
  int nodes = 1;              // NUMA nodes; package p is on node p % nodes
  bool numa_dir = true;       // false: a kernel without CONFIG_NUMA
  std::vector<int> offline = {};   // CPUs listed as offline
  std::vector<int> isolated = {};  // the cpu/isolated file
  int TotalCpus() const { return packages * cores_per_package * threads_per_core; }
};

// Writes <root>/sys/devices/system/{cpu,node} for `machine`.
void WriteFakeSysfs(const std::string& root, const FakeMachine& machine);

}  // namespace dsec::sched::testing
