//! Flows of the flow-queueing leaves (`sfq`, `fq_codel`), shared by every leaf of a scheduler
//! and allocated only while a flow has packets (or, for CoDel, state that still matters).
//!
//! The kernel gives every instance an array of `flows` buckets up front (`fq_codel`: 1024 ×
//! 64 bytes + 4 KiB of backlogs, ~68 KB per class); at 100 000 classes that is 6.8 GB. Here a
//! leaf keeps list heads only, and a flow record lives in this table while it is busy: the
//! memory follows the active flows, not the classes.
//!
//! A leaf finds the flow of a bucket by walking its own few flows (each leaf's records are
//! chained), and only past [`SCAN_MAX`] of them through one hash map keyed by `(leaf, bucket)`:
//! most leaves hold a handful of flows at a time, and a walk over those is cheaper than a map
//! insert and remove per flow — the map's memory is out of cache at 100 000 classes.

use crate::CheckError;
use alloc::format;
use alloc::vec::Vec;

use hashbrown::HashMap;

use super::codel::CodelVars;
use super::pool::{NONE, PacketList};

/// Which of its leaf's lists a flow is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListTag {
    /// None (or sfq's ring, which links through `next` only).
    Unlinked,
    /// `fq_codel`'s `new_flows`.
    New,
    /// `fq_codel`'s `old_flows`.
    Old,
    /// Empty, but its CoDel state must survive a while (see `fq_codel`).
    Dormant,
}

/// One flow: its packets, its place in its leaf's round robin and its AQM state `S`
/// (`struct fq_codel_flow`, `struct sfq_slot`, `struct cake_flow`).
#[derive(Clone, Debug)]
pub(crate) struct Flow<S = CodelVars> {
    pub(crate) packets: PacketList,
    /// Packets queued.
    pub(crate) len: u32,
    /// Bytes queued (`backlogs[idx]`, `slot->backlog`).
    pub(crate) backlog: u32,
    pub(crate) prev: u32,
    pub(crate) next: u32,
    pub(crate) list: ListTag,
    /// Hash bucket within the leaf.
    pub(crate) bucket: u32,
    /// DRR credit: fq_codel's `deficit` in bytes, sfq's `allot` in 8-byte units.
    pub(crate) deficit: i32,
    /// sfq: when the flow's depth last changed, in its leaf's order of changes (the kernel's
    /// `dep[]` lists keep that order; the longest flow that changed last is dropped from).
    pub(crate) stamp: u32,
    /// The AQM's per-flow state (CoDel's for `fq_codel`, COBALT's and the host slots for
    /// `cake`).
    pub(crate) state: S,
    /// The chain of the leaf's flow records (see [`LeafFlows`]).
    sib_prev: u32,
    sib_next: u32,
}

impl<S: Default> Flow<S> {
    /// A record for `bucket`, on no list, chained before `sib_next`.
    #[inline(always)]
    fn fresh(bucket: u32, sib_next: u32) -> Self {
        Self {
            packets: PacketList::EMPTY,
            len: 0,
            backlog: 0,
            prev: NONE,
            next: NONE,
            list: ListTag::Unlinked,
            bucket,
            deficit: 0,
            stamp: 0,
            state: S::default(),
            sib_prev: NONE,
            sib_next,
        }
    }
}

/// A leaf walks its flows to find a bucket's while it has at most this many; past it, the
/// table's map indexes them.
const SCAN_MAX: u32 = 4;
/// A mapped leaf goes back to walking once it holds this few flows (hysteresis, so a leaf
/// hovering at the limit does not map and unmap every packet).
const UNMAP_AT: u32 = 2;

/// One leaf's handle on its flow records in the [`FlowTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeafFlows {
    /// The leaf's key in the map.
    key: u32,
    /// Flow records the leaf holds, chained from `first`.
    count: u32,
    first: u32,
    /// Whether the map indexes this leaf's flows.
    mapped: bool,
}

impl LeafFlows {
    pub(crate) const fn new(key: u32) -> Self {
        Self {
            key,
            count: 0,
            first: NONE,
            mapped: false,
        }
    }
}

