//! `htbd --config FILE`: the daemon's TOML config (a contract: tools and tests generate it).
//!
//! ```toml
//! [daemon]
//! mode = "router"              # or "bridge"
//! socket = "/run/htbd/htbd.sock"    # control socket
//! state_dir = "/var/lib/htbd"  # live changes persist here
//! log = "info"
//! http = "127.0.0.1:9469"      # optional: console, JSON API, /metrics, /health (off by default;
//!                              # `metrics = …` is its older name)
//! http_token = "/etc/htbd/http.token"  # required off loopback: requests carry this token
//!
//! [[interface]]
//! name = "r2"
//! rtt = true                   # optional: TCP round trips per class of what leaves here
//! [interface.qdisc]            # optional: an HTB tree shaping what leaves through this port
//! default = "20"
//! [[interface.class]]          # same keys as the simulator's [[class]]
//! id = "1:1"
//! rate = "100mbit"
//! [[interface.filter]]
//! prio = 1
//! match = { dst = "10.201.1.0/24", proto = "udp", dport = "5201" }
//! classid = "1:20"
//!
//! [[interface]]                # tc's mq instead: one HTB tree per TX queue
//! name = "r1"
//! mq = "7fff:"
//! [[interface.tree]]           # the tree under mq class 7fff:1 (TX queue 0)
//! parent = "7fff:1"
//! qdisc = { handle = "1:", default = "2" }
//! [[interface.tree.class]]     # and [[interface.tree.filter]], as above
//! id = "1:1"
//! rate = "1gbit"
//!
//! [[interface]]                # or a classless qdisc at the root (sqm's piece_of_cake)
//! name = "r3"
//! root = { kind = "cake", bandwidth = "20mbit", diffserv = "diffserv4", handle = "1:" }
//! ```
//!
//! Everything is checked before anything on the system is touched; errors name the key, line
//! and column.

use std::collections::BTreeMap;
use std::path::PathBuf;

use htb_config::filter::FilterSection;
use htb_config::values::ClassIdValue;
use htb_config::values::TimeValue;
use htb_config::{ClassSection, ConfigError, Located, PortTree, QdiscSection, TreeSpec};
use htb_core::ClassId;
use htb_xdp::{AttachMode, EngineConfig, IoConfig, Mode, PortConfig};
use serde::Deserialize;

use htb_ipc::{FilterHandle, HashKey};

use crate::model::{FilterEntry, FilterKind, Protocol, U32Parts, assign_handles, u32_divisor};
use crate::netfilter::NetfilterPolicy;
use crate::trees::{InterfaceTree, InterfaceTrees};

mod flows;
pub use flows::{FlowsConfig, IpfixConfig};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    daemon: Option<DaemonSection>,
    flows: Option<flows::FlowsSection>,
    #[serde(default)]
    interface: Vec<Located<InterfaceSection>>,
}

/// `[daemon]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DaemonSection {
    mode: Option<Located<String>>,
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    state_dir: Option<PathBuf>,
    log: Option<String>,
    frames: Option<u32>,
    frame_size: Option<Located<u32>>,
    ring_size: Option<Located<u32>>,
    batch: Option<usize>,
    busy_poll: Option<bool>,
    realtime: Option<Located<u8>>,
    xdp_mode: Option<Located<String>>,
    zero_copy: Option<bool>,
    liveness_timeout: Option<Located<TimeValue>>,
    stall_credit: Option<Located<TimeValue>>,
    netfilter: Option<Located<String>>,
    #[serde(alias = "metrics")]
    http: Option<Located<String>>,
    http_token: Option<Located<PathBuf>>,
    workers: Option<Located<usize>>,
    cpus: Option<Located<Vec<usize>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InterfaceSection {
    name: Located<String>,
    peer: Option<Located<String>>,
    qdisc: Option<QdiscSection>,
    #[serde(default)]
    class: Vec<Located<ClassSection>>,
    #[serde(default)]
    filter: Vec<Located<FilterSection>>,
    /// tc's `mq` at the root (its handle): the trees go in `[[interface.tree]]`.
    mq: Option<Located<ClassIdValue>>,
    /// Measure the TCP round trips of what leaves through it.
    #[serde(default)]
    rtt: bool,
    #[serde(default)]
    tree: Vec<Located<TreeSection>>,
    /// A classless qdisc at the root instead of a tree: `root = { kind = "cake", … }`.
    root: Option<Located<htb_config::LeafSection>>,
    /// `"ifb"`: an IFB device (no interface of its own) whose tree shapes what other ports'
    /// ingress redirects to it.
    #[serde(rename = "type")]
    kind: Option<Located<String>>,
    /// tc's ingress qdisc (`ffff:`) and its filters.
    ingress: Option<Located<IngressSection>>,
}

