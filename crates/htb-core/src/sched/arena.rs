//! The arenas behind the scheduler: class slots, inner-class state and the tree nodes.
//!
//! `ClassIdx` (an arena slot) is not `ClassId` (the user's `1:20`): slots are reused after a
//! class is deleted, ids are what users see.

use super::chunked::Chunked;
use crate::class_id::ClassId;
use crate::leaf::Leaf;
use crate::rate::{LengthAdjust, Rate, TokenCost};
use crate::rbtree::{Links, NIL, NodeId, NodePool, RbTree};
use crate::spec::MAX_DEPTH;
use crate::stats::Mode;
use crate::time::Instant;

/// Index of a class slot in the arena.
pub(crate) type ClassIdx = u32;
/// "No class" (no parent, not found).
pub(crate) const NO_CLASS: ClassIdx = u32::MAX;

/// Class slots a scheduler can hold: 119 304 647. Tree nodes keep 30-bit indices
/// ([`MAX_NODES`](crate::rbtree::MAX_NODES)), and a class has at most one single row node and
/// one block of [`MAX_DEPTH`] feed nodes allocated at once (a leaf that became inner and back
/// keeps both in the free lists).
pub(crate) const MAX_CLASSES: u32 = crate::rbtree::MAX_NODES / (MAX_DEPTH as u32 + 1);
/// "Not an inner class".
pub(crate) const NO_INNER: u32 = u32::MAX;

/// One class's fields that the packet path reads and writes: tree position, token buckets,
/// DRR state at its own level, counters of what it sent, and its leaf queue (`struct
/// htb_class`, less what [`ClassCold`] holds). Kept to 128 bytes on a line's start (two cache
/// lines; 136 unaligned spanned 2⅛ on average) so that a packet's enqueue and dequeue touch as
/// few lines per class as possible: with 100 000 classes round-robin, every line of the record
/// is a cache miss per packet. A slot's address is a shift of its index, not a multiply.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct Class {
    /// The class's id (`id()`) in two fields, so that its padding does not cost the record
    /// its 128 bytes. `minor` is 0 in a free slot: no class has minor 0 (that is the qdisc).
    pub(crate) major: u16,
    pub(crate) minor: u32,
    pub(crate) parent: ClassIdx,
    /// First node of this class's block in [`PrioNodes`]: one node for a leaf (in the row or
    /// feed of its prio), eight for an inner class (one per prio).
    pub(crate) prio_node: NodeId,
    pub(crate) level: u8,
    pub(crate) prio: u8,
    pub(crate) mode: Mode,
    /// Bit p set: the class is active (has backlog below it) at priority p (`prio_activity`).
    pub(crate) activity: u8,
    pub(crate) quantum: i32,
    /// Rate bucket, in token units (1/256 ns) of credit.
    pub(crate) tokens: i64,
    /// Ceil bucket, in token units.
    pub(crate) ctokens: i64,
    /// Checkpoint: when the buckets were last brought up to date (`t_c`).
    pub(crate) t_c: Instant,
    /// Rate bucket depth in token units (`buffer`).
    pub(crate) buffer: i64,
    /// Ceil bucket depth in token units (`cbuffer`).
    pub(crate) cbuffer: i64,
    pub(crate) rate_cost: TokenCost,
    pub(crate) ceil_cost: TokenCost,
    /// The class has a length adjustment ([`ClassCold::adjust`]) to apply before charging.
    pub(crate) adjusted: bool,
    /// DRR deficit of a leaf served at level 0 (on its own rate): `leaf.deficit[0]`; the
    /// levels above are [`ClassCold::deficit_above`].
    pub(crate) deficit: i32,
    pub(crate) bytes: u64,
    pub(crate) packets: u64,
    // 32 bits, wrapping, as the kernel keeps them (`tc_htb_xstats`, `gnet_stats_queue`).
    pub(crate) lends: u32,
    /// Its buckets are shared with other schedulers (`shared::SharedBuckets`).
    pub(crate) shared: bool,
    /// Its leaf queue ([`Leaf::Vacant`] for an inner class): in the record, not in an array
    /// of its own, so that a packet's enqueue and dequeue find the class and its queue in one
    /// place (with 100 000 classes round-robin, each array touched per packet is one more
    /// cache and TLB miss).
    pub(crate) queue: Leaf,
}

