//! An import as a sync: the batch that turns what runs into what the files say, touching
//! nothing else. Circuits and nodes are found in the running trees by what identifies them
//! there — a circuit by the addresses its filters match, a node by the classes hanging under
//! it — so a changed file keeps every untouched circuit's class, queue and counters:
//!
//! - a circuit whose plan changed is `class change`d in place (the kernel's
//!   `htb_change_class`: no queue flush), its leaf `qdisc replace`d when its `sqm` changed;
//! - an address that moved gets its filter deleted and added;
//! - a circuit or node that is gone is deleted (its filters first);
//! - a new one gets a free class id, its leaf and filters;
//! - a circuit or node that changed parent is deleted and added again under the new one (HTB
//!   cannot move a class), with everything below it.
//!
//! What the import owns on each port: the filters at its prios (`--prio` for IPv4, the next for
//! IPv6) that match one address and name a class under `--parent`, and those classes; with
//! `network.json`, every class under `--parent` except the `--node` ones. Everything else in
//! the trees stays as the operator made it.
//!
//! The batch is typed commands ([`Batch`]), sent as they are; only a printed batch is tc's
//! text. The filters are laid out in u32 hash tables as the LARTC HOWTO lays out many
//! subscribers' (the `hashing` module): the kernel and htbd both walk one bucket per
//! packet.

use std::collections::{BTreeMap, BTreeSet};

use htb_config::filter::IpPrefix;
use htb_core::{ClassId, LeafSpec, Rate};
use htb_ipc::{
    ClassDelete, ClassLabel, ClassSpec, Command, FilterDelete, FilterHandle, InterfaceName,
    LabelFields, LabelSpec, LabelText, LeafQdiscSpec,
};

use super::batch::dev;
pub use super::batch::{Batch, Changes, Origin};
use super::circuits::{Circuit, Direction, Placement};
use super::hashing::Port;
use super::network::{self, Node};
pub use super::running::Running;
use super::running::{AddressKey, key};

/// A node's label: its name.
fn node_label(name: &str) -> Option<ClassLabel> {
    ClassLabel::new(LabelFields {
        name: LabelText::lossy(name),
        ..LabelFields::default()
    })
    .ok()
}

/// One class as the files want it on one port.
#[derive(Debug, Clone)]
struct Want<'a> {
    parent: ClassId,
    rate: u64,
    ceil: u64,
    /// The leaf (the `sqm` column's); `None`: htbd's default.
    leaf: Option<LeafSpec>,
    origin: Origin,
    /// What it is made from: its comment and label are made from it when the batch takes
    /// them (a million circuits' texts made ahead and held were a third of the batch's time).
    of: Source<'a>,
}

/// What a class of the batch is made from.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Node(&'a Node),
    Circuit(&'a Circuit),
}

impl Source<'_> {
    /// What a comment above its `class add` says (`circuit "ID" NAME`).
    fn comment(self) -> String {
        match self {
            Self::Node(node) => format!("node \"{}\"", flat(&node.name)),
            Self::Circuit(c) => format!("circuit \"{}\" {}", flat(&c.id), flat(&c.name)),
        }
    }

    /// Its label in htbd (`class label`): the circuit's names, devices and addresses, or the
    /// node's name; as htbd will hold it, and a printed batch can carry it: a label whose text
    /// had both quotes has its `"` written as `'` ([`ClassLabel::quotable`]).
    fn label(self) -> Option<ClassLabel> {
        let label = match self {
            Self::Node(node) => node_label(&node.name),
            Self::Circuit(c) => c.label(),
        }?;
        // `quotable` writes the label's words to find out; a text with both quotes is all
        // that it looks for.
        let both = |t: &LabelText| {
            let t = t.as_str();
            t.contains('"') && t.contains('\'')
        };
        let unquotable = label.fields().texts().any(both);
        if unquotable {
            label.quotable()
        } else {
            Some(label)
        }
    }
}

/// The most frequent of `votes` (ties: the lowest id) that `ok` accepts.
fn majority(
    votes: impl IntoIterator<Item = ClassId>,
    ok: impl Fn(ClassId) -> bool,
) -> Option<ClassId> {
    let mut tally: BTreeMap<ClassId, usize> = BTreeMap::new();
    for v in votes {
        *tally.entry(v).or_default() += 1;
    }
    tally
        .into_iter()
        .filter(|&(id, _)| ok(id))
        .max_by_key(|&(id, n)| (n, std::cmp::Reverse(id)))
        .map(|(id, _)| id)
}

/// The sync batch for `circuits` (and `nodes`, from network.json) over `running`, per port in
/// `placement`'s order; new classes take the lowest free minors from `first_minor`.
///
/// # Errors
/// The minors run out.
pub fn batch(
    circuits: &[Circuit],
    nodes: Option<&[Node]>,
    placement: &Placement,
    running: &BTreeMap<InterfaceName, Running>,
    first_minor: u32,
) -> Result<Batch, super::circuits::CircuitError> {
    build(circuits, nodes, placement, running, first_minor, true)
}

/// [`batch`] as htbd is sent it: the same commands, without the `# …` comments only a
/// printed batch carries (a million circuits' comments are a million strings made for
/// nothing).
///
/// # Errors
/// The minors run out.
pub fn batch_to_send(
    circuits: &[Circuit],
    nodes: Option<&[Node]>,
    placement: &Placement,
    running: &BTreeMap<InterfaceName, Running>,
    first_minor: u32,
) -> Result<Batch, super::circuits::CircuitError> {
    build(circuits, nodes, placement, running, first_minor, false)
}

