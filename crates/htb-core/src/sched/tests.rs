//! Behaviour of the scheduler against HTB semantics, with invariants checked after each step.

extern crate std;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::error::ClassError;
use crate::leaf::Leaf;
use crate::rate::Rate;
use crate::spec::{ClassSpec, Warning};
use crate::stats::Mode;
use crate::time::Duration;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn id(minor: u32) -> ClassId {
    ClassId::new(1, minor)
}

fn kbit(k: u64) -> Rate {
    Rate::from_kbit(k)
}

fn mbit(m: u64) -> Rate {
    Rate::from_mbit(m)
}

/// HTB's own semantics are tested with the kernel's default leaf, a 1000-packet pfifo (the
/// leaf disciplines have their own tests).
fn htb() -> Scheduler<u32> {
    Scheduler::new(SchedulerConfig {
        default_leaf: LeafConfig::Pfifo { limit: 1000 },
        ..SchedulerConfig::default()
    })
}

fn add(s: &mut Scheduler<u32>, minor: u32, parent: Option<u32>, spec: ClassSpec) {
    let change = s
        .add_class(s.now(), id(minor), parent.map(id), &spec)
        .unwrap();
    assert!(change.purged.is_empty());
    s.check().unwrap();
}

/// A class spec of `rate` and `ceil`.
fn spec(rate: Rate, ceil: Rate) -> ClassSpec {
    ClassSpec::new(rate).with_ceil(ceil)
}

/// A scheduler holding `classes` (minor, parent minor, spec), added in order.
fn tree(classes: &[(u32, Option<u32>, ClassSpec)]) -> Scheduler<u32> {
    let mut s = htb();
    for (minor, parent, spec) in classes {
        add(&mut s, *minor, *parent, spec.clone());
    }
    s
}

/// Drives the scheduler with always-backlogged classes: before every dequeue each listed class
/// is topped up to `depth` packets of `len` bytes; time jumps to `next_wakeup`.
struct Driver {
    s: Scheduler<u32>,
    now: u64,
    backlogged: Vec<(ClassId, u32)>,
    depth: u32,
    sent: u64,
}

impl Driver {
    fn new(s: Scheduler<u32>) -> Self {
        Self {
            s,
            now: 0,
            backlogged: Vec::new(),
            depth: 4,
            sent: 0,
        }
    }

    fn refill(&mut self) {
        for &(class, len) in &self.backlogged {
            while self.s.class_stats(class).unwrap().queue.backlog_packets < u64::from(self.depth) {
                self.s
                    .enqueue(Instant::from_nanos(self.now), class, len)
                    .unwrap();
            }
        }
    }

    fn run_until(&mut self, until: u64) {
        loop {
            self.refill();
            if let Some(_p) = self.s.dequeue(Instant::from_nanos(self.now)) {
                self.sent += 1;
                if self.sent.is_multiple_of(64) {
                    self.s.check().unwrap();
                }
                continue;
            }
            match self.s.next_wakeup() {
                Some(t) if t.as_nanos() <= until => self.now = t.as_nanos().max(self.now),
                _ => break,
            }
        }
        self.now = until;
        self.s.check().unwrap();
    }

    fn bytes(&self, minor: u32) -> u64 {
        self.s.class_stats(id(minor)).unwrap().queue.bytes
    }

    /// Rate of `minor` in bit/s over [from, to] given byte counts at both ends.
    fn rate_between(from_bytes: u64, to_bytes: u64, from: u64, to: u64) -> f64 {
        (to_bytes - from_bytes) as f64 * 8.0 * 1e9 / (to - from) as f64
    }
}

fn assert_close(got: f64, want: f64, tolerance: f64, what: &str) {
    let err = (got - want).abs() / want;
    assert!(
        err <= tolerance,
        "{what}: got {got:.0} want {want:.0} (error {:.3} %)",
        err * 100.0
    );
}

