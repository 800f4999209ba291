//! SIGHUP: the difference between the running trees and the config file's, as one batch of the
//! same commands `htb-cli -b` sends — so it is validated, journaled and applied all or nothing
//! by the same path. Only what differs is touched: an unchanged class keeps its counters,
//! tokens and queue; a changed one is `class change`d in place (as the kernel's
//! `htb_change_class`); a class that moved to another parent is deleted and added again, as tc
//! would have to.
//!
//! What tc's grammar cannot change live — the ports, the default leaf qdisc, `burst_time` — is
//! refused with a reason, and nothing changes.

use std::collections::{BTreeMap, BTreeSet};

use htb_config::{ClassDef, InterfaceName, LeafDef};
use htb_core::{ClassId, SchedulerConfig};
use htb_ipc::{
    ClassSpec, Command, ErrorCode, FilterHandle, FilterSpec, IpcError, LeafQdiscSpec, MqSpec,
    QdiscSpec,
};

use crate::model::{ClassEntry, FilterEntry, Model, PortModel, QdiscModel, Root, on_wire};
use crate::{InterfaceTree, InterfaceTrees};

fn refuse(message: String) -> IpcError {
    IpcError::new(ErrorCode::Invalid, message)
}

/// The commands that turn `model`'s trees into `target`'s.
///
/// # Errors
/// The ports differ, or a change tc's grammar cannot make live.
pub fn commands(model: &Model, target: &[InterfaceTrees]) -> Result<Vec<Command>, IpcError> {
    let now: Vec<&str> = model.ports.iter().map(|p| p.name.as_str()).collect();
    let file: Vec<&str> = target.iter().map(|t| t.name.as_str()).collect();
    if now != file {
        return Err(refuse(format!(
            "the config file's interfaces ({}) are not the running ones ({}): interfaces are set \
             up at start only, restart htbd",
            file.join(", "),
            now.join(", ")
        )));
    }
    let mut out = Vec::new();
    for (port, want) in model.ports.iter().zip(target) {
        if port.ifb != want.ifb {
            return Err(refuse(format!(
                "{}: an interface cannot become an IFB or stop being one live: restart htbd",
                port.name
            )));
        }
        port_commands(port, want, &mut out)?;
        ingress_commands(port, want, &mut out);
    }
    Ok(out)
}

/// Whether `model` holds exactly `target`'s trees (a leaf without a handle in the file matches
/// any handle: the model numbers them).
#[must_use]
pub fn matches(model: &Model, target: &[InterfaceTrees]) -> bool {
    model.ports.len() == target.len()
        && model.ports.iter().zip(target).all(|(port, want)| {
            let have = port.trees();
            root_leaf_matches(port, want)
                && ingress_matches(port, want)
                && mq_handle(port) == want.mq
                && have.len() == want.trees.len()
                && have
                    .iter()
                    .zip(&want.trees)
                    .all(|((minor, q), w)| *minor == w.tree.mq_minor && qdisc_matches(q, w))
        })
}

/// Whether `port`'s ingress qdisc (or its absence) is the one `want` gives, with the same
/// filters.
fn ingress_matches(port: &PortModel, want: &InterfaceTrees) -> bool {
    match (&port.ingress, want.ingress.as_deref()) {
        (None, None) => true,
        (Some(q), Some(want)) => q.filters.holds_exactly(want),
        _ => false,
    }
}

/// The ingress qdisc the file gives, when it differs from the running one: the old one goes
/// with its filters and the new one is added with its own (they are a handful of lines).
fn ingress_commands(port: &PortModel, want: &InterfaceTrees, out: &mut Vec<Command>) {
    if ingress_matches(port, want) {
        return;
    }
    let dev = port.name.clone();
    if port.ingress.is_some() {
        out.push(Command::IngressDelete { dev: dev.clone() });
    }
    if let Some(filters) = &want.ingress {
        out.push(Command::IngressAdd { dev: dev.clone() });
        out.extend(
            filters
                .iter()
                .map(|f| filter_add(&dev, crate::model::INGRESS_MAJOR, f)),
        );
    }
}