fn build(
    circuits: &[Circuit],
    nodes: Option<&[Node]>,
    placement: &Placement,
    running: &BTreeMap<InterfaceName, Running>,
    first_minor: u32,
    comments: bool,
) -> Result<Batch, super::circuits::CircuitError> {
    let empty = Running::default();
    let devs: Vec<(&InterfaceName, Direction)> = placement.devs().collect();
    let (match_dev, match_direction) = devs
        .first()
        .map_or(("", Direction::Download), |&(d, dir)| (d.as_str(), dir));
    let r = running.get(match_dev).unwrap_or(&empty);
    let all_nodes: Vec<(&Node, Option<&str>)> = nodes.map(network::flatten).unwrap_or_default();

    // Circuits, by the addresses their filters match; then nodes, bottom up, by the classes
    // found under them.
    let owned = r.owned(placement, match_direction);
    let by_address: BTreeMap<AddressKey, ClassId> =
        owned.iter().map(|o| (o.address, o.class)).collect();
    let mut claimed: BTreeSet<ClassId> = BTreeSet::new();
    let mut circuit_ids: Vec<Option<ClassId>> = Vec::with_capacity(circuits.len());
    for c in circuits {
        let votes = c
            .addresses
            .iter()
            .filter_map(|(a, _)| by_address.get(&key(a)).copied());
        let id = majority(votes, |id| !claimed.contains(&id));
        if let Some(id) = id {
            claimed.insert(id);
        }
        circuit_ids.push(id);
    }
    let managed_node = |name: &str| !placement.nodes.contains_key(name);
    let node_ok = |id: ClassId, claimed: &BTreeSet<ClassId>| {
        !claimed.contains(&id) && id != placement.parent && r.is_below(id, placement.parent)
    };
    let mut node_ids: BTreeMap<&str, ClassId> = BTreeMap::new();
    // First the nodes with circuits of their own, by those circuits' parents (the strongest
    // evidence: a child node may have moved, its circuits went with it); then the others,
    // bottom up, by their child nodes' parents.
    for &(node, _) in all_nodes.iter().rev() {
        if !managed_node(&node.name) {
            continue;
        }
        let votes: Vec<ClassId> = circuits
            .iter()
            .zip(&circuit_ids)
            .filter(|(c, _)| c.node == node.name)
            .filter_map(|(_, id)| r.parent_of((*id)?))
            .collect();
        if let Some(id) = majority(votes, |id| node_ok(id, &claimed)) {
            claimed.insert(id);
            node_ids.insert(&node.name, id);
        }
    }
    for &(node, _) in all_nodes.iter().rev() {
        if !managed_node(&node.name) || node_ids.contains_key(node.name.as_str()) {
            continue;
        }
        let votes: Vec<ClassId> = node
            .children
            .iter()
            .filter_map(|ch| node_ids.get(ch.name.as_str()))
            .filter_map(|&id| r.parent_of(id))
            .collect();
        if let Some(id) = majority(votes, |id| node_ok(id, &claimed)) {
            claimed.insert(id);
            node_ids.insert(&node.name, id);
        }
    }

    // New ones take minors no port uses.
    let major = placement.parent.major();
    let used: BTreeSet<u32> = running
        .values()
        .flat_map(|r| r.classes.iter().map(|c| c.id))
        .filter(|id| id.major() == major)
        .map(ClassId::minor)
        .chain(placement.nodes.values().map(|id| id.minor()))
        .collect();
    let missing = all_nodes
        .iter()
        .filter(|(n, _)| managed_node(&n.name) && !node_ids.contains_key(n.name.as_str()))
        .count()
        + circuit_ids.iter().filter(|id| id.is_none()).count();
    let mut fresh = super::circuits::allocate(missing, major, first_minor, &used)?.into_iter();
    for &(node, _) in &all_nodes {
        if managed_node(&node.name) && !node_ids.contains_key(node.name.as_str()) {
            node_ids.insert(&node.name, fresh.next().unwrap_or(placement.parent));
        }
    }
    let circuit_ids: Vec<ClassId> = circuit_ids
        .into_iter()
        .map(|id| id.unwrap_or_else(|| fresh.next().unwrap_or(placement.parent)))
        .collect();

    // The class a circuit or node hangs under: its node's (network.json's, or --node's).
    let class_of_node = |name: &str| -> Option<ClassId> {
        placement
            .nodes
            .get(name)
            .or_else(|| node_ids.get(name))
            .copied()
    };
    // Sized for a first import (a class, its label and a filter per circuit and port, and the
    // hash tables: two and 512 a family at most): a million circuits' commands grown by
    // doubling were copied into fresh pages again and again, the last time for the tables.
    let tables = 2 * (2 + 2 * 256);
    let mut out = Batch::with_capacity((circuits.len() * 3 + tables) * devs.len());
    out.circuit_ids.clone_from(&circuit_ids);
    for &(port, direction) in &devs {
        let r = running.get(port).unwrap_or(&empty);
        let pick = |d: (u64, u64), u: (u64, u64)| match direction {
            Direction::Download => d,
            Direction::Upload => u,
        };
        let mut want: BTreeMap<ClassId, Want<'_>> = BTreeMap::new();
        let mut order: Vec<ClassId> = Vec::new();
        for &(node, parent) in &all_nodes {
            let Some(id) = node_ids.get(node.name.as_str()).copied() else {
                continue;
            };
            let (rate, ceil) = pick(node.download, node.upload);
            want.insert(
                id,
                Want {
                    parent: parent.and_then(class_of_node).unwrap_or(placement.parent),
                    rate,
                    ceil,
                    leaf: None,
                    origin: Origin::Node(node.name.clone()),
                    of: Source::Node(node),
                },
            );
            order.push(id);
        }
        let mut want_filters: BTreeMap<AddressKey, (IpPrefix, ClassId, u64)> = BTreeMap::new();
        for (c, &id) in circuits.iter().zip(&circuit_ids) {
            let rates = &c.rates;
            let (rate, ceil) = pick(
                (rates.download_min, rates.download_max),
                (rates.upload_min, rates.upload_max),
            );
            want.insert(
                id,
                Want {
                    parent: class_of_node(&c.node).unwrap_or(placement.parent),
                    rate,
                    ceil,
                    leaf: c.leaf,
                    origin: Origin::Csv(c.line),
                    of: Source::Circuit(c),
                },
            );
            order.push(id);
            for &(address, line) in &c.addresses {
                want_filters.insert(key(&address), (address, id, line));
            }
        }
        port_batch(
            port,
            direction,
            r,
            placement,
            nodes.is_some(),
            &want,
            &order,
            &want_filters,
            comments,
            &mut out,
        );
    }
    Ok(out)
}