/// Measures the steady-state rates (bit/s) of `minors` between `warmup` and `end` seconds.
fn steady_rates(d: &mut Driver, minors: &[u32], warmup: u64, end: u64) -> Vec<f64> {
    d.run_until(warmup * SEC);
    let before: Vec<u64> = minors.iter().map(|&m| d.bytes(m)).collect();
    d.run_until(end * SEC);
    minors
        .iter()
        .zip(before)
        .map(|(&m, b)| Driver::rate_between(b, d.bytes(m), warmup * SEC, end * SEC))
        .collect()
}

#[test]
fn single_class_is_shaped_to_its_rate() {
    for (rate, len) in [
        (mbit(10), 1500u32),
        (kbit(180), 64),
        (Rate::from_gbit(1), 9000),
    ] {
        let mut s = htb();
        add(&mut s, 1, None, ClassSpec::new(rate));
        let mut d = Driver::new(s);
        d.backlogged.push((id(1), len));
        let r = steady_rates(&mut d, &[1], 1, 5);
        assert_close(r[0], rate.bits_per_sec() as f64, 0.002, "single class");
    }
}

#[test]
fn children_borrow_spare_bandwidth_of_the_parent() {
    // 1:1 100mbit; 1:10 rate 30 ceil 100; 1:11 rate 10 ceil 100: both backlogged, each gets
    // its rate and the spare 60 is shared by quantum (equal quanta: 200000 both) → 60/60/..:
    // 30 + 30 and 10 + 30.
    let s = tree(&[
        (1, None, ClassSpec::new(mbit(100))),
        (0x10, Some(1), spec(mbit(30), mbit(100)).with_quantum(1500)),
        (0x11, Some(1), spec(mbit(10), mbit(100)).with_quantum(1500)),
    ]);
    let mut d = Driver::new(s);
    d.backlogged = vec![(id(0x10), 1500), (id(0x11), 1500)];
    let r = steady_rates(&mut d, &[0x10, 0x11, 1], 1, 6);
    assert_close(r[0], 60e6, 0.005, "1:10");
    assert_close(r[1], 40e6, 0.005, "1:11");
    assert_close(r[2], 100e6, 0.005, "1:1");
    let stats = d.s.class_stats(id(0x10)).unwrap();
    assert!(stats.lends > 0 && stats.borrows > 0, "{stats:?}");
    assert!(d.s.class_stats(id(1)).unwrap().lends > 0);
}

#[test]
fn ceil_caps_a_lone_borrower() {
    let s = tree(&[
        (1, None, ClassSpec::new(mbit(100))),
        (0x10, Some(1), spec(mbit(10), mbit(25))),
    ]);
    let mut d = Driver::new(s);
    d.backlogged = vec![(id(0x10), 1000)];
    let r = steady_rates(&mut d, &[0x10], 1, 5);
    assert_close(r[0], 25e6, 0.003, "ceil");
    assert!(d.s.class_stats(id(0x10)).unwrap().queue.overlimits > 0);
}

#[test]
fn a_root_class_cannot_borrow_from_another_root() {
    let s = tree(&[
        (1, None, spec(mbit(10), mbit(100))),
        (2, None, spec(mbit(10), mbit(100))),
    ]);
    let mut d = Driver::new(s);
    d.backlogged = vec![(id(1), 1500)];
    let r = steady_rates(&mut d, &[1], 1, 4);
    // A root class over its rate is yellow with no parent: never in a row (kernel §2.5).
    assert_close(r[0], 10e6, 0.003, "root class limited to min(rate, ceil)");
}

#[test]
fn strict_priority_for_spare_bandwidth() {
    // Guaranteed rates are served first; the spare goes to prio 0 before prio 1.
    let s = tree(&[
        (1, None, ClassSpec::new(mbit(100))),
        (0x10, Some(1), spec(mbit(20), mbit(100)).with_prio(1)),
        (0x11, Some(1), spec(mbit(20), mbit(100)).with_prio(0)),
    ]);
    let mut d = Driver::new(s);
    d.backlogged = vec![(id(0x10), 1500), (id(0x11), 1500)];
    let r = steady_rates(&mut d, &[0x10, 0x11], 1, 5);
    assert_close(r[0], 20e6, 0.005, "prio 1 gets its rate only");
    assert_close(r[1], 80e6, 0.005, "prio 0 takes the spare");
}

