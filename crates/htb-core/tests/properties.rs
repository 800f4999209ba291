//! Property tests against a reference model: random trees and traffic, and random live
//! changes, checked after every step.
//!
//! The reference model is the set of guarantees HTB makes, computed independently of the
//! scheduler: every packet comes back exactly once (sent, dropped or purged); no class sends
//! more than `ceil·t + cburst + one packet` in any window (a token bucket of that depth
//! refilled at `ceil` never goes negative); a continuously backlogged leaf gets at least
//! `min(rate, ceil)` over the time it stays backlogged, less two packets.
//!
//! Every leaf discipline runs under these properties (a random one per tree, and random
//! replacements and changes of leaves in the live-change test): whatever a leaf drops comes
//! back through `drain_dropped`, and counts as returned.

use std::collections::{HashMap, HashSet};

use htb_core::{
    AckFilter, CakeSpec, ClassError, ClassId, ClassSpec, DiffservMode, Duration, FlowMode,
    FqCodelSpec, Instant, LeafConfig, LeafSpec, Packet, Rate, Scheduler, SchedulerConfig, SfqSpec,
    Target,
};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Pkt {
    serial: u64,
    class: ClassId,
    len: u32,
    flow: u32,
}

impl Packet for Pkt {
    fn len_bytes(&self) -> u32 {
        self.len
    }
    fn flow_hash(&self) -> u32 {
        self.flow.wrapping_mul(0x9e37_79b9)
    }
    fn host_hashes(&self) -> (u32, u32) {
        (self.flow % 3, self.flow % 2 + 7)
    }
    fn dscp(&self) -> u8 {
        [0, 46, 8, 34][(self.flow % 4) as usize]
    }
}

/// A leaf discipline with small limits, so that they are reached.
fn leaf_config() -> impl Strategy<Value = LeafConfig> {
    prop_oneof![
        (1u32..60).prop_map(|limit| LeafConfig::Pfifo { limit }),
        (1500u32..60_000).prop_map(|limit| LeafConfig::Bfifo { limit }),
        (2u32..60, 1u32..10, 1u32..16, 0u32..2, any::<bool>()).prop_map(
            |(limit, depth, flows, perturb, headdrop)| {
                LeafSpec::Sfq(SfqSpec {
                    limit: Some(limit),
                    depth: Some(depth),
                    flows: Some(flows),
                    divisor: Some(16),
                    perturb: Some(perturb),
                    quantum: None,
                    headdrop,
                })
                .resolve()
                .unwrap_or_default()
            }
        ),
        (
            1u32..60,
            1u32..64,
            1u32..8,
            1u64..5,
            10u64..100,
            3_000u32..100_000
        )
            .prop_map(|(limit, flows, batch, target, interval, memory)| {
                LeafSpec::FqCodel(FqCodelSpec {
                    limit: Some(limit),
                    flows: Some(flows),
                    drop_batch: Some(batch),
                    target: Some(Duration::from_millis(target)),
                    interval: Some(Duration::from_millis(interval)),
                    memory_limit: Some(memory),
                    ..FqCodelSpec::default()
                })
                .resolve()
                .unwrap_or_default()
            }),
        // cake: unlimited, or shaping above any class's rate (so that it never takes a
        // class's guarantee), with small memory limits so that they are reached.
        (
            prop_oneof![Just(0u64), 25_000u64..60_000],
            0usize..5,
            0usize..8,
            0usize..3,
            prop::option::of(20_000u32..200_000),
            any::<bool>(),
        )
            .prop_map(|(kbit, diffserv, flow_mode, ack, memlimit, ingress)| {
                LeafSpec::Cake(CakeSpec {
                    bandwidth: Some(Rate::from_kbit(kbit)),
                    diffserv: Some(
                        [
                            DiffservMode::Diffserv3,
                            DiffservMode::Diffserv4,
                            DiffservMode::Diffserv8,
                            DiffservMode::Besteffort,
                            DiffservMode::Precedence,
                        ][diffserv],
                    ),
                    flow_mode: Some(
                        [
                            FlowMode::Flowblind,
                            FlowMode::Srchost,
                            FlowMode::Dsthost,
                            FlowMode::Hosts,
                            FlowMode::Flows,
                            FlowMode::DualSrchost,
                            FlowMode::DualDsthost,
                            FlowMode::TripleIsolate,
                        ][flow_mode],
                    ),
                    ack_filter: Some(
                        [AckFilter::Off, AckFilter::Filter, AckFilter::Aggressive][ack],
                    ),
                    memlimit,
                    ingress: Some(ingress),
                    ..CakeSpec::default()
                })
                .resolve()
                .unwrap_or_default()
            }),
    ]
}

