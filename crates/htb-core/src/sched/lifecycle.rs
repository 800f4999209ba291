//! Adding, changing and deleting classes while traffic is queued (`htb_change_class`,
//! `htb_delete`, `htb_parent_to_leaf`).

use alloc::vec::Vec;

use super::Scheduler;
use super::arena::{
    Class, ClassCold, ClassIdx, InnerState, MAX_CLASSES, NO_CLASS, NO_INNER, WaitNode,
};
use crate::Packet;
use crate::class_id::ClassId;
use crate::error::ClassError;
use crate::leaf::{Leaf, LeafConfig};
use crate::rate::{LengthAdjust, TokenCost, ns_to_tokens};
use crate::spec::{ClassConfig, ClassSpec, MAX_DEPTH, Warning};
use crate::stats::Mode;
use crate::time::Instant;

/// What a successful add, change or delete produced.
#[derive(Debug)]
#[must_use = "purged packets must be recycled and warnings shown"]
pub struct Change<P> {
    /// Warnings about the accepted parameters (never printed by the scheduler).
    pub warnings: Vec<Warning>,
    /// Packets the change removed from queues, handed back to the caller and counted as drops:
    /// the backlog of a deleted class, or of a leaf that became an inner class.
    pub purged: Vec<P>,
}

impl<P> Change<P> {
    fn new() -> Self {
        Self {
            warnings: Vec::new(),
            purged: Vec::new(),
        }
    }
}

impl<P: Packet> Scheduler<P> {
    /// Adds class `id` under `parent` (`None`, or the qdisc handle `major:0`, for a root
    /// class), at time `now`.
    ///
    /// A leaf parent becomes an inner class and its queued packets are purged (returned in
    /// [`Change::purged`]), as in the kernel.
    ///
    /// # Errors
    /// [`ClassError`]; nothing changes on error.
    pub fn add_class(
        &mut self,
        now: Instant,
        id: ClassId,
        parent: Option<ClassId>,
        spec: &ClassSpec,
    ) -> Result<Change<P>, ClassError> {
        self.advance_clock(now);
        self.validate_add(id, parent)?;
        let parent_slot = match parent {
            Some(p) if !(p.major() == self.config.major && p.is_qdisc()) => self.lookup(p),
            _ => NO_CLASS,
        };
        let mut change = Change::new();
        let config = spec.resolve(id, &self.config, &mut change.warnings)?;

        let slot = match self.free_classes.pop() {
            Some(slot) => slot,
            None => u32::try_from(self.classes.len())
                .ok()
                .filter(|&s| s < MAX_CLASSES)
                .ok_or(ClassError::TooManyClasses)?,
        };

        if parent_slot != NO_CLASS && self.classes[parent_slot as usize].level == 0 {
            self.leaf_to_inner(parent_slot, &mut change.purged);
        }

        let mut class = Self::fresh_class(id, parent_slot, &config, self.now);
        class.prio_node = self.prio_nodes.alloc(slot, id.minor(), false);
        let queue = Leaf::unstarted(&mut self.store, &self.config.default_leaf, slot);
        // The class is stored with a vacant queue: the records' chunks are filled with copies
        // of the first one pushed, and a leaf's copy may allocate.
        let cold = ClassCold::new(config.rate, config.ceil, config.adjust);
        if slot as usize == self.classes.len() {
            self.classes.push(class);
            self.cold.push(cold);
            self.wait_nodes.push(WaitNode::UNLINKED);
        } else {
            self.classes[slot as usize] = class;
            self.cold[slot as usize] = cold;
            self.wait_nodes[slot as usize] = WaitNode::UNLINKED;
        }
        self.classes[slot as usize].queue = queue;
        self.ids.insert(id.minor(), slot);
        if parent_slot != NO_CLASS {
            self.cold[parent_slot as usize].children += 1;
        }
        self.refresh_default();
        Ok(change)
    }

    /// Checks that [`add_class`](Self::add_class) would accept `id` under `parent`, without
    /// changing anything (parameters are checked by the add itself).
    ///
    /// # Errors
    /// The [`ClassError`] `add_class` would return.
    pub fn validate_add(&self, id: ClassId, parent: Option<ClassId>) -> Result<(), ClassError> {
        if id.major() != self.config.major {
            return Err(ClassError::WrongMajor {
                class: id,
                expected: self.config.major,
            });
        }
        if id.is_qdisc() {
            return Err(ClassError::QdiscHandle(id));
        }
        if self.lookup(id) != NO_CLASS {
            return Err(ClassError::Exists(id));
        }
        let Some(parent) = parent.filter(|p| !(p.major() == self.config.major && p.is_qdisc()))
        else {
            return Ok(());
        };
        let parent_slot = self.lookup(parent);
        if parent_slot == NO_CLASS {
            return Err(ClassError::ParentNotFound { class: id, parent });
        }
        // htb_change_class: refuse when the grandparent is already at level 1 or 0.
        let grand = self.classes[parent_slot as usize].parent;
        if grand != NO_CLASS && self.classes[grand as usize].level < 2 {
            return Err(ClassError::TooDeep(id));
        }
        Ok(())
    }