#[test]
fn drr_shares_spare_by_bytes_not_packets() {
    let s = tree(&[
        (1, None, ClassSpec::new(mbit(50))),
        (0x10, Some(1), spec(kbit(100), mbit(50)).with_quantum(3000)),
        (0x11, Some(1), spec(kbit(100), mbit(50)).with_quantum(3000)),
    ]);
    let mut d = Driver::new(s);
    d.backlogged = vec![(id(0x10), 64), (id(0x11), 1500)];
    d.depth = 64;
    let r = steady_rates(&mut d, &[0x10, 0x11], 1, 4);
    assert_close(r[0], 25e6, 0.01, "64 B class");
    assert_close(r[1], 25e6, 0.01, "1500 B class");
}

#[test]
fn unclassified_goes_to_default_or_direct() {
    let mut s = htb();
    add(&mut s, 1, None, ClassSpec::new(mbit(1)));
    let now = Instant::ZERO;
    // No default: direct queue, unshaped, served first.
    s.enqueue(now, Target::Unclassified, 100).unwrap();
    s.enqueue(now, id(0x99), 101).unwrap(); // unknown class: classification failed
    s.enqueue(now, ClassId::new(1, 0), 102).unwrap(); // 1:0 selects direct
    assert_eq!(s.stats().direct_packets, 3);
    s.enqueue(now, id(1), 500).unwrap();
    assert_eq!(s.dequeue(now), Some(100));
    assert_eq!(s.dequeue(now), Some(101));
    assert_eq!(s.dequeue(now), Some(102));
    assert_eq!(s.dequeue(now), Some(500));
    // With a default leaf, unclassified traffic is shaped there.
    s.set_default_class(1);
    s.enqueue(now, Target::Unclassified, 100).unwrap();
    assert_eq!(s.class_stats(id(1)).unwrap().queue.backlog_packets, 1);
    assert_eq!(s.stats().direct_packets, 3);
    s.check().unwrap();
}

#[test]
fn inner_class_target_falls_back_to_default() {
    let mut s = tree(&[
        (1, None, ClassSpec::new(mbit(1))),
        (0x20, Some(1), ClassSpec::new(mbit(1))),
    ]);
    s.enqueue(Instant::ZERO, id(1), 100).unwrap();
    assert_eq!(
        s.stats().direct_packets,
        1,
        "no default: inner target goes direct"
    );
    s.set_default_class(0x20);
    s.enqueue(Instant::ZERO, id(1), 100).unwrap();
    assert_eq!(s.class_stats(id(0x20)).unwrap().queue.backlog_packets, 1);
}

#[test]
fn full_queues_hand_packets_back() {
    let mut s = htb();
    add(&mut s, 1, None, ClassSpec::new(mbit(1)));
    let _ = s
        .set_leaf(Instant::ZERO, id(1), Some(&LeafConfig::Pfifo { limit: 2 }))
        .unwrap();
    s.enqueue(Instant::ZERO, id(1), 1).unwrap();
    s.enqueue(Instant::ZERO, id(1), 2).unwrap();
    let err = s.enqueue(Instant::ZERO, id(1), 3).unwrap_err();
    assert_eq!(
        err,
        Dropped {
            packet: 3,
            reason: DropReason::QueueFull(id(1))
        }
    );
    assert_eq!(s.class_stats(id(1)).unwrap().queue.drops, 1);
    s.set_direct_qlen(1);
    s.enqueue(Instant::ZERO, Target::Direct, 4).unwrap();
    assert_eq!(
        s.enqueue(Instant::ZERO, Target::Direct, 5)
            .unwrap_err()
            .reason,
        DropReason::DirectQueueFull
    );
    assert_eq!(s.stats().drops, 2);
}

