// SPDX-License-Identifier: Apache-2.0
#include "sched/topology.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sched/cpu_list.h"
#include "base/file_io.h"
#include "base/status.h"

namespace dsec::sched {

namespace {

// Any failure to read a file the topology needs is a broken or partial tree
// from the caller's point of view: InvalidArgument, with the file named.
absl::StatusOr<std::string> ReadRequired(const std::string& path) {
  auto text = ReadSmallFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("incomplete sysfs: cannot read ", path, ": ", text.status().message()));
  }
  return text;
}

absl::StatusOr<std::vector<int>> ReadCpuListFile(const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(std::string text, ReadRequired(path));
  auto cpus = ParseCpuList(text);
  if (!cpus.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", cpus.status().message()));
  return cpus;
}

absl::StatusOr<int> ReadIntFile(const std::string& path) {
  DSEC_ASSIGN_OR_RETURN(std::string text, ReadRequired(path));
  DSEC_ASSIGN_OR_RETURN(long long value, ParseIntFile(path, text));
  // -1 is what the kernel reports where an architecture has no such level.
  if (value < -1 || value > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": value ", value, " out of range"));
  }
  return static_cast<int>(value);
}

std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// "node12" -> 12; -1 for anything else (has_cpu, possible, power, ...).
int NodeNumber(const std::string& name) {
  if (name.size() < 5 || name.compare(0, 4, "node") != 0) return -1;
  int n = 0;
  for (size_t i = 4; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || n > kMaxCpuNumber) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

}  // namespace

absl::StatusOr<Topology> Topology::Read(const std::string& root) {
  std::string prefix = root;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const std::string cpu_dir = prefix + "/sys/devices/system/cpu";
  const std::string node_dir = prefix + "/sys/devices/system/node";

  Topology t;
  DSEC_ASSIGN_OR_RETURN(t.online_, ReadCpuListFile(cpu_dir + "/online"));
  if (t.online_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(cpu_dir, "/online: no online CPUs"));
  }

  // Per-CPU topology files; siblings are restricted to online CPUs because
  // an offline sibling cannot run anything and cannot be pinned to.
  std::map<int, std::vector<int>> siblings;
  for (int cpu : t.online_) {
    const std::string dir = absl::StrCat(cpu_dir, "/cpu", cpu, "/topology");
    CpuInfo info;
    info.cpu = cpu;
    DSEC_ASSIGN_OR_RETURN(info.core_id, ReadIntFile(dir + "/core_id"));
    DSEC_ASSIGN_OR_RETURN(info.package_id, ReadIntFile(dir + "/physical_package_id"));
    DSEC_ASSIGN_OR_RETURN(std::vector<int> list, ReadCpuListFile(dir + "/thread_siblings_list"));
    list = Intersect(list, t.online_);
    if (!std::binary_search(list.begin(), list.end(), cpu)) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, "/thread_siblings_list: does not contain cpu", cpu, " itself"));
    }
    siblings[cpu] = std::move(list);
    t.cpus_.push_back(info);
  }

  // Group CPUs into physical cores. Sibling lists must agree pairwise,
  // otherwise "whole core" would mean different things per CPU.
  std::map<int, int> core_of;  // cpu -> core index
  for (const CpuInfo& info : t.cpus_) {
    if (core_of.count(info.cpu)) continue;
    const std::vector<int>& group = siblings[info.cpu];
    PhysicalCore core;
    core.index = static_cast<int>(t.cores_.size());
    core.package_id = info.package_id;
    core.core_id = info.core_id;
    core.cpus = group;
    for (int sib : group) {
      const CpuInfo* other = t.Find(sib);
      if (siblings[sib] != group || core_of.count(sib) || other->package_id != info.package_id) {
        return absl::InvalidArgumentError(absl::StrCat(
            cpu_dir, "/cpu", sib, "/topology/thread_siblings_list: \"",
            FormatCpuList(siblings[sib]), "\" disagrees with cpu", info.cpu, "'s \"",
            FormatCpuList(group), "\" (or the package ids differ)"));
      }
      core_of[sib] = core.index;
    }
    t.cores_.push_back(std::move(core));
  }
  for (CpuInfo& info : t.cpus_) info.core = core_of[info.cpu];

  // NUMA. A kernel without CONFIG_NUMA has no node directory: one node 0.
  if (!PathExists(node_dir)) {
    t.nodes_[0] = t.online_;
    t.memory_nodes_ = {0};
  } else {
    DSEC_ASSIGN_OR_RETURN(std::vector<std::string> entries, ListDirectory(node_dir));
    for (const std::string& name : entries) {
      int node = NodeNumber(name);
      if (node < 0) continue;
      DSEC_ASSIGN_OR_RETURN(std::vector<int> list,
                            ReadCpuListFile(absl::StrCat(node_dir, "/", name, "/cpulist")));
      t.nodes_[node] = Intersect(list, t.online_);
    }
    if (t.nodes_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(node_dir, ": no node<N> directories"));
    }
    if (PathExists(node_dir + "/has_memory")) {
      DSEC_ASSIGN_OR_RETURN(t.memory_nodes_, ReadCpuListFile(node_dir + "/has_memory"));
    } else {
      for (const auto& [node, cpus] : t.nodes_) t.memory_nodes_.push_back(node);
    }
  }
  std::map<int, int> node_of;
  for (const auto& [node, cpus] : t.nodes_) {
    for (int cpu : cpus) {
      if (!node_of.emplace(cpu, node).second) {
        return absl::InvalidArgumentError(absl::StrCat(node_dir, "/node", node, "/cpulist: cpu",
                                                       cpu, " is also in node", node_of[cpu]));
      }
    }
  }
  for (CpuInfo& info : t.cpus_) {
    auto it = node_of.find(info.cpu);
    if (it == node_of.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_dir, ": online cpu", info.cpu, " is in no node's cpulist"));
    }
    info.node = it->second;
  }
  for (PhysicalCore& core : t.cores_) {
    core.node = t.Find(core.cpus.front())->node;
    for (int cpu : core.cpus) {
      if (t.Find(cpu)->node != core.node) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_dir, ": SMT siblings ", FormatCpuList(core.cpus), " span NUMA nodes"));
      }
    }
  }

  // Older kernels lack the file; that means nothing is isolated.
  const std::string isolated_path = cpu_dir + "/isolated";
  if (PathExists(isolated_path)) {
    DSEC_ASSIGN_OR_RETURN(std::vector<int> isolated, ReadCpuListFile(isolated_path));
    t.isolated_ = Intersect(isolated, t.online_);
  }
  return t;
}

const CpuInfo* Topology::Find(int cpu) const {
  auto it = std::lower_bound(online_.begin(), online_.end(), cpu);
  if (it == online_.end() || *it != cpu) return nullptr;
  return &cpus_[static_cast<size_t>(it - online_.begin())];
}

bool Topology::smt() const {
  return std::any_of(cores_.begin(), cores_.end(),
                     [](const PhysicalCore& c) { return c.cpus.size() > 1; });
}

std::string Topology::Describe() const {
  std::set<int> packages;
  for (const PhysicalCore& c : cores_) packages.insert(c.package_id);
  return absl::StrCat("cpus=", FormatCpuList(online_), " cores=", cores_.size(),
                      " packages=", packages.size(), " nodes=", nodes_.size(),
                      " smt=", smt() ? "yes" : "no", " isolated=", FormatCpuList(isolated_));
}

}  // namespace dsec::sched
