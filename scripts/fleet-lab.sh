#!/usr/bin/env bash
# Several shaping boxes between an upstream router and a subscriber, in network namespaces, for
# the routing-daemon lab (BIRD's BGP + BFD towards the upstream, keepalived's VRRP towards the
# subscribers; crates/htbd/tests/fleet.rs):
#
#              (u1) 10.210.1.1 <==veth==> 10.210.1.2 (up0) box b1 (acc0) 10.220.0.2 --+
#   upstream                                                                            br0 (lan) -- (eth0) sub
#   10.200.0.1 (u2) 10.210.2.1 <==veth==> 10.210.2.2 (up0) box b2 (acc0) 10.220.0.3 --+  10.220.0.100/24
#                                                                                           via 10.220.0.1 (VRRP)
#
#   scripts/fleet-lab.sh up      build it
#   scripts/fleet-lab.sh down    remove it (and every process in it)
#
# Namespaces are ${LAB:-hf}-up, -b1, -b2, -lan, -sub. The upstream's "internet" host is
# 10.200.0.1 on its loopback; the boxes' default route via their upstream link is BIRD's
# (dist/bird/htbd-box.conf), and the upstream learns the subscribers' prefix (10.220.0.0/24) from the boxes by BGP. The
# subscribers' gateway 10.220.0.1 is no box's own address: keepalived moves it. Every box
# forwards (ip_forward=1: the kernel's path, and htbd's fail-open). IPv6 is off, so that no ND
# or MLD frame crosses a measurement. The endpoints have TX checksum offload, TSO and GSO off
# (AF_XDP copy-mode TX re-sends frames as plain bytes: ../shared/reference/afxdp.md).
set -euo pipefail

LAB=${LAB:-hf}
UP=$LAB-up B1=$LAB-b1 B2=$LAB-b2 LAN=$LAB-lan SUB=$LAB-sub
ALL=("$UP" "$B1" "$B2" "$LAN" "$SUB")

down() {
    for ns in "${ALL[@]}"; do
        # Deleting a namespace does not stop its processes (htbd, bird, keepalived): stop them.
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
    down
    for ns in "${ALL[@]}"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    done
    ip -n "$UP" addr add 10.200.0.1/32 dev lo
    local i box
    for i in 1 2; do
        box=$LAB-b$i
        ip link add "u$i" netns "$UP" address "02:00:0a:d2:0$i:01" type veth peer name up0 netns "$box" address "02:00:0a:d2:0$i:02"
        ip link add acc0 netns "$box" address "02:00:0a:dc:00:0$((i + 1))" type veth peer name "b$i" netns "$LAN"
        ip -n "$UP" addr add "10.210.$i.1/24" dev "u$i"
        ip -n "$box" addr add "10.210.$i.2/24" dev up0
        ip -n "$box" addr add "10.220.0.$((i + 1))/24" dev acc0
        ip -n "$UP" link set "u$i" up
        ip -n "$box" link set up0 up
        ip -n "$box" link set acc0 up
        ip netns exec "$box" sysctl -qw net.ipv4.ip_forward=1
        # The gateway address moves between boxes: answer ARP for it only where it is.
        ip netns exec "$box" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
    done
    ip link add eth0 netns "$SUB" address 02:00:0a:dc:00:64 type veth peer name sub netns "$LAN"
    ip -n "$LAN" link add br0 type bridge forward_delay 0
    for port in b1 b2 sub; do
        ip -n "$LAN" link set "$port" master br0
        ip -n "$LAN" link set "$port" up
    done
    ip -n "$LAN" link set br0 up
    ip -n "$SUB" addr add 10.220.0.100/24 dev eth0
    ip -n "$SUB" link set eth0 up
    ip -n "$SUB" route add default via 10.220.0.1
    for ns in "$UP" "$SUB"; do
        for dev in $(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -v '^lo$'); do
            ip netns exec "$ns" ethtool -K "$dev" tx off tso off gso off >/dev/null 2>&1 || true
        done
    done
    ip netns exec "$UP" sysctl -qw net.ipv4.ip_forward=1
    echo "fleet lab $LAB up: $UP - {$B1, $B2} - $LAN - $SUB"
}

case "${1:-}" in
up) up ;;
down) down ;;
*)
    echo "usage: $0 up | down" >&2
    exit 2
    ;;
esac
