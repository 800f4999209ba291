//! The leaf qdiscs of classes: `qdisc add|change|replace|del dev D parent 1:10 [handle 10:]
//! KIND …`, by the kernel's rules (`tc_modify_qdisc`, `tc_get_qdisc`, `htb_graft`) and with its
//! error texts.

use htb_config::LeafDef;
use htb_core::{ClassId, Instant, LeafKind};
use htb_ipc::{ErrorCode, IpcError, LeafQdiscSpec};

use super::qdisc::{QdiscModel, Verb, handle_major};
use super::{Model, Step, class_error, error};

/// The first handle the kernel picks itself (`qdisc_alloc_handle`: 8001:, 8002:, …).
pub(super) const AUTO_HANDLE: u16 = 0x8001;

/// What a leaf command does, once the kernel's rules have spoken.
enum Graft {
    /// A new qdisc in the class (`create_n_graft`), with this handle or an automatic one.
    New(Option<u16>),
    /// The class's qdisc changes its options in place (`qdisc_change`).
    Change(LeafDef),
}

/// The leaf class `id` of `qdisc`, and its own leaf qdisc.
fn leaf_class(qdisc: &QdiscModel, id: ClassId) -> Result<Option<LeafDef>, IpcError> {
    if id.major() != qdisc.config.major {
        return Err(error(
            ErrorCode::NotFound,
            format!(
                "Failed to find qdisc with specified classid ({id} is not a class of {:x}:)",
                qdisc.config.major
            ),
        ));
    }
    let Some(class) = qdisc.classes.get(id) else {
        return Err(error(
            ErrorCode::NotFound,
            format!("Specified class not found ({id})"),
        ));
    };
    // The shadow knows its children (a walk of the classes did not scale).
    if qdisc.class_info(id).is_some_and(|c| c.children > 0) {
        return Err(error(
            ErrorCode::Invalid,
            format!(
                "class {id} has children: only a leaf class takes a qdisc (htb_graft: Invalid argument)"
            ),
        ));
    }
    Ok(class.leaf())
}

fn kind_mismatch(current: LeafKind, asked: LeafKind) -> IpcError {
    error(
        ErrorCode::Invalid,
        format!(
            "Invalid qdisc name: must match existing qdisc (the class's qdisc is {current}, not {asked})"
        ),
    )
}

/// Records `leaf` as class `id`'s own (`None`: the default) in the model.
fn record_leaf(qdisc: &mut QdiscModel, id: ClassId, leaf: Option<LeafDef>) -> Result<(), IpcError> {
    qdisc.classes.set_leaf(id, leaf).map(drop).ok_or_else(|| {
        error(
            ErrorCode::Internal,
            format!("class {id} missing from the model"),
        )
    })
}

