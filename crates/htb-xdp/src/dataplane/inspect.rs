//! What the data plane tells the control plane: counters, statistics of classes and leaves,
//! its ports and trees, and where a frame would go (`htb-cli explain`).

use htb_classify::Filter;
use htb_core::{ClassId, Scheduler};

use super::Dataplane;
use super::port::{Port, Tree};
use crate::crew::HandoffCounts;
use crate::frame::Frame;
use crate::parse::parse;
use crate::rings::{FrameCounts, Rings};
use crate::stats::{PortSnapshot, PortStats};

impl<R: Rings> Dataplane<R> {
    /// Frames queued in the schedulers.
    #[must_use]
    pub(crate) fn queued(&self) -> u64 {
        self.ports
            .iter()
            .flat_map(Port::schedulers)
            .map(Scheduler::len)
            .sum()
    }

    /// Where the UMEM's frames are.
    #[must_use]
    pub(crate) fn frames(&self) -> FrameCounts {
        self.rings.counts()
    }

    /// Passes so far.
    #[must_use]
    pub(crate) fn loops(&self) -> u64 {
        self.loops
    }

    /// Every port's counters, in configuration order.
    #[must_use]
    pub(crate) fn port_stats(&self) -> Vec<PortStats> {
        self.ports.iter().map(|p| p.stats.clone()).collect()
    }

    pub(super) fn port(&self, name: &str) -> Option<&Port> {
        self.ports.iter().find(|p| p.name == name)
    }

    /// The index of port `name`, in configuration order.
    #[must_use]
    pub(crate) fn port_index(&self, name: &str) -> Option<usize> {
        self.ports.iter().position(|p| p.name == name)
    }

    /// The name of the port at `index`.
    #[must_use]
    pub(crate) fn port_name(&self, index: usize) -> Option<&str> {
        self.ports.get(index).map(|p| p.name.as_str())
    }

    /// The root tree's scheduler of the port at `index` (`None` when its trees hang under
    /// `mq`, or it has none): the tree whose subtrees the workers share out.
    #[must_use]
    pub(crate) fn root_tree_at(&self, index: usize) -> Option<&Scheduler<Frame>> {
        let port = self.ports.get(index)?;
        port.trees
            .iter()
            .find(|t| t.mq_minor.is_none())
            .map(|t| &t.htb)
    }

    /// The scheduler of tree `major` of `port`.
    #[must_use]
    pub(crate) fn scheduler(&self, port: &str, major: u16) -> Option<&Scheduler<Frame>> {
        let p = self.port(port)?;
        p.tree_of(major).map(|t| &p.trees[t].htb)
    }

    /// The qdisc majors of `port`'s trees.
    #[must_use]
    pub(crate) fn tree_majors(&self, port: &str) -> Vec<u16> {
        self.port(port)
            .map(|p| p.trees.iter().map(Tree::major).collect())
            .unwrap_or_default()
    }

    /// Names of the ports, in configuration order.
    #[must_use]
    pub(crate) fn port_names(&self) -> Vec<String> {
        self.ports.iter().map(|p| p.name.clone()).collect()
    }

    /// Where `port` sends `frame` ([`crate::explain`]): its own classifier, then its trees'
    /// default classes. `None`: no such port.
    #[must_use]
    pub(crate) fn explain(&self, port: &str, frame: &[u8]) -> Option<crate::explain::Classified> {
        let p = self.port(port)?;
        // With several workers this one may hold only part of the root tree: its default
        // class is the fleet's view's.
        let several = self.crew.workers() > 1;
        let defaults: Vec<Option<ClassId>> = p
            .trees
            .iter()
            .map(|t| match p.view.as_deref() {
                Some(view) if several && view.major() == Some(t.major()) => view.default_leaf(),
                _ => t.htb.default_class(),
            })
            .collect();
        Some(crate::explain::classify(&p.classifier, &defaults, frame))
    }

    /// Which queue of `class`'s leaf on `port` `frame`'s flow joins (fq_codel's or sfq's flow
    /// bucket), hashed with this worker's key as a received frame is.
    pub(crate) fn leaf_queue(&self, port: &str, class: ClassId, frame: &[u8]) -> Option<u32> {
        let hash = self.flows.hash(&parse(frame));
        self.scheduler(port, class.major())?.leaf_queue(class, hash)
    }

    /// The filters of `port`, in evaluation order (a copy: the classifier holds them compact).
    #[must_use]
    pub(crate) fn filters(&self, port: &str) -> Option<Vec<Filter>> {
        self.port(port).map(|p| p.classifier.filters())
    }

    /// Frames moved to and from other workers.
    #[must_use]
    pub(crate) fn handoffs(&self) -> HandoffCounts {
        self.crew.counts
    }

    /// Statistics of the listed classes of `port` (`None` for ids it does not have) and of
    /// their leaf qdiscs, with the port's scheduler-wide statistics and counters.
    #[must_use]
    pub(crate) fn class_stats(&self, port: &str, ids: &[ClassId]) -> Option<PortSnapshot> {
        let p = self.port(port)?;
        let htb = |id: ClassId| p.tree_of(id.major()).map(|t| &p.trees[t].htb);
        Some(PortSnapshot {
            schedulers: p.trees.iter().map(|t| (t.major(), t.htb.stats())).collect(),
            port: p.stats.clone(),
            classes: ids
                .iter()
                .map(|&id| htb(id).and_then(|h| h.class_stats(id)))
                .collect(),
            leaves: ids
                .iter()
                .map(|&id| htb(id).and_then(|h| h.leaf_stats(id)))
                .collect(),
            rtt: ids.iter().map(|id| p.rtt.get(id).cloned()).collect(),
        })
    }
}
