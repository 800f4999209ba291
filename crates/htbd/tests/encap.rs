//! Access encapsulations (issue 24): subscriber traffic that arrives as PPPoE sessions, QinQ
//! stacks or MPLS labels is classified by the IP header inside and shaped by its subscriber's
//! class. Bridge mode, where such frames reach htbd (router mode hands them to the kernel);
//! the frames come from `htb-xdp-gen --encap`.
//!
//! Needs root and network namespaces, so it is `#[ignore]`d (see `lab.rs`). Each measurement
//! proves its premise: both subscribers' generators offered more than their class, and each
//! class dropped or hit its limit; the two classes' sum at node-2 is judged by what they owed
//! in the window (`htb_lab::owed`), and each one's share of it by their rates.

use std::process::Stdio;
use std::time::Duration;

use htb_lab::{Htbd, Lab, N1, Promise, R, Reaped, assert_owed, gen_bin};

/// Two subscribers (by inner destination) at 8 and 24 Mbit/s, and a default class that should
/// see none of their traffic.
const CONFIG: &str = "[daemon]\nmode = \"bridge\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\n\
    realtime = 1\n\
    [[interface]]\nname = \"r1\"\npeer = \"r2\"\n\
    [[interface]]\nname = \"r2\"\npeer = \"r1\"\n\
    [interface.qdisc]\ndefault = \"99\"\n\
    [[interface.class]]\nid = \"1:10\"\nrate = \"8mbit\"\n\
    [[interface.class]]\nid = \"1:20\"\nrate = \"24mbit\"\n\
    [[interface.class]]\nid = \"1:99\"\nrate = \"1mbit\"\n\
    [[interface.filter]]\nmatch = { dst = \"100.64.0.10/32\" }\nclassid = \"1:10\"\n\
    [[interface.filter]]\nmatch = { dst = \"100.64.0.20/32\", dport = \"5201\" }\nclassid = \"1:20\"\n";

const SECS: u64 = 6;

/// Starts a generator sending `encap`-wrapped UDP to `dst` at `rate` on TX queue `queue` (one
/// AF_XDP socket per queue: two generators need two).
fn generator(lab: &Lab, queue: u32, encap: &str, dst: &str, rate: &str) -> Reaped {
    let bin = gen_bin();
    lab.cmd(N1, bin.to_str().unwrap_or("htb-xdp-gen"))
        .args(["eth0", "--src-mac", "02:00:0a:c9:01:02"])
        .args(["--dst-mac", "02:00:0a:c9:02:02", "--src-ip", "100.64.1.1"])
        .args(["--dst-ip", dst, "--dport", "5201", "--size", "1000"])
        .args(["--rate", rate, "--seconds", &SECS.to_string()])
        .args(["--encap", encap, "--queue", &queue.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()))
}

/// A counter of class `id` on r2.
fn counter(stats: &serde_json::Value, key: &str) -> u64 {
    stats[key].as_u64().unwrap_or(0)
}

/// Each subscriber's class carries its rate of `encap` frames: the two together within 1 % of
/// what they owed, each its share of that within 1 %; the default class none of them.
fn shaped_by_inner_ip(lab: &Lab, htbd: &Htbd, encap: &str) {
    let _a = generator(lab, 0, encap, "100.64.0.10", "12mbit");
    let _b = generator(lab, 1, encap, "100.64.0.20", "36mbit");
    std::thread::sleep(Duration::from_millis(1500));
    // Every class's counters from one `class show`, so that all are read at one instant.
    let snapshot = || {
        let out = htbd.cli_ok(&["-s", "-j", "class", "show", "dev", "r2"]);
        let list: serde_json::Value = serde_json::from_str(&out).expect("class show -j");
        ["1:10", "1:20", "1:99"].map(|id| {
            list.as_array()
                .and_then(|l| l.iter().find(|c| c["handle"] == id))
                .map(|c| c["stats"].clone())
                .unwrap_or_else(|| panic!("no class {id}: {out}"))
        })
    };
    let before = snapshot();
    let (load, stalls) =
        htbd.accounted(|| lab.measure_load(Duration::ZERO, Duration::from_secs(SECS - 3)));
    let after = snapshot();
    load.assert_saturates(&format!("{encap}: both subscribers"), 32e6);
    let sent = |i: usize| (counter(&after[i], "bytes") - counter(&before[i], "bytes")) as f64;
    let both = Promise::class(8e6).rate_bps + Promise::class(24e6).rate_bps;
    let bursts = Promise::class(8e6).burst_bytes + Promise::class(24e6).burst_bytes;
    assert_owed(
        &format!("{encap}: classes 1:10 and 1:20 together, L2 at node-2"),
        &load.delivered,
        &Promise::class(both).with_burst(bursts),
        &stalls,
        0.01,
    );
    for (i, (id, rate)) in [("1:10", 8e6), ("1:20", 24e6)].into_iter().enumerate() {
        htbd.assert_class_saturated("r2", id, &before[i]);
        let share = sent(i) / (sent(0) + sent(1));
        let want = rate / both;
        eprintln!(
            "{encap}: class {id} had {:.2} % of the bytes, its rate {:.2} %",
            share * 100.0,
            want * 100.0
        );
        assert!(
            (share - want).abs() / want <= 0.01,
            "{encap}: class {id} had {:.2} % of the two classes' bytes, not {:.2} %",
            share * 100.0,
            want * 100.0
        );
    }
    let stray = counter(&after[2], "packets") - counter(&before[2], "packets");
    assert_eq!(
        stray, 0,
        "{encap}: {stray} frames fell to the default class: the inner IP was not read"
    );
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn pppoe_qinq_and_mpls_subscribers_are_shaped_by_their_inner_ip() {
    htb_lab::remeasured(|| {
        let lab = Lab::up_with_queues("htbe", "bridge", 2);
        let htbd = Htbd::start(&lab, CONFIG);
        // The kernel bridge is down: frames can only cross through htbd.
        assert!(
            lab.exec(R, &["ip", "link", "set", "br0", "down"])
                .status
                .success()
        );
        for encap in ["pppoe", "qinq", "mpls"] {
            shaped_by_inner_ip(&lab, &htbd, encap);
            // Let the classes drain before the next encapsulation.
            std::thread::sleep(Duration::from_millis(1500));
        }
    });
}
