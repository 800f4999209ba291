//! The scheduling algorithm, one function per `sch_htb.c` function it mirrors.

use super::Scheduler;
use super::arena::{Class, ClassIdx, InnerState, Level, NO_CLASS, Row};
use super::chunked::Chunked;
use super::credit::cap;
use crate::Packet;
use crate::rate::{TOKENS_PER_NS, tokens_to_ns_ceil};
use crate::rbtree::{NIL, NodeId, RbTree};
use crate::spec::MAX_DEPTH;
use crate::stats::Mode;

/// The kernel's `mbuffer`: 60 s, the floor of a bucket's debt.
pub(super) const MBUFFER: i64 = 60 * 1_000_000_000 * TOKENS_PER_NS;

/// Bound of `htb_lookup_leaf`'s walk (the kernel's `for (i = 0; i < 65535; i++)`).
const LOOKUP_STEPS: u32 = 65_535;

/// Which round-robin list: a level's row or an inner class's feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RowRef {
    Level { level: u8, prio: u8 },
    Feed { inner: u32, prio: u8 },
}

/// The row `r` refers to; a free function so that the caller can borrow the node pools at
/// the same time.
#[inline]
pub(super) fn row_mut<'a>(
    levels: &'a mut [Level],
    inner: &'a mut Chunked<InnerState>,
    r: RowRef,
) -> &'a mut Row {
    match r {
        RowRef::Level { level, prio } => &mut levels[level as usize].rows[prio as usize],
        RowRef::Feed { inner: i, prio } => &mut inner[i as usize].feeds[prio as usize],
    }
}

#[inline]
fn bits(mut mask: u8) -> impl Iterator<Item = u8> {
    core::iter::from_fn(move || {
        (mask != 0).then(|| {
            let bit = mask.trailing_zeros() as u8;
            mask &= mask - 1;
            bit
        })
    })
}

/// Charges `len` bytes to a DRR `deficit`; when it runs out, tops it up by `quantum` and
/// says so: the round moves on (`htb_dequeue_tree`).
#[inline]
fn spend_deficit(deficit: &mut i32, len: u32, quantum: i32) -> bool {
    *deficit = deficit.saturating_sub(len.min(i32::MAX as u32) as i32);
    let advance = *deficit < 0;
    if advance {
        *deficit = deficit.saturating_add(quantum);
    }
    advance
}

/// Where a class's nodes are: its level and first node.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    level: u8,
    first: NodeId,
}

impl Place {
    #[inline]
    fn of(class: &Class) -> Self {
        Self {
            level: class.level,
            first: class.prio_node,
        }
    }

    /// The node for priority `prio`: a leaf's one node, or an inner class's per priority.
    #[inline]
    fn node(self, prio: u8) -> NodeId {
        if self.level == 0 {
            self.first
        } else {
            self.first + NodeId::from(prio)
        }
    }
}

/// What hooking a class into feeds and rows reads of its record, read once (each look-up of a
/// record costs a load of its storage chunk).
#[derive(Clone, Copy, Debug)]
pub(super) struct Hook {
    place: Place,
    activity: u8,
    mode: Mode,
    parent: ClassIdx,
    minor: u32,
}

impl Hook {
    #[inline]
    pub(super) fn of(class: &Class) -> Self {
        Self {
            place: Place::of(class),
            activity: class.activity,
            mode: class.mode,
            parent: class.parent,
            minor: class.minor,
        }
    }
}

impl<P: Packet> Scheduler<P> {
    /// The node of class `cl` for priority `prio`: a leaf has one node, used for whichever
    /// priority it is active at; an inner class has one per priority.
    #[inline]
    pub(super) fn prio_node(&self, cl: ClassIdx, prio: u8) -> NodeId {
        Place::of(&self.classes[cl as usize]).node(prio)
    }

    /// `htb_activate`: a leaf got backlog; hook it into the feeds/rows of its priority.
    #[inline]
    pub(super) fn activate(&mut self, cl: ClassIdx) {
        let class = &mut self.classes[cl as usize];
        if class.activity == 0 {
            class.activity = 1 << class.prio;
            let hook = Hook::of(class);
            self.activate_prios(hook);
        }
    }

