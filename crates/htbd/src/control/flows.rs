//! `htb-cli flows`: the flow records the data plane keeps now ([`htb_xdp::flow_table`]),
//! filtered and copied in a job between two packet batches, sorted here.

use htb_ipc::{ErrorCode, FlowEntry, FlowList, FlowStatus, FlowsQuery, IpcError};
use htb_xdp::flow_table::FlowRecord;

use super::Control;

/// The most flows one answer lists.
const MAX_TOP: usize = 10_000;

/// Places of the flow tables one data-plane job lists (per worker: 16 384 places read, the
/// live ones' records copied when they match, at most `top` kept).
const FLOWS_PER_JOB: usize = 16_384;

impl Control {
    pub(super) async fn flows(&self, ask: &FlowsQuery) -> Result<FlowList, IpcError> {
        let Some(flows) = &self.flows else {
            return Err(IpcError::new(
                ErrorCode::Invalid,
                "htbd keeps no flow records: add a [flows] section to its config",
            ));
        };
        let sampling = flows.config.table.sampling;
        let port = ask
            .dev
            .as_deref()
            .map(|dev| self.model.port_index(dev))
            .transpose()?
            .and_then(|p| u16::try_from(p).ok());
        let class = ask.class;
        // A reply holds at most this many, whatever was asked (as the console's API).
        let top = (ask.top as usize).min(MAX_TOP);
        let keep = move |r: &FlowRecord| {
            port.is_none_or(|p| r.key.egress == p) && class.is_none_or(|c| r.class == Some(c))
        };
        // A range of places per job (each job copies at most `top` records), so that listing
        // a table of a million records never holds forwarding up for long.
        let (places, now) = self
            .on_engine(|engine| (engine.flow_places(), engine.now().as_nanos()))
            .await?;
        let (mut records, mut matched) = (Vec::new(), 0);
        for start in (0..places).step_by(FLOWS_PER_JOB) {
            let (found, n) = self
                .on_engine(move |engine| engine.flows_in(start..start + FLOWS_PER_JOB, keep, top))
                .await?;
            matched += n;
            records.extend(found);
            if records.len() > top {
                records.select_nth_unstable_by(top, |a, b| b.bytes.cmp(&a.bytes));
                records.truncate(top);
            }
        }
        records.sort_unstable_by(|a, b| b.bytes.cmp(&a.bytes).then(b.packets.cmp(&a.packets)));
        // The data plane's port indices are the model's (both list the config's interfaces in
        // its order); a record whose port were not would name no interface and is left out.
        let name = |p: u16| {
            self.model
                .ports
                .get(usize::from(p))
                .map(|port| port.name.clone())
        };
        let ms = |ns: u64| ns / 1_000_000;
        let flows = records
            .iter()
            .filter_map(|r| {
                Some(FlowEntry {
                    src: r.key.src,
                    dst: r.key.dst,
                    proto: r.key.proto,
                    sport: r.key.sport,
                    dport: r.key.dport,
                    vlan: r.key.vlan,
                    ingress: name(r.key.ingress)?,
                    egress: name(r.key.egress)?,
                    class: r.class,
                    bytes: r.bytes,
                    packets: r.packets,
                    age_ms: ms(now.saturating_sub(r.first_ns)),
                    idle_ms: ms(now.saturating_sub(r.last_ns)),
                    tcp_flags: r.tcp_flags,
                    rtt_min_us: r.rtt_min_ns.map(|n| n / 1000),
                    rtt_median_us: r.rtt_median_ns.map(|n| n / 1000),
                    retransmits: r.retransmits,
                    leaf_drops: r.leaf_drops,
                })
            })
            .collect();
        Ok(FlowList {
            flows,
            matched,
            sampling,
        })
    }

    /// The exporter's side of the flow status (`table`: the data plane's counters).
    pub(super) fn flow_status(&self, table: Option<Box<FlowStatus>>) -> Option<Box<FlowStatus>> {
        let flows = self.flows.as_ref()?;
        let table = table.map(|t| *t).unwrap_or_default();
        let c = &flows.counters;
        Some(Box::new(FlowStatus {
            // The table as made: the configured size rounded up to a power of two.
            entries: flows.config.table.entries.max(16).next_power_of_two() as u64,
            memory_bytes: (flows.config.table.memory_bytes() * self.engine.workers()) as u64,
            collector: flows.config.ipfix.map(|i| i.collector.to_string()),
            exported: c.records.load(std::sync::atomic::Ordering::Relaxed),
            messages: c.messages.load(std::sync::atomic::Ordering::Relaxed),
            send_errors: c.send_errors.load(std::sync::atomic::Ordering::Relaxed),
            ..table
        }))
    }
}