#[test]
fn adding_a_child_to_a_backlogged_leaf_purges_it() {
    let mut s = htb();
    add(&mut s, 1, None, ClassSpec::new(mbit(1)));
    for len in [10, 20, 30] {
        s.enqueue(Instant::ZERO, id(1), len).unwrap();
    }
    let change = s
        .add_class(Instant::ZERO, id(2), Some(id(1)), &ClassSpec::new(mbit(1)))
        .unwrap();
    assert_eq!(change.purged, [10, 20, 30]);
    s.check().unwrap();
    let info = s.class_info(id(1)).unwrap();
    assert_eq!((info.level, info.children), (7, 1));
    assert_eq!(s.class_stats(id(1)).unwrap().queue.drops, 3);
    assert!(s.is_empty());
}

#[test]
fn deleting_the_last_child_makes_the_parent_a_leaf_again() {
    let mut s = tree(&[
        (1, None, ClassSpec::new(mbit(1))),
        (2, Some(1), ClassSpec::new(mbit(1))),
    ]);
    s.enqueue(Instant::ZERO, id(2), 1000).unwrap();
    s.enqueue(Instant::ZERO, id(2), 1000).unwrap();
    assert_eq!(
        s.delete_class(Instant::ZERO, id(1)).unwrap_err(),
        ClassError::HasChildren(id(1))
    );
    let change = s.delete_class(Instant::ZERO, id(2)).unwrap();
    assert_eq!(change.purged, [1000, 1000]);
    s.check().unwrap();
    let info = s.class_info(id(1)).unwrap();
    assert_eq!((info.level, info.children), (0, 0));
    // It is a working leaf again.
    s.enqueue(Instant::ZERO, id(1), 500).unwrap();
    assert_eq!(s.dequeue(Instant::ZERO), Some(500));
    assert!(!s.contains(id(2)));
    s.check().unwrap();
}

#[test]
fn tree_rules_are_enforced() {
    let mut s = htb();
    let spec = ClassSpec::new(mbit(1));
    let now = Instant::ZERO;
    assert_eq!(
        s.add_class(now, ClassId::new(2, 1), None, &spec)
            .unwrap_err(),
        ClassError::WrongMajor {
            class: ClassId::new(2, 1),
            expected: 1
        }
    );
    assert_eq!(
        s.add_class(now, id(0), None, &spec).unwrap_err(),
        ClassError::QdiscHandle(id(0))
    );
    assert_eq!(
        s.add_class(now, id(5), Some(id(4)), &spec).unwrap_err(),
        ClassError::ParentNotFound {
            class: id(5),
            parent: id(4)
        }
    );
    // `parent 1:` is the qdisc: a root class.
    assert!(
        s.add_class(now, id(1), Some(id(0)), &spec)
            .unwrap()
            .purged
            .is_empty()
    );
    assert_eq!(
        s.add_class(now, id(1), None, &spec).unwrap_err(),
        ClassError::Exists(id(1))
    );
    // A chain of 8 levels is fine, the 9th is refused.
    for minor in 2..=8 {
        let change = s
            .add_class(now, id(minor), Some(id(minor - 1)), &spec)
            .unwrap();
        assert!(change.purged.is_empty());
        s.check().unwrap();
    }
    let levels: Vec<u8> = (1..=8)
        .map(|m| s.class_info(id(m)).unwrap().level)
        .collect();
    assert_eq!(levels, [7, 6, 5, 4, 3, 2, 1, 0]);
    assert_eq!(
        s.add_class(now, id(9), Some(id(8)), &spec).unwrap_err(),
        ClassError::TooDeep(id(9))
    );
    assert_eq!(
        s.change_class(now, id(77), &spec).unwrap_err(),
        ClassError::NotFound(id(77))
    );
    assert_eq!(
        s.delete_class(now, id(77)).unwrap_err(),
        ClassError::NotFound(id(77))
    );
    s.check().unwrap();
}

#[test]
fn warnings_are_values() {
    let mut s = htb();
    let change = s
        .add_class(
            Instant::ZERO,
            id(1),
            None,
            &ClassSpec::new(Rate::from_gbit(1)),
        )
        .unwrap();
    assert!(matches!(change.warnings[..], [Warning::QuantumBig { .. }]));
}

