//! A qdisc's size table as `tc -d qdisc show` prints it (`print_size_table`, `tc_stab.c`): on
//! a line of its own after the qdisc's options, each field only when it is not zero.

use std::fmt::Write as _;

use htb_core::SizeSpec;
use serde_json::{Map, Value, json};

/// ` linklayer ethernet overhead 34 \n` (tc's trailing space included).
pub(super) fn text(out: &mut String, s: &SizeSpec) {
    out.push(' ');
    if let Some(l) = s.link_layer {
        let _ = write!(out, "linklayer {} ", l.name());
    }
    if s.overhead != 0 {
        let _ = write!(out, "overhead {} ", s.overhead);
    }
    for (key, v) in [("mpu", s.mpu), ("mtu", s.mtu), ("tsize", s.tsize)] {
        if v != 0 {
            let _ = write!(out, "{key} {v} ");
        }
    }
    out.push('\n');
}

/// `"stab": {"linklayer": "ethernet", "overhead": 34}`.
pub(super) fn json(o: &mut Map<String, Value>, s: &SizeSpec) {
    let mut t = Map::new();
    if let Some(l) = s.link_layer {
        t.insert("linklayer".into(), json!(l.name()));
    }
    if s.overhead != 0 {
        t.insert("overhead".into(), json!(s.overhead));
    }
    for (key, v) in [("mpu", s.mpu), ("mtu", s.mtu), ("tsize", s.tsize)] {
        if v != 0 {
            t.insert(key.into(), json!(v));
        }
    }
    o.insert("stab".into(), Value::Object(t));
}
