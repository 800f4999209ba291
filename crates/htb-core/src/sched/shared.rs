//! A class whose token buckets several schedulers share: the root of a tree whose subtrees
//! are served by different data-plane workers, each with its own [`Scheduler`].
//!
//! The kernel has no such thing: one qdisc lock serializes every packet of a port, so the
//! root's buckets are plain fields. LibreQoS, to use several CPUs, gives each CPU its own
//! HTB under `mq`, and the CPUs' roots cannot share an uplink rate. Here every worker keeps
//! its own copy of the class (its mode, wait-queue entry and counters) and the buckets live in
//! one [`SharedBuckets`] that all copies charge.
//!
//! Nothing is written to it per packet: a worker charges its copy at once (so its own view is
//! exact) and owes the same cost to the shared buckets as a debt, paid in one atomic update
//! when the debt reaches an eighth of the bucket or when the caller ends a batch
//! ([`Scheduler::flush_shared`]). The other workers see a worker's sending late by at most
//! that debt, so the root's rate can be exceeded for a moment by one debt per worker; over
//! any longer time it is exact, since every byte is charged once.
//!
//! A bucket is kept as the time it was (or will be) empty, `E`, in token units (1/256 ns)
//! since the schedulers' common epoch: at time `t` it holds `min(depth, t - E)` tokens.
//! Charging `c` is `E = max(E, t - depth) + c`: one number per bucket, updated with one
//! compare-and-swap, so no lock.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicI64, Ordering};

use super::Scheduler;
use super::algo::MBUFFER;
use super::arena::{ClassIdx, NO_CLASS};
use crate::Packet;
use crate::class_id::ClassId;
use crate::error::ClassError;
use crate::rate::TOKEN_SHIFT;
use crate::time::Instant;

/// The rate and ceil buckets of one class, shared by the schedulers of several workers
/// (through an [`Arc`]); see the module documentation.
#[derive(Debug)]
pub struct SharedBuckets {
    /// When the rate bucket was last empty, in token units since the epoch.
    rate_empty: AtomicI64,
    /// When the ceil bucket was last empty.
    ceil_empty: AtomicI64,
}

/// "Empty long ago": a full bucket, whatever its depth.
const LONG_AGO: i64 = i64::MIN / 4;

impl Default for SharedBuckets {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedBuckets {
    /// Full buckets.
    #[must_use]
    pub fn new() -> Self {
        Self {
            rate_empty: AtomicI64::new(LONG_AGO),
            ceil_empty: AtomicI64::new(LONG_AGO),
        }
    }

    /// Tokens a bucket of `depth` emptied at `empty` holds at `now` (token units).
    fn level(empty: i64, now: i64, depth: i64) -> i64 {
        now.saturating_sub(empty).min(depth)
    }

    /// Charges `cost` tokens to the bucket of `depth` at `now`: `E = max(E, now - depth) +
    /// cost`, never more than `mbuffer` of debt (the kernel's floor).
    fn charge(bucket: &AtomicI64, now: i64, depth: i64, cost: i64) {
        if cost == 0 {
            return;
        }
        let floor = now.saturating_sub(depth);
        let ceiling = now.saturating_add(MBUFFER - 1);
        // The closure always returns Some: fetch_update cannot fail.
        let _ = bucket.fetch_update(Ordering::AcqRel, Ordering::Acquire, |empty| {
            Some(empty.max(floor).saturating_add(cost).min(ceiling))
        });
    }
}

/// A shared class as one scheduler sees it: which class, and what it owes the buckets.
#[derive(Debug)]
pub(super) struct SharedSlot {
    pub(super) class: ClassIdx,
    buckets: Arc<SharedBuckets>,
    /// Rate tokens charged locally and not yet to the shared bucket.
    debt_rate: i64,
    /// Ceil tokens charged locally and not yet to the shared bucket.
    debt_ceil: i64,
}

/// `now` in token units.
fn now_tokens(now: Instant) -> i64 {
    i64::try_from(now.as_nanos())
        .unwrap_or(i64::MAX)
        .saturating_mul(1 << TOKEN_SHIFT)
}

impl<P: Packet> Scheduler<P> {
    /// Makes class `id`'s buckets `buckets`, shared with the other schedulers given the same
    /// ones: every scheduler charges them, and each sees what the others sent (late by at most
    /// one unpaid debt each; see [`flush_shared`](Self::flush_shared)). The class's counters,
    /// mode and queue stay this scheduler's. All schedulers sharing buckets must be driven by
    /// one clock (the same `now` means the same instant).
    ///
    /// # Errors
    /// [`ClassError::NotFound`].
    pub fn share_class(
        &mut self,
        id: ClassId,
        buckets: Arc<SharedBuckets>,
    ) -> Result<(), ClassError> {
        let slot = self.lookup(id);
        if slot == NO_CLASS {
            return Err(ClassError::NotFound(id));
        }
        self.unshare(slot);
        let at = self.shared.partition_point(|s| s.class < slot);
        self.shared.insert(
            at,
            SharedSlot {
                class: slot,
                buckets,
                debt_rate: 0,
                debt_ceil: 0,
            },
        );
        self.classes[slot as usize].shared = true;
        self.pull_shared(slot);
        self.reevaluate_mode(slot);
        Ok(())
    }

