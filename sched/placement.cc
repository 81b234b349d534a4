// SPDX-License-Identifier: Apache-2.0
#include "sched/placement.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sched/cpu_list.h"

namespace dsec::sched {

std::string_view QosClassName(QosClass qos) {
  return qos == QosClass::kLatencySensitive ? "ls" : "be";
}

absl::StatusOr<QosClass> ParseQosClass(std::string_view name) {
  if (name == "ls") return QosClass::kLatencySensitive;
  if (name == "be") return QosClass::kBestEffort;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown QoS class \"", std::string(name), "\" (expected ls or be)"));
}

absl::StatusOr<std::unique_ptr<PlacementEngine>> PlacementEngine::Create(
    Topology topology, PlacementOptions options) {
  if (options.be_vcpus_per_cpu < 1) {
    return absl::InvalidArgumentError("be_vcpus_per_cpu must be at least 1");
  }
  for (int cpu : options.reserved_cpus) {
    if (topology.Find(cpu) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("reserved cpu", cpu, " is not online"));
    }
  }
  return std::unique_ptr<PlacementEngine>(
      new PlacementEngine(std::move(topology), std::move(options)));
}

PlacementEngine::PlacementEngine(Topology topology, PlacementOptions options)
    : topology_(std::move(topology)), options_(std::move(options)) {
  const std::set<int> reserved(options_.reserved_cpus.begin(), options_.reserved_cpus.end());
  const std::set<int> isolated(topology_.isolated_cpus().begin(),
                               topology_.isolated_cpus().end());
  absl::MutexLock lock(&mu_);
  for (int cpu : topology_.online_cpus()) {
    cpus_[cpu].usable =
        !reserved.count(cpu) && (options_.use_isolated_cpus || !isolated.count(cpu));
  }
}

bool PlacementEngine::CoreFree(const PhysicalCore& core) const {
  return std::all_of(core.cpus.begin(), core.cpus.end(), [&](int cpu) {
    const CpuState& s = cpus_.at(cpu);
    return s.usable && s.ls_owner.empty() && s.be_load == 0;
  });
}

bool PlacementEngine::CoreHasBe(const PhysicalCore& core) const {
  return std::any_of(core.cpus.begin(), core.cpus.end(),
                     [&](int cpu) { return cpus_.at(cpu).be_load > 0; });
}

std::vector<int> PlacementEngine::MemsFor(const std::vector<int>& cpus) const {
  std::set<int> nodes;
  for (int cpu : cpus) nodes.insert(topology_.Find(cpu)->node);
  std::vector<int> mems;
  for (int node : topology_.memory_nodes()) {
    if (nodes.count(node)) mems.push_back(node);
  }
  // CPUs on a memory-less node allocate from other nodes anyway.
  if (mems.empty()) mems = topology_.memory_nodes();
  return mems;
}

absl::StatusOr<Placement> PlacementEngine::Place(const PlacementRequest& request) {
  if (request.vcpus < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sandbox ", request.sandbox, ": vcpus must be at least 1"));
  }
  if (request.sandbox.empty()) return absl::InvalidArgumentError("sandbox id is empty");
  absl::MutexLock lock(&mu_);
  if (placements_.count(request.sandbox)) {
    return absl::AlreadyExistsError(absl::StrCat("sandbox ", request.sandbox, " is already placed"));
  }
  absl::StatusOr<Placement> placement = request.qos == QosClass::kLatencySensitive
                                            ? PlaceLs(request)
                                            : PlaceBe(request);
  uint64_t& counter = request.qos == QosClass::kLatencySensitive
                          ? (placement.ok() ? metrics_.ls_placed : metrics_.ls_refused)
                          : (placement.ok() ? metrics_.be_placed : metrics_.be_refused);
  ++counter;
  if (placement.ok()) placements_[request.sandbox] = *placement;
  return placement;
}

