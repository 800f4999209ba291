//! Usage texts, printed by `help` and after usage errors as tc prints them (for the HTB
//! parts).

/// Top-level usage (tc's, for the HTB parts).
pub(crate) const USAGE: &str = "\
Usage: htb-cli [ OPTIONS ] OBJECT { COMMAND | help }
       htb-cli [ OPTIONS ] -b[atch] FILE     (all commands of FILE, atomically)
       htb-cli monitor [ dev DEV ] [ interval SECS ] [ count N ]
       htb-cli [ -j [ -p ] ] status   (the data plane's frames, counters and XDP verdicts)
       htb-cli [ -j ] explain ADDR [ peer ADDR ] [ dev DEV ] [ proto P ] [ port N ] [ peer_port N ]
                                      (which filter and class packets to and from ADDR take)
       htb-cli [ -j ] flows [ dev DEV ] [ class CLASSID ] [ top N ]
                                      (the flow records htbd keeps, the largest first)
       htb-cli sim SCENARIO.toml [ --json ] [ --svg OUT.svg ]
where  OBJECT := { qdisc | class | filter }
       OPTIONS := { -s[tatistics] | -d[etails] | -r[aw] | -i[ec] | -j[son] | -p[retty] |
                    -b[atch] FILE | -V[ersion] | -h[elp] | --socket PATH | --timeout SECS }
The daemon is reached at /run/htbd/htbd.sock, or $HTBD_SOCKET, or --socket PATH, and
its answer awaited --timeout SECS (default 10). --socket given several times sends status,
changes and batches to each box and reports per box (status compares their generations).";

/// The filter usage (`tc filter help`, for the HTB parts).
pub(crate) const FILTER_USAGE: &str = "\
Usage: htb-cli filter [ add | change | replace | del | get | show ] dev STRING [ parent CLASSID ]
       [ protocol PROTO ] [ pref PRIO ] [ handle FILTERID ] FILTER_TYPE [ FILTER_OPTIONS ]
FILTER_TYPE := u32 | flower
u32:    match ip { src | dst } PREFIX | match ip { sport | dport } PORT MASK
        | match ip protocol N 0xff | match ip { tos | dsfield } V M
        | match ip6 { src | dst } PREFIX | match ip6 { sport | dport } PORT MASK
        | match ip6 { protocol | priority } V M | match { tcp | udp } { src | dst } PORT MASK
        ... { flowid | classid } CLASSID
flower: [ src_ip PREFIX ] [ dst_ip PREFIX ] [ ip_proto tcp | udp | sctp | icmp | icmpv6 | N ]
        [ src_port PORT[-PORT] ] [ dst_port PORT[-PORT] ] [ ip_tos V[/M] ] [ vlan_id VID ]
        [ skip_sw | skip_hw ] classid CLASSID";