/// The flow table of one scheduler.
#[derive(Debug)]
pub(crate) struct FlowTable<S = CodelVars> {
    flows: Vec<Flow<S>>,
    free: Vec<u32>,
    map: HashMap<u64, u32>,
}

impl<S> Default for FlowTable<S> {
    fn default() -> Self {
        Self {
            flows: Vec::new(),
            free: Vec::new(),
            map: HashMap::new(),
        }
    }
}

fn map_key(leaf: u32, bucket: u32) -> u64 {
    u64::from(leaf) << 32 | u64::from(bucket)
}

impl<S: Default> FlowTable<S> {
    /// The flow of `leaf` hashed to `bucket`, if it exists.
    #[inline]
    pub(crate) fn find(&self, leaf: &LeafFlows, bucket: u32) -> Option<u32> {
        if leaf.mapped {
            return self.map.get(&map_key(leaf.key, bucket)).copied();
        }
        let mut idx = leaf.first;
        while idx != NONE {
            let flow = &self.flows[idx as usize];
            if flow.bucket == bucket {
                return Some(idx);
            }
            idx = flow.sib_next;
        }
        None
    }

    /// Hands `visit` each flow of `leaf` hashed to the `R` runs of buckets
    /// `first[r]..first[r] + n`, with the run's number, its offset in the run and its index,
    /// until it returns true (it has seen enough): one walk of the leaf's chain where
    /// [`find`](Self::find) walks it once per bucket (`cake`'s eight ways of a set, looked at
    /// together as `cake_hash` looks at its tag array, and a new queue's two host sets at
    /// once). A mapped leaf's runs are looked up one after the other, each from offset
    /// `start[r]` on, wrapping; a walk goes in chain order.
    #[inline]
    pub(crate) fn scan_runs<const R: usize>(
        &self,
        leaf: &LeafFlows,
        first: [u32; R],
        n: u32,
        start: [u32; R],
        mut visit: impl FnMut(usize, u32, u32, &Flow<S>) -> bool,
    ) {
        if leaf.mapped {
            for (run, (&first, &start)) in first.iter().zip(&start).enumerate() {
                for i in 0..n {
                    let k = (start + i) % n;
                    if let Some(&idx) = self.map.get(&map_key(leaf.key, first + k))
                        && visit(run, k, idx, &self.flows[idx as usize])
                    {
                        return;
                    }
                }
            }
            return;
        }
        let mut idx = leaf.first;
        while idx != NONE {
            let flow = &self.flows[idx as usize];
            for (run, &first) in first.iter().enumerate() {
                let k = flow.bucket.wrapping_sub(first);
                if k < n && visit(run, k, idx, flow) {
                    return;
                }
            }
            idx = flow.sib_next;
        }
    }

    /// A fresh flow of `leaf` at `bucket` (which must not have one). A record from the free
    /// list, chained to the leaf; taking a new record and indexing a mapped leaf's are
    /// functions of their own, so that the common case saves no registers.
    pub(crate) fn alloc(&mut self, leaf: &mut LeafFlows, bucket: u32) -> u32 {
        debug_assert!(
            self.find(leaf, bucket).is_none(),
            "bucket {bucket} had a flow"
        );
        let Some(idx) = self.free.pop() else {
            return self.alloc_grown(leaf, bucket, |_| {});
        };
        self.flows[idx as usize] = Flow::fresh(bucket, leaf.first);
        self.chain(leaf, bucket, idx)
    }

    /// [`alloc`](Self::alloc), the fresh record's state then set by `init` through the
    /// record in hand (`cake`'s tag and host slots), not through a look-up of its own.
    /// `alloc` keeps a body of its own: through this one with an empty `init`, the compiler
    /// laid `fq_codel`'s out one instruction longer.
    pub(crate) fn alloc_with(
        &mut self,
        leaf: &mut LeafFlows,
        bucket: u32,
        init: impl FnOnce(&mut S),
    ) -> u32 {
        debug_assert!(
            self.find(leaf, bucket).is_none(),
            "bucket {bucket} had a flow"
        );
        let Some(idx) = self.free.pop() else {
            return self.alloc_grown(leaf, bucket, init);
        };
        let flow = &mut self.flows[idx as usize];
        *flow = Flow::fresh(bucket, leaf.first);
        init(&mut flow.state);
        self.chain(leaf, bucket, idx)
    }

