//! The classifier's cost per packet as the subscriber count grows (issue: 100 000 subscribers
//! on one box). `cargo bench --bench classify` (criterion), `HTB_BENCH_QUICK=1` for a short
//! run.
//!
//! - `subscribers`: n filters `dst A/32 → its class` (one per subscriber, as LibreQoS or a tc
//!   u32 hash-table script has them), n = 10, 1 000, 100 000.
//! - `mixed`: the same plus what operators put around them: DSCP EF to a voice class, UDP 53 to
//!   a DNS class (both at a lower prio, so looked at first), a port range, a catch-all.
//! - `linear`: the same lists walked filter by filter (what htbd did before), n ≤ 1 000.
//! - `general`: `mixed` with wondershaper's small-ACK filter first (u32 keys at offsets that
//!   are no header field: walked and read from the packet's bytes for every packet), the
//!   packets 1 500-byte TCP segments it does not match: what one general filter adds.
//!
//! Packets: 1 024 per batch, 90 % to a random known subscriber, 10 % to unknown addresses
//! (the worst case: every shape is looked at). Also measured: the time to compile 100 000
//! filters and the memory they take.
//!
//! Writes `target/htb-bench/classify.json`.

#[path = "support/subscribers.rs"]
mod subscribers;
#[path = "support/mod.rs"]
mod support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant as WallInstant;

use support::{Samples, quick};

use criterion::{BenchmarkId, Criterion};
use htb_config::filter::{
    Classifier, Filter, Headers, Match, PacketInfo, PortRange, RawKey, RawKeys,
};
use htb_core::ClassId;

const SIZES: [u32; 3] = [10, 1_000, 100_000];
const BATCH: usize = 1024;

/// Subscriber `i`'s address: 10.0.0.0/8, spread so /24s differ.
fn subscriber(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 + i.wrapping_mul(2_654_435_761) % 0x00ff_ffff)
}

fn subscriber_filters(n: u32) -> Vec<Filter> {
    subscribers::subscriber_filters(n, subscriber)
}

/// An IPv4 + TCP header of a 1 500-byte segment with PSH and ACK set (wondershaper's ACK
/// filter reads its header length, total length and flags, and does not match it).
const SEGMENT: [u8; 40] = {
    let mut h = [0u8; 40];
    h[0] = 0x45;
    h[2] = 0x05;
    h[3] = 0xdc;
    h[9] = 6;
    h[33] = 0x18;
    h
};

fn general_filters(n: u32) -> Vec<Filter> {
    let key = |at, mask, value| RawKey {
        at,
        nexthdr: false,
        mask,
        value,
    };
    let mut filters = mixed_filters(n);
    filters.push(Filter {
        police: None,
        prio: 1,
        matcher: Match {
            proto: Some(6),
            raw: RawKeys::new(&[
                key(0, 0x0f00_ffc0, 0x0500_0000),
                key(32, 0x00ff_0000, 0x0010_0000),
            ])
            .unwrap_or_default(),
            ..Match::default()
        },
        class: ClassId::new(1, 3),
    });
    filters
}

fn mixed_filters(n: u32) -> Vec<Filter> {
    let mut filters = vec![
        Filter {
            police: None,
            prio: 1,
            matcher: Match {
                dscp: Some(46),
                ..Match::default()
            },
            class: ClassId::new(1, 2),
        },
        Filter {
            police: None,
            prio: 1,
            matcher: Match {
                proto: Some(17),
                dport: Some(PortRange {
                    first: 53,
                    last: 53,
                }),
                ..Match::default()
            },
            class: ClassId::new(1, 3),
        },
        Filter {
            police: None,
            prio: 2,
            matcher: Match {
                proto: Some(17),
                dport: Some(PortRange {
                    first: 5000,
                    last: 5100,
                }),
                ..Match::default()
            },
            class: ClassId::new(1, 4),
        },
    ];
    filters.extend(subscriber_filters(n));
    filters.push(Filter {
        police: None,
        prio: 9,
        matcher: Match::default(),
        class: ClassId::new(1, 5),
    });
    filters
}

/// A tiny deterministic generator (xorshift) so every run classifies the same packets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
}

fn packets(n: u32) -> Vec<PacketInfo> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..BATCH)
        .map(|_| {
            let pick = rng.next();
            let dst = if pick.is_multiple_of(10) {
                Ipv4Addr::new(192, 0, 2, pick as u8)
            } else {
                subscriber(rng.next() % n)
            };
            PacketInfo {
                vlan: None,
                src: Some(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7))),
                dst: Some(IpAddr::V4(dst)),
                proto: Some(6),
                sport: Some(443),
                dport: Some(40_000 + (pick % 1000) as u16),
                dscp: Some(0),
                arp: false,
            }
        })
        .collect()
}

#[derive(serde::Serialize)]
struct Run {
    bench: &'static str,
    filters: u32,
    ns_per_packet: f64,
}

