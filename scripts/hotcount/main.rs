//! The core's hot path as `scripts/bench-count.sh` counts it: N enqueue + dequeue pairs,
//! round-robin over CLASSES leaves under one root at rates that never throttle (the complexity
//! benchmark's `hotpath/LEAF/backlogged_1/CLASSES`). Built against each tree's htb-core and run
//! under cachegrind, whose counts (instructions, simulated cache misses) do not move with a
//! noisy host as wall-clock time does.
//!
//! `hotcount CLASSES N [pfifo|fq_codel|cake]`: prints the wall-clock ns per pair (indicative
//! only). cake is the complexity benchmark's: triple-isolate, diffserv3, unlimited (LibreQoS's
//! leaf), one subscriber host per class.

use htb_core::{
    CakeConfig, ClassId, ClassSpec, Duration, Instant, LeafConfig, Packet, Rate, Scheduler,
    SchedulerConfig,
};

#[derive(Clone, Copy, Debug)]
struct Pkt {
    leaf: u32,
    len: u32,
    hash: u32,
}

impl Packet for Pkt {
    fn len_bytes(&self) -> u32 {
        self.len
    }
    fn flow_hash(&self) -> u32 {
        self.hash
    }
    /// One subscriber host per leaf, talking to as many servers as it has flows (the
    /// complexity benchmark's packet).
    fn host_hashes(&self) -> (u32, u32) {
        (self.hash ^ 0x5bd1_e995, self.leaf.wrapping_mul(0x85eb_ca6b))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(classes), Some(n)) = (
        args.first().and_then(|a| a.parse::<usize>().ok()),
        args.get(1).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: hotcount CLASSES N [pfifo|fq_codel|cake]");
        std::process::exit(2);
    };
    let leaf = match args.get(2).map_or("pfifo", String::as_str) {
        "pfifo" => LeafConfig::Pfifo { limit: 1000 },
        "fq_codel" => LeafConfig::default(),
        "cake" => LeafConfig::Cake(CakeConfig::default()),
        other => {
            eprintln!("hotcount: leaf {other:?}: pfifo, fq_codel or cake");
            std::process::exit(2);
        }
    };
    let config = SchedulerConfig {
        default_leaf: leaf,
        ..SchedulerConfig::default()
    };
    let fast = Rate::from_gbit(1_000_000);
    let mut htb = Scheduler::new(config);
    htb.reserve_classes(classes + 1);
    let root = ClassId::new(1, 1);
    let _ = htb
        .add_class(Instant::ZERO, root, None, &ClassSpec::new(fast))
        .expect("root");
    let spec = ClassSpec::new(fast).with_quantum(1500);
    let leaves: Vec<_> = (0..classes)
        .map(|i| {
            let id = ClassId::new(1, 0x10 + i as u32);
            let _ = htb
                .add_class(Instant::ZERO, id, Some(root), &spec)
                .expect("leaf");
            htb.handle(id).expect("handle")
        })
        .collect();
    let mut now = Instant::ZERO;
    let (mut next, mut flow, mut sent) = (0usize, 0u32, 0u64);
    let started = std::time::Instant::now();
    for _ in 0..n {
        // One packet time at 10 Gbit/s.
        now += Duration::from_nanos(1200);
        let hash = (next as u32)
            .wrapping_mul(4)
            .wrapping_add(flow & 3)
            .wrapping_mul(0x9E37_79B1);
        let packet = Pkt {
            leaf: next as u32,
            len: 1500,
            hash,
        };
        let _ = htb.enqueue(now, leaves[next], packet);
        next = if next + 1 == classes { 0 } else { next + 1 };
        if next == 0 {
            flow = flow.wrapping_add(1);
        }
        sent += htb.dequeue(now).map_or(0, |p| u64::from(p.len));
    }
    let elapsed = started.elapsed();
    assert_eq!(sent, n * 1500, "a packet was held back: the rates throttle");
    println!("{:.2}", elapsed.as_nanos() as f64 / n as f64);
}
