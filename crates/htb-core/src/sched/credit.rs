//! Stall credit: what a class would have earned while its scheduler was not served, beyond
//! its burst, given back when it is served again.
//!
//! `htb_charge_class` caps a bucket at its depth (`min(toks + diff, buffer)`): a class that
//! was full when its driver stalled for longer than its burst covers loses the rest of the
//! stall for good. On a VM whose host takes the CPU for milliseconds, that makes every full
//! class deliver less than its rate. The kernel has no remedy (its softirqs stall too); a
//! driver that knows when it was kept away does: it reports each stall
//! ([`Scheduler::credit_stall`](super::Scheduler::credit_stall)), and a bucket charged across
//! one may rise above its depth by the part of the stall it spans. While its class is still
//! catching up (backlogged: packets queued below it), the bucket may stay above
//! its depth, up to that credit; it then spends down to its depth by sending, or is capped
//! there again once its class runs dry. A class thus sends its rate over any window its
//! driver was stalled in, at the price of a burst of up to the credit after each stall.

use crate::rate::TOKEN_SHIFT;
use crate::time::{Duration, Instant};

/// Stalls remembered: a class charged less often than stalls come spans several.
const SPANS: usize = 4;

/// The stalls a scheduler's driver reported, newest last.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct StallCredit {
    /// `(from, to)` in ns.
    spans: [(u64, u64); SPANS],
    next: usize,
    /// The latest end: a class charged at or after it spans no stall (the fast path).
    last_end: u64,
    /// The longest credit a stall was given (its span, at most what the driver allows), in
    /// token units: the most a bucket may be above its depth. Zero until a stall is reported:
    /// no credit at all.
    hold: i64,
}

impl StallCredit {
    /// Records that the driver could not serve the scheduler from `from` to `to`, to be
    /// credited up to `at_most`.
    pub(super) fn record(&mut self, from: Instant, to: Instant, at_most: Duration) {
        let (from, to) = (from.as_nanos(), to.as_nanos());
        if to <= from || at_most == Duration::ZERO {
            return;
        }
        self.spans[self.next] = (from, to);
        self.next = (self.next + 1) % SPANS;
        self.last_end = self.last_end.max(to);
        self.hold = self
            .hold
            .max(Self::tokens((to - from).min(at_most.as_nanos())));
    }

    /// Credit in token units for buckets last brought up to date at `t_c` and charged at
    /// `now`: the stall time between them (at most the longest stall), and how far above its
    /// depth a bucket may stay while its class catches up (the longest stall). `(0, 0)` when
    /// no stall was ever reported.
    #[inline]
    pub(super) fn at(&self, t_c: Instant, now: Instant) -> (i64, i64) {
        if self.hold == 0 {
            return (0, 0);
        }
        (self.spanned(t_c, now), self.hold)
    }

    /// Stall time between `t_c` and `now`, at most the longest stall, in token units: none
    /// when the class was idle around the stall (more than the longest credit of the time
    /// between was not stalled), since a stall cost nothing to a class that had nothing to
    /// send. (A class sending so rarely that its packets are further apart than that has a
    /// burst longer than the credit, which covers the stall anyway.)
    #[inline]
    pub(super) fn spanned(&self, t_c: Instant, now: Instant) -> i64 {
        let (t_c, now) = (t_c.as_nanos(), now.as_nanos());
        if t_c >= self.last_end {
            return 0;
        }
        let spanned: u64 = self
            .spans
            .iter()
            .map(|&(from, to)| to.min(now).saturating_sub(from.max(t_c)))
            .sum();
        if (now - t_c).saturating_sub(spanned) > Self::ns(self.hold) {
            return 0;
        }
        Self::tokens(spanned).min(self.hold)
    }

    /// The longest credit, in token units (0: no stall reported).
    pub(super) fn hold(&self) -> i64 {
        self.hold
    }

    fn tokens(ns: u64) -> i64 {
        i64::try_from(ns).unwrap_or(i64::MAX >> TOKEN_SHIFT) << TOKEN_SHIFT
    }

    fn ns(tokens: i64) -> u64 {
        u64::try_from(tokens >> TOKEN_SHIFT).unwrap_or(0)
    }

    /// The longest credit a class may get for one stall.
    pub(super) fn longest(&self) -> Duration {
        Duration::from_nanos(Self::ns(self.hold))
    }
}

