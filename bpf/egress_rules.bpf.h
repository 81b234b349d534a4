// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// The egress rule lists a BPF program checks destinations against, shared by
// egress.bpf.c (a sandbox's cgroup) and tap.bpf.c (a microVM's tap): a deny
// and an allow list per address family, each a longest-prefix-match map
// whose key data is the destination port (network order, 0 = any port)
// followed by the address, so one lookup with the real port and one with
// port 0 cover "10.0.0.0/8:443" and "10.0.0.0/8". The key's prefix length
// counts the 16 port bits too. Userspace fills the maps through
// rule_maps.h with keys from egress_rule.h's EgressRuleKey.
//
// Include it in one program file only: it defines the maps (the rule
// lists and a counter array).
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct key4 {
  __u32 prefixlen;
  __u16 port;
  __u8 addr[4];
} __attribute__((packed));

struct key6 {
  __u32 prefixlen;
  __u16 port;
  __u8 addr[16];
} __attribute__((packed));

#define RULE_MAP(name, keytype)           \
  struct {                                \
    __uint(type, BPF_MAP_TYPE_LPM_TRIE);  \
    __uint(max_entries, 1024);            \
    __type(key, struct keytype);          \
    __type(value, __u8);                  \
    __uint(map_flags, BPF_F_NO_PREALLOC); \
  } name SEC(".maps")

RULE_MAP(allow4, key4);
RULE_MAP(deny4, key4);
RULE_MAP(allow6, key6);
RULE_MAP(deny6, key6);

// Up to eight per-CPU counters; each program that includes this header says what
// they count (userspace sums them with rule_maps.h's SumPerCpuCounters).
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 8);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline void add_counter(__u32 k, __u64 n) {
  __u64 *c = bpf_map_lookup_elem(&counters, &k);
  if (c) *c += n;
}

static __always_inline int match4(void *map, __u32 ip, __u16 port) {
  struct key4 k = {.prefixlen = 16 + 32, .port = port};
  __builtin_memcpy(k.addr, &ip, 4);
  if (bpf_map_lookup_elem(map, &k)) return 1;
  k.port = 0;
  return bpf_map_lookup_elem(map, &k) != 0;
}

static __always_inline int match6(void *map, const __u32 ip6[4], __u16 port) {
  struct key6 k = {.prefixlen = 16 + 128, .port = port};
  __builtin_memcpy(&k.addr[0], &ip6[0], 4);
  __builtin_memcpy(&k.addr[4], &ip6[1], 4);
  __builtin_memcpy(&k.addr[8], &ip6[2], 4);
  __builtin_memcpy(&k.addr[12], &ip6[3], 4);
  if (bpf_map_lookup_elem(map, &k)) return 1;
  k.port = 0;
  return bpf_map_lookup_elem(map, &k) != 0;
}

// 1: the rules allow (address, port); port 0 = no port (only rules for every
// port match). IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) reach an IPv4
// host from a dual-stack socket: the IPv4 rules decide.
static __always_inline int allowed4(__u32 ip, __u16 port) {
  if (match4(&deny4, ip, port)) return 0;
  return match4(&allow4, ip, port);
}

static __always_inline int allowed6(const __u32 ip6[4], __u16 port) {
  if (ip6[0] == 0 && ip6[1] == 0 && ip6[2] == bpf_htonl(0xffff)) return allowed4(ip6[3], port);
  if (match6(&deny6, ip6, port)) return 0;
  return match6(&allow6, ip6, port);
}

// The verdict on the IP packet whose network header starts `off` bytes into
// the skb's data: 1 allowed, 0 refused (also a header too short to read),
// -1 not IPv4 or IPv6 (skb->protocol). Checked by destination address and,
// for TCP and UDP, port; other protocols and non-first fragments carry no
// port, so only rules for every port let them through.
static __always_inline int ip_packet_allowed(struct __sk_buff *skb, __u32 off) {
  __u16 port = 0;
  if (skb->protocol == bpf_htons(ETH_P_IP)) {
    struct iphdr ip;
    if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip))) return 0;
    if (ip.ihl < 5) return 0;  // malformed: the kernel would drop it too
    if ((ip.protocol == IPPROTO_TCP || ip.protocol == IPPROTO_UDP) && !(ip.frag_off & bpf_htons(0x1fff))) {
      __u16 ports[2];
      if (bpf_skb_load_bytes(skb, off + ip.ihl * 4, ports, sizeof(ports))) return 0;
      port = ports[1];
    }
    return allowed4(ip.daddr, port);
  }
  if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr ip6;
    if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6))) return 0;
    if (ip6.nexthdr == IPPROTO_TCP || ip6.nexthdr == IPPROTO_UDP) {
      __u16 ports[2];
      if (bpf_skb_load_bytes(skb, off + sizeof(ip6), ports, sizeof(ports))) return 0;
      port = ports[1];
    }
    __u32 daddr[4];
    __builtin_memcpy(daddr, &ip6.daddr, 16);
    return allowed6(daddr, port);
  }
  return -1;
}
