//! Stall credit in virtual time: a driver that serves its scheduler every 10 µs onto a link of
//! its own, and is kept away for spans as a VM's host keeps a vCPU. Time here is exact, so
//! these tests hold the precision that the netns lab, on a noisy host, cannot.

extern crate std;
use std::vec::Vec;

use alloc::sync::Arc;
use proptest::prelude::*;

use super::*;
use crate::rate::Rate;
use crate::spec::ClassSpec;
use crate::time::Duration;
use crate::{LeafConfig, SharedBuckets, Target};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// The driver's pass period.
const PASS: u64 = 10 * US;
/// Frame length.
const LEN: u32 = 1514;

fn id(minor: u32) -> ClassId {
    ClassId::new(1, minor)
}

/// Root 1:1 at `root` bit/s with leaves 1:10 and 1:20 at `rates` (ceil `root`), pfifo leaves.
fn tree(root: u64, rates: [u64; 2]) -> Scheduler<u32> {
    let mut s = Scheduler::new(SchedulerConfig {
        default_leaf: LeafConfig::Pfifo { limit: 1000 },
        ..SchedulerConfig::default()
    });
    let rate = |bps| ClassSpec::new(Rate::from_bits_per_sec(bps));
    let _ = s
        .add_class(Instant::ZERO, id(1), None, &rate(root))
        .unwrap();
    for (minor, r) in [(10, rates[0]), (20, rates[1])] {
        let spec = rate(r).with_ceil(Rate::from_bits_per_sec(root));
        let _ = s
            .add_class(Instant::ZERO, id(minor), Some(id(1)), &spec)
            .unwrap();
    }
    s
}

/// A data-plane worker in virtual time: passes every [`PASS`], each topping `class` up to 64
/// packets (the offered load always exceeds the class) and sending what the scheduler
/// releases onto a link of `link` bit/s that only moves while the worker runs (copy-mode TX
/// sends in the worker's own context).
struct Worker {
    s: Scheduler<u32>,
    class: ClassId,
    link_bps: u64,
    /// When the link is free again.
    link_free: u64,
    /// When the worker last ran.
    last_pass: u64,
    /// Whether it reports its stalls (`credit_stall`), bounded to `credit` each.
    credit: Option<u64>,
    sent: u64,
}

impl Worker {
    fn new(s: Scheduler<u32>, class: u32, link_bps: u64, credit: Option<u64>) -> Self {
        Self {
            s,
            class: id(class),
            link_bps,
            link_free: 0,
            last_pass: 0,
            credit,
            sent: 0,
        }
    }

    /// One pass at `now` (after a stall if `now` is well after the last one).
    fn pass(&mut self, now: u64) {
        if now - self.last_pass > 2 * PASS
            && let Some(credit) = self.credit
        {
            self.s.credit_stall(
                Instant::from_nanos(self.last_pass),
                Instant::from_nanos(now),
                Duration::from_nanos(credit),
            );
        }
        self.last_pass = now;
        // What the link could not send while the worker was away is not sent now.
        self.link_free = self.link_free.max(now);
        let t = Instant::from_nanos(now);
        while self.s.len() < 64 {
            self.s.enqueue(t, Target::Class(self.class), LEN).unwrap();
        }
        // Send until the link is busy beyond this pass.
        while self.link_free < now + PASS {
            let Some(len) = self.s.dequeue(Instant::from_nanos(self.link_free.max(now))) else {
                break;
            };
            self.sent += u64::from(len);
            self.link_free += u64::from(len) * 8 * SEC / self.link_bps;
        }
        self.s.flush_shared();
    }
}

/// Stalls of `stall` every `period` from `first` on (`period` 0: none).
fn stalled(now: u64, (first, period, stall): (u64, u64, u64)) -> bool {
    period > 0 && now >= first && (now - first) % period < stall
}

/// Bytes class 1:10 at `rate`, alone under a root of the same rate, sent per second over `secs`
/// of virtual time with stalls `(first, period, length)` and stall credit `credit`, after a
/// second of warm-up.
fn run(rate: u64, stalls: (u64, u64, u64), credit: Option<u64>, secs: u64) -> f64 {
    run_tree(tree(rate, [rate, 1_000]), stalls, credit, secs)
}

