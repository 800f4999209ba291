//! `cake_hash`: 8-way set-associative flow queues, and the host slots that make flows fair
//! between hosts.
//!
//! The kernel gives each tin 1024 queues in 128 sets of 8 ways, with a tag per queue: a flow
//! takes the queue its hash names if that queue is its own (a *direct* hit), else a queue of
//! the set tagged with its hash (an *indirect* hit), else a free queue of the set (a *miss*),
//! else the queue its hash names, shared (a *collision*). Hosts get slots the same way, each
//! counting the bulk flows of its host, which divides those flows' DRR quantum.
//!
//! Here a queue's record lives in the scheduler's flow table only while the queue is in use
//! (on a list: sparse, bulk or decaying), and a host slot only while a queue refers to it, so
//! an idle leaf holds none. A freed queue forgets its tag: a flow coming back after its queue
//! went idle takes the first free way as a new flow does (a miss where the kernel may count an
//! indirect hit); which way it takes changes nothing else, since every free way is alike.

use super::cobalt::CobaltVars;
use super::spec::FlowMode;
use super::tins::{MAX_TINS, Tin};
use crate::leaf::flows::{FlowTable, LeafFlows};
use crate::leaf::pool::NONE;

/// `CAKE_QUEUES`: queues (and host slots) per tin.
pub(crate) const QUEUES: u32 = 1024;
/// `CAKE_SET_WAYS`.
const WAYS: u32 = 8;
/// A queue that has no host slot.
pub(crate) const NO_HOST: u32 = u32::MAX;

/// Where a queue stands in its tin's rotations (`CAKE_SET_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum FlowSet {
    /// Not in use (a queue in that state has no record here).
    #[default]
    None,
    /// New, served first, not counted as bulk.
    Sparse,
    /// Counted as sparse, but in the bulk rotation (its deficit ran out while empty).
    SparseWait,
    /// In the bulk rotation.
    Bulk,
    /// Empty, kept while its COBALT state decays.
    Decaying,
}

/// A queue's state beside its packets (`struct cake_flow`'s).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CakeFlowState {
    pub(crate) cvars: CobaltVars,
    /// The hash of the flow that holds the queue (`tags[]`).
    pub(crate) tag: u32,
    pub(crate) set: FlowSet,
    /// Host slot buckets in the host table, or [`NO_HOST`].
    pub(crate) srchost: u32,
    pub(crate) dsthost: u32,
    /// Packets dropped from this queue.
    pub(crate) dropped: u32,
}

impl Default for CakeFlowState {
    fn default() -> Self {
        Self {
            cvars: CobaltVars::default(),
            tag: 0,
            set: FlowSet::None,
            srchost: NO_HOST,
            dsthost: NO_HOST,
            dropped: 0,
        }
    }
}

/// A host slot (`struct cake_host`, one direction).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HostState {
    /// The hash of the host that holds the slot.
    pub(crate) tag: u32,
    /// Bulk flows of the host (`srchost_bulk_flow_count` / `dsthost_bulk_flow_count`).
    pub(crate) bulk: u16,
    /// Queues pointing at the slot; it is freed at zero.
    pub(crate) refs: u16,
}

/// The three hashes `cake_hash` reads of a packet.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Hashes {
    pub(crate) flow: u32,
    pub(crate) src: u32,
    pub(crate) dst: u32,
}

/// The flow and host records of one `cake` leaf.
pub(crate) struct Slots<'a> {
    pub(crate) flows: &'a mut FlowTable<CakeFlowState>,
    pub(crate) hosts: &'a mut FlowTable<HostState>,
    pub(crate) flow_index: &'a mut LeafFlows,
    pub(crate) host_index: &'a mut LeafFlows,
}

/// The largest bulk count of a queue's hosts, at least 1 (`cake_get_flow_quantum`'s
/// `host_load`).
#[inline]
pub(crate) fn host_load(
    hosts: &FlowTable<HostState>,
    queue: &CakeFlowState,
    mode: FlowMode,
) -> u32 {
    let mut load = 1;
    if mode.dual_src() && queue.srchost != NO_HOST {
        load = load.max(u32::from(hosts.get(queue.srchost).state.bulk));
    }
    if mode.dual_dst() && queue.dsthost != NO_HOST {
        load = load.max(u32::from(hosts.get(queue.dsthost).state.bulk));
    }
    load
}

/// The bucket of queue `q` of tin `tin` in the flow table.
pub(crate) fn flow_bucket(tin: usize, q: u32) -> u32 {
    tin as u32 * QUEUES + q
}

