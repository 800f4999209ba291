//! The changes a client asks for: one [`Command`] per line of tc's grammar, each with its spec,
//! parsed once by the client and typed on the wire.

use crate::{
    ClassId, ClassLabel, FilterHandle, FilterKind, InterfaceName, LeafKind, LeafSpec, LinkLayer,
    Match, PoliceConfig, Protocol, Rate, SizeSpec, SplitChoice, U32Hashing,
};
use serde::{Deserialize, Serialize};

/// A change, as one line of tc's grammar says it.
///
/// The large specs are boxed (a `Box<T>` is read and written as `T`, so the wire is the same):
/// a batch holds millions of commands, and an enum is the size of its largest variant (248
/// bytes for every command when `FilterSpec` was inline, 48 now).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[serde(deny_unknown_fields)]
pub enum Command {
    /// `qdisc add … htb`: fails if the interface (or the `mq` class) has one.
    QdiscAdd(Box<QdiscSpec>),
    /// `qdisc change … htb`: new `default`, `r2q`, `direct_qlen`; classes stay.
    QdiscChange(Box<QdiscSpec>),
    /// `qdisc replace … htb`: add, or change in place (a different handle replaces the whole
    /// tree).
    QdiscReplace(Box<QdiscSpec>),
    /// `qdisc add dev D root [handle H:] mq`: fails if the interface has a root qdisc.
    MqAdd(MqSpec),
    /// `qdisc replace dev D root [handle H:] mq`: the root becomes an `mq` (the trees of
    /// another root go; the same `mq` stays as it is).
    MqReplace(MqSpec),
    /// `qdisc del dev D root`: the root qdisc (`htb`, or `mq` with its trees), its classes and
    /// filters go; the interface forwards unshaped.
    QdiscDelete {
        /// Interface.
        dev: InterfaceName,
    },
    /// `qdisc add dev D handle ffff: ingress`: an ingress qdisc, for filters whose `mirred
    /// egress redirect dev ifbN` shapes what the interface receives in an IFB's tree.
    IngressAdd {
        /// Interface.
        dev: InterfaceName,
    },
    /// `qdisc del dev D ingress` (or `handle ffff:`, `parent ffff:fff1`): the ingress qdisc
    /// and its filters go.
    IngressDelete {
        /// Interface.
        dev: InterfaceName,
    },
    /// `class add`.
    ClassAdd(Box<ClassSpec>),
    /// `class change`: every parameter is replaced (those not given return to defaults).
    ClassChange(Box<ClassSpec>),
    /// `class replace`: add or change.
    ClassReplace(Box<ClassSpec>),
    /// `class del`.
    ClassDelete(ClassDelete),
    /// `filter add`.
    FilterAdd(Box<FilterSpec>),
    /// `filter change … pref P handle H …`: the filter at that prio and handle gets the new
    /// match and class (it must exist).
    FilterChange(Box<FilterSpec>),
    /// `filter replace`: as `change` when the prio and handle name a filter, else `add`.
    FilterReplace(Box<FilterSpec>),
    /// `qdisc add … parent CLASS [handle H:] KIND …`: a leaf qdisc for a leaf class; or
    /// `qdisc add … root [handle H:] KIND …`: a classless qdisc at the root.
    LeafAdd(Box<LeafQdiscSpec>),
    /// `qdisc change … parent CLASS|root [handle H:] KIND …`: the qdisc's options (kinds
    /// must match).
    LeafChange(Box<LeafQdiscSpec>),
    /// `qdisc replace … parent CLASS|root [handle H:] KIND …`: add, change in place (same kind
    /// and handle), or a new qdisc in its place.
    LeafReplace(Box<LeafQdiscSpec>),
    /// `qdisc del … parent CLASS [handle H:] [KIND]`: an HTB class's leaf qdisc goes (back to
    /// the default leaf), or, under an `mq` class, its HTB tree (the queue is unshaped).
    LeafDelete {
        /// Interface.
        dev: InterfaceName,
        /// The class.
        parent: ClassId,
        /// Must be the leaf's handle, if given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handle: Option<ClassId>,
        /// Must be the leaf's kind, if given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<LeafKind>,
    },
    /// `filter del`: one filter (`handle`), all at a priority (`prio`), or all.
    FilterDelete(FilterDelete),
    /// `class label dev D classid C [name N] [circuit ID] …` (htbd's, not tc's): who the
    /// class shapes, or no label when `label` is `None`. It changes nothing the data plane
    /// does; the label goes with the class when it is deleted.
    ClassLabel(Box<LabelSpec>),
    /// htbd's, not tc's (tc has no word for it; `split = …` in the config file, sent by a
    /// reload): whether the subtree the class tops is served by every worker at once, by one,
    /// or as the daemon's `split_above` decides. The choice goes with the class when it is
    /// deleted.
    ClassSplit(SplitSpec),
}