/// One port's part of the batch: what `r` must lose and gain to be `want`.
#[allow(clippy::too_many_arguments)]
fn port_batch(
    port: &InterfaceName,
    direction: Direction,
    r: &Running,
    placement: &Placement,
    own_subtree: bool,
    want: &BTreeMap<ClassId, Want<'_>>,
    order: &[ClassId],
    want_filters: &BTreeMap<AddressKey, (IpPrefix, ClassId, u64)>,
    comments: bool,
    out: &mut Batch,
) {
    let qdisc = ClassId::new(placement.parent.major(), 0);
    let owned = r.owned(placement, direction);
    let ids: Vec<ClassId> = r.classes.iter().map(|c| c.id).collect();
    // What the import owns here: its filters' classes; with network.json, everything under
    // --parent but the --node classes, the classes other filters name, and what holds them.
    // (A set: a walk of the owned filters per running filter made a 100 000-circuit sync
    // quadratic, 20 s.)
    let owned_at: std::collections::HashSet<(u32, FilterHandle)> =
        owned.iter().map(|o| (o.prio, o.handle)).collect();
    let theirs = r
        .filters
        .iter()
        .filter(|f| !owned_at.contains(&(f.prio, f.handle)))
        .filter_map(|f| f.class);
    let keep_out: BTreeSet<ClassId> = placement
        .nodes
        .values()
        .copied()
        .chain(theirs)
        .flat_map(|n| {
            let mut up = vec![n];
            let mut at = n;
            while let Some(p) = r.parent_of(at) {
                up.push(p);
                at = p;
            }
            up
        })
        .collect();
    let mut scope: BTreeSet<ClassId> = owned.iter().map(|o| o.class).collect();
    if own_subtree {
        scope.extend(
            ids.iter()
                .copied()
                .filter(|&id| r.is_below(id, placement.parent) && !keep_out.contains(&id)),
        );
    }
    // Gone: owned and not wanted, or wanted under another parent; and everything below.
    let mut gone: BTreeSet<ClassId> = scope
        .iter()
        .copied()
        .filter(|id| !want.contains_key(id))
        .collect();
    gone.extend(want.iter().filter_map(|(&id, w)| {
        let have = r.class(id)?;
        (have.parent != Some(w.parent)).then_some(id)
    }));
    loop {
        let more: Vec<ClassId> = ids
            .iter()
            .copied()
            .filter(|id| !gone.contains(id))
            .filter(|&id| r.parent_of(id).is_some_and(|p| gone.contains(&p)))
            .collect();
        if more.is_empty() {
            break;
        }
        gone.extend(more);
    }

    // Filters first: a class in use by one cannot go.
    let mut kept_filters: BTreeSet<AddressKey> = BTreeSet::new();
    for o in &owned {
        let wanted = want_filters.get(&o.address).map(|&(_, class, _)| class);
        if wanted == Some(o.class) && !gone.contains(&o.class) && !kept_filters.contains(&o.address)
        {
            kept_filters.insert(o.address);
            continue;
        }
        let delete = FilterDelete {
            dev: dev(port),
            parent: Some(qdisc),
            prio: Some(o.prio),
            handle: Some(o.handle),
        };
        out.push(Origin::Running, Command::FilterDelete(delete));
        out.changes.filters_deleted += 1;
    }
    // Children before parents: deepest first.
    let depth = |id: ClassId| {
        let mut d = 0;
        let mut at = id;
        while let Some(p) = r.parent_of(at) {
            d += 1;
            at = p;
        }
        d
    };
    let mut doomed: Vec<ClassId> = gone
        .iter()
        .copied()
        .filter(|&id| r.class(id).is_some())
        .collect();
    doomed.sort_by_key(|&id| (std::cmp::Reverse(depth(id)), id));
    for id in doomed {
        let delete = ClassDelete { dev: dev(port), id };
        out.push(Origin::Running, Command::ClassDelete(delete));
        out.changes.deleted += 1;
    }
    // Parents before children: nodes in file order (parents first), then circuits.
    for &id in order {
        let w = &want[&id];
        let kept = r.class(id).filter(|_| !gone.contains(&id));
        let class = || ClassSpec {
            parent: Some(w.parent),
            ceil: Some(Rate::from_bits_per_sec(w.ceil)),
            ..ClassSpec::new(dev(port), id, Rate::from_bits_per_sec(w.rate))
        };
        let leaf = |spec: LeafSpec| LeafQdiscSpec {
            dev: dev(port),
            parent: Some(id),
            handle: None,
            leaf: spec,
            stab: None,
        };
        match kept {
            None => {
                if comments {
                    out.comment(format!("{} ({})", w.of.comment(), w.origin));
                }
                out.push(w.origin.clone(), Command::ClassAdd(Box::new(class())));
                out.changes.added += 1;
                if let Some(spec) = w.leaf {
                    out.push(w.origin.clone(), Command::LeafAdd(Box::new(leaf(spec))));
                    out.changes.leaves += 1;
                }
            }
            Some(have) => {
                if (have.rate.bits_per_sec(), have.ceil.bits_per_sec()) != (w.rate, w.ceil) {
                    out.push(w.origin.clone(), Command::ClassChange(Box::new(class())));
                    out.changes.changed += 1;
                }
                match (w.leaf, r.leaf(id)) {
                    (None, None) => {}
                    (None, Some(_)) => {
                        let delete = Command::LeafDelete {
                            dev: dev(port),
                            parent: id,
                            handle: None,
                            kind: None,
                        };
                        out.push(w.origin.clone(), delete);
                        out.changes.leaves += 1;
                    }
                    (Some(spec), have_leaf) => {
                        if have_leaf.is_none_or(|l| Some(*l) != spec.resolve().ok()) {
                            out.push(w.origin.clone(), Command::LeafReplace(Box::new(leaf(spec))));
                            out.changes.leaves += 1;
                        }
                    }
                }
            }
        }
        let label = w.of.label();
        if kept.and_then(|h| h.label.as_ref()) != label.as_ref() {
            let spec = LabelSpec {
                dev: dev(port),
                id,
                label,
            };
            out.push(w.origin.clone(), Command::ClassLabel(Box::new(spec)));
            out.changes.labels += 1;
        }
    }
    let port = Port {
        dev: port,
        qdisc,
        direction,
        prio: placement.prio,
    };
    port.add_filters(r, want_filters, &kept_filters, out);
}