#[derive(Clone, Debug)]
struct ClassPlan {
    parent: Option<usize>,
    rate_kbit: u64,
    ceil_extra_kbit: u64,
    burst: Option<u64>,
    cburst: Option<u64>,
    prio: u32,
    quantum: Option<u32>,
}

fn class_plan() -> impl Strategy<Value = ClassPlan> {
    (
        any::<Option<prop::sample::Index>>(),
        8u64..20_000,
        0u64..40_000,
        prop::option::of(1_500u64..40_000),
        prop::option::of(1_500u64..40_000),
        0u32..4,
        prop::option::of(500u32..5000),
    )
        .prop_map(
            |(parent, rate_kbit, ceil_extra_kbit, burst, cburst, prio, quantum)| ClassPlan {
                parent: parent.map(|i| i.index(usize::MAX)),
                rate_kbit,
                ceil_extra_kbit,
                burst,
                cburst,
                prio,
                quantum,
            },
        )
}

fn spec(plan: &ClassPlan) -> ClassSpec {
    let mut spec = ClassSpec::new(Rate::from_kbit(plan.rate_kbit))
        .with_ceil(Rate::from_kbit(plan.rate_kbit + plan.ceil_extra_kbit))
        .with_prio(plan.prio);
    spec.burst = plan.burst;
    spec.cburst = plan.cburst;
    spec.quantum = plan.quantum;
    spec
}

/// Builds the tree with `leaf` as every leaf's discipline; `parent` indices refer to earlier
/// classes (modulo), depth permitting.
fn build(plans: &[ClassPlan], leaf: LeafConfig) -> (Scheduler<Pkt>, Vec<ClassId>) {
    let mut htb = Scheduler::new(SchedulerConfig {
        default_minor: 1,
        default_leaf: leaf,
        ..SchedulerConfig::default()
    });
    let mut ids: Vec<ClassId> = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let id = ClassId::new(1, i as u32 + 1);
        let parent = plan.parent.filter(|_| i > 0).map(|p| ids[p % i]);
        let added = htb.add_class(Instant::ZERO, id, parent, &spec(plan));
        let added = match added {
            Ok(change) => Ok(change),
            Err(ClassError::TooDeep(_)) => htb.add_class(Instant::ZERO, id, None, &spec(plan)),
            Err(e) => Err(e),
        };
        assert!(added.expect("plans are valid").purged.is_empty());
        htb.check().unwrap();
        ids.push(id);
    }
    (htb, ids)
}

#[derive(Clone, Debug)]
enum Op {
    /// Enqueue `count` packets of `len` bytes of flow `flow` to class index `class`.
    Enqueue {
        class: usize,
        len: u32,
        count: u32,
        flow: u32,
    },
    /// Unclassified traffic.
    Unclassified { len: u32 },
    /// Let time pass, sending whatever may be sent.
    Advance { micros: u64 },
    /// Replace a class's parameters.
    Change { class: usize, plan: ClassPlan },
    /// Delete a class (refused if it has children).
    Delete { class: usize },
    /// Add a class under another.
    Add {
        parent: Option<usize>,
        plan: ClassPlan,
    },
    /// Give a class a new leaf discipline (`qdisc replace … parent ID`), or change its
    /// parameters in place when the kind is the same (`qdisc change`).
    Leaf {
        class: usize,
        leaf: LeafConfig,
        in_place: bool,
    },
}

