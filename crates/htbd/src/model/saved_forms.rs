//! The saved forms of today, kept as literals: a state file and a journal as htbd wrote them
//! before the wire carried the classifier's own match, interface names and rates as types
//! (issue 42). What an older htbd acknowledged must load into the same state for ever: these
//! tests fail if a wire type changes how the journal or the state file reads.

use std::fs;

use super::*;
use crate::persist::Saved;

/// `state.toml` as htbd 0.1 wrote it from these tc lines (prio 2 holds u32 keys that are
/// no header field):
///
/// ```text
/// qdisc add dev r2 root handle 1: htb default 20 r2q 10
/// class add dev r2 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit
/// class add dev r2 parent 1:1 classid 1:10 htb rate 20mbit ceil 100mbit burst 15k prio 1
/// class add dev r2 parent 1:1 classid 1:20 htb rate 5mbit ceil 80mbit
/// filter add dev r2 parent 1: protocol ip prio 1 u32 match ip src 10.0.0.0/8 match ip dst 192.168.1.7/32 match ip protocol 6 0xff match ip sport 1024 0xfc00 match ip dport 5201 0xffff match ip dsfield 0xb8 0xfc flowid 1:10
/// filter add dev r2 parent 1: protocol ip prio 2 u32 match u8 0x05 0x0f at 0 match u16 0x0000 0xffc0 at 2 match u8 0x10 0xff at 33 flowid 1:10
/// filter add dev r2 parent 1: protocol 802.1q prio 3 flower vlan_id 100 classid 1:20
/// filter add dev r2 parent 1: protocol ipv6 prio 4 flower dst_ip 2001:db8::/32 ip_proto udp dst_port 5000-5100 classid 1:20
/// ```
const STATE: &str = r#"# written by htbd 0.1.0 (config /etc/htbd/htbd.toml) at unix time 1790000000
# htbd-state last-batch=0
# htbd's live state: the trees below replace the config file's while this file exists
# and the config file's trees are unchanged. Stop htbd before editing it; remove it (or
# start htbd with --fresh-state) to go back to the config file.

[[interface]]
name = "r1"

[[interface]]
name = "r2"
[interface.qdisc]
handle = "1:"
default = "20"
r2q = 10
direct_qlen = 1000
burst_time = "1000000ns"
[[interface.class]]
id = "1:1"
rate = 100000000
ceil = 100000000
[[interface.class]]
id = "1:10"
parent = "1:1"
rate = 20000000
ceil = 100000000
burst = 15360
prio = 1
[[interface.class]]
id = "1:20"
parent = "1:1"
rate = 5000000
ceil = 80000000
[[interface.filter]]
prio = 1
protocol = "ip"
kind = "u32"
handle = "800::800"
match = { src = "10.0.0.0/8", dst = "192.168.1.7/32", proto = "6", sport = "1024-2047", dport = "5201", dscp = "46" }
classid = "1:10"
[[interface.filter]]
prio = 2
protocol = "ip"
kind = "u32"
handle = "801::800"
match = { raw = ["05000000/0f00ffc0 at 0", "00100000/00ff0000 at 32"] }
classid = "1:10"
[[interface.filter]]
prio = 3
protocol = "802.1Q"
kind = "flower"
handle = "0x1"
match = { vlan = "100" }
classid = "1:20"
[[interface.filter]]
prio = 4
protocol = "ipv6"
kind = "flower"
handle = "0x1"
match = { dst = "2001:db8::/32", proto = "17", dport = "5000-5100" }
classid = "1:20"

[[interface]]
name = "ifb0"
type = "ifb"

"#;

/// `journal.jsonl` as htbd 0.1 wrote it after that state: a filter with every match field
/// (prefixes, protocol, port ranges, DSCP, u32 keys of both headers), one on a VLAN, an IPv6
/// one with a handle, classes with rates, an ingress redirect to an IFB, a deletion.
const JOURNAL: &str = r#"{"seq":1,"commands":[{"op":"class_add","dev":"r2","id":"1:30","parent":"1:1","rate":2000000,"ceil":40000000,"burst":20000,"cburst":3000,"prio":2,"quantum":3000},{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ip","prio":5,"kind":"u32","matcher":{"src":"10.1.0.0/16","dst":"192.168.2.0/24","proto":17,"sport":[4096,8191],"dport":[53,53],"dscp":10,"raw":[{"at":0,"mask":251658240,"value":83886080},{"at":12,"nexthdr":true,"mask":65280,"value":4608}]},"class":"1:30"}]}
{"seq":2,"commands":[{"op":"filter_add","dev":"r2","parent":"1:","protocol":"802.1q","prio":6,"kind":"flower","handle":"0x7","matcher":{"vlan":4094},"class":"1:30"},{"op":"filter_add","dev":"r2","parent":"1:","protocol":"ipv6","prio":7,"kind":"flower","matcher":{"src":"2001:db8:1::/48","proto":6,"dport":[443,443],"dscp":46},"class":"1:20"},{"op":"class_change","dev":"r2","id":"1:20","parent":"1:1","rate":6000000,"ceil":90000000}]}
{"seq":3,"commands":[{"op":"qdisc_add","dev":"ifb0","handle":"1:","default_minor":16},{"op":"class_add","dev":"ifb0","id":"1:10","parent":"1:","rate":50000000},{"op":"ingress_add","dev":"r1"},{"op":"filter_add","dev":"r1","parent":"ffff:","protocol":"all","prio":10,"kind":"u32","matcher":{},"class":"1:10","redirect":"ifb0"}]}
{"seq":4,"commands":[{"op":"filter_delete","dev":"r2","parent":"1:","prio":2}]}
"#;

