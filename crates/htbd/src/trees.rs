//! An interface's trees and filters as a config file or a saved state gives them: what the
//! model is built from (`Model::from_trees`), what a reload is compared against, and what
//! `--print-tc` writes. Parsed by `config`; read by the model, the control plane and reload.

use std::collections::BTreeMap;

use htb_config::{InterfaceName, PortTree};
use htb_core::ClassId;

use crate::model::filter_entry::FilterEntry;

/// One interface's trees and filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceTrees {
    /// Interface name.
    pub name: InterfaceName,
    /// The handle major of its `mq` root (`None`: at most one tree, at the root).
    pub mq: Option<u16>,
    /// Its HTB trees (none: unshaped), under `mq` in class order; for a classless root, the
    /// one-class tree that carries it.
    pub trees: Vec<InterfaceTree>,
    /// The classless qdisc at its root (`root = { kind = "cake", … }`), its handle given.
    pub root_leaf: Option<htb_config::LeafDef>,
    /// An IFB device (`type = "ifb"`).
    pub ifb: bool,
    /// Its ingress qdisc's filters, in evaluation order (`None`: no ingress qdisc).
    pub ingress: Option<Vec<FilterEntry>>,
}

/// One HTB tree of an interface, with its filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceTree {
    /// The tree and where it hangs.
    pub tree: PortTree,
    /// Its filters, with handles, in evaluation order ([`FilterEntry::order`]).
    pub filters: Vec<FilterEntry>,
    /// Its classes' labels (`label = { … }`).
    pub labels: BTreeMap<ClassId, htb_config::ClassLabel>,
}

impl InterfaceTrees {
    /// The trees as the data plane takes them.
    #[must_use]
    pub fn port_trees(&self) -> Vec<PortTree> {
        self.trees.iter().map(|t| t.tree.clone()).collect()
    }
}
