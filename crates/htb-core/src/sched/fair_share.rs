//! Fairness between the workers that serve one leaf class at once (a *split* class: each worker
//! queues what it receives in its own copy of the leaf, and all copies charge one
//! [`SharedBuckets`](super::SharedBuckets)).
//!
//! The shared buckets alone hand the class's tokens to whichever worker asks first: a worker
//! that reaches its dequeue sooner after tokens arrive (less to receive, an earlier wake-up)
//! would take them all while the others' queues overflow. The kernel has nothing to mirror
//! here (one qdisc lock serializes a class); the rule is max-min fairness over the workers
//! that have packets waiting, kept with a count per worker as start-time fair queueing keeps
//! one per flow:
//!
//! - each worker counts the bytes its copy sent (its *seat*), and publishes the count once per
//!   pass ([`Scheduler::flush_shared`](super::Scheduler::flush_shared)), on a cache line of its
//!   own;
//! - a worker whose copy has packets waiting (*backlogged*) and that sent more than the least
//!   of the backlogged workers, by more than an eighth of the class's ceil bucket (the sharing
//!   debt a worker may owe anyway), sees the class's buckets that much emptier, up to half of
//!   each: it waits while the workers behind it take what arrives;
//! - a worker whose copy was idle and fills again starts level with the least of the others
//!   (no credit for time it did not ask), so one asking less than its share gets all it asks.
//!
//! Work is conserved: a worker that is behind but does not take what arrives (its own copy
//! throttled, its CPU busy) leaves the tokens in the buckets, and once they hold more than the
//! penalty the worker ahead sends again. The bound is per pass: a worker sees the others'
//! counts as of their last pass.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicU64, Ordering};

use super::arena::Class;
use crate::rate::{Rate, TOKENS_PER_NS};

/// The most workers a class's seats hold (one bit each in a word of who has packets waiting).
pub const MAX_SEATS: usize = 64;

/// One worker's count of bytes sent through its copy of the class, alone on its cache line:
/// a worker publishing its count does not evict the line the others read theirs from.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Seat {
    served: AtomicU64,
}

/// The seats of every worker sharing a class, and which of them have packets waiting.
#[derive(Debug)]
pub(super) struct Seats {
    seats: Box<[Seat]>,
    /// Bit `w` set: worker `w`'s copy of the class has packets queued.
    backlogged: AtomicU64,
}

impl Seats {
    /// Seats for `workers` workers (at most [`MAX_SEATS`]).
    pub(super) fn new(workers: usize) -> Self {
        Self {
            seats: (0..workers.min(MAX_SEATS))
                .map(|_| Seat::default())
                .collect(),
            backlogged: AtomicU64::new(0),
        }
    }

    /// How many workers have a seat.
    pub(super) fn len(&self) -> usize {
        self.seats.len()
    }

    /// The least count among the backlogged workers other than `skip`.
    fn least_backlogged(&self, skip: Option<usize>) -> Option<u64> {
        let mut mask = self.backlogged.load(Ordering::Acquire);
        if let Some(skip) = skip {
            mask &= !(1u64 << skip);
        }
        let mut least = None;
        while mask != 0 {
            let w = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if let Some(seat) = self.seats.get(w) {
                let served = seat.served.load(Ordering::Acquire);
                least = Some(least.map_or(served, |l: u64| l.min(served)));
            }
        }
        least
    }

    /// Worker `seat` is no longer backlogged (its copy emptied, or left the class).
    pub(super) fn leave(&self, seat: u16) {
        if usize::from(seat) < self.seats.len() {
            self.backlogged.fetch_and(!(1u64 << seat), Ordering::AcqRel);
        }
    }
}

/// One scheduler's seat at a shared class: its count, whether it was backlogged at its last
/// pass, and the penalty its view of the buckets carries.
#[derive(Debug)]
pub(super) struct SeatState {
    seat: u16,
    /// Bytes this copy of the class sent (its seat's count, once published).
    served: u64,
    backlogged: bool,
    /// Rate and ceil tokens this worker's view of the buckets is short of the shared level.
    pub(super) penalty: (i64, i64),
}

impl SeatState {
    /// Worker `seat`'s state, nothing sent yet.
    pub(super) fn new(seat: u16) -> Self {
        Self {
            seat,
            served: 0,
            backlogged: false,
            penalty: (0, 0),
        }
    }

