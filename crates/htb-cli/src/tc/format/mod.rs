//! tc's output: the text iproute2 6.1 prints and its JSON keys under `-j`, one printer per
//! object as iproute2 has them — `qdisc` (HTB's `htb_print_opt`; the leaf qdiscs' own are
//! their kinds', in module `qdiscs`), `mq`, `class`, `filter`.

mod class;
mod filter;
mod mq;
mod qdisc;
mod stab;

use std::fmt;

use htb_core::Rate;
use htb_core::units::fmt_rate;
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

struct RateText(u64, bool);

impl fmt::Display for RateText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rate(f, Rate::from_bits_per_sec(self.0), self.1)
    }
}

/// A rate in bit/s as tc prints it (`100Mbit`, `1500Kbit`).
#[must_use]
pub fn rate_text(bits: u64, iec: bool) -> String {
    RateText(bits, iec).to_string()
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

/// A time in µs as tc 6.1's `sprint_time` prints it: `%.3g` of seconds or milliseconds
/// (`5ms`, `100ms`, `1.5s`, `2.5ms`), plain microseconds below one millisecond (`500us`).
#[must_use]
pub fn time_text(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{}s", g3(us as f64 / 1e6))
    } else if us >= 1_000 {
        format!("{}ms", g3(us as f64 / 1e3))
    } else {
        format!("{us}us")
    }
}

/// C's `%.3g`: three significant digits, trailing zeros dropped, exponent form outside
/// [1e-4, 1e3).
fn g3(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let exp = x.abs().log10().floor() as i32;
    // Rounding to three digits may carry into the next power of ten (999.5 → 1e+03).
    let rounded: f64 = format!("{x:.2e}").parse().unwrap_or(x);
    let exp = if rounded.abs() >= 10f64.powi(exp + 1) {
        exp + 1
    } else {
        exp
    };
    if !(-4..3).contains(&exp) {
        let mantissa = rounded / 10f64.powi(exp);
        let m = trim(format!("{mantissa:.2}"));
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    let decimals = (2 - exp).max(0) as usize;
    trim(format!("{rounded:.decimals$}"))
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_like_tc_6_1() {
        assert_eq!(time_text(5000), "5ms");
        assert_eq!(time_text(4999), "5ms", "%.3g of 4.999");
        assert_eq!(time_text(99_999), "100ms");
        assert_eq!(time_text(2500), "2.5ms");
        assert_eq!(time_text(1_500_000), "1.5s");
        assert_eq!(time_text(500), "500us");
        assert_eq!(time_text(123_456), "123ms");
        assert_eq!(g3(1234.0), "1.23e+03");
        assert_eq!(g3(999.6), "1e+03");
        assert_eq!(g3(0.5), "0.5");
    }
}
