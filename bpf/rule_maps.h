// SPDX-License-Identifier: Apache-2.0
// Userspace side of egress_rules.bpf.h: adding and removing rules in a
// loaded program's four rule maps, and reading a per-CPU counter array.
// Shared by every loader whose program includes that header (EgressPolicy,
// TapFilter), so that the rule model and its errors are the same for all.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bpf/egress_rule.h"

struct bpf_map;

namespace dsec::bpf {

// A loaded object's allow and deny maps (egress_rules.bpf.h's names).
struct RuleMaps {
  struct bpf_map* allow4;
  struct bpf_map* deny4;
  struct bpf_map* allow6;
  struct bpf_map* deny6;

  // The maps of a generated skeleton whose program includes
  // egress_rules.bpf.h.
  template <typename Skeleton>
  static RuleMaps Of(Skeleton* skel) {
    return {skel->maps.allow4, skel->maps.deny4, skel->maps.allow6, skel->maps.deny6};
  }
};

enum class RuleList { kAllow, kDeny };
enum class RuleChange { kAdd, kRemove };

// Adds or removes one rule; it applies to the next lookup. `owner` names the
// caller in messages ("egress policy"). Removing a rule that is not there:
// NotFound; a full list: ResourceExhausted.
absl::Status UpdateRule(const RuleMaps& maps, RuleList list, RuleChange change, const EgressRule& rule,
                        std::string_view owner);

// Entries 0..n-1 of a BPF_MAP_TYPE_PERCPU_ARRAY of u64, each summed over
// the possible CPUs.
absl::StatusOr<std::vector<uint64_t>> SumPerCpuCounters(const struct bpf_map* map, uint32_t n,
                                                        std::string_view owner);

}  // namespace dsec::bpf
