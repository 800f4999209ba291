//! The leaf disciplines on their own: behaviour against the kernel's, and conservation (every
//! packet in comes out once: sent, refused, or dropped into the store's list).

extern crate std;
use std::collections::BTreeMap;
use std::vec::Vec;

use super::*;
use crate::Duration;

const MS: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pkt {
    id: u32,
    flow: u32,
    len: u32,
    ect: bool,
    ce: bool,
}

impl Packet for Pkt {
    fn len_bytes(&self) -> u32 {
        self.len
    }
    /// Flow `f` lands in fq_codel bucket `f` of 1024 (`reciprocal_scale`).
    fn flow_hash(&self) -> u32 {
        self.flow << 22
    }
    fn set_ce(&mut self) -> bool {
        if self.ect {
            self.ce = true;
        }
        self.ect
    }
}

/// A leaf under test, with its store and the packets it handed back.
struct Bench {
    leaf: Leaf,
    store: LeafStore<Pkt>,
    next_id: u32,
    /// The flow of every packet pushed, in order.
    pushed: Vec<u32>,
    sent: Vec<Pkt>,
    refused: Vec<Pkt>,
}

impl Bench {
    fn new(config: LeafConfig) -> Self {
        Self {
            leaf: Leaf::new(&config, 7, 42, Instant::ZERO),
            store: LeafStore::default(),
            next_id: 0,
            pushed: Vec::new(),
            sent: Vec::new(),
            refused: Vec::new(),
        }
    }

    fn push(&mut self, flow: u32, len: u32, ect: bool, now: u64) {
        let p = Pkt {
            id: self.next_id,
            flow,
            len,
            ect,
            ce: false,
        };
        self.next_id += 1;
        self.pushed.push(flow);
        if let Err(p) = self
            .leaf
            .enqueue(&mut self.store, p, Instant::from_nanos(now))
        {
            self.refused.push(p);
        }
        self.check();
    }

    fn pop(&mut self, now: u64) -> Option<Pkt> {
        let p = self.leaf.dequeue(&mut self.store, Instant::from_nanos(now));
        if let Some(p) = p {
            self.sent.push(p);
        }
        self.check();
        p
    }

    fn check(&self) {
        let records = self.leaf.check(&self.store).unwrap();
        assert_eq!(records, self.store.flows.in_use(), "flow records leaked");
        assert_eq!(self.store.packets.in_use(), self.leaf.len() as usize);
    }

    /// Every packet in came out exactly once.
    fn assert_conserved(&mut self) {
        let mut all: Vec<u32> = self.sent.iter().map(|p| p.id).collect();
        all.extend(self.refused.iter().map(|p| p.id));
        all.extend(self.store.dropped.iter().map(|p| p.id));
        let mut held = Vec::new();
        self.leaf.purge(&mut self.store, |p| held.push(p.id));
        all.extend(held);
        all.sort_unstable();
        assert_eq!(all, (0..self.next_id).collect::<Vec<_>>());
        assert_eq!(self.store.flows.in_use(), 0, "purge frees every flow");
        self.check();
    }

    fn bytes_by_flow(&self) -> BTreeMap<u32, u64> {
        let mut m = BTreeMap::new();
        for p in &self.sent {
            *m.entry(p.flow).or_default() += u64::from(p.len);
        }
        m
    }
}

fn fq_codel(f: impl FnOnce(&mut FqCodelSpec)) -> LeafConfig {
    let mut spec = FqCodelSpec::default();
    f(&mut spec);
    LeafSpec::FqCodel(spec).resolve().unwrap()
}

fn sfq(f: impl FnOnce(&mut SfqSpec)) -> LeafConfig {
    let mut spec = SfqSpec::default();
    f(&mut spec);
    LeafSpec::Sfq(spec).resolve().unwrap()
}