#[test]
fn change_keeps_backlog_and_applies_the_new_rate() {
    let mut s = htb();
    add(&mut s, 1, None, ClassSpec::new(mbit(10)));
    let mut d = Driver::new(s);
    d.backlogged = vec![(id(1), 1500)];
    d.depth = 50;
    let r = steady_rates(&mut d, &[1], 1, 3);
    assert_close(r[0], 10e6, 0.003, "before");
    let queued = d.s.class_stats(id(1)).unwrap().queue.backlog_packets;
    let change =
        d.s.change_class(Instant::from_nanos(d.now), id(1), &ClassSpec::new(mbit(20)))
            .unwrap();
    assert!(change.purged.is_empty());
    assert_eq!(
        d.s.class_stats(id(1)).unwrap().queue.backlog_packets,
        queued
    );
    d.s.check().unwrap();
    let before = d.bytes(1);
    d.run_until(5 * SEC);
    assert_close(
        Driver::rate_between(before, d.bytes(1), 3 * SEC, 5 * SEC),
        20e6,
        0.003,
        "after",
    );
}

#[test]
fn change_rescales_debt_so_a_raised_class_recovers_at_once() {
    // 1 kbit with a 1500 B packet sent: ~12 s of debt at the old rate. Raised to 100 Mbit,
    // the 1500 B debt is 120 µs: the next packet leaves almost immediately.
    let mut s = htb();
    add(&mut s, 1, None, ClassSpec::new(kbit(1)).with_burst(1500));
    s.enqueue(Instant::ZERO, id(1), 1500).unwrap();
    s.enqueue(Instant::ZERO, id(1), 1500).unwrap();
    assert_eq!(s.dequeue(Instant::ZERO), Some(1500));
    assert_eq!(
        s.dequeue(Instant::ZERO),
        Some(1500),
        "burst covers one more, then debt"
    );
    s.enqueue(Instant::ZERO, id(1), 1500).unwrap();
    assert_eq!(s.dequeue(Instant::ZERO), None);
    assert!(s.next_wakeup().unwrap().as_nanos() > 10 * SEC);
    let t = Instant::from_nanos(MS);
    let change = s
        .change_class(t, id(1), &ClassSpec::new(mbit(100)).with_burst(1500))
        .unwrap();
    assert!(change.purged.is_empty());
    s.check().unwrap();
    let wake = s.next_wakeup().unwrap();
    assert!(wake.as_nanos() < 2 * MS, "woke at {wake}");
    assert_eq!(s.dequeue(wake), Some(1500));
}

#[test]
fn prio_change_moves_an_active_leaf() {
    let mut s = tree(&[
        (1, None, ClassSpec::new(mbit(100))),
        (2, Some(1), spec(mbit(1), mbit(100))),
        (3, Some(1), spec(mbit(1), mbit(100)).with_prio(1)),
    ]);
    s.enqueue(Instant::ZERO, id(2), 100).unwrap();
    let spec = spec(mbit(1), mbit(100)).with_prio(3);
    assert!(
        s.change_class(Instant::ZERO, id(2), &spec)
            .unwrap()
            .purged
            .is_empty()
    );
    s.check().unwrap();
    assert_eq!(s.dequeue(Instant::ZERO), Some(100));
    s.check().unwrap();
}

#[test]
fn next_wakeup_is_none_when_idle_and_exact_when_throttled() {
    let mut s = htb();
    add(
        &mut s,
        1,
        None,
        ClassSpec::new(mbit(8)).with_burst(1000).with_cburst(1000),
    );
    assert_eq!(s.next_wakeup(), None);
    for _ in 0..3 {
        s.enqueue(Instant::ZERO, id(1), 1000).unwrap();
    }
    assert_eq!(s.next_wakeup(), Some(Instant::ZERO));
    assert_eq!(s.dequeue(Instant::ZERO), Some(1000));
    // Full 1000 B bucket spent on one packet; the second goes into debt of one packet.
    assert_eq!(s.dequeue(Instant::ZERO), Some(1000));
    assert_eq!(s.dequeue(Instant::ZERO), None);
    // 1000 B at 8 Mbit/s = 1 ms to repay the debt.
    assert_eq!(s.next_wakeup(), Some(Instant::from_nanos(MS)));
    assert_eq!(s.dequeue(Instant::from_nanos(MS - 1)), None);
    assert_eq!(s.dequeue(Instant::from_nanos(MS)), Some(1000));
    assert_eq!(s.next_wakeup(), None);
    s.check().unwrap();
}

