//! `cake` on its own: host fairness, tins, the ACK filter, the shaper, overhead and the
//! buffer limit, with the invariants checked after every step.

extern crate std;
use std::vec::Vec;

use super::tcp::ACK;
use super::tcp::tests::segment;
use super::*;
use crate::leaf::{Leaf, LeafConfig, LeafStore};
use crate::rate::Rate;
use crate::time::Instant;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
struct Pkt {
    flow: u32,
    src: u32,
    dst: u32,
    dscp: u8,
    len: u32,
    ect: bool,
    ce: bool,
    born: u64,
    tcp: Option<TcpAck>,
    washed: bool,
}

impl Pkt {
    fn new(flow: u32, src: u32, len: u32) -> Self {
        Self::between(flow, src, 99, len)
    }

    fn between(flow: u32, src: u32, dst: u32, len: u32) -> Self {
        Self {
            flow,
            src,
            dst,
            dscp: 0,
            len,
            ect: false,
            ce: false,
            born: 0,
            tcp: None,
            washed: false,
        }
    }
}

impl Packet for Pkt {
    fn len_bytes(&self) -> u32 {
        self.len
    }
    fn flow_hash(&self) -> u32 {
        self.flow.wrapping_mul(0x9e37_79b9)
    }
    fn set_ce(&mut self) -> bool {
        if self.ect {
            self.ce = true;
        }
        self.ect
    }
    fn dscp(&self) -> u8 {
        self.dscp
    }
    fn wash_dscp(&mut self) {
        self.dscp = 0;
        self.washed = true;
    }
    fn host_hashes(&self) -> (u32, u32) {
        (
            self.src.wrapping_mul(0x85eb_ca6b),
            self.dst.wrapping_mul(0x85eb_ca6b),
        )
    }
    fn network_offset(&self) -> u32 {
        14
    }
    fn tcp_ack(&self) -> Option<&TcpAck> {
        self.tcp.as_ref()
    }
}

struct Bench {
    leaf: Leaf,
    store: LeafStore<Pkt>,
    dropped: usize,
}

impl Bench {
    fn new(spec: CakeSpec) -> Self {
        let config = LeafConfig::Cake(spec.apply(&CakeConfig::default()));
        Self {
            leaf: Leaf::new(&config, 3, 7, Instant::ZERO),
            store: LeafStore::default(),
            dropped: 0,
        }
    }

    fn cake(&self) -> &Cake {
        match &self.leaf {
            Leaf::Cake(c) => c,
            _ => unreachable!(),
        }
    }

    fn push(&mut self, mut p: Pkt, now: u64) {
        p.born = now;
        self.leaf
            .enqueue(&mut self.store, p, Instant::from_nanos(now))
            .expect("cake takes every packet");
        self.dropped += self.store.dropped.drain(..).count();
        self.leaf.check(&self.store).unwrap();
    }

    fn pop(&mut self, now: u64) -> Option<Pkt> {
        let p = self.leaf.dequeue(&mut self.store, Instant::from_nanos(now));
        self.dropped += self.store.dropped.drain(..).count();
        self.leaf.check(&self.store).unwrap();
        p
    }
}

/// Serves `bench` as a link of `rate` byte/s for `secs` seconds while `refill` keeps the
/// flows backlogged; returns bytes sent per destination host.
fn serve(
    bench: &mut Bench,
    rate: u64,
    secs: u64,
    mut refill: impl FnMut(&mut Bench, u64),
) -> std::collections::BTreeMap<u32, u64> {
    let mut sent = std::collections::BTreeMap::new();
    let mut now = 0;
    while now < secs * 1_000_000_000 {
        refill(bench, now);
        match bench.pop(now) {
            Some(p) => {
                *sent.entry(p.dst).or_insert(0) += u64::from(p.len);
                now += u64::from(p.len) * 1_000_000_000 / rate;
            }
            None => now += 100_000,
        }
    }
    sent
}

/// Packets of `flow` queued in `bench`.
fn queued(bench: &Bench, flow: u32) -> usize {
    let flows = &bench.store.cake.flows;
    flows
        .records(&bench.cake().flow_index)
        .map(|i| {
            bench
                .store
                .packets
                .iter(flows.get(i).packets)
                .filter(|p| p.flow == flow)
                .count()
        })
        .sum()
}

/// Keeps `depth` packets queued per flow: flows `(flow, src, dst)`.
fn keep_full(flows: &[(u32, u32, u32)], depth: usize) -> impl FnMut(&mut Bench, u64) + '_ {
    move |bench, now| {
        for &(flow, src, dst) in flows {
            for _ in queued(bench, flow)..depth {
                bench.push(Pkt::between(flow, src, dst, 1500), now);
            }
        }
    }
}

