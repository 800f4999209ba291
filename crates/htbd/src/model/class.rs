//! The `class add|change|replace|del` commands.

use htb_config::{ClassDef, ClassLabel};
use htb_core::{ClassId, ClassSpec, Instant, LengthAdjust, SplitChoice};
use htb_ipc::{ErrorCode, FilterHandle, IpcError};

use super::qdisc::Verb;
use super::{ClassEntry, Model, PlaneChange, QdiscModel, Step, Undo, class_error, error, of_qdisc};

/// A wire class spec as the scheduler's.
pub(super) fn class_spec(c: &htb_ipc::ClassSpec) -> Result<ClassSpec, IpcError> {
    let link_layer = c.linklayer.unwrap_or_default();
    Ok(ClassSpec {
        rate: c.rate,
        ceil: c.ceil,
        burst: c.burst,
        cburst: c.cburst,
        prio: c.prio.unwrap_or(0),
        quantum: c.quantum,
        mtu: c.mtu,
        adjust: LengthAdjust {
            overhead: c.overhead.unwrap_or(0),
            mpu: c.mpu.unwrap_or(0),
            link_layer,
        },
    })
}

impl Model {
    /// `class add|change|replace`.
    pub(super) fn class_set(
        &mut self,
        step: &mut Step<'_>,
        c: &htb_ipc::ClassSpec,
        verb: Verb,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        // The qdisc is the parent's (`tc_ctl_tclass` finds it from the parent, completes `:30`
        // with its major and refuses a class id of another), else the class id's.
        let given = c.id;
        let given_parent = c.parent;
        if let Some(p) = given_parent.filter(|&p| self.is_mq_class(port, p)) {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "parent {p} is a class of mq, whose classes are its TX queues: put an htb qdisc under it (qdisc add dev {name} parent {p} handle 1: htb) and its classes under that"
                ),
            ));
        }
        let major = [given_parent, Some(given)]
            .into_iter()
            .flatten()
            .map(ClassId::major)
            .find(|&m| m != 0);
        let qdisc = self.tree_mut(port, major)?;
        let major = qdisc.config.major;
        let id = of_qdisc(c.id, major);
        let parent = c
            .parent
            .map(|p| of_qdisc(p, major))
            .filter(|p| !(p.is_qdisc() && p.major() == major));
        let spec = class_spec(c)?;
        let change = match verb {
            Verb::Add => false,
            Verb::Change => true,
            Verb::Replace => qdisc.classes.contains(id),
        };
        if change {
            // As in the kernel, the parent of an existing class is not checked, and its leaf
            // qdisc stays.
            let warnings = qdisc
                .shadow
                .change_class(Instant::ZERO, id, &spec)
                .map_err(class_error)?
                .warnings;
            let old = qdisc.classes.set_spec(id, spec.clone()).ok_or_else(|| {
                error(
                    ErrorCode::Internal,
                    format!("class {id} missing from the model"),
                )
            })?;
            step.warn(warnings);
            step.undo.push(Undo::ClassChanged {
                port,
                id,
                old: Box::new(old),
            });
            step.effect(PlaneChange::ChangeClass {
                port: name,
                id,
                spec,
            });
        } else {
            let warnings = qdisc
                .shadow
                .add_class(Instant::ZERO, id, parent, &spec)
                .map_err(class_error)?
                .warnings;
            // A leaf parent becomes an inner class: its leaf qdisc goes (the kernel's
            // `htb_change_class` puts it), to come back only as the default.
            if let Some(p) = parent
                && let Some(Some(leaf)) = qdisc.classes.set_leaf(p, None)
            {
                step.leaf_undo(p, Some(leaf));
            }
            qdisc.classes.add(ClassDef {
                id,
                parent,
                spec: spec.clone(),
                leaf: None,
            });
            step.warn(warnings);
            step.undo.push(Undo::ClassAdded { port, id });
            step.effect(PlaneChange::AddClass {
                port: name,
                id,
                parent,
                spec,
            });
        }
        Ok(())
    }

    /// The tree a class id names on `port` (its major, or the port's tree for a bare minor as
    /// tc allows), with the id in that tree's major.
    fn tree_of_class(
        &mut self,
        port: usize,
        id: ClassId,
    ) -> Result<(&mut QdiscModel, ClassId), IpcError> {
        let qdisc = self.tree_mut(port, Some(id.major()).filter(|&m| m != 0))?;
        let id = of_qdisc(id, qdisc.config.major);
        Ok((qdisc, id))
    }

    /// `class del`: the class and its leaf qdisc.
    pub(super) fn class_delete(
        &mut self,
        step: &mut Step<'_>,
        id: ClassId,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        let (qdisc, id) = self.tree_of_class(port, id)?;
        // The use count says whether; the walk to name a user runs only for the refusal.
        if qdisc.classes.get(id).is_some_and(ClassEntry::in_use)
            && let Some(f) = qdisc.filters.iter().find(|f| f.class == Some(id))
        {
            return Err(error(
                ErrorCode::InUse,
                format!(
                    "class {id} is in use by filter pref {} {} {}; delete the filter first",
                    f.prio,
                    f.kind.name(),
                    FilterHandle(f.handle).display(f.kind)
                ),
            ));
        }
        let _ = qdisc
            .shadow
            .delete_class(Instant::ZERO, id)
            .map_err(class_error)?;
        // Its label goes with it, and comes back with it on an undo.
        let old = qdisc.classes.remove(id).ok_or_else(|| {
            error(
                ErrorCode::Internal,
                format!("class {id} missing from the model"),
            )
        })?;
        step.undo.push(Undo::ClassDeleted {
            port,
            old: Box::new(old),
        });
        // Its split choice goes with it (the data plane forgets it with the class).
        if let Some(choice) = qdisc.splits.remove(&id) {
            step.undo.push(Undo::Split {
                port,
                id,
                old: Some(choice),
            });
        }
        step.effect(PlaneChange::DeleteClass { port: name, id });
        Ok(())
    }

    /// `class_split` (htbd's, not tc's): the operator's choice for the subtree class `id` tops
    /// (`None`: `split_above` decides). Only a subtree's top in the port's root HTB tree takes
    /// one: a tree under `mq`, or a classless root's, is served whole by one worker.
    pub(super) fn class_split(
        &mut self,
        step: &mut Step<'_>,
        id: ClassId,
        choice: Option<SplitChoice>,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        let root_major = self.ports[port].htb().map(|q| q.config.major);
        let (qdisc, id) = self.tree_of_class(port, id)?;
        if root_major != Some(qdisc.config.major) {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "class {id} is not in {name}'s root htb qdisc: a tree under mq is served \
                     whole by its TX queue's worker"
                ),
            ));
        }
        let Some(def) = qdisc.classes.get(id) else {
            return Err(error(
                ErrorCode::NotFound,
                format!("class {id} does not exist on {name}"),
            ));
        };
        if let Some(parent) = def.parent()
            && qdisc
                .classes
                .get(parent)
                .is_some_and(|p| p.parent().is_some())
        {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "class {id} is below {parent}: a split choice is made for a whole subtree, \
                     at its top (a class at the top of the tree, or a child of one)"
                ),
            ));
        }
        let old = match choice {
            Some(c) => qdisc.splits.insert(id, c),
            None => qdisc.splits.remove(&id),
        };
        step.undo.push(Undo::Split { port, id, old });
        step.effect(PlaneChange::SetSplit {
            port: name,
            id,
            choice,
        });
        Ok(())
    }

    /// `class label`: who class `id` shapes (`None`: no label). The data plane is not told.
    pub(super) fn class_label(
        &mut self,
        step: &mut Step<'_>,
        id: ClassId,
        label: Option<&ClassLabel>,
    ) -> Result<(), IpcError> {
        let port = step.port;
        let (qdisc, id) = self.tree_of_class(port, id)?;
        if !qdisc.classes.contains(id) {
            return Err(error(
                ErrorCode::NotFound,
                format!(
                    "class {id} does not exist on {}: add it before labelling it",
                    step.name
                ),
            ));
        }
        let old = qdisc
            .classes
            .set_label(id, label)
            .map_err(|e| error(ErrorCode::TooLarge, e.to_string()))?;
        step.undo.push(Undo::Label { port, id, old });
        Ok(())
    }
}
