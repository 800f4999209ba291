//! The cost per packet of measuring TCP round trips (`[[interface]] rtt = true`): what the data
//! plane adds to a frame that leaves through a measuring port — reading the TCP header and its
//! timestamp option, and the flow table's lookups for both directions. `cargo bench --bench
//! rtt` (criterion), `HTB_BENCH_QUICK=1` for a short run.
//!
//! - `tcp`: 1 024 frames of 1 024 flows in turn, data (TSval) and ACK (TSecr echoing it), so
//!   that half the frames give a sample: parse + observe, the whole work per frame.
//! - `udp`: the same number of UDP frames: what a port that measures pays for non-TCP traffic.
//! - `parse`: the frame parse alone (the data plane does it anyway), for reference.
//!
//! Writes `target/htb-bench/rtt.json`.

#[path = "support/mod.rs"]
mod support;

use std::time::Instant as WallInstant;

use criterion::{BenchmarkId, Criterion};
use htb_core::{ClassId, Instant};
use htb_xdp::parse::parse;
use htb_xdp::rtt::RttTracker;
use support::{Samples, quick};

const BATCH: usize = 1024;

/// An Ethernet + IPv4 + TCP (or UDP) frame of flow `i`, one direction or the other.
fn frame(i: u32, reply: bool, tcp: bool, ts: (u32, u32)) -> Vec<u8> {
    let (a, b) = ([10, 0, (i >> 8) as u8, i as u8], [100, 64, 0, 1]);
    let (src, dst, sport, dport) = if reply {
        (b, a, 5201u16, 40000 + (i as u16))
    } else {
        (a, b, 40000 + (i as u16), 5201u16)
    };
    let l4 = if tcp { 32 } else { 8 };
    let payload = if reply { 0 } else { 1400 };
    let ip_len = 20 + l4 + payload;
    let mut f = vec![0u8; 14 + ip_len];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
    f[22] = 64;
    f[23] = if tcp { 6 } else { 17 };
    f[26..30].copy_from_slice(&src);
    f[30..34].copy_from_slice(&dst);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    if tcp {
        f[38..42].copy_from_slice(&(i * 7).to_be_bytes());
        f[46] = 8 << 4;
        f[47] = 0x10;
        f[54..58].copy_from_slice(&[1, 1, 8, 10]);
        f[58..62].copy_from_slice(&ts.0.to_be_bytes());
        f[62..66].copy_from_slice(&ts.1.to_be_bytes());
    }
    f
}

fn main() {
    let mut criterion: Criterion = support::criterion();
    let mut group = criterion.benchmark_group("rtt");
    let class = Some((0u16, ClassId::new(1, 0x10)));
    let tcp: Vec<Vec<u8>> = (0..BATCH as u32)
        .map(|n| {
            let (i, reply) = (n / 2, n % 2 == 1);
            let ts = if reply { (9, 1000 + i) } else { (1000 + i, 9) };
            frame(i, reply, true, ts)
        })
        .collect();
    let udp: Vec<Vec<u8>> = (0..BATCH as u32)
        .map(|i| frame(i, false, false, (0, 0)))
        .collect();
    let mut results = Vec::new();
    for (name, frames, observe) in [
        ("tcp", &tcp, true),
        ("udp", &udp, true),
        ("parse", &tcp, false),
    ] {
        let samples = Samples::default();
        let mut tracker = RttTracker::new();
        let mut sampled = 0u64;
        let mut clock = 0u64;
        group.bench_function(BenchmarkId::new(name, BATCH), |b| {
            b.iter_custom(|iters| {
                let start = WallInstant::now();
                for _ in 0..iters {
                    for f in frames {
                        clock += 1000;
                        let parsed = parse(std::hint::black_box(f));
                        if !observe {
                            std::hint::black_box(parsed);
                            continue;
                        }
                        if let Some(s) = tracker.segment(f, &parsed) {
                            let seen = tracker.observe(&s, class, Instant::from_nanos(clock));
                            sampled += u64::from(seen.sample.is_some());
                        }
                    }
                }
                let elapsed = start.elapsed();
                samples.record(elapsed, iters * BATCH as u64);
                elapsed
            });
        });
        if name == "tcp" {
            assert!(sampled > 0, "the tcp frames gave round trips");
        }
        results.push((name, samples.median()));
    }
    group.finish();
    criterion.final_summary();
    let median = |n: &str| {
        results
            .iter()
            .find(|(k, _)| *k == n)
            .map_or(f64::NAN, |r| r.1)
    };
    let json = serde_json::json!({
        "ns_per_packet": results.iter().map(|(k, v)| ((*k).to_owned(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        "added_by_rtt_tcp_ns": median("tcp") - median("parse"),
        "added_by_rtt_udp_ns": median("udp") - median("parse"),
        "quick": quick(),
    });
    let dir = support::out_dir();
    std::fs::write(
        dir.join("rtt.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("write rtt.json");
    println!(
        "rtt: {:.1} ns per TCP frame (parse {:.1} ns; measuring adds {:.1} ns), {:.1} ns per UDP frame; wrote {}/rtt.json",
        median("tcp"),
        median("parse"),
        median("tcp") - median("parse"),
        median("udp"),
        dir.display()
    );
}
