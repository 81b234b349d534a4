// SPDX-License-Identifier: Apache-2.0
#include "bpf/rule_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace dsec::bpf {

namespace {

std::string Errno(int err) { return std::strerror(err < 0 ? -err : err); }

absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::Status RuleLists::Update(bool allow, const EgressRule& rule, bool add) const {
  struct bpf_map* map = rule.ipv6 ? (allow ? allow6_ : deny6_) : (allow ? allow4_ : deny4_);
  const std::vector<uint8_t> key = EgressRuleKey(rule);
  const uint8_t one = 1;
  const int err = add ? bpf_map__update_elem(map, key.data(), key.size(), &one, sizeof(one), BPF_ANY)
                      : bpf_map__delete_elem(map, key.data(), key.size(), 0);
  if (err != 0) {
    if (!add && (err == -ENOENT || errno == ENOENT)) {
      return absl::NotFoundError(
          absl::StrCat(View(owner_), ": no ", allow ? "allow" : "deny", " rule ", FormatEgressRule(rule)));
    }
    if (err == -E2BIG || err == -ENOSPC || errno == E2BIG || errno == ENOSPC) {
      return absl::ResourceExhaustedError(absl::StrCat(View(owner_), ": the ", allow ? "allow" : "deny",
                                                       " list is full (", bpf_map__max_entries(map),
                                                       " rules)"));
    }
    return absl::InternalError(absl::StrCat(View(owner_), ": ", add ? "adding" : "removing", " rule ",
                                            FormatEgressRule(rule), ": ", Errno(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> SumPerCpuCounters(const struct bpf_map* map, uint32_t n,
                                                        std::string_view owner) {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return absl::InternalError(absl::StrCat(View(owner), ": possible CPUs: ", Errno(ncpu)));
  std::vector<uint64_t> sums(n);
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  for (uint32_t k = 0; k < n; ++k) {
    if (const int err =
            bpf_map__lookup_elem(map, &k, sizeof(k), per_cpu.data(), per_cpu.size() * sizeof(uint64_t), 0);
        err != 0) {
      return absl::InternalError(absl::StrCat(View(owner), ": reading counters: ", Errno(err)));
    }
    for (uint64_t v : per_cpu) sums[k] += v;
  }
  return sums;
}

}  // namespace dsec::bpf
