// SPDX-License-Identifier: GPL-2.0
/*
 * htb-xdp's XDP program: decides per frame whether userspace (htbd, through an AF_XDP
 * socket) or the kernel handles it.
 *
 * Router mode: IPv4/IPv6 packets that the kernel's FIB would forward to another port managed by
 * htbd, through a resolved neighbour, get their MACs rewritten and TTL / hop limit decremented
 * here (the egress port is then the frame's source MAC) and go to the socket. Everything else
 * goes to the kernel (XDP_PASS): ARP and ND, traffic to the router itself, TTL expiry, packets
 * for unmanaged interfaces, and packets whose next hop the kernel has not resolved yet -- it
 * resolves it and forwards them meanwhile.
 *
 * Bridge mode: every frame goes to the socket (userspace sends it out of the peer port).
 *
 * A missing socket (htbd starting, stopping or dead) falls back to XDP_PASS through
 * bpf_redirect_map's flags argument, so the kernel keeps forwarding: htbd fails open. So does a
 * data plane that stopped beating: htbd writes a CLOCK_MONOTONIC timestamp into `heartbeat`
 * every few milliseconds, and once it is older than `stale_after_ns` (a hung, stopped or
 * crashed-but-alive htbd) every frame goes to the kernel until it beats again.
 *
 * Router mode forwards only what the kernel's ip_forward would: frames addressed to the
 * port's own MAC, IPv4 headers that are whole (IHL, total length, header checksum: RFC 1812
 * 5.2.2) and carry no options (the kernel processes those), a TTL or hop limit above 1, and
 * packets that fit the egress MTU (the FIB checks tot_len; too big goes to the kernel, which
 * sends the ICMP error). It does not run netfilter:
 * FORWARD rules and NAT do not see what htbd forwards (docs/forwarding.md says so).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

#define MAX_SOCKETS 256
#define MAX_PORTS 64

/* A managed port: its first XSKMAP slot (one per RX queue) and its MAC address. */
struct port {
    __u32 slot_base;
    __u32 queues;
    __u8 mac[ETH_ALEN];
    __u8 pad[2];
};

struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, MAX_SOCKETS);
    __type(key, __u32);
    __type(value, __u32);
} xsks_map SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, MAX_PORTS);
    __type(key, __u32);          /* ifindex */
    __type(value, struct port);
} ports SEC(".maps");

/* Why frames went where, per CPU (read by htbd for its statistics). */
enum verdict {
    V_REDIRECT = 0,
    V_PASS_NOT_IP,
    V_PASS_MALFORMED,
    V_PASS_TTL,
    V_PASS_FIB,          /* local, unreachable, or forwarding disabled */
    V_PASS_NO_NEIGH,     /* next hop not resolved yet */
    V_PASS_UNMANAGED,    /* egress is not an htbd port */
    V_PASS_NOT_PORT,     /* ingress is not an htbd port */
    V_PASS_NO_SOCKET,    /* htbd's socket is not there (starting or stopping) */
    V_PASS_NOT_OURS,     /* router mode: not addressed to the port's MAC */
    V_PASS_STALE,        /* htbd's data plane has not beaten for stale_after_ns */
    V_PASS_IP_OPTIONS,   /* IPv4 options: the kernel processes them */
    V_PASS_TOO_BIG,      /* longer than the sockets take (MTU raised while htbd runs) */
    V_COUNT,
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, V_COUNT);
    __type(key, __u32);
    __type(value, __u64);
} verdicts SEC(".maps");

/* htbd's data plane: the CLOCK_MONOTONIC ns of its last beat. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} heartbeat SEC(".maps");

/* 0: router, 1: bridge. Patched by the loader. */
volatile const __u32 bridge_mode = 0;
/* A beat older than this sends every frame to the kernel; 0: no liveness check. Patched. */
volatile const __u64 stale_after_ns = 0;
/* The longest frame htbd's sockets take: one UMEM frame's room, or a chain of them with
 * multi-buffer. A longer one would be dropped by AF_XDP (xsk_rcv_check): the kernel gets it
 * instead. Patched. */
volatile const __u32 max_frame_len = 1792;

static __always_inline int count(__u32 verdict, int action)
{
    __u64 *n = bpf_map_lookup_elem(&verdicts, &verdict);
    if (n)
        *n += 1;
    return action;
}

/* RFC 1624 incremental checksum update for a 16-bit field changing from `old` to `new`. */
static __always_inline __u16 csum_replace16(__u16 check, __u16 old, __u16 new)
{
    __u32 sum = (__u16)~check + (__u16)~old + new;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return ~sum;
}

/* Whether htbd's data plane beat recently enough to be trusted with a frame. */
static __always_inline int alive(void)
{
    if (!stale_after_ns)
        return 1;
    __u32 key = 0;
    __u64 *beat = bpf_map_lookup_elem(&heartbeat, &key);
    if (!beat)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    /* A beat written after `now` was read is not stale. */
    return now <= *beat || now - *beat <= stale_after_ns;
}

/* RFC 1071: the checksum of an option-less IPv4 header (20 bytes, already bounds-checked) sums
 * to all ones when valid. */