/// Whether `port`'s classless root (or its lack of one) is `want`'s.
fn root_leaf_matches(port: &PortModel, want: &InterfaceTrees) -> bool {
    match (port.root_leaf(), &want.root_leaf) {
        (None, None) => true,
        (Some((major, have)), Some(w)) => {
            have.config == w.config
                && w.handle.unwrap_or(1) == major
                && root_stab(port) == wanted_root_stab(want)
        }
        _ => false,
    }
}

/// The size table of `port`'s classless root.
fn root_stab(port: &PortModel) -> Option<htb_core::SizeTable> {
    match &port.root {
        Root::Leaf(q) => q.config.stab,
        _ => None,
    }
}

/// The size table the file gives a classless root (on the tree that carries it).
fn wanted_root_stab(want: &InterfaceTrees) -> Option<htb_core::SizeTable> {
    want.trees.first().and_then(|t| t.tree.tree.config.stab)
}

/// The handle major of `port`'s `mq` root, if it has one.
fn mq_handle(port: &PortModel) -> Option<u16> {
    match &port.root {
        Root::Mq(mq) => Some(mq.handle),
        _ => None,
    }
}

fn qdisc_matches(q: &QdiscModel, want: &InterfaceTree) -> bool {
    let (tree, filters) = (&want.tree.tree, &want.filters);
    let c = (&q.config, &tree.config);
    c.0.major == c.1.major
        && c.0.default_minor == c.1.default_minor
        && c.0.r2q == c.1.r2q
        && c.0.direct_qlen == c.1.direct_qlen
        && c.0.stab == c.1.stab
        && fixed(c.0) == fixed(c.1)
        && q.classes.len() == tree.classes.len()
        && tree.classes.iter().all(|want| {
            q.classes.get(want.id).is_some_and(|have| {
                have.parent() == want.parent
                    && have.spec() == want.spec
                    && leaf_matches(have.leaf().as_ref(), want.leaf.as_ref())
            })
        })
        && q.filters.holds_exactly(filters)
        && q.classes.labels_are(want.labels.iter())
        && q.splits == want.tree.split
}

fn leaf_matches(have: Option<&LeafDef>, want: Option<&LeafDef>) -> bool {
    match (have, want) {
        (None, None) => true,
        (Some(h), Some(w)) => h.config == w.config && w.handle.is_none_or(|x| h.handle == Some(x)),
        _ => false,
    }
}

/// The qdisc parameters tc's `qdisc change` cannot set.
fn fixed(c: &SchedulerConfig) -> impl PartialEq + use<> {
    (c.default_leaf, c.default_burst_time, c.max_events_per_level)
}

fn check_fixed(
    dev: &InterfaceName,
    have: &SchedulerConfig,
    want: &SchedulerConfig,
) -> Result<(), IpcError> {
    if fixed(have) == fixed(want) {
        return Ok(());
    }
    Err(refuse(format!(
        "{dev}: the qdisc's default leaf or burst_time changed, which cannot be changed live: \
         restart htbd (the changed file's trees are then used)"
    )))
}

fn qdisc_spec(dev: &InterfaceName, parent: Option<ClassId>, c: &SchedulerConfig) -> QdiscSpec {
    QdiscSpec {
        dev: dev.to_owned(),
        parent,
        handle: Some(ClassId::new(c.major, 0)),
        default_minor: Some(c.default_minor),
        r2q: Some(c.r2q),
        direct_qlen: Some(c.direct_qlen),
        stab: c.stab.map(|t| t.spec()),
    }
}

