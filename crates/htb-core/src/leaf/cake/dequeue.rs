//! `cake_dequeue`: the tin to serve, its queues in DRR++ order (decaying first on a call's
//! first look, then new, then old), COBALT on the packet, and a queue found empty retired.

use super::hash::{self, CakeFlowState, FlowSet};
use super::tins::Tin;
use super::{Cake, ewma};
use crate::Packet;
use crate::leaf::flows::{FlowTable, ListTag};
use crate::leaf::{LeafStore, random};

impl Cake {
    /// Picks the tin to serve (module `choose`). `None`: nothing to serve.
    #[inline]
    fn choose_tin(&mut self, now: u64) -> Option<usize> {
        if self.rate_ns == 0 {
            self.choice.by_weight(&mut self.tins)
        } else {
            self.choice.by_threshold(&self.tins, now)
        }
    }

    /// Moves queue `idx` of tin `tin` from whichever list it is on to the tail of `to`.
    pub(super) fn move_to(
        &mut self,
        flows: &mut FlowTable<CakeFlowState>,
        tin: usize,
        idx: u32,
        to: ListTag,
    ) {
        self.tins[tin].move_to(flows, idx, to);
    }

    /// `cake_dequeue`. `None` while packets are held means the shaper holds them back until
    /// [`throttled_until`](Self::throttled_until).
    pub(crate) fn dequeue<P: Packet>(&mut self, store: &mut LeafStore<P>, now: u64) -> Option<P> {
        let mut first_flow = true;
        'begin: loop {
            if self.counts.len == 0 {
                return None;
            }
            if self.time_next_packet > now && self.failsafe_next_packet > now {
                self.overlimits = self.overlimits.wrapping_add(1);
                return None;
            }
            let tin = self.choose_tin(now)?;
            // Whether what was just checked and chosen still holds: a queue found empty
            // changes neither the packets held, nor the shaper, nor a tin's deficit, so while
            // its tin stays busy `goto begin` would come back to it; an `ingress` drop changes
            // all three.
            let mut checked = true;
            'retry: loop {
                // The tin is held by one borrow (`b`) for the rest of the pass, its bounds
                // checked once; a rare path that needs the whole instance (the ingress shaper,
                // a shaped send) takes it back after.
                let mut b = &mut self.tins[tin];
                let idx = if first_flow && !b.decaying_flows.is_empty() {
                    b.decaying_flows.front()
                } else {
                    b.new_flows
                        .front()
                        .or_else(|| b.old_flows.front())
                        .or_else(|| b.decaying_flows.front())
                };
                let Some(idx) = idx else { continue 'begin };
                first_flow = false;

                // Flow isolation (DRR++).
                let mode = self.config.flow_mode;
                if store.cake.flows.get(idx).deficit <= 0 {
                    let flow = store.cake.flows.get_mut(idx);
                    if flow.state.set == FlowSet::Sparse {
                        if flow.len > 0 {
                            flow.state.set = FlowSet::Bulk;
                            b.sparse_flow_count -= 1;
                            b.bulk_flow_count += 1;
                            hash::bulk_count(
                                &store.cake.flows,
                                &mut store.cake.hosts,
                                idx,
                                mode,
                                1,
                            );
                        } else {
                            // In the bulk rotation for its deficit, still counted sparse.
                            flow.state.set = FlowSet::SparseWait;
                        }
                    }
                    // `cake_get_flow_quantum`.
                    let load =
                        hash::host_load(&store.cake.hosts, &store.cake.flows.get(idx).state, mode);
                    let quantum = super::dithered_quantum(&mut self.random, b.flow_quantum, load);
                    store.cake.flows.get_mut(idx).deficit += quantum;
                    self.move_to(&mut store.cake.flows, tin, idx, ListTag::Old);
                    continue 'retry;
                }

                // A packet through COBALT.
                let (packet, enqueued, flow) = loop {
                    let flow = store.cake.flows.get_mut(idx);
                    let Some((mut packet, enqueued)) = store.packets.pop_front(&mut flow.packets)
                    else {
                        let (set, resting) = b.retire(&mut store.cake.flows, idx, now);
                        self.choice.emptied(tin, b);
                        self.retired(store, tin, idx, set, resting);
                        if checked && self.choice.busy(tin) {
                            continue 'retry;
                        }
                        continue 'begin;
                    };
                    let len = packet.len_bytes();
                    flow.len -= 1;
                    flow.backlog -= len;
                    b.tin_backlog -= len;
                    let bulk = if self.config.ingress {
                        u32::from(b.bulk_flow_count)
                    } else {
                        0
                    };
                    self.counts.remove(len);
                    self.buffer_used = self.buffer_used.saturating_sub(packet.truesize());
                    // BLUE's coin, tossed only while BLUE is active, as the kernel does; the
                    // sequence moves on either way.
                    let random = if flow.state.cvars.p_drop == 0 {
                        random::skip_random(&mut self.random);
                        0
                    } else {
                        random::next_random(&mut self.random)
                    };
                    let drop = flow.state.cvars.should_drop(
                        &b.cparams,
                        now,
                        now.saturating_sub(enqueued),
                        bulk,
                        || packet.set_ce(),
                        random,
                    );
                    // The last packet of a queue may be marked, never dropped.
                    if !drop || flow.len == 0 {
                        break (packet, enqueued, flow);
                    }
                    flow.state.dropped = flow.state.dropped.wrapping_add(1);
                    if self.config.ingress {
                        let charged = self.charged(&packet);
                        self.advance_shaper(tin, charged, now, true);
                        store.cake.flows.get_mut(idx).deficit -= charged as i32;
                        self.tins[tin].tin_deficit -= charged as i32;
                        self.choice.charged(&self.tins, tin);
                        b = &mut self.tins[tin];
                    }
                    b.tin_dropped = b.tin_dropped.wrapping_add(1);
                    self.counts.drops += 1;
                    store.dropped.push(packet);
                    if self.config.ingress {
                        checked = false;
                        continue 'retry;
                    }
                };

                let charged = super::charged_len(&self.config, self.charges_len, &packet);
                if self.rate_ns != 0 {
                    self.advance_shaper(tin, charged, now, false);
                    b = &mut self.tins[tin];
                }
                flow.deficit -= charged as i32;
                let marked = flow.state.cvars.ecn_marked;
                b.tin_ecn_mark = b.tin_ecn_mark.wrapping_add(u32::from(marked));
                let delay = now.saturating_sub(enqueued);
                b.avge_delay = ewma(b.avge_delay, delay, 8);
                b.peak_delay = ewma(
                    b.peak_delay,
                    delay,
                    if delay > b.peak_delay { 2 } else { 8 },
                );
                b.base_delay = ewma(
                    b.base_delay,
                    delay,
                    if delay < b.base_delay { 2 } else { 8 },
                );
                b.tin_deficit -= charged as i32;
                self.choice.charged_to(tin, b.tin_deficit);
                return Some(packet);
            }
        }
    }

    /// A queue was served and found empty (`cake_dequeue`), the instance's side, after its
    /// tin's ([`Tin::retire`]): a bulk queue leaves its hosts' counts, and a queue `resting`
    /// is freed, else its tin is noted as holding decaying queues.
    #[inline]
    fn retired<P>(
        &mut self,
        store: &mut LeafStore<P>,
        tin: usize,
        idx: u32,
        set: FlowSet,
        resting: bool,
    ) {
        if set == FlowSet::Bulk {
            hash::bulk_count(
                &store.cake.flows,
                &mut store.cake.hosts,
                idx,
                self.config.flow_mode,
                -1,
            );
        }
        if resting {
            hash::free_queue(
                &mut store.cake.flows,
                &mut store.cake.hosts,
                &mut self.flow_index,
                &mut self.host_index,
                idx,
            );
        } else {
            self.decaying_tins |= 1 << tin;
        }
    }
}

