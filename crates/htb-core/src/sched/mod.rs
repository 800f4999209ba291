//! The HTB scheduler (`struct htb_sched` and the qdisc operations of `sch_htb.c`).

mod algo;
mod arena;
mod check;
mod chunked;
mod credit;
mod fair_share;
mod id_map;
mod lifecycle;
mod shared;

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;

use self::arena::{Class, ClassCold, ClassIdx, InnerState, Level, NO_CLASS, PrioNodes, WaitNode};
pub use self::check::CheckError;
use self::chunked::Chunked;
pub use self::fair_share::MAX_SEATS;
use self::id_map::IdMap;
pub use self::lifecycle::Change;
pub use self::shared::SharedBuckets;
use self::shared::SharedSlot;
use crate::Packet;
use crate::class_id::ClassId;
use crate::leaf::{LeafConfig, LeafStats, LeafStore};
use crate::rate::{TOKENS_PER_TICK_SHIFT, tokens_to_ns_ceil};
use crate::spec::{ClassConfig, MAX_DEPTH, SchedulerConfig};
use crate::stats::{ClassStats, QueueCounters, SchedulerStats};
use crate::time::{Duration, Instant};

/// Where an enqueued packet should go: the result of classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// A class by id (`skb->priority` or a filter's `classid`). A leaf takes the packet; an
    /// inner or unknown class counts as "classification failed" and the packet goes to the
    /// default class. `major:0` selects the direct queue, as in the kernel.
    Class(ClassId),
    /// A class by a handle from [`Scheduler::handle`]: the same as `Class` without the hash
    /// lookup. A stale handle (the class was deleted) falls back to lookup by its id.
    Handle(ClassHandle),
    /// No filter matched: the default class, or the direct queue when there is no default
    /// leaf (`htb_classify`'s "safe bet").
    Unclassified,
    /// The direct queue: sent before any class, unshaped.
    Direct,
}

impl From<ClassId> for Target {
    fn from(id: ClassId) -> Self {
        Self::Class(id)
    }
}

impl From<ClassHandle> for Target {
    fn from(handle: ClassHandle) -> Self {
        Self::Handle(handle)
    }
}

/// A resolved reference to a class, for classifiers that enqueue millions of packets per
/// second and want to skip the id lookup. Checked on use, so a stale handle is harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClassHandle {
    id: ClassId,
    slot: ClassIdx,
}

impl ClassHandle {
    /// The class this handle refers to.
    #[must_use]
    pub fn id(self) -> ClassId {
        self.id
    }
}

/// Why a packet was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// The class's leaf queue was full.
    QueueFull(ClassId),
    /// The direct queue was full (`direct_qlen`).
    DirectQueueFull,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::QueueFull(id) => write!(f, "queue of class {id} is full"),
            Self::DirectQueueFull => f.write_str("direct queue is full"),
        }
    }
}

/// A packet the scheduler refused, handed back to the caller with the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dropped<P> {
    /// The packet, returned so that its buffer can be recycled.
    pub packet: P,
    /// Why.
    pub reason: DropReason,
}

/// A class's place in the tree and its resolved parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassInfo {
    /// The class.
    pub id: ClassId,
    /// Its parent, or `None` for a root class.
    pub parent: Option<ClassId>,
    /// Level: 0 for leaves, 7 for root classes with children, parent − 1 below.
    pub level: u8,
    /// Number of children.
    pub children: u32,
    /// Parameters in effect.
    pub config: ClassConfig,
    /// The leaf queue discipline's parameters (`None` for an inner class).
    pub leaf: Option<LeafConfig>,
}