fn port_commands(
    port: &PortModel,
    want: &InterfaceTrees,
    out: &mut Vec<Command>,
) -> Result<(), IpcError> {
    let dev = &port.name;
    if let Some(def) = &want.root_leaf {
        if !root_leaf_matches(port, want) {
            // A classless root: changed in place when its handle and kind stay (`qdisc
            // replace` with every option given), else put in place of whatever was there.
            out.push(Command::LeafReplace(Box::new(LeafQdiscSpec {
                dev: dev.to_owned(),
                parent: None,
                handle: Some(ClassId::new(def.handle.unwrap_or(1), 0)),
                leaf: def.config.to_spec(),
                stab: wanted_root_stab(want).map(|t| t.spec()),
            })));
        }
        return Ok(());
    }
    if port.root_leaf().is_some() {
        // From a classless root to a tree (or nothing): the root goes first.
        out.push(Command::QdiscDelete {
            dev: dev.to_owned(),
        });
        if let Some(t) = want.trees.first().filter(|_| want.mq.is_none()) {
            check_fixed(dev, &SchedulerConfig::default(), &t.tree.tree.config)?;
            out.push(Command::QdiscAdd(Box::new(qdisc_spec(
                dev,
                None,
                &t.tree.tree.config,
            ))));
            add_everything(dev, t, out);
            return Ok(());
        }
    }
    let have_mq = mq_handle(port);
    if want.mq.is_some() && want.mq != have_mq {
        // Another root: `qdisc replace … mq` starts it empty, then every tree comes.
        out.push(Command::MqReplace(MqSpec {
            dev: dev.to_owned(),
            handle: want.mq.map(|m| ClassId::new(m, 0)),
        }));
        for t in &want.trees {
            tree_commands(dev, want.mq, None, t, out)?;
        }
        return Ok(());
    }
    if let Some(mq) = want.mq {
        // The same mq: tree by tree, by class.
        let have: BTreeMap<u16, &QdiscModel> = port
            .trees()
            .into_iter()
            .filter_map(|(m, q)| Some((m?, q)))
            .collect();
        for (&minor, q) in &have {
            if !want.trees.iter().any(|t| t.tree.mq_minor == Some(minor)) {
                out.push(Command::LeafDelete {
                    dev: dev.to_owned(),
                    parent: ClassId::new(mq, u32::from(minor)),
                    handle: Some(ClassId::new(q.config.major, 0)),
                    kind: None,
                });
            }
        }
        for t in &want.trees {
            let minor = t.tree.mq_minor.unwrap_or(1);
            tree_commands(dev, want.mq, have.get(&minor).copied(), t, out)?;
        }
        return Ok(());
    }
    match (port.htb(), want.trees.first()) {
        (None, None) if have_mq.is_none() => {}
        (_, None) => out.push(Command::QdiscDelete {
            dev: dev.to_owned(),
        }),
        (None, Some(t)) if have_mq.is_some() => {
            // mq → an htb root: `qdisc replace` builds it empty in mq's place.
            let tree = &t.tree.tree;
            check_fixed(dev, &SchedulerConfig::default(), &tree.config)?;
            out.push(Command::QdiscReplace(Box::new(qdisc_spec(
                dev,
                None,
                &tree.config,
            ))));
            add_everything(dev, t, out);
        }
        (have, Some(t)) => tree_commands(dev, None, have, t, out)?,
    }
    Ok(())
}

/// The commands that turn `have` (`None`: no tree there) into `want`, at the root or under its
/// class of mq `mq`.
fn tree_commands(
    dev: &InterfaceName,
    mq: Option<u16>,
    have: Option<&QdiscModel>,
    want: &InterfaceTree,
    out: &mut Vec<Command>,
) -> Result<(), IpcError> {
    let tree = &want.tree.tree;
    let parent = mq
        .zip(want.tree.mq_minor)
        .map(|(mq, minor)| ClassId::new(mq, u32::from(minor)));
    match have {
        None => {
            check_fixed(dev, &SchedulerConfig::default(), &tree.config)?;
            out.push(Command::QdiscAdd(Box::new(qdisc_spec(
                dev,
                parent,
                &tree.config,
            ))));
            add_everything(dev, want, out);
        }
        Some(q) if q.config.major != tree.config.major => {
            // Another handle is another qdisc: `qdisc replace` builds it empty.
            check_fixed(dev, &q.config, &tree.config)?;
            out.push(Command::QdiscReplace(Box::new(qdisc_spec(
                dev,
                parent,
                &tree.config,
            ))));
            add_everything(dev, want, out);
        }
        Some(q) => {
            check_fixed(dev, &q.config, &tree.config)?;
            differences(dev, parent, q, want, out);
        }
    }
    Ok(())
}

