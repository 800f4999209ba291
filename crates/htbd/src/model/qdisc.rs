//! One port's HTB qdisc as the control plane sees it, and the `qdisc add|change|replace|del`
//! commands for the root HTB qdisc.

use std::collections::BTreeMap;

use htb_config::filter::Filter;
use htb_config::{ClassDef, ClassLabel, PortTree, TreeSpec};
use htb_core::{ClassId, Instant, Scheduler, SchedulerConfig, SplitChoice};
use htb_ipc::{ErrorCode, IpcError};

use super::class_table::{ClassEntry, ClassTable};
use super::filter_entry::FilterEntry;
use super::u32_links::{LinkError, flatten};
use super::{FilterList, LabelsFull};
use super::{Model, PlaneChange, PortModel, Root, Step, Undo, error};

/// The major of a qdisc handle (`10:`).
pub(super) fn handle_major(handle: Option<ClassId>) -> Result<Option<u16>, IpcError> {
    match handle {
        None => Ok(None),
        Some(h) if h.is_qdisc() && h.major() != 0 => Ok(Some(h.major())),
        Some(h) => Err(error(
            ErrorCode::Invalid,
            format!("Invalid minor handle ({h}: a qdisc handle looks like 10:)"),
        )),
    }
}

/// Why a saved or configured tree does not load into the model (the parsers validated it, so
/// only a hand-edited state file gets here).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeError {
    /// The scheduler refuses a class or leaf.
    #[error(transparent)]
    Class(#[from] htb_core::ClassError),
    /// Two qdiscs with one handle.
    #[error("class {class}: leaf handle {handle:x}: is used by another qdisc")]
    LeafHandleTwice {
        /// The class whose leaf has it.
        class: ClassId,
        /// The handle's major.
        handle: u16,
    },
    /// A filter names a class the tree lacks.
    #[error("a filter or label names class {0}, which does not exist")]
    NoSuchClass(ClassId),
    /// More labels than htbd keeps.
    #[error(transparent)]
    Labels(#[from] LabelsFull),
    /// A tree under an `mq` class the port has no TX queue for.
    #[error("mq class {mq:x}:{minor:x} has a tree, but the interface has {queues} TX queue(s)")]
    NoTxQueue {
        /// The mq's handle major.
        mq: u16,
        /// The class's minor.
        minor: u16,
        /// The port's TX queues.
        queues: u16,
    },
    /// Said of port `port`.
    #[error("{port}: {source}")]
    OnPort {
        /// The port.
        port: String,
        /// What is wrong there.
        source: Box<Self>,
    },
}

/// One port's HTB qdisc: its parameters, classes with their leaf qdiscs, filters, and a
/// shadow scheduler that checks every change the way the data plane will apply it.
#[derive(Debug)]
pub struct QdiscModel {
    /// Qdisc parameters.
    pub config: SchedulerConfig,
    /// Classes as given (defaults unresolved), each with its own leaf qdisc if it has one,
    /// its label (`class label`: who it shapes) and how many filters use it.
    pub classes: ClassTable,
    /// Filters in evaluation order (prio, then handle): changed through
    /// the model's `add_filter` and `remove` methods, which count each class's.
    pub filters: FilterList,
    /// The operator's split choices, by subtree top (`split = …`; the root tree's only).
    pub splits: BTreeMap<ClassId, SplitChoice>,
    pub(super) shadow: Scheduler<u32>,
}

impl QdiscModel {
    /// An empty qdisc.
    #[must_use]
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            config,
            classes: ClassTable::default(),
            filters: FilterList::default(),
            splits: BTreeMap::new(),
            shadow: Scheduler::new(config),
        }
    }

    /// A qdisc holding a validated tree (with its split choices), filters and labels.
    ///
    /// # Errors
    /// A class or leaf the tree cannot hold, a leaf handle used twice, or a filter, label or
    /// split choice naming a missing class.
    pub fn from_tree(
        tree: &PortTree,
        filters: Vec<FilterEntry>,
        labels: BTreeMap<ClassId, ClassLabel>,
    ) -> Result<Self, TreeError> {
        let (splits, tree) = (&tree.split, &tree.tree);
        let mut model = Self::new(tree.config);
        model.shadow.reserve_classes(tree.classes.len());
        for def in &tree.classes {
            let _ = model
                .shadow
                .add_class(Instant::ZERO, def.id, def.parent, &def.spec)?;
            model.classes.add(def.clone());
        }
        let mut handles = vec![tree.config.major];
        for def in &tree.classes {
            let Some(leaf) = &def.leaf else { continue };
            let _ = model
                .shadow
                .set_leaf(Instant::ZERO, def.id, Some(&leaf.config))?;
            if let Some(h) = leaf.handle {
                if handles.contains(&h) {
                    return Err(TreeError::LeafHandleTwice {
                        class: def.id,
                        handle: h,
                    });
                }
                handles.push(h);
            }
        }
        if let Some(class) = filters
            .iter()
            .filter_map(|f| f.class)
            .find(|&class| !model.classes.contains(class))
        {
            return Err(TreeError::NoSuchClass(class));
        }
        if let Some(class) = labels
            .keys()
            .chain(splits.keys())
            .find(|&&c| !model.classes.contains(c))
        {
            return Err(TreeError::NoSuchClass(*class));
        }
        for filter in filters {
            model.add_filter(filter);
        }
        for (id, label) in &labels {
            model.classes.set_label(*id, Some(label))?;
        }
        model.splits.clone_from(splits);
        Ok(model)
    }

    /// The tree as the data plane takes it, hanging under `mq` class `mq_minor` (`None`: at
    /// the root, with the split choices).
    #[must_use]
    pub fn port_tree(&self, mq_minor: Option<u16>) -> PortTree {
        PortTree {
            tree: self.tree(),
            mq_minor,
            split: if mq_minor.is_none() {
                self.splits.clone()
            } else {
                BTreeMap::new()
            },
        }
    }

    /// Puts `entry` among the filters (replacing the one with its prio and handle), counting
    /// it as a user of its class.
    pub(super) fn add_filter(&mut self, entry: FilterEntry) {
        if let Some(class) = entry.class {
            self.classes.count_user(class, true);
        }
        if let Some(old) = self.filters.insert(entry) {
            self.uncount(&old);
        }
    }

    /// Takes out the filter at `order` (prio, handle).
    pub(super) fn remove_filter(&mut self, order: (u32, u32)) -> Option<FilterEntry> {
        let old = self.filters.remove(order)?;
        self.uncount(&old);
        Some(old)
    }

    /// Takes out the filters `remove` picks among `prio`'s (every prio's with `None`).
    pub(super) fn remove_filters_where(
        &mut self,
        prio: Option<u32>,
        remove: impl FnMut(&FilterEntry) -> bool,
    ) -> Vec<FilterEntry> {
        let removed = self.filters.remove_where(prio, remove);
        for old in &removed {
            self.uncount(old);
        }
        removed
    }

    fn uncount(&mut self, old: &FilterEntry) {
        if let Some(class) = old.class {
            self.classes.count_user(class, false);
        }
    }

    /// The tree, parents before children.
    #[must_use]
    pub fn tree(&self) -> TreeSpec {
        TreeSpec {
            config: self.config,
            classes: self
                .tree_order()
                .into_iter()
                .filter_map(|id| self.class_def(id))
                .collect(),
            warnings: Vec::new(),
        }
    }

    /// The classes' ids, parents before children (depth first, siblings in id order): the
    /// order of [`QdiscModel::tree`]'s classes.
    #[must_use]
    pub fn tree_order(&self) -> Vec<ClassId> {
        let mut children: BTreeMap<Option<ClassId>, Vec<ClassId>> = BTreeMap::new();
        for c in self.classes.iter() {
            children.entry(c.parent()).or_default().push(c.id());
        }
        let mut order = Vec::with_capacity(self.classes.len());
        let mut stack: Vec<ClassId> = children.get(&None).cloned().unwrap_or_default();
        stack.reverse();
        while let Some(id) = stack.pop() {
            if self.classes.get(id).is_some() {
                order.push(id);
            }
            if let Some(kids) = children.get(&Some(id)) {
                stack.extend(kids.iter().rev());
            }
        }
        order
    }

    /// Class `id`'s definition, made from its record.
    #[must_use]
    pub fn class_def(&self, id: ClassId) -> Option<ClassDef> {
        self.classes.get(id).map(ClassEntry::def)
    }

    /// The handle of class `id`'s own leaf qdisc (tc's `leaf 10:`), if it was given one.
    #[must_use]
    pub fn leaf_handle(&self, id: ClassId) -> Option<ClassId> {
        let handle = self.classes.get(id)?.leaf()?.handle?;
        Some(ClassId::new(handle, 0))
    }

    /// Resolved parameters and place of a class, with its leaf's (what `class show` and
    /// `qdisc show` print).
    #[must_use]
    pub fn class_info(&self, id: ClassId) -> Option<htb_core::ClassInfo> {
        self.shadow.class_info(id)
    }

    /// The data plane's filters, in evaluation order (u32 links flattened).
    ///
    /// # Errors
    /// u32 links htbd cannot follow.
    pub fn data_filters(&self) -> Result<Vec<Filter>, LinkError> {
        flatten(&self.filters)
    }

    /// Whether qdisc handle `major:` is taken on this port (the HTB qdisc's or a leaf's).
    pub(super) fn handle_in_use(&self, major: u16) -> bool {
        self.config.major == major
            || self
                .classes
                .iter()
                .any(|c| c.leaf().is_some_and(|l| l.handle == Some(major)))
    }
}

