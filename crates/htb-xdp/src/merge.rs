//! The workers' counters as one data plane's: what `htb-cli` and the metrics show.
//!
//! Every worker holds a copy of every class; a subtree's packets go through its owner only,
//! so its counters are (nearly) all the owner's, and a class at the top of the tree counts what
//! each worker sent through it. Counters are summed; a class's buckets, mode and leaf details
//! (fq_codel's flows) are those of the worker that sent the most through it.

use htb_core::{ClassStats, LeafStats, QueueCounters, SchedulerStats};

use crate::dataplane::Dataplane;
use crate::program::Verdicts;
use crate::rings::{FrameCounts, Rings};
use crate::stats::{EngineStats, PortSnapshot, PortStats};
use crate::umem::FrameIo;

/// Adds each named counter of `from` to the same counter of `total`.
macro_rules! add_counters {
    ($total:expr, $from:expr; $($counter:ident),+ $(,)?) => {
        $($total.$counter += $from.$counter;)+
    };
}

/// Every port's counters, the frames and the passes, summed over the workers' planes.
pub(crate) fn engine_stats<'a>(
    planes: impl Iterator<Item = &'a Dataplane<FrameIo>>,
    verdicts: Verdicts,
) -> EngineStats {
    let mut stats = EngineStats {
        verdicts,
        ..EngineStats::default()
    };
    let mut frames = FrameCounts::default();
    for plane in planes {
        let mut ports = plane.port_stats();
        let io = plane.rings();
        for channel in 0..io.channels() {
            if let Ok(s) = io.xdp_statistics(channel) {
                let x = &mut ports[io.channel_port(channel)].xdp;
                x.rx_dropped += s.rx_dropped();
                x.rx_ring_full += s.rx_ring_full();
                x.rx_fill_ring_empty += s.rx_fill_ring_empty_descs();
                x.rx_invalid += s.rx_invalid_descs();
                x.tx_invalid += s.tx_invalid_descs();
            }
        }
        if stats.ports.is_empty() {
            stats.ports = ports;
        } else {
            for (total, port) in stats.ports.iter_mut().zip(&ports) {
                add_port(total, port);
            }
        }
        let f = plane.frames();
        add_counters!(frames, f; total, free, in_fill, in_tx, with_caller, packets_held);
        stats.queued += plane.queued();
        stats.loops += plane.loops();
    }
    frames.between_workers =
        frames.total - frames.free - frames.in_fill - frames.in_tx - frames.with_caller;
    stats.frames = frames;
    stats
}

fn add_port(total: &mut PortStats, port: &PortStats) {
    add_counters!(
        total, port;
        rx_packets, rx_bytes, tx_packets, tx_bytes, drops_queue, drops_no_egress, drops_pool,
        drops_police, drops_purged,
    );
    let (t, x) = (&mut total.xdp, &port.xdp);
    add_counters!(t, x; rx_dropped, rx_ring_full, rx_fill_ring_empty, rx_invalid, tx_invalid);
}

fn add_scheduler(total: &mut SchedulerStats, s: &SchedulerStats) {
    add_counters!(
        total, s;
        qlen, backlog_bytes, direct_qlen, direct_packets, direct_packets_sent, direct_bytes_sent,
        direct_drops, packets_sent, bytes_sent, drops, overlimits, events, event_budget_exhausted,
        internal_faults,
    );
}

/// One port's snapshots from every worker (same classes, same order) as one.
pub(crate) fn snapshots(all: Vec<PortSnapshot>) -> PortSnapshot {
    let mut rest = all.into_iter();
    let Some(mut merged) = rest.next() else {
        return PortSnapshot {
            schedulers: Vec::new(),
            port: PortStats::default(),
            classes: Vec::new(),
            leaves: Vec::new(),
            rtt: Vec::new(),
        };
    };
    let others: Vec<PortSnapshot> = rest.collect();
    if others.is_empty() {
        return merged;
    }
    for other in &others {
        for (major, s) in &other.schedulers {
            if let Some((_, total)) = merged.schedulers.iter_mut().find(|(m, _)| m == major) {
                add_scheduler(total, s);
            }
        }
        add_port(&mut merged.port, &other.port);
    }
    // Round trips: every worker's samples of the class together.
    for other in &others {
        for (total, rtt) in merged.rtt.iter_mut().zip(&other.rtt) {
            match (total.as_mut(), rtt) {
                (Some(t), Some(r)) => t.merge(r),
                (None, Some(r)) => *total = Some(r.clone()),
                _ => {}
            }
        }
    }
    for i in 0..merged.classes.len() {
        let classes: Vec<Option<ClassStats>> = std::iter::once(&merged)
            .chain(&others)
            .map(|s| s.classes.get(i).copied().flatten())
            .collect();
        let leaves: Vec<Option<LeafStats>> = std::iter::once(&merged)
            .chain(&others)
            .map(|s| s.leaves.get(i).cloned().flatten())
            .collect();
        // The worker that sent the most through the class speaks for its state (the first
        // such: worker 0 for an idle class).
        let speaker = (0..classes.len())
            .rev()
            .max_by_key(|&w| classes[w].map_or(0, |c| c.queue.bytes))
            .unwrap_or(0);
        let Some(mut class) = classes[speaker] else {
            continue;
        };
        class.queue = QueueCounters::default();
        class.lends = 0;
        class.borrows = 0;
        for c in classes.iter().flatten() {
            add_class(&mut class, c);
        }
        merged.classes[i] = Some(class);
        if let Some(mut leaf) = leaves[speaker].clone() {
            leaf.qlen = 0;
            leaf.backlog = 0;
            leaf.drops = 0;
            for l in leaves.iter().flatten() {
                add_leaf(&mut leaf, l);
            }
            if let Some(slot) = merged.leaves.get_mut(i) {
                *slot = Some(leaf);
            }
        }
    }
    merged
}

fn add_class(total: &mut ClassStats, c: &ClassStats) {
    total.queue.add(&c.queue);
    add_counters!(total, c; lends, borrows);
}

fn add_leaf(total: &mut LeafStats, l: &LeafStats) {
    add_counters!(total, l; qlen, backlog, drops);
}
