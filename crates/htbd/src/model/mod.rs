//! The control plane's picture of every port: the HTB tree, its leaf qdiscs and filters as the
//! operator last set them (config file, saved state, live commands).
//!
//! Every command is checked against a *shadow* scheduler — the same `htb-core` code the data
//! plane runs, holding no packets — so what the model accepts, the data plane accepts too. A
//! batch ([`Model::apply`]) is all or nothing: each accepted step records how to undo it, and
//! the first refused command rolls the model back. The result is a [`Plan`]: the effects to
//! apply to the data plane, in order.
//!
//! One module per tc object, as iproute2 has them: `qdisc` (an HTB qdisc: the root's, or one
//! under an `mq` class), `mq` (tc's `mq` root, one class per TX queue), `class`, `leaf` (the
//! leaf qdiscs of classes), `filters`; `state` writes the saved state. What a tree holds is
//! kept compactly, as a tree holds a million subscribers: `class_table` (one record per class,
//! with its label in `label_arena`), `filter_entry` and `filter_list`, both on
//! `sorted_chunks`.

mod class;
mod class_table;
pub(crate) mod filter_entry;
mod filter_list;
mod filters;
mod ingress;
mod label_arena;
mod leaf;
mod mq;
mod qdisc;
mod root_leaf;
mod sorted_chunks;
mod state;
mod u32_links;

use std::collections::BTreeSet;

use htb_config::filter::Filter;
use htb_config::{InterfaceName, LeafDef, PortTree};
use htb_core::{ClassError, ClassId, ClassSpec, Duration, Instant, SchedulerConfig};
use htb_ipc::{Command, CommandResult, ErrorCode, IpcError};
pub use htb_xdp::PlaneChange;

pub use self::class_table::{ClassEntry, ClassTable};
pub use self::filter_entry::{
    FilterEntry, FilterKind, FilterValueError, NoNodeId, Protocol, U32Parts, assign_handles,
    matcher, on_wire, u32_divisor, with_protocol,
};
pub use self::filter_list::FilterList;
pub use self::ingress::{INGRESS_MAJOR, ingress_filter, ingress_hook_of, new_ingress};
pub use self::label_arena::LabelsFull;
pub use self::mq::MqModel;
pub use self::qdisc::{QdiscModel, TreeError};
use self::qdisc::{Verb, set_qdisc_config};
pub use self::root_leaf::UNLIMITED;
pub use self::u32_links::{LinkError, flatten};

/// What shapes a port: its root qdisc.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum Root {
    /// Nothing: the port forwards unshaped.
    #[default]
    None,
    /// One HTB qdisc at the root: htbd's own layout, one tree whose subtrees the workers
    /// share out, its top shared by all.
    Htb(Box<QdiscModel>),
    /// tc's `mq`: an HTB tree under each class, one class per TX queue (LibreQoS's layout).
    Mq(MqModel),
    /// A classless qdisc at the root (`cake bandwidth 20mbit`, `fq_codel`): run as an HTB tree
    /// of one unlimited class with the qdisc as its leaf (module `root_leaf`).
    Leaf(Box<QdiscModel>),
}

/// One port htbd forwards on.
#[derive(Debug)]
pub struct PortModel {
    /// Interface name.
    pub name: InterfaceName,
    /// Its TX queues: `mq` has one class per queue.
    pub tx_queues: u16,
    /// Its root qdisc.
    pub root: Root,
    /// An IFB device (tc's `ifbN`): no interface of its own; its tree shapes what other
    /// ports' ingress filters redirect to it.
    pub ifb: bool,
    /// Its ingress qdisc (`ffff:`), holding filters only.
    pub ingress: Option<Box<QdiscModel>>,
}

impl PortModel {
    /// A port with no qdisc.
    #[must_use]
    pub fn new(name: InterfaceName, tx_queues: u16) -> Self {
        Self {
            name,
            tx_queues: tx_queues.max(1),
            root: Root::None,
            ifb: false,
            ingress: None,
        }
    }