/// Free text for a comment: a line break inside a quoted CSV field must not end it.
fn flat(s: &str) -> String {
    s.chars()
        .map(|ch| if ch.is_control() { ' ' } else { ch })
        .collect()
}

#[cfg(test)]
mod tests {
    use htb_ipc::{
        ClassInfo, Command, FilterInfo, FilterKind, LeafQdiscInfo, LinkLayer, Match, Protocol,
    };

    use std::fmt::Write as _;

    use super::super::circuits::group;
    use super::super::hashing::ONE_TABLE_MAX;
    use super::super::shaped_devices::read;
    use super::*;
    use crate::tc::parse::{Action, parse_batch, parse_command, split_line};

    impl Batch {
        /// The printed batch; each command's line is read back by the parser as the command
        /// itself (what is sent is what a printed batch says).
        fn text(&self) -> String {
            let mut out = Vec::new();
            self.print(&mut out).unwrap();
            for c in &self.commands {
                let line = htb_tc::write::command_line(c).unwrap();
                match parse_command(&split_line(&line)) {
                    Ok(Action::Change(back)) => assert_eq!(&back, c, "{line}"),
                    other => panic!("{line}: {other:?}"),
                }
            }
            String::from_utf8(out).unwrap()
        }
    }

    const HEADER: &str = concat!(super::super::shaped_devices::libreqos_header!(), ",sqm\n");

    fn circuits(rows: &str) -> Vec<Circuit> {
        group(read(&format!("{HEADER}{rows}")).unwrap()).unwrap()
    }

    fn placement(nodes: &[(&str, &str)]) -> Placement {
        Placement {
            download_dev: Some("lan0".parse().unwrap()),
            upload_dev: Some("wan0".parse().unwrap()),
            parent: "1:1".parse().unwrap(),
            nodes: nodes
                .iter()
                .map(|(n, c)| ((*n).to_owned(), c.parse().unwrap()))
                .collect(),
            prio: 10,
        }
    }

    fn class(id: &str, parent: Option<&str>, rate: u64, ceil: u64) -> ClassInfo {
        ClassInfo {
            dev: "lan0".parse().unwrap(),
            id: id.parse().unwrap(),
            parent: parent.map(|p| p.parse().unwrap()),
            level: 0,
            leaf: true,
            prio: 0,
            quantum: 1514,
            rate: Rate::from_bits_per_sec(rate),
            ceil: Rate::from_bits_per_sec(ceil),
            burst: 1600,
            cburst: 1600,
            buffer_ns: 0,
            cbuffer_ns: 0,
            overhead: 0,
            mpu: 0,
            linklayer: LinkLayer::Ethernet,
            leaf_qdisc: None,
            label: None,
            stats: None,
        }
    }

    /// The operator's part of both trees: `1:1` (the import's parent) and `1:a` (a node
    /// mapped with --node), and a filter of theirs at another prio.
    fn base() -> BTreeMap<InterfaceName, Running> {
        ["lan0", "wan0"]
            .into_iter()
            .map(|dev| {
                let running = Running::new(
                    vec![
                        class("1:1", None, 1_000_000_000, 1_000_000_000),
                        class("1:a", Some("1:1"), 100_000_000, 100_000_000),
                    ],
                    vec![FilterInfo {
                        police: None,
                        redirect: None,
                        dev: dev.parse().unwrap(),
                        parent: ClassId::new(1, 0),
                        protocol: Protocol::Ip,
                        prio: 1,
                        kind: FilterKind::U32,
                        handle: FilterHandle(0x8000_0800),
                        class: Some(ClassId::new(1, 0xa)),
                        matcher: Match {
                            dst: Some("10.9.9.9/32".parse().unwrap()),
                            ..Match::default()
                        },
                        hashing: htb_ipc::U32Hashing::default(),
                    }],
                    Vec::new(),
                );
                (dev.parse().unwrap(), running)
            })
            .collect()
    }

