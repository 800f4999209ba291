//! `[[interface]]`: one interface's trees and filters — its HTB qdisc, classes and filters, or
//! its `mq` and the `[[interface.tree]]` under it, or a classless root — its ingress qdisc, and
//! the saved state's `[[interface]]` tables, which have the same keys.

use std::collections::BTreeMap;

use htb_config::filter::FilterSection;
use htb_config::values::ClassIdValue;
use htb_config::{
    ClassSection, ConfigError, InterfaceName, Located, PortTree, QdiscSection, TreeSpec,
};
use htb_core::ClassId;
use htb_ipc::{FilterHandle, HashKey};
use serde::Deserialize;

use crate::model::{FilterEntry, FilterKind, Protocol, U32Parts, assign_handles, u32_divisor};
use crate::trees::{InterfaceTree, InterfaceTrees};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InterfaceSection {
    pub(super) name: Located<InterfaceName>,
    pub(super) peer: Option<Located<InterfaceName>>,
    pub(super) qdisc: Option<QdiscSection>,
    #[serde(default)]
    pub(super) class: Vec<Located<ClassSection>>,
    #[serde(default)]
    pub(super) filter: Vec<Located<FilterSection>>,
    /// tc's `mq` at the root (its handle): the trees go in `[[interface.tree]]`.
    pub(super) mq: Option<Located<ClassIdValue>>,
    /// Measure the TCP round trips of what leaves through it.
    #[serde(default)]
    pub(super) rtt: bool,
    #[serde(default)]
    pub(super) tree: Vec<Located<TreeSection>>,
    /// A classless qdisc at the root instead of a tree: `root = { kind = "cake", … }`.
    pub(super) root: Option<Located<htb_config::LeafSection>>,
    /// `"ifb"`: an IFB device (no interface of its own) whose tree shapes what other ports'
    /// ingress redirects to it.
    #[serde(rename = "type")]
    pub(super) kind: Option<Located<String>>,
    /// tc's ingress qdisc (`ffff:`) and its filters.
    pub(super) ingress: Option<Located<IngressSection>>,
}

/// `[interface.ingress]`: tc's `qdisc add dev X handle ffff: ingress`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IngressSection {
    /// Shorthand for the one filter sqm-scripts and wondershaper add: `protocol all prio 10 u32
    /// match u32 0 0 action mirred egress redirect dev IFB`.
    redirect: Option<Located<InterfaceName>>,
    /// Its filters (`filter add dev X parent ffff: …`): the keys of `[[interface.filter]]`,
    /// with `redirect` and/or `police` as their action.
    #[serde(default)]
    filter: Vec<Located<FilterSection>>,
}

/// `[[interface.tree]]`: the HTB tree under one class of the interface's `mq`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TreeSection {
    parent: Located<ClassIdValue>,
    qdisc: Option<QdiscSection>,
    #[serde(default)]
    class: Vec<Located<ClassSection>>,
    #[serde(default)]
    filter: Vec<Located<FilterSection>>,
}

/// The labels of `classes` (whose ids the tree's parse has checked).
fn labels_of(classes: &[Located<ClassSection>]) -> BTreeMap<ClassId, htb_config::ClassLabel> {
    classes
        .iter()
        .map(Located::get_ref)
        .filter_map(|c| Some((c.id.get_ref().0, c.label.clone()?)))
        .collect()
}

/// Why a filter section's u32 hash-table keys do not hold together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum U32PartsError {
    #[error("divisor, link and hash_mask/hash_at are u32's: set kind = \"u32\"")]
    NotU32,
    #[error(transparent)]
    Divisor(#[from] crate::model::FilterValueError),
    #[error("a u32 hash table (divisor) needs a handle like \"2:\"")]
    TableHandle,
    #[error("a u32 hash table (divisor) has no match, classid or link")]
    TableTakesNoMatch,
    #[error("link {0:?}: a hash table like \"2:\"")]
    Link(String),
    #[error("hash_mask and hash_at go together, with link, at a multiple of 4")]
    HashKey,
}