/// A Hierarchical Token Bucket scheduler: Linux `sch_htb` semantics on a caller-supplied
/// nanosecond clock.
///
/// Packets of type `P` wait in each leaf class's queue discipline ([`LeafConfig`]; the
/// scheduler's [`default_leaf`](SchedulerConfig::default_leaf) unless set with
/// [`set_leaf`](Self::set_leaf)). The caller drives it: [`enqueue`](Self::enqueue) when a
/// packet arrives, [`dequeue`](Self::dequeue) when the link can take one,
/// [`next_wakeup`](Self::next_wakeup) to learn when to call `dequeue` again if it returned
/// `None`, and [`drain_dropped`](Self::drain_dropped) after either to take back the packets the
/// leaves dropped.
pub struct Scheduler<P: Packet> {
    config: SchedulerConfig,
    classes: Chunked<Class>,
    /// What the packet path does not touch of each class, by the same slot.
    cold: Chunked<ClassCold>,
    wait_nodes: Chunked<WaitNode>,
    prio_nodes: PrioNodes,
    inner: Chunked<InnerState>,
    levels: [Level; MAX_DEPTH],
    ids: IdMap,
    /// Freed class slots, chunked so that a mass delete's million never moves.
    free_classes: Chunked<ClassIdx>,
    free_inner: Vec<u32>,
    /// The default class's slot if it exists and is a leaf, else [`NO_CLASS`].
    default_leaf: ClassIdx,
    direct: VecDeque<P>,
    store: LeafStore<P>,
    /// Latest time seen; the scheduler's clock never runs backwards.
    now: Instant,
    qlen: u64,
    backlog: u64,
    stats: SchedulerStats,
    /// Classes whose buckets other schedulers share, by slot.
    shared: Vec<SharedSlot>,
    /// Leaves that held their packets back (a shaping `cake`), out of the round until then.
    throttled: Vec<(Instant, ClassIdx)>,
    /// Stalls of the driver, credited to the classes they cost ([`credit_stall`](Self::credit_stall)).
    stall_credit: credit::StallCredit,
}