    /// Whether class `id`'s buckets are shared.
    #[must_use]
    pub fn is_shared(&self, id: ClassId) -> bool {
        let slot = self.lookup(id);
        slot != NO_CLASS && self.classes[slot as usize].shared
    }

    /// Pays every debt to the shared buckets at the latest `now` seen: call it after each
    /// batch of dequeues, so the other workers see this one's sending within a batch.
    pub fn flush_shared(&mut self) {
        let now = now_tokens(self.now);
        for slot in &mut self.shared {
            Self::pay(&self.classes[slot.class as usize], slot, now);
        }
    }

    /// Forgets that `slot` shares its buckets (it is being deleted, or shared anew), paying
    /// what it owes first.
    pub(super) fn unshare(&mut self, slot: ClassIdx) {
        if !self.classes[slot as usize].shared {
            return;
        }
        if let Ok(at) = self.shared.binary_search_by_key(&slot, |s| s.class) {
            let mut entry = self.shared.remove(at);
            Self::pay(
                &self.classes[slot as usize],
                &mut entry,
                now_tokens(self.now),
            );
        }
        self.classes[slot as usize].shared = false;
    }

    fn pay(class: &super::arena::Class, slot: &mut SharedSlot, now: i64) {
        SharedBuckets::charge(&slot.buckets.rate_empty, now, class.buffer, slot.debt_rate);
        SharedBuckets::charge(&slot.buckets.ceil_empty, now, class.cbuffer, slot.debt_ceil);
        slot.debt_rate = 0;
        slot.debt_ceil = 0;
    }

    fn shared_index(&self, slot: ClassIdx) -> Option<usize> {
        self.shared.binary_search_by_key(&slot, |s| s.class).ok()
    }

    /// Brings a shared class's buckets up to date at `now`: the shared level less this
    /// scheduler's unpaid debt (so the checkpoint becomes `now`).
    pub(super) fn pull_shared(&mut self, slot: ClassIdx) {
        let Some(at) = self.shared_index(slot) else {
            return;
        };
        let now = now_tokens(self.now);
        let entry = &self.shared[at];
        let class = &mut self.classes[slot as usize];
        let rate = SharedBuckets::level(
            entry.buckets.rate_empty.load(Ordering::Acquire),
            now,
            class.buffer,
        );
        let ceil = SharedBuckets::level(
            entry.buckets.ceil_empty.load(Ordering::Acquire),
            now,
            class.cbuffer,
        );
        class.tokens = rate.saturating_sub(entry.debt_rate).max(1 - MBUFFER);
        class.ctokens = ceil.saturating_sub(entry.debt_ceil).max(1 - MBUFFER);
        class.t_c = self.now;
    }