/// `[interface.ingress]`: tc's `qdisc add dev X handle ffff: ingress`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IngressSection {
    /// Shorthand for the one filter sqm-scripts and wondershaper add: `protocol all prio 10 u32
    /// match u32 0 0 action mirred egress redirect dev IFB`.
    redirect: Option<Located<String>>,
    /// Its filters (`filter add dev X parent ffff: …`): the keys of `[[interface.filter]]`,
    /// with `redirect` and/or `police` as their action.
    #[serde(default)]
    filter: Vec<Located<FilterSection>>,
}

/// `[[interface.tree]]`: the HTB tree under one class of the interface's `mq`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TreeSection {
    parent: Located<ClassIdValue>,
    qdisc: Option<QdiscSection>,
    #[serde(default)]
    class: Vec<Located<ClassSection>>,
    #[serde(default)]
    filter: Vec<Located<FilterSection>>,
}

/// A validated config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Control socket path.
    pub socket: PathBuf,
    /// Group owning the control socket (mode 0660); `None`: root's.
    pub socket_group: Option<String>,
    /// Where live changes persist.
    pub state_dir: PathBuf,
    /// Log filter (`info`, `debug`, `htbd=debug`, …).
    pub log: String,
    /// Per interface, its tree and filters as the file gives them.
    pub interfaces: Vec<InterfaceTrees>,
    /// The data plane.
    pub engine: EngineConfig,
    /// Router mode with netfilter rules that its fast path would bypass: refuse or run.
    pub netfilter: NetfilterPolicy,
    /// The HTTP listener: console, API, `/metrics`, `/health` (`None`: not served).
    pub http: Option<HttpConfig>,
    /// Flow records and their export (`[flows]`; `None`: none kept).
    pub flows: Option<FlowsConfig>,
}

