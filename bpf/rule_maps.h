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

// A loaded object's allow and deny maps (egress_rules.bpf.h's names) and
// the rule API over them. Changes apply to the next lookup. `owner` names
// the caller in messages ("egress policy"). Removing a rule that is not
// there: NotFound; adding to a full list: ResourceExhausted.
class RuleLists {
 public:
  RuleLists(struct bpf_map* allow4, struct bpf_map* deny4, struct bpf_map* allow6, struct bpf_map* deny6,
            std::string_view owner)
      : allow4_(allow4), deny4_(deny4), allow6_(allow6), deny6_(deny6), owner_(owner) {}

  // The maps of a generated skeleton whose program includes
  // egress_rules.bpf.h.
  template <typename Skeleton>
  static RuleLists Of(Skeleton* skel, std::string_view owner) {
    return RuleLists(skel->maps.allow4, skel->maps.deny4, skel->maps.allow6, skel->maps.deny6, owner);
  }

  absl::Status Allow(const EgressRule& rule) const { return Update(true, rule, true); }
  absl::Status Deny(const EgressRule& rule) const { return Update(false, rule, true); }
  absl::Status RemoveAllow(const EgressRule& rule) const { return Update(true, rule, false); }
  absl::Status RemoveDeny(const EgressRule& rule) const { return Update(false, rule, false); }

 private:
  absl::Status Update(bool allow, const EgressRule& rule, bool add) const;

  struct bpf_map* allow4_;
  struct bpf_map* deny4_;
  struct bpf_map* allow6_;
  struct bpf_map* deny6_;
  std::string_view owner_;
};

// Entries 0..n-1 of a BPF_MAP_TYPE_PERCPU_ARRAY of u64, each summed over
// the possible CPUs.
absl::StatusOr<std::vector<uint64_t>> SumPerCpuCounters(const struct bpf_map* map, uint32_t n,
                                                        std::string_view owner);

}  // namespace dsec::bpf