/// The cap of a bucket of `depth` holding `toks` at a charge, given `credit` of stall time
/// spanned since its last charge and `hold`, the most it may be above its depth: a charge
/// across a stall may raise it by the credit (on top of credit not spent yet); after that it
/// stays above its depth only while its class is `backlogged` (a leaf with packets queued; an
/// inner class charged by such a leaf, or with children borrowing from it), catching up on what
/// the stall held back and earning meanwhile. A class that ran dry is capped at its depth again, as the kernel caps
/// every bucket (`min(toks + diff, buffer)`).
#[inline]
pub(super) fn cap(toks: i64, depth: i64, backlogged: bool, (credit, hold): (i64, i64)) -> i64 {
    let excess = toks.saturating_sub(depth).max(0);
    let extra = if credit > 0 {
        credit.saturating_add(excess).min(hold)
    } else if excess > 0 && backlogged {
        hold
    } else {
        0
    };
    depth.saturating_add(extra)
}

/// `toks + diff` under [`cap`]: the bucket's level before a charge's cost.
#[cfg(test)]
fn refill(toks: i64, diff: i64, depth: i64, backlogged: bool, credit: (i64, i64)) -> i64 {
    toks.saturating_add(diff)
        .min(cap(toks, depth, backlogged, credit))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000 << TOKEN_SHIFT;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn no_stall_no_credit_and_the_kernels_cap() {
        let credit = StallCredit::default();
        assert_eq!(credit.at(at(0), at(100)), (0, 0));
        assert_eq!(refill(0, 50 * MS, MS, true, (0, 0)), MS);
        assert_eq!(refill(3 * MS, MS / 100, MS, true, (0, 0)), MS);
    }

    #[test]
    fn a_charge_across_a_stall_is_credited_the_part_it_spans() {
        let mut credit = StallCredit::default();
        credit.record(at(10), at(14), Duration::from_millis(10));
        // Charged before and after: the whole 4 ms.
        assert_eq!(credit.at(at(9), at(15)), (4 * MS, 4 * MS));
        // Idle around it (last charged long before): none.
        assert_eq!(credit.at(at(1), at(15)).0, 0);
        // Charged in the middle of it: the rest.
        assert_eq!(credit.at(at(12), at(15)).0, 2 * MS);
        // Charged since: none.
        assert_eq!(credit.at(at(14), at(15)).0, 0);
        // A bucket of 1 ms, empty before a 4 ms stall: 4 ms of credit, not 1.
        let c = credit.at(at(10), at(14));
        assert_eq!(refill(0, 4 * MS, MS, true, c), 4 * MS);
    }

    #[test]
    fn credit_is_bounded_by_the_longest_stall_over_several() {
        let mut credit = StallCredit::default();
        credit.record(at(10), at(14), Duration::from_millis(10));
        credit.record(at(60), at(62), Duration::from_millis(10));
        assert_eq!(credit.at(at(9), at(63)).0, 0, "idle between them");
        assert_eq!(credit.at(at(58), at(63)).0, 2 * MS);
        assert_eq!(credit.longest(), Duration::from_millis(4));
    }

    #[test]
    fn a_bucket_above_its_depth_keeps_it_only_while_catching_up() {
        let mut credit = StallCredit::default();
        credit.record(at(10), at(14), Duration::from_millis(10));
        let c = credit.at(at(14), Instant::from_nanos(14_010_000));
        // 3 ms above a 1 ms depth, charged 10 µs later with packets still queued: kept, with
        // what the 10 µs earned.
        assert_eq!(refill(3 * MS, MS / 100, MS, true, c), 3 * MS + MS / 100);
        // Its queue ran dry: capped at the depth as the kernel.
        assert_eq!(refill(3 * MS, MS / 100, MS, false, c), MS);
        // Never above the depth plus the longest stall.
        assert_eq!(refill(4 * MS, 2 * MS, MS, true, c), 5 * MS);
        // A second stall in the middle of catching up adds its credit to what is left.
        let mut credit = StallCredit::default();
        credit.record(at(10), at(14), Duration::from_millis(10));
        credit.record(at(20), at(22), Duration::from_millis(10));
        let c = credit.at(at(19), at(22));
        assert_eq!(refill(2 * MS, 3 * MS, MS, true, c), 4 * MS);
    }
}
