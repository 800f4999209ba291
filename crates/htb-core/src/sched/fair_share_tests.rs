//! Several schedulers queueing into their own copies of one leaf whose buckets they share (a
//! split class), in virtual time: the class's rate holds, and the workers with packets waiting
//! share it max-min fairly (`fair_share.rs`), whichever of them asks first.

extern crate std;
use std::vec::Vec;

use alloc::sync::Arc;

use super::*;
use crate::rate::Rate;
use crate::spec::ClassSpec;
use crate::{LeafConfig, SharedBuckets, Target};

const US: u64 = 1_000;
const SEC: u64 = 1_000_000_000;
const LEN: u32 = 1514;

fn id(minor: u32) -> ClassId {
    ClassId::new(1, minor)
}

/// A tree of one leaf class 1:1 at `bps`, its buckets shared as worker `seat` (`None`: first
/// come, without a seat).
fn copy(bps: u64, buckets: &Arc<SharedBuckets>, seat: Option<u16>) -> Scheduler<u32> {
    let mut s = Scheduler::new(SchedulerConfig {
        default_leaf: LeafConfig::Pfifo { limit: 200 },
        ..SchedulerConfig::default()
    });
    let spec = ClassSpec::new(Rate::from_bits_per_sec(bps));
    let _ = s.add_class(Instant::ZERO, id(1), None, &spec).unwrap();
    match seat {
        Some(seat) => s.share_class_as(id(1), Arc::clone(buckets), seat),
        None => s.share_class(id(1), Arc::clone(buckets)),
    }
    .unwrap();
    s
}

/// Workers passing every `pass` ns in a fixed order (worker 0 always first: the one that
/// would take everything first come), each offered `offered[w]` bit/s (`None`: always 50
/// packets waiting); returns the bit/s each sent over `secs` seconds after the first.
fn run(bps: u64, offered: &[Option<u64>], seats: bool, pass: u64, secs: u64) -> Vec<f64> {
    run_capped(
        bps,
        offered,
        &std::vec![usize::MAX; offered.len()],
        seats,
        pass,
        secs,
    )
}

/// As [`run`], worker `w` sending at most `cap[w]` packets a pass (a worker short of CPU).
fn run_capped(
    bps: u64,
    offered: &[Option<u64>],
    cap: &[usize],
    seats: bool,
    pass: u64,
    secs: u64,
) -> Vec<f64> {
    let buckets = Arc::new(SharedBuckets::with_seats(offered.len()));
    let mut workers: Vec<Scheduler<u32>> = (0..offered.len())
        .map(|w| copy(bps, &buckets, seats.then_some(w as u16)))
        .collect();
    let mut owed = std::vec![0f64; offered.len()];
    let mut sent = std::vec![0u64; offered.len()];
    let mut now = 0;
    while now < (secs + 1) * SEC {
        let t = Instant::from_nanos(now);
        for (w, s) in workers.iter_mut().enumerate() {
            match offered[w] {
                None => {
                    while s.len() < 50 {
                        s.enqueue(t, Target::Class(id(1)), LEN).unwrap();
                    }
                }
                Some(bps) => {
                    owed[w] += bps as f64 * pass as f64 / 8e9;
                    while owed[w] >= f64::from(LEN) {
                        owed[w] -= f64::from(LEN);
                        let _ = s.enqueue(t, Target::Class(id(1)), LEN);
                    }
                }
            }
            for _ in 0..cap[w] {
                let Some(len) = s.dequeue(t) else { break };
                if now >= SEC {
                    sent[w] += u64::from(len);
                }
            }
            let _ = s.drain_dropped().count();
            s.flush_shared();
            s.check().unwrap();
        }
        now += pass;
    }
    sent.iter().map(|&b| b as f64 * 8.0 / secs as f64).collect()
}

/// Control: first come, the worker passing first takes (nearly) everything.
#[test]
fn first_come_starves_the_worker_that_asks_later() {
    let got = run(100_000_000, &[None, None], false, 100 * US, 2);
    let total: f64 = got.iter().sum();
    assert!((total - 1e8).abs() / 1e8 < 0.001, "{got:?}");
    assert!(got[1] < 0.05 * total, "{got:?}");
}

/// Two and four workers, all backlogged, the same one always first: equal shares, and the
/// class's rate within 0.1 %.
#[test]
fn backlogged_workers_get_equal_shares() {
    for n in [2, 4] {
        let got = run(100_000_000, &std::vec![None; n], true, 100 * US, 4);
        let total: f64 = got.iter().sum();
        assert!((total - 1e8).abs() / 1e8 < 0.001, "{n}: {got:?}");
        for share in &got {
            let off = share / (total / n as f64) - 1.0;
            assert!(off.abs() < 0.001, "{n} workers: {got:?}");
        }
    }
}

/// A worker offered less than its equal share gets all of it; the other takes the rest.
#[test]
fn a_worker_asking_less_gets_all_it_asks() {
    let got = run(100_000_000, &[None, Some(20_000_000)], true, 100 * US, 4);
    assert!((got[1] - 2e7).abs() / 2e7 < 0.01, "{got:?}");
    assert!((got[0] + got[1] - 1e8).abs() / 1e8 < 0.001, "{got:?}");
}

/// Work is conserved: a backlogged worker that cannot take its share (one packet a pass, 121
/// Mbit/s of a 1 Gbit/s class) leaves it to the other, and the class still sends its rate.
#[test]
fn a_worker_short_of_cpu_leaves_its_share_to_the_others() {
    let got = run_capped(
        1_000_000_000,
        &[None, None],
        &[usize::MAX, 1],
        true,
        100 * US,
        2,
    );
    let slow = f64::from(LEN) * 8.0 / 100e-6;
    assert!((got[1] - slow).abs() / slow < 0.01, "{got:?}");
    assert!((got[0] + got[1] - 1e9).abs() / 1e9 < 0.001, "{got:?}");
}