impl<P: Packet> fmt::Debug for Scheduler<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .field("classes", &self.ids.len())
            .field("qlen", &self.qlen)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl<P: Packet> Scheduler<P> {
    /// An empty scheduler (no classes: everything goes to the direct queue).
    #[must_use]
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            config: SchedulerConfig {
                r2q: config.r2q.max(1),
                ..config
            },
            classes: Chunked::new(),
            cold: Chunked::new(),
            wait_nodes: Chunked::new(),
            prio_nodes: PrioNodes::default(),
            inner: Chunked::new(),
            levels: [Level::EMPTY; MAX_DEPTH],
            ids: IdMap::default(),
            free_classes: Chunked::new(),
            free_inner: Vec::new(),
            default_leaf: NO_CLASS,
            direct: VecDeque::new(),
            store: LeafStore {
                seed: config.seed,
                ..LeafStore::default()
            },
            now: Instant::ZERO,
            qlen: 0,
            backlog: 0,
            stats: SchedulerStats::default(),
            shared: Vec::new(),
            throttled: Vec::new(),
            stall_credit: credit::StallCredit::default(),
        }
    }

    /// Preallocates room for `classes` classes so that adding them does not reallocate.
    pub fn reserve_classes(&mut self, classes: usize) {
        self.classes.reserve(classes);
        self.cold.reserve(classes);
        self.wait_nodes.reserve(classes);
        self.prio_nodes.reserve(classes);
        self.ids.reserve(classes);
    }

    /// The scheduler-wide settings.
    #[must_use]
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Storage shared by the leaf queues: the packet pool and the flow table (reserve room in
    /// it to avoid allocation while the backlog grows).
    pub fn leaf_store(&mut self) -> &mut LeafStore<P> {
        &mut self.store
    }

    /// The packets leaves dropped since the last call (full queues, CoDel, `fq_codel`'s batch
    /// drops, `sfq` rehashing), to be recycled: call it after [`enqueue`](Self::enqueue) and
    /// [`dequeue`](Self::dequeue). They are already counted as drops. Every packet given to
    /// the scheduler comes back exactly once: from `dequeue`, in an `enqueue` error, in a
    /// [`Change`]'s `purged`, or here.
    pub fn drain_dropped(&mut self) -> alloc::vec::Drain<'_, P> {
        self.store.dropped.drain(..)
    }

    /// Whether leaves dropped packets not yet taken with
    /// [`drain_dropped`](Self::drain_dropped).
    #[must_use]
    pub fn has_dropped(&self) -> bool {
        !self.store.dropped.is_empty()
    }

    /// Sets the default class minor (tc `default`); 0 removes it.
    pub fn set_default_class(&mut self, minor: u32) {
        self.config.default_minor = minor;
        self.refresh_default();
    }

    /// Sets `r2q` (at least 1). Quanta are recomputed only when classes are added or
    /// changed, as in the kernel.
    pub fn set_r2q(&mut self, r2q: u32) {
        self.config.r2q = r2q.max(1);
    }

    /// Sets the direct queue's packet limit; packets already queued stay.
    pub fn set_direct_qlen(&mut self, packets: u32) {
        self.config.direct_qlen = packets;
    }

    /// Sets or removes the size table (tc `stab`); it counts from the next packet sent on.
    pub fn set_size_table(&mut self, stab: Option<crate::SizeTable>) {
        self.config.stab = stab;
    }

    /// The length a packet is charged and counted: its own, or its size table's
    /// (`qdisc_pkt_len`).
    #[inline]
    pub(super) fn pkt_len(&self, packet: &P) -> u32 {
        match &self.config.stab {
            None => packet.len_bytes(),
            Some(table) => table.pkt_len(packet.len_bytes()),
        }
    }

    /// Queues `packet` for `target` at time `now`.
    ///
    /// # Errors
    /// The packet comes back in [`Dropped`] when its queue is full; nothing else changes
    /// except the drop counters.
    pub fn enqueue(
        &mut self,
        now: Instant,
        target: impl Into<Target>,
        packet: P,
    ) -> Result<(), Dropped<P>> {
        self.advance_clock(now);
        let leaf = self.classify(target.into());
        if leaf == NO_CLASS {
            // htb_enqueue: HTB_DIRECT.
            if self.direct.len() < self.config.direct_qlen as usize {
                self.direct.push_back(packet);
                self.stats.direct_packets += 1;
                return Ok(());
            }
            self.stats.direct_drops += 1;
            self.stats.drops += 1;
            return Err(Dropped {
                packet,
                reason: DropReason::DirectQueueFull,
            });
        }
        let slot = leaf as usize;
        let queue = &mut self.classes[slot].queue;
        let before = (queue.len(), queue.backlog());
        let taken = queue.enqueue(&mut self.store, packet, self.now);
        let after = (queue.len(), queue.backlog());
        match taken {
            Ok(()) => {
                // The leaf took it, and may have dropped others to make room, even everything
                // it held (fq_codel drops half the fattest flow: the new packet's flow may be
                // all there is); an emptied leaf leaves the round (`htb_qlen_notify`).
                if self.account_leaf(leaf, before, after, before.0 + 1) {
                    self.deactivate(leaf);
                } else if !self.is_throttled(leaf) {
                    self.activate(leaf);
                }
                Ok(())
            }
            Err(packet) => {
                if self.account_leaf(leaf, before, after, before.0) {
                    self.deactivate(leaf);
                }
                let cold = &mut self.cold[slot];
                cold.drops = cold.drops.wrapping_add(1);
                self.stats.drops += 1;
                Err(Dropped {
                    packet,
                    reason: DropReason::QueueFull(self.classes[slot].id()),
                })
            }
        }
    }

    /// Whether leaf `cl` holds its packets back.
    #[inline]
    pub(super) fn is_throttled(&self, cl: ClassIdx) -> bool {
        !self.throttled.is_empty() && self.throttled.iter().any(|&(_, c)| c == cl)
    }

    /// Leaf `cl` returned nothing while holding packets: out of the round until `at`, as the
    /// kernel's HTB waits for a child qdisc's watchdog.
    pub(super) fn throttle(&mut self, cl: ClassIdx, at: Instant) {
        self.deactivate(cl);
        match self.throttled.iter_mut().find(|(_, c)| *c == cl) {
            Some(entry) => entry.0 = at,
            None => self.throttled.push((at, cl)),
        }
    }

    /// Forgets that leaf `cl` was throttled (its queue was emptied or replaced).
    pub(super) fn unthrottle(&mut self, cl: ClassIdx) {
        self.throttled.retain(|&(_, c)| c != cl);
    }

    /// Throttled leaves whose time has come rejoin the round.
    fn wake_throttled(&mut self) {
        let now = self.now;
        let mut i = 0;
        while i < self.throttled.len() {
            let (at, cl) = self.throttled[i];
            if at <= now {
                self.throttled.swap_remove(i);
                self.stats.leaf_wakeups += 1;
                if !self.classes[cl as usize].queue.is_empty() {
                    self.activate(cl);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Brings the totals up to date after a call into `leaf`, which held `before` (packets,
    /// bytes) and holds `after`, and would hold `expected` packets had it dropped nothing: the
    /// rest it dropped. Returns whether the leaf is empty now.
    #[inline]
    pub(super) fn account_leaf(
        &mut self,
        leaf: ClassIdx,
        before: (u32, u64),
        after: (u32, u64),
        expected: u32,
    ) -> bool {
        let (qlen, bytes) = after;
        self.qlen = self.qlen - u64::from(before.0) + u64::from(qlen);
        self.backlog = self.backlog - before.1 + bytes;
        let dropped = u64::from(expected.saturating_sub(qlen));
        if dropped > 0 {
            let cold = &mut self.cold[leaf as usize];
            cold.drops = cold.drops.wrapping_add(dropped as u32);
            self.stats.drops += dropped;
        }
        qlen == 0
    }

    /// The next packet to send at time `now`, if any class may send one.
    ///
    /// The direct queue goes first, then levels 0 to 7, priorities 0 to 7 within a level, and
    /// DRR among classes of one level and priority (`htb_dequeue`). When this returns `None`
    /// while packets are queued, [`next_wakeup`](Self::next_wakeup) says when to try again.
    pub fn dequeue(&mut self, now: Instant) -> Option<P> {
        self.advance_clock(now);
        if !self.throttled.is_empty() {
            self.wake_throttled();
        }
        if let Some(packet) = self.direct.pop_front() {
            self.stats.direct_packets_sent += 1;
            self.stats.direct_bytes_sent += u64::from(self.pkt_len(&packet));
            self.note_sent(&packet);
            return Some(packet);
        }
        if self.qlen == 0 {
            return None;
        }
        for level in 0..MAX_DEPTH {
            if self.event_due(level) {
                self.do_events(level);
            }
            // Snapshot, as the kernel does: serving may empty rows of this level.
            let mut mask = self.levels[level].row_mask;
            while mask != 0 {
                let prio = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                if let Some(packet) = self.dequeue_tree(prio, level) {
                    self.note_sent(&packet);
                    return Some(packet);
                }
            }
        }
        None
    }

    /// When [`dequeue`](Self::dequeue) should next be called: the latest `now` seen if a
    /// packet can be sent already, the earliest mode change of a throttled class otherwise,
    /// or `None` when nothing is queued (sleep until the next enqueue).
    #[must_use]
    pub fn next_wakeup(&self) -> Option<Instant> {
        if !self.direct.is_empty() {
            return Some(self.now);
        }
        if self.qlen == 0 {
            return None;
        }
        let mut next: Option<Instant> = self.throttled.iter().map(|&(at, _)| at).min();
        for level in &self.levels {
            if level.row_mask != 0 {
                return Some(self.now);
            }
            let first = level.wait.first();
            if first != crate::rbtree::NIL {
                let at = Instant::from_nanos(self.wait_nodes[first as usize].key);
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        next
    }

    /// Packets queued in leaves and the direct queue.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.qlen + self.direct.len() as u64
    }

    /// Whether nothing is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of classes.
    #[must_use]
    pub fn class_count(&self) -> usize {
        self.ids.len()
    }

    /// Ids of all classes, in no particular order.
    pub fn class_ids(&self) -> impl Iterator<Item = ClassId> + '_ {
        self.classes.iter().filter(|c| c.live()).map(Class::id)
    }

    /// Whether `id` names a class.
    #[must_use]
    pub fn contains(&self, id: ClassId) -> bool {
        self.lookup(id) != NO_CLASS
    }

    /// Class `id`'s parent: `None` when there is no class `id`, `Some(None)` for a class at
    /// the top of the tree. Cheaper than [`class_info`](Self::class_info).
    #[must_use]
    pub fn parent(&self, id: ClassId) -> Option<Option<ClassId>> {
        let slot = self.lookup(id);
        if slot == NO_CLASS {
            return None;
        }
        let parent = self.classes[slot as usize].parent;
        Some((parent != NO_CLASS).then(|| self.classes[parent as usize].id()))
    }

    /// The class unclassified packets go to (`default` when it names a leaf), if any.
    #[must_use]
    pub fn default_class(&self) -> Option<ClassId> {
        (self.default_leaf != NO_CLASS).then(|| self.classes[self.default_leaf as usize].id())
    }

    /// A checked shortcut to class `id` for [`Target::Handle`].
    #[must_use]
    pub fn handle(&self, id: ClassId) -> Option<ClassHandle> {
        let slot = self.lookup(id);
        (slot != NO_CLASS).then_some(ClassHandle { id, slot })
    }

    /// Where class `id` sits and the parameters in effect.
    #[must_use]
    pub fn class_info(&self, id: ClassId) -> Option<ClassInfo> {
        let slot = self.lookup(id);
        if slot == NO_CLASS {
            return None;
        }
        let class = &self.classes[slot as usize];
        let cold = &self.cold[slot as usize];
        let queue = &self.classes[slot as usize].queue;
        let parent = (class.parent != NO_CLASS).then(|| self.classes[class.parent as usize].id());
        Some(ClassInfo {
            id,
            parent,
            level: class.level,
            children: cold.children,
            config: ClassConfig {
                rate: cold.rate,
                ceil: cold.ceil,
                // Derived from the bucket depths, as tc derives what it prints.
                burst: cold
                    .rate
                    .bytes_in(Duration::from_nanos(tokens_to_ns_ceil(class.buffer))),
                cburst: cold
                    .ceil
                    .bytes_in(Duration::from_nanos(tokens_to_ns_ceil(class.cbuffer))),
                buffer: Duration::from_nanos(tokens_to_ns_ceil(class.buffer)),
                cbuffer: Duration::from_nanos(tokens_to_ns_ceil(class.cbuffer)),
                prio: class.prio,
                quantum: class.quantum as u32,
                adjust: cold.adjust,
            },
            leaf: (class.level == 0).then(|| queue.config(&self.store)),
        })
    }

    /// Statistics of class `id` (counters, backlog and buckets; rates come from a
    /// [`RateEstimator`](crate::RateEstimator)).
    #[must_use]
    pub fn class_stats(&self, id: ClassId) -> Option<ClassStats> {
        let slot = self.lookup(id);
        if slot == NO_CLASS {
            return None;
        }
        let c = &self.classes[slot as usize];
        let cold = &self.cold[slot as usize];
        let queue = &self.classes[slot as usize].queue;
        let ticks = |tokens: i64| {
            (tokens >> TOKENS_PER_TICK_SHIFT).clamp(i32::MIN.into(), i32::MAX.into()) as i32
        };
        Some(ClassStats {
            id,
            queue: QueueCounters {
                bytes: c.bytes,
                packets: c.packets,
                drops: cold.drops.into(),
                overlimits: cold.overlimits.into(),
                requeues: 0,
                backlog_bytes: queue.backlog(),
                backlog_packets: queue.len().into(),
            },
            lends: c.lends.into(),
            borrows: cold.borrows.into(),
            giants: 0,
            tokens: ticks(c.tokens),
            ctokens: ticks(c.ctokens),
            mode: c.mode,
            level: c.level,
        })
    }

    /// Statistics of class `id`'s leaf queue discipline (`None` for an inner or unknown class):
    /// what `tc -s qdisc show` prints for a child qdisc.
    #[must_use]
    pub fn leaf_stats(&self, id: ClassId) -> Option<LeafStats> {
        let slot = self.lookup(id);
        if slot == NO_CLASS || self.classes[slot as usize].level != 0 {
            return None;
        }
        Some(self.classes[slot as usize].queue.stats(&self.store))
    }

    /// Which queue of class `id`'s leaf a packet of flow `hash` joins (`None` for an inner or
    /// unknown class, or a leaf with one queue, or `cake`, whose choice depends on what it holds).
    #[must_use]
    pub fn leaf_queue(&self, id: ClassId, hash: u32) -> Option<u32> {
        let slot = self.lookup(id);
        if slot == NO_CLASS || self.classes[slot as usize].level != 0 {
            return None;
        }
        self.classes[slot as usize]
            .queue
            .queue_of(&self.store, hash)
    }

    /// `(id, bytes sent, packets sent)` of every class, in no particular order: what a rate
    /// estimator samples.
    pub fn class_counters(&self) -> impl Iterator<Item = (ClassId, u64, u64)> + '_ {
        self.classes
            .iter()
            .filter(|c| c.live())
            .map(|c| (c.id(), c.bytes, c.packets))
    }

    /// Scheduler-wide statistics.
    #[must_use]
    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            qlen: self.qlen,
            backlog_bytes: self.backlog,
            direct_qlen: self.direct.len() as u32,
            ..self.stats
        }
    }

    /// The latest time any call passed in.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Tells the scheduler that its driver could not serve it from `from` to `to` (the host
    /// took the CPU, a control job held the data plane): each class whose buckets the next
    /// charge carries across that span may rise above its burst by the part of the span it
    /// covers, up to `at_most`, so a full class still sends its rate over the stall (see
    /// `sched/credit.rs`). No call, no credit: the kernel's behaviour.
    ///
    /// Classes whose buckets other schedulers share are credited only what their shared
    /// buckets lost while no scheduler sharing them paid in (see `sched/shared.rs`).
    pub fn credit_stall(&mut self, from: Instant, to: Instant, at_most: Duration) {
        self.stall_credit.record(from, to, at_most);
        if !self.shared.is_empty() {
            self.credit_shared(from, to.min(from + at_most));
        }
    }

    /// The longest stall credit a class has been given room for (zero: none reported).
    #[must_use]
    pub fn longest_stall_credit(&self) -> Duration {
        self.stall_credit.longest()
    }

    fn advance_clock(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    fn note_sent(&mut self, packet: &P) {
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += u64::from(self.pkt_len(packet));
    }

    fn lookup(&self, id: ClassId) -> ClassIdx {
        if id.major() != self.config.major {
            return NO_CLASS;
        }
        self.ids.get(id.minor()).unwrap_or(NO_CLASS)
    }

    /// `htb_classify` after filters: the leaf slot, or [`NO_CLASS`] for the direct queue.
    fn classify(&self, target: Target) -> ClassIdx {
        let slot = match target {
            Target::Direct => return NO_CLASS,
            Target::Unclassified => return self.default_leaf,
            Target::Handle(handle) => {
                // The handle's slot, if it still holds its class: checked and judged in one
                // look-up of the record.
                if let Some(class) = self.classes.get(handle.slot as usize)
                    && class.id() == handle.id
                {
                    return if class.level == 0 {
                        handle.slot
                    } else {
                        self.default_leaf
                    };
                }
                self.lookup(handle.id)
            }
            Target::Class(id) if id.major() == self.config.major && id.is_qdisc() => {
                return NO_CLASS;
            }
            Target::Class(id) => self.lookup(id),
        };
        if slot != NO_CLASS && self.classes[slot as usize].level == 0 {
            slot
        } else {
            self.default_leaf
        }
    }

    fn refresh_default(&mut self) {
        let minor = self.config.default_minor;
        self.default_leaf = match self.ids.get(minor) {
            Some(slot) if minor != 0 && self.classes[slot as usize].level == 0 => slot,
            _ => NO_CLASS,
        };
    }

    /// Token units that the time elapsed since a class's checkpoint is worth.
    ///
    /// The kernel caps it at `mbuffer` (60 s), which keeps a burst longer than 60 s from ever
    /// refilling. Here the cap is the longest burst plus `mbuffer`: a debt is never deeper than
    /// `mbuffer` and credit never above the burst, so any longer idle time changes nothing,
    /// and one constant is cheaper than a per-class maximum.
    #[inline]
    fn elapsed_tokens(class: &Class, now: Instant) -> i64 {
        const CAP_NS: u64 = crate::spec::MAX_BURST_TIME.as_nanos() + 60_000_000_000;
        let ns = now.saturating_since(class.t_c).as_nanos().min(CAP_NS);
        (ns as i64) << crate::rate::TOKEN_SHIFT
    }
}

#[cfg(test)]
mod credit_tests;
#[cfg(test)]
mod fair_share_tests;
#[cfg(test)]
mod tests;