    /// `htb_deactivate`: a leaf lost its backlog.
    #[inline]
    pub(super) fn deactivate(&mut self, cl: ClassIdx) {
        let class = &mut self.classes[cl as usize];
        if class.activity == 0 {
            return;
        }
        // Its own activity first: unhooking changes only its ancestors' records.
        let hook = Hook::of(class);
        class.activity = 0;
        self.deactivate_prios(hook);
    }

    /// `htb_activate_prios`: connects the class whose record `hook` read to its ancestors'
    /// feeds while it may borrow, and the first green class of the chain to its level's row.
    /// `hook.mode` must be the new mode.
    pub(super) fn activate_prios(&mut self, hook: Hook) {
        let mut hook = hook;
        let mut mask = hook.activity;
        while hook.mode == Mode::MayBorrow && hook.parent != NO_CLASS && mask != 0 {
            let parent = hook.parent;
            let up = self.cold[parent as usize].inner;
            for prio in bits(mask) {
                let node = hook.place.node(prio);
                let feed = &mut self.inner[up as usize].feeds[prio as usize];
                if !feed.tree.is_empty() {
                    // The parent is already hooked up for this priority.
                    mask &= !(1 << prio);
                }
                feed.tree.insert(&mut self.prio_nodes.nodes, node);
            }
            let class = &mut self.classes[parent as usize];
            class.activity |= mask;
            hook = Hook::of(class);
        }
        if hook.mode == Mode::CanSend && mask != 0 {
            self.add_class_to_row(hook.place, mask);
        }
    }

    /// `htb_deactivate_prios`: the mirror of [`activate_prios`](Self::activate_prios);
    /// `hook.mode` must be the old mode.
    pub(super) fn deactivate_prios(&mut self, hook: Hook) {
        let mut hook = hook;
        let mut mask = hook.activity;
        while hook.mode == Mode::MayBorrow && hook.parent != NO_CLASS && mask != 0 {
            let parent = hook.parent;
            let up = self.cold[parent as usize].inner;
            let key = hook.minor;
            let todo = mask;
            mask = 0;
            for prio in bits(todo) {
                let node = hook.place.node(prio);
                let feed = &mut self.inner[up as usize].feeds[prio as usize];
                if feed.ptr == node {
                    // Removing the child the parent's DRR points at: forget the pointer but
                    // remember the id, so the round robin resumes after it.
                    feed.last_ptr_id = key;
                    feed.ptr = NIL;
                }
                if !feed.tree.erase(&mut self.prio_nodes.nodes, node) {
                    self.stats.internal_faults += 1;
                }
                if feed.tree.is_empty() {
                    mask |= 1 << prio;
                }
            }
            let class = &mut self.classes[parent as usize];
            class.activity &= !mask;
            hook = Hook::of(class);
        }
        if hook.mode == Mode::CanSend && mask != 0 {
            self.remove_class_from_row(hook.place, mask);
        }
    }

    /// `htb_add_class_to_row`.
    fn add_class_to_row(&mut self, place: Place, mask: u8) {
        let level = place.level as usize;
        self.levels[level].row_mask |= mask;
        for prio in bits(mask) {
            self.levels[level].rows[prio as usize]
                .tree
                .insert(&mut self.prio_nodes.nodes, place.node(prio));
        }
    }

    /// `htb_remove_class_from_row`.
    fn remove_class_from_row(&mut self, place: Place, mask: u8) {
        let level = place.level as usize;
        let mut emptied = 0u8;
        for prio in bits(mask) {
            let node = place.node(prio);
            let nodes = &mut self.prio_nodes.nodes;
            let row = &mut self.levels[level].rows[prio as usize];
            if row.ptr == node {
                // The only node has no next: no look-up of it to learn so.
                let only = row.tree.first() == node && row.tree.last() == node;
                row.ptr = if only { NIL } else { RbTree::next(nodes, node) };
            }
            if !row.tree.erase(nodes, node) {
                self.stats.internal_faults += 1;
            }
            if row.tree.is_empty() {
                emptied |= 1 << prio;
            }
        }
        self.levels[level].row_mask &= !emptied;
    }

