//! htbd in the netns lab (node-1 ↔ router ↔ node-2): forwarding, shaping accuracy, borrowing,
//! default class, malformed input, fail-open and restart.
//!
//! Every test needs root and network namespaces, so each is `#[ignore]`d: the runner's summary
//! counts them as ignored where they cannot run, and `scripts/test.sh` runs them with
//! `--include-ignored` as root (where a lab that cannot be built fails the test). Each rate
//! measurement proves its premise: the generator offered at least 1.1× the class's rate, and the
//! class dropped or hit its limit in the window; and it judges the shaper by what the class
//! owed in that window, given the data plane's stalls (`htb_lab::owed`).

use std::process::Stdio;
use std::time::Duration;

use htb_lab::owed::Misjudged;
use htb_lab::{
    Counted, Htbd, Lab, N1, N2, Promise, R, Reaped, assert_owed, htbd_fails, unmeasured,
};

/// r1 unshaped; r2 with `tree` (TOML of [interface.qdisc] / classes / filters).
fn router_config(tree: &str) -> String {
    router_config_with(tree, 1)
}

/// As `router_config`, with `workers` data-plane workers (the lab then needs as many queues).
fn router_config_with(tree: &str, workers: u32) -> String {
    format!(
        "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
         workers = {workers}\n\n\
         [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\n{tree}"
    )
}

/// One class at `rate` taking all traffic (the default).
fn one_class(rate: &str, workers: u32) -> String {
    router_config_with(
        &format!(
            "[interface.qdisc]\ndefault = \"1\"\n[[interface.class]]\nid = \"1:1\"\nrate = \"{rate}\"\n"
        ),
        workers,
    )
}

/// Checks that htbd ran `workers` workers and, with more than one, that frames crossed between
/// them (the lab's two queues split the traffic, and each subtree has one worker).
fn assert_workers(htbd: &Htbd, workers: usize) {
    let status = htbd.status();
    assert_eq!(status.workers.len(), workers, "{status:?}");
    if workers > 1 {
        let crossed: u64 = status.workers.iter().map(|w| w.taken_in).sum();
        eprintln!("frames handed between workers: {crossed}");
        assert!(
            status.workers.iter().all(|w| w.handoff_drops == 0),
            "{status:?}"
        );
    }
}

/// What an iperf3 UDP receiver counted, as L2 bytes (1400-byte datagrams + 42 bytes of
/// headers) over its own measured time.
fn udp_l2_received(report: &serde_json::Value) -> Counted {
    let received = &report["end"]["sum_received"];
    Counted::exact(
        received["bytes"].as_f64().unwrap() * 1442.0 / 1400.0,
        received["seconds"].as_f64().unwrap(),
    )
}

/// What an iperf3 UDP client sent, as L2 bit/s.
fn udp_l2_sent_bps(report: &serde_json::Value) -> f64 {
    let sent = &report["end"]["sum_sent"];
    let (Some(bytes), Some(secs)) = (sent["bytes"].as_f64(), sent["seconds"].as_f64()) else {
        panic!("iperf3 failed: {}", report["error"]);
    };
    bytes * 1442.0 / 1400.0 * 8.0 / secs
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn router_mode_forwards_ping_tcp_and_udp_both_ways() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "router");
        // Both directions shaped, at different rates: the rates prove the traffic went through
        // htbd (the kernel alone would not shape). Router mode needs kernel forwarding on: the XDP
        // program's FIB lookup honours it, and it is the fail-open path.
        let config = "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\
                  [[interface]]\nname = \"r1\"\n[interface.qdisc]\ndefault = \"1\"\n\
                  [[interface.class]]\nid = \"1:1\"\nrate = \"30mbit\"\n\
                  [[interface]]\nname = \"r2\"\n[interface.qdisc]\ndefault = \"1\"\n\
                  [[interface.class]]\nid = \"1:1\"\nrate = \"20mbit\"\n";
        let _htbd = Htbd::start(&lab, config);
        assert!(lab.xdp_attached(R, "r1") && lab.xdp_attached(R, "r2"));
        assert_eq!(lab.ping(N1, "10.201.2.2", 5, "0.2"), 5, "node-1 → node-2");
        assert_eq!(lab.ping(N2, "10.201.1.2", 5, "0.2"), 5, "node-2 → node-1");
        for (reverse, shaped) in [(false, 20e6), (true, 30e6)] {
            let _s = lab.iperf_server(N2, 5201);
            let tcp = lab.iperf(N1, "10.201.2.2", 5201, 3, None, reverse);
            let bps = tcp["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .unwrap();
            // TCP goodput is a few % below the L2 rate the class shapes.
            assert!(
                (0.85 * shaped..shaped).contains(&bps),
                "TCP reverse={reverse}: {bps} bit/s, class {shaped}"
            );
            let _s = lab.iperf_server(N2, 5202);
            let udp = lab.iperf(N1, "10.201.2.2", 5202, 2, Some("10M"), reverse);
            let lost = udp["end"]["sum_received"]["lost_percent"].as_f64().unwrap();
            assert!(lost < 1.0, "UDP reverse={reverse}: {lost} % lost");
        }
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn bridge_mode_forwards() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "bridge");
        let config = "[daemon]\nmode = \"bridge\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\n\
                  [[interface]]\nname = \"r1\"\npeer = \"r2\"\n\
                  [[interface]]\nname = \"r2\"\npeer = \"r1\"\n[interface.qdisc]\ndefault = \"1\"\n\
                  [[interface.class]]\nid = \"1:1\"\nrate = \"20mbit\"\n";
        let _htbd = Htbd::start(&lab, config);
        // The kernel bridge is down: frames can only cross through htbd (ARP included).
        assert!(
            lab.exec(R, &["ip", "link", "set", "br0", "down"])
                .status
                .success()
        );
        assert_eq!(lab.ping(N1, "10.201.0.2", 5, "0.2"), 5);
        assert_eq!(lab.ping(N2, "10.201.0.1", 5, "0.2"), 5);
        let _s = lab.iperf_server(N2, 5201);
        let tcp = lab.iperf(N1, "10.201.0.2", 5201, 3, None, false);
        let bps = tcp["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap();
        // Shaped to 20 Mbit/s at L2 (TCP goodput a little below).
        assert!(
            (15e6..20.5e6).contains(&bps),
            "TCP through the bridge: {bps} bit/s"
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn one_class_at_10_100_500_mbit_within_2_percent() {
    htb_lab::remeasured(|| {
        accuracy(1);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn one_class_at_10_100_500_mbit_within_2_percent_with_2_workers() {
    htb_lab::remeasured(|| {
        accuracy(2);
    });
}

fn accuracy(workers: u32) {
    let lab = Lab::up_with_queues("htbt", "router", workers);
    // iperf3 offers 1.2× at 10 and 100 Mbit/s. The third point is 500 Mbit/s, offered by the
    // AF_XDP generator (600 Mbit/s of 1442-byte frames, iperf3's L2 size), because a gigabit is
    // not a rate this 2-vCPU VM can saturate reliably: iperf3 cannot offer 1.2 Gbit/s beside
    // htbd (872-962 Mbit/s measured), and with the generator offering it, htbd's copy-mode TX
    // (every frame copied, node-2's receive path running inside htbd's sendto) keeps the data
    // plane at ~94 % of a core and away for milliseconds now and then, so the class delivered
    // 966-999.6 Mbit/s from run to run even with a 10 ms burst. At 500 Mbit/s eight runs stayed
    // within 0.2 %. The gigabit figures live in the lab benchmark (`htb-lab bench`).
    for (rate, bps) in [("10mbit", 10e6), ("100mbit", 100e6), ("500mbit", 500e6)] {
        let config = one_class(rate, workers);
        let htbd = Htbd::start(&lab, &config);
        let what = format!("class at {rate}, L2 at node-2's veth");
        htbd.assert_shapes(&what, ("r2", "1:1"), &Promise::class(bps), 0.02, || {
            if bps < 500e6 {
                lab.udp_load(5201, &format!("{:.0}", bps * 1.2), 6)
            } else {
                lab.xdp_load(5201, "600mbit", 1442, 6)
            }
        });
        assert_workers(&htbd, workers as usize);
        drop(htbd);
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn an_idle_class_share_is_borrowed() {
    htb_lab::remeasured(|| {
        borrowing(1);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn an_idle_class_share_is_borrowed_with_2_workers() {
    htb_lab::remeasured(|| {
        borrowing(2);
    });
}

/// 1:10 and 1:20 under 1:1; with two workers each subtree has its own, and 1:1's buckets are
/// shared.
fn borrowing(workers: u32) {
    let lab = Lab::up_with_queues("htbt", "router", workers);
    let tree = "[interface.qdisc]\n[[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n\
                [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"30mbit\"\nceil = \"100mbit\"\n\
                [[interface.class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"70mbit\"\nceil = \"100mbit\"\n\
                [[interface.filter]]\nmatch = { dport = \"5201\" }\nclassid = \"1:10\"\n\
                [[interface.filter]]\nmatch = { dport = \"5202\" }\nclassid = \"1:20\"\n";
    let htbd = Htbd::start(&lab, &router_config_with(tree, workers));
    if workers > 1 {
        let status = htbd.status();
        let subtrees: Vec<u32> = status.workers.iter().map(|w| w.subtrees).collect();
        assert!(
            subtrees.iter().all(|&n| n >= 1),
            "each worker serves a subtree: {subtrees:?}"
        );
    }
    // 1:20 idle: 1:10 borrows its share and runs at the parent's 100 Mbit/s.
    htbd.assert_shapes(
        "1:10 alone (borrowing 1:20's idle share)",
        ("r2", "1:10"),
        &Promise::class(100e6),
        0.03,
        || lab.udp_load(5201, "150M", 4),
    );
    // Both busy: each gets its rate. The first phase's flow must be gone first: its backlog
    // (fq_codel holds up to 10 240 packets of an unresponsive flood) would share 1:10.
    htbd.wait_drained("r2");
    let before = [
        htbd.class_stats("r2", "1:10"),
        htbd.class_stats("r2", "1:20"),
    ];
    let _s1 = lab.iperf_server(N2, 5201);
    let _s2 = lab.iperf_server(N2, 5202);
    let ((first, second), stalls) = htbd.accounted(|| {
        let second = lab.udp_flow(5202, "150M", 5);
        let first = lab.iperf(N1, "10.201.2.2", 5201, 5, Some("150M"), false);
        let second: serde_json::Value =
            serde_json::from_slice(&second.wait_with_output().unwrap().stdout).unwrap();
        (first, second)
    });
    for (report, class, rate) in [(&first, "1:10", 30e6), (&second, "1:20", 70e6)] {
        let offered = udp_l2_sent_bps(report);
        eprintln!("{class}: offered {:.1} Mbit/s", offered / 1e6);
        assert!(
            offered >= 1.1 * rate,
            "premise failed: {class} was offered only {offered:.0} bit/s"
        );
    }
    htbd.assert_class_saturated("r2", "1:10", &before[0]);
    htbd.assert_class_saturated("r2", "1:20", &before[1]);
    // The receivers' windows include iperf3's start and end, when the other flow may not run
    // yet or any more: 5 % covers those moments, not the shaper.
    for (report, what, rate) in [
        (&first, "1:10 with 1:20 busy", 30e6),
        (&second, "1:20 with 1:10 busy", 70e6),
    ] {
        assert_owed(
            what,
            &udp_l2_received(report),
            &Promise::class(rate),
            &stalls,
            0.05,
        );
    }
    assert_workers(&htbd, workers as usize);
}

/// Two subscribers on two workers borrow from one root: the root's buckets are shared, so
/// together they get the root's rate, not twice it (LibreQoS's per-CPU roots cannot do this).
#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn two_workers_share_the_root_rate_within_1_percent() {
    htb_lab::remeasured(|| {
        let lab = Lab::up_with_queues("htbt", "router", 2);
        let tree = "[interface.qdisc]\n[[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n\
                [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"10mbit\"\nceil = \"100mbit\"\n\
                [[interface.class]]\nid = \"1:20\"\nparent = \"1:1\"\nrate = \"10mbit\"\nceil = \"100mbit\"\n\
                [[interface.filter]]\nmatch = { dport = \"5201\" }\nclassid = \"1:10\"\n\
                [[interface.filter]]\nmatch = { dport = \"5202\" }\nclassid = \"1:20\"\n";
        let htbd = Htbd::start(&lab, &router_config_with(tree, 2));
        let owners: Vec<u32> = htbd.status().workers.iter().map(|w| w.subtrees).collect();
        assert!(
            owners.iter().all(|&n| n >= 1),
            "subtrees per worker: {owners:?}"
        );
        let before = [
            htbd.class_stats("r2", "1:10"),
            htbd.class_stats("r2", "1:20"),
        ];
        // Each subscriber alone could take the whole 100 Mbit/s (its ceil): 2 × 80 Mbit/s offered.
        let (load, stalls) = htbd.accounted(|| lab.udp_loads(&[(5201, "80M"), (5202, "80M")], 5));
        load.assert_saturates("1:10 + 1:20 under a shared 1:1", 100e6);
        htbd.assert_class_saturated("r2", "1:10", &before[0]);
        htbd.assert_class_saturated("r2", "1:20", &before[1]);
        let sent = |id: &str, before: &serde_json::Value| {
            htbd.class_stats("r2", id)["bytes"].as_u64().unwrap()
                - before["bytes"].as_u64().unwrap()
        };
        let (a, b) = (sent("1:10", &before[0]), sent("1:20", &before[1]));
        eprintln!("1:10 sent {a} bytes, 1:20 {b} bytes");
        assert!(
            a > 0 && b > 0,
            "both subscribers were served: 1:10 {a} B, 1:20 {b} B"
        );
        assert_owed(
            "two workers' subscribers together under 1:1",
            &load.delivered,
            &Promise::class(100e6),
            &stalls,
            0.01,
        );
        assert_workers(&htbd, 2);
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_stalled_data_plane_logs_the_stall_it_was_kept_from_forwarding() {
    htb_lab::remeasured(|| {
        // The rate checks' accounting (`Htbd::accounted`, `htb_lab::owed`) rests on this log:
        // htbd stopped for 150 ms under load logs one stall of about that length.
        let lab = Lab::up("htbt", "router");
        let htbd = Htbd::start(&lab, &one_class("20mbit", 1));
        let _server = lab.iperf_server(N2, 5201);
        let client = Reaped(lab.udp_flow(5201, "30M", 4));
        std::thread::sleep(Duration::from_secs(1));
        let before = htbd.status();
        htbd.signal("STOP");
        std::thread::sleep(Duration::from_millis(150));
        htbd.signal("CONT");
        std::thread::sleep(Duration::from_millis(500));
        let after = htbd.status();
        drop(client);
        let stalls = after.workers[0].stalls.since(&before.workers[0].stalls);
        let (late, longest) = (
            stalls.total().as_nanos() / 1_000,
            stalls.longest().as_nanos() / 1_000,
        );
        eprintln!(
            "kept from forwarding {late} µs in {} stalls, the longest {longest} µs",
            stalls.count()
        );
        assert!(
            (150_000..400_000).contains(&late) && longest >= 150_000,
            "a 150 ms stop under load logged {late} µs (the longest stall {longest} µs)"
        );
    });
}

/// A shaper 2 % off fails a 1 % check whatever the host does: the accounting excuses what
/// the stalls cost, not more. Class 1:1 runs at 98 Mbit/s, with stall credit and without,
/// and one window is judged as if the class were 100 Mbit/s (it must fail, and not as a
/// premise failure) and as the 98 it is (it must pass). Run it with `HTB_LAB_STALLS=4/50` to
/// see it hold on a noisy host.
#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_class_2_percent_off_fails_the_check_whatever_the_stalls() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "router");
        if let Some(pattern) = lab.imitated_stalls() {
            eprintln!("with imitated stalls of {pattern}");
        }
        for credit in ["10ms", "0s"] {
            let config = one_class("98mbit", 1).replace(
                "realtime = 1\n",
                &format!("realtime = 1\nstall_credit = \"{credit}\"\n"),
            );
            let htbd = Htbd::start(&lab, &config);
            let before = htbd.class_stats("r2", "1:1");
            let (load, stalls) = htbd.accounted(|| lab.udp_load(5201, "120M", 6));
            load.assert_saturates("a 98 Mbit/s class", 98e6);
            htbd.assert_class_saturated("r2", "1:1", &before);
            let as_configured = htb_lab::owed::judge(
                &format!("98 Mbit/s judged as 98 (stall credit {credit})"),
                &load.delivered,
                &Promise::class(98e6),
                &stalls,
                0.01,
            );
            let off = htb_lab::owed::judge(
                &format!("98 Mbit/s judged as 100 (stall credit {credit})"),
                &load.delivered,
                &Promise::class(100e6),
                &stalls,
                0.01,
            );
            let as_configured = match as_configured {
                Ok(report) => report,
                Err(Misjudged::Unmeasured(report)) => unmeasured(report),
                Err(Misjudged::Off(report)) => panic!("the right rate must pass: {report}"),
            };
            eprintln!("{as_configured}");
            match off {
                Err(Misjudged::Off(report)) => eprintln!("{report}"),
                Err(Misjudged::Unmeasured(report)) => {
                    panic!("2 % off must fail the check, not its premise: {report}")
                }
                Ok(report) => panic!("a class 2 % off passed a 1 % check: {report}"),
            }
            drop(htbd);
            std::thread::sleep(Duration::from_millis(300));
        }
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn unclassified_traffic_goes_to_the_default_class() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "router");
        let tree = "[interface.qdisc]\ndefault = \"30\"\n[[interface.class]]\nid = \"1:1\"\nrate = \"200mbit\"\n\
                [[interface.class]]\nid = \"1:10\"\nparent = \"1:1\"\nrate = \"100mbit\"\n\
                [[interface.class]]\nid = \"1:30\"\nparent = \"1:1\"\nrate = \"20mbit\"\n\
                [[interface.filter]]\nmatch = { dport = \"5201\" }\nclassid = \"1:10\"\n";
        let htbd = Htbd::start(&lab, &router_config(tree));
        htbd.assert_shapes(
            "unmatched port → default class 1:30",
            ("r2", "1:30"),
            &Promise::class(20e6),
            0.02,
            || lab.udp_load(5999, "40M", 4),
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn malformed_frames_do_not_disturb_forwarding() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "router");
        let mut htbd = Htbd::start(&lab, &one_class("100mbit", 1));
        send_malformed(&lab);
        assert_eq!(
            lab.ping(N1, "10.201.2.2", 10, "0.1"),
            10,
            "forwarding after malformed input"
        );
        htbd.assert_shapes(
            "shaping after malformed input",
            ("r2", "1:1"),
            &Promise::class(100e6),
            0.02,
            || lab.udp_load(5201, "150M", 5),
        );
        htbd.wait_for_log("htbd running", Duration::from_secs(1));
        assert!(!htbd.log_text().contains("panicked"), "{}", htbd.log_text());
    });
}

/// Router mode hands most malformed frames to the kernel in XDP; bridge mode sends every frame
/// to htbd, so there its parser, classifier and data plane meet them all.
#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn malformed_frames_reach_htbd_in_bridge_mode_and_disturb_nothing() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "bridge");
        let mut htbd = Htbd::start(
            &lab,
            "[daemon]\nmode = \"bridge\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\n\
         [[interface]]\nname = \"r1\"\npeer = \"r2\"\n\
         [[interface]]\nname = \"r2\"\npeer = \"r1\"\n[interface.qdisc]\ndefault = \"1\"\n\
         [[interface.class]]\nid = \"1:1\"\nrate = \"100mbit\"\n",
        );
        // The kernel bridge is down: frames can only cross through htbd.
        assert!(
            lab.exec(R, &["ip", "link", "set", "br0", "down"])
                .status
                .success()
        );
        let rx = |htbd: &Htbd| {
            htbd.status()
                .ports
                .iter()
                .find(|p| p.dev == "r1")
                .map_or(0, |p| p.rx_packets)
        };
        let before = rx(&htbd);
        let sent = send_malformed(&lab);
        let received = rx(&htbd) - before;
        assert!(
            received >= sent,
            "htbd's r1 received {received} of the {sent} malformed frames"
        );
        assert_eq!(
            lab.ping(N1, "10.201.0.2", 10, "0.1"),
            10,
            "bridging after malformed input"
        );
        htbd.wait_for_log("htbd running", Duration::from_secs(1));
        assert!(!htbd.log_text().contains("panicked"), "{}", htbd.log_text());
    });
}

/// Sends 3000 malformed frames from node-1 (runts, bogus IHL, truncated IPv4/IPv6/VLAN headers
/// and random bytes), raw, at r1's MAC and at broadcast; returns how many the socket took.
fn send_malformed(lab: &Lab) -> u64 {
    let script = r#"
import os, random, socket, struct
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
random.seed(7)
r1 = bytes.fromhex("02000ac90101"); me = bytes.fromhex("02000ac90102")
sent = 0
for i in range(3000):
    dst = r1 if i % 3 else b"\xff" * 6
    kind = i % 6
    if kind == 0: body = b""
    elif kind == 1: body = b"\x08\x00" + bytes([0x4f]) + os.urandom(random.randrange(0, 40))
    elif kind == 2: body = b"\x86\xdd" + bytes([0x60]) + os.urandom(random.randrange(0, 60))
    elif kind == 3: body = b"\x81\x00\x00\x0a\x81\x00" + os.urandom(random.randrange(0, 10))
    elif kind == 4: body = b"\x08\x00\x45\x00\x00\x14" + os.urandom(14) + b"\x0a\xc9\x02\x02"
    else: body = os.urandom(random.randrange(2, 1400))
    frame = dst + me + body
    try:
        s.send(frame)
        sent += 1
    except OSError:
        pass
print("sent", sent)
"#;
    let out = lab.exec(N1, &["python3", "-c", script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .trim()
        .strip_prefix("sent ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn kill_9_fails_open_within_a_second_and_restart_resumes_shaping() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "router");
        let mut htbd = Htbd::start(&lab, &one_class("20mbit", 1));
        // 300 pings at 10 ms; htbd is killed a second in.
        let pinger = lab
            .cmd(N1, "ping")
            .args([
                "-n",
                "-q",
                "-c",
                "300",
                "-i",
                "0.01",
                "-W",
                "1",
                "10.201.2.2",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(1));
        htbd.kill9();
        let out = String::from_utf8_lossy(&pinger.wait_with_output().unwrap().stdout).into_owned();
        let received: u32 = out
            .lines()
            .find_map(|l| {
                l.split(", ")
                    .nth(1)
                    .and_then(|r| r.strip_suffix(" received"))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0);
        eprintln!("pings answered across kill -9: {received}/300");
        assert!(received >= 200, "more than a second of traffic lost: {out}");
        assert!(
            !lab.xdp_attached(R, "r1") && !lab.xdp_attached(R, "r2"),
            "XDP detached with the process"
        );
        // Unshaped through the kernel now.
        let unshaped = lab.udp_rate_at_n2(5201, "60M", 4);
        assert!(unshaped > 40e6, "the kernel forwards unshaped: {unshaped}");
        drop(htbd);
        let htbd = Htbd::start(&lab, &one_class("20mbit", 1));
        htbd.assert_shapes(
            "shaping after restart",
            ("r2", "1:1"),
            &Promise::class(20e6),
            0.02,
            || lab.udp_load(5201, "60M", 5),
        );
    });
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn a_bad_interface_attaches_nothing() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbt", "router");
        let config = "[daemon]\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\n[[interface]]\nname = \"r1\"\n[[interface]]\nname = \"nosuch0\"\n";
        let stderr = htbd_fails(&lab, config);
        assert!(stderr.contains("interface nosuch0"), "{stderr}");
        assert!(!lab.xdp_attached(R, "r1"), "nothing attached half-way");
        let stderr = htbd_fails(
            &lab,
            "[daemon]\nmode = \"hub\"\nstate_dir = \"@STATE@\"\n[[interface]]\nname = \"r1\"\n",
        );
        assert!(stderr.contains("line 2, column 8: daemon.mode"), "{stderr}");
        assert_eq!(
            lab.ping(N1, "10.201.2.2", 3, "0.2"),
            3,
            "the kernel still forwards"
        );
    });
}
