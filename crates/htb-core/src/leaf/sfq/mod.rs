//! `sfq` (`net/sched/sch_sfq.c`): stochastic fairness queueing. Packets are hashed (with a
//! perturbation key) into `divisor` buckets, at most `flows` of which hold packets at a time,
//! each at most `depth` deep; flows are served round robin by `quantum`; over `limit` the
//! longest flow loses its tail (or head, with `headdrop`).
//!
//! Flows come from the scheduler-wide [`FlowTable`](super::flows::FlowTable) while they hold
//! packets, so an idle `sfq` leaf is a few words. The kernel finds the longest flow through
//! per-depth lists; here a scan of the active flows picks the same one (longest, then the one
//! whose depth changed last). `perturb` re-keys the hash every `perturb` seconds from a seed the
//! scheduler gives, and rehashes the queued packets as `sfq_rehash` does.

mod spec;

use crate::CheckError;
use alloc::format;
use alloc::vec::Vec;

use super::LeafStore;
use super::counts::QueueCounts;
use super::flows::LeafFlows;
use super::pool::NONE;
use super::random::next_random;
use crate::Packet;

pub use spec::{SFQ_MAX_DEPTH, SFQ_MAX_FLOWS, SfqConfig, SfqSpec};

pub(crate) use spec::SfqError;

/// `SFQ_ALLOT_SHIFT`: credits are kept in 8-byte units.
const ALLOT_SHIFT: u32 = 3;

fn allot_size(bytes: u32) -> i32 {
    bytes.div_ceil(1 << ALLOT_SHIFT).min(i32::MAX as u32) as i32
}

