//! tc's `mq` at a port's root (`net/sched/sch_mq.c`): one class per TX queue, `H:1` for queue 0,
//! each holding one HTB tree — LibreQoS's layout, `qdisc replace dev D root handle 7fff: mq`
//! then `qdisc add dev D parent 7fff:N handle N: htb …` per queue.
//!
//! As in the kernel the trees are independent: no rate is shared between them, and each is
//! served by one data-plane worker (the one owning TX queue N−1, as `mq_attach` binds child N
//! to queue N−1). htbd's own layout — one HTB at the root, its top shared by every worker — is
//! the better one where a port's rate must hold across workers; `mq` runs scripts written for
//! the kernel unchanged.

use std::collections::BTreeMap;

use htb_core::ClassId;
use htb_ipc::{ErrorCode, IpcError};

use super::qdisc::{QdiscModel, Verb};
use super::{Model, PlaneChange, Root, Step, Undo, error};

/// An `mq` root: its handle and the HTB tree under each of its classes.
#[derive(Debug)]
pub struct MqModel {
    /// Its handle's major (`7fff`).
    pub handle: u16,
    /// The HTB qdisc under each class, by class minor (1: TX queue 0). A class without one
    /// forwards unshaped, as the kernel's default qdisc per queue would.
    pub trees: BTreeMap<u16, QdiscModel>,
}

impl MqModel {
    /// An `mq` with no trees yet.
    #[must_use]
    pub fn new(handle: u16) -> Self {
        Self {
            handle,
            trees: BTreeMap::new(),
        }
    }
}