impl Model {
    /// `qdisc add|change|replace dev D parent CLASS [handle H:] KIND …`.
    pub(super) fn leaf_set(
        &mut self,
        step: &mut Step<'_>,
        l: &LeafQdiscSpec,
        verb: Verb,
    ) -> Result<(), IpcError> {
        let Some(id) = l.parent else {
            return self.root_leaf_set(step, l, verb);
        };
        let (port, name) = (step.port, step.name.clone());
        if l.stab.is_some() {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "stab under class {id}: htbd applies a size table where HTB charges, on the root htb qdisc (qdisc add dev {name} root handle 1: stab … htb)"
                ),
            ));
        }
        if self.is_mq_class(port, id) {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "under mq's classes htbd hangs htb trees, not {} (qdisc add dev {name} parent {id} handle 1: htb)",
                    l.leaf.kind()
                ),
            ));
        }
        let qdisc = self.tree_mut(port, Some(id.major()))?;
        let current = leaf_class(qdisc, id)?;
        let handle = handle_major(l.handle)?;
        let exclusive = || {
            error(
                ErrorCode::Exists,
                format!(
                    "Exclusivity flag on, cannot modify (class {id} has a qdisc already: use replace or change)"
                ),
            )
        };
        let graft = match (verb, current) {
            (Verb::Add, Some(_)) => return Err(exclusive()),
            (Verb::Add | Verb::Replace, None) => Graft::New(handle),
            (Verb::Change, None) => {
                return Err(error(
                    ErrorCode::NotFound,
                    format!("Specified qdisc not found (class {id} has only its default leaf)"),
                ));
            }
            (Verb::Change, Some(cur)) => {
                if handle.is_some_and(|h| Some(h) != cur.handle) {
                    return Err(exclusive());
                }
                if cur.config.kind() != l.leaf.kind() {
                    return Err(kind_mismatch(cur.config.kind(), l.leaf.kind()));
                }
                Graft::Change(cur)
            }
            // tc_modify_qdisc with NLM_F_CREATE | NLM_F_REPLACE: another handle creates and
            // grafts; no handle and another kind too ("this magic test"); the class's own
            // handle changes in place, so its kind must match.
            (Verb::Replace, Some(cur)) => match handle {
                Some(h) if Some(h) != cur.handle => Graft::New(Some(h)),
                None if cur.config.kind() != l.leaf.kind() => Graft::New(None),
                _ if cur.config.kind() != l.leaf.kind() => {
                    return Err(kind_mismatch(cur.config.kind(), l.leaf.kind()));
                }
                _ => Graft::Change(cur),
            },
        };
        let invalid = |e: htb_core::LeafError| error(ErrorCode::Invalid, e.to_string());
        match graft {
            Graft::New(handle) => {
                let config = l.leaf.resolve().map_err(invalid)?;
                let in_use = |h: u16| self.ports[port].handle_in_use(h);
                let handle = match handle {
                    Some(h) if in_use(h) && current.and_then(|c| c.handle) != Some(h) => {
                        return Err(error(
                            ErrorCode::Exists,
                            format!("handle {h:x}: is used by another qdisc on {name}"),
                        ));
                    }
                    Some(h) => h,
                    None => self.ports[port].free_handle()?,
                };
                let qdisc = self.tree_mut(port, Some(id.major()))?;
                let _ = qdisc
                    .shadow
                    .set_leaf(Instant::ZERO, id, Some(&config))
                    .map_err(class_error)?;
                record_leaf(
                    qdisc,
                    id,
                    Some(LeafDef {
                        handle: Some(handle),
                        config,
                    }),
                )?;
                step.leaf_set(id, current, Some(config));
            }
            Graft::Change(cur) => {
                let config = l.leaf.resolve_change(&cur.config).map_err(invalid)?;
                let _ = qdisc
                    .shadow
                    .change_leaf(Instant::ZERO, id, &config)
                    .map_err(class_error)?;
                record_leaf(
                    qdisc,
                    id,
                    Some(LeafDef {
                        handle: cur.handle,
                        config,
                    }),
                )?;
                step.leaf_reconfigured(id, cur, config);
            }
        }
        Ok(())
    }

    /// `qdisc del dev D parent CLASS [handle H:] [KIND]`: the class gets its default leaf back.
    pub(super) fn leaf_delete(
        &mut self,
        step: &mut Step<'_>,
        id: ClassId,
        handle: Option<ClassId>,
        kind: Option<LeafKind>,
    ) -> Result<(), IpcError> {
        let port = step.port;
        if self.is_mq_class(port, id) {
            if kind.is_some() {
                return Err(error(
                    ErrorCode::Invalid,
                    format!("the qdisc under mq class {id} is htb"),
                ));
            }
            return self.mq_tree_delete(step, id, handle);
        }
        let qdisc = self.tree_mut(port, Some(id.major()))?;
        let Some(current) = leaf_class(qdisc, id)? else {
            return Err(error(
                ErrorCode::NotFound,
                format!(
                    "Cannot delete qdisc with handle of zero (class {id} has only its default leaf)"
                ),
            ));
        };
        if let Some(h) = handle_major(handle)?
            && Some(h) != current.handle
        {
            return Err(error(
                ErrorCode::Invalid,
                format!("Invalid handle: class {id}'s qdisc is not {h:x}:"),
            ));
        }
        if let Some(kind) = kind
            && kind != current.config.kind()
        {
            return Err(kind_mismatch(current.config.kind(), kind));
        }
        let _ = qdisc
            .shadow
            .set_leaf(Instant::ZERO, id, None)
            .map_err(class_error)?;
        record_leaf(qdisc, id, None)?;
        step.leaf_set(id, Some(current), None);
        Ok(())
    }
}
