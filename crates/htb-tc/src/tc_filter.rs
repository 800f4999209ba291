//! `filter add|change|replace|del|get|show` (iproute2 `tc/tc_filter.c`): u32 and flower filters
//! on the root qdisc.

use htb_ipc::{
    Command, FilterDelete, FilterHandle, FilterKind, FilterSpec, Object, Parent, Protocol, Show,
};

use crate::action::{Action, Verb, verb};
use crate::args::{Args, Result, class_id, device, illegal, interface, matches, u32_arg, usage};
use crate::usage::FILTER_USAGE;
use crate::words::{self, Words};
use crate::{f_flower, f_u32};

/// Parses the words after `filter`.
pub(super) fn parse(words: &[String]) -> Result<Action> {
    let get = words.first().is_some_and(|w| matches(w, "get"));
    let verb = if get {
        Verb::Show
    } else {
        verb(words.first(), "filter")?
    };
    let mut a = Args::new(words.get(1..).unwrap_or_default());
    let mut dev = None;
    // tc's generic part (`tc_filter.c`), read before the kind.
    let (mut parent, mut prio, mut protocol, mut kind) = (None, None, Protocol::default(), None);
    // add, change, replace: the kind's options, read into the spec once `dev` is known (the
    // kind reads every word after it, so `dev` comes before it or not at all).
    let mut spec: Option<FilterSpec> = None;
    // tc reads the handle with the kind's own parser (`get_u32_handle`, flower's `get_u32`):
    // kept as text until the kind is known.
    let mut handle = None;
    while let Some(w) = a.next() {
        match w {
            "dev" => dev = Some(interface(a.value()?)?),
            "root" => parent = None,
            "parent" => parent = Some(class_id(a.value()?, "parent")?),
            "handle" => handle = Some(a.value()?.to_owned()),
            "fw" => {
                return usage(
                    "fw classifies by the firewall mark (skb->mark) that iptables or nftables \
                     set; htbd takes frames at XDP, before netfilter and before a packet has an \
                     skb, so no mark is ever set on what it shapes. Match the traffic itself: \
                     u32 (match ip dport 22 0xffff, match ip tos 0x10 0xff) or flower",
                );
            }
            "matchall" | "basic" | "route" | "flow" | "bpf" | "cgroup" | "tcindex" | "rsvp" => {
                return usage(format!(
                    "the {w} classifier is not supported: htbd's filters are u32 and flower \
                     (u32 match u32 0 0 matches every packet)"
                ));
            }
            "u32" | "flower" => {
                let k = if w == "u32" {
                    FilterKind::U32
                } else {
                    FilterKind::Flower
                };
                kind = Some(k);
                if matches!(verb, Verb::Add | Verb::Change | Verb::Replace) {
                    let mut s = FilterSpec {
                        parent,
                        prio,
                        protocol,
                        kind: k,
                        ..FilterSpec::new(device(dev.as_ref())?)
                    };
                    if k == FilterKind::U32 {
                        f_u32::options(&mut a, &mut s, handle.take())?;
                    } else {
                        f_flower::options(&mut a, &mut s)?;
                    }
                    spec = Some(s);
                } else if let Some(extra) = a.next() {
                    return usage(format!(
                        "What is \"{extra}\"? (filter del, get and show take no match)"
                    ));
                }
            }
            w if matches(w, "preference") || matches(w, "priority") => {
                let v = a.value()?;
                prio = Some(u32_arg(v, "preference", 0)?);
            }
            w if matches(w, "protocol") => {
                let v = a.value()?;
                // The one parser of the concept, the wire's (htbd never parses it again).
                protocol = Protocol::parse(v).or_else(|_| illegal("protocol"))?;
            }
            w if matches(w, "chain") => {
                if a.value()? != "0" {
                    return usage("only chain 0 exists here");
                }
            }
            w if matches(w, "help") => return Ok(Action::Help(FILTER_USAGE)),
            other => {
                return usage(format!(
                    "Unknown filter \"{other}\", hence option \"{}\" is unparsable (htb-cli knows u32 and flower)",
                    a.rest().first().map_or("", String::as_str)
                ));
            }
        }
    }
    let handle = handle
        .map(|text| {
            FilterHandle::parse(kind, &text).or_else(|e| usage(format!("Illegal \"handle\": {e}")))
        })
        .transpose()?;
    if dev.is_none() && verb != Verb::Show {
        return usage("Must specify device (dev DEV).");
    }
    match verb {
        Verb::Show if get => {
            // tc filter get: one filter, named by its prio and handle.
            if dev.is_none() || prio.is_none() || handle.is_none() || kind.is_none() {
                return usage(
                    "filter get needs dev, pref and handle and the filter's kind (dev D pref N handle H u32)",
                );
            }
            Ok(Action::Show(Show {
                object: Some(Object::Filter),
                dev,
                prio,
                handle,
                ..Show::default()
            }))
        }
        Verb::Show => Ok(Action::Show(Show {
            object: Some(Object::Filter),
            dev,
            parent: parent.map(Parent::Id),
            ..Show::default()
        })),
        Verb::Delete => {
            if handle.is_some() && prio.is_none() {
                return usage("Error: a filter handle needs its prio (pref N handle H)");
            }
            Ok(Action::Change(Command::FilterDelete(FilterDelete {
                dev: device(dev.as_ref())?,
                parent,
                prio,
                handle,
            })))
        }
        _ => {
            let Some(mut spec) = spec else {
                return usage("Must specify the filter type: u32 or flower");
            };
            if handle.is_some() {
                spec.handle = handle;
            }
            // u32 alone (the prio's root table), a hash table (divisor) and a link need no
            // class.
            let classless = spec.kind == FilterKind::U32
                && (spec.hashing.divisor.is_some()
                    || spec.hashing.link.is_some()
                    || (spec.hashing.is_empty() && spec.matcher.is_empty()));
            if spec.class.is_none() && !classless && spec.redirect.is_none() {
                return usage("Must specify flowid/classid: where matching packets go");
            }
            if verb == Verb::Change && (spec.prio.is_none() || spec.handle.is_none()) {
                return usage("filter change needs the filter's pref and handle (pref N handle H)");
            }
            Ok(Action::Change(match verb {
                Verb::Change => Command::FilterChange(Box::new(spec)),
                Verb::Replace => Command::FilterReplace(Box::new(spec)),
                _ => Command::FilterAdd(Box::new(spec)),
            }))
        }
    }
}

