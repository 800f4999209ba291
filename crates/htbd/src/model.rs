//! The control plane's picture of every port: the HTB tree and filters as the operator last
//! set them (config file, saved state, live commands).
//!
//! Every command is checked against a *shadow* scheduler — the same `htb-core` code the data
//! plane runs, holding no packets — so what the model accepts, the data plane accepts too. A
//! batch ([`Model::apply`]) is all or nothing: each accepted step records how to undo it, and
//! the first refused command rolls the model back. The result is a [`Plan`]: the effects to
//! apply to the data plane, in order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use htb_config::filter::{Family, Filter, IpPrefix, Match, PortRange};
use htb_config::{ClassDef, TreeSpec};
use htb_core::{
    ClassError, ClassId, ClassSpec, Duration, Instant, LengthAdjust, LinkLayer, Rate, Scheduler,
    SchedulerConfig,
};
use htb_ipc::{Command, CommandResult, ErrorCode, IpcError, MatchSpec};

/// Where the kernel starts numbering filter priorities it picks itself (`tcf_auto_prio`).
const AUTO_PRIO: u32 = 0xC000;
/// First u32 hash table and node id (`gen_new_htid`, `gen_new_kid` in `cls_u32.c`).
const U32_FIRST_ID: u32 = 0x800;

/// tc's filter `protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `all` (ETH_P_ALL): any frame.
    All,
    /// `ip`: IPv4.
    Ip,
    /// `ipv6`.
    Ipv6,
    /// `802.1q`: VLAN-tagged frames.
    Dot1q,
}

impl Protocol {
    /// Parses tc's names.
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "all" => Ok(Self::All),
            "ip" | "ipv4" => Ok(Self::Ip),
            "ipv6" => Ok(Self::Ipv6),
            "802.1q" | "8021q" | "802_1q" => Ok(Self::Dot1q),
            _ => Err(format!("invalid protocol {s:?}: ip, ipv6, 802.1q or all")),
        }
    }

    /// The name tc prints.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Ip => "ip",
            Self::Ipv6 => "ipv6",
            Self::Dot1q => "802.1Q",
        }
    }

    fn family(self) -> Option<Family> {
        match self {
            Self::Ip => Some(Family::V4),
            Self::Ipv6 => Some(Family::V6),
            Self::All | Self::Dot1q => None,
        }
    }
}

/// How a filter is presented (`u32` or `flower`); both classify the same way here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterKind {
    /// `u32`, handles like `800::800`.
    U32,
    /// `flower`, handles like `0x1`.
    Flower,
}

impl FilterKind {
    /// Parses `u32` or `flower`.
    ///
    /// # Errors
    /// Anything else.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "u32" => Ok(Self::U32),
            "flower" => Ok(Self::Flower),
            _ => Err(format!(
                "filter kind {s:?} is not supported: use u32 or flower"
            )),
        }
    }

    /// The name tc prints.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::U32 => "u32",
            Self::Flower => "flower",
        }
    }

    /// Parses a handle of this kind: `800::800` (u32), `0x1` or `1` (flower).
    ///
    /// # Errors
    /// A malformed handle.
    pub fn parse_handle(self, s: &str) -> Result<u32, String> {
        let bad = || format!("invalid {} handle {s:?}", self.name());
        match self {
            Self::U32 => {
                let parts: Vec<&str> = s.split(':').collect();
                let field = |i: usize| -> Result<u32, String> {
                    match parts.get(i) {
                        None | Some(&"") => Ok(0),
                        Some(p) => u32::from_str_radix(p, 16).map_err(|_| bad()),
                    }
                };
                if parts.len() > 3 {
                    return Err(bad());
                }
                let (ht, hash, node) = (field(0)?, field(1)?, field(2)?);
                if ht > 0xfff || hash > 0xff || node > 0xfff {
                    return Err(bad());
                }
                Ok(ht << 20 | hash << 12 | node)
            }
            Self::Flower => {
                let digits = s.strip_prefix("0x");
                match digits {
                    Some(hex) => u32::from_str_radix(hex, 16),
                    None => s.parse(),
                }
                .ok()
                .filter(|&h| h != 0)
                .ok_or_else(bad)
            }
        }
    }

    /// Formats a handle as tc prints it (`sprint_u32_handle`, flower's `0x%x`).
    #[must_use]
    pub fn format_handle(self, handle: u32) -> String {
        match self {
            Self::U32 => {
                let (ht, hash, node) = (handle >> 20, (handle >> 12) & 0xff, handle & 0xfff);
                let mut s = String::new();
                if ht != 0 {
                    let _ = write!(s, "{ht:x}");
                }
                s.push(':');
                if hash != 0 {
                    let _ = write!(s, "{hash:x}");
                }
                if node != 0 {
                    let _ = write!(s, ":{node:x}");
                }
                s
            }
            Self::Flower => format!("0x{handle:x}"),
        }
    }
}

/// A filter with what tc shows about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterEntry {
    /// Priority (`pref`).
    pub prio: u32,
    /// `protocol`.
    pub protocol: Protocol,
    /// `u32` or `flower`.
    pub kind: FilterKind,
    /// Handle within its priority.
    pub handle: u32,
    /// What it matches (the family comes from `protocol`).
    pub matcher: Match,
    /// Target class.
    pub class: ClassId,
}

impl FilterEntry {
    /// The data plane's view.
    #[must_use]
    pub fn filter(&self) -> Filter {
        Filter {
            prio: self.prio,
            matcher: self.matcher,
            class: self.class,
        }
    }
}