    /// Its HTB qdiscs, each with the minor of the `mq` class it hangs under (`None`: the
    /// root), in the order the data plane evaluates their filters.
    #[must_use]
    pub fn trees(&self) -> Vec<(Option<u16>, &QdiscModel)> {
        Self::trees_of(&self.root)
    }

    /// The HTB qdiscs of `root`, as [`trees`](Self::trees).
    fn trees_of(root: &Root) -> Vec<(Option<u16>, &QdiscModel)> {
        match root {
            Root::None => Vec::new(),
            Root::Htb(q) | Root::Leaf(q) => vec![(None, q)],
            Root::Mq(mq) => mq.trees.iter().map(|(&m, q)| (Some(m), q)).collect(),
        }
    }

    /// The classless qdisc at its root, with its handle's major.
    #[must_use]
    pub fn root_leaf(&self) -> Option<(u16, LeafDef)> {
        match &self.root {
            Root::Leaf(q) => q.root_leaf().map(|l| (q.config.major, l)),
            _ => None,
        }
    }

    /// The HTB qdisc at its root (`None` under `mq`, or unshaped).
    #[must_use]
    pub fn htb(&self) -> Option<&QdiscModel> {
        match &self.root {
            Root::Htb(q) => Some(q),
            _ => None,
        }
    }

    /// Its HTB qdisc with major `major`.
    #[must_use]
    pub fn tree(&self, major: u16) -> Option<&QdiscModel> {
        self.trees()
            .into_iter()
            .map(|(_, q)| q)
            .find(|q| q.config.major == major)
    }

    /// Runs `f` on the class table of each of its HTB qdiscs.
    fn for_each_tree(&mut self, mut f: impl FnMut(&mut ClassTable)) {
        match &mut self.root {
            Root::None => {}
            Root::Htb(q) | Root::Leaf(q) => f(&mut q.classes),
            Root::Mq(mq) => mq.trees.values_mut().for_each(|q| f(&mut q.classes)),
        }
    }

    fn tree_mut(&mut self, major: u16) -> Option<&mut QdiscModel> {
        if major == INGRESS_MAJOR && self.ingress.is_some() {
            return self.ingress.as_deref_mut();
        }
        match &mut self.root {
            Root::None => None,
            Root::Htb(q) | Root::Leaf(q) => Some(&mut **q).filter(|q| q.config.major == major),
            Root::Mq(mq) => mq.trees.values_mut().find(|q| q.config.major == major),
        }
    }

    /// The trees the data plane runs, with where they hang.
    #[must_use]
    pub fn port_trees(&self) -> Vec<PortTree> {
        self.trees()
            .into_iter()
            .map(|(mq_minor, q)| q.port_tree(mq_minor))
            .collect()
    }

    /// The data plane's filters, in evaluation order (u32 links flattened): each tree's, in
    /// tree order (a packet takes the first match, whichever tree's).
    ///
    /// # Errors
    /// u32 links htbd cannot follow (checked when every batch is accepted).
    pub fn data_filters(&self) -> Result<Vec<Filter>, LinkError> {
        let mut all = Vec::new();
        for (_, q) in self.trees() {
            all.extend(q.data_filters()?);
        }
        Ok(all)
    }

    /// Whether qdisc handle `major:` is taken on this port (`mq`'s, an HTB qdisc's or a
    /// leaf's: handles are unique per device, as the kernel's `qdisc_lookup` needs).
    pub(super) fn handle_in_use(&self, major: u16) -> bool {
        (major == INGRESS_MAJOR && self.ingress.is_some())
            || matches!(&self.root, Root::Mq(mq) if mq.handle == major)
            || self.trees().iter().any(|(_, q)| q.handle_in_use(major))
    }