#[test]
fn fifos_tail_drop_at_their_packet_or_byte_limit() {
    let mut b = Bench::new(LeafConfig::Pfifo { limit: 3 });
    for _ in 0..5 {
        b.push(0, 1000, false, 0);
    }
    assert_eq!(b.refused.iter().map(|p| p.id).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(b.pop(0).unwrap().id, 0, "first in, first out");
    let mut b = Bench::new(LeafConfig::Bfifo { limit: 2500 });
    for len in [1000, 1000, 600, 400] {
        b.push(0, len, false, 0);
    }
    assert_eq!(b.refused.iter().map(|p| p.id).collect::<Vec<_>>(), [2]);
    assert_eq!(b.leaf.backlog(), 2400);
    assert_eq!(b.leaf.stats(&b.store).drops, 1);
    b.assert_conserved();
}

#[test]
fn fq_codel_serves_a_new_sparse_flow_before_a_bulk_flow() {
    let mut b = Bench::new(fq_codel(|_| {}));
    for _ in 0..100 {
        b.push(1, 1500, false, 0);
    }
    // The bulk flow spends its quantum, then goes to the old list.
    b.pop(MS);
    b.pop(MS);
    b.push(2, 100, false, MS);
    assert_eq!(b.pop(MS).unwrap().flow, 2, "the sparse flow jumps ahead");
    let s = b.leaf.stats(&b.store).fq_codel.unwrap();
    // Flow 2 stays on the new list, empty, until a dequeue finds it so.
    assert_eq!(
        (s.new_flow_count, s.new_flows_len, s.old_flows_len),
        (2, 1, 1)
    );
    b.assert_conserved();
}

/// A ping (98 bytes every 100 ms) beside four bulk flows in a 180 kbit/s class (seed 003's
/// rate), where one 1514-byte packet takes 67 ms: the ping flow, found empty on the new list,
/// waits a whole round of the old list (four bulk packets, 270 ms) for its next visit, so its
/// packets always leave above target. It never builds a standing queue, so CoDel must never
/// drop it — which needs RFC 8289's reset of `first_above_time` when a flow is found empty (the
/// kernel's `codel_dequeue` keeps it and drops one ping in seven here).
#[test]
fn fq_codel_never_drops_a_sparse_flow_in_a_slow_class() {
    let mut b = Bench::new(fq_codel(|_| {}));
    let tx_ns = |len: u32| u64::from(len) * 8 * 1_000_000_000 / 180_000;
    let (mut now, mut next_tx, mut next_ping) = (0, 0, 0);
    while now < 30_000 * MS {
        for flow in 1..=4 {
            let count = |v: &[Pkt]| v.iter().filter(|p| p.flow == flow).count();
            let out = count(&b.sent) + count(&b.store.dropped) + count(&b.refused);
            let pushed = b.pushed.iter().filter(|&&f| f == flow).count();
            for _ in pushed - out..20 {
                b.push(flow, 1514, false, now);
            }
        }
        if now >= next_ping {
            b.push(9, 98, false, now);
            next_ping += 100 * MS;
        }
        if now >= next_tx {
            let p = b.pop(now).expect("backlogged");
            next_tx = now + tx_ns(p.len);
        }
        now = next_tx.min(next_ping);
    }
    let dropped = |flow| b.store.dropped.iter().filter(|p| p.flow == flow).count();
    assert!(
        dropped(1) > 20,
        "CoDel controls the bulk flows: {}",
        dropped(1)
    );
    assert_eq!(dropped(9), 0, "the sparse flow lost packets");
    assert!(b.sent.iter().filter(|p| p.flow == 9).count() > 290);
    b.assert_conserved();
}

/// A leaf walks its own flows while it has few and indexes them in the table's map past four;
/// every step is checked (chain, count, map) as flows come and go across both thresholds.
#[test]
fn flows_are_found_by_walk_or_map_across_the_threshold() {
    for config in [fq_codel(|_| {}), sfq(|_| {})] {
        let mut b = Bench::new(config);
        for round in 0..3 {
            for flow in 0..12 {
                b.push(flow, 100 + round, false, 0);
            }
            assert_eq!(b.store.flows.in_use(), 12, "{config:?}");
            // Packets of existing flows find their flow, walked or mapped.
            b.push(3, 100, false, 0);
            assert_eq!(b.store.flows.in_use(), 12);
            while b.pop(0).is_some() {}
        }
        assert_eq!(b.sent.len(), 39);
        b.assert_conserved();
    }
}

#[test]
fn fq_codel_shares_bytes_equally_whatever_the_packet_sizes() {
    let mut b = Bench::new(fq_codel(|_| {}));
    for _ in 0..1500 {
        b.push(1, 1500, false, 0);
        b.push(2, 300, false, 0);
        b.push(2, 300, false, 0);
        b.push(2, 300, false, 0);
        b.push(2, 300, false, 0);
        b.push(2, 300, false, 0);
    }
    // Dequeue about half of it (no time passes: CoDel sees no sojourn).
    for _ in 0..4000 {
        b.pop(0);
    }
    let bytes = b.bytes_by_flow();
    let (a, c) = (bytes[&1] as f64, bytes[&2] as f64);
    assert!((a / c - 1.0).abs() < 0.01, "DRR by bytes: {a} vs {c}");
    b.assert_conserved();
}

#[test]
fn fq_codel_over_limit_drops_half_the_fattest_flow_from_its_head() {
    let mut b = Bench::new(fq_codel(|s| {
        s.limit = Some(100);
        s.drop_batch = Some(64);
    }));
    for _ in 0..90 {
        b.push(1, 1000, false, 0);
    }
    for _ in 0..10 {
        b.push(2, 1000, false, 0);
    }
    b.push(2, 1000, false, 0); // 101 > limit
    // Half of flow 1's 90 000 bytes: 45 packets from its head.
    let dropped: Vec<u32> = b.store.dropped.iter().map(|p| p.id).collect();
    assert_eq!(dropped, (0..45).collect::<Vec<_>>());
    let s = b.leaf.stats(&b.store);
    assert_eq!(
        (s.drops, s.fq_codel.unwrap().drop_overlimit, s.qlen),
        (45, 45, 56)
    );
    // drop_batch bounds it.
    let mut b = Bench::new(fq_codel(|s| {
        s.limit = Some(100);
        s.drop_batch = Some(8);
    }));
    for _ in 0..101 {
        b.push(1, 1000, false, 0);
    }
    assert_eq!(b.store.dropped.len(), 8);
    b.assert_conserved();
}

#[test]
fn fq_codel_memory_limit_counts_buffers() {
    let mut b = Bench::new(fq_codel(|s| s.memory_limit = Some(10_000)));
    for _ in 0..11 {
        b.push(1, 1000, false, 0);
    }
    let s = b.leaf.stats(&b.store).fq_codel.unwrap();
    // 11 000 > 10 000 bytes: half of the flow's 11 000 bytes goes, six packets.
    assert_eq!((s.drop_overmemory, s.drop_overlimit), (6, 6));
    assert_eq!(s.memory_usage, 5000);
    b.assert_conserved();
}

/// A bulk flow kept 50 packets deep, served every 0.1 ms (a standing queue of 5 ms at
/// least), for `ms` milliseconds; returns (drops, marks).
fn standing_queue(ect: bool, ms: u64) -> (usize, usize, Bench) {
    let mut b = Bench::new(fq_codel(|_| {}));
    let mut now = 0;
    while now < ms * MS {
        while b.leaf.len() < 80 {
            b.push(1, 1500, ect, now);
        }
        b.pop(now);
        now += MS / 10;
    }
    let marks = b.sent.iter().filter(|p| p.ce).count();
    (b.store.dropped.len(), marks, b)
}

#[test]
fn fq_codel_controls_a_standing_queue_by_dropping_or_marking() {
    let (drops, marks, mut b) = standing_queue(false, 1000);
    assert!(drops > 5 && marks == 0, "{drops} drops, {marks} marks");
    assert_eq!(b.leaf.stats(&b.store).drops as usize, drops);
    b.assert_conserved();
    let (drops, marks, mut b) = standing_queue(true, 1000);
    assert!(drops == 0 && marks > 5, "{drops} drops, {marks} marks");
    assert_eq!(
        b.leaf.stats(&b.store).fq_codel.unwrap().ecn_mark as usize,
        marks
    );
    b.assert_conserved();
}

#[test]
fn an_emptied_flow_keeps_its_codel_state_only_while_it_matters() {
    let (drops, _, mut b) = standing_queue(false, 1000);
    assert!(drops > 5);
    let now = 1000 * MS;
    while b.pop(now).is_some() {}
    // Dropping when it emptied: the flow waits on the dormant list (count - lastcount > 1
    // matters for 16 intervals after drop_next).
    assert_eq!(b.store.flows.in_use(), 1, "dormant");
    b.push(3, 100, false, now + 100 * MS);
    assert_eq!(b.store.flows.in_use(), 2, "still within 16 intervals");
    b.pop(now + 100 * MS);
    b.push(3, 100, false, now + 2000 * MS);
    while b.pop(now + 2000 * MS).is_some() {}
    assert_eq!(
        b.store.flows.in_use(),
        0,
        "expired state trimmed, flows freed"
    );
    b.assert_conserved();
}

#[test]
fn sfq_is_fair_in_bytes_and_drops_from_the_longest_flow() {
    let mut b = Bench::new(sfq(|s| s.limit = Some(100)));
    for _ in 0..40 {
        b.push(1, 1500, false, 0);
        for _ in 0..5 {
            b.push(2, 300, false, 0);
        }
    }
    // 240 packets into 100: flow 2 is the longest, and loses its tail each time (the first
    // drop is packet 100 itself, the 101st).
    assert_eq!(b.leaf.len(), 100);
    assert!(b.refused.is_empty());
    assert!(b.store.dropped.iter().all(|p| p.flow == 2));
    assert_eq!(b.store.dropped.first().map(|p| p.id), Some(100));
    b.assert_conserved();
    // Round robin by quantum: 1500 bytes per round each, one 1500 B packet or two 750 B.
    let mut b = Bench::new(sfq(|s| s.limit = Some(254)));
    for _ in 0..100 {
        b.push(1, 1500, false, 0);
    }
    for _ in 0..127 {
        b.push(2, 750, false, 0);
    }
    for _ in 0..150 {
        b.pop(0);
    }
    let bytes = b.bytes_by_flow();
    let (x, y) = (bytes[&1] as f64, bytes[&2] as f64);
    assert!(
        (x / y - 1.0).abs() < 0.03,
        "round robin by quantum: {x} vs {y}"
    );
    b.assert_conserved();
}

#[test]
fn sfq_depth_refuses_or_drops_the_head() {
    let mut b = Bench::new(sfq(|s| s.depth = Some(3)));
    for _ in 0..5 {
        b.push(1, 100, false, 0);
    }
    assert_eq!(b.refused.iter().map(|p| p.id).collect::<Vec<_>>(), [3, 4]);
    let mut b = Bench::new(sfq(|s| {
        s.depth = Some(3);
        s.headdrop = true;
    }));
    for _ in 0..5 {
        b.push(1, 100, false, 0);
    }
    assert!(b.refused.is_empty());
    assert_eq!(
        b.store.dropped.iter().map(|p| p.id).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(b.pop(0).unwrap().id, 2);
    b.assert_conserved();
}

#[test]
fn sfq_holds_at_most_flows_flows() {
    let mut b = Bench::new(sfq(|s| s.flows = Some(4)));
    for flow in 0..20 {
        b.push(flow * 7919, 100, false, 0);
    }
    // Twenty flows hashed into 1024 buckets; only four may hold packets.
    assert!(b.store.flows.in_use() <= 4);
    assert_eq!(b.leaf.len() as usize + b.refused.len(), 20);
    assert!(b.refused.len() >= 15, "{} refused", b.refused.len());
    b.assert_conserved();
}

#[test]
fn sfq_perturbation_rehashes_without_reordering_a_flow() {
    let mut b = Bench::new(sfq(|s| {
        s.perturb = Some(1);
        s.limit = Some(127);
    }));
    for i in 0..60 {
        b.push(i % 6, 200, false, 0);
    }
    assert_eq!(b.leaf.check(&b.store).unwrap(), 6, "six flows");
    // A second later the key changes and the 60 packets move to their new buckets.
    while b.pop(1_500 * MS).is_some() {}
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    for p in &b.sent {
        let prev = last.insert(p.flow, p.id);
        assert!(
            prev.is_none_or(|prev| prev < p.id),
            "flow {} reordered",
            p.flow
        );
    }
    assert_eq!(b.sent.len(), 60);
    b.assert_conserved();
}

#[test]
fn reconfiguring_in_place_keeps_packets_and_enforces_new_limits() {
    let mut b = Bench::new(fq_codel(|_| {}));
    for i in 0..50 {
        b.push(i % 5, 1000, false, 0);
    }
    let smaller = fq_codel(|s| s.limit = Some(20));
    assert!(b.leaf.reconfigure(&mut b.store, &smaller, Instant::ZERO));
    assert_eq!(b.leaf.len(), 20);
    assert_eq!(b.store.dropped.len(), 30);
    let resized = fq_codel(|s| s.flows = Some(16));
    assert!(
        !b.leaf.reconfigure(&mut b.store, &resized, Instant::ZERO),
        "flows are fixed"
    );
    assert!(
        !b.leaf
            .reconfigure(&mut b.store, &LeafConfig::Pfifo { limit: 5 }, Instant::ZERO)
    );
    b.check();
    let mut b = Bench::new(sfq(|_| {}));
    for i in 0..50 {
        b.push(i % 5, 1000, false, 0);
    }
    assert!(
        b.leaf
            .reconfigure(&mut b.store, &sfq(|s| s.limit = Some(10)), Instant::ZERO)
    );
    assert_eq!(b.leaf.len(), 10);
    b.assert_conserved();
}

#[test]
fn ce_threshold_marks_early() {
    let mut b = Bench::new(fq_codel(|s| {
        s.ce_threshold = Some(Duration::from_micros(500));
    }));
    for _ in 0..10 {
        b.push(1, 1500, true, 0);
    }
    let p = b.pop(MS).unwrap();
    assert!(p.ce);
    assert_eq!(b.leaf.stats(&b.store).fq_codel.unwrap().ce_mark, 1);
    b.assert_conserved();
}

#[test]
fn a_leaf_names_the_queue_a_flow_joins_where_it_has_queues() {
    // fq_codel: flow f lands in bucket f (see `Pkt::flow_hash`), started or not.
    let codel = fq_codel(|_| {});
    let b = Bench::new(codel);
    assert_eq!(b.leaf.queue_of(&b.store, 5 << 22), Some(5));
    let mut store: LeafStore<Pkt> = LeafStore::default();
    let unstarted = Leaf::unstarted(&mut store, &codel, 3);
    assert_eq!(unstarted.queue_of(&store, 1000 << 22), Some(1000));
    // sfq: two flows in one bucket are one queue (six flows, and a seventh that shares).
    let mut b = Bench::new(sfq(|_| {}));
    let queue = |b: &Bench, flow: u32| b.leaf.queue_of(&b.store, flow << 22).unwrap();
    let first = queue(&b, 0);
    let twin = (1..100_000).find(|&f| queue(&b, f) == first).unwrap();
    let other = (1..100_000).find(|&f| queue(&b, f) != first).unwrap();
    for flow in [0, twin, other] {
        b.push(flow, 100, false, 0);
    }
    assert_eq!(
        b.leaf.check(&b.store).unwrap(),
        2,
        "flows 0 and {twin} share a queue"
    );
    b.assert_conserved();
    // One queue, or a choice that depends on what the leaf holds: no answer.
    for config in [
        LeafConfig::Pfifo { limit: 10 },
        LeafConfig::Cake(CakeConfig::default()),
    ] {
        let b = Bench::new(config);
        assert_eq!(b.leaf.queue_of(&b.store, 1), None, "{config:?}");
    }
}

/// A fifo's box holds its queue alone, so that it takes one 32-byte heap chunk (glibc's for
/// up to 24 bytes): the kind and drops ride in the leaf slot beside the pointer.
#[test]
fn fifo_box_and_leaf_slot_stay_small() {
    assert_eq!(size_of::<Fifo>(), 24);
    assert_eq!(size_of::<Leaf>(), 16);
}