impl Class {
    pub(crate) fn id(&self) -> ClassId {
        ClassId::new(self.major, self.minor)
    }

    /// Whether the slot holds a class.
    pub(crate) fn live(&self) -> bool {
        self.minor != 0
    }
}

/// The rest of a class's record, in an arena of its own indexed by the same slot: what a
/// packet sent on the class's own rate never reads (the configured rates, tree bookkeeping,
/// drop and overlimit counters, a length adjustment other than none), and what only borrowing
/// reads: the DRR deficits of the
/// borrowing levels and the borrow counter of a leaf, and an inner class's state, which the
/// many leaves below it keep in cache. Out of [`Class`], it costs no cache line per packet
/// sent on its own rate (two lines a class instead of 3.1 with 100 000 classes round-robin).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClassCold {
    /// Slot in the inner-state arena, or [`NO_INNER`] for a leaf.
    pub(crate) inner: u32,
    pub(crate) children: u32,
    // 32 bits, wrapping, as the kernel keeps them (`tc_htb_xstats`, `gnet_stats_queue`).
    pub(crate) borrows: u32,
    pub(crate) drops: u32,
    pub(crate) overlimits: u32,
    /// DRR deficit per level 1.. the leaf is served at while borrowing
    /// (`leaf.deficit[1..TC_HTB_MAXDEPTH]`).
    pub(crate) deficit_above: [i32; MAX_DEPTH - 1],
    pub(crate) rate: Rate,
    pub(crate) ceil: Rate,
    /// What a packet's length is charged as (read only when [`Class::adjusted`]).
    pub(crate) adjust: LengthAdjust,
}

impl ClassCold {
    /// A new class's: a leaf, no children, nothing counted, the given rates.
    pub(crate) const fn new(rate: Rate, ceil: Rate, adjust: LengthAdjust) -> Self {
        Self {
            inner: NO_INNER,
            children: 0,
            borrows: 0,
            drops: 0,
            overlimits: 0,
            deficit_above: [0; MAX_DEPTH - 1],
            rate,
            ceil,
            adjust,
        }
    }
}

/// A round-robin list: a row (`hlevel[l].hprio[p]`) or an inner class's feed (`clprio[p]`),
/// ordered by class id, with the persistent DRR pointer of `struct htb_prio`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Row {
    pub(crate) tree: RbTree,
    /// The node DRR serves next, or [`NIL`].
    pub(crate) ptr: NodeId,
    /// When `ptr` was invalidated by removing the node it pointed at: that node's key (class
    /// minor), so the round robin resumes at the next higher id. 0 = none (minor 0 is never a
    /// class).
    pub(crate) last_ptr_id: u32,
}

impl Row {
    pub(crate) const EMPTY: Self = Self {
        tree: RbTree::EMPTY,
        ptr: NIL,
        last_ptr_id: 0,
    };
}

/// State only inner classes have: one feed per priority.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InnerState {
    pub(crate) feeds: [Row; MAX_DEPTH],
}

impl InnerState {
    pub(crate) const EMPTY: Self = Self {
        feeds: [Row::EMPTY; MAX_DEPTH],
    };
}

/// One level of the tree (`struct htb_level`) plus its `row_mask`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Level {
    /// Classes of this level that are not [`Mode::CanSend`], by time of next mode change.
    pub(crate) wait: RbTree,
    pub(crate) rows: [Row; MAX_DEPTH],
    /// Bit p set: `rows[p]` is not empty.
    pub(crate) row_mask: u8,
}

impl Level {
    pub(crate) const EMPTY: Self = Self {
        wait: RbTree::EMPTY,
        rows: [Row::EMPTY; MAX_DEPTH],
        row_mask: 0,
    };
}