/// The bucket of `hash` under perturbation `key` (`skb_get_hash_perturb`): a 64-bit mix of both.
#[inline]
fn perturbed(hash: u32, key: u32) -> u32 {
    let mut x = (u64::from(hash) << 32 | u64::from(key)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u32
}

/// One `sfq` instance (`struct sfq_sched_data`).
#[derive(Clone, Debug)]
pub(crate) struct Sfq {
    config: SfqConfig,
    /// Its flow records in the scheduler's table.
    index: LeafFlows,
    /// The flow served last in the round (`q->tail`); the ring links through `Flow::next`.
    tail: u32,
    /// Packets and bytes held, packets dropped.
    pub(crate) counts: QueueCounts,
    /// Flows holding packets (`flows` at most).
    active: u32,
    perturbation: u32,
    next_perturb: u64,
    random: u64,
    /// Order of depth changes, for the choice of the flow to drop from.
    stamp: u32,
}

impl Sfq {
    /// `sfq_init`: an empty instance keyed `key`, its perturbation drawn from `seed`.
    pub(crate) fn new(config: SfqConfig, key: u32, seed: u64, now: u64) -> Self {
        let mut random = seed ^ u64::from(key).wrapping_mul(0xa076_1d64_78bd_642f);
        let perturbation = next_random(&mut random);
        Self {
            config,
            index: LeafFlows::new(key),
            tail: NONE,
            counts: QueueCounts::default(),
            active: 0,
            perturbation,
            next_perturb: Self::perturb_deadline(&config, now),
            random,
            stamp: 0,
        }
    }

    fn perturb_deadline(config: &SfqConfig, now: u64) -> u64 {
        if config.perturb == 0 {
            u64::MAX
        } else {
            now.saturating_add(u64::from(config.perturb) * 1_000_000_000)
        }
    }

    fn scaled_quantum(&self) -> i32 {
        allot_size(self.config.quantum)
    }

    /// The bucket of `hash` under the current perturbation (`sfq_hash`).
    pub(crate) fn bucket_of(&self, hash: u32) -> u32 {
        self.bucket(hash)
    }

    #[inline]
    fn bucket(&self, hash: u32) -> u32 {
        perturbed(hash, self.perturbation) & (self.config.divisor - 1)
    }

    fn touch<P>(&mut self, store: &mut LeafStore<P>, idx: u32) {
        self.stamp = self.stamp.wrapping_add(1);
        store.flows.get_mut(idx).stamp = self.stamp;
    }

    /// `sfq_enqueue`.
    #[inline]
    pub(crate) fn enqueue<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        packet: P,
        now: u64,
    ) -> Result<(), P> {
        self.maybe_perturb(store, now);
        let bucket = self.bucket(packet.flow_hash());
        let idx = match store.flows.find(&self.index, bucket) {
            Some(idx) => idx,
            None if self.active >= self.config.flows => {
                self.counts.drops += 1;
                return Err(packet);
            }
            None => {
                self.active += 1;
                store.flows.alloc(&mut self.index, bucket)
            }
        };
        let len = packet.len_bytes();
        let flow = store.flows.get_mut(idx);
        if flow.len >= self.config.depth {
            // congestion_drop: the flow is at its depth.
            if !self.config.headdrop {
                self.counts.drops += 1;
                return Err(packet);
            }
            let Some((head, _)) = store.packets.pop_front(&mut flow.packets) else {
                return Err(packet);
            };
            let head_len = head.len_bytes();
            store.dropped.push(head);
            self.counts.drops += 1;
            flow.backlog = flow.backlog - head_len + len;
            self.counts.backlog = self.counts.backlog - u64::from(head_len) + u64::from(len);
            return match store.packets.push_back(&mut flow.packets, packet, now) {
                Ok(()) => Ok(()),
                Err(packet) => {
                    flow.backlog -= len;
                    flow.len -= 1;
                    self.counts.remove(len);
                    Err(packet)
                }
            };
        }
        if let Err(packet) = store.packets.push_back(&mut flow.packets, packet, now) {
            if flow.len == 0 {
                store.flows.free(&mut self.index, idx);
                self.active -= 1;
            }
            self.counts.drops += 1;
            return Err(packet);
        }
        flow.backlog += len;
        flow.len += 1;
        let new_flow = flow.len == 1;
        self.touch(store, idx);
        if new_flow {
            self.link_at_end(store, idx);
        }
        self.counts.add(len);
        if self.counts.len > self.config.limit {
            self.drop_one(store);
        }
        Ok(())
    }

    /// A flow that just got its first packet joins the round at its end, with a fresh allot
    /// (serving new flows first could starve the old ones).
    fn link_at_end<P>(&mut self, store: &mut LeafStore<P>, idx: u32) {
        if self.tail == NONE {
            store.flows.get_mut(idx).next = idx;
        } else {
            let after = store.flows.get(self.tail).next;
            store.flows.get_mut(idx).next = after;
            store.flows.get_mut(self.tail).next = idx;
        }
        self.tail = idx;
        store.flows.get_mut(idx).deficit = self.scaled_quantum();
    }

    /// `sfq_drop`: one packet from the longest flow (its tail, or head with `headdrop`); when
    /// every flow holds one packet, the next flow of the round.
    fn drop_one<P: Packet>(&mut self, store: &mut LeafStore<P>) {
        if self.tail == NONE {
            return;
        }
        let mut longest = NONE;
        let mut idx = self.tail;
        loop {
            let f = store.flows.get(idx);
            let better = longest == NONE || {
                let l = store.flows.get(longest);
                f.len > l.len
                    || (f.len == l.len
                        && self.stamp.wrapping_sub(f.stamp) < self.stamp.wrapping_sub(l.stamp))
            };
            if better {
                longest = idx;
            }
            idx = f.next;
            if idx == self.tail {
                break;
            }
        }
        let depth = store.flows.get(longest).len;
        let victim = if depth > 1 {
            longest
        } else {
            // It is difficult to believe, but all the flows hold one packet.
            let victim = store.flows.get(self.tail).next;
            if victim == self.tail {
                self.tail = NONE;
            } else {
                let after = store.flows.get(victim).next;
                store.flows.get_mut(self.tail).next = after;
            }
            victim
        };
        let flow = store.flows.get_mut(victim);
        let taken = if self.config.headdrop {
            store.packets.pop_front(&mut flow.packets)
        } else {
            store.packets.pop_back(&mut flow.packets)
        };
        let Some((packet, _)) = taken else {
            return;
        };
        let len = packet.len_bytes();
        flow.len -= 1;
        flow.backlog -= len;
        self.counts.remove(len);
        self.counts.drops += 1;
        store.dropped.push(packet);
        if depth > 1 {
            self.touch(store, victim);
        } else {
            store.flows.free(&mut self.index, victim);
            self.active -= 1;
        }
    }

    /// `sfq_dequeue`.
    #[inline]
    pub(crate) fn dequeue<P: Packet>(&mut self, store: &mut LeafStore<P>, now: u64) -> Option<P> {
        self.maybe_perturb(store, now);
        if self.tail == NONE {
            return None;
        }
        let scaled_quantum = self.scaled_quantum();
        let mut a = store.flows.get(self.tail).next;
        while store.flows.get(a).deficit <= 0 {
            self.tail = a;
            store.flows.get_mut(a).deficit += scaled_quantum;
            a = store.flows.get(a).next;
        }
        let flow = store.flows.get_mut(a);
        let (packet, _) = store.packets.pop_front(&mut flow.packets)?;
        let len = packet.len_bytes();
        flow.len -= 1;
        flow.backlog -= len;
        self.counts.remove(len);
        if flow.len == 0 {
            let next = flow.next;
            if next == a {
                self.tail = NONE;
            } else {
                store.flows.get_mut(self.tail).next = next;
            }
            store.flows.get_mut(a).next = NONE;
            store.flows.free(&mut self.index, a);
            self.active -= 1;
        } else {
            flow.deficit -= allot_size(len);
            self.touch(store, a);
        }
        Some(packet)
    }

    /// `sfq_perturbation`, run when its period has passed: a new hash key, and the queued
    /// packets moved to their new flows.
    fn maybe_perturb<P: Packet>(&mut self, store: &mut LeafStore<P>, now: u64) {
        if now < self.next_perturb {
            return;
        }
        self.perturbation = next_random(&mut self.random);
        if self.tail != NONE {
            self.rehash(store);
        }
        self.next_perturb = Self::perturb_deadline(&self.config, now);
    }

    /// `sfq_rehash`: every queued packet re-hashed into its flow under the current key,
    /// in round order and keeping each flow's order; what no longer fits is dropped.
    fn rehash<P: Packet>(&mut self, store: &mut LeafStore<P>) {
        let mut held: Vec<(P, u64)> = core::mem::take(&mut store.scratch);
        if self.tail != NONE {
            let first = store.flows.get(self.tail).next;
            let mut idx = first;
            loop {
                let flow = store.flows.get_mut(idx);
                while let Some(entry) = store.packets.pop_front(&mut flow.packets) {
                    held.push(entry);
                }
                let next = flow.next;
                flow.len = 0;
                flow.backlog = 0;
                flow.next = NONE;
                store.flows.free(&mut self.index, idx);
                if idx == self.tail {
                    break;
                }
                idx = next;
            }
        }
        self.tail = NONE;
        self.active = 0;
        self.counts.emptied();
        for (packet, enqueued) in held.drain(..) {
            self.reinsert(store, packet, enqueued);
        }
        store.scratch = held;
    }

    fn reinsert<P: Packet>(&mut self, store: &mut LeafStore<P>, packet: P, enqueued: u64) {
        let bucket = self.bucket(packet.flow_hash());
        let idx = match store.flows.find(&self.index, bucket) {
            Some(idx) if store.flows.get(idx).len < self.config.depth => idx,
            None if self.active < self.config.flows => {
                self.active += 1;
                store.flows.alloc(&mut self.index, bucket)
            }
            _ => {
                self.counts.drops += 1;
                store.dropped.push(packet);
                return;
            }
        };
        let len = packet.len_bytes();
        let flow = store.flows.get_mut(idx);
        if let Err(packet) = store.packets.push_back(&mut flow.packets, packet, enqueued) {
            self.counts.drops += 1;
            store.dropped.push(packet);
            return;
        }
        flow.len += 1;
        flow.backlog += len;
        let new_flow = flow.len == 1;
        self.counts.add(len);
        self.touch(store, idx);
        if new_flow {
            self.link_at_end(store, idx);
        }
    }

    /// `sfq_reset`: every packet out, every flow freed.
    pub(crate) fn purge<P: Packet>(&mut self, store: &mut LeafStore<P>, out: &mut impl FnMut(P)) {
        while self.tail != NONE {
            let idx = store.flows.get(self.tail).next;
            let flow = store.empty_flow(idx, out);
            let next = flow.next;
            flow.next = NONE;
            if idx == self.tail {
                self.tail = NONE;
            } else {
                store.flows.get_mut(self.tail).next = next;
            }
            store.flows.free(&mut self.index, idx);
        }
        self.active = 0;
        self.counts.emptied();
    }

    /// `sfq_change` on a live instance (the kernel only runs it at creation): the new
    /// parameters, the packets rehashed into the new buckets and depths, the excess over the
    /// new limit dropped as `sfq_change` does.
    pub(crate) fn reconfigure<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        config: SfqConfig,
        now: u64,
    ) {
        self.config = config;
        if config.perturb != 0 {
            self.perturbation = next_random(&mut self.random);
        }
        self.next_perturb = Self::perturb_deadline(&config, now);
        self.rehash(store);
        while self.counts.len > self.config.limit {
            let before = self.counts.len;
            self.drop_one(store);
            if self.counts.len == before {
                break;
            }
        }
    }

    pub(crate) fn config(&self) -> SfqConfig {
        self.config
    }
    pub(crate) fn check<P: Packet>(&self, store: &LeafStore<P>) -> Result<usize, CheckError> {
        let (mut len, mut bytes, mut flows) = (0u32, 0u64, 0u32);
        if self.tail != NONE {
            let mut idx = self.tail;
            loop {
                let f = store.flows.get(idx);
                let (n, b) = super::count_list(&store.packets, f.packets);
                if store.flows.find(&self.index, f.bucket) != Some(idx) {
                    return Err(CheckError(format!("sfq flow {idx} is not its bucket's")));
                }
                if (n, b) != (f.len, u64::from(f.backlog)) || n == 0 || n > self.config.depth {
                    return Err(CheckError(format!(
                        "sfq flow {idx} holds {n} packets / {b} B, says {} / {} (depth {})",
                        f.len, f.backlog, self.config.depth
                    )));
                }
                len += n;
                bytes += b;
                flows += 1;
                if flows > self.active {
                    return Err(CheckError(format!(
                        "sfq ring longer than its {} active flows",
                        self.active
                    )));
                }
                idx = f.next;
                if idx == self.tail {
                    break;
                }
            }
        }
        if (len, bytes, flows) != (self.counts.len, self.counts.backlog, self.active) {
            return Err(CheckError(format!(
                "sfq ring holds {len} packets / {bytes} B in {flows} flows, counters say {} / {} / {}",
                self.counts.len, self.counts.backlog, self.active
            )));
        }
        if self.counts.len > self.config.limit {
            return Err(CheckError(format!(
                "sfq holds {} packets over its limit {}",
                self.counts.len, self.config.limit
            )));
        }
        let chained = store.flows.check_leaf(&self.index)?;
        if chained != flows as usize {
            return Err(CheckError(format!(
                "sfq holds {chained} flow records, {flows} in its ring"
            )));
        }
        Ok(chained)
    }
}