/// Gives each filter without a handle one, the way the kernel would have: per priority, u32
/// filters share a hash table (`800:`, `801:`, … in order of first use) and number their nodes
/// from `800`; flower filters count from 1.
pub fn assign_handles(filters: &mut [(FilterEntry, bool)]) {
    let mut next_ht = filters
        .iter()
        .filter(|(f, given)| *given && f.kind == FilterKind::U32)
        .map(|(f, _)| (f.handle >> 20) + 1)
        .max()
        .unwrap_or(U32_FIRST_ID)
        .max(U32_FIRST_ID);
    for i in 0..filters.len() {
        if filters[i].1 {
            continue;
        }
        let (prio, kind) = (filters[i].0.prio, filters[i].0.kind);
        let peers = filters
            .iter()
            .filter(|(f, given)| *given && f.prio == prio && f.kind == kind);
        filters[i].0.handle = match kind {
            FilterKind::U32 => {
                let mut peers = peers.map(|(f, _)| f.handle).peekable();
                let ht = match peers.peek() {
                    Some(h) => h >> 20,
                    None => {
                        next_ht += 1;
                        next_ht - 1
                    }
                };
                let node = peers.map(|h| (h & 0xfff) + 1).max().unwrap_or(U32_FIRST_ID);
                ht << 20 | node.max(U32_FIRST_ID)
            }
            FilterKind::Flower => peers.map(|(f, _)| f.handle + 1).max().unwrap_or(1),
        };
        filters[i].1 = true;
    }
}

/// One port's HTB qdisc.
#[derive(Debug)]
pub struct QdiscModel {
    /// Qdisc parameters.
    pub config: SchedulerConfig,
    /// Classes as given (defaults unresolved).
    pub classes: BTreeMap<ClassId, ClassDef>,
    /// Filters in evaluation order (prio, then handle).
    pub filters: Vec<FilterEntry>,
    shadow: Scheduler<u32>,
}

impl QdiscModel {
    /// An empty qdisc.
    #[must_use]
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            config,
            classes: BTreeMap::new(),
            filters: Vec::new(),
            shadow: Scheduler::new(config),
        }
    }

    /// A qdisc holding a validated tree and filters.
    ///
    /// # Errors
    /// A class the tree cannot hold, or a filter targeting a missing class.
    pub fn from_tree(tree: &TreeSpec, filters: Vec<FilterEntry>) -> Result<Self, String> {
        let mut model = Self::new(tree.config);
        model.shadow.reserve_classes(tree.classes.len());
        for def in &tree.classes {
            let _ = model
                .shadow
                .add_class(Instant::ZERO, def.id, def.parent, &def.spec)
                .map_err(|e| e.to_string())?;
            model.classes.insert(def.id, def.clone());
        }
        if let Some(f) = filters
            .iter()
            .find(|f| !model.classes.contains_key(&f.class))
        {
            return Err(format!(
                "a filter targets class {}, which does not exist",
                f.class
            ));
        }
        model.filters = filters;
        model.sort_filters();
        Ok(model)
    }

    /// The tree, parents before children.
    #[must_use]
    pub fn tree(&self) -> TreeSpec {
        let mut children: BTreeMap<Option<ClassId>, Vec<ClassId>> = BTreeMap::new();
        for def in self.classes.values() {
            children.entry(def.parent).or_default().push(def.id);
        }
        let mut order = Vec::with_capacity(self.classes.len());
        let mut stack: Vec<ClassId> = children.get(&None).cloned().unwrap_or_default();
        stack.reverse();
        while let Some(id) = stack.pop() {
            order.push(self.classes[&id].clone());
            if let Some(kids) = children.get(&Some(id)) {
                stack.extend(kids.iter().rev());
            }
        }
        TreeSpec {
            config: self.config,
            classes: order,
            warnings: Vec::new(),
        }
    }

    /// Resolved parameters and place of a class (what `class show` prints).
    #[must_use]
    pub fn class_info(&self, id: ClassId) -> Option<htb_core::ClassInfo> {
        self.shadow.class_info(id)
    }

    /// The data plane's filters, in evaluation order.
    #[must_use]
    pub fn data_filters(&self) -> Vec<Filter> {
        self.filters.iter().map(FilterEntry::filter).collect()
    }

    fn sort_filters(&mut self) {
        self.filters.sort_by_key(|f| (f.prio, f.handle));
    }
}

/// One port htbd forwards on.
#[derive(Debug)]
pub struct PortModel {
    /// Interface name.
    pub name: String,
    /// Its HTB qdisc, if it shapes.
    pub qdisc: Option<QdiscModel>,
}

/// A change for the data plane (see `htb_xdp::PlaneOp`, which it becomes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Replace the whole tree (`None`: unshaped).
    SetTree {
        /// Port.
        port: String,
        /// New tree.
        tree: Option<TreeSpec>,
    },
    /// New qdisc parameters.
    SetQdisc {
        /// Port.
        port: String,
        /// Parameters.
        config: SchedulerConfig,
    },
    /// Add a class.
    AddClass {
        /// Port.
        port: String,
        /// Class.
        def: ClassDef,
    },
    /// Change a class.
    ChangeClass {
        /// Port.
        port: String,
        /// Class and its new parameters.
        def: ClassDef,
    },
    /// Delete a class.
    DeleteClass {
        /// Port.
        port: String,
        /// Class.
        id: ClassId,
    },
    /// Replace the filters.
    SetFilters {
        /// Port.
        port: String,
        /// In evaluation order.
        filters: Vec<Filter>,
    },
}

