//! tc scripts for many subscribers against a live htbd in the netns lab: u32 hash tables
//! (LARTC's "hashing filters for very fast massive filtering", as LibreQoS-era scripts write
//! them) run verbatim through `htb-cli -b`, and packets reach the class the hash walk picks.
//! Needs root and network namespaces, so each test is `#[ignore]`d; `scripts/test.sh` includes
//! them as root.

use std::fmt::Write as _;

use htb_lab::{Htbd, Lab, N1, Promise};
use serde_json::Value;

/// Router mode, r1 unshaped, r2 with only the HTB qdisc: the script builds the rest.
const CONFIG: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
     [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"99\"\n\
     [[interface.class]]\nid = \"1:99\"\nrate = \"100mbit\"\n";

/// Subscribers in 10.99.0.0/16 besides the lab's node-2 (10.201.2.2).
const SUBSCRIBERS: u32 = 2000;

/// The script: a root class, node-2's classes, one class per subscriber; a hash table per /24
/// (`divisor 256`), linked from the root table by the destination's /24 and hashed on its last
/// byte; one filter per subscriber in its bucket.
fn script() -> String {
    let mut s = String::from(
        "class add dev r2 parent 1: classid 1:1 htb rate 900mbit\n\
         class add dev r2 parent 1:1 classid 1:22 htb rate 5mbit ceil 5mbit\n\
         class add dev r2 parent 1:1 classid 1:24 htb rate 2mbit ceil 2mbit\n\
         class add dev r2 parent 1:1 classid 1:23 htb rate 1mbit ceil 1mbit\n\
         filter add dev r2 parent 1:0 prio 5 protocol ip u32\n\
         filter add dev r2 parent 1:0 prio 5 handle 2: protocol ip u32 divisor 256\n\
         filter add dev r2 protocol ip parent 1:0 prio 5 u32 ht 800:: match ip dst 10.201.2.0/24 hashkey mask 0x000000ff at 16 link 2:\n\
         filter add dev r2 protocol ip parent 1:0 prio 5 u32 ht 2:2: match ip dst 10.201.2.2/32 match ip protocol 1 0xff flowid 1:24\n\
         filter add dev r2 protocol ip parent 1:0 prio 5 u32 ht 2:2: match u32 0x0ac90202 0xffffffff at 16 flowid 1:22\n\
         filter add dev r2 protocol ip parent 1:0 prio 5 u32 ht 2: sample ip dst 10.201.2.3 match ip dst 10.201.2.3/32 flowid 1:23\n",
    );
    let tables = SUBSCRIBERS.div_ceil(256);
    for t in 0..tables {
        let _ = writeln!(
            s,
            "filter add dev r2 parent 1:0 prio 5 handle {:x}: protocol ip u32 divisor 256",
            0x10 + t
        );
        let _ = writeln!(
            s,
            "filter add dev r2 protocol ip parent 1:0 prio 5 u32 ht 800:: match ip dst 10.99.{t}.0/24 hashkey mask 0x000000ff at 16 link {:x}:",
            0x10 + t
        );
    }
    for i in 0..SUBSCRIBERS {
        let (t, host) = (i / 256, i % 256);
        let class = 0x1000 + i;
        let _ = writeln!(
            s,
            "class add dev r2 parent 1:1 classid 1:{class:x} htb rate 1mbit ceil 10mbit\n\
             filter add dev r2 protocol ip parent 1:0 prio 5 u32 ht {:x}:{host:x}: match ip dst 10.99.{t}.{host}/32 flowid 1:{class:x}",
            0x10 + t
        );
    }
    s
}

fn packets(htbd: &Htbd, class: &str) -> u64 {
    class_packets(htbd, "r2", class)
}

fn class_packets(htbd: &Htbd, dev: &str, class: &str) -> u64 {
    htbd.class_stats(dev, class)["packets"]
        .as_u64()
        .unwrap_or(0)
}

/// Router mode with no tree on either port: the script builds them.
const NO_TREES: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
     [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n";

/// Runs `script` through `htb-cli -b` as file `name` in htbd's directory.
fn run_script(htbd: &Htbd, name: &str, script: &str) {
    let file = htbd.dir().join(name);
    std::fs::write(&file, script).unwrap();
    htbd.cli_ok(&["-b", file.to_str().unwrap()]);
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_u32_hash_table_script_runs_verbatim_and_each_packet_reaches_its_bucket_filter() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbu", "router");
        let htbd = Htbd::start(&lab, CONFIG);
        let file = htbd.dir().join("subscribers.batch");
        std::fs::write(&file, script()).unwrap();
        let started = std::time::Instant::now();
        htbd.cli_ok(&["-b", file.to_str().unwrap()]);
        eprintln!(
            "{} lines applied in {:?}",
            script().lines().count(),
            started.elapsed()
        );

        // tc's view: the tables, the link with its hash key, filters in their buckets.
        let shown = htbd.cli_ok(&["filter", "show", "dev", "r2"]);
        for needle in [
            "fh 2: ht divisor 256",
            "link 2:",
            "hash mask 000000ff at 16",
            "fh 2:2:800 order 2048 key ht 2 bkt 2 flowid 1:24",
            "fh 2:2:801 order 2049 key ht 2 bkt 2 flowid 1:22",
            "fh 2:3:800 order 2048 key ht 2 bkt 3 flowid 1:23",
            "bkt 7 flowid 1:1107",
        ] {
            assert!(shown.contains(needle), "{needle:?} missing from:\n{shown}");
        }

        // ICMP to node-2 reaches the first filter of bucket 2 (1:24), UDP the second (1:22). A
        // first ping resolves node-2's neighbour entry (that packet goes through the kernel).
        assert_eq!(lab.ping(N1, "10.201.2.2", 1, "0.2"), 1);
        let (icmp0, udp0, default0) = (
            packets(&htbd, "1:24"),
            packets(&htbd, "1:22"),
            packets(&htbd, "1:99"),
        );
        assert_eq!(lab.ping(N1, "10.201.2.2", 5, "0.2"), 5);
        let icmp = packets(&htbd, "1:24") - icmp0;
        assert!(
            icmp >= 5,
            "pings went to 1:24: {icmp}; 1:22 {}, 1:99 {}",
            packets(&htbd, "1:22") - udp0,
            packets(&htbd, "1:99") - default0
        );
        htbd.assert_shapes(
            "UDP to node-2 shaped by 1:22 (5 Mbit/s)",
            ("r2", "1:22"),
            &Promise::class(5e6),
            0.03,
            || lab.udp_load(5201, "20M", 5),
        );
        let udp = packets(&htbd, "1:22") - udp0;
        assert!(udp > 1000, "UDP went to 1:22: {udp} packets");
        // The default class saw at most the TCP control connection of iperf3 (a few dozen
        // packets), not the flow.
        let default = packets(&htbd, "1:99") - default0;
        assert!(default < 200, "{default} packets fell to the default class");

        // A filter whose match does not fix the hashed byte cannot be placed: the batch is
        // refused whole, with the reason, and nothing changes.
        let bad = htbd.dir().join("bad.batch");
        std::fs::write(
        &bad,
        "class add dev r2 parent 1:1 classid 1:30 htb rate 1mbit\n\
         filter add dev r2 protocol ip parent 1:0 prio 5 u32 ht 2:9: match ip protocol 6 0xff flowid 1:30\n",
    )
    .unwrap();
        let out = htbd.cli(&["-b", bad.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted: {err}");
        assert!(err.contains("does not fix those bits"), "{err}");
        let classes: Value =
            serde_json::from_str(&htbd.cli_ok(&["-j", "class", "show", "dev", "r2"])).unwrap();
        assert!(
            !classes
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["handle"] == "1:30"),
            "the refused batch left class 1:30"
        );
        assert_eq!(
            classes.as_array().unwrap().len() as u32,
            SUBSCRIBERS + 5,
            "classes: root 1:1, 1:22/23/24, default, subscribers"
        );

        // Deleting the link's table is refused while a filter links to it.
        let out = htbd.cli(&[
            "filter", "del", "dev", "r2", "parent", "1:", "prio", "5", "handle", "2:", "u32",
        ]);
        assert!(!out.status.success(), "a linked table was deleted");

        // Tables, links and bucket filters survive a crash and restart (journal replay), and a
        // clean stop and start (the snapshot written as TOML and read back).
        let mut htbd = htbd;
        htbd.kill9();
        let htbd = Htbd::start_in(&lab, CONFIG, htbd.into_dir());
        assert_eq!(htbd.cli_ok(&["filter", "show", "dev", "r2"]), shown);
        let (status, dir) = htbd.terminate();
        assert!(status.success(), "htbd stopped with {status}");
        let htbd = Htbd::start_in(&lab, CONFIG, dir);
        assert_eq!(htbd.cli_ok(&["filter", "show", "dev", "r2"]), shown);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn hex_handles_and_one_word_u32_handles_as_libreqos_v0_81_writes_them() {
    htb_lab::remeasured(|| {
        // LibreQoS v0.81's forms (issue 26): hex qdisc and class handles, and each subscriber's
        // filter given `handle 0x65` in the bucket `ht 3:2:` names (before, htbd refused those six
        // handles and the subscribers fell to the default class).
        let lab = Lab::up("htbu", "router");
        let htbd = Htbd::start(&lab, NO_TREES);
        run_script(
            &htbd,
            "v0_81.batch",
            "qdisc add dev r2 root handle 0x1: htb default 99\n\
         class add dev r2 parent 0x1: classid 0x1:99 htb rate 100mbit\n\
         class add dev r2 parent 0x1: classid 0x1:1 htb rate 900mbit\n\
         class add dev r2 parent 0x1:1 classid 0x1:13 htb rate 50mbit ceil 50mbit\n\
         filter add dev r2 parent 0x1:0 prio 5 protocol ip u32\n\
         filter add dev r2 parent 0x1:0 prio 5 handle 3: protocol ip u32 divisor 256\n\
         filter add dev r2 protocol ip parent 0x1:0 prio 5 u32 ht 800:: match ip dst 10.201.2.0/24 hashkey mask 0x000000ff at 16 link 3:\n\
         filter add dev r2 protocol ip parent 0x1:0 prio 5 u32 ht 3:2: handle 0x65 match ip dst 10.201.2.2/32 flowid 1:13\n",
        );
        let shown = htbd.cli_ok(&["filter", "show", "dev", "r2"]);
        assert!(
            shown.contains("fh 3:2:65") && shown.contains("flowid 1:13"),
            "the filter is not node 65 of bucket 2 of table 3:\n{shown}"
        );
        assert_eq!(lab.ping(N1, "10.201.2.2", 1, "0.2"), 1);
        htbd.assert_shapes(
            "UDP to the subscriber of 1:13 (50 Mbit/s)",
            ("r2", "1:13"),
            &Promise::class(50e6),
            0.01,
            || lab.udp_load(5201, "65M", 6),
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn wondershapers_small_ack_filter_sends_pure_acks_to_its_class() {
    htb_lab::remeasured(|| {
        // wondershaper's (and the LARTC HOWTO's) u32 line, verbatim: IPv4 with a 20-byte header
        // (u8 at 0), under 64 bytes long (u16 at 2), TCP with only ACK set (u8 at 33). The ACKs of
        // node-1's upload to node-2 come back out of r1.
        let lab = Lab::up("htbu", "router");
        let htbd = Htbd::start(&lab, NO_TREES);
        run_script(
            &htbd,
            "wondershaper.batch",
            "qdisc add dev r1 root handle 1: htb default 20\n\
         class add dev r1 parent 1: classid 1:1 htb rate 100mbit\n\
         class add dev r1 parent 1:1 classid 1:10 htb rate 50mbit ceil 100mbit prio 1\n\
         class add dev r1 parent 1:1 classid 1:20 htb rate 50mbit ceil 100mbit prio 2\n\
         filter add dev r1 parent 1: protocol ip prio 10 u32 \
             match ip protocol 6 0xff \
             match u8 0x05 0x0f at 0 \
             match u16 0x0000 0xffc0 at 2 \
             match u8 0x10 0xff at 33 \
             flowid 1:10\n",
        );
        // tc's view: the protocol key, the merged header-length and total-length word, the flags.
        let shown = htbd.cli_ok(&["filter", "show", "dev", "r1"]);
        for needle in [
            "match 05000000/0f00ffc0 at 0",
            "match 00060000/00ff0000 at 8",
            "match 00100000/00ff0000 at 32",
        ] {
            assert!(shown.contains(needle), "{needle:?} missing from:\n{shown}");
        }
        let (acks0, rest0) = (
            class_packets(&htbd, "r1", "1:10"),
            class_packets(&htbd, "r1", "1:20"),
        );
        let _server = lab.iperf_server(htb_lab::N2, 5201);
        let tcp = lab.iperf(N1, "10.201.2.2", 5201, 3, None, false);
        let goodput = tcp["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or_else(|| panic!("iperf3: {tcp}"));
        let (acks, rest) = (
            class_packets(&htbd, "r1", "1:10") - acks0,
            class_packets(&htbd, "r1", "1:20") - rest0,
        );
        eprintln!(
            "upload {:.0} Mbit/s: {acks} packets to 1:10 (pure ACKs), {rest} to 1:20",
            goodput / 1e6
        );
        // Premise: the upload ran, so node-2 sent many ACKs back through r1.
        assert!(goodput > 50e6, "the upload did not run: {goodput} bit/s");
        assert!(acks > 1000, "pure ACKs went to 1:10: {acks}");
        // The rest through r1 is the handshake, FINs and iperf3's control connection.
        assert!(
            rest < acks / 20,
            "{rest} packets to 1:20 against {acks} ACKs to 1:10"
        );
    });
}