fn bench(c: &mut Criterion, runs: &mut Vec<Run>) {
    let mut group = c.benchmark_group("classify");
    type Lookup = fn(&Classifier, &PacketInfo) -> Option<usize>;
    type Case = (&'static str, fn(u32) -> Vec<Filter>, Lookup, u32);
    let compiled: Lookup = |c, p| c.classify_index(p);
    let linear: Lookup =
        |c, p| (0..c.len()).position(|i| c.filter(i).is_some_and(|f| f.matcher.matches(p)));
    let general: Lookup = |c, p| {
        let h = Headers {
            network: &SEGMENT,
            transport: Some(20),
        };
        c.classify_index_headers(p, &h)
    };
    let cases: [Case; 4] = [
        ("subscribers", subscriber_filters, compiled, u32::MAX),
        ("mixed", mixed_filters, compiled, u32::MAX),
        ("general", general_filters, general, u32::MAX),
        ("linear", mixed_filters, linear, 1_000),
    ];
    for (name, filters, lookup, max) in cases {
        for n in SIZES.into_iter().filter(|&n| n <= max) {
            let classifier = Classifier::new(filters(n));
            let batch = packets(n);
            let samples = Samples::default();
            group.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter_custom(|iters| {
                    let start = WallInstant::now();
                    let mut found = 0usize;
                    for _ in 0..iters {
                        for p in &batch {
                            found += std::hint::black_box(lookup(&classifier, p)).map_or(0, |_| 1);
                        }
                    }
                    let elapsed = start.elapsed();
                    assert!(found > 0 || iters == 0, "packets were classified");
                    samples.record(elapsed, iters * BATCH as u64);
                    elapsed
                });
            });
            runs.push(Run {
                bench: name,
                filters: n,
                ns_per_packet: samples.median(),
            });
        }
    }
    group.finish();
}

/// Compile time and memory of the largest list.
fn build_cost() -> serde_json::Value {
    let n = *SIZES.last().expect("sizes");
    let filters = mixed_filters(n);
    let list_bytes = size_of_val(filters.as_slice());
    let mut kept = None;
    let memory = allocation_counter::measure(|| kept = Some(Classifier::new(filters.clone())));
    let classifier = kept.expect("built");
    let (tables, ranges) = classifier.cost();
    drop(classifier);
    let mut times: Vec<f64> = (0..if quick() { 3 } else { 9 })
        .map(|_| {
            let copy = filters.clone();
            let start = WallInstant::now();
            let c = Classifier::new(copy);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            drop(c);
            ms
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let bytes = memory.bytes_max;
    serde_json::json!({
        "filters": filters.len(),
        "hash_tables": tables,
        "walked_one_by_one": ranges,
        "compile_ms_median": times[times.len() / 2],
        "bytes": bytes,
        "bytes_per_filter": bytes as f64 / filters.len() as f64,
        "of_which_filter_list_bytes_per_filter": list_bytes as f64 / filters.len() as f64,
    })
}

fn summarize(runs: &[Run], build: &serde_json::Value) {
    let dir = support::out_dir();
    let at = |bench: &str, n: u32| {
        runs.iter()
            .find(|r| r.bench == bench && r.filters == n)
            .map_or(f64::NAN, |r| r.ns_per_packet)
    };
    println!("\nclassification, ns per packet (median):");
    println!(
        "{:>12} {:>10} {:>10} {:>10}",
        "filters", "10", "1000", "100000"
    );
    for bench in ["subscribers", "mixed", "general", "linear"] {
        let cell = |n| {
            let v = at(bench, n);
            if v.is_nan() {
                "-".to_owned()
            } else {
                format!("{v:.1}")
            }
        };
        println!(
            "{bench:>12} {:>10} {:>10} {:>10}",
            cell(10),
            cell(1_000),
            cell(100_000)
        );
    }
    let growth = |bench: &str| at(bench, 100_000) / at(bench, 10);
    println!(
        "growth 10 → 100 000: subscribers {:.2}×, mixed {:.2}× (goal ≤ 1.5×); at 100 000: {:.1} / {:.1} ns (goal ≤ 50)",
        growth("subscribers"),
        growth("mixed"),
        at("subscribers", 100_000),
        at("mixed", 100_000)
    );
    println!(
        "one general (u32 key) filter adds {:.1} ns per packet at 100 000 filters",
        at("general", 100_000) - at("mixed", 100_000)
    );
    println!("compiling 100 000: {build}");
    let json = serde_json::json!({
        "runs": runs,
        "growth_10_to_100000": {
            "subscribers": growth("subscribers"),
            "mixed": growth("mixed"),
        },
        "general_filter_ns_at_100000": at("general", 100_000) - at("mixed", 100_000),
        "build_100000": build,
        "quick": quick(),
    });
    std::fs::write(
        dir.join("classify.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("write classify.json");
    println!("wrote {}/classify.json", dir.display());
}

fn main() {
    let mut criterion = support::criterion();
    let mut runs = Vec::new();
    bench(&mut criterion, &mut runs);
    let build = build_cost();
    criterion.final_summary();
    summarize(&runs, &build);
}