#[test]
fn triple_isolate_shares_between_hosts_not_flows() {
    // A download to two subscribers' hosts at 10 Mbit/s: host 1 has eight flows, host 2 one,
    // each flow from its own server.
    let flows: Vec<(u32, u32, u32)> = (0..8)
        .map(|f| (f, 1000 + f, 1))
        .chain([(100, 2000, 2)])
        .collect();
    let share = |mode: FlowMode, flows: &[(u32, u32, u32)]| {
        let mut bench = Bench::new(CakeSpec {
            flow_mode: Some(mode),
            ..CakeSpec::default()
        });
        let sent = serve(&mut bench, 1_250_000, 4, keep_full(flows, 4));
        sent[&2] as f64 / (sent[&1] + sent[&2]) as f64
    };
    let triple = share(FlowMode::TripleIsolate, &flows);
    assert!(
        (0.45..=0.55).contains(&triple),
        "host 2's share {triple:.3}"
    );
    let dual = share(FlowMode::DualDsthost, &flows);
    assert!(
        (0.45..=0.55).contains(&dual),
        "host 2's share, dual-dsthost {dual:.3}"
    );
    // Per-flow fairness instead: one flow in nine.
    let per_flow = share(FlowMode::Flows, &flows);
    assert!(
        (0.09..=0.13).contains(&per_flow),
        "host 2's share with flows {per_flow:.3}"
    );
    // Every flow from one server: the server's nine bulk flows divide every quantum alike,
    // so triple-isolate is per flow again (the kernel's max of the two hosts' loads), while
    // dual-dsthost still splits by subscriber.
    let one_server: Vec<(u32, u32, u32)> = flows.iter().map(|&(f, _, d)| (f, 7, d)).collect();
    let triple = share(FlowMode::TripleIsolate, &one_server);
    assert!(
        (0.09..=0.13).contains(&triple),
        "one server, triple-isolate {triple:.3}"
    );
    let dual = share(FlowMode::DualDsthost, &one_server);
    assert!(
        (0.45..=0.55).contains(&dual),
        "one server, dual-dsthost {dual:.3}"
    );
}

#[test]
fn a_voice_packet_waits_for_at_most_a_packet_or_two_behind_bulk() {
    let mut bench = Bench::new(CakeSpec {
        diffserv: Some(DiffservMode::Diffserv4),
        ..CakeSpec::default()
    });
    let bulk: Vec<(u32, u32, u32)> = (0..4).map(|f| (f, 1, 99)).collect();
    let mut refill = keep_full(&bulk, 20);
    let rate = 1_250_000u64; // 10 Mbit/s
    let mut now = 0;
    let mut worst = 0;
    let mut voice_sent = 0;
    while now < 2_000 * MS {
        refill(&mut bench, now);
        if now % (20 * MS) < 1_300_000 && now / (20 * MS) > voice_sent {
            let mut p = Pkt::new(500, 3, 100);
            p.dscp = 46; // EF
            bench.push(p, now);
            voice_sent = now / (20 * MS);
        }
        let p = bench.pop(now).expect("backlogged");
        if p.flow == 500 {
            worst = worst.max(now - p.born);
        }
        now += u64::from(p.len) * 1_000_000_000 / rate;
    }
    let stats = bench.cake().stats();
    assert_eq!(stats.tins.len(), 4);
    assert!(
        stats.tins[3].sent_packets > 90,
        "voice tin used: {:?}",
        stats.tins[3]
    );
    // Two 1500-byte packets at 10 Mbit/s are 2.4 ms.
    assert!(worst <= 3 * MS, "voice waited {worst} ns");
}

#[test]
fn the_shaper_sends_at_its_bandwidth_and_says_when() {
    let mut bench = Bench::new(CakeSpec {
        bandwidth: Some(Rate::from_mbit(8)),
        ..CakeSpec::default()
    });
    for i in 0..200 {
        // ECN-capable: COBALT marks the standing queue instead of dropping from it.
        let mut p = Pkt::new(i % 3, 1, 1000);
        p.ect = true;
        bench.push(p, 0);
    }
    let (mut now, mut bytes) = (0u64, 0u64);
    let mut first = None;
    let mut last = 0;
    while let Some(p) = bench.pop(now).or_else(|| {
        now = bench.cake().throttled_until()?;
        bench.pop(now)
    }) {
        first.get_or_insert(now);
        last = now;
        bytes += u64::from(p.len);
    }
    assert_eq!(bench.dropped, 0);
    // 199 packets' time after the first: 199 000 B at 1 MB/s.
    assert_eq!(bytes, 200_000);
    let elapsed = last - first.unwrap();
    assert!(
        elapsed.abs_diff(199 * MS) <= 20_000,
        "{elapsed} ns for 199 packets at 8 Mbit/s"
    );
    assert!(bench.cake().stats().overlimits > 0);
}

