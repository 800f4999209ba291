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
//!
//! Stall credit (`credit.rs`) works on a bonus beside each bucket: when a worker reports a
//! stall in which no worker paid into the buckets, what they lost to their depth in it is
//! granted as a bonus, which covers the bucket's debt as its class catches up. A bonus not
//! spent on time (the class went idle) lapses. Two workers stalled together grant the same span once:
//! a grant raises the bonus to it, never adds.
//!
//! Buckets made [`with_seats`](SharedBuckets::with_seats) also keep each worker's count of what
//! it sent, for a leaf that several workers queue into at once: the workers with packets
//! waiting then share it max-min fairly (`fair_share.rs`) instead of first come, first served.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicI64, Ordering};

use super::Scheduler;
use super::algo::MBUFFER;
use super::arena::{ClassIdx, NO_CLASS};
use super::fair_share::{SeatState, Seats};
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
    /// When a worker last paid into them (or a bonus was granted), in token units.
    paid_at: AtomicI64,
    /// Stall credit for the rate bucket not spent yet, in token units.
    rate_bonus: AtomicI64,
    /// Stall credit for the ceil bucket not spent yet.
    ceil_bonus: AtomicI64,
    /// Each worker's count of bytes sent, for fairness between them (none: first come).
    seats: Seats,
}

/// "Empty long ago": a full bucket, whatever its depth.
const LONG_AGO: i64 = i64::MIN / 4;

impl Default for SharedBuckets {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedBuckets {
    /// Full buckets, taken first come, first served.
    #[must_use]
    pub fn new() -> Self {
        Self::with_seats(0)
    }

    /// Full buckets with a seat for each of `workers` workers (at most 64): a leaf whose copies
    /// several workers queue into at once is shared max-min fairly between those with packets
    /// waiting (see `fair_share.rs`), if each scheduler takes its seat with
    /// [`Scheduler::share_class_as`].
    #[must_use]
    pub fn with_seats(workers: usize) -> Self {
        Self {
            rate_empty: AtomicI64::new(LONG_AGO),
            ceil_empty: AtomicI64::new(LONG_AGO),
            paid_at: AtomicI64::new(LONG_AGO),
            rate_bonus: AtomicI64::new(0),
            ceil_bonus: AtomicI64::new(0),
            seats: Seats::new(workers),
        }
    }

    /// The bonus of `bucket` at `now`: what is left of it unless it lapsed (nothing paid for
    /// longer than `hold`, the longest credit, since it was granted or last spent from).
    fn bonus(&self, bucket: &AtomicI64, now: i64, hold: i64) -> i64 {
        let bonus = bucket.load(Ordering::Acquire);
        if bonus > 0 && now.saturating_sub(self.paid_at.load(Ordering::Acquire)) <= hold {
            bonus
        } else {
            0
        }
    }