#[test]
fn handles_skip_the_lookup_and_survive_deletion() {
    let mut s = tree(&[
        (1, None, ClassSpec::new(mbit(1))),
        (2, None, ClassSpec::new(mbit(1))),
    ]);
    let h = s.handle(id(1)).unwrap();
    s.enqueue(Instant::ZERO, h, 10).unwrap();
    assert_eq!(s.class_stats(id(1)).unwrap().queue.backlog_packets, 1);
    let _ = s.delete_class(Instant::ZERO, id(1)).unwrap();
    // Slot reused by another class: the stale handle must not reach it.
    add(&mut s, 3, None, ClassSpec::new(mbit(1)));
    s.enqueue(Instant::ZERO, h, 10).unwrap();
    assert_eq!(s.class_stats(id(3)).unwrap().queue.backlog_packets, 0);
    assert_eq!(
        s.stats().direct_packets,
        1,
        "stale handle to a deleted class: unclassified"
    );
}

#[test]
fn stats_report_tokens_in_ticks_and_rates() {
    let mut s = htb();
    add(&mut s, 1, None, ClassSpec::new(mbit(10)).with_burst(1600));
    let st = s.class_stats(id(1)).unwrap();
    // 1600 B at 10 Mbit/s = 1.28 ms = 20000 ticks of 64 ns: tc's `tokens: 20000`.
    assert_eq!(st.tokens, 20000);
    let mut d = Driver::new(s);
    d.backlogged = vec![(id(1), 1000)];
    d.run_until(3 * SEC);
    let st = d.s.class_stats(id(1)).unwrap();
    assert_eq!(st.queue.bytes, d.bytes(1));
    assert_ne!(st.mode, Mode::CantSend);
    assert_eq!(
        d.s.class_info(id(1)).unwrap().config.burst,
        1600,
        "derived back from the bucket"
    );
}

#[test]
fn many_events_are_processed_in_bounded_batches() {
    let config = SchedulerConfig {
        max_events_per_level: 4,
        ..SchedulerConfig::default()
    };
    let mut s: Scheduler<u32> = Scheduler::new(config);
    add(&mut s, 1, None, ClassSpec::new(mbit(1000)));
    for m in 2..50 {
        add(
            &mut s,
            m,
            Some(1),
            ClassSpec::new(kbit(8)).with_burst(100).with_cburst(100),
        );
        // The burst sends one, the debt allowance a second, the third must wait.
        for _ in 0..3 {
            s.enqueue(Instant::ZERO, id(m), 100).unwrap();
        }
    }
    while s.dequeue(Instant::ZERO).is_some() {}
    assert_eq!(s.len(), 48);
    // All 48 leaves throttled, all due at the same instant.
    let wake = s.next_wakeup().unwrap();
    let mut n = 0;
    while s.dequeue(wake + Duration::from_secs(1)).is_some() {
        n += 1;
        s.check().unwrap();
    }
    assert_eq!(n, 48);
    assert!(s.stats().event_budget_exhausted > 0);
}

#[test]
fn drain_returns_every_queued_packet_and_leaves_a_working_tree() {
    let mut s = tree(&[
        (1, None, ClassSpec::new(mbit(1))),
        (2, Some(1), ClassSpec::new(kbit(8))),
        (3, Some(1), ClassSpec::new(mbit(1))),
    ]);
    for len in [100, 200] {
        s.enqueue(Instant::ZERO, id(2), len).unwrap();
        s.enqueue(Instant::ZERO, id(3), len + 1).unwrap();
    }
    s.enqueue(Instant::ZERO, Target::Unclassified, 7).unwrap();
    // Throttle 1:2 so that it sits in the wait queue while drained.
    while s.dequeue(Instant::ZERO).is_some_and(|p| p != 200) {}
    let mut drained = s.drain();
    drained.sort_unstable();
    assert!(!drained.is_empty());
    assert!(s.is_empty());
    assert_eq!(s.next_wakeup(), None);
    s.check().unwrap();
    let total: u64 =
        s.class_stats(id(2)).unwrap().queue.drops + s.class_stats(id(3)).unwrap().queue.drops;
    assert_eq!(total + s.stats().direct_drops, drained.len() as u64);
    // Still schedules afterwards.
    s.enqueue(Instant::from_nanos(SEC), id(3), 55).unwrap();
    assert_eq!(s.dequeue(Instant::from_nanos(SEC)), Some(55));
    s.check().unwrap();
}

