//! `qdisc add|change|replace|del|show` (iproute2 `tc/tc_qdisc.c`): the root `htb` qdisc, or an
//! `mq` root with an `htb` under each of its classes (`parent 7fff:1 handle 1: htb …`), or a
//! classless qdisc at the root (`root cake bandwidth 20mbit …`), and the leaf qdiscs under HTB
//! classes (`parent 1:10 [handle 10:] cake|fq_codel|sfq|pfifo|bfifo …`).

use htb_core::{ClassId, LeafKind, LeafSpec};
use htb_ipc::{Command, InterfaceName, LeafQdiscSpec, MqSpec, Object, QdiscSpec, Show};

use crate::action::{Action, Verb, verb};
use crate::args::{Args, Result, class_id, device, interface, matches, qdisc_handle, usage};
use crate::words::{self, Words};
use crate::{q_htb, qdiscs, tc_stab};

/// Parses the words after `qdisc`.
pub(super) fn parse(words: &[String]) -> Result<Action> {
    let verb = verb(words.first(), "qdisc")?;
    let mut a = Args::new(words.get(1..).unwrap_or_default());
    let mut dev = None;
    let mut handle = None;
    let mut parent = None;
    let mut root = false;
    let mut invisible = false;
    let mut htb: Option<QdiscSpec> = None;
    let mut mq = false;
    let mut leaf: Option<LeafSpec> = None;
    let mut stab = None;
    let mut ingress = false;
    while let Some(w) = a.next() {
        match w {
            "dev" => dev = Some(interface(a.value()?)?),
            "handle" => handle = Some(qdisc_handle(a.value()?)?),
            "root" => root = true,
            "parent" => match a.value()? {
                "root" => root = true,
                p => parent = Some(class_id(p, "parent")?),
            },
            // q_ingress.c: no options.
            "ingress" => ingress = true,
            "clsact" => {
                return usage(
                    "clsact is not supported: htbd's ingress qdisc is tc's ingress (qdisc add dev DEV handle ffff: ingress), its filters redirecting to an IFB",
                );
            }
            w if matches(w, "help") => return Ok(Action::Help(q_htb::qdisc_usage())),
            "invisible" if verb == Verb::Show => invisible = true,
            w if verb == Verb::Show => {
                return usage(format!("What is \"{w}\"? Try \"htb-cli qdisc help\"."));
            }
            "htb" => {
                let mut spec = QdiscSpec::new(device(dev.as_ref())?);
                q_htb::qdisc_options(&mut a, &mut spec)?;
                htb = Some(spec);
            }
            "mq" => {
                // q_mq.c takes no options.
                if let Some(extra) = a.next() {
                    return usage(format!("What is \"{extra}\"? (mq takes no options)"));
                }
                mq = true;
            }
            w if matches(w, "stab") => {
                if stab.is_some() {
                    return usage("duplicate \"stab\": one size table per qdisc");
                }
                stab = Some(tc_stab::options(&mut a)?);
            }
            // A leaf kind takes the rest of the words (`get_qdisc_kind`, then its `parse_qopt`).
            other => match qdiscs::by_name(other) {
                Some(util) => leaf = Some((util.parse)(&mut a)?),
                None => {
                    return usage(format!(
                        "Unknown qdisc \"{other}\": htb-cli knows htb and mq (root), htb (under an mq class), and {} (under an htb class or at the root)",
                        qdiscs::refusal_list()
                    ));
                }
            },
        }
    }
    if verb == Verb::Show {
        return Ok(Action::Show(Show {
            object: Some(Object::Qdisc),
            dev,
            invisible,
            ..Show::default()
        }));
    }
    let Some(dev) = dev else {
        return usage("Must specify device (dev DEV).");
    };
    if root && parent.is_some() {
        return usage("\"root\" and \"parent\" are mutually exclusive");
    }
    // The ingress qdisc: handle ffff:, parent ffff:fff1 (TC_H_INGRESS), whichever is given.
    let ingress_parent = ClassId::new(0xffff, 0xfff1);
    if ingress || parent == Some(ingress_parent) {
        if root || handle.is_some_and(|h| h != ClassId::new(0xffff, 0)) {
            return usage(
                "the ingress qdisc's handle is ffff: (qdisc add dev DEV handle ffff: ingress)",
            );
        }
        if parent.is_some_and(|p| p != ingress_parent) {
            return usage(
                "the ingress qdisc hangs at ffff:fff1 (qdisc add dev DEV handle ffff: ingress)",
            );
        }
        return match verb {
            Verb::Add | Verb::Replace if ingress => Ok(Action::Change(Command::IngressAdd { dev })),
            Verb::Delete => Ok(Action::Change(Command::IngressDelete { dev })),
            _ => usage("the ingress qdisc has no options: add, replace or del it"),
        };
    }
    if verb == Verb::Delete {
        return match (root, parent) {
            (true, _) => Ok(Action::Change(Command::QdiscDelete { dev })),
            (false, Some(parent)) => Ok(Action::Change(Command::LeafDelete {
                dev,
                parent,
                handle,
                kind: leaf.map(|l| l.kind()),
            })),
            (false, None) => usage("Classid cannot be zero: say root, or parent CLASSID"),
        };
    }
    if mq {
        if stab.is_some() {
            return usage(
                "stab on mq counts nothing (mq queues no packet): give it to the htb under each of its classes",
            );
        }
        if parent.is_some() || !root {
            return usage("mq goes at the root: qdisc add dev DEV root handle 7fff: mq");
        }
        let spec = MqSpec { dev, handle };
        return match verb {
            Verb::Add => Ok(Action::Change(Command::MqAdd(spec))),
            Verb::Replace => Ok(Action::Change(Command::MqReplace(spec))),
            _ => usage("mq has no options to change: use add or replace"),
        };
    }
    if let Some(mut spec) = htb {
        // Under a class: an `mq` class (htbd checks it is one), as LibreQoS hangs one tree on
        // each of its TX queues.
        spec.parent = parent.filter(|_| !root);
        spec.handle = handle;
        spec.stab = stab;
        return Ok(Action::Change(match verb {
            Verb::Add => Command::QdiscAdd(Box::new(spec)),
            Verb::Change => Command::QdiscChange(Box::new(spec)),
            _ => Command::QdiscReplace(Box::new(spec)),
        }));
    }
    let Some(leaf) = leaf else {
        return usage(format!(
            "Unknown qdisc: say htb or mq (the root), or {} (root or parent CLASSID)",
            qdiscs::refusal_list()
        ));
    };
    if !root && parent.is_none() {
        return usage("Classid cannot be zero: say root, or parent CLASSID");
    }
    // At the root: a classless qdisc shapes (cake's bandwidth) or queues the whole interface.
    let parent = parent.filter(|_| !root);
    if let (Some(parent), Some(_)) = (parent, stab) {
        return usage(format!(
            "stab under class {parent}: htbd applies a size table where HTB charges, on the root htb qdisc (qdisc add dev D root handle 1: stab … htb); a class's own overhead, mpu and linklayer adjust it alone"
        ));
    }
    let spec = LeafQdiscSpec {
        dev,
        parent,
        handle,
        leaf,
        stab,
    };
    Ok(Action::Change(match verb {
        Verb::Add => Command::LeafAdd(Box::new(spec)),
        Verb::Change => Command::LeafChange(Box::new(spec)),
        _ => Command::LeafReplace(Box::new(spec)),
    }))
}