    /// The handle the kernel would give a new qdisc here (`qdisc_alloc_handle`: the first
    /// free from 8001:).
    ///
    /// # Errors
    /// Every handle is taken.
    pub(super) fn free_handle(&self) -> Result<u16, IpcError> {
        (leaf::AUTO_HANDLE..=u16::MAX)
            .chain(1..leaf::AUTO_HANDLE)
            .find(|&h| !self.handle_in_use(h))
            .ok_or_else(|| error(ErrorCode::Busy, "no qdisc handle is free"))
    }

    /// The majors of its HTB qdiscs.
    fn majors(&self) -> Vec<u16> {
        self.trees().iter().map(|(_, q)| q.config.major).collect()
    }
}

/// What an accepted batch does. Until it is applied, [`Model::revert`] takes it back.
#[derive(Default)]
pub struct Plan {
    /// Data-plane effects, each with the index of the command it comes from (`None`: the
    /// filter refresh at the end).
    pub effects: Vec<(Option<usize>, PlaneChange)>,
    /// One result per command (warnings; dropped packets are filled in by the data plane).
    pub results: Vec<CommandResult>,
    undo: Vec<Undo>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("effects", &self.effects)
            .field("results", &self.results)
            .finish_non_exhaustive()
    }
}

/// How to take one accepted step back. One is kept per accepted step until the batch is
/// done (a million subscribers' import keeps three million), so what only a few steps need
/// (a class's old parameters, a deleted class, an old leaf or qdisc configuration) is boxed:
/// the enum is 40 bytes, not the 150-odd of its largest inline variant.
enum Undo {
    /// The port's root qdisc before the step.
    Root {
        port: usize,
        old: Box<Root>,
    },
    /// The tree under `mq` class `minor` before the step.
    MqTree {
        port: usize,
        minor: u16,
        old: Option<Box<QdiscModel>>,
    },
    QdiscConfig {
        port: usize,
        old: Box<SchedulerConfig>,
    },
    ClassAdded {
        port: usize,
        id: ClassId,
    },
    /// Class `id`'s parameters before the step.
    ClassChanged {
        port: usize,
        id: ClassId,
        old: Box<ClassSpec>,
    },
    /// The class taken out, with its leaf qdisc and label.
    ClassDeleted {
        port: usize,
        old: Box<ClassEntry>,
    },
    /// A class's leaf qdisc before the step (restored in the model and the shadow).
    Leaf {
        port: usize,
        id: ClassId,
        old: Option<Box<LeafDef>>,
    },
    /// These filters were taken out of tree `major`.
    FiltersRemoved {
        port: usize,
        major: u16,
        removed: Vec<FilterEntry>,
    },
    /// The port's ingress qdisc before the step.
    Ingress {
        port: usize,
        old: Option<Box<QdiscModel>>,
    },
    /// Class `id`'s label before the step (where it still is in the tree's labels).
    Label {
        port: usize,
        id: ClassId,
        old: Option<label_arena::LabelRef>,
    },
    /// The split choice for the subtree class `id` tops before the step.
    Split {
        port: usize,
        id: ClassId,
        old: Option<htb_core::SplitChoice>,
    },
    /// The filter with this `(prio, handle)` was added to tree `major`.
    FilterAdded {
        port: usize,
        major: u16,
        order: (u32, u32),
    },
}

/// One command being applied: where it is, and where its effects and undo steps go.
struct Step<'a> {
    index: usize,
    port: usize,
    name: String,
    undo: &'a mut Vec<Undo>,
    plan: &'a mut Plan,
    /// Ports whose trees' filters changed: the data plane gets them anew.
    refilter: &'a mut BTreeSet<usize>,
    /// Ports whose ingress qdisc's filters changed (apart, so that an ingress filter does not
    /// recompile 100 000 subscriber filters, nor a subscriber batch the ingress hook).
    reingress: &'a mut BTreeSet<usize>,
}

