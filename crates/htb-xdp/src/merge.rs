//! The workers' counters as one data plane's: what `htb-cli` and the metrics show.
//!
//! A subtree one worker owns is on that worker only (the others say `None` for its classes),
//! so its counters are its owner's; a class at the top of the tree is on every worker and
//! counts what each sent through it. A split subtree's packets go through every worker's copy:
//! what each sent, dropped and holds (backlog, queue length) adds up to the class's. Counters are summed, each type by its own `add` (which names
//! every field, so that a new counter cannot be left out of the sum); a class's buckets, mode
//! and leaf details (fq_codel's flows) are those of one worker holding it: a copy with children
//! first (the class's level), then the worker that sent the most through it.

use htb_core::{ClassStats, LeafStats};

use crate::dataplane::Dataplane;
use crate::program::Verdicts;
use crate::rings::{FrameCounts, Rings};
use crate::stats::{EngineStats, PortSnapshot, PortStats, XdpCounters};
use crate::umem::FrameIo;

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
                ports[io.channel_port(channel)].xdp.add(&XdpCounters {
                    rx_dropped: s.rx_dropped(),
                    rx_ring_full: s.rx_ring_full(),
                    rx_fill_ring_empty: s.rx_fill_ring_empty_descs(),
                    rx_invalid: s.rx_invalid_descs(),
                    tx_invalid: s.tx_invalid_descs(),
                });
            }
        }
        if stats.ports.is_empty() {
            stats.ports = ports;
        } else {
            for (total, port) in stats.ports.iter_mut().zip(&ports) {
                total.add(port);
            }
        }
        frames.add(&plane.frames());
        stats.queued += plane.queued();
        stats.loops += plane.loops();
    }
    stats.frames = frames.with_between_workers();
    stats
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
                total.add(s);
            }
        }
        merged.port.add(&other.port);
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
        // Among the workers holding the class (a subtree one worker owns is on that worker
        // only), one speaks for its state: a copy with children first (a top-level class's
        // copy on a worker holding none of its subtrees has no children there and looks like
        // a leaf), then the one that sent the most through it, then the first.
        let speaker = (0..classes.len())
            .rev()
            .filter_map(|w| classes[w].map(|c| (w, c)))
            .max_by_key(|(_, c)| (c.level, c.queue.bytes));
        let Some((speaker, speaking)) = speaker else {
            continue;
        };
        let mut class = speaking.without_counters();
        for c in classes.iter().flatten() {
            class.add_counters(c);
        }
        merged.classes[i] = Some(class);
        // The speaker's leaf, with every copy's counts: none for an inner class.
        let leaf = leaves[speaker].clone().map(|speaking| {
            let mut leaf = speaking.without_counts();
            for l in leaves.iter().flatten() {
                leaf.add_counts(l);
            }
            leaf
        });
        if let Some(slot) = merged.leaves.get_mut(i) {
            *slot = leaf;
        }
    }
    merged
}