/// As [`run`], through `tree`'s class 1:10.
fn run_tree(tree: Scheduler<u32>, stalls: (u64, u64, u64), credit: Option<u64>, secs: u64) -> f64 {
    let mut w = Worker::new(tree, 10, 2_000_000_000, credit);
    let mut now = 0;
    let mut start = 0;
    while now < (secs + 1) * SEC {
        if now == SEC {
            start = w.sent;
        }
        if !stalled(now, stalls) {
            w.pass(now);
        }
        now += PASS;
    }
    (w.sent - start) as f64 * 8.0 / secs as f64
}

#[test]
fn a_full_class_loses_its_stalls_beyond_its_burst_without_credit_and_nothing_with_it() {
    // 4 ms every 50 ms (8 %), as the lab imitates a noisy host.
    let stalls = (3 * MS, 50 * MS, 4 * MS);
    for rate in [10_000_000u64, 100_000_000, 500_000_000] {
        let quiet = run(rate, (0, 0, 0), None, 5);
        let lost = run(rate, stalls, None, 5);
        let credited = run(rate, stalls, Some(10 * MS), 5);
        let err = |bps: f64| (bps - rate as f64) / rate as f64;
        std::eprintln!(
            "{rate}: quiet {:+.4} %, stalled {:+.4} %, credited {:+.4} %",
            err(quiet) * 100.0,
            err(lost) * 100.0,
            err(credited) * 100.0
        );
        assert!(err(quiet).abs() < 0.001, "quiet: {}", err(quiet));
        // The default burst (1 ms of rate + an MTU) covers a quarter of each 4 ms stall or more.
        let burst_ms = 1.0 + f64::from(LEN) * 8.0 * 1e3 / rate as f64;
        let expected_loss = (4.0 - burst_ms).max(0.0) / 50.0;
        assert!(
            (err(lost) + expected_loss).abs() < 0.005,
            "without credit: {} against {expected_loss}",
            err(lost)
        );
        assert!(
            err(credited).abs() < 0.001,
            "with credit: {}",
            err(credited)
        );
    }
}

#[test]
fn a_class_borrowing_its_parents_rate_keeps_it_through_stalls() {
    // 1:10 at 30 Mbit/s borrows the rest of its 100 Mbit/s parent: after a stall it first
    // spends the rate its own bucket earned meanwhile, not borrowing, and the parent must keep
    // its credit through that.
    let root = 100_000_000u64;
    let stalls = (3 * MS, 50 * MS, 4 * MS);
    let got = run_tree(tree(root, [30_000_000, 1_000]), stalls, Some(10 * MS), 5);
    let err = (got - root as f64) / root as f64;
    assert!(err.abs() < 0.001, "borrowing through stalls: {err:+.5}");
    let without = run_tree(tree(root, [30_000_000, 1_000]), stalls, None, 5);
    assert!(
        (without - root as f64) / (root as f64) < -0.03,
        "without credit: {without}"
    );
}

#[test]
fn a_stall_longer_than_the_credit_loses_only_what_the_credit_does_not_cover() {
    let rate = 100_000_000u64;
    // 20 ms every 200 ms with 10 ms of credit: 20 − 10 − 1.1 (burst) = 8.9 ms lost of 200.
    let got = run(rate, (3 * MS, 200 * MS, 20 * MS), Some(10 * MS), 6);
    let err = (got - rate as f64) / rate as f64;
    let burst_ms = 1.0 + f64::from(LEN) * 8.0 * 1e3 / rate as f64;
    let expected = -(20.0 - 10.0 - burst_ms) / 200.0;
    assert!((err - expected).abs() < 0.003, "{err} against {expected}");
}

#[test]
fn credit_is_spent_and_not_kept_by_a_class_that_was_idle() {
    // A class idle through a stall and long after gets no extra burst: a first packet after
    // ten seconds of idleness leaves the bucket at its depth, as without credit.
    let rate = 10_000_000u64;
    let mut s = tree(rate, [rate, 1_000]);
    let t = |ns| Instant::from_nanos(ns);
    s.credit_stall(t(100 * MS), t(104 * MS), Duration::from_millis(10));
    s.enqueue(t(10 * SEC), Target::Class(id(10)), LEN).unwrap();
    assert_eq!(s.dequeue(t(10 * SEC)), Some(LEN));
    let slot = s.lookup(id(10)) as usize;
    let class = &s.classes[slot];
    assert!(
        class.tokens <= class.buffer,
        "tokens {} above a depth of {}",
        class.tokens,
        class.buffer
    );
}

