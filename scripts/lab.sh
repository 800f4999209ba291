#!/usr/bin/env bash
# The three-host lab of seed 003 in network namespaces:
#
#   node-1 (eth0) <==veth==> (r1) router (r2) <==veth==> (eth0) node-2
#
#   scripts/lab.sh up [router|bridge]    build it (default: router)
#   scripts/lab.sh down                  remove it
#   scripts/lab.sh status                show it
#
# QUEUES=N (default 1) gives every veth N TX and RX queues, so that htbd can run one data-plane
# worker per queue (`[daemon] workers`); a flow's frames stay on one queue (hashed by the
# sender), so two flows may share one.
#
# Router mode: node-1 10.201.1.2/24 via 10.201.1.1 (r1); node-2 10.201.2.2/24 via 10.201.2.1 (r2);
# the router forwards (ip_forward=1: the kernel's path, and htbd's fail-open).
# Bridge mode: node-1 10.201.0.1/24, node-2 10.201.0.2/24; r1 and r2 are members of br0 (the
# kernel bridges when htbd is not running).
# IPV6=1 adds IPv6 beside IPv4 (otherwise IPv6 is off, so that no ND or MLD frame crosses a
# measurement): router mode fd00:201:1::2/64 via fd00:201:1::1 (r1), fd00:201:2::2/64 via
# fd00:201:2::1 (r2), forwarding on; bridge mode fd00:201::1/64 and fd00:201::2/64. Addresses
# skip duplicate address detection, so they are usable at once.
# Namespaces are ${LAB:-htb}-n1, -r, -n2. The endpoints have TX checksum offload, TSO and GSO
# off: AF_XDP copy-mode TX re-sends frames as plain bytes, so partial checksums would arrive
# unfinished (see ../shared/reference/afxdp.md).
set -euo pipefail

LAB=${LAB:-htb}
N1=$LAB-n1 R=$LAB-r N2=$LAB-n2
QUEUES=${QUEUES:-1}
IPV6=${IPV6:-0}
case "$QUEUES" in
[1-9] | [1-5][0-9] | 6[0-4]) ;;
*)
    echo "QUEUES=$QUEUES: a number of queues from 1 to 64" >&2
    exit 2
    ;;
esac
Q="numtxqueues $QUEUES numrxqueues $QUEUES"

down() {
    for ns in "$N1" "$R" "$N2"; do
        # Deleting a namespace does not stop its processes (htbd, iperf3): stop them first.
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        if [ -n "$pids" ]; then
            kill $pids 2>/dev/null || true
            sleep 0.2
            kill -9 $pids 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true
    done
}

up() {
    local mode=${1:-router}
    down
    for ns in "$N1" "$R" "$N2"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        if [ "$IPV6" = 1 ]; then
            # Static addresses only: no router solicitations or autoconfiguration.
            # No duplicate address detection either, link-local addresses included: a
            # tentative one delays neighbour discovery for a second after the links come up.
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.accept_ra=0 net.ipv6.conf.default.accept_ra=0 \
                net.ipv6.conf.default.router_solicitations=0 \
                net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
        else
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
        fi
    done
    # shellcheck disable=SC2086 # $Q is two option pairs
    ip link add eth0 netns "$N1" address 02:00:0a:c9:01:02 $Q type veth peer name r1 netns "$R" address 02:00:0a:c9:01:01 $Q
    # shellcheck disable=SC2086
    ip link add eth0 netns "$N2" address 02:00:0a:c9:02:02 $Q type veth peer name r2 netns "$R" address 02:00:0a:c9:02:01 $Q
    for ns in "$N1" "$N2"; do
        ip netns exec "$ns" ethtool -K eth0 tx off tso off gso off >/dev/null 2>&1 || true
    done
    case "$mode" in
    router)
        ip -n "$N1" addr add 10.201.1.2/24 dev eth0
        ip -n "$N2" addr add 10.201.2.2/24 dev eth0
        ip -n "$R" addr add 10.201.1.1/24 dev r1
        ip -n "$R" addr add 10.201.2.1/24 dev r2
        ip -n "$N1" link set eth0 up
        ip -n "$N2" link set eth0 up
        ip -n "$R" link set r1 up
        ip -n "$R" link set r2 up
        ip -n "$N1" route add default via 10.201.1.1
        ip -n "$N2" route add default via 10.201.2.1
        ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
        if [ "$IPV6" = 1 ]; then
            ip -n "$N1" addr add fd00:201:1::2/64 dev eth0 nodad
            ip -n "$N2" addr add fd00:201:2::2/64 dev eth0 nodad
            ip -n "$R" addr add fd00:201:1::1/64 dev r1 nodad
            ip -n "$R" addr add fd00:201:2::1/64 dev r2 nodad
            ip -n "$N1" -6 route add default via fd00:201:1::1
            ip -n "$N2" -6 route add default via fd00:201:2::1
            ip netns exec "$R" sysctl -qw net.ipv6.conf.all.forwarding=1
        fi
        ;;
    bridge)
        ip -n "$N1" addr add 10.201.0.1/24 dev eth0
        ip -n "$N2" addr add 10.201.0.2/24 dev eth0
        ip -n "$R" link add br0 type bridge
        ip -n "$R" link set r1 master br0
        ip -n "$R" link set r2 master br0
        for dev in br0 r1 r2; do ip -n "$R" link set "$dev" up; done
        ip -n "$N1" link set eth0 up
        ip -n "$N2" link set eth0 up
        if [ "$IPV6" = 1 ]; then
            ip -n "$N1" addr add fd00:201::1/64 dev eth0 nodad
            ip -n "$N2" addr add fd00:201::2/64 dev eth0 nodad
        fi
        ;;
    *)
        echo "usage: $0 up [router|bridge]" >&2
        exit 2
        ;;
    esac
    echo "lab $LAB up ($mode, $QUEUES queue(s) per veth$([ "$IPV6" = 1 ] && echo ', IPv6 too')): $N1 - $R - $N2"
}

status() {
    for ns in "$N1" "$R" "$N2"; do
        echo "== $ns"
        ip -n "$ns" -br addr 2>/dev/null || echo "(missing)"
    done
}

case "${1:-}" in
up) up "${2:-router}" ;;
down) down ;;
status) status ;;
*)
    echo "usage: $0 up [router|bridge] | down | status" >&2
    exit 2
    ;;
esac
