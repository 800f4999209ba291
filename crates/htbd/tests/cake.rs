//! cake in the netns lab: host fairness under triple-isolate, an EF ping through a full class
//! under diffserv4, the ACK filter on a thin upstream, cake's own shaper at a port's root, and
//! the kernel's tc-testing cases for cake (`qdiscs/cake.json`) at the root and under an HTB
//! class.
//!
//! Every test needs root and network namespaces, so each is `#[ignore]`d; `scripts/test.sh`
//! includes them as root. Each measurement proves its premise (the class was full, the flows
//! ran, the ACKs were more than the upstream carries) before its figure is judged, and a rate
//! is judged by what the shaper owed in its window (`htb_lab::owed`).

use std::process::{Child, Stdio};
use std::time::Duration;

use htb_lab::latency::{Saturated, ping_marked_through_tcp_load, set_tcp_ecn};
use htb_lab::shaper::Installed;
use htb_lab::{Htbd, Lab, N1, N2, Promise, R, assert_filled, assert_owed};
use serde_json::Value;

/// Router mode, r2 shaped by one class `1:10` of `rate` with leaf `leaf` (a TOML value).
fn one_class(rate: &str, leaf: &str) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         [[interface]]\nname = \"r1\"\n[[interface]]\nname = \"r2\"\n\
         [interface.qdisc]\ndefault = \"10\"\n\
         [[interface.class]]\nid = \"1:10\"\nrate = \"{rate}\"\nleaf = {leaf}\n"
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The leaf qdisc under class `1:10` of r2 (`-s -j qdisc show`).
fn leaf_stats(htbd: &Htbd) -> Value {
    let list = json(&htbd.cli_ok(&["-s", "-j", "qdisc", "show", "dev", "r2"]));
    list.as_array()
        .and_then(|l| l.iter().find(|q| q["parent"] == "1:10"))
        .cloned()
        .unwrap_or_else(|| panic!("no leaf under 1:10: {list}"))
}

/// Adds `addresses` (with their prefix) to `which`'s `eth0`, and makes the router know each
/// neighbour (so that XDP forwards to them from the first packet).
fn add_addresses(lab: &Lab, which: &str, addresses: &[String]) {
    for a in addresses {
        let out = lab.exec(
            which,
            &["ip", "addr", "add", &format!("{a}/24"), "dev", "eth0"],
        );
        assert!(out.status.success(), "ip addr add {a}: {out:?}");
    }
    for a in addresses {
        let _ = lab.exec(R, &["ping", "-c", "1", "-W", "1", a]);
    }
}