    /// Applies `text` to `running` as htbd would, refusing what it would refuse (a class
    /// deleted while a filter names it or it has children, a class added twice or under a
    /// missing parent, a filter deleted that is not there).
    fn apply(running: &mut BTreeMap<InterfaceName, Running>, text: &str) {
        // Filter handles as the kernel numbers them: never reused.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0x900);
        for (line, action) in parse_batch(text).unwrap() {
            let Action::Change(command) = action else {
                panic!("line {line}: not a change");
            };
            let r = running.get_mut(command.dev()).unwrap();
            let at = |what: &str| format!("line {line} ({what}):\n{text}");
            match command {
                Command::ClassAdd(c) => {
                    assert!(r.class(c.id).is_none(), "{}", at("exists"));
                    let parent = c.parent.unwrap();
                    assert!(r.class(parent).is_some(), "{}", at("parent"));
                    r.classes.push(class(
                        &c.id.to_string(),
                        Some(&parent.to_string()),
                        c.rate.bits_per_sec(),
                        c.ceil.unwrap().bits_per_sec(),
                    ));
                }
                Command::ClassChange(c) => {
                    let id: ClassId = c.id;
                    let have = r.classes.iter_mut().find(|k| k.id == id);
                    let have = have.unwrap_or_else(|| panic!("{}", at("no class")));
                    assert_eq!(have.parent, c.parent, "{}", at("parent"));
                    (have.rate, have.ceil) = (c.rate, c.ceil.unwrap());
                }
                Command::ClassDelete(ClassDelete { id, .. }) => {
                    assert!(
                        !r.filters.iter().any(|f| f.class == Some(id)),
                        "{}",
                        at("in use")
                    );
                    assert!(
                        !r.classes.iter().any(|k| k.parent == Some(id)),
                        "{}",
                        at("has children")
                    );
                    let before = r.classes.len();
                    r.classes.retain(|k| k.id != id);
                    assert_eq!(r.classes.len() + 1, before, "{}", at("no class"));
                    r.leaves.retain(|l| l.parent != Some(id));
                }
                Command::FilterAdd(f) => {
                    let next_handle = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    r.filters.push(FilterInfo {
                        police: None,
                        redirect: None,
                        dev: f.dev,
                        parent: ClassId::new(1, 0),
                        protocol: f.protocol,
                        prio: f.prio.unwrap(),
                        kind: f.kind,
                        handle: FilterHandle(0x8000_0000 | next_handle),
                        class: f.class,
                        matcher: f.matcher,
                        hashing: f.hashing,
                    });
                }
                Command::FilterDelete(FilterDelete { prio, handle, .. }) => {
                    let before = r.filters.len();
                    r.filters
                        .retain(|f| !(Some(f.prio) == prio && Some(f.handle) == handle));
                    assert_eq!(r.filters.len() + 1, before, "{}", at("no filter"));
                }
                Command::LeafAdd(l) | Command::LeafReplace(l) => {
                    r.leaves.retain(|x| x.parent != l.parent);
                    r.leaves.push(LeafQdiscInfo {
                        stab: None,
                        dev: l.dev,
                        handle: Some(ClassId::new(0x8001, 0)),
                        parent: l.parent,
                        config: l.leaf.resolve().unwrap(),
                        stats: None,
                    });
                }
                Command::LeafDelete { parent, .. } => {
                    r.leaves.retain(|x| x.parent != Some(parent));
                }
                Command::ClassLabel(l) => {
                    let have = r.classes.iter_mut().find(|k| k.id == l.id);
                    have.unwrap_or_else(|| panic!("{}", at("no class"))).label = l.label;
                }
                other => panic!("{}: {other:?}", at("unexpected")),
            }
        }
    }

    const ROWS: &str = "\
1,\"Circle St\",1,D1,AP_A,,\"100.64.0.1, 100.64.0.14\",fd00:1::/56,1,0.5,155,20,,
2,Marconi,2,D2,Elsewhere,,100.64.0.2,,2,1,25,10,,fq_codel
3,Peg,3,D3,,,100.64.0.3,,2,1,25,10,,
";

    /// A name with both quotes is written with `'` for `"` (a batch line cannot hold both),
    /// and a second import finds it as written: nothing to do.
    #[test]
    fn a_name_with_both_quotes_is_set_once() {
        let rows = "1,\"say \"\"it's\"\"\",1,D1,,,100.64.0.1,,1,1,10,10,,\n";
        let p = placement(&[]);
        let mut running = base();
        let first = batch(&circuits(rows), None, &p, &running, 0x100).unwrap();
        assert!(
            first
                .text()
                .contains("class label dev lan0 classid 1:100 name \"say 'it's'\""),
            "{}",
            first.text()
        );
        apply(&mut running, &first.text());
        let again = batch(&circuits(rows), None, &p, &running, 0x100).unwrap();
        assert_eq!(again.text(), "");
    }

    /// A refused command is quoted by making the batch again (`import::run` keeps no copy of
    /// what it sent): the same files over the same trees make the same commands.
    #[test]
    fn the_same_files_over_the_same_trees_make_the_same_batch() {
        let p = placement(&[("AP_A", "1:a")]);
        let make = || batch(&circuits(ROWS), None, &p, &base(), 0x100).unwrap();
        let (a, b) = (make(), make());
        assert_eq!((a.commands, a.origin), (b.commands, b.origin));
    }

    /// What htbd is sent is the printed batch's commands, only without its comments; a label
    /// with both quotes in a text is made quotable in both.
    #[test]
    fn the_batch_sent_is_the_printed_one_without_comments() {
        let rows = format!("{ROWS}4,\"say \"\"it's\"\"\",4,D4,AP_A,,100.64.0.4,,1,1,10,10,,\n");
        let p = placement(&[("AP_A", "1:a")]);
        let printed = batch(&circuits(&rows), None, &p, &base(), 0x100).unwrap();
        let sent = batch_to_send(&circuits(&rows), None, &p, &base(), 0x100).unwrap();
        assert!(printed.text().contains("name \"say 'it's'\""));
        assert_eq!(printed.comments.len(), 8, "a circuit's class on each port");
        assert!(sent.comments.is_empty());
        assert_eq!(
            (&printed.commands, &printed.origin, printed.changes),
            (&sent.commands, &sent.origin, sent.changes)
        );
    }