fn traffic_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..64, 40u32..1600, 1u32..20, 0u32..6).prop_map(|(class, len, count, flow)| Op::Enqueue { class, len, count, flow }),
        1 => (40u32..1600).prop_map(|len| Op::Unclassified { len }),
        4 => (1u64..20_000).prop_map(|micros| Op::Advance { micros }),
    ]
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => traffic_op(),
        1 => (0usize..64, class_plan()).prop_map(|(class, plan)| Op::Change { class, plan }),
        1 => (0usize..64).prop_map(|class| Op::Delete { class }),
        1 => (any::<Option<usize>>(), class_plan()).prop_map(|(parent, plan)| Op::Add { parent, plan }),
        1 => (0usize..64, leaf_config(), any::<bool>()).prop_map(|(class, leaf, in_place)| Op::Leaf { class, leaf, in_place }),
    ]
}

/// Runs the scheduler over `ops`, sending everything it releases at each instant (an
/// infinitely fast link), and checks invariants after every step.
struct Harness {
    htb: Scheduler<Pkt>,
    ids: Vec<ClassId>,
    now: u64,
    serial: u64,
    outstanding: HashSet<u64>,
    /// (time, packet) of every packet sent from a class.
    sends: Vec<(u64, Pkt)>,
    /// Per leaf: when its queue last became non-empty, and bytes sent since.
    backlogged_since: HashMap<ClassId, (u64, u64)>,
    /// (class, interval start, interval end, bytes sent) of completed backlog periods.
    periods: Vec<(ClassId, u64, u64, u64)>,
    /// Classes added by live changes.
    added: u32,
}

impl Harness {
    fn new(htb: Scheduler<Pkt>, ids: Vec<ClassId>) -> Self {
        Self {
            htb,
            ids,
            now: 0,
            serial: 0,
            outstanding: HashSet::new(),
            sends: Vec::new(),
            backlogged_since: HashMap::new(),
            periods: Vec::new(),
            added: 0,
        }
    }

    fn returned(&mut self, p: Pkt) {
        assert!(
            self.outstanding.remove(&p.serial),
            "packet {p:?} returned twice or never queued"
        );
    }

    fn backlog(&self, id: ClassId) -> u64 {
        self.htb
            .class_stats(id)
            .map_or(0, |s| s.queue.backlog_packets)
    }

    /// Takes back what the leaves dropped; ends the backlog period of a class they emptied.
    fn collect_drops(&mut self) {
        let dropped: Vec<Pkt> = self.htb.drain_dropped().collect();
        for p in dropped {
            self.returned(p);
            if self.backlog(p.class) == 0
                && let Some((start, bytes)) = self.backlogged_since.remove(&p.class)
            {
                self.periods.push((p.class, start, self.now, bytes));
            }
        }
    }

    fn enqueue(&mut self, target: Target, class: ClassId, len: u32, flow: u32) {
        let p = Pkt {
            serial: self.serial,
            class,
            len,
            flow,
        };
        self.serial += 1;
        self.outstanding.insert(p.serial);
        let was_empty = self.backlog(class) == 0;
        match self.htb.enqueue(Instant::from_nanos(self.now), target, p) {
            Ok(()) => {
                if was_empty && self.backlog(class) == 1 {
                    self.backlogged_since.insert(class, (self.now, 0));
                }
            }
            Err(dropped) => self.returned(dropped.packet),
        }
        self.collect_drops();
    }

    fn drain_ready(&mut self) {
        loop {
            let before = if std::env::var("TRACE").is_ok() {
                self.htb.dump()
            } else {
                String::new()
            };
            let sent = self.htb.dequeue(Instant::from_nanos(self.now));
            self.collect_drops();
            let Some(p) = sent else {
                break;
            };
            if let Err(e) = self.htb.check() {
                eprintln!("BEFORE:\n{before}\nAFTER:\n{}", self.htb.dump());
                panic!("after dequeue of {p:?} at {}: {e}", self.now);
            }
            self.returned(p);
            self.sends.push((self.now, p));
            if let Some(period) = self.backlogged_since.get_mut(&p.class) {
                period.1 += u64::from(p.len);
            }
            if self.backlog(p.class) == 0
                && let Some((start, bytes)) = self.backlogged_since.remove(&p.class)
            {
                self.periods.push((p.class, start, self.now, bytes));
            }
        }
        self.htb.check().unwrap();
    }