/// `filter VERB dev D [parent Q] protocol P [pref N] [handle H] KIND … [classid C] [action …]`,
/// as [`parse`] reads it.
pub(crate) fn write_filter(verb: &str, f: &FilterSpec, w: &mut Words) -> words::Result<()> {
    w.word("filter");
    w.word(verb);
    w.dev(&f.dev)?;
    w.option("parent", f.parent);
    w.pair("protocol", f.protocol);
    w.option("pref", f.prio);
    // Each kind reads its handle its own way (`get_u32_handle`, flower's `get_u32`); `0x…` is
    // the one form both read to the same word.
    w.option("handle", f.handle.map(|h| format!("{:#x}", h.0)));
    w.word(f.kind.name());
    match f.kind {
        FilterKind::U32 => f_u32::write(f, w)?,
        FilterKind::Flower => f_flower::write(f, w)?,
    }
    w.option("classid", f.class);
    crate::m_action::write(f.police.as_deref(), f.redirect.as_deref(), w)
}

/// `filter del dev D [parent Q] [pref N [handle H]]`.
pub(crate) fn write_delete(d: &FilterDelete, w: &mut Words) -> words::Result<()> {
    w.word("filter");
    w.word("del");
    w.dev(&d.dev)?;
    w.option("parent", d.parent);
    w.option("pref", d.prio);
    w.option("handle", d.handle.map(|h| format!("{:#x}", h.0)));
    Ok(())
}