impl Command {
    /// The interface it acts on.
    #[must_use]
    pub fn dev(&self) -> &InterfaceName {
        match self {
            Self::QdiscAdd(q) | Self::QdiscChange(q) | Self::QdiscReplace(q) => &q.dev,
            Self::MqAdd(m) | Self::MqReplace(m) => &m.dev,
            Self::QdiscDelete { dev } | Self::IngressAdd { dev } | Self::IngressDelete { dev } => {
                dev
            }
            Self::ClassDelete(c) => &c.dev,
            Self::ClassLabel(l) => &l.dev,
            Self::ClassSplit(s) => &s.dev,
            Self::FilterDelete(f) => &f.dev,
            Self::LeafDelete { dev, .. } => dev,
            Self::LeafAdd(l) | Self::LeafChange(l) | Self::LeafReplace(l) => &l.dev,
            Self::ClassAdd(c) | Self::ClassChange(c) | Self::ClassReplace(c) => &c.dev,
            Self::FilterAdd(f) | Self::FilterChange(f) | Self::FilterReplace(f) => &f.dev,
        }
    }
}

/// `class del dev D classid C`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassDelete {
    /// Interface.
    pub dev: InterfaceName,
    /// `1:20` (`:20`: of the interface's qdisc).
    pub id: ClassId,
}

/// `class label dev D classid C [name N] [circuit ID] [comment T] [device ID [name N] [mac M]
/// [address A]…]…`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSpec {
    /// Interface.
    pub dev: InterfaceName,
    /// The class (`:20`: of the interface's qdisc).
    pub id: ClassId,
    /// Its label; `None` takes it away.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "label_fields"
    )]
    pub label: Option<ClassLabel>,
}

/// A label written from its fields where they are: `ClassLabel`'s own `Serialize` (`into =
/// "LabelFields"`) copies every text of it first, a million labels' worth in an import. The
/// same value in any format.
fn label_fields<S: serde::Serializer>(label: &Option<ClassLabel>, s: S) -> Result<S::Ok, S::Error> {
    label.as_ref().map(ClassLabel::fields).serialize(s)
}

/// The operator's choice for the subtree class `id` tops ([`Command::ClassSplit`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitSpec {
    /// Interface.
    pub dev: InterfaceName,
    /// The subtree's top class: at the top of the interface's root HTB tree, or a child of
    /// one (`:20`: of the interface's qdisc).
    pub id: ClassId,
    /// `"split"` or `"owned"`; `None` leaves it to `split_above`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<SplitChoice>,
}

/// `filter del dev D [parent 1:] [prio P [handle H KIND]]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterDelete {
    /// Interface.
    pub dev: InterfaceName,
    /// The qdisc whose filters (`1:`; `None`: the interface's only HTB qdisc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// Only at this priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<u32>,
    /// Only this handle (needs `prio`, as in tc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<FilterHandle>,
}

/// `qdisc … dev D root handle 1: htb default 20 r2q 10 direct_qlen 1000`, or
/// `… parent 7fff:1 handle 1: htb …` under a class of an `mq` root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QdiscSpec {
    /// Interface.
    pub dev: InterfaceName,
    /// The `mq` class it goes under (`None`: the interface's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// `1:` (default `1:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<ClassId>,
    /// Default class minor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_minor: Option<u32>,
    /// Rate-to-quantum divisor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r2q: Option<u32>,
    /// Direct queue limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_qlen: Option<u32>,
    /// `stab …`: the size table. As in the kernel, a `change` without one removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stab: Option<SizeSpec>,
}

/// `qdisc add|replace dev D root [handle 7fff:] mq` (`sch_mq.c`: one class per TX queue).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqSpec {
    /// Interface.
    pub dev: InterfaceName,
    /// Its handle (default `8001:`, the first the kernel allocates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<ClassId>,
}

impl QdiscSpec {
    /// `qdisc add dev D root htb`: the root, handle `1:`, every option at its default. (The
    /// specs have no `Default`: an interface name has none.)
    #[must_use]
    pub fn new(dev: InterfaceName) -> Self {
        Self {
            dev,
            parent: None,
            handle: None,
            default_minor: None,
            r2q: None,
            direct_qlen: None,
            stab: None,
        }
    }
}

