//! `fq_codel` (RFC 8290; `net/sched/sch_fq_codel.c`): packets hashed into flows, new flows
//! served before old ones, DRR by `quantum` among flows, CoDel per flow, and over `limit` or
//! `memory_limit` a batch dropped from the head of the fattest flow.
//!
//! The kernel allocates `flows` flow records per instance; here flows come from the
//! scheduler-wide [`FlowTable`] while they have packets, so an idle `fq_codel` leaf is a few
//! list heads and counters. A flow that empties keeps its CoDel state (on a `dormant` list)
//! only while that state could still change its next dropping episode
//! ([`codel::state_matters`]); after that a fresh flow behaves identically.

mod spec;

use crate::CheckError;
use alloc::format;
use alloc::vec::Vec;

use super::LeafStore;
use super::codel::{self, CodelParams, CodelQueue, CodelStats};
use super::counts::QueueCounts;
use super::flows::{Flow, FlowList, FlowTable, LeafFlows, ListTag};
use super::pool::{PacketList, PacketPool};
use crate::Packet;

pub use spec::{FQ_CODEL_QUANTUM_MAX, FqCodelConfig, FqCodelSpec};

pub(crate) use spec::FqCodelError;

/// `fq_codel`'s statistics, as `tc -s qdisc show` prints them (`tc_fq_codel_qd_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FqCodelStats {
    /// Largest packet seen.
    pub maxpacket: u32,
    /// Packets dropped over `limit` or `memory_limit`.
    pub drop_overlimit: u32,
    /// Flows that became active.
    pub new_flow_count: u32,
    /// Packets CE-marked instead of dropped.
    pub ecn_mark: u32,
    /// Packets CE-marked above `ce_threshold`.
    pub ce_mark: u32,
    /// Bytes of buffers held.
    pub memory_usage: u32,
    /// Packets dropped over `memory_limit`.
    pub drop_overmemory: u32,
    /// Flows on the new list.
    pub new_flows_len: u32,
    /// Flows on the old list.
    pub old_flows_len: u32,
}

/// How many expired dormant flows one call frees at most (bounded work per packet).
const TRIM_PER_CALL: usize = 2;

/// One `fq_codel` instance (`struct fq_codel_sched_data`). 192 bytes on a cache line's start:
/// three whole lines, where its box's 16-byte alignment spread it over four.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct FqCodel {
    config: FqCodelConfig,
    /// Its flow records in the scheduler's table.
    index: LeafFlows,
    new_flows: FlowList,
    old_flows: FlowList,
    dormant: FlowList,
    /// Packets and bytes held, packets dropped.
    pub(crate) counts: QueueCounts,
    memory_usage: u32,
    codel: CodelStats,
    drop_overlimit: u32,
    drop_overmemory: u32,
    new_flow_count: u32,
}

/// `reciprocal_scale(hash, flows)`: a bucket in `0..flows` from a 32-bit hash.
#[inline]
pub(super) fn bucket(hash: u32, flows: u32) -> u32 {
    ((u64::from(hash) * u64::from(flows)) >> 32) as u32
}

/// The flow CoDel is serving, with the counters `dequeue_func` and `drop_func` update.
struct Served<'a, P> {
    packets: &'a mut PacketPool<P>,
    flow_packets: &'a mut PacketList,
    flow_len: &'a mut u32,
    flow_backlog: &'a mut u32,
    dropped: &'a mut Vec<P>,
    counts: &'a mut QueueCounts,
    memory_usage: &'a mut u32,
}

impl<P: Packet> CodelQueue<P> for Served<'_, P> {
    #[inline]
    fn dequeue(&mut self) -> Option<(P, u64)> {
        let (packet, enqueued) = self.packets.pop_front(self.flow_packets)?;
        let len = packet.len_bytes();
        *self.flow_len -= 1;
        *self.flow_backlog -= len;
        self.counts.remove(len);
        *self.memory_usage = self.memory_usage.saturating_sub(packet.truesize());
        Some((packet, enqueued))
    }

    fn backlog(&self) -> u64 {
        self.counts.backlog
    }

    fn drop(&mut self, packet: P) {
        self.counts.drops += 1;
        self.dropped.push(packet);
    }
}