#[test]
fn overhead_replaces_the_l2_header_and_cells_round_up() {
    let cake = |spec: CakeSpec| Cake::new(spec.apply(&CakeConfig::default()), 0, 0);
    // raw: the frame's own length.
    assert_eq!(cake(CakeSpec::default()).adjusted_len(1514, 14), 1514);
    // overhead 18 mpu 64 (docsis): the 14-byte header is replaced.
    let docsis = cake(CakeSpec {
        overhead: Some(18),
        mpu: Some(64),
        ..CakeSpec::default()
    });
    assert_eq!(docsis.adjusted_len(1514, 14), 1518);
    assert_eq!(docsis.adjusted_len(42, 14), 64);
    // pppoa-vcmux: atm, overhead 10: 1514 − 14 + 10 = 1510 B → 32 cells of 53.
    let atm = cake(CakeSpec {
        atm: Some(AtmMode::Atm),
        overhead: Some(10),
        ..CakeSpec::default()
    });
    assert_eq!(atm.adjusted_len(1514, 14), 32 * 53);
    // bridged-ptm: ptm, overhead 22: 1522 B + one byte per 64.
    let ptm = cake(CakeSpec {
        atm: Some(AtmMode::Ptm),
        overhead: Some(22),
        ..CakeSpec::default()
    });
    assert_eq!(ptm.adjusted_len(1514, 14), 1522 + 24);
}

#[test]
fn redundant_acks_are_filtered_and_counted() {
    let mut bench = Bench::new(CakeSpec {
        ack_filter: Some(AckFilter::Filter),
        ..CakeSpec::default()
    });
    for i in 0..10u32 {
        let mut p = Pkt::new(1, 1, 66);
        p.tcp = TcpAck::parse(&segment(ACK, 1000 * (i + 1), 0, &[]));
        bench.push(p, 0);
    }
    // Each ACK from the third on makes one older one redundant.
    assert_eq!(bench.dropped, 8);
    assert_eq!(bench.leaf.len(), 2);
    let stats = bench.cake().stats();
    assert_eq!(stats.tins.iter().map(|t| t.ack_drops).sum::<u32>(), 8);
    // The newest ACKs remain.
    let first = bench.pop(0).unwrap();
    assert_eq!(first.tcp.unwrap().ack_seq, 9000);
}

#[test]
fn over_the_memory_limit_the_longest_queue_loses_its_head() {
    let mut bench = Bench::new(CakeSpec {
        memlimit: Some(30_000),
        ..CakeSpec::default()
    });
    for _ in 0..30 {
        bench.push(Pkt::new(1, 1, 1500), 0);
    }
    bench.push(Pkt::new(2, 2, 1500), 0);
    assert!(bench.dropped >= 11, "{} dropped", bench.dropped);
    // The small flow kept its packet.
    let mut flows = Vec::new();
    while let Some(p) = bench.pop(0) {
        flows.push(p.flow);
    }
    assert!(flows.contains(&2));
    let stats = bench.cake().stats();
    assert_eq!(stats.memory_limit, 30_000);
    assert!(stats.tins[1].unresponsive_flows <= 1);
}

#[test]
fn a_standing_queue_is_marked_when_ect_and_dropped_otherwise() {
    for ect in [true, false] {
        let mut bench = Bench::new(CakeSpec::default());
        let rate = 125_000u64; // 1 Mbit/s, fed at twice that
        let (mut now, mut next_in) = (0u64, 0u64);
        let mut marks = 0;
        while now < 3_000 * MS {
            while next_in <= now {
                let mut p = Pkt::new(1, 1, 1000);
                p.ect = ect;
                bench.push(p, next_in);
                next_in += 4 * MS;
            }
            match bench.pop(now) {
                Some(p) => {
                    marks += u32::from(p.ce);
                    now += u64::from(p.len) * 1_000_000_000 / rate;
                }
                None => now = next_in,
            }
        }
        if ect {
            assert!(
                marks > 10 && bench.dropped == 0,
                "{marks} marks, {} drops",
                bench.dropped
            );
        } else {
            assert!(
                marks == 0 && bench.dropped > 10,
                "{marks} marks, {} drops",
                bench.dropped
            );
        }
    }
}

