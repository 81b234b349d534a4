// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// A sandbox's device policy, attached to its cgroup v2 directory: every
// open of a device node (read, write) and every mknod of one by a process of
// the cgroup is checked against a list of allowed (type, major, minor,
// access) entries; anything else fails with EPERM (the program's verdict 0).
//
// Entries live in a hash map keyed by type (BPF_DEVCG_DEV_CHAR/BLOCK, 0 for
// any), major and minor (ANY for any). A request is looked up under the
// eight combinations of its exact and wildcard fields; the access bits of
// every entry that matches are united, and the request must ask for no bit
// outside them. Userspace writes keys with device_rule.h's DeviceRuleKey.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define ANY 0xffffffffu

struct dev_key {
  __u32 type;
  __u32 major;
  __u32 minor;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 256);
  __type(key, struct dev_key);
  __type(value, __u32);  // BPF_DEVCG_ACC_* bits
} rules SEC(".maps");

// Counters: 0 checks allowed, 1 checks denied.
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline __u32 granted(__u32 type, __u32 major, __u32 minor) {
  struct dev_key k = {.type = type, .major = major, .minor = minor};
  __u32 *access = bpf_map_lookup_elem(&rules, &k);
  return access ? *access : 0;
}

SEC("cgroup/dev")
int dsec_device(struct bpf_cgroup_dev_ctx *ctx) {
  const __u32 type = ctx->access_type & 0xffff;  // BPF_DEVCG_DEV_*
  const __u32 want = ctx->access_type >> 16;     // BPF_DEVCG_ACC_*
  const __u32 types[2] = {type, 0};
  const __u32 majors[2] = {ctx->major, ANY};
  const __u32 minors[2] = {ctx->minor, ANY};
  __u32 have = 0;
#pragma unroll
  for (int t = 0; t < 2; t++) {
#pragma unroll
    for (int ma = 0; ma < 2; ma++) {
#pragma unroll
      for (int mi = 0; mi < 2; mi++) have |= granted(types[t], majors[ma], minors[mi]);
    }
  }
  const int allowed = want != 0 && (want & ~have) == 0;
  __u32 k = allowed ? 0 : 1;
  __u64 *c = bpf_map_lookup_elem(&counters, &k);
  if (c) *c += 1;
  return allowed;
}

char LICENSE[] SEC("license") = "GPL";
