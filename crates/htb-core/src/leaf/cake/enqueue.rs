//! `cake_enqueue`: a packet's tin and queue, the queue's place in its tin's rotation, and the
//! buffer limit (`cake_drop`); an idle leaf's decaying queues are freed on the way.

use super::hash::{self, FlowSet, Hashes, QUEUES};
use super::{
    AckFilter, Cake, DiffservMode, STALE_NS, TRIM_EVERY_NS, TRIM_PER_CALL, ack_filter, ewma, slots,
    tins,
};
use crate::Packet;
use crate::leaf::LeafStore;

impl Cake {
    /// `cake_overhead`: notes the length statistics of a packet being enqueued.
    fn note_lengths<P: Packet>(&mut self, packet: &P) {
        let (len, offset) = (packet.len_bytes(), packet.network_offset());
        self.avg_netoff = ewma(u64::from(self.avg_netoff), u64::from(offset) << 16, 8) as u32;
        let net = if self.config.overhead_set {
            len.saturating_sub(offset)
        } else {
            len
        };
        let net = net.min(u32::from(u16::MAX)) as u16;
        self.max_netlen = self.max_netlen.max(net);
        self.min_netlen = self.min_netlen.min(net);
        // A cake that charges a packet its length (no overhead set) charges `net`.
        let adj = if self.charges_len {
            net
        } else {
            self.adjusted_len(len, offset).min(u32::from(u16::MAX)) as u16
        };
        self.max_adjlen = self.max_adjlen.max(adj);
        self.min_adjlen = self.min_adjlen.min(adj);
    }

    /// `cake_select_tin`: a mark under `fwmark`, else the DSCP (washed if asked, after it is
    /// read).
    fn select_tin<P: Packet>(&self, packet: &mut P) -> usize {
        let c = &self.config;
        let mark = if c.fwmark == 0 {
            0
        } else {
            (packet.mark() & c.fwmark) >> c.fwmark.trailing_zeros()
        };
        let mut dscp = 0;
        if c.wash {
            dscp = packet.dscp();
            if dscp != 0 {
                packet.wash_dscp();
            }
        }
        let count = self.tins.len();
        if c.diffserv == DiffservMode::Besteffort {
            0
        } else if mark != 0 && mark as usize <= count {
            usize::from(tins::order(c.diffserv)[mark as usize - 1])
        } else {
            if !c.wash {
                dscp = packet.dscp();
            }
            Some(tins::tin_of(c.diffserv, dscp))
                .filter(|&t| t < count)
                .unwrap_or(0)
        }
    }