/// A qdisc's `stab`, checked as tc and the kernel check it.
pub(super) fn size_table(
    stab: Option<htb_ipc::SizeSpec>,
) -> Result<Option<htb_core::SizeTable>, IpcError> {
    stab.map(htb_ipc::SizeSpec::table)
        .transpose()
        .map_err(|e| error(ErrorCode::Invalid, e.to_string()))
}

pub(super) fn set_qdisc_config(qdisc: &mut QdiscModel, config: SchedulerConfig) {
    qdisc.config = config;
    qdisc.shadow.set_default_class(config.default_minor);
    qdisc.shadow.set_r2q(config.r2q);
    qdisc.shadow.set_direct_qlen(config.direct_qlen);
    qdisc.shadow.set_size_table(config.stab);
}

impl Model {
    /// `qdisc add|change|replace dev D root|parent MQ:N [handle H:] htb …`.
    pub(super) fn qdisc_set(
        &mut self,
        step: &mut Step<'_>,
        q: &htb_ipc::QdiscSpec,
        verb: Verb,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        let major = handle_major(q.handle)?;
        // Where it goes: the root, or a class of the root's mq.
        let slot = q.parent.map(|p| self.mq_class(port, p)).transpose()?;
        let p = &self.ports[port];
        let existing: Option<&QdiscModel> = match (slot, &p.root) {
            (None, Root::Htb(q)) => Some(q),
            (None, Root::Leaf(q)) if verb != Verb::Replace => {
                let kind = q.root_leaf().map_or("qdisc", |l| l.config.kind().name());
                return Err(error(
                    if verb == Verb::Add {
                        ErrorCode::Exists
                    } else {
                        ErrorCode::NotFound
                    },
                    format!(
                        "{name}'s root is {kind} {:x}:, not htb (qdisc replace dev {name} root handle 1: htb puts one in its place)",
                        q.config.major
                    ),
                ));
            }
            (Some(minor), Root::Mq(mq)) => mq.trees.get(&minor),
            (None, Root::Mq(mq)) if verb != Verb::Replace => {
                let (code, what) = match verb {
                    Verb::Add => (ErrorCode::Exists, "use replace, or add under its classes"),
                    _ => (
                        ErrorCode::NotFound,
                        "change the htb under one of its classes",
                    ),
                };
                return Err(error(
                    code,
                    format!(
                        "{name}'s root is mq {:x}: ({what}: qdisc {} dev {name} parent {:x}:1 handle 1: htb)",
                        mq.handle,
                        if verb == Verb::Add { "add" } else { "change" },
                        mq.handle
                    ),
                ));
            }
            _ => None,
        };
        let existing_major = existing.map(|m| m.config.major);
        let major = match (major, existing_major, slot) {
            (Some(m), _, _) | (None, Some(m), _) => m,
            (None, None, None) => 1,
            // Under mq: the next handle the kernel would pick.
            (None, None, Some(_)) => p.free_handle()?,
        };
        let mut config = SchedulerConfig {
            major,
            // htbd's extensions that tc cannot say stay as the port had them.
            default_leaf: existing.map_or_else(
                || SchedulerConfig::default().default_leaf,
                |m| m.config.default_leaf,
            ),
            ..SchedulerConfig::default()
        };
        // tc sends every parameter: those not given take tc's defaults.
        config.default_minor = q.default_minor.unwrap_or(0);
        config.r2q = q.r2q.unwrap_or(10).max(1);
        if let Some(qlen) = q.direct_qlen {
            config.direct_qlen = qlen;
        }
        config.stab = size_table(q.stab)?;
        let at = match slot {
            None => name.clone(),
            Some(minor) => format!("{name}'s mq class {minor:x}"),
        };
        let in_place = match (verb, existing_major) {
            (Verb::Add, Some(m)) => {
                return Err(error(
                    ErrorCode::Exists,
                    format!("{at} has an htb qdisc ({m:x}:) already; use replace or change"),
                ));
            }
            (Verb::Change, None) => {
                return Err(error(
                    ErrorCode::NotFound,
                    format!("no htb qdisc on {at} to change"),
                ));
            }
            (Verb::Change, Some(m)) if m != config.major => {
                return Err(error(
                    ErrorCode::Invalid,
                    format!("qdisc {:x}: is not {at}'s ({m:x}:)", config.major),
                ));
            }
            (_, Some(m)) => m == config.major,
            (_, None) => false,
        };
        if in_place {
            let qdisc = self.tree_mut(port, Some(config.major))?;
            if q.direct_qlen.is_none() {
                config.direct_qlen = qdisc.config.direct_qlen;
            }
            config.default_burst_time = qdisc.config.default_burst_time;
            config.seed = qdisc.config.seed;
            step.undo.push(Undo::QdiscConfig {
                port,
                old: Box::new(qdisc.config),
            });
            set_qdisc_config(qdisc, config);
            step.effect(PlaneChange::SetQdisc { port: name, config });
            return Ok(());
        }
        // Under mq the other queues' qdiscs keep their handles (a new root replaces them all).
        let p = &self.ports[port];
        let taken = match (slot, &p.root) {
            (Some(minor), Root::Mq(mq)) => {
                mq.handle == config.major
                    || mq
                        .trees
                        .iter()
                        .any(|(&m, q)| m != minor && q.handle_in_use(config.major))
            }
            _ => false,
        };
        if taken {
            return Err(error(
                ErrorCode::Exists,
                format!(
                    "handle {:x}: is used by another qdisc on {name}",
                    config.major
                ),
            ));
        }
        let new = QdiscModel::new(config);
        let tree = new.port_tree(slot);
        match slot {
            None => self.set_root(step, Root::Htb(Box::new(new))),
            Some(minor) => self.set_mq_tree(step, minor, Some(new))?,
        }
        step.effect(PlaneChange::tree(name, config.major, Some(tree)));
        Ok(())
    }

