//! A validated HTB tree as plain data: the scheduler's settings and its classes, parents
//! first, each with its leaf discipline. The config file (`htb-config`) and the control socket
//! produce it; the engine builds one scheduler per worker from it.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use crate::{ClassId, ClassSpec, Instant, LeafConfig, Packet, Scheduler, SchedulerConfig};

/// A leaf discipline of a class, resolved: its tc handle (if given) and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafDef {
    /// The qdisc handle's major (`10:` → 0x10), when given.
    pub handle: Option<u16>,
    /// Parameters with the kernel's defaults filled in.
    pub config: LeafConfig,
}

/// One class of a validated tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassDef {
    /// The class.
    pub id: ClassId,
    /// Its parent, `None` for a root class.
    pub parent: Option<ClassId>,
    /// Its parameters.
    pub spec: ClassSpec,
    /// Its own leaf queue discipline (`None`: the qdisc's default).
    pub leaf: Option<LeafDef>,
}

/// A validated tree: scheduler settings and classes, parents before children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeSpec {
    /// Scheduler-wide settings.
    pub config: SchedulerConfig,
    /// Classes in an order that adds every parent before its children.
    pub classes: Vec<ClassDef>,
    /// What building the tree warned about (quantum clamps, …), as text.
    pub warnings: Vec<String>,
}

/// One HTB tree of a port and where it hangs: at the port's root (htbd's own layout: one tree
/// whose subtrees the workers share out), or under class `M:N` of tc's `mq` root (LibreQoS's
/// layout: one independent tree per TX queue, served by the worker owning queue N−1, as the
/// kernel's `mq_attach` binds child N to TX queue N−1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortTree {
    /// The tree.
    pub tree: TreeSpec,
    /// The minor `N` of the `mq` class it hangs under (1 for TX queue 0); `None`: the root.
    pub mq_minor: Option<u16>,
    /// The operator's choices for its subtrees, by their top class (a tree under `mq` has
    /// none: its queue's worker serves it whole).
    pub split: BTreeMap<ClassId, SplitChoice>,
}

impl PortTree {
    /// A tree at the port's root.
    #[must_use]
    pub fn root(tree: TreeSpec) -> Self {
        Self {
            tree,
            mq_minor: None,
            split: BTreeMap::new(),
        }
    }
}

/// How a subtree of a port's root tree is served when several workers run it, as the operator
/// chose (`split = true` or `false` on its top class in the config file). A subtree without a
/// choice is split when its top class's rate is above the daemon's `split_above`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum SplitChoice {
    /// Served by every worker at once: each queues what it receives in its own copy of the
    /// subtree, whose classes' buckets they all share.
    Split,
    /// Served by one worker, whatever its rate: frames received by the others are handed to it.
    Owned,
}

impl TreeSpec {
    /// Builds a scheduler holding this tree, its clock at `now`.
    ///
    /// # Errors
    /// Only if the tree was altered after validation.
    pub fn build<P: Packet>(&self, now: Instant) -> Result<Scheduler<P>, crate::ClassError> {
        let mut htb = Scheduler::new(self.config);
        htb.reserve_classes(self.classes.len());
        for def in &self.classes {
            let change = htb.add_class(now, def.id, def.parent, &def.spec)?;
            debug_assert!(change.purged.is_empty(), "a fresh tree holds no packets");
        }
        for def in &self.classes {
            if let Some(leaf) = &def.leaf {
                let change = htb.set_leaf(now, def.id, Some(&leaf.config))?;
                debug_assert!(change.purged.is_empty(), "a fresh tree holds no packets");
            }
        }
        Ok(htb)
    }
}