/// The bucket of host slot `h` of tin `tin`, source or destination, in the host table.
fn host_bucket(tin: usize, h: u32, dst: bool) -> u32 {
    let base = if dst { MAX_TINS as u32 * QUEUES } else { 0 };
    base + tin as u32 * QUEUES + h
}

/// Every way of a set, as bits.
const ALL_WAYS: u32 = (1 << WAYS) - 1;

/// The first of the ways in `mask` (bit k: way k, not empty) from way `inner` on, wrapping:
/// the order `cake_hash` looks at the ways of a set in.
#[inline(always)]
fn first_from(mask: u32, inner: u32) -> u32 {
    debug_assert!(mask & !ALL_WAYS == 0 && inner < WAYS);
    // Eight ways: one byte, turned by one rotate where two shifts, a subtraction and a mask
    // did the same.
    let rotated = (mask as u8).rotate_right(inner);
    (inner + rotated.trailing_zeros()) % WAYS
}

/// One host's look at its set of slots ([`host_slots`]).
#[derive(Clone, Copy)]
struct HostLook {
    hash: u32,
    /// The way the hash names, and the set's first bucket.
    inner: u32,
    set: u32,
    /// The slot tagged with the hash, once seen ([`NONE`] until then).
    tagged: u32,
    /// Ways free or holding no bulk flow.
    spare: u32,
    /// The slot at each way held.
    held: [u32; WAYS as usize],
}

impl HostLook {
    fn new(tin: usize, hash: u32, dst: bool) -> Self {
        let reduced = hash % QUEUES;
        let inner = reduced % WAYS;
        Self {
            hash,
            inner,
            set: host_bucket(tin, reduced - inner, dst),
            tagged: NONE,
            spare: ALL_WAYS,
            held: [NONE; WAYS as usize],
        }
    }

    /// Notes slot `slot` at way `k`; true when it is the one tagged with the hash (a set never
    /// holds a tag twice).
    #[inline]
    fn see(&mut self, k: u32, slot: u32, host: &HostState) -> bool {
        if host.tag == self.hash {
            self.tagged = slot;
            return true;
        }
        self.held[k as usize] = slot;
        if host.bulk != 0 {
            self.spare &= !(1 << k);
        }
        false
    }
}

/// Whether the host slots count `mode`'s hosts (source, destination).
fn dual(mode: FlowMode) -> (bool, bool) {
    (mode.dual_src(), mode.dual_dst())
}