/// What an accepted batch does. Until it is applied, [`Model::revert`] takes it back.
#[derive(Default)]
pub struct Plan {
    /// Data-plane effects, each with the index of the command it comes from (`None`: the
    /// filter refresh at the end).
    pub effects: Vec<(Option<usize>, Effect)>,
    /// One result per command (warnings; dropped packets are filled in by the data plane).
    pub results: Vec<CommandResult>,
    undo: Vec<Undo>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("effects", &self.effects)
            .field("results", &self.results)
            .finish_non_exhaustive()
    }
}

enum Undo {
    Qdisc {
        port: usize,
        old: Option<Box<QdiscModel>>,
    },
    QdiscConfig {
        port: usize,
        old: SchedulerConfig,
    },
    ClassAdded {
        port: usize,
        id: ClassId,
    },
    ClassChanged {
        port: usize,
        old: ClassDef,
    },
    ClassDeleted {
        port: usize,
        old: ClassDef,
    },
    Filters {
        port: usize,
        old: Vec<FilterEntry>,
    },
}

/// All ports.
#[derive(Debug, Default)]
pub struct Model {
    /// In configuration order.
    pub ports: Vec<PortModel>,
}

fn error(code: ErrorCode, message: impl Into<String>) -> IpcError {
    IpcError::new(code, message)
}

fn class_error(e: ClassError) -> IpcError {
    let code = match e {
        ClassError::Exists(_) => ErrorCode::Exists,
        ClassError::NotFound(_) | ClassError::ParentNotFound { .. } => ErrorCode::NotFound,
        ClassError::HasChildren(_) => ErrorCode::InUse,
        _ => ErrorCode::Invalid,
    };
    error(code, e.to_string())
}

fn parse_class_id(s: &str) -> Result<ClassId, IpcError> {
    s.parse()
        .map_err(|e| error(ErrorCode::Invalid, format!("invalid class id {s:?}: {e}")))
}

/// A wire class spec as the scheduler's.
fn class_spec(c: &htb_ipc::ClassSpec) -> Result<ClassSpec, IpcError> {
    let link_layer = match c.linklayer.as_deref() {
        None | Some("ethernet") => LinkLayer::Ethernet,
        Some("atm" | "adsl") => LinkLayer::Atm,
        Some(other) => {
            return Err(error(
                ErrorCode::Invalid,
                format!("invalid linklayer {other:?}: ethernet, atm or adsl"),
            ));
        }
    };
    Ok(ClassSpec {
        rate: Rate::from_bits_per_sec(c.rate),
        ceil: c.ceil.map(Rate::from_bits_per_sec),
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
        limit: c.limit,
    })
}

/// A wire match as the classifier's, restricted to `protocol`'s family.
///
/// # Errors
/// Malformed prefixes or ports, or a prefix of the wrong family.
pub fn matcher(spec: &MatchSpec, protocol: Protocol) -> Result<Match, IpcError> {
    let invalid = |m: String| error(ErrorCode::Invalid, m);
    let prefix = |s: &Option<String>| -> Result<Option<IpPrefix>, IpcError> {
        let Some(s) = s else { return Ok(None) };
        let p: IpPrefix = s.parse().map_err(invalid)?;
        let family = if p.addr().is_ipv4() {
            Family::V4
        } else {
            Family::V6
        };
        match protocol.family() {
            Some(f) if f != family => Err(invalid(format!(
                "{s} is not an address of protocol {}",
                protocol.name()
            ))),
            _ => Ok(Some(p)),
        }
    };
    let ports = |r: Option<(u16, u16)>| -> Result<Option<PortRange>, IpcError> {
        match r {
            None => Ok(None),
            Some((first, last)) if first <= last => Ok(Some(PortRange { first, last })),
            Some((first, last)) => Err(invalid(format!("port range {first}-{last} is empty"))),
        }
    };
    if spec.dscp.is_some_and(|d| d > 63) {
        return Err(invalid("dscp must be 0 to 63".into()));
    }
    if spec.vlan.is_some_and(|v| v > 4094) {
        return Err(invalid("vlan id must be 0 to 4094".into()));
    }
    Ok(Match {
        family: protocol.family(),
        src: prefix(&spec.src)?,
        dst: prefix(&spec.dst)?,
        proto: spec.proto,
        sport: ports(spec.sport)?,
        dport: ports(spec.dport)?,
        dscp: spec.dscp,
        vlan: spec.vlan,
    })
}

/// A classifier match as the wire's.
#[must_use]
pub fn match_spec(m: &Match) -> MatchSpec {
    MatchSpec {
        src: m.src.map(|p| p.to_string()),
        dst: m.dst.map(|p| p.to_string()),
        proto: m.proto,
        sport: m.sport.map(|r| (r.first, r.last)),
        dport: m.dport.map(|r| (r.first, r.last)),
        dscp: m.dscp,
        vlan: m.vlan,
    }
}

impl Model {
    /// A model of `interfaces`' trees and filters.
    ///
    /// # Errors
    /// A tree or filter the scheduler refuses (only for hand-edited files: both were
    /// validated when parsed).
    pub fn from_trees(interfaces: Vec<crate::config::InterfaceTrees>) -> Result<Self, String> {
        let mut ports = Vec::with_capacity(interfaces.len());
        for i in interfaces {
            let qdisc = match &i.tree {
                Some(tree) => Some(
                    QdiscModel::from_tree(tree, i.filters)
                        .map_err(|e| format!("{}: {e}", i.name))?,
                ),
                None => None,
            };
            ports.push(PortModel {
                name: i.name,
                qdisc,
            });
        }
        Ok(Self { ports })
    }

