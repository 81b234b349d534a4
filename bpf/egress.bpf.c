// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// Per-sandbox egress policy, attached to the sandbox's cgroup v2 directory:
// every connect() and unconnected sendmsg() to an IPv4 or IPv6 address is
// checked against a deny and an allow list of CIDR[:port] rules. Deny wins;
// an address in neither list is refused. Refused calls fail at once with
// EPERM (the cgroup hook's verdict 0), never as a timeout.
//
// The rule lists and their lookups are egress_rules.bpf.h's (shared with the
// microVM tap's filter, tap.bpf.c).
#include "egress_rules.bpf.h"

enum { kSockDgram = 2 };  // SOCK_DGRAM (not in the uapi headers)

// Counters: 0 calls allowed, 1 calls denied (by a deny rule or by no allow
// rule), 2 packets allowed, 3 packets dropped (the cgroup_skb wall).
static __always_inline int count(__u32 k, int allowed) {
  add_counter(k, 1);
  return allowed ? 1 : 0;
}

static __always_inline int verdict(int allowed) { return count(allowed ? 0 : 1, allowed); }
static __always_inline int packet_verdict(int allowed) { return count(allowed ? 2 : 3, allowed); }

static __always_inline int check4(struct bpf_sock_addr *ctx) {
  return verdict(allowed4(ctx->user_ip4, (__u16)ctx->user_port));  // port: network order, low 16 bits
}

static __always_inline int check6(struct bpf_sock_addr *ctx) {
  __u32 ip6[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
  return verdict(allowed6(ip6, (__u16)ctx->user_port));
}

SEC("cgroup/connect4")
int dsec_connect4(struct bpf_sock_addr *ctx) { return check4(ctx); }

SEC("cgroup/sendmsg4")
int dsec_sendmsg4(struct bpf_sock_addr *ctx) { return check4(ctx); }

SEC("cgroup/connect6")
int dsec_connect6(struct bpf_sock_addr *ctx) { return check6(ctx); }

SEC("cgroup/sendmsg6")
int dsec_sendmsg6(struct bpf_sock_addr *ctx) { return check6(ctx); }

// Loaded under the GPL side of its dual licence (the kernel knows no Apache).
// The second wall: every IP packet a socket of the cgroup sends, whatever
// made it (raw sockets, ICMP, a socket that somehow skipped the hooks
// above), checked against the same rules by destination address and, for
// TCP and UDP, port. Other protocols and non-first fragments carry no port:
// only rules for every port let them through. A dropped packet fails the
// send with EPERM.
//
// Packets of TCP connections past their SYN and of UDP sockets pass: their
// destination was judged by the hooks above when the connection or the
// send was made, and a rule that changes or expires later (a domain's
// addresses live for their DNS TTL) applies to new connections, not to a
// download under way. A SYN is checked here as well, so a connect that
// skipped the hooks (TCP Fast Open on an old kernel) still meets a wall.
SEC("cgroup_skb/egress")
int dsec_skb_egress(struct __sk_buff *skb) {
  struct bpf_sock *sk = skb->sk;
  if (sk) {
    sk = bpf_sk_fullsock(sk);
    if (sk && sk->protocol == IPPROTO_TCP && sk->state != BPF_TCP_SYN_SENT) return packet_verdict(1);
    if (sk && sk->protocol == IPPROTO_UDP && sk->type == kSockDgram) return packet_verdict(1);
  }
  const int allowed = ip_packet_allowed(skb, 0);  // cgroup_skb data starts at the IP header
  if (allowed < 0) return 1;                      // not IP: nothing to route off the node
  return packet_verdict(allowed);
}

char LICENSE[] SEC("license") = "GPL";