absl::StatusOr<Placement> PlacementEngine::PlaceLs(const PlacementRequest& request) {
  // Free whole cores per node.
  std::map<int, std::vector<const PhysicalCore*>> free_by_node;
  std::vector<const PhysicalCore*> all_free;
  for (const PhysicalCore& core : topology_.cores()) {
    if (!CoreFree(core)) continue;
    free_by_node[core.node].push_back(&core);
    all_free.push_back(&core);
  }
  auto capacity = [](const std::vector<const PhysicalCore*>& cores) {
    size_t n = 0;
    for (const PhysicalCore* c : cores) n += c->cpus.size();
    return n;
  };
  const size_t want = static_cast<size_t>(request.vcpus);
  // Best fit: the node with the least free capacity that still fits the
  // request alone keeps larger nodes whole for larger requests; spanning
  // nodes is the last resort.
  const std::vector<const PhysicalCore*>* source = nullptr;
  for (const auto& [node, cores] : free_by_node) {
    if (capacity(cores) >= want && (source == nullptr || capacity(cores) < capacity(*source))) {
      source = &cores;
    }
  }
  if (source == nullptr) {
    if (capacity(all_free) < want) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "LS sandbox ", request.sandbox, " needs ", request.vcpus,
          " CPUs on whole physical cores; only ", all_free.size(), " free whole cores (",
          capacity(all_free), " CPUs) remain"));
    }
    source = &all_free;
  }
  std::vector<const PhysicalCore*> chosen;
  size_t got = 0;
  for (const PhysicalCore* core : *source) {
    if (got >= want) break;
    chosen.push_back(core);
    got += core->cpus.size();
  }

  Placement p;
  p.sandbox = request.sandbox;
  p.qos = request.qos;
  // vCPUs go to first threads of every chosen core before second threads,
  // so that with spare siblings each vCPU has a core of its own.
  for (size_t t = 0; p.vcpu_cpus.size() < want; ++t) {
    for (const PhysicalCore* core : chosen) {
      if (t < core->cpus.size() && p.vcpu_cpus.size() < want) p.vcpu_cpus.push_back(core->cpus[t]);
    }
  }
  for (const PhysicalCore* core : chosen) {
    for (int cpu : core->cpus) {
      cpus_[cpu].ls_owner = request.sandbox;
      p.cpus.push_back(cpu);
    }
  }
  std::sort(p.cpus.begin(), p.cpus.end());
  p.mems = MemsFor(p.cpus);
  return p;
}

absl::StatusOr<Placement> PlacementEngine::PlaceBe(const PlacementRequest& request) {
  Placement p;
  p.sandbox = request.sandbox;
  p.qos = request.qos;
  const int cores = static_cast<int>(topology_.cores().size());
  for (int v = 0; v < request.vcpus; ++v) {
    // Lower key wins: an idle CPU on a core BE already uses (keeps whole
    // cores free for LS), then an idle CPU on a fresh core taken from the
    // high end (LS takes from the low end, so the two grow apart), then the
    // least loaded CPU.
    std::optional<std::tuple<int, int, int>> best;
    int best_cpu = -1;
    for (const auto& [cpu, state] : cpus_) {
      if (!state.usable || !state.ls_owner.empty() || state.be_load >= options_.be_vcpus_per_cpu) {
        continue;
      }
      const PhysicalCore& core = topology_.cores()[static_cast<size_t>(topology_.Find(cpu)->core)];
      std::tuple<int, int, int> key;
      if (state.be_load == 0 && CoreHasBe(core)) {
        key = {0, 0, cpu};
      } else if (state.be_load == 0) {
        key = {1, cores - core.index, cpu};
      } else {
        key = {2, state.be_load, cpu};
      }
      if (!best || key < *best) {
        best = key;
        best_cpu = cpu;
      }
    }
    if (best_cpu < 0) {
      for (int cpu : p.vcpu_cpus) --cpus_[cpu].be_load;
      return absl::ResourceExhaustedError(absl::StrCat(
          "BE sandbox ", request.sandbox, " needs ", request.vcpus, " vCPU slots; only ", v,
          " remain outside LS cores (", options_.be_vcpus_per_cpu, " per CPU)"));
    }
    ++cpus_[best_cpu].be_load;
    p.vcpu_cpus.push_back(best_cpu);
  }
  p.cpus = p.vcpu_cpus;
  std::sort(p.cpus.begin(), p.cpus.end());
  p.cpus.erase(std::unique(p.cpus.begin(), p.cpus.end()), p.cpus.end());
  p.mems = MemsFor(p.cpus);
  return p;
}

absl::Status PlacementEngine::Release(std::string_view sandbox) {
  absl::MutexLock lock(&mu_);
  auto it = placements_.find(sandbox);
  if (it == placements_.end()) {
    return absl::NotFoundError(absl::StrCat("sandbox ", std::string(sandbox), " is not placed"));
  }
  const Placement& p = it->second;
  if (p.qos == QosClass::kLatencySensitive) {
    for (int cpu : p.cpus) cpus_[cpu].ls_owner.clear();
  } else {
    for (int cpu : p.vcpu_cpus) --cpus_[cpu].be_load;
  }
  placements_.erase(it);
  ++metrics_.released;
  return absl::OkStatus();
}

std::optional<Placement> PlacementEngine::Find(std::string_view sandbox) const {
  absl::MutexLock lock(&mu_);
  auto it = placements_.find(sandbox);
  if (it == placements_.end()) return std::nullopt;
  return it->second;
}

std::vector<Placement> PlacementEngine::Placements() const {
  absl::MutexLock lock(&mu_);
  std::vector<Placement> out;
  for (const auto& [id, p] : placements_) out.push_back(p);
  return out;
}

PlacementMetrics PlacementEngine::metrics() const {
  absl::MutexLock lock(&mu_);
  PlacementMetrics m = metrics_;
  m.ls_cores_in_use = 0;
  m.free_cores = 0;
  for (const PhysicalCore& core : topology_.cores()) {
    if (!cpus_.at(core.cpus.front()).ls_owner.empty()) ++m.ls_cores_in_use;
    if (CoreFree(core)) ++m.free_cores;
  }
  return m;
}

}  // namespace dsec::sched