fn add_everything(dev: &InterfaceName, want: &InterfaceTree, out: &mut Vec<Command>) {
    let (tree, filters) = (&want.tree.tree, &want.filters);
    for def in &tree.classes {
        out.push(Command::ClassAdd(Box::new(class_spec(
            dev,
            tree.config.major,
            def,
        ))));
        if let Some(leaf) = &def.leaf {
            out.push(Command::LeafAdd(Box::new(leaf_spec(
                dev,
                def.id,
                leaf,
                leaf.handle,
            ))));
        }
    }
    out.extend(
        filters
            .iter()
            .map(|f| filter_add(dev, tree.config.major, f)),
    );
    out.extend(
        want.labels
            .iter()
            .map(|(&id, label)| label_set(dev, id, Some(label.clone()))),
    );
    out.extend(
        want.tree
            .split
            .iter()
            .map(|(&id, &choice)| split_set(dev, id, Some(choice))),
    );
}

fn split_set(dev: &InterfaceName, id: ClassId, choice: Option<htb_core::SplitChoice>) -> Command {
    Command::ClassSplit(htb_ipc::SplitSpec {
        dev: dev.to_owned(),
        id,
        choice,
    })
}

fn label_set(dev: &InterfaceName, id: ClassId, label: Option<htb_config::ClassLabel>) -> Command {
    Command::ClassLabel(Box::new(htb_ipc::LabelSpec {
        dev: dev.to_owned(),
        id,
        label,
    }))
}

fn differences(
    dev: &InterfaceName,
    parent: Option<ClassId>,
    q: &QdiscModel,
    want_tree: &InterfaceTree,
    out: &mut Vec<Command>,
) {
    let (tree, filters) = (&want_tree.tree.tree, &want_tree.filters);
    let major = tree.config.major;
    let c = (&q.config, &tree.config);
    if (c.0.default_minor, c.0.r2q, c.0.direct_qlen, c.0.stab)
        != (c.1.default_minor, c.1.r2q, c.1.direct_qlen, c.1.stab)
    {
        out.push(Command::QdiscChange(Box::new(qdisc_spec(dev, parent, c.1))));
    }
    let want: BTreeMap<ClassId, &ClassDef> = tree.classes.iter().map(|d| (d.id, d)).collect();
    // Classes that go: gone from the file, moved to another parent, or below one that goes.
    let mut gone: BTreeSet<ClassId> = q
        .classes
        .iter()
        .filter(|c| want.get(&c.id()).is_none_or(|w| w.parent != c.parent()))
        .map(ClassEntry::id)
        .collect();
    loop {
        let more: Vec<ClassId> = q
            .classes
            .iter()
            .filter(|c| !gone.contains(&c.id()) && c.parent().is_some_and(|p| gone.contains(&p)))
            .map(ClassEntry::id)
            .collect();
        if more.is_empty() {
            break;
        }
        gone.extend(more);
    }
    // Filters keep a class from being deleted: when they change or target a class that goes,
    // all go first and the file's come back at the end. (Both lists are in evaluation order.)
    let filters_change = !q.filters.holds_exactly(filters)
        || q.filters
            .iter()
            .any(|f| f.class.is_some_and(|c| gone.contains(&c)));
    if filters_change {
        out.push(Command::FilterDelete(htb_ipc::FilterDelete {
            dev: dev.to_owned(),
            parent: Some(ClassId::new(major, 0)),
            prio: None,
            handle: None,
        }));
    }
    // Children before parents: the model's tree order (parents first), reversed.
    for def in q
        .tree()
        .classes
        .iter()
        .rev()
        .filter(|d| gone.contains(&d.id))
    {
        out.push(Command::ClassDelete(htb_ipc::ClassDelete {
            dev: dev.to_owned(),
            id: def.id,
        }));
    }
    for def in &tree.classes {
        let kept = q.classes.get(def.id).filter(|_| !gone.contains(&def.id));
        let Some(have) = kept.map(ClassEntry::def) else {
            out.push(Command::ClassAdd(Box::new(class_spec(dev, major, def))));
            if let Some(leaf) = &def.leaf {
                out.push(Command::LeafAdd(Box::new(leaf_spec(
                    dev,
                    def.id,
                    leaf,
                    leaf.handle,
                ))));
            }
            continue;
        };
        if have.spec != def.spec {
            out.push(Command::ClassChange(Box::new(class_spec(dev, major, def))));
        }
        if leaf_matches(have.leaf.as_ref(), def.leaf.as_ref()) {
            continue;
        }
        match (&have.leaf, &def.leaf) {
            (Some(h), Some(w))
                if h.config.kind() == w.config.kind()
                    && w.handle.is_none_or(|x| h.handle == Some(x)) =>
            {
                // Same qdisc, new options: changed in place, its queue kept.
                out.push(Command::LeafChange(Box::new(leaf_spec(
                    dev, def.id, w, h.handle,
                ))));
            }
            (have_leaf, want_leaf) => {
                if have_leaf.is_some() {
                    out.push(Command::LeafDelete {
                        dev: dev.to_owned(),
                        parent: def.id,
                        handle: None,
                        kind: None,
                    });
                }
                if let Some(w) = want_leaf {
                    out.push(Command::LeafAdd(Box::new(leaf_spec(
                        dev, def.id, w, w.handle,
                    ))));
                }
            }
        }
    }
    if filters_change {
        out.extend(filters.iter().map(|f| filter_add(dev, major, f)));
    }
    // Labels and split choices: a class that went took its own along.
    for def in &tree.classes {
        let have = q
            .classes
            .label(def.id)
            .filter(|_| !gone.contains(&def.id))
            .and_then(|l| l.unpack());
        let wanted = want_tree.labels.get(&def.id);
        if have.as_ref() != wanted {
            out.push(label_set(dev, def.id, wanted.cloned()));
        }
        let have = q.splits.get(&def.id).filter(|_| !gone.contains(&def.id));
        let wanted = want_tree.tree.split.get(&def.id);
        if have != wanted {
            out.push(split_set(dev, def.id, wanted.copied()));
        }
    }
}