impl Slots<'_> {
    #[inline]
    fn flow(&self, tin: usize, q: u32) -> Option<u32> {
        self.flows.find(self.flow_index, flow_bucket(tin, q))
    }

    /// `cake_hash`: the record of the queue the packet goes to in tin `tin` (allocated, with
    /// its host slots, when the flow needs a queue), and the way counters. With it, the
    /// queue's [`host_load`] where this look gave the queue its host slots (or it has none),
    /// else 0: what `cake_get_flow_quantum` reads next for a new queue, taken from the slots
    /// in hand.
    #[inline]
    pub(crate) fn queue(
        &mut self,
        tin: usize,
        t: &mut Tin,
        mode: FlowMode,
        h: Hashes,
    ) -> (u32, u32) {
        let bits = mode.bits();
        if bits == 0 {
            // flowblind: everything in queue 0, which counts no host.
            let idx = self
                .flow(tin, 0)
                .unwrap_or_else(|| self.flows.alloc(self.flow_index, flow_bucket(tin, 0)));
            return (idx, 1);
        }
        let mut flow_hash = if bits & 4 != 0 { h.flow } else { 0 };
        if bits & 4 == 0 {
            if bits & 1 != 0 {
                flow_hash ^= h.src;
            }
            if bits & 2 != 0 {
                flow_hash ^= h.dst;
            }
        }
        let reduced = flow_hash % QUEUES;
        let inner = reduced % WAYS;
        let outer = reduced - inner;
        // One look at the set, as `cake_hash` looks at its tags: a set never holds a tag twice
        // (a queue takes its flow's tag only when no way had it), so the first way found
        // tagged is the only one; a mapped leaf looks at the hash's own way first.
        let (mut occupied, mut at_inner, mut hit) = (0u32, NONE, None);
        self.flows.scan_runs(
            self.flow_index,
            [flow_bucket(tin, outer)],
            WAYS,
            [inner],
            |_, k, idx, flow| {
                if flow.state.tag == flow_hash {
                    hit = Some((k, idx));
                    return true;
                }
                occupied |= 1 << k;
                if k == inner {
                    at_inner = idx;
                }
                false
            },
        );
        if let Some((k, idx)) = hit {
            if k != inner {
                // An indirect hit; a direct one (`way_directs`) tc does not print.
                t.way_hits = t.way_hits.wrapping_add(1);
            }
            return (idx, 0);
        }
        let free = !occupied & ALL_WAYS;
        if free != 0 {
            t.way_misses = t.way_misses.wrapping_add(1);
            let k = first_from(free, inner);
            // The host slots first (another table: neither look changes the other), so that
            // the queue's record is written once, with its tag and slots.
            let (src, dst, load) = assign_hosts(self.hosts, self.host_index, tin, false, mode, h);
            let idx =
                self.flows
                    .alloc_with(self.flow_index, flow_bucket(tin, outer + k), move |queue| {
                        queue.tag = flow_hash;
                        queue.srchost = src;
                        queue.dsthost = dst;
                    });
            return (idx, load);
        }
        // Every way is in use: share the queue the hash names, and move it to this flow's
        // hosts.
        t.way_collisions = t.way_collisions.wrapping_add(1);
        let idx = at_inner;
        let bulk = self.flows.get(idx).state.set == FlowSet::Bulk;
        let (src, dst) = dual(mode);
        if bulk {
            self.bulk_count(idx, mode, -1);
        }
        if src {
            let old = core::mem::replace(&mut self.flows.get_mut(idx).state.srchost, NO_HOST);
            self.release_host(old);
        }
        if dst {
            let old = core::mem::replace(&mut self.flows.get_mut(idx).state.dsthost, NO_HOST);
            self.release_host(old);
        }
        let (src, dst, load) = assign_hosts(self.hosts, self.host_index, tin, bulk, mode, h);
        let queue = &mut self.flows.get_mut(idx).state;
        queue.tag = flow_hash;
        if src != NO_HOST {
            queue.srchost = src;
        }
        if dst != NO_HOST {
            queue.dsthost = dst;
        }
        (idx, load)
    }

    /// One queue less refers to host slot `slot`; the slot goes with the last.
    #[inline]
    pub(crate) fn release_host(&mut self, slot: u32) {
        if slot == NO_HOST {
            return;
        }
        let host = &mut self.hosts.get_mut(slot).state;
        host.refs -= 1;
        if host.refs == 0 {
            debug_assert_eq!(host.bulk, 0, "a bulk flow refers to every counted slot");
            self.hosts.free(self.host_index, slot);
        }
    }

    /// `cake_inc_*host_bulk_flow_count` (`delta` 1) and `cake_dec_*` (-1) for queue `idx`.
    #[inline]
    pub(crate) fn bulk_count(&mut self, idx: u32, mode: FlowMode, delta: i32) {
        bulk_count(self.flows, self.hosts, idx, mode, delta);
    }

    /// Frees queue `idx` (empty, on no list) and its references to host slots.
    #[inline]
    pub(crate) fn free_queue(&mut self, idx: u32) {
        free_queue(
            self.flows,
            self.hosts,
            self.flow_index,
            self.host_index,
            idx,
        );
    }
}

/// The host slots of a queue just given to a flow with hosts `h` (`cake_hash`'s
/// `allocate_src` and `allocate_dst`), [`NO_HOST`] for a direction `mode` does not count; a
/// `bulk` queue counts in them at once. Returns the source and destination slots and the
/// queue's [`host_load`] as it stands once it holds them. Its tables in registers, where
/// [`Slots`] would go by the stack.
#[inline]
fn assign_hosts(
    hosts: &mut FlowTable<HostState>,
    host_index: &mut LeafFlows,
    tin: usize,
    bulk: bool,
    mode: FlowMode,
    h: Hashes,
) -> (u32, u32, u32) {
    let (src, dst) = match (mode.dual_src(), mode.dual_dst()) {
        (true, true) => {
            let [src, dst] = host_slots(hosts, host_index, tin, [(h.src, false), (h.dst, true)]);
            (src, dst)
        }
        (true, false) => (
            host_slots(hosts, host_index, tin, [(h.src, false)])[0],
            NO_HOST,
        ),
        (false, true) => (
            NO_HOST,
            host_slots(hosts, host_index, tin, [(h.dst, true)])[0],
        ),
        (false, false) => (NO_HOST, NO_HOST),
    };
    let mut load = 1;
    for slot in [src, dst] {
        if slot != NO_HOST {
            let host = &mut hosts.get_mut(slot).state;
            host.refs += 1;
            if bulk && u32::from(host.bulk) < QUEUES {
                host.bulk += 1;
            }
            load = load.max(u32::from(host.bulk));
        }
    }
    (src, dst, load)
}