impl Model {
    /// The minor of `mq` class `class` of `port`'s root (`mq_find`: a class for each TX
    /// queue, `H:1` to `H:N`).
    ///
    /// # Errors
    /// The root is not `mq`, or has no such class.
    pub(super) fn mq_class(&self, port: usize, class: ClassId) -> Result<u16, IpcError> {
        let p = &self.ports[port];
        let Root::Mq(mq) = &p.root else {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "parent {class}: {} has no mq root, and an htb qdisc goes at the root or under an mq class (qdisc add dev {} root handle 7fff: mq)",
                    p.name, p.name
                ),
            ));
        };
        let minor = u16::try_from(class.minor()).unwrap_or(0);
        if class.major() != mq.handle || minor == 0 || minor > p.tx_queues {
            return Err(error(
                ErrorCode::NotFound,
                format!(
                    "Invalid parent {class}: {}'s mq {:x}: has classes {:x}:1 to {:x}:{:x}, one per TX queue",
                    p.name, mq.handle, mq.handle, mq.handle, p.tx_queues
                ),
            ));
        }
        Ok(minor)
    }

    /// Whether `class` names a class of `port`'s `mq` root.
    pub(super) fn is_mq_class(&self, port: usize, class: ClassId) -> bool {
        matches!(&self.ports[port].root, Root::Mq(mq) if mq.handle == class.major())
    }

    /// `qdisc add|replace dev D root [handle H:] mq`, with `H` if given.
    pub(super) fn mq_set(
        &mut self,
        step: &mut Step<'_>,
        handle: Option<u16>,
        verb: Verb,
    ) -> Result<(), IpcError> {
        let p = &self.ports[step.port];
        match (&p.root, verb) {
            (Root::None, _) => {}
            // Replacing an mq by the same one keeps it and its trees (the kernel would refuse
            // it: mq has no change operation; LibreQoS replaces its root on every reload).
            (Root::Mq(mq), Verb::Replace) if handle.is_none_or(|h| h == mq.handle) => {
                return Ok(());
            }
            (Root::Mq(_) | Root::Htb(_) | Root::Leaf(_), Verb::Replace) => {}
            (root, _) => {
                let what = match root {
                    Root::Mq(mq) => format!("mq {:x}:", mq.handle),
                    Root::Htb(q) => format!("htb {:x}:", q.config.major),
                    Root::Leaf(q) => format!(
                        "{} {:x}:",
                        q.root_leaf().map_or("qdisc", |l| l.config.kind().name()),
                        q.config.major
                    ),
                    Root::None => String::new(),
                };
                return Err(error(
                    ErrorCode::Exists,
                    format!(
                        "{} has a root qdisc ({what}) already; use replace",
                        step.name
                    ),
                ));
            }
        }
        let handle = match handle {
            Some(h) => h,
            None => p.free_handle()?,
        };
        self.set_root(step, Root::Mq(MqModel::new(handle)));
        Ok(())
    }

    /// `qdisc del dev D parent H:N [handle M:]`: the HTB tree under `mq` class `H:N` goes (its
    /// queue forwards unshaped).
    pub(super) fn mq_tree_delete(
        &mut self,
        step: &mut Step<'_>,
        class: ClassId,
        handle: Option<ClassId>,
    ) -> Result<(), IpcError> {
        let (port, name) = (step.port, step.name.clone());
        let minor = self.mq_class(port, class)?;
        let Root::Mq(mq) = &mut self.ports[port].root else {
            return Err(error(ErrorCode::Internal, "mq vanished"));
        };
        let Some(tree) = mq.trees.get(&minor) else {
            return Err(error(
                ErrorCode::NotFound,
                format!(
                    "Cannot delete qdisc with handle of zero (mq class {class} of {name} has no htb)"
                ),
            ));
        };
        if let Some(h) = handle
            && h.major() != tree.config.major
        {
            return Err(error(
                ErrorCode::Invalid,
                format!(
                    "Invalid handle: the htb under {class} is {:x}:, not {h}",
                    tree.config.major
                ),
            ));
        }
        self.set_mq_tree(step, minor, None)
    }

    /// Puts `tree` under `mq` class `minor` of the step's port (`None`: takes its tree out):
    /// the tree it replaces goes from the data plane (the new one comes with its own effect),
    /// as [`set_root`](Self::set_root) does for the root.
    pub(super) fn set_mq_tree(
        &mut self,
        step: &mut Step<'_>,
        minor: u16,
        tree: Option<QdiscModel>,
    ) -> Result<(), IpcError> {
        let port = step.port;
        let Root::Mq(mq) = &mut self.ports[port].root else {
            return Err(error(ErrorCode::Internal, "mq vanished"));
        };
        let old = match tree {
            Some(t) => mq.trees.insert(minor, t),
            None => mq.trees.remove(&minor),
        };
        if let Some(old) = &old {
            step.effect(PlaneChange::tree(step.name.clone(), old.config.major, None));
        }
        step.undo.push(Undo::MqTree {
            port,
            minor,
            old: old.map(Box::new),
        });
        step.refilter.insert(port);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::batch;
    use crate::model::{PlaneChange, PortModel};

    fn port(queues: u16) -> Model {
        Model {
            ports: vec![PortModel::new("eth1".parse().unwrap(), queues)],
        }
    }

    /// LibreQoS's `mq_setup` for two queues, as its source writes the lines (fq_codel as the
    /// sqm), then one circuit per queue, with a filter each (LibreQoS steers by its XDP map;
    /// htbd by the filters): the lab test's batch (`tests/mq.rs`), on this model's port.
    fn libreqos() -> String {
        include_str!("../../testdata/libreqos-mq.batch").replace(" dev r2 ", " dev eth1 ")
    }
    #[test]
    fn libreqos_mq_batch_builds_one_tree_per_queue() {
        let mut m = port(2);
        let plan = m.apply(&batch(&libreqos())).unwrap();
        let Root::Mq(mq) = &m.ports[0].root else {
            panic!("no mq root")
        };
        assert_eq!(mq.handle, 0x7fff);
        assert_eq!(mq.trees.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(mq.trees[&1].config.default_minor, 2);
        assert_eq!(mq.trees[&2].classes.len(), 3);
        // The data plane gets each tree with the mq class it hangs under.
        let placed: Vec<(u16, Option<u16>)> = plan
            .effects
            .iter()
            .filter_map(|(_, e)| match e {
                PlaneChange::SetTree {
                    major,
                    tree: Some(t),
                    ..
                } => Some((*major, t.mq_minor)),
                _ => None,
            })
            .collect();
        assert_eq!(placed, [(1, Some(1)), (2, Some(2))]);
        // Filters of both trees, in tree order; each names its own tree's class.
        let filters = m.ports[0].data_filters().unwrap();
        let classes: Vec<String> = filters.iter().map(|f| f.class.to_string()).collect();
        assert_eq!(classes, ["1:3", "2:3"]);
        // Qdisc handles are unique on the device: a leaf's, a tree's, mq's.
        assert!(m.ports[0].handle_in_use(0x9004));
        assert!(m.ports[0].handle_in_use(0x7fff));
        assert!(m.ports[0].handle_in_use(2));
    }

    /// LibreQoS's whole command set for 1 000 circuits on a 10 Gbit/s network with four queues,
    /// as its bakery writes the lines (`mq_setup`, `add_site`, `add_circuit`: `class replace`
    /// and `qdisc replace … handle`, rates as `format_rate_for_tc` prints them, fq_codel as the
    /// sqm), both interfaces: one batch, all accepted.
    #[test]
    fn libreqos_command_set_for_1000_circuits_runs_verbatim() {
        let mut text = String::new();
        let mut handle = 0x9000;
        let mut next_handle = || {
            handle += 1;
            handle
        };
        for dev in ["eth1", "eth2"] {
            text += &format!("qdisc replace dev {dev} root handle 7FFF: mq\n");
            for q in 1..=4 {
                text += &format!(
                    "qdisc add dev {dev} parent 7FFF:0x{q:x} handle 0x{q:x}: htb default 2\n\
                     class add dev {dev} parent 0x{q:x}: classid 0x{q:x}:1 htb rate 10.0gbit ceil 10.0gbit quantum 60000\n\
                     qdisc add dev {dev} parent 0x{q:x}:1 handle 0x{:x}: fq_codel\n\
                     class add dev {dev} parent 0x{q:x}:1 classid 0x{q:x}:2 htb rate 2.5gbit ceil 10.0gbit prio 5 quantum 60000\n\
                     qdisc add dev {dev} parent 0x{q:x}:2 handle 0x{:x}: fq_codel\n\
                     class add dev {dev} parent 0x{q:x}:0x1 classid 0x{q:x}:0x3 htb rate 1.0gbit ceil 1.0gbit prio 3 quantum 60000\n",
                    next_handle(),
                    next_handle()
                );
            }
            for i in 0..1000u32 {
                let (q, minor) = (i % 4 + 1, 0x4 + i / 4);
                text += &format!(
                    "class replace dev {dev} parent 0x{q:x}:0x3 classid 0x{q:x}:0x{minor:x} htb rate 25.0mbit ceil 100.0mbit prio 3 quantum 12500\n\
                     qdisc replace dev {dev} parent 0x{q:x}:0x{minor:x} handle 0x{:x}: fq_codel\n",
                    next_handle()
                );
            }
        }
        let mut m = Model {
            ports: vec![
                PortModel::new("eth1".parse().unwrap(), 4),
                PortModel::new("eth2".parse().unwrap(), 4),
            ],
        };
        let commands = batch(&text);
        assert_eq!(commands.len(), 2 * (1 + 4 * 6 + 2000));
        m.apply(&commands).unwrap();
        for port in &m.ports {
            let trees = port.trees();
            assert_eq!(trees.len(), 4, "{}", port.name);
            let classes: usize = trees.iter().map(|(_, q)| q.classes.len()).sum();
            assert_eq!(classes, 4 * 3 + 1000, "{}", port.name);
        }
    }

    #[test]
    fn mq_follows_the_kernels_rules() {
        let mut m = port(2);
        m.apply(&batch(&libreqos())).unwrap();
        let refused = |m: &mut Model, line: &str| {
            let before = m.to_toml();
            let e = m.apply(&batch(line)).unwrap_err();
            assert_eq!(
                m.to_toml(),
                before,
                "{line}: a refused batch changed the model"
            );
            e
        };
        // A third queue does not exist; mq's classes are fixed; leaves go under htb classes.
        let e = refused(&mut m, "qdisc add dev eth1 parent 7fff:3 handle 3: htb");
        assert_eq!(e.code, ErrorCode::NotFound);
        assert!(e.message.contains("7fff:1 to 7fff:2"), "{e}");
        let e = refused(
            &mut m,
            "class add dev eth1 parent 7fff:1 classid 7fff:5 htb rate 1mbit",
        );
        assert!(e.message.contains("class of mq"), "{e}");
        let e = refused(&mut m, "qdisc replace dev eth1 parent 7fff:1 fq_codel");
        assert!(e.message.contains("htb trees"), "{e}");
        // The root is taken; a second tree under a class too; handles are the device's.
        assert_eq!(
            refused(&mut m, "qdisc add dev eth1 root handle 1: htb").code,
            ErrorCode::Exists
        );
        assert_eq!(
            refused(&mut m, "qdisc add dev eth1 root handle 8: mq").code,
            ErrorCode::Exists
        );
        assert_eq!(
            refused(&mut m, "qdisc add dev eth1 parent 7fff:1 handle 5: htb").code,
            ErrorCode::Exists
        );
        assert_eq!(
            refused(
                &mut m,
                "qdisc replace dev eth1 parent 7fff:1 handle 9004: htb"
            )
            .code,
            ErrorCode::Exists
        );
        // Filters must name their tree under mq; a tree's filter names its own classes.
        let e = refused(
            &mut m,
            "filter add dev eth1 protocol ip prio 2 u32 match ip dst 100.64.0.3/32 flowid 1:3",
        );
        assert!(e.message.contains("say which"), "{e}");
        let e = refused(
            &mut m,
            "filter add dev eth1 parent 2: protocol ip prio 2 u32 match ip dst 100.64.0.3/32 flowid 1:3",
        );
        assert!(e.message.contains("not a class of 2:"), "{e}");
        // A class of a tree that does not exist.
        assert_eq!(
            refused(
                &mut m,
                "class add dev eth1 parent 5:1 classid 5:3 htb rate 1mbit"
            )
            .code,
            ErrorCode::NotFound
        );
        // Replacing the same mq keeps it and its trees; `qdisc change` of a tree is in place.
        let before = m.to_toml();
        m.apply(&batch("qdisc replace dev eth1 root handle 7fff: mq"))
            .unwrap();
        assert_eq!(m.to_toml(), before);
        let plan = m
            .apply(&batch(
                "qdisc change dev eth1 parent 7fff:2 handle 2: htb default 3",
            ))
            .unwrap();
        assert!(matches!(
            plan.effects.as_slice(),
            [(_, PlaneChange::SetQdisc { config, .. })] if config.major == 2 && config.default_minor == 3
        ));
    }

    #[test]
    fn a_tree_goes_alone_and_a_refused_batch_brings_the_old_root_back() {
        let mut m = port(2);
        m.apply(&batch(&libreqos())).unwrap();
        // Deleting queue 2's tree leaves queue 1's, its classes and filters.
        let plan = m
            .apply(&batch("qdisc del dev eth1 parent 7fff:2 handle 2:"))
            .unwrap();
        assert!(matches!(
            plan.effects.first(),
            Some((
                _,
                PlaneChange::SetTree {
                    major: 2,
                    tree: None,
                    ..
                }
            ))
        ));
        assert_eq!(m.ports[0].trees().len(), 1);
        assert_eq!(m.ports[0].data_filters().unwrap().len(), 1);
        // A batch that swaps the root for an htb and then fails leaves the mq as it was.
        let before = m.to_toml();
        let e = m
            .apply(&batch(
                "qdisc replace dev eth1 root handle 1: htb default 2\nclass add dev eth1 parent 1:9 classid 1:10 htb rate 1mbit\n",
            ))
            .unwrap_err();
        assert_eq!(e.command, Some(1));
        assert_eq!(m.to_toml(), before);
        // And deleting the root takes everything.
        let plan = m.apply(&batch("qdisc del dev eth1 root")).unwrap();
        assert!(plan.effects.iter().any(|(_, e)| matches!(
            e,
            PlaneChange::SetTree {
                major: 1,
                tree: None,
                ..
            }
        )));
        assert!(matches!(m.ports[0].root, Root::None));
    }

    #[test]
    fn an_mq_root_survives_the_state_file() {
        let mut m = port(2);
        m.apply(&batch(&libreqos())).unwrap();
        let text = m.to_toml();
        assert!(text.contains("mq = \"7fff:\""), "{text}");
        assert!(
            text.contains("[[interface.tree]]\nparent = \"7fff:2\""),
            "{text}"
        );
        let trees = crate::config::parse_state(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let back = Model::from_trees(trees, &|_| 2).unwrap();
        assert_eq!(back.to_toml(), text);
        // A saved tree under a queue the interface no longer has is refused at start.
        let trees = crate::config::parse_state(&text).unwrap();
        let e = Model::from_trees(trees, &|_| 1).unwrap_err();
        assert!(
            matches!(&e, crate::model::TreeError::OnPort { source, .. } if matches!(**source, crate::model::TreeError::NoTxQueue { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("TX queue"), "{e}");
    }
}