    /// Replaces the parameters of class `id` (tc `class change`: parameters not given in
    /// `spec` return to their defaults), at time `now`. Queued packets stay queued.
    ///
    /// Unlike the kernel, which keeps each bucket's *time* credit (so a class throttled at
    /// 1 kbit stays throttled for seconds after being raised to 100 Mbit), the bucket keeps
    /// its *byte* credit: debt and credit are rescaled to the new rate, and the class's mode
    /// and next event are re-evaluated at once.
    ///
    /// # Errors
    /// [`ClassError`]; nothing changes on error.
    pub fn change_class(
        &mut self,
        now: Instant,
        id: ClassId,
        spec: &ClassSpec,
    ) -> Result<Change<P>, ClassError> {
        self.advance_clock(now);
        let slot = self.lookup(id);
        if slot == NO_CLASS {
            return Err(ClassError::NotFound(id));
        }
        let mut change = Change::new();
        let config = spec.resolve(id, &self.config, &mut change.warnings)?;
        let is_leaf = self.classes[slot as usize].level == 0;
        if !is_leaf {
            // Quantum and prio matter only for leaves; the kernel does not warn for inner ones.
            change.warnings.retain(|w| {
                !matches!(w, Warning::QuantumBig { .. } | Warning::QuantumSmall { .. })
            });
        }

        // A leaf changing priority while active moves to the new priority's row/feed now
        // (the kernel would keep serving it at the old one until it goes idle).
        let reactivate = is_leaf
            && self.classes[slot as usize].activity != 0
            && self.classes[slot as usize].prio != config.prio;
        if reactivate {
            self.deactivate(slot);
        }

        let class = &mut self.classes[slot as usize];
        let cold = &mut self.cold[slot as usize];
        let rescale = |tokens: i64, old: u64, new: u64| -> i64 {
            let scaled = i128::from(tokens) * i128::from(old) / i128::from(new.max(1));
            i64::try_from(scaled).unwrap_or(if tokens < 0 { i64::MIN } else { i64::MAX })
        };
        let tokens = rescale(
            class.tokens,
            cold.rate.bits_per_sec(),
            config.rate.bits_per_sec(),
        );
        let ctokens = rescale(
            class.ctokens,
            cold.ceil.bits_per_sec(),
            config.ceil.bits_per_sec(),
        );
        cold.rate = config.rate;
        cold.ceil = config.ceil;
        cold.adjust = config.adjust;
        Self::apply_config(class, &config);
        class.tokens = tokens.clamp(1 - super::algo::MBUFFER, class.buffer);
        class.ctokens = ctokens.clamp(1 - super::algo::MBUFFER, class.cbuffer);

        if reactivate {
            self.activate(slot);
        }
        self.reevaluate_mode(slot);
        Ok(change)
    }

    /// Deletes class `id`, at time `now`. Its queued packets are purged and returned. When it
    /// was its parent's last child, the parent becomes a leaf again with full buckets.
    ///
    /// # Errors
    /// [`ClassError::NotFound`], or [`ClassError::HasChildren`] (delete children first).
    pub fn delete_class(&mut self, now: Instant, id: ClassId) -> Result<Change<P>, ClassError> {
        self.advance_clock(now);
        let slot = self.lookup(id);
        if slot == NO_CLASS {
            return Err(ClassError::NotFound(id));
        }
        if self.cold[slot as usize].children > 0 {
            return Err(ClassError::HasChildren(id));
        }
        let mut change = Change::new();
        self.purge_leaf(slot, &mut change.purged);
        self.unshare(slot);
        let parent = self.classes[slot as usize].parent;
        let last_child = parent != NO_CLASS && self.cold[parent as usize].children == 1;

        self.ids.remove(id.minor());
        if parent != NO_CLASS {
            self.cold[parent as usize].children -= 1;
        }
        self.deactivate(slot);
        if self.classes[slot as usize].mode != Mode::CanSend {
            self.remove_from_wait_tree(slot);
        }
        if last_child {
            self.inner_to_leaf(parent);
        }
        let class = &mut self.classes[slot as usize];
        class.minor = 0;
        let node = class.prio_node;
        self.prio_nodes.free(node, false);
        self.free_classes.push(slot);
        self.refresh_default();
        Ok(change)
    }