    #[test]
    fn a_first_import_adds_everything_as_tc_text() {
        let c = circuits(ROWS);
        let b = batch(&c, None, &placement(&[("AP_A", "1:a")]), &base(), 0x100).unwrap();
        let text = b.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(b.commands.len(), b.origin.len());
        assert_eq!(
            &lines[..4],
            [
                "# circuit \"1\" Circle St (line 2)",
                "class add dev lan0 parent 1:a classid 1:100 htb rate 1mbit ceil 155mbit",
                "class label dev lan0 classid 1:100 name \"Circle St\" circuit \"1\" device \"1\" \
                 name \"D1\" address 100.64.0.1/32 address 100.64.0.14/32 address fd00:1::/56",
                "# circuit \"2\" Marconi (line 3)",
            ]
        );
        assert_eq!(b.changes.labels, 6, "each circuit's class on each port");
        assert!(
            b.text()
                .contains("qdisc add dev lan0 parent 1:101 fq_codel\n")
        );
        assert_eq!(b.text().matches("qdisc add").count(), 2, "one per port");
        // Hashed as the LARTC HOWTO hashes: a table per prio, linked by the last byte (IPv4)
        // or byte 5 (IPv6), each address in its bucket.
        for line in [
            "filter add dev lan0 parent 1: protocol ip pref 10 handle 0x1000000 u32 divisor 256",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 match u32 0 0 link 10: hashkey mask 0x000000ff at 16",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 ht 10:e: match ip dst 100.64.0.14/32 classid 1:100",
            "filter add dev lan0 parent 1: protocol ipv6 pref 11 u32 match u32 0 0 link 11: hashkey mask 0x00ff0000 at 28",
            "filter add dev lan0 parent 1: protocol ipv6 pref 11 u32 ht 11:0: match ip6 dst fd00:1::/56 classid 1:100",
            "filter add dev wan0 parent 1: protocol ip pref 10 u32 match u32 0 0 link 10: hashkey mask 0x000000ff at 12",
        ] {
            assert!(b.text().contains(line), "{line}\n{}", b.text());
        }
        assert!(
            b.text()
                .contains("class add dev wan0 parent 1:1 classid 1:101 htb rate 1mbit ceil 10mbit")
        );
        assert!(
            b.text()
                .contains("match ip src 100.64.0.2/32 classid 1:101")
        );
        assert_eq!(
            (b.changes.added, b.changes.filters_added, b.changes.deleted),
            (6, 10, 0)
        );
        // The filter of 100.64.0.14 comes from the file's line 2.
        let at = b
            .commands
            .iter()
            .position(|c| matches!(c, Command::FilterAdd(f) if f.matcher.dst.map(|p| p.to_string()).as_deref() == Some("100.64.0.14/32")))
            .unwrap();
        assert_eq!(b.origin[at], Origin::Csv(2));
    }

    /// A u32 filter of `running`'s trees: `handle` in its table, linking to `link` by `mask`.
    fn link_filter(dev: &str, handle: &str, mask: u32, link: u32) -> FilterInfo {
        let handle = FilterHandle::parse(Some(FilterKind::U32), handle).unwrap();
        FilterInfo {
            police: None,
            redirect: None,
            dev: dev.parse().unwrap(),
            parent: ClassId::new(1, 0),
            protocol: Protocol::Ip,
            prio: 10,
            kind: FilterKind::U32,
            handle,
            class: None,
            matcher: Match::default(),
            hashing: htb_ipc::U32Hashing {
                link: Some(link),
                hashkey: Some(htb_ipc::HashKey { mask, at: 16 }),
                ..htb_ipc::U32Hashing::default()
            },
        }
    }

    /// More IPv4 addresses than one table holds: a first-level table hashed on the third
    /// byte, linked from the root table, and a second-level table per third byte, linked from
    /// its bucket, hashed on the last byte.
    #[test]
    fn many_addresses_get_two_levels_of_tables() {
        let n = ONE_TABLE_MAX + 1;
        let mut rows = String::new();
        for i in 0..n {
            let _ = writeln!(
                rows,
                "c{i},S{i},d{i},D{i},,,10.{}.{}.{},,1,1,10,10,,",
                i >> 16,
                (i >> 8) & 0xff,
                i & 0xff
            );
        }
        let mut p = placement(&[]);
        p.upload_dev = None;
        let b = batch(&circuits(&rows), None, &p, &base(), 0x100).unwrap();
        let text = &b.text();
        for line in [
            "filter add dev lan0 parent 1: protocol ip pref 10 handle 0x1000000 u32 divisor 256\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 match u32 0 0 link 10: hashkey mask 0x0000ff00 at 16\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 handle 0x1100000 u32 divisor 256\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 ht 10:0: match u32 0x00000000 0x0000ff00 at 16 link 11: hashkey mask 0x000000ff at 16\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 ht 11:5: match ip dst 10.0.0.5/32 classid 1:105\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 ht 12:6: match ip dst 10.0.1.6/32 classid 1:206\n",
        ] {
            assert!(text.contains(line), "{line}");
        }
        assert_eq!(
            text.matches("u32 divisor 256").count(),
            1 + 256,
            "one first-level table and one per third byte"
        );
        if let Err((line, e)) = parse_batch(text) {
            panic!(
                "line {line}: {e}: {}",
                text.lines().nth(line - 1).unwrap_or_default()
            );
        }
    }

