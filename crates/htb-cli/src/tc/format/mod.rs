//! tc's output: the text iproute2 6.1 prints and its JSON keys under `-j`, one printer per
//! object as iproute2 has them — `qdisc` (HTB's `htb_print_opt`; the leaf qdiscs' own are
//! their kinds', in module `qdiscs`), `mq`, `class`, `filter`.

mod class;
mod filter;
mod mq;
mod qdisc;
mod stab;

use std::fmt;

pub use htb_tc::units::{RateText, rate_text, time_text};
use serde_json::Value;

pub use self::class::classes;
pub use self::filter::filters;
pub use self::qdisc::qdiscs;

/// How to print (tc's global options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// `-s`.
    pub stats: bool,
    /// `-d`.
    pub details: bool,
    /// `-r`.
    pub raw: bool,
    /// `-iec`.
    pub iec: bool,
    /// `-j`.
    pub json: bool,
    /// `-p`.
    pub pretty: bool,
    /// Name the device on each line (no `dev` was given).
    pub show_dev: bool,
    /// Leave a filter's `parent` out: the show named it (`filter show dev D parent 1:`).
    pub hide_parent: bool,
}

fn json_text(items: Vec<Value>, style: Style) -> String {
    json(&Value::Array(items), style.pretty).unwrap_or_default()
}

/// `value` as `-j` prints it (`-p`: pretty), with a newline.
///
/// # Errors
/// `value` cannot be serialized.
pub fn json(value: &impl serde::Serialize, pretty: bool) -> serde_json::Result<String> {
    let mut text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }?;
    text.push('\n');
    Ok(text)
}

/// The two statistics lines qdiscs and classes share (`print_tcstats2_attr`); nothing here
/// requeues, so both requeue counts are 0.
fn sent_lines(out: &mut String, [bytes, packets, drops, overlimits]: [u64; 4], backlog: [u64; 2]) {
    use fmt::Write as _;
    let _ = writeln!(
        out,
        " Sent {bytes} bytes {packets} pkt (dropped {drops}, overlimits {overlimits} requeues 0) \n \
         backlog {}b {}p requeues 0",
        backlog[0], backlog[1]
    );
}

/// The counters tc's JSON gives a qdisc (`print_tcstats2_attr`): bytes, packets, drops,
/// overlimits, requeues, backlog (bytes) and qlen (packets), in that order.
fn counters_json(o: &mut serde_json::Map<String, Value>, values: [u64; 7]) {
    let keys = [
        "bytes",
        "packets",
        "drops",
        "overlimits",
        "requeues",
        "backlog",
        "qlen",
    ];
    for (k, v) in keys.into_iter().zip(values) {
        o.insert(k.into(), Value::from(v));
    }
}

/// A qdisc's counters ([`QueueStats`](htb_ipc::QueueStats)) in tc's JSON.
fn queue_json(o: &mut serde_json::Map<String, Value>, s: &htb_ipc::QueueStats) {
    counters_json(
        o,
        [
            s.bytes,
            s.packets,
            s.drops,
            s.overlimits,
            s.requeues,
            s.backlog_bytes,
            s.backlog_packets,
        ],
    );
}
