//! A classless qdisc at a port's root: `qdisc add|change|replace dev D root [handle H:] cake
//! bandwidth 20mbit …` (OpenWrt's sqm-scripts `piece_of_cake.qos`), or `root fq_codel`.
//!
//! htbd runs it as an HTB tree of one class, `H:1`, that every packet goes to, with a rate no
//! port reaches and the qdisc as the class's leaf: cake's own shaper (`bandwidth`) sets the
//! pace, the tree only carries it to the data plane. Nothing of the tree shows: `qdisc show`
//! prints `qdisc cake H: root …` as tc does, `class show` prints nothing (cake's classes are
//! its flows, which the kernel lists only while they hold packets), and classes and filters
//! cannot be added under it, as the kernel refuses them for a classless qdisc.

use htb_config::{ClassDef, LeafDef};
use htb_core::{ClassId, ClassSpec, Instant, LeafKind, Rate, SchedulerConfig};
use htb_ipc::{ErrorCode, IpcError, LeafQdiscSpec};

use super::qdisc::{QdiscModel, Verb};
use super::{ClassEntry, Model, PlaneChange, Root, Step, Undo, class_error, error};

/// The rate of the one class under a root qdisc: 10 Tbit/s, more than any port carries, so
/// that only the qdisc's own shaper (if any) limits.
pub const UNLIMITED: Rate = Rate::from_gbit(10_000);

/// The class every packet of a classless root goes to.
fn the_class(major: u16) -> ClassId {
    ClassId::new(major, 1)
}

impl QdiscModel {
    /// The one-class tree that carries `leaf` at a port's root under handle `major:`.
    ///
    /// # Errors
    /// The leaf refused by the scheduler (it is resolved already, so only an internal fault).
    pub fn classless(
        major: u16,
        leaf: LeafDef,
        stab: Option<htb_core::SizeTable>,
    ) -> Result<Self, super::qdisc::TreeError> {
        let config = SchedulerConfig {
            major,
            default_minor: 1,
            stab,
            ..SchedulerConfig::default()
        };
        let mut model = Self::new(config);
        let id = the_class(major);
        let def = ClassDef {
            id,
            parent: None,
            spec: ClassSpec::new(UNLIMITED),
            leaf: Some(leaf),
        };
        let _ = model.shadow.add_class(Instant::ZERO, id, None, &def.spec)?;
        let _ = model
            .shadow
            .set_leaf(Instant::ZERO, id, Some(&leaf.config))?;
        model.classes.add(def);
        Ok(model)
    }

    /// The classless qdisc this tree carries, if it is a root qdisc's.
    #[must_use]
    pub fn root_leaf(&self) -> Option<LeafDef> {
        self.classes
            .get(the_class(self.config.major))
            .and_then(ClassEntry::leaf)
    }
}

impl Model {
    /// `qdisc add|change|replace dev D root [handle H:] KIND …` for a classless kind.
    pub(super) fn root_leaf_set(
        &mut self,
        step: &mut Step<'_>,
        l: &LeafQdiscSpec,
        verb: Verb,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        let handle = super::qdisc::handle_major(l.handle)?;
        let kind = l.leaf.kind();
        let current = match &self.ports[port].root {
            Root::Leaf(q) => q.root_leaf().map(|leaf| (q.config.major, leaf)),
            _ => None,
        };
        let other_root = !matches!(self.ports[port].root, Root::None | Root::Leaf(_));
        let invalid = |e: htb_core::LeafError| error(ErrorCode::Invalid, e.to_string());
        let stab = super::qdisc::size_table(l.stab)?;
        let in_place = match (verb, current) {
            (Verb::Add, _) if current.is_some() || other_root => {
                return Err(error(
                    ErrorCode::Exists,
                    format!(
                        "Exclusivity flag on, cannot modify ({name} has a root qdisc already: use replace or change)"
                    ),
                ));
            }
            (Verb::Change, None) => {
                return Err(error(
                    ErrorCode::NotFound,
                    format!("Specified qdisc not found (no {kind} at {name}'s root)"),
                ));
            }
            (Verb::Change, Some((major, cur))) => {
                if handle.is_some_and(|h| h != major) {
                    return Err(error(
                        ErrorCode::Invalid,
                        format!("Invalid handle: {name}'s root qdisc is {major:x}:"),
                    ));
                }
                if cur.config.kind() != kind {
                    return Err(kind_mismatch(cur.config.kind(), kind));
                }
                Some((major, cur))
            }
            // tc_modify_qdisc with NLM_F_REPLACE: the root's own handle (or none) and kind
            // changes it in place; anything else grafts a new root.
            (Verb::Replace, Some((major, cur)))
                if handle.is_none_or(|h| h == major) && cur.config.kind() == kind =>
            {
                Some((major, cur))
            }
            _ => None,
        };
        if let Some((major, cur)) = in_place {
            let config = l.leaf.resolve_change(&cur.config).map_err(invalid)?;
            let Root::Leaf(q) = &mut self.ports[port].root else {
                return Err(error(ErrorCode::Internal, "the root qdisc went away"));
            };
            let id = the_class(major);
            let _ = q
                .shadow
                .change_leaf(Instant::ZERO, id, &config)
                .map_err(class_error)?;
            let new = LeafDef {
                handle: cur.handle,
                config,
            };
            let _ = q.classes.set_leaf(id, Some(new));
            step.leaf_undo(id, Some(cur));
            // The size table goes with every change, as tc sends it (none: removed).
            if q.config.stab != stab {
                step.undo.push(Undo::QdiscConfig {
                    port,
                    old: Box::new(q.config),
                });
                let config = SchedulerConfig { stab, ..q.config };
                super::qdisc::set_qdisc_config(q, config);
                step.effect(PlaneChange::SetQdisc {
                    port: name.clone(),
                    config,
                });
            }
            step.effect(PlaneChange::ChangeLeaf {
                port: name,
                id,
                leaf: config,
            });
            return Ok(());
        }
        let config = l.leaf.resolve().map_err(invalid)?;
        // A new root replaces the old one and all it held: its handle is free again.
        let major = match handle {
            Some(h) => h,
            None => self.ports[port].free_handle()?,
        };
        let leaf = LeafDef {
            handle: Some(major),
            config,
        };
        let new = QdiscModel::classless(major, leaf, stab)
            .map_err(|e| error(ErrorCode::Internal, e.to_string()))?;
        let tree = new.port_tree(None);
        self.set_root(step, Root::Leaf(Box::new(new)));
        step.effect(PlaneChange::tree(name, major, Some(tree)));
        Ok(())
    }
}

