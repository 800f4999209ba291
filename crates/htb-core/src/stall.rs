//! Stalls: spans in which whoever drives a scheduler could not serve it (a VM's host took the
//! CPU, the kernel or another thread ran, a control job held the data plane), logged as a
//! histogram so that what they cost a class can be bounded afterwards.
//!
//! A class that is full for a window delivers its rate over the window except where its
//! scheduler was not served for longer than its burst covers: a stall of `L` costs it at most
//! `L − burst` (less what stall credit gave back). [`StallLog::beyond`] bounds that sum from
//! the histogram, never below the truth, so that a check built on it can neither fail a
//! shaper that did what it owed nor pass one that did not by more than the histogram's
//! resolution.

use crate::time::Duration;

/// The lower edges of the histogram's buckets, in µs: bucket `i` holds stalls in
/// `[EDGES_US[i], EDGES_US[i + 1])`, the last every stall from 100 ms on. Fine around the few
/// milliseconds a VM's host takes, coarse beyond.
const EDGES_US: [u64; BUCKETS] = [
    200, 500, 1_000, 1_500, 2_000, 3_000, 4_000, 5_000, 6_000, 8_000, 10_000, 12_000, 16_000,
    25_000, 50_000, 100_000,
];
const BUCKETS: usize = 16;

/// Stalls of one scheduler's driver (a data-plane worker), counted and summed per bucket of
/// length. Shorter spans than [`StallLog::FLOOR`] are a pass's own work or a timer's wake-up
/// latency and are not logged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StallLog {
    /// Stalls per bucket.
    counts: [u64; BUCKETS],
    /// Their summed length per bucket, in ns.
    total_ns: [u64; BUCKETS],
    /// The longest one logged, in ns.
    longest_ns: u64,
}

impl StallLog {
    /// The shortest span logged as a stall: 200 µs.
    pub const FLOOR: Duration = Duration::from_micros(EDGES_US[0]);

    /// Logs a span of `length` the driver was kept away; shorter than [`FLOOR`](Self::FLOOR):
    /// nothing. Returns whether it was logged.
    pub fn note(&mut self, length: Duration) -> bool {
        let ns = length.as_nanos();
        if ns <= Self::FLOOR.as_nanos() {
            return false;
        }
        let bucket = EDGES_US.partition_point(|&edge| edge * 1_000 <= ns) - 1;
        self.counts[bucket] += 1;
        self.total_ns[bucket] = self.total_ns[bucket].saturating_add(ns);
        self.longest_ns = self.longest_ns.max(ns);
        true
    }

    /// Stalls logged.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their summed length.
    #[must_use]
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.total_ns.iter().fold(0, |a, &t| a.saturating_add(t)))
    }

    /// The longest one logged (in a [`since`](Self::since) difference: the later log's
    /// longest, bounded by the longest bucket that gained one).
    #[must_use]
    pub fn longest(&self) -> Duration {
        Duration::from_nanos(self.longest_ns)
    }

    /// What was logged after `earlier` (an earlier copy of this log).
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        let mut diff = Self::default();
        for b in 0..BUCKETS {
            diff.counts[b] = self.counts[b].saturating_sub(earlier.counts[b]);
            diff.total_ns[b] = self.total_ns[b].saturating_sub(earlier.total_ns[b]);
        }
        diff.longest_ns = match (0..BUCKETS).rev().find(|&b| diff.counts[b] > 0) {
            None => 0,
            Some(b) if b + 1 < BUCKETS => self.longest_ns.min(EDGES_US[b + 1] * 1_000),
            Some(_) => self.longest_ns,
        };
        diff
    }

    /// Both logs together (two workers').
    #[must_use]
    pub fn plus(&self, other: &Self) -> Self {
        let mut sum = *self;
        for b in 0..BUCKETS {
            sum.counts[b] += other.counts[b];
            sum.total_ns[b] = sum.total_ns[b].saturating_add(other.total_ns[b]);
        }
        sum.longest_ns = sum.longest_ns.max(other.longest_ns);
        sum
    }

    /// An upper bound of `Σ max(0, L − allowance)` over the stalls `L` logged: what they cost
    /// a class whose burst (and stall credit) covers `allowance` of each. Exact for buckets
    /// wholly above `allowance`; the bucket that straddles it counts each of its stalls as the
    /// least of its upper edge, the bucket's own sum and the longest stall allow.
    #[must_use]
    pub fn beyond(&self, allowance: Duration) -> Duration {
        let a = allowance.as_nanos();
        let mut sum = 0u64;
        for (b, &edge) in EDGES_US.iter().enumerate() {
            let (n, total) = (self.counts[b], self.total_ns[b]);
            if n == 0 {
                continue;
            }
            let lo = edge * 1_000;
            let hi = EDGES_US.get(b + 1).map_or(self.longest_ns, |&e| e * 1_000);
            let hi = hi.min(self.longest_ns.max(lo));
            let cost = if lo >= a {
                total.saturating_sub(n.saturating_mul(a))
            } else if hi <= a {
                0
            } else {
                n.saturating_mul(hi - a)
                    .min(total.saturating_sub(n.saturating_mul(lo)))
            };
            sum = sum.saturating_add(cost);
        }
        Duration::from_nanos(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(ms: &[f64]) -> StallLog {
        let mut log = StallLog::default();
        for &m in ms {
            log.note(Duration::from_nanos((m * 1e6) as u64));
        }
        log
    }

    #[test]
    fn spans_below_the_floor_are_not_stalls() {
        let log = log(&[0.0, 0.05, 0.2, 3.0, 0.25]);
        assert_eq!(log.count(), 2);
        assert_eq!(log.total(), Duration::from_micros(3_250));
        assert_eq!(log.longest(), Duration::from_millis(3));
    }

    #[test]
    fn beyond_is_exact_above_the_allowance_and_never_below_the_truth() {
        let stalls = [0.3, 0.9, 1.2, 4.0, 4.2, 7.5, 11.0, 40.0, 180.0];
        let log = log(&stalls);
        for allowance_ms in [0.0, 0.25, 1.0, 1.3, 3.5, 4.1, 9.0, 10.0, 30.0, 200.0] {
            let truth: f64 = stalls.iter().map(|l| (l - allowance_ms).max(0.0)).sum();
            let bound = log
                .beyond(Duration::from_nanos((allowance_ms * 1e6) as u64))
                .as_nanos() as f64
                / 1e6;
            assert!(
                bound >= truth - 1e-6,
                "allowance {allowance_ms} ms: bound {bound} below the truth {truth}"
            );
            // The straddling bucket may overcount by at most its width per stall.
            assert!(
                bound <= truth + 25.0,
                "allowance {allowance_ms} ms: bound {bound}, truth {truth}"
            );
        }
        // Every bucket wholly above the allowance: exact.
        let exact = log.beyond(Duration::from_micros(200)).as_nanos() as f64 / 1e6;
        let truth: f64 = stalls.iter().map(|l| l - 0.2).sum();
        assert!((exact - truth).abs() < 1e-6, "{exact} against {truth}");
    }

    #[test]
    fn a_difference_holds_what_came_between() {
        let before = log(&[4.0, 4.0]);
        let mut after = before;
        after.note(Duration::from_millis(9));
        after.note(Duration::from_micros(300));
        let diff = after.since(&before);
        assert_eq!(diff.count(), 2);
        assert_eq!(diff.total(), Duration::from_micros(9_300));
        assert!(diff.longest() >= Duration::from_millis(9));
        assert!(diff.longest() <= Duration::from_millis(10));
        assert_eq!(diff.plus(&before), after);
    }
}