    /// The port named `dev`.
    ///
    /// # Errors
    /// tc's "Cannot find device" when htbd does not forward on it.
    pub fn port_index(&self, dev: &str) -> Result<usize, IpcError> {
        self.ports
            .iter()
            .position(|p| p.name == dev)
            .ok_or_else(|| {
                error(
                    ErrorCode::NoDevice,
                    format!(
                        "Cannot find device \"{dev}\" (htbd forwards on: {})",
                        self.names()
                    ),
                )
            })
    }

    fn names(&self) -> String {
        self.ports
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Applies `commands` all or nothing.
    ///
    /// # Errors
    /// The first refused command's error, with its index; the model is unchanged.
    pub fn apply(&mut self, commands: &[Command]) -> Result<Plan, IpcError> {
        let mut undo = Vec::new();
        let mut plan = Plan {
            effects: Vec::new(),
            results: vec![CommandResult::default(); commands.len()],
            undo: Vec::new(),
        };
        let mut refilter = BTreeSet::new();
        for (i, command) in commands.iter().enumerate() {
            if let Err(mut e) = self.apply_one(i, command, &mut undo, &mut plan, &mut refilter) {
                self.rollback(undo);
                e.command = Some(i);
                return Err(e);
            }
        }
        for port in refilter {
            let p = &self.ports[port];
            let filters = p
                .qdisc
                .as_ref()
                .map(QdiscModel::data_filters)
                .unwrap_or_default();
            plan.effects.push((
                None,
                Effect::SetFilters {
                    port: p.name.clone(),
                    filters,
                },
            ));
        }
        plan.undo = undo;
        Ok(plan)
    }

    /// Takes an accepted batch back (it could not be persisted).
    pub fn revert(&mut self, plan: Plan) {
        self.rollback(plan.undo);
    }

    fn qdisc_mut(&mut self, port: usize) -> Result<&mut QdiscModel, IpcError> {
        let name = self.ports[port].name.clone();
        self.ports[port].qdisc.as_mut().ok_or_else(|| {
            error(
                ErrorCode::NotFound,
                format!("no htb qdisc on {name}: add one first (qdisc add dev {name} root handle 1: htb)"),
            )
        })
    }

    #[allow(clippy::too_many_lines)] // one arm per tc command
    fn apply_one(
        &mut self,
        index: usize,
        command: &Command,
        undo: &mut Vec<Undo>,
        plan: &mut Plan,
        refilter: &mut BTreeSet<usize>,
    ) -> Result<(), IpcError> {
        let port = self.port_index(command.dev())?;
        let name = self.ports[port].name.clone();
        let mut effect = |e: Effect| plan.effects.push((Some(index), e));
        match command {
            Command::QdiscAdd(q) | Command::QdiscChange(q) | Command::QdiscReplace(q) => {
                let major = match q.handle.as_deref() {
                    None => None,
                    Some(h) => {
                        let id = parse_class_id(h)?;
                        if !id.is_qdisc() || id.major() == 0 {
                            return Err(error(
                                ErrorCode::Invalid,
                                format!("qdisc handle {h} must look like 1:"),
                            ));
                        }
                        Some(id.major())
                    }
                };
                let existing = self.ports[port].qdisc.as_ref().map(|m| m.config.major);
                let mut config = SchedulerConfig {
                    major: major.or(existing).unwrap_or(1),
                    ..SchedulerConfig::default()
                };
                // tc sends every parameter: those not given take tc's defaults.
                config.default_minor = q.default_minor.unwrap_or(0);
                config.r2q = q.r2q.unwrap_or(10).max(1);
                if let Some(qlen) = q.direct_qlen {
                    config.direct_qlen = qlen;
                }
                let in_place = match (command, existing) {
                    (Command::QdiscAdd(_), Some(m)) => {
                        return Err(error(
                            ErrorCode::Exists,
                            format!(
                                "{name} has an htb qdisc ({m:x}:) already; use replace or change"
                            ),
                        ));
                    }
                    (Command::QdiscChange(_), None) => {
                        return Err(error(
                            ErrorCode::NotFound,
                            format!("no htb qdisc on {name} to change"),
                        ));
                    }
                    (Command::QdiscChange(_), Some(m)) if m != config.major => {
                        return Err(error(
                            ErrorCode::Invalid,
                            format!("qdisc {:x}: is not {name}'s ({m:x}:)", config.major),
                        ));
                    }
                    (_, Some(m)) => m == config.major,
                    (_, None) => false,
                };
                if in_place {
                    let qdisc = self.qdisc_mut(port)?;
                    if q.direct_qlen.is_none() {
                        config.direct_qlen = qdisc.config.direct_qlen;
                    }
                    config.default_burst_time = qdisc.config.default_burst_time;
                    undo.push(Undo::QdiscConfig {
                        port,
                        old: qdisc.config,
                    });
                    set_qdisc_config(qdisc, config);
                    effect(Effect::SetQdisc { port: name, config });
                } else {
                    let old = self.ports[port].qdisc.replace(QdiscModel::new(config));
                    undo.push(Undo::Qdisc {
                        port,
                        old: old.map(Box::new),
                    });
                    refilter.insert(port);
                    effect(Effect::SetTree {
                        port: name,
                        tree: Some(TreeSpec {
                            config,
                            classes: Vec::new(),
                            warnings: Vec::new(),
                        }),
                    });
                }
            }
            Command::QdiscDelete { .. } => {
                if self.ports[port].qdisc.is_none() {
                    return Err(error(
                        ErrorCode::NotFound,
                        format!("no htb qdisc on {name} to delete"),
                    ));
                }
                let old = self.ports[port].qdisc.take().map(Box::new);
                undo.push(Undo::Qdisc { port, old });
                refilter.insert(port);
                effect(Effect::SetTree {
                    port: name,
                    tree: None,
                });
            }
            Command::ClassAdd(c) | Command::ClassChange(c) | Command::ClassReplace(c) => {
                let qdisc = self.qdisc_mut(port)?;
                let id = parse_class_id(&c.id)?;
                let parent = match c.parent.as_deref() {
                    None | Some("root") => None,
                    Some(p) => {
                        let p = parse_class_id(p)?;
                        (!(p.is_qdisc() && p.major() == qdisc.config.major)).then_some(p)
                    }
                };
                let spec = class_spec(c)?;
                let exists = qdisc.classes.contains_key(&id);
                let change = match command {
                    Command::ClassAdd(_) => false,
                    Command::ClassChange(_) => true,
                    _ => exists,
                };
                if change {
                    // As in the kernel, the parent of an existing class is not checked.
                    let warnings = qdisc
                        .shadow
                        .change_class(Instant::ZERO, id, &spec)
                        .map_err(class_error)?
                        .warnings;
                    let def = qdisc.classes.get_mut(&id).ok_or_else(|| {
                        error(
                            ErrorCode::Internal,
                            format!("class {id} missing from the model"),
                        )
                    })?;
                    let old = std::mem::replace(&mut def.spec, spec);
                    let mut old_def = def.clone();
                    old_def.spec = old;
                    let def = def.clone();
                    plan.results[index].warnings =
                        warnings.iter().map(ToString::to_string).collect();
                    undo.push(Undo::ClassChanged { port, old: old_def });
                    plan.effects
                        .push((Some(index), Effect::ChangeClass { port: name, def }));
                } else {
                    let warnings = qdisc
                        .shadow
                        .add_class(Instant::ZERO, id, parent, &spec)
                        .map_err(class_error)?
                        .warnings;
                    let def = ClassDef { id, parent, spec };
                    qdisc.classes.insert(id, def.clone());
                    plan.results[index].warnings =
                        warnings.iter().map(ToString::to_string).collect();
                    undo.push(Undo::ClassAdded { port, id });
                    plan.effects
                        .push((Some(index), Effect::AddClass { port: name, def }));
                }
            }
            Command::ClassDelete { id, .. } => {
                let qdisc = self.qdisc_mut(port)?;
                let id = parse_class_id(id)?;
                if let Some(f) = qdisc.filters.iter().find(|f| f.class == id) {
                    return Err(error(
                        ErrorCode::InUse,
                        format!(
                            "class {id} is in use by filter pref {} {} {}; delete the filter first",
                            f.prio,
                            f.kind.name(),
                            f.kind.format_handle(f.handle)
                        ),
                    ));
                }
                let _ = qdisc
                    .shadow
                    .delete_class(Instant::ZERO, id)
                    .map_err(class_error)?;
                let old = qdisc.classes.remove(&id).ok_or_else(|| {
                    error(
                        ErrorCode::Internal,
                        format!("class {id} missing from the model"),
                    )
                })?;
                undo.push(Undo::ClassDeleted { port, old });
                effect(Effect::DeleteClass { port: name, id });
            }
            Command::FilterAdd(f) => {
                let qdisc = self.qdisc_mut(port)?;
                let entry = new_filter(qdisc, f)?;
                undo.push(Undo::Filters {
                    port,
                    old: qdisc.filters.clone(),
                });
                qdisc.filters.push(entry);
                qdisc.sort_filters();
                refilter.insert(port);
            }
            Command::FilterDelete { prio, handle, .. } => {
                let qdisc = self.qdisc_mut(port)?;
                let old = qdisc.filters.clone();
                match (prio, handle) {
                    (None, None) => qdisc.filters.clear(),
                    (None, Some(_)) => {
                        return Err(error(
                            ErrorCode::Invalid,
                            "deleting one filter by handle needs its prio, as in tc",
                        ));
                    }
                    (Some(prio), None) => {
                        qdisc.filters.retain(|f| f.prio != *prio);
                        if qdisc.filters.len() == old.len() {
                            return Err(error(
                                ErrorCode::NotFound,
                                format!("no filter with prio {prio} on {name}"),
                            ));
                        }
                    }
                    (Some(prio), Some(handle)) => {
                        let position = qdisc.filters.iter().position(|f| {
                            f.prio == *prio && f.kind.parse_handle(handle) == Ok(f.handle)
                        });
                        let Some(position) = position else {
                            return Err(error(
                                ErrorCode::NotFound,
                                format!("no filter with prio {prio} and handle {handle} on {name}"),
                            ));
                        };
                        qdisc.filters.remove(position);
                    }
                }
                undo.push(Undo::Filters { port, old });
                refilter.insert(port);
            }
        }
        Ok(())
    }

    fn rollback(&mut self, undo: Vec<Undo>) {
        for step in undo.into_iter().rev() {
            let restored = match step {
                Undo::Qdisc { port, old } => {
                    self.ports[port].qdisc = old.map(|q| *q);
                    Ok(())
                }
                Undo::QdiscConfig { port, old } => {
                    if let Some(q) = self.ports[port].qdisc.as_mut() {
                        set_qdisc_config(q, old);
                    }
                    Ok(())
                }
                Undo::ClassAdded { port, id } => self.with_qdisc(port, |q| {
                    q.classes.remove(&id);
                    q.shadow.delete_class(Instant::ZERO, id).map(drop)
                }),
                Undo::ClassChanged { port, old } => self.with_qdisc(port, |q| {
                    let r = q.shadow.change_class(Instant::ZERO, old.id, &old.spec);
                    q.classes.insert(old.id, old);
                    r.map(drop)
                }),
                Undo::ClassDeleted { port, old } => self.with_qdisc(port, |q| {
                    let r = q
                        .shadow
                        .add_class(Instant::ZERO, old.id, old.parent, &old.spec);
                    q.classes.insert(old.id, old);
                    r.map(drop)
                }),
                Undo::Filters { port, old } => self.with_qdisc(port, |q| {
                    q.filters = old;
                    Ok(())
                }),
            };
            if let Err(e) = restored {
                // Undoing exactly what was just done cannot fail; if it does, say so loudly.
                tracing::error!("rolling back a refused batch failed: {e}");
            }
        }
    }

    fn with_qdisc(
        &mut self,
        port: usize,
        f: impl FnOnce(&mut QdiscModel) -> Result<(), ClassError>,
    ) -> Result<(), ClassError> {
        match self.ports[port].qdisc.as_mut() {
            Some(q) => f(q),
            None => Ok(()),
        }
    }

    /// The saved-state file: every port, its qdisc, classes and filters, in the config file's
    /// format (exact integers for rates and sizes).
    #[must_use]
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        let q = |s: &str| toml::Value::String(s.to_owned()).to_string();
        for port in &self.ports {
            let _ = writeln!(out, "[[interface]]\nname = {}", q(&port.name));
            let Some(qdisc) = &port.qdisc else {
                out.push('\n');
                continue;
            };
            let c = &qdisc.config;
            let _ = writeln!(
                out,
                "[interface.qdisc]\nhandle = \"{:x}:\"\ndefault = \"{:x}\"\nr2q = {}\ndirect_qlen = {}\nburst_time = \"{}ns\"",
                c.major,
                c.default_minor,
                c.r2q,
                c.direct_qlen,
                c.default_burst_time.as_nanos()
            );
            for def in qdisc.tree().classes {
                let s = &def.spec;
                let _ = writeln!(out, "[[interface.class]]\nid = \"{}\"", def.id);
                if let Some(p) = def.parent {
                    let _ = writeln!(out, "parent = \"{p}\"");
                }
                let _ = writeln!(out, "rate = {}", s.rate.bits_per_sec());
                let opt = |out: &mut String, key: &str, v: Option<u64>| {
                    if let Some(v) = v {
                        let _ = writeln!(out, "{key} = {v}");
                    }
                };
                opt(&mut out, "ceil", s.ceil.map(Rate::bits_per_sec));
                opt(&mut out, "burst", s.burst);
                opt(&mut out, "cburst", s.cburst);
                opt(&mut out, "prio", (s.prio != 0).then_some(u64::from(s.prio)));
                opt(&mut out, "quantum", s.quantum.map(u64::from));
                opt(&mut out, "mtu", s.mtu.map(u64::from));
                let a = s.adjust;
                opt(
                    &mut out,
                    "overhead",
                    (a.overhead != 0).then_some(u64::from(a.overhead)),
                );
                opt(&mut out, "mpu", (a.mpu != 0).then_some(u64::from(a.mpu)));
                if a.link_layer == LinkLayer::Atm {
                    out.push_str("linklayer = \"atm\"\n");
                }
                opt(&mut out, "limit", s.limit.map(u64::from));
            }
            for f in &qdisc.filters {
                let m = &f.matcher;
                let mut keys = Vec::new();
                let mut key = |k: &str, v: Option<String>| {
                    if let Some(v) = v {
                        keys.push(format!("{k} = {}", q(&v)));
                    }
                };
                key("src", m.src.map(|p| p.to_string()));
                key("dst", m.dst.map(|p| p.to_string()));
                key("proto", m.proto.map(|p| p.to_string()));
                key("sport", m.sport.map(|p| p.to_string()));
                key("dport", m.dport.map(|p| p.to_string()));
                key("dscp", m.dscp.map(|p| p.to_string()));
                key("vlan", m.vlan.map(|p| p.to_string()));
                let _ = writeln!(
                    out,
                    "[[interface.filter]]\nprio = {}\nprotocol = {}\nkind = \"{}\"\nhandle = {}\nmatch = {{ {} }}\nclassid = \"{}\"",
                    f.prio,
                    q(f.protocol.name()),
                    f.kind.name(),
                    q(&f.kind.format_handle(f.handle)),
                    keys.join(", "),
                    f.class
                );
            }
            out.push('\n');
        }
        out
    }
}