    /// Records that a shared class was charged `rate` and `ceil` tokens here; pays the debt
    /// once it reaches an eighth of either bucket.
    pub(super) fn owe_shared(&mut self, slot: ClassIdx, rate: i64, ceil: i64) {
        let Some(at) = self.shared_index(slot) else {
            return;
        };
        let now = now_tokens(self.now);
        let class = &self.classes[slot as usize];
        let entry = &mut self.shared[at];
        entry.debt_rate = entry.debt_rate.saturating_add(rate);
        entry.debt_ceil = entry.debt_ceil.saturating_add(ceil);
        if entry.debt_rate >= class.buffer / 8 || entry.debt_ceil >= class.cbuffer / 8 {
            Self::pay(class, entry, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{ClassSpec, SchedulerConfig};
    use crate::{Rate, Target};

    #[derive(Debug)]
    struct Pkt(u32);
    impl Packet for Pkt {
        fn len_bytes(&self) -> u32 {
            self.0
        }
    }

    fn id(s: &str) -> ClassId {
        s.parse().unwrap()
    }

    /// A root of `root` bit/s with children 1:10 and 1:20 at `rates`, both with ceil `root`;
    /// the root's buckets are `shared` when given.
    fn tree(root: u64, rates: [u64; 2], shared: Option<&Arc<SharedBuckets>>) -> Scheduler<Pkt> {
        let mut s = Scheduler::new(SchedulerConfig::default());
        let rate = |bps| ClassSpec::new(Rate::from_bits_per_sec(bps));
        let _ = s
            .add_class(Instant::ZERO, id("1:1"), None, &rate(root))
            .unwrap();
        for (c, r) in [("1:10", rates[0]), ("1:20", rates[1])] {
            let mut spec = rate(r);
            spec.ceil = Some(Rate::from_bits_per_sec(root));
            let _ = s
                .add_class(Instant::ZERO, id(c), Some(id("1:1")), &spec)
                .unwrap();
        }
        if let Some(shared) = shared {
            s.share_class(id("1:1"), Arc::clone(shared)).unwrap();
            assert!(s.is_shared(id("1:1")) && !s.is_shared(id("1:10")));
        }
        s
    }

    /// A worker's turn at `t`: `child` kept 50 packets deep, everything the scheduler releases
    /// sent, the debt paid. Returns the bytes sent.
    fn turn(s: &mut Scheduler<Pkt>, t: Instant, child: &str) -> u64 {
        while s.len() < 50 {
            s.enqueue(t, Target::Class(id(child)), Pkt(1500)).unwrap();
        }
        let mut sent = 0;
        while let Some(p) = s.dequeue(t) {
            sent += u64::from(p.0);
        }
        s.flush_shared();
        sent
    }

    /// Two workers, each saturating its own child of a shared 100 Mbit/s root, stepping in
    /// 100 µs turns: together they send the root's rate (not twice it). The rate above the
    /// children's guarantees goes to whichever worker asks first (not by DRR quantum, as in
    /// one kernel HTB): here they take turns at asking first, and split it 60/40.
    #[test]
    fn two_schedulers_sharing_a_root_send_its_rate_together() {
        let shared = Arc::new(SharedBuckets::new());
        let root = 100_000_000;
        let mut a = tree(root, [1_000_000; 2], Some(&shared));
        let mut b = tree(root, [1_000_000; 2], Some(&shared));
        let mut sent = [0u64; 2];
        let secs = 2;
        let step = 100_000;
        let mut now = 0;
        while now < secs * 1_000_000_000 {
            let t = Instant::from_nanos(now);
            let mut order = [(0, &mut a, "1:10"), (1, &mut b, "1:20")];
            if (now / step) % 2 == 1 {
                order.reverse();
            }
            for (i, s, child) in order {
                sent[i] += turn(s, t, child);
                s.check().unwrap();
            }
            now += step;
        }
        let total = (sent[0] + sent[1]) as f64 * 8.0 / secs as f64;
        let err = (total - root as f64).abs() / root as f64;
        assert!(
            err < 0.01,
            "together {total} bit/s for a root of {root} ({err:.4})"
        );
        let share = sent[0] as f64 / (sent[0] + sent[1]) as f64;
        assert!((0.3..0.7).contains(&share), "split {share:.3}");
    }

    /// Unshared, the same scheduler sends the whole root rate alone: the test above
    /// measures the sharing, not something else limiting them.
    #[test]
    fn without_sharing_each_scheduler_sends_the_whole_root() {
        let root = 100_000_000u64;
        let mut s = tree(root, [1_000_000; 2], None);
        let mut sent = 0u64;
        for step in 0..10_000u64 {
            sent += turn(&mut s, Instant::from_nanos(step * 100_000), "1:10");
        }
        let bps = sent as f64 * 8.0;
        assert!((bps - root as f64).abs() / (root as f64) < 0.01, "{bps}");
    }

    /// A guaranteed rate is not taken away by another worker's borrowing: one child at 80 of
    /// a 100 Mbit/s root, the other at 20 (both may borrow up to 100): 80/20, as one kernel
    /// HTB would split it.
    #[test]
    fn rates_are_kept_when_the_shared_root_is_the_bottleneck() {
        let shared = Arc::new(SharedBuckets::new());
        let root = 100_000_000u64;
        let rates = [80_000_000, 20_000_000];
        let mut workers = [
            (tree(root, rates, Some(&shared)), "1:10"),
            (tree(root, rates, Some(&shared)), "1:20"),
        ];
        let mut sent = [0u64; 2];
        for step in 0..20_000u64 {
            let t = Instant::from_nanos(step * 100_000);
            for (i, (s, child)) in workers.iter_mut().enumerate() {
                sent[i] += turn(s, t, child);
            }
        }
        let mbit = |b: u64| b as f64 * 8.0 / 2.0 / 1e6;
        let (a, b) = (mbit(sent[0]), mbit(sent[1]));
        assert!(
            (a - 80.0).abs() < 1.6 && (b - 20.0).abs() < 1.0,
            "{a} / {b} Mbit/s"
        );
    }

    #[test]
    fn deleting_a_shared_class_pays_its_debt_and_forgets_it() {
        let shared = Arc::new(SharedBuckets::new());
        let mut s = tree(10_000_000, [1_000_000; 2], Some(&shared));
        s.enqueue(Instant::ZERO, Target::Class(id("1:10")), Pkt(1500))
            .unwrap();
        s.dequeue(Instant::ZERO).unwrap();
        let buffer = s.classes[s.lookup(id("1:1")) as usize].buffer;
        for c in ["1:10", "1:20", "1:1"] {
            let _ = s.delete_class(Instant::ZERO, id(c)).unwrap();
        }
        assert!(s.shared.is_empty());
        // The 1500 bytes were paid: the shared rate bucket is 1500 bytes' time below full.
        let level = SharedBuckets::level(shared.rate_empty.load(Ordering::Relaxed), 0, buffer);
        let cost = 1500 * 8 * 1_000_000_000i64 / 10_000_000 * 256;
        assert!(
            (buffer - level - cost).abs() < 256 * 1000,
            "level {level}, cost {cost}"
        );
    }
}