    /// [`alloc_with`](Self::alloc_with) with no record free: the table grows by one.
    #[cold]
    #[inline(never)]
    fn alloc_grown(&mut self, leaf: &mut LeafFlows, bucket: u32, init: impl FnOnce(&mut S)) -> u32 {
        let mut flow = Flow::fresh(bucket, leaf.first);
        init(&mut flow.state);
        self.flows.push(flow);
        let idx = (self.flows.len() - 1) as u32;
        self.chain(leaf, bucket, idx)
    }

    /// Chains the fresh record `idx` first among `leaf`'s; returns it.
    #[inline(always)]
    fn chain(&mut self, leaf: &mut LeafFlows, bucket: u32, idx: u32) -> u32 {
        if leaf.first != NONE {
            self.flows[leaf.first as usize].sib_prev = idx;
        }
        leaf.first = idx;
        leaf.count += 1;
        if leaf.mapped || leaf.count > SCAN_MAX {
            return self.index_new(leaf, bucket, idx);
        }
        idx
    }

    /// A mapped leaf's new record goes into the map; a leaf past [`SCAN_MAX`] records is
    /// mapped. Returns `idx`.
    #[cold]
    #[inline(never)]
    fn index_new(&mut self, leaf: &mut LeafFlows, bucket: u32, idx: u32) -> u32 {
        if leaf.mapped {
            self.map.insert(map_key(leaf.key, bucket), idx);
        } else {
            self.set_mapped(leaf, true);
        }
        idx
    }

    /// Frees flow `idx` of `leaf` (it must be empty and on no list). Growing the free list
    /// and a mapped leaf's map are functions of their own, as in [`alloc`](Self::alloc).
    pub(crate) fn free(&mut self, leaf: &mut LeafFlows, idx: u32) {
        let flow = &self.flows[idx as usize];
        debug_assert!(flow.len == 0 && flow.list == ListTag::Unlinked);
        let (prev, next, bucket) = (flow.sib_prev, flow.sib_next, flow.bucket);
        if prev == NONE {
            leaf.first = next;
        } else {
            self.flows[prev as usize].sib_next = next;
        }
        if next != NONE {
            self.flows[next as usize].sib_prev = prev;
        }
        leaf.count -= 1;
        if leaf.mapped || self.free.len() == self.free.capacity() {
            return self.free_slow(leaf, idx, bucket);
        }
        self.free.push(idx);
    }

    /// The rest of [`free`](Self::free) where the free list grows or the leaf is mapped.
    #[cold]
    #[inline(never)]
    fn free_slow(&mut self, leaf: &mut LeafFlows, idx: u32, bucket: u32) {
        self.free.push(idx);
        if leaf.mapped {
            self.map.remove(&map_key(leaf.key, bucket));
            if leaf.count <= UNMAP_AT {
                self.set_mapped(leaf, false);
            }
        }
    }

    /// Puts every flow of `leaf` into the map, or takes them out.
    fn set_mapped(&mut self, leaf: &mut LeafFlows, mapped: bool) {
        let mut idx = leaf.first;
        while idx != NONE {
            let flow = &self.flows[idx as usize];
            let key = map_key(leaf.key, flow.bucket);
            if mapped {
                self.map.insert(key, idx);
            } else {
                self.map.remove(&key);
            }
            idx = flow.sib_next;
        }
        leaf.mapped = mapped;
    }