    /// A running two-level layout is found and extended: a new third byte gets its own table,
    /// a known one's table takes the address.
    #[test]
    fn a_running_two_level_layout_is_extended() {
        let mut running = base();
        let lan = running.get_mut("lan0").unwrap();
        lan.filters
            .push(link_filter("lan0", "800::801", 0xff00, 0x10));
        lan.filters
            .push(link_filter("lan0", "10:0:800", 0xff, 0x11));
        let mut p = placement(&[]);
        p.upload_dev = None;
        let rows = "a,A,a,A,,,10.0.0.5,,1,1,10,10,,\nb,B,b,B,,,10.0.1.6,,1,1,10,10,,\n";
        let text = batch(&circuits(rows), None, &p, &running, 0x100)
            .unwrap()
            .text();
        for line in [
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 ht 11:5: match ip dst 10.0.0.5/32 classid 1:100\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 handle 0x1200000 u32 divisor 256\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 ht 10:1: match u32 0x00000100 0x0000ff00 at 16 link 12: hashkey mask 0x000000ff at 16\n",
            "filter add dev lan0 parent 1: protocol ip pref 10 u32 ht 12:6: match ip dst 10.0.1.6/32 classid 1:101\n",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        assert_eq!(text.matches("divisor").count(), 1, "{text}");
    }

    #[test]
    fn a_changed_file_changes_only_what_changed() {
        let p = placement(&[("AP_A", "1:a")]);
        let mut running = base();
        let first = batch(&circuits(ROWS), None, &p, &running, 0x100).unwrap();
        apply(&mut running, &first.text());
        // The same file again: nothing to do.
        let again = batch(&circuits(ROWS), None, &p, &running, 0x100).unwrap();
        assert_eq!(again.text(), "", "{}", again.text());

        // Circuit 1's plan changes and it gives an address to circuit 2, which drops its sqm;
        // circuit 3 goes; circuit 4 is new.
        let changed = "\
1,\"Circle St\",1,D1,AP_A,,100.64.0.1,fd00:1::/56,1,0.5,200,20,,
4,New,4,D4,,,100.64.0.4,,1,1,5,5,,
2,Marconi,2,D2,Elsewhere,,\"100.64.0.2, 100.64.0.14\",,2,1,25,10,,
";
        let b = batch(&circuits(changed), None, &p, &running, 0x100).unwrap();
        let text = &b.text();
        // A circuit is known by its addresses: 1 keeps 1:100 (changed in place), 2 keeps
        // 1:101; 4 takes a minor no class uses yet (3's goes in the same batch).
        assert!(
            text.contains(
                "class change dev lan0 parent 1:a classid 1:100 htb rate 1mbit ceil 200mbit\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("class change dev wan0"),
            "upload is unchanged: {text}"
        );
        assert!(text.contains("qdisc del dev lan0 parent 1:101\n"), "{text}");
        assert!(
            text.contains("class del dev lan0 classid 1:102\n"),
            "{text}"
        );
        assert!(
            text.contains("classid 1:103 htb rate 1mbit ceil 5mbit"),
            "{text}"
        );
        assert!(
            text.contains("match ip dst 100.64.0.14/32 classid 1:101"),
            "{text}"
        );
        assert!(
            !text.contains("classid 1:101 htb"),
            "2 is not re-added: {text}"
        );
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("filter") && l.contains("100.64.0.1/")),
            "untouched filters stay: {text}"
        );
        // Circuit 1's label follows its addresses; 2's gains one; 4's is new; 3's goes with
        // its class.
        assert!(
            text.contains(
                "class label dev lan0 classid 1:100 name \"Circle St\" circuit \"1\" device \"1\" \
                 name \"D1\" address 100.64.0.1/32 address fd00:1::/56\n"
            ),
            "{text}"
        );
        assert_eq!(b.changes.labels, 6, "{text}");
        assert_eq!(
            (
                b.changes.added,
                b.changes.changed,
                b.changes.deleted,
                b.changes.filters_added,
                b.changes.filters_deleted
            ),
            // Per port: 4 added, 3 deleted, 4's filter and 14's new one added, 3's and 14's
            // old one deleted; 1 changed on lan0 only.
            (2, 1, 2, 4, 4)
        );
        assert_eq!(
            b.circuit_ids,
            ["1:100", "1:103", "1:101"].map(|s| s.parse().unwrap())
        );
        apply(&mut running, text);
        let again = batch(&circuits(changed), None, &p, &running, 0x100).unwrap();
        assert_eq!(again.text(), "", "{}", again.text());
        // The operator's filter at prio 1 and class 1:a were never touched.
        assert!(running["lan0"].filters.iter().any(|f| f.prio == 1));
    }