#[test]
fn wash_clears_the_dscp_after_the_tin_is_chosen() {
    let mut bench = Bench::new(CakeSpec {
        wash: Some(true),
        ..CakeSpec::default()
    });
    let mut p = Pkt::new(1, 1, 100);
    p.dscp = 46;
    bench.push(p, 0);
    let out = bench.pop(0).unwrap();
    assert!(out.washed && out.dscp == 0);
    let voice = &bench.cake().stats().tins[2];
    assert_eq!(voice.sent_packets, 1, "EF still went to the voice tin");
}

#[test]
fn an_idle_leaf_holds_no_records_and_reconfiguring_drops_extra_tins() {
    let mut bench = Bench::new(CakeSpec {
        diffserv: Some(DiffservMode::Diffserv8),
        ..CakeSpec::default()
    });
    let mut p = Pkt::new(1, 1, 100);
    p.dscp = 48; // CS6: tin 7
    bench.push(p, 0);
    let mut p = Pkt::new(2, 1, 100);
    p.dscp = 1; // LE: tin 0
    bench.push(p, 0);
    assert!(bench.store.flows_in_use() > 0);
    let besteffort = CakeSpec {
        diffserv: Some(DiffservMode::Besteffort),
        ..CakeSpec::default()
    }
    .apply(&bench.cake().config());
    assert!(bench.leaf.reconfigure(
        &mut bench.store,
        &LeafConfig::Cake(besteffort),
        Instant::ZERO
    ));
    bench.dropped += bench.store.dropped.drain(..).count();
    bench.leaf.check(&bench.store).unwrap();
    assert_eq!(bench.dropped, 1, "tin 7's packet went with its tin");
    assert!(bench.pop(0).is_some());
    assert!(bench.pop(0).is_none());
    // As in the kernel, the emptied queue waits in the rotation for the next dequeue with
    // packets: a flow arriving much later finds it, and it goes (it has come to rest).
    assert_eq!(bench.store.cake.flows.in_use(), 1);
    bench.push(Pkt::new(3, 2, 100), 10_000 * MS);
    assert_eq!(bench.pop(10_000 * MS).map(|p| p.flow), Some(3));
    assert!(bench.pop(10_000 * MS).is_none());
    assert_eq!(
        bench.store.cake.flows.in_use(),
        1,
        "flow 2's queue was freed"
    );
    let mut out = Vec::new();
    bench.leaf.purge(&mut bench.store, |p| out.push(p));
    assert!(out.is_empty());
    assert_eq!(
        bench.store.flows_in_use(),
        0,
        "a purged leaf holds no records"
    );
}

#[test]
fn a_collision_in_a_full_set_shares_a_queue() {
    // Nine flows whose hashes fall in one set of eight ways.
    let mut bench = Bench::new(CakeSpec {
        flow_mode: Some(FlowMode::Flows),
        ..CakeSpec::default()
    });
    for i in 0..9u32 {
        // flow_hash = flow × 0x9e3779b9; pick flows whose hash % 1024 lands in set 0.
        let flow = (0u32..)
            .filter(|f| f.wrapping_mul(0x9e37_79b9) % QUEUES < 8)
            .nth(i as usize)
            .unwrap();
        bench.push(Pkt::new(flow, 1, 100), 0);
    }
    let t = &bench.cake().stats().tins[1];
    assert_eq!(t.way_collisions, 1);
    assert_eq!(t.way_misses, 8);
    assert_eq!(bench.store.cake.flows.in_use(), 8);
}