    /// Makes `root` the root qdisc of the step's port: the old root's trees go from the data
    /// plane (the new root's come with their own effects).
    pub(super) fn set_root(&mut self, step: &mut Step<'_>, root: Root) {
        let port = step.port;
        let old = std::mem::replace(&mut self.ports[port].root, root);
        for (_, q) in PortModel::trees_of(&old) {
            step.effect(PlaneChange::tree(step.name.clone(), q.config.major, None));
        }
        step.undo.push(Undo::Root {
            port,
            old: Box::new(old),
        });
        step.refilter.insert(port);
    }

    /// `qdisc del dev D root`: the root qdisc (htb, or mq with its trees), their classes,
    /// leaves and filters.
    pub(super) fn qdisc_delete(&mut self, step: &mut Step<'_>) -> Result<(), IpcError> {
        if matches!(self.ports[step.port].root, Root::None) {
            return Err(error(
                ErrorCode::NotFound,
                format!(
                    "Cannot find specified qdisc on specified device (no root qdisc on {})",
                    step.name
                ),
            ));
        }
        self.set_root(step, Root::None);
        Ok(())
    }
}

/// Which of tc's verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verb {
    Add,
    Change,
    Replace,
}

#[cfg(test)]
mod tests {
    use htb_config::ClassDef;
    use htb_config::filter::Match;
    use htb_core::{ClassSpec, Rate};
    use proptest::prelude::*;