    /// Takes every queued packet out — leaf queues and the direct queue — counting them as
    /// drops, and returns them (the queue half of `htb_reset`). Classes, tokens and modes stay:
    /// this is for tearing a tree down (tc `qdisc del`) without losing track of a buffer.
    pub fn drain(&mut self) -> Vec<P> {
        let mut purged = Vec::with_capacity(self.len() as usize);
        for slot in 0..self.classes.len() {
            let slot = slot as ClassIdx;
            let class = &self.classes[slot as usize];
            // Empty leaves too: an fq_codel leaf may keep flow state.
            if class.live() && class.level == 0 {
                self.purge_leaf(slot, &mut purged);
                self.deactivate(slot);
            }
        }
        let direct = self.direct.len() as u64;
        self.stats.direct_drops += direct;
        self.stats.drops += direct;
        purged.extend(self.direct.drain(..));
        purged
    }

    /// A new class: full buckets, green, idle (`htb_change_class`, new-class branch).
    fn fresh_class(id: ClassId, parent: ClassIdx, config: &ClassConfig, now: Instant) -> Class {
        let mut class = Class {
            major: id.major(),
            minor: id.minor(),
            parent,
            prio_node: 0,
            level: 0,
            prio: 0,
            mode: Mode::CanSend,
            activity: 0,
            quantum: 0,
            tokens: 0,
            ctokens: 0,
            t_c: now,
            buffer: 0,
            cbuffer: 0,
            rate_cost: TokenCost::new(config.rate),
            ceil_cost: TokenCost::new(config.ceil),
            adjusted: false,
            deficit: 0,
            bytes: 0,
            packets: 0,
            lends: 0,
            shared: false,
            queue: Leaf::Vacant,
        };
        Self::apply_config(&mut class, config);
        class.tokens = class.buffer;
        class.ctokens = class.cbuffer;
        class
    }

    /// The parameters the packet path reads (the rates themselves are [`ClassCold`]'s).
    fn apply_config(class: &mut Class, config: &ClassConfig) {
        class.rate_cost = TokenCost::new(config.rate);
        class.ceil_cost = TokenCost::new(config.ceil);
        class.buffer = ns_to_tokens(config.buffer.as_nanos());
        class.cbuffer = ns_to_tokens(config.cbuffer.as_nanos());
        class.prio = config.prio;
        class.quantum = config.quantum as i32;
        class.adjusted = config.adjust != LengthAdjust::default();
    }

    /// Empties a leaf's queue into `purged`, counting the packets as the class's drops.
    fn purge_leaf(&mut self, slot: ClassIdx, purged: &mut Vec<P>) {
        self.unthrottle(slot);
        let before = purged.len();
        self.classes[slot as usize]
            .queue
            .purge(&mut self.store, |p| purged.push(p));
        let mut bytes = 0;
        for p in &purged[before..] {
            bytes += u64::from(p.len_bytes());
        }
        let count = (purged.len() - before) as u64;
        self.qlen -= count;
        self.backlog -= bytes;
        let cold = &mut self.cold[slot as usize];
        cold.drops = cold.drops.wrapping_add(count as u32);
        self.stats.drops += count;
    }

    /// Replaces leaf class `id`'s queue discipline with a new, empty one (`tc qdisc add|replace
    /// dev D parent ID …`, HTB's `htb_graft`); `None` restores the scheduler's default leaf
    /// (`tc qdisc del dev D parent ID`). The old leaf's packets are purged.
    ///
    /// # Errors
    /// [`ClassError::NotFound`], or [`ClassError::NotALeaf`] for an inner class (the kernel
    /// refuses to graft a qdisc onto one).
    pub fn set_leaf(
        &mut self,
        now: Instant,
        id: ClassId,
        leaf: Option<&LeafConfig>,
    ) -> Result<Change<P>, ClassError> {
        self.advance_clock(now);
        let slot = self.leaf_slot(id)?;
        let mut change = Change::new();
        self.purge_leaf(slot, &mut change.purged);
        self.deactivate(slot);
        self.classes[slot as usize].queue = match leaf {
            Some(config) => Leaf::new(config, slot, self.config.seed, self.now),
            None => Leaf::unstarted(&mut self.store, &self.config.default_leaf, slot),
        };
        Ok(change)
    }

