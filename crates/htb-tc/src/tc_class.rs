//! `class add|change|replace|del|show` (iproute2 `tc/tc_class.c`): HTB classes (and htbd's
//! `class label`, in [`crate::class_label`]).

use htb_ipc::{ClassDelete, ClassSpec, Command, LabelSpec, Object, Parent, Show};

use crate::action::{Action, Verb, verb};
use crate::args::{Args, Result, class_id, device, interface, matches, usage};
use crate::link_speed::LinkSpeed;
use crate::q_htb;
use crate::words::{self, Words};

/// Parses the words after `class`.
pub(crate) fn parse(words: &[String], link_speed: LinkSpeed<'_>) -> Result<Action> {
    if words.first().is_some_and(|w| w == "label") {
        return crate::class_label::parse(&words[1..]);
    }
    let verb = verb(words.first(), "class")?;
    let mut a = Args::new(words.get(1..).unwrap_or_default());
    let mut dev = None;
    let mut id = None;
    // `None`: not given; `Some(None)`: `root`; `Some(Some(id))`: a class or qdisc handle.
    let mut parent: Option<Option<htb_core::ClassId>> = None;
    let mut spec = None;
    while let Some(w) = a.next() {
        match w {
            "dev" => dev = Some(interface(a.value()?)?),
            "classid" => id = Some(class_id(a.value()?, "classid")?),
            "handle" => return usage("Error: try \"classid\" instead of \"handle\""),
            "root" => parent = Some(None),
            "parent" => {
                let p = a.value()?;
                parent = Some(if p == "root" {
                    None
                } else {
                    Some(class_id(p, "parent")?)
                });
            }
            w if matches(w, "estimator") => {
                let _ = (a.value()?, a.value()?);
            }
            w if matches(w, "help") => return Ok(Action::Help(q_htb::CLASS_USAGE)),
            "htb" if verb != Verb::Show => {
                spec = Some(q_htb::class_options(
                    &mut a,
                    &device(dev.as_ref())?,
                    link_speed,
                )?);
            }
            other if verb == Verb::Show => {
                return usage(format!("What is \"{other}\"? Try \"htb-cli class help\"."));
            }
            other => {
                return usage(format!(
                    "Unknown class kind \"{other}\": htb-cli manages htb only"
                ));
            }
        }
    }
    if verb == Verb::Show {
        return Ok(Action::Show(Show {
            object: Some(Object::Class),
            dev,
            class: id,
            parent: parent.map(|p| p.map_or(Parent::Root, Parent::Id)),
            ..Show::default()
        }));
    }
    let Some(dev) = dev else {
        return usage("Must specify device (dev DEV).");
    };
    let Some(id) = id else {
        return usage("Must specify classid (classid MAJ:MIN).");
    };
    if verb == Verb::Delete {
        return Ok(Action::Change(Command::ClassDelete(ClassDelete {
            dev,
            id,
        })));
    }
    let Some(mut spec) = spec else {
        return usage("Must specify the class kind: ... htb rate RATE");
    };
    spec.id = id;
    // The wire carries the parent typed, as parsed above.
    spec.parent = parent.flatten();
    Ok(Action::Change(match verb {
        Verb::Add => Command::ClassAdd(spec),
        Verb::Change => Command::ClassChange(spec),
        Verb::Replace => Command::ClassReplace(spec),
        Verb::Delete | Verb::Show => unreachable!("handled above"),
    }))
}

/// `class VERB dev D parent P|root classid C htb …`, as [`parse`] reads it.
pub(crate) fn write_class(verb: &str, s: &ClassSpec, w: &mut Words) -> words::Result<()> {
    w.word("class");
    w.word(verb);
    w.dev(&s.dev)?;
    match s.parent {
        Some(p) => w.pair("parent", p),
        None => w.word("root"),
    }
    w.pair("classid", s.id);
    w.word("htb");
    q_htb::write_class(s, w);
    Ok(())
}

/// `class del dev D classid C`.
pub(crate) fn write_delete(d: &ClassDelete, w: &mut Words) -> words::Result<()> {
    w.word("class");
    w.word("del");
    w.dev(&d.dev)?;
    w.pair("classid", d.id);
    Ok(())
}

/// `class label …` (htbd's own verb; its words are `class_label`'s).
pub(crate) fn write_label(l: &LabelSpec, w: &mut Words) -> words::Result<()> {
    w.word("class");
    crate::class_label::write(l, w)
}
