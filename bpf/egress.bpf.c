// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
// Per-sandbox egress policy, attached to the sandbox's cgroup v2 directory:
// every connect() and unconnected sendmsg() to an IPv4 or IPv6 address is
// checked against a deny and an allow list of CIDR[:port] rules. Deny wins;
// an address in neither list is refused. Refused calls fail at once with
// EPERM (the cgroup hook's verdict 0), never as a timeout.
//
// A rule is a longest-prefix-match key whose data is the destination port
// (network order, 0 = any port) followed by the address, so one lookup with
// the real port and one with port 0 cover "10.0.0.0/8:443" and "10.0.0.0/8".
// The key's prefix length counts the 16 port bits too.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

enum { kSockDgram = 2 };  // SOCK_DGRAM (not in the uapi headers)

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

#define RULE_MAP(name, keytype)                 \
  struct {                                      \
    __uint(type, BPF_MAP_TYPE_LPM_TRIE);        \
    __uint(max_entries, 1024);                  \
    __type(key, struct keytype);                \
    __type(value, __u8);                        \
    __uint(map_flags, BPF_F_NO_PREALLOC);       \
  } name SEC(".maps")

RULE_MAP(allow4, key4);
RULE_MAP(deny4, key4);
RULE_MAP(allow6, key6);
RULE_MAP(deny6, key6);

// Counters: 0 calls allowed, 1 calls denied (by a deny rule or by no allow
// rule), 2 packets allowed, 3 packets dropped (the cgroup_skb wall).
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 4);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(__u32 k, int allowed) {
  __u64 *c = bpf_map_lookup_elem(&counters, &k);
  if (c) *c += 1;
  return allowed ? 1 : 0;
}

static __always_inline int verdict(int allowed) { return count(allowed ? 0 : 1, allowed); }
static __always_inline int packet_verdict(int allowed) { return count(allowed ? 2 : 3, allowed); }

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
  __u16 port = 0;
  if (skb->protocol == bpf_htons(ETH_P_IP)) {
    struct iphdr ip;
    if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip))) return packet_verdict(0);
    if ((ip.protocol == IPPROTO_TCP || ip.protocol == IPPROTO_UDP) && !(ip.frag_off & bpf_htons(0x1fff))) {
      __u16 ports[2];
      if (bpf_skb_load_bytes(skb, ip.ihl * 4, ports, sizeof(ports))) return packet_verdict(0);
      port = ports[1];
    }
    return packet_verdict(allowed4(ip.daddr, port));
  }
  if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr ip6;
    if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6))) return packet_verdict(0);
    if (ip6.nexthdr == IPPROTO_TCP || ip6.nexthdr == IPPROTO_UDP) {
      __u16 ports[2];
      if (bpf_skb_load_bytes(skb, sizeof(ip6), ports, sizeof(ports))) return packet_verdict(0);
      port = ports[1];
    }
    __u32 daddr[4];
    __builtin_memcpy(daddr, &ip6.daddr, 16);
    return packet_verdict(allowed6(daddr, port));
  }
  return 1;  // not IP: nothing to route off the node
}

char LICENSE[] SEC("license") = "GPL";
