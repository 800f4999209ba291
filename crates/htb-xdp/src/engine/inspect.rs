//! What the engine tells the control plane: counters summed over the workers, classes' and
//! leaves' statistics, its ports, trees and filters, where a frame would go; and the control
//! operations it applies to every worker's copy of the trees.

use std::collections::HashMap;

use htb_classify::Filter;
use htb_core::{ClassId, Scheduler};

use super::Engine;
use crate::dataplane::Dataplane;
use crate::error::PlaneError;
use crate::frame::Frame;
use crate::merge;
use crate::plane_op::{PlaneOp, Retired};
use crate::stats::{EngineStats, PortSnapshot, WorkerStats};
use crate::umem::FrameIo;

impl Engine {
    /// A snapshot of every counter, summed over the workers, with each worker's own.
    #[must_use]
    pub fn stats(&self) -> EngineStats {
        let mut stats = merge::engine_stats(
            self.workers.iter().map(|w| &w.plane),
            self.program.verdicts(),
        );
        stats.jobs = self.jobs_run;
        stats.stall_credit = self.stall_credit;
        stats.split_subtrees = self.fleet.split_count();
        for table in self.workers.iter().filter_map(|w| w.plane.flow_table()) {
            stats
                .flows
                .get_or_insert_with(Default::default)
                .add(&table.counters());
        }
        for (w, worker) in self.workers.iter().enumerate() {
            let plane = &worker.plane;
            stats.sleeps += worker.sleeps;
            stats.workers.push(WorkerStats {
                cpu: worker.cpu,
                loops: plane.loops(),
                sleeps: worker.sleeps,
                queued: plane.queued(),
                subtrees: self.fleet.subtrees(w),
                handoffs: plane.handoffs(),
                stalls: worker.watch.log,
            });
        }
        stats
    }

    /// The scheduler of tree `major` of `port`, worker 0's: with several workers it holds the
    /// top-level classes, the split subtrees and its own subtrees only (each worker holds its
    /// part of a root tree; a tree under `mq` whole).
    #[must_use]
    pub fn scheduler(&self, port: &str, major: u16) -> Option<&Scheduler<Frame>> {
        self.workers.first()?.plane.scheduler(port, major)
    }

    /// The qdisc majors of `port`'s trees, as the data plane has them.
    #[must_use]
    pub fn tree_majors(&self, port: &str) -> Vec<u16> {
        self.workers
            .first()
            .map(|w| w.plane.tree_majors(port))
            .unwrap_or_default()
    }

    /// Names of the ports, in configuration order.
    #[must_use]
    pub fn port_names(&self) -> Vec<String> {
        self.workers
            .first()
            .map(|w| w.plane.port_names())
            .unwrap_or_default()
    }

    /// The filters of `port`, in evaluation order (a copy: the classifier holds them compact).
    #[must_use]
    pub fn filters(&self, port: &str) -> Option<Vec<Filter>> {
        self.workers.first()?.plane.filters(port)
    }

    /// Applies `ops` in order, between two batches (run it through [`EngineHandle::execute`](crate::EngineHandle::execute)):
    /// no packet is received or sent while they apply, so a batch of changes is atomic for
    /// the traffic. A class operation goes to the workers holding its class (a subtree one
    /// worker owns is on it alone), the others to every worker, in op order. Frames the changes
    /// purge go back to the pool. Returns, per op, the packets it dropped or why it failed
    /// (the control plane validates first, so a failure is a bug); the first failure ends the
    /// batch: no worker applies the later operations. (A class the batch moves between
    /// workers that a worker refuses fails the op that moved it, once the batch is applied:
    /// the ops after it stay applied.) Also returns what the ops replaced, to be
    /// dropped off the data-plane thread.
    pub fn apply(&mut self, ops: Vec<PlaneOp>) -> (Vec<Result<u64, PlaneError>>, Retired) {
        let now = self.now();
        let mut planes: Vec<&mut Dataplane<FrameIo>> =
            self.workers.iter_mut().map(|w| &mut w.plane).collect();
        self.fleet.apply(&mut planes, now, ops)
    }

    /// Statistics of the listed classes of `port` (`None` for ids it does not have) and of
    /// their leaf qdiscs, with the port's scheduler-wide statistics and counters: summed over
    /// the workers (a class's buckets and mode are its owner's).
    #[must_use]
    pub fn class_stats(&self, port: &str, ids: &[ClassId]) -> Option<PortSnapshot> {
        let snapshots: Option<Vec<PortSnapshot>> = self
            .workers
            .iter()
            .map(|w| w.plane.class_stats(port, ids))
            .collect();
        Some(merge::snapshots(snapshots?))
    }

    /// Where `port` sends `frame` ([`crate::explain`]), by the classifier its workers run (one
    /// compiled copy, shared). `None`: no such port.
    #[must_use]
    pub fn explain(&self, port: &str, frame: &[u8]) -> Option<crate::explain::Classified> {
        self.workers.first()?.plane.explain(port, frame)
    }

    /// Which queue of `class`'s leaf on `port` `frame`'s flow joins (fq_codel's or sfq's flow
    /// bucket; `None` for a leaf with one queue, or cake). Every worker hashes with one key,
    /// so the first worker holding the class answers for all (a class of an owned subtree is
    /// its owner's alone); sfq re-keys each instance, so for a split class, its answer is the
    /// first worker's instance's.
    #[must_use]
    pub fn leaf_queue(&self, port: &str, class: ClassId, frame: &[u8]) -> Option<u32> {
        self.workers
            .iter()
            .find_map(|w| w.plane.leaf_queue(port, class, frame))
    }

    /// Which worker serves each subtree of `port` that one worker serves, by the class at its
    /// top ([`split_subtrees`](Self::split_subtrees) are every worker's).
    #[must_use]
    pub fn subtree_owners(&self, port: &str) -> HashMap<ClassId, usize> {
        let Some(worker) = self.workers.first() else {
            return HashMap::new();
        };
        worker.plane.owners(port)
    }

    /// The subtrees of `port` served by every worker at once (split: each worker queues the
    /// frames it received), by the class at their top.
    #[must_use]
    pub fn split_subtrees(&self, port: &str) -> Vec<ClassId> {
        self.workers
            .first()
            .and_then(|w| w.plane.port_index(port))
            .map(|i| self.fleet.split_subtrees(i))
            .unwrap_or_default()
    }
}