    /// `htb_class_mode`: the mode at `t_c + diff`; for a non-green result `diff` becomes the
    /// token units until the mode may change.
    #[inline]
    fn class_mode(class: &Class, diff: &mut i64, hysteresis: bool) -> Mode {
        let (lowater, hiwater) = if hysteresis {
            (
                if class.mode != Mode::CantSend {
                    -class.cbuffer
                } else {
                    0
                },
                if class.mode == Mode::CanSend {
                    -class.buffer
                } else {
                    0
                },
            )
        } else {
            (0, 0)
        };
        let toks = class.ctokens.saturating_add(*diff);
        if toks < lowater {
            *diff = -toks;
            return Mode::CantSend;
        }
        let toks = class.tokens.saturating_add(*diff);
        if toks >= hiwater {
            return Mode::CanSend;
        }
        *diff = -toks;
        Mode::MayBorrow
    }

    /// `htb_change_class_mode` once the new mode is known (and differs): counts overlimits and
    /// moves the class between feeds and rows. The caller moves it in the wait queue.
    fn set_mode(&mut self, cl: ClassIdx, new_mode: Mode) {
        if new_mode == Mode::CantSend {
            let cold = &mut self.cold[cl as usize];
            cold.overlimits = cold.overlimits.wrapping_add(1);
            self.stats.overlimits += 1;
        }
        let class = &mut self.classes[cl as usize];
        let old_mode = class.mode;
        if class.activity == 0 {
            class.mode = new_mode;
            return;
        }
        if old_mode != Mode::CantSend {
            let hook = Hook::of(class);
            self.deactivate_prios(hook);
        }
        // Deactivating changed the ancestors' records, not this one's.
        let class = &mut self.classes[cl as usize];
        class.mode = new_mode;
        if new_mode != Mode::CantSend {
            let hook = Hook::of(class);
            self.activate_prios(hook);
        }
    }

    /// `htb_add_to_wait_tree`: the class's mode may change `delay` token units from now.
    pub(super) fn add_to_wait_tree(&mut self, cl: ClassIdx, delay: i64) {
        let now = self.now.as_nanos();
        let mut key = now.saturating_add(tokens_to_ns_ceil(delay));
        if key == now {
            key += 1;
        }
        self.wait_nodes[cl as usize].key = key;
        let level = self.classes[cl as usize].level as usize;
        self.levels[level].wait.insert(&mut self.wait_nodes, cl);
    }

    /// Removes `cl` from its level's wait queue (it must be there).
    pub(super) fn remove_from_wait_tree(&mut self, cl: ClassIdx) {
        let level = self.classes[cl as usize].level as usize;
        if !self.levels[level].wait.erase(&mut self.wait_nodes, cl) {
            self.stats.internal_faults += 1;
        }
    }

    /// After `cl`'s buckets were charged and its mode re-evaluated (`new`, from `old`, the
    /// mode changing `diff` token units from now): moves it between the wait queue, feeds and
    /// rows (the tail of `htb_charge_class`'s loop). Out of line: the mode rarely changes.
    #[inline(never)]
    fn mode_changed(&mut self, cl: ClassIdx, old: Mode, new: Mode, diff: i64) {
        self.set_mode(cl, new);
        if old != Mode::CanSend {
            self.remove_from_wait_tree(cl);
        }
        if new != Mode::CanSend {
            self.add_to_wait_tree(cl, diff);
        }
    }

    /// Re-evaluates `cl`'s mode at `now` after its parameters changed under it: its wait-queue
    /// key was computed with the old ones, so it is taken out and put back wherever its
    /// buckets now say.
    pub(super) fn reevaluate_mode(&mut self, cl: ClassIdx) {
        if self.classes[cl as usize].mode != Mode::CanSend {
            self.remove_from_wait_tree(cl);
        }
        if self.classes[cl as usize].shared {
            self.pull_shared(cl);
        }
        let class = &self.classes[cl as usize];
        let mut diff = Self::elapsed_tokens(class, self.now);
        let new = Self::class_mode(class, &mut diff, self.config.hysteresis);
        if new != class.mode {
            self.set_mode(cl, new);
        }
        if new != Mode::CanSend {
            self.add_to_wait_tree(cl, diff);
        }
    }

