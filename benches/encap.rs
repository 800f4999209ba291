//! What an access encapsulation costs per packet (issue 24: PPPoE and QinQ subscribers
//! classified by inner IP at ≥ 0.95× the packets/s of plain IPv4 through the same tree).
//! `cargo bench --bench encap` (criterion), `HTB_BENCH_QUICK=1` for a short run.
//!
//! Per frame, the data plane's work that depends on the encapsulation: the parse
//! (`htb_xdp::parse::parse`, which walks the tags, the PPPoE header or the label stack) and the
//! classification by the inner addresses through 10 000 subscriber filters (`dst A/32`), 1 024
//! frames of 1 024 subscribers per batch. The rest of a frame's path (rings, the scheduler,
//! transmit) does not read the headers and costs the same for every form.
//!
//! Writes `target/htb-bench/encap.json`: ns per frame for plain IPv4, 802.1Q, QinQ, PPPoE (with
//! and without a VLAN tag) and MPLS, and each as a share of plain IPv4's frames/s.

#[path = "support/subscribers.rs"]
mod subscribers;
#[path = "support/mod.rs"]
mod support;

use std::net::Ipv4Addr;
use std::time::Instant as WallInstant;

use criterion::{BenchmarkId, Criterion};
use htb_config::filter::Classifier;
use htb_xdp::parse::parse;
use support::{Samples, quick};

const SUBSCRIBERS: u32 = 10_000;
const BATCH: u32 = 1024;

fn subscriber(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x6440_0000 + i)
}

/// The forms measured: name and the bytes between the MACs and the IP header (the PPPoE
/// length is not checked by the parser, as the kernel's flow dissector does not check it).
const FORMS: [(&str, &[u8]); 6] = [
    ("ipv4", &[0x08, 0x00]),
    ("vlan", &[0x81, 0x00, 0x00, 0x64, 0x08, 0x00]),
    (
        "qinq",
        &[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00],
    ),
    (
        "pppoe",
        &[0x88, 0x64, 0x11, 0x00, 0x12, 0x34, 0x05, 0xc0, 0x00, 0x21],
    ),
    (
        "vlan_pppoe",
        &[
            0x81, 0x00, 0x00, 0x64, 0x88, 0x64, 0x11, 0x00, 0x12, 0x34, 0x05, 0xc0, 0x00, 0x21,
        ],
    ),
    ("mpls", &[0x88, 0x47, 0x00, 0x3e, 0x81, 0x40]),
];

/// A 1 500-byte IPv4/UDP packet to subscriber `i`, carried as `encap` says.
fn frame(encap: &[u8], i: u32) -> Vec<u8> {
    let mut f = vec![0x02; 12];
    f.extend_from_slice(encap);
    let mut ip = vec![0u8; 1500];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&1500u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[100, 64, 255, 1]);
    ip[16..20].copy_from_slice(&subscriber(i).octets());
    ip[20..22].copy_from_slice(&40000u16.to_be_bytes());
    ip[22..24].copy_from_slice(&5201u16.to_be_bytes());
    f.extend_from_slice(&ip);
    f
}

fn main() {
    let mut criterion: Criterion = support::criterion();
    let classifier = Classifier::new(subscribers::subscriber_filters(SUBSCRIBERS, subscriber));
    let mut group = criterion.benchmark_group("encap");
    let mut runs: Vec<(&str, f64)> = Vec::new();
    for (name, encap) in FORMS {
        // Subscribers spread over the list, each frame a different one.
        let batch: Vec<Vec<u8>> = (0..BATCH)
            .map(|k| frame(encap, k.wrapping_mul(7919) % SUBSCRIBERS))
            .collect();
        let samples = Samples::default();
        group.bench_function(BenchmarkId::new("parse_classify", name), |b| {
            b.iter_custom(|iters| {
                let start = WallInstant::now();
                let mut found = 0u64;
                for _ in 0..iters {
                    for f in &batch {
                        let parsed = parse(std::hint::black_box(f));
                        let at =
                            classifier.classify_index_headers(&parsed.info, &parsed.headers(f));
                        found += u64::from(at.is_some());
                    }
                }
                let elapsed = start.elapsed();
                assert!(
                    iters == 0 || found == iters * u64::from(BATCH),
                    "{name}: every frame finds its subscriber ({found})"
                );
                samples.record(elapsed, iters * u64::from(BATCH));
                elapsed
            });
        });
        runs.push((name, samples.median()));
    }
    group.finish();
    criterion.final_summary();
    let plain = runs[0].1;
    println!("\nparse + classify through {SUBSCRIBERS} subscribers, ns per frame (median):");
    let mut json = serde_json::Map::new();
    for &(name, ns) in &runs {
        let share = plain / ns;
        println!("{name:>12} {ns:>7.1} ns  {share:.2}× plain IPv4's frames/s");
        json.insert(
            name.to_owned(),
            serde_json::json!({"ns_per_frame": ns, "share_of_ipv4_rate": share}),
        );
    }
    let report = serde_json::json!({
        "subscribers": SUBSCRIBERS,
        "forms": json,
        "quick": quick(),
    });
    let dir = support::out_dir();
    std::fs::write(
        dir.join("encap.json"),
        serde_json::to_string_pretty(&report).expect("json"),
    )
    .expect("write encap.json");
    println!("wrote {}/encap.json", dir.display());
}