static __always_inline int ipv4_checksum_ok(const struct iphdr *ip)
{
    const __u16 *word = (const __u16 *)ip;
    __u32 sum = 0;
#pragma unroll
    for (int i = 0; i < 10; i++)
        sum += word[i];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

static __always_inline int mac_equal(const __u8 *a, const __u8 *b)
{
    __u8 diff = 0;
#pragma unroll
    for (int i = 0; i < ETH_ALEN; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

static __always_inline int to_socket(struct xdp_md *ctx, const struct port *port)
{
    __u32 slot = port->slot_base + ctx->rx_queue_index;
    count(V_REDIRECT, 0);
    return bpf_redirect_map(&xsks_map, slot, XDP_PASS);
}

/* Looks the egress up in the FIB; on success rewrites the MACs. Returns the verdict. */
static __always_inline int route(struct xdp_md *ctx, struct ethhdr *eth, struct bpf_fib_lookup *fib)
{
    fib->ifindex = ctx->ingress_ifindex;
    int rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
    if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
        return V_PASS_NO_NEIGH;
    if (rc != BPF_FIB_LKUP_RET_SUCCESS)
        return V_PASS_FIB;
    __u32 egress = fib->ifindex;
    if (!bpf_map_lookup_elem(&ports, &egress))
        return V_PASS_UNMANAGED;
    __builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
    __builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
    return V_REDIRECT;
}

/* The decision for one frame. With multi-buffer (the xdp.frags entry point) `data_end` ends
 * the first buffer only: headers are read there, and lengths are compared with the whole
 * frame's, bpf_xdp_get_buff_len. */
static __always_inline int decide(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    __u32 ingress = ctx->ingress_ifindex;
    struct port *port = bpf_map_lookup_elem(&ports, &ingress);
    if (!port)
        return count(V_PASS_NOT_PORT, XDP_PASS);
    /* Never touch a frame that will not reach the socket: the kernel must get it intact. A
     * queue beyond those htbd has sockets for (`ethtool -L` after htbd started) would index
     * the next port's slots: the kernel gets those frames too. */
    if (ctx->rx_queue_index >= port->queues)
        return count(V_PASS_NO_SOCKET, XDP_PASS);
    __u32 slot = port->slot_base + ctx->rx_queue_index;
    if (!bpf_map_lookup_elem(&xsks_map, &slot))
        return count(V_PASS_NO_SOCKET, XDP_PASS);
    if (!alive())
        return count(V_PASS_STALE, XDP_PASS);
    __u64 frame_len = bpf_xdp_get_buff_len(ctx);
    if (frame_len > max_frame_len)
        return count(V_PASS_TOO_BIG, XDP_PASS);
    if (bridge_mode)
        return to_socket(ctx, port);

    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return count(V_PASS_MALFORMED, XDP_PASS);
    /* The kernel drops what is not for this host (PACKET_OTHERHOST, broadcast or multicast
     * MAC to a unicast IP); it never forwards it. */
    if (!mac_equal(eth->h_dest, port->mac))
        return count(V_PASS_NOT_OURS, XDP_PASS);

    struct bpf_fib_lookup fib = {};
    __u16 proto = eth->h_proto;
    if (proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > data_end || ip->ihl < 5 || ip->version != 4)
            return count(V_PASS_MALFORMED, XDP_PASS);
        /* Options (record route, timestamps, router alert …) are the forwarding router's to
         * process (RFC 1812 5.3.13): the kernel's. */
        if (ip->ihl != 5)
            return count(V_PASS_IP_OPTIONS, XDP_PASS);
        __u16 tot_len = bpf_ntohs(ip->tot_len);
        if (tot_len < sizeof(*ip) || sizeof(*eth) + tot_len > frame_len || !ipv4_checksum_ok(ip))
            return count(V_PASS_MALFORMED, XDP_PASS);
        if (ip->ttl <= 1)
            return count(V_PASS_TTL, XDP_PASS);
        fib.family = AF_INET;
        fib.tos = ip->tos;
        fib.l4_protocol = ip->protocol;
        fib.tot_len = tot_len;
        fib.ipv4_src = ip->saddr;
        fib.ipv4_dst = ip->daddr;
        int verdict = route(ctx, eth, &fib);
        if (verdict != V_REDIRECT)
            return count(verdict, XDP_PASS);
        /* TTL is the high byte of the 16-bit word it shares with the protocol. */
        __u16 old = *(__u16 *)&ip->ttl;
        ip->ttl -= 1;
        ip->check = csum_replace16(ip->check, old, *(__u16 *)&ip->ttl);
        return to_socket(ctx, port);
    }
    if (proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
            return count(V_PASS_MALFORMED, XDP_PASS);
        if (ip6->hop_limit <= 1)
            return count(V_PASS_TTL, XDP_PASS);
        fib.family = AF_INET6;
        fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
        fib.l4_protocol = ip6->nexthdr;
        /* The FIB's MTU check compares the whole packet: header included. */
        fib.tot_len = bpf_ntohs(ip6->payload_len) + sizeof(struct ipv6hdr);
        __builtin_memcpy(fib.ipv6_src, &ip6->saddr, sizeof(fib.ipv6_src));
        __builtin_memcpy(fib.ipv6_dst, &ip6->daddr, sizeof(fib.ipv6_dst));
        int verdict = route(ctx, eth, &fib);
        if (verdict != V_REDIRECT)
            return count(verdict, XDP_PASS);
        ip6->hop_limit -= 1;
        return to_socket(ctx, port);
    }
    return count(V_PASS_NOT_IP, XDP_PASS);
}

SEC("xdp")
int htb_xdp(struct xdp_md *ctx)
{
    return decide(ctx);
}

/* The same for multi-buffer frames: loaded instead of htb_xdp when an MTU exceeds one UMEM
 * frame (BPF_F_XDP_HAS_FRAGS; a native-mode veth refuses a program without it when its peer's
 * MTU passes a page). */
SEC("xdp.frags")
int htb_xdp_frags(struct xdp_md *ctx)
{
    return decide(ctx);
}

char _license[] SEC("license") = "GPL";