    /// Whether level `level` has a wait-queue event due (`near_ev_cache` check).
    #[inline]
    pub(super) fn event_due(&self, level: usize) -> bool {
        let first = self.levels[level].wait.first();
        first != NIL && self.wait_nodes[first as usize].key <= self.now.as_nanos()
    }

    /// `htb_do_events`: re-evaluates the modes of classes whose event is due (tokens are not
    /// updated, only the mode), at most `max_events_per_level` of them.
    pub(super) fn do_events(&mut self, level: usize) {
        let now = self.now.as_nanos();
        for _ in 0..self.config.max_events_per_level {
            let first = self.levels[level].wait.first();
            if first == NIL || self.wait_nodes[first as usize].key > now {
                return;
            }
            self.levels[level].wait.erase(&mut self.wait_nodes, first);
            self.stats.events += 1;
            if self.classes[first as usize].shared {
                // Other workers may have charged it since: its mode is the shared buckets'.
                self.pull_shared(first);
            }
            let class = &self.classes[first as usize];
            let mut diff = Self::elapsed_tokens(class, self.now);
            let new = Self::class_mode(class, &mut diff, self.config.hysteresis);
            if new != class.mode {
                self.set_mode(first, new);
            }
            if new != Mode::CanSend {
                self.add_to_wait_tree(first, diff);
            }
        }
        if self.event_due(level) {
            // The kernel warns "htb: too many events!" once and reschedules; the rest waits for
            // the next call, which `next_wakeup` reports as due now.
            self.stats.event_budget_exhausted += 1;
        }
    }

    /// `htb_lookup_leaf`: the leaf the DRR pointers of the row `(level, prio)` lead to,
    /// descending feeds.
    #[inline]
    pub(super) fn lookup_leaf(&mut self, level: usize, prio: u8) -> ClassIdx {
        // Fast path: the row's pointer is valid, or at the end and rewound (a row, unlike a feed,
        // never carries a recovery hint and has no level above to advance), and at a leaf
        // (always so at level 0). A valid pointer never carries a hint (`check` verifies it).
        let row = &mut self.levels[level].rows[prio as usize];
        if row.ptr == NIL {
            row.ptr = row.tree.first();
        }
        let ptr = row.ptr;
        if ptr != NIL {
            let cl = self.prio_nodes.nodes[ptr as usize].owner;
            // A level-0 row holds leaves only: no look-up of the class to know it.
            if level == 0 || self.classes[cl as usize].level == 0 {
                return cl;
            }
        }
        self.lookup_leaf_walk(level, prio)
    }

    /// The general walk of `htb_lookup_leaf`: recover invalidated pointers, rewind at the end
    /// of a feed and advance the pointer one level up, descend until a leaf.
    fn lookup_leaf_walk(&mut self, level: usize, prio: u8) -> ClassIdx {
        // stack[0] is the row; stack[i > 0] the feed of inner state `feeds[i]`.
        let mut feeds = [0u32; MAX_DEPTH];
        let mut sp = 0usize;
        let row_at = |sp: usize, feeds: &[u32; MAX_DEPTH]| {
            if sp == 0 {
                RowRef::Level {
                    level: level as u8,
                    prio,
                }
            } else {
                RowRef::Feed {
                    inner: feeds[sp],
                    prio,
                }
            }
        };
        if self.levels[level].rows[prio as usize].tree.is_empty() {
            return NO_CLASS;
        }
        for _ in 0..LOOKUP_STEPS {
            let nodes = &self.prio_nodes.nodes;
            let row = row_mut(&mut self.levels, &mut self.inner, row_at(sp, &feeds));
            if row.ptr == NIL && row.last_ptr_id != 0 {
                // The pointer was invalidated but the id is valid: recover the original or
                // the next node.
                row.ptr = row.tree.find_next_upper(nodes, row.last_ptr_id);
            }
            row.last_ptr_id = 0;
            if row.ptr == NIL {
                // At the right end: rewind, and advance the pointer one level up.
                row.ptr = row.tree.first();
                if sp > 0 {
                    sp -= 1;
                    let up = row_mut(&mut self.levels, &mut self.inner, row_at(sp, &feeds));
                    if up.ptr == NIL {
                        self.stats.internal_faults += 1;
                        return NO_CLASS;
                    }
                    up.ptr = RbTree::next(nodes, up.ptr);
                }
            } else {
                let cl = nodes[row.ptr as usize].owner;
                let class = &self.classes[cl as usize];
                if class.level == 0 {
                    return cl;
                }
                if sp + 1 >= MAX_DEPTH {
                    self.stats.internal_faults += 1;
                    return NO_CLASS;
                }
                sp += 1;
                feeds[sp] = self.cold[cl as usize].inner;
            }
        }
        self.stats.internal_faults += 1;
        NO_CLASS
    }