    /// `cake_enqueue`. Only a full packet pool refuses a packet; over the buffer limit the
    /// longest queue of any tin loses its head (`cake_drop`), to the store's drop list.
    pub(crate) fn enqueue<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        mut packet: P,
        now: u64,
    ) -> Result<(), P> {
        if self.counts.len == 0 {
            // An idle leaf frees its queues that came to rest (a busy one does in dequeue).
            self.trim_decaying(store, now);
        }
        let tin = self.select_tin(&mut packet);
        let mode = self.config.flow_mode;
        let (src, dst) = if mode.bits() & 3 != 0 {
            packet.host_hashes()
        } else {
            (0, 0)
        };
        let hashes = Hashes {
            flow: packet.flow_hash(),
            src,
            dst,
        };
        // The lengths first: nothing below reads them, and the tin is then held by one
        // borrow (`b`) to the end, its bounds checked once; a rare path that needs the whole
        // instance (the ingress shaper, autorate) takes it back after.
        self.note_lengths(&packet);
        let mut b = &mut self.tins[tin];
        let (idx, load) = slots(&mut self.flow_index, &mut self.host_index, &mut store.cake)
            .queue(tin, b, mode, hashes);

        // The shaper's state may be stale after an idle spell.
        let len = packet.len_bytes();
        b.max_skblen = b.max_skblen.max(len);
        if b.tin_backlog == 0 {
            b.time_next_packet = b.time_next_packet.max(now);
            if self.counts.len == 0 {
                if self.time_next_packet < now {
                    self.failsafe_next_packet = now;
                    self.time_next_packet = now;
                } else if self.time_next_packet > now && self.failsafe_next_packet > now {
                    self.overlimits = self.overlimits.wrapping_add(1);
                }
            }
        }
        let truesize = packet.truesize();
        let flow = store.cake.flows.get_mut(idx);
        if let Err(packet) = store.packets.push_back(&mut flow.packets, packet, now) {
            if flow.state.set == FlowSet::None {
                slots(&mut self.flow_index, &mut self.host_index, &mut store.cake).free_queue(idx);
            }
            self.counts.drops += 1;
            return Err(packet);
        }
        flow.len += 1;
        flow.backlog = flow.backlog.saturating_add(len);

        let mut ack_len = 0;
        let redundant = match self.config.ack_filter {
            AckFilter::Off => None,
            filter => ack_filter::redundant(
                &store.packets,
                flow.packets,
                filter == AckFilter::Aggressive,
            ),
        };
        match redundant.and_then(|slot| store.packets.remove(&mut flow.packets, slot)) {
            Some((ack, _)) => {
                ack_len = ack.len_bytes();
                flow.len -= 1;
                flow.backlog -= ack_len;
                self.buffer_used = (self.buffer_used + truesize).saturating_sub(ack.truesize());
                b.ack_drops = b.ack_drops.wrapping_add(1);
                b.bytes += u64::from(ack_len);
                self.counts.drops += 1;
                if self.config.ingress {
                    let charged = self.charged(&ack);
                    self.advance_shaper(tin, charged, now, true);
                    b = &mut self.tins[tin];
                }
                store.dropped.push(ack);
            }
            None => {
                self.counts.len += 1;
                self.buffer_used = self.buffer_used.saturating_add(truesize);
            }
        }
        b.packets = b.packets.wrapping_add(1);
        b.bytes += u64::from(len) - u64::from(ack_len);
        b.tin_backlog = (b.tin_backlog + len) - ack_len;
        self.counts.backlog = (self.counts.backlog + u64::from(len)) - u64::from(ack_len);
        if let Some(a) = &mut self.autorate {
            a.avg_window_bytes += u64::from(len) - u64::from(ack_len);
            if a.estimate(now) {
                self.rate_bps = a.avg_peak_bandwidth.saturating_mul(15) >> 4;
                self.configure_rates();
            }
            b = &mut self.tins[tin];
        }

        // The flow joins the rotation, or moves to bulk if it was waiting there.
        let set = flow.state.set;
        match set {
            FlowSet::None | FlowSet::Decaying => {
                // The quantum reads the queue's hosts, not its set: their load as `cake_hash`
                // left them, which it hands back when it gave the queue its slots. The
                // record is written through the borrow in hand before the tin's lists move
                // it (they touch its links alone).
                let load = if load != 0 {
                    load
                } else {
                    hash::host_load(&store.cake.hosts, &flow.state, mode)
                };
                flow.deficit = super::dithered_quantum(&mut self.random, b.flow_quantum, load);
                flow.state.set = FlowSet::Sparse;
                if set == FlowSet::Decaying {
                    b.decaying_flow_count -= 1;
                    b.decaying_flows.remove(&mut store.cake.flows, idx);
                }
                b.new_flows.push_back(&mut store.cake.flows, idx);
                b.sparse_flow_count += 1;
                self.choice.busied(tin);
            }
            FlowSet::SparseWait => {
                flow.state.set = FlowSet::Bulk;
                b.sparse_flow_count -= 1;
                b.bulk_flow_count += 1;
                slots(&mut self.flow_index, &mut self.host_index, &mut store.cake)
                    .bulk_count(idx, mode, 1);
            }
            FlowSet::Sparse | FlowSet::Bulk => {}
        }

        self.buffer_max_used = self.buffer_max_used.max(self.buffer_used);
        let before = self.counts.len;
        while self.buffer_used > self.buffer_limit && self.counts.len > 0 {
            self.drop_longest(store, now);
        }
        if before != self.counts.len {
            let b = &mut self.tins[tin];
            b.drop_overlimit = b.drop_overlimit.wrapping_add(before - self.counts.len);
        }
        Ok(())
    }

    /// `cake_drop`: the head of the longest queue of any tin goes, and BLUE learns that
    /// queue overflowed.
    pub(super) fn drop_longest<P: Packet>(&mut self, store: &mut LeafStore<P>, now: u64) {
        let flows = &store.cake.flows;
        let Some(idx) = flows
            .records(&self.flow_index)
            .filter(|&i| flows.get(i).len > 0)
            .max_by_key(|&i| {
                (
                    flows.get(i).backlog,
                    core::cmp::Reverse(flows.get(i).bucket),
                )
            })
        else {
            return;
        };
        let tin = (flows.get(idx).bucket / QUEUES) as usize;
        let flow = store.cake.flows.get_mut(idx);
        let Some((packet, _)) = store.packets.pop_front(&mut flow.packets) else {
            return;
        };
        let len = packet.len_bytes();
        flow.len -= 1;
        flow.backlog -= len;
        flow.state.dropped = flow.state.dropped.wrapping_add(1);
        let b = &mut self.tins[tin];
        if flow.state.cvars.queue_full(&b.cparams, now) {
            b.unresponsive_flow_count += 1;
        }
        b.tin_backlog -= len;
        b.tin_dropped = b.tin_dropped.wrapping_add(1);
        self.buffer_used = self.buffer_used.saturating_sub(packet.truesize());
        self.counts.remove(len);
        self.counts.drops += 1;
        if self.config.ingress {
            let charged = self.charged(&packet);
            self.advance_shaper(tin, charged, now, true);
        }
        store.dropped.push(packet);
    }

    /// Frees the oldest decaying queues of each tin once their COBALT state has come to rest,
    /// or has not been touched for a second: the kernel serves decaying queues only while it
    /// has packets, so an idle `cake` would keep them (and their BLUE probability) until its
    /// next packet; freeing them lets an idle leaf hold no records. Bounded work per call.
    fn trim_decaying<P>(&mut self, store: &mut LeafStore<P>, now: u64) {
        // At most once a millisecond: busy leaves free their rested queues in dequeue anyway.
        if now < self.next_trim {
            return;
        }
        self.next_trim = now.saturating_add(TRIM_EVERY_NS);
        if self.decaying_tins == 0 {
            return;
        }
        // In tin order, as a walk over every tin would free them.
        let mut tins = u32::from(self.decaying_tins) & ((1 << self.tins.len()) - 1);
        while tins != 0 {
            let tin = tins.trailing_zeros() as usize;
            tins &= tins - 1;
            for _ in 0..TRIM_PER_CALL {
                let Some(idx) = self.tins[tin].decaying_flows.front() else {
                    break;
                };
                let cvars = store.cake.flows.get(idx).state.cvars;
                let touched = cvars.drop_next.max(cvars.blue_timer);
                if !cvars.at_rest(now) && now < touched.saturating_add(STALE_NS) {
                    break;
                }
                self.tins[tin]
                    .decaying_flows
                    .remove(&mut store.cake.flows, idx);
                self.tins[tin].decaying_flow_count -= 1;
                store.cake.flows.get_mut(idx).state.set = FlowSet::None;
                slots(&mut self.flow_index, &mut self.host_index, &mut store.cake).free_queue(idx);
            }
            if self.tins[tin].decaying_flows.is_empty() {
                self.decaying_tins &= !(1 << tin);
            }
        }
    }
}