    /// Changes leaf class `id`'s queue discipline to `leaf` (`tc qdisc change`): in place when
    /// the kind is the same (queued packets stay; those over new limits are dropped, as the
    /// kernel's `change` does), else as [`set_leaf`](Self::set_leaf).
    ///
    /// # Errors
    /// As [`set_leaf`](Self::set_leaf).
    pub fn change_leaf(
        &mut self,
        now: Instant,
        id: ClassId,
        leaf: &LeafConfig,
    ) -> Result<Change<P>, ClassError> {
        self.advance_clock(now);
        let slot = self.leaf_slot(id)?;
        let s = slot as usize;
        let before = (self.classes[s].queue.len(), self.classes[s].queue.backlog());
        if !self.classes[s]
            .queue
            .reconfigure(&mut self.store, leaf, self.now)
        {
            return self.set_leaf(now, id, Some(leaf));
        }
        let after = (self.classes[s].queue.len(), self.classes[s].queue.backlog());
        let empty = self.account_leaf(slot, before, after, before.0);
        // New parameters may let a held-back leaf send now: it rejoins the round and says.
        self.unthrottle(slot);
        if empty {
            self.deactivate(slot);
        } else {
            self.activate(slot);
        }
        Ok(Change::new())
    }

    fn leaf_slot(&self, id: ClassId) -> Result<ClassIdx, ClassError> {
        let slot = self.lookup(id);
        if slot == NO_CLASS {
            return Err(ClassError::NotFound(id));
        }
        if self.classes[slot as usize].level != 0 {
            return Err(ClassError::NotALeaf(id));
        }
        Ok(slot)
    }

    /// Sets the leaf queue discipline new leaf classes get (classes added later, and inner
    /// classes that become leaves again); existing leaves keep theirs.
    pub fn set_default_leaf(&mut self, leaf: LeafConfig) {
        self.config.default_leaf = leaf;
    }

    /// The first child is added under leaf `slot`: purge its queue, take it out of every
    /// tree, and give it inner-class state at its new level.
    fn leaf_to_inner(&mut self, slot: ClassIdx, purged: &mut Vec<P>) {
        self.purge_leaf(slot, purged);
        self.deactivate(slot);
        if self.classes[slot as usize].mode != Mode::CanSend {
            self.remove_from_wait_tree(slot);
            self.classes[slot as usize].mode = Mode::CanSend;
        }
        let grand = self.classes[slot as usize].parent;
        let level = if grand == NO_CLASS {
            MAX_DEPTH as u8
        } else {
            self.classes[grand as usize].level
        } - 1;
        let inner = match self.free_inner.pop() {
            Some(i) => {
                self.inner[i as usize] = InnerState::EMPTY;
                i
            }
            None => {
                self.inner.push(InnerState::EMPTY);
                (self.inner.len() - 1) as u32
            }
        };
        let key = self.classes[slot as usize].id().minor();
        let old_node = self.classes[slot as usize].prio_node;
        self.prio_nodes.free(old_node, false);
        let node = self.prio_nodes.alloc(slot, key, true);
        let class = &mut self.classes[slot as usize];
        class.prio_node = node;
        self.cold[slot as usize].inner = inner;
        class.level = level;
        class.deficit = 0;
        self.cold[slot as usize].deficit_above = [0; MAX_DEPTH - 1];
        // An inner class holds no packets: its leaf goes (`qdisc_put` of the child qdisc).
        self.classes[slot as usize].queue = Leaf::Vacant;
        self.refresh_default();
    }

    /// `htb_parent_to_leaf`: the last child of `slot` was deleted.
    fn inner_to_leaf(&mut self, slot: ClassIdx) {
        debug_assert_eq!(self.classes[slot as usize].activity, 0);
        if self.classes[slot as usize].mode != Mode::CanSend {
            self.remove_from_wait_tree(slot);
        }
        let class = &self.classes[slot as usize];
        let (old_node, inner, key) = (class.prio_node, self.cold[slot as usize].inner, class.minor);
        self.prio_nodes.free(old_node, true);
        self.free_inner.push(inner);
        let node = self.prio_nodes.alloc(slot, key, false);
        let now = self.now;
        let class = &mut self.classes[slot as usize];
        class.prio_node = node;
        self.cold[slot as usize].inner = NO_INNER;
        class.level = 0;
        class.tokens = class.buffer;
        class.ctokens = class.cbuffer;
        class.t_c = now;
        class.mode = Mode::CanSend;
        class.deficit = 0;
        self.cold[slot as usize].deficit_above = [0; MAX_DEPTH - 1];
        // A leaf again, with a new default leaf qdisc (`htb_parent_to_leaf`'s `new_q`).
        self.classes[slot as usize].queue =
            Leaf::unstarted(&mut self.store, &self.config.default_leaf, slot);
    }
}
