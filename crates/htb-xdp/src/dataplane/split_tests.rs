//! Split subtrees on the simulated UMEM: a class served by every worker at once, each queueing
//! what it received in its own copy of the leaf (no handover), all copies charging the class's
//! shared buckets. The class's rate holds over 2 and 4 workers (and without the sharing it
//! would be N times over), a flow's frames leave in order, the workers with packets waiting
//! share the class fairly, statistics are the workers' sum, and the decision follows the
//! threshold, the operator's choice and rate changes.

use std::collections::BTreeMap;

use htb_core::{
    ClassDef, ClassId, ClassSpec, Duration, Instant, LeafConfig, LeafDef, PortTree, Rate,
    SchedulerConfig, SplitChoice, TreeSpec,
};

use super::sim::SimRings;
use super::tests::{A, B, MAC_B, class, drain_all, planes, refs, udp_frame};
use super::{Dataplane, Mode, Progress};
use crate::fleet::Fleet;
use crate::plane_op::PlaneOp;

/// The pass period of the simulated workers.
const STEP: Duration = Duration::from_micros(100);
/// Frame length on the wire.
const LEN: usize = 1514;
/// Where every step's frames start counting towards the window: after the first burst.
const WARM_UP: u64 = 5_000;

/// Port b's tree: 1:1 at 40 Gbit/s at the top; its children 1:10 at `rate` (the default class)
/// and 1:20 at 50 Mbit/s, each with a pfifo of 200; the operator's `choices`.
fn tree(rate: Rate, choices: &[(u32, SplitChoice)]) -> PortTree {
    let def = |minor, parent: Option<u32>, spec, leaf: bool| ClassDef {
        id: class(minor),
        parent: parent.map(class),
        spec,
        leaf: leaf.then_some(LeafDef {
            handle: None,
            config: LeafConfig::Pfifo { limit: 200 },
        }),
    };
    PortTree {
        tree: TreeSpec {
            config: SchedulerConfig {
                default_minor: 0x10,
                ..SchedulerConfig::default()
            },
            classes: vec![
                def(1, None, ClassSpec::new(Rate::from_gbit(40)), false),
                def(0x10, Some(1), ClassSpec::new(rate), true),
                def(0x20, Some(1), ClassSpec::new(Rate::from_mbit(50)), true),
            ],
            warnings: Vec::new(),
        },
        mq_minor: None,
        split: choices.iter().map(|&(m, c)| (class(m), c)).collect(),
    }
}