    /// Advances the DRR pointer that serves a leaf whose parent is `parent` at `level`
    /// (`htb_next_rb_node` on the parent's feed, or on the level-0 row for a leaf sending on
    /// its own rate).
    #[inline]
    fn advance_pointer(&mut self, parent: ClassIdx, level: usize, prio: u8) {
        let r = if level > 0 {
            RowRef::Feed {
                inner: self.cold[parent as usize].inner,
                prio,
            }
        } else {
            RowRef::Level { level: 0, prio }
        };
        let nodes = &self.prio_nodes.nodes;
        let row = row_mut(&mut self.levels, &mut self.inner, r);
        if row.ptr != NIL {
            // Past the only node is the end: no look-up of it to learn so.
            let only = row.tree.first() == row.ptr && row.tree.last() == row.ptr;
            row.ptr = if only {
                NIL
            } else {
                RbTree::next(nodes, row.ptr)
            };
        }
    }

    /// `htb_dequeue_tree`: one packet from the row of `prio` at `level`, DRR among its leaves.
    pub(super) fn dequeue_tree(&mut self, prio: usize, level: usize) -> Option<P> {
        let prio = prio as u8;
        let mut cl = self.lookup_leaf(level, prio);
        let (packet, emptied) = loop {
            if cl == NO_CLASS {
                return None;
            }
            let slot = cl as usize;
            let queue = &mut self.classes[slot].queue;
            let mut empty = queue.is_empty();
            if !empty {
                let before = (queue.len(), queue.backlog());
                let packet = queue.dequeue(&mut self.store, self.now);
                let after = (queue.len(), queue.backlog());
                let expected = before.0 - u32::from(packet.is_some());
                empty = self.account_leaf(cl, before, after, expected);
                if let Some(packet) = packet {
                    break (packet, empty);
                }
            }
            if empty {
                // The leaf is empty, or emptied itself by dropping (CoDel): `htb_qlen_notify`
                // deactivates it, and the round moves on.
                self.deactivate(cl);
            } else {
                // A shaping leaf holds its packets back (`qdisc_warn_nonwc`): out of the round
                // until it may send.
                let at = self.classes[slot]
                    .queue
                    .throttled_until()
                    .unwrap_or(self.now + crate::Duration::from_micros(100));
                self.throttle(cl, at.max(self.now + crate::Duration::from_nanos(1)));
            }
            if self.levels[level].row_mask & (1 << prio) == 0 {
                return None;
            }
            // Every empty leaf visited leaves the row, so this ends.
            cl = self.lookup_leaf(level, prio);
        };

        let len = self.pkt_len(&packet);
        let class = &mut self.classes[cl as usize];
        class.bytes += u64::from(len);
        class.packets += 1;
        // `leaf.deficit[level]`: level 0's in the record, the borrowing levels' out of it.
        let advance = if level == 0 {
            spend_deficit(&mut class.deficit, len, class.quantum)
        } else {
            spend_deficit(
                &mut self.cold[cl as usize].deficit_above[level - 1],
                len,
                class.quantum,
            )
        };
        let parent = class.parent;
        // An emptied leaf leaves the round (`htb_deactivate`, below): read while at hand.
        let leaving = (emptied && class.activity != 0).then(|| {
            let hook = Hook::of(class);
            class.activity = 0;
            hook
        });
        if advance {
            self.advance_pointer(parent, level, prio);
        }
        // Before charging, as the kernel does ("slightly better performance").
        if let Some(hook) = leaving {
            self.deactivate_prios(hook);
        }
        self.charge_class(cl, level as u8, len);
        Some(packet)
    }