impl Step<'_> {
    /// The filters of qdisc `major` of this step's port changed.
    fn filters_changed(&mut self, major: u16) {
        if major == INGRESS_MAJOR {
            self.reingress.insert(self.port);
        } else {
            self.refilter.insert(self.port);
        }
    }

    fn effect(&mut self, effect: PlaneChange) {
        self.plan.effects.push((Some(self.index), effect));
    }

    /// Class `id`'s leaf set to `leaf` (none: removed); the undo brings `old` back.
    fn leaf_set(&mut self, id: ClassId, old: Option<LeafDef>, leaf: Option<htb_core::LeafConfig>) {
        self.leaf_undo(id, old);
        let port = self.name.clone();
        self.effect(PlaneChange::SetLeaf { port, id, leaf });
    }

    /// Class `id`'s leaf given new parameters in place; the undo brings `old` back.
    fn leaf_reconfigured(&mut self, id: ClassId, old: LeafDef, leaf: htb_core::LeafConfig) {
        self.leaf_undo(id, Some(old));
        let port = self.name.clone();
        self.effect(PlaneChange::ChangeLeaf { port, id, leaf });
    }

    /// Class `id`'s leaf is about to change: the undo brings `old` back.
    fn leaf_undo(&mut self, id: ClassId, old: Option<LeafDef>) {
        let port = self.port;
        let old = old.map(Box::new);
        self.undo.push(Undo::Leaf { port, id, old });
    }

    fn warn(&mut self, warnings: impl IntoIterator<Item = htb_core::Warning>) {
        self.plan.results[self.index].warnings.extend(warnings);
    }
}

/// All ports.
#[derive(Debug, Default)]
pub struct Model {
    /// In configuration order.
    pub ports: Vec<PortModel>,
}

fn error(code: ErrorCode, message: impl Into<String>) -> IpcError {
    IpcError::new(code, message)
}

fn class_error(e: ClassError) -> IpcError {
    let code = match e {
        ClassError::Exists(_) => ErrorCode::Exists,
        ClassError::NotFound(_) | ClassError::ParentNotFound { .. } => ErrorCode::NotFound,
        ClassError::HasChildren(_) => ErrorCode::InUse,
        _ => ErrorCode::Invalid,
    };
    error(code, e.to_string())
}

/// A class id of the qdisc with handle `major:`: `:5` is `major:5`, as the kernel completes a
/// classid without a major with its qdisc's (`tc_ctl_tclass`: `TC_H_MAKE(qid, clid)`).
fn of_qdisc(id: ClassId, major: u16) -> ClassId {
    if id.major() == 0 && id.minor() != 0 {
        ClassId::new(major, id.minor())
    } else {
        id
    }
}

impl Model {
    /// A model of `interfaces`' trees and filters.
    ///
    /// # Errors
    /// A tree or filter the scheduler refuses (only for hand-edited files: both were
    /// validated when parsed).
    pub fn from_trees(
        interfaces: Vec<crate::trees::InterfaceTrees>,
        tx_queues: &dyn Fn(&str) -> u16,
    ) -> Result<Self, TreeError> {
        let mut ports = Vec::with_capacity(interfaces.len());
        for i in interfaces {
            let queues = if i.ifb { 1 } else { tx_queues(&i.name) };
            let mut port = PortModel::new(i.name, queues);
            port.ifb = i.ifb;
            if let Some(filters) = i.ingress {
                let mut ingress = new_ingress();
                ingress.filters = filters.into_iter().collect();
                port.ingress = Some(Box::new(ingress));
            }
            let name = port.name.to_string();
            let at = |e: TreeError| TreeError::OnPort {
                port: name.clone(),
                source: Box::new(e),
            };
            let mut trees = Vec::with_capacity(i.trees.len());
            // A classless root's tree is its carrier, built from the leaf below (with the
            // size table its config gave).
            let root_stab = i.trees.first().and_then(|t| t.tree.tree.config.stab);
            for t in i.trees.into_iter().filter(|_| i.root_leaf.is_none()) {
                let q = QdiscModel::from_tree(&t.tree, t.filters, t.labels).map_err(at)?;
                trees.push((t.tree.mq_minor, q));
            }
            port.root = match (i.mq, i.root_leaf) {
                (_, Some(leaf)) => {
                    let major = leaf.handle.unwrap_or(1);
                    Root::Leaf(Box::new(
                        QdiscModel::classless(major, leaf, root_stab).map_err(at)?,
                    ))
                }
                (None, None) => trees
                    .pop()
                    .map_or(Root::None, |(_, q)| Root::Htb(Box::new(q))),
                (Some(handle), None) => {
                    let mut mq = MqModel::new(handle);
                    for (minor, q) in trees {
                        let minor = minor.unwrap_or(1);
                        if minor > port.tx_queues {
                            return Err(at(TreeError::NoTxQueue {
                                mq: handle,
                                minor,
                                queues: port.tx_queues,
                            }));
                        }
                        mq.trees.insert(minor, q);
                    }
                    Root::Mq(mq)
                }
            };
            ports.push(port);
        }
        Ok(Self { ports })
    }