fn kind_mismatch(current: LeafKind, asked: LeafKind) -> IpcError {
    error(
        ErrorCode::Invalid,
        format!(
            "Invalid qdisc name: must match existing qdisc (the root qdisc is {current}, not {asked})"
        ),
    )
}

#[cfg(test)]
mod tests {
    use htb_core::LeafConfig;
    use htb_ipc::Command;

    use super::*;
    use crate::model::PortModel;

    /// The lines' commands as `htb-cli -b` sends them.
    fn commands(lines: &[&str]) -> Vec<Command> {
        crate::model::tests::batch(&lines.join("\n"))
    }

    fn model() -> Model {
        Model {
            ports: vec![PortModel::new("r2".parse().unwrap(), 1)],
        }
    }

    fn root(m: &Model) -> (u16, LeafConfig) {
        let Root::Leaf(q) = &m.ports[0].root else {
            panic!("no root leaf: {:?}", m.ports[0].root)
        };
        (q.config.major, q.root_leaf().unwrap().config)
    }

    #[test]
    fn cake_at_the_root_follows_tc_testing() {
        let mut m = model();
        // 2313: add, then change only mpu.
        m.apply(&commands(&[
            "qdisc add dev r2 handle 1: root cake overhead 128 mpu 256",
        ]))
        .unwrap();
        m.apply(&commands(&[
            "qdisc change dev r2 handle 1: root cake mpu 128",
        ]))
        .unwrap();
        let (major, LeafConfig::Cake(c)) = root(&m) else {
            panic!()
        };
        assert_eq!((major, c.overhead, c.mpu), (1, 128, 128));
        // 2342: replace with the same handle changes in place.
        m.apply(&commands(&[
            "qdisc replace dev r2 handle 1: root cake mpu 64",
        ]))
        .unwrap();
        let (_, LeafConfig::Cake(c)) = root(&m) else {
            panic!()
        };
        assert_eq!((c.overhead, c.mpu), (128, 64));
        // add over it: refused; del: gone.
        let e = m
            .apply(&commands(&["qdisc add dev r2 handle 1: root cake"]))
            .unwrap_err();
        assert!(e.message.contains("Exclusivity"), "{e:?}");
        m.apply(&commands(&["qdisc del dev r2 handle 1: root"]))
            .unwrap();
        assert!(matches!(m.ports[0].root, Root::None));
    }

    #[test]
    fn a_classless_root_takes_no_classes_or_filters() {
        let mut m = model();
        m.apply(&commands(&["qdisc add dev r2 root cake bandwidth 20mbit"]))
            .unwrap();
        let (major, _) = root(&m);
        assert_eq!(major, 0x8001, "the kernel's first automatic handle");
        for line in [
            "class add dev r2 parent 8001: classid 8001:2 htb rate 1mbit",
            "filter add dev r2 parent 8001: protocol ip prio 1 u32 match ip dst 10.0.0.1/32 flowid 8001:1",
            "qdisc add dev r2 parent 8001:1 fq_codel",
        ] {
            let e = m.apply(&commands(&[line])).unwrap_err();
            assert!(e.message.contains("classless"), "{line}: {e:?}");
        }
        // replace with htb: a new root.
        m.apply(&commands(&[
            "qdisc replace dev r2 root handle 1: htb default 10",
        ]))
        .unwrap();
        assert!(m.ports[0].htb().is_some());
        // and back to cake, another kind at the root: a new root again.
        m.apply(&commands(&["qdisc replace dev r2 root handle 2: fq_codel"]))
            .unwrap();
        assert!(matches!(root(&m), (2, LeafConfig::FqCodel(_))));
    }
}
