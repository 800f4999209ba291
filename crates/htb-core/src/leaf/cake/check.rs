//! The invariants of one `cake` instance, which the property tests check after every step:
//! its counts against its queues, lists and host slots.

use alloc::format;
use alloc::vec::Vec;

use super::Cake;
use super::hash::{FlowSet, NO_HOST, QUEUES};
use crate::leaf::LeafStore;
use crate::leaf::flows::ListTag;
use crate::{CheckError, Packet};

impl Cake {
    /// Verifies counts against the queues, lists and host slots; returns the records held.
    pub(crate) fn check<P: Packet>(&self, store: &LeafStore<P>) -> Result<usize, CheckError> {
        let flows = &store.cake.flows;
        let mode = self.config.flow_mode;
        let (mut len, mut bytes) = (0u32, 0u64);
        let mut per_tin = Vec::new();
        per_tin.resize(self.tins.len(), [0u32; 4]); // sparse, bulk, decaying, backlog
        let mut refs: Vec<(u32, u16, u16)> = Vec::new(); // (host slot, refs, bulk)
        let mut records = 0usize;
        for idx in flows.records(&self.flow_index) {
            records += 1;
            let f = flows.get(idx);
            let tin = (f.bucket / QUEUES) as usize;
            let Some(counts) = per_tin.get_mut(tin) else {
                return Err(CheckError(format!(
                    "cake queue {idx} in tin {tin} of {}",
                    self.tins.len()
                )));
            };
            let (n, b) = crate::leaf::count_list(&store.packets, f.packets);
            if (n, b) != (f.len, u64::from(f.backlog)) {
                return Err(CheckError(format!(
                    "cake queue {idx} holds {n} packets / {b} B, says {} / {}",
                    f.len, f.backlog
                )));
            }
            len += n;
            bytes += b;
            counts[3] += f.backlog;
            let expected_list = match f.state.set {
                FlowSet::Sparse => {
                    counts[0] += 1;
                    None
                }
                FlowSet::SparseWait => {
                    counts[0] += 1;
                    Some(ListTag::Old)
                }
                FlowSet::Bulk => {
                    counts[1] += 1;
                    Some(ListTag::Old)
                }
                FlowSet::Decaying => {
                    counts[2] += 1;
                    Some(ListTag::Dormant)
                }
                FlowSet::None => {
                    return Err(CheckError(format!(
                        "cake queue {idx} is kept but not in use"
                    )));
                }
            };
            let on = f.list;
            if on == ListTag::Unlinked
                || expected_list.is_some_and(|l| l != on)
                || (f.state.set == FlowSet::Decaying && n > 0)
            {
                return Err(CheckError(format!(
                    "cake queue {idx} ({:?}) is on {on:?} holding {n} packets",
                    f.state.set
                )));
            }
            let counted = [mode.dual_src(), mode.dual_dst()];
            for (slot, counted) in [f.state.srchost, f.state.dsthost].into_iter().zip(counted) {
                if slot == NO_HOST {
                    continue;
                }
                let bulk = u16::from(counted && f.state.set == FlowSet::Bulk);
                match refs.iter_mut().find(|(s, _, _)| *s == slot) {
                    Some(r) => {
                        r.1 += 1;
                        r.2 += bulk;
                    }
                    None => refs.push((slot, 1, bulk)),
                }
            }
        }
        for (t, b) in self.tins.iter().enumerate() {
            if !b.decaying_flows.is_empty() && self.decaying_tins >> t & 1 == 0 {
                return Err(CheckError(format!(
                    "cake tin {t} holds decaying queues its leaf does not note"
                )));
            }
            let c = per_tin[t];
            let listed = b.new_flows.len() + b.old_flows.len() + b.decaying_flows.len();
            let counted = [
                u32::from(b.sparse_flow_count),
                u32::from(b.bulk_flow_count),
                u32::from(b.decaying_flow_count),
                b.tin_backlog,
            ];
            if counted != c || listed != c[0] + c[1] + c[2] {
                return Err(CheckError(format!(
                    "cake tin {t} counts {counted:?} on {listed} listed, queues say {c:?}"
                )));
            }
        }
        self.choice.check(&self.tins)?;
        if (len, bytes) != (self.counts.len, self.counts.backlog) {
            return Err(CheckError(format!(
                "cake queues hold {len} packets / {bytes} B, counters say {} / {}",
                self.counts.len, self.counts.backlog
            )));
        }
        let hosts = &store.cake.hosts;
        let mut host_records = 0;
        for slot in hosts.records(&self.host_index) {
            host_records += 1;
            let h = hosts.get(slot).state;
            let (r, bulk) = refs
                .iter()
                .find(|(s, _, _)| *s == slot)
                .map_or((0, 0), |&(_, r, b)| (r, b));
            let counted_bulk = bulk.min(QUEUES as u16);
            if h.refs != r || h.refs == 0 || h.bulk != counted_bulk {
                return Err(CheckError(format!(
                    "cake host slot {slot}: refs {} bulk {}, queues say {r} / {counted_bulk}",
                    h.refs, h.bulk
                )));
            }
        }
        if host_records != refs.len() {
            return Err(CheckError(format!(
                "cake holds {host_records} host slots, its queues name {}",
                refs.len()
            )));
        }
        if flows.check_leaf(&self.flow_index)? != records {
            return Err(CheckError(
                "cake's flow chain does not match its walk".into(),
            ));
        }
        hosts.check_leaf(&self.host_index)?;
        Ok(records + host_records)
    }
}
