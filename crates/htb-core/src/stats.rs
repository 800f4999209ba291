//! Statistics: what `tc -s class show` prints, and the rate estimator.

use crate::class_id::ClassId;
use crate::time::{Duration, Instant};

/// A class's state in the three-colour model (`enum htb_cmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Over `ceil`: may neither send nor borrow ("red", `HTB_CANT_SEND`).
    CantSend = 0,
    /// Over `rate`, under `ceil`: may borrow from an ancestor ("yellow", `HTB_MAY_BORROW`).
    MayBorrow = 1,
    /// Under `rate`: may send ("green", `HTB_CAN_SEND`).
    CanSend = 2,
}

/// Per-class statistics, everything `tc -s class show` prints for an HTB class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassStats {
    /// The class.
    pub id: ClassId,
    /// Bytes sent (inner classes: by their whole subtree).
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets dropped because the leaf queue was full, or purged by a tree change.
    pub drops: u64,
    /// Transitions into [`Mode::CantSend`] (ceil exhausted); not packets.
    pub overlimits: u64,
    /// Always 0: HTB classes never requeue. Kept because tc prints it.
    pub requeues: u64,
    /// Bytes queued (leaves only).
    pub backlog_bytes: u64,
    /// Packets queued (leaves only).
    pub backlog_packets: u32,
    /// Packets sent on this class's own rate (leaf) or lent to its subtree (inner) (`lended`).
    pub lends: u64,
    /// Packets sent on tokens borrowed from an ancestor (`borrowed`).
    pub borrows: u64,
    /// Always 0 (`giants`, dead in the kernel since rate tables went).
    pub giants: u64,
    /// Rate-bucket credit in 64 ns psched ticks, clamped to `i32`, as tc prints `tokens:`.
    pub tokens: i32,
    /// Ceil-bucket credit in 64 ns ticks (`ctokens:`).
    pub ctokens: i32,
    /// Estimated rate in bit/s (EWMA over about four estimator intervals).
    pub rate_bps: u64,
    /// Estimated rate in packets/s.
    pub rate_pps: u64,
    /// Current mode.
    pub mode: Mode,
    /// Level in the tree: 0 for leaves, 7 for root classes with children.
    pub level: u8,
}

/// Scheduler-wide statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Packets queued in leaves.
    pub qlen: u64,
    /// Bytes queued in leaves.
    pub backlog_bytes: u64,
    /// Packets queued in the direct queue.
    pub direct_qlen: u32,
    /// Packets ever put in the direct queue (`direct_packets_stat`).
    pub direct_packets: u64,
    /// Packets sent from the direct queue.
    pub direct_packets_sent: u64,
    /// Bytes sent from the direct queue.
    pub direct_bytes_sent: u64,
    /// Packets refused by a full direct queue.
    pub direct_drops: u64,
    /// Packets sent (direct queue included).
    pub packets_sent: u64,
    /// Bytes sent (direct queue included).
    pub bytes_sent: u64,
    /// Packets dropped: leaf queues full, direct queue full, or purged by tree changes.
    pub drops: u64,
    /// Sum of all classes' overlimits (the qdisc's `overlimits`).
    pub overlimits: u64,
    /// Wait-queue events processed.
    pub events: u64,
    /// Times the per-call event budget ran out ("htb: too many events!", counted not printed).
    pub event_budget_exhausted: u64,
    /// Internal inconsistencies survived without a panic (should stay 0; the kernel would
    /// `WARN_ON`).
    pub internal_faults: u64,
}

/// Exponentially weighted rate estimate, updated lazily when a class sends and when read, so
/// that it costs one comparison per packet and no timer (the kernel's `gen_estimator` runs
/// on a timer per class).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RateEstimator {
    window_start: Instant,
    bytes_mark: u64,
    packets_mark: u64,
    avg_bps: u64,
    avg_pps: u64,
}

impl RateEstimator {
    /// Intervals folded at most per update: (3/4)^16 ≈ 1 %, so older history is irrelevant.
    const MAX_FOLDS: u64 = 16;

    pub(crate) fn new(now: Instant, bytes: u64, packets: u64) -> Self {
        Self {
            window_start: now,
            bytes_mark: bytes,
            packets_mark: packets,
            avg_bps: 0,
            avg_pps: 0,
        }
    }

    /// Closes the current window if `interval` has passed.
    #[inline]
    pub(crate) fn update(&mut self, now: Instant, bytes: u64, packets: u64, interval: Duration) {
        if now.saturating_since(self.window_start) >= interval {
            (self.avg_bps, self.avg_pps) = self.folded(now, bytes, packets, interval);
            *self = Self {
                window_start: now,
                bytes_mark: bytes,
                packets_mark: packets,
                ..*self
            };
        }
    }

    /// The estimate as of `now`, without changing state.
    pub(crate) fn rates(
        &self,
        now: Instant,
        bytes: u64,
        packets: u64,
        interval: Duration,
    ) -> (u64, u64) {
        if now.saturating_since(self.window_start) >= interval {
            self.folded(now, bytes, packets, interval)
        } else {
            (self.avg_bps, self.avg_pps)
        }
    }

    /// Folds the elapsed window(s) into the average: the window's mean rate counts once per
    /// interval it spans, each fold moving the average a quarter of the way (ewma_log 2).
    fn folded(&self, now: Instant, bytes: u64, packets: u64, interval: Duration) -> (u64, u64) {
        let elapsed = now.saturating_since(self.window_start).as_nanos().max(1);
        let sample = |delta: u64, scale: u128| -> u64 {
            u64::try_from(u128::from(delta) * scale / u128::from(elapsed)).unwrap_or(u64::MAX)
        };
        let bps = sample(bytes.wrapping_sub(self.bytes_mark), 8_000_000_000);
        let pps = sample(packets.wrapping_sub(self.packets_mark), 1_000_000_000);
        let folds = (elapsed / interval.as_nanos().max(1)).clamp(1, Self::MAX_FOLDS);
        let step = |avg: u64, target: u64| -> u64 {
            let mut avg = avg;
            for _ in 0..folds {
                avg = if target >= avg {
                    avg + (target - avg) / 4
                } else {
                    avg - (avg - target) / 4
                };
            }
            avg
        };
        (step(self.avg_bps, bps), step(self.avg_pps, pps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimator_converges_and_decays() {
        let interval = Duration::from_millis(250);
        let mut est = RateEstimator::new(Instant::ZERO, 0, 0);
        let mut bytes = 0u64;
        let mut packets = 0u64;
        // 1 MB/s = 8 Mbit/s in 1000-byte packets for 5 s, updated every ms.
        for ms in 1..=5000u64 {
            bytes += 1000;
            packets += 1;
            est.update(
                Instant::from_nanos(ms * 1_000_000),
                bytes,
                packets,
                interval,
            );
        }
        let (bps, pps) = est.rates(Instant::from_nanos(5_000_000_000), bytes, packets, interval);
        assert!((7_900_000..=8_000_000).contains(&bps), "{bps}");
        assert!((990..=1000).contains(&pps), "{pps}");
        // Idle for 10 s: the estimate decays to (nearly) zero when read.
        let (bps, _) = est.rates(
            Instant::from_nanos(15_000_000_000),
            bytes,
            packets,
            interval,
        );
        assert!(bps < 8_000_000 / 50, "{bps}");
    }
}