fn class_spec(dev: &InterfaceName, major: u16, def: &ClassDef) -> ClassSpec {
    let s = &def.spec;
    ClassSpec {
        dev: dev.to_owned(),
        id: def.id,
        parent: Some(def.parent.unwrap_or(ClassId::new(major, 0))),
        rate: s.rate,
        ceil: s.ceil,
        burst: s.burst,
        cburst: s.cburst,
        prio: Some(s.prio),
        quantum: s.quantum,
        mtu: s.mtu,
        overhead: Some(s.adjust.overhead),
        mpu: Some(s.adjust.mpu),
        linklayer: Some(s.adjust.link_layer),
    }
}

fn leaf_spec(
    dev: &InterfaceName,
    class: ClassId,
    leaf: &LeafDef,
    handle: Option<u16>,
) -> LeafQdiscSpec {
    LeafQdiscSpec {
        dev: dev.to_owned(),
        parent: Some(class),
        handle: handle.map(|h| ClassId::new(h, 0)),
        leaf: leaf.config.to_spec(),
        stab: None,
    }
}

fn filter_add(dev: &InterfaceName, major: u16, f: &FilterEntry) -> Command {
    Command::FilterAdd(Box::new(FilterSpec {
        dev: dev.to_owned(),
        parent: Some(ClassId::new(major, 0)),
        protocol: f.protocol,
        prio: Some(f.prio),
        kind: f.kind,
        handle: Some(FilterHandle(f.handle)),
        matcher: on_wire(&f.matcher()),
        class: f.class,
        hashing: f.hashing(),
        police: f.police().map(|p| Box::new(*p.config())),
        redirect: f.redirect().cloned(),
    }))
}

#[cfg(test)]
mod tests;