/// A class's parent as the wire has carried it: a class id or qdisc handle, or `"root"`.
pub(crate) fn parent_or_root<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ClassId>, D::Error> {
    let text = String::deserialize(d)?;
    if text == "root" {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format_args!("parent {text:?}: {e}")))
}

/// `class … dev D parent P classid C htb rate R …`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// Interface.
    pub dev: InterfaceName,
    /// `1:20` (`:20`: the minor of the parent's qdisc, as tc completes it).
    pub id: ClassId,
    /// Parent class or qdisc handle (`1:`); `None` = root (also read from `"root"`, which
    /// journals of older versions may hold).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "parent_or_root"
    )]
    pub parent: Option<ClassId>,
    /// Rate (required; bit/s on the wire, as it always was).
    pub rate: Rate,
    /// Ceil.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceil: Option<Rate>,
    /// Burst in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Cburst in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cburst: Option<u64>,
    /// Priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<u32>,
    /// Quantum in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantum: Option<u32>,
    /// MTU for default bursts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Bytes added per packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<u16>,
    /// Minimum packet unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpu: Option<u16>,
    /// `ethernet` or `atm` (`adsl` reads as `atm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linklayer: Option<LinkLayer>,
}

impl ClassSpec {
    /// `class … dev D classid ID htb rate R`, under the qdisc, every other option at its
    /// default.
    #[must_use]
    pub fn new(dev: InterfaceName, id: ClassId, rate: Rate) -> Self {
        Self {
            dev,
            id,
            parent: None,
            rate,
            ceil: None,
            burst: None,
            cburst: None,
            prio: None,
            quantum: None,
            mtu: None,
            overhead: None,
            mpu: None,
            linklayer: None,
        }
    }
}

/// `qdisc add|change|replace dev D parent 1:10|root [handle 10:] KIND OPTIONS`: typed on the
/// wire (the class and handle as ids, the options as the core's spec).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafQdiscSpec {
    /// Interface.
    pub dev: InterfaceName,
    /// The leaf class it serves; `None`: the interface's root (a classless qdisc there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// The qdisc's handle (`10:`); assigned when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<ClassId>,
    /// Kind and the options given.
    pub leaf: LeafSpec,
    /// `stab …` (only at the root, where it sets the length the qdisc counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stab: Option<SizeSpec>,
}

/// `filter add dev D parent 1: protocol ip prio 1 u32|flower … classid X`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSpec {
    /// Interface.
    pub dev: InterfaceName,
    /// The qdisc handle (`1:`); filters hang on the qdisc only. `None`: the interface's only
    /// HTB qdisc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ClassId>,
    /// `ip`, `ipv6`, `802.1q`, `arp`, `all`.
    pub protocol: Protocol,
    /// Priority; `None`: below every existing one, as the kernel picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prio: Option<u32>,
    /// `u32` or `flower`.
    pub kind: FilterKind,
    /// Explicit handle; `None`: assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<FilterHandle>,
    /// What to match (restricted to `protocol`'s family by htbd).
    pub matcher: Match,
    /// Target class (`flowid`/`classid`; `:20` is of the filter's qdisc); none for a u32 hash
    /// table, a link without a class, an empty u32 filter (which only makes its prio exist, as
    /// tc's), or an ingress filter whose action needs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassId>,
    /// u32's hash-table parts.
    #[serde(default, skip_serializing_if = "U32Hashing::is_empty")]
    pub hashing: U32Hashing,
    /// `action police …` (or u32's `police …`); boxed, as most filters have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub police: Option<Box<PoliceConfig>>,
    /// `action mirred egress redirect dev IFB`: a filter of an ingress qdisc sends what it
    /// matches through that IFB's tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<InterfaceName>,
}

impl FilterSpec {
    /// `filter add dev D protocol all u32`: on the interface's only HTB qdisc, every packet,
    /// no class or action yet (tc's defaults, which the parser then overrides word by word).
    #[must_use]
    pub fn new(dev: InterfaceName) -> Self {
        Self {
            dev,
            parent: None,
            protocol: Protocol::default(),
            prio: None,
            kind: FilterKind::default(),
            handle: None,
            matcher: Match::default(),
            class: None,
            hashing: U32Hashing::default(),
            police: None,
            redirect: None,
        }
    }
}