#[test]
fn a_size_table_sets_the_length_htb_charges() {
    // sqm-scripts' `stab overhead 34 linklayer ethernet` and an ADSL line's
    // `stab overhead 40 linklayer atm`: the class sends its rate in table lengths, so the
    // packets' own bytes go at rate × len / counted len.
    let ethernet = crate::SizeSpec {
        overhead: 34,
        link_layer: Some(crate::LinkLayer::Ethernet),
        ..crate::SizeSpec::default()
    };
    let atm = crate::SizeSpec {
        overhead: 40,
        link_layer: Some(crate::LinkLayer::Atm),
        ..crate::SizeSpec::default()
    };
    for (spec, len, counted) in [
        (ethernet, 1500u32, 1534u32),
        (atm, 1500, 33 * 53),
        (atm, 100, 3 * 53),
    ] {
        let table = spec.table().unwrap();
        assert_eq!(table.pkt_len(len), counted);
        let mut s: Scheduler<u32> = Scheduler::new(SchedulerConfig {
            default_leaf: LeafConfig::Pfifo { limit: 1000 },
            stab: Some(table),
            ..SchedulerConfig::default()
        });
        add(&mut s, 1, None, ClassSpec::new(mbit(10)));
        let mut d = Driver::new(s);
        d.backlogged.push((id(1), len));
        d.run_until(SEC);
        let (sent0, counted0) = (d.sent, d.bytes(1));
        d.run_until(5 * SEC);
        let packets = (d.sent - sent0) as f64;
        // The class's counter holds table lengths and reads the class's rate…
        let counted_rate = Driver::rate_between(counted0, d.bytes(1), SEC, 5 * SEC);
        assert_close(counted_rate, 10e6, 0.002, "counted rate");
        // …while the packets themselves go slower by len / counted len.
        let own_rate = packets * f64::from(len) * 8.0 / 4.0;
        let want = 10e6 * f64::from(len) / f64::from(counted);
        assert_close(own_rate, want, 0.002, "packets' own rate");
        assert_eq!(d.s.stats().bytes_sent, d.bytes(1));
    }
    // `qdisc change` without stab removes it (qdisc_change replaces sch->stab): lengths are
    // the packets' own again.
    let mut s = htb();
    s.set_size_table(Some(atm.table().unwrap()));
    add(&mut s, 1, None, ClassSpec::new(mbit(10)));
    s.enqueue(Instant::from_nanos(0), id(1), 100).unwrap();
    s.dequeue(Instant::from_nanos(0)).unwrap();
    assert_eq!(s.class_stats(id(1)).unwrap().queue.bytes, 159);
    s.set_size_table(None);
    s.enqueue(Instant::from_nanos(0), id(1), 100).unwrap();
    s.dequeue(Instant::from_nanos(0)).unwrap();
    assert_eq!(s.class_stats(id(1)).unwrap().queue.bytes, 259);
}

