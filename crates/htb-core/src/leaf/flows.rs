//! Flows of the flow-queueing leaves (`sfq`, `fq_codel`), shared by every leaf of a scheduler
//! and allocated only while a flow has packets (or, for CoDel, state that still matters).
//!
//! The kernel gives every instance an array of `flows` buckets up front (`fq_codel`: 1024 ×
//! 64 bytes + 4 KiB of backlogs, ~68 KB per class); at 100 000 classes that is 6.8 GB. Here a
//! leaf keeps list heads only, and a flow record lives in this table while it is busy, found by
//! `(leaf, bucket)` in one hash map: the memory follows the active flows, not the classes.

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

/// One flow: its packets, its place in its leaf's round robin and its AQM state
/// (`struct fq_codel_flow`, `struct sfq_slot`).
#[derive(Clone, Debug)]
pub(crate) struct Flow {
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
    pub(crate) codel: CodelVars,
    key: u64,
}

/// The flow table of one scheduler.
#[derive(Debug, Default)]
pub(crate) struct FlowTable {
    flows: Vec<Flow>,
    free: Vec<u32>,
    map: HashMap<u64, u32>,
}

fn map_key(leaf: u32, bucket: u32) -> u64 {
    u64::from(leaf) << 32 | u64::from(bucket)
}

impl FlowTable {
    /// The flow of `leaf` hashed to `bucket`, if it exists.
    #[inline]
    pub(crate) fn find(&self, leaf: u32, bucket: u32) -> Option<u32> {
        self.map.get(&map_key(leaf, bucket)).copied()
    }

    /// A fresh flow of `leaf` at `bucket` (which must not have one).
    pub(crate) fn alloc(&mut self, leaf: u32, bucket: u32) -> u32 {
        let key = map_key(leaf, bucket);
        let flow = Flow {
            packets: PacketList::EMPTY,
            len: 0,
            backlog: 0,
            prev: NONE,
            next: NONE,
            list: ListTag::Unlinked,
            bucket,
            deficit: 0,
            stamp: 0,
            codel: CodelVars::default(),
            key,
        };
        let idx = match self.free.pop() {
            Some(idx) => {
                self.flows[idx as usize] = flow;
                idx
            }
            None => {
                self.flows.push(flow);
                (self.flows.len() - 1) as u32
            }
        };
        let previous = self.map.insert(key, idx);
        debug_assert!(
            previous.is_none(),
            "bucket {bucket} of leaf {leaf} had a flow"
        );
        idx
    }

    /// Frees flow `idx` (it must be empty and on no list).
    pub(crate) fn free(&mut self, idx: u32) {
        let flow = &self.flows[idx as usize];
        debug_assert!(flow.len == 0 && flow.list == ListTag::Unlinked);
        self.map.remove(&flow.key);
        self.free.push(idx);
    }

    #[inline]
    pub(crate) fn get(&self, idx: u32) -> &Flow {
        &self.flows[idx as usize]
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, idx: u32) -> &mut Flow {
        &mut self.flows[idx as usize]
    }

    /// Flows allocated now.
    pub(crate) fn in_use(&self) -> usize {
        self.flows.len() - self.free.len()
    }

    /// Bytes this table holds (records, free list and map), for the memory benchmark.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.flows.capacity() * size_of::<Flow>()
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
    pub(crate) fn push_back(&mut self, flows: &mut FlowTable, idx: u32) {
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
    pub(crate) fn remove(&mut self, flows: &mut FlowTable, idx: u32) {
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
    pub(crate) fn iter<'a>(&self, flows: &'a FlowTable) -> impl Iterator<Item = u32> + 'a {
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