    /// The worker's seat.
    pub(super) fn seat(&self) -> u16 {
        self.seat
    }

    /// Counts `bytes` sent through this copy.
    pub(super) fn sent(&mut self, bytes: u32) {
        self.served = self.served.wrapping_add(u64::from(bytes));
    }

    /// Once per pass: publishes the count and whether `class` (this copy) has packets
    /// waiting, then recomputes the penalty from its `(rate, ceil)`. Returns whether it
    /// changed.
    pub(super) fn update(
        &mut self,
        seats: &Seats,
        class: &Class,
        (rate, ceil): (Rate, Rate),
    ) -> bool {
        let w = usize::from(self.seat);
        let Some(mine) = seats.seats.get(w) else {
            return false;
        };
        // Only a leaf's copy holds packets; an inner class's turn is its leaves'.
        let backlogged = class.level == 0 && class.activity != 0;
        if !backlogged && !self.backlogged {
            // Idle here, and known so: the others read only the counts of backlogged workers,
            // and this one's is levelled when it fills again. Nothing to write.
            return false;
        }
        if backlogged && !self.backlogged {
            // Back from idle: level with the least of those who kept asking.
            if let Some(floor) = seats.least_backlogged(Some(w)) {
                self.served = self.served.max(floor);
            }
        }
        mine.served.store(self.served, Ordering::Release);
        if backlogged != self.backlogged {
            if backlogged {
                seats.backlogged.fetch_or(1u64 << w, Ordering::AcqRel);
            } else {
                seats.leave(self.seat);
            }
            self.backlogged = backlogged;
        }
        let penalty = if backlogged {
            let least = seats.least_backlogged(None).unwrap_or(self.served);
            let lead = self.served.saturating_sub(least);
            let allowance = bytes_of(class.cbuffer / 8, ceil);
            let excess = lead.saturating_sub(allowance);
            (
                tokens_of(excess, rate).min(class.buffer / 2),
                tokens_of(excess, ceil).min(class.cbuffer / 2),
            )
        } else {
            // Emptied: nothing waits here to hold back.
            (0, 0)
        };
        let changed = penalty != self.penalty;
        self.penalty = penalty;
        changed
    }
}

/// Token units `bytes` cost at `rate` (saturating).
fn tokens_of(bytes: u64, rate: Rate) -> i64 {
    let bps = u128::from(rate.bits_per_sec().max(1));
    let tokens = u128::from(bytes) * 8 * 1_000_000_000 * TOKENS_PER_NS as u128 / bps;
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

/// Bytes `tokens` token units buy at `rate`.
fn bytes_of(tokens: i64, rate: Rate) -> u64 {
    let tokens = u128::try_from(tokens).unwrap_or(0);
    let bytes =
        tokens * u128::from(rate.bits_per_sec()) / (8 * 1_000_000_000 * TOKENS_PER_NS as u128);
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_bytes_convert_both_ways() {
        let rate = Rate::from_mbit(80);
        // 10 000 bytes at 80 Mbit/s: 1 ms.
        assert_eq!(tokens_of(10_000, rate), 1_000_000 * TOKENS_PER_NS);
        assert_eq!(bytes_of(1_000_000 * TOKENS_PER_NS, rate), 10_000);
        assert_eq!(bytes_of(-5, rate), 0, "no bytes for a debt");
        assert_eq!(tokens_of(u64::MAX, Rate::from_bits_per_sec(1)), i64::MAX);
    }

    #[test]
    fn the_least_count_is_among_the_backlogged_only() {
        let seats = Seats::new(3);
        assert_eq!(seats.least_backlogged(None), None);
        for (w, served) in [(0, 500u64), (1, 100), (2, 300)] {
            seats.seats[w].served.store(served, Ordering::Relaxed);
        }
        seats.backlogged.store(0b101, Ordering::Relaxed);
        assert_eq!(seats.least_backlogged(None), Some(300), "worker 1 is idle");
        assert_eq!(seats.least_backlogged(Some(2)), Some(500));
        seats.leave(2);
        assert_eq!(seats.least_backlogged(None), Some(500));
        seats.leave(9);
        assert_eq!(seats.len(), 3);
    }
}