#[test]
fn a_shaping_cake_under_a_faster_class_sets_the_pace_without_spinning() {
    use crate::{ClassId, ClassSpec, Scheduler, SchedulerConfig};
    let mut htb: Scheduler<Pkt> = Scheduler::new(SchedulerConfig::default());
    let class = ClassId::new(1, 1);
    let t0 = Instant::ZERO;
    let added = htb
        .add_class(t0, class, None, &ClassSpec::new(Rate::from_mbit(100)))
        .unwrap();
    assert!(added.purged.is_empty());
    let cake = CakeSpec {
        bandwidth: Some(Rate::from_mbit(10)),
        ..CakeSpec::default()
    }
    .apply(&CakeConfig::default());
    let grafted = htb
        .set_leaf(t0, class, Some(&LeafConfig::Cake(cake)))
        .unwrap();
    assert!(grafted.purged.is_empty());
    // Two seconds of 1000-byte ECN-capable packets offered at 20 Mbit/s.
    let (mut now, mut next_in, mut sent, mut calls) = (0u64, 0u64, 0u64, 0u64);
    let end = 2_000 * MS;
    while now < end {
        while next_in <= now {
            let mut p = Pkt::new(next_in as u32 % 7, 1, 1000);
            p.ect = true;
            let _ = htb.enqueue(Instant::from_nanos(next_in), class, p);
            next_in += 400_000;
        }
        while let Some(p) = htb.dequeue(Instant::from_nanos(now)) {
            sent += u64::from(p.len);
        }
        htb.drain_dropped().for_each(drop);
        htb.check().unwrap();
        calls += 1;
        let wake = htb.next_wakeup().map_or(u64::MAX, Instant::as_nanos);
        assert!(
            wake > now || htb.is_empty(),
            "woken at once at {now}: would spin"
        );
        now = wake.min(next_in);
    }
    let mbit = sent as f64 * 8.0 / 2.0 / 1e6;
    assert!(
        (9.9..=10.1).contains(&mbit),
        "{mbit:.3} Mbit/s through a 10 Mbit/s cake"
    );
    // One call per packet sent or arrived, not a spin.
    assert!(calls < 2 * (2 * 2_500 + 5_000), "{calls} calls");
    assert!(htb.stats().leaf_wakeups > 1000);
}

#[test]
fn an_idle_diffserv4_leaf_fits_in_a_kibibyte() {
    // LibreQoS's leaf: four tins, no queue or host record while idle.
    let idle = size_of::<Cake>() + 4 * size_of::<Tin>();
    assert!(idle <= 1024, "an idle diffserv4 cake holds {idle} bytes");
    let bench = Bench::new(CakeSpec {
        diffserv: Some(DiffservMode::Diffserv4),
        ..CakeSpec::default()
    });
    assert_eq!(bench.store.flows_in_use(), 0);
    assert_eq!(bench.cake().tins.len(), 4);
}

#[test]
fn autorate_ingress_follows_the_arrival_rate() {
    let mut bench = Bench::new(CakeSpec {
        autorate_ingress: Some(true),
        ..CakeSpec::default()
    });
    // Bursts of ten 1000-byte packets every 10 ms: 1 MB/s, 8 Mbit/s. The estimate follows a
    // peak at once and a fall slowly (1/256 per burst), so the first bursts' inflated windows
    // take a few thousand bursts to wash out, as in the kernel.
    let mut now = 0;
    for _ in 0..4000 {
        for i in 0..10 {
            bench.push(Pkt::new(i, 1, 1000), now + u64::from(i) * 1000);
        }
        while bench.pop(now + 20_000).is_some() {}
        now += 10 * MS;
    }
    let estimate = bench.cake().stats().capacity_estimate.bits_per_sec() as f64;
    assert!(
        (estimate - 8e6).abs() / 8e6 < 0.1,
        "estimate {estimate:.0} bit/s"
    );
    // The shaper follows 15/16 of it.
    let threshold = bench.cake().stats().tins[1].threshold_rate.bits_per_sec() as f64;
    assert!((threshold - estimate * 15.0 / 16.0).abs() / threshold < 0.01);
}

#[test]
fn an_unlimited_cake_never_holds_packets_back() {
    use crate::{ClassId, ClassSpec, Scheduler, SchedulerConfig};
    let mut htb: Scheduler<Pkt> = Scheduler::new(SchedulerConfig {
        default_leaf: LeafConfig::Cake(CakeConfig::default()),
        ..SchedulerConfig::default()
    });
    let root = ClassId::new(1, 1);
    let t0 = Instant::ZERO;
    let _ = htb
        .add_class(t0, root, None, &ClassSpec::new(Rate::from_gbit(100)))
        .unwrap();
    let n = 100u32;
    for i in 0..n {
        let _ = htb
            .add_class(
                t0,
                ClassId::new(1, 0x10 + i),
                Some(root),
                &ClassSpec::new(Rate::from_gbit(1)),
            )
            .unwrap();
    }
    let mut now = 0u64;
    for i in 0..n {
        let _ = htb.enqueue(
            Instant::from_nanos(now),
            ClassId::new(1, 0x10 + i),
            Pkt::new(i & 3, i, 1500),
        );
    }
    for k in 0..100_000u32 {
        now += 1200;
        let i = k % n;
        let _ = htb.enqueue(
            Instant::from_nanos(now),
            ClassId::new(1, 0x10 + i),
            Pkt::new((k / n) & 3, i, 1500),
        );
        assert!(htb.dequeue(Instant::from_nanos(now)).is_some(), "at {k}");
        htb.drain_dropped().for_each(drop);
    }
    htb.check().unwrap();
    assert_eq!(htb.stats().leaf_wakeups, 0);
}
