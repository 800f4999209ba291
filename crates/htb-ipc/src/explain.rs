//! "Why this class?" (`htb-cli explain 10.0.3.7`): a packet to and from an address, classified
//! by each port's own compiled classifier (the one its data plane runs), with the class it
//! leads to and that class's path to the root, or where HTB's default sends it.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::{ClassId, InterfaceName, Match};

/// What to explain: packets between `addr` and `peer` (each way), on `dev` or every port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Explain {
    /// The address asked about (a subscriber's).
    pub addr: IpAddr,
    /// The other end (`None`: the unspecified address of `addr`'s family, which only
    /// filters without that side match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<IpAddr>,
    /// Only this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<InterfaceName>,
    /// IP protocol (`None`: UDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<u8>,
    /// The port on `addr`'s side (`None`: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr_port: Option<u16>,
    /// The port on the peer's side (`None`: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_port: Option<u16>,
}

/// Which way the explained packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// From the peer to the address (a subscriber's download on its downstream port).
    ToAddr,
    /// From the address to the peer (its upload).
    FromAddr,
}

/// Where a port sends the packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Outcome {
    /// The first matching filter (in prio order) leads to `class`.
    Filter {
        /// Its prio.
        prio: u32,
        /// What it matches.
        matcher: Match,
        /// Its class.
        class: ClassId,
        /// It has a policer, which may drop the packet or pass it on to the next filter
        /// when over its rate.
        policed: bool,
    },
    /// No filter matched: the HTB qdisc's default class.
    Default {
        /// The class.
        class: ClassId,
    },
    /// No filter matched and the default class does not exist: the direct queue, sent
    /// unshaped (the kernel's `direct_packets_stat`).
    Direct,
    /// No filter matched under `mq`: the default class of the tree of the TX queue the frame
    /// lands on.
    MqDefault {
        /// Each tree's default class.
        classes: Vec<ClassId>,
    },
    /// The port has no HTB tree: forwarded unshaped (or by its classless root qdisc).
    Unshaped,
}

impl Outcome {
    /// The class the packet goes to (under `mq`: the first tree's default), if any.
    #[must_use]
    pub fn class(&self) -> Option<ClassId> {
        match self {
            Self::Filter { class, .. } | Self::Default { class } => Some(*class),
            Self::MqDefault { classes } => classes.first().copied(),
            Self::Direct | Self::Unshaped => None,
        }
    }

    /// In words, as `htb-cli explain` and the console say it: `filter pref 1 (dst
    /// 10.0.3.7/32) -> class 1:10`, `no filter matches -> default class 1:20`, …
    #[must_use]
    pub fn words(&self) -> String {
        match self {
            Self::Filter {
                prio,
                matcher,
                class,
                policed,
            } => format!(
                "filter pref {prio} ({}) -> class {class}{}",
                matcher.words(),
                if *policed { " (policed)" } else { "" }
            ),
            Self::Default { class } => format!("no filter matches -> default class {class}"),
            Self::Direct => {
                "no filter matches, no default class -> direct queue (unshaped)".to_owned()
            }
            Self::MqDefault { classes } => format!(
                "no filter matches -> the default class of its TX queue's tree ({})",
                classes
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::Unshaped => "no HTB tree -> unshaped".to_owned(),
        }
    }
}

/// One port's answer for one direction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortExplanation {
    /// The port.
    pub dev: InterfaceName,
    /// Which way.
    pub direction: Direction,
    /// Where it goes.
    pub outcome: Outcome,
    /// The class's path, from it up to its root class (empty without a class).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<ClassId>,
    /// Which queue of the class's leaf the flow joins: fq_codel's or sfq's flow bucket, from
    /// 0 (`None`: no class, a leaf with one queue, or cake, whose choice depends on what it
    /// holds). Two flows in one queue share its delay and its drops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_queue: Option<u32>,
}

/// The answer to [`Explain`]: per port, both directions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// In port order, to the address first.
    pub ports: Vec<PortExplanation>,
}