fn set_qdisc_config(qdisc: &mut QdiscModel, config: SchedulerConfig) {
    qdisc.config = config;
    qdisc.shadow.set_default_class(config.default_minor);
    qdisc.shadow.set_r2q(config.r2q);
    qdisc.shadow.set_direct_qlen(config.direct_qlen);
}

/// Checks a `filter add` against the qdisc and gives it a priority and handle.
fn new_filter(qdisc: &QdiscModel, f: &htb_ipc::FilterSpec) -> Result<FilterEntry, IpcError> {
    let invalid = |m: String| error(ErrorCode::Invalid, m);
    if let Some(parent) = f.parent.as_deref() {
        let id = parse_class_id(parent)?;
        if !(id.is_qdisc() && id.major() == qdisc.config.major) {
            return Err(invalid(format!(
                "filters attach to the qdisc ({:x}:), not to class {parent}",
                qdisc.config.major
            )));
        }
    }
    let protocol = Protocol::parse(&f.protocol).map_err(invalid)?;
    let kind = FilterKind::parse(&f.kind).map_err(invalid)?;
    let class = parse_class_id(&f.class)?;
    if !qdisc.classes.contains_key(&class) {
        return Err(error(
            ErrorCode::NotFound,
            format!("class {class} does not exist (add it before its filters)"),
        ));
    }
    let matcher = matcher(&f.matcher, protocol)?;
    let prio = match f.prio {
        Some(0) => return Err(invalid("filter prio must be above 0".into())),
        Some(p) => p,
        // As tcf_auto_prio: 49152 for the first, then one below the lowest existing priority
        // (one above the highest when the lowest is 1).
        None => {
            let prios = qdisc.filters.iter().map(|f| f.prio);
            match (prios.clone().min(), prios.max()) {
                (None, _) | (_, None) => AUTO_PRIO,
                (Some(low), _) if low > 1 => low - 1,
                (_, Some(high)) => high.saturating_add(1),
            }
        }
    };
    if let Some(peer) = qdisc.filters.iter().find(|e| e.prio == prio) {
        if peer.kind != kind {
            return Err(invalid(format!(
                "prio {prio} holds {} filters; a {} filter needs another prio",
                peer.kind.name(),
                kind.name()
            )));
        }
        if peer.protocol != protocol {
            return Err(invalid(format!(
                "prio {prio} holds protocol {} filters; protocol {} needs another prio",
                peer.protocol.name(),
                protocol.name()
            )));
        }
    }
    let mut entries: Vec<(FilterEntry, bool)> = qdisc.filters.iter().map(|&e| (e, true)).collect();
    let mut entry = FilterEntry {
        prio,
        protocol,
        kind,
        handle: 0,
        matcher,
        class,
    };
    if let Some(h) = f.handle.as_deref() {
        entry.handle = kind.parse_handle(h).map_err(invalid)?;
        if qdisc
            .filters
            .iter()
            .any(|e| e.prio == prio && e.handle == entry.handle)
        {
            return Err(error(
                ErrorCode::Exists,
                format!("a filter with prio {prio} and handle {h} exists"),
            ));
        }
        return Ok(entry);
    }
    entries.push((entry, false));
    assign_handles(&mut entries);
    Ok(entries.pop().map_or(entry, |(e, _)| e))
}