    /// Covers the debt of the bucket emptied at `empty` (what it owes beyond being empty at
    /// `now`) from its bonus, while the bonus has not lapsed. The bucket is charged first and
    /// the bonus only covers its debt, so that the bucket keeps earning while its class
    /// catches up: spending the bonus first would leave the bucket full, capped at its depth,
    /// losing what it earned meanwhile.
    fn cover_debt(&self, empty: &AtomicI64, bonus: &AtomicI64, now: i64, hold: i64) {
        if self.bonus(bonus, now, hold) == 0 {
            return;
        }
        let debt = empty.load(Ordering::Acquire).saturating_sub(now);
        if debt <= 0 {
            return;
        }
        if let Ok(before) = bonus.fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
            (b > 0).then(|| b - b.min(debt))
        }) {
            empty.fetch_sub(before.min(debt), Ordering::AcqRel);
        }
    }

    /// A stall from `from` to `to` (token units) of a worker sharing these buckets: if no
    /// worker paid in since it began, grants what each bucket (of `depth` and `cdepth`) lost to
    /// its depth in it as a bonus.
    fn grant(&self, (from, to): (i64, i64), depth: i64, cdepth: i64) {
        if self.paid_at.load(Ordering::Acquire) > from {
            return;
        }
        let mut granted = false;
        for (empty, bonus, depth) in [
            (&self.rate_empty, &self.rate_bonus, depth),
            (&self.ceil_empty, &self.ceil_bonus, cdepth),
        ] {
            // The bucket was full from `E + depth` on: what it earned beyond that is lost.
            let full = empty.load(Ordering::Acquire).saturating_add(depth);
            let lost = to.saturating_sub(full.max(from)).clamp(0, to - from);
            if lost > 0 {
                bonus.fetch_max(lost, Ordering::AcqRel);
                granted = true;
            }
        }
        if granted {
            // The bonus lapses `hold` after this unless spent from.
            self.paid_at.fetch_max(to, Ordering::AcqRel);
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
    /// This scheduler's seat, when the buckets are shared fairly.
    fair: Option<SeatState>,
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
    /// one clock (the same `now` means the same instant). Whoever asks first is served first:
    /// see [`share_class_as`](Self::share_class_as) for a leaf several schedulers queue into.
    ///
    /// # Errors
    /// [`ClassError::NotFound`].
    pub fn share_class(
        &mut self,
        id: ClassId,
        buckets: Arc<SharedBuckets>,
    ) -> Result<(), ClassError> {
        self.share(id, buckets, None)
    }

    /// As [`share_class`](Self::share_class), this scheduler taking seat `seat` of buckets made
    /// [`with_seats`](SharedBuckets::with_seats): when the class is a leaf and several
    /// schedulers have packets waiting in their copies, each gets an equal share of it within
    /// an eighth of its ceil bucket, and one asking less gets all it asks (`fair_share.rs`).
    /// A seat beyond the buckets' shares them first come, as `share_class`.
    ///
    /// # Errors
    /// [`ClassError::NotFound`].
    pub fn share_class_as(
        &mut self,
        id: ClassId,
        buckets: Arc<SharedBuckets>,
        seat: u16,
    ) -> Result<(), ClassError> {
        let fair = usize::from(seat) < buckets.seats.len();
        self.share(id, buckets, fair.then(|| SeatState::new(seat)))
    }

    fn share(
        &mut self,
        id: ClassId,
        buckets: Arc<SharedBuckets>,
        fair: Option<SeatState>,
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
                fair,
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
    /// batch of dequeues, so the other workers see this one's sending within a batch. Classes
    /// shared fairly also publish what this scheduler sent through them, and take the penalty
    /// of a worker ahead of the others (`fair_share.rs`).
    pub fn flush_shared(&mut self) {
        let (now, hold) = (now_tokens(self.now), self.stall_credit.hold());
        for i in 0..self.shared.len() {
            let slot = &mut self.shared[i];
            let class = &self.classes[slot.class as usize];
            Self::pay(class, slot, now, hold);
            let Some(fair) = slot.fair.as_mut() else {
                continue;
            };
            let cold = &self.cold[slot.class as usize];
            if fair.update(&slot.buckets.seats, class, (cold.rate, cold.ceil)) {
                // Held back, or let go: the mode (and the wait-queue key) follows the view.
                let cl = slot.class;
                self.reevaluate_mode(cl);
            }
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
            if let Some(fair) = &entry.fair {
                entry.buckets.seats.leave(fair.seat());
            }
            Self::pay(
                &self.classes[slot as usize],
                &mut entry,
                now_tokens(self.now),
                self.stall_credit.hold(),
            );
        }
        self.classes[slot as usize].shared = false;
    }

    fn pay(class: &super::arena::Class, slot: &mut SharedSlot, now: i64, hold: i64) {
        let b = &slot.buckets;
        SharedBuckets::charge(&b.rate_empty, now, class.buffer, slot.debt_rate);
        SharedBuckets::charge(&b.ceil_empty, now, class.cbuffer, slot.debt_ceil);
        if slot.debt_rate != 0 || slot.debt_ceil != 0 {
            b.cover_debt(&b.rate_empty, &b.rate_bonus, now, hold);
            b.cover_debt(&b.ceil_empty, &b.ceil_bonus, now, hold);
            b.paid_at.fetch_max(now, Ordering::AcqRel);
        }
        slot.debt_rate = 0;
        slot.debt_ceil = 0;
    }

    /// A stall of this scheduler's driver from `from` to `to`: each shared class's buckets
    /// get what they lost in it, if no other worker used them meanwhile.
    pub(super) fn credit_shared(&self, from: Instant, to: Instant) {
        for slot in &self.shared {
            let class = &self.classes[slot.class as usize];
            slot.buckets.grant(
                (now_tokens(from), now_tokens(to)),
                class.buffer,
                class.cbuffer,
            );
        }
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
        let (now, hold) = (now_tokens(self.now), self.stall_credit.hold());
        let entry = &self.shared[at];
        let b = &entry.buckets;
        let class = &mut self.classes[slot as usize];
        let rate = SharedBuckets::level(b.rate_empty.load(Ordering::Acquire), now, class.buffer)
            .saturating_add(b.bonus(&b.rate_bonus, now, hold));
        let ceil = SharedBuckets::level(b.ceil_empty.load(Ordering::Acquire), now, class.cbuffer)
            .saturating_add(b.bonus(&b.ceil_bonus, now, hold));
        // A worker ahead of the others at a fairly shared leaf sees it emptier.
        let (rate_penalty, ceil_penalty) = entry.fair.as_ref().map_or((0, 0), |f| f.penalty);
        class.tokens = rate
            .saturating_sub(entry.debt_rate)
            .saturating_sub(rate_penalty)
            .max(1 - MBUFFER);
        class.ctokens = ceil
            .saturating_sub(entry.debt_ceil)
            .saturating_sub(ceil_penalty)
            .max(1 - MBUFFER);
        class.t_c = self.now;
    }

    /// Records that a shared class was charged `rate` and `ceil` tokens here for `bytes`
    /// sent through it; pays the debt once it reaches an eighth of either bucket.
    pub(super) fn owe_shared(&mut self, slot: ClassIdx, rate: i64, ceil: i64, bytes: u32) {
        let Some(at) = self.shared_index(slot) else {
            return;
        };
        let (now, hold) = (now_tokens(self.now), self.stall_credit.hold());
        let class = &self.classes[slot as usize];
        let entry = &mut self.shared[at];
        if let Some(fair) = entry.fair.as_mut() {
            fair.sent(bytes);
        }
        entry.debt_rate = entry.debt_rate.saturating_add(rate);
        entry.debt_ceil = entry.debt_ceil.saturating_add(ceil);
        if entry.debt_rate >= class.buffer / 8 || entry.debt_ceil >= class.cbuffer / 8 {
            Self::pay(class, entry, now, hold);
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
