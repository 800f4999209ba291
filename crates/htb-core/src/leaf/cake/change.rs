//! `cake_change` and `cake_reset`: new parameters for a running instance (tins beyond the new
//! count cleared, rates and limits at once, host counts redone for a new flow mode), and every
//! packet out.

use alloc::vec::Vec;

use super::choose::TinChoice;
use super::hash::{FlowSet, QUEUES};
use super::tins::Tin;
use super::{Cake, CakeConfig, slots};
use crate::Packet;
use crate::leaf::LeafStore;
use crate::leaf::flows::ListTag;

impl Cake {
    /// Frees every queue of tins from `first` on: their packets through `out`.
    pub(super) fn clear_tins<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        first: usize,
        out: &mut impl FnMut(P),
    ) {
        let doomed: Vec<u32> = store
            .cake
            .flows
            .records(&self.flow_index)
            .filter(|&i| (store.cake.flows.get(i).bucket / QUEUES) as usize >= first)
            .collect();
        for idx in doomed {
            let tin = (store.cake.flows.get(idx).bucket / QUEUES) as usize;
            let flow = store.cake.flows.get_mut(idx);
            while let Some((packet, _)) = store.packets.pop_front(&mut flow.packets) {
                self.counts.remove(packet.len_bytes());
                self.buffer_used = self.buffer_used.saturating_sub(packet.truesize());
                out(packet);
            }
            flow.len = 0;
            flow.backlog = 0;
            if flow.state.set == FlowSet::Bulk {
                let mode = self.config.flow_mode;
                slots(&mut self.flow_index, &mut self.host_index, &mut store.cake)
                    .bulk_count(idx, mode, -1);
            }
            store.cake.flows.get_mut(idx).state.set = FlowSet::None;
            self.move_to(&mut store.cake.flows, tin, idx, ListTag::Unlinked);
            slots(&mut self.flow_index, &mut self.host_index, &mut store.cake).free_queue(idx);
        }
        for b in self.tins.iter_mut().skip(first) {
            b.tin_backlog = 0;
            b.sparse_flow_count = 0;
            b.bulk_flow_count = 0;
            b.decaying_flow_count = 0;
            b.unresponsive_flow_count = 0;
        }
        for t in first..self.tins.len() {
            self.choice.note(&self.tins, t);
        }
    }

    /// `cake_reset`: every packet out through `out`, every queue freed.
    pub(crate) fn purge<P: Packet>(&mut self, store: &mut LeafStore<P>, out: &mut impl FnMut(P)) {
        self.clear_tins(store, 0, out);
        self.buffer_used = 0;
    }

    /// `cake_change` with resolved parameters: tins beyond the new count lose their packets
    /// (to the drop list, as `cake_clear_tin` frees them); rates and limits follow at once.
    pub(crate) fn reconfigure<P: Packet>(
        &mut self,
        store: &mut LeafStore<P>,
        config: CakeConfig,
        now: u64,
    ) {
        let old = self.config;
        let count = config.tins();
        if count < self.tins.len() {
            // Under the old parameters: their flow mode says which host slots count.
            let mut dropped = Vec::new();
            self.clear_tins(store, count, &mut |p| dropped.push(p));
            self.counts.drops += dropped.len() as u64;
            store.dropped.extend(dropped);
            self.tins.truncate(count);
        } else {
            self.tins.resize_with(count, Tin::new);
        }
        self.config = config;
        if config.bandwidth != old.bandwidth {
            self.rate_bps = config.bandwidth.bytes_per_sec();
        }
        self.set_autorate();
        if config.flow_mode != old.flow_mode {
            self.recount_hosts(store);
        }
        self.choice = TinChoice::new(&self.tins);
        self.configure_rates();
        while self.buffer_used > self.buffer_limit && self.counts.len > 0 {
            self.drop_longest(store, now);
        }
    }

    /// Counts each host slot's bulk queues afresh, as the flow mode now says which slots count
    /// (the kernel keeps the old counts, which a mode change leaves wrong until they drain).
    pub(super) fn recount_hosts<P>(&mut self, store: &mut LeafStore<P>) {
        let hosts: Vec<u32> = store.cake.hosts.records(&self.host_index).collect();
        for slot in hosts {
            store.cake.hosts.get_mut(slot).state.bulk = 0;
        }
        let bulk: Vec<u32> = store
            .cake
            .flows
            .records(&self.flow_index)
            .filter(|&i| store.cake.flows.get(i).state.set == FlowSet::Bulk)
            .collect();
        let mode = self.config.flow_mode;
        for idx in bulk {
            slots(&mut self.flow_index, &mut self.host_index, &mut store.cake)
                .bulk_count(idx, mode, 1);
        }
    }
}
