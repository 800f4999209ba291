//! The data plane's counters as the control socket sends them (`htb-cli status`).

use htb_ipc::{FrameStatus, PortStatus, Status, WorkerStatus, XdpVerdicts};
use htb_xdp::EngineStats;

use crate::model::PortModel;

/// `stats` on the wire, each port by the name the model has for it (the data plane's ports are
/// the model's, in the config's order; one the model does not name is left out).
pub(crate) fn status(stats: &EngineStats, names: &[PortModel]) -> Status {
    let f = stats.frames;
    let v = stats.verdicts;
    Status {
        daemon: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        frames: FrameStatus {
            total: f.total,
            free: f.free,
            in_fill: f.in_fill,
            in_tx: f.in_tx,
            held: f.with_caller,
            queued: stats.queued,
            between_workers: f.between_workers,
        },
        ports: stats
            .ports
            .iter()
            .filter_map(|p| {
                let dev = names.iter().find(|m| m.name == p.name)?.name.clone();
                Some(PortStatus {
                    dev,
                    rx_packets: p.rx_packets,
                    rx_bytes: p.rx_bytes,
                    tx_packets: p.tx_packets,
                    tx_bytes: p.tx_bytes,
                    drops_queue: p.drops_queue,
                    drops_pool: p.drops_pool,
                    drops_police: p.drops_police,
                    drops_no_egress: p.drops_no_egress,
                    drops_purged: p.drops_purged,
                    kernel_rx_ring_full: p.xdp.rx_ring_full,
                    kernel_fill_ring_empty: p.xdp.rx_fill_ring_empty,
                    kernel_rx_dropped: p.xdp.rx_dropped,
                    kernel_invalid: p.xdp.rx_invalid + p.xdp.tx_invalid,
                })
            })
            .collect(),
        xdp: XdpVerdicts {
            redirected: v.redirected,
            pass_not_ip: v.pass_not_ip,
            pass_malformed: v.pass_malformed,
            pass_ttl: v.pass_ttl,
            pass_fib: v.pass_fib,
            pass_no_neigh: v.pass_no_neigh,
            pass_unmanaged: v.pass_unmanaged,
            pass_not_port: v.pass_not_port,
            pass_no_socket: v.pass_no_socket,
            pass_not_ours: v.pass_not_ours,
            pass_stale: v.pass_stale,
            pass_ip_options: v.pass_ip_options,
            pass_too_big: v.pass_too_big,
        },
        loops: stats.loops,
        sleeps: stats.sleeps,
        jobs: stats.jobs.count,
        jobs_us: stats.jobs.total_ns / 1000,
        longest_job_us: stats.jobs.longest_ns / 1000,
        longest_job_cpu_us: stats.jobs.longest_cpu_ns / 1000,
        slowest_jobs: stats
            .jobs
            .slowest()
            .map(|j| htb_ipc::JobSpan {
                started_ns: j.started_ns,
                took_us: j.took_ns / 1000,
                cpu_us: j.cpu_ns / 1000,
                cpu: j.cpu,
            })
            .collect(),
        workers: stats
            .workers
            .iter()
            .map(|w| WorkerStatus {
                cpu: w.cpu.and_then(|c| u32::try_from(c).ok()),
                loops: w.loops,
                sleeps: w.sleeps,
                queued: w.queued,
                subtrees: w.subtrees,
                handed_out: w.handoffs.handed_out,
                taken_in: w.handoffs.taken_in,
                handoff_drops: w.handoffs.dropped,
                stalls: w.stalls,
            })
            .collect(),
        split_subtrees: stats.split_subtrees,
        stall_credit_us: stats.stall_credit.map_or(0, |c| c.as_nanos() / 1000),
        flows: flow_status(stats),
        generation: None,
    }
}

/// The flow tables' counters on the wire (the exporter's are the control task's to add).
pub(crate) fn flow_status(stats: &EngineStats) -> Option<Box<htb_ipc::FlowStatus>> {
    stats.flows.map(|f| {
        Box::new(htb_ipc::FlowStatus {
            live: f.live,
            started: f.started,
            ended: f.exported,
            evicted: f.evicted,
            ring_drops: f.export_drops,
            ..htb_ipc::FlowStatus::default()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_carries_every_verdict_under_its_own_name() {
        // The engine's counts and the wire's are two structs (the wire must not pull the
        // engine into htb-cli): the same fields, in the same order, each value where it was.
        let verdicts = htb_xdp::Verdicts::from_sums(std::array::from_fn(|i| 100 + i as u64));
        let stats = EngineStats {
            verdicts,
            ..EngineStats::default()
        };
        let engine = format!("{verdicts:?}").replacen("Verdicts", "", 1);
        let wire = format!("{:?}", status(&stats, &[]).xdp).replacen("XdpVerdicts", "", 1);
        assert_eq!(engine, wire);
    }
}