impl FqCodel {
    /// The flow bucket of `hash` (`fq_codel_classify` without a filter).
    pub(crate) fn bucket_of(&self, hash: u32) -> u32 {
        bucket(hash, self.config.flows)
    }

    /// `fq_codel_init`: an empty instance for the leaf keyed `key` in the flow table.
    pub(crate) fn new(config: FqCodelConfig, key: u32) -> Self {
        Self {
            config,
            index: LeafFlows::new(key),
            new_flows: FlowList::new(ListTag::New),
            old_flows: FlowList::new(ListTag::Old),
            dormant: FlowList::new(ListTag::Dormant),
            counts: QueueCounts::default(),
            memory_usage: 0,
            codel: CodelStats::default(),
            drop_overlimit: 0,
            drop_overmemory: 0,
            new_flow_count: 0,
        }
    }

    fn params(&self) -> CodelParams {
        CodelParams {
            target: self.config.target.as_nanos(),
            interval: self.config.interval.as_nanos(),
            mtu: u64::from(self.config.mtu),
            ecn: self.config.ecn,
            ce_threshold: self.config.ce_threshold.map(crate::Duration::as_nanos),
        }
    }

    /// `fq_codel_enqueue`. Its signature is `Sfq::enqueue`'s, which `duplicates` lists as a
    /// pair: `Leaf::enqueue` calls each kind the same way; the bodies have nothing in common.
    #[inline]
    pub(crate) fn enqueue<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        packet: P,
        now: u64,
    ) -> Result<(), P> {
        self.trim_dormant(&mut store.flows, now);
        let b = self.bucket_of(packet.flow_hash());
        let idx = match store.flows.find(&self.index, b) {
            Some(idx) => {
                if store.flows.get(idx).list == ListTag::Dormant {
                    self.dormant.remove(&mut store.flows, idx);
                }
                idx
            }
            None => store.flows.alloc(&mut self.index, b),
        };
        let len = packet.len_bytes();
        let truesize = packet.truesize();
        let flow = store.flows.get_mut(idx);
        if let Err(packet) = store.packets.push_back(&mut flow.packets, packet, now) {
            if flow.len == 0 && flow.list == ListTag::Unlinked {
                store.flows.free(&mut self.index, idx);
            }
            self.counts.drops += 1;
            return Err(packet);
        }
        flow.len += 1;
        flow.backlog = flow.backlog.saturating_add(len);
        if flow.list == ListTag::Unlinked {
            flow.deficit = self.config.quantum as i32;
            self.new_flows.push_back(&mut store.flows, idx);
            self.new_flow_count = self.new_flow_count.wrapping_add(1);
        }
        self.memory_usage = self.memory_usage.saturating_add(truesize);
        let memory_limited = self.memory_usage > self.config.memory_limit;
        self.counts.add(len);
        if self.counts.len <= self.config.limit && !memory_limited {
            return Ok(());
        }
        // fq_codel_drop is a linear search for the fattest flow: rather than one packet, drop
        // half its backlog (at most drop_batch packets) to amortize it.
        let before = self.counts.len;
        self.drop_from_fattest(store);
        let dropped = before - self.counts.len;
        self.drop_overlimit = self.drop_overlimit.wrapping_add(dropped);
        if memory_limited {
            self.drop_overmemory = self.drop_overmemory.wrapping_add(dropped);
        }
        Ok(())
    }

    /// `fq_codel_drop`: drops from the head of the flow with the largest backlog (the lowest
    /// bucket among equals, as the kernel's scan of `backlogs[]` finds it) until half its
    /// backlog or `drop_batch` packets are gone.
    fn drop_from_fattest<P: Packet>(&mut self, store: &mut LeafStore<P>) {
        let flows = &store.flows;
        let mut fattest: Option<(u32, u32, u32)> = None; // (backlog, bucket, idx)
        for idx in self.new_flows.iter(flows).chain(self.old_flows.iter(flows)) {
            let f = flows.get(idx);
            let better = match fattest {
                None => true,
                Some((backlog, bucket, _)) => {
                    f.backlog > backlog || (f.backlog == backlog && f.bucket < bucket)
                }
            };
            if better {
                fattest = Some((f.backlog, f.bucket, idx));
            }
        }
        let Some((max_backlog, _, idx)) = fattest else {
            return;
        };
        let threshold = max_backlog >> 1;
        let flow = store.flows.get_mut(idx);
        let (mut len, mut mem, mut count) = (0u32, 0u32, 0u32);
        while let Some((packet, _)) = store.packets.pop_front(&mut flow.packets) {
            len = len.saturating_add(packet.len_bytes());
            mem = mem.saturating_add(packet.truesize());
            count += 1;
            store.dropped.push(packet);
            if count >= self.config.drop_batch || len >= threshold {
                break;
            }
        }
        // Tell CoDel to increase its signal strength too.
        flow.state.count = flow.state.count.wrapping_add(count);
        flow.len -= count;
        flow.backlog -= len;
        self.counts.backlog -= u64::from(len);
        self.memory_usage = self.memory_usage.saturating_sub(mem);
        self.counts.len -= count;
        self.counts.drops += u64::from(count);
    }

    /// `fq_codel_dequeue`.
    #[inline]
    pub(crate) fn dequeue<P: Packet>(&mut self, store: &mut LeafStore<P>, now: u64) -> Option<P> {
        let params = self.params();
        loop {
            let (from_new, idx) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(idx), _) => (true, idx),
                (None, Some(idx)) => (false, idx),
                (None, None) => return None,
            };
            if store.flows.get(idx).deficit <= 0 {
                store.flows.get_mut(idx).deficit += self.config.quantum as i32;
                self.list(from_new).remove(&mut store.flows, idx);
                self.old_flows.push_back(&mut store.flows, idx);
                continue;
            }
            let Flow {
                packets,
                len,
                backlog,
                state: vars,
                ..
            } = store.flows.get_mut(idx);
            let packet = if *len == 0 {
                // What codel_dequeue does with an empty flow, without building its queue.
                codel::found_empty(vars);
                None
            } else {
                let mut served = Served {
                    packets: &mut store.packets,
                    flow_packets: packets,
                    flow_len: len,
                    flow_backlog: backlog,
                    dropped: &mut store.dropped,
                    counts: &mut self.counts,
                    memory_usage: &mut self.memory_usage,
                };
                codel::dequeue(&mut served, vars, &params, &mut self.codel, now)
            };
            match packet {
                Some(packet) => {
                    store.flows.get_mut(idx).deficit -=
                        packet.len_bytes().min(i32::MAX as u32) as i32;
                    return Some(packet);
                }
                None => {
                    // Force a pass through old_flows to prevent starvation.
                    self.list(from_new).remove(&mut store.flows, idx);
                    if from_new && !self.old_flows.is_empty() {
                        self.old_flows.push_back(&mut store.flows, idx);
                    } else {
                        self.retire(&mut store.flows, idx, &params, now);
                    }
                }
            }
        }
    }

    fn list(&mut self, new: bool) -> &mut FlowList {
        if new {
            &mut self.new_flows
        } else {
            &mut self.old_flows
        }
    }

    /// An empty flow leaves the round robin: kept dormant while its CoDel state matters,
    /// freed otherwise.
    fn retire(&mut self, flows: &mut FlowTable, idx: u32, params: &CodelParams, now: u64) {
        if codel::state_matters(&flows.get(idx).state, params, now) {
            self.dormant.push_back(flows, idx);
        } else {
            flows.free(&mut self.index, idx);
        }
    }

    fn trim_dormant(&mut self, flows: &mut FlowTable, now: u64) {
        if self.dormant.is_empty() {
            return;
        }
        let params = self.params();
        for _ in 0..TRIM_PER_CALL {
            match self.dormant.front() {
                Some(idx) if !codel::state_matters(&flows.get(idx).state, &params, now) => {
                    self.dormant.remove(flows, idx);
                    flows.free(&mut self.index, idx);
                }
                _ => return,
            }
        }
    }

    /// `fq_codel_reset`: every packet out, every flow freed.
    pub(crate) fn purge<P: Packet>(&mut self, store: &mut LeafStore<P>, out: &mut impl FnMut(P)) {
        for list in [&mut self.new_flows, &mut self.old_flows, &mut self.dormant] {
            while let Some(idx) = list.front() {
                store.empty_flow(idx, out);
                list.remove(&mut store.flows, idx);
                store.flows.free(&mut self.index, idx);
            }
        }
        self.counts.emptied();
        self.memory_usage = 0;
    }

    /// `fq_codel_change` with a resolved config (the number of flows is fixed, as in the
    /// kernel): new parameters apply at once, and packets over the new limits are dropped
    /// from the head, as `fq_codel_change` does through `fq_codel_dequeue`.
    pub(crate) fn reconfigure<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        config: FqCodelConfig,
        now: u64,
    ) {
        debug_assert_eq!(config.flows, self.config.flows);
        self.config = config;
        while self.counts.len > self.config.limit || self.memory_usage > self.config.memory_limit {
            match self.dequeue(store, now) {
                Some(packet) => {
                    self.counts.drops += 1;
                    store.dropped.push(packet);
                }
                None => break,
            }
        }
    }

    pub(crate) fn config(&self) -> FqCodelConfig {
        self.config
    }
    pub(crate) fn check<P: Packet>(&self, store: &LeafStore<P>) -> Result<usize, CheckError> {
        let flows = &store.flows;
        let (mut len, mut bytes, mut records) = (0u32, 0u64, 0usize);
        for (list, tag) in [
            (&self.new_flows, ListTag::New),
            (&self.old_flows, ListTag::Old),
            (&self.dormant, ListTag::Dormant),
        ] {
            let mut on_list = 0;
            for idx in list.iter(flows) {
                let f = flows.get(idx);
                let (n, b) = super::count_list(&store.packets, f.packets);
                if f.list != tag || flows.find(&self.index, f.bucket) != Some(idx) {
                    return Err(CheckError(format!(
                        "fq_codel flow {idx} is not where its lists say"
                    )));
                }
                if (n, b) != (f.len, u64::from(f.backlog)) || (tag == ListTag::Dormant && n > 0) {
                    return Err(CheckError(format!(
                        "fq_codel flow {idx} ({tag:?}) holds {n} packets / {b} B, says {} / {}",
                        f.len, f.backlog
                    )));
                }
                len += n;
                bytes += b;
                on_list += 1;
            }
            if on_list != list.len() {
                return Err(CheckError(format!(
                    "fq_codel {tag:?} list counts {} flows, holds {on_list}",
                    list.len()
                )));
            }
            records += on_list as usize;
        }
        if (len, bytes) != (self.counts.len, self.counts.backlog) {
            return Err(CheckError(format!(
                "fq_codel flows hold {len} packets / {bytes} B, counters say {} / {}",
                self.counts.len, self.counts.backlog
            )));
        }
        let chained = store.flows.check_leaf(&self.index)?;
        if chained != records {
            return Err(CheckError(format!(
                "fq_codel holds {chained} flow records, {records} on its lists"
            )));
        }
        Ok(records)
    }

    pub(crate) fn stats(&self) -> FqCodelStats {
        FqCodelStats {
            maxpacket: self.codel.maxpacket,
            drop_overlimit: self.drop_overlimit,
            new_flow_count: self.new_flow_count,
            ecn_mark: self.codel.ecn_mark,
            ce_mark: self.codel.ce_mark,
            memory_usage: self.memory_usage,
            drop_overmemory: self.drop_overmemory,
            new_flows_len: self.new_flows.len(),
            old_flows_len: self.old_flows.len(),
        }
    }
}
