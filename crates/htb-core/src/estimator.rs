//! Rate estimates per class, sampled by the caller on its own timer.
//!
//! The kernel gives a class a rate estimator only on request (`tc class add ... estimator I T`,
//! or the `htb_rate_est` module parameter), and runs it on a timer, outside the packet path.
//! [`RateEstimator`] does the same, sans-IO: the caller calls [`RateEstimator::sample`] at a
//! regular interval (htbd: every 250 ms) and the scheduler's per-packet work is untouched.

use hashbrown::HashMap;

use crate::Packet;
use crate::class_id::ClassId;
use crate::sched::Scheduler;
use crate::time::Instant;

/// An estimated rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    /// Bits per second.
    pub bps: u64,
    /// Packets per second.
    pub pps: u64,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    bytes: u64,
    packets: u64,
    rates: Rates,
    /// Generation of the last sample that saw this class (to forget deleted classes).
    seen: u64,
}

/// Exponentially weighted per-class rates (`gen_estimator` with `ewma_log` 2: each sample moves
/// the average a quarter of the way to the rate measured since the previous sample, so the time
/// constant is about four sampling intervals).
#[derive(Clone, Debug, Default)]
pub struct RateEstimator {
    entries: HashMap<ClassId, Entry>,
    last: Option<Instant>,
    generation: u64,
}

impl RateEstimator {
    /// An estimator with no history.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds every class's traffic since the previous sample into its average. Classes seen for
    /// the first time start at zero; deleted classes are forgotten. Samples closer than 1 µs to
    /// the previous one are ignored.
    pub fn sample<P: Packet>(&mut self, now: Instant, htb: &Scheduler<P>) {
        let elapsed = self.last.map(|last| now.saturating_since(last).as_nanos());
        if elapsed.is_some_and(|ns| ns < 1_000) {
            return;
        }
        self.last = Some(now);
        self.generation += 1;
        let generation = self.generation;
        for (id, bytes, packets) in htb.class_counters() {
            let entry = self.entries.entry(id).or_insert(Entry {
                bytes,
                packets,
                rates: Rates::default(),
                seen: 0,
            });
            if let (Some(ns), true) = (elapsed, entry.seen + 1 == generation) {
                let per_sec = |delta: u64, scale: u128| {
                    u64::try_from(u128::from(delta) * scale / u128::from(ns)).unwrap_or(u64::MAX)
                };
                let bps = per_sec(bytes.wrapping_sub(entry.bytes), 8_000_000_000);
                let pps = per_sec(packets.wrapping_sub(entry.packets), 1_000_000_000);
                entry.rates = Rates {
                    bps: ewma(entry.rates.bps, bps),
                    pps: ewma(entry.rates.pps, pps),
                };
            }
            entry.bytes = bytes;
            entry.packets = packets;
            entry.seen = generation;
        }
        self.entries.retain(|_, e| e.seen == generation);
    }

    /// The estimate for class `id`, if it was sampled.
    #[must_use]
    pub fn rates(&self, id: ClassId) -> Option<Rates> {
        self.entries.get(&id).map(|e| e.rates)
    }
}

/// One EWMA step with weight 1/4.
fn ewma(avg: u64, sample: u64) -> u64 {
    if sample >= avg {
        avg + (sample - avg) / 4
    } else {
        avg - (avg - sample) / 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClassSpec, Rate, SchedulerConfig};

    #[test]
    fn converges_to_the_sending_rate_and_forgets_deleted_classes() {
        let mut htb: Scheduler<u32> = Scheduler::new(SchedulerConfig::default());
        let id = ClassId::new(1, 1);
        let _ = htb
            .add_class(
                Instant::ZERO,
                id,
                None,
                &ClassSpec::new(Rate::from_mbit(100)),
            )
            .unwrap();
        let mut est = RateEstimator::new();
        // 1000-byte packets every ms = 8 Mbit/s, sampled every 250 ms for 5 s.
        for ms in 0..=5000u64 {
            let now = Instant::from_nanos(ms * 1_000_000);
            htb.enqueue(now, id, 1000).unwrap();
            assert_eq!(htb.dequeue(now), Some(1000));
            if ms % 250 == 0 {
                est.sample(now, &htb);
            }
        }
        let rates = est.rates(id).unwrap();
        assert!((7_900_000..=8_100_000).contains(&rates.bps), "{rates:?}");
        assert!((990..=1010).contains(&rates.pps), "{rates:?}");
        let _ = htb
            .delete_class(Instant::from_nanos(6_000_000_000), id)
            .unwrap();
        est.sample(Instant::from_nanos(6_000_000_000), &htb);
        assert_eq!(est.rates(id), None);
    }
}