/// The host slot of each `(hash, destination)`, its set looked at once for all of them: the
/// way tagged with the hash, else the first from the hash's own that is free or holds no
/// bulk flow, else the hash's own (shared), retagged. A source and a destination set never
/// overlap, so looking at both before taking either changes nothing.
#[inline]
fn host_slots<const R: usize>(
    hosts: &mut FlowTable<HostState>,
    host_index: &mut LeafFlows,
    tin: usize,
    wanted: [(u32, bool); R],
) -> [u32; R] {
    let mut looks = wanted.map(|(hash, dst)| HostLook::new(tin, hash, dst));
    let mut missing = R;
    hosts.scan_runs(
        host_index,
        looks.map(|l| l.set),
        WAYS,
        looks.map(|l| l.inner),
        |run, k, slot, host| {
            let look = &mut looks[run];
            if look.tagged == NONE && look.see(k, slot, &host.state) {
                missing -= 1;
            }
            missing == 0
        },
    );
    let mut slots = [NONE; R];
    for (slot, look) in slots.iter_mut().zip(&looks) {
        *slot = if look.tagged != NONE {
            look.tagged
        } else {
            let chosen = if look.spare == 0 {
                look.inner
            } else {
                first_from(look.spare, look.inner)
            };
            let slot = match look.held[chosen as usize] {
                NONE => hosts.alloc(host_index, look.set + chosen),
                slot => slot,
            };
            hosts.get_mut(slot).state.tag = look.hash;
            slot
        };
    }
    slots
}

/// Frees queue `idx` of a leaf (empty, on no list) and its references to host slots: its
/// arguments in registers, where [`Slots`] would go by the stack, since it is a call of its
/// own on every queue that `cake_dequeue` finds empty and at rest.
#[inline(never)]
pub(crate) fn free_queue(
    flows: &mut FlowTable<CakeFlowState>,
    hosts: &mut FlowTable<HostState>,
    flow_index: &mut LeafFlows,
    host_index: &mut LeafFlows,
    idx: u32,
) {
    let queue = &flows.get(idx).state;
    let (src, dst) = (queue.srchost, queue.dsthost);
    // The host slots are another table's records: the queue's goes first, where no call is
    // needed after it to hold its index for.
    flows.free(flow_index, idx);
    let src_gone = unref(hosts, src);
    let dst_gone = unref(hosts, dst);
    if src_gone {
        hosts.free(host_index, src);
    }
    if dst_gone {
        hosts.free(host_index, dst);
    }
}

/// One queue less refers to host slot `slot` ([`NO_HOST`]: none); true when none does now
/// and the slot is to be freed.
#[inline(always)]
fn unref(hosts: &mut FlowTable<HostState>, slot: u32) -> bool {
    if slot == NO_HOST {
        return false;
    }
    let host = &mut hosts.get_mut(slot).state;
    host.refs -= 1;
    debug_assert!(
        host.refs != 0 || host.bulk == 0,
        "a bulk flow refers to every counted slot"
    );
    host.refs == 0
}

/// [`Slots::bulk_count`], its arguments in registers: `cake_dequeue` calls it where a sparse
/// queue turns bulk or a bulk one empties, and a [`Slots`] built for it on the stack (and its
/// addresses kept from the call's start) cost every dequeue.
#[inline(never)]
pub(crate) fn bulk_count(
    flows: &FlowTable<CakeFlowState>,
    hosts: &mut FlowTable<HostState>,
    idx: u32,
    mode: FlowMode,
    delta: i32,
) {
    let queue = &flows.get(idx).state;
    for (wanted, slot) in [
        (mode.dual_src(), queue.srchost),
        (mode.dual_dst(), queue.dsthost),
    ] {
        if !wanted || slot == NO_HOST {
            continue;
        }
        let host = &mut hosts.get_mut(slot).state;
        if delta > 0 && u32::from(host.bulk) < QUEUES {
            host.bulk += 1;
        } else if delta < 0 && host.bulk > 0 {
            host.bulk -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ALL_WAYS, WAYS, first_from};

    /// `first_from` against `cake_hash`'s own order: ways `inner`, `inner + 1`, … wrapping.
    #[test]
    fn first_from_is_the_first_way_on_from_inner() {
        for mask in 1..=ALL_WAYS {
            for inner in 0..WAYS {
                let walked = (0..WAYS)
                    .map(|i| (inner + i) % WAYS)
                    .find(|&k| mask >> k & 1 != 0)
                    .expect("a way is set");
                assert_eq!(
                    first_from(mask, inner),
                    walked,
                    "mask {mask:#b}, inner {inner}"
                );
            }
        }
    }
}