/// An iperf3 client in node-1 from `src` to `dst:port`, `secs` long, the first `omit` seconds
/// left out of its report (slow start).
fn tcp_client(lab: &Lab, src: &str, dst: &str, port: u16, secs: u32, omit: u32) -> Child {
    lab.cmd(N1, "iperf3")
        .args(["-c", dst, "-B", src, "-p", &port.to_string()])
        .args(["-t", &secs.to_string(), "-O", &omit.to_string(), "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -c")
}

/// A finished client's received goodput, bit/s.
fn goodput(child: Child) -> f64 {
    let out = child.wait_with_output().expect("iperf3 -c");
    let report = json(&String::from_utf8_lossy(&out.stdout));
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3 report without a receiver sum: {report}"))
}

/// Host B's share of a 20 Mbit/s class when host A (10.201.2.2) runs eight TCP flows and host
/// B (10.201.2.3) one, each from its own address of node-1 (its own server, as a download's
/// flows are), under leaf `leaf`.
fn host_b_share(lab: &Lab, leaf: &str) -> f64 {
    let htbd = Htbd::start(lab, &one_class("20mbit", leaf));
    let _servers: Vec<_> = (0..9).map(|i| lab.iperf_server(N2, 5301 + i)).collect();
    let before = htbd.class_stats("r2", "1:10");
    let clients: Vec<(bool, Child)> = (0..9u16)
        .map(|i| {
            let host_b = i == 8;
            let dst = if host_b { "10.201.2.3" } else { "10.201.2.2" };
            let src = format!("10.201.1.{}", 11 + i);
            (host_b, tcp_client(lab, &src, dst, 5301 + i, 14, 4))
        })
        .collect();
    // The clients' report leaves out their first 4 s (slow start): so does the window.
    let (load, stalls) =
        htbd.accounted(|| lab.measure_load(Duration::from_millis(4500), Duration::from_secs(9)));
    let (mut a, mut b) = (0.0, 0.0);
    for (host_b, child) in clients {
        let bps = goodput(child);
        if host_b {
            b += bps;
        } else {
            a += bps;
        }
    }
    // Premise: the class was full, and the flows filled it.
    htbd.assert_class_saturated("r2", "1:10", &before);
    assert_filled(
        &format!("{leaf}: nine flows through 20 Mbit/s"),
        &load.delivered,
        &Promise::class(20e6),
        &stalls,
        0.95,
    );
    let share = b / (a + b);
    eprintln!(
        "{leaf}: host A {:.2} Mbit/s (8 flows), host B {:.2} Mbit/s (1 flow): B's share {:.1} %",
        a / 1e6,
        b / 1e6,
        share * 100.0
    );
    share
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn cake_triple_isolate_splits_a_class_between_hosts_not_flows() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbca", "router");
        add_addresses(&lab, N2, &["10.201.2.3".into()]);
        let sources: Vec<String> = (11..20).map(|i| format!("10.201.1.{i}")).collect();
        add_addresses(&lab, N1, &sources);
        // ECN: COBALT marks rather than drops, so host B's one flow keeps its window through a
        // signal instead of halving it on a loss (the share is the scheduler's, not TCP's luck).
        set_tcp_ecn(&lab, true);
        let cake = host_b_share(&lab, "\"cake\"");
        let fq_codel = host_b_share(&lab, "\"fq_codel\"");
        assert!(
            (0.45..=0.55).contains(&cake),
            "host B's share under cake triple-isolate: {:.1} %",
            cake * 100.0
        );
        // fq_codel is fair per flow: host B's one flow gets about a ninth.
        assert!(
            fq_codel < 0.2,
            "host B's share under fq_codel: {:.1} %",
            fq_codel * 100.0
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn cake_diffserv4_keeps_an_ef_ping_under_3_ms_in_a_full_class() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbcb", "router");
        let htbd = Htbd::start(
            &lab,
            &one_class("10mbit", "{ kind = \"cake\", diffserv = \"diffserv4\" }"),
        );
        let before = htbd.class_stats("r2", "1:10");
        let installed = Installed::Htbd(Box::new(htbd));
        // EF: DSCP 46, TOS byte 0xb8.
        let (run, stalls): (Saturated, _) = installed.htbd().expect("htbd").accounted(|| {
            ping_marked_through_tcp_load(
                &lab,
                &installed,
                5201,
                Duration::from_secs(4),
                150,
                Some(0xb8),
            )
        });
        let htbd = installed.htbd().expect("htbd");
        eprintln!("{}", run.to_json());
        htbd.assert_class_saturated("r2", "1:10", &before);
        assert!(
            run.rtts.received() >= 140,
            "pings lost: {} of 150",
            run.rtts.received()
        );
        // Best effort keeps the class: the four flows' L2 rate at node-2 (pings are 0.1 %).
        assert_filled(
            "best effort beside the EF pings",
            &run.delivered,
            &Promise::class(10e6),
            &stalls,
            0.95,
        );
        let p95 = run.rtts.quantile(0.95);
        assert!(p95 <= 3.0, "EF ping p95 {p95:.2} ms");
        // The pings went through the Voice tin (the fourth column).
        let tins = leaf_stats(htbd)["tins"].clone();
        assert!(
            tins[3]["sent_packets"].as_u64().unwrap_or(0) >= 140,
            "the Voice tin carried the pings: {tins}"
        );
    });
}

/// The upstream the ACKs share: thin enough that a download's ACKs are several times what it
/// carries even when the download is slowed (a delayed ACK per two segments is about 2.1 Mbit/s
/// of ACKs at 100 Mbit/s, 1 Mbit/s at 50).
const UPSTREAM: (&str, f64) = ("500kbit", 500e3);

/// A download node-2 → node-1 (`iperf3 -R`) through r1's 100 Mbit/s class, whose ACKs go up
/// through r2's thin [`UPSTREAM`] class.
struct Download {
    /// node-1's L2 receive rate (the download) and send rate (its ACKs) over the window after
    /// slow start, with htbd's stalls meanwhile.
    load: htb_lab::Load,
    stalls: htb_lab::Stalls,
    /// The leaf's counters and the upstream class's, after the run.
    leaf: Value,
    class: Value,
}