/// A filter section's u32 hash-table keys.
fn u32_parts(
    f: &FilterSection,
    kind: FilterKind,
    handle: Option<u32>,
) -> Result<U32Parts, U32PartsError> {
    let given =
        f.divisor.is_some() || f.link.is_some() || f.hash_mask.is_some() || f.hash_at.is_some();
    if given && kind != FilterKind::U32 {
        return Err(U32PartsError::NotU32);
    }
    if let Some(d) = f.divisor {
        u32_divisor(u32::from(d))?;
        if handle.is_none_or(|h| h & 0xfffff != 0) {
            return Err(U32PartsError::TableHandle);
        }
        if f.classid.is_some() || f.link.is_some() || !f.matcher.0.is_empty() {
            return Err(U32PartsError::TableTakesNoMatch);
        }
    }
    let link = f
        .link
        .as_deref()
        .map(|l| match FilterHandle::parse(Some(FilterKind::U32), l) {
            Ok(FilterHandle(h)) if h != 0 && h & 0xfffff == 0 => Ok((h >> 20) as u16),
            _ => Err(U32PartsError::Link(l.to_owned())),
        })
        .transpose()?;
    let hashkey = match (f.hash_mask, f.hash_at) {
        (None, None) => None,
        (Some(mask), Some(at)) if link.is_some() && at % 4 == 0 => Some(HashKey { mask, at }),
        _ => return Err(U32PartsError::HashKey),
    };
    Ok(U32Parts {
        divisor: f.divisor,
        link,
        hashkey,
    })
}

/// Parses one `[[interface]]`'s trees — its qdisc, classes and filters, or its `mq` and the
/// `[[interface.tree]]` under it — and also returns the filters flattened for the data plane
/// (flattening is how u32 links are checked).
pub(super) fn interface_trees(
    text: &str,
    section: &Located<InterfaceSection>,
) -> Result<(InterfaceTrees, Vec<htb_config::filter::Filter>), ConfigError> {
    let err = |span: std::ops::Range<usize>, msg: String| ConfigError::spanned(text, &span, msg);
    let iface = section.get_ref();
    let name = iface.name.get_ref();
    let ifb = match &iface.kind {
        None => false,
        Some(k) if k.get_ref() == "ifb" => true,
        Some(k) => {
            return Err(err(
                k.span(),
                format!(
                    "type {:?}: htbd knows \"ifb\" (an IFB device); leave type out for an interface",
                    k.get_ref()
                ),
            ));
        }
    };
    let ingress = match &iface.ingress {
        None => None,
        Some(_) if ifb => {
            return Err(err(
                iface.name.span(),
                format!("{name} is an IFB: it takes no ingress qdisc (other ports redirect to it)"),
            ));
        }
        Some(located) => Some(ingress_filters(text, name, located)?),
    };
    let (mut trees, flat) = egress_trees(text, section)?;
    trees.ifb = ifb;
    trees.ingress = ingress;
    Ok((trees, flat))
}

/// The filters of an `[interface.ingress]`: its `redirect` shorthand, then its filters.
fn ingress_filters(
    text: &str,
    name: &str,
    located: &Located<IngressSection>,
) -> Result<Vec<FilterEntry>, ConfigError> {
    let section = located.get_ref();
    let (_, mut filters, _) =
        tree_filters(text, name, located.span(), None, &[], &section.filter, true)?;
    if let Some(to) = &section.redirect {
        let prio = 10;
        let handle = filters
            .iter()
            .filter(|f| f.prio == prio && f.kind == FilterKind::U32)
            .map(|f| f.handle + 1)
            .max()
            .unwrap_or(0x8000_0800);
        filters.push(
            FilterEntry::new(
                prio,
                Protocol::All,
                FilterKind::U32,
                handle,
                htb_config::filter::Match::default(),
                None,
            )
            .with_redirect(Some(to.get_ref().clone())),
        );
        filters.sort_by_key(FilterEntry::order);
    }
    Ok(filters)
}

