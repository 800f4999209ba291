//! The control plane's picture of every port: the HTB tree, its leaf qdiscs and filters as the
//! operator last set them (config file, saved state, live commands).
//!
//! Every command is checked against a *shadow* scheduler — the same `htb-core` code the data
//! plane runs, holding no packets — so what the model accepts, the data plane accepts too. A
//! batch ([`Model::apply`]) is all or nothing: each accepted step records how to undo it, and
//! the first refused command rolls the model back. The result is a [`Plan`]: the effects to
//! apply to the data plane, in order.
//!
//! One module per tc object, as iproute2 has them: `qdisc` (the root HTB qdisc), `class`,
//! `leaf` (the leaf qdiscs of classes), `filters`; `state` writes the saved state.

mod class;
mod filter_entry;
mod filter_list;
mod filters;
mod leaf;
mod qdisc;
mod state;
mod u32_links;

use std::collections::BTreeSet;

use htb_config::filter::Filter;
use htb_config::{ClassDef, LeafDef, TreeSpec};
use htb_core::{ClassError, ClassId, Duration, Instant, LeafConfig, SchedulerConfig};
use htb_ipc::{Command, CommandResult, ErrorCode, IpcError};

pub use self::class::link_layer_name;
pub use self::filter_entry::{
    FilterEntry, FilterKind, Protocol, U32Parts, assign_handles, match_spec, matcher, u32_divisor,
    with_protocol,
};
pub use self::qdisc::QdiscModel;
use self::qdisc::{Verb, set_qdisc_config};
pub use self::u32_links::{LinkError, flatten};

/// One port htbd forwards on.
#[derive(Debug)]
pub struct PortModel {
    /// Interface name.
    pub name: String,
    /// Its HTB qdisc, if it shapes.
    pub qdisc: Option<QdiscModel>,
}

impl PortModel {
    /// The tree the data plane runs (`None`: unshaped).
    #[must_use]
    pub fn tree(&self) -> Option<TreeSpec> {
        self.qdisc.as_ref().map(QdiscModel::tree)
    }

    /// The data plane's filters, in evaluation order (u32 links flattened).
    ///
    /// # Errors
    /// u32 links htbd cannot follow (checked when every batch is accepted).
    pub fn data_filters(&self) -> Result<Vec<Filter>, LinkError> {
        self.qdisc
            .as_ref()
            .map_or(Ok(Vec::new()), QdiscModel::data_filters)
    }
}

/// A change for the data plane (see `htb_xdp::PlaneOp`, which it becomes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Replace the whole tree (`None`: unshaped).
    SetTree {
        /// Port.
        port: String,
        /// New tree.
        tree: Option<TreeSpec>,
    },
    /// New qdisc parameters.
    SetQdisc {
        /// Port.
        port: String,
        /// Parameters.
        config: SchedulerConfig,
    },
    /// Add a class.
    AddClass {
        /// Port.
        port: String,
        /// Class.
        def: ClassDef,
    },
    /// Change a class.
    ChangeClass {
        /// Port.
        port: String,
        /// Class and its new parameters.
        def: ClassDef,
    },
    /// Delete a class.
    DeleteClass {
        /// Port.
        port: String,
        /// Class.
        id: ClassId,
    },
    /// Give a leaf class a new, empty leaf qdisc (`None`: the default).
    SetLeaf {
        /// Port.
        port: String,
        /// Class.
        id: ClassId,
        /// The leaf.
        leaf: Option<LeafConfig>,
    },
    /// Change a leaf class's qdisc in place (same kind).
    ChangeLeaf {
        /// Port.
        port: String,
        /// Class.
        id: ClassId,
        /// New parameters.
        leaf: LeafConfig,
    },
    /// Replace the filters.
    SetFilters {
        /// Port.
        port: String,
        /// In evaluation order.
        filters: Vec<Filter>,
    },
}

/// What an accepted batch does. Until it is applied, [`Model::revert`] takes it back.
#[derive(Default)]
pub struct Plan {
    /// Data-plane effects, each with the index of the command it comes from (`None`: the
    /// filter refresh at the end).
    pub effects: Vec<(Option<usize>, Effect)>,
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

/// How to take one accepted step back.
enum Undo {
    Qdisc {
        port: usize,
        old: Option<Box<QdiscModel>>,
    },
    QdiscConfig {
        port: usize,
        old: SchedulerConfig,
    },
    ClassAdded {
        port: usize,
        id: ClassId,
    },
    ClassChanged {
        port: usize,
        old: ClassDef,
    },
    ClassDeleted {
        port: usize,
        old: ClassDef,
    },
    /// A class's leaf qdisc before the step (restored in the model and the shadow).
    Leaf {
        port: usize,
        id: ClassId,
        old: Option<LeafDef>,
    },
    Filters {
        port: usize,
        old: Vec<FilterEntry>,
    },
    /// The filter with this `(prio, handle)` was added.
    FilterAdded {
        port: usize,
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
    refilter: &'a mut BTreeSet<usize>,
}

impl Step<'_> {
    fn effect(&mut self, effect: Effect) {
        self.plan.effects.push((Some(self.index), effect));
    }