fn download_through_thin_upstream(lab: &Lab, leaf: &str) -> Download {
    let mut config = one_class(UPSTREAM.0, leaf);
    // The download itself at 100 Mbit/s: r1's egress towards node-1.
    config = config.replace(
        "[[interface]]\nname = \"r1\"\n",
        "[[interface]]\nname = \"r1\"\n[interface.qdisc]\ndefault = \"20\"\n\
         [[interface.class]]\nid = \"1:20\"\nrate = \"100mbit\"\n",
    );
    let htbd = Htbd::start(lab, &config);
    let _server = lab.iperf_server(N2, 5401);
    let client = lab
        .cmd(N1, "iperf3")
        .args(["-c", "10.201.2.2", "-p", "5401", "-R", "-t", "12", "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -R");
    // After slow start, for 8 s: node-1's receive side is the download, its send side the
    // ACKs offered to the upstream.
    let (load, stalls) = htbd.accounted(|| {
        std::thread::sleep(Duration::from_millis(3500));
        let read = || {
            let before = std::time::Instant::now();
            let (down, up) = (lab.rx_counters(N1, "eth0").0, lab.tx_counters(N1, "eth0").0);
            (before, down, up, std::time::Instant::now())
        };
        htb_lab::window_edge();
        let (a0, d0, u0, b0) = read();
        std::thread::sleep(Duration::from_secs(8));
        let (a1, d1, u1, b1) = read();
        htb_lab::window_edge();
        let counted = |bytes: u64| htb_lab::Counted {
            bytes: bytes as f64,
            shortest: (a1 - b0).as_secs_f64(),
            longest: (b1 - a0).as_secs_f64(),
        };
        htb_lab::Load {
            offered: counted(u1 - u0),
            delivered: counted(d1 - d0),
        }
    });
    let out = client.wait_with_output().expect("iperf3 -R");
    let report = json(&String::from_utf8_lossy(&out.stdout));
    assert!(
        report["end"]["sum_received"]["bits_per_second"].is_number(),
        "premise failed: the download did not run: {}",
        report["error"]
    );
    Download {
        load,
        stalls,
        leaf: leaf_stats(&htbd),
        class: htbd.class_stats("r2", "1:10"),
    }
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn cake_ack_filter_drops_most_acks_of_a_download_without_slowing_it() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbcc", "router");
        let plain = download_through_thin_upstream(&lab, "\"cake\"");
        let filtered =
            download_through_thin_upstream(&lab, "{ kind = \"cake\", ack_filter = \"filter\" }");
        let tins = filtered.leaf["tins"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ack_drops: u64 = tins.iter().filter_map(|t| t["ack_drops"].as_u64()).sum();
        let sent = filtered.leaf["packets"].as_u64().unwrap_or(0);
        let mbit = |bps: f64| bps / 1e6;
        eprintln!(
            "download {:.2} Mbit/s without the filter ({:.3} Mbit/s of ACKs offered up, {} sent), \
         {:.2} Mbit/s with it ({:.3} Mbit/s of ACKs offered, {sent} sent, {ack_drops} filtered)",
            mbit(plain.load.delivered_bps()),
            mbit(plain.load.offered_bps()),
            plain.leaf["packets"],
            mbit(filtered.load.delivered_bps()),
            mbit(filtered.load.offered_bps()),
        );
        // Premise: with the filter, the download's ACKs were at least twice what the upstream
        // carries (so the filter had work); without it, the upstream was full (the download then
        // slows to the ACKs the upstream carries).
        assert!(
            filtered.load.offered_bps() >= 2.0 * UPSTREAM.1,
            "premise failed: the download's ACKs were {:.3} Mbit/s, less than twice the {:.3} \
         Mbit/s upstream, so there was little for the filter to do",
            mbit(filtered.load.offered_bps()),
            mbit(UPSTREAM.1)
        );
        assert!(
            plain.class["overlimits"].as_u64().unwrap_or(0) > 0,
            "premise failed: the upstream was not full: {}",
            plain.class
        );
        let ratio = ack_drops as f64 / (ack_drops + sent) as f64;
        assert!(
            ratio >= 0.5,
            "{ack_drops} of {} ACKs filtered",
            ack_drops + sent
        );
        // Dropping redundant ACKs costs the download nothing: with the filter it fills its
        // 100 Mbit/s class (without, it may wait for ACKs stuck in the upstream's queue).
        assert_filled(
            "the download with the ACK filter",
            &filtered.load.delivered,
            &Promise::class(100e6),
            &filtered.stalls,
            0.85,
        );
        assert!(
            filtered.load.delivered_bps() >= 0.95 * plain.load.delivered_bps(),
            "download {:.2} Mbit/s with the filter, {:.2} without",
            mbit(filtered.load.delivered_bps()),
            mbit(plain.load.delivered_bps())
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn cake_at_the_root_shapes_udp_at_its_bandwidth() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbcd", "router");
        let htbd = Htbd::start(
            &lab,
            "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         [[interface]]\nname = \"r1\"\n[[interface]]\nname = \"r2\"\n",
        );
        htbd.cli_ok(&[
            "qdisc",
            "add",
            "dev",
            "r2",
            "root",
            "handle",
            "1:",
            "cake",
            "bandwidth",
            "20mbit",
            "besteffort",
        ]);
        let (load, stalls) = htbd.accounted(|| lab.udp_load(5201, "30M", 6));
        load.assert_saturates("30 Mbit/s UDP into a 20 Mbit/s cake", 20e6);
        let shown = htbd.cli_ok(&["-s", "qdisc", "show", "dev", "r2"]);
        eprintln!("{shown}");
        assert!(shown.starts_with("qdisc cake 1: root bandwidth 20Mbit besteffort"));
        // cake's shaper has no burst: a packet at a time.
        assert_owed(
            "cake bandwidth 20mbit at the root, L2 at node-2",
            &load.delivered,
            &Promise::class(20e6).with_burst(1514.0),
            &stalls,
            0.01,
        );
    });
}

/// One tc-testing case: what the command line adds after the device (`AT` stands for where the
/// qdisc goes), the exit status, and the pattern `qdisc show` must match `count` times (`AT`
/// for how it shows where it is).
struct Case {
    id: &'static str,
    setup: Option<&'static str>,
    command: &'static str,
    exit: i32,
    show_class: bool,
    pattern: &'static str,
    count: usize,
}

/// `qdiscs/cake.json`, each pattern without `refcnt [0-9]+ ` (htbd's qdiscs are not kernel
/// objects: `qdisc show` prints no reference count).
fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "1212 default",
            setup: None,
            command: "qdisc add dev r2 AT cake",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "3281 bandwidth",
            setup: None,
            command: "qdisc add dev r2 AT cake bandwidth 1000",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth 1Kbit diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "c940 autorate-ingress",
            setup: None,
            command: "qdisc add dev r2 AT cake autorate-ingress",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited autorate-ingress diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "2310 rtt",
            setup: None,
            command: "qdisc add dev r2 AT cake rtt 200",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 200us raw overhead",
            count: 1,
        },
        Case {
            id: "2385 besteffort",
            setup: None,
            command: "qdisc add dev r2 AT cake besteffort",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited besteffort triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "a032 diffserv8",
            setup: None,
            command: "qdisc add dev r2 AT cake diffserv8",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv8 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "2349 diffserv4",
            setup: None,
            command: "qdisc add dev r2 AT cake diffserv4",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv4 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "8472 flowblind",
            setup: None,
            command: "qdisc add dev r2 AT cake flowblind",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 flowblind nonat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "2341 dsthost nat",
            setup: None,
            command: "qdisc add dev r2 AT cake dsthost nat",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 dsthost nat nowash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "5134 hosts wash",
            setup: None,
            command: "qdisc add dev r2 AT cake hosts wash",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 hosts nonat wash no-ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "2302 flowblind no-split-gso",
            setup: None,
            command: "qdisc add dev r2 AT cake flowblind no-split-gso",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 flowblind nonat nowash no-ack-filter no-split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "0768 dual-srchost ack-filter",
            setup: None,
            command: "qdisc add dev r2 AT cake dual-srchost ack-filter",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 dual-srchost nonat nowash ack-filter split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "0238 dual-dsthost ack-filter-aggressive",
            setup: None,
            command: "qdisc add dev r2 AT cake dual-dsthost ack-filter-aggressive",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 dual-dsthost nonat nowash ack-filter-aggressive split-gso rtt 100ms raw overhead",
            count: 1,
        },
        Case {
            id: "6572 memlimit ptm",
            setup: None,
            command: "qdisc add dev r2 AT cake memlimit 10000 ptm",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw ptm overhead 0 memlimit 10000b",
            count: 1,
        },
        Case {
            id: "2436 fwmark atm",
            setup: None,
            command: "qdisc add dev r2 AT cake fwmark 8 atm",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw atm overhead 0 fwmark 0x8",
            count: 1,
        },
        Case {
            id: "3984 overhead mpu",
            setup: None,
            command: "qdisc add dev r2 AT cake overhead 128 mpu 256",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms noatm overhead 128 mpu 256",
            count: 1,
        },
        Case {
            id: "5421 conservative ingress",
            setup: None,
            command: "qdisc add dev r2 AT cake conservative ingress",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash ingress no-ack-filter split-gso rtt 100ms atm overhead 48",
            count: 1,
        },
        Case {
            id: "6854 delete",
            setup: Some("qdisc add dev r2 AT cake conservative ingress"),
            command: "qdisc del dev r2 AT",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash ingress no-ack-filter split-gso rtt 100ms atm overhead 48",
            count: 0,
        },
        Case {
            id: "2342 replace mpu",
            setup: Some("qdisc add dev r2 AT cake overhead 128 mpu 256"),
            command: "qdisc replace dev r2 AT cake mpu 128",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms noatm overhead 128 mpu 128",
            count: 1,
        },
        Case {
            id: "2313 change mpu",
            setup: Some("qdisc add dev r2 AT cake overhead 128 mpu 256"),
            command: "qdisc change dev r2 AT cake mpu 128",
            exit: 0,
            show_class: false,
            pattern: "qdisc cake AT bandwidth unlimited diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms noatm overhead 128 mpu 128",
            count: 1,
        },
        Case {
            id: "4365 class show",
            setup: None,
            command: "qdisc add dev r2 AT cake",
            exit: 0,
            show_class: true,
            pattern: "class cake",
            count: 0,
        },
    ]
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn the_kernels_cake_cases_pass_at_the_root_and_under_an_htb_class() {
    htb_lab::remeasured(|| {
        assert_eq!(cases().len(), 21, "qdiscs/cake.json has 21 cases");
        let lab = Lab::up("htbce", "router");
        let htbd = Htbd::start(
            &lab,
            "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\n\
         [[interface]]\nname = \"r1\"\n[[interface]]\nname = \"r2\"\n",
        );
        let words =
            |line: String| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
        let run = |line: String| {
            let w = words(line);
            htbd.cli(&w.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let mut failed = Vec::new();
        // (where the command puts it, how show prints it, the tree around it)
        let places = [
            ("handle 1: root", "1: root", None),
            ("parent 1:10 handle 10:", "10: parent 1:10", Some("1:")),
        ];
        for (at, shown_at, tree) in places {
            for case in cases() {
                if tree.is_some() {
                    htbd.cli_ok(&[
                        "qdisc", "replace", "dev", "r2", "root", "handle", "1:", "htb", "default",
                        "10",
                    ]);
                    htbd.cli_ok(&[
                        "class", "add", "dev", "r2", "parent", "1:", "classid", "1:10", "htb",
                        "rate", "100mbit",
                    ]);
                }
                if let Some(setup) = case.setup {
                    let out = run(setup.replace("AT", at));
                    assert!(out.status.success(), "{}: setup {out:?}", case.id);
                }
                let out = run(case.command.replace("AT", at));
                let status = out.status.code().unwrap_or(-1);
                let object = if case.show_class { "class" } else { "qdisc" };
                let shown = htbd.cli_ok(&[object, "show", "dev", "r2"]);
                let pattern = regex::Regex::new(&case.pattern.replace("AT", shown_at)).unwrap();
                let count = pattern.find_iter(&shown).count();
                let verdict = if status == case.exit && count == case.count {
                    "ok"
                } else {
                    failed.push(format!("{} ({at})", case.id));
                    "FAILED"
                };
                eprintln!(
                    "{verdict}: {} at {at} (exit {status}, want {}; {count} matches, want {}): {}\n{shown}",
                    case.id,
                    case.exit,
                    case.count,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                let _ = run("qdisc del dev r2 root".into());
            }
        }
        assert!(
            failed.is_empty(),
            "tc-testing cake cases failed: {failed:?}"
        );
    });
}