    /// The port named `dev`.
    ///
    /// # Errors
    /// tc's "Cannot find device" when htbd does not forward on it.
    pub fn port_index(&self, dev: &str) -> Result<usize, IpcError> {
        self.ports
            .iter()
            .position(|p| p.name == dev)
            .ok_or_else(|| {
                error(
                    ErrorCode::NoDevice,
                    format!(
                        "Cannot find device \"{dev}\" (htbd forwards on: {})",
                        self.names()
                    ),
                )
            })
    }

    fn names(&self) -> String {
        self.ports
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Applies `commands` all or nothing.
    ///
    /// # Errors
    /// The first refused command's error, with its index; the model is unchanged.
    pub fn apply(&mut self, commands: &[Command]) -> Result<Plan, IpcError> {
        // No plan of an earlier batch can be reverted now: its labels' old bytes may go.
        for port in &mut self.ports {
            port.for_each_tree(ClassTable::compact_labels);
        }
        let mut undo = Vec::new();
        let mut plan = Plan {
            effects: Vec::new(),
            results: vec![CommandResult::default(); commands.len()],
            undo: Vec::new(),
        };
        let mut refilter = BTreeSet::new();
        let mut reingress = BTreeSet::new();
        for (index, command) in commands.iter().enumerate() {
            let done = self.port_index(command.dev()).and_then(|port| {
                let mut step = Step {
                    index,
                    port,
                    // The data plane's changes name the port by its plain name.
                    name: self.ports[port].name.to_string(),
                    undo: &mut undo,
                    plan: &mut plan,
                    refilter: &mut refilter,
                    reingress: &mut reingress,
                };
                self.apply_one(&mut step, command)
            });
            if let Err(mut e) = done {
                self.rollback(undo);
                e.command = Some(index);
                return Err(e);
            }
        }
        for port in refilter {
            let p = &self.ports[port];
            let filters = match p.data_filters() {
                Ok(filters) => filters,
                Err(e) => {
                    self.rollback(undo);
                    return Err(error(ErrorCode::Invalid, e.to_string()));
                }
            };
            plan.effects.push((
                None,
                PlaneChange::SetFilters {
                    port: p.name.to_string(),
                    filters,
                },
            ));
        }
        // An ingress qdisc deleted later in the batch has said so already (its effect).
        for port in reingress {
            let p = &self.ports[port];
            if let Some(hook) = p.ingress_hook() {
                plan.effects.push((
                    None,
                    PlaneChange::SetIngress {
                        port: p.name.to_string(),
                        ingress: Some(hook),
                    },
                ));
            }
        }
        plan.undo = undo;
        Ok(plan)
    }

    /// Takes an accepted batch back (it could not be persisted), before the next
    /// [`apply`](Self::apply).
    pub fn revert(&mut self, plan: Plan) {
        self.rollback(plan.undo);
    }

    /// The HTB qdisc with major `major` of port `port` (`None`: the port's only one, at its
    /// root).
    fn tree_mut(&mut self, port: usize, major: Option<u16>) -> Result<&mut QdiscModel, IpcError> {
        let p = &mut self.ports[port];
        let name = p.name.clone();
        if major == Some(INGRESS_MAJOR) {
            return p.ingress.as_deref_mut().ok_or_else(|| {
                error(
                    ErrorCode::NotFound,
                    format!(
                        "no ingress qdisc on {name}: add one first (qdisc add dev {name} handle ffff: ingress)"
                    ),
                )
            });
        }
        let majors = p.majors();
        let found = match (&p.root, major) {
            (Root::None, _) => None,
            (Root::Leaf(q), _) => {
                let kind = q.root_leaf().map_or("qdisc", |l| l.config.kind().name());
                return Err(error(
                    ErrorCode::Invalid,
                    format!(
                        "{name}'s root qdisc is {kind} {:x}:, which is classless: it takes no classes, filters or qdiscs under it (replace it with htb to build a tree)",
                        q.config.major
                    ),
                ));
            }
            (Root::Mq(mq), None) => {
                return Err(error(
                    ErrorCode::Invalid,
                    format!(
                        "{name}'s root is mq {:x}:, with an htb qdisc per class: say which (parent N: or classid N:M)",
                        mq.handle
                    ),
                ));
            }
            (Root::Htb(q), None) => Some(q.config.major),
            (_, Some(m)) => Some(m),
        };
        match found.and_then(|m| p.tree_mut(m)) {
            Some(q) => Ok(q),
            None if majors.is_empty() => Err(error(
                ErrorCode::NotFound,
                format!(
                    "no htb qdisc on {name}: add one first (qdisc add dev {name} root handle 1: htb)"
                ),
            )),
            None => Err(error(
                ErrorCode::NotFound,
                format!(
                    "no htb qdisc {:x}: on {name} (it has {})",
                    major.unwrap_or(0),
                    majors
                        .iter()
                        .map(|m| format!("{m:x}:"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    fn apply_one(&mut self, step: &mut Step<'_>, command: &Command) -> Result<(), IpcError> {
        match command {
            Command::QdiscAdd(q) => self.qdisc_set(step, q, Verb::Add),
            Command::QdiscChange(q) => self.qdisc_set(step, q, Verb::Change),
            Command::QdiscReplace(q) => self.qdisc_set(step, q, Verb::Replace),
            Command::QdiscDelete { .. } => self.qdisc_delete(step),
            Command::IngressAdd { .. } => self.ingress_add(step),
            Command::IngressDelete { .. } => self.ingress_delete(step),
            Command::MqAdd(m) => self.mq_set(step, qdisc::handle_major(m.handle)?, Verb::Add),
            Command::MqReplace(m) => {
                self.mq_set(step, qdisc::handle_major(m.handle)?, Verb::Replace)
            }
            Command::ClassAdd(c) => self.class_set(step, c, Verb::Add),
            Command::ClassChange(c) => self.class_set(step, c, Verb::Change),
            Command::ClassReplace(c) => self.class_set(step, c, Verb::Replace),
            Command::ClassDelete(htb_ipc::ClassDelete { id, .. }) => self.class_delete(step, *id),
            Command::ClassLabel(l) => self.class_label(step, l.id, l.label.as_ref()),
            Command::ClassSplit(s) => self.class_split(step, s.id, s.choice),
            Command::LeafAdd(l) => self.leaf_set(step, l, Verb::Add),
            Command::LeafChange(l) => self.leaf_set(step, l, Verb::Change),
            Command::LeafReplace(l) => self.leaf_set(step, l, Verb::Replace),
            Command::LeafDelete {
                parent,
                handle,
                kind,
                ..
            } => self.leaf_delete(step, *parent, *handle, *kind),
            Command::FilterAdd(f) => self.filter_add(step, f),
            Command::FilterChange(f) => self.filter_change(step, f, false),
            Command::FilterReplace(f) => self.filter_change(step, f, true),
            Command::FilterDelete(htb_ipc::FilterDelete {
                parent,
                prio,
                handle,
                ..
            }) => self.filter_delete(step, parent.map(ClassId::major), *prio, *handle),
        }
    }

    fn rollback(&mut self, undo: Vec<Undo>) {
        for step in undo.into_iter().rev() {
            let restored = match step {
                Undo::Root { port, old } => {
                    self.ports[port].root = *old;
                    Ok(())
                }
                Undo::MqTree { port, minor, old } => {
                    if let Root::Mq(mq) = &mut self.ports[port].root {
                        match old {
                            Some(q) => mq.trees.insert(minor, *q),
                            None => mq.trees.remove(&minor),
                        };
                    }
                    Ok(())
                }
                Undo::QdiscConfig { port, old } => self.with_tree(port, old.major, |q| {
                    set_qdisc_config(q, *old);
                    Ok(())
                }),
                Undo::ClassAdded { port, id } => self.with_tree(port, id.major(), |q| {
                    let _ = q.classes.remove(id);
                    q.shadow.delete_class(Instant::ZERO, id).map(drop)
                }),
                Undo::ClassChanged { port, id, old } => self.with_tree(port, id.major(), |q| {
                    let r = q.shadow.change_class(Instant::ZERO, id, &old);
                    let _ = q.classes.set_spec(id, *old);
                    r.map(drop)
                }),
                Undo::ClassDeleted { port, old } => self.with_tree(port, old.id().major(), |q| {
                    let (id, leaf) = (old.id(), old.leaf());
                    let r = q
                        .shadow
                        .add_class(Instant::ZERO, id, old.parent(), &old.spec())
                        .map(drop)
                        .and_then(|()| match leaf {
                            Some(leaf) => q
                                .shadow
                                .set_leaf(Instant::ZERO, id, Some(&leaf.config))
                                .map(drop),
                            None => Ok(()),
                        });
                    q.classes.restore(*old);
                    r
                }),
                Undo::Leaf { port, id, old } => self.with_tree(port, id.major(), |q| {
                    let r = q
                        .shadow
                        .set_leaf(Instant::ZERO, id, old.as_ref().map(|l| &l.config))
                        .map(drop);
                    let _ = q.classes.set_leaf(id, old.map(|l| *l));
                    r
                }),
                Undo::Label { port, id, old } => self.with_tree(port, id.major(), |q| {
                    q.classes.restore_label(id, old);
                    Ok(())
                }),
                Undo::Split { port, id, old } => self.with_tree(port, id.major(), |q| {
                    match old {
                        Some(choice) => q.splits.insert(id, choice),
                        None => q.splits.remove(&id),
                    };
                    Ok(())
                }),
                Undo::Ingress { port, old } => {
                    self.ports[port].ingress = old;
                    Ok(())
                }
                Undo::FiltersRemoved {
                    port,
                    major,
                    removed,
                } => self.with_tree(port, major, |q| {
                    for entry in removed {
                        q.add_filter(entry);
                    }
                    Ok(())
                }),
                Undo::FilterAdded { port, major, order } => self.with_tree(port, major, |q| {
                    let _ = q.remove_filter(order);
                    Ok(())
                }),
            };
            if let Err(e) = restored {
                // Undoing exactly what was just done cannot fail; if it does, say so loudly.
                tracing::error!("rolling back a refused batch failed: {e}");
            }
        }
    }

    fn with_tree(
        &mut self,
        port: usize,
        major: u16,
        f: impl FnOnce(&mut QdiscModel) -> Result<(), ClassError>,
    ) -> Result<(), ClassError> {
        match self.ports[port].tree_mut(major) {
            Some(q) => f(q),
            None => Ok(()),
        }
    }
}

/// Burst time default, for tests and the state file.
#[must_use]
pub fn default_burst_time() -> Duration {
    SchedulerConfig::default().default_burst_time
}

#[cfg(test)]
mod ingress_tests;
#[cfg(test)]
mod saved_forms;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;