/// An interface's qdisc and classes, or `mq` and its trees, or a classless root.
fn egress_trees(
    text: &str,
    section: &Located<InterfaceSection>,
) -> Result<(InterfaceTrees, Vec<htb_config::filter::Filter>), ConfigError> {
    let err = |span: std::ops::Range<usize>, msg: String| ConfigError::spanned(text, &span, msg);
    let iface = section.get_ref();
    let name = iface.name.get_ref().clone();
    if let Some(root) = &iface.root {
        // A classless root's `[interface.qdisc]` may hold its size table, nothing else.
        let qdisc = iface.qdisc.as_ref();
        let stab = qdisc.and_then(|q| q.stab.as_ref());
        let qdisc_others = qdisc.is_some_and(|q| {
            q.handle.is_some()
                || q.default.is_some()
                || q.r2q.is_some()
                || q.direct_qlen.is_some()
                || q.burst_time.is_some()
                || q.leaf.is_some()
                || q.stab.is_none()
        });
        let others = qdisc_others
            || iface.mq.is_some()
            || !iface.class.is_empty()
            || !iface.filter.is_empty()
            || !iface.tree.is_empty();
        if others {
            return Err(err(
                root.span(),
                format!(
                    "interface {name} has a classless root qdisc: it takes no mq, classes, filters or trees, and of [interface.qdisc] only stab"
                ),
            ));
        }
        let mut def = root.get_ref().0;
        let major = *def.handle.get_or_insert(1);
        let stab = stab.map(|s| htb_config::size_table(text, s)).transpose()?;
        let carrier = crate::model::QdiscModel::classless(major, def, stab)
            .map_err(|e| err(root.span(), e.to_string()))?;
        return Ok((
            InterfaceTrees {
                name,
                mq: None,
                trees: vec![InterfaceTree {
                    tree: PortTree::root(carrier.tree()),
                    filters: Vec::new(),
                    labels: BTreeMap::new(),
                }],
                root_leaf: Some(def),
                ifb: false,
                ingress: None,
            },
            Vec::new(),
        ));
    }
    let Some(mq) = &iface.mq else {
        if let Some(t) = iface.tree.first() {
            return Err(err(
                t.span(),
                format!(
                    "[[interface.tree]] hangs under mq: set mq = \"7fff:\" on interface {name}"
                ),
            ));
        }
        let (tree, filters, flat) = tree_filters(
            text,
            &name,
            section.span(),
            iface.qdisc.as_ref(),
            &iface.class,
            &iface.filter,
            false,
        )?;
        let trees = tree
            .map(|tree| {
                let split = htb_config::split_choices(text, &iface.class, &tree, false)?;
                Ok::<_, ConfigError>(InterfaceTree {
                    tree: PortTree {
                        split,
                        ..PortTree::root(tree)
                    },
                    filters,
                    labels: labels_of(&iface.class),
                })
            })
            .transpose()?
            .into_iter()
            .collect();
        return Ok((
            InterfaceTrees {
                name,
                mq: None,
                trees,
                root_leaf: None,
                ifb: false,
                ingress: None,
            },
            flat,
        ));
    };
    let handle = mq.get_ref().0;
    if !handle.is_qdisc() || handle.major() == 0 {
        return Err(err(
            mq.span(),
            format!("mq {handle} must be a qdisc handle like \"7fff:\""),
        ));
    }
    if iface.qdisc.is_some() || !iface.class.is_empty() || !iface.filter.is_empty() {
        return Err(err(
            mq.span(),
            format!(
                "interface {name} has an mq root: its qdisc, classes and filters go in [[interface.tree]] (one per mq class)"
            ),
        ));
    }
    let mut trees: Vec<InterfaceTree> = Vec::new();
    let mut flat = Vec::new();
    for located in &iface.tree {
        let t = located.get_ref();
        let parent = t.parent.get_ref().0;
        let minor = u16::try_from(parent.minor()).unwrap_or(0);
        if parent.major() != handle.major() || minor == 0 {
            return Err(err(
                t.parent.span(),
                format!(
                    "parent {parent} is not a class of mq {handle} (those are {handle}1, {handle}2, …)"
                ),
            ));
        }
        if trees.iter().any(|o| o.tree.mq_minor == Some(minor)) {
            return Err(err(
                t.parent.span(),
                format!("mq class {parent} has two trees"),
            ));
        }
        let (tree, filters, tree_flat) = tree_filters(
            text,
            &name,
            located.span(),
            t.qdisc.as_ref(),
            &t.class,
            &t.filter,
            false,
        )?;
        let Some(tree) = tree else {
            return Err(err(
                located.span(),
                format!("the tree under {parent} needs a qdisc or classes"),
            ));
        };
        let major = tree.config.major;
        if major == handle.major() || trees.iter().any(|o| o.tree.tree.config.major == major) {
            return Err(err(
                located.span(),
                format!("qdisc handle {major:x}: is used twice on interface {name}"),
            ));
        }
        // Refused: a tree under mq is its queue's worker's, whole.
        htb_config::split_choices(text, &t.class, &tree, true)?;
        trees.push(InterfaceTree {
            tree: PortTree {
                tree,
                mq_minor: Some(minor),
                split: BTreeMap::new(),
            },
            filters,
            labels: labels_of(&t.class),
        });
        flat.extend(tree_flat);
    }
    trees.sort_by_key(|t| t.tree.mq_minor);
    Ok((
        InterfaceTrees {
            name,
            mq: Some(handle.major()),
            trees,
            root_leaf: None,
            ifb: false,
            ingress: None,
        },
        flat,
    ))
}

/// Parses one tree's qdisc, classes and filters (`None`: no tree); also returns the filters
/// flattened for the data plane.
#[allow(clippy::type_complexity)]
fn tree_filters(
    text: &str,
    name: &str,
    span: std::ops::Range<usize>,
    qdisc: Option<&QdiscSection>,
    classes: &[Located<ClassSection>],
    filter_sections: &[Located<FilterSection>],
    ingress: bool,
) -> Result<
    (
        Option<TreeSpec>,
        Vec<FilterEntry>,
        Vec<htb_config::filter::Filter>,
    ),
    ConfigError,