    /// `htb_charge_class`: charges a packet of `len` bytes sent from leaf `cl`, lent by the
    /// ancestor at `level`, to the ceil buckets of the leaf and all ancestors and to the rate
    /// buckets of the lender and above; counts lends/borrows and updates modes.
    pub(super) fn charge_class(&mut self, cl: ClassIdx, level: u8, len: u32) {
        let now = self.now;
        let hysteresis = self.config.hysteresis;
        // Stall credit (`credit.rs`) raises the buckets' caps once the driver has reported a
        // stall; until then the caps are the kernel's, at no cost.
        let credited = self.stall_credit.hold() != 0;
        // Whether the sending leaf still has packets queued: then its ancestors have backlog
        // below them too (their own `activity` shows only children borrowing from them, which
        // a leaf spending its own credited rate is not).
        let leaf_backlogged = credited && self.classes[cl as usize].activity != 0;
        let mut cl = cl;
        while cl != NO_CLASS {
            // One look-up of the class per level: each costs a load of its storage chunk.
            let mut class = &mut self.classes[cl as usize];
            let shared = class.shared;
            if shared {
                // What the other workers sent counts too (their paid debts).
                self.pull_shared(cl);
                class = &mut self.classes[cl as usize];
            }
            // A shared class's buckets were just pulled from the shared ones, which hold its
            // credit themselves (`shared.rs`): no cap here.
            let (rate_cap, ceil_cap) = match (credited, shared) {
                (false, _) => (class.buffer, class.cbuffer),
                (true, true) => (i64::MAX, i64::MAX),
                (true, false) => {
                    let credit = self.stall_credit.at(class.t_c, now);
                    let backlogged = leaf_backlogged || class.activity != 0;
                    (
                        cap(class.tokens, class.buffer, backlogged, credit),
                        cap(class.ctokens, class.cbuffer, backlogged, credit),
                    )
                }
            };
            let diff = Self::elapsed_tokens(class, now);
            let charged = if class.adjusted {
                self.cold[cl as usize].adjust.charged_len(len)
            } else {
                len
            };
            let mut rate_cost = 0;
            if class.level >= level {
                if class.level == level {
                    class.lends = class.lends.wrapping_add(1);
                }
                rate_cost = class.rate_cost.cost(charged);
                let toks = class.tokens.saturating_add(diff).min(rate_cap) - rate_cost;
                class.tokens = if toks <= -MBUFFER { 1 - MBUFFER } else { toks };
            } else {
                // Classes below the lender borrowed: their rate bucket only catches up.
                let cold = &mut self.cold[cl as usize];
                cold.borrows = cold.borrows.wrapping_add(1);
                class.tokens = class.tokens.saturating_add(diff);
            }
            let ceil_cost = class.ceil_cost.cost(charged);
            let toks = class.ctokens.saturating_add(diff).min(ceil_cap) - ceil_cost;
            class.ctokens = if toks <= -MBUFFER { 1 - MBUFFER } else { toks };
            class.t_c = now;
            if class.level > 0 {
                // Leaves were counted at dequeue.
                class.bytes += u64::from(len);
                class.packets += 1;
            }
            let parent = class.parent;
            // The new mode from the buckets just charged (`owe_shared` reads them only).
            let mut wait = 0;
            let (old, new) = (class.mode, Self::class_mode(class, &mut wait, hysteresis));
            if shared {
                self.owe_shared(cl, rate_cost, ceil_cost, charged);
            }
            if new != old {
                self.mode_changed(cl, old, new, wait);
            }
            cl = parent;
        }
    }
}