    /// Moves time forward to `until`, stopping at every wake-up on the way.
    fn advance_to(&mut self, until: u64) {
        loop {
            self.drain_ready();
            match self.htb.next_wakeup() {
                Some(t) if t.as_nanos() <= until => {
                    assert!(
                        t.as_nanos() >= self.now,
                        "wake-up {t} in the past of {}",
                        self.now
                    );
                    // A wake-up at `now` means "ready now": it must then release a packet or
                    // process an event, else the caller would spin.
                    let stats = |h: &Scheduler<Pkt>| {
                        let s = h.stats();
                        (s.packets_sent, s.events, s.leaf_wakeups)
                    };
                    let before = stats(&self.htb);
                    self.now = t.as_nanos().max(self.now);
                    self.drain_ready();
                    let after = stats(&self.htb);
                    assert_ne!(before, after, "wake-up at {t} did nothing");
                }
                _ => break,
            }
        }
        self.now = until;
        self.drain_ready();
    }

    fn apply(&mut self, op: &Op) {
        if std::env::var("TRACE").is_ok() {
            eprintln!("t={} op {op:?}", self.now);
        }
        match op {
            Op::Enqueue {
                class,
                len,
                count,
                flow,
            } => {
                let id = self.ids[class % self.ids.len()];
                let leaf = self.htb.class_info(id).is_some_and(|i| i.level == 0);
                for _ in 0..*count {
                    // Traffic to inner classes goes to the default class 1:1 (or direct).
                    let owner = if leaf { id } else { self.default_target() };
                    self.enqueue(Target::Class(id), owner, *len, *flow);
                }
            }
            Op::Unclassified { len } => {
                let owner = self.default_target();
                self.enqueue(Target::Unclassified, owner, *len, 0);
            }
            Op::Leaf {
                class,
                leaf,
                in_place,
            } => {
                let id = self.ids[class % self.ids.len()];
                let now = Instant::from_nanos(self.now);
                let done = if *in_place {
                    self.htb.change_leaf(now, id, leaf)
                } else {
                    self.htb.set_leaf(now, id, Some(leaf))
                };
                if let Ok(change) = done {
                    for p in change.purged {
                        assert_eq!(p.class, id);
                        self.returned(p);
                    }
                    if self.backlog(id) == 0
                        && let Some((start, bytes)) = self.backlogged_since.remove(&id)
                    {
                        self.periods.push((id, start, self.now, bytes));
                    }
                }
                self.collect_drops();
            }
            Op::Advance { micros } => self.advance_to(self.now + micros * 1000),
            Op::Change { class, plan } => {
                let id = self.ids[class % self.ids.len()];
                if self.htb.contains(id) {
                    let change = self
                        .htb
                        .change_class(Instant::from_nanos(self.now), id, &spec(plan))
                        .unwrap();
                    assert!(change.purged.is_empty(), "change never purges");
                }
            }
            Op::Delete { class } => {
                let id = self.ids[class % self.ids.len()];
                // What the kernel's htb_delete would answer: a failed delete must be one of
                // these, so the test cannot pass by deleting nothing.
                let expected = match self.htb.class_info(id) {
                    None => Err(ClassError::NotFound(id)),
                    Some(info) if info.children > 0 => Err(ClassError::HasChildren(id)),
                    Some(_) => Ok(()),
                };
                match self.htb.delete_class(Instant::from_nanos(self.now), id) {
                    Ok(change) => {
                        assert_eq!(expected, Ok(()), "deleted {id}");
                        for p in change.purged {
                            assert_eq!(p.class, id);
                            self.returned(p);
                        }
                        self.backlogged_since.remove(&id);
                    }
                    Err(e) => assert_eq!(expected, Err(e), "delete {id}"),
                }
            }
            Op::Add { parent, plan } => {
                let id = ClassId::new(1, self.ids.len() as u32 + 1);
                let parent = parent
                    .map(|p| self.ids[p % self.ids.len()])
                    .filter(|&p| self.htb.contains(p));
                // htb_change_class refuses a class whose grandparent is at level 1 or 0;
                // any other refusal of a valid plan under an existing parent is a defect.
                let too_deep = parent
                    .and_then(|p| self.htb.class_info(p))
                    .and_then(|p| p.parent)
                    .and_then(|g| self.htb.class_info(g))
                    .is_some_and(|g| g.level < 2);
                match self
                    .htb
                    .add_class(Instant::from_nanos(self.now), id, parent, &spec(plan))
                {
                    Ok(change) => {
                        assert!(!too_deep, "{id} added too deep under {parent:?}");
                        for p in change.purged {
                            self.returned(p);
                            self.backlogged_since.remove(&p.class);
                        }
                        self.ids.push(id);
                        self.added += 1;
                    }
                    Err(e) => assert!(
                        too_deep && e == ClassError::TooDeep(id),
                        "add {id} under {parent:?}: {e}"
                    ),
                }
            }
        }
        self.htb.check().unwrap();
    }