/// Burst time default, for tests and the state file.
#[must_use]
pub fn default_burst_time() -> Duration {
    SchedulerConfig::default().default_burst_time
}

#[cfg(test)]
mod tests {
    use super::*;
    use htb_ipc::{ClassSpec as WireClass, FilterSpec, QdiscSpec};

    fn model() -> Model {
        Model {
            ports: vec![
                PortModel {
                    name: "r1".into(),
                    qdisc: None,
                },
                PortModel {
                    name: "r2".into(),
                    qdisc: None,
                },
            ],
        }
    }

    fn qdisc_add(dev: &str) -> Command {
        Command::QdiscAdd(QdiscSpec {
            dev: dev.into(),
            handle: Some("1:".into()),
            default_minor: Some(0x20),
            ..QdiscSpec::default()
        })
    }

    fn class(op: fn(WireClass) -> Command, id: &str, parent: &str, mbit: u64) -> Command {
        op(WireClass {
            dev: "r2".into(),
            id: id.into(),
            parent: Some(parent.into()),
            rate: mbit * 1_000_000,
            ..WireClass::default()
        })
    }

    fn filter(class: &str, dport: u16, prio: Option<u32>, kind: &str) -> Command {
        Command::FilterAdd(FilterSpec {
            dev: "r2".into(),
            parent: Some("1:".into()),
            protocol: "ip".into(),
            prio,
            kind: kind.into(),
            handle: None,
            matcher: MatchSpec {
                dport: Some((dport, dport)),
                ..MatchSpec::default()
            },
            class: class.into(),
        })
    }