/// `workers` workers bridging a to b, port b's tree replaced by `tree` through the fleet
/// (subtrees above `split_above` split).
fn setup(
    workers: usize,
    split_above: Option<Rate>,
    tree: PortTree,
) -> (Vec<Dataplane<SimRings>>, Fleet) {
    let mut planes = planes(Mode::Bridge, 2048 * workers as u32, 256, 64, 1, workers);
    let mut fleet = Fleet::new(2, &mut refs(&mut planes), split_above, Vec::new());
    let op = PlaneOp::set_tree("b".into(), 1, Some(tree), workers).unwrap();
    let (results, _) = fleet.apply(&mut refs(&mut planes), Instant::ZERO, vec![op]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    (planes, fleet)
}

/// A frame of flow `flow` (its UDP source port) to UDP port 80 (the default class, 1:10),
/// carrying `seq` in its payload.
fn frame(flow: u16, seq: u32) -> Vec<u8> {
    let mut f = udp_frame(LEN, MAC_B, 0, flow, 80);
    f[42..46].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Traffic in simulated time: each worker offered `offered[w]` bit/s on its own queue of port
/// a, spread over `flows` flows of its own, for `steps` passes of every worker in a fixed order
/// (worker 0 first: first come, it would take everything).
struct Traffic {
    offered: Vec<u64>,
    flows: u16,
    owed: Vec<f64>,
    seq: Vec<u32>,
    now: Instant,
    steps: u64,
}

impl Traffic {
    fn new(offered: &[u64], flows: u16) -> Self {
        Self {
            offered: offered.to_vec(),
            flows,
            owed: vec![0.0; offered.len()],
            seq: vec![0; offered.len()],
            now: Instant::ZERO,
            steps: 0,
        }
    }

    /// Runs `steps` passes; returns the bytes each worker put on port b's wire meanwhile.
    fn run(&mut self, planes: &mut [Dataplane<SimRings>], steps: u64) -> Vec<u64> {
        let before: Vec<u64> = planes.iter().map(|p| p.port_stats()[B].tx_bytes).collect();
        let n = planes.len() as u16;
        for _ in 0..steps {
            self.steps += 1;
            self.now += STEP;
            for (w, dp) in planes.iter_mut().enumerate() {
                self.owed[w] += self.offered[w] as f64 * STEP.as_nanos() as f64 / 8e9;
                while self.owed[w] >= LEN as f64 {
                    self.owed[w] -= LEN as f64;
                    self.seq[w] += 1;
                    // Flow `1000 + w + k·n`: worker `w`'s k-th.
                    let k = (self.seq[w] % u32::from(self.flows)) as u16;
                    let flow = 1000 + w as u16 + k * n;
                    // Queue `w` of port a is worker `w`'s (RSS keeps a flow on one queue).
                    dp.rings_mut().deliver(w, &frame(flow, self.seq[w]));
                }
                while dp.poll(self.now) == Progress::Moved {
                    dp.rings_mut().send(B, usize::MAX);
                    dp.rings_mut().send(A, usize::MAX);
                }
            }
        }
        planes
            .iter()
            .zip(before)
            .map(|(p, b)| p.port_stats()[B].tx_bytes - b)
            .collect()
    }
}

fn bps(bytes: u64, steps: u64) -> f64 {
    bytes as f64 * 8.0 / (steps as f64 * STEP.as_nanos() as f64 / 1e9)
}

/// Saturates 1:10 at `rate` from every worker (each offered 1.5 times the rate); returns what
/// the class sent over 4 simulated seconds after the first half second, and each worker's
/// part.
fn saturate(planes: &mut [Dataplane<SimRings>], rate: Rate) -> (f64, Vec<f64>) {
    let n = planes.len();
    let mut traffic = Traffic::new(&vec![rate.bits_per_sec() * 3 / 2; n], 4);
    traffic.run(planes, WARM_UP);
    let steps = 40_000;
    let sent = traffic.run(planes, steps);
    let parts: Vec<f64> = sent.iter().map(|&b| bps(b, steps)).collect();
    (parts.iter().sum(), parts)
}

/// A split class saturated from 2 and 4 workers sends its rate within 0.1 %, every worker
/// serving what it received (nothing handed over).
#[test]
fn a_split_class_sends_its_rate_from_every_worker() {
    let rate = Rate::from_mbit(200);
    for workers in [2, 4] {
        let (mut planes, fleet) = setup(workers, None, tree(rate, &[(0x10, SplitChoice::Split)]));
        assert_eq!(fleet.split_subtrees(B), [class(0x10)]);
        let (total, parts) = saturate(&mut planes, rate);
        let error = total / rate.bits_per_sec() as f64 - 1.0;
        assert!(
            error.abs() < 0.001,
            "{workers} workers: {total} bit/s ({error:+.5})"
        );
        for (w, dp) in planes.iter().enumerate() {
            assert_eq!(dp.handoffs().handed_out, 0, "worker {w} handed frames over");
            assert!(parts[w] > 0.0, "worker {w} sent nothing: {parts:?}");
        }
        let drops: u64 = planes.iter().map(|p| p.port_stats()[B].drops_queue).sum();
        assert!(drops > 0, "premise: the class was saturated");
        drain_all(&mut planes, Instant::from_nanos(10_000_000_000));
    }
}

/// Control: every worker queueing its own frames with the class's buckets not shared sends
/// the whole rate each, the total N times over: the test above measures the sharing.
#[test]
fn without_shared_buckets_every_worker_sends_the_whole_rate() {
    let rate = Rate::from_mbit(200);
    for workers in [2, 4] {
        let (mut planes, mut fleet) =
            setup(workers, None, tree(rate, &[(0x10, SplitChoice::Owned)]));
        assert!(fleet.split_subtrees(B).is_empty());
        fleet.serve_unshared(&mut refs(&mut planes), B, class(0x10));
        let (total, _) = saturate(&mut planes, rate);
        let over = total / rate.bits_per_sec() as f64;
        assert!(
            (over - workers as f64).abs() < 0.01,
            "{workers} workers: {over:.3} times the rate"
        );
        drain_all(&mut planes, Instant::from_nanos(10_000_000_000));
    }
}

/// The fairness rule, measured: two workers with packets waiting, offered 2 and 0.75 times
/// the class, split it evenly; a worker asking a fifth of the class
/// gets all of it. Worker 0 always passes first.
#[test]
fn workers_with_packets_waiting_share_a_split_class_evenly() {
    let rate = Rate::from_mbit(200);
    let r = rate.bits_per_sec();
    for (offered, want) in [
        ([r * 2, r * 3 / 4], [0.5, 0.5]),
        ([r * 2, r / 5], [0.8, 0.2]),
    ] {
        let (mut planes, _) = setup(2, None, tree(rate, &[(0x10, SplitChoice::Split)]));
        let mut traffic = Traffic::new(&offered, 4);
        traffic.run(&mut planes, WARM_UP);
        let steps = 40_000;
        let sent = traffic.run(&mut planes, steps);
        let total: u64 = sent.iter().sum();
        for (w, &bytes) in sent.iter().enumerate() {
            let share = bytes as f64 / total as f64;
            assert!(
                (share - want[w]).abs() < 0.001,
                "offered {offered:?}: worker {w} got {share:.4} of the class"
            );
        }
        let error = bps(total, steps) / r as f64 - 1.0;
        assert!(error.abs() < 0.001, "{error:+.5}");
        drain_all(&mut planes, Instant::from_nanos(10_000_000_000));
    }
}

/// A flow arrives on one queue, so one worker queues all of it in its own copy: with the
/// class split over 2 and 4 workers, every flow's frames leave in the order they arrived.
#[test]
fn a_flow_keeps_its_order_through_a_split_class() {
    let rate = Rate::from_mbit(200);
    for workers in [2, 4] {
        let (mut planes, _) = setup(workers, None, tree(rate, &[(0x10, SplitChoice::Split)]));
        planes[0].rings_mut().record(B);
        let n = workers as u64;
        let mut traffic = Traffic::new(&vec![rate.bits_per_sec() * 2 / n; workers], 8);
        traffic.run(&mut planes, 10_000);
        drain_all(&mut planes, Instant::from_nanos(10_000_000_000));
        let heads = planes[0].rings().sent_heads(B);
        assert!(heads.len() > 1000, "{} frames", heads.len());
        let mut last: BTreeMap<u16, u32> = BTreeMap::new();
        let mut workers_seen = std::collections::BTreeSet::new();
        for head in &heads {
            let flow = u16::from_be_bytes([head[34], head[35]]);
            let seq = u32::from_be_bytes([head[42], head[43], head[44], head[45]]);
            workers_seen.insert((flow - 1000) % workers as u16);
            if let Some(&before) = last.get(&flow) {
                assert!(seq > before, "flow {flow}: {seq} left after {before}");
            }
            last.insert(flow, seq);
        }
        assert_eq!(last.len(), 8 * workers, "every flow sent");
        assert_eq!(workers_seen.len(), workers, "every worker's flows");
    }
}

/// `class show` of a split class is the workers' sum: packets, bytes, drops and backlog, the
/// leaf's queue length too.
#[test]
fn a_split_class_s_statistics_are_the_workers_sum() {
    let rate = Rate::from_mbit(200);
    let (mut planes, _) = setup(2, None, tree(rate, &[(0x10, SplitChoice::Split)]));
    saturate(&mut planes, rate);
    let ids = [class(0x10)];
    let each: Vec<_> = planes
        .iter()
        .map(|p| p.class_stats("b", &ids).unwrap())
        .collect();
    let own: Vec<_> = each.iter().map(|s| s.classes[0].unwrap()).collect();
    let leaves: Vec<_> = each.iter().map(|s| s.leaves[0].clone().unwrap()).collect();
    assert!(
        own.iter()
            .all(|c| c.queue.backlog_packets > 0 && c.queue.packets > 0),
        "premise: both copies sent and hold packets: {own:?}"
    );
    let merged = crate::merge::snapshots(each);
    let class_total = merged.classes[0].unwrap();
    let leaf_total = merged.leaves[0].clone().unwrap();
    let sum = |f: fn(&htb_core::ClassStats) -> u64| own.iter().map(f).sum::<u64>();
    assert_eq!(class_total.queue.packets, sum(|c| c.queue.packets));
    assert_eq!(class_total.queue.bytes, sum(|c| c.queue.bytes));
    assert_eq!(class_total.queue.drops, sum(|c| c.queue.drops));
    assert_eq!(
        class_total.queue.backlog_packets,
        sum(|c| c.queue.backlog_packets)
    );
    assert_eq!(
        class_total.queue.backlog_bytes,
        sum(|c| c.queue.backlog_bytes)
    );
    assert_eq!(leaf_total.qlen, leaves.iter().map(|l| l.qlen).sum::<u32>());
    assert_eq!(
        leaf_total.backlog,
        leaves.iter().map(|l| l.backlog).sum::<u64>()
    );
    drain_all(&mut planes, Instant::from_nanos(10_000_000_000));
}

/// Whether class `id`'s buckets are shared on every worker (`Some(true)`), on none
/// (`Some(false)`), or the workers disagree (`None`).
fn shared_everywhere(planes: &[Dataplane<SimRings>], id: ClassId) -> Option<bool> {
    let each: Vec<bool> = planes
        .iter()
        .map(|p| p.scheduler("b", 1).unwrap().is_shared(id))
        .collect();
    each.iter().all(|&s| s == each[0]).then_some(each[0])
}

fn apply(fleet: &mut Fleet, planes: &mut [Dataplane<SimRings>], op: PlaneOp) {
    let (results, _) = fleet.apply(&mut refs(planes), Instant::ZERO, vec![op]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

fn change_rate(id: u32, rate: Rate) -> PlaneOp {
    PlaneOp::ChangeClass {
        port: "b".into(),
        id: class(id),
        spec: ClassSpec::new(rate),
    }
}

fn choose(id: u32, choice: Option<SplitChoice>) -> PlaneOp {
    PlaneOp::SetSplit {
        port: "b".into(),
        id: class(id),
        choice,
    }
}

/// The decision: above the threshold a subtree is split (its classes' buckets shared on every
/// worker, including classes added under it later), below it owned; the operator's choice wins
/// either way; a rate change across the threshold decides again; a deleted class's choice goes
/// with it.
#[test]
fn the_threshold_the_choice_and_a_rate_change_decide() {
    let (mut planes, mut fleet) = setup(
        2,
        Some(Rate::from_mbit(100)),
        tree(Rate::from_mbit(200), &[]),
    );
    // The top class (40 Gbit/s) is a subtree of its own too, holding no frames: its buckets
    // are every worker's anyway.
    assert_eq!(
        fleet.split_subtrees(B),
        [class(1), class(0x10)],
        "200 Mbit/s is above 100"
    );
    let owners = planes[0].owners("b");
    assert!(owners.contains_key(&class(0x20)) && !owners.contains_key(&class(0x10)));
    assert_eq!(shared_everywhere(&planes, class(0x10)), Some(true));
    assert_eq!(shared_everywhere(&planes, class(0x20)), Some(false));
    assert_eq!(shared_everywhere(&planes, class(1)), Some(true), "the top");

    // Classes added under a split subtree share their buckets too.
    apply(
        &mut fleet,
        &mut planes,
        PlaneOp::AddClass {
            port: "b".into(),
            id: class(0x100),
            parent: Some(class(0x10)),
            spec: ClassSpec::new(Rate::from_mbit(10)),
        },
    );
    assert_eq!(shared_everywhere(&planes, class(0x100)), Some(true));

    // A rate change across the threshold: owned, then split again.
    apply(
        &mut fleet,
        &mut planes,
        change_rate(0x10, Rate::from_mbit(50)),
    );
    assert_eq!(fleet.split_subtrees(B), [class(1)]);
    assert!(planes[0].owners("b").contains_key(&class(0x10)));
    assert_eq!(
        shared_everywhere(&planes, class(0x10)),
        Some(true),
        "buckets stay shared"
    );
    apply(
        &mut fleet,
        &mut planes,
        change_rate(0x20, Rate::from_mbit(150)),
    );
    assert_eq!(fleet.split_subtrees(B), [class(1), class(0x20)]);
    assert_eq!(shared_everywhere(&planes, class(0x20)), Some(true));

    // The operator's choice wins over the threshold, both ways, and goes with its class.
    apply(
        &mut fleet,
        &mut planes,
        choose(0x10, Some(SplitChoice::Split)),
    );
    apply(
        &mut fleet,
        &mut planes,
        choose(0x20, Some(SplitChoice::Owned)),
    );
    apply(&mut fleet, &mut planes, choose(1, Some(SplitChoice::Owned)));
    assert_eq!(fleet.split_subtrees(B), [class(0x10)]);
    apply(
        &mut fleet,
        &mut planes,
        change_rate(0x10, Rate::from_mbit(1)),
    );
    assert_eq!(
        fleet.split_subtrees(B),
        [class(0x10)],
        "chosen: the rate no longer decides"
    );
    apply(&mut fleet, &mut planes, choose(0x10, None));
    assert!(fleet.split_subtrees(B).is_empty(), "back to the threshold");
    apply(
        &mut fleet,
        &mut planes,
        PlaneOp::DeleteClass {
            port: "b".into(),
            id: class(0x20),
        },
    );
    apply(
        &mut fleet,
        &mut planes,
        PlaneOp::AddClass {
            port: "b".into(),
            id: class(0x20),
            parent: Some(class(1)),
            spec: ClassSpec::new(Rate::from_mbit(150)),
        },
    );
    assert_eq!(
        fleet.split_subtrees(B),
        [class(0x20)],
        "the deleted class's choice went with it"
    );
}

/// One worker: nothing is split or shared, whatever the threshold or the choice.
#[test]
fn one_worker_splits_nothing() {
    let (mut planes, mut fleet) = setup(
        1,
        Some(Rate::from_mbit(1)),
        tree(Rate::from_mbit(200), &[(0x20, SplitChoice::Split)]),
    );
    apply(
        &mut fleet,
        &mut planes,
        choose(0x10, Some(SplitChoice::Split)),
    );
    assert!(fleet.split_subtrees(B).is_empty());
    let htb = planes[0].scheduler("b", 1).unwrap();
    assert!(htb.class_ids().all(|id| !htb.is_shared(id)));
}

/// From split to owned under traffic: the frames other workers queued drain from their
/// copies (every frame comes back), new frames go to the owner, and the class's rate holds
/// through the change.
#[test]
fn a_split_class_made_owned_drains_where_its_frames_wait() {
    let rate = Rate::from_mbit(200);
    let (mut planes, mut fleet) = setup(2, None, tree(rate, &[(0x10, SplitChoice::Split)]));
    let mut traffic = Traffic::new(&[rate.bits_per_sec(); 2], 4);
    traffic.run(&mut planes, WARM_UP);
    let queued: Vec<u64> = planes.iter().map(Dataplane::queued).collect();
    assert!(queued.iter().all(|&q| q > 0), "premise: {queued:?}");
    let (results, _) = fleet.apply(
        &mut refs(&mut planes),
        traffic.now,
        vec![choose(0x10, Some(SplitChoice::Owned))],
    );
    assert!(results.iter().all(Result::is_ok));
    let owner = planes[0].owners("b")[&class(0x10)];
    let steps = 40_000;
    let sent = traffic.run(&mut planes, steps);
    let other = 1 - owner;
    assert!(
        planes[other].handoffs().handed_out > 0,
        "new frames go to the owner"
    );
    let error = bps(sent.iter().sum(), steps) / rate.bits_per_sec() as f64 - 1.0;
    assert!(error.abs() < 0.001, "{error:+.5}");
    drain_all(&mut planes, traffic.now + Duration::from_secs(1));
}