    /// The class unclassified traffic lands in: the default 1:1 if it is a leaf, else a
    /// marker for the direct queue.
    fn default_target(&self) -> ClassId {
        match self.htb.class_info(ClassId::new(1, 1)) {
            Some(info) if info.level == 0 => info.id,
            _ => ClassId::new(1, 0),
        }
    }

    /// Lets everything drain and checks that every packet came back (each wake-up releases a
    /// packet or processes an event, so the bound is only against a livelock).
    fn finish(&mut self) {
        for _ in 0..1_000_000 {
            match self.htb.next_wakeup() {
                Some(t) => {
                    self.now = t.as_nanos().max(self.now) + 1;
                    self.drain_ready();
                }
                None => break,
            }
        }
        assert!(self.htb.is_empty(), "{} packets stuck", self.htb.len());
        assert!(
            self.outstanding.is_empty(),
            "{} packets never came back",
            self.outstanding.len()
        );
    }

    /// Bytes each class (leaf or inner, counting its subtree) sent, as (time, len) streams.
    fn subtree_sends(&self, class: ClassId) -> Vec<(u64, u32)> {
        self.sends
            .iter()
            .filter(|(_, p)| {
                let mut c = Some(p.class);
                while let Some(id) = c {
                    if id == class {
                        return true;
                    }
                    c = self.htb.class_info(id).and_then(|i| i.parent);
                }
                false
            })
            .map(|&(t, p)| (t, p.len))
            .collect()
    }
}

/// Largest packet the generators make.
const MAX_LEN: f64 = 1600.0;

/// A bound `rate·t + depth` (bit/s, bytes) on bytes sent in any window of length t.
#[derive(Clone, Copy, Debug)]
struct Bound {
    rate_bps: f64,
    depth: f64,
}

