// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// A microVM's egress policy on the host side of its tap: a tc (sched_cls,
// direct action) program on the tap's ingress, which is every frame the
// guest sends. The same rule lists as a sandbox's cgroup programs
// (egress_rules.bpf.h): IPv4 and IPv6 by destination address and, for TCP
// and UDP, port; ICMP, other protocols and non-first fragments need a rule
// for every port; deny wins; a packet in no allow rule is dropped
// (TC_ACT_SHOT).
//
// Two additions a cgroup program does not need:
// - Source addresses: once userspace sets `source4` (the guest's address),
//   an IPv4 packet from any other source is dropped whatever its
//   destination, so that a guest cannot pass for another sandbox (the node
//   resolver and the policy know sandboxes by their address).
// - Refused TCP fails at once: a cgroup program fails connect() with EPERM;
//   here a refused TCP segment (IPv4, no IP options, not itself a RST) is
//   turned into the RST its destination would have sent (RFC 9293 3.10.7.1)
//   and sent back to the guest through the tap, so the guest's connect()
//   fails with ECONNREFUSED instead of timing out. Other refused packets
//   (UDP, ICMP, IPv6) are dropped silently.
//
// ARP passes (the guest must resolve its gateway). Nothing else is special:
// DHCP, DNS to the node's resolver and IPv6 neighbour discovery pass only
// when rules allow them. Frames that are neither ARP nor IP are dropped.
#include <linux/pkt_cls.h>
#include <linux/tcp.h>

#include "egress_rules.bpf.h"

// The guest's IPv4 address, network order; 0: any source (set through the
// skeleton's .bss by TapFilter::RequireSource).
__u32 source4 = 0;

// Counters: 0 packets allowed, 1 their bytes, 2 packets dropped, 3 their
// bytes (frame lengths, Ethernet header included); 4 connection attempts
// allowed, 5 refused, where an attempt is a TCP SYN without ACK or a UDP
// datagram (the packets a connect() or sendmsg() starts with).
enum { kAllowed = 0, kDropped = 2, kAttemptAllowed = 4, kAttemptRefused = 5 };

static __always_inline __u16 fold(__u32 sum) {
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return (__u16)~sum;
}

// 1 if the IPv4 packet is a connection attempt (see the counters).
static __always_inline int attempt4(struct __sk_buff *skb, const struct iphdr *ip) {
  if (ip->frag_off & bpf_htons(0x1fff)) return 0;
  if (ip->protocol == IPPROTO_UDP) return 1;
  if (ip->protocol != IPPROTO_TCP) return 0;
  __u8 flags;  // byte 13 of the TCP header: CWR ECE URG ACK PSH RST SYN FIN
  if (bpf_skb_load_bytes(skb, ETH_HLEN + ip->ihl * 4 + 13, &flags, 1)) return 0;
  return (flags & 0x12) == 0x02;
}

