//! `fq_codel` (iproute2 `tc/q_fq_codel.c`): its options (`fq_codel_parse_opt`) and printers
//! (`fq_codel_print_opt`, `fq_codel_print_xstats`), text and JSON.

use std::fmt::Write as _;

use htb_core::units::DisplaySize;
use htb_core::{Duration, FqCodelConfig, FqCodelSpec, FqCodelStats, LeafSpec};
use serde_json::{Map, Value, json};

use crate::args::{Args, Result, number, size_arg, time_arg, usage};
use crate::units::time_text;
use crate::words::Words;

/// Usage of `fq_codel`.
pub(super) const USAGE: &str = "\
Usage: ... fq_codel [ limit PACKETS ] [ flows NUMBER ]
                    [ memory_limit BYTES ]
                    [ target TIME ] [ interval TIME ]
                    [ quantum BYTES ] [ [no]ecn ]
                    [ ce_threshold TIME ]
                    [ drop_batch SIZE ]";

/// `fq_codel_parse_opt`. tc sends only the options given and non-zero (a zero `limit`,
/// `flows`, `quantum`, `target`, `interval` or `drop_batch` means "not given"), so `qdisc
/// change` touches nothing else.
///
/// # Errors
/// tc's usage errors.
pub(super) fn options(a: &mut Args<'_>) -> Result<LeafSpec> {
    let mut s = FqCodelSpec::default();
    let nonzero = |v: u32| (v != 0).then_some(v);
    let nonzero_time = |t: Duration| (t != Duration::ZERO).then_some(t);
    while let Some(w) = a.next() {
        match w {
            "limit" => s.limit = nonzero(number(a.value()?, "limit")?),
            "flows" => s.flows = nonzero(number(a.value()?, "flows")?),
            "quantum" => s.quantum = nonzero(number(a.value()?, "quantum")?),
            "drop_batch" => s.drop_batch = nonzero(number(a.value()?, "drop_batch")?),
            "target" => s.target = nonzero_time(time_arg(a.value()?, "target")?),
            "ce_threshold" => s.ce_threshold = Some(time_arg(a.value()?, "ce_threshold")?),
            "memory_limit" => s.memory_limit = Some(size_arg(a.value()?, "memory_limit")?),
            "interval" => s.interval = nonzero_time(time_arg(a.value()?, "interval")?),
            "ecn" => s.ecn = Some(true),
            "noecn" => s.ecn = Some(false),
            "ce_threshold_selector" => {
                return usage(
                    "ce_threshold_selector is not supported: ce_threshold marks every flow",
                );
            }
            "help" => return usage(USAGE),
            _ => return usage(format!("What is \"{w}\"?\n{USAGE}")),
        }
    }
    Ok(LeafSpec::FqCodel(s))
}

/// `fq_codel_print_opt`, as tc 6.1 prints it (a space after each option).
pub(super) fn options_text(c: &FqCodelConfig) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "limit {}p flows {} quantum {} target {} ",
        c.limit,
        c.flows,
        c.quantum,
        time_text(c.target.as_nanos() / 1000)
    );
    if let Some(ce) = c.ce_threshold {
        let _ = write!(out, "ce_threshold {} ", time_text(ce.as_nanos() / 1000));
    }
    let _ = write!(
        out,
        "interval {} memory_limit {} ",
        time_text(c.interval.as_nanos() / 1000),
        DisplaySize(u64::from(c.memory_limit))
    );
    if c.ecn {
        out.push_str("ecn ");
    }
    let _ = write!(out, "drop_batch {} ", c.drop_batch);
    out
}

/// The same under `-j` (times in µs and sizes in bytes, as tc's JSON has them).
pub(super) fn options_json(c: &FqCodelConfig) -> Value {
    let mut o = Map::new();
    o.insert("limit".into(), json!(c.limit));
    o.insert("flows".into(), json!(c.flows));
    o.insert("quantum".into(), json!(c.quantum));
    o.insert("target".into(), json!(c.target.as_nanos() / 1000));
    if let Some(ce) = c.ce_threshold {
        o.insert("ce_threshold".into(), json!(ce.as_nanos() / 1000));
    }
    o.insert("interval".into(), json!(c.interval.as_nanos() / 1000));
    o.insert("memory_limit".into(), json!(c.memory_limit));
    if c.ecn {
        o.insert("ecn".into(), json!(true));
    }
    o.insert("drop_batch".into(), json!(c.drop_batch));
    Value::Object(o)
}

/// `fq_codel_print_xstats`: the statistics lines under `-s`.
pub(super) fn xstats_text(s: &FqCodelStats) -> String {
    let mut out = format!(
        "  maxpacket {} drop_overlimit {} new_flow_count {} ecn_mark {}",
        s.maxpacket, s.drop_overlimit, s.new_flow_count, s.ecn_mark
    );
    if s.ce_mark != 0 {
        let _ = write!(out, " ce_mark {}", s.ce_mark);
    }
    if s.memory_usage != 0 {
        let _ = write!(out, " memory_used {}", s.memory_usage);
    }
    if s.drop_overmemory != 0 {
        let _ = write!(out, " drop_overmemory {}", s.drop_overmemory);
    }
    let _ = writeln!(
        out,
        "\n  new_flows_len {} old_flows_len {}",
        s.new_flows_len, s.old_flows_len
    );
    out
}

/// The same under `-j`: keys of the qdisc object, as tc prints them.
pub(super) fn xstats_json(s: &FqCodelStats, o: &mut Map<String, Value>) {
    for (key, value, always) in [
        ("maxpacket", s.maxpacket, true),
        ("drop_overlimit", s.drop_overlimit, true),
        ("new_flow_count", s.new_flow_count, true),
        ("ecn_mark", s.ecn_mark, true),
        ("ce_mark", s.ce_mark, false),
        ("memory_used", s.memory_usage, false),
        ("drop_overmemory", s.drop_overmemory, false),
        ("new_flows_len", s.new_flows_len, true),
        ("old_flows_len", s.old_flows_len, true),
    ] {
        if always || value != 0 {
            o.insert(key.into(), json!(value));
        }
    }
}

/// `fq_codel_parse_opt`'s words for the options given (times exact, in tc's units).
pub(super) fn write(s: &FqCodelSpec, w: &mut Words) {
    w.option("limit", s.limit);
    w.option("flows", s.flows);
    w.option("target", s.target);
    w.option("interval", s.interval);
    w.option("quantum", s.quantum);
    w.option("ce_threshold", s.ce_threshold);
    w.option("memory_limit", s.memory_limit);
    w.option("drop_batch", s.drop_batch);
    match s.ecn {
        Some(true) => w.word("ecn"),
        Some(false) => w.word("noecn"),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_print_as_tc_6_1() {
        assert_eq!(
            options_text(&FqCodelConfig::default()),
            "limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 "
        );
        let j = options_json(&FqCodelConfig::default());
        assert_eq!(j["target"], 5000);
        assert_eq!(j["memory_limit"], 33_554_432);
        assert_eq!(j["ecn"], true);
    }
}