/// `[daemon] http` and `http_token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// The file holding the token requests for data must carry (required off loopback).
    pub token: Option<PathBuf>,
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
fn interface_trees(
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
        filters.push(FilterEntry {
            prio,
            protocol: Protocol::All,
            kind: FilterKind::U32,
            handle,
            matcher: htb_config::filter::Match::default(),
            class: None,
            u32: U32Parts::default(),
            police: None,
            redirect: Some(to.get_ref().clone()),
        });
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
            .map(|tree| InterfaceTree {
                tree: PortTree::root(tree),
                filters,
                labels: labels_of(&iface.class),
            })
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
        trees.push(InterfaceTree {
            tree: PortTree {
                tree,
                mq_minor: Some(minor),
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
        filters.push((
            FilterEntry {
                prio: f.prio,
                protocol,
                kind,
                handle: handle.unwrap_or(0),
                matcher,
                class,
                u32,
                police,
                redirect,
            },
            handle.is_some(),
        ));
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

/// Where an optional key's value stands (the file's start when it is absent).
fn span_of<T>(value: Option<&Located<T>>) -> std::ops::Range<usize> {
    value.map(Located::span).unwrap_or_default()
}

/// The value at `value` if `ok` accepts it; else `message`, at the value's line and column.
fn accepted<T: Copy>(
    text: &str,
    value: &Located<T>,
    ok: impl FnOnce(T) -> bool,
    message: impl FnOnce(T) -> String,
) -> Result<T, ConfigError> {
    let v = *value.get_ref();
    if ok(v) {
        Ok(v)
    } else {
        Err(ConfigError::spanned(text, &value.span(), message(v)))
    }
}

impl DaemonConfig {
    /// Parses and validates a config.
    ///
    /// # Errors
    /// The first problem, with line, column and key.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut file: File = htb_config::from_toml(text)?;
        let daemon = file.daemon.take().unwrap_or_default();
        let flows = file.flows.take().map(|f| f.validate(text)).transpose()?;
        let err =
            |span: std::ops::Range<usize>, msg: String| ConfigError::spanned(text, &span, msg);

        let mode = match daemon
            .mode
            .as_ref()
            .map(|m| (m.get_ref().as_str(), m.span()))
        {
            None | Some(("router", _)) => Mode::Router,
            Some(("bridge", _)) => Mode::Bridge,
            Some((other, span)) => {
                return Err(err(
                    span,
                    format!("mode must be \"router\" or \"bridge\", not {other:?}"),
                ));
            }
        };
        let attach = match daemon
            .xdp_mode
            .as_ref()
            .map(|m| (m.get_ref().as_str(), m.span()))
        {
            None | Some(("auto", _)) => AttachMode::Auto,
            Some(("native", _)) => AttachMode::Native,
            Some(("skb", _)) => AttachMode::Skb,
            Some((other, span)) => {
                return Err(err(
                    span,
                    format!("xdp_mode must be auto, native or skb, not {other:?}"),
                ));
            }
        };
        let mut io = IoConfig::default();
        if let Some(frames) = daemon.frames {
            io.frames = frames;
            io.frames_default = false;
        }
        let power_of_two = |v: u32, range: std::ops::RangeInclusive<u32>| {
            v.is_power_of_two() && range.contains(&v)
        };
        if let Some(size) = &daemon.frame_size {
            io.frame_size = accepted(
                text,
                size,
                |v| power_of_two(v, 2048..=65536),
                |v| format!("frame_size {v} must be a power of two from 2048 to 65536"),
            )?;
        }
        if let Some(size) = &daemon.ring_size {
            io.ring_size = accepted(
                text,
                size,
                |v| power_of_two(v, 64..=32768),
                |v| format!("ring_size {v} must be a power of two from 64 to 32768"),
            )?;
        }
        io.zero_copy = daemon.zero_copy.unwrap_or(false);
        if let Some(p) = &daemon.realtime {
            accepted(
                text,
                p,
                |p| (1..=99).contains(&p),
                |p| format!("realtime priority {p} must be 1 to 99"),
            )?;
        }
        if let Some(w) = &daemon.workers {
            accepted(
                text,
                w,
                |w| (1..=64).contains(&w),
                |w| format!("workers = {w} must be 1 to 64"),
            )?;
        }
        let cpus = daemon
            .cpus
            .as_ref()
            .map_or_else(Vec::new, |c| c.get_ref().clone());
        if let Some(c) = &daemon.cpus {
            let mut seen = std::collections::HashSet::new();
            if let Some(bad) = c.get_ref().iter().find(|&&cpu| !seen.insert(cpu)) {
                return Err(err(c.span(), format!("cpus lists CPU {bad} twice")));
            }
            if c.get_ref().is_empty() {
                return Err(err(
                    c.span(),
                    "cpus is empty: list one CPU per worker, or leave it out".into(),
                ));
            }
            if let Some(w) = &daemon.workers
                && c.get_ref().len() < *w.get_ref()
            {
                return Err(err(
                    c.span(),
                    format!(
                        "cpus lists {} CPUs for {} workers: one per worker",
                        c.get_ref().len(),
                        w.get_ref()
                    ),
                ));
            }
            if let Some(cpu) = c.get_ref().iter().find(|&&cpu| cpu >= 1024) {
                return Err(err(c.span(), format!("cpus: CPU {cpu} is beyond 1023")));
            }
        }
        // Liveness fail-open: 100 ms by default, "0s" turns it off.
        let liveness = match &daemon.liveness_timeout {
            None => Some(std::time::Duration::from_millis(100)),
            Some(t) => {
                let ns = t.get_ref().0.as_nanos();
                if ns == 0 {
                    None
                } else if !(1_000_000..=10_000_000_000).contains(&ns) {
                    return Err(err(
                        t.span(),
                        format!(
                            "liveness_timeout {} must be 1ms to 10s (or 0s: off)",
                            t.get_ref().0
                        ),
                    ));
                } else {
                    Some(std::time::Duration::from_nanos(ns))
                }
            }
        };
        let stall_credit = stall_credit(text, daemon.stall_credit.as_ref())?;
        let netfilter = match &daemon.netfilter {
            None => NetfilterPolicy::Refuse,
            Some(v) => match v.get_ref().as_str() {
                "refuse" => NetfilterPolicy::Refuse,
                "bypass" => NetfilterPolicy::Bypass,
                other => {
                    return Err(err(
                        v.span(),
                        format!("netfilter {other:?} must be \"refuse\" or \"bypass\""),
                    ));
                }
            },
        };
        let http = match &daemon.http {
            None => {
                if let Some(t) = &daemon.http_token {
                    return Err(err(
                        t.span(),
                        "http_token without http: nothing listens".into(),
                    ));
                }
                None
            }
            Some(v) => {
                let addr: std::net::SocketAddr = v.get_ref().parse().map_err(|_| {
                    err(
                        v.span(),
                        format!(
                            "http {:?} is not an address and port such as \"127.0.0.1:9469\" \
                             or \"[::1]:9469\"",
                            v.get_ref()
                        ),
                    )
                })?;
                let token = daemon.http_token.as_ref().map(|t| t.get_ref().clone());
                if token.is_none() && !addr.ip().is_loopback() {
                    return Err(err(
                        v.span(),
                        format!(
                            "http {addr} is reachable from other hosts: set http_token to a file \
                             holding a token (e.g. `head -c 24 /dev/urandom | base64 > \
                             /etc/htbd/http.token`), or listen on 127.0.0.1"
                        ),
                    ));
                }
                Some(HttpConfig { addr, token })
            }
        };
        if file.interface.is_empty() {
            return Err(ConfigError::at(
                text,
                text.len(),
                "no [[interface]]: list every port htbd forwards on".into(),
            ));
        }

        let mut ports: Vec<PortConfig> = Vec::new();
        let mut interfaces = Vec::new();
        for section in &file.interface {
            let iface = section.get_ref();
            let name = iface.name.get_ref().clone();
            if ports.iter().any(|p| p.name == name) {
                return Err(err(
                    iface.name.span(),
                    format!("interface {name} is listed twice"),
                ));
            }
            let peer = iface.peer.as_ref().map(|p| p.get_ref().clone());
            // Its type is checked with its trees: an IFB is only what parsed as one.
            let (trees, filters) = interface_trees(text, section)?;
            let ifb = trees.ifb;
            match (mode, &iface.peer) {
                (_, Some(p)) if ifb => {
                    return Err(err(
                        p.span(),
                        format!(
                            "{name} is an IFB: it takes no peer (what it releases goes on to each frame's own egress port)"
                        ),
                    ));
                }
                (Mode::Bridge, None) if ifb => {}
                (Mode::Router, Some(p)) => {
                    return Err(err(p.span(), "peer is for mode = \"bridge\" only".into()));
                }
                (Mode::Bridge, None) => {
                    return Err(err(
                        iface.name.span(),
                        format!("bridge mode: interface {name} needs a peer"),
                    ));
                }
                _ => {}
            }
            ports.push(PortConfig {
                name,
                peer,
                trees: trees.port_trees(),
                filters,
                rtt: iface.rtt,
                ifb,
                ingress: None,
            });
            interfaces.push(trees);
        }
        for (section, trees) in file.interface.iter().zip(&interfaces) {
            let redirects = trees
                .ingress
                .iter()
                .flatten()
                .filter_map(|f| f.redirect.as_ref());
            for to in redirects {
                if !interfaces.iter().any(|t| t.ifb && t.name == *to) {
                    return Err(err(
                        span_of(section.get_ref().ingress.as_ref()),
                        format!(
                            "interface {}: ingress redirects to {to}, which is not an IFB port here (add [[interface]] name = \"{to}\" type = \"ifb\")",
                            trees.name
                        ),
                    ));
                }
            }
        }
        if !ports.iter().any(|p| !p.ifb) {
            return Err(ConfigError::at(
                text,
                text.len(),
                "only IFB ports: list the interfaces htbd forwards on too".into(),
            ));
        }
        if mode == Mode::Bridge {
            for (section, port) in file.interface.iter().zip(&ports).filter(|(_, p)| !p.ifb) {
                let peer = port.peer.as_deref().unwrap_or_default();
                let back = ports
                    .iter()
                    .find(|p| p.name == peer)
                    .and_then(|p| p.peer.as_deref());
                if back != Some(port.name.as_str()) {
                    return Err(err(
                        span_of(section.get_ref().peer.as_ref()),
                        format!(
                            "{} and {peer} must both be listed, naming each other as peer",
                            port.name
                        ),
                    ));
                }
            }
        }

        Ok(Self {
            socket: daemon
                .socket
                .unwrap_or_else(|| PathBuf::from(htb_ipc::DEFAULT_SOCKET)),
            socket_group: daemon.socket_group,
            state_dir: daemon
                .state_dir
                .unwrap_or_else(|| PathBuf::from("/var/lib/htbd")),
            log: daemon.log.unwrap_or_else(|| "info".into()),
            interfaces,
            engine: EngineConfig {
                mode,
                ports,
                io,
                attach,
                busy_poll: daemon.busy_poll.unwrap_or(false),
                realtime: daemon.realtime.map(|p| *p.get_ref()),
                batch: daemon.batch.unwrap_or(64),
                liveness,
                workers: daemon.workers.map(|w| *w.get_ref()),
                cpus,
                stall_credit,
                flows: flows.map(|f| f.table),
            },
            netfilter,
            http,
            flows,
        })
    }
}

/// The most stall credit a class may get per stall of its worker; longer would outlast the
/// liveness fail-open's default, after which the kernel forwards anyway.
const MAX_STALL_CREDIT_NS: u64 = 100_000_000;

/// `daemon.stall_credit`: 10 ms by default (a VM's host takes a few ms at a time), `"0s"`
/// turns it off.
fn stall_credit(
    text: &str,
    value: Option<&Located<TimeValue>>,
) -> Result<Option<std::time::Duration>, ConfigError> {
    let Some(t) = value else {
        return Ok(Some(std::time::Duration::from_millis(10)));
    };
    match t.get_ref().0.as_nanos() {
        0 => Ok(None),
        ns if ns <= MAX_STALL_CREDIT_NS => Ok(Some(std::time::Duration::from_nanos(ns))),
        _ => Err(ConfigError::spanned(
            text,
            &t.span(),
            format!(
                "stall_credit {} must be at most 100ms (or 0s: off)",
                t.get_ref().0
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: &str = r#"
[daemon]
mode = "router"
socket = "/tmp/htbd.sock"

[[interface]]
name = "r1"

[[interface]]
name = "r2"
[interface.qdisc]
default = "20"
r2q = 10
[[interface.class]]
id = "1:1"
rate = "100mbit"
[[interface.class]]
id = "1:20"
parent = "1:1"
rate = "10mbit"
ceil = "100mbit"
[[interface.filter]]
prio = 1
match = { dst = "10.201.1.0/24", proto = "udp", dport = "5201" }
classid = "1:20"
"#;

    #[test]
    fn parses_the_contract_example() {
        let c = DaemonConfig::parse(LAB).unwrap();
        assert_eq!(c.socket, PathBuf::from("/tmp/htbd.sock"));
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/htbd"));
        assert_eq!(c.engine.mode, Mode::Router);
        assert_eq!(c.engine.ports.len(), 2);
        assert!(c.engine.ports[0].trees.is_empty());
        let r2 = &c.engine.ports[1];
        assert_eq!(r2.trees[0].tree.config.default_minor, 0x20);
        assert_eq!(r2.trees[0].mq_minor, None);
        assert_eq!(r2.filters[0].class, ClassId::new(1, 0x20));
        assert_eq!(r2.filters[0].matcher.dport.map(|p| p.first), Some(5201));
    }

    fn error(text: &str) -> String {
        DaemonConfig::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn an_mq_root_takes_one_tree_per_class_and_says_where_a_tree_is_wrong() {
        let head = "[daemon]\nstate_dir = \"/tmp/x\"\n[[interface]]\nname = \"r1\"\n";
        let tree = |parent: &str, major: u16| {
            format!(
                "[[interface.tree]]\nparent = \"{parent}\"\nqdisc = {{ handle = \"{major:x}:\" }}\n\
                 [[interface.tree.class]]\nid = \"{major:x}:1\"\nrate = \"10mbit\"\n"
            )
        };
        let text = format!(
            "{head}mq = \"7fff:\"\n{}{}",
            tree("7fff:2", 2),
            tree("7fff:1", 1)
        );
        let c = DaemonConfig::parse(&text).unwrap();
        assert_eq!(c.interfaces[0].mq, Some(0x7fff));
        let placed: Vec<(Option<u16>, u16)> = c.engine.ports[0]
            .trees
            .iter()
            .map(|t| (t.mq_minor, t.tree.config.major))
            .collect();
        assert_eq!(placed, [(Some(1), 1), (Some(2), 2)], "in class order");
        for (bad, why) in [
            (format!("{head}{}", tree("7fff:1", 1)), "set mq = "),
            (
                format!("{head}mq = \"7fff:\"\n{}", tree("8:1", 1)),
                "not a class of mq 7fff:",
            ),
            (
                format!(
                    "{head}mq = \"7fff:\"\n{}{}",
                    tree("7fff:1", 1),
                    tree("7fff:1", 2)
                ),
                "has two trees",
            ),
            (
                format!(
                    "{head}mq = \"7fff:\"\n{}{}",
                    tree("7fff:1", 1),
                    tree("7fff:2", 1)
                ),
                "is used twice",
            ),
            (
                format!("{head}mq = \"7fff:\"\n[interface.qdisc]\ndefault = \"2\"\n"),
                "go in [[interface.tree]]",
            ),
        ] {
            let e = error(&bad);
            assert!(e.contains(why) && e.starts_with("line "), "{why}: {e}");
        }
    }

    #[test]
    fn http_is_off_by_default_and_needs_a_token_off_loopback() {
        let http = |line: &str| {
            DaemonConfig::parse(&format!("[daemon]\n{line}\n[[interface]]\nname = \"r1\"\n"))
                .map(|c| c.http)
        };
        assert_eq!(http("").unwrap(), None);
        let local = HttpConfig {
            addr: "127.0.0.1:9469".parse().unwrap(),
            token: None,
        };
        assert_eq!(
            http("http = \"127.0.0.1:9469\"").unwrap(),
            Some(local.clone())
        );
        // The older name.
        assert_eq!(http("metrics = \"127.0.0.1:9469\"").unwrap(), Some(local));
        let e = http("http = \"localhost\"").unwrap_err().to_string();
        assert!(
            e.contains("not an address and port") && e.contains("line 2"),
            "{e}"
        );
        let e = http("http = \"0.0.0.0:9469\"").unwrap_err().to_string();
        assert!(e.contains("set http_token") && e.contains("line 2"), "{e}");
        assert_eq!(
            http("http = \"10.0.0.1:9469\"\nhttp_token = \"/etc/htbd/t\"")
                .unwrap()
                .unwrap()
                .token,
            Some(PathBuf::from("/etc/htbd/t"))
        );
        let e = http("http_token = \"/etc/htbd/t\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http_token without http"), "{e}");
        let e = http("http = \"127.0.0.1:1\"\nmetrics = \"127.0.0.1:2\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate"), "{e}");
    }

    #[test]
    fn netfilter_refuses_by_default_and_bypass_is_spelled_out() {
        let policy = |line: &str| {
            DaemonConfig::parse(&LAB.replace("[daemon]\n", &format!("[daemon]\n{line}\n")))
                .map(|c| c.netfilter)
        };
        assert_eq!(policy("").unwrap(), NetfilterPolicy::Refuse);
        assert_eq!(
            policy("netfilter = \"bypass\"").unwrap(),
            NetfilterPolicy::Bypass
        );
        let e = policy("netfilter = \"ignore\"").unwrap_err().to_string();
        assert!(
            e.starts_with("line 3, column 13: daemon.netfilter: netfilter \"ignore\" must be"),
            "{e}"
        );
    }

    #[test]
    fn liveness_timeout_defaults_to_100_ms_and_turns_off_with_zero() {
        let liveness = |line: &str| {
            DaemonConfig::parse(&LAB.replace("[daemon]\n", &format!("[daemon]\n{line}\n")))
                .map(|c| c.engine.liveness)
        };
        assert_eq!(
            liveness("").unwrap(),
            Some(std::time::Duration::from_millis(100))
        );
        assert_eq!(
            liveness("liveness_timeout = \"250ms\"").unwrap(),
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(liveness("liveness_timeout = \"0s\"").unwrap(), None);
        let e = liveness("liveness_timeout = \"10us\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("line 3, column 20: daemon.liveness_timeout: liveness_timeout 10us must be 1ms to 10s"),
            "{e}"
        );
    }

    #[test]
    fn stall_credit_defaults_to_10_ms_and_turns_off_with_zero() {
        let credit = |line: &str| {
            DaemonConfig::parse(&LAB.replace("[daemon]\n", &format!("[daemon]\n{line}\n")))
                .map(|c| c.engine.stall_credit)
        };
        assert_eq!(
            credit("").unwrap(),
            Some(std::time::Duration::from_millis(10))
        );
        assert_eq!(
            credit("stall_credit = \"4ms\"").unwrap(),
            Some(std::time::Duration::from_millis(4))
        );
        assert_eq!(credit("stall_credit = \"0s\"").unwrap(), None);
        let e = credit("stall_credit = \"1s\"").unwrap_err().to_string();
        assert!(
            e.starts_with(
                "line 3, column 16: daemon.stall_credit: stall_credit 1s must be at most 100ms"
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_configs_name_the_place() {
        let e = error(&LAB.replace("rate = \"10mbit\"", "rate = \"10mbitz\""));
        assert!(
            e.starts_with(
                "line 20, column 8: interface[1].class[1].rate: invalid rate \"10mbitz\""
            ),
            "{e}"
        );
        assert!(e.contains("invalid rate \"10mbitz\""), "{e}");
        let e = error(&LAB.replace("classid = \"1:20\"", "classid = \"1:30\""));
        assert!(
            e.starts_with(
                "line 25, column 11: interface[1].filter[0].classid: filter targets class 1:30"
            ),
            "{e}"
        );
        let e = error(&LAB.replace("mode = \"router\"", "mode = \"switch\""));
        assert!(e.starts_with("line 3, column 8: daemon.mode:"), "{e}");
        let e = error(&LAB.replace(
            "ceil = \"100mbit\"",
            "ceil = \"100mbit\"\nlabel = { name = \"Ann\", devices = [{ id = \"a\", mac = \"00:11\" }] }",
        ));
        assert!(
            e.starts_with("line 22, column 54: interface[1].class[1].label:")
                && e.contains("\"00:11\" is not a MAC address"),
            "{e}"
        );
        let e = error(&LAB.replace("name = \"r1\"", "name = \"r1\"\npeer = \"r2\""));
        assert!(e.contains("peer is for mode = \"bridge\" only"), "{e}");
        let e = error(
            "[daemon]\nmode = \"bridge\"\n[[interface]]\nname = \"a\"\npeer = \"b\"\n[[interface]]\nname = \"b\"\npeer = \"c\"\n",
        );
        assert!(e.contains("naming each other"), "{e}");
        let e = error("[daemon]\nlog = \"info\"\n");
        assert!(e.contains("no [[interface]]"), "{e}");
        let e = error("[daemon]\nframe_size = 3000\n[[interface]]\nname = \"a\"\n");
        assert!(e.contains("power of two"), "{e}");
        let e = error("[[interface]]\nname = \"a\"\n[[interface.filter]]\nclassid = \"1:1\"\n");
        assert!(e.contains("does not define"), "{e}");
        let e = error("[[interface]]\nname = \"a\"\nspeed = 1\n");
        assert!(e.contains("unknown field `speed`"), "{e}");
    }

    /// sqm-scripts' layout: r2 shapes its upload, and its download through ifb4r2.
    const SQM: &str = r#"
[daemon]
mode = "router"

[[interface]]
name = "r1"

[[interface]]
name = "r2"
[interface.ingress]
redirect = "ifb4r2"

[[interface]]
name = "ifb4r2"
type = "ifb"
[interface.qdisc]
default = "10"
[[interface.class]]
id = "1:10"
rate = "20mbit"
"#;

    #[test]
    fn an_ifb_port_and_an_ingress_redirect() {
        let c = DaemonConfig::parse(SQM).unwrap();
        let r2 = &c.interfaces[1];
        let ingress = r2.ingress.as_ref().expect("r2 has an ingress qdisc");
        assert_eq!(ingress.len(), 1);
        let f = &ingress[0];
        assert_eq!((f.prio, f.redirect.as_deref()), (10, Some("ifb4r2")));
        assert_eq!(
            FilterHandle(f.handle).display(f.kind).to_string(),
            "800::800"
        );
        assert!(c.interfaces[2].ifb && !r2.ifb);
        assert!(c.engine.ports[2].ifb);
        // The general form: filters of the ingress qdisc, each with its action.
        let general = SQM.replace(
            "redirect = \"ifb4r2\"",
            "[[interface.ingress.filter]]\nprio = 5\nmatch = { dst = \"10.0.0.0/8\" }\nredirect = \"ifb4r2\"\n[[interface.ingress.filter]]\nprio = 6\npolice = { rate = \"1mbit\", burst = \"10k\", exceed = \"drop\" }",
        );
        let c = DaemonConfig::parse(&general).unwrap_or_else(|e| panic!("{e}"));
        let ingress = c.interfaces[1].ingress.as_ref().unwrap();
        assert_eq!(ingress.len(), 2);
        assert!(ingress[1].police.is_some() && ingress[1].redirect.is_none());
    }

    #[test]
    fn ingress_and_ifb_mistakes_name_the_place() {
        let e = error(&SQM.replace("redirect = \"ifb4r2\"", "redirect = \"r1\""));
        assert!(e.contains("not an IFB port"), "{e}");
        let e = error(&SQM.replace("type = \"ifb\"", "type = \"veth\""));
        assert!(e.contains("knows \"ifb\""), "{e}");
        // An unknown type is named as such, not taken for an IFB that has a peer.
        let e = error(&SQM.replace("type = \"ifb\"", "type = \"veth\"\npeer = \"r1\""));
        assert!(e.contains("knows \"ifb\""), "{e}");
        let e = error(&SQM.replace(
            "type = \"ifb\"\n",
            "type = \"ifb\"\n[interface.ingress]\nredirect = \"ifb4r2\"\n",
        ));
        assert!(e.contains("takes no ingress"), "{e}");
        let e = error(&SQM.replace(
            "redirect = \"ifb4r2\"",
            "[[interface.ingress.filter]]\nprio = 5",
        ));
        assert!(e.contains("needs an action"), "{e}");
        let e = error(&LAB.replace(
            "classid = \"1:20\"",
            "classid = \"1:20\"\nredirect = \"ifb0\"",
        ));
        assert!(e.contains("[[interface.ingress.filter]]"), "{e}");
        let e = error("[[interface]]\nname = \"ifb0\"\ntype = \"ifb\"\n");
        assert!(e.contains("only IFB ports"), "{e}");
    }
}
