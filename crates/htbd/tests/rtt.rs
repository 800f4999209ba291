//! Passive TCP round trips per class against ping through the same path, in the netns lab:
//! one 20 Mbit/s class with a pfifo leaf, so that under load ping and TCP wait in the same
//! queue; the class's p50 (from TCP timestamps, measured at htbd towards node-2 and back)
//! against ping's from node-1, idle and loaded. Needs root and network namespaces, so each test
//! is `#[ignore]`d; `scripts/test.sh` includes them as root.
//!
//! The class's p50 is of its last 256 samples, about 2.5 s of four TCP flows; TCP's sawtooth
//! moves the queue by tens of ms over seconds (12 to 55 ms measured in one run). Ping over a
//! longer window than the class's measures another queue (the class read 44 ms against ping's
//! 37 over 8 s, where ping over the class's own span agrees): under load the pings run in the
//! last 2 s before the class is read, and the check says which span the class's samples
//! covered.

use std::process::Stdio;
use std::time::{Duration, Instant};

use htb_lab::latency::Pinger;
use htb_lab::{Htbd, Lab, N1, N2};
use serde_json::Value;

/// r2 measures round trips; everything to node-2 goes to 1:1 (20 Mbit/s, pfifo 200).
const CONFIG: &str = "[daemon]\nmode = \"router\"\nsocket = \"@SOCKET@\"\nstate_dir = \"@STATE@\"\nrealtime = 1\n\n\
     [[interface]]\nname = \"r1\"\n\n[[interface]]\nname = \"r2\"\nrtt = true\n\
     [interface.qdisc]\ndefault = \"1\"\n\
     [[interface.class]]\nid = \"1:1\"\nrate = \"20mbit\"\nleaf = { kind = \"pfifo\", limit = 200 }\n";

/// The class's round-trip line of `class show -s -j`.
fn rtt(htbd: &Htbd) -> Value {
    let stats = htbd.class_stats("r2", "1:1");
    stats["rtt"].clone()
}

fn ms(us: &Value) -> f64 {
    us.as_f64().unwrap_or(f64::NAN) / 1000.0
}

/// Ping's round trips in a window: the median, how far the middle half spreads from it, and how
/// many there were.
struct RoundTrips {
    p50: f64,
    spread: f64,
    n: usize,
}

impl RoundTrips {
    /// How far the class's median may be from this one: 10 % (0.2 ms at least), or twice the
    /// standard error of this median where the queue moved so much in the window that a median
    /// of this many samples is known no better (TCP's sawtooth fills and drains the queue; the
    /// class's samples and the reference's see the same queue, not the same instants of it).
    /// For a spread distribution the median's standard error is about 1.25 σ / √n, σ about
    /// 1.48 times half the middle half's width.
    fn tolerance(&self) -> f64 {
        let standard_error = 1.2533 * 1.4826 * self.spread / (self.n.max(1) as f64).sqrt();
        (0.1 * self.p50).max(0.2).max(2.0 * standard_error)
    }
}

/// Runs `iperf3 ARGS` from node-1 to node-2 for `secs` while `pings` pings `interval` s apart
/// run after `warmup`; returns ping's RTTs (ms) and the class's round trips right after.
fn measure(
    lab: &Lab,
    htbd: &Htbd,
    args: &[&str],
    secs: u32,
    warmup: u64,
    (pings, interval): (u32, f64),
) -> (RoundTrips, Value) {
    let _server = lab.iperf_server(N2, 5201);
    let client = lab
        .cmd(N1, "iperf3")
        .args(["-c", "10.201.2.2", "-p", "5201", "-t", &secs.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -c");
    std::thread::sleep(Duration::from_secs(warmup));
    let samples = |class: &Value| class["samples"].as_u64().unwrap_or(0);
    let (first, opened) = (samples(&rtt(htbd)), Instant::now());
    let rtts = Pinger::start(lab, pings, interval).finish();
    let measured = rtt(htbd);
    let closed = Instant::now();
    let _ = client.wait_with_output();
    assert!(
        rtts.received() as u32 >= pings * 9 / 10,
        "ping lost too much: {} of {pings}",
        rtts.received()
    );
    // The span of the class's last 256 samples, at the rate they came in the pings' window.
    let window = (closed - opened).as_secs_f64();
    let per_sec = (samples(&measured) - first) as f64 / window;
    eprintln!(
        "the pings ran {window:.2} s; the class's last 256 samples span {:.2} s of it",
        (256.0 / per_sec.max(1.0)).min(window)
    );
    let ping = RoundTrips {
        p50: rtts.quantile(0.5),
        spread: (rtts.quantile(0.75) - rtts.quantile(0.25)) / 2.0,
        n: rtts.received(),
    };
    (ping, measured)
}

#[test]
#[ignore = "needs root and network namespaces (scripts/test.sh runs it as root)"]
fn the_classes_round_trips_match_ping_idle_and_loaded() {
    htb_lab::remeasured(|| {
        let lab = Lab::up("htbr", "router");
        let htbd = Htbd::start(&lab, CONFIG);
        assert_eq!(lab.ping(N1, "10.201.2.2", 1, "0.2"), 1);

        // Idle: 1 Mbit/s of TCP leaves the queue empty.
        let (ping, class) = measure(&lab, &htbd, &["-b", "1M", "-l", "1400"], 7, 2, (40, 0.1));
        let samples_idle = class["samples"].as_u64().unwrap_or(0);
        eprintln!(
            "idle: ping p50 {:.3} ms (middle half ±{:.3}), class {class}",
            ping.p50, ping.spread
        );
        assert!(samples_idle >= 50, "few samples: {class}");
        let p50 = ms(&class["p50_us"]);
        assert!(
            (p50 - ping.p50).abs() <= ping.tolerance(),
            "idle: class p50 {p50:.3} ms against ping's {:.3} ms (±{:.3})",
            ping.p50,
            ping.tolerance()
        );

        let before = htbd.class_stats("r2", "1:1");
        // Loaded: four TCP flows keep the queue full; ping waits in it too, in the last 2 s (40
        // pings, 50 ms apart) before the class is read: about the span of its last 256 samples.
        let (ping, class) = measure(&lab, &htbd, &["-P", "4"], 12, 8, (40, 0.05));
        htbd.assert_class_saturated("r2", "1:1", &before);
        let samples = class["samples"].as_u64().unwrap_or(0) - samples_idle;
        eprintln!(
            "loaded: ping p50 {:.3} ms (middle half ±{:.3}), class {class} ({samples} new samples)",
            ping.p50, ping.spread
        );
        // Premise: the window (256 samples) holds only samples of the loaded run, and the queue
        // made the round trip long.
        assert!(samples >= 300, "too few samples under load: {samples}");
        assert!(
            ping.p50 > 5.0,
            "premise failed: the queue did not fill: ping p50 {:.3} ms",
            ping.p50
        );
        let p50 = ms(&class["p50_us"]);
        assert!(
            (p50 - ping.p50).abs() <= ping.tolerance(),
            "loaded: class p50 {p50:.3} ms against ping's {:.3} ms (±{:.3})",
            ping.p50,
            ping.tolerance()
        );
        // pfifo drops under load: TCP sent again, and the class saw it.
        assert!(
            class["retransmits"].as_u64().unwrap_or(0) > 0,
            "no retransmission seen: {class}"
        );
    });
}
