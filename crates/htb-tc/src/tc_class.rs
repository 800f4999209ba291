//! `class add|change|replace|del|show` (iproute2 `tc/tc_class.c`): HTB classes (and htbd's
//! `class label`, in [`crate::class_label`]).

use htb_ipc::{ClassDelete, ClassSpec, Command, InterfaceName, LabelSpec, Object, Parent, Show};

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
    // The verb picks what the words make; tc asks for the device, then the classid, then the
    // kind, in that order.
    let make: fn(Box<ClassSpec>) -> Command = match verb {
        Verb::Show => {
            return Ok(Action::Show(Show {
                object: Some(Object::Class),
                dev,
                class: id,
                parent: parent.map(|p| p.map_or(Parent::Root, Parent::Id)),
                ..Show::default()
            }));
        }
        Verb::Delete => {
            let (dev, id) = device_and_id(dev, id)?;
            return Ok(Action::Change(Command::ClassDelete(ClassDelete {
                dev,
                id,
            })));
        }
        Verb::Add => Command::ClassAdd,
        Verb::Change => Command::ClassChange,
        Verb::Replace => Command::ClassReplace,
    };
    let (_, id) = device_and_id(dev, id)?;
    let Some(mut spec) = spec else {
        return usage("Must specify the class kind: ... htb rate RATE");
    };
    spec.id = id;
    // The wire carries the parent typed, as parsed above.
    spec.parent = parent.flatten();
    Ok(Action::Change(make(Box::new(spec))))
}

/// The `dev` and `classid` a change needs, or tc's refusal naming the first missing.
fn device_and_id(
    dev: Option<InterfaceName>,
    id: Option<htb_core::ClassId>,
) -> Result<(InterfaceName, htb_core::ClassId)> {
    let Some(dev) = dev else {
        return usage("Must specify device (dev DEV).");
    };
    let Some(id) = id else {
        return usage("Must specify classid (classid MAJ:MIN).");
    };
    Ok((dev, id))
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