    fn warn(&mut self, warnings: impl IntoIterator<Item = String>) {
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

fn parse_class_id(s: &str) -> Result<ClassId, IpcError> {
    s.parse()
        .map_err(|e| error(ErrorCode::Invalid, format!("invalid class id {s:?}: {e}")))
}

/// A class id of the qdisc with handle `major:`: `:5` is `major:5`, as the kernel completes a
/// classid without a major with its qdisc's (`tc_ctl_tclass`: `TC_H_MAKE(qid, clid)`).
fn parse_class_of(s: &str, major: u16) -> Result<ClassId, IpcError> {
    let id = parse_class_id(s)?;
    Ok(if id.major() == 0 && id.minor() != 0 {
        ClassId::new(major, id.minor())
    } else {
        id
    })
}

impl Model {
    /// A model of `interfaces`' trees and filters.
    ///
    /// # Errors
    /// A tree or filter the scheduler refuses (only for hand-edited files: both were
    /// validated when parsed).
    pub fn from_trees(interfaces: Vec<crate::config::InterfaceTrees>) -> Result<Self, String> {
        let mut ports = Vec::with_capacity(interfaces.len());
        for i in interfaces {
            let qdisc = match &i.tree {
                Some(tree) => Some(
                    QdiscModel::from_tree(tree, i.filters)
                        .map_err(|e| format!("{}: {e}", i.name))?,
                ),
                None => None,
            };
            ports.push(PortModel {
                name: i.name,
                qdisc,
            });
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
        let mut undo = Vec::new();
        let mut plan = Plan {
            effects: Vec::new(),
            results: vec![CommandResult::default(); commands.len()],
            undo: Vec::new(),
        };
        let mut refilter = BTreeSet::new();
        for (index, command) in commands.iter().enumerate() {
            let done = self.port_index(command.dev()).and_then(|port| {
                let mut step = Step {
                    index,
                    port,
                    name: self.ports[port].name.clone(),
                    undo: &mut undo,
                    plan: &mut plan,
                    refilter: &mut refilter,
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
                Effect::SetFilters {
                    port: p.name.clone(),
                    filters,
                },
            ));
        }
        plan.undo = undo;
        Ok(plan)
    }

    /// Takes an accepted batch back (it could not be persisted).
    pub fn revert(&mut self, plan: Plan) {
        self.rollback(plan.undo);
    }

    fn qdisc_mut(&mut self, port: usize) -> Result<&mut QdiscModel, IpcError> {
        let name = self.ports[port].name.clone();
        self.ports[port].qdisc.as_mut().ok_or_else(|| {
            error(
                ErrorCode::NotFound,
                format!("no htb qdisc on {name}: add one first (qdisc add dev {name} root handle 1: htb)"),
            )
        })
    }

    fn apply_one(&mut self, step: &mut Step<'_>, command: &Command) -> Result<(), IpcError> {
        match command {
            Command::QdiscAdd(q) => self.qdisc_set(step, q, Verb::Add),
            Command::QdiscChange(q) => self.qdisc_set(step, q, Verb::Change),
            Command::QdiscReplace(q) => self.qdisc_set(step, q, Verb::Replace),
            Command::QdiscDelete { .. } => self.qdisc_delete(step),
            Command::ClassAdd(c) => self.class_set(step, c, Verb::Add),
            Command::ClassChange(c) => self.class_set(step, c, Verb::Change),
            Command::ClassReplace(c) => self.class_set(step, c, Verb::Replace),
            Command::ClassDelete { id, .. } => self.class_delete(step, id),
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
            Command::FilterDelete { prio, handle, .. } => {
                self.filter_delete(step, *prio, handle.as_deref())
            }
        }
    }

    fn rollback(&mut self, undo: Vec<Undo>) {
        for step in undo.into_iter().rev() {
            let restored = match step {
                Undo::Qdisc { port, old } => {
                    self.ports[port].qdisc = old.map(|q| *q);
                    Ok(())
                }
                Undo::QdiscConfig { port, old } => {
                    if let Some(q) = self.ports[port].qdisc.as_mut() {
                        set_qdisc_config(q, old);
                    }
                    Ok(())
                }
                Undo::ClassAdded { port, id } => self.with_qdisc(port, |q| {
                    q.classes.remove(&id);
                    q.shadow.delete_class(Instant::ZERO, id).map(drop)
                }),
                Undo::ClassChanged { port, old } => self.with_qdisc(port, |q| {
                    let r = q.shadow.change_class(Instant::ZERO, old.id, &old.spec);
                    q.classes.insert(old.id, old);
                    r.map(drop)
                }),
                Undo::ClassDeleted { port, old } => self.with_qdisc(port, |q| {
                    let r = q
                        .shadow
                        .add_class(Instant::ZERO, old.id, old.parent, &old.spec)
                        .map(drop)
                        .and_then(|()| match &old.leaf {
                            Some(leaf) => q
                                .shadow
                                .set_leaf(Instant::ZERO, old.id, Some(&leaf.config))
                                .map(drop),
                            None => Ok(()),
                        });
                    q.classes.insert(old.id, old);
                    r
                }),
                Undo::Leaf { port, id, old } => self.with_qdisc(port, |q| {
                    let r = q
                        .shadow
                        .set_leaf(Instant::ZERO, id, old.as_ref().map(|l| &l.config))
                        .map(drop);
                    if let Some(def) = q.classes.get_mut(&id) {
                        def.leaf = old;
                    }
                    r
                }),
                Undo::Filters { port, old } => self.with_qdisc(port, |q| {
                    q.filters = old;
                    Ok(())
                }),
                Undo::FilterAdded { port, order } => self.with_qdisc(port, |q| {
                    // Sorted by order: one binary search, not a walk per undone add.
                    if let Ok(at) = q.filters.binary_search_by_key(&order, FilterEntry::order) {
                        q.filters.remove(at);
                    }
                    Ok(())
                }),
            };
            if let Err(e) = restored {
                // Undoing exactly what was just done cannot fail; if it does, say so loudly.
                tracing::error!("rolling back a refused batch failed: {e}");
            }
        }
    }

    fn with_qdisc(
        &mut self,
        port: usize,
        f: impl FnOnce(&mut QdiscModel) -> Result<(), ClassError>,
    ) -> Result<(), ClassError> {
        match self.ports[port].qdisc.as_mut() {
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
mod tests;
