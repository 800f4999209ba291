//! The TOML model of an HTB tree, shared by the simulator's scenarios (`htb-cli sim`) and the
//! daemon's config (`htbd --config`): `[qdisc]` and `[[class]]` tables with tc's names and
//! units, checked with errors that name the key, line and column.
//!
//! ```toml
//! [qdisc]
//! default = "20"        # hex minor of the default class, as tc's `default 20`
//! r2q = 10
//!
//! [[class]]
//! id = "1:1"            # no parent: a root class
//! rate = "100mbit"
//! [[class]]
//! id = "1:20"
//! parent = "1:1"
//! rate = "30mbit"
//! ceil = "100mbit"      # optional: burst cburst prio quantum mtu overhead mpu linklayer
//! leaf = { kind = "sfq", perturb = 10 }   # optional: the leaf's queue discipline
//! split = true          # htbd only: this subtree served by every worker at once
//! ```

mod error;
pub mod filter;
pub mod interface_name;
pub mod label;
pub mod leaf;
mod split;
mod tree;
pub mod values;

pub use error::{ConfigError, Located, ValueError};
pub use htb_core::{ClassDef, PortTree, SplitChoice, TreeSpec};
pub use interface_name::{InterfaceName, InterfaceNameError};
pub use label::{ClassLabel, label_toml};
pub use leaf::{LeafDef, LeafSection, LeafSectionError, leaf_toml};
pub use split::split_choices;
pub use tree::{ClassSection, QdiscSection, size_table, tree_from_sections};

/// Parses `text` as TOML into `T`, turning any error into a [`ConfigError`] that names the
/// line, column and key.
///
/// # Errors
/// [`ConfigError`] for malformed TOML, unknown or missing keys, or invalid values.
pub fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        ConfigError::at(text, offset, e.message().to_owned())
    })
}