/// Two workers serving one child each of a shared root, stalled together (the lab's imitation
/// takes every CPU at once) or one at a time: with credit, the root's rate over the window;
/// never above it.
#[test]
fn a_shared_root_keeps_its_rate_through_its_workers_stalls() {
    let root = 100_000_000u64;
    for (offset, credit) in [(0, None), (0, Some(10 * MS)), (25 * MS, Some(10 * MS))] {
        let shared = Arc::new(SharedBuckets::new());
        let mut workers: Vec<Worker> = [10u32, 20]
            .into_iter()
            .map(|class| {
                let mut s = tree(root, [1_000_000, 1_000_000]);
                s.share_class(id(1), Arc::clone(&shared)).unwrap();
                Worker::new(s, class, 1_000_000_000, credit)
            })
            .collect();
        let (mut now, mut start) = (0, 0);
        let secs = 4;
        while now < (secs + 1) * SEC {
            if now == SEC {
                start = workers.iter().map(|w| w.sent).sum();
            }
            for (i, w) in workers.iter_mut().enumerate() {
                if !stalled(now, (3 * MS + i as u64 * offset, 50 * MS, 4 * MS)) {
                    w.pass(now);
                }
            }
            now += PASS;
        }
        let sent: u64 = workers.iter().map(|w| w.sent).sum::<u64>() - start;
        let err = (sent as f64 * 8.0 / secs as f64 - root as f64) / root as f64;
        std::eprintln!("offset {offset}, credit {credit:?}: {:+.4} %", err * 100.0);
        match (offset, credit) {
            // Stalled together without credit: the root loses (4 − 1.1) ms of 50.
            (0, None) => assert!(err < -0.04, "{err}"),
            _ => assert!(err.abs() < 0.002, "{err}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the stalls, a credited class never sends more than its rate over the run plus
    /// its burst and one credit; and with stalls far enough apart for it to catch up in
    /// between, it loses at most what each took beyond its credit and burst, and the last
    /// one's catch-up.
    #[test]
    fn credit_never_lets_a_class_exceed_what_it_earned(
        rate_mbit in 1u64..800,
        stalls in proptest::collection::vec((60u64..300, 1u64..30), 0..12),
        credit_ms in 1u64..20,
    ) {
        let rate = rate_mbit * 1_000_000;
        let credit = credit_ms * MS;
        let mut w = Worker::new(tree(rate, [rate, 1_000]), 10, 2_000_000_000, Some(credit));
        // Stall spans, each `gap` ms after the previous one ended: (start, end).
        let mut spans: Vec<(u64, u64)> = Vec::new();
        let mut at = 0;
        for (gap, len) in stalls {
            at += gap * MS;
            spans.push((at, at + len * MS));
            at += len * MS;
        }
        let end = at + 100 * MS;
        let mut now = 0;
        while now < end {
            if !spans.iter().any(|&(a, b)| now >= a && now < b) {
                w.pass(now);
            }
            now += PASS;
        }
        let class = &w.s.classes[w.s.lookup(id(10)) as usize];
        let burst = u64::try_from(class.buffer >> crate::rate::TOKEN_SHIFT).unwrap(); // ns
        let earned = rate as f64 * (end + burst + credit) as f64 / 8e9;
        prop_assert!((w.sent as f64) <= earned + f64::from(LEN), "sent {} of {earned}", w.sent);
        let beyond: u64 = spans
            .iter()
            .map(|&(a, b)| (b - a).saturating_sub(credit + burst))
            .sum();
        let owed = rate as f64 * (end - beyond - 2 * PASS) as f64 / 8e9;
        prop_assert!(
            w.sent as f64 >= owed - 2.0 * f64::from(LEN),
            "sent {} of {owed} ({} stalls)", w.sent, spans.len()
        );
    }
}
