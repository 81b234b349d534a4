// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// A microVM's egress policy on the host side of its tap: a tc (sched_cls,
// direct action) program on the tap's ingress, which is every frame the
// guest sends. The same rule lists as a sandbox's cgroup programs
// (egress_rules.bpf.h): IPv4 and IPv6 by destination address and, for TCP
// and UDP, port; ICMP, other protocols and non-first fragments need a rule
// for every port; deny wins; a packet in no allow rule is dropped
// (TC_ACT_SHOT).
//
// One exception: ARP passes (the guest must resolve its gateway). Nothing
// else is special: DHCP (to 255.255.255.255:67), DNS to the node's resolver
// and IPv6 neighbour discovery pass only when rules allow them. Frames that
// are neither ARP nor IP are dropped.
#include <linux/pkt_cls.h>

#include "egress_rules.bpf.h"

// Counters: 0 packets allowed, 1 their bytes, 2 packets dropped, 3 their
// bytes (frame lengths, Ethernet header included).
static __always_inline int verdict(struct __sk_buff *skb, int allowed) {
  const __u32 base = allowed ? 0 : 2;
  add_counter(base, 1);
  add_counter(base + 1, skb->len);
  return allowed ? TC_ACT_OK : TC_ACT_SHOT;
}

// Loaded under the GPL side of its dual licence (the kernel knows no Apache).
SEC("tc")
int dsec_tap_ingress(struct __sk_buff *skb) {
  if (skb->protocol == bpf_htons(ETH_P_ARP)) return verdict(skb, 1);
  // At tc ingress the data starts at the Ethernet header (a VLAN tag, if
  // any, has already been moved into the skb's metadata).
  return verdict(skb, ip_packet_allowed(skb, ETH_HLEN) == 1);
}

char LICENSE[] SEC("license") = "GPL";