/// A node of one of the scheduler's trees, in an arena slot: its links, its key, and whom it
/// stands for. Both kinds of node are this one record, so one [`NodePool`] serves them.
/// Packed to 4-byte alignment: a wait node's 64-bit key follows its three-word links with no
/// padding (20 bytes, not 24, per class).
#[derive(Clone, Copy, Debug)]
#[repr(Rust, packed(4))]
pub(crate) struct TreeSlot<K, O> {
    pub(crate) links: Links,
    pub(crate) key: K,
    pub(crate) owner: O,
}

/// A class's node in its level's wait queue (`pq_node` + `pq_key`); index = class slot, key =
/// when the class's mode may next change, ns.
pub(crate) type WaitNode = TreeSlot<u64, ()>;

impl WaitNode {
    pub(crate) const UNLINKED: Self = Self {
        links: Links::UNLINKED,
        key: 0,
        owner: (),
    };
}

/// A class's node in a row or feed (`node[prio]`), keyed by class minor.
pub(crate) type PrioNode = TreeSlot<u32, ClassIdx>;

impl<K: Ord + Copy + core::fmt::Debug, O> NodePool for Chunked<TreeSlot<K, O>> {
    type Key = K;
    #[inline]
    fn links(&self, node: NodeId) -> &Links {
        &self[node as usize].links
    }
    #[inline]
    fn links_mut(&mut self, node: NodeId) -> &mut Links {
        &mut self[node as usize].links
    }
    #[inline]
    fn key(&self, node: NodeId) -> K {
        self[node as usize].key
    }
    #[inline]
    fn node(&self, node: NodeId) -> (&Links, K) {
        let n = &self[node as usize];
        (&n.links, n.key)
    }
}

/// Arena of [`PrioNode`]s handed out in blocks of one (leaf) or eight (inner class).
#[derive(Debug, Default)]
pub(crate) struct PrioNodes {
    pub(crate) nodes: Chunked<PrioNode>,
    /// Freed nodes, chunked: a `Vec` would double (copy itself) on the data-plane thread as a
    /// mass delete frees a million of them.
    free_single: Chunked<NodeId>,
    free_block: Chunked<NodeId>,
}

impl PrioNodes {
    pub(crate) fn alloc(&mut self, owner: ClassIdx, key: u32, block: bool) -> NodeId {
        let size = if block { MAX_DEPTH } else { 1 };
        let free = if block {
            &mut self.free_block
        } else {
            &mut self.free_single
        };
        let base = free.pop().unwrap_or_else(|| {
            let base = self.nodes.len() as NodeId;
            self.nodes.grow_to(
                self.nodes.len() + size,
                &PrioNode {
                    links: Links::UNLINKED,
                    key: 0,
                    owner: NO_CLASS,
                },
            );
            base
        });
        for node in base as usize..base as usize + size {
            self.nodes[node] = PrioNode {
                links: Links::UNLINKED,
                key,
                owner,
            };
        }
        base
    }

    pub(crate) fn free(&mut self, base: NodeId, block: bool) {
        if block {
            self.free_block.push(base);
        } else {
            self.free_single.push(base);
        }
    }

    pub(crate) fn reserve(&mut self, classes: usize) {
        self.nodes.reserve(classes);
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// Per-class memory is a benchmark goal (`benches/complexity.rs` measures the total); this
    /// guards the layout of the per-class records against silent growth.
    #[test]
    fn per_class_records_stay_small() {
        // The packet path's record: 128 bytes on a line's start, two cache lines (see `Class`).
        assert!(
            size_of::<Class>() == 128,
            "Class is {} bytes",
            size_of::<Class>()
        );
        assert!(
            size_of::<ClassCold>() <= 72,
            "ClassCold is {} bytes",
            size_of::<ClassCold>()
        );
        assert!(
            size_of::<Leaf>() <= 256,
            "Leaf is {} bytes",
            size_of::<Leaf>()
        );
        assert_eq!(size_of::<WaitNode>(), 20);
        assert_eq!(size_of::<PrioNode>(), 20);
    }
}