// Rewrites the refused TCP segment in `skb` into the RST that answers it
// and returns 1; 0 (skb unchanged, or changed only where the caller drops
// it anyway) where it cannot. The checksums are computed in full; where
// the guest's segment used checksum offload the tap hands the RST back
// with NEEDS_CSUM, which the guest does not check.
static __always_inline int make_reset4(struct __sk_buff *skb, const struct iphdr *ip) {
  struct ethhdr eth;
  struct tcphdr tcp;
  if (ip->ihl != 5 || ip->protocol != IPPROTO_TCP || (ip->frag_off & bpf_htons(0x3fff))) return 0;
  if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth))) return 0;
  if (bpf_skb_load_bytes(skb, ETH_HLEN + 20, &tcp, sizeof(tcp))) return 0;
  const __u32 headers = 20 + tcp.doff * 4, total = bpf_ntohs(ip->tot_len);
  if (tcp.rst || tcp.doff < 5 || total < headers) return 0;

  struct ethhdr oeth = {};
  __builtin_memcpy(oeth.h_dest, eth.h_source, ETH_ALEN);
  __builtin_memcpy(oeth.h_source, eth.h_dest, ETH_ALEN);
  oeth.h_proto = bpf_htons(ETH_P_IP);
  struct iphdr oip = {};
  oip.version = 4;
  oip.ihl = 5;
  oip.tot_len = bpf_htons(40);
  oip.frag_off = bpf_htons(0x4000);  // don't fragment
  oip.ttl = 64;
  oip.protocol = IPPROTO_TCP;
  oip.saddr = ip->daddr;
  oip.daddr = ip->saddr;
  oip.check = fold((__u32)bpf_csum_diff(0, 0, (__be32 *)&oip, sizeof(oip), 0));
  struct tcphdr otcp = {};
  otcp.source = tcp.dest;
  otcp.dest = tcp.source;
  otcp.doff = 5;
  otcp.rst = 1;
  if (tcp.ack) {
    otcp.seq = tcp.ack_seq;
  } else {
    // SYN and FIN each count one; the payload its length.
    otcp.ack = 1;
    otcp.ack_seq = bpf_htonl(bpf_ntohl(tcp.seq) + (total - headers) + tcp.syn + tcp.fin);
  }
  struct {
    __be32 saddr, daddr;
    __u8 zero, protocol;
    __be16 length;
  } pseudo = {oip.saddr, oip.daddr, 0, IPPROTO_TCP, bpf_htons(sizeof(otcp))};
  __s64 sum = bpf_csum_diff(0, 0, (__be32 *)&pseudo, sizeof(pseudo), 0);
  if (sum < 0) return 0;
  sum = bpf_csum_diff(0, 0, (__be32 *)&otcp, sizeof(otcp), (__u32)sum);
  if (sum < 0) return 0;
  otcp.check = fold((__u32)sum);

  if (bpf_skb_change_tail(skb, ETH_HLEN + sizeof(oip) + sizeof(otcp), 0)) return 0;
  if (bpf_skb_store_bytes(skb, 0, &oeth, sizeof(oeth), 0) ||
      bpf_skb_store_bytes(skb, ETH_HLEN, &oip, sizeof(oip), 0) ||
      bpf_skb_store_bytes(skb, ETH_HLEN + sizeof(oip), &otcp, sizeof(otcp), 0)) {
    return 0;
  }
  return 1;
}

// Loaded under the GPL side of its dual licence (the kernel knows no Apache).
SEC("tc")
int dsec_tap_ingress(struct __sk_buff *skb) {
  const __u32 len = skb->len;
  if (skb->protocol == bpf_htons(ETH_P_ARP)) {
    add_counter(kAllowed, 1);
    add_counter(kAllowed + 1, len);
    return TC_ACT_OK;
  }
  struct iphdr ip = {};
  const int v4 = skb->protocol == bpf_htons(ETH_P_IP);
  if (v4) {
    // At tc ingress the data starts at the Ethernet header (a VLAN tag, if
    // any, has already been moved into the skb's metadata).
    if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) || ip.ihl < 5) goto drop;
    if (source4 != 0 && ip.saddr != source4) goto drop;
  }
  const int allowed = ip_packet_allowed(skb, ETH_HLEN) == 1;
  const int attempt = v4 && attempt4(skb, &ip);
  if (allowed) {
    add_counter(kAllowed, 1);
    add_counter(kAllowed + 1, len);
    if (attempt) add_counter(kAttemptAllowed, 1);
    return TC_ACT_OK;
  }
  if (attempt) add_counter(kAttemptRefused, 1);
  add_counter(kDropped, 1);
  add_counter(kDropped + 1, len);
  if (v4 && make_reset4(skb, &ip)) return bpf_redirect(skb->ifindex, 0);  // out of the tap: to the guest
  return TC_ACT_SHOT;
drop:
  add_counter(kDropped, 1);
  add_counter(kDropped + 1, len);
  return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