    /// The records `leaf` holds, in no particular order.
    pub(crate) fn records<'a>(&'a self, leaf: &LeafFlows) -> impl Iterator<Item = u32> + 'a {
        let mut idx = leaf.first;
        core::iter::from_fn(move || {
            (idx != NONE).then(|| {
                let this = idx;
                idx = self.flows[this as usize].sib_next;
                this
            })
        })
    }

    /// Checks `leaf`'s chain against its count and the map; returns the records it holds.
    pub(crate) fn check_leaf(&self, leaf: &LeafFlows) -> Result<usize, CheckError> {
        let (mut idx, mut prev, mut n) = (leaf.first, NONE, 0u32);
        while idx != NONE {
            let flow = &self.flows[idx as usize];
            let mapped = self.map.get(&map_key(leaf.key, flow.bucket)) == Some(&idx);
            if flow.sib_prev != prev || mapped != leaf.mapped {
                return Err(CheckError(format!(
                    "flow {idx} of leaf {} is misfiled",
                    leaf.key
                )));
            }
            (prev, idx) = (idx, flow.sib_next);
            n += 1;
        }
        if n != leaf.count || (leaf.mapped && n <= UNMAP_AT) || (!leaf.mapped && n > SCAN_MAX) {
            return Err(CheckError(format!(
                "leaf {} chains {n} flows, counts {} (mapped: {})",
                leaf.key, leaf.count, leaf.mapped
            )));
        }
        Ok(n as usize)
    }

    #[inline]
    pub(crate) fn get(&self, idx: u32) -> &Flow<S> {
        &self.flows[idx as usize]
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, idx: u32) -> &mut Flow<S> {
        &mut self.flows[idx as usize]
    }

    /// Flows allocated now.
    pub(crate) fn in_use(&self) -> usize {
        self.flows.len() - self.free.len()
    }

    /// Bytes this table holds (records, free list and map), for the memory benchmark.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.flows.capacity() * size_of::<Flow<S>>()
            + self.free.capacity() * 4
            + self.map.capacity() * (size_of::<(u64, u32)>() + 1)
    }
}

/// A doubly linked list of flows (`struct list_head` of `new_flows`, `old_flows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlowList {
    head: u32,
    tail: u32,
    len: u32,
    tag: ListTag,
}

impl FlowList {
    pub(crate) const fn new(tag: ListTag) -> Self {
        Self {
            head: NONE,
            tail: NONE,
            len: 0,
            tag,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head == NONE
    }

    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    pub(crate) fn front(&self) -> Option<u32> {
        (self.head != NONE).then_some(self.head)
    }

    /// `list_add_tail`: `idx` must be on no list.
    pub(crate) fn push_back<S: Default>(&mut self, flows: &mut FlowTable<S>, idx: u32) {
        debug_assert_eq!(flows.get(idx).list, ListTag::Unlinked);
        let tail = self.tail;
        let flow = flows.get_mut(idx);
        flow.prev = tail;
        flow.next = NONE;
        flow.list = self.tag;
        if tail == NONE {
            self.head = idx;
        } else {
            flows.get_mut(tail).next = idx;
        }
        self.tail = idx;
        self.len += 1;
    }

    /// `list_del_init`: `idx` must be on this list.
    pub(crate) fn remove<S: Default>(&mut self, flows: &mut FlowTable<S>, idx: u32) {
        debug_assert_eq!(flows.get(idx).list, self.tag);
        let (prev, next) = {
            let flow = flows.get_mut(idx);
            let links = (flow.prev, flow.next);
            flow.prev = NONE;
            flow.next = NONE;
            flow.list = ListTag::Unlinked;
            links
        };
        if prev == NONE {
            self.head = next;
        } else {
            flows.get_mut(prev).next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            flows.get_mut(next).prev = prev;
        }
        self.len -= 1;
    }

    /// The flows on this list, first to last.
    pub(crate) fn iter<'a, S: Default>(
        &self,
        flows: &'a FlowTable<S>,
    ) -> impl Iterator<Item = u32> + 'a {
        let mut idx = self.head;
        core::iter::from_fn(move || {
            (idx != NONE).then(|| {
                let this = idx;
                idx = flows.get(this).next;
                this
            })
        })
    }
}