> {
    let err = |span: std::ops::Range<usize>, msg: String| ConfigError::spanned(text, &span, msg);
    let tree = if qdisc.is_some() || !classes.is_empty() {
        Some(htb_config::tree_from_sections(text, qdisc, classes)?)
    } else {
        None
    };
    let mut filters = Vec::new();
    for located in filter_sections {
        let f = located.get_ref();
        let class = f.classid.as_ref().map(|c| c.get_ref().0);
        let redirect = f.redirect.as_ref().map(|r| r.get_ref().clone());
        if let (false, Some(r)) = (ingress, &f.redirect) {
            return Err(err(
                r.span(),
                "redirect (tc's mirred egress redirect) is the action of an ingress filter: put the filter in [[interface.ingress.filter]]".into(),
            ));
        }
        if ingress && redirect.is_none() && f.police.is_none() {
            return Err(err(
                located.span(),
                "an ingress filter needs an action: redirect = \"ifbN\" (shape in the IFB's tree) or police (drop what exceeds a rate)".into(),
            ));
        }
        if ingress && (f.divisor.is_some() || f.link.is_some()) {
            return Err(err(
                located.span(),
                "u32 hash tables and links are for an htb qdisc's filters; an ingress filter matches directly".into(),
            ));
        }
        if let (false, Some(class), Some(located_class)) = (ingress, class, f.classid.as_ref()) {
            let known = tree
                .as_ref()
                .is_some_and(|t| t.classes.iter().any(|c| c.id == class));
            if !known {
                return Err(err(
                    located_class.span(),
                    format!("filter targets class {class}, which interface {name} does not define"),
                ));
            }
        }
        let at = |e: String| err(located.span(), e);
        let protocol = f
            .protocol
            .as_deref()
            .map_or(Ok(Protocol::All), Protocol::parse)
            .map_err(|e| at(e.to_string()))?;
        let kind = f
            .kind
            .as_deref()
            .map_or(Ok(FilterKind::Flower), FilterKind::parse)
            .map_err(|e| at(e.to_string()))?;
        let handle = f
            .handle
            .as_deref()
            .map(|h| FilterHandle::parse(Some(kind), h).map(|h| h.0))
            .transpose()
            .map_err(|e| at(e.to_string()))?;
        let matcher =
            crate::model::with_protocol(f.matcher.0, protocol).map_err(|e| at(e.to_string()))?;
        if let Some(h) = handle
            && filters
                .iter()
                .any(|(e, given): &(FilterEntry, bool)| *given && e.prio == f.prio && e.handle == h)
        {
            return Err(at(format!(
                "two filters with prio {} and handle {h:#x}",
                f.prio
            )));
        }
        let u32 = u32_parts(f, kind, handle).map_err(|e| at(e.to_string()))?;
        if class.is_none() && u32.divisor.is_none() && u32.link.is_none() && !ingress {
            return Err(at(
                "a filter needs a classid (only a u32 divisor or link may go without)".into(),
            ));
        }
        let police = f
            .police
            .as_ref()
            .map(|p| {
                p.get_ref()
                    .config()
                    .map(htb_config::filter::Police::new)
                    .map_err(|e| err(p.span(), e.to_string()))
            })
            .transpose()?;
        let entry = FilterEntry::new(f.prio, protocol, kind, handle.unwrap_or(0), matcher, class)
            .with_u32(u32)
            .with_police(police)
            .with_redirect(redirect);
        filters.push((entry, handle.is_some()));
    }
    assign_handles(&mut filters)
        .map_err(|e| err(span.clone(), format!("interface {name}: {e}")))?;
    let mut filters: Vec<FilterEntry> = filters.into_iter().map(|(f, _)| f).collect();
    filters.sort_by_key(FilterEntry::order);
    let flat =
        crate::model::flatten(&filters).map_err(|e| err(span, format!("interface {name}: {e}")))?;
    Ok((tree, filters, flat))
}

/// Parses a saved-state file (`[[interface]]` tables only, as [`Model::to_toml`] writes).
///
/// [`Model::to_toml`]: crate::model::Model::to_toml
///
/// # Errors
/// The first problem, located.
pub fn parse_state(text: &str) -> Result<Vec<InterfaceTrees>, ConfigError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct StateFile {
        #[serde(default)]
        interface: Vec<Located<InterfaceSection>>,
    }
    let file: StateFile = htb_config::from_toml(text)?;
    file.interface
        .iter()
        .map(|section| interface_trees(text, section).map(|(trees, _)| trees))
        .collect()
}