    #[test]
    fn network_json_nodes_are_classes_kept_by_what_hangs_under_them() {
        let network = r#"{
            "Site_1": {"downloadBandwidthMbps": 500, "uploadBandwidthMbps": 100,
                "children": {"AP_A": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 50},
                             "AP_B": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 50}}},
            "Site_2": {"downloadBandwidthMbps": 300, "uploadBandwidthMbps": 60}
        }"#;
        let nodes = network::read(network).unwrap();
        let rows = "\
1,A,1,D1,AP_A,,100.64.0.1,,1,1,50,10,,
2,B,2,D2,AP_B,,100.64.0.2,,1,1,50,10,,
3,C,3,D3,Site_2,,100.64.0.3,,1,1,50,10,,
";
        let p = placement(&[]);
        let mut running = base();
        let first = batch(&circuits(rows), Some(&nodes), &p, &running, 0x100).unwrap();
        let text = &first.text();
        // Nodes first, parents before children, capped rates; then circuits under them.
        assert!(
            text.contains(
                "class add dev lan0 parent 1:1 classid 1:100 htb rate 500mbit ceil 500mbit"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "class add dev lan0 parent 1:100 classid 1:101 htb rate 200mbit ceil 200mbit"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "class add dev wan0 parent 1:100 classid 1:101 htb rate 50mbit ceil 50mbit"
            ),
            "{text}"
        );
        assert!(
            text.contains("class add dev lan0 parent 1:101 classid 1:104"),
            "{text}"
        );
        apply(&mut running, text);
        assert_eq!(
            batch(&circuits(rows), Some(&nodes), &p, &running, 0x100)
                .unwrap()
                .text(),
            ""
        );
        // AP_B moves from Site_1 to Site_2 and gets more: it and its circuit are deleted and
        // added again under Site_2 (HTB cannot move a class); AP_A and its circuit stay.
        let moved = network.replace(
            r#"},
                             "AP_B": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 50}}},
            "Site_2": {"downloadBandwidthMbps": 300, "uploadBandwidthMbps": 60}"#,
            r#"}}},
            "Site_2": {"downloadBandwidthMbps": 300, "uploadBandwidthMbps": 60,
                "children": {"AP_B": {"downloadBandwidthMbps": 250, "uploadBandwidthMbps": 50}}}"#,
        );
        let nodes = network::read(&moved).unwrap();
        let b = batch(&circuits(rows), Some(&nodes), &p, &running, 0x100).unwrap();
        let text = &b.text();
        assert!(
            text.contains("class del dev lan0 classid 1:105\n"),
            "AP_B's circuit: {text}"
        );
        assert!(
            text.contains("class del dev lan0 classid 1:102\n"),
            "AP_B: {text}"
        );
        assert!(
            text.contains(
                "class add dev lan0 parent 1:103 classid 1:102 htb rate 250mbit ceil 250mbit"
            ),
            "{text}"
        );
        assert!(
            text.contains("class add dev lan0 parent 1:102 classid 1:105"),
            "{text}"
        );
        assert!(
            !text.contains("classid 1:104"),
            "AP_A's circuit is untouched: {text}"
        );
        apply(&mut running, text);
        assert_eq!(
            batch(&circuits(rows), Some(&nodes), &p, &running, 0x100)
                .unwrap()
                .text(),
            ""
        );
        // A node that goes (Site_2, with AP_B and circuit 3 moved to AP_A) is deleted after
        // what hung under it.
        let rows = rows
            .replace("AP_B,,100.64.0.2", "AP_A,,100.64.0.2")
            .replace("Site_2,,100.64.0.3", "AP_A,,100.64.0.3");
        let nodes = network::read(
            r#"{"Site_1": {"downloadBandwidthMbps": 500, "uploadBandwidthMbps": 100,
                "children": {"AP_A": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 50}}}}"#,
        )
        .unwrap();
        let b = batch(&circuits(&rows), Some(&nodes), &p, &running, 0x100).unwrap();
        apply(&mut running, &b.text());
        let ids: Vec<String> = running["lan0"]
            .classes
            .iter()
            .map(|c| c.id.to_string())
            .collect();
        assert_eq!(ids.len(), 2 + 2 + 3, "{ids:?}\n{}", b.text());
        assert!(!ids.iter().any(|i| i == "1:103" || i == "1:102"), "{ids:?}");
    }

    #[test]
    fn the_sqm_column_gives_each_circuit_its_leaf_and_a_bad_one_is_refused_by_line() {
        let header = HEADER;
        // Row 3's comment holds an unquoted comma (as LibreQoS's example does): its sqm is
        // still the last field.
        let rows = "1,A,1,D1,,,100.64.0.1,,1,1,10,5,,fq_codel\n\
                    2,B,2,D2,,,100.64.0.2,,1,1,10,5,,\n\
                    3,C,3,D3,,,100.64.0.3,,1,1,10,5,small, plan,sfq perturb 10\n";
        let c = group(read(&format!("{header}{rows}")).unwrap()).unwrap();
        assert_eq!(
            c.iter().map(|c| c.sqm.as_str()).collect::<Vec<_>>(),
            ["fq_codel", "", "sfq perturb 10"]
        );
        let placement = Placement {
            download_dev: Some("lan0".parse().unwrap()),
            upload_dev: None,
            parent: "1:1".parse().unwrap(),
            nodes: BTreeMap::new(),
            prio: 10,
        };
        let b = batch(&c, None, &placement, &BTreeMap::new(), 0x100).unwrap();
        let (text, origin) = (b.text(), &b.origin);
        assert!(
            text.contains("qdisc add dev lan0 parent 1:100 fq_codel\n"),
            "{text}"
        );
        assert!(
            text.contains("qdisc add dev lan0 parent 1:102 sfq perturb 10\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("qdisc add").count(),
            2,
            "no leaf line without sqm"
        );
        assert_eq!(origin.len(), b.commands.len());
        assert!(parse_batch(&text).is_ok());
        // LibreQoS's default, cake, as it writes it.
        let cake = group(
            read(&format!(
                "{header}1,A,1,D1,,,100.64.0.1,,1,1,10,5,,cake diffserv4 ack-filter\n"
            ))
            .unwrap(),
        )
        .unwrap();
        let text = batch(&cake, None, &placement, &BTreeMap::new(), 0x100)
            .unwrap()
            .text();
        assert!(
            text.contains("parent 1:100 cake diffserv4 ack-filter\n"),
            "{text}"
        );
        // Anything the parser refuses: refused at its line and column, with the parser's
        // reason; nothing reaches a batch.
        for (sqm, why) in [
            ("cake diffserv5", "What is \"diffserv5\""),
            ("fq_codel target x", "target"),
            ("fq_codel # x", "cannot be in a leaf"),
            ("htb", "not a leaf qdisc"),
        ] {
            let e = read(&format!("{header}1,A,1,D1,,,100.64.0.1,,1,1,10,5,,{sqm}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("line 2, column \"sqm\"") && e.contains(why),
                "{sqm}: {e}"
            );
        }
        // One circuit's devices must agree on it.
        let e = group(
            read(&format!(
                "{header}1,A,1,D1,,,100.64.0.1,,1,1,10,5,,fq_codel\n1,A,2,D2,,,100.64.0.9,,1,1,10,5,,sfq\n"
            ))
            .unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("sqm"), "{e}");
    }
}