    fn base() -> Model {
        let mut m = model();
        let plan = m
            .apply(&[
                qdisc_add("r2"),
                class(Command::ClassAdd, "1:1", "1:", 100),
                class(Command::ClassAdd, "1:20", "1:1", 10),
                filter("1:20", 5201, Some(1), "u32"),
            ])
            .unwrap();
        assert_eq!(plan.effects.len(), 4, "{:?}", plan.effects);
        m
    }

    #[test]
    fn a_refused_batch_changes_nothing() {
        let mut m = base();
        let before = m.to_toml();
        let e = m
            .apply(&[
                class(Command::ClassAdd, "1:30", "1:1", 5),
                class(Command::ClassChange, "1:20", "1:1", 20),
                Command::ClassDelete {
                    dev: "r2".into(),
                    id: "1:1".into(),
                },
            ])
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InUse);
        assert_eq!(e.command, Some(2));
        assert_eq!(m.to_toml(), before);
        // The shadow was rolled back too: 1:30 can be added now, 1:20 still has 10 Mbit/s.
        let q = m.ports[1].qdisc.as_ref().unwrap();
        assert_eq!(
            q.class_info("1:20".parse().unwrap()).unwrap().config.rate,
            Rate::from_mbit(10)
        );
        assert!(q.class_info("1:30".parse().unwrap()).is_none());
        m.apply(&[class(Command::ClassAdd, "1:30", "1:1", 5)])
            .unwrap();
    }

    #[test]
    fn tc_rules_for_classes_filters_and_qdiscs() {
        let mut m = base();
        let code = |m: &mut Model, c: Command| m.apply(&[c]).unwrap_err().code;
        assert_eq!(code(&mut m, qdisc_add("r2")), ErrorCode::Exists);
        assert_eq!(code(&mut m, qdisc_add("eth9")), ErrorCode::NoDevice);
        assert_eq!(
            code(&mut m, class(Command::ClassAdd, "1:20", "1:1", 1)),
            ErrorCode::Exists
        );
        assert_eq!(
            code(&mut m, class(Command::ClassChange, "1:99", "1:1", 1)),
            ErrorCode::NotFound
        );
        assert_eq!(
            code(&mut m, class(Command::ClassAdd, "1:30", "1:9", 1)),
            ErrorCode::NotFound
        );
        assert_eq!(
            code(&mut m, class(Command::ClassAdd, "1:30", "1:1", 0)),
            ErrorCode::Invalid
        );
        assert_eq!(
            code(&mut m, class(Command::ClassAdd, "2:30", "1:1", 1)),
            ErrorCode::Invalid
        );
        assert_eq!(
            code(
                &mut m,
                Command::ClassDelete {
                    dev: "r2".into(),
                    id: "1:20".into()
                }
            ),
            ErrorCode::InUse,
            "a filter points at it"
        );
        assert_eq!(
            code(&mut m, filter("1:99", 1, None, "u32")),
            ErrorCode::NotFound
        );
        assert_eq!(
            code(&mut m, filter("1:20", 1, Some(1), "flower")),
            ErrorCode::Invalid
        );
        // Replace adds, then changes.
        m.apply(&[class(Command::ClassReplace, "1:30", "1:1", 1)])
            .unwrap();
        m.apply(&[class(Command::ClassReplace, "1:30", "1:1", 2)])
            .unwrap();
        // Automatic priorities and handles, as the kernel assigns them.
        m.apply(&[
            filter("1:30", 5202, Some(1), "u32"),
            filter("1:30", 5203, None, "flower"),
        ])
        .unwrap();
        let q = m.ports[1].qdisc.as_ref().unwrap();
        let shown: Vec<(u32, String)> = q
            .filters
            .iter()
            .map(|f| (f.prio, f.kind.format_handle(f.handle)))
            .collect();
        let expected: Vec<(u32, String)> = vec![
            (1, "800::800".into()),
            (1, "800::801".into()),
            (2, "0x1".into()),
        ];
        assert_eq!(
            shown, expected,
            "no room below prio 1: one above the highest"
        );
        // Deleting one u32 filter by handle, then a whole prio.
        m.apply(&[Command::FilterDelete {
            dev: "r2".into(),
            prio: Some(1),
            handle: Some("800::801".into()),
        }])
        .unwrap();
        assert_eq!(m.ports[1].qdisc.as_ref().unwrap().filters.len(), 2);
        m.apply(&[Command::FilterDelete {
            dev: "r2".into(),
            prio: Some(1),
            handle: None,
        }])
        .unwrap();
        m.apply(&[Command::ClassDelete {
            dev: "r2".into(),
            id: "1:20".into(),
        }])
        .unwrap();
        // Deleting the qdisc takes everything.
        let plan = m
            .apply(&[Command::QdiscDelete { dev: "r2".into() }])
            .unwrap();
        assert!(matches!(
            plan.effects[0].1,
            Effect::SetTree { tree: None, .. }
        ));
        assert!(m.ports[1].qdisc.is_none());
    }

    #[test]
    fn u32_and_flower_handles_parse_and_print_like_tc() {
        assert_eq!(FilterKind::U32.parse_handle("800::800"), Ok(0x8000_0800));
        assert_eq!(FilterKind::U32.format_handle(0x8000_0800), "800::800");
        assert_eq!(FilterKind::U32.format_handle(0x8000_0000), "800:");
        assert_eq!(FilterKind::U32.parse_handle("801:"), Ok(0x8010_0000));
        assert_eq!(FilterKind::Flower.parse_handle("0x1a"), Ok(0x1a));
        assert_eq!(FilterKind::Flower.parse_handle("7"), Ok(7));
        assert!(FilterKind::Flower.parse_handle("0").is_err());
        assert!(FilterKind::U32.parse_handle("1000::1").is_err());
    }

    #[test]
    fn the_state_file_round_trips_through_the_config_parser() {
        let mut m = base();
        m.apply(&[Command::ClassChange(WireClass {
            dev: "r2".into(),
            id: "1:20".into(),
            parent: Some("1:1".into()),
            rate: 1_234_567_891,
            ceil: Some(2_000_000_001),
            burst: Some(15_000),
            prio: Some(3),
            quantum: Some(3000),
            overhead: Some(24),
            mpu: Some(64),
            linklayer: Some("atm".into()),
            limit: Some(50),
            ..WireClass::default()
        })])
        .unwrap();
        let text = m.to_toml();
        let trees = crate::config::parse_state(&text).unwrap();
        let back = Model::from_trees(trees).unwrap();
        assert_eq!(back.to_toml(), text);
        let q = back.ports[1].qdisc.as_ref().unwrap();
        assert_eq!(q.config.default_minor, 0x20);
        assert_eq!(
            q.filters[0].kind.format_handle(q.filters[0].handle),
            "800::800"
        );
        assert_eq!(
            q.classes[&"1:20".parse().unwrap()].spec.rate.bits_per_sec(),
            1_234_567_891
        );
    }
}