/// `qdisc VERB dev D root|parent P [handle H:] [stab …] htb …`, as [`parse`] reads it.
pub(crate) fn write_htb(verb: &str, q: &QdiscSpec, w: &mut Words) -> words::Result<()> {
    w.word("qdisc");
    w.word(verb);
    w.dev(&q.dev)?;
    place(w, q.parent, q.handle)?;
    if let Some(s) = &q.stab {
        tc_stab::write(s, w);
    }
    w.word("htb");
    q_htb::write_qdisc(q, w);
    Ok(())
}

/// `qdisc VERB dev D root [handle H:] mq`.
pub(crate) fn write_mq(verb: &str, m: &MqSpec, w: &mut Words) -> words::Result<()> {
    w.word("qdisc");
    w.word(verb);
    w.dev(&m.dev)?;
    place(w, None, m.handle)?;
    w.word("mq");
    Ok(())
}

/// `qdisc del dev D root`.
pub(crate) fn write_root_delete(dev: &InterfaceName, w: &mut Words) -> words::Result<()> {
    w.word("qdisc");
    w.word("del");
    w.dev(dev)?;
    w.word("root");
    Ok(())
}

/// `qdisc add|del dev D handle ffff: ingress`.
pub(crate) fn write_ingress(verb: &str, dev: &InterfaceName, w: &mut Words) -> words::Result<()> {
    w.word("qdisc");
    w.word(verb);
    w.dev(dev)?;
    w.pair("handle", "ffff:");
    w.word("ingress");
    Ok(())
}

/// `qdisc VERB dev D parent P|root [handle H:] [stab …] KIND OPTIONS`: the kind's options by
/// its entry in the leaf kinds' table.
pub(crate) fn write_leaf(verb: &str, l: &LeafQdiscSpec, w: &mut Words) -> words::Result<()> {
    w.word("qdisc");
    w.word(verb);
    w.dev(&l.dev)?;
    place(w, l.parent, l.handle)?;
    if let Some(s) = &l.stab {
        tc_stab::write(s, w);
    }
    w.word(l.leaf.kind().name());
    qdiscs::write(&l.leaf, w)
}

/// `qdisc del dev D parent P [handle H:] [KIND]`.
pub(crate) fn write_leaf_delete(
    dev: &InterfaceName,
    parent: ClassId,
    handle: Option<ClassId>,
    kind: Option<LeafKind>,
    w: &mut Words,
) -> words::Result<()> {
    w.word("qdisc");
    w.word("del");
    w.dev(dev)?;
    place(w, Some(parent), handle)?;
    if let Some(kind) = kind {
        // tc reads a kind's options after its name, even for `del`: a kind that has no
        // defaults (tbf's rate) cannot be named alone.
        if (qdiscs::by_name(kind.name()).map(|u| u.parse))
            .is_some_and(|parse| parse(&mut Args::new(&[])).is_err())
        {
            return Err(words::WriteError::LeafOptions {
                kind: kind.name(),
                what: "qdisc del names the kind alone, which this kind's options refuse",
            });
        }
        w.word(kind.name());
    }
    Ok(())
}

/// `root|parent P [handle H:]`.
fn place(w: &mut Words, parent: Option<ClassId>, handle: Option<ClassId>) -> words::Result<()> {
    match parent {
        Some(p) => w.pair("parent", p),
        None => w.word("root"),
    }
    if let Some(h) = handle {
        if h.minor() != 0 {
            return Err(words::WriteError::QdiscHandle(h));
        }
        w.pair("handle", h);
    }
    Ok(())
}
