//! `cake`'s statistics as `tc -s qdisc show` reads them (`TCA_CAKE_STATS_*`,
//! `TCA_CAKE_TIN_STATS_*` in `cake_dump_stats`).

use alloc::vec::Vec;

use super::{Cake, tins};
use crate::rate::Rate;
use crate::time::Duration;

/// One tin's statistics, as `tc -s qdisc show` prints them (`TCA_CAKE_TIN_STATS_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CakeTinStats {
    /// The tin's threshold rate (`thresh`).
    pub threshold_rate: Rate,
    /// Bytes sent (and ACKs filtered).
    pub sent_bytes: u64,
    /// Bytes queued.
    pub backlog_bytes: u32,
    /// COBALT's target.
    pub target: Duration,
    /// COBALT's interval.
    pub interval: Duration,
    /// Delay EWMAs: peak, average, base (`pk_delay`, `av_delay`, `sp_delay`).
    pub peak_delay: Duration,
    /// Average delay.
    pub avg_delay: Duration,
    /// Base (sparse) delay.
    pub base_delay: Duration,
    /// Packets sent.
    pub sent_packets: u32,
    /// Set-associative lookups that found the flow in another way (`way_inds`).
    pub way_indirect_hits: u32,
    /// Lookups that took a free way (`way_miss`).
    pub way_misses: u32,
    /// Lookups that found every way taken (`way_cols`).
    pub way_collisions: u32,
    /// Packets dropped (AQM and overflow).
    pub drops: u32,
    /// Packets CE-marked.
    pub ecn_marks: u32,
    /// ACKs the filter dropped.
    pub ack_drops: u32,
    /// Sparse flows (and decaying ones).
    pub sparse_flows: u32,
    /// Bulk flows.
    pub bulk_flows: u32,
    /// Flows BLUE is dropping from.
    pub unresponsive_flows: u32,
    /// Largest packet seen.
    pub max_pkt_len: u32,
    /// DRR quantum of one flow.
    pub flow_quantum: u32,
}

/// `cake`'s statistics (`TCA_CAKE_STATS_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CakeStats {
    /// Most buffer bytes held at once (`memory used`).
    pub memory_used: u32,
    /// The buffer's byte limit.
    pub memory_limit: u32,
    /// `autorate-ingress`'s estimate (the bandwidth otherwise).
    pub capacity_estimate: Rate,
    /// Smallest and largest network-layer length seen (65535 / 0 before any).
    pub min_network_size: u32,
    /// Largest network-layer length.
    pub max_network_size: u32,
    /// Smallest and largest length charged after overhead compensation.
    pub min_adj_size: u32,
    /// Largest compensated length.
    pub max_adj_size: u32,
    /// Average network header offset.
    pub avg_hdr_offset: u32,
    /// Times the shaper held packets back (the qdisc's `overlimits`).
    pub overlimits: u32,
    /// The tins, in tc's order (Bulk first for diffserv3 and diffserv4).
    pub tins: Vec<CakeTinStats>,
}

impl Cake {
    /// Statistics, tins in tc's order.
    pub(crate) fn stats(&self) -> CakeStats {
        let order = tins::order(self.config.diffserv);
        let tins = order
            .iter()
            .take(self.tins.len())
            .map(|&t| {
                let b = &self.tins[usize::from(t)];
                CakeTinStats {
                    threshold_rate: Rate::from_bytes_per_sec(b.rate.bytes_per_sec),
                    sent_bytes: b.bytes,
                    backlog_bytes: b.tin_backlog,
                    target: Duration::from_nanos(b.cparams.target),
                    interval: Duration::from_nanos(b.cparams.interval),
                    peak_delay: Duration::from_nanos(b.peak_delay),
                    avg_delay: Duration::from_nanos(b.avge_delay),
                    base_delay: Duration::from_nanos(b.base_delay),
                    sent_packets: b.packets,
                    way_indirect_hits: b.way_hits,
                    way_misses: b.way_misses,
                    way_collisions: b.way_collisions,
                    drops: b.tin_dropped,
                    ecn_marks: b.tin_ecn_mark,
                    ack_drops: b.ack_drops,
                    sparse_flows: u32::from(b.sparse_flow_count + b.decaying_flow_count),
                    bulk_flows: u32::from(b.bulk_flow_count),
                    unresponsive_flows: u32::from(b.unresponsive_flow_count),
                    max_pkt_len: b.max_skblen,
                    flow_quantum: u32::from(b.flow_quantum),
                }
            })
            .collect();
        CakeStats {
            memory_used: self.buffer_max_used,
            memory_limit: self.buffer_limit,
            capacity_estimate: Rate::from_bytes_per_sec(
                self.autorate
                    .as_ref()
                    .map_or(self.rate_bps, |a| a.avg_peak_bandwidth),
            ),
            min_network_size: u32::from(self.min_netlen),
            max_network_size: u32::from(self.max_netlen),
            min_adj_size: u32::from(self.min_adjlen),
            max_adj_size: u32::from(self.max_adjlen),
            avg_hdr_offset: (self.avg_netoff + 0x8000) >> 16,
            overlimits: self.overlimits,
            tins,
        }
    }
}
