//! The cost per packet of flow records (`[flows]`): what the data plane adds to a frame when
//! flows are on — its key from the parsed headers, the table's lookup in the frame's window,
//! and the counts — and a sweep's share per pass. `cargo bench --bench flows` (criterion),
//! `HTB_BENCH_QUICK=1` for a short run.
//!
//! - `parse`: the frame parse and flow hash alone (the data plane does both anyway).
//! - `flows_1k`: 1 024 UDP flows in turn, every frame counted in its record.
//! - `flows_100k`: 102 400 flows in a table of 131 072 records (beyond the caches).
//!
//! Writes `target/htb-bench/flows.json`.

#[path = "support/mod.rs"]
mod support;

use std::time::Instant as WallInstant;

use criterion::{BenchmarkId, Criterion};
use htb_core::ClassId;
use htb_xdp::FlowHasher;
use htb_xdp::flow_table::{FlowConfig, FlowKey, FlowTable};
use htb_xdp::parse::parse;
use support::{Samples, quick};

/// An Ethernet + IPv4 + UDP frame of flow `i` (1400 bytes of payload).
fn frame(i: u32) -> Vec<u8> {
    let (src, dst) = (
        [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
        [100, 64, 0, 1],
    );
    let ip_len = 20 + 8 + 1400;
    let mut f = vec![0u8; 14 + ip_len];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&src);
    f[30..34].copy_from_slice(&dst);
    f[34..36].copy_from_slice(&(40000 + (i % 20000) as u16).to_be_bytes());
    f[36..38].copy_from_slice(&5201u16.to_be_bytes());
    f
}

fn main() {
    let mut criterion: Criterion = support::criterion();
    let mut group = criterion.benchmark_group("flows");
    let hasher = FlowHasher::default();
    let class = Some(ClassId::new(1, 0x10));
    let mut results = Vec::new();
    for (name, flows, entries, count) in [
        ("parse", 1024u32, 1024usize, false),
        ("flows_1k", 1024, 4096, true),
        ("flows_100k", 102_400, 131_072, true),
    ] {
        let frames: Vec<Vec<u8>> = (0..flows).map(frame).collect();
        let mut table = FlowTable::new(FlowConfig {
            entries,
            ..FlowConfig::default()
        });
        let samples = Samples::default();
        let mut clock = 0u64;
        group.bench_function(BenchmarkId::new(name, flows), |b| {
            b.iter_custom(|iters| {
                let start = WallInstant::now();
                for _ in 0..iters {
                    for f in &frames {
                        clock += 100;
                        let parsed = parse(std::hint::black_box(f));
                        let hash = hasher.hash(&parsed);
                        if !count {
                            std::hint::black_box((parsed, hash));
                            continue;
                        }
                        let info = &parsed.info;
                        let (Some(src), Some(dst)) = (info.src, info.dst) else {
                            continue;
                        };
                        if !table.sample() {
                            continue;
                        }
                        let key = FlowKey {
                            src,
                            dst,
                            proto: info.proto.unwrap_or(0),
                            sport: info.sport.unwrap_or(0),
                            dport: info.dport.unwrap_or(0),
                            vlan: info.vlan,
                            ingress: 0,
                            egress: 1,
                        };
                        let len = f.len() as u32 - 14;
                        table.observe(hash, &key, class, len, 0, clock);
                    }
                    // A pass's sweep, every batch of frames as the data plane does.
                    table.sweep(clock);
                    table.take_outbox().for_each(drop);
                }
                let elapsed = start.elapsed();
                samples.record(elapsed, iters * u64::from(flows));
                elapsed
            });
        });
        if count {
            let c = table.counters();
            assert!(c.live > u64::from(flows) * 9 / 10, "{name}: {c:?}");
        }
        results.push((name, samples.median(), table.counters()));
    }
    group.finish();
    criterion.final_summary();
    let median = |n: &str| {
        results
            .iter()
            .find(|(k, ..)| *k == n)
            .map_or(f64::NAN, |r| r.1)
    };
    let json = serde_json::json!({
        "ns_per_packet": results.iter().map(|(k, v, _)| ((*k).to_owned(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        "added_1k_flows_ns": median("flows_1k") - median("parse"),
        "added_100k_flows_ns": median("flows_100k") - median("parse"),
        "evicted_100k": results.iter().find(|r| r.0 == "flows_100k").map_or(0, |r| r.2.evicted),
        "memory_bytes_per_record": FlowConfig::default().memory_bytes() / 65_536,
        "quick": quick(),
    });
    let dir = support::out_dir();
    std::fs::write(
        dir.join("flows.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("write flows.json");
    println!(
        "flows: parse + hash {:.1} ns; flows add {:.1} ns per packet at 1k flows, {:.1} ns at 100k; wrote {}/flows.json",
        median("parse"),
        median("flows_1k") - median("parse"),
        median("flows_100k") - median("parse"),
        dir.display()
    );
}