/// Bounds on what class `id` may send: `.0` on everything its subtree sends, `.1` on what is
/// lent at its level or below (not gated by any ancestor: HTB serves a green class without
/// looking at its ancestors, so an ancestor's ceil only bounds borrowed traffic).
///
/// Leaf: all ≤ ceil·t + cburst + pkt; lent ≤ rate·t + burst + pkt.
/// Inner X with children c: ungated(X) ≤ max(rate_X, Σ ungated_rate(c))·t + burst_X + pkt +
/// Σ ungated_depth(c), and all(X) the same with ceil and cburst (a packet borrowed through X
/// needs X's ctokens ≥ 0; what the children lend below X does not).
fn bounds(htb: &Scheduler<Pkt>, ids: &[ClassId], id: ClassId) -> (Bound, Bound) {
    let info = htb.class_info(id).unwrap();
    let cfg = info.config;
    let (rate, ceil) = (
        cfg.rate.bits_per_sec() as f64,
        cfg.ceil.bits_per_sec() as f64,
    );
    if info.children == 0 {
        return (
            Bound {
                rate_bps: ceil,
                depth: cfg.cburst as f64 + MAX_LEN,
            },
            Bound {
                rate_bps: rate,
                depth: cfg.burst as f64 + MAX_LEN,
            },
        );
    }
    let (mut sum_rate, mut sum_depth) = (0.0, 0.0);
    for &child in ids
        .iter()
        .filter(|&&c| htb.class_info(c).is_some_and(|i| i.parent == Some(id)))
    {
        let (_, lent) = bounds(htb, ids, child);
        sum_rate += lent.rate_bps;
        sum_depth += lent.depth;
    }
    (
        Bound {
            rate_bps: ceil.max(sum_rate),
            depth: cfg.cburst as f64 + MAX_LEN + sum_depth,
        },
        Bound {
            rate_bps: rate.max(sum_rate),
            depth: cfg.burst as f64 + MAX_LEN + sum_depth,
        },
    )
}

/// The first moment a class sent more than its ceil allows.
struct CeilExceeded {
    at_ns: u64,
    by_bytes: f64,
}

impl std::fmt::Display for CeilExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "at {} ns the class exceeded ceil by {:.0} bytes",
            self.at_ns, self.by_bytes
        )
    }
}

/// Token bucket of `depth` bytes refilled at `ceil`: must never go below zero.
fn ceil_respected(sends: &[(u64, u32)], ceil_bps: f64, depth: f64) -> Result<(), CeilExceeded> {
    let mut credit = depth;
    let mut last = 0u64;
    for &(t, len) in sends {
        credit = (credit + (t - last) as f64 * ceil_bps / 8e9).min(depth);
        last = t;
        credit -= f64::from(len);
        if credit < -1.0 {
            return Err(CeilExceeded {
                at_ns: t,
                by_bytes: -credit,
            });
        }
    }
    Ok(())
}

proptest! {
    /// Static tree, random traffic: conservation, ceil bound, rate guarantee.
    #[test]
    fn htb_guarantees_hold(
        plans in prop::collection::vec(class_plan(), 1..10),
        leaf in leaf_config(),
        ops in prop::collection::vec(traffic_op(), 1..120),
    ) {
        let (htb, ids) = build(&plans, leaf);
        let mut h = Harness::new(htb, ids.clone());
        for op in &ops {
            h.apply(op);
        }
        h.advance_to(h.now + 200_000_000);
        for &id in &ids {
            let (all, _) = bounds(&h.htb, &ids, id);
            if let Err(e) = ceil_respected(&h.subtree_sends(id), all.rate_bps, all.depth) {
                prop_assert!(false, "class {id} ({all:?}): {e}");
            }
        }
        for &(class, start, end, bytes) in &h.periods {
            let info = h.htb.class_info(class).unwrap();
            let guaranteed = info.config.rate.min(info.config.ceil).bits_per_sec();
            let expected = (end - start) as f64 * guaranteed as f64 / 8e9;
            prop_assert!(
                bytes as f64 >= expected - 2.0 * MAX_LEN,
                "leaf {class} backlogged {start}..{end} sent {bytes} B, guaranteed {expected:.0} B"
            );
        }
        h.finish();
    }

    /// Random live changes while traffic is queued: invariants after every step and every
    /// packet accounted for.
    #[test]
    fn live_changes_lose_nothing(
        plans in prop::collection::vec(class_plan(), 1..8),
        leaf in leaf_config(),
        ops in prop::collection::vec(any_op(), 1..150),
    ) {
        let (htb, ids) = build(&plans, leaf);
        let mut h = Harness::new(htb, ids);
        for op in &ops {
            h.apply(op);
        }
        // An add without a parent makes a root class, which always succeeds: the changes
        // really happened.
        if ops.iter().any(|op| matches!(op, Op::Add { parent: None, .. })) {
            prop_assert!(h.added > 0, "no add succeeded in {ops:?}");
        }
        h.finish();
    }
}