impl Tin {
    /// A queue of this tin was served and found empty (`cake_dequeue`), the tin's side: it
    /// waits on the decaying list while its COBALT state has not come to rest, else it leaves
    /// the rotation (its record to be freed by [`Cake::retired`]). Returns the queue's set
    /// before, and whether it rests.
    #[inline]
    fn retire(
        &mut self,
        flows: &mut FlowTable<CakeFlowState>,
        idx: u32,
        now: u64,
    ) -> (FlowSet, bool) {
        let flow = flows.get_mut(idx);
        if flow.state.cvars.queue_empty(&self.cparams, now) {
            self.unresponsive_flow_count = self.unresponsive_flow_count.saturating_sub(1);
        }
        let set = flow.state.set;
        let resting = flow.state.cvars.at_rest(now);
        flow.state.set = if resting {
            FlowSet::None
        } else {
            FlowSet::Decaying
        };
        match set {
            FlowSet::Bulk => self.bulk_flow_count -= 1,
            FlowSet::Sparse | FlowSet::SparseWait => self.sparse_flow_count -= 1,
            FlowSet::Decaying if resting => self.decaying_flow_count -= 1,
            FlowSet::Decaying | FlowSet::None => {}
        }
        if !resting && set != FlowSet::Decaying {
            self.decaying_flow_count += 1;
        }
        self.move_to(
            flows,
            idx,
            if resting {
                ListTag::Unlinked
            } else {
                ListTag::Dormant
            },
        );
        (set, resting)
    }
}