    use super::super::ClassEntry;
    use super::super::filter_entry::{FilterKind, Protocol};
    use super::*;

    proptest! {
        /// Whether a class is in use (what `class del` asks) agrees with a walk of the filters
        /// after any sequence of adds (some replacing a filter of another class), removes and
        /// removals by prio.
        #[test]
        fn class_use_counts_agree_with_a_walk(
            ops in proptest::collection::vec(
                (0u8..4, 1u32..4, 0u32..6, proptest::option::of(1u32..5)),
                0..80,
            )
        ) {
            let mut q = QdiscModel::new(SchedulerConfig::default());
            for minor in 1..5 {
                q.classes.add(ClassDef {
                    id: ClassId::new(1, minor),
                    parent: None,
                    spec: ClassSpec::new(Rate::from_mbit(1)),
                    leaf: None,
                });
            }
            for (op, prio, handle, class) in ops {
                match op {
                    0 | 1 => {
                        let class = class.map(|c| ClassId::new(1, c));
                        let kind = FilterKind::U32;
                        let m = Match::default();
                        q.add_filter(FilterEntry::new(prio, Protocol::Ip, kind, handle, m, class));
                    }
                    2 => {
                        let _ = q.remove_filter((prio, handle));
                    }
                    _ => {
                        let _ = q.remove_filters_where(Some(prio), |e| e.handle % 2 == handle % 2);
                    }
                }
                for c in 1..5 {
                    let class = ClassId::new(1, c);
                    prop_assert_eq!(
                        q.classes.get(class).is_some_and(ClassEntry::in_use),
                        q.filters.iter().any(|e| e.class == Some(class))
                    );
                }
            }
        }
    }
}