/// The state after [`JOURNAL`], as htbd 0.1 saved it.
const AFTER: &str = r#"[[interface]]
name = "r1"
[interface.ingress]
[[interface.ingress.filter]]
prio = 10
protocol = "all"
kind = "u32"
handle = "800::800"
match = {  }
classid = "1:10"
redirect = "ifb0"

[[interface]]
name = "r2"
[interface.qdisc]
handle = "1:"
default = "20"
r2q = 10
direct_qlen = 1000
burst_time = "1000000ns"
[[interface.class]]
id = "1:1"
rate = 100000000
ceil = 100000000
[[interface.class]]
id = "1:10"
parent = "1:1"
rate = 20000000
ceil = 100000000
burst = 15360
prio = 1
[[interface.class]]
id = "1:20"
parent = "1:1"
rate = 6000000
ceil = 90000000
[[interface.class]]
id = "1:30"
parent = "1:1"
rate = 2000000
ceil = 40000000
burst = 20000
cburst = 3000
prio = 2
quantum = 3000
[[interface.filter]]
prio = 1
protocol = "ip"
kind = "u32"
handle = "800::800"
match = { src = "10.0.0.0/8", dst = "192.168.1.7/32", proto = "6", sport = "1024-2047", dport = "5201", dscp = "46" }
classid = "1:10"
[[interface.filter]]
prio = 3
protocol = "802.1Q"
kind = "flower"
handle = "0x1"
match = { vlan = "100" }
classid = "1:20"
[[interface.filter]]
prio = 4
protocol = "ipv6"
kind = "flower"
handle = "0x1"
match = { dst = "2001:db8::/32", proto = "17", dport = "5000-5100" }
classid = "1:20"
[[interface.filter]]
prio = 5
protocol = "ip"
kind = "u32"
handle = "802::800"
match = { src = "10.1.0.0/16", dst = "192.168.2.0/24", proto = "17", sport = "4096-8191", dport = "53", dscp = "10", raw = ["05000000/0f000000 at 0", "00001200/0000ff00 at nexthdr+12"] }
classid = "1:30"
[[interface.filter]]
prio = 6
protocol = "802.1Q"
kind = "flower"
handle = "0x7"
match = { vlan = "4094" }
classid = "1:30"
[[interface.filter]]
prio = 7
protocol = "ipv6"
kind = "flower"
handle = "0x1"
match = { src = "2001:db8:1::/48", proto = "6", dport = "443", dscp = "46" }
classid = "1:20"

[[interface]]
name = "ifb0"
type = "ifb"
[interface.qdisc]
handle = "1:"
default = "10"
r2q = 10
direct_qlen = 1000
burst_time = "1000000ns"
[[interface.class]]
id = "1:10"
rate = 50000000

"#;

/// A journal line or a state file naming an interface no kernel would accept (edited by hand,
/// or written by something else) is refused as it is read, naming the line and the rule; the
/// model never sees the name.
#[test]
fn a_bad_interface_name_in_the_journal_or_the_state_is_refused_as_it_is_read() {
    let line = JOURNAL
        .lines()
        .nth(2)
        .unwrap()
        .replace(r#""redirect":"ifb0""#, r#""redirect":"ifb/0""#);
    let journal = format!("{}\n{line}\n", JOURNAL.lines().next().unwrap());
    let (at, e) = crate::persist::parse_journal(journal.as_bytes(), 0).unwrap_err();
    assert_eq!(at, 2);
    assert!(
        e.contains(r#""ifb/0" is not a valid interface name: it may not hold '/'"#),
        "{e}"
    );
    let state = STATE.replace(r#"name = "r2""#, r#"name = "a-very-long-name0""#);
    let e = crate::config::parse_state(&state).unwrap_err();
    assert_eq!(
        (e.line, e.message.contains("17 bytes, at most 15")),
        (11, true),
        "{e}"
    );
}

/// The state file and the journal load into the state htbd saved from them, and each journal
/// line is written back byte for byte.
#[test]
fn todays_state_and_journal_load_into_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("state.toml"), STATE).unwrap();
    fs::write(dir.path().join("journal.jsonl"), JOURNAL).unwrap();
    let (saved, _) = Saved::read(dir.path()).unwrap();
    let snapshot = saved.snapshot.as_deref().unwrap();
    let trees = crate::config::parse_state(snapshot).unwrap_or_else(|e| panic!("{e}"));
    let mut m = Model::from_trees(trees, &|_| 1).unwrap();
    let body = m.to_toml();
    assert!(STATE.ends_with(&body), "{body}");
    assert_eq!(saved.journal.len(), 4);
    for ((seq, batch), line) in saved.journal.iter().zip(JOURNAL.lines()) {
        let again = format!(
            r#"{{"seq":{seq},"commands":{}}}"#,
            serde_json::to_string(batch).unwrap()
        );
        assert_eq!(again, line);
        m.apply(batch)
            .unwrap_or_else(|e| panic!("batch {seq}: {e}"));
    }
    assert_eq!(m.to_toml(), AFTER);
}