/// A leaf of the default discipline is made on its first packet: until then it reports the
/// discipline it will be, a later default does not change it, and changing it gives it one of
/// its own.
#[test]
fn default_leaves_start_on_their_first_packet_with_the_default_they_were_given() {
    let codel = LeafConfig::FqCodel(crate::leaf::FqCodelConfig::default());
    let mut s: Scheduler<u32> = Scheduler::new(SchedulerConfig {
        default_leaf: codel,
        ..SchedulerConfig::default()
    });
    add(&mut s, 1, None, ClassSpec::new(mbit(100)));
    add(&mut s, 0x10, Some(1), ClassSpec::new(mbit(10)));
    s.set_default_leaf(LeafConfig::Pfifo { limit: 5 });
    add(&mut s, 0x20, Some(1), ClassSpec::new(mbit(10)));
    let config = |s: &Scheduler<u32>, minor| s.class_info(id(minor)).unwrap().leaf;
    assert_eq!(config(&s, 0x10), Some(codel));
    assert_eq!(config(&s, 0x20), Some(LeafConfig::Pfifo { limit: 5 }));
    // An idle leaf reports what a new one does.
    let idle = s.leaf_stats(id(0x10)).unwrap();
    let new = Leaf::new(&codel, 0, 0, Instant::ZERO).stats(&s.store);
    assert_eq!(idle, new);
    assert_eq!((idle.qlen, idle.drops, idle.config), (0, 0, codel));
    for config in [
        LeafConfig::Pfifo { limit: 5 },
        LeafConfig::Sfq(crate::leaf::SfqConfig::default()),
        LeafConfig::Cake(crate::leaf::CakeConfig::default()),
    ] {
        let mut fresh: Scheduler<u32> = Scheduler::new(SchedulerConfig {
            default_leaf: config,
            ..SchedulerConfig::default()
        });
        add(&mut fresh, 1, None, ClassSpec::new(mbit(100)));
        let made = Leaf::new(&config, 1, 0, Instant::ZERO).stats(&fresh.store);
        assert_eq!(fresh.leaf_stats(id(1)).unwrap(), made, "{config:?}");
    }
    // Its first packet makes it an fq_codel, not the default now.
    s.enqueue(Instant::ZERO, id(0x10), 1500).unwrap();
    s.check().unwrap();
    let busy = s.leaf_stats(id(0x10)).unwrap();
    assert_eq!((busy.qlen, busy.config), (1, codel));
    assert_eq!(busy.fq_codel.unwrap().new_flow_count, 1);
    // Changing an unstarted leaf gives it its own discipline.
    let small = LeafConfig::Pfifo { limit: 2 };
    let change = s.change_leaf(Instant::ZERO, id(0x20), &small).unwrap();
    assert!(change.purged.is_empty());
    s.check().unwrap();
    assert_eq!(config(&s, 0x20), Some(small));
    for packet in 0..3 {
        let _ = s.enqueue(Instant::ZERO, id(0x20), 100 + packet);
    }
    assert_eq!(s.leaf_stats(id(0x20)).unwrap().qlen, 2, "its own limit");
}

#[test]
fn a_class_length_adjustment_sets_what_its_buckets_are_charged() {
    // tc's `overhead 500` on a class sending 1000-byte packets: its buckets pay 1500 bytes a
    // packet, so the packets go at two thirds of its rate (its counters keep their own
    // lengths); `class change` without it gives the whole rate back.
    let adjusted = ClassSpec {
        adjust: crate::LengthAdjust {
            overhead: 500,
            ..crate::LengthAdjust::default()
        },
        ..ClassSpec::new(mbit(10))
    };
    let s = tree(&[(1, None, adjusted.clone())]);
    assert_eq!(s.class_info(id(1)).unwrap().config.adjust, adjusted.adjust);
    let mut d = Driver::new(s);
    d.backlogged.push((id(1), 1000));
    d.run_until(SEC);
    let sent0 = d.bytes(1);
    d.run_until(5 * SEC);
    let rate = Driver::rate_between(sent0, d.bytes(1), SEC, 5 * SEC);
    assert_close(rate, 10e6 * 1000.0 / 1500.0, 0.002, "adjusted rate");

    let change =
        d.s.change_class(Instant::from_nanos(d.now), id(1), &ClassSpec::new(mbit(10)))
            .unwrap();
    assert!(change.purged.is_empty());
    assert_eq!(
        d.s.class_info(id(1)).unwrap().config.adjust,
        crate::LengthAdjust::default()
    );
    d.run_until(6 * SEC);
    let sent1 = d.bytes(1);
    d.run_until(10 * SEC);
    let rate = Driver::rate_between(sent1, d.bytes(1), 6 * SEC, 10 * SEC);
    assert_close(rate, 10e6, 0.002, "rate without the adjustment");
    d.s.check().unwrap();
}
